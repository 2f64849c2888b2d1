"""Where the decode cohort starts: Sarathi, whose prompt chunks share their iterations with every
running decode, keeps one from fewer running requests than vLLM's prefill-first scheduler, whose
decodes are stepped one by one only between decode runs."""

from __future__ import annotations

from typing import Any

import pytest

import cbsim
from cbsim.engine.scheduler import base
from cbsim.engine.scheduler.base import SchedulerPolicy
from tests.test_decode_run_choice import BUSY_FLEET


def _cohort_iterations(monkeypatch: pytest.MonkeyPatch, kind: str) -> tuple[int, int]:
    """(iterations formed in the cohort, the most requests running on a replica)."""
    seen = [0, 0]
    add = SchedulerPolicy._add_cohort

    def adding(self: SchedulerPolicy, *args: Any) -> int | None:
        left = add(self, *args)
        seen[0] += left is not None
        seen[1] = max(seen[1], len(self.running))
        return left

    monkeypatch.setattr(SchedulerPolicy, "_add_cohort", adding)
    data = {**BUSY_FLEET, "scheduler": {**BUSY_FLEET["scheduler"], "kind": kind}}
    cbsim.simulate(cbsim.load_scenario(data, {"fast_forward": False}))
    monkeypatch.undo()
    return seen[0], seen[1]


def test_sarathi_keeps_a_cohort_from_fewer_running_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert base.MIXED_COHORT_FROM < base.COHORT_FROM
    cohort, most = _cohort_iterations(monkeypatch, "sarathi")
    assert most < base.COHORT_FROM  # never as many as vLLM's scheduler would need
    assert cohort > 1000


def test_vllm_steps_fewer_running_requests_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    cohort, _ = _cohort_iterations(monkeypatch, "vllm")
    assert cohort == 0
