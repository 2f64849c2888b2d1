"""Disaggregated capacity plans (``cbsim capacity --disaggregated``): prefill and decode pools
sized on their own, checked together at the target, against the best aggregated fleet."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cbsim.cli.commands import cli
from cbsim.common.errors import CbsimError
from cbsim.run.loading import load_scenario
from cbsim.studies.capacity.disaggregated import Candidate, plan_disaggregated

SLO = {"ttft_p99_s": 2.0, "tpot_p99_s": 0.03}


def traffic(prompt: int, output: int) -> dict[str, Any]:
    return {
        "name": "pd-plan",
        "seed": 5,
        "workload": {
            "num_requests": 100,
            "arrival": {"kind": "poisson", "rate": 1.0},
            "prompt_tokens": {"kind": "uniform", "low": prompt // 2, "high": prompt * 3 // 2},
            "output_tokens": {"kind": "uniform", "low": output // 2, "high": output * 3 // 2},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
        "scheduler": {"kind": "prefill_first"},
    }


def planned(prompt: int, output: int, target: float) -> dict[str, Any]:
    """The plan for this traffic (a copy: two tests read the same one, planned once)."""
    return copy.deepcopy(_planned(prompt, output, target))


@functools.cache
def _planned(prompt: int, output: int, target: float) -> dict[str, Any]:
    return plan_disaggregated(
        load_scenario(traffic(prompt, output)),
        SLO,
        target_rps=target,
        prefill=[Candidate("h100-sxm", 1)],
        decode=[Candidate("h100-sxm", 1)],
        window_s=60.0,
        min_requests=100,
    )


def test_prefill_heavy_traffic_disaggregation_pays() -> None:
    """Long prompts, short answers at a load that needs several GPUs: the aggregated replicas'
    prefills stall their decodes past the TPOT target, so they need more GPUs than the pools."""
    result = planned(6000, 100, 8.0)
    best, aggregated = result["best"], result["aggregated"]
    assert result["feasible"] and aggregated["feasible"]
    assert best["prefill"]["replicas"] > best["decode"]["replicas"]
    assert best["cost_per_million_output_tokens"] < aggregated["cost_per_million_output_tokens"]
    assert result["verdict"].startswith("disaggregation pays")
    # the layout passed at the target, and every figure is the verified run's
    assert best["tried"][-1]["passed"] and best["metrics"]["tpot_p99_s"] <= SLO["tpot_p99_s"]
    assert best["gpus"] == best["prefill"]["replicas"] + best["decode"]["replicas"]
    assert best["tokens_per_s_per_gpu"] == pytest.approx(
        best["output_tokens_per_hour"] / 3600 / best["gpus"]
    )


@pytest.mark.slow  # 15-20 s; `pytest -m slow`
def test_decode_heavy_traffic_disaggregation_does_not_pay() -> None:
    result = planned(300, 800, 4.0)
    best, aggregated = result["best"], result["aggregated"]
    assert aggregated["feasible"]
    assert best is None or (
        best["cost_per_million_output_tokens"] >= aggregated["cost_per_million_output_tokens"]
    )
    assert "does not pay" in result["verdict"] or "does not meet" in result["verdict"]


def test_a_plan_needs_ttft_and_tpot_targets() -> None:
    with pytest.raises(CbsimError, match="TTFT and a TPOT"):
        plan_disaggregated(
            load_scenario(traffic(1000, 100)),
            {"ttft_p99_s": 2.0},
            target_rps=1.0,
            prefill=[Candidate("h100-sxm", 1)],
            decode=[Candidate("h100-sxm", 1)],
        )


def test_candidates_parse_as_gpu_and_tp() -> None:
    assert Candidate.parse("h200:2", "--prefill") == Candidate("h200", 2)
    assert Candidate.parse("h100-sxm", "--decode") == Candidate("h100-sxm", 1)
    with pytest.raises(CbsimError) as info:
        Candidate.parse("h100-sxm:two", "--decode")
    assert info.value.field == "--decode"


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump(traffic(6000, 100)))
    return path


@pytest.mark.slow  # 15-20 s; `pytest -m slow`
def test_the_command_plans_pools_and_prints_the_verdict(scenario_file: Path) -> None:
    args = ["capacity", str(scenario_file), "--disaggregated", "--target-rps", "4"]
    args += ["--slo", "ttft_p99_s=2,tpot_p99_s=0.03", "--window-s", "60", "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["best"]["name"].endswith("(h100-sxm tp 1 | h100-sxm tp 1)")
    assert plan["aggregated"]["feasible"] and plan["verdict"]
    table = CliRunner().invoke(cli, args[:-1])
    assert table.exit_code == 0 and "layouts for 4 req/s" in table.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prefill", "h100-sxm:2"], "--prefill: --prefill and --decode plan pools"),
        (["--disaggregated", "--prefill", "h100-sxm:x"], "--prefill: 'h100-sxm:x'"),
        (["--disaggregated", "--decode", "h900:1"], "--decode: unknown gpu"),
        (["--disaggregated", "--vary", "cluster.tp=1,2"], "--vary"),
        (["--disaggregated"], "--target-rps"),
    ],
)
def test_bad_disaggregated_plans_exit_2_with_a_reason(
    scenario_file: Path, extra: list[str], message: str
) -> None:
    args = ["capacity", str(scenario_file), *extra]
    if "--target-rps" not in message:
        args += ["--target-rps", "1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_report_compares_layouts_per_gpu_and_per_user(tmp_path: Path) -> None:
    plan = planned(6000, 100, 8.0)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan, allow_nan=False))
    out = tmp_path / "report" / "report.md"
    result = CliRunner().invoke(cli, ["report", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "disaggregation pays" in text and "aggregated" in text
    assert "Tokens per GPU vs tokens per user" in text
    assert (out.parent / "report-disaggregated-tokens-per-gpu-vs-per-user.png").is_file()


def test_a_disaggregated_plan_file_is_one_capacity_may_replace(tmp_path: Path) -> None:
    """``--out`` replaces a plan cbsim wrote, a disaggregated one too (it has no
    ``max_rate_rps``), and still refuses any other file."""
    from cbsim.studies.capacity.cli import _check_plan_file

    plan = plan_disaggregated(
        load_scenario(traffic(2000, 50)),
        {"ttft_p99_s": 2.0, "tpot_p99_s": 0.05},
        target_rps=1.0,
        prefill=[Candidate("h100-sxm", 1)],
        decode=[Candidate("h100-sxm", 1)],
        window_s=5.0,
        min_requests=10,
        tolerance=0.5,
    )
    out = tmp_path / "plan.json"
    out.write_text(json.dumps(plan, allow_nan=False))
    _check_plan_file(out)  # no error: cbsim's own plan
    out.write_text(json.dumps({"slo": {}, "simulations": 1}))
    with pytest.raises(CbsimError, match="not a capacity plan"):
        _check_plan_file(out)
