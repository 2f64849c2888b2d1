"""Pricing in Python while numba's cache is cold (:mod:`cbsim.cost.kernel_cache`): a cost model
prices its next calls in Python and then compiles, and a run gives the same results bit for bit
whenever the switch comes, or whether it comes at all."""

from __future__ import annotations

import hashlib
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.cost import BatchStats
from cbsim.cost.compiled import stepped_seconds
from cbsim.cost.kernel_cache import ColdStart, all_cached, cached
from cbsim.engine.cost_models import cost_model_for, price_in_python_while_cold
from cbsim.engine.loop import Simulation
from cbsim.schema.engine_defaults import apply_engine_defaults
from tests.conftest import small_scenario

SMALL = small_scenario(
    {"workload.num_requests": 120, "workload.arrival": {"kind": "poisson", "rate": 6.0}}
)


def _fingerprint(recorder: Any) -> str:
    digest = hashlib.sha256()
    for frame in (recorder.requests, recorder.iterations):
        digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def _run(scenario: dict[str, Any], interpreted_calls: int) -> tuple[str, int]:
    """The run's fingerprint with its pricing in Python for its first ``interpreted_calls``
    calls, and the calls it made."""
    prepared = apply_engine_defaults(cbsim.load_scenario(scenario))
    simulation = Simulation(prepared, interpret_while_cold=False)  # whatever the cache holds
    cold = simulation.pools[0].cost.cold_start
    budget = 10**9 if interpreted_calls < 0 else interpreted_calls
    if budget:
        cold.start(budget)
    recorder = simulation.run()
    return _fingerprint(recorder), budget - cold.left if budget else 0


def test_a_cold_start_counts_down_then_compiles() -> None:
    cold = ColdStart()
    assert not cold.interpreted() and not cold.started
    cold.start(2)
    assert [cold.interpreted() for _ in range(4)] == [True, True, False, False]
    cold.start(5)
    cold.stop()
    assert not cold.interpreted() and cold.started


def test_a_cost_model_prices_in_python_while_cold_and_the_same_seconds() -> None:
    cost = cost_model_for(apply_engine_defaults(cbsim.load_scenario(SMALL)))
    stats = BatchStats()
    stats.add(512, 0, 1)
    stats.add_many(40, 1, 40 * 900)
    compiled = cost.time_stats(stats)
    cost.cold_start.start(3)
    assert cost.compiled(64) is None  # one call
    assert cost.time_stats(stats) == compiled == cost.python_time_stats(stats)  # two
    assert cost.compiled(64) is None  # three: the last in Python
    assert cost.compiled(64) is not None
    assert cost.cold_start.left == 0


@pytest.mark.parametrize("kind", ["sarathi", "prefill_first", "orca"])
def test_a_run_priced_in_python_is_the_compiled_run(kind: str) -> None:
    scenario = {**SMALL, "scheduler": {"kind": kind}}
    compiled, _ = _run(scenario, 0)
    interpreted, calls = _run(scenario, -1)
    assert interpreted == compiled
    assert calls > 100  # it did price in Python


@settings(max_examples=6, deadline=None)
@given(switch=st.integers(min_value=1, max_value=400), seed=st.integers(0, 50))
def test_the_switch_to_compiled_mid_run_changes_nothing(switch: int, seed: int) -> None:
    scenario = {**SMALL, "seed": seed, "workload": {**SMALL["workload"], "num_requests": 40}}
    assert _run(scenario, switch)[0] == _run(scenario, 0)[0]


def test_a_speculative_run_compiles_at_once() -> None:
    scenario = {
        **SMALL,
        "speculative": {"enabled": True, "proposer": {"kind": "eagle"}},
    }
    simulation = Simulation(apply_engine_defaults(cbsim.load_scenario(scenario)))
    assert not price_in_python_while_cold(simulation.pools, calls=1000)
    assert simulation.pools[0].cost.cold_start.left == 0


def test_what_is_not_a_caching_dispatcher_is_left_to_numba() -> None:
    # the index itself is read in tests/test_kernel_compiles.py, on an empty and a filled cache
    assert cached(object()) and all_cached([])
    assert isinstance(cached(stepped_seconds), bool)
