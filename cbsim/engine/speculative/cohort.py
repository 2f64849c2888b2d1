"""The speculative decode cohort: a busy replica's decoding requests held as columns.

Under load a replica's batch holds a hundred decoding requests or more, and a speculative
iteration touches each of them four times in Python: to grow its KV for the token it decodes, to
gather what the k policy reads, to count what it accepted, and to advance it when the step ends.
That was most of a speculative capacity search's time. A scheduler that forms its decodes in
running order under a budget that holds them all (``sarathi``, ``prefill_first``: see
:mod:`cbsim.engine.scheduler.cohort`, the plain decode cohort) keeps those requests here instead,
each as a column of one integer table in running (admission) order: its KV tokens, outputs so far
and to come, blocks, last token's row, speculative slot and counts, and this step's drafts and
accepted drafts. A step then reads and writes the table in a few array operations and compiled
calls, and a request's own fields are written back only when it leaves: when it finishes, when the
cohort is dissolved (before a decode run, a preemption or anything that changes requests one by
one), and at the end of the run.

Nothing changes in what is computed: the members are the batch's decoding entries in the order
the one-by-one path puts them, a request joining draws its α in that order, its blocks grow as
they would one by one (the cohort forms only when all of them fit, which is when no request
would be preempted), the policy, reservation and verification are the same compiled calls on the
same arrays, and the step's end applies each member's accepted drafts, released blocks, pauses
and finish in batch order.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Protocol

import numba
import numpy as np
import numpy.typing as npt

from cbsim.cost.kernel_call import KernelCall
from cbsim.engine.pause_log import log_pauses
from cbsim.engine.speculative.slots import (
    EMA_WEIGHT,
    RUN_ACCEPTS,
    RUN_BLOCKS,
    RUN_DECODE_STEPS,
    RUN_DRAFTS,
    RUN_FINISHED_AT,
    RUN_GENERATED,
    RUN_INTS,
    RUN_KV,
    RUN_OUTPUT,
    RUN_REALS,
    RUN_SLOT,
    RUN_STEPS,
    SpecSlots,
    observe_step,
    read_run_rows,
    write_run_rows,
)
from cbsim.engine.speculative.step_kernel import draw_accepted
from cbsim.memory.kvcache import KVCache
from cbsim.workload.request import Request, Status


class Slotted(Protocol):
    """A request's speculative state as the cohort reads it: its slot in the decoder's
    :class:`~cbsim.engine.speculative.slots.SpecSlots`."""

    @property
    def slot(self) -> int: ...


IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

# the rows of the table, one column per member
(
    KV_TOKENS,
    GENERATED,
    OUTPUTS,
    BLOCKS,
    LAST_ROW,
    SLOT,
    ADMITTED,
    SPEC_STEPS,
    DRAFTED,
    ACCEPTED_TOTAL,
    DECODE_STEPS,
    DRAFTS,
    ACCEPTED,
) = range(13)
FIELDS = 13


class SpecCohort:
    """One replica scheduler's speculative decode cohort (see the module docstring)."""

    __slots__ = (
        "_advance_call",
        "_complete_call",
        "_finished",
        "_grow_call",
        "_paused",
        "_rows_call",
        "_state",
        "_sums_call",
        "block_size",
        "requests",
        "slots",
        "table",
    )

    def __init__(
        self, block_size: int, state: Callable[[Request], Slotted], slots: SpecSlots
    ) -> None:
        self.block_size = block_size
        self._state = state  # gives a request its speculative state (drawing its α if new)
        self.slots = slots  # the members' slots' counts and EMAs
        self.requests: list[Request] = []
        self.table: IntArray = np.zeros((FIELDS, 64), dtype=np.int64)
        # what a step's end hands back: the paused members' previous rows, the finished ones
        self._paused: IntArray = np.empty(64, dtype=np.int64)
        self._finished: IntArray = np.empty(64, dtype=np.int64)
        # each dispatched once (cbsim.cost.kernel_call)
        self._complete_call = KernelCall(complete_members)
        self._sums_call = KernelCall(member_sums)  # sums and leaving on the table
        self._grow_call = KernelCall(grow_members)
        self._rows_call = KernelCall(members_run_state)  # a decode run's state from the table
        self._advance_call = KernelCall(advance_members)  # a decode run applied to the table

    def __len__(self) -> int:
        return len(self.requests)

    def __contains__(self, req: Request) -> bool:
        return req in self.requests

    def column(self, field: int) -> IntArray:
        """The members' ``field`` (a view: writing it writes the table)."""
        column: IntArray = self.table[field, : len(self.requests)]
        return column

    # ------------------------------------------------------------------ joining and leaving

    def join(self, req: Request) -> None:
        """``req`` (decoding) joins in running order, its speculative state drawn if it has
        none."""
        slot = self._state(req).slot
        count = len(self.requests)
        if count == self.table.shape[1]:
            self.table = np.concatenate([self.table, np.zeros_like(self.table)], axis=1)
        table = self.table
        at = count
        if count and req.admit_seq < self.requests[count - 1].admit_seq:  # the table's order
            at = int(np.searchsorted(table[ADMITTED, :count], req.admit_seq))
            table[:, at + 1 : count + 1] = table[:, at:count]
        table[:, at] = (
            req.kv_tokens,
            req.generated,
            req.output_tokens,
            req.blocks,
            req.last_row,
            slot,
            req.admit_seq,
            req.spec_steps,
            req.drafted_tokens,
            req.accepted_tokens,
            req.decode_steps,
            0,
            0,
        )
        self.requests.insert(at, req)

    def write_back(self, at: int) -> Request:
        """Write member ``at``'s state into its request, which it returns."""
        req = self.requests[at]
        (
            req.kv_tokens,
            req.generated,
            _,
            req.blocks,
            req.last_row,
            _,
            _,
            req.spec_steps,
            req.drafted_tokens,
            req.accepted_tokens,
            req.decode_steps,
            _,
            _,
        ) = self.table[:, at].tolist()
        return req

    def materialize(self) -> None:
        """Write every member's state into its request (the cohort carries on)."""
        for at in range(len(self.requests)):
            self.write_back(at)

    def dissolve(self) -> None:
        """Write every member back and empty the cohort."""
        self.materialize()
        self.requests = []

    def leave(self, positions: list[int]) -> None:
        """Members at ``positions`` (ascending, written back) leave."""
        leaving = np.array(positions, dtype=np.int64)
        self._sums_call(self.table, len(self.requests), _LEAVE, leaving)
        requests = self.requests
        for at in reversed(positions):
            del requests[at]

    # ------------------------------------------------------------------ a step

    def grow_for_next_token(self, kv: KVCache, extra: int) -> int:
        """Give each member the blocks its next token needs, allocated with ``extra`` more (the
        joining requests'); returns the KV tokens the members read (:meth:`context`), or -1,
        changing nothing, where the blocks do not all fit."""
        total, context = self._grow_call(
            self.table, len(self.requests), self.block_size, kv.free_blocks - extra
        )
        if total < 0:
            return -1
        kv.allocate(total + extra)
        return int(context)

    def outputs_left(self) -> int:
        """The outputs the members still have to sample (their outstanding tokens)."""
        return int(self._sums_call(self.table, len(self.requests), _LEFT, _NO_POSITIONS))

    def run_state(self, k_top: int) -> tuple[IntArray, FloatArray, int]:
        """A decode run's state from the table and the members' slots (:func:`members_run_state`):
        its integer and real tables (rows ``RUN_KV`` .., ``RUN_EMA`` ..) and the most tokens an
        iteration can verify (min(``k_top``, outputs left) each)."""
        slots = self.slots
        state: tuple[IntArray, FloatArray, int] = self._rows_call(
            self.table, len(self.requests), k_top, slots.accepted, slots.rejected, slots.ema,
            slots.model_alpha,
        )  # fmt: skip
        return state

    def advance(
        self, ints: IntArray, reals: FloatArray, first_row: int, prev_row: int, iterations: int
    ) -> tuple[IntArray, list[int], int]:
        """A decode run (its state after it, ``ints`` and ``reals``) applied to the members and
        their slots (:func:`advance_members`): the previous rows of those that paused before it
        (a view, read before the cohort's next step or run), the positions of those that
        finished and the drafts the run accepted."""
        count = len(self.requests)
        self._hold_buffers(count)
        slots = self.slots
        paused, done, accepted = self._advance_call(
            self.table, count, ints, reals, first_row, prev_row, iterations, slots.accepted,
            slots.rejected, slots.ema, self._paused, self._finished,
        )  # fmt: skip
        positions: list[int] = self._finished[:done].tolist() if done else []
        return self._paused[:paused], positions, accepted

    def _hold_buffers(self, count: int) -> None:
        """Make the buffers a step's or a run's end hands the paused and finished members back in
        hold ``count`` members."""
        if len(self._paused) < count:
            self._paused = np.empty(self.table.shape[1], dtype=np.int64)
            self._finished = np.empty(self.table.shape[1], dtype=np.int64)

    def complete(
        self,
        now: float,
        row: int,
        prev_row: int,
        kv: KVCache,
        release: bool,
        gap_pairs: array[int],
        on_finish: Callable[[Request], None],
    ) -> tuple[int, int, int, list[Request]]:
        """The formed step ended at ``now`` as recorder row ``row`` (the replica's previous one:
        ``prev_row``): every member emits one token and its accepted drafts, gives back the
        blocks reserved for rejected ones (``release``) and moves its last row; those that paused
        add (row, previous row) to ``gap_pairs``; those that finished are written back, finished
        (their blocks freed, ``on_finish`` called, in order) and leave. Returns the tokens
        emitted, those whose previous token came in ``prev_row``, the accepted drafts (tokens
        with no gap before them) and the finished requests."""
        slots, count = self.slots, len(self.requests)
        self._hold_buffers(count)
        emitted, gaps, zero_gaps, freed, paused, done = self._complete_call(
            self.table, count, row, prev_row, self.block_size, release, slots.accepted,
            slots.rejected, slots.ema, self._paused, self._finished,
        )  # fmt: skip
        if freed:
            kv.free(freed)
        log_pauses(gap_pairs, row, self._paused[:paused])
        finished = []
        positions: list[int] = self._finished[:done].tolist()
        for at in positions:
            req = self.write_back(at)
            req.status = Status.FINISHED
            req.finish_s = now
            kv.free(req.blocks)
            req.blocks = 0
            finished.append(req)
            on_finish(req)
        if positions:
            self.leave(positions)
        return int(emitted), int(gaps), int(zero_gaps), finished


