"""A speculative step's drafts cut to its token budget and to the KV blocks left for them.

A step's drafts are extra tokens: the scheduler's token budget and the KV cache both bound them.
vLLM V1 schedules a running request's ``num_tokens_with_spec - num_computed_tokens`` tokens capped
by what is left of the budget and trims its draft tokens to what was scheduled; TensorRT-LLM's
``MicroBatchScheduler`` counts a generation request as ``beamWidth + numDraftTokens`` against
``maxNumTokens``. cbsim forms the batch first, then cuts each decoding request's drafts, in batch
order, to the room the batch leaves (:func:`draft_room`) and to the blocks it can reserve for its
k + 1 verified tokens (:func:`reserve_drafts`), fewer drafts where blocks are short.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from cbsim.cost.kernel_call import KernelCall
from cbsim.engine.speculative.slots import SpecSlots
from cbsim.engine.speculative.step_kernel import reserve_kernel
from cbsim.workload.request import Request

if TYPE_CHECKING:
    from cbsim.engine.scheduler.base import Batch, SchedulerPolicy

__all__ = [
    "BLOCKS",
    "GROUPED_ENTRIES",
    "UNBUDGETED",
    "allocate_grown",
    "draft_room",
    "mark_skipped_slots",
    "reserve_drafts",
    "set_drafts",
]

BLOCKS = attrgetter("blocks")
"""A request's KV blocks held."""
GROUPED_ENTRIES = 32
"""From this many speculating requests in a batch on, their drafts are reserved in one compiled
call and their verify entries added to its stats grouped by k (numpy's fixed cost is then below
the per-entry loop's)."""

UNBUDGETED = 1 << 62
"""The draft room of a step whose scheduler puts no budget on decodes."""


def draft_room(budget: int | None, scheduled: int) -> int:
    """Drafts a step may add to its ``scheduled`` tokens (prefill chunks and one per decode)
    within the scheduler's token ``budget`` (None: unbudgeted), as vLLM V1 trims them
    (``vllm/v1/core/sched/scheduler.py``; see the module docstring)."""
    if budget is None:
        return UNBUDGETED
    return max(0, budget - scheduled)


def mark_skipped_slots(slots: SpecSlots, rows: np.ndarray, ks: np.ndarray) -> None:
    """:func:`~cbsim.engine.speculative.drafter_state.mark_skipped` over slot arrays: the drafter of each of ``rows`` whose k is 0 goes
    stale."""
    slots.stale[rows[np.asarray(ks) == 0]] = True


def set_drafts(batch: Batch, ks: list[int]) -> None:
    """Give the batch's decoding entries their drafts ``ks`` (in order): each verifies k + 1
    tokens."""
    ks_all = batch.ks
    assert ks_all is not None
    new_tokens = batch.new_tokens
    for e, k in zip(batch.decoding, ks, strict=True):
        ks_all[e] = k
        new_tokens[e] = k + 1


def allocate_grown(
    sched: SchedulerPolicy, reqs: Sequence[Request], grown: np.ndarray, total: int
) -> None:
    """Allocate the blocks each of ``reqs`` grows by (``grown``, ``total`` in all, from a
    compiled reservation)."""
    if not total:
        return
    sched.kv.allocate(total)
    for req, extra in zip(reqs, grown.tolist(), strict=True):
        if extra:
            req.blocks += extra


def reserve_drafts(
    sched: SchedulerPolicy,
    reqs: Sequence[Request],
    ks: np.ndarray,
    contexts: np.ndarray,
    spare: int,
    call: KernelCall | None = None,
) -> list[int]:
    """Each request's drafts once cut, in batch order, to the ``spare`` room of the step and to
    the KV blocks that can be reserved for its k + 1 verified tokens (fewer drafts where blocks
    are short), the blocks reserved. Compiled while the blocks fit without evicting (each
    reservation then succeeds as it would one by one); from the first that does not, request by
    request (a batch of fewer than ``GROUPED_ENTRIES``: all of it, as the call costs more).
    ``call``: the simulation's call of :func:`reserve_kernel`."""
    kv = sched.kv
    block_size = kv.block_size
    wanted: list[int] = ks.tolist()
    count = len(wanted)
    chosen_ks: list[int]
    if count < GROUPED_ENTRIES:
        chosen_ks, stop = list(wanted), 0
    else:
        room = kv.total_blocks - kv.used_blocks - kv.cached_blocks
        blocks = np.fromiter(map(BLOCKS, reqs), np.int64, count)
        kernel = reserve_kernel if call is None else call
        kept, grown, stop = kernel(ks, contexts, blocks, spare, block_size, room)
        chosen_ks = kept.tolist()
        allocate_grown(sched, reqs, grown, int(grown.sum()))
        if stop == count:
            return chosen_ks
        spare -= sum(chosen_ks[:stop])
    context_list = contexts.tolist()
    for j in range(stop, len(chosen_ks)):
        req = reqs[j]
        k = wanted[j]
        if k > spare:
            k = spare
        if k > 0 and -(-(context_list[j] + k + 1) // block_size) > req.blocks:
            while k > 0 and not sched._try_grow(req, k + 1):
                k -= 1
        chosen_ks[j] = k
        spare -= k
    return chosen_ks
