"""Property tests (hypothesis) of runs with speculative decoding.

Random small scenarios vary the proposer (draft model, EAGLE head, n-gram), the acceptance model
(i.i.d., positional, per-request Beta with drift, token-level over a 50-token vocabulary, the
shipped acceptance trace), the k policy (fixed, threshold, EWMA look-ahead, heuristic, batch table,
goodput per batch or per request), the scheduler, replicas, batch limits and memory pressure
(llama-3-8b on an l40s at 45 % memory with long prompts forces preemption). Every run must finish or
reject every request, never overshoot an output length, never accept more drafts than it drafted,
emit every output token exactly once (accepted drafts + one sampled token per decoding entry +
one per completed prefill), keep KV within the cache, keep k within the policy's maximum and be
deterministic for a seed, in this process and in fresh ones. With every k forced to 0 nothing is
drafted; with the n-gram proposer (no weights, no KV) that run is then exactly the
speculation-free one.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import cbsim
from tests.conftest import drawn_scheduler, summaries_equal

EXAMPLE_TRACE = (
    Path(__file__).resolve().parent.parent / "scenarios" / "data" / "acceptance-example.csv"
)

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
def proposers(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["draft_model", "eagle", "ngram"]))
    if kind == "draft_model":
        return {"kind": kind, "model": "llama-3.2-1b"}
    return {"kind": kind}


probability = st.floats(0.0, 1.0)


@st.composite
def acceptances(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["iid", "positional", "per_request", "token_level", "trace"]))
    if kind == "iid":
        return {"kind": kind, "alpha": draw(probability)}
    if kind == "positional":
        return {"kind": kind, "rates": draw(st.lists(probability, min_size=1, max_size=6))}
    if kind == "per_request":
        return {
            "kind": kind,
            "mean": draw(st.floats(0.02, 0.98)),
            "concentration": draw(st.floats(0.5, 100.0)),
            "drift_per_1k_tokens": draw(st.floats(-1.0, 1.0)),
        }
    if kind == "token_level":
        return {"kind": kind, "vocab_size": 50, "divergence": draw(st.floats(0.0, 2.0))}
    return {"kind": "trace", "path": str(EXAMPLE_TRACE)}


@st.composite
def batch_tables(draw: st.DrawFn) -> list[list[int]]:
    """Non-overlapping [min_batch, max_batch, k] rows (gaps allowed: k = 0 there)."""
    cuts = sorted(draw(st.sets(st.integers(1, 80), min_size=1, max_size=6)))
    rows = []
    for low, high in zip(cuts, [*cuts[1:], 100_001], strict=True):
        if draw(st.integers(0, 4)) == 0:
            continue  # leave a gap
        rows.append([low, high - 1, draw(st.integers(0, 8))])
    return rows or [[1, 100_000, draw(st.integers(0, 8))]]


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(
            ["fixed", "threshold", "ewma_lookahead", "heuristic", "batch_table", "goodput"]
        )
    )
    if kind == "fixed":
        return {"kind": kind, "k": draw(st.integers(1, 8))}
    if kind == "threshold":
        k_max = draw(st.integers(1, 8))
        low, high = sorted(draw(st.lists(probability, min_size=2, max_size=2)))
        return {
            "kind": kind,
            "k": draw(st.integers(1, k_max)),
            "k_max": k_max,
            "min_acceptance_rate": low,
            "max_acceptance_rate": high,
            "adaptive": draw(st.booleans()),
        }
    if kind == "ewma_lookahead":
        k_min, initial, k_max = sorted(draw(st.lists(st.integers(1, 8), min_size=3, max_size=3)))
        return {
            "kind": kind,
            "initial": initial,
            "k_min": k_min,
            "k_max": k_max,
            "alpha": draw(st.floats(0.05, 1.0)),
            "cooldown_steps": draw(st.integers(1, 6)),
        }
    if kind == "heuristic":
        k_max = draw(st.integers(1, 8))
        return {"kind": kind, "k": draw(st.integers(1, k_max)), "k_max": k_max}
    if kind == "batch_table":
        return {"kind": kind, "table": draw(batch_tables())}
    return {"kind": kind, "k_max": draw(st.integers(1, 8)), "per_request": draw(st.booleans())}


def policy_k_max(policy: Any) -> int:
    """The largest k a policy config allows (from the validated config, defaults included)."""
    if policy.kind == "fixed":
        return int(policy.k)
    if policy.kind == "batch_table":
        return max(int(k) for _, _, k in policy.table)
    if policy.kind == "adaptive_hysteresis":
        return max(int(k) for k in policy.candidate_steps)
    return int(policy.k_max)


@st.composite
def scenarios(draw: st.DrawFn, policy: dict[str, Any] | None = None) -> dict[str, Any]:
    kind = draw(st.sampled_from(["static", "orca", "vllm", "sarathi"]))
    pressure = draw(st.integers(0, 2)) == 0
    # under memory pressure: enough requests in flight at once to exhaust the KV cache
    max_batch_size = draw(st.integers(16, 48) if pressure else st.integers(1, 48))
    workload: dict[str, Any] = {
        "num_requests": draw(st.integers(12, 30) if pressure else st.integers(1, 60)),
        "arrival": {"kind": "poisson", "rate": draw(st.floats(20.0 if pressure else 1.0, 200.0))},
    }
    if pressure:
        # long prompts fill the cache; outputs of 100-600 tokens made these a third of the
        # examples and nine tenths of their time for about as many preemptions (one in ten)
        workload["prompt_tokens"] = {"kind": "uniform", "low": 500, "high": 3000}
        workload["output_tokens"] = {"kind": "uniform", "low": 50, "high": 300}
    else:
        low, high = sorted(draw(st.lists(st.integers(1, 1500), min_size=2, max_size=2)))
        workload["prompt_tokens"] = {"kind": "uniform", "low": low, "high": high}
        low, high = sorted(draw(st.lists(st.integers(1, 250), min_size=2, max_size=2)))
        workload["output_tokens"] = {"kind": "uniform", "low": low, "high": high}
    cluster: dict[str, Any] = {
        "model": "llama-3-8b",
        "gpu": "l40s" if pressure else "h100-sxm",
        "replicas": draw(st.integers(1, 2)),
        "router": draw(st.sampled_from(["round_robin", "least_loaded", "random"])),
    }
    if pressure:
        cluster["gpu_memory_utilization"] = 0.45
    elif draw(st.integers(0, 5)) == 0:
        cluster["max_model_len"] = draw(st.integers(256, 4096))  # some requests are rejected
    scheduler = drawn_scheduler(draw, kind, max_batch_size)
    return {
        "seed": draw(st.integers(0, 2**16)),
        "workload": workload,
        "cluster": cluster,
        "scheduler": scheduler,
        "speculative": {
            "enabled": True,
            "proposer": draw(proposers()),
            "acceptance": draw(acceptances()),
            "policy": policy if policy is not None else draw(policies()),
        },
    }


# --------------------------------------------------------------------------- invariants


def check_invariants(data: dict[str, Any], results: cbsim.Results) -> None:
    scenario = results.scenario
    req, it, summary, ts = results.requests, results.iterations, results.summary, results.timeseries
    k_cap = policy_k_max(scenario.speculative.policy)
    status = req["status"].astype(str)

    # every request is accounted for: the run drains
    assert len(req) == summary["requests"] == data["workload"]["num_requests"]
    assert set(status) <= {"finished", "rejected"}
    assert summary["unfinished"] == 0
    done = req[status == "finished"]
    rejected = req[status == "rejected"]
    assert summary["completed"] == len(done)

    # speculation never overshoots an output length, never accepts what it did not draft
    assert (done["generated_tokens"] == done["output_tokens"]).all()
    assert (req["generated_tokens"] <= req["output_tokens"]).all()
    assert (req["accepted_tokens"] >= 0).all()
    assert (req["accepted_tokens"] <= req["drafted_tokens"]).all()
    assert (req["spec_steps"] <= req["drafted_tokens"]).all()  # k >= 1 on a speculative step
    assert (req["drafted_tokens"] <= k_cap * req["spec_steps"]).all()
    assert (req["spec_steps"] <= req["decode_steps"]).all()
    assert (req["rejected_steps"] <= req["spec_steps"]).all()
    assert (req["mean_k"] >= 0).all()
    assert (req["mean_k"] <= k_cap).all()
    for column in ("generated_tokens", "spec_steps", "drafted_tokens", "decode_steps"):
        assert (rejected[column] == 0).all(), column
    # each finished request's tokens: one per completed prefill (1 + at most one per
    # preemption), one per decode/verify step, plus its accepted drafts
    prefills = done["output_tokens"] - done["decode_steps"] - done["accepted_tokens"]
    assert (prefills >= 1).all()
    assert (prefills <= 1 + done["preemptions"]).all()

    # timestamps
    assert (done["arrival_s"] <= done["first_token_s"]).all()
    assert (done["first_token_s"] <= done["finish_s"]).all()
    assert (done["ttft_s"] > 0).all()

    # iterations
    assert len(it) > 0 or len(done) == 0
    assert (it["accepted_tokens"] >= 0).all()
    assert (it["accepted_tokens"] <= it["drafted_tokens"]).all()
    assert (it["kv_blocks_used"] >= 0).all()
    assert (it["kv_blocks_used"] <= it["kv_blocks_total"]).all()
    assert (it["duration_s"] > 0).all()
    assert (it["draft_s"] >= 0).all()
    assert (it["draft_s"] < it["duration_s"]).all()
    assert (it["draft_s"][it["drafted_tokens"] == 0] == 0).all()
    assert (it["batch_size"] >= 1).all()
    assert (it["batch_size"] <= scenario.scheduler.max_batch_size).all()
    assert (it["k_min"] >= 0).all()
    assert (it["k_min"] <= it["k_max"]).all()
    assert (it["k_max"] <= k_cap).all()
    assert (it["mean_k"] >= it["k_min"] - 1e-12).all()
    assert (it["mean_k"] <= it["k_max"] + 1e-12).all()
    # verify_tokens = Σ (k + 1) over speculating entries, drafted = Σ k
    spec_entries = it["verify_tokens"] - it["drafted_tokens"]
    assert (spec_entries >= 0).all()
    assert ((spec_entries == 0) == (it["drafted_tokens"] == 0)).all()
    assert (it["drafted_tokens"] <= k_cap * spec_entries).all()
    # emitted = accepted + one per decoding entry (decode_tokens plain decodes + speculating
    # entries) + one per prefill completing in the iteration
    sampled = it["emitted_tokens"] - it["accepted_tokens"]
    decoding = it["decode_tokens"] + spec_entries
    assert (decoding <= it["batch_size"]).all()
    assert (sampled >= decoding).all()
    assert (sampled <= it["batch_size"]).all()
    no_prefill = it["prefill_tokens"] == 0
    assert (sampled[no_prefill] == decoding[no_prefill]).all()
    assert (decoding[no_prefill] == it["batch_size"][no_prefill]).all()
    for _, rows in it.groupby("replica"):
        start = rows["start_s"].to_numpy()
        end = start + rows["duration_s"].to_numpy()
        assert np.all(end[:-1] <= start[1:])

    # conservation between the tables
    assert int(it["emitted_tokens"].sum()) == int(done["output_tokens"].sum())
    assert int(it["drafted_tokens"].sum()) == int(req["drafted_tokens"].sum())
    assert int(it["accepted_tokens"].sum()) == int(req["accepted_tokens"].sum())
    assert int(it["prefill_tokens"].sum()) >= int(done["prompt_tokens"].sum())
    assert summary["preemptions"] == int(req["preemptions"].sum())
    if scenario.scheduler.kind in ("static", "orca"):
        assert summary["preemptions"] == 0

    # summary and timeseries rates
    drafted = int(req["drafted_tokens"].sum())
    rate = summary["acceptance_rate"]
    if drafted:
        assert 0.0 <= rate <= 1.0
        assert rate == int(req["accepted_tokens"].sum()) / drafted
    else:
        assert np.isnan(rate)
    assert 0.0 <= summary["mean_k"] <= k_cap
    assert summary["draft_time_s"] == float(it["draft_s"].sum())
    ts_rate = ts["acceptance_rate"].to_numpy()
    ts_rate = ts_rate[~np.isnan(ts_rate)]
    assert np.all((ts_rate >= 0) & (ts_rate <= 1))
    assert (ts["mean_k"] >= 0).all()
    assert (ts["mean_k"] <= k_cap + 1e-9).all()


# --------------------------------------------------------------------------- properties


def pressure_scenario(kind: str, policy: dict[str, Any]) -> dict[str, Any]:
    """30 long requests at once on an l40s at 45 % memory with a draft model: KV runs out."""
    return {
        "seed": 7,
        "workload": {
            "num_requests": 30,
            "arrival": {"kind": "poisson", "rate": 50.0},
            "prompt_tokens": {"kind": "uniform", "low": 500, "high": 3000},
            "output_tokens": {"kind": "uniform", "low": 200, "high": 800},
        },
        "cluster": {"model": "llama-3-8b", "gpu": "l40s", "gpu_memory_utilization": 0.45},
        "scheduler": {"kind": kind},
        "speculative": {
            "enabled": True,
            "proposer": {"kind": "draft_model", "model": "llama-3.2-1b"},
            "acceptance": {"kind": "per_request", "mean": 0.8, "drift_per_1k_tokens": -0.3},
            "policy": policy,
        },
    }


@engine_settings(12)
@example(data=pressure_scenario("vllm", {"kind": "goodput", "k_max": 6, "per_request": True}))
@given(data=scenarios())
def test_speculative_run_invariants(data: dict[str, Any]):
    results = cbsim.simulate(cbsim.load_scenario(data))
    check_invariants(data, results)


@engine_settings(4)
@given(data=scenarios())
def test_speculative_same_seed_same_results(data: dict[str, Any]):
    a = cbsim.simulate(cbsim.load_scenario(data))
    b = cbsim.simulate(cbsim.load_scenario(data))
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.iterations, b.iterations, check_exact=True)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries, check_exact=True)
    assert summaries_equal(a.summary, b.summary)


@engine_settings(12)
@given(data=scenarios())
def test_speculative_fast_forward_equals_stepping(data: dict[str, Any]):
    # decode runs advanced by the compiled kernel (where the policy and model run in it) give the
    # same frames, bit for bit, as every iteration stepped on its own
    stepped = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": False}))
    forward = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": True}))
    pd.testing.assert_frame_equal(stepped.requests, forward.requests, check_exact=True)
    pd.testing.assert_frame_equal(stepped.iterations, forward.iterations, check_exact=True)
    pd.testing.assert_frame_equal(stepped.timeseries, forward.timeseries, check_exact=True)
    assert summaries_equal(stepped.summary, forward.summary)


NO_DRAFTS = {"kind": "batch_table", "table": [[1, 100_000, 0]]}


@engine_settings(8)
@given(data=scenarios(policy=NO_DRAFTS))
def test_speculation_with_k_zero_drafts_nothing(data: dict[str, Any]):
    # Not compared with a speculation-free run: the draft model's weights and KV shrink the
    # target's cache, so times may differ. Every step is a plain decode instead.
    results = cbsim.simulate(cbsim.load_scenario(data))
    check_invariants(data, results)
    req, it = results.requests, results.iterations
    done = req[req["status"].astype(str) == "finished"]
    for column in ("spec_steps", "drafted_tokens", "accepted_tokens"):
        assert (req[column] == 0).all(), column
    for column in ("drafted_tokens", "accepted_tokens", "verify_tokens", "k_max", "draft_s"):
        assert (it[column] == 0).all(), column
    assert (it["mean_k"] == 0).all()
    assert (req["mean_k"] == 0).all()
    assert int(it["emitted_tokens"].sum()) == int(done["output_tokens"].sum())
    no_preemption = done["preemptions"] == 0
    assert (done["decode_steps"][no_preemption] == done["output_tokens"][no_preemption] - 1).all()
    assert np.isnan(results.summary["acceptance_rate"])
    assert results.summary["mean_k"] == 0.0


@pytest.mark.parametrize("kind", ["vllm", "sarathi"])
@pytest.mark.parametrize(
    "policy",
    [{"kind": "fixed", "k": 8}, {"kind": "heuristic"}, {"kind": "goodput", "per_request": True}],
    ids=lambda p: p["kind"],
)
def test_memory_pressure_with_speculation_preempts_and_finishes(kind: str, policy: dict[str, Any]):
    data = pressure_scenario(kind, policy)
    results = cbsim.simulate(cbsim.load_scenario(data))
    assert results.summary["preemptions"] > 0
    assert results.summary["completed"] == 30
    check_invariants(data, results)


DIGEST_SCRIPT = """
import sys, json, hashlib
import pandas as pd
import cbsim
results = cbsim.simulate(cbsim.load_scenario(json.loads(sys.argv[1])))
digest = hashlib.sha256()
for frame in (results.requests, results.iterations, results.timeseries):
    digest.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
