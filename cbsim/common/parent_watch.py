"""Worker processes that end when the process that started them dies.

A sweep runs its points in worker processes. When the sweep's own process is killed outright
(SIGKILL, as the out-of-memory killer does) it cannot tell its workers anything: they would go on
computing the points already queued for them and then wait for more forever. So every worker runs
a watchdog thread (:func:`exit_with_parent`, a process pool's initializer) that checks every
:data:`POLL_INTERVAL_S` whether the process that started it still runs, and ends the worker at once
(exit status :data:`EXIT_ORPHANED`) when it does not. On POSIX a dead parent's children are adopted
by another process, so the parent's id as the worker sees it changes; elsewhere the watchdog asks
:mod:`multiprocessing` whether the parent is alive. A worker forked by :mod:`multiprocessing`'s
fork server (:mod:`cbsim.common.worker_start`) has the server as its parent, which ends when the
process that started the pool dies: the watchdog then watches both, the server through the parent
id it sees and the pool's process through its id. A point being written when the worker ends
leaves only a hidden temporary, which the next sweep deletes (see :mod:`cbsim.common.output_folders`).
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


def _starter_is_gone(parent_pid: int, server_pid: int | None) -> bool:
    """Whether ``parent_pid``, which started this process directly or (``server_pid``) through
    a fork server, is gone."""
    if server_pid is None:
        return parent_is_gone(parent_pid)
    return parent_is_gone(server_pid) or not process_is_running(parent_pid)


def _watch(parent_pid: int, server_pid: int | None, poll_interval_s: float) -> None:
    while not _starter_is_gone(parent_pid, server_pid):
        time.sleep(poll_interval_s)
    os._exit(EXIT_ORPHANED)


def exit_with_parent(parent_pid: int, poll_interval_s: float = POLL_INTERVAL_S) -> None:
    """End this process as soon as the process ``parent_pid`` that started it dies (watched from
    a daemon thread), whether it started this one itself or through a fork server.

    Meant as ``initializer`` of a process pool, with ``initargs=(os.getpid(),)`` in the parent.
    """
    direct = os.name != "posix" or os.getppid() == parent_pid
    server_pid = None if direct else os.getppid()
    if _starter_is_gone(parent_pid, server_pid):
        os._exit(EXIT_ORPHANED)
    watchdog = threading.Thread(
        target=_watch,
        args=(parent_pid, server_pid, poll_interval_s),
        name="cbsim-parent-watch",
        daemon=True,
    )
    watchdog.start()
