"""Output folders and files: what cbsim may replace, how it replaces them, what it cleans up.

cbsim writes folders (a run's results, a sweep and its points, kernel measurements) and single
files (reports, profiles, a sweep's table). Three rules hold for all of them.

**Never delete what cbsim did not write.** Every folder cbsim writes holds a small marker file,
``.cbsim-output``: JSON naming the *kind* of output (``run``, ``sweep``, ...) and the entries
cbsim wrote there. A folder is an output of a kind when its marker names that kind and, for kinds
that own their whole folder (a run, a sweep point), when it holds nothing its marker does not list:
a user's file dropped into a run's folder makes it the user's, and it is no longer replaced.
Folders written before markers existed are recognised by their exact set of files
(:attr:`OutputKind.entries`, :attr:`OutputKind.required`). A target may be written when it is
missing, an empty folder or an output of the same kind; anything else is refused with a
:class:`~cbsim.errors.CbsimError` naming the folder, why, and suggesting a fresh one. An existing
single file is replaced only when its writer's check says cbsim wrote it (a report's generator
line, a profile that parses as one).

**Replace atomically and recoverably.** A replacement is staged completely in a hidden sibling,
``.NAME.cbsim-<pid>-<random>.tmp``, then swapped in with two renames (``NAME`` → ``.NAME.old``,
staging → ``NAME``) and the old one is deleted last. A process killed between the two renames
leaves ``NAME`` missing and the complete old output in ``.NAME.old``; the next write or read of
``NAME`` (:func:`recover`) renames it back. Killed after them, the leftover ``.NAME.old`` is
deleted by the next write. At every instant the old or the new complete output can be found.
A new folder under a name not yet taken (``results/<name>/<run-id>``) is published with a single
rename (:func:`publish_new_folder`), so a killed run leaves no empty folder behind.

**Clean up after killed writers.** Temporary names carry the writing process's id. Every write
into a parent folder first deletes the temporaries there whose process no longer runs, or that
are older than :data:`STALE_AFTER_S` (a process id can be reused, or belong to another host
sharing the folder). Names that do not carry cbsim's pattern are never touched.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cbsim.errors import CbsimError

__all__ = [
    "MARKER",
    "STALE_AFTER_S",
    "OutputKind",
    "check_files_into",
    "check_replaceable",
    "holds_output",
    "prepare_folder",
    "publish_new_folder",
    "recover",
    "recover_all",
    "remove_stale_temporaries",
    "replace_folder",
    "temporary_name_pattern",
    "write_bytes",
    "write_file",
    "write_files_into",
]

MARKER = ".cbsim-output"
"""File in every folder cbsim writes: JSON ``{"kind": ..., "entries": [...], "written_by": ...}``."""

STALE_AFTER_S = 24 * 3600.0
"""A cbsim temporary this old is deleted even if a process with its id is running."""

OLD_SUFFIX = ".old"

# Files an operating system's file browser leaves in folders; they never make a folder the user's.
_BROWSER_CLUTTER = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})

# ``.NAME.cbsim-<pid>-<random>.tmp``: tempfile's random part is [a-z0-9_], never a dot.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.cbsim-(?P<pid>\d+)-[a-z0-9_]*\.tmp$")

Fill = Callable[[Path], None]


@dataclass(frozen=True)
class OutputKind:
    """A kind of folder cbsim writes.

    ``description`` names what it holds in messages (``a run result``). ``entries`` are the names
    cbsim may write in it and ``directories`` those of them that are folders; ``required`` are the
    names an unmarked folder (written before markers existed) must hold to be recognised.
    ``whole_folder``: cbsim owns the whole folder and replaces it as a whole, so anything unlisted
    in it makes it not an output of this kind. A folder that cbsim only adds to (a sweep) is
    recognised by its marker (or its required entries) alone, and other files in it stay untouched.
    """

    name: str
    description: str
    entries: frozenset[str]
    required: frozenset[str]
    directories: frozenset[str] = frozenset()
    whole_folder: bool = True


# --------------------------------------------------------------------------- recognising


def _visible_entries(folder: Path) -> list[Path]:
    """The folder's entries apart from cbsim's marker and file browsers' clutter."""
    return [p for p in folder.iterdir() if p.name != MARKER and p.name not in _BROWSER_CLUTTER]


