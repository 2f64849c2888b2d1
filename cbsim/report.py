"""Reports: one self-contained HTML page (or Markdown for pasting) from a run, a sweep or a plan.

``cbsim report SOURCE --out report.html [--format html|md] [--title T]`` reads one of three kinds
of cbsim output, detected from what ``SOURCE`` holds:

* **run** — a result directory written by :meth:`cbsim.results.Results.write` (it holds
  ``summary.json``): an overview of the scenario, the summary as tables (headline figures and a
  latency percentile table), the throughput/queue, latency CDF and batch/KV/k figures, the
  per-request acceptance figure when the run speculated, the scenario YAML and every summary field.
* **sweep** — a sweep directory written by :func:`cbsim.sweep.run_sweep` (it holds
  ``sweep.parquet``): the points as a table (override columns, seed, key and the key summary
  fields), latency (and output throughput) against load when a rate-like override column varies,
  one line per value of the other varying columns, and the latency CDFs of all points overlaid when
  there are at most :data:`MAX_OVERLAID_POINTS` of them.
* **capacity** — the JSON object of :func:`cbsim.capacity.plan` (``cbsim capacity --json >
  plan.json``), given as the file or as a directory holding ``capacity.json`` or ``plan.json``:
  the recommendation (best alternative, replicas, GPUs, cost per hour and per million output
  tokens, the SLO), a table of alternatives with the SLO metrics each achieved, the cost-vs-latency
  Pareto frontier per SLO metric and latency against offered load from the search's evaluations
  (failed rates marked, the SLO as a line), and the fleet verification runs.

HTML embeds every figure as a base64 PNG ``data:`` URI and its CSS inline: the file makes no
request to anything outside itself, so it can be mailed or attached as is. Markdown writes the
figures as PNG files beside the ``.md`` file (``<stem>-<figure>.png``) and references them
relatively. Files are written atomically (a temporary file beside the target, then a rename), and
an existing file is overwritten only when cbsim wrote it: a report (its generator line), or a figure
the Markdown report being replaced refers to (see :mod:`cbsim.outputs`).

The pieces are usable from Python: :func:`build_report` (or :func:`run_report`,
:func:`sweep_report`, :func:`capacity_report` for objects in memory) gives a :class:`Report`,
:func:`render_html` / :func:`render_markdown` turn it into text and :func:`write_report` does
everything. :data:`report_command` is the click command (``cbsim report``). A path that does not
exist, or is not one of the three kinds, raises :class:`~cbsim.errors.CbsimError` naming it.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import math
import re
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, unquote

import click
import numpy as np
import pandas as pd
import yaml

from cbsim import outputs, plots
from cbsim.errors import CbsimError, UserError
from cbsim.results import RUN_RESULT, Results

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CAPACITY_FILES",
    "MAX_OVERLAID_POINTS",
    "Code",
    "Facts",
    "Image",
    "Paragraph",
    "Report",
    "ReportKind",
    "Section",
    "Table",
    "build_report",
    "capacity_report",
    "detect",
    "format_value",
    "render_html",
    "render_markdown",
    "report_command",
    "run_report",
    "sweep_report",
    "write_report",
]

ReportKind = Literal["run", "sweep", "capacity"]
Format = Literal["html", "md"]
FORMATS: tuple[str, ...] = ("html", "md")

#: Files a directory may hold the capacity JSON in (the first one present is used).
CAPACITY_FILES = ("capacity.json", "plan.json")
#: A sweep's latency CDFs are overlaid in one figure when it has at most this many rows.
MAX_OVERLAID_POINTS = 8
#: Summary fields shown in a sweep's table of points (those the sweep has).
SWEEP_FIELDS = (
    "completed",
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
#: An SLO line is drawn only within this factor of the plotted values (else it squashes them).
SLO_VIEW_FACTOR = 3.0
#: Metrics plotted against load in a sweep (those the sweep has).
SWEEP_LOAD_METRICS = ("ttft_p99_s", "tpot_p99_s", "e2e_p99_s", "output_tokens_per_s")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- the document


@dataclass
class Paragraph:
    """Plain text (escaped when rendered); ``note`` renders it muted."""

    text: str
    note: bool = False


@dataclass
class Facts:
    """Label/value pairs; ``tone`` ``"good"`` or ``"bad"`` renders them as a highlighted callout."""

    items: list[tuple[str, str]]
    tone: Literal["plain", "good", "bad"] = "plain"


@dataclass
class Table:
    """A table of already formatted cells; ``highlight`` marks row indices (e.g. the best)."""

    columns: list[str]
    rows: list[list[str]]
    caption: str | None = None
    highlight: set[int] = field(default_factory=set)


@dataclass
class Code:
    """A preformatted block (a scenario's YAML)."""

    text: str
    language: str = ""


@dataclass
class Image:
    """A PNG figure: ``name`` is a file-name-safe slug, unique within the report."""

    name: str
    png: bytes
    alt: str
    caption: str | None = None

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels, read from the PNG header."""
        if len(self.png) < 24 or not self.png.startswith(_PNG_SIGNATURE):
            raise ValueError(f"figure {self.name!r} is not a PNG")
        width, height = struct.unpack(">II", self.png[16:24])
        return int(width), int(height)


Block = Paragraph | Facts | Table | Code | Image


@dataclass
class Section:
    """A titled part of a report."""

    title: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return _slug(self.title)


@dataclass
class Report:
    """A report before rendering: a title, what it was made from, and its sections."""

    title: str
    kind: ReportKind
    source: str
    sections: list[Section] = field(default_factory=list)
    generated: str = field(
        default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    )

    def images(self) -> list[Image]:
        """Every figure, in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, Image)]


# --------------------------------------------------------------------------- formatting


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def format_value(value: Any) -> str:
    """A cell: ``—`` for missing or non-finite numbers, integers as they are, other numbers with
    four significant digits (no exponent from 0.001 to 9999; whole numbers above that)."""
    if value is None:
        return "—"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(int(value))
    number = _finite(value)
    if number is None:
        return "—" if isinstance(value, float | np.floating) else str(value)
    if number.is_integer() and abs(number) < 1e15:
        return f"{number:.0f}"
    if abs(number) >= 1e4:
        return f"{number:.0f}"
    return f"{number:.4g}"


def _money(value: Any, spec: str = ".2f") -> str:
    number = _finite(value)
    return "—" if number is None else f"${number:{spec}}"


def _with_unit(value: Any, unit: str) -> str:
    text = format_value(value)
    return text if text == "—" or not unit else f"{text} {unit}"


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or "section"


