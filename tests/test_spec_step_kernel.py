"""A stepped speculative iteration's drafts planned, and its drafts verified, in one compiled call
each (:mod:`cbsim.engine.speculative.step_kernel`) equal the Python path's bit for bit: every
compiled policy and acceptance model, each scheduler, a stale drafter, and a KV cache so small
that reservations fall short (the call then hands the rest to the Python path request by
request)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

import cbsim
from cbsim.engine.scheduler import base
from cbsim.engine.speculative import decoder
from cbsim.engine.speculative.policies import make_policy
from tests.conftest import summaries_equal
from tests.test_spec_fast_forward import ACCEPTANCE, PER_REQUEST_GOODPUT, POLICIES, speculative

ROOT = Path(__file__).resolve().parents[1]
TIGHT_KV = 0.235  # of each h100-sxm beside llama-3-8b and its EAGLE head: about 100 blocks


@pytest.fixture(autouse=True, scope="module")
def _steps_planned_request_by_request() -> Iterator[None]:
    """Sarathi's speculative cohort from as many running requests as its plain one (16): the
    default (4) would plan most steps of these small runs on the cohort's table
    (``tests/test_spec_cohort.py``), not request by request as this module checks."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base, "SPEC_MIXED_COHORT_FROM", base.MIXED_COHORT_FROM)
        patch.setattr(base, "SPEC_MIXED_COHORT_UNDER", base.MIXED_COHORT_UNDER)
        yield


