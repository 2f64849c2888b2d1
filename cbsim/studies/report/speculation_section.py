"""The run report's "Speculation vs no speculation" section (``cbsim run --compare-no-spec``).

``--compare-no-spec`` reruns the scenario with speculation off (same seed) and keeps the
baseline's summary (``summary_no_spec.json`` in the run folder, ``Results.no_spec_summary`` in
memory); the terminal prints both side by side. This section puts the same table in the HTML and
Markdown report, with the speed-up per row (> 1 favours speculation: no-spec / spec for latencies,
spec / no-spec for rates) and the decode time saved, defined where it is shown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cbsim.studies.report.document import Section, Table
from cbsim.studies.report.formatting import format_value
from cbsim.studies.report.sources import _read_json

# (label, summary key, kind): kind "latency" (seconds, shown in ms) or a rate's unit
COMPARED: tuple[tuple[str, str, str], ...] = (
    ("TTFT p50 (ms)", "ttft_p50_s", "latency"),
    ("TTFT p99 (ms)", "ttft_p99_s", "latency"),
    ("TPOT mean (ms)", "tpot_mean_s", "latency"),
    ("TPOT p50 (ms)", "tpot_p50_s", "latency"),
    ("TPOT p99 (ms)", "tpot_p99_s", "latency"),
    ("ITL per token p50 (ms)", "itl_p50_s", "latency"),
    ("ITL per chunk p50 (ms)", "itl_chunk_p50_s", "latency"),
    ("ITL per chunk p99 (ms)", "itl_chunk_p99_s", "latency"),
    ("E2E mean (ms)", "e2e_mean_s", "latency"),
    ("E2E p99 (ms)", "e2e_p99_s", "latency"),
    ("throughput (req/s)", "throughput_rps", "rate"),
    ("output tokens/s", "output_tokens_per_s", "rate"),
    ("goodput, SLO met (req/s)", "goodput_rps", "rate"),
)

TIME_SAVED_DEFINITION = (
    "Decode time saved: Σ over finished requests of (finish − first token) without speculation "
    "minus the same sum with it, in seconds of request time (not wall time: requests decode "
    "concurrently, so it can exceed the makespan)."
)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _cell(value: Any, kind: str) -> str:
    number = _finite(value)
    if number is None:
        return "—"
    return f"{number * 1e3:,.4g}" if kind == "latency" else format_value(number)


def speed_up(spec: Any, base: Any, kind: str) -> str:
    """No-spec / spec for latencies, spec / no-spec for rates (> 1 favours speculation)."""
    a, b = _finite(spec), _finite(base)
    if a is None or b is None:
        return "—"
    numerator, denominator = (b, a) if kind == "latency" else (a, b)
    return f"{numerator / denominator:.3f}×" if denominator else "—"


def comparison_rows(summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[list[str]]:
    """One row per compared figure present in either summary: label, spec, no spec, speed-up."""
    rows = []
    for label, key, kind in COMPARED:
        spec, base = summary.get(key), baseline.get(key)
        if spec is None and base is None:
            continue
        rows.append([label, _cell(spec, kind), _cell(base, kind), speed_up(spec, base, kind)])
    saved = _finite(summary.get("time_saved_s"))
    if saved is not None:
        rows.append(["decode time saved (s, see below)", f"{saved:,.1f}", "", ""])
    return rows


def compare_no_spec_section(
    summary: Mapping[str, Any], baseline: Mapping[str, Any] | None
) -> Section | None:
    """The section, or None for a run without a no-speculation baseline."""
    if not baseline:
        return None
    table = Table(
        ["figure", "speculative", "no speculation", "speed-up"],
        comparison_rows(summary, baseline),
        caption=(
            "The same scenario and seed with speculation off (cbsim run --compare-no-spec). "
            "Speed-up > 1 favours speculation. " + TIME_SAVED_DEFINITION
        ),
    )
    return Section("Speculation vs no speculation", [table])


def read_no_spec_summary(run_dir: Path) -> dict[str, Any] | None:
    """``summary_no_spec.json`` of a run folder (None when the run was not compared)."""
    path = run_dir / "summary_no_spec.json"
    if not path.is_file():
        return None
    data = _read_json(path)
    if not isinstance(data, dict):
        return None
    return {k: (math.nan if v is None else v) for k, v in data.items()}


__all__ = [
    "COMPARED",
    "TIME_SAVED_DEFINITION",
    "compare_no_spec_section",
    "comparison_rows",
    "read_no_spec_summary",
    "speed_up",
]
