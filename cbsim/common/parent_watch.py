"""Worker processes that end when the process that started them dies.

A sweep runs its points in worker processes. When the sweep's own process is killed outright
(SIGKILL, as the out-of-memory killer does) it cannot tell its workers anything: they would go on
computing the points already queued for them and then wait for more forever. So every worker runs
a watchdog thread (:func:`exit_with_parent`, a process pool's initializer) that checks every
:data:`POLL_INTERVAL_S` whether the process that started it still runs, and ends the worker at once
(exit status :data:`EXIT_ORPHANED`) when it does not. On POSIX a dead parent's children are adopted
by another process, so the parent's id as the worker sees it changes; elsewhere the watchdog asks
:mod:`multiprocessing` whether the parent is alive. A worker forked by :mod:`multiprocessing`'s
fork server (:mod:`cbsim.common.worker_start`) has the server as its parent, which outlives the
pool's process while any worker runs: such a worker watches the pool's process through the pipe
:mod:`multiprocessing` keeps to the process that asked for it (``parent_process()``), which
tells a dead process (zombie or not) without ``/proc`` or process ids. A point being written
when the worker ends leaves only a hidden temporary, which the next sweep deletes (see
:mod:`cbsim.common.output_folders`).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

from cbsim.common.processes import process_is_running

__all__ = ["EXIT_ORPHANED", "POLL_INTERVAL_S", "exit_with_parent", "parent_is_gone"]

POLL_INTERVAL_S = 0.2
"""How often a worker checks on its parent: the longest an orphaned worker keeps computing."""

EXIT_ORPHANED = 70
"""Exit status of a worker ended because its parent died."""


def parent_is_gone(parent_pid: int) -> bool:
    """Whether the process ``parent_pid`` that started this one no longer runs."""
    if os.name == "posix":
        return os.getppid() != parent_pid
    parent = multiprocessing.parent_process()
    return parent is not None and not parent.is_alive()


def _starter_is_gone(parent_pid: int, forked_by_server: bool) -> bool:
    """Whether ``parent_pid``, which started this process directly or (``forked_by_server``)
    through a fork server, is gone."""
    if not forked_by_server:
        return parent_is_gone(parent_pid)
    starter = multiprocessing.parent_process()
    if starter is None or starter.pid != parent_pid:  # not multiprocessing's: by its id
        return not process_is_running(parent_pid)
    return not starter.is_alive()


def _watch(parent_pid: int, forked_by_server: bool, poll_interval_s: float) -> None:
    while not _starter_is_gone(parent_pid, forked_by_server):
        time.sleep(poll_interval_s)
    os._exit(EXIT_ORPHANED)


def exit_with_parent(parent_pid: int, poll_interval_s: float = POLL_INTERVAL_S) -> None:
    """End this process as soon as the process ``parent_pid`` that started it dies (watched from
    a daemon thread), whether it started this one itself or through a fork server.

    Meant as ``initializer`` of a process pool, with ``initargs=(os.getpid(),)`` in the parent.
    """
    forked_by_server = os.name == "posix" and os.getppid() != parent_pid
    if _starter_is_gone(parent_pid, forked_by_server):
        os._exit(EXIT_ORPHANED)
    watchdog = threading.Thread(
        target=_watch,
        args=(parent_pid, forked_by_server, poll_interval_s),
        name="cbsim-parent-watch",
        daemon=True,
    )
    watchdog.start()
