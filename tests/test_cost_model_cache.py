"""Simulations that share cost models (a capacity search's) give what they give alone."""

from __future__ import annotations

import cbsim
from cbsim.engine.cost_models import CostModelCache


def _scenario(
    rate: float, speculative: bool, tp: int = 1, proposer: dict[str, str] | None = None
) -> cbsim.Scenario:
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
            "speculative": {"enabled": speculative, "proposer": proposer or {"kind": "eagle"}},
        }
    )


def test_one_cost_model_per_cluster() -> None:
    cache = CostModelCache()
    first = cache.get(_scenario(2.0, False))
    assert cache.get(_scenario(9.0, True)) is first  # load and speculation do not price kernels
    assert cache.get(_scenario(2.0, False, tp=2)) is not first


def test_one_proposer_per_target_and_proposer() -> None:
    cache = CostModelCache()
    eagle = _scenario(2.0, True)
    target = cache.get(eagle)
    first = cache.proposer(eagle.speculative.proposer, target)
    assert cache.proposer(_scenario(9.0, True).speculative.proposer, target) is first
    draft = _scenario(2.0, True, proposer={"kind": "draft_model", "model": "llama-3.2-1b"})
    assert cache.proposer(draft.speculative.proposer, target) is not first
    wider = cache.get(_scenario(2.0, True, tp=2))
    assert cache.proposer(eagle.speculative.proposer, wider) is not first


def test_shared_cost_models_change_no_result() -> None:
    cache = CostModelCache()
    draft = {"kind": "draft_model", "model": "llama-3.2-1b"}
    scenarios = [
        _scenario(20.0, True),
        _scenario(2.0, False),
        _scenario(6.0, True),
        _scenario(12.0, True, proposer=draft),
        _scenario(4.0, True, proposer=draft),
    ]
    shared = [cbsim.simulate(s, cost_models=cache).summary for s in scenarios]
    alone = [cbsim.simulate(s).summary for s in scenarios]
    for a, b in zip(shared, alone, strict=True):
        a.pop("wall_s", None), b.pop("wall_s", None)
        assert a == b
