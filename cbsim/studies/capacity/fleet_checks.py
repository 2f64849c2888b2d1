"""Fleet checks run ahead: the fleets a capacity plan verifies, simulated on several cores at once.

A plan verifies its fleet by simulating the target load on the smallest fleet its single-replica
rate suggests, then on one replica more, and so on until one meets the SLO (see
:mod:`cbsim.studies.capacity.planning`). Each check is a whole simulation of every replica at the target
load, the costliest runs of a search, and the next one is needed only when this one fails. With
cores to spare (a plan of one layout with ``--workers`` above one), the checks of the next fleet
sizes start before the current one is known to fail: this process simulates the first size of
each round and ``fork``-ed copies of it (warm: imported, kernels loaded, cost models built)
simulate the next ones, each sending its evaluation back through a pipe.

The answer is the one-after-the-other search's, bit for bit: each check is the same simulation
wherever it runs, the evaluations come back in size order, the search stops at the first fleet
that passes, and the checks run beyond it are dropped (not counted, not reported); the runner's
state after each check (its simulation count, its diagnosis of a failing run, its worst KV wait)
is what running it here would have left. Only where ``fork`` is the platform's safe way to start
a process (Linux) does a check run ahead; elsewhere they run one after the other.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Generator, Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from cbsim.common.parent_watch import exit_with_parent

if TYPE_CHECKING:
    from cbsim.studies.capacity.search import Evaluation, _Runner

__all__ = ["can_run_ahead", "fleet_evaluations"]


def can_run_ahead() -> bool:
    """Whether fleet checks may run in forked copies of this process."""
    return sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()


def fleet_evaluations(
    runner: _Runner, rate: float, sizes: Sequence[int], workers: int
) -> Generator[tuple[int, Evaluation], None, None]:
    """``(replicas, evaluation)`` of the fleets of ``sizes`` at ``rate``, in order, computed up
    to ``workers`` at a time; the caller stops when one passes (closing the iterator ends any
    check still running)."""
    if workers <= 1 or len(sizes) <= 1 or not can_run_ahead():
        for replicas in sizes:
            yield replicas, runner.evaluate(rate, replicas)
        return
    for first in range(0, len(sizes), workers):
        round_sizes = sizes[first : first + workers]
        children = [_start(runner, rate, replicas) for replicas in round_sizes[1:]]
        try:
            yield round_sizes[0], runner.evaluate(rate, round_sizes[0])
            for replicas, child in zip(round_sizes[1:], children, strict=True):
                yield replicas, _collect(runner, child)
        finally:
            for process, conn in children:
                _end(process, conn)


def _start(runner: _Runner, rate: float, replicas: int) -> tuple[Any, Connection]:
    if runner.progress is not None:
        runner.progress(f"{runner.label}{rate:.4g} req/s, {replicas} replicas (ahead)")
    receive, send = multiprocessing.Pipe(duplex=False)
    context = multiprocessing.get_context("fork")
    process = context.Process(
        target=_check, args=(runner, rate, replicas, send, os.getpid()), daemon=True
    )
    process.start()
    send.close()
    return process, receive


def _check(runner: _Runner, rate: float, replicas: int, send: Connection, parent: int) -> None:
    """In the forked copy: simulate the fleet and send back what the runner learnt."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    exit_with_parent(parent)
    runner.progress = None
    # what the copy would write goes nowhere: the parent's streams may have been locked by one
    # of its threads (a progress display) at the fork, and the evaluation comes back by the pipe
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    try:
        evaluation = runner.evaluate(rate, replicas)
        send.send(("ok", (evaluation, runner.diagnosis, runner.kv_wait_p99_s)))
    except BaseException as err:
        send.send(("error", err))
    finally:
        send.close()


def _collect(runner: _Runner, child: tuple[Any, Connection]) -> Evaluation:
    process, conn = child
    try:
        kind, value = conn.recv()
    except EOFError:
        process.join()
        raise RuntimeError(
            f"a fleet check run ahead ended without an answer (exit status {process.exitcode})"
        ) from None
    if kind == "error":
        raise value
    evaluation: Evaluation = value[0]
    diagnosis, kv_wait = value[1], value[2]
    runner.simulations += evaluation.simulations
    runner.kv_wait_p99_s = kv_wait
    if not evaluation.passed:
        runner.diagnosis = diagnosis
    return evaluation


def _end(process: Any, conn: Connection) -> None:
    conn.close()
    if process.is_alive():
        process.kill()
    with contextlib.suppress(Exception):
        process.join()
