"""Printing a :func:`~cbsim.studies.capacity.planning.plan` result as a rich table with the verdict below
it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cbsim.common.numbers import figure
from cbsim.outputs.metric_names import slo_text
from cbsim.studies.capacity.headroom import headroom_facts
from cbsim.studies.capacity.planning import _describe_overrides

if TYPE_CHECKING:
    from rich.console import Console


def _money(value: Any, spec: str = ",.2f") -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return f"${value:{spec}}"
    return "—"


def _number(value: Any, spec: str = "") -> str:
    """A number in the one format of :func:`cbsim.common.numbers.figure` (``spec`` ``d``: a count)."""
    if spec == "d" and isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,d}"
    return figure(value)


def _ms(seconds: Any) -> str:
    """A latency in seconds shown in ms, as every serving tool shows it."""
    if isinstance(seconds, int | float) and not isinstance(seconds, bool):
        return figure(seconds * 1e3)
    return "—"


def _status(alt: Mapping[str, Any]) -> str:
    if alt.get("error"):
        return "invalid"
    if not alt.get("feasible"):
        return "fails SLO"
    return "ok"


def render(result: Mapping[str, Any], console: Console) -> None:
    """Print a :func:`plan` result: the headline to buy on, the table, the knee and margin."""
    from rich.markup import escape
    from rich.table import Table  # imported when printing: a --json run never does

    headline = result.get("headline")
    if headline:
        console.print(f"[bold]{escape(str(headline))}[/bold]", highlight=False)
    slo = slo_text(result["slo"], result.get("slo_directions"))
    seeds = ",".join(str(s) for s in result["seeds"])
    console.print(
        f"SLO: {slo} · seeds {seeds} · window {figure(result['window_s'])} s",
        highlight=False,
        markup=False,
    )
    varied = "alternatives" in result
    alternatives = result["alternatives"] if varied else [result]
    keys = list(result.get("vary") or {}) if varied else []
    target = result.get("target_rps")
    title = "capacity" + (f" for {figure(target)} req/s" if target else " of one replica")
    table = Table(title=title)
    for key in keys:
        table.add_column(key)
    if not keys:
        table.add_column("scenario")
    table.add_column("knee req/s per replica", justify="right")
    table.add_column("planned req/s per replica", justify="right")
    table.add_column("simulations", justify="right")
    if target:
        table.add_column("replicas", justify="right")
        table.add_column("GPUs", justify="right")
        table.add_column("$/hour", justify="right")
    else:
        table.add_column("$/hour per replica", justify="right")
    table.add_column("$/M output tokens", justify="right")
    table.add_column("status")
    best_index = result.get("best_index") if varied else None
    notes: list[str] = []
    for i, alt in enumerate(alternatives):
        overrides = alt.get("overrides") or {}
        names = [str(overrides.get(k)) for k in keys] or [str(alt.get("scenario", "scenario"))]
        status = _status(alt)
        if best_index is not None and i == best_index:
            status = "[bold]best[/bold]"
        if status in ("invalid", "fails SLO") or (alt.get("feasible") and alt.get("reason")):
            label = _describe_overrides(overrides) if keys else str(alt.get("scenario"))
            notes.append(f"{label}: {alt.get('reason')}")
        row = [
            *names,
            _number(alt.get("max_rate_rps")),
            _number(alt.get("planning_rate_rps")),
            _number(alt.get("simulations"), "d"),
        ]
        if target:
            row += [
                _number(alt.get("replicas"), "d"),
                _number(alt.get("gpus"), "d"),
                _money(alt.get("cost_per_hour")),
            ]
        else:
            row.append(_money(alt.get("replica_cost_per_hour")))
        row += [_money(alt.get("cost_per_million_output_tokens"), ",.3f"), status]
        table.add_row(*row)
    console.print(table)
    for note in notes:
        console.print(note, highlight=False, markup=False)
    if varied:
        best = result.get("best")
        if best is not None:
            console.print(
                f"best: {_describe_overrides(best['overrides'])} "
                f"({_money(best.get('cost_per_million_output_tokens'), ',.3f')} per million "
                "output tokens)",
                highlight=False,
                markup=False,
            )
        else:
            console.print("no alternative meets the SLO", highlight=False)
    for label, text in headroom_facts(result):
        console.print(f"{label}: {text}", highlight=False, markup=False)
    console.print(f"simulations: {_number(result['simulations'], 'd')}", highlight=False)


def render_disaggregated(result: Mapping[str, Any], console: Console) -> None:
    """Print a disaggregated plan (:func:`~cbsim.studies.capacity.disaggregated.plan_disaggregated`):
    each pool's candidates, every xPyD layout checked at the target, the aggregated fleet, the
    verdict."""
    from rich.table import Table  # imported when printing: a --json run never does

    console.print(
        f"SLO: {slo_text(result['slo'])} · target {figure(result['target_rps'])} req/s",
        highlight=False,
        markup=False,
    )
    for pool in ("prefill", "decode"):
        rates = ", ".join(
            f"{c['gpu']} tp {c['tp']}: {_number(c['max_rate_rps'])} req/s"
            for c in result[f"{pool}_candidates"]
        )
        console.print(f"one {pool} instance sustains: {rates}", highlight=False)
    table = Table(title=f"layouts for {figure(result['target_rps'])} req/s")
    for name, justify in (
        ("layout", "left"), ("GPUs", "right"), ("$/hour", "right"), ("$/M output tokens", "right"),
        ("tok/s per GPU", "right"), ("tok/s per user", "right"), ("TTFT p99 ms", "right"),
        ("TPOT p99 ms", "right"), ("", "left"),
    ):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    rows = [*result["layouts"]]
    aggregated = result.get("aggregated")
    if aggregated and aggregated.get("feasible"):
        rows.append(aggregated)
    best = result.get("best")
    for row in rows:
        metrics = row.get("metrics") or {}
        feasible = row.get("feasible", True)
        mark = "best" if best is not None and row.get("name") == best.get("name") else ""
        table.add_row(
            str(row.get("name")),
            _number(row.get("gpus"), "d"),
            _money(row.get("cost_per_hour")),
            _money(row.get("cost_per_million_output_tokens"), ",.3f"),
            _number(row.get("tokens_per_s_per_gpu")),
            _number(row.get("tokens_per_s_per_user")),
            _ms(metrics.get("ttft_p99_s")),
            _ms(metrics.get("tpot_p99_s")),
            mark if feasible else "fails the SLO",
        )
    console.print(table)
    console.print(result["verdict"], highlight=False)
