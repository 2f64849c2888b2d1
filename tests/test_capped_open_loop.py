"""An open loop behind a client-side cap (``max_concurrency`` on poisson, gamma and rate_curve
arrivals): vLLM's ``bench serve --request-rate R --max-concurrency C``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from cbsim import load_scenario, simulate
from cbsim.common.errors import CbsimError
from cbsim.workload.build import build_workload
from cbsim.workload.drawn import ClosedLoopWorkload
from tests.conftest import small_scenario


def _capped(cap: int | None, **arrival: Any) -> dict[str, Any]:
    spec = {"kind": "poisson", "rate": 40.0, **arrival}
    if cap is not None:
        spec["max_concurrency"] = cap
    return small_scenario({"workload.arrival": spec, "workload.num_requests": 50})


def _most_in_flight(requests: pd.DataFrame) -> int:
    """The most requests between send and finish at once (a finish frees its slot first)."""
    events = [(t, 1) for t in requests["arrival_s"]] + [(t, -1) for t in requests["finish_s"]]
    count = most = 0
    for _, step in sorted(events):
        count += step
        most = max(most, count)
    return most


@pytest.mark.parametrize("cap", [1, 3])
def test_never_more_than_the_cap_in_flight_and_never_sent_before_ready(cap: int) -> None:
    scenario = load_scenario(_capped(cap))
    workload = build_workload(scenario)
    assert isinstance(workload, ClosedLoopWorkload) and workload.ready_s is not None
    results = simulate(scenario)
    requests = results.requests.sort_values("request_id")
    assert results.summary["completed"] == 50
    assert _most_in_flight(requests) <= cap
    sent = requests["arrival_s"].to_numpy()
    assert (sent >= workload.ready_s - 1e-12).all()
    assert (np.diff(sent) >= 0).all()  # first come, first served
    assert set(requests["client"]) <= set(range(cap))


def test_a_cap_that_never_binds_changes_nothing() -> None:
    free = simulate(load_scenario(_capped(None))).requests.sort_values("request_id")
    capped = simulate(load_scenario(_capped(10_000))).requests.sort_values("request_id")
    for column in ("arrival_s", "first_token_s", "finish_s", "prompt_tokens", "output_tokens"):
        assert np.allclose(free[column], capped[column], rtol=0, atol=1e-9), column


def test_a_binding_cap_delays_sends_not_the_servers_ttft() -> None:
    free = simulate(load_scenario(_capped(None, rate=200.0)))
    capped = simulate(load_scenario(_capped(1, rate=200.0)))
    assert capped.requests["arrival_s"].max() > free.requests["arrival_s"].max()
    assert capped.summary["ttft_p99_s"] < free.summary["ttft_p99_s"]


def test_gamma_and_rate_curve_take_a_cap() -> None:
    gamma = _capped(2, kind="gamma", cv=2.0)
    assert simulate(load_scenario(gamma)).summary["completed"] == 50
    curve = _capped(2, kind="rate_curve", points=[[0, 5], [10, 50]])
    del curve["workload"]["arrival"]["rate"]
    results = simulate(load_scenario(curve))
    assert results.summary["completed"] == 50
    assert _most_in_flight(results.requests) <= 2


def test_sessions_refuse_a_cap() -> None:
    data = small_scenario(
        {
            "workload": {
                "arrival": {"kind": "poisson", "rate": 1.0, "max_concurrency": 2},
                "sessions": {
                    "count": 4,
                    "turns": {"kind": "fixed", "value": 2},
                    "user_tokens": {"kind": "fixed", "value": 20},
                    "answer_tokens": {"kind": "fixed", "value": 5},
                },
            }
        }
    )
    with pytest.raises(CbsimError, match="max_concurrency"):
        load_scenario(data)
