"""Fitting engine profiles to end-to-end benchmarks: exact re-pricing, the command, its errors."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cbsim.cli.commands import cli
from cbsim.cost.engine_profile import (
    Frontend,
    StepOverhead,
    load_engine_profile,
    read_engine_profile,
)
from cbsim.run.simulate import simulate
from cbsim.studies.calibration import e2e
from cbsim.studies.calibration.benchmarks import read_benchmarks

DATA = Path(__file__).parent / "data" / "e2e" / "trtllm_llama8b.csv"


@pytest.fixture(scope="module")
def rows():
    frame = read_benchmarks([DATA])
    usable, skipped = e2e.usable(frame)
    assert skipped.empty
    return usable


@pytest.mark.parametrize("overlap", [True, False])
def test_a_recorded_sequence_prices_any_overhead_exactly(
    rows, overlap: bool, tmp_path: Path
) -> None:
    """In a closed loop without think time, which requests run in which step does not depend on
    how long steps take: re-pricing the bare-kernel sequence equals simulating with overhead."""
    base = load_engine_profile("tensorrt-llm")
    overhead = StepOverhead(
        cpu_s=3e-3, cpu_per_request_s=4e-5, cpu_per_token_s=1e-6, overlap=overlap, serial_s=2e-4
    )
    files = e2e.ProfileFiles(tmp_path)
    sequences = e2e.record_sequences(rows, base, files)
    ttft, tpot = e2e.SequenceSet.of(sequences).price(overhead, Frontend())
    profile = base.model_copy(update={"overhead": overhead, "frontend": Frontend()})
    for i, (_, row) in enumerate(rows.iterrows()):
        summary = simulate(e2e.benchmark_scenario(row, files.path(profile))).summary
        assert ttft[i] == pytest.approx(summary["ttft_mean_s"], rel=1e-9)
        assert tpot[i] == pytest.approx(summary["tpot_mean_s"], rel=1e-9)


def test_fit_recovers_a_known_overhead(rows, tmp_path: Path) -> None:
    """Benchmarks made by cbsim itself with a known overhead are fitted back to it."""
    base = load_engine_profile("tensorrt-llm")
    truth = StepOverhead(cpu_s=4e-3, cpu_per_request_s=5e-5, overlap=False)
    profile = base.model_copy(update={"overhead": truth, "frontend": Frontend()})
    files = e2e.ProfileFiles(tmp_path)
    made = rows.copy()
    for i, (_, row) in enumerate(rows.iterrows()):
        summary = simulate(e2e.benchmark_scenario(row, files.path(profile))).summary
        made.loc[made.index[i], "ttft_mean_s"] = summary["ttft_mean_s"]
        made.loc[made.index[i], "tpot_mean_s"] = summary["tpot_mean_s"]
    sequences = e2e.SequenceSet.of(e2e.record_sequences(made, base, files))
    fit = e2e.fit_engine_terms(
        sequences, made["ttft_mean_s"].to_numpy(), made["tpot_mean_s"].to_numpy(), overlap=False
    )
    ttft, tpot = sequences.price(fit.overhead, fit.frontend)
    np.testing.assert_allclose(tpot, made["tpot_mean_s"], rtol=0.02)
    np.testing.assert_allclose(ttft, made["ttft_mean_s"], rtol=0.05)


def test_calibrate_e2e_writes_a_usable_profile(tmp_path: Path) -> None:
    out = tmp_path / "mine.json"
    result = CliRunner().invoke(
        cli,
        ["calibrate", "e2e", "--engine", "tensorrt-llm", "--data", str(DATA), "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "absolute % error" in result.output
    profile = read_engine_profile(out)
    assert profile.engine == "tensorrt-llm"
    assert profile.fitted_range is not None and profile.fitted_range.batch_size[1] >= 8
    assert profile.provenance["e2e_tpot"].holdout == "leave-one-config-out"
    assert profile.kernels == load_engine_profile("tensorrt-llm").kernels
    row = read_benchmarks([DATA]).iloc[0]
    summary = simulate(e2e.benchmark_scenario(row, str(out))).summary
    assert summary["tpot_mean_s"] == pytest.approx(row["tpot_mean_s"], rel=0.3)


def test_calibrate_e2e_without_usable_rows_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "calibrate",
            "e2e",
            "--engine",
            "sglang",
            "--data",
            str(DATA),
            "--out",
            str(tmp_path / "x.json"),
        ],
    )
    assert result.exit_code == 2
    assert "no benchmark of engine 'sglang'" in result.output
    assert not (tmp_path / "x.json").exists()


def test_closed_loop_rate_is_littles_law() -> None:
    import pandas as pd

    rate = e2e.closed_loop_rate(
        pd.Series([8.0]), pd.Series([101.0]), pd.Series([0.1]), pd.Series([0.01])
    )
    assert rate.iloc[0] == pytest.approx(8 * 101 / (0.1 + 100 * 0.01))


@pytest.mark.slow  # tens of seconds; `pytest -m slow`
def test_report_on_the_shipped_benchmarks(tmp_path: Path, monkeypatch) -> None:
    """`cbsim calibrate report --e2e` end to end, on a few of the shipped benchmarks per engine
    (the full report simulates about a thousand; tools/fit_engines.py makes the same tables), on
    a base install: tabulate (a test extra) cannot be imported."""
    import cbsim.studies.calibration.data as data
    import cbsim.studies.calibration.e2e_report as report
    from cbsim.studies.calibration.benchmarks import shared_h100_benchmarks

    shared = shared_h100_benchmarks()
    small = shared[(shared["osl"] <= 256) & (shared["isl"] <= 1024) & shared["model"].notna()]
    small = small[(small["concurrency"] <= 16) & (small["mode"] == "agg")]
    picked = small.groupby(["engine", "model"], group_keys=False).head(3)
    monkeypatch.setattr(report, "shared_h100_benchmarks", lambda: picked)
    batches = data.argonne_static_batches()
    few = (
        batches[(batches["length"] <= 128) & (batches["batch_size"] <= 8)]
        .groupby("framework", observed=True, group_keys=False)
        .head(2)
    )
    monkeypatch.setattr(data, "argonne_static_batches", lambda: few)
    monkeypatch.setattr(e2e, "DELAY_SAMPLE", 3)
    from cbsim.studies.calibration import per_request

    light = [r for r in per_request.shared_runs("short-input") if r.qps <= 1.0]
    monkeypatch.setattr(per_request, "shared_runs", lambda workload=None: iter(light))
    monkeypatch.setitem(sys.modules, "tabulate", None)
    out = tmp_path / "report"
    result = CliRunner().invoke(cli, ["calibrate", "report", "--e2e", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "leave-one-model-out" in result.output
    errors = (out / "errors.csv").read_text()
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        assert engine in errors
    assert (out / "overhead.csv").is_file() and (out / "a100_static.csv").is_file()
    logo = (out / "leave_one_gpu_out.csv").read_text()
    assert "fit H100 -> predict A100" in logo and "fit A100 -> predict H100" in logo
    assert (out / "report.md").read_text().startswith("# End-to-end validation")
