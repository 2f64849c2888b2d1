"""Capacity search: maximum sustainable rate per replica, fleet sizing and cost, alternatives.

Every search here runs llama-3-8b (chat-like lengths) with 60 s windows and one seed, so each
simulation takes a fraction of a second; results shared by several tests are computed once per
module.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from cbsim.catalog.hardware import get_gpu
from cbsim.common.errors import CbsimError
from cbsim.run.loading import load_scenario
from cbsim.run.results import Results
from cbsim.studies.capacity import (
    EXIT_INFEASIBLE,
    TIMESERIES_WINDOWS,
    CapacityResult,
    _check_run,
    capacity_command,
    evaluate_rate,
    find_max_rate,
    parse_prices,
    parse_slo,
    parse_vary,
    plan,
    scenario_field_paths,
)

WINDOW_S = 60.0
SLO = {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}
TIGHT_SLO = {"ttft_p99_s": 0.5, "tpot_p99_s": 0.03}

BASE: dict[str, Any] = {
    "name": "capacity-test",
    "seed": 1,
    "workload": {
        "num_requests": 100,
        "arrival": {"kind": "poisson", "rate": 4.0},
        "prompt_tokens": {"kind": "lognormal", "mean": 500, "sigma": 0.6, "max": 4096},
        "output_tokens": {"kind": "lognormal", "mean": 128, "sigma": 0.6, "max": 1024},
    },
    "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1},
    "scheduler": {"kind": "prefill_first"},
}


def scenario(**cluster: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["cluster"].update(cluster)
    return data


def no_nan(value: Any) -> None:
    if isinstance(value, dict):
        for v in value.values():
            no_nan(v)
    elif isinstance(value, list):
        for v in value:
            no_nan(v)
    elif isinstance(value, float):
        assert math.isfinite(value)


@pytest.fixture(scope="module")
def h100() -> CapacityResult:
    return find_max_rate(scenario(), SLO, window_s=WINDOW_S)


@pytest.fixture(scope="module")
def scenario_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("capacity") / "scenario.yaml"
    path.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the search


def test_search_brackets_then_bisects_to_the_tolerance(h100: CapacityResult) -> None:
    assert h100.feasible and h100.reason is None
    assert h100.max_rate_rps is not None and h100.max_rate_rps > 1.0
    assert h100.simulations == len(h100.evaluations)  # one seed: one simulation per rate
    rates = [e.rate_rps for e in h100.evaluations]
    assert rates[:3] == [1.0, 2.0, 4.0]  # doubling from the start rate
    lowest_failing = min(e.rate_rps for e in h100.evaluations if not e.passed)
    assert lowest_failing > h100.max_rate_rps
    assert lowest_failing - h100.max_rate_rps <= h100.tolerance * h100.max_rate_rps
    rate, passed, metrics = h100.evaluations[0]  # unpacks as (rate, passed, metrics)
    assert rate == 1.0 and passed and metrics["ttft_p99_s"] is not None


def test_found_rate_passes_and_ten_percent_more_fails(h100: CapacityResult) -> None:
    assert h100.max_rate_rps is not None
    at = evaluate_rate(scenario(), h100.max_rate_rps, SLO, window_s=WINDOW_S)
    above = evaluate_rate(scenario(), 1.1 * h100.max_rate_rps, SLO, window_s=WINDOW_S)
    assert at.passed and not at.reason
    assert not above.passed and above.reason


def test_looser_slo_sustains_more(h100: CapacityResult) -> None:
    tight = find_max_rate(scenario(), TIGHT_SLO, window_s=WINDOW_S)
    assert tight.max_rate_rps is not None and h100.max_rate_rps is not None
    assert tight.max_rate_rps < h100.max_rate_rps


def test_faster_gpu_sustains_more() -> None:
    h200 = find_max_rate(scenario(gpu="h200"), SLO, window_s=WINDOW_S)
    a100 = find_max_rate(scenario(gpu="a100-80gb"), SLO, window_s=WINDOW_S)
    assert h200.max_rate_rps is not None and a100.max_rate_rps is not None
    assert h200.max_rate_rps > 1.5 * a100.max_rate_rps


def test_unreachable_slo_is_infeasible_with_a_plain_reason() -> None:
    result = find_max_rate(scenario(), {"ttft_p99_s": 0.0001}, window_s=WINDOW_S)
    assert not result.feasible
    assert result.max_rate_rps is None
    assert result.reason is not None
    assert result.reason.startswith("SLO cannot be met even at 0.01562 req/s")
    assert "ttft_p99_s" in result.reason
    assert result.simulations == 7  # start, then six halvings down to 1/64 of it
    assert result.to_dict()["max_rate_rps"] is None


def test_checks_are_deterministic_and_every_seed_must_pass(h100: CapacityResult) -> None:
    assert h100.max_rate_rps is not None
    rate = 0.5 * h100.max_rate_rps
    first = evaluate_rate(scenario(), rate, SLO, window_s=WINDOW_S, seeds=[1, 2])
    again = evaluate_rate(scenario(), rate, SLO, window_s=WINDOW_S, seeds=[1, 2])
    assert first == again
    assert first.passed and first.simulations == 2
    overloaded = evaluate_rate(
        scenario(), 4 * h100.max_rate_rps, SLO, window_s=WINDOW_S, seeds=[1, 2]
    )
    assert not overloaded.passed
    assert overloaded.simulations == 1  # stops at the first failing seed
    # a backlog shows as a growing queue (and, once early arrivals are fast, as late ones waiting)
    assert "queue growing" in overloaded.reason or "queue unstable" in overloaded.reason
    assert overloaded.metrics["served_ratio"] is not None


def test_slo_attainment_is_a_floor_and_unknown_metrics_are_named() -> None:
    ok = evaluate_rate(scenario(), 2.0, {"slo_attainment": 0.9}, window_s=WINDOW_S)
    assert ok.passed and ok.metrics["slo_attainment"] is not None
    assert ok.metrics["slo_attainment"] >= 0.9
    with pytest.raises(CbsimError, match=r"unknown SLO metric 'ttft_p999_s'.*ttft_p99_s"):
        evaluate_rate(scenario(), 2.0, {"ttft_p999_s": 1.0}, window_s=WINDOW_S)


def test_default_slo_is_the_p99_of_the_scenario_slo() -> None:
    data = scenario()
    data["slo"] = {"ttft_s": 3.0, "tpot_s": 0.2}
    result = evaluate_rate(data, 1.0, window_s=WINDOW_S)
    assert set(result.metrics) >= {"ttft_p99_s", "tpot_p99_s"}


def test_trace_replay_varies_the_rate_scale(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    rows = ["arrival_s,prompt_tokens,output_tokens"]
    rows += [f"{i * 0.5:.1f},{200 + (i * 37) % 400},{40 + (i * 13) % 80}" for i in range(2001)]
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    data = scenario()
    data["workload"] = {"trace": {"path": str(trace)}}
    result = find_max_rate(data, SLO, window_s=WINDOW_S, tolerance=0.05)
    assert result.load_key == "workload.trace.rate_scale"
    assert result.base_rate_rps == pytest.approx(2001 / 1000.0)
    assert result.max_rate_rps is not None and result.max_load_value is not None
    assert result.max_load_value == pytest.approx(result.max_rate_rps / result.base_rate_rps)
    assert result.feasible and result.max_rate_rps > 4.0


def test_offline_arrivals_have_no_rate_to_vary() -> None:
    data = scenario()
    data["workload"]["arrival"] = {"kind": "offline"}
    with pytest.raises(CbsimError, match="needs an arrival rate"):
        find_max_rate(data, SLO, window_s=WINDOW_S)


# --------------------------------------------------------------------------- fleet and cost


def test_fleet_for_a_target_is_verified_and_costed_by_hand() -> None:
    target = 70.0
    result = plan(
        scenario(tp=2), SLO, target_rps=target, prices={"h100-sxm": 2.0}, window_s=WINDOW_S
    )
    assert result["feasible"], result["reason"]
    replicas, max_rate = result["replicas"], result["max_rate_rps"]
    assert replicas * max_rate >= target
    # every replica planned at 80% of its knee (cbsim plan's headroom), verified on three seeds
    assert result["initial_replicas"] == math.ceil(target / (0.8 * max_rate)) <= replicas
    assert result["planning_rate_rps"] == pytest.approx(0.8 * max_rate)
    assert result["fleet_headroom"] == pytest.approx(replicas * max_rate / target - 1)
    assert result["fleet_seeds"] == [1, 2, 3] and result["seeds"] == [1]
    assert result["fleet"][-1]["passed"] and result["fleet"][-1]["replicas"] == replicas
    assert result["fleet"][-1]["simulations"] == 3
    assert all(not f["passed"] for f in result["fleet"][:-1])
    assert result["gpus"] == replicas * 2
    assert result["price_per_gpu_hour"] == 2.0
    assert result["cost_per_hour"] == pytest.approx(replicas * 2 * 2.0)
    tokens_per_request = result["fleet_output_tokens_per_request"]
    assert 60 < tokens_per_request < 200  # lognormal mean 128
    tokens_per_hour = target * 3600 * tokens_per_request
    assert result["output_tokens_per_hour"] == pytest.approx(tokens_per_hour)
    assert result["cost_per_million_output_tokens"] == pytest.approx(
        result["cost_per_hour"] / tokens_per_hour * 1e6
    )
    search = len(result["evaluations"])
    assert result["simulations"] == search + sum(f["simulations"] for f in result["fleet"])
    assert result["headline"] == (
        f"buy {replicas} × h100-sxm TP2 ({replicas * 2} GPUs), ${replicas * 4:.2f}/h: every SLO "
        f"met at 70 req/s with {replicas * max_rate / target - 1:.0%} headroom"
    )


def test_a_pipelined_replica_costs_all_its_gpus() -> None:
    result = plan(scenario(tp=1, pp=2), SLO, prices={"h100-sxm": 2.0}, window_s=WINDOW_S / 2)
    assert result["gpus_per_replica"] == 2 and result["replica_cost_per_hour"] == 4.0
    tokens = result["max_rate_rps"] * 3600 * result["output_tokens_per_request"]
    assert result["cost_per_million_output_tokens"] == pytest.approx(4.0 / tokens * 1e6)


def test_vary_gpu_picks_the_cheaper_per_token() -> None:
    vary = {"cluster.gpu": ["h100-sxm", "a100-80gb"]}
    window_s = WINDOW_S / 2  # the choice is a matter of prices: a shorter window shows it
    default = plan(scenario(), SLO, vary=vary, window_s=window_s)
    alternatives = default["alternatives"]
    assert [a["overrides"] for a in alternatives] == [
        {"cluster.gpu": "h100-sxm"},
        {"cluster.gpu": "a100-80gb"},
    ]
    for alt in alternatives:  # without a target: one replica at its maximum rate
        price = get_gpu(alt["gpu"]).price_per_hour
        expected = price / (alt["max_rate_rps"] * 3600 * alt["output_tokens_per_request"]) * 1e6
        assert alt["cost_per_million_output_tokens"] == pytest.approx(expected)
    cheapest = min(alternatives, key=lambda a: a["cost_per_million_output_tokens"])
    assert default["best"]["overrides"] == cheapest["overrides"]
    assert default["max_rate_rps"] == cheapest["max_rate_rps"]
    assert default["simulations"] == sum(a["simulations"] for a in alternatives)
    # make the slower GPU nearly free: it becomes the cheaper per token
    cheap_a100 = plan(scenario(), SLO, vary=vary, window_s=window_s, prices={"a100-80gb": 0.1})
    assert cheap_a100["best"]["overrides"] == {"cluster.gpu": "a100-80gb"}


def test_invalid_alternatives_are_reported_and_skipped() -> None:
    """An alternative invalid only in combination (fp4 weights on a GPU without FP4) is reported
    and skipped; the others are searched (an unreachable SLO keeps the search short)."""
    vary = {"cluster.gpu": ["h100-sxm", "b200"], "cluster.dtype": ["fp4"]}
    result = plan(scenario(), {"ttft_p99_s": 0.0001}, vary=vary, window_s=WINDOW_S)
    h100, b200 = result["alternatives"]
    assert h100["error"] and "FP4" in h100["error"] and h100["simulations"] == 0
    assert b200["error"] is None and b200["simulations"] > 0
    assert result["best"] is None and not result["feasible"]


@pytest.mark.parametrize(
    ("vary", "message"),
    [
        ({"cluster.tp": [3]}, "cluster.tp=3: tp must be a power of two"),
        ({"cluster.gpu": ["h100", "h200"]}, "cluster.gpu=h100: unknown gpu 'h100'"),
        ({"cluster.gpu": ["h900"]}, "cluster.gpu=h900: unknown gpu 'h900'"),
    ],
)
def test_a_vary_value_no_alternative_takes_is_bad_input(
    vary: dict[str, list[Any]], message: str
) -> None:
    """A misspelt value is an error naming it before any search (not an infeasible plan, nor
    a plan of the other values)."""
    with pytest.raises(CbsimError, match=message) as info:
        plan(scenario(), SLO, vary=vary, window_s=WINDOW_S)
    assert info.value.field == "--vary"


def test_changing_a_kind_drops_the_old_kind_fields() -> None:
    data = scenario()
    data["workload"]["arrival"] = {"kind": "gamma", "rate": 2.0, "cv": 2.0}
    data["speculative"] = {"policy": {"kind": "fixed", "k": 3}}
    vary = {"workload.arrival.kind": ["poisson"], "speculative.policy.kind": ["goodput"]}
    # an unreachable SLO keeps the search short: only whether the scenarios load matters here
    result = plan(data, {"ttft_p99_s": 0.0001}, vary=vary, window_s=WINDOW_S)
    (alt,) = result["alternatives"]
    assert alt["error"] is None and alt["simulations"] == 7


# --------------------------------------------------------------------------- parsing and CLI


def test_parsers() -> None:
    assert parse_slo("ttft_p99_s=2,tpot_p99_s=0.1") == SLO
    assert parse_slo(["ttft_p99_s=2", "e2e_p90_s=30"]) == {"ttft_p99_s": 2.0, "e2e_p90_s": 30.0}
    assert parse_vary(["cluster.gpu=h100-sxm,h200", "speculative.enabled=true,false"]) == {
        "cluster.gpu": ["h100-sxm", "h200"],
        "speculative.enabled": [True, False],
    }
    assert parse_prices("h200=3.5") == {"h200": 3.5}
    with pytest.raises(CbsimError, match="unknown gpu 'h900'"):
        parse_prices("h900=1")
    with pytest.raises(CbsimError, match="not METRIC=THRESHOLD"):
        parse_slo("ttft_p99_s")
    paths = scenario_field_paths()
    for key in ("cluster.gpu", "cluster.tp", "scheduler.kind", "speculative.enabled"):
        assert key in paths
    assert "speculative.policy.kind" in paths and "speculative.policy.k_max" in paths


def test_cli_unknown_vary_key_lists_the_valid_keys(scenario_file: Path) -> None:
    result = CliRunner().invoke(
        capacity_command, [str(scenario_file), "--vary", "cluster.gpuu=h200", "--json"]
    )
    assert result.exit_code == 2
    assert "error:" in result.output
    assert "unknown scenario key 'cluster.gpuu'" in result.output
    for key in ("cluster.gpu", "cluster.tp", "scheduler.kind", "speculative.policy.kind"):
        assert key in result.output


def test_cli_rejects_keys_the_search_sets(scenario_file: Path) -> None:
    result = CliRunner().invoke(
        capacity_command, [str(scenario_file), "--vary", "cluster.replicas=2"]
    )
    assert result.exit_code == 2 and "set by the capacity search" in result.output
    result = CliRunner().invoke(
        capacity_command, [str(scenario_file), "--set", "workload.arrival.rate=3"]
    )
    assert result.exit_code == 2 and "set by the capacity search" in result.output


def test_cli_json_has_the_contract_keys(scenario_file: Path) -> None:
    args = [
        str(scenario_file),
        "--slo",
        "ttft_p99_s=2,tpot_p99_s=0.1",
        "--window-s",
        "30",
        "--target-rps",
        "20",
        "--vary",
        "cluster.gpu=h100-sxm,h200",
        "--prices",
        "h200=4.0",
        "--tolerance",
        "0.1",
        "--json",
    ]
    result = CliRunner().invoke(capacity_command, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    no_nan(data)
    for key in (
        "max_rate_rps",
        "slo",
        "simulations",
        "replicas",
        "gpus",
        "cost_per_hour",
        "cost_per_million_output_tokens",
        "alternatives",
        "best",
        "feasible",
    ):
        assert key in data
    assert data["slo"] == SLO
    assert len(data["alternatives"]) == 2
    for alt in data["alternatives"]:
        assert {"overrides", "max_rate_rps", "replicas", "gpus", "cost_per_hour"} <= set(alt)
        assert alt["cost_per_million_output_tokens"] > 0
    h200 = data["alternatives"][1]
    assert h200["price_per_gpu_hour"] == 4.0
    assert h200["cost_per_hour"] == pytest.approx(h200["gpus"] * 4.0)
    assert data["simulations"] == sum(a["simulations"] for a in data["alternatives"])


def test_cli_infeasible_exits_3_with_the_reason_after_the_plan(scenario_file: Path) -> None:
    args = [str(scenario_file), "--slo", "ttft_p99_s=0.0001", "--window-s", "60", "--quiet"]
    as_json = CliRunner().invoke(capacity_command, [*args, "--json"])
    assert as_json.exit_code == EXIT_INFEASIBLE == 3, as_json.output
    data = json.loads(as_json.stdout)  # the plan is still printed, to be reported on
    assert data["feasible"] is False and data["max_rate_rps"] is None
    assert data["reason"].startswith("SLO cannot be met even at")
    assert as_json.stderr.startswith("infeasible: nothing meets the SLO: SLO cannot be met even at")
    assert len(as_json.stderr.strip().splitlines()) == 1
    as_text = CliRunner().invoke(capacity_command, args)
    assert as_text.exit_code == 3
    assert "SLO cannot be met even at 0.01562 req/s" in " ".join(as_text.stdout.split())
    assert "infeasible: nothing meets the SLO" in as_text.stderr


def test_cli_out_writes_the_plan_creating_its_folders(scenario_file: Path, tmp_path: Path) -> None:
    """What the README's 70B plan does in a fresh clone, where results/capacity-70b/ is missing."""
    out = tmp_path / "results" / "capacity-70b" / "plan.json"
    args = [str(scenario_file), "--slo", "ttft_p99_s=0.0001", "--window-s", "60", "--out", out]
    first = CliRunner().invoke(capacity_command, [str(a) for a in args])
    assert first.exit_code == 3, first.output  # infeasible, and written all the same
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["feasible"] is False and data["reason"].startswith("SLO cannot be met")
    again = CliRunner().invoke(capacity_command, [*map(str, args), "--json"])
    assert again.exit_code == 3  # an earlier plan is replaced
    assert json.loads(out.read_text(encoding="utf-8")) == json.loads(again.stdout)
    mine = tmp_path / "notes.json"
    mine.write_text('{"mine": true}', encoding="utf-8")
    refused = CliRunner().invoke(capacity_command, [*map(str, args[:-1]), str(mine)])
    assert refused.exit_code == 2 and "not a capacity plan cbsim wrote" in refused.stderr
    assert "SLO cannot be met" not in refused.output  # refused before any search
    assert mine.read_text(encoding="utf-8") == '{"mine": true}'


