"""Progress of long commands in every output mode (issue 37: ``cbsim capacity`` ran 8.5 minutes
silent into a file, ``cbsim plan`` showed a spinner without "layout i of N").

Not a terminal (a pipe, a file, CliRunner): one plain line per step on stderr, naming the
command; a terminal: one spinner line with the pass's count and the time it has left. The clock
is a fake one: nothing here waits.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import cbsim.cli.commands as cli_module
from cbsim.cli.commands import cli
from cbsim.common.progress import CountLines, StepReporter, format_eta, tell, time_left
from cbsim.studies.capacity import capacity_command
from cbsim.studies.capacity.workers import Job, run_jobs
from cbsim.studies.plan import plan_command

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "scenarios" / "chat-llama3-8b-h100.yaml"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_one_per_new_step_with_the_time_left() -> None:
    stream, clock = io.StringIO(), Clock()
    reporter = StepReporter("plan", stream=stream, interactive=False, clock=clock)
    tell(reporter, "layout 1 of 4: h100-sxm TP1: rate 16 req/s", 0, 4, "searches")
    clock.now = 10.0
    tell(reporter, "layout 2 of 4: h100-sxm TP2: rate 16 req/s", 1, 4, "searches")
    tell(reporter, "layout 2 of 4: h100-sxm TP2: rate 16 req/s", 1, 4, "searches")  # no news
    clock.now = 20.0
    tell(reporter, "layout 3 of 4: h100-sxm TP4: rate 8 req/s", 2, 4, "searches")
    assert stream.getvalue().splitlines() == [
        "plan: layout 1 of 4: h100-sxm TP1: rate 16 req/s · 0 of 4 searches done",
        "plan: layout 2 of 4: h100-sxm TP2: rate 16 req/s · 1 of 4 searches done · about 30s left",
        "plan: layout 3 of 4: h100-sxm TP4: rate 8 req/s · 2 of 4 searches done · about 20s left",
    ]


def test_a_terminal_shows_the_count_and_time_left_on_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shown: list[str] = []
    clock = Clock()
    reporter = StepReporter("plan", stream=io.StringIO(), interactive=True, clock=clock)
    monkeypatch.setattr(reporter, "_show", shown.append)
    reporter.count(0, 12, "searches")
    reporter("layout 1 of 12: a100-80gb TP4: rate 2 req/s, seed 1")
    clock.now = 65.0
    reporter.count(1, 12, "searches")
    reporter("layout 2 of 12: a100-80gb TP8: rate 2 req/s, seed 1")
    reporter("layout 2 of 12: a100-80gb TP8: rate 2 req/s, seed 1")  # a spinner shows it again
    assert shown == [
        "plan: layout 1 of 12: a100-80gb TP4: rate 2 req/s, seed 1 · 0 of 12 searches done",
        "plan: layout 2 of 12: a100-80gb TP8: rate 2 req/s, seed 1 · 1 of 12 searches done · "
        "about 11m55s left",
        "plan: layout 2 of 12: a100-80gb TP8: rate 2 req/s, seed 1",
    ]
    assert time_left(0.2) == "under 1s left" and format_eta(3725) == "1h02m"


def test_a_new_pass_restarts_the_pace() -> None:
    stream, clock = io.StringIO(), Clock()
    reporter = StepReporter("plan", stream=stream, interactive=False, clock=clock)
    reporter.count(0, 2)
    clock.now = 100.0
    reporter.count(2, 2)  # pass 1 took 100 s
    reporter.count(0, 10)  # pass 2 starts: its own pace
    clock.now = 110.0
    reporter.counted(1, 10, "searches")
    assert stream.getvalue() == "plan: 1 of 10 searches done · about 1m30s left\n"


def test_a_plain_callable_gets_the_stages_count_in_its_text() -> None:
    lines: list[str] = []
    tell(lines.append, "rate 4 req/s (step 2 of ~8), seed 1", 1, 8)  # a step: text alone
    tell(lines.append, "alternative 2 of 3: rate 4 req/s", 1, 3, "searches")
    assert lines == [
        "rate 4 req/s (step 2 of ~8), seed 1",
        "alternative 2 of 3: rate 4 req/s (1/3 searches done)",
    ]


def _search(name: str, *, progress: Any) -> str:
    progress(f"{name}: rate 1 req/s")
    return name


def test_serial_stages_count_their_searches() -> None:
    stream = io.StringIO()
    reporter = StepReporter("plan", stream=stream, interactive=False, clock=Clock())
    jobs = [Job(_search, (name,)) for name in ("a", "b")]
    assert run_jobs(jobs, 1, reporter).results() == ["a", "b"]
    assert stream.getvalue().splitlines() == [
        "plan: a: rate 1 req/s · 0 of 2 searches done",
        "plan: b: rate 1 req/s · 1 of 2 searches done · under 1s left",
    ]


def test_count_lines_wait_ten_seconds_then_print_each_tenth() -> None:
    stream, clock = io.StringIO(), Clock()
    lines = CountLines("run", "requests", stream=stream, clock=clock)
    lines(500, 1000, 30.0)  # half done in under ten seconds: a short run prints nothing
    clock.now = 12.0
    lines(600, 1000, 40.0)
    lines(650, 1000, 45.0)  # the same tenth
    clock.now = 20.0
    lines(1000, 1000, 70.0)
    assert stream.getvalue().splitlines() == [
        "run: 600 of 1,000 requests done (60%), 40 s simulated · about 8s left",
        "run: 1,000 of 1,000 requests done (100%), 70 s simulated",
    ]


# --------------------------------------------------------------------------- the commands


def _small_chat(tmp_path: Path) -> Path:
    data = yaml.safe_load(CHAT.read_text())
    data["workload"]["num_requests"] = 50
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_capacity_on_a_pipe_prints_a_line_per_simulation(tmp_path: Path) -> None:
    args = [str(_small_chat(tmp_path)), "--window-s", "5", "--tolerance", "0.5", "--json"]
    result = CliRunner().invoke(capacity_command, args)
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("capacity: ") for line in lines)
    assert lines[0] == "capacity: rate 1 req/s (step 1 of ~3), seed 1"
    assert any("(step 2 of ~" in line for line in lines)
    assert any(line.startswith("capacity: fleet of ") for line in lines) is False  # no target
    quiet = CliRunner().invoke(capacity_command, [*args, "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert quiet.stdout == result.stdout  # progress changes nothing else


def test_plan_on_a_pipe_names_the_layout_and_its_count(tmp_path: Path) -> None:
    args = [
        "--model", "llama-3-70b", "--isl", "512", "--osl", "16", "--ttft", "1", "--tpot", "0.1",
        "--window-s", "10", "--gpus", "a100-80gb", "--tp", "4,8", "--pp", "1", "--no-disagg",
        "--refine", "0", "--seeds", "1", "--workers", "1", "--json",
    ]  # fmt: skip
    result = CliRunner().invoke(plan_command, args)
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert any(line.startswith("plan: layout 1 of 2: a100-80gb TP4: rate ") for line in lines)
    assert any(line.startswith("plan: layout 2 of 2: a100-80gb TP8: ") for line in lines)
    assert any("· 1 of 2 searches done" in line for line in lines)
    assert any(line.startswith("plan: verify a100-80gb ") for line in lines)


def test_sweep_on_a_pipe_prints_a_line_per_point(tmp_path: Path) -> None:
    sweep = {
        "name": "progress",
        "base": str(_small_chat(tmp_path)),
        "grid": {"workload.arrival.rate": [2, 4]},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    result = CliRunner().invoke(
        cli, ["sweep", str(path), "--out", str(tmp_path / "out"), "-j", "1"]
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("sweep: ")]
    assert lines[0] == "sweep: 0 of 2 points done"
    assert lines[-1] == "sweep: 2 of 2 points done"


def test_a_long_run_on_a_pipe_prints_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()

    def at_once(command: str, unit: str) -> CountLines:
        lines = CountLines(command, unit, clock=clock, after_s=10.0)
        clock.now = 100.0  # as if the run had taken a while already
        return lines

    monkeypatch.setattr(cli_module, "CountLines", at_once)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(_small_chat(tmp_path)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("run: ")]
    assert lines and lines[-1].startswith("run: 50 of 50 requests done (100%)")
    quiet = CliRunner().invoke(cli, ["run", str(_small_chat(tmp_path)), "-q", "--out", str(out)])
    assert quiet.exit_code == 0 and quiet.stderr == ""
