"""The compiled per-request pieces of the speculative fast path: the goodput policy's per-request
refinement chooses what ``GoodputK.choose`` chooses, bit for bit, and positional acceptance with
per-request variation draws in the kernel as ``PositionalModel.draw`` does."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import cbsim
from cbsim.catalog.models import get_model
from cbsim.common.stable_sort import stable_argsort
from cbsim.cost import BatchStats, CostModel
from cbsim.engine.speculative.acceptance import PositionalModel
from cbsim.engine.speculative.expected import power, powers
from cbsim.engine.speculative.goodput_kernel import (
    DRAFT_MODEL,
    EAGLE,
    NGRAM,
    compiled_proposer,
    no_base,
)
from cbsim.engine.speculative.goodput_refine import goodput_k_per_request
from cbsim.engine.speculative.policies import BatchView, GoodputK
from cbsim.engine.speculative.proposers import DraftModel, EagleHead, Ngram, Proposer
from cbsim.schema.speculative import GoodputPolicy, PositionalAcceptance
from tests.conftest import small_scenario


def _python_choice(
    policy: GoodputK,
    cost: CostModel,
    proposer: Proposer,
    alphas: np.ndarray,
    remaining: np.ndarray,
    contexts: np.ndarray,
) -> list[int]:
    """``GoodputK.choose`` pricing a pure decode step as the stepped engine does: the proposer's
    drafting plus the target's step over the verify entries grouped by k."""

    def step_time(ks: Any) -> float:
        ks = np.asarray(ks, dtype=np.int64)
        stats = BatchStats()
        for k in np.unique(ks):
            rows = ks == k
            stats.add_many(int(rows.sum()), int(k) + 1, int(contexts[rows].sum()))
        return proposer.draft_time(ks, contexts) + cost.time_stats(stats)

    view = BatchView(
        batch_size=len(alphas),
        proposals=[policy.k_max] * len(alphas),
        alphas=alphas,
        remaining=remaining,
        step_time=step_time,
        step_time_sweep=None,
        replica=0,
    )
    return policy.choose(view)


@pytest.mark.parametrize("kind", [EAGLE, DRAFT_MODEL, NGRAM])
def test_the_compiled_refinement_chooses_as_the_policy(kind: int) -> None:
    cost = CostModel(model="llama-3-8b", gpu="h100-sxm")
    proposer: Proposer
    if kind == EAGLE:
        proposer = EagleHead(cost)
    elif kind == DRAFT_MODEL:
        proposer = DraftModel(get_model("llama-3.2-1b"), cost)
    else:
        proposer = Ngram()
    drafter = compiled_proposer(proposer, cost)
    assert not isinstance(drafter, str) and drafter.kind == kind
    rng = np.random.default_rng(5)
    refined = 0
    for _ in range(100):
        n = int(rng.integers(1, 90))
        k_max = int(rng.integers(1, 9))
        policy = GoodputK(GoodputPolicy(kind="goodput", k_max=k_max, per_request=True))
        per_batch = GoodputK(GoodputPolicy(kind="goodput", k_max=k_max))
        # requests that differ: some draft well, some poorly, some almost done
        alphas = np.clip(rng.beta(*rng.uniform(0.3, 4.0, 2), n), 0.0, 1.0)
        alphas[rng.random(n) < 0.03] = 1.0
        alphas[rng.random(n) < 0.03] = 0.0
        if rng.random() < 0.4:  # ties and near-ties: equal levels, a few ulps or 1e-7 apart
            levels = rng.choice(alphas, 3)
            alphas = levels[rng.integers(0, 3, n)]
            nudge = rng.integers(-3, 4, n) * rng.choice([0.0, 1e-16, 1e-7], n)
            alphas = np.clip(alphas * (1.0 + nudge), 0.0, 1.0)
        remaining = rng.integers(1, 60, n)
        contexts = rng.integers(1, 12000, n)
        target = cost.compiled(n * (k_max + 1))
        draft = target
        if kind != NGRAM:
            draft = proposer.cost.compiled(n, drafter.extra_gemm)  # type: ignore[attr-defined]
        compiled = goodput_k_per_request(
            alphas, remaining, contexts, k_max, target, kind, draft, no_base()
        )
        expected = _python_choice(policy, cost, proposer, alphas, remaining, contexts)
        assert compiled.tolist() == expected
        batch = _python_choice(per_batch, cost, proposer, alphas, remaining, contexts)
        refined += expected != batch
    assert refined > 5  # the refinement moved requests in many batches


