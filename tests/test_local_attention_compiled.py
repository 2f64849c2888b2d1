"""Models with local attention layers (a sliding window: Gemma 2 and 3, gpt-oss, Phi-3, EXAONE 4;
Llama 4's chunks, taken as a window) priced compiled: a plain decode run and a stepped iteration
give the Python cost model's floats bit for bit, contexts inside and beyond the window, whole
batches and batches split over pipeline stages or data-parallel ranks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from cbsim.cost.batch_stats import BatchStats
from cbsim.cost.roofline import CostModel
from tests.conftest import BASE_SCENARIO
from tests.pricing_checks import (
    assert_decode_prices_as_in_python,
    assert_fast_forward_compiled_equals_stepping,
    decode_seconds_at,
    layout_id,
    with_serial_cpu,
)

LAYOUTS = [
    {"model": "gemma-3-27b", "gpu": "h100-sxm", "tp": 2},
    {"model": "gemma-2-9b", "gpu": "h100-sxm", "tp": 1, "engine": "tensorrt-llm"},
    {"model": "gpt-oss-20b", "gpu": "h200", "tp": 1, "engine": "sglang"},
    {"model": "gpt-oss-120b", "gpu": "b200", "tp": 1, "dp": 2, "ep": 2},
    {"model": "llama-4-scout", "gpu": "h100-sxm", "tp": 4, "pp": 2},
    {"model": "phi-3-mini-4k", "gpu": "h200", "tp": 1, "pp": 3, "engine": "sglang"},
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
@pytest.mark.parametrize("serial_cpu", [False, True], ids=["engine-step", "serial-cpu-step"])
def test_a_decode_run_prices_local_attention_compiled_as_in_python(
    layout: dict[str, Any], serial_cpu: bool
) -> None:
    """decode_seconds gives CostModel.decode_time's float: contexts per request inside the
    window, at it and far beyond it, one request, no keys yet, tables extended as batches grow."""
    cost = with_serial_cpu(CostModel(**layout)) if serial_cpu else CostModel(**layout)
    window = cost.model.sliding_window
    assert 0 < cost.model.sliding_window_layers <= cost.model.num_layers  # Phi-3: every layer
    rng = np.random.default_rng(5)
    for top in (40, 700):
        compiled = cost.compiled_decode(top)
        assert compiled is not None and compiled.window == window
        requests = rng.integers(1, top + 1, 300)
        requests[:5] = [1, 2, 3, top, 7]
        per_request = rng.integers(1, 6 * window, 300)
        per_request[5:9] = [window - 1, window, window + 1, window + 2]
        kv_tokens = requests * per_request
        kv_tokens[:2] = 0
        assert_decode_prices_as_in_python(cost, compiled, requests, kv_tokens)
    # the speculative kernels' tables: a whole batch (tests/test_spec_compiled_attention.py)
    assert (cost.compiled(10) is None) == (cost._split > 1)


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
def test_a_stepped_iteration_prices_local_attention_compiled_as_in_python(
    layout: dict[str, Any],
) -> None:
    """Prefill chunks (longer than the window and shorter) beside decodes: time_stats, one
    compiled call, gives python_time_stats' float."""
    cost = with_serial_cpu(CostModel(**layout))
    window = cost.model.sliding_window
    rng = np.random.default_rng(13)
    batches: list[list[tuple[int, int]]] = [[(1, 0)], [(3 * window, 0)], [(window, window)]]
    for _ in range(200):
        decodes = [(1, int(c)) for c in rng.integers(0, 4 * window, int(rng.integers(0, 40)))]
        prefills = [
            (int(q), int(c)) for q, c in rng.integers(1, 3 * window, (int(rng.integers(0, 6)), 2))
        ]
        batches.append(decodes + prefills or [(1, 1)])
    for batch in batches:
        stats = BatchStats.from_pairs(batch)
        assert cost.time_stats(stats) == cost.python_time_stats(stats), batch
    assert cost._stepped not in (None, False)  # it was priced compiled


def test_local_attention_costs_less_than_full_attention_beyond_the_window() -> None:
    """A decode step of long contexts: the local layers read a window each, so the model's
    step costs less than if every layer read the whole context; within the window, the same."""
    cost = CostModel("gemma-3-27b", "h100-sxm", tp=2)
    window = cost.model.sliding_window
    compiled = cost.compiled_decode(64)
    full = CostModel("gemma-3-27b", "h100-sxm", tp=2)
    full.model = replace(full.model, sliding_window=0, sliding_window_layers=0)
    out = np.empty(2)
    decode_seconds_at(compiled, np.array([32, 32]), np.array([32 * window, 32 * 8 * window]), out)
    assert out[0] == pytest.approx(full.decode_time(32, 32 * window), rel=1e-12)
    assert out[1] < 0.9 * full.decode_time(32, 32 * 8 * window)


@pytest.mark.parametrize("model", ["gemma-3-12b", "gpt-oss-20b"])
def test_a_local_attention_replica_fast_forwards_as_it_steps(model: str) -> None:
    """Every decode run planned compiled (the Python planner refused), the same request and
    iteration tables as stepping every iteration."""
    data = {
        **BASE_SCENARIO,
        "cluster": {**BASE_SCENARIO["cluster"], "model": model},
        "workload": {
            **BASE_SCENARIO["workload"],
            "num_requests": 150,
            "prompt_tokens": {"kind": "uniform", "low": 200, "high": 3000},
        },
        "scheduler": {"kind": "sarathi", "max_batch_size": 48},
    }
    assert_fast_forward_compiled_equals_stepping(data)
