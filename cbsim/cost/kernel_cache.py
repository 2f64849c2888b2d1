"""Whether numba's cache holds the engine's kernels, and pricing in Python while it does not.

cbsim's hot loops are numba kernels compiled on their first call and kept in numba's cache
(``__pycache__`` beside their sources, or under ``NUMBA_CACHE_DIR``), from which a later process
loads them in milliseconds. On a fresh install the cache is empty, and a plain run's kernels take
about 3 s of CPU to compile: more than the README's quick start takes to simulate. Every kernel of
a plain run has a Python twin that computes the same floats in the same order (the pricing of
:meth:`CostModel.python_time_stats`, the decode-run planner
``cbsim.engine.decode_run.plan_decode_run_python``), so where the cache is cold a simulation can
price its first calls in Python and compile only once it has done enough work for compiling to
pay, as a tiered JIT does (:class:`ColdStart`). The results are the same either way, bit for bit.

:func:`cached` reads numba's index of a kernel's cache entries: entries exist for this source
file as it is now (numba drops an index whose source stamp or numba version differs).

numba stamps an entry with its own source file alone, yet a kernel's machine code also holds the
kernels it calls and the constants it reads, which live in other modules: after a change to
``compiled.py`` alone, the speculative run kernel in ``fast_run.py`` loaded its old machine code
and priced verify steps with the old arithmetic (found in a development checkout; an editable
install updated with ``git pull`` meets the same, silently). :func:`stamp_kernels` therefore stamps
every cbsim kernel's entries with a fingerprint of the sources of every module that defines a kernel
and of the cbsim modules those import by name as well (:func:`sources_fingerprint`): an entry
written before any of them changed no longer loads, and the kernel compiles again (or, while the
cache is cold, a plain run prices in Python, as above).
"""

from __future__ import annotations

import re
import sys
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

INTERPRETED_CALLS = 100_000
"""Pricing calls a simulation makes in Python while the cache is cold, then compiles. A plain
run's Python pricing costs some 20-30 µs a call more than its compiled one, and compiling its
kernels about 3 s: about as much as this many calls (a ski rental's break-even, so a run never
takes more than about twice what the better choice would have). The README's quick start makes
4,709 calls and so never compiles; an hour of the Azure trace 48,481."""


def cached(kernel: Any) -> bool:
    """Whether numba's cache holds compiled code of ``kernel`` (a ``numba.njit(cache=True)``
    dispatcher) for its source as it is now. True where it cannot tell (not a caching
    dispatcher, an unreadable index): then the kernel compiles or loads as numba decides."""
    cache = getattr(kernel, "_cache", None)
    index = getattr(cache, "_cache_file", None)
    load = getattr(index, "_load_index", None)
    if load is None:
        return True
    try:
        return bool(load())
    except Exception:  # numba's private index format: any surprise means "let numba decide"
        return True


def all_cached(kernels: Iterable[Any]) -> bool:
    """Whether every one of ``kernels`` is :func:`cached`."""
    return all(cached(kernel) for kernel in kernels)


_PACKAGE_IMPORT = re.compile(rb"\n[ \t]*(?:from|import) (\w+(?:\.\w+)*)")
"""A line importing a module by name (``from cbsim.x import y``, ``import cbsim.x``)."""

STAMP_TAG = "cbsim-sources"
"""The first item of a stamp :func:`stamp_kernels` wrote (numba's own stamp follows it)."""


def _module_source(name: str, package_root: Path) -> bytes:
    """The source of module ``name`` of the package at ``package_root``, found by its name alone
    (whether or not it has been imported yet); nothing where none can be read."""
    base = package_root.joinpath(*name.split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        try:
            return path.read_bytes()
        except OSError:
            continue
    return b""


def sources_fingerprint(modules: Iterable[str], package_root: Path) -> str:
    """A fingerprint of the sources of the ``modules`` (names) of the package at ``package_root``
    and of the modules of that package each imports by name (one level: a kernel's callees and
    the constants it reads are defined there): each module's name, source length and CRC-32, in
    name order (3-4 ms for cbsim's 34 modules). Read from the files, imported or not, so
    every process finds the same."""
    sources: dict[str, bytes] = {}
    for module in modules:
        text = sources[module] = _module_source(module, package_root)
        for name in _PACKAGE_IMPORT.findall(text):
            imported = name.decode()
            if imported not in sources and imported.split(".")[0] == package_root.name:
                sources[imported] = _module_source(imported, package_root)
    return ";".join(
        f"{name}:{len(text)}:{zlib.crc32(text):08x}" for name, text in sorted(sources.items())
    )


def stamp_with(kernel: Any, fingerprint: str) -> bool:
    """Stamp ``kernel``'s cache entries (a ``numba.njit(cache=True)`` dispatcher's) with
    ``fingerprint`` beside numba's stamp of its own file, before it loads or saves any; returns
    whether it could (False: no cache, or numba's internals differ: numba's stamp alone then)."""
    index = getattr(getattr(kernel, "_cache", None), "_cache_file", None)
    stamp = getattr(index, "_source_stamp", None)
    if index is None or stamp is None:
        return False
    if isinstance(stamp, tuple) and len(stamp) == 3 and stamp[0] == STAMP_TAG:
        stamp = stamp[1]  # stamped before: numba's own
    index._source_stamp = (STAMP_TAG, stamp, fingerprint)
    return True


def stamp_kernels(kernels: Sequence[Any]) -> int:
    """:func:`stamp_with` each of ``kernels`` (a package's, all imported), the fingerprint of
    their modules' sources (:func:`sources_fingerprint`); returns how many were stamped. Call it
    before any of them loads or compiles (cbsim's ``__init__`` does, once every kernel is
    imported)."""
    names = sorted({kernel.py_func.__module__ for kernel in kernels})
    if not names:
        return 0
    package = sys.modules[names[0].split(".")[0]]
    fingerprint = sources_fingerprint(names, Path(package.__file__ or "").parent)
    return sum(stamp_with(kernel, fingerprint) for kernel in kernels)


class ColdStart:
    """A cost model's pricing in Python for its next ``calls`` calls (numba's cache was cold),
    compiled after (see the module docstring). Shared by the simulations that share the cost
    model (a search's), so a search compiles once its runs together have done the work."""

    __slots__ = ("left", "started")

    def __init__(self) -> None:
        self.left = 0
        self.started = False  # once: a cost model that has compiled never goes back

    def start(self, calls: int) -> None:
        """Price the next ``calls`` calls in Python."""
        self.left = calls
        self.started = True

    def stop(self) -> None:
        """Compile from now on (a speculative run's kernels compile in any case)."""
        self.left = 0

    def interpreted(self) -> bool:
        """Whether this call prices in Python (and one fewer will)."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True
