"""What a capacity plan's numbers mean for the fleet one buys: the knee, the headroom, the seeds.

The search reports the highest rate one replica passes at (its *knee*): a little more load
fails, and on one seed the next seed's arrivals may fail already. A plan read as "buy for the
knee" has no margin. So every plan is sized at its headroom (each replica at ``headroom`` × its
knee, :data:`~cbsim.studies.capacity.defaults.HEADROOM` by default, as ``cbsim plan`` does) and states,
below its headline (:mod:`cbsim.studies.capacity.headline`):

* the knee, and the simulated window it was found over;
* the planning load, ``headroom`` × the knee;
* with ``--target-rps``: the fleet's margin, its replicas × the knee over the target;
* the seeds the knee was searched on and those the fleet passed on, and how to check more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cbsim.common.numbers import figure
from cbsim.studies.capacity.defaults import HEADROOM

__all__ = ["HEADROOM", "LOW_HEADROOM", "headroom_facts"]

LOW_HEADROOM = 0.2
"""Fleet headroom below which the plan says to add a replica."""


def _rate(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _seeds(seeds: list[Any]) -> str:
    return ",".join(str(s) for s in seeds)


def headroom_facts(plan: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, text) lines on the knee, the headroom and the seeds of a capacity plan (its JSON
    object); empty when nothing passed."""
    knee = _rate(plan.get("max_rate_rps"))
    if knee is None or knee <= 0:
        return []
    share = _rate(plan.get("headroom")) or HEADROOM
    window = _rate(plan.get("window_s"))
    over = f" over {figure(window)} s of arrivals" if window else ""
    facts = [
        (
            "knee",
            f"{figure(knee)} req/s per replica is the highest rate that passed{over}: a little "
            "more load fails, so it has no headroom",
        ),
        (
            "planning load",
            f"{figure(share * knee)} req/s per replica ({share:.0%} of the knee, "
            f"{1 / share - 1:.0%} headroom)",
        ),
    ]
    target, replicas = _rate(plan.get("target_rps")), _rate(plan.get("replicas"))
    if target and replicas:
        spare = replicas * knee / target - 1
        text = (
            f"{replicas:.0f} replicas serve up to {figure(replicas * knee)} req/s for a target of "
            f"{figure(target)}: {spare:.0%} headroom"
        )
        if spare < LOW_HEADROOM:
            text += f" (under {LOW_HEADROOM:.0%}: add a replica for a margin)"
        facts.append(("fleet headroom", text))
    seeds = list(plan.get("seeds") or [])
    if len(seeds) <= 1:
        text = (
            f"the knee searched on one seed ({seeds[0] if seeds else 'the scenario seed'}); "
            "--seeds 1,2,3 checks every rate on other arrivals"
        )
    else:
        text = f"every rate passed on all {len(seeds)} seeds ({seeds})"
    fleet_seeds = list(plan.get("fleet_seeds") or [])
    if target and replicas and fleet_seeds and fleet_seeds != seeds:
        text += f"; the fleet passed at the target on seeds {_seeds(fleet_seeds)}"
    facts.append(("seeds", text))
    return facts
