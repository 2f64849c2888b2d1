"""Engine defaults: the keys a scenario leaves unset, filled from its serving engine's profile
for its GPU (scheduler kind and budgets, KV-cache precision, GPU memory taken).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from cbsim.schema.cluster import Cluster

if TYPE_CHECKING:
    from cbsim.schema.scenario import Scenario


ModelT = TypeVar("ModelT", bound=BaseModel)


def _keeping_fields_set(model: ModelT, updates: Mapping[str, Any]) -> ModelT:
    """A copy with ``updates`` applied that still reports only the user's keys as set, so a dump
    with ``exclude_unset`` (what sweeps and capacity searches vary) leaves resolved defaults out."""
    if not updates:
        return model
    copied = model.model_copy(update=dict(updates))
    copied.__pydantic_fields_set__ = set(model.model_fields_set)
    return copied


def apply_engine_defaults(scenario: Scenario) -> Scenario:
    """The scenario with every key it leaves unset filled from its engine's defaults for its GPU:
    scheduler kind, token budget, batch cap, block size and chunked prefill (only the keys the
    kind reads: :meth:`Scheduler.engine_updates`), the KV-cache precision for its weights, the GPU
    memory the engine takes. Keys the scenario sets win; one the engine's scheduler does not read
    is an error. Idempotent; the returned scenario still reports only the user's keys as set (see
    :func:`_keeping_fields_set`)."""
    from cbsim.cost.engine_profile import load_engine_profile
    from cbsim.cost.roofline import default_kv_dtype

    cluster = scenario.cluster
    profile = load_engine_profile(cluster.engine)
    defaults = profile.defaults_for(cluster.gpu)
    scheduler_updates = scenario.scheduler.engine_updates(
        defaults.scheduler.values(), cluster.engine
    )
    cluster_updates: dict[str, Any] = {}
    if cluster.kv_dtype is None:
        cluster_updates["kv_dtype"] = default_kv_dtype(profile, cluster.gpu, cluster.dtype)
    if (
        "gpu_memory_utilization" not in cluster.model_fields_set
        and defaults.memory_fraction is not None
    ):
        cluster_updates["gpu_memory_utilization"] = _memory_utilization(
            cluster, defaults.memory_fraction, defaults.memory_basis or "total"
        )
    if not scheduler_updates and not cluster_updates:
        return scenario
    return _keeping_fields_set(
        scenario,
        {
            "scheduler": _keeping_fields_set(scenario.scheduler, scheduler_updates),
            "cluster": _keeping_fields_set(cluster, cluster_updates),
        },
    )


def _memory_utilization(cluster: Cluster, fraction: float, basis: str) -> float:
    """``gpu_memory_utilization`` (a fraction of all GPU memory for weights, activations and KV
    cache) equivalent to an engine taking ``fraction`` of ``basis`` memory: all of it, or what is
    free after weights and activations (TensorRT-LLM's ``free_gpu_memory_fraction``)."""
    if basis == "total":
        return fraction
    from cbsim.hardware import get_gpu
    from cbsim.kvcache import kv_capacity_bytes
    from cbsim.models import get_model

    gpu = get_gpu(cluster.gpu)
    free = kv_capacity_bytes(
        get_model(cluster.model), gpu, cluster.tp, cluster.dtype, 1.0, cluster.dp, cluster.pp
    )
    if free <= 0:
        return 1.0  # the weights do not fit: the feasibility check says so
    used = gpu.memory_bytes - free
    return min(1.0, (used + fraction * free) / gpu.memory_bytes)
