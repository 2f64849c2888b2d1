"""The pool names of the contract keep working after the schema's pools became generic
(issue 40): ``PoolPlan`` is still constructible and is what ``pool_plans`` returns."""

from __future__ import annotations

from cbsim.schema.pools import PoolPlan, PoolPlanOf
from cbsim.schema.pools import PoolPlan as OldPathPoolPlan


def test_pool_plan_is_still_constructible_from_both_paths() -> None:
    for cls in (PoolPlan, OldPathPoolPlan):
        plan = cls("all", "both", "cluster", None)  # type: ignore[arg-type]
        assert isinstance(plan, PoolPlanOf)
        assert (plan.name, plan.role, plan.field) == ("all", "both", "cluster")
