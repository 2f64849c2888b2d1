"""Tests for cbsim.memory.kvcache: block arithmetic, capacity by hand, allocation accounting."""

from __future__ import annotations

import pytest

from cbsim.catalog.hardware import GiB, get_gpu
from cbsim.catalog.model_bytes import kv_bytes_per_token_per_gpu
from cbsim.catalog.models import get_model
from cbsim.cost.engine_memory import MemoryInputs, plan_memory
from cbsim.cost.memory_rule import MemoryRule
from cbsim.memory.kvcache import KVCache, blocks_for_tokens

FLAT = MemoryRule(kind="flat")  # a fraction of all memory less the weights and 1.5 GiB

# Llama-3-8B by hand: embedding 128256*4096 (untied LM head the same), 32 layers of
# attention 4096*(4096 + 2*1024) + 4096*4096, MLP 3*4096*14336 and two norms of 4096, final norm.
LLAMA3_8B_PARAMS = 2 * 128256 * 4096 + 32 * (41_943_040 + 176_160_768 + 2 * 4096) + 4096
# keys and values: 2 * 32 layers * 8 KV heads * 128 head_dim * 2 bytes
LLAMA3_8B_KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2


def for_replica(
    model="llama-3-8b",
    gpu="h100-sxm",
    *,
    tp=1,
    dtype="bf16",
    kv_dtype="bf16",
    block_size=16,
    util=0.9,
    watermark=0.01,
) -> KVCache:
    return KVCache.from_plan(
        flat_plan(model, gpu, tp, dtype, kv_dtype, block_size, util), watermark
    )


def flat_plan(model="llama-3-8b", gpu="h100-sxm", tp=1, dtype="bf16", kv_dtype="bf16",
              block_size=16, util=0.9):  # fmt: skip
    inputs = MemoryInputs(
        get_model(model), get_gpu(gpu), tp=tp, dtype=dtype, kv_dtype=kv_dtype,
        block_size=block_size, fraction=util,
    )  # fmt: skip
    return plan_memory(FLAT, inputs)


@pytest.mark.parametrize(
    ("tokens", "block_size", "blocks"),
    [
        (0, 16, 0),
        (1, 16, 1),
        (15, 16, 1),
        (16, 16, 1),
        (17, 16, 2),
        (32, 16, 2),
        (33, 16, 3),
        (1000, 1, 1000),
        (1000, 32, 32),
        (1024, 32, 32),
        (1025, 32, 33),
    ],
)
def test_blocks_for_tokens(tokens: int, block_size: int, blocks: int):
    assert blocks_for_tokens(tokens, block_size) == blocks


def test_hand_numbers_match_the_model():
    assert LLAMA3_8B_PARAMS == 8_030_261_248
    assert get_model("llama-3-8b").param_count() == LLAMA3_8B_PARAMS
    assert LLAMA3_8B_KV_BYTES_PER_TOKEN == 131_072
    assert kv_bytes_per_token_per_gpu(get_model("llama-3-8b"), 1, "bf16") == 131_072


