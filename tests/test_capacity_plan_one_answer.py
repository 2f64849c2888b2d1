"""``cbsim capacity`` and ``cbsim plan`` give one answer for the same traffic (issue 37).

The two commands used different windows (300 s against 60 s), one of them no headroom, different
price flags, so on the README's traffic one bought 5 H100s and the other 6. Here they share
their defaults (:mod:`cbsim.studies.capacity.defaults`), and for the same traffic and target find the same
knee and buy the same fleet, with one headline to buy on.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner
from rich.console import Console

from cbsim.studies.capacity import capacity_command
from cbsim.studies.capacity.defaults import (
    HEADROOM,
    TOLERANCE,
    VERIFY_SEEDS,
    WINDOW_S,
    fleet_size,
    snapped_start,
    verify_seeds,
)
from cbsim.studies.capacity.headline import buy_line
from cbsim.studies.capacity.rendering import render
from cbsim.studies.plan import plan_command

ROOT = Path(__file__).resolve().parents[1]
CHAT = ROOT / "scenarios" / "chat-llama3-8b-h100.yaml"
QUICK = ["--window-s", "30", "--target-rps", "50", "--quiet", "--json"]
"""The README's chat traffic on a 30 s window and a 50 req/s target: seconds, not minutes."""
SAME_REPLICA = ["--gpus", "h100-sxm", "--tp", "1", "--pp", "1", "--no-disagg", "--refine", "0"]
"""The plan's space held to the capacity plan's one replica (h100-sxm, tp 1, its batching)."""


def _default(command: click.Command, name: str) -> Any:
    [option] = [p for p in command.params if p.name == name]
    return option.default


def _names(command: click.Command, name: str) -> set[str]:
    [option] = [p for p in command.params if p.name == name]
    return set(option.opts)


def test_the_two_commands_share_their_defaults() -> None:
    for name, value in (
        ("window_s", WINDOW_S), ("tolerance", TOLERANCE), ("headroom", HEADROOM),
        ("target_rps", None),
    ):  # fmt: skip
        assert _default(capacity_command, name) == _default(plan_command, name) == value, name
    assert WINDOW_S == 300.0 and HEADROOM == 0.8
    assert _default(plan_command, "seeds") == VERIFY_SEEDS == 3
    assert {"--prices", "--price"} <= _names(capacity_command, "price_texts")
    assert {"--prices", "--price"} <= _names(plan_command, "price_texts")


def test_the_shared_rules() -> None:
    assert [snapped_start(x) for x in (1.0, 3.0, 23.6, 32.0, 0.3)] == [1, 2, 16, 32, 0.25]
    assert fleet_size(100.0, 20.5, 0.8) == 7  # 100 / 16.4 = 6.1
    assert fleet_size(100.0, 25.0, 0.8) == 5  # exactly 20 each: no sixth
    assert fleet_size(100.0, 20.5, 1.0) == 5
    assert verify_seeds(4) == [4, 5, 6]


@pytest.fixture(scope="module")
def answers() -> tuple[dict[str, Any], dict[str, Any]]:
    capacity = CliRunner().invoke(capacity_command, [str(CHAT), *QUICK])
    assert capacity.exit_code == 0, capacity.output
    plan = CliRunner().invoke(plan_command, ["--scenario", str(CHAT), *SAME_REPLICA, *QUICK])
    assert plan.exit_code == 0, plan.output
    return json.loads(capacity.stdout), json.loads(plan.stdout)


