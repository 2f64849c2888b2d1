"""The report of a sweep: a directory :func:`cbsim.studies.sweep.runner.run_sweep` wrote, or its table in memory."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import yaml

from cbsim.common.errors import CbsimError
from cbsim.common.numbers import finite
from cbsim.run import plots
from cbsim.studies.report.document import Block, Facts, Paragraph, Report, Section, Table, _slug
from cbsim.studies.report.formatting import _figure_image, _slo_in_view, _slo_note, format_value
from cbsim.studies.sweep.table import row_verdict, slo_targets

#: A sweep's latency CDFs are overlaid in one figure when it has at most this many rows.
MAX_OVERLAID_POINTS = 8
#: Summary fields shown in a sweep's table of points (those the sweep has).
SWEEP_FIELDS = (
    "completed",
    "stable",
    "throughput_rps",
    "output_tokens_per_s",
    "goodput_rps",
    "slo_attainment",
    "ttft_p99_s",
    "tpot_p99_s",
    "e2e_p99_s",
    "acceptance_rate",
    "mean_k",
    "preemptions",
)


#: Metrics plotted against load in a sweep (those the sweep has).
SWEEP_LOAD_METRICS = ("ttft_p99_s", "tpot_p99_s", "e2e_p99_s", "output_tokens_per_s")


def _override_columns(frame: pd.DataFrame) -> list[str]:
    """The override columns of a sweep table: those before ``seed``."""
    columns = [str(c) for c in frame.columns]
    return columns[: columns.index("seed")] if "seed" in columns else []


def _varies(series: pd.Series[Any]) -> bool:
    return int(series.astype(str).nunique(dropna=False)) > 1


def _is_numeric(series: pd.Series[Any]) -> bool:
    converted = pd.to_numeric(series, errors="coerce")
    return bool(series.notna().any()) and bool(converted.notna().sum() == series.notna().sum())


def _rate_like(name: str) -> bool:
    """A load axis: a rate, or a closed loop's concurrency (clients in flight)."""
    leaf = name.rsplit(".", 1)[-1].lower()
    return leaf in {"rate", "rate_scale", "rps", "concurrency", "max_concurrency"} or leaf.endswith(
        ("_rate", "_rps", "_concurrency")
    )


def _load_column(frame: pd.DataFrame, candidates: Sequence[str]) -> str | None:
    """The rate-like varying numeric override column (``workload.arrival.rate`` first)."""
    found = [c for c in candidates if _rate_like(c) and _is_numeric(frame[c]) and _varies(frame[c])]
    found.sort(key=lambda c: (c != "workload.arrival.rate", candidates.index(c)))
    return found[0] if found else None


def _sweep_slo(path: Path | None, keys: Sequence[str]) -> dict[str, float]:
    """Per-request SLO targets shared by every point (read from their ``scenario.yaml``)."""
    if path is None:
        return {}
    seen: dict[str, set[float | None]] = {"ttft_s": set(), "tpot_s": set(), "e2e_s": set()}
    for key in keys:
        file = path / "points" / str(key) / "scenario.yaml"
        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            return {}
        slo = data.get("slo") if isinstance(data, dict) else None
        for name, values in seen.items():
            value = slo.get(name) if isinstance(slo, dict) else None
            values.add(finite(value))
    return {
        name: value
        for name, values in seen.items()
        if len(values) == 1 and (value := next(iter(values))) is not None
    }


def _verdict_section(
    frame: pd.DataFrame, verdicts: Sequence[str], x: str | None, varying: Sequence[str]
) -> Section:
    """The sweep's verdict, first on the page: how many points met every SLO target at p99 and
    the highest load that did (per the load column), or why there is no verdict."""
    judged = [v for v in verdicts if v]
    if not len(frame):
        return Section("Verdict", [Facts([("verdict", "no completed points")], tone="bad")])
    if not judged:
        text = "no SLO targets in the points' scenarios (slo: ttft_s, tpot_s, e2e_s)"
        return Section("Verdict", [Facts([("verdict", text)])])
    met = [i for i, v in enumerate(verdicts) if v == "met"]
    facts = [("verdict", f"{len(met)} of {len(judged)} points met every SLO target at p99")]
    unstable = sum(1 for v in judged if v.startswith("not met"))
    if unstable:
        facts.append(("unstable points", f"{unstable} (an unstable point meets no target)"))
    if x is not None and met:
        rows = frame.iloc[met]
        loads = pd.to_numeric(rows[x], errors="coerce").fillna(-math.inf).to_numpy(dtype=float)
        best = rows.iloc[int(np.argmax(loads))]
        others = [c for c in varying if c != x]
        where = f" ({plots.point_label(best.to_dict(), others)})" if others else ""
        facts.append(
            (f"highest {plots.short_keys([x])[x]} meeting it", f"{format_value(best[x])}{where}")
        )
    tone: Literal["good", "bad", "plain"] = (
        "good" if len(met) == len(judged) else "bad" if not met else "plain"
    )
    return Section("Verdict", [Facts(facts, tone=tone)])


def _sweep_report_from_dir(path: Path, title: str | None) -> Report:
    table = path / "sweep.parquet"
    try:
        frame = pd.read_parquet(table)
    except (OSError, ValueError) as err:
        raise CbsimError(f"cannot read: {err}", source=str(table)) from None
    return sweep_report(frame, title=title, source=str(path), directory=path, name=path.name)


def _point_label(row: Mapping[Any, Any], columns: Sequence[str], with_seed: bool) -> str:
    parts = [plots.point_label(row, columns)] if columns else []
    if with_seed:
        parts.append(f"seed={row['seed']}")
    return ", ".join(parts) or str(row.get("key"))


