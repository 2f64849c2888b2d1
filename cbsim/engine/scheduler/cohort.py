"""The decode cohort: running requests that decode one token in every iteration, kept as a group.

Between arrivals most of a busy replica's running requests do the same thing every iteration:
each decodes one token, its KV grows by one, and now and then it needs one more block or
finishes. Stepping them one by one costs Python work per request per iteration, which is most of
a capacity search's time. A scheduler that forms its decode entries in running order with a token
budget that holds them all (Sarathi, vLLM) keeps those requests in a cohort instead: each member
is remembered as it was when it joined (its KV tokens, outputs and blocks, and the cohort's
iteration count ``t`` then), and its state after ``t`` more iterations is that plus ``t``. What
an iteration needs of the whole cohort comes from sums kept as members join and leave: the
context tokens attention reads, the outputs still to come, the blocks due (a member needs a block
every ``block_size`` iterations from a known one on, so members are counted by the residue of
that iteration), and who finishes (a calendar keyed by the iteration of each member's last token).

Nothing outside the scheduler sees a member's fields change: :meth:`DecodeCohort.materialize`
writes every member's current state back (before a decode run is planned, at the end of a run),
:meth:`DecodeCohort.dissolve` does that and empties the cohort (before anything changes members
one by one: a decode run, a preemption, a batch that cannot take them all). Finishing members
are written back one by one as they finish. The results are those of stepping the requests one
by one, bit for bit: the same blocks allocated in the same iterations, the same finishes in the
same order, the same sums (whole numbers) for the cost model.
"""

from __future__ import annotations

import operator

import numba
import numpy as np
import numpy.typing as npt

from cbsim.cost.kernel_call import KernelCall
from cbsim.workload.request import Request

IntArray = npt.NDArray[np.int64]

BY_ADMISSION = operator.attrgetter("admit_seq")
"""Running (admission) order: a scheduler's running requests are in it."""


