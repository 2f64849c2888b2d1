"""The discrete-event engine: wires workload, router, replicas, scheduler and cost model in SimPy.

There is one arrival process for the cluster and one process per replica. The arrival process
sleeps until the next request arrives, rejects it if it can never be served (its context exceeds the
model's limit or its KV cannot fit even on an empty replica), routes it, and wakes the replica if it
was idle. A replica process loops: ask the scheduler for a batch, ask the cost model how long it
takes, ``yield env.timeout(duration)``, hand the finished batch back to the scheduler and record the
iteration. That is one SimPy event per iteration per replica plus one per arrival, never one per
token or per request step, which keeps a day of traffic simulable in minutes.

Requests are *sent* by clients, routed to a replica at once, and reach its scheduler after that
replica's front end (HTTP, tokenisation) has handled them; tokens reach the client when the front
end has streamed them (see :class:`cbsim.cost.engine_profile.Frontend`). In a closed loop the clients have no clock: a
client sends its next request when it has received the last token of its previous one (plus its
think time), so a finish makes the next arrival. When such an arrival lands on a replica in the
middle of a fast-forwarded decode run, the replica is poked and cuts the run at the arrival, as
stepping would have. Rate stages and client timeouts (:mod:`cbsim.load_generator`) work the same
way: a finish may end a stage, and a timeout pokes the replica holding the request.

Ties: an iteration that ends at the very time a request arrives forms the next batch first (the
request waits for the iteration after), whichever event SimPy scheduled first: a replica's
iteration ends are scheduled with SimPy's urgent priority, at their exact times
(:func:`cbsim.event_time.iteration_end_at`). A run of iterations advanced in one event then stops
where stepping would see the arrival, at the first iteration ending strictly after it, and the two
agree bit for bit even on exact float ties.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import simpy

from cbsim.cost import CostModel
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.cost.profile import DEFAULT_PROFILE
from cbsim.decode_run import DecodeRun, decode_run_kernel, plan_decode_run
from cbsim.errors import CbsimError
from cbsim.event_time import exact_delay as _exact_delay
from cbsim.event_time import iteration_end_at as _iteration_end_at
from cbsim.hardware import get_gpu
from cbsim.kernel_call import KernelCall
from cbsim.kv_transfer import Link, kv_bytes_per_token, link_spec, node_of_instances, visible_time
from cbsim.kvcache import KVCache, blocks_for_tokens, kv_bytes_per_token_per_gpu
from cbsim.limits import REQUESTS
from cbsim.load_generator import LoadGenerator
from cbsim.metrics import Recorder
from cbsim.models import get_model
from cbsim.pools import PoolPlan, pool_plans
from cbsim.prefix_cache import (
    PrefixCache,
    PrefixInterner,
    Segments,
    ids_are_chained,
    prefix_caching_on,
)
from cbsim.prompt_pool import PoolPrompts
from cbsim.request import Request, Status
from cbsim.request_table import RequestTable
from cbsim.rng import stream
from cbsim.router import Router, make_router
from cbsim.scenario import Scenario
from cbsim.scenario import Scheduler as SchedulerConfig
from cbsim.scheduler import SchedulerPolicy, make_scheduler
from cbsim.sessions import SessionWorkload
from cbsim.speculative.decoder import SpeculativeDecoding
from cbsim.speculative.fast_run import (
    KernelSettings,
    apply_spec_run,
    kernel_settings,
    plan_spec_run,
    spec_run_kernel,
)
from cbsim.workload import ClosedLoopWorkload, RequestSpecs, StagedWorkload, build_workload

# progress(requests_done, requests_total, simulated_seconds)
ProgressCallback = Callable[[int, int, float], None]
PROGRESS_EVERY_ITERATIONS = 2000
ARRIVAL_CHUNK = 4096


@dataclass(slots=True)
class Replica:
    """One model instance (tp GPUs) with its own scheduler and KV cache."""

    index: int
    scheduler: SchedulerPolicy
    env: simpy.Environment
    pool: ReplicaPool | None = None
    load_scale: float = 1.0  # how long its tokens take against the fastest pool's (cbsim.router)
    wake: simpy.Event | None = None
    # while a decode run is in flight: its iterations' ends and the running requests' outputs
    # still to come when it started (the state a step-by-step replica would show at any time)
    run_ends: list[float] | None = None
    run_remaining: np.ndarray | None = None
    run_left: list[int] | None = None  # a speculative run's outputs to come after each iteration
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
        if self.run_left is not None:
            running = self.run_left[done - 1] if done else int(self.run_remaining.sum())
        else:
            running = int(np.maximum(self.run_remaining - done, 0).sum())
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
        self.run_ends = [a + d for a, d in zip(run.starts, run.durations, strict=True)]
        self.poke_until = self.run_ends[-2] if len(self.run_ends) > 1 else -math.inf
        self.run_remaining = run.remaining
        self.run_left = run.remaining_after

    def end_run(self) -> None:
        self.run = None
        self.run_ends = None
        self.run_remaining = None
        self.run_left = None


@dataclass(slots=True)
class ReplicaPool:
    """A pool of replicas at run time (see :mod:`cbsim.pools`): the scenario its replicas run,
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


