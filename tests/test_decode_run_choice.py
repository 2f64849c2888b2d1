"""A replica of a busy fleet steps a decode iteration where a decode run would end after it: the
run stops at the first iteration ending after the next arrival anywhere in the fleet, so with an
arrival due within the replica's latest decode step it would be one iteration long, planned,
applied and recorded for more than stepping it costs. The same iterations either way."""

from __future__ import annotations

import collections
from typing import Any

import pytest

import cbsim
from cbsim.engine.replica import Replica
from tests.test_fuzz_valid_scenarios import frames_differ

BUSY_FLEET = {
    "name": "busy-fleet",
    "seed": 3,
    "workload": {
        "num_requests": 1500,
        "arrival": {"kind": "poisson", "rate": 60.0},
        "prompt_tokens": {"kind": "uniform", "low": 100, "high": 300},
        "output_tokens": {"kind": "uniform", "low": 100, "high": 300},
    },
    "cluster": {
        "model": "llama-3-70b",
        "gpu": "h100-sxm",
        "tp": 4,
        "replicas": 6,
        "router": "least_loaded",
    },
    "scheduler": {"kind": "sarathi", "max_batched_tokens": 512},
}


def test_a_busy_fleet_plans_few_one_iteration_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    lengths: collections.Counter[int] = collections.Counter()
    plan = Replica.plan_run

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        run = plan(self, *args, **kwargs)
        if run is not None and kwargs.get("cut") is None:
            lengths[len(run.durations)] += 1
        return run

    monkeypatch.setattr(Replica, "plan_run", counting)
    forward = cbsim.simulate(cbsim.load_scenario(BUSY_FLEET))
    runs = sum(lengths.values())
    assert runs > 500  # the fleet does fast-forward (runs of two iterations or more)
    assert lengths[1] < 0.05 * runs  # (about two thirds of the runs were one iteration long)
    monkeypatch.undo()
    stepped = cbsim.simulate(cbsim.load_scenario(BUSY_FLEET, {"fast_forward": False}))
    assert frames_differ(forward, stepped) is None
