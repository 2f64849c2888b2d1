"""Output folders and files: what cbsim may replace, how it replaces them, what it cleans up.

cbsim writes folders (a run's results, a sweep and its points, kernel measurements) and single
files (reports, profiles, a sweep's table). These rules hold for all of them.

**Never delete what cbsim did not write.** Every folder cbsim writes holds a small marker file,
``.cbsim-output``: JSON naming the *kind* of output (``run``, ``sweep``, ...) and the entries
cbsim wrote there. A folder is an output of a kind when its marker names that kind and, for kinds
that own their whole folder (a run, a sweep point), when it holds nothing its marker does not list:
a user's file dropped into a run's folder makes it the user's, and it is no longer replaced.
Folders written before markers existed are recognised by their exact set of files
(:attr:`OutputKind.entries`, :attr:`OutputKind.required`). A target may be written when it is
missing, an empty folder or an output of the same kind; anything else is refused with a
:class:`~cbsim.common.errors.CbsimError` naming the folder, why, and suggesting a fresh one. An existing
single file is replaced only when its writer's check says cbsim wrote it (a report's generator
line, a profile that parses as one).

**Replace atomically.** A replacement is staged completely in a hidden sibling,
``.NAME.cbsim-<pid>-<random>.tmp``, then swapped in. Where the system can exchange two names in
one step (Linux's ``renameat2`` with ``RENAME_EXCHANGE``, on the file systems that support it:
ext4, xfs, btrfs, tmpfs, ...) staging and ``NAME`` trade places atomically, and the old output,
now under the staging name, is deleted: at every instant ``NAME`` holds the old or the new
complete output. Elsewhere it takes two renames, and there is a window between them: the old
output is first given a journal file, ``.cbsim-replacing`` (JSON naming the target, its own
hidden name and the writing process), then moved aside to ``.NAME.cbsim-aside.old``, and
staging is renamed to ``NAME``. A process killed in that window leaves ``NAME`` missing and the
complete old output aside; every write to the parent and every read of ``NAME``
(:meth:`Results.read <cbsim.run.results.Results.read>`, ``cbsim report``, ``cbsim run --out``)
renames it back (:func:`recover`). A folder moved aside is recognised only by its journal, never
by its name: a user's ``.NAME.old`` (or any folder without the journal naming it) is never moved
or deleted, and a replacement that would need a name the user's folder holds is refused.
A new folder under a name not yet taken (``results/<name>/<run-id>``) is published with a single
rename (:func:`publish_new_folder`), so a killed run leaves no empty folder behind.

**Clean up after killed writers.** Temporary names carry the writing process's id. Every write
into a parent folder first deletes the temporaries there whose process no longer runs (gone, a
zombie, or an id since reused by a process started after the temporary was last written), or that
are older than :data:`STALE_AFTER_S`, and settles the folders moved aside by killed replacements.
Names that do not carry cbsim's pattern are never touched. Streamed iterations
(``cbsim run --stream``) are such temporaries too, until the result takes them.

**Paths checked first.** A path cbsim cannot write (under a regular file, in a loop of symbolic
links, a name longer than the file system allows, a read-only folder) is refused up front with a
:class:`~cbsim.common.errors.CbsimError` naming it and the reason (:func:`check_path`).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cbsim.common.errors import CbsimError
from cbsim.common.exchange import exchange_names
from cbsim.common.output_paths import check_path
from cbsim.common.processes import STALE_AFTER_S, writer_is_gone

__all__ = [
    "MARKER",
    "REPLACING",
    "STALE_AFTER_S",
    "OutputKind",
    "check_file",
    "check_files_into",
    "check_path",
    "check_replaceable",
    "holds_output",
    "new_temporary_file",
    "prepare_folder",
    "publish_new_folder",
    "recover",
    "recover_all",
    "remove_stale_temporaries",
    "replace_folder",
    "temporary_name_pattern",
    "temporary_prefix",
    "write_bytes",
    "write_file",
    "write_files_into",
]

MARKER = ".cbsim-output"
"""File in every folder cbsim writes: JSON ``{"kind": ..., "entries": [...], "written_by": ...}``."""

REPLACING = ".cbsim-replacing"
"""Journal written into an output just before a two-rename replacement moves it aside: JSON
``{"cbsim": "replacing", "target": NAME, "aside": its hidden name, "pid": ..., "entries": [...]}``.
Only a folder holding it (naming that folder) is taken for an output cbsim moved aside."""

# Files an operating system's file browser leaves in folders; they never make a folder the user's.
_BROWSER_CLUTTER = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})

# cbsim's own files inside a folder it writes: never counted among the folder's entries.
_BOOKKEEPING = frozenset({MARKER, REPLACING})

# ``.NAME.cbsim-<pid>-<random>.tmp``: tempfile's random part is [a-z0-9_], never a dot.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.cbsim-(?P<pid>\d+)-[a-z0-9_]*\.tmp$")

# ``.NAME.cbsim-aside.old``: an output moved aside for a moment (recognised by its journal only).
_ASIDE_SUFFIX = ".cbsim-aside.old"

# The longest file name cbsim makes up (the common limit of file systems).
_NAME_MAX = 255

# Characters of NAME kept in a temporary's name: with the rest (about 30 bytes) it stays within
# the 255 bytes file systems allow even for a name of 4-byte characters.
_NAME_IN_TEMPORARY = 48

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
    """The folder's entries apart from cbsim's bookkeeping and file browsers' clutter."""
    return [
        p for p in folder.iterdir() if p.name not in _BOOKKEEPING and p.name not in _BROWSER_CLUTTER
    ]


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from a regular file (None when missing, a link, or not a JSON object)."""
    if not path.is_file() or path.is_symlink():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_name_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(e, str) for e in value)


def _read_marker(folder: Path) -> dict[str, Any] | None:
    """The folder's marker, or None when it has none (or one that is not cbsim's JSON)."""
    data = _read_json(folder / MARKER)
    if data is None or not isinstance(data.get("kind"), str):
        return None
    return data if _is_name_list(data.get("entries")) else None


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
    """Raise :class:`CbsimError` unless ``target`` is a path cbsim can write (:func:`check_path`)
    and is missing, an empty folder or an output of ``kind`` (an output a killed replacement left
    aside is restored first, see :func:`recover`)."""
    target = Path(target)
    check_path(target)
    recover(target)
    why = _why_not_replaceable(target, kind)
    if why is not None:
        raise _refusal(target, kind, why)


# --------------------------------------------------------------------------- temporaries


def temporary_name_pattern() -> re.Pattern[str]:
    """The pattern of cbsim's temporary names (``.NAME.cbsim-<pid>-<random>.tmp``)."""
    return _TEMPORARY


