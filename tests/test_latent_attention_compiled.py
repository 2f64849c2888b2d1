"""Models with multi-head latent attention (DeepSeek V2 and V3, Kimi K2) decode compiled: a plain
decode run's steps give the Python cost model's floats bit for bit (the MLA module by its decode
fit, or uncalibrated by the raw roofline; whole batches and batches over pipeline stages or
data-parallel ranks), while a stepped iteration keeps pricing it in Python (the speculative
kernels' verify steps: tests/test_spec_compiled_attention.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cbsim.cost.compiled import FIT_GRID2, ROOFLINE
from cbsim.cost.profile import UNCALIBRATED
from cbsim.cost.roofline import CostModel
from tests.conftest import BASE_SCENARIO
from tests.pricing_checks import (
    assert_decode_prices_as_in_python,
    assert_fast_forward_compiled_equals_stepping,
    assert_only_stepped_iterations_price_in_python,
    layout_id,
    with_serial_cpu,
)

LAYOUTS = [
    ({"model": "deepseek-v3", "gpu": "h200", "tp": 8, "dtype": "fp8"}, FIT_GRID2),
    ({"model": "deepseek-v3", "gpu": "h100-sxm", "tp": 8, "pp": 2, "engine": "sglang"}, FIT_GRID2),
    ({"model": "kimi-k2", "gpu": "b200", "tp": 8, "dp": 2, "ep": 16}, FIT_GRID2),
    ({"model": "deepseek-v2-lite", "gpu": "h100-sxm", "calibration": UNCALIBRATED}, ROOFLINE),
]


def _layout_id(layout: tuple[dict[str, Any], int]) -> str:
    return layout_id(layout[0])


@pytest.mark.parametrize("layout", LAYOUTS, ids=_layout_id)
@pytest.mark.parametrize("serial_cpu", [False, True], ids=["engine-step", "serial-cpu-step"])
def test_a_decode_run_prices_latent_attention_compiled_as_in_python(
    layout: tuple[dict[str, Any], int], serial_cpu: bool
) -> None:
    """decode_seconds gives CostModel.decode_time's float: one request, no keys yet, a cached
    token each, long contexts, tables extended as batches grow."""
    cluster, mode = layout
    cost = with_serial_cpu(CostModel(**cluster)) if serial_cpu else CostModel(**cluster)
    rng = np.random.default_rng(17)
    for top in (40, 700):
        compiled = cost.compiled_decode(top)
        assert compiled is not None and compiled.mla and compiled.mode == mode
        requests = rng.integers(1, top + 1, 300)
        requests[:4] = [1, 2, 3, top]
        kv_tokens = requests * rng.integers(1, 40_000, 300)
        kv_tokens[:2] = 0
        kv_tokens[2] = 2 * requests[2]
        assert_decode_prices_as_in_python(cost, compiled, requests, kv_tokens)


def test_a_stepped_iteration_keeps_the_python_pricing() -> None:
    """Prefill modules are priced in Python alone (a verify step's extra query tokens compile:
    tests/test_spec_compiled_attention.py)."""
    assert_only_stepped_iterations_price_in_python(CostModel("deepseek-v3", "h200", tp=8))


def test_a_latent_attention_replica_fast_forwards_as_it_steps() -> None:
    """Every decode run planned compiled (the Python planner refused), the same request and
    iteration tables as stepping every iteration."""
    data = {
        **BASE_SCENARIO,
        "cluster": {**BASE_SCENARIO["cluster"], "model": "deepseek-v2-lite"},
        "workload": {**BASE_SCENARIO["workload"], "num_requests": 150},
        "scheduler": {"kind": "sarathi", "max_batch_size": 48},
    }
    assert_fast_forward_compiled_equals_stepping(data)
