"""The contract of the design notes, through the contract alone: the command line, the Python API,
the YAML keys and the output columns that external checks use.

This file imports nothing of cbsim but what the contract names (``cbsim.load_scenario``,
``cbsim.simulate``, ``Results``, ``cbsim.cost.CostModel``) and runs the ``cbsim`` command as a user
does, so it passes unchanged across any reorganisation of the package's insides: it ran, as is,
on the code before the package move (issue 40) and after.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import cbsim
from cbsim.cost import CostModel

ROOT = Path(__file__).resolve().parents[1]
QUICK_START = ROOT / "scenarios" / "chat-llama3-8b-h100.yaml"
SMALL = {"workload.num_requests": 40}

REQUEST_COLUMNS = [
    "request_id",
    "replica",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "queue_s",
    "preemptions",
    "spec_steps",
    "drafted_tokens",
    "accepted_tokens",
    "mean_k",
]
ITERATION_COLUMNS = [
    "replica",
    "start_s",
    "duration_s",
    "batch_size",
    "prefill_tokens",
    "decode_tokens",
    "verify_tokens",
    "drafted_tokens",
    "accepted_tokens",
    "emitted_tokens",
    "kv_blocks_used",
    "kv_blocks_total",
    "waiting",
    "mean_k",
]
TIMESERIES_COLUMNS = [
    "t_s",
    "output_tokens_per_s",
    "requests_completed",
    "arrivals",
    "waiting",
    "kv_utilization",
    "batch_size",
    "mean_k",
    "acceptance_rate",
]
SUMMARY_KEYS = [
    "completed",
    "throughput_rps",
    "output_tokens_per_s",
    "goodput_rps",
    "acceptance_rate",
    "mean_k",
    "preemptions",
    "itl_p50_s",
    "itl_p90_s",
    "itl_p99_s",
    "prefix_hit_rate",
] + [f"{m}_{p}_s" for m in ("ttft", "tpot", "e2e") for p in ("p50", "p90", "p99")]


def _cbsim(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("cbsim")
    command = (
        [exe] if exe else [sys.executable, "-c", "import cbsim_launcher; cbsim_launcher.console()"]
    )
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def results() -> cbsim.Results:
    return cbsim.simulate(cbsim.load_scenario(QUICK_START, SMALL))


def test_python_api_gives_the_contract_frames_and_summary(results: cbsim.Results) -> None:
    assert isinstance(results.requests, pd.DataFrame)
    assert set(REQUEST_COLUMNS) <= set(results.requests.columns)
    assert set(ITERATION_COLUMNS) <= set(results.iterations.columns)
    assert set(TIMESERIES_COLUMNS) <= set(results.timeseries.columns)
    assert set(SUMMARY_KEYS) <= set(results.summary)
    assert results.summary["completed"] == 40


def test_results_write_a_folder(results: cbsim.Results, tmp_path: Path) -> None:
    results.write(tmp_path / "out")
    assert (tmp_path / "out" / "summary.json").is_file()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["completed"] == 40


def test_load_scenario_takes_a_mapping_with_the_contract_keys() -> None:
    scenario = cbsim.load_scenario(
        {
            "name": "contract",
            "seed": 1,
            "workload": {
                "num_requests": 20,
                "arrival": {"kind": "poisson", "rate": 8.0},
                "prompt_tokens": {"kind": "lognormal", "mean": 1000, "sigma": 0.8, "max": 8192},
                "output_tokens": {"kind": "fixed", "value": 64},
            },
            "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1, "dtype": "bf16"},
            "scheduler": {"kind": "sarathi", "max_batch_size": 256, "max_batched_tokens": 8192},
            "speculative": {
                "enabled": True,
                "proposer": {"kind": "draft_model", "model": "llama-3.2-1b"},
                "acceptance": {"kind": "iid", "alpha": 0.7},
                "policy": {"kind": "fixed", "k": 4},
            },
            "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
        }
    )
    summary = cbsim.simulate(scenario).summary
    assert summary["completed"] == 20 and summary["acceptance_rate"] > 0


def test_cost_model_prices_a_batch_and_its_breakdown_sums() -> None:
    cost = CostModel(model="llama-3-8b", gpu="h100-sxm", tp=1, dtype="bf16")
    batch = [(512, 0), (1, 700), (1, 1200)]
    seconds = cost.iteration_time(batch)
    assert seconds > 0
    assert sum(cost.breakdown(batch).values()) == pytest.approx(seconds, rel=1e-9)
    assert cost.gemm_time(128, 4096, 4096) > 0


def test_command_line_run_and_validate(tmp_path: Path) -> None:
    ran = _cbsim(
        "run", str(QUICK_START), "--out", str(tmp_path / "run"), "--seed", "2",
        "--set", "workload.num_requests=30", cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "run" / "summary.json").is_file()
    assert _cbsim("validate", str(QUICK_START), cwd=tmp_path).returncode == 0


def test_bad_input_exits_2_with_one_message_and_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("workload: {num_requests: -3}\ncluster: {model: llama-3-8b, gpu: h100-sxm}\n")
    checked = _cbsim("validate", str(bad), cwd=tmp_path)
    assert checked.returncode == 2
    assert "Traceback" not in checked.stderr + checked.stdout
    assert "bad.yaml" in checked.stderr and "num_requests" in checked.stderr
