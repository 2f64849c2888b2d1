"""``cbsim report`` of a ``cbsim plan`` folder (issue 37: its help said it reads one, then it refused
one as "not a capacity plan").

The plan here serves Llama-3-70B on A100s with short outputs over 10 s windows (seconds); the
report opens with the line to buy on and the launch command and has the plan's tables and front.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cbsim.cli.commands import cli
from cbsim.studies.report import build_report, detect, render_markdown
from cbsim.studies.report.deployment_plan import deployment_report, is_deployment_plan

PLAN = [
    "plan", "--model", "llama-3-70b", "--isl", "512", "--osl", "16", "--ttft", "1", "--tpot",
    "0.1", "--window-s", "10", "--gpus", "a100-80gb", "--tp", "4,8", "--pp", "1",
    "--max-num-seqs", "16", "--max-num-batched-tokens", "2048", "--seeds", "1", "--refine", "0",
    "--quiet",
]  # fmt: skip


@pytest.fixture(scope="module")
def plan_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("plan") / "plan-70b"
    result = CliRunner().invoke(cli, [*PLAN, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.stdout


def test_report_reads_a_plan_folder(plan_folder: tuple[Path, str], tmp_path: Path) -> None:
    folder, _ = plan_folder
    assert detect(folder) == ("plan", folder / "plan.json")
    assert detect(folder / "plan.json") == ("plan", folder / "plan.json")
    plan = json.loads((folder / "plan.json").read_text())
    html = tmp_path / "plan.html"
    result = CliRunner().invoke(cli, ["report", str(folder), "--out", str(html)])
    assert result.exit_code == 0, result.output
    text = html.read_text()
    assert "deployment plan" in text and plan["headline"] in text
    for title in ("Recommendation", "Search", "Layouts that meet the SLO", "Pareto front",
                  "Other layouts", "Verification"):  # fmt: skip
        assert f">{title}<" in text, title
    assert plan["best"]["launch"]["commands"][-1]["command"].split()[0] in text
    assert "data:image/png;base64," in text  # the front, embedded
    assert "TTFT p99 ≤ 1 s, TPOT p99 ≤ 100 ms" in text


def test_report_of_a_plan_in_markdown(plan_folder: tuple[Path, str], tmp_path: Path) -> None:
    folder, _ = plan_folder
    out = tmp_path / "plan.md"
    result = CliRunner().invoke(cli, ["report", str(folder / "plan.json"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("# cbsim deployment plan: llama-3-70b")
    assert "**buy:** " in text and (tmp_path / "plan-pareto.png").is_file()


def test_a_plan_written_before_the_headline_still_reports(
    plan_folder: tuple[Path, str],
) -> None:
    folder, _ = plan_folder
    plan: dict[str, Any] = json.loads((folder / "plan.json").read_text())
    for key in ("headline", "confirmations"):
        plan.pop(key)
    assert is_deployment_plan(plan)
    text, _ = render_markdown(deployment_report(plan), image_prefix="old")
    assert "**buy:** one unit of a100-80gb " in text and "25% headroom" in text


def test_a_capacity_plan_is_still_a_capacity_report(tmp_path: Path) -> None:
    capacity = {
        "slo": {"ttft_p99_s": 2.0}, "max_rate_rps": None, "evaluations": [], "feasible": False,
        "reason": "nothing", "seeds": [1], "window_s": 300.0, "simulations": 1,
    }  # fmt: skip
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(capacity))
    assert detect(path) == ("capacity", path)
    assert build_report(path).kind == "capacity"


def test_refine_zero_is_worded_for_what_it_is(plan_folder: tuple[Path, str]) -> None:
    _, output = plan_folder
    assert "top 0" not in output
    assert "--refine 0 searches no layout's batching" in " ".join(output.split())


def test_plan_json_without_out_is_printed_only(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, [*PLAN, "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert is_deployment_plan(plan) and plan["feasible"]
    assert list(tmp_path.iterdir()) == []  # nothing written