def test_capacity_llama3_8b_h100_by_hand():
    weights = LLAMA3_8B_PARAMS * 2
    capacity = 80 * GiB * 0.9 - weights - 1.5 * GiB
    assert flat_plan().kv_bytes == pytest.approx(capacity, rel=1e-12)
    kv = for_replica()
    expected_blocks = int(capacity // (16 * 131_072))
    assert expected_blocks == 28_437
    assert kv.total_blocks == expected_blocks
    assert kv.block_size == 16
    assert kv.used_blocks == 0
    assert kv.free_blocks == expected_blocks
    assert kv.capacity_tokens == expected_blocks * 16
    assert kv.watermark_blocks == int(0.01 * expected_blocks) == 284


def test_block_size_trades_block_count():
    small, large = for_replica(block_size=8), for_replica(block_size=32)
    assert abs(small.capacity_tokens - large.capacity_tokens) <= 32
    assert small.total_blocks >= 4 * large.total_blocks


def test_tp2_halves_kv_per_token_per_gpu():
    model = get_model("llama-3-8b")
    assert kv_bytes_per_token_per_gpu(model, 2, "bf16") == 131_072 / 2
    assert kv_bytes_per_token_per_gpu(model, 8, "bf16") == 131_072 / 8
    # fewer KV heads than ranks: heads are replicated, per-GPU bytes stop shrinking
    assert kv_bytes_per_token_per_gpu(model, 16, "bf16") == 131_072 / 8


def test_tp2_capacity_by_hand():
    weights_per_gpu = LLAMA3_8B_PARAMS * 2 / 2
    capacity = 80 * GiB * 0.9 - weights_per_gpu - 1.5 * GiB
    kv = for_replica(tp=2)
    assert kv.total_blocks == int(capacity // (16 * 65_536))
    # half the weights per GPU and half the bytes per token: more than twice the tokens
    assert kv.total_blocks > 2 * for_replica(tp=1).total_blocks


def test_fp8_kv_doubles_tokens_per_byte():
    model = get_model("llama-3-8b")
    assert kv_bytes_per_token_per_gpu(model, 1, "fp8") == 65_536
    assert for_replica(kv_dtype="fp8").total_blocks == int(flat_plan().kv_bytes // (16 * 65_536))


def test_fp8_weights_leave_more_room():
    assert for_replica(dtype="fp8").total_blocks > for_replica(dtype="bf16").total_blocks


def test_capacity_scales_with_utilization():
    assert for_replica(util=0.5).total_blocks < for_replica(util=0.9).total_blocks


def test_model_that_does_not_fit_has_negative_capacity_and_no_blocks():
    assert flat_plan("llama-3-70b", "l40s").kv_bytes < 0
    assert for_replica("llama-3-70b", "l40s").total_blocks == 0


def test_allocate_and_free():
    kv = KVCache(total_blocks=10, block_size=4)
    kv.allocate(3)
    kv.allocate(7)
    assert kv.used_blocks == 10 and kv.free_blocks == 0
    assert kv.utilization == 1.0
    kv.free(4)
    assert kv.used_blocks == 6 and kv.free_blocks == 4
    assert kv.utilization == pytest.approx(0.6)
    kv.free(6)
    assert kv.used_blocks == 0


def test_overflow_raises_and_leaves_state():
    kv = KVCache(total_blocks=10, block_size=4)
    kv.allocate(8)
    with pytest.raises(RuntimeError, match="overflow"):
        kv.allocate(3)
    assert kv.used_blocks == 8


def test_underflow_raises_and_leaves_state():
    kv = KVCache(total_blocks=10, block_size=4)
    kv.allocate(2)
    with pytest.raises(RuntimeError, match="underflow"):
        kv.free(3)
    assert kv.used_blocks == 2


def test_can_allocate_with_and_without_watermark():
    kv = KVCache(total_blocks=100, block_size=16, watermark_blocks=5)
    kv.allocate(90)
    assert kv.can_allocate(10)
    assert not kv.can_allocate(11)
    assert kv.can_allocate(5, keep_watermark=True)
    assert not kv.can_allocate(6, keep_watermark=True)
    assert kv.can_allocate(0, keep_watermark=True)


def test_watermark_from_fraction():
    kv = for_replica(watermark=0.1)
    assert kv.watermark_blocks == int(0.1 * kv.total_blocks)
    assert for_replica(watermark=0.0).watermark_blocks == 0


def test_empty_cache_utilization_is_zero():
    assert KVCache(total_blocks=0, block_size=16).utilization == 0.0


@pytest.mark.parametrize(("used", "cached"), [(-1, 0), (11, 0), (4, -1), (4, 7)])
def test_counts_set_outside_the_cache_are_an_internal_error(used: int, cached: int):
    kv = KVCache(total_blocks=10, block_size=16, used_blocks=used, cached_blocks=cached)
    with pytest.raises(RuntimeError, match="internal error: KV cache of 10 blocks"):
        kv.check("a decode run")


def test_counts_within_the_cache_pass_the_check():
    KVCache(total_blocks=10, block_size=16, used_blocks=4, cached_blocks=6).check("a decode run")
