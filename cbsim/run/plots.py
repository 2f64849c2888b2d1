"""Plots of results and sweeps: one function per figure, usable from notebooks and reports.

Every plotting function takes a :class:`~cbsim.run.results.Results` (or the DataFrame it needs, or a
sweep-like DataFrame with one row per point), optionally the axes to draw on, and returns the
matplotlib :class:`~matplotlib.figure.Figure`. Without axes it creates a new figure through pyplot
(so a notebook displays it); with axes it draws on them and leaves the figure's layout alone. Inputs
are never mutated. Nothing here calls ``plt.show``; pyplot is imported only when a figure is created,
so importing this module does not pick a backend (headless runs fall back to Agg).

* :func:`throughput_and_queue` — output tokens/s and waiting requests over time (twin axes).
* :func:`latency_cdfs` — TTFT, TPOT and E2E empirical CDFs of one or several runs, with SLO lines.
* :func:`batch_kv_k_over_time` — batch size, KV cache utilisation and mean draft length k over time.
* :func:`acceptance_per_request` — per-request draft acceptance rate: histogram and vs output length.
* :func:`latency_vs_load` — a latency metric against load from a sweep: mean over seeds, min–max band.
* :func:`cost_vs_slo_frontier` — alternatives by cost and latency with the Pareto frontier marked
  (:func:`pareto_front` computes it); labels never overlap (a dominated point whose label finds no
  free place is left unlabelled).
* :func:`tokens_per_gpu_vs_per_user` — output tokens/s per GPU against output tokens/s per user
  (1 / TPOT), one line per layout across the loads simulated (the aiconfigurator view).
* :func:`save` writes a PNG atomically; :func:`to_png_bytes` returns PNG bytes (for HTML reports).

Time series are drawn as steps: a window's value holds from its start ``t_s`` to the next window
(the last one to the end of the run, ``span_s``), against seconds, or hours for a run of three
hours or more (:mod:`cbsim.outputs.time_axis`: a day reads 0 to 24). Points of a sweep or a plan are
labelled ``key=value`` with short keys (:func:`short_keys`, :func:`point_label`): ``gpu=h200,
tp=4``.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cbsim.common import output_folders as outputs
from cbsim.outputs.plot_legends import columns_that_fit, legend_outside
from cbsim.outputs.time_axis import TimeAxis, time_axis
from cbsim.run.results import Results

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "DPI",
    "acceptance_per_request",
    "batch_kv_k_over_time",
    "cost_vs_slo_frontier",
    "label_for",
    "latency_cdfs",
    "latency_vs_load",
    "pareto_front",
    "point_label",
    "save",
    "short_keys",
    "throughput_and_queue",
    "to_png_bytes",
    "tokens_per_gpu_vs_per_user",
]

DPI = 110
"""Resolution of the PNGs :func:`save` and :func:`to_png_bytes` write."""

NO_SPECULATION = "no speculation in this run\n(no drafted tokens)"

_LABELS: dict[str, str] = {
    "rate": "arrival rate (req/s)",
    "workload.arrival.rate": "arrival rate (req/s)",
    "throughput_rps": "throughput (req/s)",
    "goodput_rps": "goodput (req/s)",
    "output_tokens_per_s": "output throughput (tokens/s)",
    "slo_attainment": "SLO attainment (fraction)",
    "acceptance_rate": "draft acceptance rate (accepted / drafted)",
    "mean_k": "mean draft length k (tokens)",
    "mean_batch_size": "mean batch size (requests)",
    "cost_per_million_output_tokens": "cost per million output tokens ($)",
    "replicas": "replicas",
    "cluster.replicas": "replicas",
    "output_tokens_per_s_per_gpu": "output tokens/s per GPU",
    "output_tokens_per_s_per_user": "output tokens/s per user (1 / TPOT)",
}

#: Last parts of a dotted key too generic to name it alone: the part before stands in for them.
_GENERIC_LEAVES = frozenset({"kind", "enabled"})

_METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E latency", "queue": "queueing delay"}


# --------------------------------------------------------------------------- helpers


def label_for(column: str) -> str:
    """A human axis label with units for a results or sweep column name.

    ``ttft_p99_s`` becomes ``"TTFT p99 (s)"``, ``throughput_rps`` ``"throughput (req/s)"``; unknown
    names are returned with their unit suffix turned into a unit.
    """
    if column in _LABELS:
        return _LABELS[column]
    parts = column.split("_")
    if len(parts) == 3 and parts[0] in _METRIC_NAMES and parts[2] == "s":
        return f"{_METRIC_NAMES[parts[0]]} {parts[1]} (s)"
    for suffix, unit in (("_per_s", "/s"), ("_rps", "req/s"), ("_s", "s"), ("_bytes", "bytes")):
        if column.endswith(suffix) and len(column) > len(suffix):
            return f"{column[: -len(suffix)].replace('_', ' ')} ({unit})"
    return column.replace("_", " ")


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """A short name for each dotted scenario key, for labels: its last part (``cluster.gpu`` →
    ``gpu``), or the part before a generic one (``speculative.enabled`` → ``speculative``,
    ``scheduler.kind`` → ``scheduler``); the whole key where two short names would be the same."""

    def short(key: str) -> str:
        parts = key.split(".")
        if len(parts) > 1 and parts[-1] in _GENERIC_LEAVES:
            return parts[-2]
        return parts[-1]

    names = {key: short(key) for key in keys}
    taken = list(names.values())
    return {key: (name if taken.count(name) == 1 else key) for key, name in names.items()}


def point_label(values: Mapping[Any, Any], keys: Sequence[str] | None = None) -> str:
    """``gpu=h200, tp=4, speculative=False``: the values of ``keys`` (default: all of ``values``)
    named by their :func:`short_keys`."""
    chosen = list(values) if keys is None else list(keys)
    names = short_keys(chosen)
    return ", ".join(f"{names[key]}={values.get(key)}" for key in chosen)


def _pyplot() -> Any:
    import matplotlib.pyplot as plt

    return plt


def _new_axes(nrows: int, ncols: int, figsize: tuple[float, float], **kw: Any) -> list[Axes]:
    fig, axes = _pyplot().subplots(
        nrows, ncols, figsize=figsize, layout="constrained", squeeze=False, **kw
    )
    del fig
    return list(np.asarray(axes).ravel())


def _figure_of(ax: Axes) -> Figure:
    fig = ax.get_figure(root=True)
    if fig is None:  # pragma: no cover - axes always belong to a figure here
        raise ValueError("the axes do not belong to a figure")
    return fig


def _axes(
    given: Axes | Sequence[Axes] | None,
    shape: tuple[int, int],
    figsize: tuple[float, float],
    **kw: Any,
) -> list[Axes]:
    """The axes to draw on: the given ones (as many as ``shape`` holds) or a new figure's."""
    count = shape[0] * shape[1]
    if given is None:
        return _new_axes(shape[0], shape[1], figsize, **kw)
    if isinstance(given, np.ndarray):  # what plt.subplots returns
        axes = list(given.ravel())
    else:
        axes = list(given) if isinstance(given, Sequence) else [given]
    if len(axes) != count:
        raise ValueError(f"expected {count} axes, got {len(axes)}")
    return axes