def test_admission_check_reason_says_what_it_measured() -> None:
    """Late arrivals waiting 10 s for admission (early ones 0.1 s): the reason names admission
    within the limit, not a share of arrivals 'served'."""
    window = 100.0
    arrival = np.linspace(0.0, window, 201)
    queue = np.where(arrival >= 3 * window / 4, 10.0, 0.1)
    results = Results(
        scenario=load_scenario(scenario()),
        requests=pd.DataFrame(
            {"status": ["finished"] * len(arrival), "arrival_s": arrival, "queue_s": queue}
        ),
        iterations=pd.DataFrame(),
        timeseries=pd.DataFrame({"waiting": np.zeros(TIMESERIES_WINDOWS)}),
        summary={"requests": len(arrival), "output_tokens": 0, "unfinished": 0},
    )
    reasons, metrics = _check_run(results, window, {})
    assert metrics["served_ratio"] == 0.0
    assert reasons == [
        "queue unstable: only 0.0% of the 51 requests arriving in the last quarter of the window "
        "were admitted within 1 s (the 1 s floor); a stable queue admits at least 95%"
    ]
    queue = np.where(arrival >= 3 * window / 4, 10.0, 0.5)
    results.requests["queue_s"] = queue
    reasons, _ = _check_run(results, window, {})
    assert "admitted within 1.5 s (3 × the first half's p90 admission delay of 0.5 s)" in reasons[0]


@pytest.mark.slow
def test_shipped_chat_scenario_with_two_seeds() -> None:
    root = Path(__file__).resolve().parents[1]
    result = find_max_rate(root / "scenarios" / "chat-llama3-8b-h100.yaml", SLO, seeds=[1, 2])
    assert result.feasible and result.max_rate_rps is not None
    assert 8.0 < result.max_rate_rps < 40.0
