"""Inter-token latency: every output token's gap, exactly, and the scheduler warnings."""

from __future__ import annotations

from array import array

import numpy as np
import pytest

import cbsim
from cbsim.engine.recorder import PERCENTILES, inter_token_latency, weighted_percentile
from cbsim.engine.scheduler.warnings import scheduler_warnings
from cbsim.outputs import itl
from cbsim.run.loading import Scheduler
from tests.conftest import small_scenario


def run(data: dict) -> cbsim.Results:
    return cbsim.simulate(cbsim.load_scenario(data))


def test_weighted_percentile_equals_numpy_on_the_repeated_values() -> None:
    rng = np.random.default_rng(5)
    values = rng.exponential(1.0, 40)
    counts = rng.integers(0, 6, 40)
    repeated = np.repeat(values, counts)
    for q in (0, 1, 50, 90, 99, 100):
        assert weighted_percentile(values, counts, q) == pytest.approx(np.percentile(repeated, q))


def reference_itl(
    delivered: np.ndarray,
    replica: np.ndarray,
    gap_tokens: np.ndarray,
    gap_pairs: np.ndarray,
    zero_gaps: int,
) -> dict[str, float]:
    """The inter-token latency as computed before it was built in place (one array of every
    entry, a lexsort over all rows)."""
    n = len(delivered)
    previous = np.full(n, -1, dtype=np.int64)
    if n:
        order = np.lexsort((np.arange(n), replica))
        same = replica[order][1:] == replica[order][:-1]
        previous[order[1:][same]] = order[:-1][same]
    common = (previous >= 0) & (gap_tokens > 0)
    values = [delivered[common] - delivered[previous[common]]]
    counts = [gap_tokens[common]]
    if len(gap_pairs):
        pairs = gap_pairs.reshape(-1, 2)
        values.append(delivered[pairs[:, 0]] - delivered[pairs[:, 1]])
        counts.append(np.ones(len(pairs), dtype=np.int64))
    values.append(np.zeros(1))
    counts.append(np.asarray([zero_gaps], dtype=np.int64))
    all_values = np.concatenate(values)
    all_counts = np.concatenate(counts)
    total = int(all_counts.sum())
    out = {f"itl_p{p}_s": weighted_percentile(all_values, all_counts, p) for p in PERCENTILES}
    order = np.lexsort((all_counts, all_values))
    weighted = (all_values[order] * all_counts[order]).sum()
    out["itl_mean_s"] = float(weighted / total) if total else float("nan")
    return out