def _message(ax: Axes, text: str) -> None:
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=11,
        color="0.35",
    )


def _timeseries(source: Results | pd.DataFrame) -> tuple[pd.DataFrame, float | None]:
    """The timeseries frame and the end of its last window: ``t_s + span_s`` of the last row
    (frames written before ``span_s`` existed: one window width after its start, the width known
    from the scenario or the spacing of ``t_s``); ``None`` where it cannot be known."""
    width: float | None
    if isinstance(source, Results):
        frame, width = source.timeseries, float(source.scenario.output.timeseries_window_s)
    elif isinstance(source, pd.DataFrame):
        frame = source
        steps = np.diff(frame["t_s"].to_numpy(dtype=float))
        width = float(np.median(steps)) if len(steps) else None
    else:
        raise TypeError(f"expected Results or a timeseries DataFrame, got {type(source).__name__}")
    if not len(frame):
        return frame, None
    last = float(frame["t_s"].iloc[-1])
    if "span_s" in frame.columns:
        return frame, last + float(frame["span_s"].iloc[-1])
    return frame, (last + width if width is not None else None)


def _step(ax: Axes, t: np.ndarray, y: np.ndarray, end: float | None, **kw: Any) -> None:
    """Draw a windowed series as steps, the last window held to ``end``."""
    if end is None or len(t) == 0:
        ax.plot(t, y, marker="o", **kw)
        return
    x = np.append(t, end)
    ax.plot(x, np.append(y, y[-1]), drawstyle="steps-post", **kw)


def _column(frame: pd.DataFrame, name: str) -> np.ndarray:
    return frame[name].to_numpy(dtype=float)


def _clock(t: np.ndarray, end: float | None) -> tuple[np.ndarray, float | None, TimeAxis]:
    """Window starts and the run's end in the unit the run's length calls for (seconds, or
    hours for a long run: :func:`cbsim.outputs.time_axis.time_axis`), and that axis."""
    clock = time_axis(end if end is not None else (float(t[-1]) if len(t) else None))
    return t / clock.seconds_per_unit, None if end is None else clock.scale(end), clock


