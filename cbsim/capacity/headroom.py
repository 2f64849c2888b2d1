"""What a capacity plan's numbers mean for the fleet one buys: the knee, the headroom, the seeds.

The search reports the highest rate one replica passes at (its *knee*): 1 % more load fails,
and on one seed the next seed's arrivals may fail already. A plan read as "buy for the knee" has
no margin. So every plan states:

* that the maximum rate is the knee, and the planning load at :data:`HEADROOM` of it;
* with ``--target-rps``: the fleet's headroom, its replicas × the knee over the target;
* how many seeds each rate passed on, and how to check more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["HEADROOM", "LOW_HEADROOM", "headroom_facts"]

HEADROOM = 0.8
"""Planning load as a share of the knee (``cbsim plan --headroom``'s default too)."""
LOW_HEADROOM = 0.2
"""Fleet headroom below which the plan says to add a replica."""


def _rate(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def headroom_facts(plan: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) lines on the knee, the headroom and the seeds of a capacity plan (its JSON
    object); empty when nothing passed."""
    knee = _rate(plan.get("max_rate_rps"))
    if knee is None or knee <= 0:
        return []
    facts = [
        (
            "knee",
            f"{knee:.4g} req/s per replica is the highest rate that passed: a little more load "
            "fails, so it has no headroom",
        ),
        (
            "planning load",
            f"{HEADROOM * knee:.4g} req/s per replica ({HEADROOM:.0%} of the knee, "
            f"{1 / HEADROOM - 1:.0%} headroom)",
        ),
    ]
    target, replicas = _rate(plan.get("target_rps")), _rate(plan.get("replicas"))
    if target and replicas:
        spare = replicas * knee / target - 1
        text = (
            f"{replicas:.0f} replicas serve up to {replicas * knee:.4g} req/s for a target of "
            f"{target:g}: {spare:.0%} headroom"
        )
        if spare < LOW_HEADROOM:
            text += f" (under {LOW_HEADROOM:.0%}: add a replica for a margin)"
        facts.append(("fleet headroom", text))
    seeds = list(plan.get("seeds") or [])
    if len(seeds) <= 1:
        facts.append(
            (
                "seeds",
                f"every rate checked on one seed ({seeds[0] if seeds else 'the scenario seed'}); "
                "--seeds 1,2,3 checks the knee on other arrivals",
            )
        )
    else:
        facts.append(("seeds", f"every rate passed on all {len(seeds)} seeds ({seeds})"))
    return facts