def test_the_same_traffic_buys_the_same_fleet(
    answers: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    capacity, plan = answers
    best = plan["best"]
    fleet = best["fleet"]
    # the same knee: the same search (window, tolerance, seed, bracket from a power of two)
    assert best["max_rate_rps"] == capacity["max_rate_rps"]
    knee = capacity["max_rate_rps"]
    assert capacity["initial_replicas"] == fleet["initial_replicas"] == fleet_size(50, knee, 0.8)
    # the same fleet, verified the same way, at the same price
    assert fleet["replicas"] == capacity["replicas"]
    assert fleet["gpus"] == capacity["gpus"]
    assert fleet["cost_per_hour"] == pytest.approx(capacity["cost_per_hour"])
    assert fleet["seeds"] == capacity["fleet_seeds"] == [1, 2, 3]
    assert [r["replicas"] for r in fleet["runs"]] == [r["replicas"] for r in capacity["fleet"]]
    # and one headline
    assert plan["headline"] == capacity["headline"]
    assert capacity["headline"].startswith(f"buy {capacity['replicas']} × h100-sxm TP1 (")
    spare = capacity["replicas"] * knee / 50 - 1
    assert capacity["headline"].endswith(f"every SLO met at 50 req/s with {spare:.0%} headroom")
    assert spare >= 1 / HEADROOM - 1 - 1e-9  # at least the 25% the headroom promises


def test_plan_json_needs_no_out_folder(answers: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, plan = answers  # printed on stdout, with no --out: nothing written
    assert plan["feasible"] and plan["settings"]["window_s"] == 30.0


def test_both_take_both_price_spellings(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    data = yaml.safe_load(CHAT.read_text())
    data["workload"]["num_requests"] = 50
    scenario.write_text(yaml.safe_dump(data))
    quick = ["--window-s", "5", "--tolerance", "0.5", "--quiet", "--json"]
    for spelling in ("--price", "--prices"):
        capacity = CliRunner().invoke(
            capacity_command, [str(scenario), *quick, spelling, "h100-sxm=1.5"]
        )
        assert capacity.exit_code == 0, capacity.output
        assert json.loads(capacity.stdout)["price_per_gpu_hour"] == 1.5
        plan = CliRunner().invoke(
            plan_command,
            ["--scenario", str(scenario), *SAME_REPLICA, *quick, spelling, "h100-sxm=1.5",
             "--screen-window-s", "5", "--seeds", "1"],
        )  # fmt: skip
        assert plan.exit_code == 0, plan.output
        assert json.loads(plan.stdout)["settings"]["prices"]["h100-sxm"] == 1.5


def test_the_headline_comes_first_with_one_number_format_and_human_names() -> None:
    """The line to buy on is the first printed; metrics are named (TTFT p99 ≤ 2 s, not
    ttft_p99_s ≤ 2); large numbers are written 11,500, never 1.15e+04."""
    result = {
        "slo": {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}, "slo_directions": {}, "seeds": [1],
        "window_s": 300.0, "max_rate_rps": 11500.0, "planning_rate_rps": 9200.0,
        "simulations": 1234, "scenario": "s", "feasible": True, "target_rps": 100000.0,
        "replicas": 11, "gpus": 11, "cost_per_hour": 33.0, "headroom": 0.8,
        "cost_per_million_output_tokens": 0.01, "reason": None,
        "headline": "buy 11 × h100-sxm TP1 (11 GPUs), $33.00/h: every SLO met at 100,000 req/s "
        "with 26% headroom",
    }  # fmt: skip
    console = Console(width=250, record=True)
    render(result, console)
    text = console.export_text()
    assert text.splitlines()[0].startswith("buy 11 × h100-sxm TP1")
    assert "TTFT p99 ≤ 2 s, TPOT p99 ≤ 100 ms" in text and "ttft_p99_s" not in text
    assert "11,500" in text and "9,200" in text and "126,500" in text and "1,234" in text
    assert "e+0" not in text


def test_the_buy_line() -> None:
    line = buy_line(
        replicas=7, unit="h100-sxm TP1", gpus=7, cost_per_hour=21.0, target_rps=100.0,
        knee_rps=20.5,
    )  # fmt: skip
    assert line == (
        "buy 7 × h100-sxm TP1 (7 GPUs), $21.00/h: every SLO met at 100 req/s with 44% headroom"
    )
    alone = buy_line(
        replicas=1, unit="h100-sxm TP2", gpus=2, cost_per_hour=6.0, target_rps=None,
        knee_rps=20.0, planning_rps=16.0,
    )  # fmt: skip
    assert alone.startswith("one replica of h100-sxm TP2 (2 GPUs), $6.00/h, serves 16 req/s")
    assert "25% headroom (knee 20 req/s)" in alone and math.isclose(20 / 16 - 1, 0.25)
