"""A stable argsort for compiled kernels, written out: numba's own ``argsort(kind="stable")`` takes
seconds to compile on a fresh install. The decode-run kernel orders running requests by the
outputs they have left, the per-request goodput refinement orders requests by their gains; ties
keep their position, as numpy's stable sort keeps them.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
Keys = npt.NDArray[np.int64] | npt.NDArray[np.float64]

__all__ = ["stable_argsort"]


@numba.njit(cache=True)
def stable_argsort(keys: Keys, size: int, first: IntArray, second: IntArray) -> IntArray:
    """The positions of ``keys[:size]`` in ascending key order, ties in position order (numpy's
    ``argsort(kind="stable")``), sorted in the scratch rows ``first`` and ``second`` (one of
    them is returned): insertion sort of runs of 16, then merged bottom-up."""
    for p in range(size):
        first[p] = p
    for lo in range(0, size, 16):
        hi = lo + 16 if lo + 16 < size else size
        for a in range(lo + 1, hi):
            v = first[a]
            key = keys[v]
            b = a - 1
            while b >= lo and keys[first[b]] > key:
                first[b + 1] = first[b]
                b -= 1
            first[b + 1] = v
    source, target = first, second
    width = 16
    while width < size:
        for lo in range(0, size, 2 * width):
            mid = lo + width if lo + width < size else size
            hi = lo + 2 * width if lo + 2 * width < size else size
            i, j, o = lo, mid, lo
            while i < mid and j < hi:
                if keys[source[j]] < keys[source[i]]:
                    target[o] = source[j]
                    j += 1
                else:
                    target[o] = source[i]
                    i += 1
                o += 1
            while i < mid:
                target[o] = source[i]
                i += 1
                o += 1
            while j < hi:
                target[o] = source[j]
                j += 1
                o += 1
        source, target = target, source
        width *= 2
    return source