class DecodeCohort:
    """The cohort of one replica's scheduler (see the module docstring)."""

    __slots__ = (
        "_active",
        "_arrays",
        "_free_slots",
        "_state_call",
        "block_size",
        "finishing",
        "formed",
        "growth",
        "kv_base",
        "left_base",
        "members",
        "pending_growth",
        "row",
        "t",
    )

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.t = 0  # cohort iterations completed
        self.formed = False  # an iteration formed and not yet completed
        # member -> (t at joining, KV tokens, outputs, blocks then, first iteration needing a
        # block, slot)
        self.members: dict[Request, tuple[int, int, int, int, int, int]] = {}
        self.finishing: dict[int, list[Request]] = {}  # completion count -> who finishes in it
        self.pending_growth: dict[int, list[Request]] = {}  # first block-growing formation
        self.growth = [0] * block_size  # members growing a block every block_size formations
        self.kv_base = 0  # sum of (KV tokens - t) at joining: the KV now is this + members * t
        self.left_base = 0  # sum of (outputs left + t) at joining
        self.row = -1  # the recorder row of the last cohort iteration completed
        # the members' joining state by slot (rows: t, KV tokens, outputs left, blocks), for
        # planning a decode run without visiting them one by one
        self._arrays = np.zeros((4, 64), dtype=np.int64)
        self._active = np.zeros(64, dtype=np.bool_)
        self._free_slots = list(range(63, -1, -1))
        self._state_call = KernelCall(_members_now)  # dispatched once (cbsim.cost.kernel_call)

    def __len__(self) -> int:
        return len(self.members)

    def __contains__(self, req: Request) -> bool:
        return req in self.members

    # ------------------------------------------------------------------ forming an iteration

    def blocks_due(self) -> int:
        """Blocks the members need for the iteration about to be formed."""
        f = self.t + 1
        pending = self.pending_growth.get(f)
        return self.growth[f % self.block_size] + (len(pending) if pending else 0)

    def join(self, req: Request) -> None:
        """``req`` (decoding, its blocks for its next token not yet grown) joins before the
        iteration about to be formed."""
        t = self.t
        kv = req.kv_tokens
        generated = req.generated
        blocks = req.blocks
        grow_at = t + blocks * self.block_size - kv + 1
        if not self._free_slots:
            self._grow_slots()
        slot = self._free_slots.pop()
        self._arrays[:, slot] = (t, kv, req.output_tokens - generated, blocks)
        self._active[slot] = True
        self.members[req] = (t, kv, generated, blocks, grow_at, slot)
        self.pending_growth.setdefault(grow_at, []).append(req)
        self.finishing.setdefault(t + req.output_tokens - generated, []).append(req)
        self.kv_base += kv - t
        self.left_base += req.output_tokens - generated + t

    def form(self) -> int:
        """Form the next iteration: every member decodes one token. Returns the context tokens
        they read (the sum of their KV tokens before it)."""
        f = self.t + 1
        starting = self.pending_growth.pop(f, None)
        if starting:
            self.growth[f % self.block_size] += len(starting)
        self.formed = True
        return self.kv_base + len(self.members) * self.t

    def outputs_left(self) -> int:
        """The outputs the members still have to sample (their outstanding tokens)."""
        return self.left_base - len(self.members) * self.t

    # ------------------------------------------------------------------ completing it

    def complete(self, row: int) -> list[Request]:
        """The formed iteration ended as recorder row ``row``: every member emitted a token.
        Returns the members that finished, written back and out of the cohort, in running
        (admission) order."""
        self.t += 1
        self.formed = False
        self.row = row
        done = self.finishing.pop(self.t, None)
        if not done:
            return []
        if len(done) > 1:
            done.sort(key=BY_ADMISSION)
        for req in done:
            self._write_back_now(req, self.members[req])
            self._leave(req)
        return done

    def advance(self, iterations: int, first_row: int) -> list[tuple[int, Request]]:
        """A decode run of ``iterations`` iterations (rows from ``first_row``) in which every
        member decoded until it finished. Returns the members that finished, as (iterations it
        ran, request), written back and out of the cohort, in running (admission) order."""
        assert not self.formed
        t = self.t
        end = t + iterations
        done: list[Request] = []
        growth = self.growth
        block_size = self.block_size
        for f in _keys_up_to(self.pending_growth, t, end):
            growth[f % block_size] += len(self.pending_growth.pop(f))
        for f in _keys_up_to(self.finishing, t, end):
            done.extend(self.finishing.pop(f))
        self.t = end
        self.row = first_row + iterations - 1
        if len(done) > 1:
            done.sort(key=BY_ADMISSION)
        finished = []
        for req in done:
            entry = self.members[req]
            total = req.output_tokens - entry[2]  # the iterations it ran in the cohort
            steps = entry[0] + total - t  # of them, in this run
            self._write_back(req, entry, total, total, first_row + steps - 1)
            self._leave(req)
            finished.append((steps, req))
        return finished

    # ------------------------------------------------------------------ members' own fields

    def _write_back(
        self,
        req: Request,
        entry: tuple[int, int, int, int, int, int],
        steps: int,
        formed: int,
        last_row: int,
    ) -> None:
        """Write into ``req`` its state after ``steps`` tokens and ``formed`` iterations formed
        (their blocks grown) since it joined, its last token in row ``last_row``."""
        _, kv, generated, blocks, _, _ = entry
        req.kv_tokens = kv + steps
        req.generated = generated + steps
        if steps:
            req.last_row = last_row
        grown = -(-(kv + formed) // self.block_size)
        req.blocks = grown if grown > blocks else blocks

    def _write_back_now(self, req: Request, entry: tuple[int, int, int, int, int, int]) -> None:
        """:meth:`_write_back` of the member as it is now."""
        steps = self.t - entry[0]
        self._write_back(req, entry, steps, steps + 1 if self.formed else steps, self.row)

    def _leave(self, req: Request) -> None:
        t0, kv, generated, _, grow_at, slot = self.members.pop(req)
        self._active[slot] = False
        self._free_slots.append(slot)
        self.kv_base -= kv - t0
        self.left_base -= req.output_tokens - generated + t0
        formed = self.t + 1 if self.formed else self.t
        if grow_at <= formed:
            self.growth[grow_at % self.block_size] -= 1
        else:
            self.pending_growth[grow_at].remove(req)

    def materialize(self) -> None:
        """Write every member's current state into its request (the cohort carries on)."""
        write_back = self._write_back_now
        for req, entry in self.members.items():
            write_back(req, entry)

    def dissolve(self) -> None:
        """Write every member back and empty the cohort."""
        self.materialize()
        self.members.clear()
        self.finishing.clear()
        self.pending_growth.clear()
        self.growth = [0] * self.block_size
        self.kv_base = self.left_base = 0
        self._active[:] = False
        self._free_slots = list(range(len(self._active) - 1, -1, -1))

    def _grow_slots(self) -> None:
        size = len(self._active)
        self._arrays = np.concatenate([self._arrays, np.zeros_like(self._arrays)], axis=1)
        self._active = np.concatenate([self._active, np.zeros(size, dtype=np.bool_)])
        self._free_slots = list(range(2 * size - 1, size - 1, -1))

    def decode_state(self) -> tuple[IntArray, IntArray, IntArray]:
        """The members' KV tokens, outputs left and blocks now (between iterations), in slot
        order: what a decode run is planned from (its sums do not depend on the order)."""
        kv, left, blocks = self._state_call(self._arrays, self._active, self.t, self.block_size)
        return kv, left, blocks


@numba.njit(cache=True)
def _members_now(
    arrays: IntArray, active: npt.NDArray[np.bool_], t: int, block_size: int
) -> IntArray:
    """:meth:`DecodeCohort.decode_state` from the slots: each member's joining state advanced by
    the iterations since (one pass, compiled: a run is planned at every arrival), as the rows of
    one table (an array handed back costs a microsecond)."""
    count = 0
    for slot in range(len(active)):
        if active[slot]:
            count += 1
    state = np.empty((3, count), dtype=np.int64)
    kv, left, blocks = state[0], state[1], state[2]
    i = 0
    for slot in range(len(active)):
        if active[slot]:
            steps = t - arrays[0, slot]
            tokens = arrays[1, slot] + steps
            kv[i] = tokens
            left[i] = arrays[2, slot] - steps
            grown = -(-tokens // block_size)
            blocks[i] = grown if grown > arrays[3, slot] else arrays[3, slot]
            i += 1
    return state


def _keys_up_to(calendar: dict[int, list[Request]], after: int, last: int) -> list[int]:
    """The keys of ``calendar`` in (after, last], in order."""
    if last - after <= len(calendar):
        return [f for f in range(after + 1, last + 1) if f in calendar]
    return sorted(f for f in calendar if after < f <= last)
