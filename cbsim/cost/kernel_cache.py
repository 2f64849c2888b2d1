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
"""

from __future__ import annotations

from collections.abc import Iterable
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
