"""Operating points, their Pareto front, their cost, and which one a plan picks.

Every rate a layout's search simulated and passed (the SLO met, the queue stable) is an
*operating point*, described as aiconfigurator describes one:

* **output tokens/s per GPU**: the rate × output tokens per request over the GPUs that serve it
  (a replica's, or an ``xP1D`` unit's at that rate). With a GPU budget (``--total-gpus N``) it is
  the budget's: ``N // GPUs`` copies of the layout serving in parallel, their tokens over ``N``
  (aiconfigurator's ``tokens/s/gpu_cluster``), so a layout that leaves GPUs idle pays for them;
* **output tokens/s per user**: 1 / mean TPOT, how fast one answer streams.

Serving more users per GPU makes each one slower, so the useful points form a *Pareto front*: the
points no other point beats on both axes. Fronts are drawn per GPU kind (one price per GPU-hour
each, so within a kind more tokens/s per GPU is always cheaper).

Cost follows: ``$/hour = GPUs × price per GPU-hour`` (the catalog's list prices,
:attr:`cbsim.catalog.hardware.GPU.price_per_hour`, or ``--price``), and per million tokens
``$/hour / (tokens per hour) × 1e6``, for output tokens alone and for input + output tokens.

The plan picks the point that is cheapest per output token (without a budget) or that serves the
most tokens on the budget (with one), ties going to the faster stream per user: either way the
point with the most tokens/s per GPU of its kind, hence on its kind's front.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from cbsim.studies.capacity.planning import _per_million

SECONDS_PER_HOUR = 3600.0


def per_million(cost_per_hour: float, tokens_per_s: float) -> float | None:
    """USD per million tokens at ``tokens_per_s`` for ``cost_per_hour`` (as ``cbsim capacity``
    prices them)."""
    if not math.isfinite(tokens_per_s):
        return None
    return _per_million(cost_per_hour, tokens_per_s * SECONDS_PER_HOUR)


def operating_point(
    *,
    rate_rps: float,
    gpus: int,
    price_per_gpu_hour: float,
    output_tokens: float,
    prompt_tokens: float,
    tpot_mean_s: float | None,
    budget: int | None,
) -> dict[str, Any]:
    """The figures of one layout serving ``rate_rps`` on ``gpus`` GPUs (one replica or unit)."""
    replicas = 1 if budget is None else budget // gpus
    used = replicas * gpus
    served = replicas * rate_rps
    output_per_s = served * output_tokens
    cost = used * price_per_gpu_hour
    per_gpu = output_per_s / (budget if budget is not None else used) if used else 0.0
    return {
        "rate_rps": rate_rps,
        "gpus": gpus,
        "replicas": replicas,
        "gpus_used": used,
        "fleet_rate_rps": served,
        "output_tokens_per_s": output_per_s,
        "tokens_per_s_per_gpu": per_gpu,
        "tokens_per_s_per_user": 1.0 / tpot_mean_s if tpot_mean_s else None,
        "cost_per_hour": cost,
        "cost_per_million_output_tokens": per_million(cost, output_per_s),
        "cost_per_million_tokens": per_million(cost, served * (prompt_tokens + output_tokens)),
    }


def _dominates(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    ax, ay = a["tokens_per_s_per_gpu"], a["tokens_per_s_per_user"] or 0.0
    bx, by = b["tokens_per_s_per_gpu"], b["tokens_per_s_per_user"] or 0.0
    return ax >= bx and ay >= by and (ax > bx or ay > by)


def mark_fronts(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set ``on_front`` on every point (the front of its GPU kind); return the fronts' points,
    by GPU kind, then by tokens/s per user."""
    for point in points:
        same_kind = [p for p in points if p["gpu"] == point["gpu"]]
        point["on_front"] = not any(_dominates(other, point) for other in same_kind)
    front = [p for p in points if p["on_front"]]
    return sorted(front, key=lambda p: (p["gpu"], p["tokens_per_s_per_user"] or 0.0))


def objective(point: Mapping[str, Any], budget: int | None) -> tuple[float, float]:
    """Sort key, best first: the least cost per output token (or, with a budget, the most
    tokens/s on it), then the fastest stream per user."""
    per_user = point["tokens_per_s_per_user"] or 0.0
    per_gpu = point["tokens_per_s_per_gpu"]
    if budget is not None:
        return (-per_gpu, -per_user)
    if per_gpu <= 0:
        return (math.inf, -per_user)
    return (point["price_per_gpu_hour"] / per_gpu, -per_user)
