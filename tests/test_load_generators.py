"""Load generators as benchmarks run them: rate stages, client timeouts, shared-prefix prompt pools.

Small pytest functions for each feature and hypothesis property tests of their invariants:
conservation (every request sent is completed, timed out, rejected or, with a horizon, unfinished),
never more than C requests in flight per closed loop (as its clients see them), every KV block
freed at the end, fast-forwarded decode runs identical to stepping.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.common.errors import CbsimError
from cbsim.engine.loop import Simulation
from cbsim.engine.recorder import stage_summary
from cbsim.workload.build import build_workload
from cbsim.workload.drawn import StagedWorkload
from tests.conftest import small_scenario, summaries_equal


def run(data: dict[str, Any]) -> cbsim.Results:
    return cbsim.simulate(cbsim.load_scenario(data))


def staged(*stages: dict[str, Any], **arrival: Any) -> dict[str, Any]:
    data = small_scenario(
        {"workload.arrival": {"kind": "stages", "stages": list(stages), **arrival}}
    )
    del data["workload"]["num_requests"]
    return data


def pooled(data: dict[str, Any], **pool: Any) -> dict[str, Any]:
    del data["workload"]["prompt_tokens"]
    data["workload"]["prompt_pool"] = {
        "system_prompts": 3,
        "system_tokens": 600,
        "questions": 4,
        "question_tokens": {"kind": "uniform", "low": 20, "high": 120},
        **pool,
    }
    data["cluster"]["prefix_caching"] = True
    return data


def assert_same_results(a: cbsim.Results, b: cbsim.Results) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.iterations, b.iterations, check_exact=True)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)
    assert summaries_equal(a.summary, b.summary)


def assert_steps_as_it_forwards(data: dict[str, Any]) -> cbsim.Results:
    fast = run({**data, "fast_forward": True})
    assert_same_results(fast, run({**data, "fast_forward": False}))
    return fast


def client_end(requests: pd.DataFrame, timeout_s: float | None) -> np.ndarray:
    """When each request stopped occupying its client: its last token, its timeout, its
    rejection (at once), or never (unfinished at the horizon)."""
    end = requests["finish_s"].to_numpy().copy()
    status = requests["status"].astype(str).to_numpy()
    sent = requests["arrival_s"].to_numpy()
    if timeout_s is not None:
        end[status == "timed_out"] = sent[status == "timed_out"] + timeout_s
    end[status == "rejected"] = sent[status == "rejected"]
    end[np.isin(status, ["waiting", "running"])] = math.inf  # still in flight at the horizon
    return end


def peak_in_flight(requests: pd.DataFrame, timeout_s: float | None) -> int:
    """The most requests sent and not yet done as their clients see them (a done one frees its
    client before a send at the same time)."""
    events = sorted(
        [(t, 1) for t in requests["arrival_s"]] + [(t, -1) for t in client_end(requests, timeout_s)]
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def assert_kv_all_freed(data: dict[str, Any]) -> None:
    """After the run every replica holds no request and no KV block in use (prefix-cache entries
    stay cached, unreferenced)."""
    simulation = Simulation(cbsim.load_scenario(data))
    simulation.run()
    for replica in simulation.replicas:
        sched = replica.scheduler
        assert not sched.running and not sched.waiting
        assert sched.kv.used_blocks == 0, (replica.index, sched.kv.used_blocks)
        assert replica.held_blocks == 0 and replica.in_transfer == 0
        assert not replica.awaiting and not replica.inbox
        if sched.prefix is not None:
            stack = list(sched.prefix.root.children.values())
            while stack:
                node = stack.pop()
                assert node.refs == 0
                stack.extend(node.children.values())


def assert_conserved(results: cbsim.Results) -> None:
    summary, status = results.summary, results.requests["status"].astype(str)
    assert summary["timed_out"] == int((status == "timed_out").sum())
    parts = ("completed", "timed_out", "rejected", "unfinished")
    assert sum(summary[p] for p in parts) == summary["requests"] == len(results.requests)
    if results.scenario.horizon_s is None:
        assert summary["unfinished"] == 0
    emitted = int(results.iterations["emitted_tokens"].sum())
    assert emitted == int(results.requests["generated_tokens"].sum())


# --------------------------------------------------------------------------- stages


def test_constant_stages_send_every_interval_and_wait_for_the_drain() -> None:
    data = staged(
        {"rate": 4, "duration_s": 3},
        {"rate": 10, "duration_s": 2},
        process="constant",
        gap_s=0.5,
    )
    results = assert_steps_as_it_forwards(data)
    req = results.requests
    first, second = req[req["stage"] == 0], req[req["stage"] == 1]
    assert len(first) == 12 and len(second) == 20
    np.testing.assert_allclose(first["arrival_s"], np.arange(12) / 4)
    start = float(first["finish_s"].max()) + 0.5  # drained, then the gap
    assert start > 3.0
    np.testing.assert_allclose(second["arrival_s"], start + np.arange(20) / 10)
    assert (req["status"] == "finished").all()


def test_poisson_stages_are_deterministic_and_a_stage_may_say_its_own_process() -> None:
    data = staged(
        {"rate": 6, "duration_s": 4}, {"rate": 12, "duration_s": 2, "process": "constant"}
    )
    a, b = run(data), run(data)
    assert_same_results(a, b)
    first = a.requests[a.requests["stage"] == 0]["arrival_s"].to_numpy()
    assert len(set(np.round(np.diff(first), 9))) > 1  # exponential gaps
    second = a.requests[a.requests["stage"] == 1]["arrival_s"].to_numpy()
    np.testing.assert_allclose(np.diff(second), 1 / 12)
    assert second[0] >= first.max()
    assert len(second) == 24


def test_stage_summary_reports_each_rate_point() -> None:
    results = run(staged({"rate": 2, "duration_s": 3}, {"rate": 20, "duration_s": 3}))
    table = stage_summary(results.requests, results.scenario)
    assert list(table.index) == [0, 1]
    assert table["rate"].tolist() == [2.0, 20.0]
    assert table["requests"].sum() == len(results.requests)
    summary = results.summary
    for stage in (0, 1):
        assert summary[f"stage{stage}_completed"] == table.loc[stage, "completed"]
        mine = results.requests[results.requests["stage"] == stage]
        expected = float(np.percentile(mine["ttft_s"], 50))
        assert summary[f"stage{stage}_ttft_p50_s"] == pytest.approx(expected)
    assert summary["stage1_throughput_rps"] > summary["stage0_throughput_rps"]


def test_requests_of_other_workloads_have_no_stage_column() -> None:
    results = run(small_scenario())
    assert "stage" not in results.requests
    assert not any(key.startswith("stage") for key in results.summary)
    assert results.summary["timed_out"] == 0


def test_a_horizon_stops_the_stages() -> None:
    data = staged({"rate": 10, "duration_s": 3}, {"rate": 10, "duration_s": 3}, process="constant")
    data["horizon_s"] = 2.0
    results = run(data)
    assert (results.requests["arrival_s"] < 2.0).all()
    assert set(results.requests["stage"]) == {0}
    assert_conserved(results)


def test_a_stage_that_sends_nothing_passes_on() -> None:
    data = staged({"rate": 0.01, "duration_s": 1}, {"rate": 5, "duration_s": 2}, process="constant")
    results = run(data)  # constant: stage 0 sends its one request at its start
    assert results.requests["stage"].value_counts().to_dict() == {0: 1, 1: 10}
    data["workload"]["arrival"]["stages"][0]["process"] = "poisson"
    results = run(data)
    assert set(results.requests["stage"]) <= {0, 1}
    assert results.summary["stage1_requests"] == 10


def test_stages_work_with_a_front_end_and_several_replicas() -> None:
    data = staged({"rate": 8, "duration_s": 2}, {"rate": 30, "duration_s": 2}, gap_s=0.2)
    data["cluster"].update({"replicas": 2, "router": "least_loaded", "engine": "vllm"})
    results = assert_steps_as_it_forwards(data)
    req = results.requests
    drained = float(req.loc[req["stage"] == 0, "finish_s"].max())  # as the client sees it
    assert float(req.loc[req["stage"] == 1, "arrival_s"].min()) >= drained + 0.2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"workload.num_requests": 10}, "leave out num_requests"),
        ({"workload.duration_s": 10.0}, "leave out duration_s"),
        ({"workload.arrival.stages": []}, "at least 1 item"),
        ({"workload.arrival.gap_s": -1.0}, "greater than or equal to 0"),
        ({"workload.arrival.process": "burst"}, "'poisson' or 'constant'"),
        ({"workload.arrival.stages": [{"rate": 0, "duration_s": 1}]}, "greater than 0"),
        ({"workload.arrival.stages": [{"rate": 1e6, "duration_s": 3e7}]}, "requests"),
        ({"workload.arrival.stages": [{"rate": 1, "duration_s": 3e7}] * 2}, "simulated time"),
        ({"workload.arrival.stages": [{"rate": 1}]}, "required field is missing"),
    ],
)
def test_bad_stages_are_refused(settings: dict[str, Any], message: str) -> None:
    data = staged({"rate": 4, "duration_s": 3})
    with pytest.raises(CbsimError, match=message) as info:
        cbsim.load_scenario(data, settings)
    assert info.value.field is not None and info.value.field.startswith("workload")


def test_staged_workload_draws_its_send_times_up_front() -> None:
    scenario = cbsim.load_scenario(
        staged({"rate": 5, "duration_s": 2}, {"rate": 7, "duration_s": 1})
    )
    workload = build_workload(scenario)
    assert isinstance(workload, StagedWorkload)
    assert len(workload) == sum(len(o) for o in workload.offsets)
    assert all(
        (o >= 0).all() and (o < d).all() for o, d in zip(workload.offsets, [2, 1], strict=True)
    )


# --------------------------------------------------------------------------- client timeouts


def timed(data: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    data["workload"]["client"] = {"timeout_s": timeout_s}
    data["workload"]["output_tokens"] = {"kind": "uniform", "low": 40, "high": 300}
    return data


@pytest.mark.parametrize("kind", ["prefill_first", "sarathi", "orca", "static"])
def test_timed_out_requests_are_counted_and_stay_out_of_latencies(kind: str) -> None:
    data = timed(small_scenario({"workload.num_requests": 120, "workload.arrival.rate": 40.0}), 1.5)
    data["scheduler"] = {"kind": kind}
    results = assert_steps_as_it_forwards(data)
    assert_conserved(results)
    req = results.requests
    out = req[req["status"] == "timed_out"]
    done = req[req["status"] == "finished"]
    assert len(out) and len(done)
    assert out["finish_s"].isna().all() and out["e2e_s"].isna().all()
    assert out["tpot_s"].isna().all()
    assert (out["ttft_s"].dropna() <= 1.5).all()
    assert (done["e2e_s"] <= 1.5 + 1e-9).all()  # anything slower timed out
    assert results.summary["ttft_p99_s"] == pytest.approx(np.percentile(done["ttft_s"], 99))
    assert results.summary["e2e_p99_s"] <= 1.5
    assert_kv_all_freed(data)


def test_a_closed_loop_client_sends_its_next_request_at_the_timeout() -> None:
    data = timed(
        small_scenario(
            {
                "workload.arrival": {"kind": "closed_loop", "concurrency": 6},
                "workload.num_requests": 60,
            }
        ),
        0.8,
    )
    results = assert_steps_as_it_forwards(data)
    req = results.requests
    assert_conserved(results)
    assert results.summary["timed_out"] > 0
    assert peak_in_flight(req, 0.8) <= 6
    ends = client_end(req, 0.8)
    for _, mine in req.groupby("client"):
        rows = mine.index.to_numpy()
        # each client's next send is when its previous request ended for it (no think time)
        np.testing.assert_allclose(mine["arrival_s"].to_numpy()[1:], ends[rows[:-1]])
    assert_kv_all_freed(data)


def test_timeouts_with_speculative_decoding_forward_as_they_step() -> None:
    data = timed(
        small_scenario(
            {
                "workload.arrival": {"kind": "closed_loop", "concurrency": 12},
                "workload.num_requests": 80,
            }
        ),
        1.0,
    )
    data["speculative"] = {
        "enabled": True,
        "proposer": {"kind": "eagle"},
        "acceptance": {"kind": "per_request", "mean": 0.6},
        "policy": {"kind": "goodput", "k_max": 4},
    }
    results = assert_steps_as_it_forwards(data)
    assert_conserved(results)
    assert results.summary["timed_out"] > 0
    assert_kv_all_freed(data)


def test_timeouts_with_disaggregated_pools() -> None:
    data = timed(small_scenario({"workload.num_requests": 100, "workload.arrival.rate": 40.0}), 1.0)
    data["cluster"] = {
        "model": "llama-3-8b",
        "gpu": "h100-sxm",
        "disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}},
    }
    results = assert_steps_as_it_forwards(data)
    assert_conserved(results)
    assert results.summary["timed_out"] > 0
    out = results.requests[results.requests["status"] == "timed_out"]
    assert (out["generated_tokens"] <= out["output_tokens"]).all()
    assert_kv_all_freed(data)


def test_timeouts_release_prefix_cache_entries() -> None:
    data = pooled(
        timed(small_scenario({"workload.num_requests": 150, "workload.arrival.rate": 40.0}), 1.0)
    )
    results = assert_steps_as_it_forwards(data)
    assert_conserved(results)
    assert results.summary["timed_out"] > 0
    assert results.summary["prefix_hit_rate"] > 0.5
    assert_kv_all_freed(data)


def test_a_timeout_in_the_front_end_drops_the_request_when_it_lands(tmp_path) -> None:
    from tests.test_closed_loop import with_frontend

    data = small_scenario({"workload.num_requests": 20, "workload.client": {"timeout_s": 0.005}})
    data = with_frontend(data, tmp_path, request_s=0.01)  # slower than the timeout
    results = run(data)
    assert (results.requests["status"] == "timed_out").all()
    assert results.requests["first_token_s"].isna().all()
    assert len(results.iterations) == 0


def test_a_timed_out_session_turn_ends_its_session() -> None:
    data = small_scenario()
    data["workload"] = {
        "arrival": {"kind": "poisson", "rate": 2.0},
        "sessions": {
            "count": 20,
            "turns": {"kind": "fixed", "value": 4},
            "user_tokens": {"kind": "fixed", "value": 50},
            "answer_tokens": {"kind": "uniform", "low": 10, "high": 200},
        },
        "client": {"timeout_s": 1.0},
    }
    results = assert_steps_as_it_forwards(data)
    req = results.requests
    assert_conserved(results)
    for _, turns in req.groupby("client"):
        status = turns["status"].astype(str).tolist()
        if "timed_out" in status:
            assert status.index("timed_out") == len(status) - 1  # nothing after it


def test_a_generous_timeout_changes_nothing() -> None:
    data = small_scenario()
    plain = run(data)
    data["workload"]["client"] = {"timeout_s": 1000.0}
    results = run(data)
    pd.testing.assert_frame_equal(plain.requests, results.requests)
    pd.testing.assert_frame_equal(plain.iterations, results.iterations)


@pytest.mark.parametrize("value", [0, -1.0, "x", True, float("nan")])
def test_bad_timeouts_are_refused(value: Any) -> None:
    with pytest.raises(CbsimError) as info:
        cbsim.load_scenario(small_scenario({"workload.client": {"timeout_s": value}}))
    assert info.value.field == "workload.client.timeout_s"


# --------------------------------------------------------------------------- prompt pools


def test_pool_prompts_recur_and_hit_the_prefix_cache() -> None:
    data = pooled(small_scenario({"workload.num_requests": 200}))
    results = assert_steps_as_it_forwards(data)
    req = results.requests
    lengths = set(req["prompt_tokens"])
    assert len(lengths) <= 12  # 3 system prompts x 4 questions
    assert (req["prompt_tokens"] > 600).all()
    assert results.summary["prefix_hit_rate"] > 0.8
    workload = build_workload(results.scenario)
    pool = workload.pool  # type: ignore[union-attr]
    assert pool is not None and pool.size == 12
    np.testing.assert_array_equal(
        req["prompt_tokens"],
        pool.prompt_tokens(workload.pool_picks),  # type: ignore[union-attr]
    )
    assert (pool.system_tokens == 600).all()


def test_pool_without_prefix_caching_caches_nothing() -> None:
    data = pooled(small_scenario({"workload.num_requests": 60}))
    data["cluster"]["prefix_caching"] = False
    assert run(data).summary["prefix_hit_rate"] == 0.0


def test_zipf_makes_the_first_system_prompt_the_most_popular() -> None:
    data = pooled(small_scenario({"workload.num_requests": 400}), zipf=2.0, questions=1)
    data["workload"]["prompt_pool"]["system_tokens"] = {"kind": "uniform", "low": 500, "high": 900}
    results = run(data)
    workload = build_workload(results.scenario)
    picks = workload.pool_picks  # type: ignore[union-attr]
    counts = np.bincount(picks, minlength=3)
    assert counts[0] > counts[1] > counts[2]


@pytest.mark.parametrize("arrival", ["closed_loop", "stages"])
def test_pools_feed_closed_loops_and_stages(arrival: str) -> None:
    if arrival == "closed_loop":
        data = small_scenario({"workload.arrival": {"kind": "closed_loop", "concurrency": 4}})
    else:
        data = staged({"rate": 10, "duration_s": 3})
    data = pooled(data)
    results = assert_steps_as_it_forwards(data)
    assert results.summary["prefix_hit_rate"] > 0.5
    assert len(set(results.requests["prompt_tokens"])) <= 12


@pytest.mark.parametrize(
    ("settings", "field", "message"),
    [
        (
            {"workload.prompt_pool.system_prompts": 0},
            "workload.prompt_pool.system_prompts",
            "greater",
        ),
        ({"workload.prompt_pool.questions": 1.5}, "workload.prompt_pool.questions", "integer"),
        ({"workload.prompt_pool.zipf": -1}, "workload.prompt_pool.zipf", "greater"),
        (
            {"workload.prompt_pool.system_tokens": 0},
            "workload.prompt_pool.system_tokens.value",
            "greater",
        ),
        (
            {"workload.prompt_pool.question_tokens": {"kind": "empirical", "trace": "x"}},
            "workload.prompt_pool.question_tokens",
            "unknown kind 'empirical'",
        ),
        (
            {
                "workload.prompt_pool.system_prompts": 10_000,
                "workload.prompt_pool.questions": 10_000,
            },
            "workload.prompt_pool",
            "at most",
        ),
        ({"workload.prompt_tokens": {"kind": "fixed", "value": 5}}, "workload", "prompt_tokens"),
        ({"workload.trace": {"path": "azure-conv-2023"}}, "workload", "trace"),
    ],
)
def test_bad_pools_are_refused(settings: dict[str, Any], field: str, message: str) -> None:
    data = pooled(small_scenario())
    with pytest.raises(CbsimError, match=message) as info:
        cbsim.load_scenario(data, settings)
    assert info.value.field == field


def test_a_pool_needs_output_lengths() -> None:
    data = pooled(small_scenario())
    del data["workload"]["output_tokens"]
    with pytest.raises(CbsimError) as info:
        cbsim.load_scenario(data)
    assert info.value.field == "workload.output_tokens"


def test_a_pool_and_an_acceptance_trace_are_refused() -> None:
    from tests.test_fuzz_valid_scenarios import ACCEPTANCE_TRACE

    data = pooled(small_scenario())
    data["speculative"] = {
        "enabled": True,
        "acceptance": {"kind": "trace", "path": ACCEPTANCE_TRACE},
    }
    with pytest.raises(CbsimError, match="acceptance trace") as info:
        cbsim.simulate(cbsim.load_scenario(data))
    assert info.value.field == "speculative.acceptance"


# --------------------------------------------------------------------------- properties


PROPERTY_SETTINGS = settings(
    max_examples=20,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def load_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A small scenario with a staged load or a closed loop, maybe a client timeout, maybe a
    prompt pool, any scheduler, one to three replicas, maybe speculation."""
    kind = draw(st.sampled_from(["stages", "closed_loop", "poisson"]))
    if kind == "stages":
        stages = [
            {
                "rate": draw(st.sampled_from([2.0, 8.0, 30.0])),
                "duration_s": draw(st.sampled_from([0.5, 1.0, 2.0])),
            }
            for _ in range(draw(st.integers(1, 3)))
        ]
        process = draw(st.sampled_from(["poisson", "constant"]))
        gap = draw(st.sampled_from([0.0, 0.3]))
        data = staged(*stages, process=process, gap_s=gap)
    elif kind == "closed_loop":
        data = small_scenario(
            {
                "workload.arrival": {
                    "kind": "closed_loop",
                    "concurrency": draw(st.integers(1, 12)),
                    "think_time_s": draw(st.sampled_from([0.0, 0.05])),
                },
                "workload.num_requests": draw(st.integers(1, 50)),
            }
        )
    else:
        data = small_scenario(
            {
                "workload.num_requests": draw(st.integers(1, 50)),
                "workload.arrival.rate": draw(st.sampled_from([5.0, 40.0])),
            }
        )
    data["workload"]["output_tokens"] = {"kind": "uniform", "low": 1, "high": 200}
    if draw(st.booleans()):
        data["workload"]["client"] = {"timeout_s": draw(st.sampled_from([0.3, 1.0, 3.0]))}
    if draw(st.booleans()):
        data = pooled(data, questions=draw(st.integers(1, 5)))
    data["scheduler"] = {
        "kind": draw(st.sampled_from(["prefill_first", "sarathi", "orca", "static"])),
        "max_batch_size": draw(st.sampled_from([4, 64])),
    }
    data["cluster"]["replicas"] = draw(st.integers(1, 3))
    data["cluster"]["router"] = draw(st.sampled_from(["round_robin", "least_loaded"]))
    if draw(st.booleans()):
        data["cluster"]["gpu"] = "l40s"  # memory pressure: preemption
        data["cluster"]["gpu_memory_utilization"] = 0.45
    if draw(st.integers(0, 3)) == 0:
        data["speculative"] = {
            "enabled": True,
            "proposer": {"kind": draw(st.sampled_from(["eagle", "ngram"]))},
            "acceptance": {"kind": "iid", "alpha": 0.6},
            "policy": {"kind": "fixed", "k": 3},
        }
    if draw(st.integers(0, 4)) == 0:
        data["horizon_s"] = draw(st.sampled_from([0.5, 2.0]))
    return data


