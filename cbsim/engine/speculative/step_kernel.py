"""One speculative iteration's drafts planned in one compiled call.

Where an iteration cannot be advanced in a speculative decode run (it carries prompt chunks, or
requests wait), :meth:`SpeculativeDecoding.plan <cbsim.engine.speculative.decoder.SpeculativeDecoding.plan>`
decides each decoding request's draft length for it: the requests' α estimates, the k policy over
the batch, the cut to the outputs left and to the step's token budget, the KV blocks for each
request's k + 1 verified tokens, the verify entries' sums for the cost model and the drafting
time. For the policies the decode runs compile (``fixed``, ``batch_table``, ``goodput`` per batch
or per request) and a proposer whose pricing compiles, :func:`plan_step_kernel` does all of it
in one call, with the functions the stepped path and the runs call (the same floats): the
α estimate of :class:`~cbsim.engine.speculative.slots.SpecSlots`, the goodput choice of
:mod:`~cbsim.engine.speculative.goodput_kernel` and
:mod:`~cbsim.engine.speculative.goodput_refine`, the cut and reservation of
:func:`reserve_kernel` (which :func:`~cbsim.engine.speculative.draft_reservation.reserve_drafts` calls too)
and the drafting time of
:func:`~cbsim.engine.speculative.goodput_kernel.draft_seconds`. Where a request's blocks do not
fit without evicting cached prefixes, it stops there and the Python path finishes the iteration
request by request, as before.

The verify entries' sums are whole numbers and halves far below 2**53, so their totals are the
sums :meth:`BatchStats.add_entries <cbsim.cost.batch_stats.BatchStats.add_entries>` would reach
adding them one by one.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
import numpy.typing as npt

from cbsim.common.pcg64 import WordArray, fill_doubles
from cbsim.cost.compiled import CompiledCost, decode_scale, scaled_step_seconds
from cbsim.engine.speculative.acceptance import (
    AcceptanceModel,
    IidModel,
    PerRequestModel,
    PositionalModel,
)
from cbsim.engine.speculative.goodput_kernel import StepBase, draft_seconds, goodput_k
from cbsim.engine.speculative.goodput_refine import goodput_k_per_request
from cbsim.engine.speculative.slots import observe_steps

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# k policies, and acceptance models (SCALED: positional rates scaled by each request's level
# θ / m), as the compiled code knows them (here and in cbsim.engine.speculative.fast_run)
FIXED, BATCH_TABLE, GOODPUT, ADAPTIVE = 0, 1, 2, 3
IID, POSITIONAL, PER_REQUEST, SCALED = 0, 1, 2, 3


class CompiledAcceptance(NamedTuple):
    """An acceptance model as the compiled code draws from it: its code, the iid α, the
    positional rates, the per-request model's drift per 1,000 outputs."""

    code: int
    iid_alpha: float
    rates: FloatArray
    drift: float


def compiled_acceptance(model: AcceptanceModel) -> CompiledAcceptance | str:
    """How the compiled code draws from ``model``, or why it cannot."""
    rates = np.zeros(1)
    if isinstance(model, IidModel):
        return CompiledAcceptance(IID, model.alpha, rates, 0.0)
    if isinstance(model, PositionalModel):
        code = POSITIONAL if model.concentration is None else SCALED
        return CompiledAcceptance(
            code, 0.0, np.ascontiguousarray(model.rates, dtype=np.float64), 0.0
        )
    if isinstance(model, PerRequestModel):
        return CompiledAcceptance(PER_REQUEST, 0.0, rates, float(model.drift))
    return f"the {model.kind} acceptance model is not compiled"


@numba.njit(cache=True)
def reserve_kernel(
    ks: np.ndarray, contexts: np.ndarray, blocks: np.ndarray, spare: int, block_size: int, room: int
) -> tuple[np.ndarray, np.ndarray, int]:  # pragma: no cover - compiled
    """The draft cut and KV reservation of
    :func:`~cbsim.engine.speculative.draft_reservation.reserve_drafts`, in batch order, while every
    block asked for fits in the ``room`` free without evicting: the drafts kept, the blocks each
    request grows by, and the request it stopped at (``len(ks)``: none)."""
    n = len(ks)
    kept = np.zeros(n, dtype=np.int64)
    grown = np.zeros(n, dtype=np.int64)
    for j in range(n):
        k = ks[j]
        if k > spare:
            k = spare
        if k > 0:
            need = (contexts[j] + k + block_size) // block_size - blocks[j]
            if need > 0:
                if need > room:
                    return kept, grown, j
                room -= need
                grown[j] = need
        kept[j] = k
        spare -= k
    return kept, grown, n