def _time_limits(ax: Axes, t: np.ndarray, end: float | None) -> None:
    if len(t):
        ax.set_xlim(float(t[0]), float(end if end is not None else t[-1]) or 1.0)


# --------------------------------------------------------------------------- time series


def throughput_and_queue(
    results: Results | pd.DataFrame, *, ax: Axes | None = None, title: str | None = None
) -> Figure:
    """Output tokens/s (left axis) and waiting requests (right axis) over time.

    ``results`` is a :class:`Results` or its ``timeseries`` frame. Draws on ``ax`` (and a twin of
    it) when given. The figure has two axes: the throughput axes and its twin.
    """
    ts, end = _timeseries(results)
    (left,) = _axes(ax, (1, 1), (8.0, 4.0))
    right = left.twinx()
    t, end, clock = _clock(_column(ts, "t_s"), end)
    _step(left, t, _column(ts, "output_tokens_per_s"), end, color="C0", label="output tokens/s")
    _step(right, t, _column(ts, "waiting"), end, color="C3", label="waiting requests")
    clock.apply(left)
    left.set_ylabel("output throughput (tokens/s)", color="C0")
    right.set_ylabel("waiting requests (time average)", color="C3")
    left.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    _time_limits(left, t, end)
    left.set_title(title or "Throughput and queue over time")
    handles = left.get_lines() + right.get_lines()
    left.legend(handles, [str(h.get_label()) for h in handles], loc="upper left", fontsize=8)
    return _figure_of(left)


def prefix_hit_rate_over_time(
    results: Results | pd.DataFrame, *, ax: Axes | None = None, title: str | None = None
) -> Figure:
    """The prefix-cache hit rate over time (reused / prompt tokens of the requests first admitted
    in each window; windows admitting nothing are left blank), with the run's overall rate dashed
    when ``results`` is a :class:`Results` (else its ``timeseries`` frame)."""
    ts, end = _timeseries(results)
    (axis,) = _axes(ax, (1, 1), (8.0, 3.2))
    t, end, clock = _clock(_column(ts, "t_s"), end)
    _step(axis, t, _column(ts, "prefix_hit_rate"), end, color="C2", label="per window")
    if isinstance(results, Results):
        overall = float(results.summary.get("prefix_hit_rate", math.nan))
        axis.axhline(overall, color="C2", linestyle="--", linewidth=1, label="whole run")
    clock.apply(axis)
    axis.set_ylabel("prefix cache hit rate")
    axis.set_ylim(0, 1)
    _time_limits(axis, t, end)
    axis.set_title(title or "Prompt tokens reused from the prefix cache")
    axis.legend(loc="upper left", fontsize=8)
    return _figure_of(axis)


def batch_kv_k_over_time(
    results: Results | pd.DataFrame,
    *,
    axes: Sequence[Axes] | None = None,
    title: str | None = None,
) -> Figure:
    """Batch size, KV cache utilisation and, when the run speculated, mean draft length k over
    time, one panel each.

    ``results`` is a :class:`Results` or its ``timeseries`` frame; ``axes`` the axes to draw on:
    three, or two for a run that did not speculate (given three then, the third is hidden: a run
    without drafts has no k to show).
    """
    ts, end = _timeseries(results)
    mean_k = _column(ts, "mean_k")
    speculated = bool(np.any(mean_k > 0))
    if axes is not None and not speculated:
        given = list(np.asarray(axes, dtype=object).ravel())
        if len(given) == 3:
            given[2].set_visible(False)
            axes = given[:2]
    rows = 3 if speculated else 2
    panels = _axes(axes, (rows, 1), (8.0, 2.5 * rows), sharex=True)
    t, end, clock = _clock(_column(ts, "t_s"), end)
    batch_ax, kv_ax = panels[0], panels[1]
    _step(batch_ax, t, _column(ts, "batch_size"), end, color="C0")
    batch_ax.set_ylabel("batch size (requests)")
    batch_ax.set_title("Mean batch size")
    batch_ax.set_ylim(bottom=0)
    kv_percent = 100.0 * _column(ts, "kv_utilization")
    _step(kv_ax, t, kv_percent, end, color="C2")
    kv_ax.set_ylabel("KV cache used (%)")
    peak = float(np.nanmax(kv_percent)) if len(kv_percent) else 0.0
    # windows hold the iterations that start in them, so a window can read a little over 100 %
    kv_ax.set_ylim(0.0, max(105.0, 1.05 * peak) if peak > 50.0 else max(1.0, 1.2 * peak))
    kv_ax.set_title("KV cache utilisation")
    if speculated:
        k_ax = panels[2]
        _step(k_ax, t, mean_k, end, color="C1")
        k_ax.set_ylabel("mean k (draft tokens)")
        k_ax.set_title("Mean draft length k")
        k_ax.set_ylim(bottom=0)
    for panel in panels:
        _time_limits(panel, t, end)
    clock.apply(panels[-1])
    fig = _figure_of(batch_ax)
    if title:
        fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- latency


