"""Fleet checks run ahead (:mod:`cbsim.studies.capacity.fleet_checks`): the one-after-the-other search's
evaluations, in its order, with its bookkeeping, whatever runs ahead; errors and early ends."""

from __future__ import annotations

import time
from typing import Any

import pytest

from cbsim.common.errors import CbsimError
from cbsim.studies.capacity import plan
from cbsim.studies.capacity.fleet_checks import can_run_ahead, fleet_evaluations
from cbsim.studies.capacity.search import Evaluation

pytestmark = pytest.mark.skipif(not can_run_ahead(), reason="checks run ahead only on Linux")


class FakeRunner:
    """Passes from ``passing`` replicas on; records what it was asked and where."""

    def __init__(self, passing: int, fail_at: int | None = None, slow_from: int | None = None):
        self.passing = passing
        self.fail_at = fail_at
        self.slow_from = slow_from
        self.progress = None
        self.label = ""
        self.simulations = 0
        self.diagnosis: str | None = "before"
        self.kv_wait_p99_s = 0.0

    def evaluate(self, rate: float, replicas: int) -> Evaluation:
        if replicas == self.fail_at:
            raise CbsimError(f"no fleet of {replicas}", field="--target-rps")
        if self.slow_from is not None and replicas >= self.slow_from:
            time.sleep(30)
        passed = replicas >= self.passing
        self.simulations += 2
        self.kv_wait_p99_s = replicas / 10
        if not passed:
            self.diagnosis = f"{replicas} too few"
        return Evaluation(rate, passed, {"replicas": float(replicas)}, "" if passed else "x", 2)


def searched(runner: Any, workers: int) -> list[tuple[int, Evaluation]]:
    out = []
    checks = fleet_evaluations(runner, 10.0, range(2, 12), workers)
    for replicas, ev in checks:
        out.append((replicas, ev))
        if ev.passed:
            break
    checks.close()
    return out


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_the_serial_evaluations_and_bookkeeping_whatever_runs_ahead(workers: int) -> None:
    serial, ahead = FakeRunner(passing=6), FakeRunner(passing=6)
    expected = searched(serial, 1)
    got = searched(ahead, workers)
    assert got == expected
    assert [n for n, _ in got] == [2, 3, 4, 5, 6]
    assert ahead.simulations == serial.simulations == 10  # checks past the pass are not counted
    assert ahead.diagnosis == serial.diagnosis == "5 too few"
    assert ahead.kv_wait_p99_s == serial.kv_wait_p99_s == 0.6


def test_an_error_ahead_is_raised_in_order() -> None:
    runner = FakeRunner(passing=9, fail_at=4)
    seen = []
    with pytest.raises(CbsimError, match="no fleet of 4"):
        for replicas, _ in fleet_evaluations(runner, 10.0, range(2, 12), 3):
            seen.append(replicas)
    assert seen == [2, 3]


def test_an_error_past_the_passing_fleet_is_never_seen() -> None:
    assert [n for n, _ in searched(FakeRunner(passing=3, fail_at=4), 3)] == [2, 3]


def test_checks_still_running_end_with_the_search() -> None:
    started = time.perf_counter()
    runner = FakeRunner(passing=2, slow_from=3)  # the checks ahead would take 30 s each
    assert [n for n, _ in searched(runner, 3)] == [2]
    assert time.perf_counter() - started < 10


SCENARIO: dict[str, Any] = {
    "name": "fleet-checks",
    "seed": 1,
    "workload": {"trace": {"path": "azure-conv-2023", "rate_scale": 1.0}, "duration_s": 60},
    "cluster": {"model": "llama-3-8b", "gpu": "a100-80gb", "tp": 1},
    "scheduler": {"kind": "sarathi", "max_batch_size": 64, "chunk_size": 512},
}


@pytest.mark.parametrize("workers", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_a_plan_of_one_layout_is_the_same_with_checks_ahead(workers: int) -> None:
    settings: dict[str, Any] = {
        "slo": {"ttft_p99_s": 1.0, "tpot_p99_s": 0.05},
        "target_rps": 60.0,
        "window_s": 20.0,
        "tolerance": 0.2,
        "headroom": 1.0,  # sized at the knee, verified on one seed: fleets that fail
        "verify_seeds": 1,
    }
    serial = plan(SCENARIO, workers=1, **settings)
    ahead = plan(SCENARIO, workers=workers, **settings)
    assert ahead == serial
    # fleets of 5, 6 and 7 fail: checks ran ahead, and the one past 8 (workers 3) is dropped
    assert [f["replicas"] for f in serial["fleet"]] == [5, 6, 7, 8]


def test_the_fleet_checks_price_with_the_searchs_cost_model(monkeypatch: Any) -> None:
    import cbsim.engine.cost_models as cost_models

    built = []
    original = cost_models.cost_model_for

    def counting(scenario: Any) -> Any:
        built.append(scenario.cluster.replicas)
        return original(scenario)

    monkeypatch.setattr(cost_models, "cost_model_for", counting)
    out = plan(
        SCENARIO,
        workers=1,
        slo={"ttft_p99_s": 1.0, "tpot_p99_s": 0.05},
        target_rps=60.0,
        window_s=20.0,
        tolerance=0.2,
        headroom=1.0,
        verify_seeds=1,
    )
    assert len(out["fleet"]) >= 2  # fleets were checked
    assert built == [1]  # one cost model, built by the search, served every fleet check
