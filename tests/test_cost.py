"""Tests for cbsim.cost: the roofline cost model pinned by hand-computed cases.

The hand-computed cases use the bare roofline (``CostModel.bare_roofline``: the uncalibrated
efficiencies of :class:`CostParams`, no engine overhead); the ordering properties hold for the
calibrated default too.
"""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.cost import BatchStats, CostModel, CostParams
from cbsim.cost.engine_profile import EngineProfile, StepOverhead
from cbsim.cost.roofline import DECODE_QUERY_MAX

LINEAR_OPS = ("qkv_proj", "o_proj", "mlp", "lm_head")


@pytest.fixture(scope="module")
def h100() -> CostModel:
    return CostModel.bare_roofline(model="llama-3-8b", gpu="h100-sxm", tp=1, dtype="bf16")


def linear_weight_bytes(model_name: str, bytes_per_param: float) -> float:
    """Bytes of the weights every decode step streams through the linear layers, by hand."""
    m = get_model(model_name)
    q = m.num_heads * m.head_dim
    kv = m.num_kv_heads * m.head_dim
    per_layer = (
        m.hidden_size * (q + 2 * kv) + q * m.hidden_size + 3 * m.hidden_size * m.intermediate_size
    )
    lm_head = m.vocab_size * m.hidden_size
    return (m.num_layers * per_layer + lm_head) * bytes_per_param


def test_decode_batch1_linear_layers_stream_the_weights(h100: CostModel):
    p = h100.params
    gpu = get_gpu("h100-sxm")
    weights = linear_weight_bytes("llama-3-8b", 2)
    assert weights == pytest.approx(15.009e9, rel=1e-4)  # 7.5 B linear params in bf16
    parts = h100.breakdown([(1, 512)])
    linear = sum(parts[op] for op in LINEAR_OPS)
    # four GEMMs per layer (qkv, o, gate+up, down) plus the LM head each pay one floor
    floors = (4 * 32 + 1) * p.gemm_floor_s
    assert linear - floors == pytest.approx(
        weights / (gpu.hbm_bandwidth * p.gemm_memory_eff), rel=0.01
    )
    # the bandwidth term dominates: 5.6 ms of memory time with default efficiency
    assert linear == pytest.approx(
        weights / (gpu.hbm_bandwidth * p.gemm_memory_eff) + floors, rel=0.01
    )


def test_decode_batch1_is_memory_bound(h100: CostModel):
    gpu = get_gpu("h100-sxm")
    p = h100.params
    m = get_model("llama-3-8b")
    compute = 2 * m.param_count() / (gpu.bf16_flops * p.gemm_compute_eff)
    linear = sum(h100.breakdown([(1, 100)])[op] for op in LINEAR_OPS)
    assert linear > 50 * compute


@pytest.mark.parametrize("batch_size", [1, 8, 64])
def test_iteration_at_least_weights_over_peak_bandwidth(h100: CostModel, batch_size: int):
    m, gpu = get_model("llama-3-8b"), get_gpu("h100-sxm")
    bound = m.weight_bytes(2) / gpu.hbm_bandwidth
    assert h100.weight_read_time() == pytest.approx(bound, rel=1e-12)
    assert h100.iteration_time([(1, 1000)] * batch_size) >= bound


def test_tp_shards_the_weight_bound():
    m, gpu = get_model("llama-3-70b"), get_gpu("h100-sxm")
    cost = CostModel("llama-3-70b", "h100-sxm", tp=4)
    bound = m.weight_bytes(2) / 4 / gpu.hbm_bandwidth
    assert cost.weight_read_time() == pytest.approx(bound, rel=1e-12)
    assert cost.iteration_time([(1, 1000)] * 16) >= bound


def test_prefill_at_least_flops_over_peak(h100: CostModel):
    m, gpu = get_model("llama-3-8b"), get_gpu("h100-sxm")
    bound = 2 * m.param_count() * 4096 / gpu.bf16_flops
    assert h100.iteration_time([(4096, 0)]) >= bound
    parts = h100.breakdown([(4096, 0)])
    # the linear layers alone are compute-bound at this size
    linear_flops = 2 * (linear_weight_bytes("llama-3-8b", 1) - m.vocab_size * m.hidden_size) * 4096
    gemm_eff = h100.params.gemm_compute_eff
    assert parts["qkv_proj"] + parts["o_proj"] + parts["mlp"] == pytest.approx(
        linear_flops / (gpu.bf16_flops * gemm_eff), rel=0.02
    )


@pytest.mark.parametrize(
    "batch",
    [[(1, 0)], [(1, 4000)] * 32, [(4096, 0)], [(512, 1024), (1, 300), (5, 700)], [(65, 10)]],
)
def test_breakdown_sums_to_iteration_time(h100: CostModel, batch):
    parts = h100.breakdown(batch)
    assert all(v >= 0 for v in parts.values())
    assert math.fsum(parts.values()) == pytest.approx(h100.iteration_time(batch), rel=1e-12)
    assert set(LINEAR_OPS) <= set(parts)
    assert {"overhead", "allreduce"} <= set(parts)


