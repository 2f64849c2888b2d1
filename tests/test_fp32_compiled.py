"""An fp32 model's attention moves 4-byte queries and outputs (``OpPricing._act_bytes``), and the
compiled kernels price it so (``CompiledCost.act_bytes``): they priced 2 bytes, so a decode run
fast-forwarded on a GPU priced through another GPU's kernels (stepped in Python) differed from
stepping (found by the valid-scenario campaign: llama-2-70b in fp32 on four MI300X under
TensorRT-LLM), and a plain GPU's compiled prices differed from its Python ones (a run's results
then depended on whether numba's cache was warm)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cbsim.cost.batch_stats import BatchStats
from cbsim.cost.roofline import CostModel
from tests.conftest import BASE_SCENARIO
from tests.pricing_checks import (
    assert_decode_prices_as_in_python,
    assert_fast_forward_compiled_equals_stepping,
    layout_id,
)

LAYOUTS = [
    {"model": "llama-3-8b", "gpu": "h100-sxm", "dtype": "fp32"},
    {"model": "llama-2-70b", "gpu": "mi300x", "tp": 4, "dtype": "fp32", "engine": "tensorrt-llm"},
    {"model": "gemma-3-12b", "gpu": "h100-sxm", "dtype": "fp32"},  # local attention
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
def test_fp32_decode_prices_compiled_as_in_python(layout: dict[str, Any]) -> None:
    cost = CostModel(**layout)
    assert cost._act_bytes == 4.0
    compiled = cost.compiled_decode(300)
    assert compiled is not None and compiled.act_bytes == 4.0
    rng = np.random.default_rng(5)
    requests = rng.integers(1, 301, 200)
    kv_tokens = requests * rng.integers(1, 12_000, 200)
    assert_decode_prices_as_in_python(cost, compiled, requests, kv_tokens)


def test_fp32_stepped_iterations_price_compiled_as_in_python() -> None:
    """A prefill chunk beside decodes (``stepped_seconds``) gives python_time_stats' float."""
    cost = CostModel("llama-3-8b", "h100-sxm", dtype="fp32")
    rng = np.random.default_rng(8)
    for _ in range(50):
        pairs = [(int(rng.integers(1, 2000)), int(rng.integers(0, 4000)))]
        pairs += [(1, int(c)) for c in rng.integers(1, 8000, int(rng.integers(1, 40)))]
        stats = BatchStats.from_pairs(pairs)
        assert cost.time_stats(stats) == cost.python_time_stats(stats)
    assert cost._stepped is not None  # priced compiled, not in Python


def test_fp32_on_a_transfer_gpu_fast_forwards_as_it_steps() -> None:
    data = {
        **BASE_SCENARIO,
        "cluster": {
            "model": "llama-2-70b",
            "gpu": "mi300x",
            "tp": 4,
            "dtype": "fp32",
            "engine": "tensorrt-llm",
            "replicas": 1,
        },
        "workload": {**BASE_SCENARIO["workload"], "num_requests": 60},
    }
    assert_fast_forward_compiled_equals_stepping(data)