def sweep_report(
    frame: pd.DataFrame,
    *,
    title: str | None = None,
    source: str = "(in memory)",
    directory: str | Path | None = None,
    name: str | None = None,
) -> Report:
    """The report of a sweep table (``sweep.parquet``); ``directory`` (the sweep directory) adds
    the per-point SLO targets and the overlaid latency CDFs, read from ``points/<key>/``."""
    sweep_dir = Path(directory) if directory is not None else None
    label = name or (sweep_dir.name if sweep_dir is not None else "sweep")
    report = Report(title=title or f"cbsim sweep: {label}", kind="sweep", source=source)
    overrides = _override_columns(frame)
    varying = [c for c in overrides if _varies(frame[c])]
    fixed = [c for c in overrides if c not in varying] if len(frame) else []
    seeds = sorted({int(s) for s in frame["seed"]}) if "seed" in frame.columns else []
    keys = [str(k) for k in frame["key"]] if "key" in frame.columns else []
    facts: list[tuple[str, str]] = [
        ("rows", f"{len(frame)} (point × seed)"),
        ("distinct scenarios", str(len(set(keys))) if keys else "—"),
        ("seeds", ", ".join(str(s) for s in seeds) or "—"),
    ]
    for column in varying:
        values = list(dict.fromkeys(format_value(v) for v in frame[column]))
        facts.append((f"varies: {column}", ", ".join(values)))
    for column in fixed:
        facts.append((f"fixed: {column}", format_value(frame[column].iloc[0])))
    verdicts: list[str] = []
    if sweep_dir is not None and "key" in frame.columns:
        verdicts = [
            row_verdict(row, slo_targets(sweep_dir / "points" / str(row["key"])))
            for row in frame.to_dict("records")
        ]
    x = _load_column(frame, varying)
    report.sections.append(_verdict_section(frame, verdicts, x, varying))
    report.sections.append(Section("Overview", [Facts(facts)]))

    shown = [c for c in SWEEP_FIELDS if c in frame.columns]
    for optional in ("acceptance_rate", "mean_k"):
        if optional in shown:
            numbers = pd.to_numeric(frame[optional], errors="coerce")
            if not bool((numbers.fillna(0) > 0).any()):
                shown.remove(optional)
    # one seed: named in the overview, not in a column of its own (a narrower table)
    columns = [*overrides, *(["seed"] if len(seeds) > 1 else [])]
    columns += [*(["key"] if "key" in frame.columns else []), *shown]
    rows = [[format_value(row[c]) for c in columns] for row in frame.to_dict("records")]
    if verdicts:  # never "met" when unstable
        columns.append("SLO (p99)")
        for cells, verdict in zip(rows, verdicts, strict=True):
            cells.append(verdict or "—")
    report.sections.append(
        Section(
            "Points",
            [
                Table(
                    columns,
                    rows,
                    caption="One row per point and seed; key names the point's result "
                    "directory points/<key>/.",
                )
                if rows
                else Paragraph("The sweep has no completed points.", note=True)
            ],
        )
    )
    if not len(frame):
        return report

    slo = _sweep_slo(sweep_dir, keys)
    load_blocks: list[Block] = []
    if x is None:
        load_blocks.append(
            Paragraph(
                "No rate-like override column (such as workload.arrival.rate or "
                "workload.arrival.concurrency) varies in this sweep, so there is no "
                "latency-vs-load figure.",
                note=True,
            )
        )
    else:
        others = [c for c in varying if c != x]
        data = frame.copy()
        hue: str | None = None
        if len(others) == 1:
            hue = others[0]
        elif others:
            hue = ", ".join(plots.short_keys(others).values())
            data[hue] = [plots.point_label(row, others) for row in frame.to_dict("records")]
        for metric in SWEEP_LOAD_METRICS:
            if metric not in data.columns:
                continue
            target = slo.get(metric.split("_")[0] + "_s") if metric.endswith("_s") else None
            drawn = _slo_in_view(target, data[metric])
            fig = plots.latency_vs_load(
                data,
                x=x,
                y=metric,
                hue=hue,
                slo=target if drawn else None,
                hue_is_label=len(others) > 1,
            )
            lines = f"one line per {hue}" if hue else "one line"
            load_blocks.append(
                _figure_image(
                    fig,
                    f"load-{_slug(metric)}",
                    f"{plots.label_for(metric)} against {x}",
                    f"Mean over seeds, band from min to max; {lines}"
                    + _slo_note(f"per request {metric.split('_')[0]} ≤", target, drawn)
                    + ".",
                )
            )
    report.sections.append(Section("Latency vs load", load_blocks))

    if sweep_dir is not None and 1 < len(frame) <= MAX_OVERLAID_POINTS and keys:
        runs: list[tuple[str, pd.DataFrame]] = []
        for row in frame.to_dict("records"):
            file = sweep_dir / "points" / str(row["key"]) / "requests.parquet"
            if not file.is_file():
                runs = []
                break
            runs.append((_point_label(row, varying, len(seeds) > 1), pd.read_parquet(file)))
        if runs:
            fig = plots.latency_cdfs(runs, slo=slo)
            report.sections.append(
                Section(
                    "Latency distributions",
                    [
                        _figure_image(
                            fig,
                            "point-latency-cdfs",
                            "Latency CDFs of every point",
                            "Empirical CDFs of finished requests, one line per point.",
                        )
                    ],
                )
            )
    return report
