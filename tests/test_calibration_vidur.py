"""Tests for cbsim.studies.calibration.vidur: whole-layer checks against Vidur's per-op profiles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import get_model
from cbsim.cost import CostModel
from cbsim.studies.calibration.profile import CalibrationProfile, RooflineFit
from cbsim.studies.calibration.vidur import (
    RESIDUAL_ADDS_PER_LAYER,
    Holdout,
    aiconfigurator_profile,
    elementwise_bytes,
    elementwise_fit,
    error_report,
    fit_vidur_profile,
    gemm_disagreement,
    gemm_disagreement_summary,
    gemm_shapes,
    layer_totals,
    measured_elementwise_s,
    part_errors,
    row_model,
    vidur_rows,
)

A100 = "a100-80gb"
H100 = "h100-sxm"
LLAMA2 = "Llama-2-7b-hf"
LLAMA3 = "Meta-Llama-3-8B"


@pytest.fixture(scope="module")
def a100_rows() -> pd.DataFrame:
    return vidur_rows(A100)


@pytest.fixture(scope="module")
def h100_profile() -> CalibrationProfile:
    return fit_vidur_profile(H100)


def test_rows_and_shapes(a100_rows: pd.DataFrame) -> None:
    assert set(a100_rows.model) == {LLAMA2, LLAMA3}
    assert set(a100_rows.tp) == {1, 2, 4, 8}
    llama3 = row_model(a100_rows[a100_rows.model == LLAMA3].iloc[0].to_dict())
    assert (llama3.num_heads, llama3.num_kv_heads, llama3.head_dim) == (32, 8, 128)
    # per-shard (n, k) of sarathi's column/row-parallel layers
    assert gemm_shapes(llama3, 1) == {
        "attn_pre_proj": (6144, 4096),
        "attn_post_proj": (4096, 4096),
        "mlp_up_proj": (28672, 4096),
        "mlp_down_proj": (4096, 14336),
    }
    assert gemm_shapes(llama3, 8) == {
        "attn_pre_proj": (768, 4096),
        "attn_post_proj": (4096, 512),
        "mlp_up_proj": (3584, 4096),
        "mlp_down_proj": (4096, 1792),
    }


def test_elementwise_bytes_match_cost_model_by_hand(a100_rows: pd.DataFrame) -> None:
    row = a100_rows[(a100_rows.model == LLAMA2) & (a100_rows.tp == 1)]
    row = row[row.num_tokens == 1]
    h, inter, heads = 4096, 11008, 32
    per_token = 2 * 2 * h + 2 * 3 * h + 3 * inter + 2 * (heads + heads) * 128
    assert elementwise_bytes(row, A100)[0] == pytest.approx(per_token * 2.0)
    # Vidur times one residual add; the layer runs two of the same shape
    assert RESIDUAL_ADDS_PER_LAYER == 2
    expected = (
        row[["input_layernorm_ms", "post_attention_layernorm_ms", "attn_rope_ms", "mlp_act_ms"]]
        .sum(axis=1)
        .item()
        + 2 * row.add_ms.item()
    ) / 1e3
    assert measured_elementwise_s(row)[0] == pytest.approx(expected)


@pytest.mark.parametrize(("test_model", "fit_model"), [(LLAMA3, LLAMA2), (LLAMA2, LLAMA3)])
def test_layer_totals_of_a_held_out_model_within_8_percent(test_model: str, fit_model: str) -> None:
    # measured: median 2.0% (Llama-3-8B tested) and 3.2% (Llama-2-7B tested), P90 6.5% / 8.8%
    profile = fit_vidur_profile(A100, holdout_model=test_model)
    assert fit_model in profile.provenance["gemm"].source
    totals = layer_totals(A100, profile, holdout=Holdout(model=test_model))
    assert set(totals.model) == {test_model}
    report = error_report(totals)
    assert report["median_ape"] <= 0.08
    assert report["p90_ape"] <= 0.15
    parts = {row["part"]: row for row in part_errors(totals).to_dict("records")}
    assert parts["elementwise"]["median_ape"] <= 0.08
    assert 0.95 <= parts["layer"]["median_ratio"] <= 1.05


def test_layer_totals_h100_with_a_tp_degree_held_out() -> None:
    # H100 has one model only: hold out a TP degree (measured median 3.0% for tp 2)
    holdout = Holdout(tp=(2,))
    profile = fit_vidur_profile(H100, holdout=holdout)
    totals = layer_totals(H100, profile, holdout=holdout)
    assert set(totals.tp) == {2}
    assert error_report(totals)["median_ape"] <= 0.08


def test_elementwise_fit_is_sane() -> None:
    for gpu in (A100, H100):
        fit = elementwise_fit(gpu, holdout=Holdout(model=LLAMA3))
        # RMSNorm, rotary and SiLU kernels reach half to two thirds of peak bandwidth
        assert 0.3 <= fit.memory_eff <= 1.0
        assert 2e-6 <= fit.floor_s <= 30e-6
        assert fit.correction is not None
        assert fit.correction.features == ["tokens"]
        model = CostModel(
            "llama-3-8b", gpu, dtype="bf16", calibration=_only_elementwise(fit), engine=None
        )
        small, large = model.elementwise_time(1), model.elementwise_time(32768)
        assert 5e-6 <= small <= 60e-6
        # large batches are bandwidth-bound: time about proportional to tokens
        ratio = model.elementwise_time(32768) / model.elementwise_time(4096)
        assert 6.0 <= ratio <= 10.0
        assert large > small


def _only_elementwise(fit: RooflineFit) -> CalibrationProfile:
    return CalibrationProfile(gpu="any", name="elementwise", elementwise=fit)


def test_vidur_profile_contents(h100_profile: CalibrationProfile) -> None:
    assert h100_profile.name == "vidur"
    assert set(h100_profile.gemm) == {"fp16", "bf16"}
    assert sorted(h100_profile.allreduce) == ["2", "4", "8"]
    assert h100_profile.elementwise is not None
    copy = CalibrationProfile.model_validate(h100_profile.model_dump(mode="json"))
    assert copy == h100_profile
    model = CostModel("llama-3-8b", H100, tp=2, calibration=h100_profile, engine=None)
    assert model.allreduce_time(64) == h100_profile.allreduce["2"](64 * 4096 * 2.0)


def test_any_gemm_fit_can_be_plugged_in() -> None:
    fixed = RooflineFit(floor_s=5e-6, compute_eff=0.5, memory_eff=0.5)
    profile = fit_vidur_profile(A100, gemm_fitter=lambda table, gpu, dtype: fixed)
    assert profile.gemm["fp16"] is fixed
    totals = layer_totals(A100, profile, holdout=Holdout(model=LLAMA2, tp=(1,)))
    shape = get_model("llama-2-7b")
    gpu = get_gpu(A100)
    row = totals[totals.num_tokens == 1].iloc[0]
    weights = 4 * shape.hidden_size**2 + 3 * shape.hidden_size * shape.intermediate_size
    # m = 1: bandwidth-bound, weights dominate the bytes
    assert row.predicted_gemm_s == pytest.approx(
        4 * 5e-6 + 2.0 * weights / (gpu.hbm_bandwidth * 0.5), rel=1e-3
    )


def test_holdout_selects_rows(a100_rows: pd.DataFrame) -> None:
    assert not Holdout().mask(a100_rows).any()
    both = Holdout(model=LLAMA3, tp=(2, 4), tokens=(1, 64)).mask(a100_rows)
    chosen = a100_rows[both]
    assert set(chosen.model) == {LLAMA3} and set(chosen.tp) == {2, 4}
    assert chosen.num_tokens.max() <= 64


def test_cross_source_gemm_disagreement_is_computed() -> None:
    for gpu in (A100, H100):
        frame = gemm_disagreement(gpu)
        assert frame.exact.any()
        summary = {row["group"]: row for row in gemm_disagreement_summary(frame).to_dict("records")}
        ratio = summary["all"]["median_ratio"]
        assert np.isfinite(ratio)
        assert 0.5 <= ratio <= 1.5
        # Vidur's (PyTorch-profiled fp16) GEMMs run slower than AI Configurator's (bf16)
        assert ratio >= 1.0


@pytest.mark.parametrize("tp", [1, 2])
def test_decode_step_never_beats_the_roofline_bound(
    h100_profile: CalibrationProfile, tp: int
) -> None:
    model = get_model("llama-3-8b")
    gpu = get_gpu(H100)
    cost = CostModel("llama-3-8b", H100, tp=tp, dtype="bf16", calibration=h100_profile, engine=None)
    # every weight but the embedding table (a decode step gathers B of its rows) is read once
    weight_params = model.param_count() - model.embedding_param_count()
    for batch_size in (1, 64):
        for context in (0, 512, 4096):
            kv_tokens = batch_size * (context + 1)
            bytes_read = (
                weight_params * 2.0 / tp
                + batch_size * model.hidden_size * 2.0
                + kv_tokens * model.kv_bytes_per_token(2.0) / tp
            )
            flops = (
                2.0 * weight_params * batch_size
                + 4.0 * kv_tokens * model.num_layers * model.num_heads * model.head_dim
            ) / tp
            bound = max(bytes_read / gpu.hbm_bandwidth, flops / gpu.peak_flops("bf16"))
            step = cost.iteration_time([(1, context)] * batch_size)
            assert step >= bound, (batch_size, context, step, bound)
            # and the calibrated linear layers alone respect the weight-read bound
            linear = sum(
                cost.breakdown([(1, context)] * batch_size)[op]
                for op in ("qkv_proj", "o_proj", "mlp", "lm_head")
            )
            assert linear >= weight_params * 2.0 / tp / gpu.hbm_bandwidth


@pytest.mark.slow
@pytest.mark.parametrize("gpu", [A100, H100])
def test_aiconfigurator_gemms_against_vidur_layers(gpu: str) -> None:
    # the cross-source floor: AI Configurator's faster GEMMs under-predict Vidur's layers
    # (measured median APE 9.4% A100 / 14.5% H100 with this module's GEMM fitter)
    elementwise = elementwise_fit(gpu)
    totals = layer_totals(gpu, aiconfigurator_profile(gpu, elementwise=elementwise))
    report = error_report(totals)
    assert report["median_ape"] <= 0.25
    assert float(np.median(totals.predicted_s / totals.measured_s)) < 1.0
