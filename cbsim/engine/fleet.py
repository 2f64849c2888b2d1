"""The fleet: the replicas a scenario runs, built from its pools before the clock starts.

Each pool (:mod:`cbsim.schema.pools`: a plain cluster's one, a mixed fleet's groups, a disaggregated
cluster's prefill and decode instances) gets its cost model, its speculative decoding and how its
decode runs are advanced; each replica its scheduler (batch limits per attention rank times the
ranks) over a KV cache sized for its GPUs, and with prefix caching a prefix cache (and CPU tier).
In a mixed fleet every replica is weighed by its pool's speed, for the load-aware routers.
"""

from __future__ import annotations

import simpy

from cbsim.catalog.model_bytes import kv_bytes_per_token_per_gpu
from cbsim.catalog.models import ModelShape
from cbsim.cost.engine_memory import MemoryPlan
from cbsim.engine.cost_models import CostModelCache, cost_model_for
from cbsim.engine.replica import Replica, ReplicaPool
from cbsim.engine.scheduler import make_scheduler
from cbsim.engine.speculative.decoder import SpeculativeDecoding
from cbsim.engine.speculative.fast_run import KernelSettings, kernel_settings
from cbsim.memory.kvcache import KVCache
from cbsim.memory.prefix_cache import PrefixCache, prefix_caching_on
from cbsim.schema.pools import PoolPlan
from cbsim.schema.replica_memory import replica_memory
from cbsim.schema.scenario import Scenario
from cbsim.schema.scheduler import Scheduler as SchedulerConfig

__all__ = [
    "REFERENCE_ITERATION",
    "add_prefix_caches",
    "build_replicas",
    "new_pool",
    "weigh_by_speed",
]

REFERENCE_ITERATION = [(2048, 0)] + [(1, 2048)] * 32
"""The iteration mixed fleets weigh their pools by (see :mod:`cbsim.engine.router`)."""


def new_pool(plan: PoolPlan, source: str | None, cost_models: CostModelCache | None) -> ReplicaPool:
    """A pool's cost model and speculative decoding (speculative decode runs are
    fast-forwarded by a compiled kernel where it can run them)."""
    scenario = plan.scenario
    cost = cost_model_for(scenario) if cost_models is None else cost_models.get(scenario)
    spec = None
    if scenario.speculative.enabled:
        cost.cold_start.stop()  # its kernels compile: it runs them whatever pricing does
        config = scenario.speculative
        proposer = None if cost_models is None else cost_models.proposer(config.proposer, cost)
        spec = SpeculativeDecoding(config, cost, scenario.seed, source, proposer)
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


def build_replicas(
    model: ModelShape, pools: list[ReplicaPool], env: simpy.Environment
) -> list[Replica]:
    """Every pool's replicas, numbered across pools in order."""
    replicas: list[Replica] = []
    for pool in pools:
        pool_scenario = pool.scenario
        for _ in range(pool.plan.replicas):
            scheduler = make_scheduler(rank_limits(pool_scenario), new_kv_cache(model, pool))
            replica = Replica(len(replicas), scheduler, env, pool)
            pool.replicas.append(replica)
            replicas.append(replica)
    return replicas


def rank_limits(scenario: Scenario) -> SchedulerConfig:
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


def replica_memory_plan(pool: ReplicaPool) -> MemoryPlan:
    """How a replica of ``pool``'s GPUs are laid out by its engine (a draft model's weights and
    KV per token beside the target's)."""
    spec = pool.spec
    return replica_memory(
        pool.scenario,
        pool.cost.engine.memory,
        extra_weight_bytes=spec.proposer.weight_bytes_per_gpu() if spec else 0.0,
        extra_kv_bytes_per_token=spec.proposer.kv_bytes_per_token_per_gpu() if spec else 0.0,
    )


def scenario_memory_plans(scenario: Scenario) -> list[tuple[PoolPlan, MemoryPlan]]:
    """Each pool's replica memory as its engine lays it out, before anything runs (a draft
    model's weights and KV beside the target's, as :func:`replica_memory_plan`)."""
    from cbsim.schema.pools import pool_plans

    return [(plan, pool_memory(plan.scenario)) for plan in pool_plans(scenario)]


def pool_memory(resolved: Scenario) -> MemoryPlan:
    """The replica memory of one pool (its resolved scenario) as its engine lays it out, the
    proposer's weights and KV beside the target's when it speculates: what its replicas get,
    and what ``cbsim validate`` checks they fit."""
    from cbsim.cost.engine_profile import load_engine_profile
    from cbsim.engine.speculative.proposers import make_proposer

    extra_weights = extra_kv = 0.0
    if resolved.speculative.enabled:
        proposer = make_proposer(resolved.speculative.proposer, cost_model_for(resolved))
        extra_weights = proposer.weight_bytes_per_gpu()
        extra_kv = proposer.kv_bytes_per_token_per_gpu()
    return replica_memory(
        resolved,
        load_engine_profile(resolved.cluster.engine).memory,
        extra_weight_bytes=extra_weights,
        extra_kv_bytes_per_token=extra_kv,
    )


def new_kv_cache(model: ModelShape, pool: ReplicaPool) -> KVCache:
    """A replica's KV cache: what its engine leaves beside the weights (a draft model's too)."""
    return KVCache.from_plan(replica_memory_plan(pool), pool.scenario.scheduler.watermark)


def add_prefix_caches(model: ModelShape, pools: list[ReplicaPool]) -> None:
    """A prefix cache (with its CPU tier) on every replica of a pool that caches prefixes; a
    decode instance's prompts arrive computed: it caches none of them."""
    for pool in pools:
        if not prefix_caching_on(pool.scenario) or pool.plan.role == "decode":
            continue
        cpu_blocks, load_s_per_block = cpu_tier(model, pool)
        for replica in pool.replicas:
            kv = replica.scheduler.kv
            replica.scheduler.prefix = PrefixCache(kv, cpu_blocks, load_s_per_block)


def cpu_tier(model: ModelShape, pool: ReplicaPool) -> tuple[int, float]:
    """The CPU tier's capacity in blocks and the seconds one block takes to load (0, 0.0:
    none): per GPU, its bytes of one block over its host memory and PCIe bandwidth."""
    cluster = pool.scenario.cluster
    offload = cluster.kv_offload
    if offload is None:
        return 0, 0.0
    per_token = kv_bytes_per_token_per_gpu(model, cluster.tp, pool.cost.kv_dtype, cluster.pp)
    block_bytes = per_token * pool.scenario.scheduler.block_size
    blocks = cluster.dp * int(offload.cpu_gib * 2**30 // block_bytes)
    return blocks, block_bytes / (offload.bandwidth_gib_s * 2**30)


def weigh_by_speed(pools: list[ReplicaPool]) -> None:
    """Each replica's ``load_scale``: its pool's time for :data:`REFERENCE_ITERATION` over the
    fastest pool's."""
    times = [pool.cost.iteration_time(REFERENCE_ITERATION) for pool in pools]
    fastest = min(times)
    for pool, time in zip(pools, times, strict=True):
        for replica in pool.replicas:
            replica.load_scale = time / fastest