def _get(data: Any, dotted: str) -> Any:
    node = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _describe_overrides(overrides: Mapping[str, Any] | None) -> str:
    if not overrides:
        return "scenario as given"
    return ", ".join(f"{k}={v}" for k, v in overrides.items())


def _slo_in_view(threshold: float | None, values: Any) -> bool:
    """Whether a target line at ``threshold`` keeps the data readable: within a factor
    :data:`SLO_VIEW_FACTOR` of the finite values (always, when there are none)."""
    if threshold is None:
        return False
    data = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float)
    data = data[np.isfinite(data)]
    if not len(data):
        return True
    low, high = float(data.min()), float(data.max())
    return low / SLO_VIEW_FACTOR <= threshold <= high * SLO_VIEW_FACTOR


def _slo_note(metric: str, threshold: float | None, drawn: bool) -> str:
    if threshold is None:
        return ""
    if drawn:
        return "; the dashed line is the SLO"
    return (
        f"; the SLO ({metric} {format_value(threshold)}) lies far outside the data and is not drawn"
    )


def _plain_log_ticks(fig: Figure) -> None:
    """Decimal tick labels (0.1, 1, 10) instead of powers of ten on the figure's log axes."""
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda value, _pos: f"{value:g}")
    for axis in fig.axes:
        if axis.get_xscale() == "log":
            axis.xaxis.set_major_formatter(plain)
        if axis.get_yscale() == "log":
            axis.yaxis.set_major_formatter(plain)


def _figure_image(fig: Figure, name: str, alt: str, caption: str | None = None) -> Image:
    """Render a figure to PNG and close it (reports make many; none is shown)."""
    import matplotlib.pyplot as plt

    try:
        png = plots.to_png_bytes(fig)
    finally:
        plt.close(fig)
    return Image(name=name, png=png, alt=alt, caption=caption)


# --------------------------------------------------------------------------- detection


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise CbsimError(f"cannot read: {err}", source=str(path)) from None
    except json.JSONDecodeError as err:
        raise CbsimError(f"not valid JSON: {err}", source=str(path)) from None


def _is_capacity(data: Any) -> bool:
    return (
        isinstance(data, Mapping)
        and "slo" in data
        and "max_rate_rps" in data
        and ("evaluations" in data or "alternatives" in data)
    )


_NOT_RECOGNISED = (
    "not a cbsim result: expected a run directory (summary.json), a sweep directory "
    "(sweep.parquet) or a capacity plan (the JSON of cbsim capacity --json, or a directory "
    f"holding {' or '.join(CAPACITY_FILES)})"
)


def detect(source: str | Path) -> tuple[ReportKind, Path]:
    """What ``source`` is and the path to read it from: a run or sweep directory, or the capacity
    JSON file. ``summary.json`` or ``sweep.parquet`` given as files stand for their directory.

    Raises :class:`CbsimError` naming ``source`` when it is missing or not recognised.
    """
    path = Path(source)
    if not path.exists():  # a run result whose replacement was killed half way is restored
        outputs.recover(path, RUN_RESULT)
    if not path.exists():
        raise CbsimError("no such file or directory", source=str(source))
    if path.is_dir():
        if (path / "summary.json").is_file():
            return "run", path
        if (path / "sweep.parquet").is_file():
            return "sweep", path
        for name in CAPACITY_FILES:
            candidate = path / name
            if candidate.is_file():
                if not _is_capacity(_read_json(candidate)):
                    raise CbsimError(
                        "not a capacity plan (the JSON of cbsim capacity --json)",
                        source=str(candidate),
                    )
                return "capacity", candidate
        raise CbsimError(_NOT_RECOGNISED, source=str(source))
    if path.name == "summary.json":
        return "run", path.parent
    if path.name == "sweep.parquet":
        return "sweep", path.parent
    if path.suffix.lower() == ".json" and _is_capacity(_read_json(path)):
        return "capacity", path
    raise CbsimError(_NOT_RECOGNISED, source=str(source))


def build_report(source: str | Path, *, title: str | None = None) -> Report:
    """The report of whatever ``source`` is (see :func:`detect`)."""
    kind, path = detect(source)
    if kind == "run":
        return _run_report_from_dir(path, title)
    if kind == "sweep":
        return _sweep_report_from_dir(path, title)
    plan = _read_json(path)
    return capacity_report(plan, title=title, source=str(path))


# --------------------------------------------------------------------------- run


@dataclass
class _RunData:
    """What a run report needs, read without requiring the scenario to still validate."""

    summary: dict[str, Any]
    scenario: dict[str, Any]
    scenario_text: str
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    run_info: dict[str, Any]
    results: Results | None  # when the scenario still loads (exact timeseries window, SLO)


def _read_run(path: Path) -> _RunData:
    summary_data = _read_json(path / "summary.json")
    if not isinstance(summary_data, dict):
        raise CbsimError("summary.json does not hold a JSON object", source=str(path))
    summary = {k: (math.nan if v is None else v) for k, v in summary_data.items()}
    scenario_path = path / "scenario.yaml"
    scenario_text = ""
    scenario: dict[str, Any] = {}
    if scenario_path.is_file():
        scenario_text = scenario_path.read_text(encoding="utf-8")
        with contextlib.suppress(yaml.YAMLError):
            loaded = yaml.safe_load(scenario_text)
            if isinstance(loaded, dict):
                scenario = loaded
    frames: dict[str, pd.DataFrame] = {}
    for name in ("requests", "timeseries"):
        file = path / f"{name}.parquet"
        try:
            frames[name] = pd.read_parquet(file)
        except (OSError, ValueError) as err:
            raise CbsimError(f"cannot read {file.name}: {err}", source=str(path)) from None
    run_info_data = _read_json(path / "run_info.json") if (path / "run_info.json").is_file() else {}
    results: Results | None = None
    if scenario_path.is_file():
        from cbsim.scenario import load_scenario

        # the scenario may no longer validate here (a trace moved): plot from the frames then;
        # the iterations (the largest table, unused by the figures) are not read
        with contextlib.suppress(CbsimError, OSError, ValueError):
            results = Results(
                scenario=load_scenario(scenario_path),
                requests=frames["requests"],
                iterations=pd.DataFrame(),
                timeseries=frames["timeseries"],
                summary=summary,
            )
    return _RunData(
        summary=summary,
        scenario=scenario,
        scenario_text=scenario_text,
        requests=frames["requests"],
        timeseries=frames["timeseries"],
        run_info=run_info_data if isinstance(run_info_data, dict) else {},
        results=results,
    )


