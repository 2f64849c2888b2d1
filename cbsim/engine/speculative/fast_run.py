"""Speculative decode runs: many speculative iterations of a replica computed in one compiled call.

A replica whose running requests are all decoding repeats one kind of iteration until something
outside it changes (an arrival, a finish while requests wait, the KV cache running short, the
horizon): the k policy chooses each request's draft length from the batch, the proposer drafts,
the target verifies, each request accepts a random prefix of its drafts and emits it plus one
token, and rejected drafts give their KV blocks back. Everything such an iteration does depends only
on the requests' state, the replica's acceptance statistics and its random stream, so
:func:`spec_run_kernel` computes a whole stretch of them at once (numba), exactly as stepping would:
the same goodput sweep over candidate k (:func:`~cbsim.engine.speculative.goodput_kernel.goodput_sweep`, scoring candidates with the
compiled expected tokens the stepped policy also uses, :mod:`cbsim.engine.speculative.expected`), the
same target and draft prices (:mod:`cbsim.cost.compiled`), the same acceptance draws from the
replica's stream (its PCG64 state stepped in the kernel as numpy steps it, held as words between
calls: :class:`cbsim.common.pcg64.WordStream`), the same α estimates and KV accounting.

What can run compiled: the ``fixed``, ``batch_table``, ``adaptive_hysteresis`` (its per-replica
tier state copied in and written back when the run stands) and ``goodput`` k policies, per batch
or per request (the refinement of :func:`~cbsim.engine.speculative.goodput_refine.refine_per_request`),
with or without TensorRT-LLM's stale drafter after k = 0 (its thinning draws from the replica's
``acceptance:stale`` stream, consumed as :func:`~cbsim.engine.speculative.drafter_state.stale_accepted`
does); the ``iid``, ``positional`` (with or without per-request variation: each request's level
θ is drawn when it first speculates, as stepping draws it, and scales its rates by θ / m in the
kernel) and ``per_request`` acceptance models; EAGLE, draft-model and n-gram proposers; a cost
model that compiles. Anything else steps iteration by iteration (the reason is in
``run_info.json``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numba
import numpy as np
import numpy.typing as npt

from cbsim.common.pcg64 import WordArray, next_double
from cbsim.cost.compiled import CompiledCost, verify_seconds
from cbsim.engine.decode_run import MAX_RUN_ITERATIONS, DecodeRun, RunRows, SpecColumns
from cbsim.engine.pause_log import log_pauses
from cbsim.engine.speculative.acceptance import (
    level_scale,
)
from cbsim.engine.speculative.adaptive_hysteresis import AdaptiveHysteresisK, ReplicaTiers
from cbsim.engine.speculative.cohort import SpecCohort
from cbsim.engine.speculative.decoder import PRIOR_STRENGTH, SpecState
from cbsim.engine.speculative.draft_reservation import UNBUDGETED
from cbsim.engine.speculative.goodput_kernel import (
    NGRAM,
    SWEPT_COST,
    SWEPT_KV,
    SWEPT_REQUESTS,
    compiled_proposer,
    draft_seconds,
    goodput_sweep,
    no_base,
    sweep_ints,
    sweep_reals,
)
from cbsim.engine.speculative.goodput_refine import (
    STEP_COST,
    STEP_KV,
    STEP_REQUESTS,
    draft_steps_cached,
    refine_per_request,
    refine_scratch,
)
from cbsim.engine.speculative.policies import BatchTableK, FixedK, GoodputK
from cbsim.engine.speculative.slots import (
    EMA_WEIGHT,
    RUN_ACCEPTED,
    RUN_ACCEPTS,
    RUN_ALPHA,
    RUN_BLOCKS,
    RUN_DECODE_STEPS,
    RUN_DRAFTS,
    RUN_EMA,
    RUN_FINISHED_AT,
    RUN_GENERATED,
    RUN_INTS,
    RUN_KV,
    RUN_LEFT,
    RUN_OUTPUT,
    RUN_REALS,
    RUN_REJECTED,
    RUN_SLOT,
    RUN_STEPS,
)
from cbsim.engine.speculative.step_kernel import (
    ADAPTIVE,
    BATCH_TABLE,
    FIXED,
    GOODPUT,
    SCALED,
    compiled_acceptance,
    position_rate,
    request_rate,
    table_k,
)
from cbsim.workload.request import Request, Status

if TYPE_CHECKING:
    from cbsim.cost.kernel_call import KernelCall
    from cbsim.engine.scheduler.base import FinishCallback, SchedulerPolicy
    from cbsim.engine.speculative.decoder import SpeculativeDecoding

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# the kernel's output rows, per iteration (real, integer; its per-request counters go to the
# run state's rows RUN_STEPS .., slots.py); the engine reads the rows before LISTED_REALS and
# LISTED_INTS as lists, the recorder copies the rest as they are (the speculative columns of
# the iterations table)
START, DURATION, DRAFT_S = range(3)
REAL_COLUMNS = 3
LISTED_REALS = DRAFT_S
BATCH, EMITTED, KV_USED, OUTSTANDING, PLAIN, VERIFY, DRAFTED, ACCEPTED, K_LOW, K_HIGH = range(10)
INT_COLUMNS = 10
LISTED_INTS = PLAIN


# --------------------------------------------------------------------------- the run kernel


@numba.njit(cache=True)
def _policy_ks(
    n: int,
    policy: int,
    fixed_k: int,
    table: IntArray,
    tiers: IntArray,
    candidates: IntArray,
    ranges: IntArray,
    last_range: IntArray,
    k_max: int,
    per_request: bool,
    alphas: FloatArray,
    remaining: IntArray,
    contexts: IntArray,
    target: CompiledCost,
    proposer: int,
    draft: CompiledCost,
    reals: FloatArray,
    ints: IntArray,
    refine: tuple[FloatArray, FloatArray, IntArray],
    chosen: IntArray,
) -> None:
    """The k policy's draft lengths for the first ``n`` requests, into ``chosen``."""
    if policy == GOODPUT:
        rate = goodput_sweep(
            n, alphas, remaining, contexts, k_max, target, proposer, draft, no_base(), reals,
            ints, chosen,
        )  # fmt: skip
        if per_request:
            refine_per_request(
                n, alphas, remaining, contexts, k_max, target, proposer, draft, no_base(), rate,
                chosen, refine[0], refine[1], refine[2], reals, ints,
            )  # fmt: skip
        return
    k = fixed_k
    if policy == ADAPTIVE:
        r = ranges.shape[0]
        for row in range(ranges.shape[0]):
            if ranges[row, 0] <= n <= ranges[row, 1]:
                r = row
                break
        last_range[0] = r
        k = int(candidates[tiers[r]])
    if policy == BATCH_TABLE:
        k = table_k(table, n)
    for a in range(n):
        chosen[a] = k


