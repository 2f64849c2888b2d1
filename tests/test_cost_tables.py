"""A compiled cost's per-token-count tables, priced for all counts at once, hold the very floats
the scalar pricing gives count by count: every shipped kernel profile, engine and kind of model."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from cbsim.catalog.hardware import GPU_NAMES
from cbsim.common.errors import CbsimError
from cbsim.cost.compiled import EXTRA, HEAD, HEAD_FLOOR, LINEAR, LINEAR_FLOOR, TABLE_ROWS, TOKEN
from cbsim.cost.profile import load_profile, profile_names
from cbsim.cost.roofline import ROW_LIMIT, CostModel, compile_cost, extend_tables

MODELS = (
    ("llama-3-8b", 1, "bf16"),  # dense
    ("qwen2.5-7b", 2, "bf16"),
    ("llama-3-70b", 8, "fp8"),
    ("llama-3-8b", 1, "int4"),  # a transferred GEMM fit
    ("llama-3-8b", 1, "fp4"),
    ("qwen3-30b-a3b", 2, "bf16"),  # MoE
    ("qwen2-57b-a14b", 2, "fp8"),  # MoE with shared experts
    ("deepseek-v2-lite", 1, "bf16"),  # latent attention (not compiled: its token terms)
    ("llama-3.1-405b", 16, "fp8"),  # all-reduces across nodes
)
EXTRA_GEMM = (4096, 8192)  # an EAGLE head's fusion layer


def _scalar_tables(cost: CostModel, tokens: int) -> np.ndarray:
    """The tables as the scalar pricing gives them, count by count (``extend_tables``'s loop
    before it priced all counts at once)."""
    tables = np.zeros((TABLE_ROWS, tokens + 1))
    for n in range(1, tokens + 1):
        qkv, o_proj, mlp, elementwise, allreduce = cost._linear_times(n)
        tables[LINEAR, n] = qkv + o_proj + mlp + elementwise + allreduce
        tables[HEAD, n] = cost._lm_head_time(n)
        tables[EXTRA, n] = cost.gemm_time(n, *EXTRA_GEMM)
    tables[TOKEN] = tables[LINEAR] + tables[HEAD]
    tables[LINEAR_FLOOR] = np.minimum.accumulate(tables[LINEAR][::-1])[::-1]
    tables[HEAD_FLOOR] = np.minimum.accumulate(tables[HEAD][::-1])[::-1]
    return tables


def _cost(model: str, tp: int, dtype: str, gpu: str, calibration: str, engine: str) -> (
    CostModel | None
):  # fmt: skip
    try:
        return CostModel(model, gpu, tp=tp, dtype=dtype, calibration=calibration, engine=engine)
    except CbsimError:
        return None  # a format the GPU cannot run, a parallel layout the model cannot split


def _assert_same_tables(cost: CostModel, twin: CostModel, tokens: int) -> None:
    """``cost``'s tables for ``tokens`` counts (where it compiles; else the token terms they are
    made of) equal, row by row, the scalar pricing of ``twin`` (an identical, fresh cost model)."""
    expected = _scalar_tables(twin, tokens)
    compiled = compile_cost(cost, tokens, EXTRA_GEMM)
    if compiled is None:
        counts = np.arange(1, tokens + 1)
        assert np.array_equal(cost._linear_table(counts), expected[LINEAR, 1:])
        assert np.array_equal(cost._lm_head_table(counts), expected[HEAD, 1:])
        assert np.array_equal(cost.gemm_times(counts, *EXTRA_GEMM), expected[EXTRA, 1:])
        return
    assert compiled.tables.shape == expected.shape
    for row in (LINEAR, HEAD, TOKEN, EXTRA, LINEAR_FLOOR, HEAD_FLOOR):
        assert np.array_equal(compiled.tables[row], expected[row]), row


def _cases() -> Iterator[tuple[str, str, str]]:
    """(gpu, calibration, engine): every shipped profile under a fused engine, and under an
    unfused one where it fits the element-wise kernels; each GPU's default under every kind of
    engine (its own kernels or another GPU's transferred, the engine's own all-reduce, unfused
    element-wise kernels); the raw roofline."""
    for gpu in GPU_NAMES:
        for name in profile_names(gpu):
            yield gpu, name, "vllm"
            profile = load_profile(gpu, name)
            if profile is not None and profile.elementwise is not None:
                yield gpu, name, "deepspeed-mii"
        for engine in ("vllm", "sglang", "tensorrt-llm", "deepspeed-mii"):
            yield gpu, "default", engine
    yield "h100-sxm", "none", "vllm"
    yield "h100-sxm", "none", "deepspeed-mii"


@pytest.mark.parametrize(
    ("gpu", "calibration", "engine", "model", "tp", "dtype"),
    [
        ("h100-sxm", "default", "vllm", "llama-3-8b", 1, "bf16"),
        ("h100-sxm", "default", "vllm", "llama-3-70b", 8, "fp8"),
        ("h100-sxm", "default", "sglang", "qwen2-57b-a14b", 2, "fp8"),
        ("h200", "default", "tensorrt-llm", "qwen3-30b-a3b", 2, "bf16"),
        ("b200", "default", "vllm", "llama-3-8b", 2, "fp4"),
        ("a100-80gb", "default", "vllm", "qwen2.5-7b", 2, "bf16"),  # the engine's own all-reduce
        ("h100-sxm", "vidur", "deepspeed-mii", "llama-3-8b", 2, "bf16"),  # unfused element-wise
        ("h100-sxm", "none", "vllm", "deepseek-v2-lite", 1, "bf16"),
        ("h100-sxm", "default", "vllm", "llama-3.1-405b", 16, "fp8"),
    ],
)
def test_tables_equal_the_scalar_pricing(
    gpu: str, calibration: str, engine: str, model: str, tp: int, dtype: str
) -> None:
    cost = _cost(model, tp, dtype, gpu, calibration, engine)
    twin = _cost(model, tp, dtype, gpu, calibration, engine)
    assert cost is not None and twin is not None
    _assert_same_tables(cost, twin, 3000)


TOKEN_CASES = [
    ("h100-sxm", "default", "vllm", "llama-3-70b", 4, "bf16"),
    ("h100-sxm", "default", "sglang", "qwen2-57b-a14b", 2, "fp8"),  # MoE with shared experts
    ("h200", "default", "tensorrt-llm", "qwen3-30b-a3b", 2, "bf16"),
    ("a100-80gb", "default", "vllm", "qwen2.5-7b", 2, "bf16"),
    ("h100-sxm", "vidur", "deepspeed-mii", "llama-3-8b", 2, "bf16"),
    ("h100-sxm", "none", "vllm", "deepseek-v2-lite", 1, "bf16"),  # latent attention
]


@pytest.mark.parametrize(("gpu", "calibration", "engine", "model", "tp", "dtype"), TOKEN_CASES)
def test_a_batchs_token_time_is_the_scalar_pricing(
    gpu: str, calibration: str, engine: str, model: str, tp: int, dtype: str
) -> None:
    """``_token_time`` of a whole batch, read from rows priced a block at a time, is the sum
    pricing its token count and sampled count alone gives, in any order of first use (counts
    past the rows' limit priced alone)."""
    cost = _cost(model, tp, dtype, gpu, calibration, engine)
    twin = _cost(model, tp, dtype, gpu, calibration, engine)
    assert cost is not None and twin is not None
    rng = np.random.default_rng(11)
    counts = [*rng.integers(1, 700, 120).tolist(), 1, 255, 256, 257, 4100, ROW_LIMIT - 1]
    counts += [ROW_LIMIT, ROW_LIMIT + 3]
    for n in counts:
        for sampled in {1, n, int(rng.integers(1, n + 1))}:
            qkv, o_proj, mlp, elementwise, allreduce = twin._linear_times(n)
            alone = qkv + o_proj + mlp + elementwise + allreduce
            alone += twin._lm_head_time(sampled)
            assert cost._token_time(n, sampled) == alone, (n, sampled)


def test_extended_tables_equal_tables_built_at_once() -> None:
    grown = CostModel("qwen3-30b-a3b", "h100-sxm", tp=2)
    small = compile_cost(grown, 100, EXTRA_GEMM)
    assert small is not None
    grown_tables = extend_tables(small, grown, 5000, EXTRA_GEMM).tables
    whole = compile_cost(CostModel("qwen3-30b-a3b", "h100-sxm", tp=2), 5000, EXTRA_GEMM)
    assert whole is not None
    size = min(grown_tables.shape[1], whole.tables.shape[1])
    for row in (LINEAR, HEAD, TOKEN, EXTRA):
        assert np.array_equal(grown_tables[row, :size], whole.tables[row, :size])


@pytest.mark.slow
@pytest.mark.parametrize(("gpu", "calibration", "engine"), list(_cases()))
def test_every_profile_tables_equal_the_scalar_pricing(
    gpu: str, calibration: str, engine: str
) -> None:
    for model, tp, dtype in MODELS:
        cost = _cost(model, tp, dtype, gpu, calibration, engine)
        twin = _cost(model, tp, dtype, gpu, calibration, engine)
        if cost is not None and twin is not None:
            _assert_same_tables(cost, twin, 20000)


@pytest.mark.parametrize(
    ("gpu", "engine", "dtype"),
    [
        ("l40s", "sglang", "bf16"),
        ("a100-80gb", "tensorrt-llm", "fp16"),
        ("h100-sxm", "vllm", "fp8"),
        ("l40s", "vllm", "int4"),
    ],
)
def test_gemm_times_are_gemm_time_row_count_by_row_count(gpu: str, engine: str, dtype: str) -> None:
    """GEMMs priced for many row counts at once, a transfer GPU's (its engine/reference ratio
    per count) included, give each count the scalar pricing's float bit for bit."""
    cost = CostModel("llama-3-70b", gpu, tp=2, dtype=dtype, engine=engine)
    rows = np.unique(np.concatenate([np.arange(0, 200), np.geomspace(1, 70_000, 80)]).astype(int))
    for n, k in ((1024, 8192), (28_672, 8192), (8192, 14_336), (128_256, 8192)):
        scalar = np.array([cost.gemm_time(int(m), n, k) for m in rows])
        assert np.array_equal(cost.gemm_times(rows, n, k).view(np.int64), scalar.view(np.int64))
