"""What every batching scheduler shares: queues, KV accounting, preemption, applying an iteration.

A scheduler owns one replica's waiting queue (FCFS) and running set (in admission order) and its
KV cache. Each iteration the engine asks it for a :class:`Batch` — which requests run and how many
new tokens each processes — and, when the iteration's time has passed, hands the batch back with
:meth:`SchedulerPolicy.complete`, which advances every request and frees the KV of finished ones.
The scheduler never computes time; policies differ only in how they form batches.

Applying an iteration also logs what the inter-token latency needs, exactly and cheaply: a token a
request emits in the iteration right after its previous one (on its replica) has that iteration's
gap, so only a count is kept (``Batch.gap_tokens``); a token after a pause (preempted, left out by
a token budget) logs the pair (this iteration's row, the row of its previous token) in
``gap_pairs``; drafts accepted in one speculative step arrive together with a gap of zero
(``zero_gaps``). Rows are the iterations' rows in the recorder.
"""

from __future__ import annotations

import itertools
import operator
from abc import ABC, abstractmethod
from array import array
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from cbsim.common.errors import unknown_name
from cbsim.cost.roofline import BatchStats
from cbsim.engine.decode_plan import DecodeRun
from cbsim.engine.pause_log import log_own_pauses, log_shared_pause
from cbsim.engine.scheduler.cohort import DecodeCohort, IntArray
from cbsim.memory.kvcache import KVCache, blocks_for_tokens
from cbsim.memory.prefix_cache import NO_HIT, Hit, PrefixCache
from cbsim.schema.scheduler import Scheduler as SchedulerConfig
from cbsim.workload.request import Request, Status

if TYPE_CHECKING:
    from cbsim.engine.speculative.cohort import SpecCohort

# running requests from which a decode cohort pays (joins, calendars and array reads cost more
# than stepping a handful of requests one by one), and below which one is dissolved; for a
# policy whose prompt chunks share their iterations with the running decodes (Sarathi), from
# fewer: every iteration of each arrival's prompt then steps all the decodes
COHORT_FROM = 64
COHORT_UNDER = 32
MIXED_COHORT_FROM = 16
MIXED_COHORT_UNDER = 8
# the speculative cohort of such a policy, from fewer still: each of its steps is planned,
# verified and priced in one compiled call (cbsim.engine.speculative.cohort_step) where stepping
# plans and verifies request by request (a prefill-first policy's keeps COHORT_FROM: its
# speculative decodes are stepped one by one only between decode runs)
SPEC_MIXED_COHORT_FROM = 4
SPEC_MIXED_COHORT_UNDER = 2


class WaitingQueue(deque[Request]):
    """The FCFS queue of a replica, keeping the sum of its requests' outstanding tokens (a
    queued request's do not change while it waits: it holds no KV), so a load-aware router reads
    a replica's load in O(1) however long the queue."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = 0

    def append(self, req: Request) -> None:
        self.tokens += req.outstanding_tokens
        super().append(req)

    def appendleft(self, req: Request) -> None:
        self.tokens += req.outstanding_tokens
        super().appendleft(req)

    def popleft(self) -> Request:
        req = super().popleft()
        self.tokens -= req.outstanding_tokens
        return req

    def remove(self, req: Request) -> None:
        super().remove(req)
        self.tokens -= req.outstanding_tokens


@dataclass(slots=True)
class Batch:
    """One iteration's work: request i processes ``new_tokens[i]`` tokens."""

    requests: list[Request] = field(default_factory=list)
    new_tokens: list[int] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    # speculative decoding: draft length per entry (0 = none), accepted drafts, drafting seconds
    ks: list[int] | None = None
    decoding: list[int] = field(default_factory=list)  # indices of the decode/verify entries
    accepted: list[int] | None = None
    # the verification's totals: verified tokens, drafted, accepted, the least and most k of a
    # decoding entry, decoding entries (set by SpeculativeDecoding.verify)
    spec_totals: tuple[int, int, int, int, int, int] | None = None
    verified: tuple[int, ...] | None = None  # a cohort's verification drawn with its plan
    draft_s: float = 0.0
    # the target's seconds for the step where the speculative plan priced it (the goodput
    # policy's compiled plan: CostModel.time_stats of ``stats``, the same float); -1: not priced
    target_s: float = -1.0
    load_s: float = 0.0  # KV loaded from the CPU tier for this step (prefix caching)
    gap_tokens: int = 0  # tokens whose previous token came in the replica's previous iteration
    cohort: int = 0  # decodes of the scheduler's decode cohort, ahead of ``requests``
    # the speculative decode cohort whose members are those decodes (None: the plain one)
    members: SpecCohort | None = None

    def __len__(self) -> int:
        return len(self.requests) + self.cohort