class Simulation:
    """One run of a scenario; :meth:`run` returns the filled :class:`Recorder`."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        source: str | None = None,
        progress: ProgressCallback | None = None,
        cost_models: CostModelCache | None = None,
    ) -> None:
        self.scenario = scenario
        cluster = scenario.cluster
        self.model = get_model(cluster.model)
        self.env = simpy.Environment()
        self.pools = [self._new_pool(plan, source, cost_models) for plan in pool_plans(scenario)]
        # the decoding pool's (a plain cluster's only pool's): what the run's warnings and
        # speculative figures speak of
        decoding = self.pools[-1]
        self.gpu = get_gpu(decoding.scenario.cluster.gpu)
        self.cost = decoding.cost
        self.spec = decoding.spec
        self.max_model_len = cluster.max_model_len or self.model.max_position_embeddings
        workload = build_workload(scenario, source)
        self.closed: ClosedLoopWorkload | None = None
        self.specs: RequestSpecs | None = None
        self.sessions: SessionWorkload | None = None
        self.staged: StagedWorkload | None = None
        self._turn_of: dict[int, int] = {}  # sessions: request id -> its turn
        self._next_session = 0
        self.workload_warnings: list[str] = []
        if isinstance(workload, ClosedLoopWorkload):
            self.closed = workload
        elif isinstance(workload, SessionWorkload):
            self.sessions = workload
        elif isinstance(workload, StagedWorkload):
            self.staged = workload
        else:
            self.specs = workload
            self.workload_warnings = list(workload.warnings)
        self.replicas: list[Replica] = []
        for pool in self.pools:
            pool_scenario = pool.scenario
            for _ in range(pool.plan.replicas):
                scheduler = make_scheduler(
                    self._rank_limits(pool_scenario), self._new_kv_cache(pool)
                )
                replica = Replica(len(self.replicas), scheduler, self.env, pool)
                pool.replicas.append(replica)
                self.replicas.append(replica)
        self.disaggregated = cluster.disaggregation is not None
        if cluster.pools is not None:
            _weigh_by_speed(self.pools)
        # where requests are routed first: the prefill pool, or every replica
        self.entry = self.pools[0].replicas if self.disaggregated else self.replicas
        self.frontend = self.pools[0].cost.engine.frontend
        self.prefix_caching = any(prefix_caching_on(pool.scenario) for pool in self.pools)
        # chained prompt-segment keys shared by every replica's prefix cache (cbsim.prefix_cache)
        self.interner: PrefixInterner | None = None
        # without prompt content (a trace's block ids, sessions) nothing is ever cached: no cache
        self.pool = scenario_pool(workload)
        knows_content = (
            self.sessions is not None
            or self.pool is not None
            or (self.specs is not None and self.specs.prefix_ids is not None)
        )
        if self.prefix_caching and knows_content:
            self.interner = PrefixInterner()
            if self.specs is not None and self.specs.prefix_ids is not None:
                self.interner.chained_ids = ids_are_chained(self.specs.prefix_ids)
            for pool in self.pools:
                # a decode instance's prompts arrive computed: it caches none of them
                if not prefix_caching_on(pool.scenario) or pool.plan.role == "decode":
                    continue
                cpu_blocks, load_s_per_block = self._cpu_tier(pool)
                for replica in pool.replicas:
                    kv = replica.scheduler.kv
                    replica.scheduler.prefix = PrefixCache(kv, cpu_blocks, load_s_per_block)
        elif any(pool.scenario.cluster.kv_offload is not None for pool in self.pools):
            self.workload_warnings.append(
                "cluster.kv_offload is ignored: a CPU tier holds what the prefix cache evicts, "
                "and prefix caching is off"
            )
        self.router = self._router(self.pools[0], "router")
        self.decode_router: Router | None = None
        self.links: dict[tuple[int, int], Link] = {}
        self._nodes: list[int] = []
        self._kv_bytes_per_token = 0.0
        if self.disaggregated:
            self.decode_router = self._router(self.pools[1], "router:decode")
            self._nodes = self._placement()
            decode = self.pools[1]
            self._kv_bytes_per_token = kv_bytes_per_token(
                decode.scenario.cluster, decode.cost.kv_dtype
            )
        self.recorder = Recorder(
            scenario,
            len(self.replicas),
            self.replicas[0].scheduler.kv,
            [r.scheduler.kv.total_blocks for r in self.replicas],
        )
        # stages and client timeouts (cbsim.load_generator), when the workload has either
        client = scenario.workload.client
        timeout_s = client.timeout_s if client is not None else None
        self.load: LoadGenerator | None = None
        if self.staged is not None or timeout_s is not None:
            self.load = LoadGenerator(self, self.staged, timeout_s)
        # the requests sent and still in flight, by id; done with, they go into the table
        self.requests: dict[int, Request] = {}
        self.sent = 0  # requests sent so far (the next one's id)
        self.table = RequestTable(
            _table_rows(workload, scenario.horizon_s),
            speculative=self.spec is not None,
            cached=any(r.scheduler.prefix is not None for r in self.replicas),
            disaggregated=self.disaggregated,
            staged=self.staged is not None,
            timeout_s=timeout_s,
        )
        self._progress = progress
        self._done = 0
        self._next_arrival = 0
        self._finished: list[Request] = []
        # sends and front-end arrivals scheduled but not yet happened (a heap of times)
        self._pending: list[float] = []
        self._sends_now = (-1.0, 0)  # (time, sends at that time): catches a loop of rejections
        self._rejected_run = (0, 0)  # (finished then, rejections since): a loop of rejections
        self._outbox: deque[tuple[int, float]] = deque()
        self._jitter = stream(scenario.seed, "frontend")
        self._clients = stream(scenario.seed, "clients")
        self._sending = False
        # the decode-run kernels, each dispatched on its first call only (cbsim.kernel_call)
        self._spec_run_call = KernelCall(spec_run_kernel)
        self._decode_run_call = KernelCall(decode_run_kernel)
        self.fast_forward = all(pool.fast_forward for pool in self.pools)
        self.fast_forward_note = "; ".join(
            pool.fast_forward_note for pool in self.pools if pool.fast_forward_note
        )
        self.total_requests = len(workload)

    def _new_pool(
        self, plan: PoolPlan, source: str | None, cost_models: CostModelCache | None
    ) -> ReplicaPool:
        """A pool's cost model and speculative decoding (speculative decode runs are
        fast-forwarded by a compiled kernel where it can run them)."""
        scenario = plan.scenario
        cost = cost_model_for(scenario) if cost_models is None else cost_models.get(scenario)
        spec = None
        if scenario.speculative.enabled:
            spec = SpeculativeDecoding(scenario.speculative, cost, scenario.seed, source)
        spec_kernel: KernelSettings | None = None
        note = ""
        if spec is not None and scenario.fast_forward:
            settings = kernel_settings(spec)
            if isinstance(settings, str):
                note = f"speculative iterations stepped one by one: {settings}"
            else:
                spec_kernel = settings
        fast_forward = scenario.fast_forward and (spec is None or spec_kernel is not None)
        return ReplicaPool(
            plan,
            cost,
            spec,
            spec_kernel,
            fast_forward,
            note,
            async_scheduling=plan.scenario.scheduler.async_scheduling,
        )

    def _router(self, pool: ReplicaPool, name: str) -> Router:
        return make_router(pool.scenario.cluster.router, stream(self.scenario.seed, name))

    def _cpu_tier(self, pool: ReplicaPool) -> tuple[int, float]:
        """The CPU tier's capacity in blocks and the seconds one block takes to load (0, 0.0:
        none): per GPU, its bytes of one block over its host memory and PCIe bandwidth."""
        cluster = pool.scenario.cluster
        offload = cluster.kv_offload
        if offload is None:
            return 0, 0.0
        per_token = kv_bytes_per_token_per_gpu(
            self.model, cluster.tp, pool.cost.kv_dtype, cluster.pp
        )
        block_bytes = per_token * pool.scenario.scheduler.block_size
        blocks = cluster.dp * int(offload.cpu_gib * 2**30 // block_bytes)
        return blocks, block_bytes / (offload.bandwidth_gib_s * 2**30)

    @staticmethod
    def _rank_limits(scenario: Scenario) -> SchedulerConfig:
        """The scheduler settings of a replica: with attention data parallelism its batch limits
        are each rank's (as vLLM's per-rank engine cores take them) times the ranks."""
        sched = scenario.scheduler
        shares = scenario.cluster.dp * scenario.cluster.pp  # ranks, or micro-batches
        if shares == 1:
            return sched
        return sched.model_copy(
            update={
                "max_batch_size": shares * sched.max_batch_size,
                "max_batched_tokens": shares * sched.max_batched_tokens,
                "chunk_size": shares * sched.chunk_size,
            }
        )

    def _new_kv_cache(self, pool: ReplicaPool) -> KVCache:
        cluster = pool.scenario.cluster
        sched = pool.scenario.scheduler
        spec = pool.spec
        return KVCache.for_replica(
            self.model,
            get_gpu(cluster.gpu),
            tp=cluster.tp,
            dtype=cluster.dtype,
            kv_dtype=pool.cost.kv_dtype,
            block_size=sched.block_size,
            gpu_memory_utilization=cluster.gpu_memory_utilization,
            watermark=sched.watermark,
            extra_weight_bytes=spec.proposer.weight_bytes_per_gpu() if spec else 0.0,
            extra_kv_bytes_per_token=spec.proposer.kv_bytes_per_token_per_gpu() if spec else 0.0,
            dp=cluster.dp,
            pp=cluster.pp,
        )

    def _placement(self) -> list[int]:
        """The node of every replica, packed in order (see :mod:`cbsim.kv_transfer`)."""
        gpus, kinds, per_node = [], [], []
        for replica in self.replicas:
            assert replica.pool is not None
            cluster = replica.pool.scenario.cluster
            gpus.append(cluster.gpus_per_replica)
            kinds.append(cluster.gpu)
            per_node.append(get_gpu(cluster.gpu).gpus_per_node)
        return node_of_instances(gpus, kinds, per_node)

    # ------------------------------------------------------------------ arrivals

    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        """Open loop: every request is sent at its time and goes through the front end."""
        env = self.env
        specs = self.specs
        assert specs is not None
        for chunk in range(0, len(specs), ARRIVAL_CHUNK):  # Python numbers a chunk at a time
            end = chunk + ARRIVAL_CHUNK
            arrival_s = specs.arrival_s[chunk:end].tolist()
            prompts = specs.prompt_tokens[chunk:end].tolist()
            outputs = specs.output_tokens[chunk:end].tolist()
            content = None
            if self.interner is not None and specs.prefix_ids is not None:
                content = specs.prefix_ids[chunk:end]
            picks = None
            if specs.pool_picks is not None:
                picks = specs.pool_picks[chunk:end].tolist()
            for j, sent in enumerate(arrival_s):
                if sent > env.now:
                    yield env.timeout(sent - env.now)
                i = chunk + j
                self._next_arrival = self.sent = i + 1
                req = Request(i, sent, prompts[j], outputs[j], sent_s=sent)
                if content is not None:
                    req.segments = self._segments(content[j], prompts[j])
                elif picks is not None:
                    req.segments = self._pool_segments(picks[j], prompts[j])
                self.requests[i] = req
                if self.load is not None:
                    self.load.watch(req)
                self._dispatch(req)

    def _pool_segments(self, pick: int, prompt_tokens: int) -> Segments | None:
        """A prompt pool's prompt ``pick`` as cache segments: its system prompt, its question."""
        if self.interner is None or self.pool is None:
            return None
        content, sizes = self.pool.content(pick)
        block_size = self.replicas[0].scheduler.kv.block_size
        return self.interner.segments(content, sizes, prompt_tokens, block_size)

    def _segments(self, ids: tuple[int, ...] | None, prompt_tokens: int) -> Segments | None:
        """A replayed request's prompt as cache segments: its trace prefix block ids."""
        if not ids:
            return None
        assert self.interner is not None and self.specs is not None
        size = self.specs.prefix_block_tokens
        block_size = self.replicas[0].scheduler.kv.block_size
        return self.interner.uniform_segments(ids, size, prompt_tokens, block_size)

    # ------------------------------------------------------------------ sessions

    def _session_starts(self) -> Generator[simpy.Event, Any, None]:
        """Each session sends its first turn when it starts."""
        env = self.env
        sessions = self.sessions
        assert sessions is not None
        for session, start in enumerate(sessions.starts.tolist()):
            if start > env.now:
                yield env.timeout(start - env.now)
            self._next_session = session + 1
            self._send_turn(session, 0, start)

    def _send_turn(self, session: int, turn: int, sent: float) -> None:
        """Turn ``turn`` of ``session`` leaves its user at ``sent`` (now or later)."""
        sessions = self.sessions
        assert sessions is not None
        horizon = self.scenario.horizon_s
        if horizon is not None and sent >= horizon:
            return
        spec = sessions.turn(session, turn)
        index = self.sent
        req = Request(index, sent, spec.prompt_tokens, spec.output_tokens, sent_s=sent,
                      client=session)  # fmt: skip
        req.session = session
        if self.interner is not None:
            block_size = self.replicas[0].scheduler.kv.block_size
            limit = spec.prompt_tokens + spec.output_tokens
            req.segments = self.interner.segments(spec.content, spec.sizes, limit, block_size)
        self._turn_of[index] = turn
        self._submit(req)

    def _next_turn(self, req: Request, delivered: float) -> None:
        """``req``'s answer reached its user at ``delivered``: the session's next turn follows."""
        sessions = self.sessions
        assert sessions is not None
        turn = self._turn_of.pop(req.request_id) + 1
        if turn < int(sessions.turns[req.session]):
            self._send_turn(req.session, turn, delivered + sessions.think(self._clients))

    def next_arrival_s(self) -> float:
        """The earliest time a request may next reach a replica's scheduler (inf: none known)."""
        pending = self._pending[0] if self._pending else math.inf
        if self.load is not None and self.load.next_send_s < pending:  # a stage's next send
            pending = self.load.next_send_s
        sessions = self.sessions
        if sessions is not None and self._next_session < len(sessions.starts):
            start = float(sessions.starts[self._next_session])
            return start if start < pending else pending
        if self.specs is not None and self._next_arrival < len(self.specs):
            sent = float(self.specs.arrival_s[self._next_arrival])
            return sent if sent < pending else pending
        return pending

    def _dispatch(self, req: Request) -> None:
        """A request leaves its client now: routed to a replica, and through that replica's front
        end (``request_s + prompt_token_s · P``, plus jitter) to its scheduler. With no front-end
        terms it reaches the scheduler at once. Disaggregated, it goes to a prefill instance,
        which is asked for one token (the rest are owed to the decode instance)."""
        if self.disaggregated and req.deferred_outputs == 0 and req.generated == 0:
            req.deferred_outputs = req.output_tokens - 1
            req.output_tokens = 1
        replica = self.entry[self.router.route(self.entry, req)]
        req.replica = replica.index
        frontend = self.frontend
        if not frontend.delays_requests:
            self._arrive(replica, req)
            return
        now = self.env.now
        arrival = now + frontend.request_delay(req.prompt_tokens)
        if frontend.request_jitter_s > 0.0:
            arrival += float(self._jitter.exponential(frontend.request_jitter_s))
        req.arrival_s = arrival
        replica.inbound_tokens += req.outstanding_tokens
        heapq.heappush(self._pending, arrival)
        event = self.env.timeout(arrival - now)
        event.callbacks.append(lambda _: self._release_held(replica, req, self._arrive))

    def _arrive(self, replica: Replica, req: Request) -> None:
        """A request reaches a replica's scheduler: rejected, or queued there (waking or poking
        the replica). Under asynchronous scheduling a busy replica has formed its next batch
        already: a request arriving while a step runs, or as it ends, reaches the scheduler once
        the replica has formed the batch after that step (:meth:`_after_formation`), so it joins
        the step after next."""
        assert replica.pool is not None
        if replica.pool.async_scheduling and replica.wake is None:
            # a step runs (until its end), or one has ended and the next batch is not formed yet
            # (the replica is forming it, or its iteration end is due a float step later)
            now = self.env.now
            end = replica.current_step_end(now) if not replica.forming else -math.inf
            self._hold(replica, req, end if end > now else now, self._after_formation)
            return
        self._enqueue(replica, req)

    def _hold(
        self, replica: Replica, req: Request, until: float, then: Callable[[Replica, Request], None]
    ) -> None:
        """Keep ``req`` from ``replica``'s scheduler until ``until`` (an arrival the replica's
        decode runs stop for), then hand it to ``then``. Routers count it as the replica's."""
        heapq.heappush(self._pending, until)
        replica.inbound_tokens += req.outstanding_tokens
        event = self.env.timeout(_exact_delay(self.env.now, until))
        event.callbacks.append(lambda _: self._release_held(replica, req, then))

    def _release_held(
        self, replica: Replica, req: Request, then: Callable[[Replica, Request], None]
    ) -> None:
        heapq.heappop(self._pending)
        replica.inbound_tokens -= req.outstanding_tokens
        if req.abandoned:  # its client gave up while the front end or the replica held it
            assert self.load is not None
            self.load.drop(req)
            return
        then(replica, req)

    def _after_formation(self, replica: Replica, req: Request) -> None:
        """At the end of the step the request arrived in: into the scheduler once the replica has
        formed its next batch (events at one time run after its iteration end; its own event may
        land a float step later)."""
        now = self.env.now
        ends = replica.run_ends
        last = ends[-1] if ends is not None else replica.step_end
        if replica.wake is None and (replica.forming or last <= now):
            self._hold(replica, req, math.nextafter(now, math.inf), self._after_formation)
        else:
            self._enqueue(replica, req)

    def _enqueue(self, replica: Replica, req: Request) -> None:
        reason = self._rejection_reason(req)
        if reason:
            req.status = Status.REJECTED
            req.rejected_reason = reason
            _owe_outputs(req)
            self._done_with(req)
            if self.closed is not None:
                self._check_rejections(reason)
                self._send(req.client, self.env.now + self._think_time())
            elif self.sessions is not None:
                self._turn_of.pop(req.request_id)  # a rejected turn ends its session
            return
        replica.scheduler.enqueue(req)
        self._notify(replica)

    def _notify(self, replica: Replica) -> None:
        """Something reached ``replica`` now: wake it if idle, or cut its decode run."""
        if replica.wake is not None:
            wake, replica.wake = replica.wake, None
            wake.succeed()
        elif replica.pokeable and self.env.now <= replica.poke_until:
            replica.pokeable = False
            assert replica.process is not None
            replica.process.interrupt("arrival")

    def _rejection_reason(self, req: Request) -> str:
        if req.prompt_tokens + req.output_tokens + req.deferred_outputs > self.max_model_len:
            return "context_length"
        if not self.entry[0].scheduler.can_ever_fit(req):
            return "kv_capacity"
        if self.disaggregated:
            kv = self.pools[1].replicas[0].scheduler.kv
            context = req.max_kv_tokens + req.deferred_outputs
            if blocks_for_tokens(context, kv.block_size) > kv.total_blocks:
                return "kv_capacity"
        elif len(self.pools) > 1 and not all(
            pool.replicas[0].scheduler.can_ever_fit(req) for pool in self.pools
        ):
            return "kv_capacity"
        return ""

    # ------------------------------------------------------------------ disaggregation

    def _prefilled(self, req: Request) -> None:
        """A prefill instance has computed ``req``'s prompt (its iteration just ended): the
        instance keeps the prompt's blocks until its KV has crossed, the request is reset to
        what a decode instance takes in (the prompt's KV but its last token's, which the decode
        instance computes to sample the first output token, as vLLM's does) and routed to a
        decode instance, where it waits for blocks."""
        if req.abandoned:  # its client gave up meanwhile: nothing to hand over
            assert self.load is not None
            self.load.drop(req)
            return
        source = self.replicas[req.replica]
        kv = source.scheduler.kv
        if source.scheduler.prefix is None:  # (with a prefix cache its blocks stay cached)
            held = blocks_for_tokens(req.prompt_tokens, kv.block_size)
            kv.allocate(held)
            req.held_blocks = held
            source.held_blocks += held
        source.held_requests += 1
        req.prefill_replica = req.replica
        req.prefill_done_s = req.finish_s
        _owe_outputs(req)
        req.status = Status.WAITING
        req.generated = 0
        req.kv_tokens = req.prompt_tokens - 1
        req.prefill_target = req.prompt_tokens
        req.blocks = 0
        req.first_token_s = req.finish_s = math.nan
        req.first_row = req.last_row = -1
        assert self.decode_router is not None
        decode = self.pools[1].replicas
        target = decode[self.decode_router.route(decode, req)]
        req.replica = target.index
        target.inbound_tokens += req.outstanding_tokens
        target.awaiting.append(req)
        self._notify(target)

    def _take_in(self, replica: Replica, now: float) -> None:
        """A decode instance, between iterations: requests whose KV has arrived join its running
        batch; then, while no preempted request waits, the prefilled requests waiting for it get
        their blocks (FCFS, within its batch cap and watermark) and their KV starts crossing."""
        sched = replica.scheduler
        for req in replica.inbox:
            replica.inbound_tokens -= req.outstanding_tokens
            sched.admit_prefilled(req, now)
        replica.in_transfer -= len(replica.inbox)
        replica.inbox.clear()
        kv = sched.kv
        cap = sched.config.max_batch_size
        while replica.awaiting and not sched.waiting:
            if len(sched.running) + replica.in_transfer >= cap:
                break
            req = replica.awaiting[0]
            tokens = req.max_kv_tokens if sched.reserves_full_length else req.prompt_tokens
            need = blocks_for_tokens(tokens, kv.block_size)
            busy = bool(sched.running) or replica.in_transfer > 0
            if not kv.can_allocate(need, keep_watermark=busy):
                break
            kv.allocate(need)
            req.blocks = need
            replica.awaiting.popleft()
            replica.in_transfer += 1
            self.env.process(self._transfer(req, replica))

    def _link(self, source: int, target: int) -> Link:
        link = self.links.get((source, target))
        if link is None:
            prefill, decode = self.pools[0].scenario, self.pools[1].scenario
            assert prefill.cluster.disaggregation is None
            settings = self.scenario.cluster.disaggregation
            assert settings is not None
            same_node = self._nodes[source] == self._nodes[target]
            spec = link_spec(settings.kv_transfer, prefill.cluster, decode.cluster, same_node)
            link = self.links[(source, target)] = Link(self.env, spec)
        return link

    def _transfer(self, req: Request, target: Replica) -> Generator[simpy.Event, Any, None]:
        """``req``'s KV crossing its link (queued behind the link's earlier transfers); then the
        prefill instance frees its blocks and the decode instance takes the request in."""
        env = self.env
        link = self._link(req.prefill_replica, target.index)
        kv_bytes = req.prompt_tokens * self._kv_bytes_per_token
        settings = self.scenario.cluster.disaggregation
        assert settings is not None
        with link.resource.request() as slot:
            yield slot
            start = env.now
            if settings.kv_transfer.layerwise:
                prefill_s = req.prefill_done_s - req.first_scheduled_s
                duration = visible_time(link.spec, kv_bytes, self.model.num_layers, prefill_s)
            else:
                duration = link.spec.time(kv_bytes)
            yield env.timeout(duration)
            link.transfers += 1
            link.busy_s += duration
        req.kv_wait_s = start - req.prefill_done_s
        req.kv_transfer_s = duration
        req.kv_arrived_s = env.now
        self._free_prefill_blocks(req)
        if self.load is not None and self.load.landed(req, target):
            self._notify(target)  # its blocks there are free
            return
        target.inbox.append(req)
        self._notify(target)

    def _free_prefill_blocks(self, req: Request) -> None:
        """``req``'s prefill instance lets go of it: the blocks it held for the KV are free."""
        source = self.replicas[req.prefill_replica]
        source.held_requests -= 1
        if req.held_blocks:
            source.scheduler.kv.free(req.held_blocks)
            source.held_blocks -= req.held_blocks
            req.held_blocks = 0
            self._notify(source)

    # ------------------------------------------------------------------ closed loop

    def _start_clients(self) -> None:
        closed = self.closed
        assert closed is not None
        if closed.ramp_s > 0.0:
            starts = self._clients.uniform(0.0, closed.ramp_s, closed.concurrency)
        else:
            starts = np.zeros(closed.concurrency)
        for client in np.argsort(starts, kind="stable").tolist():
            self._send(client, float(starts[client]))

    def _send(self, client: int, sent: float) -> None:
        """Client ``client`` sends its next request at ``sent`` (now or later), if it may. Sends
        that a send causes (a rejection lets its client send again) queue up, never recurse."""
        self._outbox.append((client, sent))
        if self._sending:
            return
        self._sending = True
        try:
            while self._outbox:
                self._send_one(*self._outbox.popleft())
        finally:
            self._sending = False

    def _send_one(self, client: int, sent: float) -> None:
        closed = self.closed
        assert closed is not None
        index = self.sent
        if closed.max_requests is not None and index >= closed.max_requests:
            return
        if closed.duration_s is not None and sent > closed.duration_s:
            return
        horizon = self.scenario.horizon_s
        if horizon is not None and sent >= horizon:  # as an open-loop arrival then: never seen
            return
        if index >= REQUESTS.high:
            raise CbsimError(
                f"the closed loop has sent {index:,} requests by t = {sent:.6g} s; a run's "
                f"requests {REQUESTS.violation(index + 1)}: give num_requests or a shorter "
                "duration_s",
                field="workload.duration_s",
            )
        self._check_progress(sent)
        if index == max(PROJECTION_SENDS, 10 * closed.concurrency):
            self._check_projection(index, sent)
        prompt, output = closed.lengths[index]
        req = Request(index, sent, prompt, output, sent_s=sent, client=client)
        pick = closed.lengths.pick(index)
        if pick >= 0:
            req.segments = self._pool_segments(pick, prompt)
        self._submit(req)

    def _submit(self, req: Request) -> None:
        """Send ``req``, the next request (its id is ``self.sent``), at ``req.sent_s``: now, or
        then (a closed-loop client's next request, a session's next turn)."""
        self.requests[req.request_id] = req
        self.sent = req.request_id + 1
        if self.load is not None:
            self.load.watch(req)
        sent = req.sent_s
        if sent <= self.env.now:
            self._dispatch(req)
            return
        heapq.heappush(self._pending, sent)
        event = self.env.timeout(sent - self.env.now)
        event.callbacks.append(lambda _: self._dispatch_pending(req))

    def _dispatch_pending(self, req: Request) -> None:
        heapq.heappop(self._pending)
        self._dispatch(req)

    def _check_progress(self, sent: float) -> None:
        """A closed loop whose every request is rejected at once would send forever at one time."""
        when, count = self._sends_now
        count = count + 1 if when == sent else 1
        self._sends_now = (sent, count)
        assert self.closed is not None
        if count > 100 * self.closed.concurrency + 1000:
            raise CbsimError(
                f"closed loop: {count} requests sent at t = {sent:.6g} s without time passing "
                "(each one rejected at once?); check the lengths against the model's context "
                "and KV capacity, or set think_time_s",
                field="workload.arrival",
            )

    def _check_rejections(self, reason: str) -> None:
        """A closed loop whose every request is rejected (longer than the context, or than the
        KV cache holds) would send until the request limit, think time or not: stop it once
        many in a row have been rejected with none finishing meanwhile."""
        done, count = self._rejected_run
        count = count + 1 if done == self._done else 1
        self._rejected_run = (self._done, count)
        assert self.closed is not None
        if count > 100 * self.closed.concurrency + 1000:
            raise CbsimError(
                f"closed loop: {count:,} requests in a row were rejected ({reason}) and none "
                "finished; check the lengths against the model's context and KV capacity",
                field="workload.arrival",
            )

    def _check_projection(self, index: int, sent: float) -> None:
        """A closed loop sending for ``duration_s`` at the pace of its first ``index`` requests:
        an error now, not minutes later at the request limit, when that pace would send far
        more than the limit allows."""
        closed = self.closed
        assert closed is not None
        if closed.duration_s is None or sent <= 0.0:
            return
        if closed.max_requests is not None and closed.max_requests <= REQUESTS.high:
            return
        span = closed.duration_s
        if self.scenario.horizon_s is not None:
            span = min(span, self.scenario.horizon_s)
        projected = index / sent * span
        if projected > 2 * REQUESTS.high:
            raise CbsimError(
                f"the closed loop sent {index:,} requests in its first {sent:.6g} s: over "
                f"{span:.6g} s it would send about {projected:.3g}; a run's requests "
                f"{REQUESTS.violation(projected)}: give num_requests or a shorter duration_s",
                field="workload.duration_s",
            )

    def _release(self, deliveries: list[float] | None, first_row: int) -> None:
        """After an iteration (or a run of them, rows from ``first_row``): count the finished
        requests and, closed-loop, let their clients send their next requests once the last
        token has reached them."""
        finished, self._finished = self._finished, []
        self._done += len(finished)
        if self.staged is not None:
            assert self.load is not None
            for req in finished:
                at = req.finish_s if deliveries is None else deliveries[req.last_row - first_row]
                self.load.done(req, at)
        if self.closed is None and self.sessions is None:
            return
        for req in finished:
            delivered = req.finish_s if deliveries is None else deliveries[req.last_row - first_row]
            if self.sessions is not None:
                self._next_turn(req, delivered)
            else:
                self._send(req.client, delivered + self._think_time())

    def _think_time(self) -> float:
        closed = self.closed
        assert closed is not None
        if closed.think_time_random and closed.think_time_s > 0.0:
            return float(self._clients.exponential(closed.think_time_s))
        return closed.think_time_s

    def _deliveries(self, replica: Replica, ends: list[float], emitted: list[int]) -> list[float]:
        """When the front end has streamed each iteration's tokens: it handles tokens in order,
        ``output_token_s`` each, starting no earlier than the iteration's end."""
        assert replica.pool is not None
        per_token = replica.pool.cost.engine.frontend.output_token_s
        free = replica.delivered_s
        out = []
        for end, tokens in zip(ends, emitted, strict=True):
            free = (free if free > end else end) + per_token * tokens
            out.append(free)
        replica.delivered_s = free
        return out

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
        on_finish = self._prefilled if prefills_only else self._on_finish
        takes_in = pool.plan.role == "decode"
        index = replica.index
        spec = pool.spec
        fast_forward = pool.fast_forward
        horizon = self.scenario.horizon_s if self.scenario.horizon_s is not None else math.inf
        # the recorder keeps a delivery time for every row or none: when any pool's front end
        # streams, every replica records them (its iteration ends, where its own does not)
        streams = any(
            r.pool is not None and r.pool.cost.engine.frontend.output_token_s > 0.0
            for r in self.replicas
        )
        # finishes make arrivals (or end stages; with timeouts: a timeout knows what finished)
        closed = self.closed is not None or self.sessions is not None or self.load is not None
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
            if takes_in and (replica.inbox or replica.awaiting):
                self._take_in(replica, start)
            waiting = len(sched.waiting)
            stop_on_finish = sched.decode_run_mode() if fast_forward else None
            if stop_on_finish is not None:
                # a run deciding by the exact free blocks ends at a finish that releases cache
                # entries (see SchedulerPolicy.settle_run); one whose finishes free blocks that
                # prefilled requests wait for ends at the first
                caching = exact_free and sched.prefix is not None and sched.prefix.holds_entries()
                stop_on_finish = stop_on_finish or closed or caching or bool(replica.awaiting)
                run = self._plan_run(replica, start, stop_on_finish, horizon)
                if run is not None:
                    replica.start_run(run)
                    replica.pokeable = True
                    replica.forming = False
                    try:
                        yield _iteration_end_at(env, run.end_s)
                    except simpy.Interrupt:
                        # an arrival landed mid-run: stop where stepping would have seen it
                        cut = self._plan_run(replica, start, stop_on_finish, horizon, cut=run)
                        assert cut is not None
                        run = cut
                        replica.start_run(run)
                        if run.end_s > env.now:
                            yield _iteration_end_at(env, run.end_s)
                    replica.pokeable = False
                    replica.forming = True
                    clock = replica.step_end = run.end_s
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
                        ends = [a + d for a, d in zip(run.starts, run.durations, strict=True)]
                        tokens = run.batch_sizes if run.emitted is None else run.emitted
                        deliveries = self._deliveries(replica, ends, tokens)
                    recorder.record_decode_run(index, run, waiting, deliveries, replica.in_transfer)
                    replica.last_row = recorder.rows - 1
                    self._release(deliveries, first_row)
                    continue
            batch = sched.next_batch(start)
            sched.forget_running_tokens()
            if not batch.requests:
                if sched.has_work and not replica.held_blocks and not replica.in_transfer:
                    # every running request was preempted: the queue is admissible again
                    batch = sched.next_batch(start)
                    sched.forget_running_tokens()
                    if not batch.requests:
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
                duration = spec.plan(batch, sched, index) + cost.time_stats(batch.stats)
                sched.forget_running_tokens()  # drafts' KV may have preempted requests
            if batch.load_s > duration:  # a CPU-tier load overlapped layer by layer
                duration = batch.load_s
            kv_used = sched.kv.used_blocks
            transfers = replica.held_requests if prefills_only else replica.in_transfer
            end = start + duration
            replica.step_end = end
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
            delivered = self._deliveries(replica, [end], [emitted]) if streams else None
            record(index, start, duration, batch, emitted, kv_used, waiting, delivered, transfers)
            replica.last_row = row
            self._release(delivered, row)

    def _plan_run(
        self,
        replica: Replica,
        start: float,
        stop_on_finish: bool,
        horizon: float,
        cut: DecodeRun | None = None,
    ) -> DecodeRun | None:
        """The replica's decode run from ``start``; with ``cut``, that run planned again to stop
        at an arrival that has just landed."""
        sched = replica.scheduler
        kv = sched.kv
        pool = replica.pool
        assert pool is not None
        arrival = None if cut is None else self.env.now
        if pool.spec is not None:
            assert pool.spec_kernel is not None
            return plan_spec_run(
                pool.spec,
                pool.spec_kernel,
                replica.index,
                sched,
                start_s=start,
                stop_on_finish=stop_on_finish,
                next_arrival_s=self.next_arrival_s() if arrival is None else arrival,
                horizon_s=horizon,
                restart=cut,
                kernel=self._spec_run_call,
            )
        return plan_decode_run(
            sched.running,
            cost=pool.cost,
            start_s=start,
            block_size=kv.block_size,
            used_blocks=kv.used_blocks,
            total_blocks=kv.total_blocks,
            grows_kv=not sched.reserves_full_length,
            stop_on_finish=stop_on_finish,
            next_arrival_s=self.next_arrival_s() if arrival is None else arrival,
            horizon_s=horizon,
            kernel=self._decode_run_call,
            shares_blocks=sched.prefix is not None,
        )

    def prompt_lengths(self) -> np.ndarray:
        """The prompt lengths of the requests this run sends (so far, closed-loop)."""
        if self.specs is not None:
            return self.specs.prompt_tokens
        if self.sessions is not None:
            return self.sessions.prompt_lengths()
        source = self.closed if self.closed is not None else self.staged
        assert source is not None
        lengths = source.lengths  # request i was sent with the i-th lengths
        return np.fromiter((lengths[i][0] for i in range(self.sent)), dtype=np.int64)

    def _on_finish(self, req: Request) -> None:
        if req.abandoned:  # in the step under way at its timeout: its client had left
            assert self.load is not None
            self.load.drop(req)
            return
        self._finished.append(req)
        self._done_with(req)

    def _done_with(self, req: Request) -> None:
        """``req`` finished, was rejected or timed out (nothing changes it any more): into the
        table."""
        del self.requests[req.request_id]
        self.table.store(req)
        if req.status == Status.REJECTED and self.load is not None:
            self.load.done(req, req.arrival_s)  # (when it reached the scheduler, now)

    def _client_gave_up(self, req: Request, now: float) -> None:
        """``req`` timed out for its client now: a closed-loop client sends its next request, a
        session ends (its replica drops the request at its next step boundary)."""
        self._done += 1
        if self.closed is not None:
            self._send(req.client, now + self._think_time())
        elif self.sessions is not None:
            self._turn_of.pop(req.request_id, None)

    def _report_progress(self) -> Generator[simpy.Event, Any, None]:
        assert self._progress is not None
        total = self.total_requests
        last = float(self.specs.arrival_s[-1]) if self.specs is not None and total else 0.0
        step = max(1.0, last / 200.0)
        while True:
            self._progress(self._done, total, self.env.now)
            yield self.env.timeout(step)

    def run(self) -> Recorder:
        env = self.env
        if self.closed is not None:
            self._start_clients()
        elif self.sessions is not None:
            env.process(self._session_starts())
        elif self.load is not None and self.staged is not None:
            env.process(self.load.stages())
        else:
            env.process(self._arrivals())
        for replica in self.replicas:
            replica.process = env.process(self._replica_loop(replica))
        horizon = self.scenario.horizon_s
        if self._progress is not None:
            env.process(self._report_progress())
            # the progress ticker never ends by itself: stop when the real work does
            self._run_until_drained(horizon)
            self._progress(self._done, self.total_requests or self._done, env.now)
        else:
            env.run(until=horizon)
        for req in self.requests.values():  # still in flight
            _owe_outputs(req)
            self.table.store(req)
        self.requests.clear()
        self.recorder.finish(self.table, self._last_event_s(), self.replicas)
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

    def _all_sent(self) -> bool:
        if self.sessions is not None and self._next_session < len(self.sessions.starts):
            return False
        if self.load is not None and self.load.sending:
            return False
        if self.closed is not None or self.sessions is not None or self.staged is not None:
            return not self._pending and not any(r.busy for r in self.replicas)
        return self.sent == self.total_requests

    def _run_until_drained(self, horizon: float | None) -> None:
        env = self.env
        while True:
            if horizon is not None and env.now >= horizon:
                return
            if self._all_sent() and not any(r.busy for r in self.replicas):
                return
            target = env.now + 1.0
            if horizon is not None:
                target = min(target, horizon)
            env.run(until=target)


