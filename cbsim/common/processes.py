"""Whether the process that wrote a temporary still runs, so that its temporary can go.

cbsim's temporary names carry their writer's process id (see :mod:`cbsim.common.output_folders`). A writer is
gone when no process has its id, when that process is a zombie (dead, not yet reaped by its
parent: in a container whose first process does not reap, it stays so), or when the process with
that id started well after the temporary was last written (the id was reused). Where the
operating system cannot tell, the writer is taken to run, and :data:`STALE_AFTER_S` bounds how
long its temporary stays.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

__all__ = ["STALE_AFTER_S", "process_is_running", "writer_is_gone"]

STALE_AFTER_S = 24 * 3600.0
"""A cbsim temporary this old is deleted even if a process with its id is running."""

# A process started this much after a temporary was last written cannot have written it (its id
# was reused); the slack covers the coarse clocks the comparison uses.
_START_SLACK_S = 10.0


@functools.cache
def _boot_time() -> float | None:
    """When this host booted (seconds since the epoch), from Linux's ``/proc/stat``."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _process_state(pid: int) -> tuple[str, float] | None:
    """A Linux process's state letter and start time (seconds since the epoch), or None where
    ``/proc`` cannot tell."""
    boot = _boot_time()
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        # the fields after the name (which may hold spaces and parentheses), the state first
        fields = text[text.rindex(")") + 2 :].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return fields[0], (boot + started if boot is not None else -float("inf"))


def process_is_running(pid: int, since: float | None = None) -> bool:
    """Whether a process with this id runs on this host (assumed yes where that cannot be told).

    A zombie (a dead process its parent has not reaped: common in containers) does not run; with
    ``since`` (when its temporary was last written), neither does a process started well after
    that moment: it only got the id again."""
    if pid == os.getpid():
        return True
    if os.name != "posix":
        return True  # no harmless probe: leave it to the age limit
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        pass
    state = _process_state(pid)
    if state is None:
        return True
    letter, started = state
    if letter in ("Z", "X"):
        return False
    return since is None or started <= since + _START_SLACK_S


def writer_is_gone(pid: int, written: float, now: float) -> bool:
    """Whether the writer ``pid`` of a temporary last written at ``written`` is gone (or the
    temporary is older than :data:`STALE_AFTER_S`) at ``now``."""
    return now - written > STALE_AFTER_S or not process_is_running(pid, since=written)
