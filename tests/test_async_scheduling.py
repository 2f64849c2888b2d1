"""Asynchronous scheduling: the next batch is formed while the current step runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.run.loading import load_scenario


def _trace_scenario(tmp_path: Path, rows: list[tuple[float, int, int]], asyn: bool, **more: Any):
    path = tmp_path / "trace.csv"
    pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens"]).to_csv(
        path, index=False
    )
    return load_scenario(
        {
            "workload": {"trace": {"path": str(path)}},
            "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "engine": "none"},
            "scheduler": {"kind": "sarathi", "async_scheduling": asyn},
            **more,
        }
    )


def _step_containing(iterations: pd.DataFrame, t: float) -> int:
    ends = (iterations["start_s"] + iterations["duration_s"]).to_numpy()
    starts = iterations["start_s"].to_numpy()
    return int(np.flatnonzero((starts <= t) & (ends > t))[0])


def test_a_request_arriving_mid_step_joins_the_step_after_next(tmp_path: Path) -> None:
    rows = [(0.0, 100, 200), (0.0503, 100, 5)]
    for asyn, skipped in ((False, 0), (True, 1)):
        results = cbsim.simulate(_trace_scenario(tmp_path, rows, asyn, fast_forward=False))
        its = results.iterations.reset_index(drop=True)
        arrived_in = _step_containing(its, 0.0503)
        joined = int(np.flatnonzero(its["prefill_tokens"].to_numpy() > 0)[1])
        assert joined == arrived_in + 1 + skipped


def test_an_idle_engine_takes_a_request_at_once(tmp_path: Path) -> None:
    rows = [(0.0, 500, 20), (5.0, 500, 20)]
    plain = cbsim.simulate(_trace_scenario(tmp_path, rows, False)).requests
    overlapped = cbsim.simulate(_trace_scenario(tmp_path, rows, True)).requests
    assert overlapped["ttft_s"].tolist() == plain["ttft_s"].tolist()


def test_async_scheduling_costs_a_busy_engine_about_a_step_of_ttft(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    arrivals = np.cumsum(rng.exponential(0.1, 200))
    rows = [(float(t), int(p), int(o)) for t, p, o in zip(
        arrivals, rng.integers(50, 400, 200), rng.integers(50, 200, 200), strict=True)]  # fmt: skip
    plain = cbsim.simulate(_trace_scenario(tmp_path, rows, False))
    overlapped = cbsim.simulate(_trace_scenario(tmp_path, rows, True))
    step = plain.summary["tpot_p50_s"]
    extra = overlapped.summary["ttft_p50_s"] - plain.summary["ttft_p50_s"]
    assert 0.5 * step < extra < 2.0 * step
    assert overlapped.summary["tpot_p50_s"] == pytest.approx(plain.summary["tpot_p50_s"], rel=0.05)


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 1000),
    kind=st.sampled_from(["prefill_first", "sarathi", "orca"]),
    closed=st.booleans(),
    rate=st.floats(2.0, 40.0),
)
def test_fast_forward_and_stepping_agree_under_async_scheduling(
    seed: int, kind: str, closed: bool, rate: float
) -> None:
    arrival = (
        {"kind": "closed_loop", "concurrency": 6} if closed else {"kind": "poisson", "rate": rate}
    )
    base = {
        "seed": seed,
        "workload": {
            "num_requests": 60,
            "arrival": arrival,
            "prompt_tokens": {"kind": "uniform", "low": 20, "high": 600},
            "output_tokens": {"kind": "uniform", "low": 1, "high": 120},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm"},
        "scheduler": {"kind": kind, "async_scheduling": True},
    }
    runs = [
        cbsim.simulate(load_scenario({**base, "fast_forward": ff})).requests for ff in (True, False)
    ]
    columns = ["arrival_s", "first_token_s", "finish_s"]
    pd.testing.assert_frame_equal(runs[0][columns], runs[1][columns])


def test_the_shipped_profiles_leave_it_to_the_scenario() -> None:
    """Off by default (fitted that way: see cbsim.studies.calibration.engines); a scenario turns it on."""
    for engine in ("vllm", "vllm-v0", "sglang", "tensorrt-llm"):
        assert not load_engine_profile(engine).defaults.scheduler.async_scheduling
    data = {
        "workload": {
            "num_requests": 4,
            "arrival": {"kind": "poisson", "rate": 1.0},
            "prompt_tokens": {"kind": "fixed", "value": 100},
            "output_tokens": {"kind": "fixed", "value": 10},
        },
        "scheduler": {"async_scheduling": True},
    }
    assert load_scenario(data).scheduler.async_scheduling