def _read_marker(folder: Path) -> dict[str, Any] | None:
    """The folder's marker, or None when it has none (or one that is not cbsim's JSON)."""
    path = folder / MARKER
    if not path.is_file() or path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        return None
    entries = data.get("entries")
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        return None
    return data


def _has_right_type(entry: Path, kind: OutputKind) -> bool:
    if entry.is_symlink():
        return False
    return entry.is_dir() if entry.name in kind.directories else entry.is_file()


def _is_unmarked_output(entries: list[Path], kind: OutputKind) -> bool:
    """An output written before markers existed: its required names present, each of the kind's
    names a file or a folder as the kind writes it, and (for a kind that owns its whole folder)
    nothing else."""
    ours = [p for p in entries if p.name in kind.entries]
    if kind.whole_folder and len(ours) != len(entries):
        return False
    return kind.required <= {p.name for p in ours} and all(_has_right_type(p, kind) for p in ours)


def holds_output(folder: Path, kind: OutputKind) -> bool:
    """Whether ``folder`` is a cbsim output of ``kind`` (see the module docstring)."""
    if not folder.is_dir() or folder.is_symlink():
        return False
    entries = _visible_entries(folder)
    marker = _read_marker(folder)
    if marker is None:
        return _is_unmarked_output(entries, kind)
    if marker["kind"] != kind.name:
        return False
    if not kind.whole_folder:
        return True
    listed = set(marker["entries"])
    return all(p.name in listed and _has_right_type(p, kind) for p in entries)


def _is_empty_folder(folder: Path) -> bool:
    return folder.is_dir() and not folder.is_symlink() and not _visible_entries(folder)


def _refusal(target: Path, kind: OutputKind, why: str) -> CbsimError:
    if kind.whole_folder:
        consequence = f"cbsim writes {kind.description} by replacing the whole folder"
    else:
        consequence = f"cbsim will not mix {kind.description} with it"
    return CbsimError(f"{why}; {consequence}: give a new or empty folder", source=str(target))


def _foreign_entries(folder: Path, kind: OutputKind, marker: dict[str, Any] | None) -> list[str]:
    """Entries of ``folder`` that its marker does not list as cbsim's (all, without a marker)."""
    listed = set(marker["entries"]) if marker is not None else set()
    return sorted(
        p.name
        for p in _visible_entries(folder)
        if p.name not in listed or not _has_right_type(p, kind)
    )


def _why_not_replaceable(target: Path, kind: OutputKind) -> str | None:
    """None when ``target`` may be written as ``kind``; else the reason it may not."""
    if not target.exists() and not target.is_symlink():
        return None
    if target.is_symlink() and not target.exists():
        return "is a broken symbolic link"
    if not target.is_dir():
        return "exists and is not a directory"
    marker = _read_marker(target)
    if marker is not None and marker["kind"] != kind.name:
        return f"holds a cbsim {marker['kind']} output, not {kind.description}"
    if _is_empty_folder(target) or holds_output(target, kind):
        return None
    foreign = _foreign_entries(target, kind, marker)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        return f"holds files cbsim did not write ({shown})"
    return f"is not {kind.description}"


def check_replaceable(target: Path, kind: OutputKind) -> None:
    """Raise :class:`CbsimError` unless ``target`` is missing, an empty folder or an output of
    ``kind`` (a leftover of an interrupted replacement is recovered first)."""
    target = Path(target)
    recover(target, kind)
    why = _why_not_replaceable(target, kind)
    if why is not None:
        raise _refusal(target, kind, why)


# --------------------------------------------------------------------------- temporaries


def temporary_name_pattern() -> re.Pattern[str]:
    """The pattern of cbsim's temporary names (``.NAME.cbsim-<pid>-<random>.tmp``)."""
    return _TEMPORARY


def _temporary_prefix(name: str) -> str:
    return f".{name}.cbsim-{os.getpid()}-"


def _process_is_running(pid: int) -> bool:
    """Whether a process with this id runs on this host (assumed yes where that cannot be told)."""
    if pid == os.getpid():
        return True
    if os.name != "posix":
        return True  # no harmless probe: leave it to the age limit
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


def _is_stale(entry: Path, pid: int, now: float) -> bool:
    try:
        age = now - entry.lstat().st_mtime
    except OSError:
        return False
    return age > STALE_AFTER_S or not _process_is_running(pid)


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()


