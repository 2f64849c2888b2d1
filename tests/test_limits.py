"""Limits: every number's range, stated once (cbsim.common.limits), enforced by scenarios, traces, sweeps
and the command line alike, with its reason in the error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import cbsim.workload.sources.closed_loop as closed_loop_module
from cbsim.common.errors import CbsimError
from cbsim.common.limits import (
    ALL_LIMITS,
    DURATION,
    RATE,
    REPLICAS,
    REQUESTS,
    TOKENS,
    WINDOWS,
    Limit,
    bounds_table,
)
from cbsim.engine.recorder import ITERATION_COLUMNS, timeseries
from cbsim.run.loading import load_scenario
from cbsim.run.simulate import simulate
from cbsim.studies.sweep.runner import load_sweep
from tests.conftest import small_scenario

ROOT = Path(__file__).resolve().parents[1]


def error_of(data: dict) -> CbsimError:
    with pytest.raises(CbsimError) as info:
        load_scenario(data)
    return info.value


def test_a_limit_is_inclusive_and_says_why():
    limit = Limit("things", 1, 10, "things", "ten is plenty")
    assert limit.contains(1) and limit.contains(10)
    assert not limit.contains(0) and not limit.contains(11) and not limit.contains(float("nan"))
    assert limit.violation(5) is None
    assert limit.violation(11) == "must be between 1 and 10 things (ten is plenty); got 11"
    assert "got about 10^400" in (limit.violation(10**400) or "")
    exclusive = Limit("gaps", 0.0, 1.0, "s", "short", low_exclusive=True)
    assert not exclusive.contains(0.0) and exclusive.contains(1e-300)
    assert exclusive.describe() == "above 0 and at most 1 s"


def test_docs_table_is_generated_from_the_limits():
    doc = (ROOT / "docs" / "limits.md").read_text(encoding="utf-8")
    assert bounds_table() in doc
    assert len(bounds_table().splitlines()) == len(ALL_LIMITS) + 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("workload.num_requests", REQUESTS.high),
        ("workload.arrival.rate", RATE.high),
        ("workload.prompt_tokens", {"kind": "fixed", "value": TOKENS.high}),
        ("cluster.replicas", 100),
        ("scheduler.block_size", 4096),
        ("slo.ttft_s", DURATION.high),
        ("seed", 2**63 - 1),
    ],
)
def test_values_at_the_limits_are_accepted(field: str, value):
    load_scenario(small_scenario({field: value}))


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("workload.num_requests", 10**12, REQUESTS.reason),
        ("workload.arrival.rate", 1e-300, RATE.reason),
        ("workload.arrival", {"kind": "gamma", "rate": 8, "cv": 1e308}, "gamma shape"),
        ("workload.arrival", {"kind": "gamma", "rate": 8, "cv": 1e-200}, "gamma shape"),
        ("workload.prompt_tokens", {"kind": "fixed", "value": 2**70}, TOKENS.reason),
        ("workload.prompt_tokens", {"kind": "lognormal", "mean": 1e308, "sigma": 1}, "tokens"),
        ("workload.output_tokens", {"kind": "lognormal", "mean": 9, "sigma": 40}, "sigma 4"),
        ("cluster.replicas", 10**30, REPLICAS.reason),
        ("scheduler.block_size", 10**400, "blocks of 8 to 128"),
        ("output.timeseries_window_s", 1e-300, "milliseconds"),
        ("seed", 2**63, "int64"),
    ],
)
def test_values_beyond_the_limits_name_the_field_and_the_reason(field: str, value, reason: str):
    err = error_of(small_scenario({field: value}))
    assert err.field is not None and err.field.startswith(field)
    assert reason in err.message


@pytest.mark.parametrize(
    "field", ["workload.num_requests", "workload.arrival.rate", "cluster.replicas", "seed"]
)
def test_booleans_are_not_numbers(field: str):
    err = error_of(small_scenario({field: True}))
    assert err.field == field and "got true" in err.message


def test_arrivals_spanning_centuries_are_refused_before_drawing():
    data = small_scenario({"workload.num_requests": 10_000_000, "workload.arrival.rate": 1e-6})
    err = error_of(data)
    assert err.field == "workload.arrival.rate" and "simulated time" in err.message


def test_a_duration_expecting_too_many_requests_is_refused():
    data = small_scenario({"workload.duration_s": 3e7, "workload.arrival.rate": 1e6})
    del data["workload"]["num_requests"]
    err = error_of(data)
    assert err.field == "workload.duration_s" and "10,000,000" in err.message


def test_too_many_timeseries_windows_are_refused():
    data = small_scenario({"workload.duration_s": 3e7, "workload.arrival.rate": 0.01})
    del data["workload"]["num_requests"]
    data["output"] = {"timeseries_window_s": 0.001}
    err = error_of(data)
    assert err.field == "output.timeseries_window_s" and "windows" in err.message


def test_the_timeseries_refuses_a_run_longer_than_its_windows_allow():
    requests = pd.DataFrame({"arrival_s": [0.0, 2e7], "finish_s": [np.nan, np.nan]})
    iterations = pd.DataFrame({column: [] for column in ITERATION_COLUMNS}, dtype=float)
    with pytest.raises(CbsimError, match=str(WINDOWS.high // 10**6)) as info:
        timeseries(requests, iterations, 0.001, 1)
    assert info.value.field == "output.timeseries_window_s"


def test_too_many_gpus_in_total_are_refused():
    load_scenario(small_scenario({"cluster.replicas": 10_000, "cluster.tp": 8}))  # 80,000 GPUs
    err = error_of(small_scenario({"cluster.replicas": 10_000, "cluster.tp": 16}))
    assert err.field == "cluster.replicas" and "160,000 GPUs" in err.message


def test_a_closed_loop_stops_at_the_request_limit(monkeypatch):
    monkeypatch.setattr(
        closed_loop_module, "REQUESTS", Limit("requests", 1, 50, "requests", "test")
    )
    data = small_scenario(
        {"workload.arrival": {"kind": "closed_loop", "concurrency": 4}, "workload.duration_s": 1e5}
    )
    del data["workload"]["num_requests"]
    with pytest.raises(CbsimError, match="has sent 50 requests") as info:
        simulate(load_scenario(data))
    assert info.value.field == "workload.duration_s"


def test_a_sweep_grid_is_counted_before_it_is_formed(tmp_path: Path):
    base = small_scenario()
    grid = {f"cluster.k{i}": list(range(10)) for i in range(10)}
    with pytest.raises(CbsimError, match="10,000,000,000 points") as info:
        load_sweep({"base": base, "grid": grid})
    assert info.value.field == "grid"
    with pytest.raises(CbsimError, match="seeds"):
        load_sweep({"base": base, "seeds": [2**64]})
