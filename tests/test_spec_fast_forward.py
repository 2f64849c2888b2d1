"""The compiled speculative fast path: fast-forwarded runs equal stepping bit for bit, its pieces
equal the Python cost model and policy, and what it cannot run steps and says so."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cbsim
from cbsim.cost import BatchStats, CostModel
from cbsim.cost.compiled import decode_seconds, verify_seconds
from cbsim.engine.loop import Simulation
from cbsim.engine.speculative.expected import expected_tokens, pairwise_sum
from cbsim.engine.speculative.goodput_kernel import (
    DRAFT_MODEL,
    EAGLE,
    NGRAM,
    SWEPT_REQUESTS,
    CompiledProposer,
    _draft_step_seconds,
    _least_draft_step,
    compiled_proposer,
    goodput_k,
    goodput_sweep,
    no_base,
    sweep_ints,
    sweep_reals,
)
from cbsim.engine.speculative.policies import expected_emitted
from tests.conftest import small_scenario, summaries_equal
from tests.test_speculative_properties import engine_settings, scenarios

POLICIES = [
    {"kind": "goodput", "k_max": 6},
    {"kind": "fixed", "k": 3},
    {"kind": "batch_table", "table": [[1, 4, 5], [5, 12, 2], [13, 1000, 1]]},
    {"kind": "goodput", "k_max": 6, "per_request": True},
]
ACCEPTANCE = [
    {"kind": "per_request", "mean": 0.6, "concentration": 8, "drift_per_1k_tokens": 0.2},
    {"kind": "iid", "alpha": 0.75},
    {"kind": "positional", "rates": [0.9, 0.7, 0.5]},
    {"kind": "positional", "rates": [0.9, 0.7, 0.5], "concentration": 6},
]
PER_REQUEST_GOODPUT = POLICIES[3]
POSITIONAL_LEVELS = ACCEPTANCE[3]
PROPOSERS = [{"kind": "eagle"}, {"kind": "draft_model", "model": "llama-3.2-1b"}, {"kind": "ngram"}]


def speculative(
    scheduler: str, policy: dict[str, Any], acceptance: dict[str, Any], proposer: dict[str, Any]
) -> dict[str, Any]:
    return small_scenario(
        {
            "seed": 11,
            "workload.num_requests": 60,
            "workload.arrival": {"kind": "poisson", "rate": 25.0},
            "workload.prompt_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.8, "max": 1500},
            "workload.output_tokens": {"kind": "lognormal", "mean": 120, "sigma": 0.7, "max": 400},
            "cluster.replicas": 2,
            "cluster.router": "least_loaded",
            "scheduler.kind": scheduler,
            "speculative": {
                "enabled": True,
                "proposer": proposer,
                "acceptance": acceptance,
                "policy": policy,
            },
        }
    )


def assert_identical(data: dict[str, Any]) -> cbsim.Results:
    stepped = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": False}))
    forward = cbsim.simulate(cbsim.load_scenario({**data, "fast_forward": True}))
    assert forward.run_info["fast_forward"] is True
    assert stepped.run_info["fast_forward"] is False
    for name in ("requests", "iterations", "timeseries"):
        pd.testing.assert_frame_equal(
            getattr(stepped, name), getattr(forward, name), check_exact=True, obj=name
        )
    assert summaries_equal(stepped.summary, forward.summary)
    return forward


@pytest.mark.parametrize(
    ("scheduler", "policy"),
    list(itertools.product(["vllm", "sarathi", "orca", "static"], POLICIES)),
)
def test_every_scheduler_and_policy_forwards_as_it_steps(
    scheduler: str, policy: dict[str, Any]
) -> None:
    results = assert_identical(speculative(scheduler, policy, ACCEPTANCE[0], PROPOSERS[0]))
    assert results.summary["completed"] == 60


@pytest.mark.parametrize(
    ("acceptance", "proposer"),
    [(a, PROPOSERS[0]) for a in ACCEPTANCE[1:]] + [(ACCEPTANCE[0], p) for p in PROPOSERS[1:]],
)
def test_every_acceptance_model_and_proposer_forwards_as_it_steps(
    acceptance: dict[str, Any], proposer: dict[str, Any]
) -> None:
    assert_identical(speculative("vllm", POLICIES[1], acceptance, proposer))


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi"])
@pytest.mark.parametrize("proposer", PROPOSERS, ids=lambda p: p["kind"])
def test_per_request_goodput_with_positional_levels_forwards_as_it_steps(
    scheduler: str, proposer: dict[str, Any]
) -> None:
    results = assert_identical(
        speculative(scheduler, PER_REQUEST_GOODPUT, POSITIONAL_LEVELS, proposer)
    )
    assert "fast_forward_note" not in results.run_info
    assert results.summary["mean_k"] > 0


@pytest.mark.parametrize(
    ("policy", "acceptance"),
    [
        ({"kind": "fixed", "k": 4}, ACCEPTANCE[1]),
        (PER_REQUEST_GOODPUT, ACCEPTANCE[0]),
        ({"kind": "fixed", "k": 4}, POSITIONAL_LEVELS),
        (PER_REQUEST_GOODPUT, POSITIONAL_LEVELS),
    ],
)
def test_speculation_with_preemption_forwards_as_it_steps(
    policy: dict[str, Any], acceptance: dict[str, Any]
) -> None:
    data = speculative("vllm", policy, acceptance, PROPOSERS[0])
    data["workload"]["arrival"] = {"kind": "poisson", "rate": 200.0}
    data["workload"]["prompt_tokens"] = {"kind": "fixed", "value": 2000}
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 400}
    data["cluster"]["gpu_memory_utilization"] = 0.25
    data["cluster"]["replicas"] = 1
    results = assert_identical(data)
    assert results.summary["preemptions"] > 0
    assert results.summary["acceptance_rate"] > 0


@pytest.mark.parametrize(
    ("policy", "acceptance"),
    [(POLICIES[0], ACCEPTANCE[0]), (PER_REQUEST_GOODPUT, POSITIONAL_LEVELS)],
    ids=["per-batch", "per-request"],
)
def test_speculation_with_a_horizon_and_a_closed_loop_forwards_as_it_steps(
    policy: dict[str, Any], acceptance: dict[str, Any]
) -> None:
    data = speculative("sarathi", policy, acceptance, PROPOSERS[0])
    data["horizon_s"] = 2.5
    assert_identical(data)
    data = speculative("vllm", policy, ACCEPTANCE[1] if policy is POLICIES[0] else acceptance,
                       PROPOSERS[0])  # fmt: skip
    data["workload"] = {
        "num_requests": 50,
        "arrival": {"kind": "closed_loop", "concurrency": 6, "think_time_s": 0.05},
        "prompt_tokens": {"kind": "uniform", "low": 50, "high": 400},
        "output_tokens": {"kind": "uniform", "low": 20, "high": 200},
    }
    data["cluster"]["router"] = "round_robin"
    assert_identical(data)


def test_replicas_keep_their_own_acceptance_streams() -> None:
    # a replica's draws do not depend on how far another replica has run: replica 0 of a
    # two-replica cluster draws as the single replica does when it gets the same requests
    data = speculative("vllm", POLICIES[1], ACCEPTANCE[1], PROPOSERS[0])
    two = cbsim.simulate(cbsim.load_scenario(data))
    assert set(two.requests["replica"]) == {0, 1}
    assert two.summary["acceptance_rate"] > 0


def test_what_the_kernel_cannot_run_steps_and_says_why() -> None:
    data = speculative("vllm", {"kind": "heuristic"}, ACCEPTANCE[1], PROPOSERS[0])
    results = cbsim.simulate(cbsim.load_scenario(data))
    assert results.run_info["fast_forward"] is False
    assert "heuristic" in results.run_info["fast_forward_note"]
    token_level = {"kind": "token_level", "vocab_size": 50, "divergence": 0.5}
    data = speculative("vllm", PER_REQUEST_GOODPUT, token_level, PROPOSERS[0])
    results = cbsim.simulate(cbsim.load_scenario(data))
    assert "token_level" in results.run_info["fast_forward_note"]
    # the goodput policy's per-request refinement and positional levels run compiled
    for policy, acceptance in (
        (PER_REQUEST_GOODPUT, ACCEPTANCE[1]),
        (POLICIES[1], POSITIONAL_LEVELS),
    ):
        data = speculative("vllm", policy, acceptance, PROPOSERS[0])
        results = cbsim.simulate(cbsim.load_scenario(data))
        assert results.run_info["fast_forward"] is True
        assert "fast_forward_note" not in results.run_info
    plain = cbsim.simulate(cbsim.load_scenario(small_scenario({})))
    assert plain.run_info["fast_forward"] is True
    assert "fast_forward_note" not in plain.run_info


@st.composite
def per_request_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """A drawn speculative scenario (any scheduler, preemption under memory pressure, one or two
    replicas) whose k policy is the per-request goodput or whose acceptance varies per request
    around positional rates; sometimes with a horizon or a closed loop."""
    k_max = draw(st.integers(1, 8))
    policy = draw(
        st.sampled_from(
            [
                {"kind": "goodput", "k_max": k_max, "per_request": True},
                {"kind": "fixed", "k": k_max},
                {"kind": "adaptive_hysteresis"},
            ]
        )
    )
    data: dict[str, Any] = draw(scenarios(policy=policy))
    rates = draw(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5))
    acceptance = draw(
        st.sampled_from(
            [
                {"kind": "positional", "rates": rates, "concentration": 0.5 + 40 * rates[0]},
                {"kind": "per_request", "mean": 0.6, "concentration": 8},
                {"kind": "iid", "alpha": rates[0]},
            ]
        )
    )
    if policy["kind"] != "goodput":
        acceptance = {"kind": "positional", "rates": rates, "concentration": 0.5 + 40 * rates[0]}
    data["speculative"]["acceptance"] = acceptance
    extra = draw(st.integers(0, 3))
    if extra == 1:
        data["horizon_s"] = draw(st.floats(0.2, 5.0))
    elif extra == 2:
        data["workload"]["arrival"] = {
            "kind": "closed_loop",
            "concurrency": draw(st.integers(1, 12)),
            "think_time_s": draw(st.floats(0.0, 0.2)),
        }
    return data


@engine_settings(8)
@given(data=per_request_scenarios())
def test_per_request_choices_and_levels_forward_as_they_step(data: dict[str, Any]) -> None:
    forward = assert_identical(data)
    assert "fast_forward_note" not in forward.run_info


@pytest.mark.parametrize(
    "acceptance",
    [
        {"kind": "positional", "rates": [5e-324], "concentration": 0.5},
        {"kind": "per_request", "mean": 5e-324, "concentration": 0.5},
    ],
)
def test_a_level_whose_beta_parameter_underflows_is_zero(acceptance: dict[str, Any]) -> None:
    """m·c below the smallest float made numpy's beta refuse its parameter (a crash found by the
    property test above): the distribution's limit, a level of 0, accepts nothing."""
    policy = {"kind": "goodput", "k_max": 4, "per_request": True}
    data = speculative("vllm", policy, acceptance, {"kind": "ngram"})
    forward = assert_identical(data)
    assert forward.iterations["accepted_tokens"].sum() == 0


