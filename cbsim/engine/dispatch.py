"""Dispatch: a sent request's way from its client to a replica's scheduler.

A request is routed to a replica when its client sends it, and reaches that replica's scheduler
once the replica's front end (HTTP, tokenisation) has handled it: ``request_s + prompt_token_s ·
P``, plus jitter (:class:`cbsim.cost.engine_profile.Frontend`); routers count it as the replica's
meanwhile. Disaggregated, it goes to a prefill instance, which is asked for one token (the rest
are owed to the decode instance). At the scheduler it is rejected if it can never be served (its
context exceeds the model's limit, or its KV cannot fit even on an empty replica); otherwise it
is queued, waking the replica if idle or cutting its decode run where stepping would see it.

Under asynchronous scheduling a busy replica has formed its next batch already: a request
arriving while a step runs, or as it ends, reaches the scheduler once the replica has formed the
batch after that step, so it joins the step after next.

Autoscaled (:mod:`cbsim.engine.autoscale`), requests are routed over the serving replicas only: the
autoscaler keeps ``entry`` (the list routers choose from) to them; a replica taken out of it still
receives what was routed to it before (its front end, a hold), which it drains.

The dispatcher keeps every send and front-end arrival scheduled but not yet happened: the
earliest of them is when a request may next reach a scheduler, where decode runs stop.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from cbsim.common.event_time import exact_delay
from cbsim.common.rng import stream
from cbsim.engine.handoff import owe_outputs
from cbsim.engine.replica import Replica, ReplicaPool
from cbsim.engine.router import make_router
from cbsim.memory.kvcache import blocks_for_tokens
from cbsim.workload.request import Request, Status

if TYPE_CHECKING:
    from cbsim.engine.load_generator import LoadGenerator

__all__ = ["Dispatcher"]


class Dispatcher:
    """Routes sent requests through the front ends to the replicas' schedulers."""

    def __init__(
        self,
        pools: list[ReplicaPool],
        seed: int,
        max_model_len: int,
        disaggregated: bool,
        load: LoadGenerator | None,
        rejected: Callable[[Request, str], None],
    ) -> None:
        self.pools = pools
        # where requests are routed first: the prefill pool, or every replica
        self.entry = pools[0].replicas if disaggregated else [r for p in pools for r in p.replicas]
        self.env = self.entry[0].env
        self.router = make_router(pools[0].scenario.cluster.router, stream(seed, "router"))
        self.frontend = pools[0].cost.engine.frontend
        self.max_model_len = max_model_len
        self.disaggregated = disaggregated
        self.load = load  # client timeouts, when the workload has them
        self.rejected = rejected  # a request rejected now (its status and reason set)
        # sends and front-end arrivals scheduled but not yet happened (a heap of times)
        self.pending: list[float] = []
        self.routed = 0  # requests routed so far (an autoscaler's rps metric reads it)
        self._jitter = stream(seed, "frontend")

    def next_pending_s(self) -> float:
        """The earliest send or front-end arrival scheduled (inf: none)."""
        return self.pending[0] if self.pending else math.inf

    def send(self, req: Request) -> None:
        """Send ``req`` at ``req.sent_s``: now, or then (a closed-loop client's next request, a
        session's next turn)."""
        env = self.env
        sent = req.sent_s
        if sent <= env.now:
            self.dispatch(req)
            return
        heapq.heappush(self.pending, sent)
        event = env.timeout(exact_delay(env.now, sent))
        event.callbacks.append(lambda _: self._dispatch_pending(req))

    def _dispatch_pending(self, req: Request) -> None:
        heapq.heappop(self.pending)
        self.dispatch(req)

    def dispatch(self, req: Request) -> None:
        """A request leaves its client now: routed to a replica, and through that replica's front
        end (``request_s + prompt_token_s · P``, plus jitter) to its scheduler. With no front-end
        terms it reaches the scheduler at once. Disaggregated, it goes to a prefill instance,
        which is asked for one token (the rest are owed to the decode instance)."""
        if self.disaggregated and req.deferred_outputs == 0 and req.generated == 0:
            req.deferred_outputs = req.output_tokens - 1
            req.output_tokens = 1
        replica = self.entry[self.router.route(self.entry, req)]
        req.replica = replica.index
        self.routed += 1
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
        heapq.heappush(self.pending, arrival)
        event = self.env.timeout(exact_delay(now, arrival))
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
        heapq.heappush(self.pending, until)
        replica.inbound_tokens += req.outstanding_tokens
        event = self.env.timeout(exact_delay(self.env.now, until))
        event.callbacks.append(lambda _: self._release_held(replica, req, then))

    def _release_held(
        self, replica: Replica, req: Request, then: Callable[[Replica, Request], None]
    ) -> None:
        heapq.heappop(self.pending)
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
            owe_outputs(req)
            self.rejected(req, reason)
            return
        replica.scheduler.enqueue(req)
        self.notify(replica)

    def notify(self, replica: Replica) -> None:
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
