"""Searches on several processes (``--workers``): the same plan, byte for byte, as the serial path;
its errors; workers that end with the search.

The small searches here finish before a worker has started, so most tests turn off
:attr:`JobPool.local_jobs`: every job of a stage then goes to the workers, as a long search's do.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cbsim.common.errors import CbsimError
from cbsim.run.loading import load_scenario
from cbsim.studies.capacity import capacity_command, plan
from cbsim.studies.capacity.disaggregated import Candidate, plan_disaggregated
from cbsim.studies.capacity.workers import Job, JobPool, cli_workers, run_jobs, worker_count
from cbsim.studies.plan import plan_command

SCENARIO: dict[str, Any] = {
    "name": "workers-test",
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
SEARCH = ["--slo", "ttft_p99_s=2,tpot_p99_s=0.1", "--window-s", "20", "--tolerance", "0.2"]
PLAN = [
    "--model", "llama-3-70b", "--isl", "512", "--osl", "16", "--ttft", "1", "--tpot", "0.1",
    "--window-s", "10", "--gpus", "a100-80gb", "--tp", "1,4", "--pp", "1", "--max-num-seqs", "16",
    "--max-num-batched-tokens", "2048", "--seeds", "2", "--refine", "1",
]  # fmt: skip


@pytest.fixture
def on_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every job of a stage of several on the workers (none in the test's process)."""
    monkeypatch.setattr(JobPool, "local_jobs", False)


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