# --------------------------------------------------------------------------- pieces


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"model": "llama-3-70b", "tp": 4},
        {"gpu": "a100-80gb"},
        {"engine": "sglang"},
        {"calibration": "none", "engine": "none"},
        {"gpu": "l40s", "engine": "sglang"},  # priced through another GPU's kernels
        {"model": "gemma-3-12b"},  # local attention (a window of 1,024)
        {"model": "gpt-oss-20b", "gpu": "h200", "engine": "sglang"},
        {"model": "deepseek-v3", "gpu": "h200", "tp": 8, "dtype": "fp8"},  # latent attention
        {"dtype": "fp32"},  # queries and outputs of 4 bytes
        {
            "model": "llama-2-70b",
            "gpu": "mi300x",
            "tp": 4,
            "dtype": "fp32",
            "engine": "tensorrt-llm",
        },
    ],
)
def test_compiled_prices_equal_the_cost_model(settings: dict[str, Any]) -> None:
    cost = CostModel(**settings)
    compiled = cost.compiled(256 * 9)
    assert compiled is not None
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 256))
        kv = int(rng.integers(n, n * 8000))
        assert decode_seconds(compiled, n, kv) == cost.decode_time(n, kv)
        stats = BatchStats()
        tokens = kv_tokens = 0
        pairs = 0.0
        for k, context in zip(rng.integers(0, 9, n), rng.integers(1, 8000, n), strict=True):
            q = int(k) + 1
            stats.add(q, int(context), q)
            tokens += q
            kv_tokens += int(context) + q
            pairs += q * (int(context) + (q + 1) * 0.5)
        assert verify_seconds(compiled, n, tokens, kv_tokens, pairs) == cost.time_stats(stats)


