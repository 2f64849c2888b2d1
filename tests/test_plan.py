"""``cbsim plan``: every layout searched, the Pareto front, the winner verified and launchable.

The plans here serve Llama-3-70B on A100s with short outputs (512-token prompts, 16-token
answers) over 10 s windows: a few requests/s per layout, so a whole plan takes about two
seconds. :func:`check_plan` holds the invariants every plan keeps (the fuzz test below checks
them over generated option combinations): every layout has a verdict and, unless it passed, a
reason; the front is the non-dominated points of each GPU kind; the best layout is on it, meets
the SLO there and passed its verification at the headroom; its launch command names its layout.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cbsim import simulate
from cbsim.run.loading import load_scenario
from cbsim.studies.capacity import EXIT_INFEASIBLE, _check_run
from cbsim.studies.plan import Batching, Instance, Layout, SearchSpace, plan_command
from cbsim.studies.plan.launch import launch_commands
from cbsim.studies.plan.layouts import (
    batching_variants,
    infeasible_reason,
    layout_data,
    parallel_layouts,
    unbuildable,
)
from cbsim.studies.plan.pareto import mark_fronts, objective, operating_point

SLO = {"ttft_p99_s": 1.0, "tpot_p99_s": 0.1}
QUICK = [
    "--model", "llama-3-70b", "--isl", "512", "--osl", "16", "--ttft", "1", "--tpot", "0.1",
    "--window-s", "10",
]  # fmt: skip
SMALL = [
    *QUICK, "--gpus", "a100-80gb", "--tp", "1,4", "--pp", "1", "--max-num-seqs", "16",
    "--max-num-batched-tokens", "2048", "--seeds", "2", "--refine", "1",
]  # fmt: skip
VERDICTS = {"meets SLO", "fails SLO", "infeasible", "not searched"}
LAUNCHERS = {"vllm": "vllm", "sglang": "python", "tensorrt-llm": "trtllm-serve"}


def invoke(args: list[str]) -> Result:
    return CliRunner().invoke(plan_command, args)


def dominates(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ax, ay = a["tokens_per_s_per_gpu"], a["tokens_per_s_per_user"] or 0.0
    bx, by = b["tokens_per_s_per_gpu"], b["tokens_per_s_per_user"] or 0.0
    return ax >= bx and ay >= by and (ax > bx or ay > by)


def meets(metrics: dict[str, Any], slo: dict[str, float]) -> bool:
    return all(metrics.get(k) is not None and metrics[k] <= v for k, v in slo.items())


def check_plan(plan: dict[str, Any]) -> None:
    """The invariants of a plan (see the module docstring)."""
    for key in ("model", "slo", "space", "settings", "layouts", "points", "pareto", "best",
                "feasible", "reason", "simulations", "wall_s", "counts", "verifications"):  # fmt: skip
        assert key in plan, key
    slo = plan["slo"]
    budget = plan["space"]["total_gpus"]
    layouts = plan["layouts"]
    assert [row["id"] for row in layouts] == list(range(len(layouts)))
    assert plan["counts"] == {
        v: sum(r["verdict"] == v for r in layouts)
        for v in dict.fromkeys(r["verdict"] for r in layouts)
    }
    for row in layouts:
        assert row["verdict"] in VERDICTS, row
        if row["verdict"] != "meets SLO":
            assert isinstance(row["reason"], str) and row["reason"], row
            assert row["operating_point"] is None
        else:
            point = row["operating_point"]
            assert meets(point["slo_metrics"], slo), row
            assert point["tokens_per_s_per_gpu"] > 0
            if budget is not None:
                assert point["gpus"] <= budget and point["replicas"] == budget // point["gpus"]
        if row["verdict"] in ("infeasible", "not searched"):
            assert row["simulations"] == 0
    points = plan["points"]
    for point in points:
        assert layouts[point["layout"]]["verdict"] == "meets SLO"
        same_kind = [p for p in points if p["gpu"] == point["gpu"]]
        assert point["on_front"] == (not any(dominates(p, point) for p in same_kind))
    assert len(plan["pareto"]) == sum(p["on_front"] for p in points)
    best = plan["best"]
    if not plan["feasible"]:
        assert best is None and plan["reason"]
        return
    point = best["operating_point"]
    assert meets(point["slo_metrics"], slo)
    confirmations = plan["confirmations"]
    if confirmations:  # screened over a short window, the best layouts searched again
        [again] = [c for c in confirmations if c["layout"] == best["id"]]
        assert again["operating_point"] == point and again["max_rate_rps"] == best["max_rate_rps"]
        assert best["screened_max_rate_rps"] == layouts[best["id"]]["max_rate_rps"]
        if plan["settings"]["target_rps"] is None:  # the cheapest screened per output token
            passing = [r for r in layouts if r["verdict"] == "meets SLO"]
            passing.sort(key=lambda r: objective(r["operating_point"], budget))
            assert [c["layout"] for c in confirmations] == [r["id"] for r in passing[:3]]
        assert [v["layout"] for v in plan["verifications"]][-1] == best["id"]
    else:
        assert point["on_front"] and point in plan["pareto"]
    planned = best["planned"]
    assert planned["passed"] and 0 < planned["fraction"] <= planned["headroom"]
    assert math.isclose(planned["rate_rps"], planned["fraction"] * point["rate_rps"])
    assert meets(planned["metrics"], slo)
    assert len(planned["seeds"]) == plan["settings"]["verify_seeds"]
    assert [v["passed"] for v in plan["verifications"]][-1] is True
    assert not any(v["passed"] for v in plan["verifications"][:-1])
    launch = best["launch"]
    argv = launch["commands"][-1]["argv"]
    assert argv[0] == LAUNCHERS[plan["engine"]]
    tp_flag = {"vllm": "--tensor-parallel-size", "python": "--tp-size", "trtllm-serve": "--tp_size"}
    assert argv[argv.index(tp_flag[argv[0]]) + 1] == str(best["tp"])


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, str]:
    out = tmp_path_factory.mktemp("plan") / "plan"
    result = invoke([*SMALL, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "plan.json").read_text()), out, result.output


def test_plan_json_holds_every_layout_and_keeps_the_invariants(
    small_plan: tuple[dict[str, Any], Path, str],
) -> None:
    plan, out, _ = small_plan
    check_plan(plan)
    verdicts = {row["verdict"] for row in plan["layouts"]}
    assert {"meets SLO", "infeasible", "not searched"} <= verdicts
    modes = {row["mode"] for row in plan["layouts"] if row["verdict"] == "meets SLO"}
    assert modes == {"aggregated", "disaggregated"}
    over = [r for r in plan["layouts"] if r["verdict"] == "infeasible"]
    assert any("does not fit in a100-80gb memory at tp=1" in r["reason"] for r in over)
    assert (out / "pareto.png").read_bytes().startswith(b"\x89PNG")
    assert (
        plan["best"]["planned"]["cost_per_million_tokens"]
        < (plan["best"]["planned"]["cost_per_million_output_tokens"])
    )


def test_terminal_shows_the_layouts_front_winner_and_launch_in_ms(
    small_plan: tuple[dict[str, Any], Path, str],
) -> None:
    plan, _, output = small_plan
    assert "latencies in ms" in output and "TTFT p99" in output and "TPOT p99" in output
    assert "Pareto front" in output
    assert f"best: {plan['best']['name']}" in output
    assert plan["best"]["launch"]["commands"][-1]["command"] in output


def test_the_winner_resimulated_at_its_planned_load_meets_the_slo(
    small_plan: tuple[dict[str, Any], Path, str],
) -> None:
    """Independent of the plan's own verification: three other seeds, a 60 s window."""
    plan, _, _ = small_plan
    best = plan["best"]
    base = {
        "name": "resim",
        "workload": {
            "duration_s": 60.0,
            "arrival": {"kind": "poisson", "rate": best["planned"]["rate_rps"]},
            "prompt_tokens": {"kind": "fixed", "value": 512},
            "output_tokens": {"kind": "fixed", "value": 16},
        },
        "cluster": {"model": "llama-3-70b", "gpu": best["gpu"]},
        "horizon_s": 720.0,
        "output": {"timeseries_window_s": 3.0},
    }
    prefill = best["prefill"]
    layout = Layout(
        Instance(best["gpu"], best["tp"], best["pp"], best["ep"], best["dp"]),
        Batching(best["max_num_seqs"], best["max_num_batched_tokens"]),
        None if prefill is None else Instance(best["gpu"], prefill["tp"]),
    )
    data = layout_data(base, layout)
    if prefill is not None:
        count = best["operating_point"]["prefill_instances"]
        data["cluster"]["disaggregation"]["prefill"]["replicas"] = count
    for seed in (21, 22, 23):
        results = simulate(load_scenario({**data, "seed": seed}))
        reasons, _ = _check_run(results, 60.0, SLO)
        assert not reasons, (seed, reasons)


