"""The goodput k policy's per-request refinement as compiled code.

:meth:`GoodputK._refine <cbsim.engine.speculative.policies.GoodputK._refine>` starts from the per-batch
choice (:func:`~cbsim.engine.speculative.goodput_kernel.goodput_sweep`) and moves requests' k up or down
by one, highest gain (α^(k+1)) first and smallest loss (α^k) first, while the step's expected
tokens per second improve: each direction finds how many of its ordered moves to apply by doubling
and bisecting, and at most ``GoodputK.max_passes`` passes run. The same is computed here, bit for
bit: the same candidate moves in the same order (α^e by libm's ``pow`` on both sides,
:func:`~cbsim.engine.speculative.expected.powers`, and numpy's stable order), each priced with the same
floats as the policy's ``rate`` (expected tokens summed in numpy's pairwise order, draft steps and
the target's step from the compiled cost model), so the fast-forwarded run
(:mod:`cbsim.engine.speculative.fast_run`) and a stepped one choose alike. What the trials share is kept:
each request's expected tokens per k and α^e once computed, the sums of the current draft lengths
(a trial adds its moved requests' changes, all exact integers and halves), and each draft step's
price while it runs the same requests over the same keys/values.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt

from cbsim.common.stable_sort import stable_argsort
from cbsim.cost.compiled import CompiledCost, DecodeScale, decode_scale, scaled_step_seconds
from cbsim.engine.speculative.expected import emitted, pairwise_sum_head, power
from cbsim.engine.speculative.goodput_kernel import (
    NGRAM,
    SWEPT_COST,
    SWEPT_KV,
    SWEPT_LOGS,
    SWEPT_REQUESTS,
    SWEPT_VALUES,
    TIE_TOLERANCE,
    StepBase,
    _draft_step_seconds,
    goodput_sweep,
    sweep_ints,
    sweep_reals,
)
from cbsim.engine.speculative.policies import GoodputK
from cbsim.engine.speculative.proposers import NGRAM_SECONDS_PER_REQUEST

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# the policy's passes of per-request moves
MAX_PASSES = GoodputK.max_passes
REFINE_REALS, REFINE_INTS = 5, 11

# rows of the refinement's scratch: real (sort keys, expected tokens of a trial and at the
# current ks, log α, a draft step's price) and integer (caps, moving requests, the moves' order,
# a draft step's requests and keys/values read as last priced, the requests drafting more than s
# and their context sums at the current ks (COUNTS, SUMS) and in a trial, two rows for sorting)
KEYS, VALUES, LOGS, STEP_COST, BASE_VALUES = range(5)
(
    CAPS,
    MEMBERS,
    ACTIVE,
    ORDER,
    STEP_REQUESTS,
    STEP_KV,
    COUNTS,
    SUMS,
    SORTED,
    SPARE,
    ACTIVE_CONTEXT,
) = range(11)


@numba.njit(cache=True)
def refine_scratch(n: int, k_max: int) -> tuple[FloatArray, FloatArray, IntArray]:
    """Scratch of :func:`refine_per_request` for up to ``n`` requests and draft lengths to
    ``k_max``: each request's expected tokens per k and α^e per exponent e (columns k_max + 1
    + e), real rows, integer rows."""
    rows = n if n > k_max else k_max + 1
    return (
        np.empty((rows, 2 * k_max + 3)),
        np.empty((REFINE_REALS, rows)),
        np.empty((REFINE_INTS, rows), dtype=np.int64),
    )


@numba.njit(cache=True)
def refine_per_request(
    n: int,
    alphas: FloatArray,
    remaining: IntArray,
    contexts: IntArray,
    k_max: int,
    target: CompiledCost,
    proposer: int,
    draft: CompiledCost,
    base: StepBase,
    current: float,
    ks: IntArray,
    table: FloatArray,
    reals: FloatArray,
    ints: IntArray,
    swept_reals: FloatArray,
    swept_ints: IntArray,
) -> float:
    """``GoodputK._refine`` of the first ``n`` requests' per-batch choice ``ks`` (refined in
    place; ``current`` its tokens per second, returns the refined one; the draft steps the
    sweep priced are in its scratch ``swept_reals``, ``swept_ints``): passes that move
    requests up by one (highest gain α^(k+1) first) and down by one (smallest loss α^k first)
    while the ratio improves, each pricing a step as ``GoodputK.choose``'s ``rate`` does, the
    same floats in the same order (expected tokens by :func:`expected_tokens`'s terms and
    numpy's pairwise sum, draft plus target seconds as the stepped ``step_time``)."""
    keys = reals[KEYS]
    caps = ints[CAPS]
    members = ints[MEMBERS]
    context_sum = 0
    for s in range(k_max):  # the draft steps the sweep priced (requests -1: none)
        ints[STEP_REQUESTS, s] = swept_ints[SWEPT_REQUESTS, s]
        ints[STEP_KV, s] = swept_ints[SWEPT_KV, s]
        reals[STEP_COST, s] = swept_reals[SWEPT_COST, s]
    for i in range(n):
        cap = remaining[i] - 1
        cap = 0 if cap < 0 else (k_max if cap > k_max else cap)
        caps[i] = cap
        context_sum += contexts[i]
        # expected tokens per k computed when first used, but at the chosen k (the sweep's)
        reals[LOGS, i] = swept_reals[SWEPT_LOGS, i]
        for k in range(cap + 1):
            table[i, k] = math.nan
        table[i, ks[i]] = swept_reals[SWEPT_VALUES, i]
        for e in range(k_max + 2):
            table[i, k_max + 1 + e] = math.nan
    scale = decode_scale(
        target,
        base.decode_requests + n,
        (base.decode_kv_tokens - base.decode_tokens) + context_sum,
    )
    sums = (0, 0, 0.0)
    stale = True  # whether ks moved since the trials' sums were taken
    for _ in range(MAX_PASSES):
        moved = False
        for step in (1, -1):
            # int(0), here and in the other kernels: an int64, where the literal 0 has numba
            # compile each kernel called with it once more for the literal (a second on a fresh
            # install: type inference calls it before the loop's int64 reaches the variable)
            size = int(0)  # noqa: RUF046, UP018
            for i in range(n):
                if (step == 1 and ks[i] < caps[i]) or (step == -1 and ks[i] > 0):
                    members[size] = i
                    keys[size] = _gain(table, i, ks[i] + 1 if step == 1 else ks[i], k_max,
                                       alphas[i], step)  # fmt: skip
                    size += 1
            if size == 0:
                continue
            if stale:
                sums = _set_base(
                    n, ks, contexts, alphas, remaining, k_max, base, table, reals, ints
                )
                stale = False
            # the first move alone (the smallest key, the earliest of equal ones) first: when it
            # does not pay, as is usual, no prefix is applied and the order is not needed
            first = 0
            for p in range(1, size):
                if keys[p] < keys[first]:
                    first = p
            order = ints[ORDER]
            order[0] = members[first]
            r = _moved_rate(n, ks, int(1), step, alphas, remaining, contexts, k_max, target,  # noqa: RUF046, UP018
                            proposer, draft, base, scale, sums, table, reals, ints)  # fmt: skip
            if not _better(r, current, step == 1):
                continue
            sorted_at = stable_argsort(keys, size, ints[SORTED], ints[SPARE])
            for m in range(size):
                order[m] = members[sorted_at[m]]
            current, changed = _apply_prefix(
                n, ks, current, size, step, alphas, remaining, contexts, k_max, target, proposer,
                draft, base, scale, sums, table, reals, ints,
            )  # fmt: skip
            moved = moved or changed
            stale = stale or changed
        if not moved:
            break
    return current


@numba.njit(cache=True, inline="always")
def _gain(table: FloatArray, i: int, exponent: int, k_max: int, alpha: float, step: int) -> float:
    """Request i's sort key: −α^e moving up (highest gain first), α^e moving down (smallest loss
    first), α^e computed once per request and exponent (column k_max + 1 + e of ``table``)."""
    column = k_max + 1 + exponent
    gain = table[i, column]
    if math.isnan(gain):
        gain = power(alpha, exponent)
        table[i, column] = gain
    return float(-gain if step == 1 else gain)


@numba.njit(cache=True)
def _apply_prefix(
    n: int,
    ks: IntArray,
    current: float,
    size: int,
    step: int,
    alphas: FloatArray,
    remaining: IntArray,
    contexts: IntArray,
    k_max: int,
    target: CompiledCost,
    proposer: int,
    draft: CompiledCost,
    base: StepBase,
    scale: DecodeScale,
    sums: tuple[int, int, float],
    table: FloatArray,
    reals: FloatArray,
    ints: IntArray,
) -> tuple[float, bool]:
    """``GoodputK._apply_prefix``: the first m moves of the order (k += ``step``) for the m found
    by doubling while the ratio improves, then bisecting (a move up must raise the ratio, one
    down need only tie); applied to ``ks`` in place."""
    strict = step == 1
    best_m = 0
    best_rate = current
    hi = size + 1
    m = int(1)  # noqa: RUF046, UP018  (not the literal 1: see refine_per_request)
    while m <= size:
        r = _moved_rate(n, ks, m, step, alphas, remaining, contexts, k_max, target, proposer,
                        draft, base, scale, sums, table, reals, ints)  # fmt: skip
        if not _better(r, best_rate, strict):
            hi = m
            break
        best_m = m
        best_rate = r
        if m == size:
            break
        m = 2 * m if 2 * m < size else size
    while hi - best_m > 1 and hi <= size:
        mid = (best_m + hi) // 2
        r = _moved_rate(n, ks, mid, step, alphas, remaining, contexts, k_max, target, proposer,
                        draft, base, scale, sums, table, reals, ints)  # fmt: skip
        if _better(r, best_rate, strict):
            best_m = mid
            best_rate = r
        else:
            hi = mid
    if best_m == 0:
        return current, False
    order = ints[ORDER]
    for j in range(best_m):
        ks[order[j]] += step
    return best_rate, True


@numba.njit(cache=True, inline="always")
def _better(r: float, ref: float, strict: bool) -> bool:
    if strict:
        return r > ref * (1.0 + TIE_TOLERANCE)
    return r >= ref * (1.0 - TIE_TOLERANCE)


@numba.njit(cache=True)
def _set_base(
    n: int,
    ks: IntArray,
    contexts: IntArray,
    alphas: FloatArray,
    remaining: IntArray,
    k_max: int,
    base: StepBase,
    table: FloatArray,
    reals: FloatArray,
    ints: IntArray,
) -> tuple[int, int, float]:
    """What the trials of one direction start from (the current ``ks``): each request's expected
    tokens, per draft step s the requests drafting more than s and their context sums (COUNTS,
    SUMS), and the verify sums (tokens, keys/values read, causal pairs with ``base``'s)."""
    values = reals[BASE_VALUES]
    logs = reals[LOGS]
    counts = ints[COUNTS]
    context_sums = ints[SUMS]
    histogram = ints[ACTIVE]
    histogram_context = ints[ACTIVE_CONTEXT]
    for s in range(k_max + 1):
        histogram[s] = 0
        histogram_context[s] = 0
    tokens = 0
    kv_tokens = 0
    pairs = base.decode_pairs
    for i in range(n):
        k = ks[i]
        value = table[i, k]
        if math.isnan(value):  # expected tokens as expected_tokens computes them, once per k
            e = emitted(alphas[i], logs[i], k)
            r = float(remaining[i])
            value = e if e <= r else r
            table[i, k] = value
        values[i] = value
        histogram[k] += 1
        histogram_context[k] += contexts[i]
        q = k + 1
        tokens += q
        kv_tokens += contexts[i] + q
        pairs += q * contexts[i] + q * (q + 1) * 0.5
    above = 0
    above_context = 0
    for s in range(k_max, -1, -1):
        counts[s] = above
        context_sums[s] = above_context
        above += histogram[s]
        above_context += histogram_context[s]
    return tokens, kv_tokens, pairs


@numba.njit(cache=True)
def _moved_rate(
    n: int,
    ks: IntArray,
    m: int,
    step: int,
    alphas: FloatArray,
    remaining: IntArray,
    contexts: IntArray,
    k_max: int,
    target: CompiledCost,
    proposer: int,
    draft: CompiledCost,
    base: StepBase,
    scale: DecodeScale,
    sums: tuple[int, int, float],
    table: FloatArray,
    reals: FloatArray,
    ints: IntArray,
) -> float:
    """Expected tokens per predicted second with the first ``m`` moves of the order applied to
    ``ks`` (whose sums :func:`_set_base` took): the moved requests' changes added to those sums
    (all exact: integers and halves far below 2**53), the expected tokens summed in numpy's
    pairwise order, each draft step priced once per requests and keys/values read."""
    values = reals[VALUES]
    base_values = reals[BASE_VALUES]
    logs = reals[LOGS]
    order = ints[ORDER]
    active = ints[ACTIVE]
    active_context = ints[ACTIVE_CONTEXT]
    for i in range(n):
        values[i] = base_values[i]
    for s in range(k_max + 1):
        active[s] = ints[COUNTS, s]
        active_context[s] = ints[SUMS, s]
    tokens = sums[0] + step * m
    kv_tokens = sums[1] + step * m
    pairs = sums[2]
    for j in range(m):
        i = order[j]
        k = ks[i]
        moved = k + step
        c = contexts[i]
        q = k + 1
        q_moved = moved + 1
        pairs += (q_moved * c + q_moved * (q_moved + 1) * 0.5) - (q * c + q * (q + 1) * 0.5)
        value = table[i, moved]
        if math.isnan(value):
            e = emitted(alphas[i], logs[i], moved)
            r = float(remaining[i])
            value = e if e <= r else r
            table[i, moved] = value
        values[i] = value
        if step == 1:  # draft step k now runs it too
            active[k] += 1
            active_context[k] += c
        else:  # draft step k - 1 no longer does
            active[moved] -= 1
            active_context[moved] -= c
    expected = pairwise_sum_head(values, n)
    drafting = 0.0
    if proposer == NGRAM:
        drafting = NGRAM_SECONDS_PER_REQUEST * active[0]
    else:
        step_requests = ints[STEP_REQUESTS]
        step_kv = ints[STEP_KV]
        step_cost = reals[STEP_COST]
        s = 0
        while s < k_max and active[s] > 0:  # as draft_seconds: steps 0 .. max k - 1
            requests = active[s]
            kv = active_context[s] + requests * (s + 1)
            if step_requests[s] != requests or step_kv[s] != kv:
                step_requests[s] = requests
                step_kv[s] = kv
                step_cost[s] = _draft_step_seconds(proposer, draft, requests, kv)
            drafting += step_cost[s]
            s += 1
    seconds = drafting + scaled_step_seconds(
        target, base.requests + n, base.tokens + tokens, base.sampled + tokens,
        base.prefill_layers_s, base.decode_tokens + tokens, base.decode_kv_tokens + kv_tokens,
        pairs, scale, base.decode_requests + n,
    )  # fmt: skip
    if not seconds > 0.0:
        raise ValueError("step_time must be positive")
    return expected / seconds


@numba.njit(cache=True)
def draft_steps_cached(
    kind: int,
    draft: CompiledCost,
    ks: IntArray,
    contexts: IntArray,
    n: int,
    counts: IntArray,
    sums: IntArray,
    step_requests: IntArray,
    step_kv: IntArray,
    step_cost: FloatArray,
) -> float:
    """:func:`draft_seconds` of a model proposer, each draft step s's price kept in
    ``step_cost[s]`` (with its requests and keys/values read; requests -1: none) and reused while
    the step runs as many requests over as many keys/values (a move changes one or two steps;
    the sweep priced the chosen k's): the same prices added in the same order. ``counts`` and
    ``sums``: scratch of at least k_max + 1 entries."""
    k_high = 0
    for i in range(n):
        if ks[i] > k_high:
            k_high = ks[i]
    for k in range(k_high + 1):
        counts[k] = 0
        sums[k] = 0
    for i in range(n):
        counts[ks[i]] += 1
        sums[ks[i]] += contexts[i]
    # from the top down: counts[s], sums[s] become the requests drafting at least s and theirs
    for s in range(k_high - 1, 0, -1):
        counts[s] += counts[s + 1]
        sums[s] += sums[s + 1]
    total = 0.0
    for s in range(k_high):
        active = counts[s + 1]  # step s runs the requests with k > s
        kv = sums[s + 1] + active * (s + 1)
        if step_requests[s] != active or step_kv[s] != kv:
            step_requests[s] = active
            step_kv[s] = kv
            step_cost[s] = _draft_step_seconds(kind, draft, active, kv)
        total += step_cost[s]
    return total


@numba.njit(cache=True)
def goodput_k_per_request(
    alphas: FloatArray,
    remaining: IntArray,
    contexts: IntArray,
    k_max: int,
    target: CompiledCost,
    proposer: int,
    draft: CompiledCost,
    base: StepBase,
) -> IntArray:
    """``GoodputK.choose`` with ``per_request`` on: the per-batch choice
    (:func:`~cbsim.engine.speculative.goodput_kernel.goodput_k`) refined request by request
    (:func:`refine_per_request`), for the decoding requests of an iteration whose other work is
    ``base``."""
    n = len(alphas)
    best = np.empty(n, dtype=np.int64)
    swept_reals = sweep_reals(n, k_max)
    swept_ints = sweep_ints(n, k_max)
    rate = goodput_sweep(
        n, alphas, remaining, contexts, k_max, target, proposer, draft, base, swept_reals,
        swept_ints, best,
    )  # fmt: skip
    table, reals, ints = refine_scratch(n, k_max)
    refine_per_request(
        n, alphas, remaining, contexts, k_max, target, proposer, draft, base, rate, best, table,
        reals, ints, swept_reals, swept_ints,
    )  # fmt: skip
    return best