def _requests(source: Results | pd.DataFrame) -> pd.DataFrame:
    if isinstance(source, Results):
        return source.requests
    if isinstance(source, pd.DataFrame):
        return source
    raise TypeError(f"expected Results or a requests DataFrame, got {type(source).__name__}")


def _finished(requests: pd.DataFrame) -> pd.DataFrame:
    if "status" in requests.columns:
        return requests[requests["status"] == "finished"]
    return requests


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.sort(values)
    return x, np.arange(1, len(x) + 1, dtype=float) / len(x)


def _readable_log_ticks(ax: Axes, low: float, high: float) -> None:
    """Plain decimal tick labels on a log x axis; minor labels (2, 5) when it spans < 2 decades."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda value, _pos: f"{value:g}")
    ax.xaxis.set_major_formatter(plain)
    if high < 100.0 * low:
        ax.xaxis.set_minor_locator(LogLocator(base=10.0, subs=(2.0, 5.0)))
        ax.xaxis.set_minor_formatter(plain)
    else:
        ax.xaxis.set_minor_formatter(NullFormatter())


def _few_linear_ticks(ax: Axes) -> None:
    """At most six round ticks on a linear x axis, labelled plainly, so labels never run together
    in a narrow panel."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))


def _slo_lines(
    ax: Axes, targets: Sequence[float], low: float | None, high: float | None, unit: str = "s"
) -> None:
    """SLO targets as dashed vertical lines; one far outside the data (more than a factor 2 beyond
    it) is named at the edge it lies beyond instead, so the distribution stays readable."""
    for index, target in enumerate(targets):
        label = f"SLO {target:g} {unit}"
        if low is None or high is None or low / 2.0 <= target <= 2.0 * high:
            ax.axvline(target, color="C3", linestyle="--", linewidth=1.2, label=label)
            continue
        right = target > high
        ax.text(
            0.98 if right else 0.02,
            0.55 - 0.08 * index,
            f"{label} →" if right else f"← {label}",
            transform=ax.transAxes,
            ha="right" if right else "left",
            va="center",
            color="C3",
            fontsize=8,
        )


def latency_cdfs(
    results: Results | pd.DataFrame | Sequence[tuple[str, Results | pd.DataFrame]],
    *,
    axes: Sequence[Axes] | None = None,
    slo: Mapping[str, float | None] | None = None,
    log_x: bool | None = None,
    title: str | None = None,
) -> Figure:
    """Empirical CDFs of TTFT, TPOT and E2E latency of finished requests, in three panels.

    ``results`` is one :class:`Results` (or requests frame) or a list of ``(label, results)`` to
    compare. SLO targets come from ``slo`` (keys ``ttft_s``, ``tpot_s``, ``e2e_s``) or else from
    the runs' ``scenario.slo``, drawn as dashed vertical lines. ``log_x`` forces a scale; by default
    a panel is logarithmic when its values span more than a decade.
    """
    if isinstance(results, Results | pd.DataFrame):
        runs: list[tuple[str | None, Results | pd.DataFrame]] = [(None, results)]
    else:
        runs = [(str(label), run) for label, run in results]
        if not runs:
            raise ValueError("no runs to plot")
    targets: dict[str, list[float]] = {"ttft_s": [], "tpot_s": [], "e2e_s": []}
    if slo is not None:
        for key in targets:
            value = slo.get(key)
            if value is not None:
                targets[key].append(float(value))
    else:
        for _, run in runs:
            if isinstance(run, Results):
                for key, known in targets.items():
                    value = getattr(run.scenario.slo, key)
                    if value is not None and float(value) not in known:
                        known.append(float(value))
    panels = _axes(axes, (1, 3), (13.0, 4.0))
    # (column, name, axis label, unit, scale from seconds): TPOT in ms, as serving tools state it
    metrics = (
        ("ttft_s", "TTFT", "time to first token", "s", 1.0),
        ("tpot_s", "TPOT", "time per output token", "ms", 1e3),
        ("e2e_s", "E2E latency", "end-to-end latency", "s", 1.0),
    )
    for panel, (column, name, what, unit, scale) in zip(panels, metrics, strict=True):
        xlabel = f"{what} ({unit})"
        series: list[tuple[str | None, np.ndarray]] = []
        for label, run in runs:
            values = _column(_finished(_requests(run)), column)
            series.append((label, scale * values[np.isfinite(values)]))
        drawn = [values for _, values in series if len(values)]
        if not drawn:
            _message(panel, "no finished requests" if column != "tpot_s" else "no TPOT data")
        for index, (label, values) in enumerate(series):
            if len(values):
                x, y = _ecdf(values)
                panel.plot(
                    x, y, drawstyle="steps-post", color=f"C{index}", label=label or "requests"
                )
        if drawn:
            everything = np.concatenate(drawn)
            positive = everything[everything > 0]
            use_log = log_x
            if use_log is None:
                use_log = len(positive) > 0 and positive.max() > 10.0 * positive.min()
            if use_log and len(positive):
                panel.set_xscale("log")
                _readable_log_ticks(panel, float(positive.min()), float(positive.max()))
            else:
                _few_linear_ticks(panel)
            low: float | None = float(everything.min())
            high: float | None = float(everything.max())
        else:
            low = high = None
        _slo_lines(panel, [scale * t for t in targets[column]], low, high, unit)
        panel.set_ylim(0.0, 1.02)
        panel.set_xlabel(xlabel + (" — log scale" if panel.get_xscale() == "log" else ""))
        panel.set_ylabel("fraction of requests")
        panel.set_title(f"{name} CDF")
        panel.grid(True, which="major", alpha=0.3)
        labels = panel.get_legend_handles_labels()[1]
        shared = len(runs) > 1 and axes is None  # the runs' names: once, below the panels
        if shared and any(text.startswith("SLO") for text in labels):
            slo_lines = [h for h in panel.get_lines() if str(h.get_label()).startswith("SLO")]
            panel.legend(slo_lines, [str(h.get_label()) for h in slo_lines], fontsize=8)
        elif not shared and (len(runs) > 1 or any(text.startswith("SLO") for text in labels)):
            panel.legend(loc="lower right", fontsize=8)
    fig = _figure_of(panels[0])
    if len(runs) > 1 and axes is None:
        lines = [h for h in panels[0].get_lines() if not str(h.get_label()).startswith("SLO")]
        names = [str(h.get_label()) for h in lines]
        fig.legend(lines, names, loc="outside lower center", fontsize=8, frameon=False,
                   ncols=columns_that_fit(float(fig.get_figwidth()), names))  # fmt: skip
    if title:
        fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------- speculation


