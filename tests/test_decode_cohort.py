"""The decode cohort (cbsim.engine.scheduler.cohort) changes nothing but speed: runs with it equal runs
without it bit for bit, over random scenarios that preempt, fall back, cut at a horizon, close
the loop and fast-forward; and its arithmetic equals stepping requests one by one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.engine.scheduler import base
from cbsim.engine.scheduler.base import SchedulerPolicy
from cbsim.engine.scheduler.cohort import DecodeCohort
from cbsim.workload.request import Request
from tests.conftest import small_scenario, summaries_equal
from tests.test_properties import engine_settings, scenarios


@pytest.fixture(autouse=True, scope="module")
def _small_cohorts() -> Iterator[None]:
    """The cohort from 3 running requests on, dissolved under 2, so that these small runs use
    it, grow it from nothing and dissolve it as they drain (a busy replica's defaults would
    leave them stepping one by one)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("COHORT_FROM", "MIXED_COHORT_FROM"):
            patch.setattr(base, name, 3)
        for name in ("COHORT_UNDER", "MIXED_COHORT_UNDER"):
            patch.setattr(base, name, 2)
        yield


def _run(data: dict[str, Any], cohort: bool) -> cbsim.Results:
    with pytest.MonkeyPatch.context() as patch:
        if not cohort:
            patch.setattr(SchedulerPolicy, "keep_cohort", lambda self: None)
        return cbsim.simulate(data)


def _assert_same(a: cbsim.Results, b: cbsim.Results) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.iterations, b.iterations)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries)
    assert summaries_equal(
        {k: v for k, v in a.summary.items() if "wall" not in k},
        {k: v for k, v in b.summary.items() if "wall" not in k},
    )


def _count_cohort_use(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the iterations formed in the cohort and the decode runs applied to it."""
    seen = [0]
    add, run = SchedulerPolicy._add_cohort, SchedulerPolicy._run_in_cohort

    def adding(self: SchedulerPolicy, *args: Any) -> int | None:
        left = add(self, *args)
        seen[0] += left is not None
        return left

    def running(self: SchedulerPolicy, *args: Any) -> bool:
        applied = run(self, *args)
        seen[0] += applied
        return applied

    monkeypatch.setattr(SchedulerPolicy, "_add_cohort", adding)
    monkeypatch.setattr(SchedulerPolicy, "_run_in_cohort", running)
    return seen


@engine_settings(25)
@given(data=scenarios(), closed=st.booleans())
def test_cohort_equals_stepping_requests_one_by_one(data: dict[str, Any], closed: bool) -> None:
    if closed and data["scheduler"]["kind"] in ("prefill_first", "sarathi"):
        data["workload"]["arrival"] = {"kind": "closed_loop", "concurrency": 6}
    _assert_same(_run(data, True), _run(data, False))


@pytest.mark.parametrize("kind", ["sarathi", "prefill_first"])
@pytest.mark.parametrize("fast_forward", [True, False])
def test_cohort_under_memory_pressure_and_small_budget(
    kind: str, fast_forward: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preemption (the blocks due do not fit) and a budget below the decodes both fall back to
    stepping one by one; the run still equals one without a cohort, and the cohort was used."""
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
        }
    )
    seen = _count_cohort_use(monkeypatch)
    with_cohort = cbsim.simulate(data)
    assert seen[0] > 0
    assert with_cohort.summary["preemptions"] > 0
    _assert_same(with_cohort, _run(data, False))