def capacity(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(capacity_command, args)
    return result.exit_code, result.stdout, result.stderr


# --------------------------------------------------------------------------- same results


@pytest.mark.slow  # .ci/run's second stage runs it
def test_capacity_json_is_byte_identical_on_workers(
    scenario_file: Path, tmp_path: Path, on_workers: None
) -> None:
    args = [str(scenario_file), *SEARCH, "--vary", "cluster.gpu=h100-sxm,a100-80gb,h200"]
    args += ["--target-rps", "12", "--json"]
    outputs = {}
    for workers in ("1", "3"):
        out = tmp_path / f"plan-{workers}.json"
        code, stdout, stderr = capacity([*args, "--workers", workers, "--out", str(out)])
        assert code == 0, stderr
        outputs[workers] = (stdout, out.read_bytes())
    assert outputs["1"] == outputs["3"]
    alternatives = json.loads(outputs["1"][0])["alternatives"]
    assert [a["overrides"]["cluster.gpu"] for a in alternatives] == [
        "h100-sxm",
        "a100-80gb",
        "h200",
    ]
    assert all(a["max_rate_rps"] for a in alternatives)


@pytest.mark.slow  # the same worker pool as test_capacity_json_is_byte_identical_on_workers
def test_plan_json_is_byte_identical_on_workers(tmp_path: Path, on_workers: None) -> None:
    texts = []
    for workers in ("1", "2"):
        out = tmp_path / f"plan-{workers}"
        result = CliRunner().invoke(plan_command, [*PLAN, "--workers", workers, "--out", str(out)])
        assert result.exit_code == 0, result.output
        lines = (out / "plan.json").read_text().splitlines()
        texts.append([line for line in lines if not line.lstrip().startswith('"wall_s"')])
    assert texts[0] == texts[1]
    plan = json.loads((tmp_path / "plan-1" / "plan.json").read_text())
    assert plan["counts"]["meets SLO"] >= 2 and plan["feasible"]


@pytest.mark.slow  # 10 s; CI's second stage runs it (the aggregated search's is checked by default)
def test_disaggregated_plan_is_the_same_on_workers_with_progress(on_workers: None) -> None:
    scenario = load_scenario(
        {
            **SCENARIO,
            "workload": {**SCENARIO["workload"], "output_tokens": {"kind": "fixed", "value": 40}},
        }
    )
    lines: list[str] = []
    pools = {"prefill": [Candidate("h100-sxm", 1), Candidate("h100-sxm", 2)]}
    pools["decode"] = [Candidate("h100-sxm", 1)]
    search = {"window_s": 5.0, "min_requests": 10, "tolerance": 0.5}
    found = [
        plan_disaggregated(
            scenario,
            {"ttft_p99_s": 2.0, "tpot_p99_s": 0.05},
            target_rps=2.0,
            **pools,
            **search,
            workers=workers,
            progress=lines.append if workers > 1 else None,
        )
        for workers in (1, 3)
    ]
    assert json.dumps(found[0]) == json.dumps(found[1])
    assert len(found[0]["prefill_candidates"]) == 2
    # the workers' lines reach this process, with the stage's count of finished searches
    assert any(line.startswith("prefill h100-sxm tp ") for line in lines)
    assert any(line.endswith(" searches done)") for line in lines)


# --------------------------------------------------------------------------- errors


def test_a_workers_user_error_is_the_serial_error(scenario_file: Path, on_workers: None) -> None:
    """The fleet's run at the target is checked inside each alternative's search (a worker)."""
    args = [str(scenario_file), *SEARCH, "--vary", "cluster.gpu=h100-sxm,a100-80gb"]
    args += ["--target-rps", "400000", "--window-s", "60"]
    serial = capacity([*args, "--workers", "1"])
    parallel = capacity([*args, "--workers", "2"])
    assert serial == parallel
    code, _, stderr = serial
    assert code == 2 and stderr.startswith("error: --target-rps: the search would simulate")
    assert len(stderr.splitlines()) == 1 and "Traceback" not in stderr


@pytest.mark.parametrize("command", [capacity_command, plan_command])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_workers_below_one_is_one_error_line(command: Any, value: str, tmp_path: Path) -> None:
    args = ["--workers", value, "--out", str(tmp_path / "p")]
    args = [*PLAN, *args] if command is plan_command else [str(tmp_path / "nope.yaml"), *args]
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 2
    assert result.stderr == f"error: --workers: must be a whole number >= 1, got {value}\n"
    assert not (tmp_path / "p").exists()


def test_the_api_refuses_workers_below_one() -> None:
    with pytest.raises(CbsimError, match="--workers: must be a whole number >= 1, got 0"):
        plan(SCENARIO, {"ttft_p99_s": 2.0}, workers=0)
    assert worker_count(None) == 1  # a Python caller asks for processes
    assert cli_workers(None) == (os.cpu_count() or 1)  # a command uses every CPU


# jobs for the pool's own tests: module level, so that workers import them by name


def _value(x: int, *, progress: Any) -> int:
    return x * x


def _fail(delay_s: float, message: str, internal: bool, *, progress: Any) -> None:
    time.sleep(delay_s)
    if internal:
        raise ValueError(message)
    raise CbsimError(message, field="--target-rps")


def _pid(*, progress: Any) -> int:
    return os.getpid()


def _sleep(seconds: float, *, progress: Any) -> None:
    progress("sleeping")
    time.sleep(seconds)


@pytest.mark.parametrize("internal", [False, True])
def test_the_first_failing_job_in_order_raises(internal: bool, on_workers: None) -> None:
    jobs = [
        Job(_value, (3,)),
        Job(_fail, (1.0, "first", internal)),
        Job(_sleep, (60.0,)),  # after the first error: never run, or its worker ended
        Job(_fail, (0.0, "second", internal)),
    ]
    started = time.monotonic()
    before = _children()
    for workers in (1, 3):
        outcome = run_jobs(jobs, workers)
        assert outcome.error_index == 1 and outcome.values == [9, None, None, None]
        with pytest.raises(ValueError if internal else CbsimError, match="first"):
            outcome.results()
    assert time.monotonic() - started < 40
    assert not _children() - before


def test_ctrl_c_ends_the_workers(on_workers: None) -> None:
    def interrupt(_: str) -> None:
        raise KeyboardInterrupt

    started = time.monotonic()
    before = _children()
    with pytest.raises(KeyboardInterrupt):
        run_jobs([Job(_sleep, (60.0,)), Job(_sleep, (60.0,))], 3, interrupt)
    assert time.monotonic() - started < 40
    assert not _children() - before


def _children() -> set[int]:
    """The process ids of this process's live children. Only those a test starts are its own:
    a process pool of an earlier test in the same pytest worker may still be winding down."""
    return {child.pid for child in multiprocessing.active_children() if child.pid is not None}


def test_jobs_run_here_while_no_worker_has_started() -> None:
    """A small stage does not wait for workers: this process runs the jobs it reaches first."""
    with JobPool(2) as pool:
        assert pool.run([Job(_pid), Job(_pid)]).results() == [os.getpid()] * 2


def test_no_more_worker_processes_than_jobs_can_use() -> None:
    """``--workers 12`` for two alternatives: this process and one worker, not eleven."""
    with JobPool(12) as pool:
        assert pool.run([Job(_pid), Job(_pid)]).results()[0] == os.getpid()
        assert pool.executor()._max_workers == 1