def acceptance_per_request(
    results: Results | pd.DataFrame,
    *,
    axes: Sequence[Axes] | None = None,
    bins: int = 20,
    title: str | None = None,
) -> Figure:
    """Per-request draft acceptance rate (accepted / drafted, requests with drafted > 0).

    Left: histogram of the rates; right: rate against output length. The run's overall rate
    (Σ accepted / Σ drafted, the summary's ``acceptance_rate``) is drawn as a dashed line. When the
    run did not speculate both panels say so instead.
    """
    requests = _requests(results)
    panels = _axes(axes, (1, 2), (11.0, 4.0))
    hist_ax, scatter_ax = panels
    drafted = _column(requests, "drafted_tokens")
    accepted = _column(requests, "accepted_tokens")
    spoke = drafted > 0
    hist_ax.set_title("Acceptance rate per request")
    hist_ax.set_xlabel("acceptance rate (accepted / drafted)")
    hist_ax.set_ylabel("requests")
    scatter_ax.set_title("Acceptance rate vs output length")
    scatter_ax.set_xlabel("output length (tokens)")
    scatter_ax.set_ylabel("acceptance rate (accepted / drafted)")
    fig = _figure_of(hist_ax)
    if title:
        fig.suptitle(title)
    if not spoke.any():
        for panel in panels:
            _message(panel, NO_SPECULATION)
            panel.set_xticks([])
            panel.set_yticks([])
        return fig
    rate = accepted[spoke] / drafted[spoke]
    overall = float(accepted[spoke].sum() / drafted[spoke].sum())
    hist_ax.hist(rate, bins=np.linspace(0.0, 1.0, bins + 1).tolist(), color="C0", edgecolor="white")
    hist_ax.axvline(
        overall, color="C3", linestyle="--", label=f"overall {overall:.2f} (Σ accepted / Σ drafted)"
    )
    hist_ax.set_xlim(0.0, 1.0)
    hist_ax.legend(loc="upper left", fontsize=8)
    outputs = _column(requests, "output_tokens")[spoke]
    scatter_ax.scatter(outputs, rate, s=14, alpha=0.7, color="C0", label="request")
    scatter_ax.axhline(overall, color="C3", linestyle="--", label="overall")
    scatter_ax.set_ylim(-0.02, 1.02)
    scatter_ax.legend(loc="lower right", fontsize=8)
    return fig


# --------------------------------------------------------------------------- sweeps


def _slo_label(column: str, value: float) -> str:
    return f"SLO {value:g} s" if column.endswith("_s") else f"SLO {value:g}"


