"""What a reader sees first in a report, and figures that read at a glance (issue 37).

* Every report opens with its verdict: a run's SLO result (never "met" when unstable) with the
  share of requests within it, a sweep's points meeting the SLO and the highest load that did, a
  capacity plan's verdict line.
* An autoscaled run's overview gives the replicas it served with (mean and most), not the
  ``max_replicas`` it was built with; its replicas against the offered load are a chart, in
  hours for a long run (a day reads 0 to 24), not a table keyed by seconds.
* Speculative runs show ITL per streamed chunk (vLLM's ITL) beside ITL per token.
* ``--out x.pdf`` is refused (exit 2, naming .html) instead of filling a .pdf with HTML.
* Legends of multi-line figures sit outside the plot.

Inputs are tiny (tens of requests, a two-point sweep) or synthetic frames.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from cbsim.cli.terminal import itl_rows
from cbsim.outputs.fleet_plot import replicas_and_load
from cbsim.outputs.time_axis import time_axis
from cbsim.run import plots
from cbsim.run.results import Results
from cbsim.run.simulate import simulate
from cbsim.studies.report import (
    Facts,
    Image,
    Table,
    capacity_report,
    report_command,
    run_report,
    sweep_report,
    write_report,
)
from cbsim.studies.sweep.runner import run_sweep
from tests.conftest import small_scenario
from tests.test_autoscale import PEAK_THEN_IDLE
from tests.test_autoscale import scenario as autoscaled_scenario
from tests.test_report import infeasible_plan

plt.switch_backend("Agg")

DAY_S = 86_400.0


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def autoscaled() -> Results:
    data = autoscaled_scenario(PEAK_THEN_IDLE)
    data["slo"] = {"ttft_s": 2.0, "tpot_s": 0.1}
    return simulate(data)


def _facts(block: object) -> dict[str, str]:
    assert isinstance(block, Facts), block
    return dict(block.items)


def day_timeseries(window_s: float = 300.0) -> pd.DataFrame:
    """A day of timeseries windows: replicas and arrivals following a daily curve."""
    t = np.arange(0.0, DAY_S, window_s)
    rate = 2.0 + 1.5 * np.sin(2 * np.pi * (t / DAY_S - 0.4))
    return pd.DataFrame(
        {
            "t_s": t,
            "span_s": window_s,
            "replicas": np.ceil(rate / 1.2),
            "arrivals": rate * window_s,
            "output_tokens_per_s": rate * 1000.0,
            "waiting": np.zeros_like(t),
        }
    )


# --------------------------------------------------------------------------- run report


def test_run_report_opens_with_its_verdict(autoscaled: Results) -> None:
    report = run_report(autoscaled)
    first = report.sections[0]
    assert first.title == "Verdict"
    facts = _facts(first.blocks[0])
    assert facts["verdict"] in ("every SLO target met at p99",) or facts["verdict"].startswith(
        ("SLO missed", "SLO not met")
    )
    assert facts["SLO attainment"].endswith("of requests met every target")
    table = first.blocks[1]
    assert isinstance(table, Table) and [row[0] for row in table.rows] == ["TTFT p99", "TPOT p99"]
    assert [s.title for s in report.sections][1] == "Overview"


def test_verdict_never_reads_met_for_an_unstable_run(autoscaled: Results) -> None:
    summary = {**autoscaled.summary, "stable": False, "offered_rps": 9.0, "served_rps": 3.0}
    results = Results(
        scenario=autoscaled.scenario,
        requests=autoscaled.requests,
        iterations=autoscaled.iterations,
        timeseries=autoscaled.timeseries,
        summary=summary,
        run_info=autoscaled.run_info,
    )
    facts = _facts(run_report(results).sections[0].blocks[0])
    assert facts["verdict"].startswith("SLO not met: the run was unstable")


def test_autoscaled_overview_gives_the_mean_fleet_not_max_replicas(autoscaled: Results) -> None:
    summary = autoscaled.summary
    assert summary["replicas_mean"] < summary["replicas_max"] <= 4
    report = run_report(autoscaled)
    overview = _facts(next(s for s in report.sections if s.title == "Overview").blocks[0])
    fleet = (
        f"autoscaled 1–4 replicas: {summary['replicas_mean']:.2f} serving on average, "
        f"{summary['replicas_max']} at most"
    )
    assert fleet in overview["cluster"]
    assert "4 replicas" not in overview["cluster"].replace("1–4 replicas", "")
    assert _facts(report.sections[0].blocks[0])["fleet"] == fleet


def test_autoscaling_section_is_a_chart_not_a_table_keyed_by_seconds(autoscaled: Results) -> None:
    section = next(s for s in run_report(autoscaled).sections if s.title == "Autoscaling")
    assert not any(isinstance(b, Table) for b in section.blocks)
    images = [b for b in section.blocks if isinstance(b, Image)]
    assert [i.name for i in images] == ["replicas-and-load"]
    assert "scale-down window 0 s" in _facts(section.blocks[0])["autoscaler"]


def test_a_day_is_drawn_in_hours_from_0_to_24() -> None:
    fig = replicas_and_load(day_timeseries())
    left = fig.axes[0]
    assert left.get_xlabel() == "time (h from the start)"
    assert left.get_xlim() == pytest.approx((0.0, 24.0))
    ticks = [t for t in left.get_xticks() if 0 <= t <= 24]
    assert ticks == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24]
    # the run report's other time series of a day too
    queue = plots.throughput_and_queue(day_timeseries())
    assert queue.axes[0].get_xlabel() == "time (h from the start)"
    assert queue.axes[0].get_xlim()[1] == pytest.approx(24.0)


def test_short_runs_keep_seconds() -> None:
    assert time_axis(2 * 3600.0).label == "time (s)"
    assert time_axis(None).label == "time (s)"
    assert time_axis(3 * 3600.0).seconds_per_unit == 3600.0
    fig = replicas_and_load(day_timeseries(60.0).iloc[:30])
    assert fig.axes[0].get_xlabel() == "time (s)"


def test_fleet_legend_is_below_the_plot() -> None:
    fig = replicas_and_load(day_timeseries())
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert legend.y1 <= fig.axes[0].get_window_extent().y0


# --------------------------------------------------------------------------- ITL per chunk


def test_speculative_runs_show_itl_per_chunk_first() -> None:
    spec = {"itl_p50_s": 0.0, "itl_chunk_p50_s": 0.0128}
    assert itl_rows(spec, True) == [
        ("ITL per chunk p50 / p90 / p99 (vLLM's ITL)", "itl_chunk"),
        ("ITL per token p50 / p90 / p99", "itl"),
    ]
    assert itl_rows(spec, False) == [("ITL p50 / p90 / p99", "itl")]
    assert itl_rows({"itl_p50_s": 0.0}, True) == [("ITL p50 / p90 / p99", "itl")]  # old summary


def test_run_report_latency_table_has_itl_per_chunk_when_speculating() -> None:
    spec = simulate(
        small_scenario(
            workload__num_requests=20, speculative={"enabled": True, "proposer": {"kind": "eagle"}}
        )
    )
    summary = next(s for s in run_report(spec).sections if s.title == "Summary")
    table = summary.blocks[1]
    assert isinstance(table, Table)
    rows = {row[0]: row for row in table.rows}
    assert "ITL per chunk (vLLM's ITL)" in rows and "ITL per token" in rows
    assert float(rows["ITL per chunk (vLLM's ITL)"][1]) > 0.0  # its p50 in ms, never 0


def test_terminal_prints_itl_per_chunk_for_a_speculative_run(tmp_path: Path) -> None:
    import yaml

    from cbsim.cli.commands import cli

    path = tmp_path / "spec.yaml"
    data = small_scenario(
        workload__num_requests=20, speculative={"enabled": True, "proposer": {"kind": "eagle"}}
    )
    path.write_text(yaml.safe_dump(data))
    runner = CliRunner(env={"COLUMNS": "160"})  # a terminal wide enough for the labels
    result = runner.invoke(cli, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "ITL per chunk p50 / p90 / p99 (vLLM's ITL)" in result.output
    assert "ITL per token p50 / p90 / p99" in result.output


# --------------------------------------------------------------------------- sweep and capacity


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("verdicts") / "sweep"
    base = small_scenario(workload__num_requests=20, slo={"ttft_s": 0.5, "tpot_s": 0.05})
    run_sweep(
        {"name": "two", "base": base, "grid": {"workload.arrival.rate": [2.0, 2000.0]}},
        out=out,
        workers=1,
    )
    return out


def test_sweep_report_opens_with_its_verdict(sweep_dir: Path) -> None:
    frame = pd.read_parquet(sweep_dir / "sweep.parquet")
    report = sweep_report(frame, directory=sweep_dir)
    assert report.sections[0].title == "Verdict"
    facts = _facts(report.sections[0].blocks[0])
    assert facts["verdict"] == "1 of 2 points met every SLO target at p99"
    assert facts["highest rate meeting it"] == "2"


def test_sweep_without_slo_says_so() -> None:
    frame = pd.DataFrame({"workload.arrival.rate": [1.0, 2.0], "seed": [1, 1], "key": ["a", "b"]})
    facts = _facts(sweep_report(frame).sections[0].blocks[0])
    assert facts["verdict"].startswith("no SLO targets")


def test_capacity_report_opens_with_a_verdict() -> None:
    report = capacity_report(infeasible_plan())
    assert report.sections[0].title == "Recommendation"
    block = report.sections[0].blocks[0]
    assert isinstance(block, Facts)
    assert block.items[0] == ("verdict", "SLO not met by any alternative searched")


def test_wide_tables_scroll_in_their_own_box_and_headers_may_wrap(sweep_dir: Path) -> None:
    from cbsim.studies.report import render_html

    frame = pd.read_parquet(sweep_dir / "sweep.parquet")
    html = render_html(sweep_report(frame, directory=sweep_dir))
    assert '<div class="table-wrap wide">' in html  # the points table: many columns
    assert "<th>workload.<wbr>arrival.<wbr>rate</th>" in html
    assert "<th>ttft_<wbr>p99_<wbr>s</th>" in html
    assert ".table-wrap.wide { max-height: 75vh;" in html and "position: sticky" in html


# --------------------------------------------------------------------------- PDF


def test_pdf_out_is_refused_naming_html(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(pd.Series(infeasible_plan()).to_json(), encoding="utf-8")
    out = tmp_path / "x.pdf"
    result = CliRunner().invoke(report_command, [str(plan), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "not PDF" in result.output and "x.html" in result.output
    assert "Traceback" not in result.output
    assert not out.exists()
    from cbsim.common.errors import CbsimError

    with pytest.raises(CbsimError, match="not PDF"):
        write_report(plan, out, fmt="html")  # an explicit format does not make it a PDF


# --------------------------------------------------------------------------- legends


def test_legend_of_lines_against_load_is_beside_the_plot() -> None:
    frame = pd.DataFrame(
        {
            "rate": [1.0, 2.0, 4.0, 1.0, 2.0, 4.0],
            "ttft_p99_s": [0.1, 0.2, 0.9, 0.15, 0.3, 1.2],
            "policy": ["a", "a", "a", "b", "b", "b"],
        }
    )
    fig = plots.latency_vs_load(frame, x="rate", y="ttft_p99_s", hue="policy", slo=1.0)
    fig.canvas.draw()
    axis = fig.axes[0]
    assert axis.get_legend() is None and len(fig.legends) == 1
    legend = fig.legends[0].get_window_extent()
    assert legend.x0 >= axis.get_window_extent().x1  # outside, right of the curves
    # long labels (several overrides per line): below the plot, which keeps its width
    frame["policy"] = frame["policy"].map(lambda p: f"max_batch_size=64, max_batched_tokens={p}")
    fig = plots.latency_vs_load(frame, x="rate", y="ttft_p99_s", hue="policy", hue_is_label=True)
    fig.canvas.draw()
    axis = fig.axes[0]
    legend = fig.legends[0].get_window_extent()
    assert legend.y1 <= axis.get_window_extent().y0
    assert axis.get_window_extent().width > 0.8 * fig.bbox.width


def test_overlaid_cdfs_share_one_legend_below_the_panels() -> None:
    runs = [
        (f"run {i}", pd.DataFrame({"status": ["finished"] * 50, "ttft_s": np.linspace(0.1, 1, 50) * (i + 1),
                                  "tpot_s": np.linspace(0.01, 0.05, 50), "e2e_s": np.linspace(1, 5, 50)}))
        for i in range(3)
    ]  # fmt: skip
    fig = plots.latency_cdfs(runs)
    fig.canvas.draw()
    assert len(fig.legends) == 1
    legend = fig.legends[0].get_window_extent()
    assert all(legend.y1 <= panel.get_window_extent().y0 for panel in fig.axes)
    assert all(panel.get_legend() is None for panel in fig.axes)  # no SLO here: nothing inside
    # eight points named by three overrides each: the legend still fits inside the figure
    long = [(f"rate={r}, max_batch_size={b}, max_batched_tokens={t}", frame)
            for r in (2.0, 8.0) for b in (8, 64) for t in (2048, 8192)
            for frame in [runs[0][1]]]  # fmt: skip
    fig = plots.latency_cdfs(long)
    fig.canvas.draw()
    legend = fig.legends[0].get_window_extent()
    assert legend.x0 >= 0 and legend.x1 <= fig.bbox.width
