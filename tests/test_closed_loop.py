"""Closed-loop load: C clients, each sending its next request when its last one has finished."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.cost.engine_profile import Frontend, StepOverhead, load_engine_profile
from cbsim.workload.request import Request
from cbsim.workload.sources.closed_loop import give_up_after
from tests.conftest import small_scenario, summaries_equal


def closed(concurrency: int, requests: int = 200, **arrival: object) -> dict:
    return small_scenario(
        {
            "workload.arrival": {"kind": "closed_loop", "concurrency": concurrency, **arrival},
            "workload.num_requests": requests,
        }
    )


def run(data: dict) -> cbsim.Results:
    return cbsim.simulate(cbsim.load_scenario(data))


def in_flight(requests: pd.DataFrame) -> int:
    """The most requests ever sent and not yet finished (client view)."""
    events = [(t, 1) for t in requests["arrival_s"]] + [(t, -1) for t in requests["finish_s"]]
    events.sort(
        key=lambda e: (e[0], e[1])
    )  # a finish frees its client before a send at the same time
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def steady_state_little(results: cbsim.Results, clients: int, think: float = 0.0) -> float:
    """Throughput × (mean latency + think time) over whole multiples of C completions in the
    middle of the run (a window from one finish to a finish C·k completions later)."""
    done = results.requests[results.requests["status"] == "finished"]
    finishes = np.sort(done["finish_s"].to_numpy())
    first = len(finishes) // 5
    last = first + clients * ((3 * len(finishes) // 5) // clients)
    lo, hi = finishes[first], finishes[last]
    window = done[(done["finish_s"] > lo) & (done["finish_s"] <= hi)]
    throughput = len(window) / (hi - lo)
    return throughput * (float(window["e2e_s"].mean()) + think)


@pytest.mark.parametrize("kind", ["prefill_first", "sarathi", "orca", "static"])
def test_littles_law_holds_with_fixed_lengths(kind: str) -> None:
    data = closed(8, 1200, think_time_s=0.0)
    data["scheduler"] = {"kind": kind}
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 256}
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 32}
    results = run(data)
    assert steady_state_little(results, 8) == pytest.approx(8, rel=0.01)
    assert in_flight(results.requests) == 8


def test_littles_law_counts_think_time() -> None:
    data = closed(6, 900, think_time_s=0.05)
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 128}
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 24}
    results = run(data)
    assert steady_state_little(results, 6, think=0.05) == pytest.approx(6, rel=0.01)
    assert in_flight(results.requests) <= 6


def test_each_client_sends_after_its_previous_request_finished() -> None:
    results = run(closed(5, 60, think_time_s=0.01))
    frame = results.requests.sort_values(["client", "arrival_s"])
    assert set(frame["client"]) == set(range(5))
    for _, rows in frame.groupby("client"):
        finishes = rows["finish_s"].to_numpy()[:-1]
        sends = rows["arrival_s"].to_numpy()[1:]
        np.testing.assert_allclose(sends, finishes + 0.01, rtol=0, atol=1e-12)
    assert (results.requests["arrival_s"].iloc[:5] == 0.0).all()


def test_duration_stops_sending() -> None:
    data = closed(4, 10, think_time_s=0.0)
    del data["workload"]["num_requests"]
    data["workload"]["duration_s"] = 2.0
    results = run(data)
    assert (results.requests["arrival_s"] <= 2.0).all()
    assert len(results.requests) > 8
    assert results.summary["completed"] == len(results.requests)


def test_open_loop_requests_have_no_client() -> None:
    results = run(small_scenario())
    assert (results.requests["client"] == -1).all()


@pytest.mark.parametrize(
    ("kind", "router"),
    [
        ("prefill_first", "round_robin"),
        ("sarathi", "random"),
        ("orca", "round_robin"),
        ("vllm", "random"),  # the deprecated name
    ],
)
def test_fast_forward_is_identical_to_stepping_in_a_closed_loop(kind: str, router: str) -> None:
    data = closed(12, 150, think_time_s=0.002)
    data["scheduler"] = {"kind": kind}
    data["cluster"]["replicas"] = 2
    data["cluster"]["router"] = router
    fast = run(data)
    data["fast_forward"] = False
    slow = run(data)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
    pd.testing.assert_frame_equal(fast.iterations, slow.iterations)
    assert summaries_equal(fast.summary, slow.summary)


def test_least_loaded_sees_mid_run_progress_in_a_closed_loop() -> None:
    """A replica in the middle of a fast-forwarded decode run reports the load a step-by-step
    replica would show at that moment, so a least-loaded router balances a closed loop."""
    data = closed(16, 320, think_time_s=0.003)
    data["cluster"]["replicas"] = 2
    data["cluster"]["router"] = "least_loaded"
    results = run(data)
    counts = results.requests["replica"].value_counts()
    assert abs(counts[0] - counts[1]) <= 0.1 * len(results.requests)
    assert in_flight(results.requests) <= 16


def test_rejecting_everything_stops_the_loop_not_a_hang() -> None:
    """Every request rejected as it is sent: the loop stops sending (it would send for ever at
    t = 0) and the run reports the rejected requests, saying why it stopped."""
    data = closed(2, 10)
    del data["workload"]["num_requests"]
    data["workload"]["duration_s"] = 5.0
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 9000}  # > llama-3-8b's 8192
    results = run(data)
    assert len(results.requests) == give_up_after(2)
    assert (results.requests["rejected_reason"] == "context_length").all()
    assert "the closed loop stopped sending at t = 0 s" in results.summary["warnings"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    concurrency=st.integers(1, 24),
    requests=st.integers(1, 80),
    think=st.sampled_from([0.0, 0.003, 0.05]),
    kind=st.sampled_from(["prefill_first", "sarathi", "orca"]),
    replicas=st.integers(1, 3),
)
def test_never_more_than_c_in_flight(
    concurrency: int, requests: int, think: float, kind: str, replicas: int
) -> None:
    data = closed(concurrency, requests, think_time_s=think)
    data["scheduler"] = {"kind": kind}
    data["cluster"]["replicas"] = replicas
    results = run(data)
    frame = results.requests
    assert len(frame) == requests
    assert (frame["status"] == "finished").all()
    assert in_flight(frame) <= concurrency
    assert frame["client"].between(0, concurrency - 1).all()


# --------------------------------------------------------------------------- front end


def with_frontend(data: dict, tmp_path, **terms: float) -> dict:
    profile = load_engine_profile("none").model_copy(
        update={"frontend": Frontend(**terms), "overhead": StepOverhead()}
    )
    path = tmp_path / "engine.json"
    from cbsim.cost.engine_profile import write_engine_profile

    write_engine_profile(profile, path)
    data["cluster"]["engine"] = str(path)
    return data


def test_front_end_delays_each_request(tmp_path) -> None:
    data = with_frontend(closed(4, 4), tmp_path, request_s=0.01, prompt_token_s=1e-5)
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 100}
    results = run(data)
    frame = results.requests
    np.testing.assert_allclose(frame["server_arrival_s"], 0.011)
    assert ((frame["ttft_s"] - frame["server_ttft_s"]) >= 0.011 - 1e-12).all()
    np.testing.assert_allclose(frame["tpot_s"], frame["server_tpot_s"])


def test_streaming_front_end_delays_every_token(tmp_path) -> None:
    data = with_frontend(closed(3, 30), tmp_path, output_token_s=2e-4)
    results = run(data)
    frame = results.requests
    assert (frame["first_token_s"] >= frame["server_first_token_s"] + 2e-4 - 1e-12).all()
    assert (frame["finish_s"] >= frame["server_finish_s"]).all()
    assert "delivered_s" in results.iterations
    ends = results.iterations["start_s"] + results.iterations["duration_s"]
    assert (results.iterations["delivered_s"] >= ends).all()


def test_no_front_end_means_client_and_server_agree() -> None:
    results = run(small_scenario({"cluster.engine": "none"}))
    frame = results.requests
    for name in ("ttft", "tpot", "e2e"):
        pd.testing.assert_series_equal(
            frame[f"{name}_s"], frame[f"server_{name}_s"], check_names=False
        )


@pytest.mark.parametrize("closed_loop", [True, False])
@pytest.mark.parametrize("speculative", [False, True])
def test_a_replicas_remembered_running_tokens_are_always_current(
    monkeypatch: pytest.MonkeyPatch, closed_loop: bool, speculative: bool
) -> None:
    """The least-loaded router reads each replica's running tokens from a sum the replica keeps
    until it next changes its requests; at every routing decision it equals a fresh sum."""
    from cbsim.engine.router import LeastLoadedRouter
    from cbsim.engine.scheduler.base import SchedulerPolicy

    checked = 0
    route = LeastLoadedRouter.route
    fresh = SchedulerPolicy.running_tokens

    def checking_route(self: LeastLoadedRouter, replicas: list, req: Request) -> int:  # type: ignore[type-arg]
        nonlocal checked
        for replica in replicas:
            sched = replica.scheduler
            remembered = sched.running_tokens()
            sched.forget_running_tokens()
            assert remembered == fresh(sched)
            checked += 1
        return route(self, replicas, req)

    monkeypatch.setattr(LeastLoadedRouter, "route", checking_route)
    if closed_loop:
        data = closed(24, 400, think_time_s=0.0)
    else:
        data = small_scenario({"workload.num_requests": 400, "workload.arrival.rate": 40.0})
    data["cluster"]["replicas"] = 3
    data["cluster"]["router"] = "least_loaded"
    data["scheduler"] = {"kind": "sarathi", "chunk_size": 256, "max_batch_size": 16}
    if speculative:
        data["speculative"] = {
            "enabled": True,
            "proposer": {"kind": "eagle"},
            "acceptance": {"kind": "per_request", "mean": 0.6, "concentration": 8},
            "policy": {"kind": "goodput", "k_max": 4},
        }
    run(data)
    assert checked > 1000