@numba.njit(cache=True)
def _observe_tiers(
    n: int,
    chosen: IntArray,
    outcome: IntArray,
    tiers: IntArray,
    emas: FloatArray,
    tier_steps: IntArray,
    last_range: IntArray,
    candidates: IntArray,
    hysteresis: FloatArray,
) -> None:
    """The adaptive_hysteresis policy's update after a verify step, exactly as
    :meth:`~cbsim.engine.speculative.adaptive_hysteresis.AdaptiveHysteresisK.observe_batch`."""
    total = 0
    count = 0
    for a in range(n):
        if chosen[a] > 0:
            total += outcome[a]
            count += 1
    r = last_range[0]
    if count == 0 or r < 0:
        return
    mean = float(total) / float(count)
    weight = hysteresis[0]
    ema = weight * mean + (1.0 - weight) * emas[r]
    emas[r] = ema
    tier_steps[r] += 1
    tier = tiers[r]
    wish = ema + 1.0
    if tier + 1 < len(candidates) and wish >= candidates[tier] + 0.5 + hysteresis[1]:
        tier += 1
    elif tier > 0 and wish < candidates[tier - 1] + 0.5 - hysteresis[2]:
        tier -= 1
    tiers[r] = tier


@numba.njit(cache=True)
def _thin_stale(
    n: int,
    chosen: IntArray,
    outcome: IntArray,
    active: IntArray,
    stale: IntArray,
    scale: float,
    rng: WordArray,
) -> None:
    """Stale requests' accepted drafts thinned, exactly as
    :func:`~cbsim.engine.speculative.drafter_state.stale_accepted` draws them: one row of ``width``
    uniforms per stale speculating request in batch order, ``width`` the largest count (from the
    stale stream's PCG64 words, :mod:`cbsim.common.pcg64`)."""
    width = 0
    for a in range(n):
        if chosen[a] > 0 and stale[active[a]] == 1 and outcome[a] > width:
            width = outcome[a]
    if width == 0:
        return
    for a in range(n):
        if chosen[a] == 0 or stale[active[a]] == 0:
            continue
        run = 0
        leading = True
        for p in range(width):
            keep = next_double(rng) < scale
            if leading and p < outcome[a] and keep:
                run += 1
            else:
                leading = False
        outcome[a] = run


