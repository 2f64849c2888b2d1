"""A stepped iteration's price from one compiled call (``CostModel.time_stats``): the same float as
the cost model's Python pricing, term by term (``python_time_stats``), for batches of prefill
chunks and decodes on every kind of cost model that compiles (pipeline stages and attention
data-parallel ranks and local attention among them); the others keep the Python path."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbsim.cost import CostModel
from cbsim.cost.batch_stats import BatchStats
from cbsim.cost.profile import UNCALIBRATED

COMPILED = {
    "llama-3-70b h100 tp4 vllm": lambda: CostModel("llama-3-70b", "h100-sxm", tp=4),
    "llama-3-8b a100": lambda: CostModel("llama-3-8b", "a100-80gb"),
    "llama-3-8b h100 sglang": lambda: CostModel("llama-3-8b", "h100-sxm", engine="sglang"),
    "qwen3-32b h200 fp8 trtllm": lambda: CostModel(
        "qwen3-32b", "h200", tp=2, dtype="fp8", engine="tensorrt-llm"
    ),
    "mixtral l40s tp4": lambda: CostModel("mixtral-8x7b", "l40s", tp=4),
    "llama-3-8b h100 uncalibrated, no engine": lambda: CostModel(
        "llama-3-8b", "h100-sxm", calibration=UNCALIBRATED, engine=None
    ),
    "llama-3-70b pp2": lambda: CostModel("llama-3-70b", "h100-sxm", tp=4, pp=2),
    "llama-3-70b pp3 (uneven stages) sglang": lambda: CostModel(
        "llama-3-70b", "h200", tp=2, pp=3, engine="sglang"
    ),
    "mixtral dp2 (attention ranks)": lambda: CostModel(
        "mixtral-8x7b", "h100-sxm", tp=1, dp=2, ep=2
    ),
    "gpt-oss-120b (local attention)": lambda: CostModel("gpt-oss-120b", "h100-sxm", tp=2),
    "gemma-3-27b pp2 (local attention on stages)": lambda: CostModel(
        "gemma-3-27b", "h200", tp=1, pp=2, engine="sglang"
    ),
}
PYTHON_ONLY = {
    "deepseek-v3 (latent attention)": lambda: CostModel("deepseek-v3", "h200", tp=8),
    "llama-3-8b l40s sglang (kernels through another GPU's)": lambda: CostModel(
        "llama-3-8b", "l40s", engine="sglang"
    ),
}
MODELS: dict[str, CostModel] = {}


def _model(name: str) -> CostModel:
    if name not in MODELS:
        MODELS[name] = {**COMPILED, **PYTHON_ONLY}[name]()
    return MODELS[name]


entries = st.lists(
    st.tuples(
        st.integers(1, 4096),  # new tokens: decodes, verify steps, prefill chunks
        st.integers(0, 120_000),  # cached tokens
        st.booleans(),  # whether a prefill chunk is its prompt's last (samples a token)
    ),
    min_size=0,
    max_size=12,
)


def _stats(batch: list[tuple[int, int, bool]]) -> BatchStats:
    stats = BatchStats()
    for new, cached, last in batch:
        stats.add(new, cached, new if new <= 64 else int(last))
    return stats


@pytest.mark.parametrize("name", sorted(COMPILED))
@settings(deadline=None, max_examples=60)
@given(batch=entries)
def test_a_compiled_model_prices_a_batch_as_python_does(
    name: str, batch: list[tuple[int, int, bool]]
) -> None:
    cost = _model(name)
    stats = _stats(batch)
    assert cost.time_stats(stats) == cost.python_time_stats(stats)
    assert stats.num_tokens == 0 or cost._stepped is not None  # the compiled call priced it


@pytest.mark.parametrize("name", sorted(PYTHON_ONLY))
def test_a_model_that_does_not_compile_keeps_the_python_pricing(name: str) -> None:
    cost = _model(name)
    stats = _stats([(1, 3000, True), (1, 50, True), (700, 0, False), (2048, 4096, True)])
    assert cost.time_stats(stats) == cost.python_time_stats(stats) > 0
    assert cost._stepped is None


def test_the_kernels_other_than_attention_come_from_the_token_cache() -> None:
    cost = CostModel("llama-3-8b", "h100-sxm")
    stats = _stats([(512, 0, False), (1, 900, True)])
    first = cost.time_stats(stats)
    cost._token_cache[(stats.num_tokens, stats.sampled_tokens)] += 1.0
    assert cost.time_stats(stats) == pytest.approx(first + 1.0)