def test_pairwise_sum_is_numpys_sum() -> None:
    rng = np.random.default_rng(0)
    for n in [*range(0, 300), 1000, 4097]:
        values = rng.random(n) * 10
        assert pairwise_sum(values) == float(values.sum())


def test_expected_tokens_agree_with_the_formula() -> None:
    rng = np.random.default_rng(1)
    alphas = np.concatenate([rng.random(200), [0.0, 1.0, 1.0]])
    ks = rng.integers(0, 9, len(alphas))
    remaining = rng.integers(1, 12, len(alphas))
    expected = float(np.minimum(expected_emitted(alphas, ks), remaining).sum())
    assert expected_tokens(alphas, ks, remaining) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("target", [{}, {"model": "llama-3-70b", "tp": 4}])
@pytest.mark.parametrize("proposer", [EAGLE, DRAFT_MODEL, NGRAM])
def test_the_goodput_sweep_stops_early_only_where_no_candidate_can_win(
    proposer: int, target: dict[str, Any]
) -> None:
    compiled = CostModel(**target).compiled(256 * 9)
    draft = CostModel(model="llama-3.2-1b").compiled(256, (2048, 2 * 2048))
    assert compiled is not None and draft is not None
    assert compiled.overhead_rises
    full = compiled._replace(overhead_rises=False)
    rng = np.random.default_rng(7)
    chosen = set()
    for _ in range(400):
        n = int(rng.integers(1, 200))
        alphas = rng.beta(*rng.uniform(0.5, 8.0, 2), n)
        alphas[rng.random(n) < 0.02] = 1.0
        remaining = rng.integers(1, 40, n)
        contexts = rng.integers(1, 16000, n)
        k_max = int(rng.integers(1, 9))
        stopped = goodput_k(
            alphas, remaining, contexts, k_max, compiled, proposer, draft, no_base()
        )
        swept = goodput_k(alphas, remaining, contexts, k_max, full, proposer, draft, no_base())
        np.testing.assert_array_equal(stopped, swept)
        chosen.add(int(swept.max()))
    assert len(chosen) > 3  # the batches chose several different k


