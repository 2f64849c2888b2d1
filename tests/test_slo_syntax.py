"""One SLO syntax on every command (:mod:`cbsim.schema.slo_syntax`): units, vLLM's and cbsim's keys, the
suggestion for a key nobody reads, and the commands that take it (run, capacity, plan, YAML)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cbsim import load_scenario
from cbsim.cli.commands import cli
from cbsim.common.errors import CbsimError
from cbsim.schema.slo_syntax import (
    parse_duration,
    parse_slo,
    per_request_targets,
    statistic_targets,
)
from cbsim.studies.capacity import parse_slo as capacity_slo
from cbsim.studies.plan.aic_flags import plan_vocabulary
from cbsim.studies.plan.cli import build_request, plan_command
from tests.conftest import small_scenario


@pytest.mark.parametrize(
    ("text", "unit", "seconds"),
    [
        ("300ms", "s", 0.3),
        ("0.3s", "s", 0.3),
        ("0.3", "s", 0.3),
        ("300", "ms", 0.3),
        ("300 ms", "s", 0.3),
        ("250us", "s", 0.00025),
        ("2e3ms", "s", 2.0),
    ],
)
def test_durations_read_their_unit(text: str, unit: str, seconds: float) -> None:
    assert parse_duration(text, default_unit=unit, field="--x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["abc", "3 parsecs", "-1ms", "inf", "nan", ""])
def test_bad_durations_name_the_option(text: str) -> None:
    with pytest.raises(CbsimError, match=r"^--ttft: "):
        parse_duration(text, field="--ttft")


SAME_TARGET = [
    "ttft_p99=300ms",
    "ttft_p99=0.3",
    "ttft_p99_s=0.3",
    "ttft_p99_ms=300",
    "p99_ttft_ms=300",  # vLLM's result key
    "p99_ttft=0.3s",
    "ttft_p99:300",  # vLLM's KEY:VALUE, milliseconds
]


@pytest.mark.parametrize("text", SAME_TARGET)
def test_every_spelling_of_one_target_is_one_target(text: str) -> None:
    (target,) = parse_slo(text)
    assert target.metric == "ttft_p99_s" and target.value == pytest.approx(0.3)
    assert not target.per_request


def test_bare_latencies_are_per_request_targets() -> None:
    targets = parse_slo(["ttft:300 tpot:50", "e2el=10s"])
    assert [t.metric for t in targets] == ["ttft", "tpot", "e2e"]
    assert per_request_targets(targets) == pytest.approx(
        {"ttft_s": 0.3, "tpot_s": 0.05, "e2e_s": 10.0}
    )
    assert statistic_targets(targets, "p90") == pytest.approx(
        {"ttft_p90_s": 0.3, "tpot_p90_s": 0.05, "e2e_p90_s": 10.0}
    )


def test_statistics_and_other_metrics() -> None:
    targets = parse_slo("median_tpot_ms=20,mean_e2el=2s,itl_chunk_p99=40ms,slo_attainment=0.99")
    assert statistic_targets(targets) == pytest.approx(
        {"tpot_p50_s": 0.02, "e2e_mean_s": 2.0, "itl_chunk_p99_s": 0.04, "slo_attainment": 0.99}
    )


def test_a_key_nobody_reads_is_answered_with_the_right_key_and_value() -> None:
    with pytest.raises(CbsimError) as info:
        parse_slo("ttft_99_ms=300")
    assert "did you mean ttft_p99_s=0.3?" in str(info.value)


def test_capacity_takes_vllms_key_with_the_value_converted() -> None:
    """``--slo p99_ttft_ms=300`` suggested ttft_mean_s; it is ttft_p99_s=0.3."""
    assert capacity_slo("p99_ttft_ms=300") == {"ttft_p99_s": pytest.approx(0.3)}
    assert capacity_slo(["ttft=2s", "tpot_p99=50ms"]) == pytest.approx(
        {"ttft_p99_s": 2.0, "tpot_p99_s": 0.05}
    )
    assert capacity_slo("ttft_p99_s=2,tpot_p99_s=0.1") == {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}


def test_scenario_slo_takes_units() -> None:
    scenario = load_scenario(small_scenario({"slo.ttft_s": "300ms", "slo.tpot_s": "0.05s"}))
    assert scenario.slo.ttft_s == pytest.approx(0.3) and scenario.slo.tpot_s == pytest.approx(0.05)
    with pytest.raises(CbsimError, match=r"slo\.ttft_s"):
        load_scenario(small_scenario({"slo.ttft_s": "300 parsecs"}))


def _scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(small_scenario({"workload.num_requests": 20})))
    return path


def test_run_takes_slo_targets_and_says_whether_they_are_met(tmp_path: Path) -> None:
    args = ["run", str(_scenario_file(tmp_path)), "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(
        cli, [*args, "--slo", "ttft=300ms", "--slo", "p99_ttft_ms=60000,tpot_p90=1us"]
    )
    assert result.exit_code == 0, result.output
    assert "SLO ttft_p99 ≤ 60 s: met" in result.output
    assert "SLO tpot_p90 ≤ 0.001 ms: NOT met" in result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "--set slo.ttft_s=0.3" in result.output or summary["slo_attainment"] >= 0


def test_run_refuses_a_statistic_its_summary_lacks_before_running(tmp_path: Path) -> None:
    args = ["run", str(_scenario_file(tmp_path)), "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(cli, [*args, "--slo", "ttft_p95=1s"])
    assert result.exit_code == 2
    assert "--slo" in result.stderr and "did you mean" in result.stderr
    assert not (tmp_path / "out").exists()


def _plan_options(**given: object) -> dict[str, object]:
    options: dict[str, object] = dict(
        plan_command.make_context("plan", [], resilient_parsing=True).params
    )
    options |= {
        "model": "llama-3-8b", "isl": 500, "osl": 50, "ttft": None, "tpot": None,
        "scenario": None, "gpus": None, "total_gpus": None, "engine": None, "dtype": None,
        "headroom": 0.8, "seeds": 1, "percentile": "p99", "tp": "1", "pp": "1", "dp": None,
        "max_num_seqs": None, "max_num_batched_tokens": None, "disagg": False, "refine": "0",
        "window_s": 10.0, "tolerance": 0.2, "prices": (), "workers": 1, "slo_texts": (),
    }  # fmt: skip
    options.update(given)
    return options


def test_plan_reads_units_and_slo_items() -> None:
    options = _plan_options(ttft="300ms", slo_texts=("tpot:20", "e2e_p90=5s"))
    notes, warnings = plan_vocabulary(options)
    assert notes == [] and warnings == []
    request = build_request(options)
    assert request.slo == pytest.approx({"ttft_p99_s": 0.3, "tpot_p99_s": 0.02, "e2e_p90_s": 5.0})


def test_plan_warns_of_bare_milliseconds_and_takes_them_as_seconds(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("not a plan")  # the run stops at --out, after the warnings
    result = CliRunner().invoke(
        cli,
        ["plan", "--model", "llama-3-8b", "--isl", "100", "--osl", "10", "--ttft", "300",
         "--tpot", "10", "--out", str(taken)],
    )  # fmt: skip
    assert result.exit_code == 2 and "--out" in result.stderr
    assert "--ttft = 300 s" in result.stderr and "write 0.3 or 300ms" in result.stderr
