"""Simulations that share cost models (a capacity search's) give what they give alone."""

from __future__ import annotations

import cbsim
from cbsim.engine.cost_models import CostModelCache


def _scenario(rate: float, speculative: bool, tp: int = 1) -> cbsim.Scenario:
    return cbsim.load_scenario(
        {
            "name": "shared-cost",
            "seed": 3,
            "workload": {
                "arrival": {"kind": "poisson", "rate": rate},
                "num_requests": 120,
                "prompt_tokens": {"kind": "lognormal", "mean": 600, "sigma": 0.6},
                "output_tokens": {"kind": "lognormal", "mean": 150, "sigma": 0.6},
            },
            "cluster": {"model": "llama-3-8b", "gpu": "h100-sxm", "tp": tp},
            "scheduler": {"kind": "sarathi"},
            "speculative": {"enabled": speculative, "proposer": {"kind": "eagle"}},
        }
    )


def test_one_cost_model_per_cluster() -> None:
    cache = CostModelCache()
    first = cache.get(_scenario(2.0, False))
    assert cache.get(_scenario(9.0, True)) is first  # load and speculation do not price kernels
    assert cache.get(_scenario(2.0, False, tp=2)) is not first


def test_shared_cost_models_change_no_result() -> None:
    cache = CostModelCache()
    scenarios = [_scenario(20.0, True), _scenario(2.0, False), _scenario(6.0, True)]
    shared = [cbsim.simulate(s, cost_models=cache).summary for s in scenarios]
    alone = [cbsim.simulate(s).summary for s in scenarios]
    for a, b in zip(shared, alone, strict=True):
        a.pop("wall_s", None), b.pop("wall_s", None)
        assert a == b
