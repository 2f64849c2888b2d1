"""Expected tokens of a speculative step, computed the same way wherever k is chosen.

With i.i.d. conditional acceptance α a step that drafts k tokens emits on average
Σ_{j=0..k} α^j tokens (:func:`cbsim.engine.speculative.policies.expected_emitted`), never more than the
request still has to produce. The goodput policy compares candidate k by the batch's sum of these.
It is chosen both by the stepped engine (Python) and inside the compiled speculative run kernel
(:mod:`cbsim.engine.speculative.fast_run`), and the two must agree bit for bit, so both call the compiled
functions here: libm's ``log1p``/``expm1`` (numpy's vectorised ones differ in the last unit on
some CPUs) and numpy's own pairwise summation order, reproduced exactly.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@numba.njit(cache=True)
def log_alpha(alpha: float) -> float:
    """log α as :func:`emitted` takes it (log1p(α − 1), libm's), computed once per request."""
    return math.log1p(alpha - 1.0) if alpha < 1.0 else 0.0


@numba.njit(cache=True)
def emitted(alpha: float, log_a: float, k: int) -> float:
    """Σ_{j=0..k} α^j given ``log_a`` = :func:`log_alpha` (α), with libm's expm1."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return k + 1.0
    return -math.expm1((k + 1.0) * log_a) / (1.0 - alpha)


@numba.njit(cache=True)
def expected_emitted_one(alpha: float, k: int) -> float:
    """Σ_{j=0..k} α^j with libm's log1p/expm1 (see :func:`policies.expected_emitted`)."""
    return emitted(alpha, log_alpha(alpha), k)


@numba.njit(cache=True)
def _block_sum(values: FloatArray, lo: int, n: int) -> float:
    """numpy's pairwise sum of at most 128 values: eight accumulators, then the remainder."""
    if n < 8:
        total = 0.0
        for i in range(lo, lo + n):
            total += values[i]
        return total
    r0, r1, r2, r3 = values[lo], values[lo + 1], values[lo + 2], values[lo + 3]
    r4, r5, r6, r7 = values[lo + 4], values[lo + 5], values[lo + 6], values[lo + 7]
    i = 8
    end = n - (n % 8)
    while i < end:
        r0 += values[lo + i]
        r1 += values[lo + i + 1]
        r2 += values[lo + i + 2]
        r3 += values[lo + i + 3]
        r4 += values[lo + i + 4]
        r5 += values[lo + i + 5]
        r6 += values[lo + i + 6]
        r7 += values[lo + i + 7]
        i += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        total += values[lo + i]
        i += 1
    return float(total)


@numba.njit(cache=True)
def pairwise_sum(values: FloatArray) -> float:
    """numpy's float64 sum (pairwise: halves rounded to multiples of eight, blocks of at most 128
    summed by :func:`_block_sum`), so the same float; iterative, as numba caches no recursion."""
    return pairwise_sum_head(values, len(values))


@numba.njit(cache=True)
def pairwise_sum_head(values: FloatArray, count: int) -> float:
    """:func:`pairwise_sum` of ``values[:count]``."""
    if count <= 128:  # int(0): an int64, the one signature _pairwise_blocks uses, not a literal
        return _block_sum(values, int(0), count)  # noqa: RUF046, UP018
    return _pairwise_blocks(values, count)


@numba.njit(cache=True)
def _pairwise_blocks(values: FloatArray, count: int) -> float:
    depth = 64
    los = np.empty(depth, dtype=np.int64)
    sizes = np.empty(depth, dtype=np.int64)
    stages = np.empty(depth, dtype=np.int64)
    partial = np.empty(depth)
    top = 0
    done = 0
    los[0], sizes[0], stages[0] = 0, count, 0
    while top >= 0:
        lo, n = los[top], sizes[top]
        if n <= 128:
            partial[done] = _block_sum(values, lo, n)
            done += 1
            top -= 1
            continue
        half = n // 2
        half -= half % 8
        if stages[top] == 0:
            stages[top] = 1
            top += 1
            los[top], sizes[top], stages[top] = lo, half, 0
        elif stages[top] == 1:
            stages[top] = 2
            top += 1
            los[top], sizes[top], stages[top] = lo + half, n - half, 0
        else:
            done -= 1
            partial[done - 1] = partial[done - 1] + partial[done]
            top -= 1
    return float(partial[0])


@numba.njit(cache=True)
def expected_tokens(alphas: FloatArray, ks: IntArray, remaining: IntArray) -> float:
    """Σ_i min(expected_emitted(α_i, k_i), remaining_i): what a batch is expected to emit."""
    n = len(ks)
    values = np.empty(n)
    for i in range(n):
        e = expected_emitted_one(alphas[i], ks[i])
        r = float(remaining[i])
        values[i] = e if e <= r else r
    return pairwise_sum(values)


@numba.njit(cache=True)
def power(alpha: float, exponent: int) -> float:
    """α^exponent with libm's ``pow`` (numpy's vectorised power differs in the last unit on
    some CPUs), as the per-request goodput refinement orders its moves by it."""
    return math.pow(alpha, float(exponent))


@numba.njit(cache=True)
def powers(alphas: FloatArray, exponents: IntArray) -> FloatArray:
    """:func:`power` of each α and exponent."""
    out = np.empty(len(alphas))
    for i in range(len(alphas)):
        out[i] = power(alphas[i], exponents[i])
    return out