@pytest.mark.parametrize("proposer", [EAGLE, DRAFT_MODEL])
def test_no_draft_step_costs_less_than_the_sweeps_floor(proposer: int) -> None:
    draft = CostModel(model="llama-3.2-1b").compiled(256, (2048, 2 * 2048))
    assert draft is not None
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 64, 256):
        floor = _least_draft_step(proposer, draft, n)
        assert floor > 0.0
        for _ in range(50):
            requests = int(rng.integers(1, n + 1))
            kv = int(rng.integers(0, 200_000))
            assert _draft_step_seconds(proposer, draft, requests, kv) >= floor
    assert _least_draft_step(NGRAM, draft, 8) == 0.0


def test_the_sweep_stops_before_k_max_where_more_drafts_cannot_pay() -> None:
    """Four requests of Llama-3-8B on one H100 with an EAGLE head, α 0.6: verifying more tokens
    costs almost nothing, so only the draft steps' cost shows that no larger k wins; the bound
    counts them and stops (the draft steps it never priced keep -1 requests), choosing what the
    full sweep chooses."""
    scenario = cbsim.load_scenario(
        small_scenario(speculative={"enabled": True, "proposer": {"kind": "eagle"}})
    )
    spec = Simulation(scenario).pools[0].spec
    assert spec is not None
    drafter = compiled_proposer(spec.proposer, spec.target)
    assert isinstance(drafter, CompiledProposer) and drafter.kind == EAGLE
    target = spec.target.compiled(64 * 9)
    draft = spec.proposer.cost.compiled(64, drafter.extra_gemm)  # type: ignore[attr-defined]
    assert target is not None and draft is not None
    alphas = np.full(4, 0.6)
    remaining = np.full(4, 300, dtype=np.int64)
    contexts = np.full(4, 1500, dtype=np.int64)
    k_max = 8
    reals, ints = sweep_reals(4, k_max), sweep_ints(4, k_max)
    best = np.empty(4, dtype=np.int64)
    goodput_sweep(
        4, alphas, remaining, contexts, k_max, target, EAGLE, draft, no_base(), reals, ints, best
    )  # fmt: skip
    priced = int((ints[SWEPT_REQUESTS, :k_max] >= 0).sum())
    assert 2 <= best.max() <= k_max - 3
    assert priced == best.max() + 1  # the first check after the best candidate stops it
    full = goodput_k(
        alphas, remaining, contexts, k_max, target._replace(overhead_rises=False), EAGLE, draft,
        no_base(),
    )  # fmt: skip
    np.testing.assert_array_equal(best, full)