# Called once per finished request, with the request and the iteration's end time.
FinishCallback = Callable[[Request], None]

_REGISTRY: dict[str, type[SchedulerPolicy]] = {}


def register(name: str) -> Callable[[type[SchedulerPolicy]], type[SchedulerPolicy]]:
    """Class decorator registering a scheduler policy under its YAML ``kind``."""

    def decorate(cls: type[SchedulerPolicy]) -> type[SchedulerPolicy]:
        cls.kind = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def scheduler_kinds() -> list[str]:
    return sorted(_REGISTRY)


def make_scheduler(config: SchedulerConfig, kv: KVCache) -> SchedulerPolicy:
    """The registered policy named by ``config.kind``."""
    cls = _REGISTRY.get(config.kind)
    if cls is None:
        raise unknown_name("scheduler", config.kind, scheduler_kinds())
    return cls(config, kv)


class SchedulerPolicy(ABC):
    """Base class of batching policies for one replica."""

    kind: ClassVar[str] = ""
    reserves_full_length: ClassVar[bool] = False
    # forms its decodes in running order, all of them when its budget allows, ahead of any
    # other entry (what a decode cohort needs: see cbsim.engine.scheduler.cohort)
    forms_cohorts: ClassVar[bool] = False
    # whether its iterations that carry prompt chunks carry the running decodes too
    mixes_decodes: ClassVar[bool] = False

    def __init__(self, config: SchedulerConfig, kv: KVCache) -> None:
        self.config = config
        self.kv = kv
        self.waiting = WaitingQueue()
        self.running: list[Request] = []
        self.preemptions = 0
        self._admissions = 0
        self.prefix: PrefixCache | None = None  # the engine sets it when prefix caching is on
        # flat (row, row of the previous token) pairs, 32-bit (rows up to 2**31 - 1): there are
        # about as many as requests times the mean batch, the largest log a run keeps
        self.gap_pairs = array("i")
        self.zero_gaps = 0
        self._running_tokens: int | None = None  # see running_tokens
        # the decode cohort (keep_cohort) and, while it has members, the running requests
        # outside it in running order (None: every running request is outside)
        self.cohort: DecodeCohort | None = None
        # or, for speculative decoding, the speculative decode cohort (keep_spec_cohort)
        self.spec_cohort: SpecCohort | None = None
        self._outsiders: list[Request] | None = None
        # joined the cohort since its last iteration completed (in the one formed, or before a
        # decode run was planned): their last tokens are their own, not the cohort's
        self._entrants: list[Request] = []

    # ------------------------------------------------------------------ decode cohort

    def keep_cohort(self) -> None:
        """Keep running decodes in a decode cohort (:mod:`cbsim.engine.scheduler.cohort`). Only for a
        policy that ``forms_cohorts``, and only where nothing but this scheduler and the engine
        loop reads or changes a running request between iterations (no speculation, prefix
        cache, client timeouts, stages or disaggregation)."""
        if self.forms_cohorts:
            self.cohort = DecodeCohort(self.kv.block_size)

    def keep_spec_cohort(self, cohort: SpecCohort) -> None:
        """Keep running speculative decodes in ``cohort`` (:mod:`cbsim.engine.speculative.cohort`),
        where :meth:`keep_cohort` would keep plain ones."""
        if self.forms_cohorts:
            self.spec_cohort = cohort

    def materialize_cohort(self) -> None:
        """Write the cohort's members' current state into their requests (it carries on)."""
        if self.cohort is not None:
            self.cohort.materialize()
        if self.spec_cohort is not None:
            self.spec_cohort.materialize()

    def _in_cohort_now(self) -> bool:
        """Whether the running decodes go through the decode cohort now: from
        :data:`COHORT_FROM` running requests on, until they fall under :data:`COHORT_UNDER`
        (then it is dissolved); :data:`MIXED_COHORT_FROM` and :data:`MIXED_COHORT_UNDER` where
        the policy :attr:`mixes_decodes`, :data:`SPEC_MIXED_COHORT_FROM` and
        :data:`SPEC_MIXED_COHORT_UNDER` for its speculative cohort. Either way the results are
        the same."""
        cohort = self._kept_cohort()
        if cohort is None:
            return False
        if not self.mixes_decodes:
            start, under = COHORT_FROM, COHORT_UNDER
        elif cohort is self.spec_cohort:
            start, under = SPEC_MIXED_COHORT_FROM, SPEC_MIXED_COHORT_UNDER
        else:
            start, under = MIXED_COHORT_FROM, MIXED_COHORT_UNDER
        if len(cohort):
            if len(self.running) >= under:
                return True
            self.dissolve_cohort()
            return False
        return len(self.running) >= start

    def _kept_cohort(self) -> DecodeCohort | SpecCohort | None:
        """The decode cohort this scheduler keeps, plain or speculative (None: none)."""
        return self.cohort if self.cohort is not None else self.spec_cohort

    def cohort_decode_state(self) -> tuple[IntArray, IntArray, IntArray] | None:
        """Every running request's KV tokens, outputs left and blocks (in no particular order),
        from the decode cohort, the decoding requests outside it joining it first; None when
        the cohort is not in use or some running request is not decoding."""
        cohort = self.cohort
        if cohort is None or not self._in_cohort_now():
            return None
        outsiders = self._outside()
        if not self._all_decoding(outsiders):
            return None
        for req in outsiders:
            cohort.join(req)
        self._entrants.extend(outsiders)
        self._outsiders = []
        return cohort.decode_state()

    def _outside(self) -> list[Request]:
        """The running requests outside the decode cohort, in running order."""
        return self.running if self._outsiders is None else self._outsiders

    def _all_decoding(self, requests: list[Request]) -> bool:
        """Whether each of ``requests`` decodes next (its prompt done, its first token out)."""
        return not any(r.kv_tokens < r.prefill_target or r.generated == 0 for r in requests)

    def dissolve_cohort(self) -> None:
        """Write the members back and empty the cohort: every running request is outside it."""
        if self._outsiders is None:
            return
        if self.cohort is not None:
            self.cohort.dissolve()
        if self.spec_cohort is not None:
            self.spec_cohort.dissolve()
        self._outsiders = None
        self._entrants = []

    def spec_cohort_for_run(self) -> SpecCohort | None:
        """The speculative cohort, holding every running request (the decoding ones outside it
        joining, in running order), for a decode run to read and advance on its table; None,
        the cohort dissolved, where it is not in use or a running request does not decode."""
        cohort = self.spec_cohort
        if cohort is None or not self._in_cohort_now():
            self.dissolve_cohort()
            return None
        outsiders = self._outside()
        if not self._all_decoding(outsiders):
            self.dissolve_cohort()
            return None
        for req in outsiders:
            cohort.join(req)
        self._outsiders = []
        return cohort

    def spill_cohort(self, batch: Batch) -> None:
        """Put the speculative cohort's members, formed into ``batch``, back into it as entries of
        one token each (ahead of the others, as the one-by-one path puts them), written back, and
        empty the cohort: for a step the cohort's compiled plan cannot take."""
        cohort = batch.members
        assert cohort is not None and cohort is self.spec_cohort
        members = cohort.requests
        cohort.dissolve()  # written back; ``members`` keeps the list it emptied
        batch.requests[:0] = members
        batch.new_tokens[:0] = [1] * len(members)
        batch.cohort = 0
        batch.members = None
        self._outsiders = None

    # ------------------------------------------------------------------ queue interface

    def can_ever_fit(self, req: Request) -> bool:
        """Whether the request could complete alone on an empty replica."""
        return blocks_for_tokens(req.max_kv_tokens, self.kv.block_size) <= self.kv.total_blocks

    def enqueue(self, req: Request) -> None:
        self.waiting.append(req)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting) or bool(self.running)

    def outstanding_tokens(self) -> int:
        """Tokens this replica still has to process for the requests it holds."""
        return self.waiting.tokens + self.running_tokens()

    def running_tokens(self) -> int:
        """The running requests' outstanding tokens, summed once per state of the replica: the
        replica's process calls :meth:`forget_running_tokens` after every call that may change
        its running requests (forming a batch, planning drafts, completing an iteration,
        applying a decode run), and nothing else changes them."""
        total = self._running_tokens
        if total is None:
            total = 0
            outsiders = self._outsiders
            for req in self.running if outsiders is None else outsiders:
                prefill = req.prefill_target - req.kv_tokens  # Request.outstanding_tokens
                total += (prefill if prefill > 0 else 0) + req.output_tokens - req.generated
            if outsiders is not None:
                cohort = self._kept_cohort()
                assert cohort is not None
                total += cohort.outputs_left()
            self._running_tokens = total
        return total

    def forget_running_tokens(self) -> None:
        self._running_tokens = None

    def step_budget(self) -> int | None:
        """The tokens one iteration may schedule in all, decodes' verify tokens counted (k + 1
        per speculating request, as vLLM V1 and TensorRT-LLM count drafts in the budget), or
        None when this policy's decode iterations are not budgeted."""
        return None

    @abstractmethod
    def next_batch(self, now: float) -> Batch:
        """The batch of the iteration starting at ``now`` (empty when nothing can run)."""

    # ------------------------------------------------------------------ decode runs

    def decode_run_mode(self) -> bool | None:
        """Whether the coming iterations are a pure decode of every running request.

        None when they are not (a prefill is due or could be admitted, or the policy would leave
        some running request out). Otherwise whether a finish must end the run: True while
        requests wait, since the blocks or slot a finish frees could admit one.
        """
        outsiders = self._outside()
        if not self.running or any(r.kv_tokens < r.prefill_target for r in outsiders):
            return None
        if not self.waiting:
            return False
        return None if self._head_admissible() else True

    def _head_admissible(self) -> bool:
        """Whether the first waiting request could be admitted into the next batch."""
        return True

    def apply_decode_run(
        self, run: DecodeRun, on_finish: FinishCallback, first_row: int = -1, prev_row: int = -1
    ) -> None:
        """Advance every running request through a planned decode run whose iterations take rows
        ``first_row`` on; ``prev_row`` is the row of this replica's iteration before the run."""
        if self._in_cohort_now() and self._run_in_cohort(run, on_finish, first_row, prev_row):
            return
        self.dissolve_cohort()
        iterations = run.iterations
        ends = run.ends
        block_size = self.kv.block_size
        grows = not self.reserves_full_length
        still_running = []
        finished = []
        paused = 0
        gap_pairs = self.gap_pairs
        for req in self.running:
            last_row = req.last_row
            if last_row != prev_row:
                gap_pairs.append(first_row)
                gap_pairs.append(last_row)
                paused += 1
            output = req.output_tokens
            generated = req.generated
            steps = output - generated
            if steps > iterations:
                steps = iterations
            kv_tokens = req.kv_tokens + steps
            req.kv_tokens = kv_tokens
            generated += steps
            req.generated = generated
            req.last_row = first_row + steps - 1
            if grows:
                needed = -(-kv_tokens // block_size)
                if needed > req.blocks:
                    req.blocks = needed
            if generated >= output:
                req.status = Status.FINISHED
                req.finish_s = ends[steps - 1]
                # holding its final blocks until settled; the run freed its private ones
                finished.append((steps - 1, req, req.blocks - req.shared_blocks))
                on_finish(req)
            else:
                still_running.append(req)
        run.paused_at_start = paused
        self.running = still_running
        self.kv.used_blocks = run.kv_used_after
        if finished or self.prefix is not None:
            self.settle_run(run, finished)
        self.kv.check("a decode run")

    def _run_in_cohort(
        self, run: DecodeRun, on_finish: FinishCallback, first_row: int, prev_row: int
    ) -> bool:
        """:meth:`apply_decode_run` with every running request in the decode cohort (those
        outside join it first): only the pauses before the run and the finishes in it are
        touched one by one. False, changing nothing, when a running request is not decoding."""
        cohort = self.cohort
        assert cohort is not None
        outsiders = self._outside()
        if not self._all_decoding(outsiders):
            return False
        paused = 0
        fresh = self._entrants
        if outsiders or fresh or cohort.row != prev_row:
            paused = self._log_cohort_pauses(first_row, prev_row, outsiders)
            for req in outsiders:
                cohort.join(req)
            self._outsiders = []
            self._entrants = []
        run.paused_at_start = paused
        ends = run.ends
        finished = cohort.advance(run.iterations, first_row)
        for steps, req in finished:
            req.status = Status.FINISHED
            req.finish_s = ends[steps - 1]
            on_finish(req)
        for _, req in finished:
            req.blocks = 0  # the run freed them
        self.kv.used_blocks = run.kv_used_after
        self.kv.check("a decode run of the cohort")
        if finished:
            self._drop_finished([req for _, req in finished])
        return True

    def _log_cohort_pauses(self, row: int, prev_row: int, outsiders: Iterable[Request] = ()) -> int:
        """Log the pauses of the tokens in row ``row`` (this replica's previous row: ``prev_row``)
        of the decode cohort's members and ``outsiders`` (running requests about to join it);
        returns how many paused. The members that were in the cohort's last iteration share one
        pair, logged in one call (:mod:`cbsim.engine.pause_log`); the entrants and the outsiders
        have their own last rows."""
        cohort = self.cohort
        assert cohort is not None
        own = self._entrants
        paused = log_own_pauses(self.gap_pairs, row, prev_row, itertools.chain(own, outsiders))
        stayed = len(cohort) - len(own)
        if stayed and cohort.row != prev_row:
            log_shared_pause(self.gap_pairs, row, cohort.row, stayed)
            paused += stayed
        return paused

    def _drop_finished(self, finished: list[Request]) -> None:
        """Take the requests that just finished out of the running set (and the outsiders)."""
        if len(finished) <= 3:  # a scan or three in C beats rebuilding the list in Python
            outsiders = self._outsiders
            for req in finished:
                if outsiders is not None and req in outsiders:
                    outsiders.remove(req)
                self.running.remove(req)
            return
        self.running = [r for r in self.running if r.status == Status.RUNNING]
        if self._outsiders is not None:
            self._outsiders = [r for r in self._outsiders if r.status == Status.RUNNING]

    def settle_run(self, run: DecodeRun, finished: list[tuple[int, Request, int]]) -> None:
        """After a run of iterations computed without the prefix cache: ``finished`` lists the
        requests that finished in it, as (iteration, request, blocks the run freed of it).

        The run only ever allocated free blocks and freed its finished requests' private
        blocks, never their entries, so its ``kv_used`` rows count as in use both the blocks in
        use and those its finishes made cached. Settling hands each finished request to the
        cache in stepping's order (by iteration, then batch order): its answer cached, its
        entries released; then evicts what the run's allocations needed (the least recently
        used entries covering the largest excess of those rows, plus the cached blocks before
        the run, over the cache: an excess that only ever counts entries released by then); and
        lowers each row by the blocks the finishes before it released. A run that decides by the
        exact free blocks (speculative: drafts shorten to fit) stops at its first finish, so
        nothing is released before its last row."""
        prefix = self.prefix
        if prefix is None:
            for _, req, _ in finished:
                req.blocks = 0
            return
        kv = self.kv
        excess = max(run.kv_used) + kv.cached_blocks - kv.total_blocks
        finished.sort(key=operator.itemgetter(0))  # stable: batch order within an iteration
        # as if the run had not freed them, all first (a speculative run frees shared blocks too)
        kv.used_blocks += sum(freed for _, _, freed in finished)
        released: list[tuple[int, int]] = []
        for iteration, req, _ in finished:
            before = kv.used_blocks - (req.blocks - req.shared_blocks)  # its private ones freed
            prefix.finish(req)
            if before != kv.used_blocks:
                released.append((iteration, before - kv.used_blocks))
        if excess > 0:
            prefix.evict_blocks(excess)
        if released:
            lower = [0] * (len(run.kv_used) + 1)
            for iteration, blocks in released:
                lower[iteration + 1] += blocks
            run.kv_used = list(map(operator.sub, run.kv_used, itertools.accumulate(lower)))

    # ------------------------------------------------------------------ shared mechanics

    def _admit(self, req: Request, now: float) -> None:
        req.status = Status.RUNNING
        req.admit_seq = self._admissions
        self._admissions += 1
        if req.first_scheduled_s != req.first_scheduled_s:  # NaN: first admission
            req.first_scheduled_s = now
        self.running.append(req)
        if self._outsiders is not None:
            self._outsiders.append(req)

    def admit_prefilled(self, req: Request, now: float) -> None:
        """A request whose prompt was computed elsewhere (disaggregated prefill) joins the
        running batch, its blocks allocated and its KV in them (its last prompt token still to
        compute: that samples its first output token)."""
        self._admit(req, now)
        self._running_tokens = None

    def cached_prefix_tokens(self, req: Request) -> int:
        """Prompt tokens of ``req`` this replica's prefix cache holds now (what routers see)."""
        prefix = self.prefix
        return 0 if prefix is None else prefix.lookup(req).tokens(self.kv.block_size)

    def _lookup(self, req: Request) -> Hit:
        """The cached prefix ``req`` would reuse if admitted now (none without prefix caching)."""
        return NO_HIT if self.prefix is None else self.prefix.lookup(req)

    def _can_reserve(self, need: int, hit: Hit, *, keep_watermark: bool = False) -> bool:
        """Whether a request needing ``need`` blocks in all, ``hit`` of them cached, fits now."""
        return self.kv.can_allocate(need - hit.blocks + hit.revived, keep_watermark=keep_watermark)

    def _reserve(self, req: Request, need: int, hit: Hit, *, keep_watermark: bool = False) -> bool:
        """Admission's KV: ``need`` blocks for ``req``'s tokens, those of the cached prefix
        ``hit`` (from :meth:`_lookup`, just now) reused rather than allocated and its tokens not
        prefilled again. False, changing nothing, when they do not fit."""
        kv = self.kv
        prefix = self.prefix
        if prefix is None:  # no cache, so no hit: the plain reservation, without the lookups
            if not kv.can_allocate(need, keep_watermark=keep_watermark):
                return False
            kv.allocate(need)
            req.blocks = need
            return True
        if not self._can_reserve(need, hit, keep_watermark=keep_watermark):
            return False
        if hit.segments or hit.cpu_segments:
            prefix.acquire(req, hit)
            reused = hit.tokens(kv.block_size)
            req.kv_tokens = reused
            self.waiting.tokens -= reused  # still queued: its outstanding tokens just fell
        if req.first_scheduled_s != req.first_scheduled_s:  # NaN: first admission
            req.cached_tokens = req.kv_tokens
            req.cached_tokens_cpu = hit.cpu_blocks * kv.block_size
            req.kv_load_s = req.load_s
        kv.allocate(need - hit.blocks)
        req.blocks = need
        return True

    def _try_grow(self, req: Request, new_tokens: int, *, keep_watermark: bool = False) -> bool:
        """Reserve KV for ``new_tokens`` more tokens of ``req``; False if the cache is too full."""
        need = blocks_for_tokens(req.kv_tokens + new_tokens, self.kv.block_size) - req.blocks
        if need <= 0:
            return True
        if not self.kv.can_allocate(need, keep_watermark=keep_watermark):
            return False
        self.kv.allocate(need)
        req.blocks += need
        return True

    def abort(self, req: Request) -> bool:
        """Drop ``req``, whose client gave up on it, between iterations: out of the waiting queue
        or the running set, its KV blocks freed and its prefix-cache entries released (they stay
        cached, as a preempted request's do). False, changing nothing, when it is in neither."""
        self.dissolve_cohort()
        if req.status == Status.RUNNING and req in self.running:
            self.running.remove(req)
            self.kv.free(req.blocks - req.shared_blocks)
            if req.prefix_node is not None:
                assert self.prefix is not None
                self.prefix.release(req)
            req.blocks = 0
        elif req in self.waiting:
            self.waiting.remove(req)
        else:
            return False
        self._running_tokens = None
        return True

    def _preempt(self, victim: Request) -> None:
        """Recompute preemption: drop the victim's KV, send it to the front of the queue (its
        prefix stays cached)."""
        self.kv.free(victim.blocks - victim.shared_blocks)
        if victim.prefix_node is not None:
            assert self.prefix is not None
            self.prefix.release(victim)
        victim.blocks = 0
        victim.kv_tokens = 0
        victim.prefill_target = victim.prompt_tokens + victim.generated
        victim.status = Status.WAITING
        victim.preemptions += 1
        self.preemptions += 1
        self.running.remove(victim)
        if self._outsiders is not None:  # never a member: see _grow_or_preempt
            self._outsiders.remove(victim)
        self.waiting.appendleft(victim)

    def _grow_or_preempt(self, req: Request, new_tokens: int, batch: Batch) -> bool:
        """Reserve KV for ``req``, preempting the latest-admitted running requests not yet in the
        batch (or ``req`` itself when it is the latest) until it fits. False if ``req`` was preempted."""
        while not self._try_grow(req, new_tokens):
            victim = self.running[-1]
            cohort = self.cohort
            if victim in batch.requests or (
                batch.cohort
                and (
                    (cohort is not None and victim in cohort)
                    or (batch.members is not None and victim in batch.members)
                )
            ):
                victim = req
            self._preempt(victim)
            if victim is req:
                return False
        return True

    def _add_decodes(
        self, batch: Batch, budget: int, prefilling: list[Request] | None = None
    ) -> int:
        """One decode token for each running request, in order, while ``budget`` lasts: KV grown
        (or the latest-admitted requests preempted) and the entry added, as
        :meth:`_grow_or_preempt` and :meth:`_add` do one by one. Requests still prefilling go to
        ``prefilling`` (or into the batch like the others when it is None). Returns the budget
        left. The decodes' sums go into the batch's stats at the end, in one
        :meth:`BatchStats.add_many`: they are whole numbers, so the sums are the same."""
        if self._in_cohort_now():
            if self.spec_cohort is not None:
                left = self._add_spec_cohort(batch, budget, prefilling)
            else:
                left = self._add_cohort(batch, budget, prefilling)
            if left is not None:
                return left
            self.dissolve_cohort()
        block_size = self.kv.block_size
        requests = batch.requests
        new_tokens = batch.new_tokens
        count = cached = 0
        for req in list(self.running):
            if req.status != Status.RUNNING:
                continue  # preempted earlier in this loop
            kv = req.kv_tokens
            if kv < req.prefill_target:
                if prefilling is not None:
                    prefilling.append(req)
                    continue
                if budget <= 0:
                    break
                if self._grow_or_preempt(req, 1, batch):
                    self._add(batch, req, 1)
                    budget -= 1
                continue
            if budget <= 0:
                break
            if -(-(kv + 1) // block_size) > req.blocks and not self._grow_or_preempt(req, 1, batch):
                continue
            requests.append(req)
            new_tokens.append(1)
            count += 1
            cached += kv
            budget -= 1
        batch.stats.add_many(count, 1, cached)
        batch.decode_tokens += count
        return budget

    def _add_cohort(
        self, batch: Batch, budget: int, prefilling: list[Request] | None
    ) -> int | None:
        """:meth:`_add_decodes` with the decodes in the decode cohort: the running requests
        outside it that decode join it, and all of it decodes. None, changing nothing, when that
        would not be what the loop does: the budget does not hold every decode, the blocks due
        do not fit (the loop would preempt), or a request still prefilling would be put in the
        batch (no ``prefilling`` list)."""
        cohort = self.cohort
        assert cohort is not None
        split = self._split_outsiders(len(cohort), budget, prefilling)
        if split is None or isinstance(split, int):
            return split
        entrants, others = split
        decodes = len(cohort) + len(entrants)
        block_size = self.kv.block_size
        blocks = cohort.blocks_due()
        for req in entrants:
            if -(-(req.kv_tokens + 1) // block_size) > req.blocks:
                blocks += 1
        if not self.kv.can_allocate(blocks):
            return None
        for req in entrants:
            cohort.join(req)
        self.kv.allocate(blocks)
        self._entrants.extend(entrants)
        return self._formed(batch, budget, decodes, cohort.form(), others, prefilling)

    def _split_outsiders(
        self, members: int, budget: int, prefilling: list[Request] | None
    ) -> tuple[list[Request], list[Request]] | int | None:
        """The running requests outside a cohort of ``members`` that would join it (decoding)
        and those still prefilling, in running order; or, when nothing decodes, the ``budget``
        (the prefilling ones handed to ``prefilling``); None where the cohort cannot form: a
        request's next token is its first, the budget does not hold every decode, or a request
        still prefilling would be put in the batch (no ``prefilling`` list)."""
        entrants: list[Request] = []
        others: list[Request] = []
        for req in self._outside():
            if req.kv_tokens < req.prefill_target:
                others.append(req)
                continue
            if req.generated == 0:
                return None  # its next token is its first: not a plain decode
            entrants.append(req)
        decodes = members + len(entrants)
        if decodes > budget or (others and prefilling is None):
            return None
        if not decodes:  # nothing decodes: no cohort iteration (none completes)
            self._keep_outside(others, prefilling)
            return budget
        return entrants, others

    def _keep_outside(self, others: list[Request], prefilling: list[Request] | None) -> None:
        """``others`` (still prefilling, in running order) stay outside the cohort, handed to
        ``prefilling``."""
        self._outsiders = others
        if prefilling is not None:
            prefilling.extend(others)

    def _formed(
        self,
        batch: Batch,
        budget: int,
        decodes: int,
        context: int,
        others: list[Request],
        prefilling: list[Request] | None,
    ) -> int:
        """The cohort formed into ``batch``: its ``decodes`` (reading ``context`` KV tokens) ahead
        of the entries, ``others`` outside it; returns the budget left."""
        self._keep_outside(others, prefilling)
        batch.cohort = decodes
        batch.stats.add_many(decodes, 1, context)
        batch.decode_tokens += decodes
        return budget - decodes

    def _add_spec_cohort(
        self, batch: Batch, budget: int, prefilling: list[Request] | None
    ) -> int | None:
        """:meth:`_add_decodes` with the decodes in the speculative decode cohort: the running
        requests outside it that decode join it (in running order, each drawing its α if new),
        its members' blocks grow for one more token each, and the cohort is formed into the
        batch. None, changing nothing, where :meth:`_add_cohort` would give None."""
        cohort = self.spec_cohort
        assert cohort is not None
        split = self._split_outsiders(len(cohort), budget, prefilling)
        if split is None or isinstance(split, int):
            return split
        entrants, others = split
        decodes = len(cohort) + len(entrants)
        block_size = self.kv.block_size
        needs = [-(-(req.kv_tokens + 1) // block_size) - req.blocks for req in entrants]
        context = cohort.grow_for_next_token(self.kv, sum(n for n in needs if n > 0))
        if context < 0:
            return None
        for req, need in zip(entrants, needs, strict=True):
            if need > 0:
                req.blocks += need
            cohort.join(req)
            context += req.kv_tokens
        batch.members = cohort
        return self._formed(batch, budget, decodes, context, others, prefilling)

    def _complete_cohort(
        self, now: float, row: int, prev_row: int, on_finish: FinishCallback
    ) -> tuple[int, list[Request]]:
        """Apply the cohort's part of a finished iteration (see :meth:`complete`); returns the
        number of its tokens whose previous token came in the previous iteration, and the
        members that finished."""
        cohort = self.cohort
        assert cohort is not None
        gap_tokens = len(cohort) - self._log_cohort_pauses(row, prev_row)
        self._entrants = []
        finished = cohort.complete(row)
        for req in finished:
            req.status = Status.FINISHED
            req.finish_s = now
            self.kv.free(req.blocks)
            req.blocks = 0
            on_finish(req)
        return gap_tokens, finished

    @staticmethod
    def _add(batch: Batch, req: Request, new_tokens: int) -> None:
        in_prefill = req.kv_tokens < req.prefill_target
        finishing_prefill = in_prefill and req.kv_tokens + new_tokens >= req.prefill_target
        sampled = new_tokens if not in_prefill else int(finishing_prefill)
        batch.requests.append(req)
        batch.new_tokens.append(new_tokens)
        batch.stats.add(new_tokens, req.kv_tokens, sampled)
        if req.load_s:  # its cached prefix is loading from the CPU tier for this step
            batch.load_s += req.load_s
            req.load_s = 0.0
        if in_prefill:
            batch.prefill_tokens += new_tokens
        else:
            batch.decode_tokens += new_tokens

    def complete(
        self,
        batch: Batch,
        now: float,
        on_finish: FinishCallback,
        row: int = -1,
        prev_row: int = -1,
    ) -> int:
        """Apply a finished iteration (row ``row``; this replica's previous one was ``prev_row``);
        returns the output tokens it emitted."""
        emitted_total = 0
        finished: list[Request] = []
        gap_tokens = 0
        if batch.members is not None:
            emitted_total, gap_tokens, zero_gaps, finished = batch.members.complete(
                now,
                row,
                prev_row,
                self.kv,
                not self.reserves_full_length,
                self.gap_pairs,
                on_finish,
            )
            self.zero_gaps += zero_gaps
        elif batch.cohort:
            gap_tokens, finished = self._complete_cohort(now, row, prev_row, on_finish)
            emitted_total = batch.cohort
        accepted = batch.accepted
        release = accepted is not None and not self.reserves_full_length
        block_size = self.kv.block_size
        prefix = self.prefix
        for i, (req, q) in enumerate(zip(batch.requests, batch.new_tokens, strict=True)):
            if req.kv_tokens < req.prefill_target:
                req.kv_tokens += q
                if req.kv_tokens < req.prefill_target:
                    continue
                emitted = 1
                if prefix is not None:
                    prefix.register(req)
            else:
                emitted = 1 if accepted is None else 1 + accepted[i]
                req.kv_tokens += emitted
                if release:  # give back the blocks reserved for rejected drafts
                    surplus = req.blocks + (-req.kv_tokens // block_size)  # blocks beyond the KV
                    if surplus > 0:
                        self.kv.free(surplus)
                        req.blocks -= surplus
            if req.generated == 0:
                req.first_token_s = now
                req.first_row = row
            elif req.last_row == prev_row:
                gap_tokens += 1
            else:
                self.gap_pairs.append(row)
                self.gap_pairs.append(req.last_row)
            self.zero_gaps += emitted - 1
            req.last_row = row
            req.generated += emitted
            emitted_total += emitted
            if req.generated >= req.output_tokens:
                req.status = Status.FINISHED
                req.finish_s = now
                if prefix is None:
                    self.kv.free(req.blocks)
                else:
                    prefix.finish(req)
                req.blocks = 0
                finished.append(req)
                on_finish(req)
        batch.gap_tokens = gap_tokens
        if finished:
            self._drop_finished(finished)
        return emitted_total