_NO_POSITIONS = np.zeros(0, dtype=np.int64)
_LEAVE, _LEFT = range(2)  # what member_sums does


@numba.njit(cache=True)
def member_sums(
    table: IntArray, count: int, mode: int, leaving: IntArray
) -> int:  # pragma: no cover - compiled
    """One pass over the members, as ``mode`` asks: ``_LEAVE`` closes the table over the members
    at positions ``leaving`` (ascending; returns 0); ``_LEFT`` sums the outputs left."""
    if mode == _LEAVE:
        kept = 0
        skip = 0
        for i in range(count):
            if skip < len(leaving) and leaving[skip] == i:
                skip += 1
                continue
            if kept != i:
                for field in range(table.shape[0]):
                    table[field, kept] = table[field, i]
            kept += 1
        return 0
    total = 0
    for i in range(count):
        total += table[OUTPUTS, i] - table[GENERATED, i]
    return total


@numba.njit(cache=True)
def grow_members(
    table: IntArray, count: int, block_size: int, room: int
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Give each member the blocks (of ``block_size`` tokens) its next token needs; returns how
    many and the members' KV tokens, or -1 (and 0), changing nothing, where they are more than
    ``room``."""
    total = 0
    context = 0
    for i in range(count):
        kv = table[KV_TOKENS, i]
        context += kv
        short = (kv + block_size) // block_size - table[BLOCKS, i]
        if short > 0:
            total += short
    if total > room:
        return -1, 0
    for i in range(count):
        short = (table[KV_TOKENS, i] + block_size) // block_size - table[BLOCKS, i]
        if short > 0:
            table[BLOCKS, i] += short
    return total, context


@numba.njit(cache=True)
def complete_members(
    table: IntArray,
    count: int,
    row: int,
    prev_row: int,
    block_size: int,
    release: bool,
    slot_accepted: IntArray,
    slot_rejected: IntArray,
    ema: FloatArray,
    paused: IntArray,
    finished: IntArray,
) -> tuple[int, int, int, int, int, int]:  # pragma: no cover - compiled
    """:meth:`SpecCohort.complete`'s arithmetic, member by member in order as
    :meth:`~cbsim.engine.scheduler.base.SchedulerPolicy.complete` does it one request at a time:
    the step's counts added (every member's decode steps; the speculative steps, drafts and
    accepted drafts of those drafting, and their slots' counts and EMAs as
    :func:`~cbsim.engine.speculative.slots.observe_steps` adds them), and the tokens emitted, the
    gapless ones, the zero gaps, the blocks released, and how many paused and finished: the
    previous rows of those that paused written into ``paused``, the positions of those that
    finished into ``finished`` (each of at least ``count``; no arrays handed back, which would
    cost each call their allocation and boxing)."""
    emitted_total = 0
    gaps = 0
    zero_gaps = 0
    freed = 0
    paused_count = 0
    finished_count = 0
    for i in range(count):
        drafts = table[DRAFTS, i]  # the step's counts, verified already
        table[DECODE_STEPS, i] += 1
        if drafts > 0:
            table[SPEC_STEPS, i] += 1
            table[DRAFTED, i] += drafts
            table[ACCEPTED_TOTAL, i] += table[ACCEPTED, i]
            observe_step(
                slot_accepted, slot_rejected, ema, table[SLOT, i], drafts, table[ACCEPTED, i],
                EMA_WEIGHT,
            )  # fmt: skip
        emitted = 1 + table[ACCEPTED, i]
        kv = table[KV_TOKENS, i] + emitted
        table[KV_TOKENS, i] = kv
        if release:  # the blocks reserved for rejected drafts
            surplus = table[BLOCKS, i] + (-kv // block_size)
            if surplus > 0:
                freed += surplus
                table[BLOCKS, i] -= surplus
        if table[LAST_ROW, i] == prev_row:
            gaps += 1
        else:
            paused[paused_count] = table[LAST_ROW, i]
            paused_count += 1
        zero_gaps += emitted - 1
        table[LAST_ROW, i] = row
        generated = table[GENERATED, i] + emitted
        table[GENERATED, i] = generated
        emitted_total += emitted
        if generated >= table[OUTPUTS, i]:
            finished[finished_count] = i
            finished_count += 1
    return emitted_total, gaps, zero_gaps, freed, paused_count, finished_count


@numba.njit(cache=True)
def verify_members(
    table: IntArray,
    count: int,
    words: npt.NDArray[np.uint64],
    levels: FloatArray,
    acceptance: int,
    iid_alpha: float,
    rates: FloatArray,
    drift: float,
) -> tuple[int, int, int, int, int, int]:  # pragma: no cover - compiled
    """A step's verification of the members drafting (k > 0, in order), the draws of
    :func:`~cbsim.engine.speculative.step_kernel.verify_step_kernel` for a batch of them: their
    accepted drafts in the table (counted, and their slots' counts and EMAs updated, when the
    step completes: :func:`complete_members`). ``levels``: each member's drawn α (scaled as the
    model reads it). Returns the members drafting, the drafts, those accepted, the steps
    rejecting one, and the least and most drafts of a member (the least 0 where some member
    drafted none)."""
    rows = 0
    width = int(np.int64(0))  # not the literal 0: the verification kernel takes an int64 width
    k_min = 1 << 62
    for i in range(count):
        table[ACCEPTED, i] = 0
        k = table[DRAFTS, i]
        if k > 0:
            rows += 1
            width = max(width, k)
        k_min = min(k_min, k)
    if rows == 0:
        return 0, 0, 0, 0, 0, 0
    ks = np.empty(rows, dtype=np.int64)
    row_levels = np.empty(rows)
    generated = np.empty(rows, dtype=np.int64)
    members = np.empty(rows, dtype=np.int64)
    j = 0
    for i in range(count):
        if table[DRAFTS, i] > 0:
            ks[j] = table[DRAFTS, i]
            row_levels[j] = levels[i]
            generated[j] = table[GENERATED, i]
            members[j] = i
            j += 1
    drawn = draw_accepted(
        words, width, ks, row_levels, generated, acceptance, iid_alpha, rates, drift
    )
    drafted = 0
    accepted = 0
    rejecting = 0
    for j in range(rows):
        table[ACCEPTED, members[j]] = drawn[j]
        drafted += ks[j]
        accepted += drawn[j]
        if drawn[j] < ks[j]:
            rejecting += 1
    return rows, drafted, accepted, rejecting, k_min, width


@numba.njit(cache=True)
def members_run_state(
    table: IntArray,
    count: int,
    k_top: int,
    accepted: IntArray,
    rejected: IntArray,
    ema: FloatArray,
    model_alpha: FloatArray,
) -> tuple[IntArray, FloatArray, int]:  # pragma: no cover - compiled
    """A decode run's state of the members (:meth:`SpecCohort.run_state`): their KV tokens,
    blocks, outputs so far, outputs and slots from the table, their slots' figures
    (:func:`~cbsim.engine.speculative.slots.read_run_rows`: accepted drafts, rejecting steps,
    EMA, drawn α) and their outputs left, as the run's integer and real tables (its counters'
    rows left for the run kernel to set); the most tokens an iteration can verify."""
    ints = np.empty((RUN_INTS, count), dtype=np.int64)
    reals = np.empty((RUN_REALS, count))
    bound = 0
    for i in range(count):
        ints[RUN_KV, i] = table[KV_TOKENS, i]
        ints[RUN_BLOCKS, i] = table[BLOCKS, i]
        ints[RUN_GENERATED, i] = table[GENERATED, i]
        ints[RUN_OUTPUT, i] = table[OUTPUTS, i]
        ints[RUN_SLOT, i] = table[SLOT, i]
        left = table[OUTPUTS, i] - table[GENERATED, i]
        bound += left if left < k_top else k_top
    read_run_rows(accepted, rejected, ema, model_alpha, ints, reals)
    return ints, reals, bound


@numba.njit(cache=True)
def advance_members(
    table: IntArray,
    count: int,
    ints: IntArray,
    reals: FloatArray,
    first_row: int,
    prev_row: int,
    iterations: int,
    accepted_by_slot: IntArray,
    rejected_by_slot: IntArray,
    ema_by_slot: FloatArray,
    paused: IntArray,
    finished: IntArray,
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """A decode run of ``iterations`` iterations (rows from ``first_row``; the replica's
    previous one ``prev_row``) applied to the members, its state after it ``ints`` and ``reals``
    (rows ``RUN_KV`` .., ``RUN_EMA`` ..): their KV tokens, outputs and blocks, its counters
    (steps, drafts, accepted, decode steps) added, their last rows moved (to the iteration each
    finished in, if one); and to their slots: the accepted drafts, rejecting steps and EMA.
    Writes the previous rows of the members that paused before it into ``paused`` and the
    positions of those that finished (in order) into ``finished`` (buffers of at least ``count``:
    an array handed back costs a microsecond); returns how many of each and the drafts the run
    accepted."""
    write_run_rows(accepted_by_slot, rejected_by_slot, ema_by_slot, ints, reals)
    paused_count = 0
    finished_count = 0
    accepted = 0
    for i in range(count):
        accepted += ints[RUN_ACCEPTS, i]
        if table[LAST_ROW, i] != prev_row:
            paused[paused_count] = table[LAST_ROW, i]
            paused_count += 1
        table[KV_TOKENS, i] = ints[RUN_KV, i]
        table[GENERATED, i] = ints[RUN_GENERATED, i]
        table[BLOCKS, i] = ints[RUN_BLOCKS, i]
        table[SPEC_STEPS, i] += ints[RUN_STEPS, i]
        table[DRAFTED, i] += ints[RUN_DRAFTS, i]
        table[ACCEPTED_TOTAL, i] += ints[RUN_ACCEPTS, i]
        table[DECODE_STEPS, i] += ints[RUN_DECODE_STEPS, i]
        done = ints[RUN_FINISHED_AT, i]
        if done >= 0:
            table[LAST_ROW, i] = first_row + done
            finished[finished_count] = i
            finished_count += 1
        else:
            table[LAST_ROW, i] = first_row + iterations - 1
    return paused_count, finished_count, accepted
