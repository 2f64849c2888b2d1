"""What ``cbsim run`` prints: the scenario as run, its set-up, the SLO verdict, and the
side-by-side comparison with speculation off."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

import cbsim
from cbsim.cli.commands import cli
from cbsim.cli.terminal import run_title, slo_rows

TINY = """\
name: tiny
seed: 1
workload:
  num_requests: 30
  arrival: {kind: poisson, rate: 5}
  prompt_tokens: {kind: fixed, value: 128}
  output_tokens: {kind: fixed, value: 16}
cluster: {model: llama-3-8b, gpu: h100-sxm}
slo: {ttft_s: 2.0, tpot_s: 0.1}
"""

SPECULATIVE = """\
speculative:
  enabled: true
  proposer: {kind: eagle}
  acceptance: {kind: iid, alpha: 0.7}
  policy: {kind: fixed, k: 3}
"""


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def invoke(*args: str | Path) -> Result:
    """The command with a wide terminal, so no table cell wraps."""
    return CliRunner().invoke(cli, [str(a) for a in args], env={"COLUMNS": "250"})


def test_summary_names_the_scenario_as_run_and_its_setup(
    scenario_file: Path, tmp_path: Path
) -> None:
    result = invoke(
        "run",
        scenario_file,
        "--out",
        tmp_path / "out",
        "--set",
        "cluster.tp=2",
        "--set",
        "cluster.replicas=3",
        "--set",
        "scheduler.kind=sarathi",
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert (
        "run: tiny (seed 1) with --set cluster.tp=2 --set cluster.replicas=3 "
        "--set scheduler.kind=sarathi" in out
    )
    assert "llama-3-8b (bf16 weights, bf16 KV cache)" in out
    assert "h100-sxm, tp 2 x 3 replicas = 6 GPUs in total" in out
    assert "sarathi (vLLM V1's scheduler" in out
    assert "engine" in out and "vllm" in out
    assert "speculation" not in out  # off: not stated


def test_summary_states_each_slo_target_with_its_measured_value_and_verdict(
    scenario_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = invoke("run", scenario_file, "--out", out, "--set", "slo.ttft_s=0.001")
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    lines = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if "│" in line}
    ttft = lines["TTFT p99"]
    assert "≤ 1.0 ms" in ttft and f"{summary['ttft_p99_s'] * 1e3:.1f} ms" in ttft
    assert "missed" in ttft
    tpot = lines["TPOT p99"]
    assert "≤ 100.0 ms" in tpot and f"{summary['tpot_p99_s'] * 1e3:.1f} ms" in tpot
    assert "met" in tpot and "missed" not in tpot
    goodput = lines["goodput"]
    assert f"{summary['goodput_rps']:.3f} req/s" in goodput
    assert f"{summary['slo_attainment']:.1%} of requests" in goodput
    assert "missed" in goodput


def test_slo_rows_read_targets_at_p99_and_goodput_at_99_percent() -> None:
    scenario = cbsim.load_scenario(yaml.safe_load(TINY), overrides=["slo.e2e_s=5"])
    summary = {
        "ttft_p99_s": 2.0,  # exactly at the target: met
        "tpot_p99_s": math.nan,  # undefined: missed
        "e2e_p99_s": 7.5,
        "goodput_rps": 3.0,
        "slo_attainment": 0.99,
    }
    rows = {row[0]: row for row in slo_rows(summary, scenario)}
    assert list(rows) == ["TTFT p99", "TPOT p99", "E2E p99", "goodput"]
    assert rows["TTFT p99"][1:] == ("≤ 2.000 s", "2.000 s", "[green]met[/green]")
    assert rows["TPOT p99"][2:] == ("n/a", "[bold red]missed[/bold red]")
    assert rows["E2E p99"][2] == "7.500 s" and "missed" in rows["E2E p99"][3]
    assert "met" in rows["goodput"][3] and "missed" not in rows["goodput"][3]
    no_slo = cbsim.load_scenario(
        yaml.safe_load(TINY), overrides=["slo.ttft_s=null", "slo.tpot_s=null"]
    )
    assert slo_rows(summary, no_slo) == []


def test_title() -> None:
    scenario = cbsim.load_scenario(yaml.safe_load(TINY))
    assert run_title(scenario) == "tiny (seed 1)"
    assert run_title(scenario, ["a.b=1"]) == "tiny (seed 1) with --set a.b=1"


def test_compare_no_spec_shows_both_runs_and_saves_the_baseline_summary(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(TINY + SPECULATIVE)
    out = tmp_path / "out"
    result = invoke("run", path, "--out", out, "--compare-no-spec")
    assert result.exit_code == 0, result.output
    spec = json.loads((out / "summary.json").read_text())
    base = json.loads((out / "summary_no_spec.json").read_text())
    assert base["acceptance_rate"] is None or base["mean_k"] == 0  # speculation was off
    assert spec["speedup_tpot_mean"] == pytest.approx(base["tpot_mean_s"] / spec["tpot_mean_s"])
    text = result.stdout
    assert "speculative" in text and "no speculation" in text and "speed-up" in text
    assert "eagle proposer, fixed k=3 policy" in text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    tpot = rows["TPOT mean"]
    assert f"{spec['tpot_mean_s'] * 1e3:.1f} ms" in tpot
    assert f"{base['tpot_mean_s'] * 1e3:.1f} ms" in tpot
    assert f"{spec['speedup_tpot_mean']:.3f}x" in tpot
    goodput = rows["goodput (SLO)"]
    assert f"{base['goodput_rps']:.3f} req/s" in goodput
    # the result reads back with its baseline
    read = cbsim.Results.read(out)
    assert read.no_spec_summary is not None
    assert read.no_spec_summary["tpot_mean_s"] == base["tpot_mean_s"]


def test_a_run_without_comparison_writes_no_baseline(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert invoke("run", scenario_file, "--out", out, "-q").exit_code == 0
    assert not (out / "summary_no_spec.json").exists()
    assert cbsim.Results.read(out).no_spec_summary is None