def scenario_pool(
    workload: RequestSpecs | ClosedLoopWorkload | SessionWorkload | StagedWorkload,
) -> PoolPrompts | None:
    """The workload's prompt pool (workload.prompt_pool), if it has one."""
    if isinstance(workload, RequestSpecs):
        return workload.pool
    if isinstance(workload, ClosedLoopWorkload | StagedWorkload):
        return workload.lengths.pool
    return None


def cost_model_for(scenario: Scenario) -> CostModel:
    """The cluster's cost model: the engine's kernels on this GPU (or the named calibration
    profile) and the engine's step overhead."""
    cluster = scenario.cluster
    return CostModel(
        get_model(cluster.model),
        get_gpu(cluster.gpu),
        tp=cluster.tp,
        dtype=cluster.dtype,
        kv_dtype=cluster.effective_kv_dtype,
        calibration=cluster.calibration or DEFAULT_PROFILE,
        engine=load_engine_profile(cluster.engine),
        expert_routing=cluster.expert_routing,
        ep=cluster.ep,
        dp=cluster.dp,
        pp=cluster.pp,
    )


class CostModelCache:
    """The cost models of several simulations, one per set of the cluster fields
    :func:`cost_model_for` reads, so a search of many simulations builds each once.

    Sharing is safe: a cost model is a function of those fields alone, and the tables it fills
    on demand (:meth:`CostModel.compiled`) hold the same values whichever simulation fills them."""

    _FIELDS: ClassVar[set[str]] = {
        "model", "gpu", "tp", "dtype", "kv_dtype", "calibration", "engine", "expert_routing", "ep",
        "dp", "pp",
    }  # fmt: skip

    def __init__(self) -> None:
        self._models: dict[str, CostModel] = {}

    def get(self, scenario: Scenario) -> CostModel:
        """``cost_model_for(scenario)``, built on first use."""
        key = scenario.cluster.model_dump_json(include=self._FIELDS)
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = cost_model_for(scenario)
        return model