@pytest.mark.parametrize("seed", range(16))
def test_inter_token_latency_is_the_reference_bit_for_bit(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if seed >= 8:
        monkeypatch.setattr(itl, "CHUNK_ROWS", 7)  # many chunks, merged across them
    rng = np.random.default_rng(seed)
    replicas = int(rng.integers(1, 4))
    n = int(rng.integers(0, 400))
    replica = rng.integers(0, replicas, n) if replicas > 1 else np.zeros(n, dtype=np.int64)
    # even seeds: coarse steps (many equal gaps); odd: steps whose sums round
    steps = [0.125, 0.25, 0.375] if seed % 2 == 0 else [0.1, 0.3, 0.7]
    delivered = np.zeros(n)
    for r in range(replicas):
        rows = np.flatnonzero(replica == r)
        delivered[rows] = np.cumsum(rng.choice(steps, len(rows)))
    gap_tokens = rng.integers(0, 5, n)
    pairs = []
    for _ in range(int(rng.integers(0, 300))):
        r = int(rng.integers(0, replicas))
        rows = np.flatnonzero(replica == r)
        if len(rows) > 2:
            i = int(rng.integers(2, len(rows)))
            pairs += [rows[i], rows[int(rng.integers(0, i))]]
    gap_pairs = np.asarray(pairs, dtype=np.int64)
    zero_gaps = int(rng.integers(0, 3)) * int(rng.integers(0, 40))
    expected = reference_itl(delivered, replica, gap_tokens, gap_pairs, zero_gaps)
    split = 2 * int(rng.integers(0, len(pairs) // 2 + 1))  # two schedulers' logs
    logs = [array("q", pairs[:split]), array("q", pairs[split:])]
    actual = inter_token_latency(
        delivered, replica if replicas > 1 else None, gap_tokens, logs, zero_gaps
    )
    assert logs == []  # read and let go
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        assert np.isnan(value) if np.isnan(actual[key]) else actual[key] == value, key


def brute_force_gaps(results: cbsim.Results) -> np.ndarray:
    """Every token's gap, rebuilt from the iterations: under the vllm scheduler (no preemption)
    a running request emits in every decode iteration of its replica after its first token,
    and in none of the prefill-only iterations."""
    iters = results.iterations
    gaps = []
    for _, req in results.requests[results.requests["status"] == "finished"].iterrows():
        mine = iters[iters["replica"] == req["replica"]]
        ends = (mine["start_s"] + mine["duration_s"]).to_numpy()
        decode = (mine["decode_tokens"] > 0).to_numpy()
        during = (ends > req["server_first_token_s"]) & (ends <= req["server_finish_s"]) & decode
        times = np.concatenate([[req["server_first_token_s"]], ends[during]])
        assert len(times) == req["output_tokens"]
        gaps.append(np.diff(times))
    return np.concatenate(gaps)


def test_itl_percentiles_match_a_brute_force_rebuild() -> None:
    data = small_scenario(
        {
            "workload.num_requests": 60,
            "workload.arrival": {"kind": "poisson", "rate": 20.0},
            "cluster.replicas": 2,
            "cluster.engine": "none",
        }
    )
    results = run(data)
    assert results.summary["preemptions"] == 0
    gaps = brute_force_gaps(results)
    for q in (50, 90, 99):
        assert results.summary[f"itl_p{q}_s"] == pytest.approx(np.percentile(gaps, q), rel=1e-12)
    assert results.summary["itl_mean_s"] == pytest.approx(gaps.mean(), rel=1e-12)


@pytest.mark.parametrize("kind", ["prefill_first", "sarathi", "orca", "static"])
@pytest.mark.parametrize("speculative", [False, True])
def test_mean_itl_is_total_decode_time_over_gaps(kind: str, speculative: bool) -> None:
    """Σ over requests of (last − first token) / Σ (outputs − 1): the mean of every gap,
    tokens of one speculative step included with gap 0."""
    data = small_scenario({"scheduler.kind": kind, "workload.num_requests": 30})
    if speculative:
        data["speculative"] = {"enabled": True, "policy": {"kind": "fixed", "k": 3}}
    results = run(data)
    done = results.requests[results.requests["status"] == "finished"]
    expected = (done["finish_s"] - done["first_token_s"]).sum() / (done["output_tokens"] - 1).sum()
    assert results.summary["itl_mean_s"] == pytest.approx(expected, rel=1e-9)


def test_preemption_pauses_count_in_full() -> None:
    data = small_scenario(
        {
            "workload.num_requests": 40,
            "workload.arrival": {"kind": "poisson", "rate": 200.0},
            "workload.prompt_tokens": {"kind": "fixed", "value": 2000},
            "workload.output_tokens": {"kind": "fixed", "value": 400},
            "cluster.gpu_memory_utilization": 0.25,
        }
    )
    results = run(data)
    assert results.summary["preemptions"] > 0
    done = results.requests[results.requests["status"] == "finished"]
    expected = (done["finish_s"] - done["first_token_s"]).sum() / (done["output_tokens"] - 1).sum()
    assert results.summary["itl_mean_s"] == pytest.approx(expected, rel=1e-9)
    assert results.summary["itl_p99_s"] > results.summary["itl_p50_s"]


# --------------------------------------------------------------------------- warnings


def test_budget_equal_to_the_prompt_is_a_warning() -> None:
    config = Scheduler(kind="orca", max_batched_tokens=1000, max_batch_size=64)
    warnings = scheduler_warnings(config, np.full(10, 1000))
    assert any("no room for a running decode" in w for w in warnings)


def test_budget_below_prompt_plus_batch() -> None:
    config = Scheduler(kind="orca", max_batched_tokens=1100, max_batch_size=256)
    (warning,) = scheduler_warnings(config, np.full(10, 1000))
    assert "at most 100 requests decode" in warning


def test_prompts_beyond_the_budget() -> None:
    config = Scheduler(kind="prefill_first", max_batched_tokens=512)
    (warning,) = scheduler_warnings(config, np.array([100, 600, 700, 50]))
    assert "50% of the prompts" in warning


def test_sarathi_chunk_below_batch() -> None:
    config = Scheduler(kind="sarathi", chunk_size=128, max_batch_size=256)
    assert scheduler_warnings(config, np.array([100]))


def test_sensible_settings_have_no_warnings() -> None:
    for config in (
        Scheduler(kind="orca", max_batched_tokens=8192, max_batch_size=256),
        Scheduler(kind="sarathi", chunk_size=8192, max_batch_size=1024),
        Scheduler(kind="prefill_first", max_batched_tokens=8192),
    ):
        assert scheduler_warnings(config, np.full(5, 1000)) == []


def test_run_summary_carries_the_warning() -> None:
    data = small_scenario(
        {
            "scheduler": {"kind": "orca", "max_batched_tokens": 512},
            "workload.prompt_tokens": {"kind": "fixed", "value": 512},
        }
    )
    results = run(data)
    assert "no room for a running decode" in results.summary["warnings"]
    assert results.summary["max_batch_size"] == 1
