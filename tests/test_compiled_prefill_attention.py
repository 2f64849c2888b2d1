"""A prefill's attention priced by the compiled kernel (``CostModel.compiled_prefill_attention``,
what a speculative step's goodput sweep reads for the prompt chunks beside its decodes) is the
Python price, float for float, for every fit a cost model can have."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cbsim.cost import CostModel


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"model": "llama-3-70b", "tp": 4},
        {"gpu": "a100-80gb"},
        {"gpu": "l40s"},
        {"engine": "sglang"},
        {"calibration": "none", "engine": "none"},
    ],
)
def test_the_compiled_prefill_attention_is_the_python_one(settings: dict[str, Any]) -> None:
    cost = CostModel(**settings)
    rng = np.random.default_rng(5)
    for _ in range(400):
        requests = int(rng.integers(0, 6))
        tokens = int(rng.integers(0, 4096)) * (requests > 0)
        kv_tokens = tokens + int(rng.integers(0, 16000))
        pairs = float(rng.integers(0, tokens * tokens + 1)) + 0.5 * int(rng.integers(0, 2))
        compiled = cost.compiled_prefill_attention(tokens, kv_tokens, pairs, requests)
        python = cost.attention_time(tokens, kv_tokens, pairs, decode=False, requests=requests)
        assert compiled == python


def test_a_model_that_does_not_compile_prices_its_prefill_in_python() -> None:
    assert (
        CostModel(gpu="l40s", engine="sglang").compiled_prefill_attention(512, 600, 1e5, 1) is None
    )
