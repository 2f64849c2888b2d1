"""The speculative decode cohort (cbsim.engine.speculative.cohort) changes nothing but speed: runs
with it equal runs without it bit for bit, over random speculative scenarios (every scheduler,
policy, acceptance model and proposer, memory pressure, horizons, closed loops, fast-forwarded or
stepped); a step it cannot plan whole goes back to the batch; and its table's arithmetic equals
completing requests one by one."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.engine.scheduler.base import SchedulerPolicy
from cbsim.engine.speculative import cohort as fields
from cbsim.engine.speculative.cohort import SpecCohort, complete_members
from cbsim.engine.speculative.decoder import SpecState, SpeculativeDecoding
from cbsim.engine.speculative.policy_base import StaticController
from cbsim.engine.speculative.slots import EMA_WEIGHT, SpecSlots, observe_steps
from cbsim.memory.kvcache import KVCache
from cbsim.workload.request import Request, Status
from tests.conftest import small_scenario
from tests.test_decode_cohort import (
    _assert_same,
    _small_cohorts,  # noqa: F401  (cohorts from 3 requests)
)
from tests.test_spec_fast_forward import per_request_scenarios
from tests.test_speculative_properties import engine_settings, scenarios


def _run(data: dict[str, Any], cohort: bool) -> cbsim.Results:
    with pytest.MonkeyPatch.context() as patch:
        if not cohort:
            patch.setattr(SchedulerPolicy, "keep_spec_cohort", lambda self, cohort: None)
        return cbsim.simulate(cbsim.load_scenario(data))


def _count_use(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts the steps planned on the cohort and those it gave back to the batch."""
    seen = {"planned": 0, "spilled": 0}
    plan, spill = SpeculativeDecoding._plan_cohort, SchedulerPolicy.spill_cohort

    def planning(self: SpeculativeDecoding, *args: Any) -> float | None:
        drafting = plan(self, *args)
        seen["planned"] += drafting is not None
        return drafting

    def spilling(self: SchedulerPolicy, *args: Any) -> None:
        seen["spilled"] += 1
        spill(self, *args)

    monkeypatch.setattr(SpeculativeDecoding, "_plan_cohort", planning)
    monkeypatch.setattr(SchedulerPolicy, "spill_cohort", spilling)
    return seen


@engine_settings(12)
@given(data=scenarios(), closed=st.booleans())
def test_the_cohort_equals_stepping_requests_one_by_one(data: dict[str, Any], closed: bool) -> None:
    if closed and data["scheduler"]["kind"] in ("vllm", "sarathi"):
        data["workload"]["arrival"] = {"kind": "closed_loop", "concurrency": 6}
    _assert_same(_run(data, True), _run(data, False))


@engine_settings(10)
@given(data=per_request_scenarios())
def test_the_cohort_with_per_request_choices_and_levels(data: dict[str, Any]) -> None:
    _assert_same(_run(data, True), _run(data, False))


def _run_verifying_at_step_end(data: dict[str, Any]) -> cbsim.Results:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SpeculativeDecoding, "_verifies_with_plan", lambda self: False)
        return cbsim.simulate(cbsim.load_scenario(data))


@engine_settings(15)
@given(data=scenarios() | per_request_scenarios(), horizon=st.sampled_from([None, 7.0, 19.5]))
def test_a_cohort_step_verified_with_its_plan_equals_verifying_at_its_end(
    data: dict[str, Any], horizon: float | None
) -> None:
    """The cohort's verification drawn in its plan's call (cohort_step) gives what drawing it
    when the step ends gives, bit for bit, steps cut by the horizon included."""
    if horizon is not None:
        data["horizon_s"] = horizon
    _assert_same(_run(data, True), _run_verifying_at_step_end(data))