print(digest.hexdigest())
"""


def frames_digest(results: cbsim.Results) -> str:
    digest = hashlib.sha256()
    for frame in (results.requests, results.iterations, results.timeseries):
        digest.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    return digest.hexdigest()


def test_same_seed_same_results_across_processes():
    # Same scenario + seed = identical results in any process (no hash-order dependence).
    data = pressure_scenario("sarathi", {"kind": "goodput", "k_max": 5, "per_request": True})
    data["speculative"]["acceptance"] = {"kind": "token_level", "vocab_size": 50}
    data["workload"]["num_requests"] = 12
    data["cluster"]["replicas"] = 2
    data["cluster"]["router"] = "random"
    here = frames_digest(cbsim.simulate(cbsim.load_scenario(data)))
    root = Path(__file__).resolve().parent.parent
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", DIGEST_SCRIPT, json.dumps(data)],
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
            env=env,
        )
        assert out.stdout.strip() == here


@engine_settings(8)
@given(data=scenarios(policy=NO_DRAFTS))
def test_ngram_with_k_zero_equals_no_speculation(data: dict[str, Any]):
    # The n-gram proposer has no weights and no KV, and k = 0 drafts nothing: every iteration
    # must then be exactly the speculation-free one (same batches, times, KV, finishes).
    data["speculative"]["proposer"] = {"kind": "ngram"}
    if data["speculative"]["acceptance"]["kind"] == "trace":  # it would supply the lengths
        data["speculative"]["acceptance"] = {"kind": "iid"}
    spec = cbsim.simulate(cbsim.load_scenario(data))
    plain = cbsim.simulate(cbsim.load_scenario(data, {"speculative.enabled": False}))
    columns = [
        "request_id", "replica", "arrival_s", "first_token_s", "finish_s", "prompt_tokens",
        "output_tokens", "preemptions", "status", "generated_tokens",
    ]  # fmt: skip
    pd.testing.assert_frame_equal(spec.requests[columns], plain.requests[columns], check_exact=True)
    columns = [
        "replica", "start_s", "duration_s", "batch_size", "prefill_tokens", "decode_tokens",
        "emitted_tokens", "kv_blocks_used", "kv_blocks_total", "waiting",
    ]  # fmt: skip
    pd.testing.assert_frame_equal(
        spec.iterations[columns], plain.iterations[columns], check_exact=True
    )