def test_token_tables_split_into_linear_and_head_with_their_floors() -> None:
    cost = CostModel()
    compiled = cost.compiled(2000)
    assert compiled is not None
    n = np.arange(1, len(compiled.token_s))
    np.testing.assert_array_equal(compiled.linear_s[n] + compiled.head_s[n], compiled.token_s[n])
    for table, floor in ((compiled.linear_s, compiled.linear_floor_s),
                         (compiled.head_s, compiled.head_floor_s)):  # fmt: skip
        expected = [table[i:].min() for i in range(len(table))]
        np.testing.assert_array_equal(floor, expected)
    assert (np.diff(compiled.linear_s) < 0).any()  # the floors matter: the table dips somewhere


@pytest.mark.parametrize(
    ("scheduler", "proposer", "model"),
    [
        ("sarathi", PROPOSERS[0], {}),
        ("vllm", PROPOSERS[0], {"cluster.model": "llama-3-70b", "cluster.tp": 4}),
        ("sarathi", PROPOSERS[1], {"cluster.gpu": "a100-80gb"}),
        ("orca", PROPOSERS[2], {}),
    ],
)
def test_steps_with_prefill_choose_k_compiled_as_the_policy_does(
    monkeypatch: pytest.MonkeyPatch,
    scheduler: str,
    proposer: dict[str, Any],
    model: dict[str, Any],
) -> None:
    """Every step (prefill chunks beside verifying requests, and pure decode) chooses the same
    k through the compiled goodput choice as through ``GoodputK.choose`` and the cost model."""
    data = speculative(scheduler, POLICIES[0], ACCEPTANCE[0], proposer)
    for key, value in model.items():
        section, field = key.split(".")
        data[section][field] = value
    data["fast_forward"] = False
    compiled = cbsim.simulate(cbsim.load_scenario(data))
    calls: list[int] = []

    def python_choice(*args: Any) -> None:
        calls.append(1)
        return None

    monkeypatch.setattr("cbsim.engine.speculative.decoder.choose_goodput", python_choice)
    # nor in the fused plan (cbsim.engine.speculative.step_kernel) the compiled run took
    monkeypatch.setattr("cbsim.engine.speculative.decoder.fused_step", lambda *args: None)
    python = cbsim.simulate(cbsim.load_scenario(data))
    assert len(calls) > 100
    for name in ("requests", "iterations", "timeseries"):
        pd.testing.assert_frame_equal(
            getattr(python, name), getattr(compiled, name), check_exact=True, obj=name
        )
    assert summaries_equal(python.summary, compiled.summary)
    assert compiled.summary["mean_k"] > 0
