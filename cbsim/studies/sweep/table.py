"""The table ``cbsim sweep`` prints of its points: what each point varied, whether its queue was
stable, its throughput, its latency p99s in ms and its SLO verdict (never "met" when unstable).

Before this a sweep printed only ``5 succeeded``: the user had to open ``sweep.parquet`` to learn
that the last two concurrency points were past the knee.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from rich.table import Table

from cbsim.outputs.stability import slo_verdict

__all__ = ["LATENCY_COLUMNS", "override_columns", "points_table", "row_verdict", "slo_targets"]

#: (summary key, header) of the latencies shown, in ms.
LATENCY_COLUMNS = (
    ("ttft_p99_s", "TTFT p99 ms"),
    ("tpot_p99_s", "TPOT p99 ms"),
    ("itl_p99_s", "ITL p99 ms"),
    ("e2e_p99_s", "E2E p99 ms"),
)


def override_columns(frame: pd.DataFrame) -> list[str]:
    """The override columns of a sweep table: those before ``seed``."""
    columns = [str(c) for c in frame.columns]
    return columns[: columns.index("seed")] if "seed" in columns else []


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _cell(value: Any, spec: str, scale: float = 1.0) -> str:
    number = _number(value)
    return "—" if number is None else f"{number * scale:{spec}}"


def slo_targets(point_dir: Path) -> dict[str, float]:
    """``{ttft_p99_s: target, ...}`` from a point's ``scenario.yaml`` (empty when unreadable)."""
    try:
        data = yaml.safe_load((point_dir / "scenario.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    slo = data.get("slo") if isinstance(data, dict) else None
    if not isinstance(slo, dict):
        return {}
    return {
        f"{name}_p99_s": float(value)
        for name in ("ttft", "tpot", "e2e")
        if (value := _number(slo.get(f"{name}_s"))) is not None
    }


def row_verdict(row: Mapping[Any, Any], targets: Mapping[str, float]) -> str:
    """Whether a point met every target at p99: ``met``, ``missed`` or ``not met (unstable:
    ...)``; empty without targets."""
    if not targets:
        return ""
    met = all(
        (value := _number(row.get(metric))) is not None and value <= target
        for metric, target in targets.items()
    )
    return slo_verdict(met, row)


def _stable(row: Mapping[Any, Any]) -> str:
    value = row.get("stable")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return "yes" if bool(value) else "NO"


def points_table(
    frame: pd.DataFrame, directory: Path | None = None, title: str = "sweep points"
) -> Table:
    """One row per point and seed: overrides, seed, stable, throughput, p99s (ms), SLO."""
    overrides = override_columns(frame)
    latencies = [(k, h) for k, h in LATENCY_COLUMNS if k in frame.columns]
    table = Table(title=title)
    for column in overrides:
        table.add_column(column.rsplit(".", 1)[-1] if len(overrides) > 1 else column)
    headers: Sequence[str] = ["seed", "stable", "req/s", "out tok/s", *(h for _, h in latencies)]
    for header in headers:
        table.add_column(header, justify="right")
    table.add_column("SLO (p99)")
    for row in frame.to_dict("records"):
        key = row.get("key")
        targets = slo_targets(directory / "points" / str(key)) if directory and key else {}
        verdict = row_verdict(row, targets)
        styled = f"[green]{verdict}[/green]" if verdict == "met" else f"[red]{verdict}[/red]"
        table.add_row(
            *(str(row.get(c)) for c in overrides),
            str(row.get("seed", "")),
            _stable(row),
            _cell(row.get("throughput_rps"), ".3f"),
            _cell(row.get("output_tokens_per_s"), ",.0f"),
            *(_cell(row.get(k), ",.1f", 1e3) for k, _ in latencies),
            styled if verdict else "—",
        )
    return table
