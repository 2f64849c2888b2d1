"""The disaggregated hand-off: a prompt computed on a prefill instance, decoded on another.

A request is routed first to a prefill instance, which is asked for one token (the rest are owed
to the decode instance). When its prompt is computed the prefill instance keeps the prompt's
blocks until its KV has crossed, and the request, reset to what a decode instance takes in, is
routed to a decode instance. There it waits (FCFS) for blocks; once it has them its KV crosses
the link between the two instances' GPUs (:mod:`cbsim.memory.kv_transfer`: queued behind the link's
earlier transfers, layer by layer where the settings say so), the prefill instance frees its
blocks, and the decode instance takes the request into its running batch at its next iteration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import simpy

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import ModelShape
from cbsim.common.rng import stream
from cbsim.engine.replica import Replica, ReplicaPool
from cbsim.engine.router import make_router
from cbsim.memory.kv_transfer import (
    Link,
    kv_bytes_per_token,
    link_spec,
    node_of_instances,
    visible_time,
)
from cbsim.memory.kvcache import blocks_for_tokens
from cbsim.schema.scenario import Scenario
from cbsim.workload.request import Request, Status

if TYPE_CHECKING:
    from cbsim.engine.load_generator import LoadGenerator

__all__ = ["Handoff", "owe_outputs", "placement"]


def owe_outputs(req: Request) -> None:
    """A disaggregated request leaving its prefill instance (or the run) asks for all its
    outputs again."""
    req.output_tokens += req.deferred_outputs
    req.deferred_outputs = 0


def unsent(req: Request) -> None:
    """``req``'s prefill instance has computed its prompt: the token it sampled is never sent
    (its iteration emits none; the decode instance computes the first output token), so the
    request has generated nothing yet."""
    req.generated = 0
    req.first_token_s = math.nan
    req.first_row = req.last_row = -1


def placement(replicas: list[Replica]) -> list[int]:
    """The node of every replica, packed in order (see :mod:`cbsim.memory.kv_transfer`)."""
    gpus, kinds, per_node = [], [], []
    for replica in replicas:
        assert replica.pool is not None
        cluster = replica.pool.scenario.cluster
        gpus.append(cluster.gpus_per_replica)
        kinds.append(cluster.gpu)
        per_node.append(get_gpu(cluster.gpu).gpus_per_node)
    return node_of_instances(gpus, kinds, per_node)


class Handoff:
    """The hand-off from a disaggregated cluster's prefill pool to its decode pool."""

    def __init__(
        self,
        scenario: Scenario,
        model: ModelShape,
        pools: list[ReplicaPool],
        replicas: list[Replica],
        notify: Callable[[Replica], None],
        load: LoadGenerator | None,
    ) -> None:
        self.scenario = scenario
        self.model = model
        self.pools = pools
        self.replicas = replicas
        self.env = replicas[0].env
        decode_router = pools[1].scenario.cluster.router
        self.decode_router = make_router(decode_router, stream(scenario.seed, "router:decode"))
        self.notify = notify  # something reached a replica: wake it, or cut its decode run
        self.load = load  # client timeouts, when the workload has them
        self.links: dict[tuple[int, int], Link] = {}
        self.nodes = placement(replicas)
        decode = pools[1]
        self.kv_bytes_per_token = kv_bytes_per_token(decode.scenario.cluster, decode.cost.kv_dtype)

    def prefilled(self, req: Request) -> None:
        """A prefill instance has computed ``req``'s prompt (its iteration just ended): the
        instance keeps the prompt's blocks until its KV has crossed, the request is reset to
        what a decode instance takes in (the prompt's KV but its last token's, which the decode
        instance computes to sample the first output token, as vLLM's does) and routed to a
        decode instance, where it waits for blocks."""
        if req.abandoned:  # its client gave up meanwhile: nothing to hand over
            assert self.load is not None
            unsent(req)
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
        owe_outputs(req)
        unsent(req)
        req.status = Status.WAITING
        req.kv_tokens = req.prompt_tokens - 1
        req.prefill_target = req.prompt_tokens
        req.blocks = 0
        req.finish_s = math.nan
        decode = self.pools[1].replicas
        target = decode[self.decode_router.route(decode, req)]
        req.replica = target.index
        target.inbound_tokens += req.outstanding_tokens
        target.awaiting.append(req)
        self.notify(target)

    def take_in(self, replica: Replica, now: float) -> None:
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
            same_node = self.nodes[source] == self.nodes[target]
            spec = link_spec(settings.kv_transfer, prefill.cluster, decode.cluster, same_node)
            link = self.links[(source, target)] = Link(self.env, spec)
        return link

    def _transfer(self, req: Request, target: Replica) -> Generator[simpy.Event, Any, None]:
        """``req``'s KV crossing its link (queued behind the link's earlier transfers); then the
        prefill instance frees its blocks and the decode instance takes the request in."""
        env = self.env
        link = self._link(req.prefill_replica, target.index)
        kv_bytes = req.prompt_tokens * self.kv_bytes_per_token
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
        self.free_prefill_blocks(req)
        if self.load is not None and self.load.landed(req, target):
            self.notify(target)  # its blocks there are free
            return
        target.inbox.append(req)
        self.notify(target)

    def free_prefill_blocks(self, req: Request) -> None:
        """``req``'s prefill instance lets go of it: the blocks it held for the KV are free."""
        source = self.replicas[req.prefill_replica]
        source.held_requests -= 1
        if req.held_blocks:
            source.scheduler.kv.free(req.held_blocks)
            source.held_blocks -= req.held_blocks
            req.held_blocks = 0
            self.notify(source)