def test_an_unreachable_slo_writes_the_plan_and_exits_3(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    args = [*QUICK, "--gpus", "a100-80gb", "--tp", "4", "--pp", "1", "--no-disagg"]
    result = invoke([*args, "--tpot", "0.001", "--refine", "0", "--out", str(out)])
    assert result.exit_code == EXIT_INFEASIBLE, result.output
    plan = json.loads((out / "plan.json").read_text())
    check_plan(plan)
    assert plan["best"] is None and plan["layouts"][0]["verdict"] == "fails SLO"
    assert "infeasible: no plan: no layout meets the SLO" in result.output


def test_a_scenario_gives_the_workload(tmp_path: Path) -> None:
    scenario = {
        "name": "from-file",
        "seed": 4,
        "workload": {
            "num_requests": 100,
            "arrival": {"kind": "poisson", "rate": 2.0},
            "prompt_tokens": {"kind": "uniform", "low": 256, "high": 768},
            "output_tokens": {"kind": "fixed", "value": 16},
        },
        "cluster": {"model": "llama-3-70b", "gpu": "a100-80gb", "tp": 4},
        "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "plan"
    args = ["--scenario", str(path), "--tp", "4", "--pp", "1", "--no-disagg", "--refine", "0"]
    result = invoke([*args, "--window-s", "10", "--seeds", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plan.json").read_text())
    check_plan(plan)
    assert plan["settings"]["seed"] == 4 and plan["slo"] == SLO
    assert 256 <= plan["workload"]["prompt_tokens_mean"] <= 768
    again = invoke([*args, "--isl", "512", "--out", str(out)])
    assert again.exit_code == 2 and "--isl" in again.output


def test_out_is_never_a_folder_cbsim_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    result = invoke([*SMALL, "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--out" in result.output
    assert (tmp_path / "mine.txt").read_text() == "keep"


# --------------------------------------------------------------------------- parts


def test_infeasible_layouts_carry_their_reason() -> None:
    base = {
        "seed": 1,
        "workload": {
            "num_requests": 10,
            "arrival": {"kind": "poisson", "rate": 1.0},
            "prompt_tokens": {"kind": "fixed", "value": 512},
            "output_tokens": {"kind": "fixed", "value": 16},
        },
        "cluster": {"model": "llama-3-70b", "gpu": "h100-sxm"},
    }
    fits = infeasible_reason(layout_data(base, Layout(Instance("h100-sxm", 4))), 528)
    assert fits is None
    memory = infeasible_reason(layout_data(base, Layout(Instance("h100-sxm", 1))), 528)
    assert memory is not None and "does not fit" in memory
    qwen = {**base, "cluster": {"model": "qwen2.5-7b", "gpu": "h100-sxm"}}  # 28 heads
    heads = infeasible_reason(layout_data(qwen, Layout(Instance("h100-sxm", 8))), 528)
    assert heads is not None and "attention heads" in heads
    kv = infeasible_reason(layout_data(base, Layout(Instance("h100-sxm", 2))), 10**6)
    assert kv is not None and "one request needs 1,000,000" in kv
    moe = {**base, "cluster": {"model": "mixtral-8x7b", "gpu": "h100-sxm"}}
    experts = infeasible_reason(layout_data(moe, Layout(Instance("h100-sxm", 1, ep=3))), 528)
    assert experts is not None and "ep" in experts


def test_the_space_spans_parallelism_batching_and_experts() -> None:
    space = SearchSpace(
        gpus=["h100-sxm"], tp=[1, 2, 4, 8], pp=[1, 2], dp=[1, 2], max_num_seqs=[64, 256],
        max_num_batched_tokens=[2048, 8192], max_gpus=None, disaggregated=True,
    )  # fmt: skip
    dense = parallel_layouts(space, "llama-3-70b")
    assert {(x.instance.tp, x.instance.pp) for x in dense} == {
        (1, 1), (2, 1), (4, 1), (8, 1), (1, 2), (2, 2), (4, 2)
    }  # fmt: skip
    moe = {layout.instance for layout in parallel_layouts(space, "mixtral-8x7b")}
    assert Instance("h100-sxm", 2, 1, 2, 1) in moe and Instance("h100-sxm", 4, 1, 8, 2) in moe
    assert all(i.ep in (1, i.tp * i.dp) for i in moe)
    assert len(batching_variants(space, dense[2])) == 4
    unit = Layout(Instance("h100-sxm", 4), prefill=Instance("h100-sxm", 2))
    assert [v.batching.max_num_seqs for v in batching_variants(space, unit)] == [64, 256]


def test_the_front_and_the_objective() -> None:
    def point(gpu: str, x: float, y: float, price: float = 3.0) -> dict[str, Any]:
        return {"gpu": gpu, "tokens_per_s_per_gpu": x, "tokens_per_s_per_user": y,
                "price_per_gpu_hour": price}  # fmt: skip

    points = [point("a", 100, 10), point("a", 80, 20), point("a", 70, 15), point("b", 50, 5, 1.0)]
    front = mark_fronts(points)
    assert [p["on_front"] for p in points] == [True, True, False, True]
    assert len(front) == 3
    cheapest = min(points, key=lambda p: objective(p, None))
    assert cheapest["gpu"] == "b"  # $1/h at 50 tok/s beats $3/h at 100
    assert min(points, key=lambda p: objective(p, 8))["tokens_per_s_per_gpu"] == 100
    figures = operating_point(
        rate_rps=2.0, gpus=4, price_per_gpu_hour=3.0, output_tokens=100, prompt_tokens=900,
        tpot_mean_s=0.05, budget=10,
    )  # fmt: skip
    assert figures["replicas"] == 2 and figures["gpus_used"] == 8
    assert figures["tokens_per_s_per_gpu"] == pytest.approx(2 * 2 * 100 / 10)
    assert figures["tokens_per_s_per_user"] == pytest.approx(20)
    assert figures["cost_per_million_output_tokens"] == pytest.approx(24 / (400 * 3600) * 1e6)
    assert figures["cost_per_million_tokens"] == pytest.approx(24 / (4000 * 3600) * 1e6)


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        ("vllm", ["vllm", "serve", "meta-llama/Meta-Llama-3-70B-Instruct",
                  "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2",
                  "--max-num-seqs", "128", "--max-num-batched-tokens", "2048",
                  "--quantization", "fp8", "--kv-cache-dtype", "fp8"]),
        ("sglang", ["python", "-m", "sglang.launch_server", "--model-path",
                    "meta-llama/Meta-Llama-3-70B-Instruct", "--tp-size", "4", "--pp-size", "2",
                    "--max-running-requests", "128", "--chunked-prefill-size", "2048",
                    "--quantization", "fp8", "--kv-cache-dtype", "fp8_e4m3"]),
        ("tensorrt-llm", ["trtllm-serve", "meta-llama/Meta-Llama-3-70B-Instruct", "--tp_size",
                          "4", "--pp_size", "2", "--max_batch_size", "128",
                          "--max_num_tokens", "2048"]),
    ],
)  # fmt: skip
def test_launch_commands_use_each_engines_flags(engine: str, expected: list[str]) -> None:
    layout = Layout(Instance("h100-sxm", 4, 2), Batching(128, 2048))
    launch = launch_commands(engine, "llama-3-70b", layout, dtype="fp8", kv_dtype="fp8")
    assert launch["commands"][0]["argv"] == expected
    unit = Layout(Instance("h100-sxm", 4), prefill=Instance("h100-sxm", 2))
    split = launch_commands(engine, "llama-3-70b", unit, prefill_instances=3)
    assert [(c["role"], c["count"]) for c in split["commands"]] == [("prefill", 3), ("decode", 1)]
    assert split["notes"]
    assert launch_commands("none", "llama-3-70b", layout)["commands"] == []


# --------------------------------------------------------------------------- bad input

BAD_OPTIONS = [
    ("--isl", "0"), ("--isl", "abc"), ("--isl", "100000000"), ("--osl", "0"), ("--ttft", "0"),
    ("--ttft", "-1"), ("--tpot", "nan"), ("--gpus", "h100"), ("--gpus", ""), ("--model", "llama-9"),
    ("--tp", "0"), ("--tp", "a"), ("--pp", ""), ("--max-num-seqs", "0"), ("--headroom", "0"),
    ("--headroom", "1.5"), ("--seeds", "0"), ("--total-gpus", "0"), ("--engine", "nope"),
    ("--dtype", "fp4"), ("--dtype", "int3"), ("--price", "h100-sxm=-1"), ("--price", "nope=1"),
    ("--refine", "-1"), ("--window-s", "0"), ("--tolerance", "2"), ("--percentile", "p42"),
    ("--osl", "9000"), ("--pp", "0"), ("--pp", "16"), ("--pp", "100"), ("--tp", "3"),
    ("--tp", "16"),
]  # fmt: skip
# the option a bad value is put down to, where it is not the option itself
NAMED = {("--osl", "9000"): "--isl"}


@pytest.mark.parametrize(("option", "value"), BAD_OPTIONS)
def test_a_bad_option_exits_2_naming_it(option: str, value: str, tmp_path: Path) -> None:
    args = [*QUICK, "--gpus", "h100-sxm", option, value, "--out", str(tmp_path / "p")]
    result = invoke(args)
    assert result.exit_code == 2, result.output
    assert NAMED.get((option, value), option) in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize(
    ("args", "option", "why"),
    [
        (["--pp", "0"], "--pp", "GPUs"),
        (["--pp", "16"], "--pp", "more GPUs than one h100-sxm node (8 GPUs"),
        (["--pp", "100"], "--pp", "80 layers"),
        (["--pp", "4", "--total-gpus", "2"], "--pp", "--total-gpus 2"),
        (["--tp", "3"], "--tp", "power of two"),
        (["--tp", "2,4", "--pp", "8"], "--pp", "--tp x --pp = 16 GPUs"),
    ],
)
def test_options_that_leave_no_layout_exit_2_saying_why(
    args: list[str], option: str, why: str, tmp_path: Path
) -> None:
    """Bad input, not "nothing meets the SLO" (exit 3): no layout exists to search."""
    result = invoke([*QUICK, "--gpus", "h100-sxm", *args, "--out", str(tmp_path / "p")])
    assert result.exit_code == 2, result.output
    assert f"{option}: " in result.output and why in result.output
    assert "tokens" not in result.output


def test_a_mixture_of_experts_without_a_dp_or_pp_of_1_has_no_layout() -> None:
    space = SearchSpace(["h100-sxm"], [1, 2], [2], [2, 4], [64], [2048], None, True)
    assert unbuildable(space, "mixtral-8x7b") == (
        "--dp",
        "every --dp (2,4) with every --pp (2): pipeline stages with attention data parallelism "
        "are not modelled; give --dp 1 or --pp 1",
    )
    assert unbuildable(space, "llama-3-8b") is None  # dense: --dp does not apply


@pytest.mark.parametrize("missing", ["--model", "--isl", "--osl"])
def test_the_workload_is_required(missing: str, tmp_path: Path) -> None:
    args = [a for i, a in enumerate(QUICK) if missing not in (a, QUICK[i - 1])]
    result = invoke([*args, "--out", str(tmp_path / "p")])
    assert result.exit_code == 2 and missing in result.output


# --------------------------------------------------------------------------- fuzz


@st.composite
def option_sets(draw: st.DrawFn, wide: bool = True) -> list[str]:
    """A valid combination of options over a small space (``wide=False``: smaller still, one
    parallel degree and batch cap, a plan of a second or two)."""
    gpu = draw(st.sampled_from(["a100-80gb", "h100-sxm"]))
    size = 2 if wide else 1
    tps = draw(st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=size, unique=True))
    args = [
        *QUICK, "--gpus", gpu, "--tp", ",".join(map(str, tps)),
        "--pp", draw(st.sampled_from(["1", "1,2"] if wide else ["1"])),
        "--max-num-seqs", draw(st.sampled_from(["16", "16,64"] if wide else ["16"])),
        "--max-num-batched-tokens", "2048",
        "--engine", draw(st.sampled_from(["vllm", "sglang", "tensorrt-llm"])),
        "--dtype", draw(st.sampled_from(["bf16", "fp8"])),
        "--headroom", str(draw(st.sampled_from([0.6, 0.8, 1.0]))),
        "--seeds", str(draw(st.integers(1, 2))),
        "--refine", draw(st.sampled_from(["0", "1"])),
        "--percentile", draw(st.sampled_from(["p90", "p99"])),
        "--disagg" if draw(st.booleans()) else "--no-disagg",
    ]  # fmt: skip
    # a budget below every layout's GPUs leaves nothing to search: a bad option (exit 2)
    budgets = [b for b in ((4, 8, 16) if wide else (8,)) if b >= min(tps)]
    budget = draw(st.sampled_from([None, *budgets]))
    if budget is not None:
        args += ["--total-gpus", str(budget)]
    return args


def _check_options(args: list[str], out: Path) -> None:
    result = invoke([*args, "--out", str(out)])
    assert result.exit_code in (0, EXIT_INFEASIBLE), result.output
    plan = json.loads((out / "plan.json").read_text())
    check_plan(plan)
    assert plan["feasible"] == (result.exit_code == 0)


@settings(
    max_examples=3,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(args=option_sets(wide=False))
def test_fuzz_valid_options_give_a_complete_consistent_plan(
    args: list[str], tmp_path: Path
) -> None:
    _check_options(args, tmp_path / "plan")


@pytest.mark.slow
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=option_sets())
def test_fuzz_valid_options_campaign(args: list[str], tmp_path: Path) -> None:
    _check_options(args, tmp_path / "plan")


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    bad=st.lists(st.sampled_from(BAD_OPTIONS), min_size=1, max_size=2, unique_by=lambda b: b[0]),
    args=option_sets(),
)
def test_fuzz_bad_options_exit_2_naming_one(
    bad: list[tuple[str, str]], args: list[str], tmp_path: Path
) -> None:
    flags = {option for option, _ in bad}
    kept: list[str] = []
    skip = False
    for i, item in enumerate(args):
        if skip:
            skip = False
            continue
        if item in flags and i + 1 < len(args) and not args[i + 1].startswith("--"):
            skip = True
            continue
        kept.append(item)
    if {("--tp", "16"), ("--pp", "16")} & set(bad):
        kept = _without_a_budget_of(16, kept)  # 16 GPUs in one layout are bad only beyond it
    result = invoke([*kept, *(x for pair in bad for x in pair), "--out", str(tmp_path / "p")])
    assert result.exit_code == 2, result.output
    assert any(NAMED.get(pair, pair[0]) in result.output for pair in bad), result.output


def _without_a_budget_of(gpus: int, args: list[str]) -> list[str]:
    """``args`` without a ``--total-gpus`` of ``gpus`` or more (the default budget, one node,
    then applies)."""
    if "--total-gpus" not in args:
        return args
    at = args.index("--total-gpus")
    if int(args[at + 1]) < gpus:
        return args
    return args[:at] + args[at + 2 :]


def test_a_layout_of_16_gpus_is_refused_only_beyond_the_budget(tmp_path: Path) -> None:
    """Drawn by the campaign above: --tp 16 within --total-gpus 16 is a layout (two nodes), not
    a bad option; without the budget (one node) it is one."""
    base = ["--model", "llama-3-70b", "--isl", "512", "--osl", "16", "--gpus", "a100-80gb",
            "--ttft", "1", "--tpot", "0.1", "--refine", "0", "--seeds", "1", "--window-s", "10",
            "--tp", "16", "--quiet"]  # fmt: skip
    assert invoke([*base, "--out", str(tmp_path / "a")]).exit_code == 2
    within = invoke([*base, "--total-gpus", "16", "--out", str(tmp_path / "b")])
    assert within.exit_code == 0, within.output


def test_a_sessions_scenario_is_refused_naming_its_file_and_field(tmp_path: Path) -> None:
    path = Path(__file__).resolve().parents[1] / "scenarios" / "chat-sessions.yaml"
    result = invoke(["--scenario", str(path), "--no-disagg", "--out", str(tmp_path / "p")])
    assert result.exit_code == 2, result.output
    assert f"{path}: workload.sessions: a plan sizes" in result.output
    assert "--isl/--osl" in result.output and not (tmp_path / "p").exists()
