"""The discrete-event engine: wires workload, router, replicas, scheduler and cost model in SimPy.

There is one arrival process for the cluster and one process per replica. The arrival process
sleeps until the next request arrives, rejects it if it can never be served (its context exceeds the
model's limit or its KV cannot fit even on an empty replica), routes it, and wakes the replica if it
was idle. A replica process loops: ask the scheduler for a batch, ask the cost model how long it
takes, ``yield env.timeout(duration)``, hand the finished batch back to the scheduler and record the
iteration. That is one SimPy event per iteration per replica plus one per arrival, never one per
token or per request step, which keeps a day of traffic simulable in minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import simpy

from cbsim.calibration.profile import DEFAULT_PROFILE, load_engine_profile, load_profile
from cbsim.cost import CostModel
from cbsim.decode_run import plan_decode_run
from cbsim.hardware import get_gpu
from cbsim.kvcache import KVCache
from cbsim.metrics import Recorder
from cbsim.models import get_model
from cbsim.request import Request, Status
from cbsim.rng import stream
from cbsim.router import make_router
from cbsim.scenario import Scenario
from cbsim.scheduler import SchedulerPolicy, make_scheduler
from cbsim.speculative.decoder import SpeculativeDecoding
from cbsim.workload import RequestSpecs, build_workload

# progress(requests_done, requests_total, simulated_seconds)
ProgressCallback = Callable[[int, int, float], None]
PROGRESS_EVERY_ITERATIONS = 2000


@dataclass(slots=True)
class Replica:
    """One model instance (tp GPUs) with its own scheduler and KV cache."""

    index: int
    scheduler: SchedulerPolicy
    wake: simpy.Event | None = None
    # while a decode run is in flight: the running requests' outstanding tokens at the start of
    # its last iteration (the state a step-by-step replica would show an arrival in it)
    run_outstanding: int | None = None

    def outstanding_tokens(self) -> int:
        if self.run_outstanding is None:
            return self.scheduler.outstanding_tokens()
        return self.run_outstanding + sum(r.outstanding_tokens for r in self.scheduler.waiting)


class Simulation:
    """One run of a scenario; :meth:`run` returns the filled :class:`Recorder`."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        source: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.scenario = scenario
        cluster = scenario.cluster
        self.model = get_model(cluster.model)
        self.gpu = get_gpu(cluster.gpu)
        self.cost = cost_model_for(scenario)
        self.max_model_len = cluster.max_model_len or self.model.max_position_embeddings
        self.spec: SpeculativeDecoding | None = None
        if scenario.speculative.enabled:
            self.spec = SpeculativeDecoding(scenario.speculative, self.cost, scenario.seed, source)
        self.specs: RequestSpecs = build_workload(scenario, source)
        self.env = simpy.Environment()
        self.replicas = [
            Replica(i, make_scheduler(scenario.scheduler, self._new_kv_cache()))
            for i in range(cluster.replicas)
        ]
        self.router = make_router(cluster.router, stream(scenario.seed, "router"))
        self.recorder = Recorder(scenario, len(self.replicas), self.replicas[0].scheduler.kv)
        self.requests: list[Request] = []
        self._progress = progress
        self._done = 0
        self._next_arrival = 0
        self.fast_forward = scenario.fast_forward and self.spec is None

    def _new_kv_cache(self) -> KVCache:
        cluster = self.scenario.cluster
        sched = self.scenario.scheduler
        return KVCache.for_replica(
            self.model,
            self.gpu,
            tp=cluster.tp,
            dtype=cluster.dtype,
            kv_dtype=cluster.effective_kv_dtype,
            block_size=sched.block_size,
            gpu_memory_utilization=cluster.gpu_memory_utilization,
            watermark=sched.watermark,
            extra_weight_bytes=self.spec.proposer.weight_bytes_per_gpu() if self.spec else 0.0,
            extra_kv_bytes_per_token=(
                self.spec.proposer.kv_bytes_per_token_per_gpu() if self.spec else 0.0
            ),
        )

    # ------------------------------------------------------------------ processes

    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        specs = self.specs
        arrival_s = specs.arrival_s.tolist()
        prompts = specs.prompt_tokens.tolist()
        outputs = specs.output_tokens.tolist()
        for i, t in enumerate(arrival_s):
            if t > env.now:
                yield env.timeout(t - env.now)
            self._next_arrival = i + 1
            req = Request(i, t, prompts[i], outputs[i])
            self.requests.append(req)
            reason = self._rejection_reason(req)
            if reason:
                req.status = Status.REJECTED
                req.rejected_reason = reason
                continue
            replica = self.replicas[self.router.route(self.replicas)]
            req.replica = replica.index
            replica.scheduler.enqueue(req)
            if replica.wake is not None:
                wake, replica.wake = replica.wake, None
                wake.succeed()

    def _rejection_reason(self, req: Request) -> str:
        if req.prompt_tokens + req.output_tokens > self.max_model_len:
            return "context_length"
        if not self.replicas[0].scheduler.can_ever_fit(req):
            return "kv_capacity"
        return ""

    def _replica_loop(self, replica: Replica) -> Generator[simpy.Event, Any, None]:
        env = self.env
        sched = replica.scheduler
        cost = self.cost
        record = self.recorder.record_iteration
        on_finish = self._on_finish
        index = replica.index
        spec = self.spec
        horizon = self.scenario.horizon_s if self.scenario.horizon_s is not None else math.inf
        arrival_s = self.specs.arrival_s
        total = len(arrival_s)
        # The replica keeps its own clock: iteration ends are start + duration exactly, whether
        # stepped or advanced in a decode run, even where SimPy's now + delay would round.
        clock = env.now
        while True:
            start = clock
            waiting = len(sched.waiting)
            stop_on_finish = sched.decode_run_mode() if self.fast_forward else None
            if stop_on_finish is not None:
                kv = sched.kv
                run = plan_decode_run(
                    sched.running,
                    cost=cost,
                    start_s=start,
                    block_size=kv.block_size,
                    used_blocks=kv.used_blocks,
                    total_blocks=kv.total_blocks,
                    grows_kv=not sched.reserves_full_length,
                    stop_on_finish=stop_on_finish,
                    next_arrival_s=(
                        float(arrival_s[self._next_arrival])
                        if self._next_arrival < total
                        else math.inf
                    ),
                    horizon_s=horizon,
                )
                if run is not None:
                    replica.run_outstanding = run.outstanding_at_last_start
                    yield env.timeout(_exact_delay(env.now, run.end_s))
                    clock = run.end_s
                    replica.run_outstanding = None
                    sched.apply_decode_run(run, on_finish)
                    self.recorder.record_decode_run(index, run, waiting)
                    continue
            batch = sched.next_batch(start)
            if not batch.requests:
                if sched.has_work:
                    # every running request was preempted: the queue is admissible again
                    batch = sched.next_batch(start)
                    if not batch.requests:
                        raise RuntimeError(f"replica {index} has work but formed no batch")
                else:
                    replica.wake = env.event()
                    yield replica.wake
                    clock = env.now
                    continue
            if spec is None:
                duration = cost.time_stats(batch.stats)
            else:
                draft = spec.plan(batch, sched)
                target = cost.time_stats(batch.stats)
                duration = draft + target
            kv_used = sched.kv.used_blocks
            end = start + duration
            yield env.timeout(duration if env.now == start else _exact_delay(env.now, end))
            clock = end
            if spec is not None:
                spec.verify(batch, target)
            emitted = sched.complete(batch, end, on_finish)
            record(index, start, duration, batch, emitted, kv_used, waiting)

    def _on_finish(self, req: Request) -> None:
        self._done += 1

    def _report_progress(self) -> Generator[simpy.Event, Any, None]:
        assert self._progress is not None
        total = len(self.specs)
        step = max(1.0, float(self.specs.arrival_s[-1]) / 200.0) if total else 1.0
        while True:
            self._progress(self._done, total, self.env.now)
            yield self.env.timeout(step)

    def run(self) -> Recorder:
        env = self.env
        env.process(self._arrivals())
        for replica in self.replicas:
            env.process(self._replica_loop(replica))
        horizon = self.scenario.horizon_s
        if self._progress is not None:
            env.process(self._report_progress())
            # the progress ticker never ends by itself: stop when the real work does
            self._run_until_drained(horizon)
            self._progress(self._done, len(self.specs), env.now)
        else:
            env.run(until=horizon)
        self.recorder.finish(self.requests, self.specs, self._last_event_s(), self.replicas)
        return self.recorder

    def _last_event_s(self) -> float:
        """When the last thing happened (the clock may have been run past it)."""
        last = max((r.arrival_s for r in self.requests), default=0.0)
        for req in self.requests:
            if req.finish_s > last:
                last = req.finish_s
        return last

    def _run_until_drained(self, horizon: float | None) -> None:
        env = self.env
        total = len(self.specs)
        while True:
            if horizon is not None and env.now >= horizon:
                return
            if len(self.requests) == total and not any(r.scheduler.has_work for r in self.replicas):
                return
            target = env.now + 1.0
            if horizon is not None:
                target = min(target, horizon)
            env.run(until=target)


def cost_model_for(scenario: Scenario) -> CostModel:
    """The cluster's cost model with its calibration profile and serving-engine overhead."""
    cluster = scenario.cluster
    return CostModel(
        get_model(cluster.model),
        get_gpu(cluster.gpu),
        tp=cluster.tp,
        dtype=cluster.dtype,
        kv_dtype=cluster.effective_kv_dtype,
        calibration=load_profile(cluster.gpu, cluster.calibration or DEFAULT_PROFILE),
        engine=load_engine_profile(cluster.engine),
    )


def _exact_delay(now: float, end: float) -> float:
    """A delay that SimPy's ``now + delay`` turns into exactly ``end`` (no rounding drift)."""
    delay = end - now
    for _ in range(4):
        reached = now + delay
        if reached == end:
            break
        delay = math.nextafter(delay, math.inf if reached < end else -math.inf)
    return delay
