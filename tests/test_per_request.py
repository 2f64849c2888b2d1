"""Per-request validation: reading logs, replaying them exactly, fitting, the command."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from cbsim.cli.commands import cli
from cbsim.common.errors import CbsimError
from cbsim.cost.engine_profile import load_engine_profile, read_engine_profile, write_engine_profile
from cbsim.run.simulate import simulate
from cbsim.studies.calibration import per_request

DEPLOYMENT = per_request.Deployment(model="llama-3-8b", gpu="h100-sxm", tp=1)


def _measured_log(path: Path, engine: str = "vllm", requests: int = 60) -> pd.DataFrame:
    """A per-request log in LMBenchmark's columns, made by cbsim itself on DEPLOYMENT."""
    rng = np.random.default_rng(3)
    trace = pd.DataFrame(
        {
            "arrival_s": np.cumsum(rng.exponential(0.05, requests)),
            "prompt_tokens": rng.integers(50, 2000, requests),
            "output_tokens": rng.integers(2, 200, requests),
        }
    )
    trace_path = path.with_suffix(".trace.csv")
    trace.to_csv(trace_path, index=False)
    from cbsim.run.loading import load_scenario

    scenario = load_scenario(
        {
            "workload": {"trace": {"path": str(trace_path)}},
            "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "engine": engine},
        }
    )
    done = simulate(scenario).requests.sort_values("request_id")
    log = pd.DataFrame(
        {
            "launch_time": 1.7e9 + trace["arrival_s"].to_numpy(),
            "prompt_tokens": done["prompt_tokens"].to_numpy(),
            "generation_tokens": done["output_tokens"].to_numpy(),
            "ttft": done["ttft_s"].to_numpy(),
            "generation_time": (done["e2e_s"] - done["ttft_s"]).to_numpy(),
        }
    )
    log.to_csv(path, index=False)
    return log


def test_shared_runs_are_the_llm_d_files() -> None:
    runs = list(per_request.shared_runs())
    assert len(runs) == 56
    assert sum(len(r.requests) for r in runs) == 20091
    short = [r for r in runs if r.workload == "short-input"]
    assert len(short) == 20 and all((r.requests["user_id"] >= 0).all() for r in short)
    assert all(r.requests["send_s"].is_monotonic_increasing for r in runs)
    assert {r.deployment.replicas for r in runs} == {1, 2}


def test_a_log_cbsim_made_replays_without_error(tmp_path: Path) -> None:
    """Replaying cbsim's own output on the same deployment reproduces every request exactly:
    send order, lengths and the metric definitions line up."""
    path = tmp_path / "run.csv"
    _measured_log(path)
    run = per_request.read_run(path, DEPLOYMENT)
    compared = per_request.replay(run)
    for metric in per_request.METRICS:
        measured = compared[metric].to_numpy(dtype=float)
        predicted = compared[f"{metric}_pred"].to_numpy(dtype=float)
        # send times pass through epoch seconds (float64 resolution ~0.2 µs at 1.7e9)
        np.testing.assert_allclose(predicted, measured, rtol=0, atol=1e-6)
    errors = per_request.run_errors(compared)
    assert errors["ttft_req_mape"] < 1e-3 and abs(errors["tpot_p99_err"]) < 1e-3


