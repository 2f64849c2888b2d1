"""The checks a capacity run must pass (stable queue, every SLO metric within its threshold) and the
metrics over seeds; see :mod:`cbsim.studies.capacity` for what they measure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cbsim.common.columns import equals
from cbsim.common.errors import CbsimError
from cbsim.outputs.stability import load_note
from cbsim.schema.scenario import Scenario
from cbsim.schema.suggestions import unknown_metric

if TYPE_CHECKING:
    from cbsim.run.results import Results
    from cbsim.run.simulate import RunTables

QUEUE_DELAY_FLOOR_S = 1.0  # admission delays below this never count as a backlog
SERVED_FRACTION = 0.95
TIMESERIES_WINDOWS = 20  # the check reads quarters of the window: 5 timeseries windows each

#: SLO metrics that must be *at least* their threshold (every other metric: at most).
AT_LEAST_METRICS = frozenset({"slo_attainment", "goodput_ratio"})
METRIC_ALIASES = {"goodput_ratio": "slo_attainment"}


def _slo_from_scenario(scenario: Scenario) -> dict[str, float]:
    slo: dict[str, float] = {}
    for name in ("ttft", "tpot", "e2e"):
        value = getattr(scenario.slo, f"{name}_s")
        if value is not None:
            slo[f"{name}_p99_s"] = float(value)
    return slo


def _direction(metric: str) -> str:
    return "≥" if metric in AT_LEAST_METRICS else "≤"


def _metric_value(summary: Mapping[str, Any], metric: str) -> float:
    key = METRIC_ALIASES.get(metric, metric)
    if key not in summary:
        raise unknown_metric(metric, summary, METRIC_ALIASES)
    value = summary[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CbsimError(f"SLO metric {metric!r} is not a number", field="--slo")
    return float(value)


def _check_run(
    results: Results | RunTables, window: float, slo: Mapping[str, float]
) -> tuple[list[str], dict[str, float | None]]:
    """Why a run fails the capacity checks (empty when it passes) and the figures checked."""
    summary = results.summary
    requests = results.requests
    arrival = np.asarray(requests["arrival_s"], float)
    admitted = ~equals(requests, "status", "rejected")
    # Stability: a stable queue admits late arrivals about as fast as early ones; a backlog that
    # grows makes the admission delay of late arrivals grow with it. (Completion-based checks
    # misread a bursty trace's long outputs as a backlog when the window holds few requests.)
    queue = np.asarray(requests["queue_s"], float)
    queue = np.where(np.isfinite(queue), queue, np.inf)
    with np.errstate(invalid="ignore"):
        early = admitted & (arrival <= window / 2)
        late = admitted & (arrival >= 3 * window / 4) & (arrival <= window)
        lag = float(np.percentile(queue[early], 90)) if early.any() else 0.0
        limit = max(QUEUE_DELAY_FLOOR_S, 3.0 * lag)
        cohort = late
        served_in_time = late & (queue <= limit)
    arrived = int(cohort.sum())
    served = int(served_in_time.sum()) / arrived if arrived else 1.0
    waiting = np.asarray(results.timeseries["waiting"], float)
    quarter = TIMESERIES_WINDOWS // 4
    q2 = float(waiting[quarter : 2 * quarter].mean()) if len(waiting) >= 2 * quarter else 0.0
    q4_values = waiting[3 * quarter : 4 * quarter]
    q4 = float(q4_values.mean()) if len(q4_values) else 0.0
    arrivals_in_window = int(((arrival >= 0) & (arrival <= window)).sum())
    allowance = max(2.0, q2 / 2, 0.01 * arrivals_in_window)
    metrics: dict[str, float | None] = {}
    reasons: list[str] = []
    if served < SERVED_FRACTION:
        reasons.append(_admission_reason(served, arrived, limit, lag))
    if q4 > q2 + allowance:
        reasons.append(f"queue growing: waiting {q2:.1f} → {q4:.1f} requests")
    unfinished = int(summary.get("unfinished", 0))
    if unfinished:
        reasons.append(f"{unfinished} requests still queued at the horizon")
    if reasons and "offered_rps" in summary:  # the load the queue could not keep up with
        reasons.append(load_note(summary))
    for metric, threshold in slo.items():
        value = _metric_value(summary, metric)
        metrics[metric] = value
        if math.isnan(value):
            reasons.append(f"{metric} is undefined")
        elif metric in AT_LEAST_METRICS and value < threshold:
            reasons.append(f"{metric} = {value:.4g} < {threshold:g}")
        elif metric not in AT_LEAST_METRICS and value > threshold:
            reasons.append(f"{metric} = {value:.4g} > {threshold:g}")
    n_requests = int(summary.get("requests", 0))
    metrics.update(
        {
            "served_ratio": served,
            "served_lag_s": lag,  # p90 admission delay of the first half's requests
            "waiting_q2": q2,
            "waiting_q4": q4,
            "window_s": window,
            "requests": float(n_requests),
            "output_tokens_per_request": (
                float(summary.get("output_tokens", 0)) / n_requests if n_requests else None
            ),
            # 1 / TPOT is the output tokens/s each user sees (the report's per-user axis)
            "tpot_mean_s": float(summary.get("tpot_mean_s", math.nan)),
            # served, not offered: the report's tokens/s per GPU axis (steady state: the
            # second half of the window, no warm-up and no drain)
            "output_tokens_per_s": _served_tokens_per_s(results, quarter),
        }
    )
    return reasons, metrics


def _served_tokens_per_s(results: Results | RunTables, quarter: int) -> float:
    """Output tokens/s served over the second half of the window (its timeseries windows
    ``2 quarter .. 4 quarter``): the offered load's tokens when the run keeps up, its capacity
    when it does not. NaN without those windows."""
    if "output_tokens_per_s" not in results.timeseries:
        return math.nan
    served = np.asarray(results.timeseries["output_tokens_per_s"], float)
    half = served[2 * quarter : 4 * quarter]
    return float(half.mean()) if len(half) else math.nan


def _admission_reason(admitted: float, arrived: int, limit_s: float, lag_s: float) -> str:
    """Why the admission-delay check failed, in the terms it measured."""
    basis = (
        f"3 × the first half's p90 admission delay of {lag_s:.3g} s"
        if limit_s > QUEUE_DELAY_FLOOR_S
        else f"the {QUEUE_DELAY_FLOOR_S:g} s floor"
    )
    return (
        f"queue unstable: only {admitted:.1%} of the {arrived} requests arriving in the last "
        f"quarter of the window were admitted within {limit_s:.3g} s ({basis}); "
        f"a stable queue admits at least {SERVED_FRACTION:.0%}"
    )


def _combine(
    runs: list[dict[str, float | None]], slo: Mapping[str, float]
) -> dict[str, float | None]:
    """Metrics over seeds: the worst value for SLO metrics, served ratio and queue growth, the mean
    of the rest."""
    combined: dict[str, float | None] = {}
    for key in runs[0]:
        values = [v for run in runs if (v := run.get(key)) is not None]
        if not values:
            combined[key] = None
        elif any(math.isnan(v) for v in values):
            combined[key] = math.nan
        elif key in AT_LEAST_METRICS or key == "served_ratio":
            combined[key] = min(values)
        elif key in slo or key == "waiting_q4":
            combined[key] = max(values)
        else:
            combined[key] = sum(values) / len(values)
    return combined