REFERENCE_ITERATION = [(2048, 0)] + [(1, 2048)] * 32
"""The iteration mixed fleets weigh their pools by (see :mod:`cbsim.router`)."""


def _weigh_by_speed(pools: list[ReplicaPool]) -> None:
    """Each replica's ``load_scale``: its pool's time for :data:`REFERENCE_ITERATION` over the
    fastest pool's."""
    times = [pool.cost.iteration_time(REFERENCE_ITERATION) for pool in pools]
    fastest = min(times)
    for pool, time in zip(pools, times, strict=True):
        for replica in pool.replicas:
            replica.load_scale = time / fastest


def _owe_outputs(req: Request) -> None:
    """A disaggregated request leaving its prefill instance (or the run) asks for all its
    outputs again."""
    req.output_tokens += req.deferred_outputs
    req.deferred_outputs = 0


PROJECTION_SENDS = 1_000
"""Sends after which a closed loop's pace is projected over its duration (``_check_projection``)."""

INITIAL_TABLE_ROWS = 4096
"""Rows a request table starts with when a horizon cuts a run whose sends are not known ahead."""


def _table_rows(
    workload: RequestSpecs | ClosedLoopWorkload | SessionWorkload | StagedWorkload,
    horizon_s: float | None,
) -> int:
    """Rows to allocate the request table up front: the requests the run will send, where known
    (an open-loop workload's arrivals before the horizon; every request of a workload without a
    horizon); a run a horizon cuts whose sends come out of the run starts with at most
    :data:`INITIAL_TABLE_ROWS` and the table grows as rows arrive. (Allocating every request of
    a long workload cut to a short horizon took gigabytes for a few rows.)"""
    if isinstance(workload, RequestSpecs) and horizon_s is not None:
        return int(np.searchsorted(workload.arrival_s, horizon_s, side="left"))
    rows = len(workload)
    return rows if horizon_s is None else min(rows, INITIAL_TABLE_ROWS)
