"""Whether cbsim can write a path at all, told before it simulates.

A path under a regular file, in a loop of symbolic links, with a name or a length beyond what its
file system allows, or whose nearest existing folder is read-only cannot be written; finding out
only when the results are written (after the run) would waste the run and, from the operating
system, give a traceback. :func:`check_path` says why in one :class:`~cbsim.common.errors.CbsimError`
naming the path.
"""

from __future__ import annotations

import os
from pathlib import Path

from cbsim.common.errors import CbsimError

__all__ = ["check_path"]

# Bytes a path may need beyond its own length (a temporary's name is longer than a short name).
_PATH_ROOM = 64


def _reason(err: OSError) -> str:
    return err.strerror or str(err)


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (as a name: a broken link counts)."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor or os.curdir)


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return int(os.pathconf(folder, name))
    except (OSError, ValueError):
        return default


def _too_long(resolved: Path, existing: Path) -> str | None:
    """Why ``resolved`` is too long for its file system (None when it is not)."""
    name_max = _limit(existing, "PC_NAME_MAX", 255)
    created = resolved.relative_to(existing).parts if resolved != existing else ()
    for part in (*created, resolved.name):
        size = len(os.fsencode(part))
        if size > name_max:
            return (
                f"a name {size} bytes long ({part[:24]}...); this file system allows at most "
                f"{name_max}"
            )
    path_max = _limit(existing, "PC_PATH_MAX", 4096)
    size = len(os.fsencode(str(resolved)))
    if size + _PATH_ROOM > path_max:
        return f"a path {size} bytes long; this file system allows at most {path_max - _PATH_ROOM}"
    return None


def _why_unusable(path: Path, beside: bool) -> str | None:
    """Why cbsim cannot write ``path`` (None when nothing is known against it). ``beside``: the
    write goes through a sibling of ``path`` (a replacement), so its parent must be writable."""
    try:
        resolved = Path(path).resolve()
    except RuntimeError:  # Python < 3.13 reports a loop of symbolic links so
        return "cannot be resolved: it lies in a loop of symbolic links"
    except OSError as err:
        return f"cannot be resolved: {_reason(err)}"
    existing = _nearest_existing(resolved.parent if beside else resolved)
    too_long = _too_long(resolved, existing)
    if too_long is not None:
        return f"cannot be created: {too_long}"
    if existing != resolved and not existing.is_dir():
        return f"cannot be created: {existing} is not a folder"
    if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot be written: {existing} is read-only (permissions or file system)"
    return None


def check_path(path: Path, *, beside: bool = True) -> None:
    """Raise :class:`CbsimError` naming ``path`` when cbsim cannot write it: under a regular file,
    in a loop of symbolic links, a name or path longer than its file system allows, or its
    nearest existing folder read-only. ``beside=False``: cbsim writes into the folder ``path``
    itself (a sweep), not through a sibling of it."""
    why = _why_unusable(Path(path), beside)
    if why is not None:
        raise CbsimError(why, source=str(path))