@numba.njit(cache=True)
def table_k(table: IntArray, batch_size: int) -> int:  # pragma: no cover - compiled
    """The ``batch_table`` policy's k: the row (min batch, max batch, k) holding
    ``batch_size``, 0 outside every row (``BatchTableK.k_for``)."""
    for row in range(table.shape[0]):
        if table[row, 0] <= batch_size <= table[row, 1]:
            return int(table[row, 2])
    return 0


@numba.njit(cache=True)
def plan_step_kernel(
    accepted: IntArray,
    rejected: IntArray,
    stale: BoolArray,
    slots: IntArray,
    prior: float,
    weight: float,
    remaining: IntArray,
    contexts: IntArray,
    blocks: IntArray,
    policy: int,
    fixed_k: int,
    table: IntArray,
    batch_size: int,
    k_max: int,
    per_request: bool,
    target: CompiledCost,
    proposer: int,
    draft: CompiledCost,
    base: StepBase,
    stale_on: bool,
    spare: int,
    block_size: int,
    room: int,
) -> tuple[
    IntArray, IntArray, IntArray, int, int, int, int, float, int, float, float
]:  # pragma: no cover
    """The drafts of an iteration's decoding requests (their slots, outputs left, contexts and
    blocks, in batch order): each request's drafts wanted (the policy's, cut to its outputs
    left) and kept (cut to the step's budget and its blocks), the blocks it grows by, the
    request the reservation stopped at (``len(slots)``: none; where it stopped, kept and grown
    hold the requests before it, ``blocks`` is untouched and the sums are meaningless), the
    blocks grown in all (each request's added into ``blocks``, in place), the verify entries' tokens,
    keys and values read and causal pairs, the requests drafting nothing, the drafting
    seconds, and, for the goodput policy, the target's seconds for the step (``base``, the
    step's other work, plus the verify entries: ``CostModel.time_stats`` of the batch, the
    same floats as the sweep prices a candidate; -1 for other policies, whose ``base`` is
    empty). ``stale`` (by slot) marks the drafters
    the policy gave k = 0 where ``stale_on``; ``batch_size``: the batch's entries, which the
    ``batch_table`` policy reads."""
    n = len(slots)
    if policy == GOODPUT:
        alphas = np.empty(n)
        for j in range(n):
            a = accepted[slots[j]]
            alpha = (a + prior * weight) / ((a + rejected[slots[j]]) + weight)
            alphas[j] = 0.0 if alpha < 0.0 else (1.0 if alpha > 1.0 else alpha)
        if per_request:
            ks = goodput_k_per_request(
                alphas, remaining, contexts, k_max, target, proposer, draft, base
            )
        else:
            ks = goodput_k(alphas, remaining, contexts, k_max, target, proposer, draft, base)
    else:
        k = table_k(table, batch_size) if policy == BATCH_TABLE else fixed_k
        ks = np.full(n, k, dtype=np.int64)
    if stale_on:
        for j in range(n):
            if ks[j] == 0:
                stale[slots[j]] = True
    for j in range(n):  # the outputs left cut every k (one left: no drafts)
        if ks[j] > remaining[j] - 1:
            ks[j] = remaining[j] - 1
        if ks[j] < 0:
            ks[j] = 0
    kept, grown, stop = reserve_kernel(ks, contexts, blocks, spare, block_size, room)
    if stop < n:
        return ks, kept, grown, stop, 0, 0, 0, 0.0, 0, 0.0, -1.0
    grown_total = 0
    for j in range(n):
        grown_total += grown[j]
        blocks[j] += grown[j]
    tokens = 0
    kv_tokens = 0
    pairs = 0.0
    plain = 0
    for j in range(n):
        q = kept[j] + 1
        tokens += q
        kv_tokens += contexts[j] + q
        pairs += q * (contexts[j] + (q + 1) * 0.5)
        if q == 1:
            plain += 1
    drafting = draft_seconds(proposer, draft, kept, contexts, n)
    target_s = -1.0
    if policy == GOODPUT:  # as time_stats prices the batch: its decode entries' sums
        decode_tokens = base.decode_tokens + tokens
        decode_kv_tokens = base.decode_kv_tokens + kv_tokens
        scale = decode_scale(target, base.decode_requests + n, decode_kv_tokens - decode_tokens)
        target_s = scaled_step_seconds(
            target, base.requests + n, base.tokens + tokens, base.sampled + tokens,
            base.prefill_layers_s, decode_tokens, decode_kv_tokens, base.decode_pairs + pairs,
            scale, base.decode_requests + n,
        )  # fmt: skip
    return ks, kept, grown, n, grown_total, tokens, kv_tokens, pairs, plain, drafting, target_s