def test_empty_batch_costs_nothing(h100: CostModel):
    assert h100.iteration_time([]) == 0.0
    assert h100.breakdown([]) == {}


def test_iteration_time_increases_with_batch_size(h100: CostModel):
    times = [h100.iteration_time([(1, 1000)] * b) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    assert all(b > a for a, b in pairwise(times))
    # weights are read once per iteration: 64 decodes cost far less than 64 single decodes
    assert times[6] < 4 * times[0]


def test_iteration_time_increases_with_context(h100: CostModel):
    for q in (1, 8, 512):
        times = [h100.iteration_time([(q, c)] * 4) for c in (0, 10, 100, 1000, 10_000, 100_000)]
        assert all(b > a for a, b in pairwise(times)), q


def test_iteration_time_increases_with_prefill_length(h100: CostModel):
    times = [h100.iteration_time([(q, 0)]) for q in (128, 256, 512, 1024, 2048, 4096, 8192)]
    assert all(b > a for a, b in pairwise(times))


@pytest.mark.parametrize("cached", [0, 1000, 8000])
def test_one_more_new_token_never_takes_less_time(cached: int):
    # The engine's path: a prefill chunk of q tokens over ``cached`` tokens that finishes its
    # prefill (samples one token). Crossing DECODE_QUERY_MAX switches attention kernels; a 65-token
    # chunk must not be predicted faster than a 64-token one.
    cost = CostModel("llama-3-8b", "h100-sxm")
    previous = 0.0
    for q in range(DECODE_QUERY_MAX - 8, DECODE_QUERY_MAX + 8):
        stats = BatchStats()
        stats.add(q, cached, 1)
        t = cost.time_stats(stats)
        assert t >= previous, (q, t, previous)
        previous = t


def test_gemm_compute_bound_at_large_m(h100: CostModel):
    gpu = get_gpu("h100-sxm")
    p = h100.params
    m, n, k = 16384, 4096, 4096
    expected = 2 * m * n * k / (gpu.bf16_flops * p.gemm_compute_eff)
    assert h100.gemm_time(m, n, k) == pytest.approx(expected, rel=0.02)
    assert h100.gemm_time(m, n, k) >= expected


def test_gemm_memory_bound_at_small_m(h100: CostModel):
    gpu = get_gpu("h100-sxm")
    p = h100.params
    n, k = 14336, 4096
    expected = n * k * 2 / (gpu.hbm_bandwidth * p.gemm_memory_eff)
    assert h100.gemm_time(1, n, k) == pytest.approx(expected + p.gemm_floor_s, rel=0.01)
    # flat in m while memory-bound: 16 rows cost about the same as one
    assert h100.gemm_time(16, n, k) == pytest.approx(h100.gemm_time(1, n, k), rel=0.02)


def test_gemm_degenerate_shapes(h100: CostModel):
    assert h100.gemm_time(0, 10, 10) == 0.0
    assert h100.gemm_time(10, 0, 10) == 0.0


def test_tp2_adds_allreduce_tp1_has_none():
    batch = [(1, 500)] * 8
    one = CostModel.bare_roofline("llama-3-8b", "h100-sxm", tp=1).breakdown(batch)
    two = CostModel.bare_roofline("llama-3-8b", "h100-sxm", tp=2).breakdown(batch)
    assert one.get("allreduce", 0.0) == 0.0
    assert two["allreduce"] > 0.0
    # by hand: 2 all-reduces per layer, each latency + ring traffic 2(tp-1)/tp * N*h*2 bytes
    p, gpu = CostParams(), get_gpu("h100-sxm")
    message = 8 * 4096 * 2
    per = p.allreduce_latency_s + message / (gpu.nvlink_bandwidth * p.allreduce_bw_eff)
    assert two["allreduce"] == pytest.approx(2 * 32 * per, rel=1e-9)
    # the sharded GEMMs read half the weights each
    assert two["mlp"] < 0.6 * one["mlp"]


def test_fp8_faster_than_bf16_for_large_prefill():
    batch = [(4096, 0), (4096, 0)]
    bf16 = CostModel("llama-3-8b", "h100-sxm", dtype="bf16").iteration_time(batch)
    fp8 = CostModel("llama-3-8b", "h100-sxm", dtype="fp8").iteration_time(batch)
    assert fp8 < 0.8 * bf16


def test_fp8_faster_than_bf16_for_decode():
    batch = [(1, 1000)] * 4
    bf16 = CostModel("llama-3-8b", "h100-sxm", dtype="bf16").iteration_time(batch)
    fp8 = CostModel("llama-3-8b", "h100-sxm", dtype="fp8").iteration_time(batch)
    assert fp8 < bf16


def test_faster_gpu_is_faster():
    batch = [(1, 2000)] * 16
    h100 = CostModel("llama-3-8b", "h100-sxm").iteration_time(batch)
    assert CostModel("llama-3-8b", "h200").iteration_time(batch) < h100
    assert CostModel("llama-3-8b", "l40s").iteration_time(batch) > h100


def test_lm_head_runs_for_every_verify_token_but_once_per_prefill(h100: CostModel):
    verify = h100.breakdown([(5, 100)])["lm_head"]
    decode = h100.breakdown([(1, 100)])["lm_head"]
    prefill = h100.breakdown([(2000, 0)])["lm_head"]
    assert prefill == pytest.approx(decode, rel=1e-12)
    assert verify > decode


def test_overhead_terms():
    profile = EngineProfile(
        engine="test",
        overhead=StepOverhead(cpu_s=1e-3, cpu_per_request_s=2e-5, cpu_per_token_s=1e-6),
    )
    cost = CostModel("llama-3-8b", "h100-sxm", engine=profile)
    assert cost.breakdown([(1, 0)])["overhead"] == pytest.approx(1e-3 + 2e-5 + 1e-6)
    assert cost.breakdown([(1, 0)] * 10)["overhead"] == pytest.approx(1e-3 + 10 * 2e-5 + 10e-6)


def test_from_pairs_counts():
    stats = BatchStats.from_pairs([(1, 10), (4, 20), (500, 0), (100, 50)])
    assert stats.num_requests == 4
    assert stats.num_tokens == 605
    assert stats.decode_tokens == 5 and stats.prefill_tokens == 600
    assert stats.decode_kv_tokens == 11 + 24
    assert stats.prefill_kv_tokens == 500 + 150
    assert stats.sampled_tokens == 1 + 4 + 1 + 1
    assert stats.decode_pairs == pytest.approx(1 * (10 + 1) + 4 * (20 + 2.5))
    assert stats.prefill_pairs == pytest.approx(500 * 250.5 + 100 * (50 + 50.5))


@pytest.mark.parametrize("entry", [(0, 5), (-1, 0), (3, -1), (1, 2, 3), (1,), ()])
def test_from_pairs_rejects_bad_entries(entry):
    with pytest.raises(CbsimError):
        BatchStats.from_pairs([(1, 1), entry])
    with pytest.raises(CbsimError):
        CostModel().iteration_time([entry])


def test_constructor_rejects_bad_arguments():
    with pytest.raises(CbsimError):
        CostModel(tp=0)
    with pytest.raises(CbsimError):
        CostModel(dtype="int2")
    with pytest.raises(CbsimError):
        CostModel(gpu="tpu-v5")
    with pytest.raises(CbsimError):
        CostModel(model="gpt-9")


def test_cost_params_validation():
    with pytest.raises(ValueError):
        CostParams(gemm_compute_eff=0.0)
    with pytest.raises(ValueError):
        CostParams(gemm_memory_eff=1.5)
    with pytest.raises(ValueError):
        CostParams(gemm_floor_s=-1e-6)
    faster = CostParams().with_updates(gemm_floor_s=0.0)
    base = CostModel.bare_roofline().gemm_time(1, 4096, 4096)
    assert CostModel.bare_roofline(params=faster).gemm_time(1, 4096, 4096) == pytest.approx(
        base - CostParams().gemm_floor_s, rel=1e-12
    )


def test_compiled_fits_predict_bit_for_bit():
    import random

    from cbsim.studies.calibration.profile import load_profile

    rng = random.Random(7)
    profile = load_profile("h100-sxm")
    fits = [*profile.decode_attention.values(), *profile.prefill_attention.values()]
    fits += list(profile.gemm.values())
    for fit in fits:
        if fit.correction is not None and "kv_heads" in fit.correction.features:
            fit = fit.specialize({"kv_heads": 8.0, "group": 4.0, "head_dim": 128.0})
        compiled = fit.compiled()
        count = len(fit.correction.features) if fit.correction is not None else 0
        for _ in range(500):
            args = (rng.random() * 1e12, rng.random() * 1e9, 9.89e14, 3.35e12)
            features = [2 ** rng.uniform(-3, 22) for _ in range(count)]
            assert compiled(*args, *features) == fit.predict(*args, *features)


@given(
    st.lists(
        st.tuples(st.integers(1, 5000), st.integers(0, 100_000), st.integers(0, 16)),
        max_size=40,
    )
)
def test_add_entries_equals_adding_one_by_one(entries: list[tuple[int, int, int]]) -> None:
    one_by_one = BatchStats()
    one_by_one.add(3, 10, 3)
    for q, c, s in entries:
        one_by_one.add(q, c, s)
    together = BatchStats()
    together.add(3, 10, 3)
    together.add_entries([e[0] for e in entries], [e[1] for e in entries], [e[2] for e in entries])
    assert together == one_by_one


def test_batch_stats_copy_carries_every_field() -> None:
    import dataclasses

    from cbsim.cost.batch_stats import BatchStats

    stats = BatchStats()
    for i, f in enumerate(dataclasses.fields(BatchStats)):
        setattr(stats, f.name, i + 0.5 if f.type == "float" else i + 1)
    copied = stats.copy()
    assert copied == stats and copied is not stats
    copied.add(3, 7, 1)
    assert copied != stats  # independent
