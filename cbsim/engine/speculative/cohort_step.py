"""A speculative cohort's step planned and verified in one compiled call.

A stepped iteration whose decoding entries are the speculative decode cohort's members
(:mod:`cbsim.engine.speculative.cohort`) is planned when it starts (each member's drafts, its
blocks, the step's price: :func:`~cbsim.engine.speculative.step_kernel.plan_step_kernel`) and
verified when it ends (each member's accepted drafts:
:func:`~cbsim.engine.speculative.cohort.verify_members`). The verification draws from the
replica's own acceptance stream and reads only what the plan fixed (the members' drafts, their
drawn α, their outputs so far) and changes only the members' accepted drafts in the table: the
step's counts and the slots' counts and EMAs that the run reports are added when it completes
(:func:`~cbsim.engine.speculative.cohort.complete_members`). So it may as well draw
when the step starts, in the same call as the plan: the same words of the stream in the same
order, the same accepted drafts, one compiled call where there were two, and the members'
columns read in the kernel. The decoder hands the outcome to its verification at the step's end
(:meth:`~cbsim.engine.speculative.decoder.SpeculativeDecoding.verify`), which applies the rest as
before; a step that ends after the horizon is never completed, as before.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from cbsim.cost.compiled import CompiledCost
from cbsim.engine.speculative.cohort import (
    BLOCKS,
    DRAFTS,
    GENERATED,
    KV_TOKENS,
    OUTPUTS,
    SLOT,
    IntArray,
    verify_members,
)
from cbsim.engine.speculative.goodput_kernel import StepBase
from cbsim.engine.speculative.step_kernel import plan_step_kernel

__all__ = ["NOT_TAKEN", "plan_verify_members"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

NOT_TAKEN = -1
""":func:`plan_verify_members`' first result where the plan did not take the step whole."""


@numba.njit(cache=True)
def plan_verify_members(
    table: IntArray,
    count: int,
    slot_accepted: IntArray,
    slot_rejected: IntArray,
    stale: BoolArray,
    prior: float,
    weight: float,
    policy: int,
    fixed_k: int,
    k_table: IntArray,
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
    words: npt.NDArray[np.uint64],
    model_alpha: FloatArray,
    acceptance: int,
    iid_alpha: float,
    rates: FloatArray,
    drift: float,
) -> tuple[
    int, int, int, float, int, float, float, int, int, int, int, int, int
]:  # pragma: no cover - compiled
    """The plan of a step whose ``count`` decoding entries are the members of the cohort
    ``table`` (``plan_step_kernel``'s arguments but the members' columns), their drafts written
    into it, then their verification with the model's α of each member (``model_alpha`` by slot,
    not scaled) (``verify_members``' arguments but the levels). Returns the blocks grown, the
    verify entries' tokens, keys and values and causal pairs, the requests drafting nothing, the
    drafting and target seconds (the plan's), then ``verify_members``' six counts; the first
    is :data:`NOT_TAKEN`, with nothing changed but the stale marks, where the reservation fell
    short."""
    slots = table[SLOT, :count]
    remaining = table[OUTPUTS, :count] - table[GENERATED, :count]
    plan = plan_step_kernel(
        slot_accepted, slot_rejected, stale, slots, prior, weight, remaining,
        table[KV_TOKENS, :count], table[BLOCKS, :count], policy, fixed_k, k_table, batch_size,
        k_max, per_request, target, proposer, draft, base, stale_on, spare, block_size, room,
    )  # fmt: skip
    kept = plan[1]
    if plan[3] < count:
        return NOT_TAKEN, 0, 0, 0.0, 0, 0.0, -1.0, 0, 0, 0, 0, 0, 0
    levels = np.empty(count)
    for i in range(count):
        table[DRAFTS, i] = kept[i]
        levels[i] = model_alpha[slots[i]]
    rows, drafted, accepted, rejected, k_min, k_top = verify_members(
        table, count, words, levels, acceptance, iid_alpha, rates, drift
    )
    return (
        plan[4], plan[5], plan[6], plan[7], plan[8], plan[9], plan[10],
        rows, drafted, accepted, rejected, k_min, k_top,
    )  # fmt: skip
