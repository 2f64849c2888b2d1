"""Every run checks its queue's stability; an unstable run never reports an SLO as met (issue 27,
defect 1: a short overloaded run reported every SLO met)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.cli.terminal import slo_rows
from cbsim.outputs.stability import (
    _quarter_latencies,
    slo_verdict,
    stability_summary,
    unstable_note,
)
from cbsim.studies.capacity import evaluate_rate

# one L40S serves about 4 req/s of these (1000-token prompts, 256-token outputs, batch ≤ 64)
CAPACITY_RPS = 4.0


def _scenario(rate: float, requests: int, seed: int = 1) -> dict[str, Any]:
    return {
        "name": "stability",
        "seed": seed,
        "workload": {
            "num_requests": requests,
            "arrival": {"kind": "poisson", "rate": rate},
            "prompt_tokens": {"kind": "fixed", "value": 1000},
            "output_tokens": {"kind": "fixed", "value": 256},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "l40s"},
        "scheduler": {"kind": "prefill_first", "max_batch_size": 64, "max_batched_tokens": 8192},
        # generous enough that a short overloaded run meets every target by its p99s
        "slo": {"ttft_s": 1000.0, "tpot_s": 10.0},
    }


def test_a_short_overloaded_run_is_unstable_and_meets_no_slo() -> None:
    results = cbsim.simulate(_scenario(rate=6 * CAPACITY_RPS, requests=400))
    summary = results.summary
    assert summary["stable"] is False
    assert summary["offered_rps"] > 2 * summary["served_rps"]
    assert "unstable" in summary["stability"] and "still waiting" in summary["stability"]
    rows = slo_rows(summary, results.scenario)
    assert summary["ttft_p99_s"] < 1000.0  # the p99 alone would say "met"
    assert rows and all("not met (unstable: offered" in row[3] for row in rows[:-1])


def test_a_stable_run_says_so_and_keeps_its_verdicts() -> None:
    results = cbsim.simulate(_scenario(rate=CAPACITY_RPS / 4, requests=120))
    summary = results.summary
    assert summary["stable"] is True
    assert summary["stability"].startswith("stable")
    assert all("[green]met" in row[3] for row in slo_rows(summary, results.scenario)[:-1])


def test_verdict_of_an_unstable_summary() -> None:
    unstable = {"stable": False, "offered_rps": 24.0, "served_rps": 15.8}
    assert slo_verdict(True, unstable) == "not met (unstable: offered 24 req/s, served 15.8)"
    assert slo_verdict(False, unstable) == "missed"
    assert slo_verdict(True, {}) == "met"  # summaries from before the check
    assert unstable_note({"stable": True}) == ""


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 1000), far=st.booleans())
def test_far_below_capacity_is_stable_far_above_is_not(seed: int, far: bool) -> None:
    rate = CAPACITY_RPS * (5.0 if far else 0.2)
    summary = cbsim.simulate(_scenario(rate=rate, requests=150, seed=seed)).summary
    assert summary["stable"] is not far


def test_a_poisson_cluster_at_the_last_arrival_is_no_instability() -> None:
    """At a fifth of capacity, seed 244's arrivals cluster near the end: 11 more requests in the
    system at the last arrival than at the middle, which the count at two instants read as a
    growing queue (the property test above drew it); over the quarters the count did not grow."""
    summary = cbsim.simulate(_scenario(rate=CAPACITY_RPS * 0.2, requests=150, seed=244)).summary
    assert summary["stable"] is True, summary["stability"]


def test_a_closing_burst_of_a_trace_is_no_instability() -> None:
    """200 requests 1 s apart, then 60 at once at the end: 60 wait at the last arrival, but none
    waited at three quarters of the arrivals, so the queue was not growing."""
    arrival = np.concatenate([np.arange(200.0), np.full(60, 200.0)])
    queue = np.concatenate([np.full(200, 0.01), np.linspace(0.1, 6.0, 60)])
    e2e = queue + 1.0
    requests = pd.DataFrame(
        {
            "arrival_s": arrival,
            "queue_s": queue,
            "e2e_s": e2e,
            "finish_s": arrival + e2e,
            "status": ["finished"] * len(arrival),
        }
    )
    timeseries = pd.DataFrame({"t_s": [0.0], "waiting": [0.0], "span_s": [210.0]})
    scenario = cbsim.load_scenario(_scenario(rate=1.0, requests=10))
    figures = stability_summary(requests, timeseries, scenario, served_rps=1.2)
    assert figures["backlog"] >= 59 and figures["backlog_3q"] <= 1
    assert figures["stable"] is True


def test_a_capacity_check_failing_on_its_queue_names_offered_and_served_load() -> None:
    evaluation = evaluate_rate(_scenario(rate=1.0, requests=10), 6 * CAPACITY_RPS, window_s=20.0)
    assert not evaluation.passed
    assert "; offered 2" in evaluation.reason and "req/s, served" in evaluation.reason


def _batch(requests: int, **workload: Any) -> dict[str, Any]:
    """``requests`` handed over at once (an offline benchmark's static batch), more than one
    iteration admits: most of them wait at time 0."""
    data = _scenario(rate=1.0, requests=requests)
    data["workload"] = {**data["workload"], "arrival": {"kind": "offline"}, **workload}
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 200}
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 50}
    data["slo"] = {"ttft_s": 30.0, "tpot_s": 1.0}
    return data


def test_a_batch_handed_over_at_once_is_no_unstable_queue() -> None:
    """Every request at time 0 is a batch, not an arrival stream: the requests waiting at the
    last arrival are the batch itself, so neither a backlog nor a trend through the arrivals
    makes it unstable, and the SLOs it meets read as met (they read "not met (unstable)")."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" was printed, too
        results = cbsim.simulate(_batch(200))
    summary = results.summary
    assert summary["stable"] is True, summary["stability"]
    assert summary["stability"].startswith("stable: a batch, every request at 0 s")
    assert summary["backlog"] == 0 and summary["in_system_growth"] == 0
    assert np.isnan(summary["latency_growth"]) and np.isnan(summary["offered_rps"])
    rows = slo_rows(summary, results.scenario)
    assert summary["ttft_p99_s"] < 30.0
    assert all("[green]met" in row[3] for row in rows[:-1])


def test_a_batch_whose_clients_give_up_is_unstable() -> None:
    summary = cbsim.simulate(_batch(300, client={"timeout_s": 2.0})).summary
    assert summary["timed_out"] >= 10
    assert summary["stable"] is False
    assert summary["stability"].startswith(f"unstable: {summary['timed_out']} of 300 requests")


def test_tied_arrivals_leave_no_quarter_without_a_median() -> None:
    """Half the requests at one instant: the arrivals' median and third quartile coincide, so
    the third quarter holds none; the later latency is the last quarter's (it was NaN, with
    numpy's warning, and the latency check was skipped)."""
    arrival = np.concatenate([np.linspace(0.0, 10.0, 50), np.full(50, 10.0)])
    e2e = np.concatenate([np.full(50, 1.0), np.full(50, 5.0)])
    requests = pd.DataFrame(
        {
            "arrival_s": arrival,
            "e2e_s": e2e,
            "status": pd.Categorical(["finished"] * 100),
            "output_tokens": np.full(100, 10),
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first, later = _quarter_latencies(requests)
    assert (first, later) == (1.0, 5.0)