def remove_stale_temporaries(parent: Path, *, now: float | None = None) -> list[Path]:
    """Delete the cbsim temporaries in ``parent`` left by processes that no longer run (or older
    than :data:`STALE_AFTER_S`); return what was deleted. A missing ``parent`` has none."""
    moment = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if match is not None and _is_stale(entry, int(match["pid"]), moment):
            _remove(entry)
            removed.append(entry)
    return removed


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _staging_folder(parent: Path, name: str) -> Path:
    staging = Path(tempfile.mkdtemp(prefix=_temporary_prefix(name), suffix=".tmp", dir=parent))
    staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; outputs should not be
    return staging


# --------------------------------------------------------------------------- replacing folders


def _old_path(target: Path) -> Path:
    return target.with_name(f".{target.name}{OLD_SUFFIX}")


def _may_discard_old(old: Path, kind: OutputKind) -> bool:
    return _is_empty_folder(old) or holds_output(old, kind)


def recover(target: Path, kind: OutputKind) -> None:
    """Finish a replacement of ``target`` that a killed process left half done.

    ``.NAME.old`` with ``NAME`` missing: the process died between its two renames, and
    ``.NAME.old`` is the complete old output: it is renamed back. With ``NAME`` present it died
    after them, and ``.NAME.old`` is deleted when it is an output of ``kind``.
    """
    target = Path(target)
    old = _old_path(target)
    if not old.is_dir() or old.is_symlink():
        return
    if not target.exists() and not target.is_symlink():
        old.rename(target)
        return
    if not _may_discard_old(old, kind):
        raise CbsimError(
            f"a leftover {old.name} that is not {kind.description} is in the way; move it away",
            source=str(target),
        )
    shutil.rmtree(old)


def recover_all(parent: Path, kind: OutputKind) -> None:
    """:func:`recover` every output of ``kind`` in ``parent`` that has a ``.NAME.old`` leftover."""
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if name.startswith(".") and name.endswith(OLD_SUFFIX) and len(name) > 1 + len(OLD_SUFFIX):
            with contextlib.suppress(CbsimError):
                recover(entry.with_name(name[1 : -len(OLD_SUFFIX)]), kind)


def _marker_text(kind: OutputKind, entries: Iterable[str]) -> str:
    from cbsim import __version__

    data = {"kind": kind.name, "entries": sorted(entries), "written_by": f"cbsim {__version__}"}
    return json.dumps(data, indent=2) + "\n"


def _write_marker(folder: Path, kind: OutputKind, entries: Iterable[str]) -> None:
    (folder / MARKER).write_text(_marker_text(kind, entries), encoding="utf-8")


def _fill_and_mark(staging: Path, kind: OutputKind, fill: Fill) -> None:
    fill(staging)
    _write_marker(staging, kind, (p.name for p in _visible_entries(staging)))


