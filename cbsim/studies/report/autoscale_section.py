"""The run report's autoscaling section: what the fleet held and served, and its replicas against
the offered load over the run as a chart (:mod:`cbsim.engine.autoscale`, :mod:`cbsim.outputs.fleet_plot`).

:func:`fleet_fact` is the cluster's fleet in one line — the replicas serving on average and at
most, never the ``max_replicas`` built — for the report's overview and verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from cbsim.outputs.fleet_plot import replicas_and_load
from cbsim.studies.report.document import Block, Facts, Section
from cbsim.studies.report.formatting import _figure_image, format_value

__all__ = ["autoscale_section", "fleet_fact"]


def _autoscale(scenario: Mapping[str, Any]) -> Mapping[str, Any] | None:
    cluster = scenario.get("cluster") or {}
    autoscale = cluster.get("autoscale") if isinstance(cluster, Mapping) else None
    return autoscale if isinstance(autoscale, Mapping) and autoscale else None


def fleet_fact(summary: Mapping[str, Any], scenario: Mapping[str, Any]) -> str | None:
    """``autoscaled 1–6 replicas: 2.29 serving on average, 6 at most`` (None for a fixed fleet)."""
    autoscale = _autoscale(scenario)
    if autoscale is None:
        return None
    bounds = f"{autoscale.get('min_replicas', 1)}–{autoscale.get('max_replicas')}"
    mean, top = summary.get("replicas_mean"), summary.get("replicas_max")
    if not isinstance(mean, int | float):
        return f"autoscaled {bounds} replicas"
    return f"autoscaled {bounds} replicas: {mean:.2f} serving on average, {top} at most"


def _autoscaler_text(autoscale: Mapping[str, Any]) -> str:
    down = autoscale.get("stabilization_s")
    up = autoscale.get("scale_up_stabilization_s")
    windows = f", scale-down window {format_value(down or 0)} s"
    if up:
        windows += f", scale-up window {format_value(up)} s"
    return (
        f"{autoscale.get('metric')} target {format_value(autoscale.get('target'))}, "
        f"{autoscale.get('min_replicas')} to {autoscale.get('max_replicas')} replicas, "
        f"every {format_value(autoscale.get('interval_s'))} s, cooldown "
        f"{format_value(autoscale.get('cooldown_s'))} s{windows}"
    )


def autoscale_section(
    summary: Mapping[str, Any],
    scenario: Mapping[str, Any],
    timeseries: pd.DataFrame,
    run_info: Mapping[str, Any],
) -> Section | None:
    """GPU-hours, cost, replicas and scale events of an autoscaled run, and the chart of its
    serving replicas against the offered load (None for a fixed fleet)."""
    autoscale = _autoscale(scenario)
    if autoscale is None or "replicas" not in timeseries.columns:
        return None
    facts = [
        ("autoscaler", _autoscaler_text(autoscale)),
        ("replica ready after", f"{format_value(run_info.get('replica_ready_after_s'))} s"),
        ("GPU-hours", format_value(summary.get("gpu_hours"))),
        ("cost", f"{format_value(summary.get('cost_usd'))} USD"),
        (
            "replicas serving (mean / most)",
            f"{format_value(summary.get('replicas_mean'))} / {summary.get('replicas_max')}",
        ),
        ("scale-ups / scale-downs", f"{summary.get('scale_ups')} / {summary.get('scale_downs')}"),
    ]
    blocks: list[Block] = [Facts(facts)]
    if len(timeseries) and {"t_s", "span_s", "arrivals"} <= set(timeseries.columns):
        blocks.append(
            _figure_image(
                replicas_and_load(timeseries),
                "replicas-and-load",
                "Replicas serving and offered load over the run",
                "Replicas serving (time-averaged per timeseries window, left axis) against the "
                "requests arriving per second (right axis).",
            )
        )
    return Section("Autoscaling", blocks)
