"""The run report's autoscaling section: what the fleet held and served, and its replicas over
time (:mod:`cbsim.autoscale`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from cbsim.report.document import Facts, Section, Table
from cbsim.report.formatting import format_value

ROWS = 24
"""At most this many rows of replicas over time: the timeseries windows merged into periods."""


def autoscale_section(
    summary: Mapping[str, Any],
    scenario: Mapping[str, Any],
    timeseries: pd.DataFrame,
    run_info: Mapping[str, Any],
) -> Section | None:
    """GPU-hours, cost, replicas and scale events of an autoscaled run, and the serving replicas
    and arrivals per period of the run (None for a fixed fleet)."""
    autoscale = (scenario.get("cluster") or {}).get("autoscale")
    if not autoscale or "replicas" not in timeseries.columns:
        return None
    facts = [
        (
            "autoscaler",
            f"{autoscale.get('metric')} target {format_value(autoscale.get('target'))}, "
            f"{autoscale.get('min_replicas')} to {autoscale.get('max_replicas')} replicas, "
            f"every {format_value(autoscale.get('interval_s'))} s, cooldown "
            f"{format_value(autoscale.get('cooldown_s'))} s",
        ),
        ("replica ready after", f"{format_value(run_info.get('replica_ready_after_s'))} s"),
        ("GPU-hours", format_value(summary.get("gpu_hours"))),
        ("cost", f"{format_value(summary.get('cost_usd'))} USD"),
        (
            "replicas serving (mean / most)",
            f"{format_value(summary.get('replicas_mean'))} / {summary.get('replicas_max')}",
        ),
        ("scale-ups / scale-downs", f"{summary.get('scale_ups')} / {summary.get('scale_downs')}"),
    ]
    return Section("Autoscaling", [Facts(facts), _over_time(timeseries)])


def _over_time(timeseries: pd.DataFrame) -> Table:
    """Serving replicas (time-averaged) and arrivals per period, at most :data:`ROWS` rows."""
    windows = len(timeseries)
    per = max(1, math.ceil(windows / ROWS))
    t = timeseries["t_s"].to_numpy(dtype=float)
    span = timeseries["span_s"].to_numpy(dtype=float)
    replicas = timeseries["replicas"].to_numpy(dtype=float)
    arrivals = timeseries["arrivals"].to_numpy(dtype=float)
    rows = []
    for first in range(0, windows, per):
        part = slice(first, first + per)
        seconds = float(span[part].sum())
        mean = float(np.sum(replicas[part] * span[part]) / seconds) if seconds > 0 else math.nan
        rows.append(
            [
                format_value(float(t[first])),
                format_value(mean),
                format_value(float(arrivals[part].sum() / seconds) if seconds > 0 else math.nan),
            ]
        )
    return Table(
        ["from (s)", "replicas serving", "arrivals (req/s)"],
        rows,
        caption="Replicas serving, averaged over each period, against the offered load.",
    )
