"""A GPU without the engine's own kernel tables (SGLang or TensorRT-LLM on an A100, an L40S, an
H100 PCIe, ...) priced through the engine's transfer GPU (its fitted attention scaled by the
engine/reference ratio there) decodes compiled: a plain decode run's steps give the Python cost
model's floats bit for bit, also with local or latent attention and over ranks or stages, while
a stepped iteration keeps pricing it in Python (the speculative kernels' verify steps:
tests/test_spec_compiled_attention.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cbsim.cost.compiled import ROOFLINE
from cbsim.cost.roofline import CostModel
from tests.conftest import BASE_SCENARIO
from tests.pricing_checks import (
    assert_decode_prices_as_in_python,
    assert_fast_forward_compiled_equals_stepping,
    assert_only_stepped_iterations_price_in_python,
    decode_seconds_at,
    layout_id,
    with_serial_cpu,
)

LAYOUTS = [
    {"model": "llama-3-8b", "gpu": "a100-80gb", "engine": "sglang"},
    {"model": "qwen3-32b", "gpu": "l40s", "tp": 2, "dtype": "fp8", "engine": "tensorrt-llm"},
    {"model": "mixtral-8x7b", "gpu": "h100-pcie", "tp": 1, "dp": 2, "ep": 2, "engine": "sglang"},
    {"model": "llama-3-70b", "gpu": "a100-80gb", "tp": 4, "pp": 2, "engine": "tensorrt-llm"},
    {"model": "gemma-3-27b", "gpu": "a100-80gb", "tp": 2, "engine": "sglang"},
    {"model": "deepseek-v2-lite", "gpu": "l40s", "engine": "sglang"},
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
@pytest.mark.parametrize("serial_cpu", [False, True], ids=["engine-step", "serial-cpu-step"])
def test_a_decode_run_on_a_transfer_gpu_prices_compiled_as_in_python(
    layout: dict[str, Any], serial_cpu: bool
) -> None:
    """decode_seconds gives CostModel.decode_time's float: one request, no keys yet, long
    contexts, tables extended as batches grow."""
    cost = with_serial_cpu(CostModel(**layout)) if serial_cpu else CostModel(**layout)
    assert cost._transfer is not None
    rng = np.random.default_rng(23)
    for top in (40, 700):
        compiled = cost.compiled_decode(top)
        assert compiled is not None
        requests = rng.integers(1, top + 1, 300)
        requests[:4] = [1, 2, 3, top]
        kv_tokens = requests * rng.integers(1, 20_000, 300)
        kv_tokens[:2] = 0
        assert_decode_prices_as_in_python(cost, compiled, requests, kv_tokens)


def test_the_transfer_ratio_is_priced() -> None:
    """The engine/reference ratio on the transfer GPU scales the fitted attention: without the
    transfer block the same batches price differently (a long context: by far the most)."""
    cost = CostModel("llama-3-8b", "a100-80gb", engine="sglang")
    compiled = cost.compiled_decode(64)
    assert compiled.transfer_at >= 0 and compiled.mode != ROOFLINE
    requests, kv_tokens = np.array([1, 32, 32]), np.array([1000, 32 * 8000, 32 * 30_000])
    scaled, unscaled = np.empty(3), np.empty(3)
    decode_seconds_at(compiled, requests, kv_tokens, scaled)
    decode_seconds_at(compiled._replace(transfer_at=-1), requests, kv_tokens, unscaled)
    assert (scaled != unscaled).all()


def test_a_stepped_iteration_keeps_the_python_pricing() -> None:
    assert_only_stepped_iterations_price_in_python(
        CostModel("llama-3-8b", "a100-80gb", engine="tensorrt-llm")
    )


def test_a_transfer_gpu_replica_fast_forwards_as_it_steps() -> None:
    """Every decode run planned compiled (the Python planner refused), the same request and
    iteration tables as stepping every iteration."""
    data = {
        **BASE_SCENARIO,
        "cluster": {**BASE_SCENARIO["cluster"], "gpu": "a100-80gb", "engine": "sglang"},
        "workload": {**BASE_SCENARIO["workload"], "num_requests": 150},
        "scheduler": {"kind": "sarathi", "max_batch_size": 48},
    }
    assert_fast_forward_compiled_equals_stepping(data)