@PROPERTY_SETTINGS
@given(load_scenarios())
def test_load_generator_invariants(data: dict[str, Any]) -> None:
    results = assert_steps_as_it_forwards(data)
    assert_conserved(results)
    req = results.requests
    timeout = (data["workload"].get("client") or {}).get("timeout_s")
    if timeout is None:
        assert results.summary["timed_out"] == 0
    else:
        out = req[req["status"] == "timed_out"]
        assert out["finish_s"].isna().all()
        assert (out["ttft_s"].dropna() <= timeout + 1e-9).all()
        done = req[req["status"] == "finished"]
        assert (done["e2e_s"] <= timeout + 1e-9).all()
    arrival = data["workload"]["arrival"]
    if arrival["kind"] == "closed_loop":
        assert peak_in_flight(req, timeout) <= arrival["concurrency"]
    if arrival["kind"] == "stages":
        ends = client_end(req, timeout)
        for stage in range(1, len(arrival["stages"])):
            mine = req["stage"] == stage
            before = (req["stage"] == stage - 1).to_numpy()
            if mine.any() and before.any():  # stages never overlap
                assert req.loc[mine, "arrival_s"].min() >= ends[before].max()
    if data.get("horizon_s") is None:
        assert_kv_all_freed(data)


def test_timeout_sends_track_the_deadline_exactly() -> None:
    """A closed-loop request sent at t and given up at t + timeout: its client's next request is
    sent exactly then (no think time), whatever iteration was under way."""
    data = timed(
        small_scenario(
            {
                "workload.arrival": {"kind": "closed_loop", "concurrency": 1},
                "workload.num_requests": 5,
            }
        ),
        0.25,
    )
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 1000}
    req = assert_steps_as_it_forwards(data).requests
    assert (req["status"] == "timed_out").all()
    np.testing.assert_allclose(req["arrival_s"], 0.25 * np.arange(5))
    assert (req["generated_tokens"] < req["output_tokens"]).all()  # aborted part-way
    assert math.isclose(
        float(req["generated_tokens"].max()), float(req["generated_tokens"].min()), rel_tol=0.2
    )
