"""Swapping two names in one atomic step, where the system can.

Linux's ``renameat2`` with ``RENAME_EXCHANGE`` (kernel 3.15 and later, on ext4, xfs, btrfs,
tmpfs and most local file systems) exchanges two existing paths atomically: no instant sees
either name missing. :func:`exchange_names` calls it through the C library; where there is no
such call (another system, an old C library) or the file system refuses it, it returns False and
the caller falls back to two renames (see :mod:`cbsim.common.output_folders`).
"""

from __future__ import annotations

import errno
import functools
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["exchange_names"]


@functools.cache
def _renameat2() -> Any:
    """Linux's ``renameat2`` from the C library, or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return function


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_CANNOT_EXCHANGE = frozenset(
    {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}
)


def exchange_names(first: Path, second: Path) -> bool:
    """Swap the two existing names in one atomic step; False where the system or the file
    system cannot (the caller then takes two renames)."""
    function = _renameat2()
    if function is None:
        return False
    import ctypes

    done = function(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in _CANNOT_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))