@numba.njit(cache=True)
def request_rate(
    acceptance: int, iid_alpha: float, level: float, generated: int, drift: float
) -> float:  # pragma: no cover - compiled
    """A request's acceptance rate at every draft position, where the model has one: the iid
    α, or the request's drawn α (``level``) moved by ``drift`` per 1,000 outputs so far and
    kept within [0, 1]; 0 for the positional models (:func:`position_rate` sets theirs)."""
    if acceptance == IID:
        return iid_alpha
    if acceptance != PER_REQUEST:
        return 0.0
    alpha = level
    if drift != 0.0:
        alpha = alpha + drift * float(generated) / 1000.0
        alpha = 0.0 if alpha < 0.0 else (1.0 if alpha > 1.0 else alpha)
    return alpha


@numba.njit(cache=True)
def position_rate(
    acceptance: int, alpha: float, rates: FloatArray, level: float, position: int
) -> float:  # pragma: no cover - compiled
    """The acceptance rate of draft ``position``: the positional rates (the last repeated
    beyond them), scaled by the request's level θ / m (``level``) and kept within [0, 1] for
    ``SCALED``; ``alpha`` (:func:`request_rate`) for the other models."""
    last = len(rates) - 1
    if acceptance == POSITIONAL:
        return float(rates[position if position < last else last])
    if acceptance == SCALED:
        rate = rates[position if position < last else last] * level
        return 0.0 if rate < 0.0 else (1.0 if rate > 1.0 else rate)
    return alpha


@numba.njit(cache=True)
def verify_step_kernel(
    words: WordArray,
    width: int,
    ks: IntArray,
    slots: IntArray,
    levels: FloatArray,
    generated: IntArray,
    accepted: IntArray,
    rejected: IntArray,
    ema: FloatArray,
    acceptance: int,
    iid_alpha: float,
    rates: FloatArray,
    drift: float,
    ema_weight: float,
) -> tuple[IntArray, int]:  # pragma: no cover - compiled
    """A stepped iteration's verification of its speculating requests (their drafts ``ks`` > 0
    and slots, in batch order): each request's accepted drafts, the leading successes of its
    trials (trial j succeeds when the uniform ``[i, j]`` of the stream's next ``len(ks) x width``,
    drawn from its PCG64 ``words`` as ``Generator.random`` draws them, is below its rate, as
    :func:`~cbsim.engine.speculative.acceptance.leading_successes` counts them), and its slot's
    counts and EMA updated (:func:`~cbsim.engine.speculative.slots.observe_steps`); returns the
    counts and how many steps rejected a draft. ``levels``: each request's drawn α (its θ / m
    for ``SCALED``); ``generated``: its outputs so far (read with a ``drift``); ``rates``: the
    positional rates, the last repeated beyond them."""
    drawn = draw_accepted(words, width, ks, levels, generated, acceptance, iid_alpha, rates, drift)
    rejecting = observe_steps(accepted, rejected, ema, slots, ks, drawn, ema_weight)
    return drawn, rejecting


@numba.njit(cache=True)
def draw_accepted(
    words: WordArray,
    width: int,
    ks: IntArray,
    levels: FloatArray,
    generated: IntArray,
    acceptance: int,
    iid_alpha: float,
    rates: FloatArray,
    drift: float,
) -> IntArray:  # pragma: no cover - compiled
    """:func:`verify_step_kernel`'s draws alone: each request's accepted drafts."""
    n = len(ks)
    uniforms = np.empty((n, width))
    fill_doubles(words, uniforms)
    drawn = np.zeros(n, dtype=np.int64)
    for i in range(n):
        k = ks[i]
        alpha = request_rate(acceptance, iid_alpha, levels[i], generated[i], drift)
        for j in range(width):
            rate = position_rate(acceptance, alpha, rates, levels[i], j)
            if j < k and uniforms[i, j] < rate:
                drawn[i] += 1
            else:
                break
    return drawn
