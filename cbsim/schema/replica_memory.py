"""A scenario's replica in the engines' memory terms: the model, GPU, parallelism, precisions and
batching limits one replica of a resolved scenario sizes its KV cache from
(:class:`cbsim.cost.engine_memory.MemoryInputs`), and its memory plan under its engine's rule.
"""

from __future__ import annotations

from cbsim.cost.engine_memory import MemoryInputs, MemoryPlan, plan_memory
from cbsim.cost.memory_rule import MemoryRule
from cbsim.schema.scenario_parts import ScenarioParts

__all__ = ["replica_inputs", "replica_memory"]


def replica_inputs(
    scenario: ScenarioParts,
    *,
    fraction: float | None = None,
    extra_weight_bytes: float = 0.0,
    extra_kv_bytes_per_token: float = 0.0,
) -> MemoryInputs:
    """What one replica of a resolved scenario sizes its cache from (``fraction``: the memory
    flag, None for the engine's default)."""
    from cbsim.catalog.hardware import get_gpu
    from cbsim.catalog.models import get_model

    cluster = scenario.cluster
    sched = scenario.scheduler
    return MemoryInputs(
        model=get_model(cluster.model),
        gpu=get_gpu(cluster.gpu),
        tp=cluster.tp,
        pp=cluster.pp,
        dp=cluster.dp,
        dtype=cluster.dtype,
        kv_dtype=cluster.effective_kv_dtype,
        block_size=sched.block_size,
        fraction=fraction,
        max_batched_tokens=sched.max_batched_tokens,
        max_batch_size=sched.max_batch_size,
        max_model_len=cluster.max_model_len or 0,
        extra_weight_bytes=extra_weight_bytes,
        extra_kv_bytes_per_token=extra_kv_bytes_per_token,
        speculative=scenario.speculative.enabled,
    )


def replica_memory(
    scenario: ScenarioParts,
    rule: MemoryRule,
    *,
    extra_weight_bytes: float = 0.0,
    extra_kv_bytes_per_token: float = 0.0,
) -> MemoryPlan:
    """The memory of one replica of a resolved scenario (its engine's defaults applied:
    :func:`cbsim.run.loading.apply_engine_defaults`) under its engine's ``rule``, with the memory
    flag ``cluster.gpu_memory_utilization`` read as the engine's own (vLLM's
    ``--gpu-memory-utilization``, SGLang's ``--mem-fraction-static``, TensorRT-LLM's
    ``free_gpu_memory_fraction``): the user's, else the engine's default that resolving the
    scenario wrote there."""
    inputs = replica_inputs(
        scenario,
        fraction=scenario.cluster.gpu_memory_utilization,
        extra_weight_bytes=extra_weight_bytes,
        extra_kv_bytes_per_token=extra_kv_bytes_per_token,
    )
    return plan_memory(rule, inputs)