@numba.njit(cache=True)
def spec_run_kernel(
    ints: IntArray,
    reals: FloatArray,
    cluster_accepted: int,
    cluster_rejected: int,
    prior: float,
    target: CompiledCost,
    proposer: int,
    draft: CompiledCost,
    policy: int,
    fixed_k: int,
    table: IntArray,
    tiers: IntArray,
    emas: FloatArray,
    tier_steps: IntArray,
    last_range: IntArray,
    candidates: IntArray,
    ranges: IntArray,
    hysteresis: FloatArray,
    k_max: int,
    per_request: bool,
    acceptance: int,
    iid_alpha: float,
    rates: FloatArray,
    drift: float,
    rng: WordArray,
    stale: IntArray,
    stale_on: bool,
    stale_scale: float,
    stale_rng: WordArray,
    start_s: float,
    block_size: int,
    used_blocks: int,
    total_blocks: int,
    grows_kv: bool,
    stop_on_finish: bool,
    next_arrival_s: float,
    horizon_s: float,
    max_iterations: int,
    step_budget: int,
) -> tuple[Any, ...]:
    """Advance the running requests (``ints`` and ``reals``, their state's rows ``RUN_KV`` ..
    and ``RUN_EMA`` .. in running order, updated in place) through speculative decode
    iterations until a stop rule fires; returns the iterations' rows and the replica's
    acceptance counts after them (``cluster_accepted``, ``cluster_rejected`` updated), its
    per-request counters and the iteration each request finished in written to ``ints``' rows
    ``RUN_STEPS`` .. (see the module docstring). ``step_budget``: the tokens a step may
    schedule, drafts cut to it in running order as
    :func:`~cbsim.engine.speculative.draft_reservation.draft_room` does (:data:`UNBUDGETED`:
    none)."""
    kv, blocks = ints[RUN_KV], ints[RUN_BLOCKS]
    generated, output = ints[RUN_GENERATED], ints[RUN_OUTPUT]
    accepted_total, rejected_total = ints[RUN_ACCEPTED], ints[RUN_REJECTED]
    ema, model_alpha = reals[RUN_EMA], reals[RUN_ALPHA]
    count = len(kv)
    size = 0
    for i in range(count):
        if output[i] - generated[i] > size:
            size = output[i] - generated[i]
    size = min(size, max_iterations)
    # one row per iteration column (as the recorder keeps them); the counters start at none
    real_rows = np.empty((REAL_COLUMNS, size))
    int_rows = np.empty((INT_COLUMNS, size), dtype=np.int64)
    for row in range(RUN_STEPS, RUN_FINISHED_AT):
        ints[row, :] = 0
    ints[RUN_FINISHED_AT, :] = -1
    active = np.arange(count)
    # per-iteration scratch, the first n entries in use (n = requests still running)
    new_blocks = np.empty(count, dtype=np.int64)
    alphas = np.empty(count)
    remaining = np.empty(count, dtype=np.int64)
    contexts = np.empty(count, dtype=np.int64)
    chosen = np.empty(count, dtype=np.int64)
    outcome = np.empty(count, dtype=np.int64)
    sweep_real = sweep_reals(count, k_max)
    sweep_int = sweep_ints(count, k_max)
    refine = refine_scratch(count if per_request else 0, k_max if per_request else 0)
    n = count
    used = used_blocks
    now = start_s
    j = 0
    while j < size and n > 0:
        # the scheduler's decode step: one more token of KV per request, or a preemption
        need_total = 0
        for a in range(n):
            i = active[a]
            new_blocks[a] = blocks[i]
            if grows_kv:
                need = -(-(kv[i] + 1) // block_size) - blocks[i]
                if need > 0:
                    need_total += need
                    new_blocks[a] += need
        free = total_blocks - used
        if need_total > free:
            break
        free -= need_total
        # the k policy over the batch
        clus = cluster_accepted + cluster_rejected + 0.0
        batch_prior = prior if clus == 0 else (cluster_accepted + prior * 0.0) / clus
        for a in range(n):
            i = active[a]
            denominator = accepted_total[i] + rejected_total[i] + PRIOR_STRENGTH
            alphas[a] = (accepted_total[i] + batch_prior * PRIOR_STRENGTH) / denominator
            remaining[a] = output[i] - generated[i]
            contexts[a] = kv[i]
        _policy_ks(
            n, policy, fixed_k, table, tiers, candidates, ranges, last_range, k_max, per_request,
            alphas, remaining, contexts, target, proposer, draft, sweep_real, sweep_int, refine,
            chosen,
        )  # fmt: skip
        if stale_on:  # the drafter skips a request the policy gives k = 0 (drafter_state)
            for a in range(n):
                if chosen[a] == 0:
                    stale[active[a]] = 1
        # clamp to the outputs left and the step's budget, then reserve KV for k + 1 tokens
        # (shorter k when short)
        spare = step_budget - n if step_budget > n else 0
        tokens = int(0)  # noqa: RUF046, UP018  (not the literal 0: goodput_refine.refine_per_request)
        kv_tokens = int(0)  # noqa: RUF046, UP018
        pairs = 0.0
        plain = 0
        k_top = 0
        k_bottom = 1 << 62
        for a in range(n):
            i = active[a]
            k = chosen[a]
            if k > remaining[a] - 1:
                k = remaining[a] - 1
            if k < 0:
                k = 0
            if k > spare:
                k = spare
            while k > 0:
                need = -(-(kv[i] + k + 1) // block_size) - new_blocks[a]
                if need <= 0:
                    break
                if free - need >= 0:
                    free -= need
                    new_blocks[a] += need
                    break
                k -= 1
            chosen[a] = k
            spare -= k
            q = k + 1
            tokens += q
            kv_tokens += kv[i] + q
            pairs += q * (kv[i] + (q + 1) * 0.5)
            if k == 0:
                plain += 1
            k_top = k if k > k_top else k_top
            k_bottom = k if k < k_bottom else k_bottom
        if policy == GOODPUT and proposer != NGRAM:  # the draft steps the choice priced
            if per_request:
                r_ints, r_reals = refine[2], refine[1]
                steps = (r_ints[STEP_REQUESTS], r_ints[STEP_KV], r_reals[STEP_COST])
            else:
                steps = (sweep_int[SWEPT_REQUESTS], sweep_int[SWEPT_KV], sweep_real[SWEPT_COST])
            drafting = draft_steps_cached(
                proposer, draft, chosen, contexts, n, sweep_int[1], sweep_int[2], steps[0],
                steps[1], steps[2],
            )  # fmt: skip
        else:
            drafting = draft_seconds(proposer, draft, chosen, contexts, n)
        target_s = verify_seconds(target, n, tokens, kv_tokens, pairs)
        duration = drafting + target_s
        end = now + duration
        if end >= horizon_s:
            break
        used = total_blocks - free
        # verification: leading accepted drafts per speculating request, in batch order
        width = k_top
        iteration_accepted = 0
        verified = 0
        draft_total = 0
        emitted_total = 0
        for a in range(n):
            outcome[a] = 0
        for a in range(n):
            k = chosen[a]
            if k == 0:
                continue
            i = active[a]
            # model_alpha holds the request's drawn α (its θ / m for SCALED)
            alpha = request_rate(acceptance, iid_alpha, model_alpha[i], generated[i], drift)
            run = 0
            leading = True
            for p in range(width):
                rate = position_rate(acceptance, alpha, rates, model_alpha[i], p)
                success = next_double(rng) < rate
                if leading and p < k and success:
                    run += 1
                else:
                    leading = False
            outcome[a] = run
        if stale_on:
            _thin_stale(n, chosen, outcome, active, stale, stale_scale, stale_rng)
        if policy == ADAPTIVE:
            _observe_tiers(
                n, chosen, outcome, tiers, emas, tier_steps, last_range, candidates, hysteresis
            )
        for a in range(n):
            ints[RUN_DECODE_STEPS, active[a]] += 1
        for a in range(n):
            k = chosen[a]
            if k == 0:
                continue
            i = active[a]
            got = outcome[a]
            missed = 1 if got < k else 0
            accepted_total[i] += got
            rejected_total[i] += missed
            cluster_accepted += got
            cluster_rejected += missed
            rate = got / k
            if math.isnan(ema[i]):
                ema[i] = rate
            else:
                ema[i] = EMA_WEIGHT * rate + (1.0 - EMA_WEIGHT) * ema[i]
            ints[RUN_STEPS, i] += 1
            ints[RUN_DRAFTS, i] += k
            ints[RUN_ACCEPTS, i] += got
            iteration_accepted += got
            verified += k + 1
            draft_total += k
        # the scheduler applies the step: emit, give rejected drafts' blocks back, finish
        j_row = j
        still = 0
        left = 0
        finishing = False
        for a in range(n):
            i = active[a]
            emitted = 1 + outcome[a]
            kv[i] += emitted
            blocks[i] = new_blocks[a]
            if grows_kv:
                surplus = blocks[i] - (-(-kv[i] // block_size))
                if surplus > 0:
                    used -= surplus
                    blocks[i] -= surplus
            generated[i] += emitted
            emitted_total += emitted
            if generated[i] >= output[i]:
                used -= blocks[i]  # its final blocks stay in blocks[i] (see apply_spec_run)
                ints[RUN_FINISHED_AT, i] = j_row
                finishing = True
            else:
                active[still] = i
                still += 1
                left += output[i] - generated[i]
        real_rows[START, j] = now
        real_rows[DURATION, j] = duration
        real_rows[DRAFT_S, j] = drafting
        int_rows[BATCH, j] = n
        int_rows[PLAIN, j] = plain
        int_rows[VERIFY, j] = verified
        int_rows[DRAFTED, j] = draft_total
        int_rows[ACCEPTED, j] = iteration_accepted
        int_rows[EMITTED, j] = emitted_total
        int_rows[KV_USED, j] = total_blocks - free
        int_rows[K_LOW, j] = k_bottom
        int_rows[K_HIGH, j] = k_top
        int_rows[OUTSTANDING, j] = left
        n = still
        now = end
        j += 1
        if end > next_arrival_s or (finishing and stop_on_finish):
            break
    return j, now, used, real_rows, int_rows, cluster_accepted, cluster_rejected


# --------------------------------------------------------------------------- the Python side


class KernelSettings(NamedTuple):
    """A speculative configuration as the kernel's codes and numbers."""

    proposer: int
    policy: int
    fixed_k: int
    table: IntArray
    k_max: int
    acceptance: int
    iid_alpha: float
    rates: FloatArray
    drift: float
    extra_gemm: tuple[int, int] | None
    # the adaptive_hysteresis policy: its tiers' k, its batch-size ranges, (weight, up, down)
    candidates: IntArray
    ranges: IntArray
    hysteresis: FloatArray
    # the goodput policy's per-request refinement
    per_request: bool = False


def kernel_settings(spec: SpeculativeDecoding) -> KernelSettings | str:
    """What the kernel needs of ``spec``, or why it cannot run in it."""
    policy = spec.policy
    table = np.zeros((1, 3), dtype=np.int64)
    fixed_k = 0
    candidates = np.zeros(1, dtype=np.int64)
    ranges = np.zeros((0, 2), dtype=np.int64)
    hysteresis = np.zeros(3)
    per_request = False
    if isinstance(policy, AdaptiveHysteresisK):
        policy_code = ADAPTIVE
        candidates = np.asarray(policy.candidates, dtype=np.int64)
        ranges = np.asarray(policy.ranges, dtype=np.int64).reshape(-1, 2)
        hysteresis = np.array([policy.weight, policy.up, policy.down])
    elif policy.observes_batches:
        return f"the {policy.kind} policy's per-replica state is not compiled"
    elif isinstance(policy, GoodputK):
        policy_code, per_request = GOODPUT, policy.per_request
    elif isinstance(policy, FixedK):
        policy_code, fixed_k = FIXED, policy.k
    elif isinstance(policy, BatchTableK):
        policy_code = BATCH_TABLE
        table = np.asarray(policy.table, dtype=np.int64).reshape(-1, 3)
    else:
        return f"the {policy.kind} policy's per-request controllers are not compiled"
    drawn = compiled_acceptance(spec.acceptance)
    if isinstance(drawn, str):
        return drawn
    acceptance, iid_alpha, rates, drift = drawn
    drafter = compiled_proposer(spec.proposer, spec.target)
    if isinstance(drafter, str):
        return drafter
    proposer_code, extra = drafter
    return KernelSettings(
        proposer_code, policy_code, fixed_k, table, policy.k_max, acceptance, iid_alpha, rates,
        drift, extra, candidates, ranges, hysteresis, per_request,
    )  # fmt: skip


# never indexed: the kernel reads it only for stale drafters
_NO_STALE = np.zeros(0, dtype=np.int64)
# never drawn from: the kernel draws from the stale stream only for stale drafters
_NO_WORDS = np.zeros(4, dtype=np.uint64)
# never written: the kernel writes tiers only for the adaptive_hysteresis policy
_NO_TIERS = ReplicaTiers(np.zeros(1, dtype=np.int64), np.zeros(1), np.zeros(1, dtype=np.int64))


@dataclass(slots=True)
class SpecRunEffects:
    """What a planned speculative run does to its requests and replica (applied if it stands)."""

    requests: list[Request]
    # the requests' state after the run: rows RUN_KV .. (slots.py), its counters included
    ints: IntArray
    reals: FloatArray  # rows RUN_EMA, RUN_ALPHA (the latter scaled for SCALED acceptance)
    # the replica's acceptance counts after the run (AlphaEstimator: accepted, rejected)
    cluster_accepted: int
    cluster_rejected: int
    rng_state: WordArray  # the acceptance stream's words before the run
    tiers: ReplicaTiers
    stale: IntArray  # 1 where the request's drafter is stale (drafter_state_at_k0: stale)
    stale_rng_state: WordArray  # the stale drafters' stream's words before the run
    cohort: SpecCohort | None = None  # the speculative cohort holding the requests, if one does


def _rows_of_requests(
    spec: SpeculativeDecoding, running: list[Request], ints: IntArray, k_top: int
) -> int:
    """Fill ``ints``' rows ``RUN_KV`` .. ``RUN_OUTPUT`` and ``RUN_SLOT`` with the ``running``
    requests' KV tokens, blocks, outputs so far, outputs and slots (each request without a
    state drawing its α, in running order); return the most tokens an iteration can verify
    (min(``k_top``, outputs left) each)."""
    slot_list = []
    kv_list, block_list, generated_list, output_list = [], [], [], []
    verify_bound = 0
    for req in running:
        state = req.spec
        if not isinstance(state, SpecState) or state.slots is not spec.slots:
            state = spec.state(req)
        slot_list.append(state.slot)
        kv_list.append(req.kv_tokens)
        block_list.append(req.blocks)
        generated_list.append(req.generated)
        output_list.append(req.output_tokens)
        left = req.output_tokens - req.generated
        verify_bound += left if left < k_top else k_top
    ints[RUN_KV], ints[RUN_BLOCKS] = kv_list, block_list
    ints[RUN_GENERATED], ints[RUN_OUTPUT] = generated_list, output_list
    ints[RUN_SLOT] = slot_list
    return verify_bound


def plan_spec_run(
    spec: SpeculativeDecoding,
    settings: KernelSettings,
    replica: int,
    sched: SchedulerPolicy,
    *,
    start_s: float,
    stop_on_finish: bool,
    next_arrival_s: float,
    horizon_s: float,
    restart: DecodeRun | None = None,
    kernel: KernelCall | None = None,
) -> DecodeRun | None:
    """Plan the replica's speculative decode run from now (None: not one iteration), or, with
    ``restart``, plan again from the same state (an arrival cut that run short). ``kernel``: the
    simulation's call of :func:`spec_run_kernel` (dispatched once, :mod:`cbsim.cost.kernel_call`)."""
    running = sched.running
    count = len(running)
    kv_cache = sched.kv
    k_top = settings.k_max + 1
    # the requests' state as the rows of two tables (RUN_KV .., RUN_EMA ..), updated in place by
    # the kernel: from the speculative cohort's table where it holds them all, else request by
    # request; a request's first speculative step draws its own α (in running order, as stepping)
    cohort = sched.spec_cohort_for_run()
    if cohort is not None:
        ints, reals, verify_bound = cohort.run_state(k_top)
    else:
        ints = np.empty((RUN_INTS, count), dtype=np.int64)
        verify_bound = _rows_of_requests(spec, running, ints, k_top)
        reals = np.empty((RUN_REALS, count))
        spec.slots.run_rows(ints, reals)
    if settings.acceptance == SCALED:  # each request's rates scaled as PositionalModel.draw does
        reals[RUN_ALPHA] = level_scale(reals[RUN_ALPHA], spec.acceptance.prior_alpha())
    # the acceptance streams as PCG64 words (cbsim.common.pcg64: WordStream), advanced in place
    # by the kernel; planned again, a run starts from where they stood before it
    words = spec.draw_stream(replica).words()
    if restart is not None:
        assert restart.spec is not None
        words[:] = restart.spec.rng_state
    rng_state = words.copy()
    stale = _NO_STALE
    stale_words = _NO_WORDS
    stale_rng_state = _NO_WORDS
    if spec.stale_drafter:
        stale = spec.slots.stale[ints[RUN_SLOT]].astype(np.int64)
        stale_words = spec.stale_stream(replica).words()
        if restart is not None and restart.spec is not None:
            stale_words[:] = restart.spec.stale_rng_state
        stale_rng_state = stale_words.copy()
    target = spec.target.compiled(verify_bound)
    if settings.proposer == NGRAM:
        draft = target
    else:
        draft = spec.proposer.cost.compiled(count, settings.extra_gemm)  # type: ignore[attr-defined]
    estimator = spec.replica_alpha(replica)
    if settings.policy == ADAPTIVE:  # the policy is an AdaptiveHysteresisK (kernel_settings)
        tiers = cast(AdaptiveHysteresisK, spec.policy).replica_tiers(replica).copy()
    else:
        tiers = _NO_TIERS
    budget = sched.step_budget()
    step_budget = UNBUDGETED if budget is None else budget
    call = spec_run_kernel if kernel is None else kernel
    # a first step that does not fit in the KV cache plans nothing (stepping preempts)
    n, end, used_after, real_rows, int_rows, accepted_after, rejected_after = call(
        ints, reals, estimator.accepted, estimator.rejected, estimator.prior, target,
        settings.proposer, draft, settings.policy, settings.fixed_k, settings.table,
        tiers.tiers, tiers.emas, tiers.steps, tiers.last, settings.candidates, settings.ranges,
        settings.hysteresis, settings.k_max, settings.per_request, settings.acceptance,
        settings.iid_alpha, settings.rates, settings.drift, words, stale, spec.stale_drafter,
        spec.stale_scale, stale_words, start_s, kv_cache.block_size, kv_cache.used_blocks,
        kv_cache.total_blocks, not sched.reserves_full_length, stop_on_finish, next_arrival_s,
        horizon_s, MAX_RUN_ITERATIONS, step_budget,
    )  # fmt: skip
    if n <= 0:
        return None
    effects = SpecRunEffects(
        requests=list(running),
        cohort=cohort,
        ints=ints,
        reals=reals,
        cluster_accepted=accepted_after,
        cluster_rejected=rejected_after,
        rng_state=rng_state,
        tiers=tiers,
        stale=stale,
        stale_rng_state=stale_rng_state,
    )
    starts, durations = real_rows[:LISTED_REALS, :n].tolist()
    batch_sizes, emitted, kv_used, outstanding = int_rows[:LISTED_INTS, :n].tolist()
    columns = int_rows[:, :n]
    return DecodeRun(
        starts=starts,
        durations=durations,
        batch_sizes=batch_sizes,
        kv_used=kv_used,
        end_s=end,
        kv_used_after=used_after,
        emitted=emitted,
        rows=RunRows(
            real_rows[START, :n],
            real_rows[DURATION, :n],
            columns[BATCH],
            emitted=columns[EMITTED],
            decode_tokens=columns[PLAIN],
        ),
        speculation=SpecColumns(
            verify=columns[VERIFY],
            drafted=columns[DRAFTED],
            accepted=columns[ACCEPTED],
            k_min=columns[K_LOW],
            k_max=columns[K_HIGH],
            draft_s=real_rows[DRAFT_S, :n],
        ),
        remaining_after=outstanding,
        spec=effects,
        remaining=ints[RUN_LEFT],
    )


def apply_spec_run(
    spec: SpeculativeDecoding,
    replica: int,
    sched: SchedulerPolicy,
    run: DecodeRun,
    on_finish: FinishCallback,
    first_row: int,
    prev_row: int,
) -> None:
    """Advance the requests and the replica through a planned speculative run (rows from
    ``first_row``; ``prev_row`` is the replica's row before it), as stepping would have."""
    effects = run.spec
    assert effects is not None
    store = spec.slots
    ints = effects.ints
    if spec.stale_drafter:
        store.stale[ints[RUN_SLOT]] = effects.stale != 0
    if effects.cohort is not None:  # the slots' figures written by the cohort's advance
        finished, accepted_sum = _apply_to_cohort(
            effects.cohort, sched, run, on_finish, first_row, prev_row
        )
    else:
        store.store_run(ints, effects.reals)
        finished, accepted_sum = _apply_to_requests(sched, run, on_finish, first_row, prev_row)
    sched.zero_gaps += accepted_sum
    sched.kv.used_blocks = run.kv_used_after  # below 0 while finishes' shared blocks count
    sched.settle_run(run, finished)
    sched.kv.check("a speculative run")
    spec.replica_alpha(replica).restore(effects.cluster_accepted, effects.cluster_rejected)
    if effects.tiers is not _NO_TIERS:  # an AdaptiveHysteresisK's (plan_spec_run)
        cast(AdaptiveHysteresisK, spec.policy).replica_tiers(replica).restore(effects.tiers)


def _apply_to_cohort(
    cohort: SpecCohort,
    sched: SchedulerPolicy,
    run: DecodeRun,
    on_finish: FinishCallback,
    first_row: int,
    prev_row: int,
) -> tuple[list[tuple[int, Request, int]], int]:
    """:func:`apply_spec_run`'s advance of the requests, on the speculative cohort's table that
    held them all (members that finished written back and out): the finishes (iteration,
    request, blocks) in running order and the accepted drafts."""
    effects = run.spec
    assert effects is not None
    paused, positions, accepted = cohort.advance(
        effects.ints, effects.reals, first_row, prev_row, run.iterations
    )
    if len(paused):
        log_pauses(sched.gap_pairs, first_row, paused)
    run.paused_at_start = len(paused)
    finished = []
    if positions:
        ends = run.ends
        iterations = effects.ints[RUN_FINISHED_AT].tolist()
        for at in positions:
            req = cohort.write_back(at)
            req.status = Status.FINISHED
            req.finish_s = ends[iterations[at]]
            finished.append((iterations[at], req, req.blocks))  # the run freed all its blocks
            on_finish(req)
        cohort.leave(positions)
        sched.running = list(cohort.requests)
    return finished, accepted


def _apply_to_requests(
    sched: SchedulerPolicy,
    run: DecodeRun,
    on_finish: FinishCallback,
    first_row: int,
    prev_row: int,
) -> tuple[list[tuple[int, Request, int]], int]:
    """:func:`apply_spec_run`'s advance of the requests, one by one: the finishes (iteration,
    request, blocks) in running order and the accepted drafts."""
    effects = run.spec
    assert effects is not None
    ends = run.ends
    last = run.iterations - 1
    gap_pairs = sched.gap_pairs
    paused = 0
    still_running = []
    finished = []
    ints = effects.ints
    kv = ints[RUN_KV].tolist()
    generated = ints[RUN_GENERATED].tolist()
    blocks = ints[RUN_BLOCKS].tolist()
    steps, drafted, accepted, decode_steps, finished_at = ints[RUN_STEPS:].tolist()
    for i, req in enumerate(effects.requests):
        if req.last_row != prev_row:
            gap_pairs.append(first_row)
            gap_pairs.append(req.last_row)
            paused += 1
        req.kv_tokens = kv[i]
        req.generated = generated[i]
        req.blocks = blocks[i]
        req.spec_steps += steps[i]
        req.drafted_tokens += drafted[i]
        req.accepted_tokens += accepted[i]
        req.decode_steps += decode_steps[i]
        done = finished_at[i]
        if done >= 0:
            req.last_row = first_row + done
            req.status = Status.FINISHED
            req.finish_s = ends[done]
            finished.append((done, req, req.blocks))  # the run freed all of its blocks
            on_finish(req)
        else:
            req.last_row = first_row + last
            still_running.append(req)
    sched.running = still_running
    run.paused_at_start = paused
    return finished, sum(accepted)
