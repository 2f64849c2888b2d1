"""Parsed calibration files kept for the next process.

A shipped calibration profile is a JSON file of about a megabyte (GEMM, attention and MoE
correction grids). Parsing it and checking how deeply it nests takes some 40 ms, and one run
may read two: a vLLM replica on an H100 prices its own kernels from vLLM's profile and its
all-reduce from SGLang's, which stands in for vLLM's. That is a tenth of a second of every
command that simulates, repeated in every process of a sweep.

So once a file has been read (a JSON object of the supported schema version), the parsed object
is written in Python's ``marshal`` format to a cache folder, under a name made of a hash of the
file's bytes and the Python version (whose format ``marshal`` is); a later process reads the
file's bytes, hashes them (about a millisecond a megabyte) and loads the object in about 4 ms.
An entry that is missing, unreadable or corrupt is parsed from the JSON again (and rewritten);
an edited file hashes to another name, so a stale entry is never read; a folder that cannot be
written is simply not used. Only the JSON is cached: every read still validates it as a profile
(:func:`cbsim.cost.profile.read_profile`), so a profile read from the cache is the profile its
file holds.

The shipped request traces are kept the same way (:mod:`cbsim.workload.traces`): a trace's
columns once parsed and checked, under a hash of its parquet bytes, of the module that checks it
and of the versions of the libraries that read it, so that a process that replays one never
imports pandas to parse its date-times.

The folder keeps the :data:`MAX_ENTRIES` entries used last (a read marks its entry used; a new
entry removes the least recently used beyond that number), so a user who edits and re-fits
their own profiles, or installs cbsim release after release, does not grow it without end: an
entry is about a megabyte.

The folder is ``$CBSIM_CACHE_DIR/profiles``, else ``$XDG_CACHE_HOME/cbsim/profiles``, else
``~/.cache/cbsim/profiles``; ``CBSIM_CACHE_DIR`` set to an empty string turns the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
from pathlib import Path
from typing import Any

from cbsim.common.errors import CbsimError
from cbsim.common.output_folders import write_bytes

__all__ = ["cache_folder", "cached_json", "store_json"]

CACHE_ENV = "CBSIM_CACHE_DIR"
SUBFOLDER = "profiles"
MAX_ENTRIES = 64
"""Entries the folder keeps: the shipped profiles (a dozen) several times over."""


def cache_folder() -> Path | None:
    """Where parsed profiles are kept (None: the cache is off)."""
    root = os.environ.get(CACHE_ENV)
    if root is not None:
        return Path(root) / SUBFOLDER if root else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    try:
        base = Path(xdg) if xdg else Path.home() / ".cache"
    except RuntimeError:  # no home folder to be found: no cache
        return None
    return base / "cbsim" / SUBFOLDER


def _entry(raw: bytes) -> Path | None:
    """The cache file of a calibration file whose bytes are ``raw`` (None: the cache is off)."""
    folder = cache_folder()
    if folder is None:
        return None
    digest = hashlib.sha256(raw)
    digest.update(
        f"\0{sys.version_info.major}.{sys.version_info.minor}\0{marshal.version}".encode()
    )
    return folder / (digest.hexdigest()[:40] + ".marshal")


def cached_json(raw: bytes) -> dict[str, Any] | None:
    """The parsed JSON object of the file whose bytes are ``raw``, kept by an earlier read, or
    None (not kept, unreadable)."""
    entry = _entry(raw)
    if entry is None:
        return None
    try:
        data = marshal.loads(entry.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not isinstance(data, dict):
        return None
    with contextlib.suppress(OSError):  # marked used: the last to be evicted
        os.utime(entry)
    return data


def store_json(raw: bytes, data: dict[str, Any]) -> None:
    """Keep ``data``, the parsed JSON object of the file whose bytes are ``raw``, for later reads;
    quietly nothing where the cache is off or its folder cannot be written. Written as cbsim
    writes every file (:func:`~cbsim.common.output_folders.write_bytes`: whole, then renamed into
    place), so a reader never sees half an entry."""
    entry = _entry(raw)
    if entry is None:
        return
    try:
        write_bytes(entry, marshal.dumps(data), description="a cached parsed file")
    except (OSError, ValueError, CbsimError):
        return
    _evict_beyond(entry.parent, MAX_ENTRIES)


def _evict_beyond(folder: Path, keep: int) -> None:
    """Remove the entries of ``folder`` used least recently beyond the ``keep`` used last (another
    process may remove them first: quietly skipped)."""
    used: list[tuple[float, Path]] = []
    for path in folder.glob("*.marshal"):
        with contextlib.suppress(OSError):
            used.append((path.stat().st_mtime, path))
    used.sort(reverse=True)
    for _, path in used[keep:]:
        with contextlib.suppress(OSError):
            path.unlink()