def temporary_prefix(name: str) -> str:
    """The start of this process's temporary names for ``name`` (``.NAME.cbsim-<pid>-``): with a
    random part and ``.tmp`` after it, a name :func:`remove_stale_temporaries` recognises."""
    return f".{name[:_NAME_IN_TEMPORARY]}.cbsim-{os.getpid()}-"


def _modified(entry: Path) -> float | None:
    try:
        return entry.lstat().st_mtime
    except OSError:
        return None


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()


def _remove_stale(entry: Path, pid: int, now: float) -> bool:
    written = _modified(entry)
    if written is None or not writer_is_gone(pid, written, now):
        return False
    _remove(entry)
    return True


def remove_stale_temporaries(parent: Path, *, now: float | None = None) -> list[Path]:
    """Settle the outputs killed replacements left aside in ``parent`` (:func:`recover`) and
    delete the cbsim temporaries there left by processes that no longer run (or older than
    :data:`STALE_AFTER_S`); return what was deleted. A missing ``parent`` has none."""
    moment = time.time() if now is None else now
    _settle_all(Path(parent), moment)
    removed: list[Path] = []
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _TEMPORARY.match(entry.name)
        if match is not None and _remove_stale(entry, int(match["pid"]), moment):
            removed.append(entry)
    return removed


def new_temporary_file(parent: Path, name: str, *, clean: bool = True) -> Path:
    """Create an empty temporary file for ``name`` in ``parent`` (created if missing), named as
    cbsim's temporaries are: if its writer is killed, the next write to ``parent`` deletes it.
    ``clean``: first delete the stale temporaries there. OS errors raise :class:`CbsimError`
    naming ``parent``."""
    parent = Path(parent)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        if clean:
            remove_stale_temporaries(parent)
        fd, path = tempfile.mkstemp(prefix=temporary_prefix(name), suffix=".tmp", dir=parent)
    except OSError as err:
        raise CbsimError(
            f"cannot create a file for {name} in it: {err.strerror or err}", source=str(parent)
        ) from None
    os.close(fd)
    return Path(path)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _staging_folder(parent: Path, name: str) -> Path:
    staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(name), suffix=".tmp", dir=parent))
    staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; outputs should not be
    return staging


# --------------------------------------------------------------------------- outputs moved aside


@dataclass(frozen=True)
class _Aside:
    """An output a two-rename replacement moved aside, as its journal describes it."""

    path: Path
    target: Path  # where it came from
    pid: int  # the replacing process
    written: float  # when the journal was written
    entries: frozenset[str]  # what it held then