def _run_report_from_dir(path: Path, title: str | None) -> Report:
    data = _read_run(path)
    return _run_report(data, title=title, source=str(path))


def run_report(
    results: Results, *, title: str | None = None, source: str = "(in memory)"
) -> Report:
    """The report of a :class:`Results` in memory (what ``cbsim report RUN_DIR`` shows)."""
    summary = dict(results.summary)
    scenario = results.scenario.to_dict()
    data = _RunData(
        summary=summary,
        scenario=scenario,
        scenario_text=yaml.safe_dump(scenario, sort_keys=False),
        requests=results.requests,
        timeseries=results.timeseries,
        run_info=dict(results.run_info),
        results=results,
    )
    return _run_report(data, title=title, source=source)


def _scenario_facts(scenario: Mapping[str, Any]) -> list[tuple[str, str]]:
    facts: list[tuple[str, str]] = []
    cluster = scenario.get("cluster") or {}
    if cluster:
        replicas = cluster.get("replicas", 1)
        facts.append(
            (
                "cluster",
                f"{cluster.get('model')} on {cluster.get('gpu')}, tp={cluster.get('tp', 1)}, "
                f"{cluster.get('dtype', 'bf16')}, {replicas} replica{'s' if replicas != 1 else ''}"
                + (f", router {cluster.get('router')}" if replicas != 1 else ""),
            )
        )
    scheduler = scenario.get("scheduler") or {}
    if scheduler:
        facts.append(("scheduler", str(scheduler.get("kind"))))
    workload = scenario.get("workload") or {}
    if workload:
        parts: list[str] = []
        if workload.get("num_requests") is not None:
            parts.append(f"{workload['num_requests']} requests")
        if workload.get("duration_s") is not None:
            parts.append(f"{format_value(workload['duration_s'])} s of arrivals")
        trace = workload.get("trace")
        arrival = workload.get("arrival")
        if isinstance(trace, Mapping):
            parts.append(f"trace {trace.get('path')}")
        elif isinstance(arrival, Mapping):
            rate = arrival.get("rate")
            parts.append(
                f"{arrival.get('kind')} arrivals"
                + (f" at {format_value(rate)} req/s" if rate is not None else "")
            )
        facts.append(("workload", ", ".join(parts) or "—"))
    spec = scenario.get("speculative") or {}
    if spec.get("enabled"):
        facts.append(
            (
                "speculation",
                f"proposer {_get(spec, 'proposer.kind')}, k policy {_get(spec, 'policy.kind')}, "
                f"acceptance {_get(spec, 'acceptance.kind')}",
            )
        )
    elif scenario:
        facts.append(("speculation", "off"))
    slo = scenario.get("slo") or {}
    targets = [
        f"{name} ≤ {format_value(slo[f'{name}_s'])} s"
        for name in ("ttft", "tpot", "e2e")
        if slo.get(f"{name}_s") is not None
    ]
    if targets:
        facts.append(("SLO (per request)", ", ".join(targets)))
    return facts


def _run_report(data: _RunData, *, title: str | None, source: str) -> Report:
    s = data.summary
    name = str(s.get("name") or data.scenario.get("name") or "run")
    seed = s.get("seed", data.scenario.get("seed"))
    report = Report(title=title or f"cbsim run: {name}", kind="run", source=source)

    overview = _scenario_facts(data.scenario)
    overview.insert(0, ("scenario", f"{name} (seed {format_value(seed)})"))
    if data.run_info:
        overview.append(
            (
                "run",
                f"{_with_unit(data.run_info.get('simulated_s'), 's')} simulated in "
                f"{_with_unit(data.run_info.get('wall_s'), 's')} of wall time",
            )
        )
    report.sections.append(Section("Overview", [Facts(overview)]))

    speculated = bool(
        "drafted_tokens" in data.requests.columns
        and float(pd.to_numeric(data.requests["drafted_tokens"]).sum()) > 0
    )
    headline: list[tuple[str, str, str]] = [
        ("requests", format_value(s.get("requests")), ""),
        ("completed", format_value(s.get("completed")), ""),
        ("rejected", format_value(s.get("rejected")), ""),
        ("unfinished", format_value(s.get("unfinished")), ""),
        ("throughput", format_value(s.get("throughput_rps")), "req/s"),
        ("output throughput", format_value(s.get("output_tokens_per_s")), "tokens/s"),
        ("goodput (requests meeting the SLO)", format_value(s.get("goodput_rps")), "req/s"),
        ("SLO attainment", format_value(s.get("slo_attainment")), "fraction"),
        ("preemptions", format_value(s.get("preemptions")), ""),
        ("mean batch size", format_value(s.get("mean_batch_size")), "requests"),
        ("busy fraction", format_value(s.get("busy_fraction")), "fraction"),
        ("makespan", format_value(s.get("makespan_s")), "s"),
    ]
    if speculated:
        headline += [
            (
                "draft acceptance rate (accepted / drafted)",
                format_value(s.get("acceptance_rate")),
                "",
            ),
            ("conditional acceptance α", format_value(s.get("conditional_acceptance")), ""),
            ("tokens per verify step", format_value(s.get("mean_acceptance_length")), "tokens"),
            ("mean draft length k", format_value(s.get("mean_k")), "tokens"),
            ("share of steps speculating", format_value(s.get("spec_step_fraction")), "fraction"),
        ]
    latency_rows = []
    for metric, label in (
        ("ttft", "TTFT"),
        ("tpot", "TPOT"),
        ("e2e", "E2E latency"),
        ("queue", "queueing delay"),
    ):
        cells = [s.get(f"{metric}_{q}_s") for q in ("p50", "p90", "p99", "mean")]
        if any(c is not None for c in cells):
            latency_rows.append([label, *(format_value(c) for c in cells)])
    report.sections.append(
        Section(
            "Summary",
            [
                Table(["metric", "value", "unit"], [list(row) for row in headline]),
                Table(
                    ["latency (s)", "p50", "p90", "p99", "mean"],
                    latency_rows,
                    caption="Latency of finished requests, in seconds.",
                ),
            ],
        )
    )

    source_run: Results | pd.DataFrame
    source_run = data.results if data.results is not None else data.timeseries
    report.sections.append(
        Section(
            "Throughput and queue",
            [
                _figure_image(
                    plots.throughput_and_queue(source_run),
                    "throughput-and-queue",
                    "Output tokens per second and waiting requests over time",
                    "Output throughput (left axis) and time-averaged waiting requests (right axis) "
                    "per timeseries window.",
                )
            ],
        )
    )
    slo = data.scenario.get("slo") or {}
    cdf_source: Results | pd.DataFrame
    cdf_source = data.results if data.results is not None else data.requests
    cdf_slo = (
        None if data.results is not None else {k: slo.get(k) for k in ("ttft_s", "tpot_s", "e2e_s")}
    )
    report.sections.append(
        Section(
            "Latency",
            [
                _figure_image(
                    plots.latency_cdfs(cdf_source, slo=cdf_slo),
                    "latency-cdfs",
                    "Empirical CDFs of TTFT, TPOT and end-to-end latency",
                    "Empirical CDFs of finished requests; dashed lines are the per-request SLO "
                    "targets.",
                )
            ],
        )
    )
    k_words = (" and draft length", " and mean draft length") if speculated else ("", "")
    report.sections.append(
        Section(
            f"Batch, KV cache{k_words[0]}",
            [
                _figure_image(
                    plots.batch_kv_k_over_time(source_run),
                    "batch-kv-k",
                    f"Batch size, KV cache utilisation{k_words[1]} over time",
                )
            ],
        )
    )
    if speculated:
        report.sections.append(
            Section(
                "Speculative decoding",
                [
                    _figure_image(
                        plots.acceptance_per_request(
                            data.results if data.results is not None else data.requests
                        ),
                        "acceptance",
                        "Per-request draft acceptance rate",
                        "Acceptance rate per request (accepted / drafted): histogram and against "
                        "output length; the dashed line is the run's overall rate.",
                    )
                ],
            )
        )
    if data.scenario_text:
        report.sections.append(Section("Scenario", [Code(data.scenario_text.rstrip(), "yaml")]))
    report.sections.append(
        Section(
            "All summary fields",
            [Table(["field", "value"], [[k, format_value(v)] for k, v in s.items()])],
        )
    )
    return report