@pytest.mark.parametrize("kind", ["sarathi", "vllm"])
@pytest.mark.parametrize("fast_forward", [True, False])
@pytest.mark.parametrize(
    "policy", [{"kind": "goodput", "k_max": 6}, {"kind": "adaptive_hysteresis"}]
)
def test_the_cohort_under_memory_pressure(
    kind: str, fast_forward: bool, policy: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preemption (the blocks due do not fit: stepping one by one) and reservations that may
    fall short (the step goes back to the batch): the run equals one without a cohort, which
    was used."""
    data = small_scenario(
        {
            "workload.num_requests": 120,
            "workload.arrival": {"kind": "poisson", "rate": 40.0},
            "workload.output_tokens": {"kind": "uniform", "low": 1, "high": 1500},
            "workload.prompt_tokens": {"kind": "uniform", "low": 16, "high": 3000},
            "cluster.gpu": "l40s",
            "cluster.gpu_memory_utilization": 0.45,
            "scheduler": {"kind": kind, "max_batch_size": 64},
            "fast_forward": fast_forward,
            "speculative": {
                "enabled": True,
                "proposer": {"kind": "eagle"},
                "acceptance": {"kind": "per_request", "mean": 0.7, "concentration": 8},
                "policy": policy,
            },
        }
    )
    seen = _count_use(monkeypatch)
    with_cohort = _run(data, True)
    assert seen["planned"] > 0
    assert with_cohort.summary["preemptions"] > 0
    monkeypatch.undo()
    _assert_same(with_cohort, _run(data, False))


@pytest.mark.parametrize("kind", ["sarathi", "vllm"])
def test_a_step_the_cohort_gives_back(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps whose plan the cohort declines (here every other one; in a run, one whose cost
    models do not compile or whose reservations fall short) go back to the batch, written back,
    and are planned request by request: the same run."""
    data = small_scenario(
        {
            "workload.num_requests": 120,
            "workload.arrival": {"kind": "poisson", "rate": 40.0},
            "scheduler": {"kind": kind, "max_batch_size": 64},
            "speculative": {
                "enabled": True,
                "proposer": {"kind": "eagle"},
                "acceptance": {"kind": "per_request", "mean": 0.7, "concentration": 8},
                "policy": {"kind": "goodput", "k_max": 6, "per_request": True},
            },
        }
    )
    plan = SpeculativeDecoding._plan_cohort
    calls = [0]

    def every_other(self: SpeculativeDecoding, *args: Any) -> float | None:
        calls[0] += 1
        return None if calls[0] % 2 else plan(self, *args)

    monkeypatch.setattr(SpeculativeDecoding, "_plan_cohort", every_other)
    seen = _count_use(monkeypatch)
    with_cohort = _run(data, True)
    assert seen["planned"] > 0 and seen["spilled"] > 0
    monkeypatch.undo()
    _assert_same(with_cohort, _run(data, False))


def test_the_cohort_with_a_horizon_mid_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A horizon that cuts the run while a cohort step is formed: the requests left running
    are written back as stepping leaves them."""
    data = small_scenario(
        {
            "workload.num_requests": 200,
            "workload.arrival": {"kind": "poisson", "rate": 30.0},
            "scheduler": {"kind": "sarathi", "max_batch_size": 64},
            "horizon_s": 3.1234,
            "speculative": {
                "enabled": True,
                "proposer": {"kind": "eagle"},
                "acceptance": {"kind": "positional", "rates": [0.9, 0.7, 0.5]},
                "policy": {"kind": "fixed", "k": 3},
            },
        }
    )
    seen = _count_use(monkeypatch)
    with_cohort = _run(data, True)
    assert seen["planned"] > 0
    assert with_cohort.summary["unfinished"] > 0
    monkeypatch.undo()
    _assert_same(with_cohort, _run(data, False))


def test_policies_the_cohort_does_not_take_step_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A learning controller (``threshold``) and a stale drafter plan and verify in Python:
    no cohort is kept."""
    for extra in ({"policy": {"kind": "threshold"}}, {"drafter_state_at_k0": "stale"}):
        data = small_scenario(
            {
                "workload.num_requests": 60,
                "workload.arrival": {"kind": "poisson", "rate": 40.0},
                "scheduler": {"kind": "sarathi", "max_batch_size": 64},
                "speculative": {"enabled": True, "proposer": {"kind": "eagle"}, **extra},
            }
        )
        seen = _count_use(monkeypatch)
        cbsim.simulate(cbsim.load_scenario(data))
        assert seen["planned"] == 0


# --------------------------------------------------------------------------- the table


def _request(
    rid: int, admitted: int, kv: int, generated: int, outputs: int, blocks: int
) -> Request:
    req = Request(rid, 0.0, max(1, kv - generated), outputs)
    req.admit_seq = admitted
    req.kv_tokens = kv
    req.prefill_target = req.prompt_tokens
    req.generated = generated
    req.blocks = blocks
    req.last_row = rid % 3
    return req


def _cohort(slots: SpecSlots) -> SpecCohort:
    def state(req: Request) -> SpecState:
        if req.spec is None:
            req.spec = SpecState(StaticController(0), slots, 0.5)
        assert isinstance(req.spec, SpecState)
        return req.spec

    return SpecCohort(16, state, slots)


@settings(max_examples=60, deadline=None)
@given(
    members=st.lists(
        st.tuples(
            st.integers(16, 4000),  # KV tokens
            st.integers(1, 300),  # outputs so far
            st.integers(0, 400),  # outputs still to come
            st.integers(0, 8),  # accepted drafts this step
            st.integers(0, 2),  # blocks beyond the KV's
            st.integers(0, 3),  # drafts rejected this step
        ),
        min_size=1,
        max_size=40,
    ),
    order=st.randoms(use_true_random=False),
    release=st.booleans(),
)
def test_the_table_completes_a_step_as_requests_one_by_one(
    members: list[tuple[int, int, int, int, int, int]], order: Any, release: bool
) -> None:
    """Members joined in any order sit in admission order; a step's end on the table equals
    :meth:`SchedulerPolicy.complete`'s arithmetic request by request (tokens, blocks given back,
    pauses, finishes, zero gaps) and adds the step's counts as verifying it one request at a time
    did (the members' steps, drafts and accepted drafts; their slots' counts and EMAs)."""
    slots = SpecSlots()
    cohort = _cohort(slots)
    requests = []
    for i, (kv, generated, left, _, spare, _) in enumerate(members):
        outputs = generated + max(left, 1)
        requests.append(_request(i, i, kv, generated, outputs, -(-kv // 16) + spare))
    joining = list(requests)
    order.shuffle(joining)
    for req in joining:
        cohort.join(req)
    assert cohort.requests == requests
    assert cohort.column(fields.ADMITTED).tolist() == list(range(len(requests)))
    accepted = [m[3] for m in members]
    drafts = [m[3] + m[5] for m in members]  # none where none was drafted or accepted
    cohort.column(fields.ACCEPTED)[:] = accepted
    cohort.column(fields.DRAFTS)[:] = drafts
    counted = cohort.table[:, : len(requests)].copy()
    drafting = [i for i, k in enumerate(drafts) if k > 0]
    reference = [slots.accepted.copy(), slots.rejected.copy(), slots.ema.copy()]
    observe_steps(
        *reference,
        np.array([requests[i].spec.slot for i in drafting], dtype=np.int64),  # type: ignore[union-attr]
        np.array([drafts[i] for i in drafting], dtype=np.int64),
        np.array([accepted[i] for i in drafting], dtype=np.int64),
        EMA_WEIGHT,
    )
    row, prev_row = 7, 1
    expected = []  # (kv, generated, blocks, finished) per request, one by one
    total = gaps = zero = freed = 0
    paused = []
    for req, a in zip(requests, accepted, strict=True):
        emitted = 1 + a
        kv = req.kv_tokens + emitted
        blocks = req.blocks
        if release:
            surplus = blocks + (-kv // 16)
            if surplus > 0:
                freed += surplus
                blocks -= surplus
        if req.last_row == prev_row:
            gaps += 1
        else:
            paused.append(req.last_row)
        zero += emitted - 1
        generated = req.generated + emitted
        total += emitted
        expected.append((kv, generated, blocks, generated >= req.output_tokens))
    kv_cache = KVCache(total_blocks=10**6, block_size=16)
    kv_cache.allocate(10**5)
    done = [i for i, e in enumerate(expected) if e[3]]
    pairs: array[int] = array("i")
    ended: list[Request] = []
    got = cohort.complete(2.5, row, prev_row, kv_cache, release, pairs, ended.append)
    assert got == (total, gaps, zero, ended)
    for got_slots, want in zip((slots.accepted, slots.rejected, slots.ema), reference, strict=True):
        np.testing.assert_array_equal(got_slots, want)
    for i, req in enumerate(requests):  # finished ones written back, the others in the table
        at = cohort.requests.index(req) if req in cohort.requests else None
        steps = (
            cohort.table[[fields.DECODE_STEPS, fields.SPEC_STEPS, fields.DRAFTED,
                          fields.ACCEPTED_TOTAL], at].tolist()
            if at is not None
            else [req.decode_steps, req.spec_steps, req.drafted_tokens, req.accepted_tokens]
        )  # fmt: skip
        before = counted[[fields.DECODE_STEPS, fields.SPEC_STEPS, fields.DRAFTED,
                          fields.ACCEPTED_TOTAL], i].tolist()  # fmt: skip
        step = [1, int(drafts[i] > 0), drafts[i], accepted[i] if drafts[i] else 0]
        assert steps == [b + d for b, d in zip(before, step, strict=True)]
    assert ended == [requests[i] for i in done]
    assert pairs.tolist() == [x for previous in paused for x in (row, previous)]
    finished_blocks = sum(expected[i][2] for i in done)
    assert kv_cache.used_blocks == 10**5 - freed - finished_blocks
    kept = [i for i in range(len(requests)) if i not in set(done)]
    for at, i in enumerate(kept):
        kv, generated, blocks, _ = expected[i]
        assert cohort.column(fields.KV_TOKENS)[at] == kv
        assert cohort.column(fields.GENERATED)[at] == generated
        assert cohort.column(fields.BLOCKS)[at] == blocks
        assert cohort.column(fields.LAST_ROW)[at] == row
    for i in done:  # written back, finished, their blocks freed
        req = requests[i]
        assert (req.kv_tokens, req.generated) == expected[i][:2]
        assert req.status == Status.FINISHED and req.finish_s == 2.5 and req.blocks == 0
        assert req.last_row == row
    assert cohort.requests == [requests[i] for i in kept]


def test_the_table_arithmetic_is_the_compiled_kernels() -> None:
    """The compiled step's end on an empty table and on one member."""
    table = np.zeros((fields.FIELDS, 4), dtype=np.int64)
    slots = SpecSlots()
    out = np.full(4, -1, dtype=np.int64), np.full(4, -1, dtype=np.int64)
    counts = (slots.accepted, slots.rejected, slots.ema, *out)
    assert complete_members(table, 0, 3, 2, 16, True, *counts) == (0, 0, 0, 0, 0, 0)
    table[:, 0] = (31, 5, 8, 3, 2, 0, 0, 0, 0, 0, 0, 2, 2)  # 3 emitted: KV 34 needs 3 blocks
    emitted, gaps, zero, freed, paused, finished = complete_members(
        table, 1, 3, 2, 16, True, *counts
    )
    assert (emitted, gaps, zero, freed, paused) == (3, 1, 2, 0, 0)
    assert finished == 1 and out[1][0] == 0  # 5 + 3 outputs of 8
    assert table[fields.KV_TOKENS, 0] == 34 and table[fields.LAST_ROW, 0] == 3
