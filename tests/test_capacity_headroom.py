"""The capacity plot's tokens/s per GPU is served load, and every plan states its knee, headroom
and seeds (issue 27, defect 6: offered load plotted; the recommendation sat at the knee with one
seed and no headroom stated)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

import cbsim
from cbsim.studies.capacity.checks import _check_run
from cbsim.studies.capacity.headroom import headroom_facts
from cbsim.studies.capacity.rendering import render
from cbsim.studies.report.capacity import _token_rates
from tests.test_stability import _scenario


def test_tokens_per_gpu_is_what_was_served_not_offered() -> None:
    metrics = {
        "output_tokens_per_s": 500.0,
        "output_tokens_per_request": 100.0,
        "tpot_mean_s": 0.02,
    }
    per_gpu, per_user = _token_rates(10.0, metrics, 2.0)  # offered: 10 x 100 / 2 = 500
    assert per_gpu == 250.0 and per_user == 50.0
    old_plan = {"output_tokens_per_request": 100.0, "tpot_mean_s": 0.02}
    assert _token_rates(10.0, old_plan, 2.0)[0] == 500.0  # plans without the served figure


def test_an_overloaded_capacity_run_records_its_served_tokens() -> None:
    data = _scenario(rate=24.0, requests=300)
    data["output"] = {"timeseries_window_s": 0.6}  # 20 windows over the 12 s window, as a search
    results = cbsim.simulate(data)
    _, metrics = _check_run(results, window=12.0, slo={})
    served = metrics["output_tokens_per_s"]
    offered = 24.0 * 256
    assert served is not None and served < 0.5 * offered


def _plan(**extra: Any) -> dict[str, Any]:
    return {
        "slo": {"ttft_p99_s": 2.0}, "slo_directions": {}, "seeds": [1], "window_s": 60.0,
        "max_rate_rps": 4.0, "simulations": 7, "scenario": "s", "feasible": True, **extra,
    }  # fmt: skip


def test_a_plan_states_the_knee_headroom_and_seeds() -> None:
    facts = dict(headroom_facts(_plan(target_rps=15.0, replicas=4)))
    assert "highest rate that passed" in facts["knee"]
    assert "3.2 req/s per replica (80% of the knee" in facts["planning load"]
    assert (
        "4 replicas serve up to 16 req/s for a target of 15: 7% headroom" in facts["fleet headroom"]
    )
    assert "add a replica" in facts["fleet headroom"]
    assert "one seed" in facts["seeds"] and "--seeds 1,2,3" in facts["seeds"]
    assert "all 3 seeds" in dict(headroom_facts(_plan(seeds=[1, 2, 3])))["seeds"]
    assert headroom_facts(_plan(max_rate_rps=None)) == []


def test_capacity_terminal_output_states_the_headroom() -> None:
    console = Console(width=200, record=True)
    render(_plan(), console)
    text = console.export_text()
    assert "knee: 4 req/s per replica" in text and "planning load: 3.2 req/s" in text
