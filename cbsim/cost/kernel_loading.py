"""Loading cbsim's kernels from numba's cache without setting numba up to compile.

Before numba reads a compiled kernel from its cache it refreshes its target context
(``numba.core.caching.Cache.load_overload``). The first time in a process, that imports every
implementation numba ships (NumPy's array functions; linear algebra, which imports
``scipy.linalg`` to look for BLAS; the random generators; typed containers; ...) and registers
their typing and lowering: some 0.3-0.5 s of CPU, once per process. That was more than a capacity
search's ten single-replica runs together, and every ``cbsim`` command paid it before its first
simulation.

A cache entry is machine code. Loading it needs numba's runtime (NRT, the reference counting the
code calls) and none of the registries, which only the compiler reads; and the compiler
refreshes the context itself before it compiles anything (``numba.core.compiler``). So cbsim's
kernels load from the cache with the runtime initialized and nothing more (:class:`LightLoad`).
A kernel missing from the cache compiles as before. Other numba users in the process (a user's own
kernels in a notebook) are untouched: only cbsim's dispatchers change. Where numba's internals
are not as expected the kernel keeps numba's own load, and a light load that fails falls back to
it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from types import ModuleType
from typing import Any

__all__ = ["LightLoad", "load_all_lightly", "load_lightly", "package_kernels"]


class LightLoad:
    """A dispatcher cache's ``load_overload`` that initializes numba's runtime instead of
    refreshing the whole target context (see the module docstring); ``full`` is numba's own,
    used where the light load fails."""

    __slots__ = ("_guard", "_load", "_runtime", "full")

    def __init__(self, cache: Any, runtime: Any) -> None:
        self.full = cache.load_overload
        self._load = cache._load_overload
        self._guard = cache._guard_against_spurious_io_errors
        self._runtime = runtime

    def __call__(self, sig: Any, target_context: Any) -> Any:
        try:
            self._runtime.initialize(target_context)
            with self._guard():
                return self._load(sig, target_context)
        except Exception:  # numba's private load path: any surprise loads numba's way
            return self.full(sig, target_context)


def _runtime() -> Any:
    """numba's runtime system (``numba.core.runtime.rtsys``), or None where it is not there."""
    try:
        import numba.core.runtime as runtime
    except ImportError:
        return None
    rtsys = getattr(runtime, "rtsys", None)
    return rtsys if callable(getattr(rtsys, "initialize", None)) else None


def load_lightly(dispatcher: Any) -> bool:
    """Make ``dispatcher`` (a ``numba.njit(cache=True)`` function) load its cached code with
    :class:`LightLoad`; returns whether it does (False: no cache, or numba's internals differ)."""
    cache = getattr(dispatcher, "_cache", None)
    if cache is None:
        return False
    load = getattr(cache, "load_overload", None)
    if isinstance(load, LightLoad):
        return True
    if load is None or not all(
        callable(getattr(cache, name, None))
        for name in ("_load_overload", "_guard_against_spurious_io_errors")
    ):
        return False
    runtime = _runtime()
    if runtime is None:
        return False
    cache.load_overload = LightLoad(cache, runtime)
    return True


def package_kernels(package: str, modules: Iterable[ModuleType] | None = None) -> list[Any]:
    """The numba dispatchers defined in the loaded modules of ``package`` (``modules``: those to
    look in, by default every module imported so far)."""
    from numba.core.dispatcher import Dispatcher

    if modules is None:
        modules = [
            module
            for name, module in list(sys.modules.items())
            if module is not None and (name == package or name.startswith(package + "."))
        ]
    kernels = []
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Dispatcher) and value.py_func.__module__ == module.__name__:
                kernels.append(value)
    return kernels


def load_all_lightly(kernels: Iterable[Any]) -> int:
    """:func:`load_lightly` for each of ``kernels`` (a package's, from :func:`package_kernels`);
    returns how many load lightly."""
    return sum(load_lightly(kernel) for kernel in kernels)