def _swap_in(staging: Path, target: Path) -> None:
    """Put the complete ``staging`` at ``target``; the old ``target`` stays findable throughout."""
    if not target.exists():
        staging.rename(target)
        return
    old = _old_path(target)
    target.rename(old)
    try:
        staging.rename(target)
    except BaseException:
        old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def replace_folder(
    target: Path, kind: OutputKind, fill: Fill, *, clean_parent: bool = True
) -> Path:
    """Write the folder ``target`` as an output of ``kind``: ``fill(staging)`` writes its files
    into an empty staging folder beside it, which then replaces ``target`` as a whole.

    ``target`` must be missing, an empty folder or an output of ``kind``
    (:func:`check_replaceable`); its parents are created. ``clean_parent=False`` leaves stale
    temporaries in the parent to the caller (a sweep cleans its points once, not per point).
    """
    target = Path(target).resolve()
    check_replaceable(target, kind)
    target.parent.mkdir(parents=True, exist_ok=True)
    if clean_parent:
        remove_stale_temporaries(target.parent)
    staging = _staging_folder(target.parent, target.name)
    try:
        _fill_and_mark(staging, kind, fill)
        check_replaceable(target, kind)  # it may have changed while we wrote
        _swap_in(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _rename_onto_free_name(staging: Path, candidate: Path) -> bool:
    """Rename ``staging`` to ``candidate`` unless something (not an empty folder) holds it."""
    if candidate.exists() or candidate.is_symlink():
        return False
    try:
        staging.rename(candidate)
    except FileExistsError:
        return False
    except OSError:
        if candidate.exists():  # taken meanwhile (ENOTEMPTY, EEXIST)
            return False
        raise
    return True


def publish_new_folder(parent: Path, name: str, kind: OutputKind, fill: Fill) -> Path:
    """Write a new output of ``kind`` as ``parent/name`` (``name-2``, ``name-3``, ... if taken).

    The folder appears complete, with one rename; nothing that exists is replaced.
    """
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(parent)
    staging = _staging_folder(parent, name)
    try:
        _fill_and_mark(staging, kind, fill)
        for n in itertools.count(1):
            candidate = parent / (name if n == 1 else f"{name}-{n}")
            if _rename_onto_free_name(staging, candidate):
                return candidate
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    raise AssertionError("unreachable")  # pragma: no cover


def prepare_folder(folder: Path, kind: OutputKind) -> Path:
    """Make ``folder`` ready for cbsim to add the entries of ``kind`` to (a sweep).

    A missing or empty folder is created and marked; an output of ``kind`` (marked, or written
    before markers existed) is kept as it is and marked; anything else is refused.
    """
    folder = Path(folder)
    why = _why_not_replaceable(folder, kind)
    if why is not None:
        raise _refusal(folder, kind, why)
    folder.mkdir(parents=True, exist_ok=True)
    if _read_marker(folder) is None:
        write_bytes(folder / MARKER, _marker_text(kind, kind.entries).encode("utf-8"))
    remove_stale_temporaries(folder)
    return folder


def check_files_into(folder: Path, kind: OutputKind, names: Iterable[str]) -> set[str]:
    """Raise :class:`CbsimError` unless :func:`write_files_into` may write ``names`` into
    ``folder``; return the names its marker lists as cbsim's."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise _refusal(folder, kind, "exists and is not a directory")
    marker = _read_marker(folder) if folder.is_dir() else None
    if marker is not None and marker["kind"] != kind.name:
        raise _refusal(folder, kind, f"holds a cbsim {marker['kind']} output")
    ours = set(marker["entries"]) if marker is not None else set()
    for name in names:
        path = folder / name
        if (path.exists() or path.is_symlink()) and name not in ours:
            raise CbsimError(
                f"exists and cbsim did not write it, so cbsim will not overwrite it with "
                f"{kind.description}: give a new or empty folder (or move the file away)",
                source=str(path),
            )
    return ours


def write_files_into(folder: Path, kind: OutputKind, files: Mapping[str, bytes]) -> Path:
    """Write the files ``files`` (name → content) into ``folder``, a folder that
    may hold other things too (``results/calibration/<gpu>/`` also holds profiles).

    Each file is written atomically. One that exists is replaced only if the folder's marker
    lists it as written by an earlier output of ``kind``; the marker then lists every file
    written so far. Nothing is written unless every name may be.
    """
    folder = Path(folder)
    ours = check_files_into(folder, kind, list(files))
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        write_bytes(folder / name, data)
    write_bytes(folder / MARKER, _marker_text(kind, ours | set(files)).encode("utf-8"))
    return folder


# --------------------------------------------------------------------------- single files


def write_file(
    path: Path,
    write: Fill,
    *,
    replaceable: Callable[[Path], bool] | None = None,
    description: str = "a file cbsim wrote",
) -> Path:
    """Write the file ``path`` atomically: ``write(temporary)`` writes it beside ``path``, which
    it then replaces with one rename.

    An existing ``path`` is replaced only if ``replaceable(path)`` says cbsim wrote it (without
    ``replaceable``, any file is); a folder is never replaced. Parents are created.
    """
    path = Path(path)
    if path.is_dir():
        raise CbsimError("is a folder; give a file name", source=str(path))
    if replaceable is not None and path.exists() and not replaceable(path):
        raise CbsimError(
            f"exists and is not {description}, so cbsim will not overwrite it: give a new file "
            "name (or move the file away)",
            source=str(path),
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    fd, name = tempfile.mkstemp(prefix=_temporary_prefix(path.name), suffix=".tmp", dir=path.parent)
    os.close(fd)
    temporary = Path(name)
    try:
        write(temporary)
        temporary.chmod(0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    return path


def write_bytes(
    path: Path,
    data: bytes,
    *,
    replaceable: Callable[[Path], bool] | None = None,
    description: str = "a file cbsim wrote",
) -> Path:
    """:func:`write_file` with the file's content given as bytes."""

    def write(temporary: Path) -> None:
        temporary.write_bytes(data)

    return write_file(path, write, replaceable=replaceable, description=description)
