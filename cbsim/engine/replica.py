"""A replica at run time: one model instance (its scheduler, KV cache and front end) and the
pool of like replicas it belongs to.

A replica's state is what a step-by-step engine would show at any moment, even while the engine
advances it a whole decode run in one event: when its iterations end, the tokens still to come,
the prefix-cache entries a run has evicted so far, and (disaggregated) the requests it holds for
or takes in from the other pool. Routers, the dispatcher and the hand-off read it; only the
engine's replica loop advances it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import simpy

from cbsim.cost import CostModel
from cbsim.cost.kernel_call import KernelCall
from cbsim.engine.decode_run import DecodeRun, plan_decode_run
from cbsim.engine.scheduler import SchedulerPolicy
from cbsim.engine.speculative.cohort import SpecCohort
from cbsim.engine.speculative.decoder import SpeculativeDecoding
from cbsim.engine.speculative.fast_run import KernelSettings, plan_spec_run
from cbsim.schema.pools import PoolPlan
from cbsim.schema.scenario import Scenario
from cbsim.workload.request import Request

__all__ = ["Replica", "ReplicaPool", "RunKernels"]


@dataclass(frozen=True, slots=True)
class RunKernels:
    """The compiled kernels that plan a decode run: a plain one and a speculative one."""

    decode: KernelCall
    spec: KernelCall


@dataclass(slots=True)
class Replica:
    """One model instance (tp GPUs) with its own scheduler and KV cache."""

    index: int
    scheduler: SchedulerPolicy
    env: simpy.Environment
    pool: ReplicaPool | None = None
    load_scale: float = (
        1.0  # how long its tokens take against the fastest pool's (cbsim.engine.router)
    )
    wake: simpy.Event | None = None
    # while a decode run is in flight: its iterations' ends and the running requests' outputs
    # still to come when it started (the state a step-by-step replica would show at any time)
    run_ends: list[float] | None = None
    run_remaining: np.ndarray | None = None
    # the outputs to come after each iteration (a speculative run's, or worked out from a plain
    # run's batch sizes when first asked) and at the start (-1: not worked out yet)
    run_left: list[int] | None = None
    run_total: int = -1
    run: DecodeRun | None = None
    # the run's peak blocks in use over its first run_peak_rows iterations
    run_peak: int = 0
    run_peak_rows: int = 0
    # while a decode run is in flight: an arrival landing here early enough to cut it (before
    # its last iteration starts; one arriving later is seen when the run ends) interrupts the
    # replica's process (SimPy interrupts are urgent: the replica cuts before anything else
    # happening at that time, as a stepped replica's iteration end would come first)
    pokeable: bool = False
    poke_until: float = -math.inf
    process: simpy.Process | None = None
    step_end: float = -math.inf  # when its latest iteration (stepped or in a run) ends
    decode_step_s: float = 0.0  # its latest pure-decode iteration's duration (0: none yet)
    forming: bool = False  # between an iteration's end and the next batch (or going idle)
    last_row: int = -1  # the recorder row of this replica's latest iteration
    delivered_s: float = 0.0  # when its front end has streamed every token emitted so far
    inbound_tokens: int = 0  # outstanding tokens of requests still in its front end
    # disaggregated serving. A prefill instance: blocks it holds for prompts whose KV has not
    # crossed yet. A decode instance: prefilled requests waiting for its blocks (FCFS), those
    # with blocks whose KV is crossing, and those whose KV has arrived (taken in at its next
    # iteration)
    held_blocks: int = 0
    held_requests: int = 0
    awaiting: deque[Request] = field(default_factory=deque)
    in_transfer: int = 0
    inbox: list[Request] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        """Whether the replica has anything to do or to wait for."""
        return (
            self.scheduler.has_work
            or bool(self.awaiting)
            or bool(self.inbox)
            or self.in_transfer > 0
            or self.held_blocks > 0
        )

    def outstanding_tokens(self) -> int:
        """Tokens still to process for the requests this replica holds, as a step-by-step replica
        would show them now (mid-run: the iterations that ended before now are done)."""
        if self.run_ends is None or self.run_remaining is None:
            return self.scheduler.outstanding_tokens() + self.inbound_tokens
        done = bisect.bisect_left(self.run_ends, self.env.now)
        if self.run_total < 0:
            self.run_total = int(self.run_remaining.sum())
        if not done:
            running = self.run_total
        else:
            left = self.run_left
            if left is None:  # a plain decode run: each iteration's batch emits a token each
                assert self.run is not None
                left = self.run_left = list(
                    itertools.accumulate(self.run.batch_sizes, operator.sub, initial=self.run_total)
                )[1:]
            running = left[done - 1]
        waiting = self.scheduler.waiting.tokens
        return running + waiting + self.inbound_tokens

    def cached_prefix_tokens(self, req: Request) -> int:
        """Prompt tokens of ``req`` this replica's prefix cache holds now (mid-run: after the
        evictions of the iterations started so far, as a step-by-step replica would show).

        Exact mid-run even when the run goes on through finishes it has not settled yet: a hit
        depends only on which entries exist, not on their references, and each row's in-use plus
        cached blocks are the same whether a finish's entries count as released or not, so the
        excess to evict is too; the run never needs more than the entries unreferenced when it
        began (it allocates only what is free or was), and those are the least recently used,
        so it evicts the same ones stepping would."""
        sched = self.scheduler
        run = self.run
        if run is not None and sched.prefix is not None and sched.kv.cached_blocks:
            started = bisect.bisect_right(run.starts, self.env.now)
            if started > self.run_peak_rows:
                rows = itertools.islice(run.kv_used, self.run_peak_rows, started)
                self.run_peak = max(self.run_peak, *rows)
                self.run_peak_rows = started
                sched.prefix.fit(self.run_peak)
        return sched.cached_prefix_tokens(req)

    def current_step_end(self, now: float) -> float:
        """When the step running at ``now`` ends (-inf: none runs); a step that starts at
        ``now`` runs (its batch was formed before anything else happening at ``now``)."""
        ends = self.run_ends
        if ends is not None:
            at = bisect.bisect_right(ends, now)
            return ends[at] if at < len(ends) else -math.inf
        return self.step_end if self.step_end > now else -math.inf

    def start_run(self, run: DecodeRun) -> None:
        self.run = run
        self.run_peak = self.run_peak_rows = 0
        self.run_ends = run.ends
        self.poke_until = self.run_ends[-2] if len(self.run_ends) > 1 else -math.inf
        self.run_remaining = run.remaining
        self.run_left = run.remaining_after
        self.run_total = -1

    def end_run(self) -> None:
        self.run = None
        self.run_ends = None
        self.run_remaining = None
        self.run_left = None

    def deliveries(self, ends: list[float], emitted: list[int]) -> list[float]:
        """When the front end has streamed each iteration's tokens: it handles tokens in order,
        ``output_token_s`` each, starting no earlier than the iteration's end."""
        assert self.pool is not None
        per_token = self.pool.cost.engine.frontend.output_token_s
        free = self.delivered_s
        out = []
        for end, tokens in zip(ends, emitted, strict=True):
            free = (free if free > end else end) + per_token * tokens
            out.append(free)
        self.delivered_s = free
        return out

    def keep_cohort(self) -> None:
        """Keep the scheduler's running decodes in a decode cohort, plain or speculative
        (:mod:`cbsim.engine.scheduler.cohort`, :mod:`cbsim.engine.speculative.cohort`), where
        no prefix cache reads them and the speculative decoder plans and verifies compiled."""
        pool, sched = self.pool, self.scheduler
        if pool is None or sched.prefix is not None:
            return
        if pool.spec is None:
            sched.keep_cohort()
        elif pool.spec.forms_cohorts:
            sched.keep_spec_cohort(
                SpecCohort(sched.kv.block_size, pool.spec.state, pool.spec.slots)
            )

    def plan_run(
        self,
        start: float,
        stop_on_finish: bool,
        horizon: float,
        next_arrival_s: float,
        kernels: RunKernels,
        cut: DecodeRun | None = None,
    ) -> DecodeRun | None:
        """This replica's decode run from ``start`` (ending by the first iteration after
        ``next_arrival_s``); with ``cut``, that run planned again to stop at an arrival that has
        just landed (``next_arrival_s``: now)."""
        sched = self.scheduler
        kv = sched.kv
        pool = self.pool
        assert pool is not None
        if pool.spec is not None:
            assert pool.spec_kernel is not None
            return plan_spec_run(
                pool.spec,
                pool.spec_kernel,
                self.index,
                sched,
                start_s=start,
                stop_on_finish=stop_on_finish,
                next_arrival_s=next_arrival_s,
                horizon_s=horizon,
                restart=cut,
                kernel=kernels.spec,
            )
        state = None
        if sched.cohort is not None:  # the cohort's arrays, or its members written back
            if pool.cost.compiled_decode(len(sched.running)) is not None:
                state = sched.cohort_decode_state()
            if state is None:
                sched.materialize_cohort()
        return plan_decode_run(
            sched.running,
            cost=pool.cost,
            start_s=start,
            block_size=kv.block_size,
            used_blocks=kv.used_blocks,
            total_blocks=kv.total_blocks,
            grows_kv=not sched.reserves_full_length,
            stop_on_finish=stop_on_finish,
            next_arrival_s=next_arrival_s,
            horizon_s=horizon,
            kernel=kernels.decode,
            shares_blocks=sched.prefix is not None,
            state=state,
        )


@dataclass(slots=True)
class ReplicaPool:
    """A pool of replicas at run time (see :mod:`cbsim.schema.pools`): the scenario its replicas run,
    their cost model, front end, speculative decoding and how decode runs are advanced."""

    plan: PoolPlan
    cost: CostModel
    spec: SpeculativeDecoding | None
    spec_kernel: KernelSettings | None
    fast_forward: bool
    fast_forward_note: str
    replicas: list[Replica] = field(default_factory=list)
    async_scheduling: bool = False  # the next batch is formed while a step runs

    @property
    def scenario(self) -> Scenario:
        return self.plan.scenario