def _read_journal(folder: Path) -> dict[str, Any] | None:
    """The folder's replacement journal (None when it has none that is cbsim's)."""
    data = _read_json(folder / REPLACING)
    if data is None or data.get("cbsim") != "replacing":
        return None
    target = data.get("target")
    if not isinstance(target, str) or target in ("", ".", "..") or Path(target).name != target:
        return None
    valid = isinstance(data.get("aside"), str) and type(data.get("pid")) is int
    return data if valid and _is_name_list(data.get("entries")) else None


def _aside_name(name: str) -> str:
    """The hidden name a two-rename replacement moves the output ``name`` to for a moment:
    ``.NAME.cbsim-aside.old`` (a long NAME shortened, with a digest of it)."""
    full = f".{name}{_ASIDE_SUFFIX}"
    if len(os.fsencode(full)) <= _NAME_MAX:
        return full
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    return f".{name[:_NAME_IN_TEMPORARY]}.{digest}{_ASIDE_SUFFIX}"


def _aside(entry: Path) -> _Aside | None:
    """``entry`` as an output moved aside: a folder named as cbsim names them, holding the journal
    that names this very folder (a user's folder of any name is never taken for one)."""
    if not entry.name.endswith(_ASIDE_SUFFIX) or entry.is_symlink() or not entry.is_dir():
        return None
    journal = _read_journal(entry)
    written = _modified(entry / REPLACING)
    if journal is None or written is None:
        return None
    if journal["aside"] != entry.name or _aside_name(journal["target"]) != entry.name:
        return None
    return _Aside(
        entry,
        entry.with_name(journal["target"]),
        journal["pid"],
        written,
        frozenset(journal["entries"]),
    )


def _asides(parent: Path) -> list[_Aside]:
    """The outputs moved aside in ``parent``."""
    try:
        entries = [e for e in parent.iterdir() if e.name.endswith(_ASIDE_SUFFIX)]
    except OSError:
        return []
    return [a for a in map(_aside, entries) if a is not None]


def _drop_journal(folder: Path) -> None:
    with contextlib.suppress(OSError):
        (folder / REPLACING).unlink()


def _discard(folder: Path) -> None:
    """Delete a folder cbsim moved aside or staged: first renamed to a temporary name, so that a
    kill during the deletion leaves a temporary the next write deletes."""
    doomed = folder
    if _TEMPORARY.match(folder.name) is None:
        doomed = folder.with_name(f"{temporary_prefix(folder.name)}{secrets.token_hex(4)}.tmp")
        try:
            folder.rename(doomed)
        except OSError:
            doomed = folder
    shutil.rmtree(doomed, ignore_errors=True)


def _only_what_was_there(aside: _Aside) -> bool:
    """Whether the folder moved aside holds nothing but what it held when it was moved."""
    try:
        return all(p.name in aside.entries for p in _visible_entries(aside.path))
    except OSError:
        return False


def _settle(aside: _Aside, now: float) -> None:
    """Finish what a killed replacement left: the output moved aside goes back to its name when
    that name is missing, and is deleted when its name holds an output again (unless something
    was added to it since). One whose writer still runs is left to it."""
    if not writer_is_gone(aside.pid, aside.written, now):
        return
    target = aside.target
    if not target.exists() and not target.is_symlink():
        with contextlib.suppress(OSError):
            aside.path.rename(target)
            _drop_journal(target)
    elif _only_what_was_there(aside):
        _discard(aside.path)


def _settle_all(parent: Path, now: float) -> None:
    """:func:`_settle` every output moved aside in ``parent``."""
    for aside in _asides(parent):
        _settle(aside, now)


def _drop_stale_journal(target: Path, now: float) -> None:
    """A journal left in ``target`` by a writer killed before it moved the folder aside."""
    path = target / REPLACING
    journal = _read_journal(target) if path.is_file() else None
    written = _modified(path)
    if written is None:
        return
    if journal is None or writer_is_gone(journal["pid"], written, now):
        _drop_journal(target)


def recover(target: Path, kind: OutputKind | None = None) -> None:
    """Finish a replacement of ``target`` that a killed process left half done.

    An output moved aside from ``target`` (recognised by its journal, see :data:`REPLACING`) is
    renamed back when ``target`` is missing, and deleted when ``target`` holds the new output.
    Nothing else is touched: a user's folder named ``.NAME.old`` stays where it is. ``kind`` is
    accepted for older callers: the journal alone tells what was moved."""
    del kind
    target = Path(target)
    if target.name in ("", ".", ".."):
        target = Path(os.path.abspath(target))
    now = time.time()
    aside = target.with_name(_aside_name(target.name))
    found = _aside(aside) if os.path.lexists(aside) else None
    if found is not None:
        _settle(found, now)
    if target.is_dir() and not target.is_symlink():
        _drop_stale_journal(target, now)


