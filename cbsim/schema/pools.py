"""Pools: groups of replicas that run with settings of their own.

A plain cluster is one pool: ``cluster.replicas`` copies of one model instance, all alike. Two
kinds of deployment break that. A *disaggregated* cluster (``cluster.disaggregation``) has a
prefill pool, whose instances only compute prompts, and a decode pool, whose instances receive the
prompts' KV caches and produce the output tokens; each pool has its own GPU type, parallel layout,
engine and scheduler settings, and only the decode pool speculates. A *mixed fleet*
(``cluster.pools``) is an aggregated cluster whose replica groups differ, say two H100 replicas
beside one H200 replica, every replica doing both phases.

Every pool is described to the engine by the scenario its replicas would run alone: the cluster's
keys with the pool's over them, the scheduler's keys with the pool's ``scheduler`` over them, the
engine's defaults for the pool's own GPU filled in (:func:`~cbsim.schema.engine_defaults.apply_engine_defaults`).
The plain cluster's pool is the scenario itself, untouched, so a plain run is what it always was.
"""

from __future__ import annotations

from cbsim.schema.pool_scenarios import BUDGET_KEYS, PoolPlanOf, Role, pool_plans_of
from cbsim.schema.scenario import Scenario

# one pool of a cluster: its name, what its replicas do, and the scenario they run
PoolPlan = PoolPlanOf[Scenario]


def pool_plans(scenario: Scenario) -> list[PoolPlan]:
    """The pools of ``scenario``'s cluster, prefill before decode, in the order given."""
    return pool_plans_of(scenario)


__all__ = ["BUDGET_KEYS", "PoolPlan", "PoolPlanOf", "Role", "pool_plans"]
