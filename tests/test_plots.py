"""Tests of :mod:`cbsim.run.plots`: every figure builds from tiny runs and synthetic sweeps, draws what
it should on the expected axes, never mutates its inputs, and the frontier is exactly Pareto."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from cbsim.run import plots
from cbsim.run.results import Results
from cbsim.run.simulate import simulate
from tests.conftest import small_scenario

plt.switch_backend("Agg")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def spec_results() -> Results:
    return simulate(
        small_scenario(
            workload__num_requests=30,
            speculative={"enabled": True, "proposer": {"kind": "eagle"}},
            output={"timeseries_window_s": 0.5},
        )
    )


@pytest.fixture(scope="module")
def plain_results() -> Results:
    return simulate(small_scenario(workload__num_requests=30, output={"timeseries_window_s": 0.5}))


@pytest.fixture
def sweep() -> pd.DataFrame:
    rows = []
    rng = np.random.default_rng(7)
    for policy, factor in (("fixed", 1.3), ("goodput", 1.0)):
        for rate in (1.0, 2.0, 4.0, 8.0):
            for seed in range(3):
                rows.append(
                    {
                        "workload.arrival.rate": rate,
                        "seed": seed,
                        "speculative.policy.kind": policy,
                        "ttft_p99_s": factor * 0.1 * rate**1.5 * (1.0 + 0.2 * rng.random()),
                        "throughput_rps": rate * 0.98,
                    }
                )
    return pd.DataFrame(rows)


@pytest.fixture
def alternatives() -> pd.DataFrame:
    # B dominates E; G duplicates B exactly (both stay on the front); H lacks a latency.
    return pd.DataFrame(
        {
            "alternative": ["A", "B", "C", "D", "E", "F", "G", "H"],
            "cost_per_million_output_tokens": [1.0, 2.0, 3.0, 1.5, 2.5, 4.0, 2.0, 0.5],
            "ttft_p99_s": [5.0, 3.0, 1.0, 4.0, 3.5, 0.9, 3.0, np.nan],
        }
    )


Snapshot = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any]]


def snapshot(results: Results) -> Snapshot:
    return (
        results.requests.copy(deep=True),
        results.iterations.copy(deep=True),
        results.timeseries.copy(deep=True),
        dict(results.summary),
    )


def assert_unchanged(results: Results, before: Snapshot) -> None:
    requests, iterations, ts, summary = before
    pd.testing.assert_frame_equal(results.requests, requests)
    pd.testing.assert_frame_equal(results.iterations, iterations)
    pd.testing.assert_frame_equal(results.timeseries, ts)
    assert results.summary.keys() == summary.keys()


def texts(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def xdata(line: Line2D) -> np.ndarray:
    return np.asarray(line.get_xdata(), dtype=float)


def ydata(line: Line2D) -> np.ndarray:
    return np.asarray(line.get_ydata(), dtype=float)


def label(artist: Artist) -> str:
    return str(artist.get_label())


def drawn_lines(ax: Axes) -> list[Line2D]:
    return [line for line in ax.get_lines() if len(xdata(line))]


# --------------------------------------------------------------------------- time series


def test_throughput_and_queue(spec_results: Results) -> None:
    before = snapshot(spec_results)
    fig = plots.throughput_and_queue(spec_results)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2
    left, right = fig.axes
    assert drawn_lines(left) and drawn_lines(right)
    assert "tokens/s" in left.get_ylabel()
    assert "waiting" in right.get_ylabel()
    assert left.get_xlabel() == "time (s)"
    assert left.get_title()
    # steps: one point per window plus the end of the last window
    assert len(xdata(left.get_lines()[0])) == len(spec_results.timeseries) + 1
    assert_unchanged(spec_results, before)


def test_throughput_and_queue_from_frame_on_given_axes(spec_results: Results) -> None:
    fig, ax = plt.subplots()
    out = plots.throughput_and_queue(spec_results.timeseries, ax=ax)
    assert out is fig
    assert len(fig.axes) == 2


def test_batch_kv_k_over_time(spec_results: Results, plain_results: Results) -> None:
    before = snapshot(spec_results)
    fig = plots.batch_kv_k_over_time(spec_results)
    assert len(fig.axes) == 3
    for ax in fig.axes:
        assert drawn_lines(ax)
        assert ax.get_ylabel() and ax.get_title()
    assert "%" in fig.axes[1].get_ylabel()
    assert not any("no speculation" in t for t in texts(fig))
    assert_unchanged(spec_results, before)
    # a run without drafts has no k to show: its panel is left out, not drawn empty
    plain = plots.batch_kv_k_over_time(plain_results)
    assert len(plain.axes) == 2
    assert [ax.get_title() for ax in plain.axes] == ["Mean batch size", "KV cache utilisation"]
    assert plain.axes[1].get_xlabel() == "time (s)"
    assert not texts(plain)
    fig, axes = plt.subplots(3, 1)  # three axes given: the third is hidden
    plots.batch_kv_k_over_time(plain_results, axes=axes)
    assert [ax.get_visible() for ax in axes] == [True, True, False]


def test_draws_on_given_axes(spec_results: Results) -> None:
    fig, axes = plt.subplots(3, 1)  # a numpy array of axes works as well as a list
    assert plots.batch_kv_k_over_time(spec_results, axes=axes) is fig
    fig, axes = plt.subplots(1, 3)
    assert plots.latency_cdfs(spec_results, axes=list(axes)) is fig
    assert all(drawn_lines(ax) for ax in axes)


def test_wrong_number_of_axes_is_an_error(spec_results: Results) -> None:
    _, axes = plt.subplots(1, 2)
    with pytest.raises(ValueError, match="expected 3 axes"):
        plots.batch_kv_k_over_time(spec_results, axes=list(axes))


# --------------------------------------------------------------------------- latency


def test_latency_cdfs_single_run(spec_results: Results) -> None:
    before = snapshot(spec_results)
    fig = plots.latency_cdfs(spec_results)
    assert len(fig.axes) == 3
    finished = spec_results.requests[spec_results.requests["status"] == "finished"]
    for ax, column in zip(fig.axes, ("ttft_s", "tpot_s", "e2e_s"), strict=True):
        (line,) = drawn_lines(ax)
        assert len(xdata(line)) == finished[column].notna().sum()
        assert np.all(np.diff(xdata(line)) >= 0)
        assert ydata(line)[-1] == pytest.approx(1.0)
        assert ax.get_ylabel() == "fraction of requests"
        assert ("(ms)" if column == "tpot_s" else "(s)") in ax.get_xlabel()
    # the default SLO (2 s, 0.1 s) lies far beyond these tiny latencies: named at the edge
    assert any("SLO 2 s" in t for t in texts(fig))
    assert_unchanged(spec_results, before)


def test_latency_cdfs_slo_lines_and_comparison(
    spec_results: Results, plain_results: Results
) -> None:
    ttft = float(spec_results.requests["ttft_s"].median())
    fig = plots.latency_cdfs(
        [("eagle", spec_results), ("plain", plain_results)], slo={"ttft_s": ttft}
    )
    assert len(fig.axes) == 3
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels[:2] == ["eagle", "plain"]
    assert f"SLO {ttft:g} s" in labels
    slo_line = [line for line in fig.axes[0].get_lines() if label(line).startswith("SLO")]
    assert xdata(slo_line[0])[0] == pytest.approx(ttft)
    for ax in fig.axes:
        assert len(drawn_lines(ax)) >= 2


def test_latency_cdfs_log_scale_for_wide_ranges() -> None:
    requests = pd.DataFrame(
        {
            "ttft_s": [0.01, 0.05, 0.3, 2.0, 9.0],
            "tpot_s": [0.02, 0.021, 0.022, np.nan, 0.025],
            "e2e_s": [1.0, 2.0, 3.0, 4.0, 50.0],
            "status": ["finished"] * 4 + ["running"],
        }
    )
    copy = requests.copy(deep=True)
    fig = plots.latency_cdfs(requests)
    assert [ax.get_xscale() for ax in fig.axes] == ["log", "linear", "linear"]
    # the running request is left out, and so is the NaN TPOT
    assert len(xdata(drawn_lines(fig.axes[0])[0])) == 4
    assert len(xdata(drawn_lines(fig.axes[1])[0])) == 3
    pd.testing.assert_frame_equal(requests, copy)
    forced = plots.latency_cdfs(requests, log_x=False)
    assert {ax.get_xscale() for ax in forced.axes} == {"linear"}


# --------------------------------------------------------------------------- speculation


def test_acceptance_per_request(spec_results: Results) -> None:
    before = snapshot(spec_results)
    fig = plots.acceptance_per_request(spec_results)
    assert len(fig.axes) == 2
    hist_ax, scatter_ax = fig.axes
    requests = spec_results.requests
    speculated = requests[requests["drafted_tokens"] > 0]
    assert len(speculated) > 0
    assert sum(p.get_height() for p in hist_ax.patches if isinstance(p, Rectangle)) == len(
        speculated
    )
    (points,) = [c for c in scatter_ax.collections if isinstance(c, PathCollection)]
    offsets = np.asarray(points.get_offsets())
    rate = (speculated["accepted_tokens"] / speculated["drafted_tokens"]).to_numpy()
    np.testing.assert_allclose(np.sort(offsets[:, 1]), np.sort(rate))
    assert np.all((offsets[:, 1] >= 0) & (offsets[:, 1] <= 1))
    assert "accepted / drafted" in hist_ax.get_xlabel()
    assert not texts(fig)
    assert_unchanged(spec_results, before)


def test_acceptance_per_request_without_speculation(plain_results: Results) -> None:
    fig = plots.acceptance_per_request(plain_results)
    assert len(fig.axes) == 2
    assert all("no speculation" in " ".join(t.get_text() for t in ax.texts) for ax in fig.axes)
    assert not any(ax.collections or ax.patches for ax in fig.axes)


# --------------------------------------------------------------------------- sweeps


def test_latency_vs_load_groups_mean_and_band(sweep: pd.DataFrame) -> None:
    copy = sweep.copy(deep=True)
    fig = plots.latency_vs_load(sweep, x="rate", hue="policy.kind", slo=1.5)
    assert len(fig.axes) == 1
    (ax,) = fig.axes
    means = {label(line): line for line in ax.get_lines() if not label(line).startswith("SLO")}
    expected = sweep.groupby(["speculative.policy.kind", "workload.arrival.rate"])[
        "ttft_p99_s"
    ].mean()
    for policy in ("fixed", "goodput"):
        line = means[f"policy={policy}"]  # key=value, with the key's short name
        np.testing.assert_allclose(xdata(line), [1.0, 2.0, 4.0, 8.0])
        np.testing.assert_allclose(ydata(line), expected[policy].to_numpy())
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    slo_lines = [line for line in ax.get_lines() if label(line) == "SLO 1.5 s"]
    assert slo_lines and ydata(slo_lines[0])[0] == pytest.approx(1.5)
    assert ax.get_xlabel() == "arrival rate (req/s)"
    assert ax.get_ylabel() == "TTFT p99 (s)"
    pd.testing.assert_frame_equal(sweep, copy)


def test_latency_vs_load_without_hue_and_bad_columns(sweep: pd.DataFrame) -> None:
    fig = plots.latency_vs_load(sweep, y="throughput_rps")
    (ax,) = fig.axes
    assert len(drawn_lines(ax)) == 1
    assert ax.get_ylabel() == "throughput (req/s)"
    with pytest.raises(KeyError, match="no column"):
        plots.latency_vs_load(sweep, y="nope_s")
    ambiguous = sweep.assign(**{"cluster.rate": 1.0})
    with pytest.raises(KeyError, match="ambiguous"):
        plots.latency_vs_load(ambiguous, x="rate")
    with pytest.raises(TypeError, match="numeric"):
        plots.latency_vs_load(sweep, x="speculative.policy.kind")


def test_pareto_front_is_exact(alternatives: pd.DataFrame) -> None:
    copy = alternatives.copy(deep=True)
    mask = plots.pareto_front(alternatives, "cost_per_million_output_tokens", "ttft_p99_s")
    assert mask.index.equals(alternatives.index)
    assert alternatives.loc[mask, "alternative"].tolist() == ["A", "B", "C", "D", "F", "G"]
    # brute force: on the front iff no other row is as good in both and better in one
    c = alternatives["cost_per_million_output_tokens"].to_numpy()
    lat = alternatives["ttft_p99_s"].to_numpy()
    for i in range(len(c)):
        if np.isnan(lat[i]):
            assert not mask.iloc[i]
            continue
        dominated = any(
            c[j] <= c[i] and lat[j] <= lat[i] and (c[j] < c[i] or lat[j] < lat[i])
            for j in range(len(c))
            if not np.isnan(lat[j])
        )
        assert mask.iloc[i] == (not dominated)
    pd.testing.assert_frame_equal(alternatives, copy)


def test_cost_vs_slo_frontier_highlights_and_labels(alternatives: pd.DataFrame) -> None:
    frame = alternatives[alternatives["alternative"] != "G"]
    copy = frame.copy(deep=True)
    fig = plots.cost_vs_slo_frontier(frame, slo=2.0)
    assert len(fig.axes) == 1
    (ax,) = fig.axes
    scatters = {label(c): c for c in ax.collections if isinstance(c, PathCollection)}
    front = np.asarray(scatters["Pareto frontier"].get_offsets())
    expected = {("A", 5.0, 1.0), ("B", 3.0, 2.0), ("C", 1.0, 3.0), ("D", 4.0, 1.5), ("F", 0.9, 4.0)}
    assert {(float(x), float(y)) for x, y in front} == {(x, y) for _, x, y in expected}
    dominated = np.asarray(scatters["dominated"].get_offsets())
    assert [(float(x), float(y)) for x, y in dominated] == [(3.5, 2.5)]
    bold = {t.get_text() for t in ax.texts if t.get_fontweight() == "bold"}
    assert bold == {"A", "B", "C", "D", "F"}
    assert any(label(line) == "SLO 2 s" for line in ax.get_lines())
    assert ax.get_xlabel() == "TTFT p99 (s)"
    assert "$" in ax.get_ylabel()
    pd.testing.assert_frame_equal(frame, copy)


def test_cost_vs_slo_frontier_averages_repeated_labels() -> None:
    frame = pd.DataFrame(
        {
            "alternative": ["x", "x", "y", "y"],
            "seed": [0, 1, 0, 1],
            "cost": [1.0, 3.0, 1.0, 1.0],
            "p99": [1.0, 1.0, 2.0, 2.0],
        }
    )
    fig = plots.cost_vs_slo_frontier(frame, cost="cost", slo_metric="p99")
    (ax,) = fig.axes
    scatters = {label(c): c for c in ax.collections if isinstance(c, PathCollection)}
    front = sorted(
        tuple(map(float, p)) for p in np.asarray(scatters["Pareto frontier"].get_offsets())
    )
    assert front == [(1.0, 2.0), (2.0, 1.0)]  # x: mean cost 2 at p99 1; y: cost 1 at p99 2


# --------------------------------------------------------------------------- output


def test_png_bytes_and_atomic_save(spec_results: Results, tmp_path: Path) -> None:
    fig = plots.throughput_and_queue(spec_results)
    data = plots.to_png_bytes(fig)
    assert data.startswith(PNG_SIGNATURE)
    target = tmp_path / "figs" / "throughput.png"
    assert plots.save(fig, target) == target
    assert target.read_bytes().startswith(PNG_SIGNATURE)
    assert [p.name for p in target.parent.iterdir()] == ["throughput.png"]
    plots.save(fig, target)  # overwrites in place
    assert [p.name for p in target.parent.iterdir()] == ["throughput.png"]


def test_every_figure_renders(spec_results: Results, sweep: pd.DataFrame) -> None:
    figures = [
        plots.throughput_and_queue(spec_results),
        plots.latency_cdfs(spec_results),
        plots.batch_kv_k_over_time(spec_results),
        plots.acceptance_per_request(spec_results),
        plots.latency_vs_load(sweep, hue="policy.kind"),
    ]
    for fig in figures:
        assert plots.to_png_bytes(fig).startswith(PNG_SIGNATURE)


def test_label_for_units() -> None:
    assert plots.label_for("ttft_p99_s") == "TTFT p99 (s)"
    assert plots.label_for("e2e_mean_s") == "E2E latency mean (s)"
    assert plots.label_for("draft_time_s") == "draft time (s)"
    assert plots.label_for("kv_bytes") == "kv (bytes)"
    assert plots.label_for("rate") == "arrival rate (req/s)"


def test_import_does_not_load_pyplot() -> None:
    code = "import sys, cbsim.run.plots; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------- readability


def _overlapping(boxes: list[Any]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i in range(len(boxes))
        for j in range(i + 1, len(boxes))
        if boxes[i].overlaps(boxes[j])
    ]


def test_last_window_is_drawn_to_the_end_of_the_run(plain_results: Results) -> None:
    ts = plain_results.timeseries
    fig = plots.throughput_and_queue(plain_results)
    line = fig.axes[0].get_lines()[0]
    end = float(ts["t_s"].iloc[-1] + ts["span_s"].iloc[-1])
    assert xdata(line)[-1] == pytest.approx(end)
    assert ts["span_s"].iloc[-1] < 0.5  # the run ends inside its last window
    assert fig.axes[0].get_xlim()[1] == pytest.approx(end)


@pytest.mark.parametrize("low, high", [(0.0025, 0.0125), (0.008, 0.0105), (0.015, 0.05)])
def test_tpot_tick_labels_do_not_collide(low: float, high: float) -> None:
    """TPOT of a few milliseconds on a linear axis (what a speculative run shows): the labels
    used to run together (0.00250.00500.0075...)."""
    tpot = np.linspace(low, high, 200)
    requests = pd.DataFrame(
        {
            "ttft_s": np.linspace(0.01, 0.05, 200),
            "tpot_s": tpot,
            "e2e_s": np.linspace(0.5, 3.0, 200),
            "status": ["finished"] * 200,
        }
    )
    fig = plots.latency_cdfs(requests, slo={"tpot_s": 0.02})
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text() and t.get_visible()]
        left, right = ax.get_xlim()
        shown = [t for t in labels if left <= t.get_position()[0] <= right]
        boxes = [t.get_window_extent(renderer) for t in shown]
        assert len(boxes) >= 3
        assert not _overlapping(boxes), [t.get_text() for t in shown]
    tpot_axis = fig.axes[1]
    assert tpot_axis.get_xlabel() == "time per output token (ms)"
    assert xdata(drawn_lines(tpot_axis)[0]).max() == pytest.approx(1e3 * high)


def test_point_labels_name_their_keys() -> None:
    keys = ["cluster.gpu", "cluster.tp", "speculative.enabled", "scheduler.kind"]
    values = {
        "cluster.gpu": "h100-sxm",
        "cluster.tp": 4,
        "speculative.enabled": False,
        "scheduler.kind": "sarathi",
    }
    assert plots.point_label(values, keys) == (
        "gpu=h100-sxm, tp=4, speculative=False, scheduler=sarathi"
    )
    # two keys with the same short name keep their full names
    assert plots.short_keys(["cluster.model", "speculative.proposer.model"]) == {
        "cluster.model": "cluster.model",
        "speculative.proposer.model": "speculative.proposer.model",
    }


def test_frontier_labels_never_overlap() -> None:
    """Eight layouts in two tight clusters (the same cost, TPOTs a hair apart): every frontier
    point is labelled, no two labels overlap, no label covers a point or leaves the axes."""
    names = [f"gpu={g}, tp={t}, speculative={sp}" for g in ("h100-sxm", "h200") for t in (4, 8)
             for sp in (False, True)]  # fmt: skip
    frame = pd.DataFrame(
        {
            "alternative": names,
            "cost_per_million_output_tokens": [1.0, 1.0, 1.002, 1.002, 2.0, 2.0, 2.003, 2.003],
            "tpot_p99_s": [0.030, 0.0302, 0.0299, 0.0301, 0.020, 0.0201, 0.0199, 0.0202],
        }
    )
    fig = plots.cost_vs_slo_frontier(frame, slo_metric="tpot_p99_s", slo=0.05)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    (ax,) = fig.axes
    front = frame.loc[
        plots.pareto_front(frame, "cost_per_million_output_tokens", "tpot_p99_s"), "alternative"
    ]
    labels = ax.texts
    assert {t.get_text() for t in labels if t.get_fontweight() == "bold"} == set(front)
    boxes = [t.get_window_extent(renderer) for t in labels]
    assert not _overlapping(boxes), [t.get_text() for t in labels]
    frame_box = ax.get_window_extent(renderer)
    for box in boxes:
        assert frame_box.x0 <= box.x0 and box.x1 <= frame_box.x1
        assert frame_box.y0 <= box.y0 and box.y1 <= frame_box.y1
    points = ax.transData.transform(frame[["tpot_p99_s", "cost_per_million_output_tokens"]])
    for x, y in points:
        assert not any(box.contains(x, y) for box in boxes)


def test_tokens_per_gpu_vs_per_user() -> None:
    frame = pd.DataFrame(
        {
            "alternative": ["a", "a", "a", "b", "b"],
            "offered_rate_rps": [1.0, 4.0, 2.0, 1.0, 2.0],
            "passed": [True, False, True, True, True],
            "output_tokens_per_s_per_gpu": [100.0, 400.0, 200.0, 50.0, 100.0],
            "output_tokens_per_s_per_user": [90.0, 20.0, 70.0, 120.0, 110.0],
        }
    )
    copy = frame.copy(deep=True)
    fig = plots.tokens_per_gpu_vs_per_user(frame, order="offered_rate_rps", passed="passed")
    (ax,) = fig.axes
    lines = {label(line): line for line in ax.get_lines()}
    np.testing.assert_allclose(xdata(lines["a"]), [90.0, 70.0, 20.0])  # by offered rate
    np.testing.assert_allclose(ydata(lines["a"]), [100.0, 200.0, 400.0])
    assert "per GPU" in ax.get_ylabel() and "per user" in ax.get_xlabel()
    hollow = [  # white inside: the load failed a check
        c
        for c in ax.collections
        if isinstance(c, PathCollection)
        and len(c.get_offsets())
        and np.allclose(c.get_facecolor()[0][:3], 1.0)
    ]
    assert [tuple(map(float, c.get_offsets()[0])) for c in hollow] == [(20.0, 400.0)]
    pd.testing.assert_frame_equal(frame, copy)
