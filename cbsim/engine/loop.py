"""The discrete-event engine: the clock, and a loop per replica fed by a request source.

A request source (:mod:`cbsim.workload.sources`: open-loop arrivals, a replayed trace, closed-loop
clients, sessions, rate stages) sends requests; the dispatcher (:mod:`cbsim.engine.dispatch`) routes
each through its replica's front end to the scheduler, or rejects it; disaggregated, the hand-off
(:mod:`cbsim.engine.handoff`) carries a prefilled request's KV to a decode instance. This module keeps
the clock and the replicas' loops. A replica process loops: ask the scheduler for a batch, ask
the cost model how long it takes, ``yield env.timeout(duration)``, hand the finished batch back
to the scheduler and record the iteration. That is one SimPy event per iteration per replica plus
one per arrival, never one per token or per request step, which keeps a day of traffic
simulable in minutes.

A run of decode iterations with nothing else happening is advanced in one event (a decode run,
:mod:`cbsim.engine.decode_run`), up to the next time a request may reach a scheduler (the dispatcher's
pending sends and front-end arrivals, the source's next send). Where a finish may make the next
send (closed-loop clients, sessions, stages, client timeouts) runs stop at finishes. When an
arrival lands on a replica in the middle of a run, the replica is poked and cuts the run at the
arrival, as stepping would have; a client timeout pokes the replica holding the request.

Ties: an iteration that ends at the very time a request arrives forms the next batch first (the
request waits for the iteration after), whichever event SimPy scheduled first: a replica's
iteration ends are scheduled with SimPy's urgent priority, at their exact times
(:func:`cbsim.common.event_time.iteration_end_at`). A run of iterations advanced in one event then stops
where stepping would see the arrival, at the first iteration ending strictly after it, and the two
agree bit for bit even on exact float ties.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import get_model
from cbsim.common.event_time import iteration_end_at as _iteration_end_at
from cbsim.cost.kernel_call import KernelCall
from cbsim.engine.autoscale import Autoscaler, FleetLog
from cbsim.engine.cost_models import CostModelCache, price_in_python_while_cold
from cbsim.engine.decode_run import decode_run_kernel
from cbsim.engine.dispatch import Dispatcher
from cbsim.engine.fleet import add_prefix_caches, build_replicas, new_pool, weigh_by_speed
from cbsim.engine.handoff import Handoff, owe_outputs
from cbsim.engine.load_generator import LoadGenerator
from cbsim.engine.recorder import Recorder
from cbsim.engine.replica import Replica, RunKernels
from cbsim.engine.speculative.fast_run import apply_spec_run, spec_run_kernel
from cbsim.memory.prefix_cache import prefix_caching_on
from cbsim.schema.pools import pool_plans
from cbsim.schema.scenario import Scenario
from cbsim.workload.build import build_workload
from cbsim.workload.drawn import RequestSpecs, StagedWorkload
from cbsim.workload.prefix_segments import PrefixInterner, Segments
from cbsim.workload.request import Request, Status
from cbsim.workload.request_table import RequestTable
from cbsim.workload.sessions import SessionWorkload
from cbsim.workload.sources import RequestSource, Workload, prompt_pool, source_for, table_rows

__all__ = ["ProgressCallback", "Simulation"]

# progress(requests_done, requests_total, simulated_seconds)
ProgressCallback = Callable[[int, int, float], None]


class Simulation:
    """One run of a scenario; :meth:`run` returns the filled :class:`Recorder`.

    It builds the fleet (:mod:`cbsim.engine.fleet`), the request source its workload calls for
    (:mod:`cbsim.workload.sources`, which sends through it as a :class:`cbsim.workload.sources.Sender`), the
    dispatcher and, disaggregated, the hand-off; then runs the clock and a loop per replica, and
    keeps the requests in flight until each goes into the request table."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        source: str | None = None,
        progress: ProgressCallback | None = None,
        cost_models: CostModelCache | None = None,
        interpret_while_cold: bool = True,
    ) -> None:
        self.scenario = scenario
        cluster = scenario.cluster
        self.model = get_model(cluster.model)
        self.env = simpy.Environment()
        self.pools = [new_pool(plan, source, cost_models) for plan in pool_plans(scenario)]
        # priced in Python at first on a fresh install (cbsim.cost.kernel_cache)
        self.interpreted = interpret_while_cold and price_in_python_while_cold(self.pools)
        # the decoding pool's (a plain cluster's only pool's): what the run's warnings and
        # speculative figures speak of
        decoding = self.pools[-1]
        self.gpu = get_gpu(decoding.scenario.cluster.gpu)
        self.cost = decoding.cost
        self.spec = decoding.spec
        workload = build_workload(scenario, source)
        self.specs = workload if isinstance(workload, RequestSpecs) else None
        self.staged = workload if isinstance(workload, StagedWorkload) else None
        self.workload_warnings = list(self.specs.warnings) if self.specs is not None else []
        self.replicas = build_replicas(self.model, self.pools, self.env)
        self.disaggregated = cluster.disaggregation is not None
        if cluster.pools is not None:
            weigh_by_speed(self.pools)
        self._add_prefix_caches(workload)
        self.recorder = Recorder(
            scenario,
            len(self.replicas),
            self.replicas[0].scheduler.kv,
            [r.scheduler.kv.total_blocks for r in self.replicas],
        )
        # stages and client timeouts (cbsim.engine.load_generator), when the workload has either
        client = scenario.workload.client
        timeout_s = client.timeout_s if client is not None else None
        self.load: LoadGenerator | None = None
        if self.staged is not None or timeout_s is not None:
            self.load = LoadGenerator(self, self.staged, timeout_s)
        max_model_len = cluster.max_model_len or self.model.max_position_embeddings
        self.dispatcher = Dispatcher(
            self.pools, scenario.seed, max_model_len, self.disaggregated, self.load, self._rejected
        )
        self.handoff: Handoff | None = None
        if self.disaggregated:
            notify = self.dispatcher.notify
            self.handoff = Handoff(
                scenario, self.model, self.pools, self.replicas, notify, self.load
            )
        # autoscaled: the control loop that keeps the dispatcher's entry to the serving replicas
        self.autoscaler: Autoscaler | None = None
        if cluster.autoscale is not None:
            self.autoscaler = Autoscaler(
                self.env,
                cluster.autoscale,
                self.replicas,
                self.dispatcher.entry,
                lambda: self.dispatcher.routed,
                lambda: self.source.all_sent() and self.idle(),
            )
            self.fleet = self.autoscaler.log
        else:
            self.fleet = FleetLog.of(self.replicas)
        # the requests sent and still in flight, by id; done with, they go into the table
        self.requests: dict[int, Request] = {}
        self.sent = 0  # requests sent so far (the next one's id)
        self.done = 0  # requests done for their clients so far (finished, timed out)
        self.table = RequestTable(
            table_rows(workload, scenario.horizon_s),
            speculative=self.spec is not None,
            cached=any(r.scheduler.prefix is not None for r in self.replicas),
            disaggregated=self.disaggregated,
            staged=self.staged is not None,
            timeout_s=timeout_s,
        )
        self._progress = progress
        self._finished: list[Request] = []
        # the decode-run kernels, each dispatched on its first call only (cbsim.cost.kernel_call)
        self._run_kernels = RunKernels(KernelCall(decode_run_kernel), KernelCall(spec_run_kernel))
        self.fast_forward = all(pool.fast_forward for pool in self.pools)
        self.fast_forward_note = "; ".join(
            pool.fast_forward_note for pool in self.pools if pool.fast_forward_note
        )
        self.total_requests = len(workload)
        self.source: RequestSource = source_for(self, workload, self.load)
        # decode cohorts (cbsim.engine.scheduler.cohort) where nothing outside a replica's loop touches
        # its running requests between iterations
        if self.load is None and not self.disaggregated:
            for replica in self.replicas:
                replica.keep_cohort()

    def _add_prefix_caches(self, workload: Workload) -> None:
        """Prefix caches on the replicas that cache prefixes, with the interner that turns
        prompt content into their keys; without prompt content (a trace's block ids, sessions,
        a prompt pool) nothing is ever cached: no cache."""
        self.prefix_caching = any(prefix_caching_on(pool.scenario) for pool in self.pools)
        # chained prompt-segment keys shared by every replica's prefix cache (cbsim.memory.prefix_cache)
        self.interner: PrefixInterner | None = None
        self.pool = prompt_pool(workload)
        knows_content = (
            isinstance(workload, SessionWorkload)
            or self.pool is not None
            or (self.specs is not None and self.specs.prefix_ids is not None)
        )
        if self.prefix_caching and knows_content:
            self.interner = PrefixInterner()
            add_prefix_caches(self.model, self.pools)
        elif any(pool.scenario.cluster.kv_offload is not None for pool in self.pools):
            self.workload_warnings.append(
                "cluster.kv_offload is ignored: a CPU tier holds what the prefix cache evicts, "
                "and prefix caching is off"
            )

    # ------------------------------------------------------------------ what sources see

    @property
    def block_size(self) -> int:
        """The KV block size prompts are cut into for the prefix caches."""
        return self.replicas[0].scheduler.kv.block_size

    def submit(self, req: Request) -> None:
        """Send ``req``, the next request (its id is ``self.sent``), at ``req.sent_s``: now, or
        then (a closed-loop client's next request, a session's next turn)."""
        self._register(req)
        self.dispatcher.send(req)

    def send_now(self, req: Request) -> None:
        """Send ``req``, the next request, now (an open-loop arrival at its time)."""
        self._register(req)
        self.dispatcher.dispatch(req)

    def _register(self, req: Request) -> None:
        self.requests[req.request_id] = req
        self.sent = req.request_id + 1
        if self.load is not None:
            self.load.watch(req)

    def pool_segments(self, pick: int, prompt_tokens: int) -> Segments | None:
        """A prompt pool's prompt ``pick`` as cache segments: its system prompt, its question."""
        if self.interner is None or self.pool is None:
            return None
        content, sizes = self.pool.content(pick)
        return self.interner.segments(content, sizes, prompt_tokens, self.block_size)

    def idle(self) -> bool:
        """Whether nothing is pending (sends, front ends) and no replica has work."""
        return not self.dispatcher.pending and not any(r.busy for r in self.replicas)

    def next_arrival_s(self) -> float:
        """The earliest time a request may next reach a replica's scheduler (inf: none known)."""
        pending = self.dispatcher.next_pending_s()
        sent = self.source.next_send_s()
        return sent if sent < pending else pending

    # ------------------------------------------------------------------ what the load generator sees

    def notify(self, replica: Replica) -> None:
        """Something reached ``replica`` now: wake it if idle, or cut its decode run."""
        self.dispatcher.notify(replica)

    def free_prefill_blocks(self, req: Request) -> None:
        """``req``'s prefill instance lets go of it (disaggregated)."""
        assert self.handoff is not None
        self.handoff.free_prefill_blocks(req)

    # ------------------------------------------------------------------ request ends

    def _rejected(self, req: Request, reason: str) -> None:
        self.done_with(req)
        self.source.rejected(req, reason)

    def _release(self, deliveries: list[float] | None, first_row: int) -> None:
        """After an iteration (or a run of them, rows from ``first_row``): count the finished
        requests and tell their source, once the last token has reached each client."""
        finished, self._finished = self._finished, []
        self.done += len(finished)
        if self.staged is not None:
            assert self.load is not None
            for req in finished:
                at = req.finish_s if deliveries is None else deliveries[req.last_row - first_row]
                self.load.done(req, at)
        source = self.source
        if not source.closes_loop:
            return
        for req in finished:
            delivered = req.finish_s if deliveries is None else deliveries[req.last_row - first_row]
            source.finished(req, delivered)

    # ------------------------------------------------------------------ replicas

    def _replica_loop(self, replica: Replica) -> Generator[simpy.Event, Any, None]:
        env = self.env
        sched = replica.scheduler
        pool = replica.pool
        assert pool is not None
        cost = pool.cost
        recorder = self.recorder
        record = recorder.record_iteration
        prefills_only = pool.plan.role == "prefill"
        on_finish = self._on_finish
        if prefills_only:
            assert self.handoff is not None
            on_finish = self.handoff.prefilled
        handoff = self.handoff if pool.plan.role == "decode" else None
        index = replica.index
        spec = pool.spec
        fast_forward = pool.fast_forward
        horizon = self.scenario.horizon_s if self.scenario.horizon_s is not None else math.inf
        kernels = self._run_kernels
        # the recorder keeps a delivery time for every row or none: when any pool's front end
        # streams, every replica records them (its iteration ends, where its own does not)
        streams = any(
            r.pool is not None and r.pool.cost.engine.frontend.output_token_s > 0.0
            for r in self.replicas
        )
        # finishes make arrivals (or end stages; with timeouts: a timeout knows what finished)
        closed = self.source.closes_loop or self.load is not None
        load = self.load
        # speculative runs shorten drafts by the free blocks, which a finish's released cache
        # entries change (a prefix-aware router reads only which entries exist: see
        # Replica.cached_prefix_tokens)
        exact_free = spec is not None
        # The replica keeps its own clock: iteration ends are start + duration exactly, whether
        # stepped or advanced in a decode run, even where SimPy's now + delay would round.
        clock = env.now
        while True:
            start = clock
            if load is not None and load.aborted:
                load.abort_due(replica)
            if handoff is not None and (replica.inbox or replica.awaiting):
                handoff.take_in(replica, start)
            waiting = len(sched.waiting)
            # a run ends with the first iteration that ends after the next arrival anywhere in the
            # fleet; one due within the replica's latest decode step would end it after a single
            # iteration, which stepping does for less (the same iteration either way)
            stop_on_finish = (
                sched.decode_run_mode()
                if fast_forward and self.next_arrival_s() - start >= replica.decode_step_s
                else None
            )
            if stop_on_finish is not None:
                # a run deciding by the exact free blocks ends at a finish that releases cache
                # entries (see SchedulerPolicy.settle_run); one whose finishes free blocks that
                # prefilled requests wait for ends at the first
                caching = exact_free and sched.prefix is not None and sched.prefix.holds_entries()
                stop_on_finish = stop_on_finish or closed or caching or bool(replica.awaiting)
                run = replica.plan_run(
                    start, stop_on_finish, horizon, self.next_arrival_s(), kernels
                )
                if run is not None:
                    replica.start_run(run)
                    replica.pokeable = True
                    replica.forming = False
                    try:
                        yield _iteration_end_at(env, run.end_s)
                    except simpy.Interrupt:
                        # an arrival landed mid-run: stop where stepping would have seen it
                        cut = replica.plan_run(
                            start, stop_on_finish, horizon, env.now, kernels, cut=run
                        )
                        assert cut is not None
                        run = cut
                        replica.start_run(run)
                        if run.end_s > env.now:
                            yield _iteration_end_at(env, run.end_s)
                    replica.pokeable = False
                    replica.forming = True
                    clock = replica.step_end = run.end_s
                    replica.decode_step_s = run.durations[-1]
                    replica.end_run()
                    first_row = recorder.rows
                    if run.spec is not None:
                        assert spec is not None
                        apply_spec_run(
                            spec, index, sched, run, on_finish, first_row, replica.last_row
                        )
                    else:
                        sched.apply_decode_run(run, on_finish, first_row, replica.last_row)
                    sched.forget_running_tokens()
                    deliveries = None
                    if streams:
                        ends = run.ends
                        tokens = run.batch_sizes if run.emitted is None else run.emitted
                        deliveries = replica.deliveries(ends, tokens)
                    recorder.record_decode_run(index, run, waiting, deliveries, replica.in_transfer)
                    replica.last_row = recorder.rows - 1
                    self._release(deliveries, first_row)
                    continue
            batch = sched.next_batch(start)
            sched.forget_running_tokens()
            if not len(batch):
                if sched.has_work and not replica.held_blocks and not replica.in_transfer:
                    # every running request was preempted: the queue is admissible again
                    batch = sched.next_batch(start)
                    sched.forget_running_tokens()
                    if not len(batch):
                        raise RuntimeError(f"replica {index} has work but formed no batch")
                else:
                    replica.wake = env.event()
                    replica.forming = False
                    yield replica.wake
                    clock = env.now
                    continue
            if spec is None:
                duration = cost.time_stats(batch.stats)
            else:
                duration = spec.plan(batch, sched, index)
                target_s = batch.target_s  # priced by the plan, or not (-1)
                duration += target_s if target_s >= 0.0 else cost.time_stats(batch.stats)
                sched.forget_running_tokens()  # drafts' KV may have preempted requests
            if batch.load_s > duration:  # a CPU-tier load overlapped layer by layer
                duration = batch.load_s
            kv_used = sched.kv.used_blocks
            transfers = replica.held_requests if prefills_only else replica.in_transfer
            end = start + duration
            replica.step_end = end
            if not batch.prefill_tokens:
                replica.decode_step_s = duration
            replica.forming = False
            yield _iteration_end_at(env, end)
            replica.forming = True
            clock = end
            if spec is not None:
                spec.verify(batch, index)
            row = recorder.rows
            emitted = sched.complete(batch, end, on_finish, row, replica.last_row)
            if prefills_only:  # the token a prefill instance samples is not sent (see _prefilled)
                emitted = 0
            sched.forget_running_tokens()
            delivered = replica.deliveries([end], [emitted]) if streams else None
            record(index, start, duration, batch, emitted, kv_used, waiting, delivered, transfers)
            replica.last_row = row
            self._release(delivered, row)

    def prompt_lengths(self) -> np.ndarray:
        """The prompt lengths of the requests this run sends (so far, where sends come out of
        the run)."""
        return self.source.prompt_lengths()

    def _on_finish(self, req: Request) -> None:
        if req.abandoned:  # in the step under way at its timeout: its client had left
            assert self.load is not None
            self.load.drop(req)
            return
        self._finished.append(req)
        self.done_with(req)

    def done_with(self, req: Request) -> None:
        """``req`` finished, was rejected or timed out (nothing changes it any more): into the
        table."""
        del self.requests[req.request_id]
        self.table.store(req)
        if req.status == Status.REJECTED and self.load is not None:
            self.load.done(req, req.arrival_s)  # (when it reached the scheduler, now)

    def client_gave_up(self, req: Request, now: float) -> None:
        """``req`` timed out for its client now: its source hears of it (a closed-loop client
        sends its next request, a session ends; its replica drops the request at its next step
        boundary)."""
        self.done += 1
        self.source.gave_up(req, now)

    def _report_progress(self) -> Generator[simpy.Event, Any, None]:
        assert self._progress is not None
        total = self.total_requests
        last = float(self.specs.arrival_s[-1]) if self.specs is not None and total else 0.0
        step = max(1.0, last / 200.0)
        while True:
            self._progress(self.done, total, self.env.now)
            yield self.env.timeout(step)

    def run(self) -> Recorder:
        env = self.env
        self.source.start()
        for replica in self.replicas:
            replica.process = env.process(self._replica_loop(replica))
        if self.autoscaler is not None:
            self.autoscaler.start()
        horizon = self.scenario.horizon_s
        if self._progress is not None:
            env.process(self._report_progress())
            # the progress ticker never ends by itself: stop when the real work does
            self._run_until_drained(horizon)
            self._progress(self.done, self.total_requests or self.done, env.now)
        else:
            env.run(until=horizon)
        for replica in self.replicas:
            replica.scheduler.materialize_cohort()
        for req in self.requests.values():  # still in flight
            owe_outputs(req)
            self.table.store(req)
        self.requests.clear()
        self.recorder.finish(self.table, self._last_event_s(), self.replicas)
        if self.autoscaler is not None:
            self.autoscaler.close()
        self.fleet.close(self.recorder.end_s)
        self.recorder.fleet = self.fleet
        return self.recorder

    def _last_event_s(self) -> float:
        """When the last thing happened (the clock may have been run past it)."""
        last = self.table.last_event_s()
        for req in self.requests.values():
            if req.arrival_s > last:
                last = req.arrival_s
            if req.finish_s > last:
                last = req.finish_s
        return last

    def _run_until_drained(self, horizon: float | None) -> None:
        env = self.env
        while True:
            if horizon is not None and env.now >= horizon:
                return
            if self.source.all_sent() and not any(r.busy for r in self.replicas):
                return
            target = env.now + 1.0
            if horizon is not None:
                target = min(target, horizon)
            env.run(until=target)
