"""How cbsim starts its worker processes: forked from a server that imported cbsim once.

A sweep's local backend and a plan's ``--workers`` run simulations on worker processes. A worker
started with ``spawn`` is a fresh interpreter that imports cbsim itself before its first job:
pandas, numba, pyarrow and the scenario models, about 1.5 s of CPU, paid again by every worker
of every sweep. On Linux the workers are started from :mod:`multiprocessing`'s fork server
instead: a process started once per parent process (from the parent's ``sys.path``: the server
would otherwise import from the default one), which imports the simulation's modules
(:data:`PRELOADED`) once and forks each worker from itself, so that a worker starts with them
loaded. Elsewhere (macOS, whose system libraries are not safe across a fork; Windows) workers
are spawned as before.

A forked worker differs from a spawned one in what was settled when the server started: the
modules it imported (and whatever they read from the environment then, such as numba's and
OpenBLAS's settings, and numpy's global random state, which cbsim never draws from) and, for the
rest of the parent's life, the server itself (one idle process, about 200 MB, shared by every
pool the parent starts; it ends with the parent). What a job reads when it runs is the
parent's: its environment variables as the pool starts, its Ctrl-C handling, and its copy of
cbsim (a worker of a server that another copy started imports its own, as a spawned one would:
:func:`start_worker`). Every worker ends when the process that started the pool dies
(:func:`cbsim.common.parent_watch.exit_with_parent`).

The fork server is one per process and :mod:`multiprocessing`'s: cbsim adds its modules to the
server's preload list and starts it if it does not run yet; a server already started (by the
caller's own pools) is used as it is.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

from cbsim.common.parent_watch import exit_with_parent

__all__ = [
    "PRELOADED",
    "WorkerStart",
    "parent_start",
    "sigint_ignored",
    "start_worker",
    "worker_context",
]

PRELOADED = (
    "cbsim.run.simulate",
    "cbsim.studies.sweep.execution",
    "cbsim.studies.capacity.workers",
)
"""The modules the fork server imports before it forks a worker: what a sweep's points and a
plan's searches run."""


@dataclass(frozen=True)
class WorkerStart:
    """What a worker takes from the process that started its pool (:func:`start_worker`)."""

    parent_pid: int
    environment: dict[str, str]
    interrupts: bool
    """Whether Ctrl-C interrupts the parent (SIGINT not ignored), and so the worker."""
    package_file: str | None
    """Where the parent's cbsim lives (its ``__init__.py``)."""


def worker_context() -> BaseContext:
    """The :mod:`multiprocessing` context worker pools start their processes with: the fork
    server, started here if it does not run yet, on Linux; ``spawn`` elsewhere."""
    if not sys.platform.startswith("linux"):
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    _ensure_server(context)
    return context


def parent_start() -> WorkerStart:
    """This process's side of :func:`start_worker`: ``initargs=(parent_start(),)``."""
    package = sys.modules.get("cbsim")
    return WorkerStart(
        parent_pid=os.getpid(),
        environment=dict(os.environ),
        interrupts=signal.getsignal(signal.SIGINT) is not signal.SIG_IGN,
        package_file=getattr(package, "__file__", None),
    )


def start_worker(start: WorkerStart) -> None:
    """A worker's first step (a pool's ``initializer``): the parent's environment variables as the
    pool started, its Ctrl-C handling and its copy of cbsim, and an end as soon as the parent
    dies."""
    if os.environ != start.environment:
        os.environ.clear()
        os.environ.update(start.environment)
    handler = signal.default_int_handler if start.interrupts else signal.SIG_IGN
    signal.signal(signal.SIGINT, handler)
    loaded = sys.modules.get("cbsim")
    if loaded is not None and getattr(loaded, "__file__", None) != start.package_file:
        _forget_cbsim()  # the server's is another copy: the jobs import the parent's
    exit_with_parent(start.parent_pid)


def _forget_cbsim() -> None:
    for name in [n for n in sys.modules if n == "cbsim" or n.startswith("cbsim.")]:
        del sys.modules[name]


def _ensure_server(context: BaseContext) -> None:
    """Add :data:`PRELOADED` to the fork server's preload list and start it (no effect where it
    runs), importing from this process's ``sys.path`` (passed as ``PYTHONPATH`` for its start)
    and deaf to Ctrl-C while it imports (it ignores SIGINT itself afterwards)."""
    preload = getattr(forkserver._forkserver, "_preload_modules", [])
    context.set_forkserver_preload(list(dict.fromkeys([*preload, *PRELOADED])))
    path = os.pathsep.join(entry for entry in sys.path if entry)
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path
    try:
        with sigint_ignored():
            forkserver.ensure_running()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while the body runs, as while workers or their server start (a process
    started meanwhile inherits it, so a Ctrl-C then prints no traceback per process); then
    handled as before. Only the main thread may change it: elsewhere it stays as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