def _resolve(frame: pd.DataFrame, column: str) -> str:
    """``column`` itself, or the single dotted column ending in ``.column`` (``rate`` →
    ``workload.arrival.rate``)."""
    if column in frame.columns:
        return column
    matches = [c for c in frame.columns if isinstance(c, str) and c.endswith("." + column)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise KeyError(f"column {column!r} is ambiguous: {', '.join(matches)}")
    raise KeyError(f"no column {column!r}; the frame has {', '.join(map(str, frame.columns))}")


def latency_vs_load(
    frame: pd.DataFrame,
    x: str = "rate",
    y: str = "ttft_p99_s",
    hue: str | None = None,
    slo: float | None = None,
    *,
    ax: Axes | None = None,
    log_y: bool = False,
    title: str | None = None,
    hue_is_label: bool = False,
) -> Figure:
    """A metric against load from a sweep frame (one row per point and seed).

    Rows are grouped by ``hue`` (one line per value) and by ``x``; each line is the mean of ``y``
    over the rows at that ``x`` (the seeds) with a band from their minimum to their maximum.
    ``x``, ``y`` and ``hue`` may name a column or the last part of a dotted one (``rate`` finds
    ``workload.arrival.rate``). Lines are named ``key=value`` with the hue column's short key
    (``policy=goodput``), or by the value alone when ``hue_is_label`` (the column holds labels
    already, such as :func:`point_label`). ``slo`` draws a horizontal target line. NaN values are
    skipped.
    """
    x_col, y_col = _resolve(frame, x), _resolve(frame, y)
    hue_col = _resolve(frame, hue) if hue is not None else None
    columns = [x_col, y_col] + ([hue_col] if hue_col is not None else [])
    data = frame.loc[:, list(dict.fromkeys(columns))].copy()
    try:
        data[x_col] = pd.to_numeric(data[x_col], errors="raise")
    except (TypeError, ValueError) as error:
        raise TypeError(f"x column {x_col!r} must be numeric ({error})") from None
    data[y_col] = pd.to_numeric(data[y_col], errors="coerce")
    data = data[np.isfinite(data[y_col].to_numpy(dtype=float))]
    (axis,) = _axes(ax, (1, 1), (7.5, 4.5))
    if hue_col is None:
        groups: list[tuple[str | None, pd.DataFrame]] = [(None, data)]
    else:
        keys = list(data[hue_col].unique())
        with contextlib.suppress(TypeError):
            keys = sorted(keys)
        prefix = "" if hue_is_label else f"{short_keys([hue_col])[hue_col]}="
        groups = [
            (
                f"{prefix}{key}",
                data[data[hue_col].isna() if pd.isna(key) else data[hue_col] == key],
            )
            for key in keys
        ]
    for index, (label, group) in enumerate(groups):
        stats = group.groupby(x_col, sort=True)[y_col].agg(["mean", "min", "max", "count"])
        xs = stats.index.to_numpy(dtype=float)
        color = f"C{index % 10}"
        axis.plot(
            xs, stats["mean"].to_numpy(dtype=float), marker="o", color=color, label=label or y_col
        )
        if (stats["count"] > 1).any():
            axis.fill_between(
                xs,
                stats["min"].to_numpy(dtype=float),
                stats["max"].to_numpy(dtype=float),
                color=color,
                alpha=0.2,
                linewidth=0,
            )
    if not len(data):
        _message(axis, f"no finite {y_col} values")
    if slo is not None:
        axis.axhline(slo, color="C3", linestyle="--", linewidth=1.2, label=_slo_label(y_col, slo))
    if log_y:
        axis.set_yscale("log")
    else:
        axis.set_ylim(bottom=0)
    axis.set_xlabel(label_for(x_col))
    axis.set_ylabel(label_for(y_col))
    name = label_for(y_col).split(" (")[0]
    axis.set_title(title or f"{name} vs load (mean over seeds, band min–max)")
    axis.grid(True, alpha=0.3)
    if hue_col is not None or slo is not None:
        legend_outside(axis, own_figure=ax is None)
    return _figure_of(axis)


def pareto_front(frame: pd.DataFrame, cost: str, latency: str) -> pd.Series[bool]:
    """Which rows are Pareto-optimal when lower ``cost`` and lower ``latency`` are both better.

    A row is on the front when no other row is at least as good in both and strictly better in
    one; identical rows are all on it. Rows with a missing value are never on it. The mask has the
    frame's index.
    """
    c = pd.to_numeric(frame[cost], errors="coerce").to_numpy(dtype=float)
    lat = pd.to_numeric(frame[latency], errors="coerce").to_numpy(dtype=float)
    valid = np.isfinite(c) & np.isfinite(lat)
    front = valid.copy()
    for i in np.flatnonzero(valid):
        others = valid & (c <= c[i]) & (lat <= lat[i]) & ((c < c[i]) | (lat < lat[i]))
        front[i] = not others.any()
    return pd.Series(front, index=frame.index, name="pareto")


def cost_vs_slo_frontier(
    frame: pd.DataFrame,
    cost: str = "cost_per_million_output_tokens",
    slo_metric: str = "ttft_p99_s",
    label: str = "alternative",
    *,
    slo: float | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Alternatives by latency (x) and cost (y) with the Pareto frontier highlighted and labelled.

    One point per row, or per ``label`` value when labels repeat (e.g. one row per seed: the mean
    of both metrics is used). Frontier points (see :func:`pareto_front`) are joined by a staircase
    and labelled; other points are labelled too when there are at most 15 and their label finds a
    place clear of every other label and point (see :func:`_place_labels`). ``slo`` draws the
    latency target as a vertical line. Rows without ``label`` are named by their index.
    """
    cost_col, lat_col = _resolve(frame, cost), _resolve(frame, slo_metric)
    if label in frame.columns:
        names = frame[label].astype(str)
    else:
        names = pd.Series(frame.index.astype(str), index=frame.index)
    points = pd.DataFrame(
        {
            "name": names.to_numpy(),
            "cost": pd.to_numeric(frame[cost_col], errors="coerce").to_numpy(dtype=float),
            "latency": pd.to_numeric(frame[lat_col], errors="coerce").to_numpy(dtype=float),
        }
    )
    if points["name"].duplicated().any():
        points = points.groupby("name", sort=False, as_index=False)[["cost", "latency"]].mean()
    points = points[np.isfinite(points["cost"]) & np.isfinite(points["latency"])]
    front = pareto_front(points, "cost", "latency").to_numpy(dtype=bool)
    (axis,) = _axes(ax, (1, 1), (7.5, 5.0))
    rest = points[~front]
    best = points[front].sort_values(["latency", "cost"])
    axis.scatter(rest["latency"], rest["cost"], s=30, color="0.6", label="dominated", zorder=2)
    if len(best):
        axis.scatter(
            best["latency"],
            best["cost"],
            s=60,
            color="C0",
            edgecolor="black",
            label="Pareto frontier",
            zorder=3,
        )
        axis.plot(
            best["latency"], best["cost"], drawstyle="steps-post", color="C0", alpha=0.7, zorder=1
        )
    else:
        _message(axis, "no alternatives with both metrics")
    if slo is not None:
        axis.axvline(slo, color="C3", linestyle="--", linewidth=1.2, label=_slo_label(lat_col, slo))
    axis.set_xlabel(label_for(lat_col))
    axis.set_ylabel(label_for(cost_col))
    axis.set_title(title or "Cost vs latency: Pareto frontier (lower-left is better)")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    labels = [
        (str(row.name), float(row.latency), float(row.cost), True) for row in best.itertuples()
    ]
    if len(points) <= 15:
        labels += [
            (str(row.name), float(row.latency), float(row.cost), False) for row in rest.itertuples()
        ]
    # last: labels are placed on the figure as laid out, title, legend and SLO line included
    _place_labels(axis, labels, points[["latency", "cost"]].to_numpy(dtype=float))
    return _figure_of(axis)


#: Where a point's label may go, in points from the point (tried in order): beside it, then
#: further above or below it, on either side.
_LABEL_OFFSETS = tuple((dx, dy) for dy in (5, -13, 17, -25, 29, -37, 41, -49) for dx in (6, -6))


def _place_labels(
    axis: Axes, labels: Sequence[tuple[str, float, float, bool]], points: np.ndarray
) -> None:
    """Annotate points so that no two labels overlap, no label covers a point or leaves the axes.

    ``labels`` are ``(text, x, y, important)``: important ones (the frontier) first, in bold,
    each at the first offset of :data:`_LABEL_OFFSETS` that is clear (or, when none is, the one
    overlapping least); the others only where a clear offset exists, else they are left out.
    ``points`` are every point drawn (x, y), kept clear of labels, as is the legend. Positions are
    judged on the figure as laid out; the labels do not take part in the layout."""
    if not labels:
        return
    fig = _figure_of(axis)
    fig.draw_without_rendering()  # lay the figure out: label boxes measured where they are drawn
    to_display = axis.transData.transform
    marker = 5.0 * fig.dpi / 72.0  # half a marker's width, in pixels
    centres = to_display(points) if len(points) else np.zeros((0, 2))
    taken = [(x - marker, y - marker, x + marker, y + marker) for x, y in centres]
    legend = axis.get_legend()
    if legend is not None:
        drawn = legend.get_window_extent()
        taken.append((drawn.x0, drawn.y0, drawn.x1, drawn.y1))
    frame = axis.get_window_extent()
    inside = (frame.x0, frame.y0, frame.x1, frame.y1)  # labels stay within the axes
    for text, x, y, important in labels:
        clashes: list[tuple[float, tuple[int, int]]] = []
        for offset in _LABEL_OFFSETS:
            trial = _annotate(axis, text, (x, y), offset, important)
            box = trial.get_window_extent()
            trial.remove()
            corners = (box.x0, box.y0, box.x1, box.y1)
            outside = box.width * box.height - _overlap(corners, inside)
            clash = outside + sum(_overlap(corners, other) for other in taken)
            clashes.append((clash, offset))
            if clash == 0.0:
                break
        clash, offset = min(clashes, key=lambda pair: pair[0])
        if clash > 0.0 and not important:
            continue  # no clear place: left unlabelled rather than drawn over another
        box = _annotate(axis, text, (x, y), offset, important).get_window_extent()
        taken.append((box.x0, box.y0, box.x1, box.y1))


def _annotate(
    axis: Axes, text: str, xy: tuple[float, float], offset: tuple[int, int], important: bool
) -> Any:
    """A point's label ``offset`` points from it (bold for the frontier), outside the layout."""
    note = axis.annotate(
        text,
        xy,
        xytext=offset,
        textcoords="offset points",
        ha="left" if offset[0] > 0 else "right",
        fontsize=9 if important else 8,
        fontweight="bold" if important else "normal",
        color="black" if important else "0.45",
        annotation_clip=False,
    )
    note.set_in_layout(False)
    return note


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Area (pixels²) two boxes ``(x0, y0, x1, y1)`` share."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return width * height if width > 0 and height > 0 else 0.0


def tokens_per_gpu_vs_per_user(
    frame: pd.DataFrame,
    per_user: str = "output_tokens_per_s_per_user",
    per_gpu: str = "output_tokens_per_s_per_gpu",
    label: str = "alternative",
    *,
    order: str | None = None,
    passed: str | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Output tokens/s per GPU (y) against output tokens/s per user (x, 1 / TPOT): what a layout
    delivers per GPU bought against the speed each user sees, the trade-off aiconfigurator plots.

    One line per ``label`` value (a layout) through its rows, sorted by ``order`` (e.g. the
    offered rate; default: by tokens/s per user, fastest last); rows where ``passed`` is false
    are drawn hollow (the load failed a check). Upper right is better on both counts.
    """
    (axis,) = _axes(ax, (1, 1), (7.5, 5.0))
    data = frame.copy()
    for column in (per_user, per_gpu):
        data[column] = pd.to_numeric(data[column], errors="coerce")
    data = data[
        np.isfinite(data[per_user].to_numpy(float)) & np.isfinite(data[per_gpu].to_numpy(float))
    ]
    # sorted, as latency_vs_load sorts its lines, so a layout has one colour in both figures
    names = sorted(set(data[label].astype(str))) if label in data.columns else [""]
    for index, name in enumerate(names):
        group = data[data[label].astype(str) == name] if label in data.columns else data
        group = group.sort_values(order if order is not None else per_user)
        color = f"C{index % 10}"
        x = group[per_user].to_numpy(dtype=float)
        y = group[per_gpu].to_numpy(dtype=float)
        axis.plot(x, y, color=color, alpha=0.7, label=name or None)
        ok = group[passed].astype(bool).to_numpy() if passed else np.ones(len(group), dtype=bool)
        axis.scatter(x[ok], y[ok], s=30, color=color, zorder=3)
        axis.scatter(x[~ok], y[~ok], s=30, facecolors="white", edgecolors=color, zorder=3)
    if not len(data):
        _message(axis, "no loads with both figures")
    if passed and len(data) and not data[passed].astype(bool).all():
        axis.scatter([], [], s=30, facecolors="white", edgecolors="0.4", label="failed a check")
    axis.set_xlabel(label_for(per_user) if per_user in _LABELS else per_user)
    axis.set_ylabel(label_for(per_gpu) if per_gpu in _LABELS else per_gpu)
    axis.set_xlim(left=0)
    axis.set_ylim(bottom=0)
    axis.set_title(title or "Tokens/s per GPU vs tokens/s per user (upper right is better)")
    axis.grid(True, alpha=0.3)
    if len(names) > 1 or passed:
        legend_outside(axis, own_figure=ax is None)
    return _figure_of(axis)


# --------------------------------------------------------------------------- output


def to_png_bytes(fig: Figure, *, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes (e.g. to embed base64-encoded in an HTML report)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def save(fig: Figure, path: str | Path, *, dpi: int = DPI) -> Path:
    """Write the figure as a PNG at ``path`` atomically (temporary file, then rename)."""
    return outputs.write_bytes(Path(path), to_png_bytes(fig, dpi=dpi))