def _both_ways(data: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    fused = cbsim.simulate(cbsim.load_scenario(data))
    with monkeypatch.context() as patch:
        patch.setattr(decoder, "fused_step", lambda policy, drafter: None)
        patch.setattr(decoder, "compiled_acceptance", lambda model: "not compiled")
        python = cbsim.simulate(cbsim.load_scenario(data))
    for name in ("requests", "iterations", "timeseries"):
        pd.testing.assert_frame_equal(
            getattr(python, name), getattr(fused, name), check_exact=True, obj=name
        )
    assert summaries_equal(python.summary, fused.summary)


@pytest.fixture
def outcomes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each fused plan came to: ``done``, ``short`` (the reservation stopped), ``none``."""
    seen: list[str] = []
    plan = decoder.SpeculativeDecoding._plan_fused

    def spy(self: decoder.SpeculativeDecoding, *args: Any) -> Any:
        result = plan(self, *args)
        seen.append(
            "done" if isinstance(result, float) else "short" if result is not None else "none"
        )
        return result

    monkeypatch.setattr(decoder.SpeculativeDecoding, "_plan_fused", spy)
    return seen


ADAPTIVE = {"kind": "adaptive_hysteresis"}


@pytest.mark.parametrize(
    ("scheduler", "policy"),
    list(itertools.product(["sarathi", "vllm", "orca"], [*POLICIES, ADAPTIVE])),
)
def test_the_fused_plan_is_the_python_plan(
    scheduler: str, policy: dict[str, Any], monkeypatch: pytest.MonkeyPatch, outcomes: list[str]
) -> None:
    data = speculative(scheduler, policy, ACCEPTANCE[0], {"kind": "eagle"})
    data["cluster"]["gpu_memory_utilization"] = TIGHT_KV
    data["fast_forward"] = False
    _both_ways(data, monkeypatch)
    assert "done" in outcomes


def test_a_short_reservation_is_finished_request_by_request(
    monkeypatch: pytest.MonkeyPatch, outcomes: list[str]
) -> None:
    data = speculative("sarathi", POLICIES[1], ACCEPTANCE[1], {"kind": "eagle"})
    data["cluster"]["gpu_memory_utilization"] = TIGHT_KV
    data["workload"]["arrival"]["rate"] = 60.0
    data["fast_forward"] = False
    _both_ways(data, monkeypatch)
    assert "short" in outcomes and "done" in outcomes


@pytest.mark.parametrize(
    "proposer", [{"kind": "ngram"}, {"kind": "draft_model", "model": "llama-3.2-1b"}]
)
def test_the_fused_plan_with_other_proposers_and_a_stale_drafter(
    proposer: dict[str, Any], monkeypatch: pytest.MonkeyPatch, outcomes: list[str]
) -> None:
    data = speculative("sarathi", POLICIES[0], ACCEPTANCE[2], proposer)
    data["speculative"]["drafter_state_at_k0"] = "stale"
    _both_ways(data, monkeypatch)
    assert "done" in outcomes


def _policy(policy: dict[str, Any]) -> Any:
    data = speculative("sarathi", policy, ACCEPTANCE[0], {"kind": "eagle"})
    return make_policy(cbsim.load_scenario(data).speculative.policy)


def test_policies_the_fused_plan_does_not_take_plan_in_python() -> None:
    drafter = decoder.CompiledProposer(0, None)
    assert decoder.fused_step(_policy({"kind": "threshold"}), drafter) is None
    assert decoder.fused_step(_policy(POLICIES[1]), None) is None  # the proposer does not compile
    fixed = decoder.fused_step(_policy(POLICIES[1]), drafter)
    assert fixed is not None and fixed.fixed_k == 3
    table = decoder.fused_step(_policy(POLICIES[2]), drafter)
    assert table is not None and np.array_equal(table.table, POLICIES[2]["table"])
    adaptive = decoder.fused_step(_policy(ADAPTIVE), drafter)
    assert adaptive is not None and adaptive.policy == decoder.ADAPTIVE


@pytest.mark.parametrize("acceptance", ACCEPTANCE)
def test_the_fused_verification_is_the_python_one(
    acceptance: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = speculative("sarathi", POLICIES[0], acceptance, {"kind": "eagle"})
    data["fast_forward"] = False
    calls: list[int] = []
    verify = decoder.SpeculativeDecoding._verify_compiled

    def spy(self: decoder.SpeculativeDecoding, *args: Any) -> Any:
        calls.append(1)
        return verify(self, *args)

    monkeypatch.setattr(decoder.SpeculativeDecoding, "_verify_compiled", spy)
    _both_ways(data, monkeypatch)
    assert len(calls) > 100


def test_the_fused_plan_beside_a_prefix_cache(
    monkeypatch: pytest.MonkeyPatch, outcomes: list[str]
) -> None:
    """Multi-turn sessions reusing cached prefixes in a tight cache: reservations that would
    evict cached blocks stop the compiled call and go on request by request."""
    data = yaml.safe_load((ROOT / "scenarios" / "chat-sessions.yaml").read_text())
    data["workload"]["sessions"]["count"] = 30
    data["cluster"].update(prefix_caching=True, gpu_memory_utilization=0.25)
    data["scheduler"] = {"kind": "sarathi"}
    data["fast_forward"] = False
    data["speculative"] = {
        "enabled": True,
        "proposer": {"kind": "eagle"},
        "acceptance": ACCEPTANCE[0],
        "policy": POLICIES[0],
    }
    _both_ways(data, monkeypatch)
    assert "short" in outcomes and "done" in outcomes


@pytest.mark.parametrize("policy", [POLICIES[0], PER_REQUEST_GOODPUT])
def test_a_step_the_plan_prices_costs_what_the_cost_model_says(
    policy: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The goodput policy's compiled plan prices its step (``Batch.target_s``) as
    ``CostModel.time_stats`` of the batch it leaves, the same float, with and without the
    speculative cohort (a busy sarathi replica forms one); the engine loop then skips pricing."""
    priced: list[tuple[float, float, bool]] = []
    plan = decoder.SpeculativeDecoding.plan

    def spy(self: decoder.SpeculativeDecoding, batch: Any, sched: Any, replica: int = 0) -> float:
        drafting = plan(self, batch, sched, replica)
        if batch.target_s >= 0.0:
            priced.append(
                (batch.target_s, self.target.time_stats(batch.stats), batch.members is not None)
            )
        return drafting

    monkeypatch.setattr(decoder.SpeculativeDecoding, "plan", spy)
    data = speculative("sarathi", policy, ACCEPTANCE[0], {"kind": "eagle"})
    data["workload"]["arrival"]["rate"] = 80.0
    data["fast_forward"] = False
    cbsim.simulate(cbsim.load_scenario(data))
    assert {members for _, _, members in priced} == {False, True}
    assert all(target == reference for target, reference, _ in priced)