def test_the_stable_order_is_numpys() -> None:
    rng = np.random.default_rng(2)
    for _ in range(500):
        n = int(rng.integers(1, 300))
        keys = -((rng.integers(0, 5, n) / 4.0) ** rng.integers(1, 3, n))
        keys[rng.random(n) < 0.1] = -0.0
        first = np.empty(n, dtype=np.int64)
        second = np.empty(n, dtype=np.int64)
        order = stable_argsort(keys, n, first, second)[:n]
        np.testing.assert_array_equal(order, np.argsort(keys, kind="stable"))


def test_gains_use_libms_power() -> None:
    rng = np.random.default_rng(4)
    alphas = rng.random(1000)
    exponents = rng.integers(0, 10, 1000)
    out = powers(alphas, exponents)
    expected = [
        math.pow(a, float(e)) for a, e in zip(alphas.tolist(), exponents.tolist(), strict=True)
    ]
    assert out.tolist() == expected
    assert power(0.5, 3) == 0.125


def test_positional_levels_scale_the_rates_per_request() -> None:
    config = PositionalAcceptance(kind="positional", rates=[0.9, 0.7, 0.5], concentration=10)
    model = PositionalModel(config)
    rng = np.random.default_rng(0)
    levels = np.array([model.start(None, rng) for _ in range(2000)])  # type: ignore[arg-type]
    assert levels.mean() == pytest.approx(model.prior_alpha(), abs=0.02)
    assert levels.std() > 0.05  # requests differ


def _scenario(policy: dict[str, Any], acceptance: dict[str, Any]) -> dict[str, Any]:
    return small_scenario(
        {
            "seed": 3,
            "workload.num_requests": 40,
            "workload.arrival": {"kind": "poisson", "rate": 20.0},
            "workload.output_tokens": {"kind": "uniform", "low": 20, "high": 200},
            "speculative": {
                "enabled": True,
                "proposer": {"kind": "eagle"},
                "acceptance": acceptance,
                "policy": policy,
            },
        }
    )


@pytest.mark.parametrize(
    ("policy", "acceptance"),
    [
        ({"kind": "goodput", "k_max": 5, "per_request": True}, {"kind": "iid", "alpha": 0.7}),
        (
            {"kind": "fixed", "k": 3},
            {"kind": "positional", "rates": [0.8, 0.6], "concentration": 5},
        ),
    ],
)
def test_both_run_compiled_and_say_nothing(
    policy: dict[str, Any], acceptance: dict[str, Any]
) -> None:
    results = cbsim.simulate(cbsim.load_scenario(_scenario(policy, acceptance)))
    assert results.run_info["fast_forward"] is True
    assert "fast_forward_note" not in results.run_info
    assert results.summary["completed"] == 40


def test_per_request_levels_change_the_acceptance() -> None:
    rates = {"kind": "positional", "rates": [0.8, 0.6]}
    fixed = {"kind": "fixed", "k": 3}
    plain = cbsim.simulate(cbsim.load_scenario(_scenario(fixed, rates)))
    varied = cbsim.simulate(cbsim.load_scenario(_scenario(fixed, {**rates, "concentration": 3})))
    per_request = varied.requests.accepted_tokens / varied.requests.drafted_tokens
    uniform = plain.requests.accepted_tokens / plain.requests.drafted_tokens
    assert per_request.std() > uniform.std()
