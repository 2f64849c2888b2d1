"""Pools: groups of replicas that run with settings of their own.

Pool planning is part of the scenario schema (a scenario's resolved form writes each pool as its
replicas run it), so it lives in :mod:`cbsim.schema.pools`; this module re-exports it for code
written against the old path. New code imports :mod:`cbsim.schema.pools`.
"""

from __future__ import annotations

from cbsim.schema.pools import BUDGET_KEYS, PoolPlan, Role, pool_plans

__all__ = ["BUDGET_KEYS", "PoolPlan", "Role", "pool_plans"]