def test_a_slower_engine_shows_in_every_figure(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    _measured_log(path)
    slow = load_engine_profile("vllm")
    slow = slow.model_copy(
        update={"overhead": slow.overhead.model_copy(update={"serial_s": 0.006})}
    )
    write_engine_profile(slow, tmp_path / "slow.json")
    run = per_request.read_run(path, DEPLOYMENT)
    errors = per_request.run_errors(per_request.replay(run, str(tmp_path / "slow.json")))
    assert errors["tpot_p50_err"] > 20 and errors["e2e_p90_err"] > 10


def test_fit_serial_recovers_the_step_time_the_log_was_made_with(tmp_path: Path) -> None:
    made = load_engine_profile("vllm")
    made = made.model_copy(
        update={"overhead": made.overhead.model_copy(update={"serial_s": 0.0015})}
    )
    write_engine_profile(made, tmp_path / "made.json")
    path = tmp_path / "run.csv"
    _measured_log(path, engine=str(tmp_path / "made.json"))
    run = per_request.read_run(path, DEPLOYMENT)
    fitted, grid = per_request.fit_serial([run], load_engine_profile("vllm"))
    assert fitted.overhead.serial_s == pytest.approx(0.0015)
    assert grid["tpot_median_abs_log_ratio"].min() < 1e-6


def test_multi_round_users_share_their_history_blocks() -> None:
    requests = pd.DataFrame({"user_id": [7, 3, 7], "prompt_tokens": [40, 20, 70]})
    ids = per_request._prefix_ids(requests, 16)
    assert ids is not None
    first, other, second = ids
    assert second[: len(first)] == first and len(second) == 70 // 16
    assert not set(other) & set(second)
    assert per_request._prefix_ids(requests.assign(user_id=-1), 16) is None


def test_stable_runs_leave_out_overloaded_ones() -> None:
    runs = list(per_request.shared_runs())
    kept = per_request.stable(runs)
    assert 0 < len(kept) < len(runs)
    assert all(r.requests["ttft_s"].quantile(0.9) <= per_request.STABLE_TTFT_P90_S for r in kept)


def test_the_command_fits_and_reports_a_per_request_log(tmp_path: Path) -> None:
    path = tmp_path / "run.csv"
    _measured_log(path)
    out = tmp_path / "fitted.json"
    result = CliRunner().invoke(
        cli,
        ["calibrate", "e2e", "--engine", "vllm", "--data", str(path), "--gpu", "h100-sxm",
         "--model", "llama-3-8b", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "per-request" in result.output and "fitted: serial" in result.output
    profile = read_engine_profile(out)
    assert profile.overhead.serial_s == pytest.approx(
        load_engine_profile("vllm").overhead.serial_s, abs=2.5e-4
    )


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        ("launch_time,ttft\n1,0.1\n", [], "missing"),
        ("launch_time,prompt_tokens,generation_tokens,ttft,generation_time\n1,x,3,0.1,1\n", [],
         "row 1"),
        ("launch_time,prompt_tokens,generation_tokens,ttft,generation_time\n1,5,3,0.1,1\n",
         ["--gpu", "h900"], "--gpu"),
    ],
)  # fmt: skip
def test_bad_per_request_files_exit_2_naming_the_problem(
    tmp_path: Path, content: str, args: list[str], message: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    given = {"--gpu": "h100-sxm", "--model": "llama-3-8b"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        given[flag] = value
    result = CliRunner().invoke(
        cli,
        ["calibrate", "e2e", "--engine", "vllm", "--data", str(path), "--out",
         str(tmp_path / "p.json"), *[x for kv in given.items() for x in kv]],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "p.json").exists()


def test_a_detailed_vllm_result_is_read_request_by_request(tmp_path: Path) -> None:
    """vLLM `bench serve --save-detailed`: send times, lengths, TTFT and latency per request;
    failed requests (an error text) are left out."""
    detailed = Path(__file__).parent / "data" / "benchmarks" / "vllm_open_loop_detailed.json"
    assert per_request.is_per_request_file(detailed)
    run = per_request.read_run(detailed, DEPLOYMENT)
    assert list(run.requests["send_s"]) == [0.0, 0.41, 0.93]
    assert list(run.requests["prompt_tokens"]) == [512, 300, 700]
    assert run.requests["e2e_s"].tolist() == pytest.approx([0.11, 0.082, 0.154])
    assert run.requests["tpot_s"].tolist() == pytest.approx([0.02, 0.021, 0.021])
    compared = per_request.replay(run)
    assert compared["ttft_s_pred"].notna().all()


def test_a_json_that_is_not_a_detailed_result_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text('{"completed": 3}')
    assert not per_request.is_per_request_file(path)
    with pytest.raises(CbsimError, match="save-detailed"):
        per_request.read_run(path, DEPLOYMENT)