# --------------------------------------------------------------------------- sweep


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
    leaf = name.rsplit(".", 1)[-1].lower()
    return leaf in {"rate", "rate_scale", "rps"} or leaf.endswith(("_rate", "_rps"))


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
            values.add(_finite(value))
    return {
        name: value
        for name, values in seen.items()
        if len(values) == 1 and (value := next(iter(values))) is not None
    }


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
    report.sections.append(Section("Overview", [Facts(facts)]))

    shown = [c for c in SWEEP_FIELDS if c in frame.columns]
    for optional in ("acceptance_rate", "mean_k"):
        if optional in shown:
            numbers = pd.to_numeric(frame[optional], errors="coerce")
            if not bool((numbers.fillna(0) > 0).any()):
                shown.remove(optional)
    columns = [*overrides, *(["seed"] if "seed" in frame.columns else [])]
    columns += [*(["key"] if "key" in frame.columns else []), *shown]
    rows = [[format_value(row[c]) for c in columns] for row in frame.to_dict("records")]
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
    x = _load_column(frame, varying)
    load_blocks: list[Block] = []
    if x is None:
        load_blocks.append(
            Paragraph(
                "No rate-like override column (such as workload.arrival.rate) varies in this "
                "sweep, so there is no latency-vs-load figure.",
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


# --------------------------------------------------------------------------- capacity


def _alternatives(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The plan's alternatives (the plan itself when nothing was varied)."""
    alternatives = plan.get("alternatives")
    if isinstance(alternatives, list):
        return [a for a in alternatives if isinstance(a, dict)]
    return [dict(plan)]


def _alt_label(alt: Mapping[str, Any], keys: Sequence[str]) -> str:
    """``gpu=h200, tp=4``: the alternative's varied values with short keys (or the scenario)."""
    if keys:
        return plots.point_label(alt.get("overrides") or {}, keys)
    return str(alt.get("scenario") or "scenario")


@dataclass
class _OperatingPoint:
    """Where an alternative's cost was computed: its metrics there, which point it is, the load
    offered there and the GPUs serving it."""

    metrics: dict[str, Any] = field(default_factory=dict)
    basis: str = ""
    rate_rps: float | None = None
    gpus: float | None = None


def _achieved(alt: Mapping[str, Any]) -> _OperatingPoint:
    """The operating point the alternative's cost was computed for: the verified fleet at the
    target load, else one replica at its maximum rate (empty when there is none)."""
    tp = _finite(alt.get("tp"))
    fleet = alt.get("fleet")
    if isinstance(fleet, list):
        for run in reversed(fleet):
            if (
                isinstance(run, dict)
                and run.get("passed")
                and run.get("replicas") == alt.get("replicas")
            ):
                replicas = _finite(run.get("replicas"))
                return _OperatingPoint(
                    dict(run.get("metrics") or {}),
                    "fleet at the target load",
                    _finite(run.get("rate_rps")),
                    replicas * tp if replicas is not None and tp is not None else None,
                )
    max_rate = alt.get("max_rate_rps")
    for ev in alt.get("evaluations") or []:
        if isinstance(ev, dict) and ev.get("passed") and ev.get("rate_rps") == max_rate:
            return _OperatingPoint(
                dict(ev.get("metrics") or {}),
                "one replica at its maximum rate",
                _finite(max_rate),
                tp,
            )
    return _OperatingPoint()


def _token_rates(
    rate_rps: float | None, metrics: Mapping[str, Any], gpus: float | None
) -> tuple[float | None, float | None]:
    """(output tokens/s per GPU, output tokens/s per user) at a load: the offered rate times the
    output tokens per request over the GPUs serving it, and 1 / mean TPOT (None where a figure is
    missing, as in plans written before ``tpot_mean_s`` was recorded)."""
    tokens = _finite(metrics.get("output_tokens_per_request"))
    per_gpu = (
        rate_rps * tokens / gpus if rate_rps is not None and tokens is not None and gpus else None
    )
    tpot = _finite(metrics.get("tpot_mean_s"))
    return per_gpu, (1.0 / tpot if tpot else None)


def _status(alt: Mapping[str, Any]) -> str:
    if alt.get("error"):
        return "invalid"
    if not alt.get("feasible"):
        return "fails SLO"
    return "ok"


def _slo_text(slo: Mapping[str, Any], directions: Mapping[str, Any]) -> str:
    return ", ".join(
        f"{metric} {directions.get(metric, '≤')} {format_value(value)}"
        for metric, value in slo.items()
    )


def capacity_report(
    plan: Mapping[str, Any], *, title: str | None = None, source: str = "(in memory)"
) -> Report:
    """The report of a :func:`cbsim.capacity.plan` result (its JSON object)."""
    if not _is_capacity(plan):
        raise CbsimError("not a capacity plan (the JSON of cbsim capacity --json)", source=source)
    slo: dict[str, Any] = dict(plan.get("slo") or {})
    directions: dict[str, Any] = dict(plan.get("slo_directions") or {})
    varied = isinstance(plan.get("alternatives"), list)
    keys = list(plan.get("vary") or {}) if varied else []
    alternatives = _alternatives(plan)
    best_index = plan.get("best_index") if varied else (0 if plan.get("feasible") else None)
    target = plan.get("target_rps")
    scenario_name = next((a.get("scenario") for a in alternatives if a.get("scenario")), None)
    report = Report(
        title=title or f"cbsim capacity plan: {scenario_name or 'scenario'}",
        kind="capacity",
        source=source,
    )

    # recommendation
    best = alternatives[best_index] if isinstance(best_index, int) else None
    if best is not None and plan.get("max_rate_rps") is not None:
        items = [
            (
                "recommendation",
                _describe_overrides(best.get("overrides")) if varied else str(scenario_name),
            ),
            (
                "hardware",
                f"{best.get('model')} on {best.get('gpu')}, tp={format_value(best.get('tp'))}",
            ),
            ("max rate per replica", _with_unit(plan.get("max_rate_rps"), "req/s")),
        ]
        if target is not None:
            items += [
                ("target load", _with_unit(target, "req/s")),
                ("replicas", format_value(plan.get("replicas"))),
                ("GPUs", format_value(plan.get("gpus"))),
                ("cost per hour", _money(plan.get("cost_per_hour"))),
            ]
        else:
            items.append(("cost per hour (one replica)", _money(plan.get("replica_cost_per_hour"))))
        items += [
            (
                "cost per million output tokens",
                _money(plan.get("cost_per_million_output_tokens"), ".4f"),
            ),
            ("cost basis", str(plan.get("cost_basis") or "—")),
            ("SLO", _slo_text(slo, directions)),
        ]
        if plan.get("reason"):
            items.append(("note", str(plan["reason"])))
        recommendation: Facts = Facts(items, tone="good")
    else:
        recommendation = Facts(
            [
                ("recommendation", "none: the SLO cannot be met"),
                ("why", str(plan.get("reason") or "—")),
                ("SLO", _slo_text(slo, directions)),
            ],
            tone="bad",
        )
    report.sections.append(Section("Recommendation", [recommendation]))

    seeds = ", ".join(str(s) for s in plan.get("seeds") or []) or "—"
    report.sections.append(
        Section(
            "Search",
            [
                Facts(
                    [
                        ("SLO", _slo_text(slo, directions)),
                        ("seeds", seeds),
                        ("window", _with_unit(plan.get("window_s"), "s of arrivals per rate")),
                        ("tolerance", format_value(plan.get("tolerance"))),
                        ("simulations", format_value(plan.get("simulations"))),
                        *([("varied", ", ".join(keys))] if keys else []),
                    ]
                )
            ],
        )
    )

    # alternatives table
    metric_names = list(slo)
    show_gpu = "cluster.gpu" not in keys
    show_tp = "cluster.tp" not in keys
    columns = [
        *(keys or ["scenario"]),
        *(["GPU"] if show_gpu else []),
        *(["tp"] if show_tp else []),
        "max req/s per replica",
    ]
    if target is not None:
        columns += ["replicas", "GPUs", "$/hour"]
    else:
        columns += ["$/hour per replica"]
    columns += [
        "$/M output tokens",
        *(f"{m} achieved" for m in metric_names),
        "output tok/s per GPU",
        "output tok/s per user",
        "sims",
        "status",
    ]
    rows: list[list[str]] = []
    achieved: list[dict[str, Any]] = []
    bases: set[str] = set()
    notes: list[str] = []
    for i, alt in enumerate(alternatives):
        point = _achieved(alt)
        metrics = point.metrics
        if point.basis:
            bases.add(point.basis)
        achieved.append(metrics)
        per_gpu, per_user = _token_rates(point.rate_rps, metrics, point.gpus)
        status = "best" if i == best_index else _status(alt)
        row = [
            *(
                [format_value((alt.get("overrides") or {}).get(k)) for k in keys]
                or [str(alt.get("scenario") or "scenario")]
            ),
            *([format_value(alt.get("gpu"))] if show_gpu else []),
            *([format_value(alt.get("tp"))] if show_tp else []),
            format_value(alt.get("max_rate_rps")),
        ]
        if target is not None:
            row += [
                format_value(alt.get("replicas")),
                format_value(alt.get("gpus")),
                _money(alt.get("cost_per_hour")),
            ]
        else:
            row.append(_money(alt.get("replica_cost_per_hour")))
        row += [
            _money(alt.get("cost_per_million_output_tokens"), ".4f"),
            *(format_value(metrics.get(m)) for m in metric_names),
            format_value(per_gpu),
            format_value(per_user),
            format_value(alt.get("simulations")),
            status,
        ]
        rows.append(row)
        if alt.get("reason"):
            notes.append(f"{_alt_label(alt, keys)}: {alt['reason']}")
    caption = "Achieved SLO metrics are those at the operating point the cost is computed for"
    caption += f" ({'; '.join(sorted(bases))})" if bases else ""
    caption += (
        "; there, output tokens/s per GPU = offered rate × output tokens per request ÷ GPUs, and "
        "output tokens/s per user = 1 / mean TPOT."
    )
    blocks: list[Block] = [
        Table(
            columns,
            rows,
            caption=caption,
            highlight={best_index} if isinstance(best_index, int) else set(),
        )
    ]
    blocks += [Paragraph(note, note=True) for note in notes]
    report.sections.append(Section("Alternatives" if varied else "Result", blocks))

    # cost vs SLO frontier, one figure per "at most" SLO metric
    labels = [_alt_label(alt, keys) for alt in alternatives]
    frontier_blocks: list[Block] = []
    for metric in metric_names:
        if directions.get(metric, "≤") != "≤":
            continue
        frame = pd.DataFrame(
            {
                "alternative": labels,
                "cost_per_million_output_tokens": [
                    _finite(a.get("cost_per_million_output_tokens")) for a in alternatives
                ],
                metric: [_finite(m.get(metric)) for m in achieved],
            },
            dtype=object,
        )
        frame["cost_per_million_output_tokens"] = pd.to_numeric(
            frame["cost_per_million_output_tokens"]
        )
        frame[metric] = pd.to_numeric(frame[metric])
        threshold = _finite(slo.get(metric))
        drawn = _slo_in_view(threshold, frame[metric])
        fig = plots.cost_vs_slo_frontier(
            frame,
            cost="cost_per_million_output_tokens",
            slo_metric=metric,
            label="alternative",
            slo=threshold if drawn else None,
            title=f"Cost vs {plots.label_for(metric).split(' (')[0]}: Pareto frontier",
        )
        frontier_blocks.append(
            _figure_image(
                fig,
                f"frontier-{_slug(metric)}",
                f"Cost per million output tokens against achieved {metric}",
                f"Each alternative's cost per million output tokens against the {metric} it "
                "achieves at its cost basis; lower-left is better"
                + _slo_note(f"{metric} ≤", threshold, drawn)
                + ".",
            )
        )
    if not frontier_blocks:
        frontier_blocks.append(
            Paragraph(
                "No latency-like SLO metric (one that must stay below a threshold).", note=True
            )
        )
    report.sections.append(Section("Cost vs SLO frontier", frontier_blocks))

    # latency vs offered load from the search's evaluations
    eval_rows: list[dict[str, Any]] = []
    for alt, label in zip(alternatives, labels, strict=True):
        for ev in alt.get("evaluations") or []:
            if not isinstance(ev, dict):
                continue
            metrics = ev.get("metrics") or {}
            eval_rows.append(
                {
                    "alternative": label,
                    "offered_rate_rps": _finite(ev.get("rate_rps")),
                    "passed": bool(ev.get("passed")),
                    **{m: _finite(metrics.get(m)) for m in metric_names},
                }
            )
    load_blocks: list[Block] = []
    if eval_rows:
        evals = pd.DataFrame(eval_rows)
        for metric in metric_names:
            evals[metric] = pd.to_numeric(evals[metric], errors="coerce")
        evals["offered_rate_rps"] = pd.to_numeric(evals["offered_rate_rps"], errors="coerce")
        evals = evals[np.isfinite(evals["offered_rate_rps"].to_numpy(dtype=float))]
        for metric in metric_names:
            load_blocks.append(
                _figure_image(
                    _load_figure(evals, metric, slo, directions, len(alternatives) > 1),
                    f"load-{_slug(metric)}",
                    f"{metric} against offered load per replica",
                    f"{metric} at every rate the search simulated (one replica; worst over seeds); "
                    "crosses mark rates that failed a check"
                    + _slo_note(
                        f"{metric} {directions.get(metric, '≤')}",
                        _finite(slo.get(metric)),
                        _slo_in_view(_finite(slo.get(metric)), evals[metric]),
                    )
                    + ".",
                )
            )
    else:
        load_blocks.append(Paragraph("The plan holds no evaluations.", note=True))
    report.sections.append(Section("Latency vs load", load_blocks))
    report.sections.append(
        Section("Tokens per GPU vs tokens per user", _token_rate_blocks(alternatives, labels))
    )

    # fleet verification
    fleet_rows: list[list[str]] = []
    for alt, label in zip(alternatives, labels, strict=True):
        for run in alt.get("fleet") or []:
            if not isinstance(run, dict):
                continue
            metrics = run.get("metrics") or {}
            fleet_rows.append(
                [
                    label,
                    format_value(run.get("replicas")),
                    format_value(run.get("rate_rps")),
                    *(format_value(metrics.get(m)) for m in metric_names),
                    "pass" if run.get("passed") else "fail",
                    str(run.get("reason") or ""),
                ]
            )
    if fleet_rows:
        report.sections.append(
            Section(
                "Fleet verification",
                [
                    Table(
                        ["alternative", "replicas", "req/s", *metric_names, "result", "reason"],
                        fleet_rows,
                        caption="The fleet simulated at the target load, grown one replica at a "
                        "time until it passes.",
                    )
                ],
            )
        )
    return report


def _token_rate_blocks(
    alternatives: Sequence[Mapping[str, Any]], labels: Sequence[str]
) -> list[Block]:
    """Output tokens/s per GPU against per user at every load the search simulated (one replica
    of each layout, so its GPUs are its tp), one line per alternative."""
    rows: list[dict[str, Any]] = []
    for alt, label in zip(alternatives, labels, strict=True):
        gpus = _finite(alt.get("tp"))
        for ev in alt.get("evaluations") or []:
            if not isinstance(ev, dict):
                continue
            rate = _finite(ev.get("rate_rps"))
            per_gpu, per_user = _token_rates(rate, ev.get("metrics") or {}, gpus)
            if per_gpu is not None and per_user is not None:
                rows.append(
                    {
                        "alternative": label,
                        "offered_rate_rps": rate,
                        "passed": bool(ev.get("passed")),
                        "output_tokens_per_s_per_gpu": per_gpu,
                        "output_tokens_per_s_per_user": per_user,
                    }
                )
    if not rows:
        return [
            Paragraph(
                "The plan's evaluations do not record the mean TPOT (a plan written by an older "
                "cbsim), so there is no tokens-per-user figure.",
                note=True,
            )
        ]
    fig = plots.tokens_per_gpu_vs_per_user(
        pd.DataFrame(rows), order="offered_rate_rps", passed="passed"
    )
    return [
        _figure_image(
            fig,
            "tokens-per-gpu-vs-per-user",
            "Output tokens per second per GPU against output tokens per second per user",
            "Every rate the search simulated, one replica per layout: output tokens/s per GPU "
            "(offered rate × output tokens per request ÷ tp) against output tokens/s per user "
            "(1 / mean TPOT); hollow points failed a check. Up and to the right is better: more "
            "work per GPU bought, faster streams for each user.",
        )
    ]


def _load_figure(
    evals: pd.DataFrame,
    metric: str,
    slo: Mapping[str, Any],
    directions: Mapping[str, Any],
    several: bool,
) -> Figure:
    threshold = _finite(slo.get(metric))
    if not _slo_in_view(threshold, evals[metric]):
        threshold = None
    values = evals[metric].to_numpy(dtype=float)
    positive = values[np.isfinite(values) & (values > 0)]
    at_most = directions.get(metric, "≤") == "≤"
    log_y = bool(at_most and len(positive) and positive.max() > 20 * positive.min())
    fig = plots.latency_vs_load(
        evals,
        x="offered_rate_rps",
        y=metric,
        hue="alternative" if several else None,
        hue_is_label=True,
        slo=threshold,
        log_y=log_y,
        title=f"{plots.label_for(metric).split(' (')[0]} vs offered load (per replica)",
    )
    axis = fig.axes[0]
    failed = evals[~evals["passed"].astype(bool)]
    failed = failed[np.isfinite(failed[metric].to_numpy(dtype=float))]
    if len(failed):
        axis.scatter(
            failed["offered_rate_rps"].to_numpy(dtype=float),
            failed[metric].to_numpy(dtype=float),
            marker="x",
            s=60,
            color="black",
            zorder=4,
            label="failed a check",
        )
    rates = evals["offered_rate_rps"].to_numpy(dtype=float)
    rates = rates[rates > 0]
    if len(rates) and rates.max() > 8 * rates.min():
        axis.set_xscale("log")
    axis.legend(fontsize=8)
    _plain_log_ticks(fig)
    return fig


# --------------------------------------------------------------------------- HTML

_CSS = """
:root { color-scheme: light; }
body { margin: 0; background: #f6f7f9; color: #1d2430;
  font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 32px 48px; background: #fff;
  box-shadow: 0 0 12px rgba(0,0,0,.06); }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 36px 0 12px; padding-bottom: 4px; border-bottom: 1px solid #e3e6ea; }
.meta { color: #5f6b7a; font-size: 13px; margin: 0 0 16px; }
nav { font-size: 13px; margin: 8px 0 16px; }
nav a { color: #2457a6; text-decoration: none; margin-right: 14px; white-space: nowrap; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 18px; margin: 8px 0; }
dl.facts dt { color: #5f6b7a; }
dl.facts dd { margin: 0; font-weight: 500; }
dl.good, dl.bad { padding: 14px 18px; border-radius: 6px; }
dl.good { background: #eef8f0; border-left: 5px solid #2e8b47; }
dl.bad { background: #fdf0ef; border-left: 5px solid #c0392b; }
.table-wrap { overflow-x: auto; margin: 8px 0 16px; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e3e6ea; text-align: left; vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafbfc; }
tr.highlight, tbody tr.highlight:nth-child(even) { background: #e6f4ea; font-weight: 600; }
caption { caption-side: bottom; text-align: left; color: #5f6b7a; font-size: 12px; padding-top: 6px; }
pre { background: #f3f4f6; padding: 12px 14px; border-radius: 6px; overflow-x: auto;
  font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
figure { margin: 12px 0 24px; }
figure img { max-width: 100%; height: auto; display: block; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 0 24px; }
figcaption { color: #5f6b7a; font-size: 12.5px; margin-top: 4px; }
p.note { color: #5f6b7a; font-style: italic; }
footer { margin-top: 40px; color: #8a94a3; font-size: 12px; }
""".strip()

#: Figures at most this wide (pixels) are laid out two to a row in HTML.
GRID_MAX_WIDTH_PX = 900

_NUMERIC = re.compile(r"^[-+$]?[\d.,]+(e[-+]?\d+)?( ?[%x])?$|^—$")


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _html_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return f"<p{' class=note' if block.note else ''}>{_esc(block.text)}</p>"
    if isinstance(block, Facts):
        items = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in block.items)
        return f'<dl class="facts {block.tone}">{items}</dl>'
    if isinstance(block, Table):
        head = "".join(f"<th>{_esc(c)}</th>" for c in block.columns)
        body = []
        for i, row in enumerate(block.rows):
            cells = "".join(
                f'<td class="num">{_esc(c)}</td>' if _NUMERIC.match(c) else f"<td>{_esc(c)}</td>"
                for c in row
            )
            attr = ' class="highlight"' if i in block.highlight else ""
            body.append(f"<tr{attr}>{cells}</tr>")
        caption = f"<caption>{_esc(block.caption)}</caption>" if block.caption else ""
        return (
            f'<div class="table-wrap"><table>{caption}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )
    if isinstance(block, Code):
        language = f' class="language-{_esc(block.language)}"' if block.language else ""
        return f"<pre><code{language}>{_esc(block.text)}</code></pre>"
    width, height = block.size
    data = base64.b64encode(block.png).decode("ascii")
    caption = f"<figcaption>{_esc(block.caption)}</figcaption>" if block.caption else ""
    return (
        f'<figure id="fig-{_esc(block.name)}"><img src="data:image/png;base64,{data}" '
        f'alt="{_esc(block.alt)}" width="{width}" height="{height}">{caption}</figure>'
    )


def _html_blocks(blocks: Sequence[Block]) -> str:
    """Blocks in order; runs of two or more narrow figures share rows of a two-column grid."""
    parts: list[str] = []
    run: list[Image] = []

    def flush() -> None:
        if len(run) > 1:
            figures = "".join(_html_block(image) for image in run)
            parts.append(f'<div class="grid">{figures}</div>')
        elif run:
            parts.append(_html_block(run[0]))
        run.clear()

    for block in blocks:
        if isinstance(block, Image) and block.size[0] <= GRID_MAX_WIDTH_PX:
            run.append(block)
            continue
        flush()
        parts.append(_html_block(block))
    flush()
    return "\n".join(parts)


def render_html(report: Report) -> str:
    """The report as one self-contained HTML document (figures as base64 PNG data URIs)."""
    nav = "".join(f'<a href="#{s.anchor}">{_esc(s.title)}</a>' for s in report.sections)
    sections = []
    for section in report.sections:
        blocks = _html_blocks(section.blocks)
        sections.append(
            f'<section id="{section.anchor}">\n<h2>{_esc(section.title)}</h2>\n{blocks}\n</section>'
        )
    from cbsim import __version__

    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta name="generator" content="cbsim {_esc(__version__)}">',
            f"<title>{_esc(report.title)}</title>",
            f"<style>\n{_CSS}\n</style>",
            "</head>",
            "<body>",
            "<main>",
            f"<h1>{_esc(report.title)}</h1>",
            f'<p class="meta">{_esc(_kind_name(report.kind))} · {_esc(report.source)}</p>',
            f"<nav>{nav}</nav>",
            *sections,
            f"<footer>Generated by cbsim {_esc(__version__)} on {_esc(report.generated)}.</footer>",
            "</main>",
            "</body>",
            "</html>",
            "",
        ]
    )


def _kind_name(kind: ReportKind) -> str:
    return {"run": "simulation run", "sweep": "sweep", "capacity": "capacity plan"}[kind]


# --------------------------------------------------------------------------- Markdown


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ") or " "


def _md_block(block: Block, image_name: Callable[[Image], str]) -> str:
    if isinstance(block, Paragraph):
        return f"_{block.text}_" if block.note else block.text
    if isinstance(block, Facts):
        lines = [f"- **{k}:** {v}" for k, v in block.items]
        if block.tone != "plain":
            return "\n".join(f"> {line}" for line in lines)
        return "\n".join(lines)
    if isinstance(block, Table):
        aligns = [
            "---:" if block.rows and all(_NUMERIC.match(r[i]) for r in block.rows) else "---"
            for i in range(len(block.columns))
        ]
        lines = [
            "| " + " | ".join(_md_cell(c) for c in block.columns) + " |",
            "| " + " | ".join(aligns) + " |",
        ]
        for i, row in enumerate(block.rows):
            cells = [_md_cell(c) for c in row]
            if i in block.highlight:
                cells = [f"**{c}**" if c.strip() else c for c in cells]
            lines.append("| " + " | ".join(cells) + " |")
        if block.caption:
            lines += ["", f"_{block.caption}_"]
        return "\n".join(lines)
    if isinstance(block, Code):
        fence = "````" if "```" in block.text else "```"
        return f"{fence}{block.language}\n{block.text}\n{fence}"
    alt = block.alt.replace("[", "(").replace("]", ")")
    text = f"![{alt}]({quote(image_name(block))})"
    if block.caption:
        text += f"\n\n_{block.caption}_"
    return text


def render_markdown(report: Report, image_prefix: str = "report") -> tuple[str, dict[str, bytes]]:
    """The report as Markdown and its figures: ``{file name: PNG bytes}``, the names being
    ``<image_prefix>-<figure>.png``, referenced relatively (write them beside the ``.md`` file)."""
    files: dict[str, bytes] = {}

    def image_name(image: Image) -> str:
        name = f"{image_prefix}-{image.name}.png"
        files[name] = image.png
        return name

    parts = [f"# {report.title}", f"_{_kind_name(report.kind)}_ · `{report.source}`"]
    for section in report.sections:
        parts.append(f"## {section.title}")
        parts.extend(_md_block(b, image_name) for b in section.blocks)
    from cbsim import __version__

    parts.append(f"_Generated by cbsim {__version__} on {report.generated}._")
    return "\n\n".join(parts) + "\n", files


# --------------------------------------------------------------------------- writing


_GENERATOR_MARKS = (b'<meta name="generator" content="cbsim ', b"_Generated by cbsim ")
_FIGURE_REFERENCE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")
_REPORT_DESCRIPTION = "a report cbsim wrote"


def _is_cbsim_report(path: Path) -> bool:
    """Whether the file ``path`` is a report cbsim wrote: its generator line, near the top of an
    HTML page or at the end of a Markdown file."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4096)
            handle.seek(max(0, path.stat().st_size - 4096))
            tail = handle.read()
    except OSError:
        return False
    return any(mark in head or mark in tail for mark in _GENERATOR_MARKS)


def _figures_of(report_md: Path) -> set[str]:
    """The PNG files an existing Markdown report written by cbsim refers to (none otherwise)."""
    if not report_md.is_file() or not _is_cbsim_report(report_md):
        return set()
    text = report_md.read_text(encoding="utf-8", errors="replace")
    return {unquote(ref) for ref in _FIGURE_REFERENCE.findall(text)}


def _check_figures_replaceable(target: Path, names: Sequence[str]) -> None:
    """Refuse to overwrite a PNG beside ``target`` that its earlier report did not write."""
    ours = _figures_of(target)
    for name in names:
        path = target.parent / name
        if (path.exists() or path.is_symlink()) and name not in ours:
            raise CbsimError(
                f"exists and is not a figure of an earlier report at {target.name}, so cbsim will "
                "not overwrite it: give the report another file name (or move the file away)",
                source=str(path),
            )


def _write_atomic(path: Path, data: bytes) -> None:
    outputs.write_bytes(path, data)


def _format_for(out: Path, fmt: str | None) -> Format:
    if fmt is None:
        return "md" if out.suffix.lower() in (".md", ".markdown") else "html"
    if fmt not in FORMATS:
        raise CbsimError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}", field="format")
    return "md" if fmt == "md" else "html"


def write_report(
    source: str | Path | Report,
    out: str | Path,
    *,
    fmt: str | None = None,
    title: str | None = None,
) -> Path:
    """Build the report of ``source`` (a path, see :func:`detect`, or a :class:`Report`) and write
    it to ``out``: HTML, or Markdown with its PNGs beside it. ``fmt`` defaults to ``md`` for a
    ``.md``/``.markdown`` file name, else ``html``. Returns ``out``."""
    target = Path(out)
    kind = _format_for(target, fmt)
    if target.is_dir():
        raise CbsimError("is a directory; give the report's file name", source=str(out))
    if target.exists() and not _is_cbsim_report(target):
        raise CbsimError(
            f"exists and is not {_REPORT_DESCRIPTION}, so cbsim will not overwrite it: give a new "
            "file name (or move the file away)",
            source=str(out),
        )
    if isinstance(source, Report):
        report = source
        if title is not None:
            report.title = title
    else:
        report = build_report(source, title=title)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if kind == "html":
            _write_atomic(target, render_html(report).encode("utf-8"))
        else:
            text, files = render_markdown(report, image_prefix=target.stem or "report")
            _check_figures_replaceable(target, list(files))
            for name, png in files.items():
                _write_atomic(target.parent / name, png)
            _write_atomic(target, text.encode("utf-8"))
    except OSError as err:
        raise CbsimError(
            f"cannot write the report: {err.strerror or err}", source=str(err.filename or out)
        ) from None
    return target


# --------------------------------------------------------------------------- command line


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except CbsimError as err:
        raise UserError(str(err)) from None


@click.command("report", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("source", metavar="RESULTS_DIR_OR_SWEEP", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(path_type=Path),
    help="Report file (report.html, or report.md: its figures are written beside it).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="html (self-contained, figures embedded) or md. Default: from the --out suffix.",
)
@click.option("--title", default=None, help="Report title. Default: from the source.")
def report_command(source: Path, out: Path, fmt: str | None, title: str | None) -> None:
    """Write a report of RESULTS_DIR_OR_SWEEP: a run directory, a sweep directory, or a capacity
    plan (the JSON of cbsim capacity --json, or a directory holding capacity.json / plan.json)."""
    with _user_errors():
        written = write_report(source, out, fmt=fmt, title=title)
    click.echo(str(written))
