"""Calling a compiled kernel many times with arguments of the same types, without re-dispatching.

A numba function called from Python first works out the numba type of every argument to find
the machine code compiled for them. For the decode-run kernels that is dozens of arguments, two
of them named tuples of arrays and one a ``numpy.random.Generator`` whose type numba resolves in
Python: some 15 µs per call, as much as a dozen speculative iterations cost, and a simulation
makes one call per decode run (one per arrival on a busy replica).

Within one simulation every call passes the same kinds of values (the same array dtypes and
layouts, the same cost-table tuple type, the same generator class), so :class:`KernelCall`
dispatches the first call normally, keeps the entry point numba chose for those types, and
calls it directly from then on: the same machine code, without the type search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["KernelCall"]


@dataclass(slots=True)
class KernelCall:
    """``kernel`` (a numba dispatcher) called with arguments whose types never change from call
    to call (the caller's promise; a new :class:`KernelCall` for another set of types)."""

    kernel: Any
    _entry: Any = field(default=None, repr=False)

    def __call__(self, *args: Any) -> Any:
        entry = self._entry
        if entry is not None:
            return entry(*args)
        result = self.kernel(*args)  # compiles or loads the machine code for these types
        signature = tuple(self.kernel.typeof_pyval(a) for a in args)
        self._entry = self.kernel.overloads[signature].entry_point
        return result