def recover_all(parent: Path, kind: OutputKind | None = None) -> None:
    """:func:`recover` every output moved aside in ``parent``."""
    del kind
    _settle_all(Path(parent), time.time())


# --------------------------------------------------------------------------- replacing folders


def _marker_text(kind: OutputKind, entries: Iterable[str]) -> str:
    from cbsim import __version__

    data = {"kind": kind.name, "entries": sorted(entries), "written_by": f"cbsim {__version__}"}
    return json.dumps(data, indent=2) + "\n"


def _write_marker(folder: Path, kind: OutputKind, entries: Iterable[str]) -> None:
    (folder / MARKER).write_text(_marker_text(kind, entries), encoding="utf-8")


def _fill_and_mark(staging: Path, kind: OutputKind, fill: Fill) -> None:
    fill(staging)
    _write_marker(staging, kind, (p.name for p in _visible_entries(staging)))


def _write_journal(target: Path, aside: Path) -> None:
    """The journal that lets :func:`recover` recognise ``target`` once moved to ``aside``."""
    data = {
        "cbsim": "replacing",
        "target": target.name,
        "aside": aside.name,
        "pid": os.getpid(),
        "entries": sorted(p.name for p in _visible_entries(target)),
    }
    (target / REPLACING).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _swap_in_two_steps(staging: Path, target: Path) -> None:
    """``target`` moved aside (with its journal), ``staging`` renamed to it, the old deleted.
    Whatever holds the name to move it aside to (a user's folder: a killed replacement's has
    been settled by :func:`check_replaceable`) is never overwritten: the replacement is refused."""
    aside = target.with_name(_aside_name(target.name))
    if os.path.lexists(aside):
        raise CbsimError(
            f"{aside.name} is in the way: cbsim moves the old output there while it replaces it "
            "on this file system, and will not overwrite what is there; move it away",
            source=str(target),
        )
    _write_journal(target, aside)
    try:
        target.rename(aside)
    except BaseException:
        _drop_journal(target)
        raise
    try:
        staging.rename(target)
    except BaseException:
        aside.rename(target)
        _drop_journal(target)
        raise
    _discard(aside)


def _swap_in(staging: Path, target: Path) -> None:
    """Put the complete ``staging`` at ``target`` (see the module docstring)."""
    if not target.exists():
        staging.rename(target)
    elif exchange_names(staging, target):
        _discard(staging)  # the old output, under the staging name
    else:
        _swap_in_two_steps(staging, target)


def replace_folder(
    target: Path, kind: OutputKind, fill: Fill, *, clean_parent: bool = True
) -> Path:
    """Write the folder ``target`` as an output of ``kind``: ``fill(staging)`` writes its files
    into an empty staging folder beside it, which then replaces ``target`` as a whole.

    ``target`` must be missing, an empty folder or an output of ``kind``
    (:func:`check_replaceable`); its parents are created. ``clean_parent=False`` leaves stale
    temporaries in the parent to the caller (a sweep cleans its points once, not per point).
    """
    check_replaceable(Path(target), kind)
    target = Path(target).resolve()
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
    check_path(parent / name)
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
    check_path(folder, beside=False)
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
    check_path(folder, beside=False)
    if folder.is_symlink() and not folder.exists():
        raise _refusal(folder, kind, "is a broken symbolic link")
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


def check_file(
    path: Path,
    *,
    replaceable: Callable[[Path], bool] | None = None,
    description: str = "a file cbsim wrote",
) -> Path:
    """Raise :class:`CbsimError` unless :func:`write_file` may write ``path`` (a command checks
    before its work, so that a refusal does not come after it); the file it would write (a
    symbolic link's target)."""
    path = Path(path)
    check_path(path)
    if path.is_symlink():
        if not path.exists():
            raise CbsimError(
                "is a broken symbolic link; give a new file name (or mend the link)",
                source=str(path),
            )
        path = Path(os.path.realpath(path))
    if path.is_dir():
        raise CbsimError("is a folder; give a file name", source=str(path))
    if replaceable is not None and path.exists() and not replaceable(path):
        raise CbsimError(
            f"exists and is not {description}, so cbsim will not overwrite it: give a new file "
            "name (or move the file away)",
            source=str(path),
        )
    return path


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
    ``replaceable``, any file is); a folder is never replaced. A symbolic link is the user's: the
    file it points to is written (and checked), the link kept. Parents are created.
    """
    path = check_file(path, replaceable=replaceable, description=description)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path.parent)
    fd, name = tempfile.mkstemp(prefix=temporary_prefix(path.name), suffix=".tmp", dir=path.parent)
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
