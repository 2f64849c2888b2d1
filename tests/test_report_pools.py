"""A disaggregated run's report and terminal summary state its pools and its KV handoff (issue 27,
defect 2: the report said "tp=1, 1 replica" for 2 × TP 2 prefill + 1 × TP 4 decode)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

import cbsim
from cbsim.cli.terminal import summary_table
from cbsim.run.results import Results
from cbsim.studies.report.markdown import render_markdown
from cbsim.studies.report.run import run_report

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "disaggregated-70b-h100.yaml"


@pytest.fixture(scope="module")
def results() -> Results:
    data = cbsim.load_scenario(SCENARIO).to_dict()
    data["workload"]["num_requests"] = 40
    return cbsim.simulate(data)


def test_report_of_a_disaggregated_run_names_each_pool_and_the_kv_transfer(
    results: Results,
) -> None:
    text, _ = render_markdown(run_report(results))
    assert "tp=1, 1 replica" not in text
    assert "prefill 2 × h100-sxm TP 2; decode 1 × h100-sxm TP 4 (8 GPUs)" in text
    assert "Pools and KV transfer" in text
    assert "KV transfer" in text and "wait for decode" in text
    assert "latency (ms)" in text


def test_terminal_summary_shows_kv_transfer_and_wait(results: Results) -> None:
    console = Console(width=200, record=True)
    console.print(summary_table(results))
    out = console.export_text()
    assert "KV transfer p50 / p99" in out and "KV wait p50 / p99" in out
