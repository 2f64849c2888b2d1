"""Saturation figures read off a run (cbsim.studies.calibration.saturation) and the front end fitted on
light load (cbsim.studies.calibration.frontend_fit)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from cbsim.cost.engine_profile import load_engine_profile
from cbsim.studies.calibration import frontend_fit, per_request, saturation
from cbsim.studies.calibration.engine_releases import FRONTEND_0_8


def _run(n: int = 40, gap: float = 1.0, length: float = 10.0) -> pd.DataFrame:
    """Requests sent every ``gap`` s, each with its first token at once and ``length`` s of
    decoding: ``length / gap`` requests in flight in steady state."""
    send = np.arange(n) * gap
    return pd.DataFrame(
        {
            "send_s": send,
            "prompt_tokens": np.full(n, 100),
            "output_tokens": np.full(n, 200),
            "ttft_s": np.zeros(n),
            "e2e_s": np.full(n, length),
            "ttft_s_pred": np.zeros(n),
            "e2e_s_pred": np.full(n, length / 2),
        }
    )


def test_tokens_in_flight_is_what_the_running_requests_hold() -> None:
    run = _run()
    # 10 requests in flight, a tenth through to all through: 100 + 200 x (mean 0.45..0.55)
    held = saturation.tokens_in_flight(run, replicas=1)
    assert held == pytest.approx(10 * (100 + 200 * 0.5), rel=0.05)
    assert saturation.tokens_in_flight(run, replicas=2) == pytest.approx(held / 2)
    # the replay finishes in half the time: half the requests in flight
    assert saturation.tokens_in_flight(run, 1, predicted=True) == pytest.approx(held / 2, rel=0.1)


def test_throughput_spreads_each_request_over_its_decode() -> None:
    run = _run()
    assert saturation.output_throughput(run) == pytest.approx(200.0, rel=0.05)
    errors = saturation.overload_errors(run, replicas=1)
    assert errors["in_flight_err"] == pytest.approx(-50.0, abs=5.0)
    assert errors["throughput_err"] == pytest.approx(0.0, abs=6.0)


def test_the_knee_is_the_last_load_before_the_queue_grows() -> None:
    assert saturation.knee([0.5, 1.0, 1.5, 2.0], [0.4, 0.9, 5.0, 0.5]) == 1.0
    assert math.isnan(saturation.knee([1.0, 2.0], [3.0, 4.0]))
    table = saturation.knee_table(
        pd.DataFrame(
            {
                "group": ["a"] * 4,
                "qps": [0.5, 1.0, 1.5, 2.0],
                "ttft_p90_s": [0.4, 0.9, 5.0, 9.0],
                "ttft_p90_pred_s": [0.4, 0.9, 1.9, 9.0],
            }
        )
    )
    row = table.iloc[0]
    assert (row["knee_measured"], row["knee_cbsim"], row["steps_apart"]) == (1.0, 1.5, 1)


def test_the_front_end_fit_recovers_a_known_delay() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for run in range(4):
        prompts = rng.integers(100, 2000, 300).astype(float)
        bare = 0.05 + 3e-4 * prompts
        rows.append(
            pd.DataFrame(
                {
                    "run": f"r{run}",
                    "workload": "w",
                    "prompt_tokens": prompts,
                    "ttft_s": bare + 0.010 + 20e-6 * prompts,
                    "ttft_s_pred": bare,
                }
            )
        )
    request_s, token_s = frontend_fit.fit_frontend(pd.concat(rows, ignore_index=True))
    assert request_s == pytest.approx(0.010, abs=0.0015)
    assert token_s == pytest.approx(20e-6, abs=4e-6)


def test_short_prompts_alone_fit_no_per_token_term() -> None:
    prompts = np.full(200, 80.0)
    frame = pd.DataFrame(
        {
            "run": "r",
            "workload": "w",
            "prompt_tokens": prompts,
            "ttft_s": 0.07 + 0.012 + 0.0 * prompts,
            "ttft_s_pred": np.full(200, 0.07),
        }
    )
    request_s, token_s = frontend_fit.fit_frontend(frame)
    assert token_s == 0.0
    assert request_s == pytest.approx(0.012, abs=0.0011)


def test_vllm_0_8_carries_the_fitted_front_end_and_the_runs_use_it() -> None:
    profile = load_engine_profile(per_request.LLM_D_ENGINE)
    assert (profile.frontend.request_s, profile.frontend.prompt_token_s) == FRONTEND_0_8
    assert per_request.LLM_D.engine == "vllm@0.8.5"
    assert per_request.LLM_D.router == "random"  # a Kubernetes Service over the replicas
