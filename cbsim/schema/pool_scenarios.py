"""The scenario each pool of a cluster runs (:mod:`cbsim.schema.pools` describes pools), for any
scenario-like model (:class:`~cbsim.schema.scenario_parts.ScenarioParts`), so that the scenario,
which writes its pools out with them, can sit above this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal

from pydantic import ValidationError

from cbsim.common.errors import CbsimError
from cbsim.schema.cluster import Cluster, Pool
from cbsim.schema.engine_defaults import apply_engine_defaults
from cbsim.schema.problems import validation_problem
from cbsim.schema.scenario_parts import ScenarioT
from cbsim.schema.scheduler import Scheduler

Role = Literal["prefill", "decode", "both"]


# no slots: a generic alias (cbsim.schema.pools.PoolPlan) sets __orig_class__ when it constructs one
@dataclass(frozen=True)
class PoolPlanOf(Generic[ScenarioT]):
    """One pool of a cluster: its name, what its replicas do, and the scenario they run."""

    name: str
    role: Role
    field: str  # where the pool is set, for messages ("cluster" for a plain cluster)
    scenario: ScenarioT

    @property
    def replicas(self) -> int:
        return self.scenario.cluster.replicas

    @property
    def gpus(self) -> int:
        cluster = self.scenario.cluster
        return cluster.replicas * cluster.gpus_per_replica


def pool_plans_of(scenario: ScenarioT) -> list[PoolPlanOf[ScenarioT]]:
    """The pools of ``scenario``'s cluster, prefill before decode, in the order given."""
    cluster = scenario.cluster
    if cluster.disaggregation is not None:
        split = cluster.disaggregation
        field = "cluster.disaggregation"
        return [
            _plan(scenario, split.prefill, "prefill", "prefill", f"{field}.prefill"),
            _plan(scenario, split.decode, "decode", "decode", f"{field}.decode"),
        ]
    if cluster.pools is not None:
        return [
            _plan(scenario, pool, f"pool {i}", "both", f"cluster.pools[{i}]")
            for i, pool in enumerate(cluster.pools)
        ]
    return [PoolPlanOf("all", "both", "cluster", scenario)]


def _plan(
    scenario: ScenarioT, pool: Pool, name: str, role: Role, field: str
) -> PoolPlanOf[ScenarioT]:
    """The scenario a pool's replicas run: the cluster's and scheduler's keys the user set, the
    pool's over them, then the engine's defaults for the pool's GPU."""
    cluster_keys = scenario.cluster.model_dump(
        exclude_unset=True, exclude={"disaggregation", "pools", "replicas"}
    )
    cluster_keys.update(pool.cluster_keys())
    scheduler_keys = _scheduler_keys(scenario.scheduler.model_dump(exclude_unset=True), pool)
    try:
        cluster = Cluster.model_validate(cluster_keys)
    except ValidationError as err:
        raise validation_problem(err).located(field=field) from None
    try:
        scheduler = Scheduler.model_validate(scheduler_keys)
    except ValidationError as err:
        raise validation_problem(err).located(field=f"{field}.scheduler") from None
    if role == "decode" and scheduler.kind == "static":
        raise CbsimError(
            "a static batch runs until all its requests finish, so a decode instance could never "
            "take in a prefilled request while one runs; use orca, prefill_first or sarathi",
            field=f"{field}.scheduler.kind",
        )
    update: dict[str, object] = {"cluster": cluster, "scheduler": scheduler}
    if role == "prefill" and scenario.speculative.enabled:
        update["speculative"] = scenario.speculative.model_copy(update={"enabled": False})
    pool_scenario = scenario.model_copy(update=update)
    try:
        return PoolPlanOf(name, role, field, apply_engine_defaults(pool_scenario))
    except CbsimError as err:
        raise err.located(field=field) from None


BUDGET_KEYS = frozenset({"max_batched_tokens", "chunk_size"})


def _scheduler_keys(inherited: dict[str, Any], pool: Pool) -> dict[str, Any]:
    """A pool's scheduler keys: the scenario's (``inherited``, the user's) with the pool's over
    them. A pool that names its own ``kind`` takes only the inherited keys that kind reads (the
    others configure the scenario's scheduler, not this one), and a pool that sets a token budget
    (``max_batched_tokens`` or its sarathi name ``chunk_size``) replaces the inherited one. The
    pool's own keys must all be read by its kind (:class:`~cbsim.schema.scheduler.Scheduler`)."""
    own = pool.scheduler or {}
    kind = own.get("kind")
    kind = Scheduler.canonical_kind(kind) if isinstance(kind, str) else kind
    used = Scheduler.USED_KEYS.get(kind) if isinstance(kind, str) else None
    if used is not None:
        inherited = {k: v for k, v in inherited.items() if k == "kind" or k in used}
    if own.keys() & BUDGET_KEYS:
        inherited = {k: v for k, v in inherited.items() if k not in BUDGET_KEYS}
    return {**inherited, **own}
