"""The one line a planner can buy on, the same from ``cbsim capacity`` and ``cbsim plan``.

With a target load::

    buy 7 × h100-sxm TP1 (7 GPUs), $17.50/h: every SLO met at 100 req/s with 43% headroom

— the fleet that passed at the target on every verification seed, its price, and its headroom:
replicas × knee / target − 1, the load it could still take before a replica reaches its knee.
Without one, what one replica serves at the planning load (headroom × knee) and costs. The knee
and the margin behind the line are printed below it (:func:`cbsim.studies.capacity.headroom.headroom_facts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cbsim.common.numbers import figure, finite

__all__ = ["buy_line", "capacity_headline", "layout_label"]


def layout_label(tp: int = 1, pp: int = 1, dp: int = 1, ep: int = 1) -> str:
    """``TP4``, ``TP2·PP2``, ``TP1·DP8·EP8``: how one replica spreads over its GPUs."""
    parts = [f"TP{tp}"]
    if pp > 1:
        parts.append(f"PP{pp}")
    if dp > 1:
        parts.append(f"DP{dp}")
    if ep > 1:
        parts.append(f"EP{ep}")
    return "·".join(parts)


def _money(value: float) -> str:
    return f"${value:,.2f}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def buy_line(
    *,
    replicas: int,
    unit: str,
    gpus: int,
    cost_per_hour: float,
    target_rps: float | None,
    knee_rps: float,
    planning_rps: float | None = None,
    noun: str = "replica",
) -> str:
    """The headline: ``replicas`` × ``unit`` (``h100-sxm TP1``) on ``gpus`` GPUs at
    ``cost_per_hour``; at ``target_rps`` with its headroom over ``knee_rps`` per replica, or,
    without a target, one replica (``noun``: a disaggregated plan's ``unit``) at
    ``planning_rps``."""
    if target_rps is None:
        planned = planning_rps if planning_rps is not None else knee_rps
        spare = knee_rps / planned - 1 if planned > 0 else 0.0
        return (
            f"one {noun} of {unit} ({_plural(gpus, 'GPU')}), {_money(cost_per_hour)}/h, serves "
            f"{figure(planned)} req/s with every SLO met and {spare:.0%} headroom (knee "
            f"{figure(knee_rps)} req/s); --target-rps sizes a fleet"
        )
    spare = replicas * knee_rps / target_rps - 1
    return (
        f"buy {replicas} × {unit} ({_plural(gpus, 'GPU')}), {_money(cost_per_hour)}/h: every SLO "
        f"met at {figure(target_rps)} req/s with {spare:.0%} headroom"
    )


def _unit(plan: Mapping[str, Any]) -> str:
    label = plan.get("layout")
    if not isinstance(label, str):
        tp = finite(plan.get("tp"))
        label = layout_label(int(tp) if tp else 1)
    return f"{plan.get('gpu')} {label}"


def capacity_headline(plan: Mapping[str, Any]) -> str | None:
    """The headline of a :func:`cbsim.studies.capacity.plan` result (its best alternative when it varied
    some), or None when nothing meets the SLO."""
    knee = finite(plan.get("max_rate_rps"))
    if not plan.get("feasible") or knee is None or knee <= 0:
        return None
    target = finite(plan.get("target_rps"))
    if target is not None:
        replicas, gpus, cost = (finite(plan.get(k)) for k in ("replicas", "gpus", "cost_per_hour"))
        if replicas is None or gpus is None or cost is None:
            return None
        return buy_line(
            replicas=int(replicas), unit=_unit(plan), gpus=int(gpus), cost_per_hour=cost,
            target_rps=target, knee_rps=knee,
        )  # fmt: skip
    per_replica = finite(plan.get("gpus_per_replica")) or finite(plan.get("tp")) or 1.0
    cost = finite(plan.get("replica_cost_per_hour"))
    return buy_line(
        replicas=1, unit=_unit(plan), gpus=int(per_replica),
        cost_per_hour=cost if cost is not None else 0.0, target_rps=None, knee_rps=knee,
        planning_rps=finite(plan.get("planning_rate_rps")),
    )  # fmt: skip
