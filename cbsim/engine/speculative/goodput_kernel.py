"""The goodput k policy as compiled code: the draft length that maximises a step's expected tokens
per second, chosen in one pass over the candidates.

:class:`~cbsim.engine.speculative.policies.GoodputK` prices each candidate k through the cost model; the
same choice is computed here from a compiled cost model (:mod:`cbsim.cost.compiled`), both inside the
speculative run kernel (:mod:`cbsim.engine.speculative.fast_run`, pure decode steps) and for the steps
that mix prefill chunks with decoding requests (:meth:`SpeculativeDecoding.plan
<cbsim.engine.speculative.decoder.SpeculativeDecoding.plan>`), bit for bit as the Python policy: the
same floats in the same order. What the candidates share is carried from one to the next, and
the sweep stops once no larger k can win: a bound on the tokens each larger k could add against
the draft steps it must pay for, with a margin far above float rounding.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from cbsim.cost import BatchStats, CostModel
from cbsim.cost.compiled import (
    EXTRA,
    HEAD,
    HEAD_FLOOR,
    LINEAR,
    LINEAR_FLOOR,
    TOKEN,
    CompiledCost,
    DecodeScale,
    decode_scale,
    decode_seconds,
    mla_verify_slack,
    scaled_step_seconds,
    step_seconds,
)
from cbsim.cost.kernel_call import KernelCall
from cbsim.engine.speculative.expected import emitted, log_alpha, pairwise_sum_head
from cbsim.engine.speculative.policies import GoodputK
from cbsim.engine.speculative.proposers import (
    NGRAM_SECONDS_PER_REQUEST,
    DraftModel,
    EagleHead,
    MtpModule,
    Ngram,
    Proposer,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# the policy's tie margin, a class constant there, as a plain number the kernel can read
TIE_TOLERANCE = GoodputK.tie_tolerance
# relative slack of the sweep's early stop (float rounding is ~1e-15 relative)
STOP_MARGIN = 1e-9
# rows of the sweep's scratch and of the per-request refinement's
SWEEP_REALS, SWEEP_INTS = 8, 5
# rows the sweep leaves for the per-request refinement: each request's log α, its expected tokens
# at the chosen k, the draft steps it priced (seconds; requests, keys/values)
SWEPT_LOGS, SWEPT_VALUES, SWEPT_COST, SWEPT_REQUESTS, SWEPT_KV = 0, 5, 4, 3, 4
# rows of the early stop's bound: each request's α^j and its expected tokens gained from k on
POWERS, GAINS = 6, 7
# proposers (EAGLE: any fused head, an EAGLE head's or an MTP module's)
NGRAM, DRAFT_MODEL, EAGLE = 0, 1, 2


# --------------------------------------------------------------------------- pricing a step


@numba.njit(cache=True, inline="always")
def _draft_step_seconds(
    kind: int, draft: CompiledCost, requests: int, kv_tokens: int
) -> float:  # fmt: skip
    if kind == EAGLE:
        return float(decode_seconds(draft, requests, kv_tokens) + draft.tables[EXTRA, requests])
    return decode_seconds(draft, requests, kv_tokens)


@numba.njit(cache=True)
def draft_seconds(
    kind: int, draft: CompiledCost, ks: IntArray, contexts: IntArray, n: int
) -> float:  # fmt: skip
    """The proposer's drafting time (``Proposer.draft_time``) for the first ``n`` requests' draft
    lengths ``ks``."""
    if kind == NGRAM:
        drafting = 0
        for i in range(n):
            if ks[i] > 0:
                drafting += 1
        return NGRAM_SECONDS_PER_REQUEST * drafting
    if n == 0:
        return 0.0
    k_high = 0
    for i in range(n):
        if ks[i] > k_high:
            k_high = ks[i]
    total = 0.0
    for s in range(k_high):
        active = int(0)  # noqa: RUF046, UP018  (not the literal 0: decode_attention compiled for it too)
        kv = 0
        for i in range(n):
            if ks[i] > s:
                active += 1
                kv += contexts[i]
        total += _draft_step_seconds(kind, draft, active, kv + active * (s + 1))
    return total


class StepBase(NamedTuple):
    """The work of an iteration beside its decoding requests' verify entries (prefill chunks),
    as the sums of a :class:`~cbsim.cost.BatchStats` the goodput sweep adds them to: requests,
    tokens and sampled positions, every layer's prefill attention seconds, and the decode-sized
    entries among them (a one-token chunk is priced as decode attention)."""

    requests: int
    tokens: int
    sampled: int
    prefill_layers_s: float  # every layer's prefill attention
    decode_tokens: int
    decode_kv_tokens: int
    decode_pairs: float
    decode_requests: int


@numba.njit(cache=True)
def no_base() -> StepBase:
    """A step of decoding requests only."""
    return StepBase(0, 0, 0, 0.0, 0, 0, 0.0, 0)


@numba.njit(cache=True)
def goodput_k(
    alphas: FloatArray,
    remaining: IntArray,
    contexts: IntArray,
    k_max: int,
    target: CompiledCost,
    proposer: int,
    draft: CompiledCost,
    base: StepBase,
) -> IntArray:
    """The per-batch goodput choice (``GoodputK.choose`` with ``per_request`` off): the k
    maximising expected tokens per second of the predicted step, for the decoding requests of
    an iteration whose other work is ``base`` (:func:`no_base` in a pure decode step); see
    :func:`goodput_sweep` (per request: :func:`~cbsim.engine.speculative.goodput_refine.goodput_k_per_request`)."""
    n = len(alphas)
    best = np.empty(n, dtype=np.int64)
    goodput_sweep(
        n, alphas, remaining, contexts, k_max, target, proposer, draft, base,
        sweep_reals(n, k_max), sweep_ints(n, k_max), best,
    )  # fmt: skip
    return best


@numba.njit(cache=True)
def sweep_reals(n: int, k_max: int) -> FloatArray:
    """Scratch of :func:`goodput_sweep` for up to ``n`` requests and draft lengths to ``k_max``
    (real rows)."""
    return np.empty((SWEEP_REALS, max(n, k_max + 1)))


@numba.njit(cache=True)
def sweep_ints(n: int, k_max: int) -> IntArray:
    """Scratch of :func:`goodput_sweep` for up to ``n`` requests and draft lengths to ``k_max``
    (integer rows)."""
    return np.empty((SWEEP_INTS, max(n, k_max + 1)), dtype=np.int64)


@numba.njit(cache=True)
def goodput_sweep(
    n: int,
    alphas: FloatArray,
    remaining: IntArray,
    contexts: IntArray,
    k_max: int,
    target: CompiledCost,
    proposer: int,
    draft: CompiledCost,
    base: StepBase,
    reals: FloatArray,
    ints: IntArray,
    best: IntArray,
) -> float:
    """:func:`goodput_k` (per batch) of the first ``n`` requests into ``best``, with the caller's
    scratch (:func:`sweep_reals`, :func:`sweep_ints`), so a kernel choosing k every iteration
    allocates nothing; returns the chosen candidate's tokens per second.

    Candidate k runs request i at min(k, cap_i), so what a candidate shares with the one before
    is carried over rather than recomputed, in the same float order as
    :func:`~cbsim.engine.speculative.expected.expected_tokens` and ``SpeculativeDecoding._target_time``
    (entries grouped by k, ascending): each request's log α once, its expected tokens only while
    its cap exceeds k, the target's verify sums over the requests capped below k as running
    prefix sums (groups in ascending k), the draft steps one per k."""
    logs = reals[0]
    values = reals[1]
    raw = reals[2]  # expected tokens before the cap at the outputs left
    limits = reals[3]  # Σ_j α^j over all j: 1 / (1 − α)
    caps = ints[0]
    capped = ints[1]
    capped_context = ints[2]
    for s in range(k_max):
        ints[SWEPT_REQUESTS, s] = -1  # draft step s not priced (yet)
    top = int(0)  # noqa: RUF046, UP018  (not the literal 0: _beyond_reach compiled for it too)
    for i in range(n):
        cap = remaining[i] - 1
        cap = 0 if cap < 0 else (k_max if cap > k_max else cap)
        caps[i] = cap
        if cap > top:
            top = cap
        logs[i] = log_alpha(alphas[i])
        limits[i] = 1.0 / (1.0 - alphas[i]) if alphas[i] < 1.0 else math.inf
        raw[i] = 1.0
        e = 1.0
        r = float(remaining[i])
        values[i] = e if e <= r else r
        reals[SWEPT_VALUES, i] = values[i]
    # requests per cap and their context sums (the verify groups of the capped requests)
    for c in range(top + 1):
        capped[c] = 0
        capped_context[c] = 0
    for i in range(n):
        capped[caps[i]] += 1
        capped_context[caps[i]] += contexts[i]
    best_k = 0
    uncapped = n  # requests with cap >= k
    uncapped_context = 0
    for i in range(n):
        uncapped_context += contexts[i]
    scale = decode_scale(
        target,
        base.decode_requests + n,
        (base.decode_kv_tokens - base.decode_tokens) + uncapped_context,
    )
    prefix_tokens = 0
    prefix_kv = 0
    prefix_pairs = base.decode_pairs
    drafted = 0.0
    tokens = pairwise_sum_head(values, n)
    seconds = _verify_from_groups(
        target, base, scale, n, prefix_tokens, prefix_kv, prefix_pairs, uncapped,
        uncapped_context, 0,
    )  # fmt: skip
    best_rate = tokens / seconds
    # the bound needs attention that never falls with more verify tokens but for what it takes
    # off (an MLA module's extra query tokens: mla_verify_slack); a transfer GPU's kernel ratio
    # has corrections of its own, so there the sweep goes on
    can_stop = (
        target.overhead_rises and target.transfer_at < 0 and not (target.mla and target.window)
    )
    least_draft = -1.0  # the least a draft step can cost (priced at the sweep's first bound)
    verified = n  # the verify tokens of the candidate priced last
    for k in range(1, top + 1):
        # requests whose cap is k - 1 stay there from now on: their group joins the prefix
        count = capped[k - 1]
        if count > 0:
            q = k
            context = capped_context[k - 1]
            prefix_tokens += count * q
            prefix_kv += context + count * q
            prefix_pairs += q * context + count * q * (q + 1) * 0.5
        uncapped -= count
        uncapped_context -= capped_context[k - 1]
        before = drafted
        if proposer == NGRAM:
            drafting = 0
            for i in range(n):
                if caps[i] > 0:
                    drafting += 1
            drafted = NGRAM_SECONDS_PER_REQUEST * drafting
        else:
            step_kv = uncapped_context + uncapped * k
            step_s = _draft_step_seconds(proposer, draft, uncapped, step_kv)
            drafted += step_s
            # kept: the per-request refinement prices the same draft steps again
            reals[SWEPT_COST, k - 1] = step_s
            ints[SWEPT_REQUESTS, k - 1] = uncapped
            ints[SWEPT_KV, k - 1] = step_kv
        # every candidate from k on pays at least candidate k - 1's step (but for what its token
        # kernels could save at more tokens) and this draft step
        # (and each draft step after it at least the least a draft step can cost)
        if can_stop:
            if least_draft < 0.0:
                least_draft = _least_draft_step(proposer, draft, n)
            if _beyond_reach(
                tokens,
                seconds + (drafted - before) - _token_slack(target, base, verified)
                - mla_verify_slack(target, base.decode_tokens + verified,
                                   base.decode_requests + n, scale),
                best_rate, k - 1, top, least_draft, n, caps, alphas, values, raw, limits,
                remaining, reals[POWERS], reals[GAINS],
            ):  # fmt: skip
                break
        for i in range(n):
            if caps[i] >= k:
                e = emitted(alphas[i], logs[i], k)
                raw[i] = e
                r = float(remaining[i])
                values[i] = e if e <= r else r
        seconds = drafted + _verify_from_groups(
            target, base, scale, n, prefix_tokens, prefix_kv, prefix_pairs, uncapped,
            uncapped_context, k,
        )  # fmt: skip
        tokens = pairwise_sum_head(values, n)
        verified = prefix_tokens + uncapped * (k + 1)
        rate = tokens / seconds
        if rate > best_rate * (1.0 + TIE_TOLERANCE):
            best_k = k
            best_rate = rate
            for i in range(n):
                reals[SWEPT_VALUES, i] = values[i]
    for i in range(n):
        best[i] = best_k if caps[i] > best_k else caps[i]
    return best_rate


@numba.njit(cache=True)
def _token_slack(target: CompiledCost, base: StepBase, verified: int) -> float:
    """How much less the token kernels (GEMMs, LM head) of a step with more than ``verified``
    verify tokens could cost than they do at ``verified`` (their tables need not rise everywhere:
    calibrated GEMM efficiencies jump between tile shapes)."""
    tokens = base.tokens + verified
    sampled = base.sampled + verified
    tables = target.tables
    now = tables[LINEAR, tokens] + tables[HEAD, sampled]
    floor = tables[LINEAR_FLOOR, tokens] + tables[HEAD_FLOOR, sampled]
    return float(now - floor)


@numba.njit(cache=True)
def _least_draft_step(kind: int, draft: CompiledCost, n: int) -> float:
    """A floor under any draft step of at most ``n`` requests: the least over 1 .. ``n`` requests
    of the step with its attention left out (attention costs no less than nothing, and a step
    costs no less with more kernel time); 0 for n-gram drafting, whose time does not grow with k."""
    if kind == NGRAM:
        return 0.0
    tables = draft.tables
    least = math.inf
    for r in range(1, n + 1):
        step = step_seconds(draft, tables[TOKEN, r], r, r)
        if kind == EAGLE:
            step = step + tables[EXTRA, r]
        if step < least:
            least = step
    return least if least > 0.0 else 0.0


@numba.njit(cache=True)
def _beyond_reach(
    tokens: float,
    seconds: float,
    best_rate: float,
    k: int,
    top: int,
    least_draft: float,
    n: int,
    caps: IntArray,
    alphas: FloatArray,
    values: FloatArray,
    raw: FloatArray,
    limits: FloatArray,
    remaining: IntArray,
    powers: FloatArray,
    gains: FloatArray,
) -> bool:
    """Whether no candidate above k (up to ``top``) can beat ``best_rate`` (so the sweep may
    stop). Candidate k + 1 + j adds to a request at most Σ_{m=k+1..k+1+j} α^m expected tokens
    (never more than 1/(1−α) − E_k, nor past its outputs left), while its predicted step costs
    at least ``seconds`` (every draft step adds time; more verified tokens add attention and CPU
    time, and the caller has taken off what the token kernels could save) plus j more draft
    steps of at least ``least_draft`` each. The bound carries a margin far above float rounding,
    so a stop never changes the choice the full sweep makes. ``powers`` and ``gains``: scratch."""
    beaten = best_rate * (1.0 + TIE_TOLERANCE)
    for j in range(top - k):
        gain = 0.0
        for i in range(n):
            if caps[i] > k:
                if j == 0:
                    # α^(k+1) from E_k = (1 − α^(k+1)) / (1 − α)
                    alpha = alphas[i]
                    power = 1.0 - (1.0 - alpha) * raw[i] if alpha < 1.0 else 1.0
                    power = 0.0 if power < 0.0 else power
                    powers[i] = power
                    gains[i] = power
                else:
                    powers[i] *= alphas[i]
                    gains[i] += powers[i]
                room = float(remaining[i]) - values[i]
                more = limits[i] - raw[i]
                more = 0.0 if more < 0.0 else more
                more = more if more < gains[i] else gains[i]
                gain += more if more < room else room
        bound = (tokens + gain) / (seconds + j * least_draft)
        if not bound * (1.0 + STOP_MARGIN) <= beaten:  # (a NaN bound stops nothing)
            return False
    return True


@numba.njit(cache=True, inline="always")
def _verify_from_groups(
    target: CompiledCost,
    base: StepBase,
    scale: DecodeScale,
    n: int,
    tokens: int,
    kv_tokens: int,
    pairs: float,
    count: int,
    context: int,
    k: int,
) -> float:
    """The target's step with the verify sums over the groups below k, the group at k and the
    batch's decode scale (the same for every candidate: the caches before the step) added
    to ``base`` (none in a pure decode step)."""
    if count > 0:
        q = k + 1
        tokens += count * q
        kv_tokens += context + count * q
        pairs += q * context + count * q * (q + 1) * 0.5
    return scaled_step_seconds(
        target, base.requests + n, base.tokens + tokens, base.sampled + tokens,
        base.prefill_layers_s, base.decode_tokens + tokens, base.decode_kv_tokens + kv_tokens,
        pairs, scale, base.decode_requests + n,
    )  # fmt: skip


# --------------------------------------------------------------------------- the Python side


class CompiledProposer(NamedTuple):
    """A proposer as the compiled code prices it: its kind code and, for a fused head (EAGLE's or
    an MTP module's), the fusion GEMM (n, k) its cost tables add per draft step."""

    kind: int
    extra_gemm: tuple[int, int] | None


def compiled_proposer(proposer: Proposer, target: CostModel) -> CompiledProposer | str:
    """How the compiled code prices ``proposer`` drafting for ``target``, or why it cannot."""
    extra: tuple[int, int] | None = None
    if isinstance(proposer, EagleHead | MtpModule):  # a fused head: layers, projection, LM head
        kind = EAGLE
        extra = (proposer.shape.hidden_size, proposer._fusion_k)
    elif isinstance(proposer, DraftModel):
        kind = DRAFT_MODEL
    elif isinstance(proposer, Ngram):
        kind = NGRAM
    else:
        return f"the {proposer.kind} proposer is not compiled"
    if target.compiled(1) is None:
        return "the cost model does not compile (a batch split over ranks or pipeline stages)"
    if (
        isinstance(proposer, EagleHead | MtpModule | DraftModel)
        and proposer.cost.compiled(1, extra) is None
    ):
        return "the proposer's cost model does not compile"
    return CompiledProposer(kind, extra)


def step_base(target: CostModel, prefill: BatchStats) -> StepBase:
    """``prefill`` (a step's work beside its decoding requests) as the sweep's :class:`StepBase`
    (its prefill attention priced compiled where the model compiles: the same float)."""
    return StepBase(
        int(prefill.num_requests),
        int(prefill.num_tokens),
        int(prefill.sampled_tokens),
        float(
            target.whole_prefill_attention(
                prefill.prefill_tokens,
                prefill.prefill_kv_tokens,
                prefill.prefill_pairs,
                prefill.prefill_requests,
            )
        ),
        int(prefill.decode_tokens),
        int(prefill.decode_kv_tokens),
        float(prefill.decode_pairs),
        int(prefill.decode_requests),
    )


def choose_goodput(
    drafter: CompiledProposer,
    k_max: int,
    target: CostModel,
    proposer: Proposer,
    alphas: FloatArray,
    remaining: IntArray,
    contexts: IntArray,
    prefill: BatchStats,
    kernel: KernelCall | None = None,
    per_request: bool = False,
) -> IntArray | None:
    """:meth:`GoodputK.choose <cbsim.engine.speculative.policies.GoodputK.choose>` (per batch, or with
    ``per_request`` refined per request) of the decoding requests of a step whose other work is
    ``prefill``, compiled; None when the cost models do not compile for this step. ``kernel``:
    the caller's call of :func:`goodput_k` or, per request (then required),
    :func:`~cbsim.engine.speculative.goodput_refine.goodput_k_per_request` (dispatched once,
    :mod:`cbsim.cost.kernel_call`)."""
    count = len(alphas)
    compiled = target.compiled(prefill.num_tokens + count * (k_max + 1))
    if compiled is None:
        return None
    if drafter.kind == NGRAM:
        draft = compiled
    else:
        draft = proposer.cost.compiled(count, drafter.extra_gemm)  # type: ignore[attr-defined]
        if draft is None:
            return None
    if kernel is None and per_request:
        raise ValueError("the per-request choice needs its kernel (goodput_k_per_request)")
    call: Any = goodput_k if kernel is None else kernel
    chosen: IntArray = call(
        np.clip(alphas, 0.0, 1.0),
        np.ascontiguousarray(remaining, dtype=np.int64),
        np.ascontiguousarray(contexts, dtype=np.int64),
        k_max,
        compiled,
        drafter.kind,
        draft,
        step_base(target, prefill),
    )
    return chosen