def test_cohort_with_a_budget_below_the_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sarathi with fewer batched tokens than running decodes leaves some out: stepping one by
    one does that (the cohort takes only iterations that hold all), and the run is the same."""
    data = small_scenario(
        {
            "workload.num_requests": 150,
            "workload.arrival": {"kind": "poisson", "rate": 60.0},
            "scheduler": {"kind": "sarathi", "max_batch_size": 64, "max_batched_tokens": 24},
        }
    )
    seen = _count_cohort_use(monkeypatch)
    with_cohort = cbsim.simulate(data)
    assert seen[0] > 0
    assert (with_cohort.iterations["batch_size"] > 24).sum() == 0
    _assert_same(with_cohort, _run(data, False))


def test_cohort_with_a_horizon_mid_iteration() -> None:
    """A horizon that cuts the run while a cohort iteration is formed: the requests left
    running are written back as stepping leaves them (blocks grown, tokens not yet)."""
    data = small_scenario(
        {
            "workload.num_requests": 200,
            "workload.arrival": {"kind": "poisson", "rate": 30.0},
            "scheduler": {"kind": "sarathi", "max_batch_size": 64},
            "horizon_s": 3.1234,
        }
    )
    _assert_same(_run(data, True), _run(data, False))


def _stepped(req: Request, steps: int, formed: int, block_size: int) -> tuple[int, int, int]:
    """(kv tokens, outputs, blocks) of ``req`` after ``steps`` decodes completed and ``formed``
    formed, stepping as the schedulers do: a block grown before a token needs it."""
    kv, generated, blocks = req.kv_tokens, req.generated, req.blocks
    for i in range(formed):
        if -(-(kv + 1) // block_size) > blocks:
            blocks += 1
        if i < steps:
            kv += 1
            generated += 1
    return kv, generated, blocks


@given(
    block_size=st.sampled_from([1, 4, 16]),
    joins=st.lists(
        st.tuples(st.integers(1, 200), st.integers(1, 60), st.integers(0, 3), st.integers(0, 8)),
        min_size=1,
        max_size=12,
    ),
    iterations=st.integers(1, 120),
)
def test_cohort_arithmetic_equals_stepping(
    block_size: int, joins: list[tuple[int, int, int, int]], iterations: int
) -> None:
    """Members joining at different iterations, with spare blocks or none: blocks due per
    iteration, context sums, outputs left, finishes and written-back fields all as stepping."""
    cohort = DecodeCohort(block_size)
    requests: list[tuple[Request, int, tuple[int, int, int]]] = []
    for it in range(iterations):
        for n, (prompt, outputs, spare, at) in enumerate(joins):
            if at == it:
                req = Request(n, 0.0, prompt, outputs + 1)
                req.kv_tokens = prompt + 1
                req.generated = 1
                req.blocks = -(-req.kv_tokens // block_size) + spare
                req.admit_seq = n
                requests.append((req, it, (req.kv_tokens, req.generated, req.blocks)))
                cohort.join(req)
        live = [(r, j, s) for r, j, s in requests if r in cohort]
        expected_due = 0
        for r, j, s in live:
            steps = it - j
            kv, _, blocks = _stepped(_clone(r, s), steps, steps, block_size)
            expected_due += -(-(kv + 1) // block_size) > blocks
        assert cohort.blocks_due() == expected_due
        context = cohort.form()
        assert context == sum(_stepped(_clone(r, s), it - j, it - j, block_size)[0]
                              for r, j, s in live)  # fmt: skip
        done = cohort.complete(row=it)
        for r, j, s in live:
            kv, generated, blocks = _stepped(_clone(r, s), it - j + 1, it - j + 1, block_size)
            if r in done:
                assert (r.kv_tokens, r.generated, r.blocks, r.last_row) == (
                    kv,
                    generated,
                    blocks,
                    it,
                )
            else:
                assert generated < r.output_tokens
        assert [r.admit_seq for r in done] == sorted(r.admit_seq for r in done)
        assert cohort.outputs_left() == sum(
            r.output_tokens - _stepped(_clone(r, s), it - j + 1, it - j + 1, block_size)[1]
            for r, j, s in requests
            if r in cohort
        )
    cohort.form()  # formed, never completed (a horizon): blocks grown, tokens not
    for r, j, s in [(r, j, s) for r, j, s in requests if r in cohort]:
        expected = _stepped(_clone(r, s), iterations - j, iterations - j + 1, block_size)
        cohort.materialize()
        assert (r.kv_tokens, r.generated, r.blocks) == expected


def _clone(req: Request, state: tuple[int, int, int]) -> Request:
    copy = Request(req.request_id, 0.0, req.prompt_tokens, req.output_tokens)
    copy.kv_tokens, copy.generated, copy.blocks = state
    return copy


@settings(deadline=None)  # the first example loads the compiled state's machine code
@given(
    st.lists(
        st.tuples(st.integers(1, 300), st.integers(0, 40), st.integers(1, 60)),
        min_size=1,
        max_size=90,  # past the first 64 slots: the arrays grow
    ),
    st.integers(0, 30),
    st.sampled_from([1, 16]),
)
def test_decode_state_is_each_members_state_now(
    joins: list[tuple[int, int, int]], iterations: int, block_size: int
) -> None:
    cohort = DecodeCohort(block_size)
    requests = []
    for i, (prompt, generated, left) in enumerate(joins):
        req = Request(i, 0.0, prompt, generated + left + 1)
        req.prefill_target = prompt
        req.kv_tokens = prompt + generated
        req.generated = generated + 1
        req.blocks = -(-req.kv_tokens // block_size)
        req.admit_seq = i
        cohort.join(req)
        requests.append(req)
        if i % 7 == 3:  # some join later than others
            cohort.form()
            cohort.complete(i)
    for row in range(iterations):
        cohort.form()
        cohort.complete(100 + row)
    kv, left, blocks = cohort.decode_state()
    members = [r for r in requests if r in cohort]  # the finished ones left, written back
    cohort.materialize()
    by_slot = sorted(members, key=lambda r: cohort.members[r][5])
    assert kv.tolist() == [r.kv_tokens for r in by_slot]
    assert left.tolist() == [r.output_tokens - r.generated for r in by_slot]
    assert blocks.tolist() == [r.blocks for r in by_slot]
