"""Property tests (hypothesis): invariants of any run of any small scenario.

Random scenarios vary the scheduler, replicas and router, arrival process and rate, length
distributions, block size, batch limits, memory pressure (llama-3-8b on an l40s at 45 % memory with
long outputs forces preemption), a context limit, a horizon and the decode fast-forward. Every run
must account for every request, keep time and KV accounting consistent, emit each output token once
and be deterministic; fast-forwarded decode runs must give exactly what stepping gives.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.engine.scheduler import make_scheduler
from cbsim.memory.kvcache import KVCache, blocks_for_tokens
from cbsim.run.loading import Scheduler
from cbsim.workload.build import build_workload
from cbsim.workload.request import Request, Status
from tests.conftest import drawn_scheduler, summaries_equal

# Whole simulations are too slow to shrink within the test-time budget: a failure reports the
# example as generated (hypothesis prints it; its database replays it first on the next run).
ENGINE_PHASES = (Phase.explicit, Phase.reuse, Phase.generate)


def engine_settings(max_examples: int) -> settings:
    return settings(
        max_examples=max_examples,
        deadline=None,
        phases=ENGINE_PHASES,
        suppress_health_check=[HealthCheck.too_slow],
    )


# --------------------------------------------------------------------------- strategies


@st.composite
def lengths(draw: st.DrawFn, low: int, high: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(["fixed", "uniform", "lognormal"]))
    if kind == "fixed":
        return {"kind": "fixed", "value": draw(st.integers(low, high))}
    if kind == "uniform":
        a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
        return {"kind": "uniform", "low": a, "high": b}
    mean = draw(st.integers(low, high))
    sigma = draw(st.floats(0.1, 1.2))
    return {"kind": "lognormal", "mean": mean, "sigma": sigma, "max": high}


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["static", "orca", "prefill_first", "sarathi"]))
    pressure = draw(st.booleans())
    rate = draw(st.floats(0.5, 200.0))
    if draw(st.booleans()):
        arrival = {"kind": "poisson", "rate": rate}
    else:
        arrival = {"kind": "gamma", "rate": rate, "cv": draw(st.floats(0.3, 4.0))}
    max_batch_size = draw(st.integers(1, 64))
    workload: dict[str, Any] = {
        "num_requests": draw(st.integers(1, 60)),
        "arrival": arrival,
        "prompt_tokens": draw(lengths(1, 3000)),
        "output_tokens": draw(lengths(1, 1500 if pressure else 300)),
    }
    cluster: dict[str, Any] = {
        "model": "llama-3-8b",
        "gpu": "l40s" if pressure else "h100-sxm",
        "replicas": draw(st.integers(1, 3)),
        "router": draw(st.sampled_from(["round_robin", "least_loaded", "random"])),
    }
    if pressure:
        cluster["gpu_memory_utilization"] = 0.45
    if draw(st.booleans()):
        cluster["max_model_len"] = draw(st.integers(512, 4096))
    scheduler = drawn_scheduler(draw, kind, max_batch_size)
    data: dict[str, Any] = {
        "seed": draw(st.integers(0, 2**16)),
        "workload": workload,
        "cluster": cluster,
        "scheduler": scheduler,
        "fast_forward": draw(st.booleans()),
    }
    if draw(st.integers(0, 4)) == 0:
        data["horizon_s"] = draw(st.floats(0.05, 30.0))
    return data


# --------------------------------------------------------------------------- invariants


def check_invariants(data: dict[str, Any], results: cbsim.Results) -> None:
    scenario = results.scenario
    req, it, summary = results.requests, results.iterations, results.summary
    specs = build_workload(scenario)
    horizon = scenario.horizon_s
    sched = scenario.scheduler

    # every request that arrived is reported, once, in arrival order
    arrived = len(specs) if horizon is None else int(np.sum(specs.arrival_s < horizon))
    assert len(req) == arrived == summary["requests"]
    assert req["request_id"].tolist() == list(range(arrived))
    np.testing.assert_array_equal(req["arrival_s"], specs.arrival_s[:arrived])
    status = req["status"].astype(str)
    assert set(status) <= {"finished", "rejected", "waiting", "running"}
    assert summary["completed"] + summary["rejected"] + summary["unfinished"] == arrived
    if horizon is None:
        assert summary["unfinished"] == 0
        assert set(status) <= {"finished", "rejected"}

    done = req[status == "finished"]
    rejected = req[status == "rejected"]
    assert (done["generated_tokens"] == done["output_tokens"]).all()
    assert (req["generated_tokens"] <= req["output_tokens"]).all()
    assert (done["arrival_s"] <= done["first_token_s"]).all()
    assert (done["first_token_s"] <= done["finish_s"]).all()
    assert (done["ttft_s"] > 0).all()
    assert (done["queue_s"] >= 0).all()
    assert (done["arrival_s"] + done["queue_s"] <= done["first_token_s"]).all()
    assert (done["replica"].between(0, scenario.cluster.replicas - 1)).all()
    max_len = scenario.cluster.max_model_len or 8192
    too_long = (rejected["prompt_tokens"] + rejected["output_tokens"]) > max_len
    assert ((rejected["rejected_reason"] == "context_length") == too_long).all()
    assert (rejected["generated_tokens"] == 0).all()
    assert ((done["prompt_tokens"] + done["output_tokens"]) <= max_len).all()
    if horizon is not None:
        assert (done["finish_s"] <= horizon).all()

    # iterations: KV within bounds, batches within limits
    if len(it):
        total = int(it["kv_blocks_total"].iloc[0])
        assert (it["kv_blocks_total"] == total).all()
        assert (it["kv_blocks_used"] >= 0).all()
        assert (it["kv_blocks_used"] <= it["kv_blocks_total"]).all()
        # window averages split iterations across windows, so utilisation stays a fraction
        assert (results.timeseries["kv_utilization"] <= 1.0 + 1e-9).all()
        assert (it["duration_s"] > 0).all()
        assert (it["batch_size"] >= 1).all()
        assert (it["batch_size"] <= sched.max_batch_size).all()
        assert (it["emitted_tokens"] <= it["batch_size"]).all()
        assert (it["prefill_tokens"] + it["decode_tokens"] >= it["batch_size"]).all()
        assert (it["waiting"] >= 0).all()
        if horizon is not None:
            assert (it["start_s"] + it["duration_s"] <= horizon).all()
        tokens = it["prefill_tokens"] + it["decode_tokens"]
        alone = it["batch_size"] == 1
        if sched.kind == "prefill_first":
            assert ((it["prefill_tokens"] == 0) | (it["decode_tokens"] == 0)).all()
            assert ((it["prefill_tokens"] <= sched.max_batched_tokens) | alone).all()
        elif sched.kind == "sarathi":
            assert (tokens <= sched.chunk_size).all()
        else:  # orca and static: a lone prompt may exceed the budget on an idle replica
            assert (
                (tokens <= sched.max_batched_tokens) | (alone & (it["decode_tokens"] == 0))
            ).all()
        if sched.kind == "static":
            assert ((it["prefill_tokens"] == 0) | (it["decode_tokens"] == 0)).all()

    # time runs forward on every replica, iterations never overlap
    for _, rows in it.groupby("replica"):
        start = rows["start_s"].to_numpy()
        end = start + rows["duration_s"].to_numpy()
        assert np.all(np.diff(start) >= 0)
        assert np.all(end[:-1] <= start[1:])
        if sched.kind == "static":
            # within a static batch the batch only shrinks
            sizes = rows["batch_size"].to_numpy()
            new_batch = rows["prefill_tokens"].to_numpy() > 0
            for prev, cur, fresh in zip(sizes[:-1], sizes[1:], new_batch[1:], strict=True):
                assert fresh or cur <= prev

    # each output token is emitted exactly once; recompute only adds prefill work
    assert int(it["emitted_tokens"].sum()) == int(req["generated_tokens"].sum())
    if horizon is None:
        assert int(it["emitted_tokens"].sum()) == int(done["output_tokens"].sum())
        assert int(it["prefill_tokens"].sum()) >= int(done["prompt_tokens"].sum())
        if summary["preemptions"] == 0:
            assert int(it["prefill_tokens"].sum()) == int(done["prompt_tokens"].sum())
    assert summary["preemptions"] == int(req["preemptions"].sum())
    if sched.kind in ("static", "orca"):
        assert summary["preemptions"] == 0

    # the timeseries adds up
    ts = results.timeseries
    assert int(ts["arrivals"].sum()) == arrived
    assert int(ts["requests_completed"].sum()) == summary["completed"]
    window = scenario.output.timeseries_window_s
    assert (ts["span_s"].iloc[:-1] == window).all()  # the last window ends with the run
    assert (ts["output_tokens_per_s"] * ts["span_s"]).sum() == pytest.approx(
        it["emitted_tokens"].sum()
    )


# --------------------------------------------------------------------------- properties


@engine_settings(20)
@given(data=scenarios())
def test_run_invariants(data: dict[str, Any]):
    results = cbsim.simulate(cbsim.load_scenario(data))
    check_invariants(data, results)


@engine_settings(10)
@given(data=scenarios())
def test_same_seed_same_results(data: dict[str, Any]):
    a = cbsim.simulate(cbsim.load_scenario(data))
    b = cbsim.simulate(cbsim.load_scenario(data))
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.iterations, b.iterations, check_exact=True)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)
    assert summaries_equal(a.summary, b.summary)


@engine_settings(20)
@given(data=scenarios())
def test_fast_forward_equals_stepping(data: dict[str, Any]):
    stepped = cbsim.simulate(cbsim.load_scenario(data, {"fast_forward": False}))
    forward = cbsim.simulate(cbsim.load_scenario(data, {"fast_forward": True}))
    pd.testing.assert_frame_equal(stepped.requests, forward.requests, check_exact=True)
    pd.testing.assert_frame_equal(stepped.iterations, forward.iterations, check_exact=True)
    pd.testing.assert_frame_equal(stepped.timeseries, forward.timeseries, check_exact=True)
    assert summaries_equal(stepped.summary, forward.summary)


def test_memory_pressure_forces_preemption_and_everything_finishes():
    data = {
        "seed": 7,
        "workload": {
            "num_requests": 60,
            "arrival": {"kind": "poisson", "rate": 50.0},
            "prompt_tokens": {"kind": "uniform", "low": 500, "high": 3000},
            "output_tokens": {"kind": "uniform", "low": 500, "high": 2000},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "l40s", "gpu_memory_utilization": 0.45},
        "scheduler": {"kind": "prefill_first"},
    }
    results = cbsim.simulate(cbsim.load_scenario(data))
    assert results.summary["preemptions"] > 0
    assert results.summary["completed"] == 60
    check_invariants(data, results)
    it, done = results.iterations, results.requests
    assert int(it["prefill_tokens"].sum()) > int(done["prompt_tokens"].sum())


# --------------------------------------------------------------------------- schedulers alone


@st.composite
def scheduler_cases(draw: st.DrawFn) -> tuple[str, int, int, int, list[tuple[int, int, int]]]:
    kind = draw(st.sampled_from(["static", "orca", "prefill_first", "sarathi"]))
    block_size = draw(st.sampled_from([1, 4, 16]))
    total_blocks = draw(st.integers(8, 200))
    capacity = total_blocks * block_size
    shapes = draw(
        st.lists(
            st.tuples(st.integers(0, 30), st.integers(1, 400), st.integers(1, 200)),
            min_size=1,
            max_size=25,
        )
    )
    # only requests that fit an empty cache reach a scheduler (the engine rejects the rest)
    fitting = [
        (t, p, o)
        for t, p, o in shapes
        if blocks_for_tokens(p + o, block_size) * block_size <= capacity
    ]
    watermark = draw(st.integers(0, max(0, total_blocks // 10)))
    return kind, block_size, total_blocks, watermark, sorted(fitting)


@settings(max_examples=40, deadline=None)
@given(case=scheduler_cases(), max_batch_size=st.integers(1, 16), chunk=st.integers(8, 256))
def test_scheduler_kv_accounting(case, max_batch_size: int, chunk: int):
    kind, block_size, total_blocks, watermark, shapes = case
    config = Scheduler(
        kind=kind,
        block_size=block_size,
        max_batch_size=max_batch_size,
        max_batched_tokens=max(chunk, max_batch_size),
    )
    kv = KVCache(total_blocks, block_size, watermark_blocks=watermark)
    sched = make_scheduler(config, kv)
    pending = [Request(i, float(t), p, o) for i, (t, p, o) in enumerate(shapes)]
    everyone = list(pending)
    finished: list[Request] = []
    now = 0.0
    for _ in range(20_000):
        while pending and pending[0].arrival_s <= now:
            sched.enqueue(pending.pop(0))
        if not sched.has_work:
            if not pending:
                break
            now = pending[0].arrival_s
            continue
        batch = sched.next_batch(now)
        assert batch.requests, "work but no batch"
        assert len(batch) <= max_batch_size
        assert len({id(r) for r in batch.requests}) == len(batch)
        for r, q in zip(batch.requests, batch.new_tokens, strict=True):
            assert r.status == Status.RUNNING
            assert q >= 1
            # the cache already holds what this step writes
            assert r.blocks * block_size >= r.kv_tokens + q
        assert kv.used_blocks == sum(r.blocks for r in sched.running)
        assert 0 <= kv.used_blocks <= kv.total_blocks
        now += 1.0
        sched.complete(batch, now, finished.append)
        assert kv.used_blocks == sum(r.blocks for r in sched.running)
        for r in sched.waiting:
            assert r.blocks == 0 and r.kv_tokens == 0
    else:
        pytest.fail("scheduler did not drain")
    assert len(finished) == len(everyone)
    assert kv.used_blocks == 0
    for r in everyone:
        assert r.generated == r.output_tokens
        assert r.arrival_s <= r.first_scheduled_s < r.first_token_s <= r.finish_s
