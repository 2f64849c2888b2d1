"""How cbsim starts its worker processes: forked from a server that imported cbsim once.

A sweep's local backend and a plan's ``--workers`` run simulations on worker processes. A worker
started with ``spawn`` is a fresh interpreter that imports cbsim itself before its first job:
pandas, numba, pyarrow and the scenario models, about 1.5 s of CPU per worker, paid again by
every worker of every sweep. Where the platform has one (Linux, macOS), the workers are started
from :mod:`multiprocessing`'s fork server instead: a clean, single-threaded process started once
per parent process, which imports the simulation's modules (:data:`PRELOADED`) once and forks
each worker from itself, so a worker starts with them loaded. Elsewhere (Windows) workers are
spawned as before. Either way a worker is a fresh process as far as a job can tell: its modules
are imported and nothing else has run in it.

The fork server keeps the environment variables it was started with; a worker takes the
parent's environment as it is when the pool starts (:func:`start_worker`), as a spawned worker
would. Every worker ends when the process that started the pool dies
(:func:`cbsim.common.parent_watch.exit_with_parent`).
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.context import BaseContext

from cbsim.common.parent_watch import exit_with_parent

__all__ = ["PRELOADED", "parent_environment", "start_worker", "worker_context"]

PRELOADED = (
    "cbsim.run.simulate",
    "cbsim.studies.sweep.execution",
    "cbsim.studies.capacity.workers",
)
"""The modules the fork server imports before it forks a worker: what a sweep's points and a
plan's searches run."""


def worker_context() -> BaseContext:
    """The :mod:`multiprocessing` context worker pools start their processes with: the fork
    server, preloading :data:`PRELOADED`, where the platform has one, else ``spawn``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOADED))  # no effect once the server runs
    return context


def parent_environment() -> dict[str, str]:
    """This process's environment variables, for :func:`start_worker` in its workers."""
    return dict(os.environ)


def start_worker(parent_pid: int, environment: dict[str, str]) -> None:
    """A worker's first step (a pool's ``initializer``): the parent's environment variables as the
    pool started, and an end as soon as the parent ``parent_pid`` dies."""
    if os.environ != environment:
        os.environ.clear()
        os.environ.update(environment)
    exit_with_parent(parent_pid)
