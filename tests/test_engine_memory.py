"""GPU memory as each engine allocates it (cbsim.cost.engine_memory): the rules by hand, the
published start-up logs they reproduce, and invariants over layouts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.model_bytes import model_weight_bytes
from cbsim.catalog.models import get_model
from cbsim.cost.engine_memory import (
    GiB,
    MemoryInputs,
    forward_activation_bytes,
    plan_memory,
    sglang_default_fraction,
)
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.cost.memory_rule import MemoryRule

L8 = get_model("llama-3.1-8b")
L70 = get_model("llama-3.1-70b")
H100 = get_gpu("h100-sxm")
A100 = get_gpu("a100-80gb")
VLLM = load_engine_profile("vllm").memory


def test_vllm_rule_by_hand() -> None:
    """total x utilisation - weights - the profiling peak - non-torch - CUDA graphs."""
    x = MemoryInputs(L8, H100, max_batched_tokens=8192, max_batch_size=1024, max_model_len=8192)
    plan = plan_memory(VLLM, x)
    weights = L8.param_count() * 2
    forward = 8192 * (2 * 4096 + 3 * 14336) * 2
    sampler = 8192 * 4096 * 2 + 1024 * 128256 * VLLM.sampler_bytes_per_logit
    assert plan.activation_bytes == max(forward, sampler)
    budget = 0.9 * H100.cuda_total_bytes
    rest = (VLLM.non_torch_gib + VLLM.cuda_graph_gib) * GiB
    assert plan.kv_bytes == pytest.approx(budget - weights - max(forward, sampler) - rest)
    assert plan.blocks == int(plan.kv_bytes // (16 * 131072))
    assert plan.rank_tokens == plan.blocks * 16
    assert plan.max_concurrency(8192) == pytest.approx(plan.blocks / 512)


def test_a_published_vllm_019_log() -> None:
    """Llama-3.1-8B with --quantization fp8 on one H100, vLLM 0.19.0, utilisation 0.95:
    ``GPU KV cache size: 529,248 tokens`` (weights 8.49 GiB, torch peak 1.89 GiB, non-torch
    0.25 GiB). The fp8 checkpoint keeps embedding and LM head in bf16."""
    rule = load_engine_profile("vllm@0.19.0").memory
    x = MemoryInputs(L8, H100, dtype="fp8", fraction=0.95, max_batched_tokens=8192,
                     max_batch_size=1024, max_model_len=8192)  # fmt: skip
    plan = plan_memory(rule, x)
    assert plan.weight_bytes / GiB == pytest.approx(8.49, abs=0.05)
    assert plan.activation_bytes / GiB == pytest.approx(1.89, abs=0.1)
    assert plan.rank_tokens == pytest.approx(529_248, rel=0.005)


def test_fp8_checkpoints_keep_embedding_and_head_in_bf16() -> None:
    ends = 2 * L8.embedding_param_count()
    expected = (L8.param_count() - ends) * 1 + ends * 2
    assert model_weight_bytes(L8, "fp8") == expected


def test_vllm_0_8_counts_the_cuda_context_and_not_graphs() -> None:
    old, new = load_engine_profile("vllm@0.8.5").memory, load_engine_profile("vllm").memory
    assert old.context_counted and not old.cuda_graphs_in_budget
    assert not new.context_counted and new.cuda_graphs_in_budget
    x = MemoryInputs(L70, A100, tp=2, fraction=0.95, max_batched_tokens=8192, max_batch_size=1024)
    plan = plan_memory(old, x)
    # an A100's communicators: no NVLink SHARP or fused all-reduce workspace
    assert plan.non_torch_bytes == pytest.approx(
        (old.context_gib + old.non_torch_gib + old.gpu_comm_gib["a100-80gb"]) * GiB
    )
    # the llm-d deployment: 35-42k tokens in flight per replica on the overloaded runs
    assert 38_000 < plan.rank_tokens < 45_000


def test_last_stage_holds_the_sampler_and_tp_shards_the_mlp() -> None:
    assert forward_activation_bytes(L70, 8192, 2) < forward_activation_bytes(L70, 8192, 1)


@pytest.mark.parametrize(
    ("rule", "gpu", "tp", "budget", "fraction"),
    [
        ("tp", "h100-sxm", 1, 8192, 0.88),
        ("tp", "h100-sxm", 4, 8192, 0.85),
        ("tp", "h100-sxm", 8, 8192, 0.81),
        ("reserve-by-memory", "h100-sxm", 1, 8192, 0.874),  # (81559 - 10240) / 81559
        # 512 + 1.5 x 8192 + 2 x 256 + 1024 / 8 MiB; an SGLang 0.5.3 H100 log prints 0.835
        ("reserve-by-budget", "h100-sxm", 1, 8192, 0.835),
        # with piecewise graphs (0.5.12): 58 x 8 MiB more; a 2026 H100 log prints 0.83
        ("reserve-by-budget-piecewise", "h100-sxm", 1, 8192, 0.83),
        ("reserve-by-budget", "b200", 8, 16384, round((183359 - 27136) / 183359, 3)),
    ],
)
def test_sglang_default_fraction_by_release(
    rule: str, gpu: str, tp: int, budget: int, fraction: float
) -> None:
    memory = MemoryRule(kind="sglang", fraction_rule=rule)  # type: ignore[arg-type]
    x = MemoryInputs(L8, get_gpu(gpu), tp=tp, max_batched_tokens=budget)
    assert sglang_default_fraction(memory, x) == pytest.approx(fraction, abs=1e-9)


def test_sglang_takes_its_fraction_of_free_memory_less_weights() -> None:
    """SGLang 0.4 on an H100, Llama-3.1-8B, mem_fraction_static 0.88: 444,500 tokens (its log:
    78.81 GB free before the weights, 15.09 GB of weights, K and V 27.13 GB each)."""
    rule = load_engine_profile("sglang@0.4.1").memory
    plan = plan_memory(rule, MemoryInputs(L8, H100, fraction=0.88, block_size=1))
    assert plan.rank_tokens == pytest.approx(444_500, rel=0.01)


def test_tensorrt_llm_takes_its_fraction_of_what_the_dry_run_leaves() -> None:
    rule = load_engine_profile("tensorrt-llm").memory
    x = MemoryInputs(L8, H100, block_size=32)
    plan = plan_memory(rule, x)
    free = plan.total_bytes - plan.weight_bytes - plan.activation_bytes - plan.non_torch_bytes
    assert plan.kv_bytes == pytest.approx(0.9 * (free - plan.cuda_graph_bytes))
    assert plan.rank_tokens % 32 == 0


def test_a_model_that_does_not_fit_has_no_blocks() -> None:
    plan = plan_memory(VLLM, MemoryInputs(L70, get_gpu("l40s")))
    assert not plan.fits and plan.blocks == 0 and plan.tokens == 0


def test_startup_lines_read_as_the_engines_print_them() -> None:
    x = MemoryInputs(L8, H100, max_model_len=8192)
    assert plan_memory(VLLM, x).startup_line().startswith("GPU KV cache size: ")
    sglang = load_engine_profile("sglang").memory
    assert plan_memory(sglang, x).startup_line().startswith("max_total_num_tokens=")
    trt = load_engine_profile("tensorrt-llm").memory
    assert "for max tokens in paged KV cache" in plan_memory(trt, x).startup_line()


RULES = [load_engine_profile(e).memory for e in ("vllm", "vllm@0.8.5", "sglang", "tensorrt-llm")]


@settings(max_examples=60, deadline=None)
@given(
    rule=st.sampled_from(RULES),
    model=st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "llama-3.1-70b", "deepseek-v3"]),
    gpu=st.sampled_from(["a100-80gb", "h100-sxm", "h200", "b200", "l40s"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    dtype=st.sampled_from(["bf16", "fp8"]),
    fraction=st.floats(0.3, 0.95),
    budget=st.sampled_from([512, 2048, 8192, 16384]),
    block=st.sampled_from([1, 16, 32]),
)
def test_memory_invariants(
    rule: MemoryRule,
    model: str,
    gpu: str,
    tp: int,
    dtype: str,
    fraction: float,
    budget: int,
    block: int,
) -> None:
    shape, card = get_model(model), get_gpu(gpu)
    if not shape.splits_attention(tp):
        return
    x = MemoryInputs(shape, card, tp=tp, dtype=dtype, fraction=fraction,
                     max_batched_tokens=budget, block_size=block)  # fmt: skip
    plan = plan_memory(rule, x)
    # whole blocks, never more bytes than what is left, never more than the GPU holds
    assert plan.rank_tokens % block == 0
    assert plan.blocks * block * plan.kv_bytes_per_token <= max(plan.kv_bytes, 0.0) + 1e-6
    assert plan.kv_gib * GiB <= card.cuda_total_bytes
    # more memory for the engine never shrinks the cache; neither does a smaller budget
    more = plan_memory(rule, MemoryInputs(shape, card, tp=tp, dtype=dtype,
                                          fraction=min(0.99, fraction + 0.05),
                                          max_batched_tokens=budget, block_size=block))  # fmt: skip
    assert more.blocks >= plan.blocks
    less = plan_memory(rule, MemoryInputs(shape, card, tp=tp, dtype=dtype, fraction=fraction,
                                          max_batched_tokens=max(256, budget // 2),
                                          block_size=block))  # fmt: skip
    assert less.blocks >= plan.blocks
