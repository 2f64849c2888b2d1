"""Engine defaults: the keys a scenario leaves unset, filled from its serving engine's profile
for its GPU (scheduler kind and budgets, KV-cache precision). The GPU memory the engine takes is
its memory rule's (:mod:`cbsim.cost.engine_memory`), applied where the replica is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from cbsim.schema.scenario_parts import ScenarioParts, ScenarioT, SectionCopy

ModelT = TypeVar("ModelT", bound=SectionCopy)


def _keeping_fields_set(model: ModelT, updates: Mapping[str, Any]) -> ModelT:
    """A copy with ``updates`` applied that still reports only the user's keys as set, so a dump
    with ``exclude_unset`` (what sweeps and capacity searches vary) leaves resolved defaults out."""
    if not updates:
        return model
    copied = model.model_copy(update=dict(updates))
    copied.__pydantic_fields_set__ = set(model.model_fields_set)
    return copied


def apply_engine_defaults(scenario: ScenarioT) -> ScenarioT:
    """The scenario with every key it leaves unset filled from its engine's defaults for its GPU:
    scheduler kind, token budget, batch cap, block size and chunked prefill (only the keys the
    kind reads: :meth:`Scheduler.engine_updates`), the KV-cache precision for its weights. Keys
    the scenario sets win; one the engine's scheduler does not read is an error. Idempotent; the returned scenario still reports only the user's keys as set (see
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
    if not scheduler_updates and not cluster_updates and _memory_flag_set(cluster):
        return scenario
    scheduler = _keeping_fields_set(scenario.scheduler, scheduler_updates)
    resolved = _keeping_fields_set(
        scenario,
        {"scheduler": scheduler, "cluster": _keeping_fields_set(cluster, cluster_updates)},
    )
    if _memory_flag_set(cluster):
        return resolved
    # the engine's own default memory flag for this GPU and layout (SGLang's is a rule of both)
    fraction = _default_memory_flag(resolved, profile)
    if fraction == resolved.cluster.gpu_memory_utilization:
        return resolved
    return _keeping_fields_set(
        resolved,
        {"cluster": _keeping_fields_set(resolved.cluster, {"gpu_memory_utilization": fraction})},
    )


def _memory_flag_set(cluster: Any) -> bool:
    return "gpu_memory_utilization" in cluster.model_fields_set


def _default_memory_flag(scenario: ScenarioParts, profile: Any) -> float:
    """What the engine takes when no memory flag is given (:func:`cbsim.cost.engine_memory.default_fraction`);
    the cluster's own default where its model or GPU is unknown (a later check says so)."""
    from cbsim.common.errors import CbsimError
    from cbsim.cost.engine_memory import default_fraction
    from cbsim.schema.replica_memory import replica_inputs

    try:
        inputs = replica_inputs(scenario)
    except CbsimError:
        return float(scenario.cluster.gpu_memory_utilization)
    return default_fraction(profile.memory, inputs)
