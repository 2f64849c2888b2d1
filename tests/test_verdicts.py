"""Verdicts that cannot mislead (issue 37): stability judged on what the run served and how its
latency moved, every rejection said and a run that rejects everything failing, SLO magnitudes
that look like milliseconds warned."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import cbsim
from cbsim.cli.commands import cli
from cbsim.outputs.stability import stability_summary
from cbsim.schema.setting_warnings import implausible_slo
from tests.conftest import small_scenario


def _requests(n: int, rate: float, e2e: np.ndarray, finished: np.ndarray) -> pd.DataFrame:
    arrival = np.arange(n) / rate
    return pd.DataFrame(
        {
            "arrival_s": arrival,
            "queue_s": np.zeros(n),
            "e2e_s": np.where(finished, e2e, np.nan),
            "finish_s": np.where(finished, arrival + e2e, np.nan),
            "status": np.where(finished, "finished", "running"),
        }
    )


def _summary(requests: pd.DataFrame) -> dict[str, object]:
    scenario = cbsim.load_scenario(small_scenario())
    empty = pd.DataFrame({"t_s": [], "waiting": []})
    return stability_summary(requests, empty, scenario, served_rps=1.0)


def test_a_queue_hidden_in_the_batch_is_unstable() -> None:
    """Every request admitted (no waiting queue), each slower than the last: 400 arrive at
    10/s, only the first 150 finish, the rest are still running at the end."""
    n = 400
    e2e = 2.0 + np.arange(n) * 0.2
    finished = np.arange(n) < 150
    summary = _summary(_requests(n, 10.0, e2e, finished))
    assert summary["stable"] is False
    assert "requests in the system" in str(summary["stability"])
    assert summary["backlog"] == 0  # what the old check looked at


def test_a_steady_run_is_stable_and_served_is_what_came_in() -> None:
    n = 400
    summary = _summary(_requests(n, 10.0, np.full(n, 3.0), np.ones(n, dtype=bool)))
    assert summary["stable"] is True
    assert summary["served_rps"] == pytest.approx(10.0, rel=0.05)


def test_requests_the_client_gave_up_on_are_not_in_the_system() -> None:
    """Timed-out requests left the system at their timeout: a run whose every request times out
    is unstable for that reason alone, not for "requests in the system grew by 599"."""
    n = 400
    requests = _requests(n, 10.0, np.full(n, 3.0), np.zeros(n, dtype=bool))
    requests["status"] = "timed_out"
    summary = _summary(requests)
    assert summary["stable"] is False
    assert "400 of 400 requests timed out" in str(summary["stability"])
    assert "requests in the system" not in str(summary["stability"])


def test_a_closing_burst_is_not_a_trend() -> None:
    """Steady, then a burst in the last seconds whose requests finish after the last arrival."""
    n = 300
    arrival = np.concatenate([np.arange(n - 60) / 5.0, 59.0 + np.arange(60) / 60.0])
    e2e = np.concatenate([np.full(n - 60, 2.0), 2.0 + np.arange(60) * 0.2])
    frame = pd.DataFrame(
        {
            "arrival_s": arrival,
            "queue_s": np.zeros(n),
            "e2e_s": e2e,
            "finish_s": arrival + e2e,
            "status": "finished",
        }
    )
    assert _summary(frame)["stable"] is True


def test_a_run_that_rejects_everything_fails_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    data = small_scenario(
        {"workload.prompt_tokens": {"kind": "fixed", "value": 20000}, "name": "long"}
    )
    path.write_text(json.dumps(data))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["run", str(path), "--out", str(out), "-q"])
    assert result.exit_code == 1
    assert "every one of the 40 requests was rejected" in result.stderr
    assert "beyond the 8,192-token context" in result.stderr
    assert "prefilled alone" not in result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rejected_context_length"] == 40
    assert summary["stable"] is False
    checked = CliRunner().invoke(cli, ["validate", str(path)])
    assert checked.exit_code == 0
    assert "40 of 40 requests have prompt + output beyond the 8,192-token context" in checked.stderr


def test_targets_that_look_like_milliseconds_are_warned(tmp_path: Path) -> None:
    assert implausible_slo({"ttft": 2.0, "tpot": 0.1}) == []
    warnings = implausible_slo({"ttft": 300.0, "tpot": 10.0}, "--{}")
    assert len(warnings) == 2 and "--ttft = 300 s" in warnings[0] and "write 0.3" in warnings[0]
    path = tmp_path / "ms.yaml"
    path.write_text(json.dumps(small_scenario({"slo.ttft_s": 2000})))
    checked = CliRunner().invoke(cli, ["validate", str(path)])
    assert "slo.ttft_s = 2000 s" in checked.stderr


def test_calibrating_on_an_open_loop_summary_says_what_it_needs(tmp_path: Path) -> None:
    """An ordinary `vllm bench serve` file (open loop, `--request-rate inf`) is refused with the
    file, the reason and how to give what the fit reads (issue 37)."""
    result_file = tmp_path / "open.json"
    bench = CliRunner().invoke(
        cli,
        ["bench", "-m", "llama-3-8b", "-g", "h100-sxm", "--num-prompts", "20", "--input-len",
         "128", "--output-len", "16", "--save-result", str(result_file)],
    )  # fmt: skip
    assert bench.exit_code == 0, bench.output
    fit = CliRunner().invoke(
        cli,
        ["calibrate", "e2e", "--engine", "vllm", "--data", str(result_file), "--out",
         str(tmp_path / "profile.json")],
    )  # fmt: skip
    assert fit.exit_code == 2
    message = " ".join(fit.output.split())
    assert f"{result_file}: not a closed-loop benchmark" in message
    assert "--save-detailed" in message and "--max-concurrency" in message
    assert "Traceback" not in fit.output


def test_one_request_is_not_called_a_closed_loop() -> None:
    """One arrival has no offered rate: the verdict says what was served, not "offered closed
    loop" (which it printed for every run without an offered rate, open loops of one request
    included)."""
    summary = _summary(_requests(1, 1.0, np.full(1, 2.0), np.ones(1, dtype=bool)))
    assert summary["stable"] is True
    assert "closed loop" not in str(summary["stability"])
    assert str(summary["stability"]).startswith("stable (served ")
