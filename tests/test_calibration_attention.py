"""Attention calibration: the fit is the cost model's formula, held-out head configurations are
predicted within target, and both baselines are beaten.

Held-out error always holds out whole head configurations (a new model's shape). The default,
cost-model-compatible correction over (batch, tokens) cannot reach the P90 target (the base roofline
cannot order head configurations within a (batch, tokens) cell well enough; see the module
docstring), so its bounds here are what it measurably reaches; the targets (median ≤ 8 %, P90 ≤
20 %) are asserted for the correction with head features (``EXTENDED_FEATURES``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache

import numpy as np
import pandas as pd
import pytest

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.cost.roofline import DECODE_QUERY_MAX, CostModel, attention_flops_bytes
from cbsim.studies.calibration import attention as att
from cbsim.studies.calibration.data import load_table
from cbsim.studies.calibration.profile import CalibrationProfile, RooflineFit

H100 = get_gpu("h100-sxm")
GPUS = ("a100-80gb", "h100-sxm", "h200", "l40s")
MEDIAN_TARGET = 0.08
P90_TARGET = 0.20


@cache
def table(phase: str, gpu: str = "h100-sxm") -> pd.DataFrame:
    return load_table(att.TABLES[phase], gpu)


@cache
def fitted(phase: str, kv_dtype: str) -> RooflineFit:
    return att.fit_attention(table(phase), H100, phase, kv_dtype)


def sample(phase: str, kv_dtype: str, n: int = 40, seed: int = 1) -> pd.DataFrame:
    rows = att.select_rows(table(phase), phase, kv_dtype)
    return rows.sample(n=n, random_state=seed).reset_index(drop=True)


def cost_model(row: pd.Series, profile: CalibrationProfile, kv_dtype: str) -> CostModel:
    model = replace(
        get_model("llama-3-8b"),
        num_heads=int(row["num_heads"]),
        num_kv_heads=int(row["num_kv_heads"]),
        head_dim=int(row["head_dim"]),
    )
    return CostModel(
        model=model, gpu=H100, tp=1, dtype="bf16", kv_dtype=kv_dtype, calibration=profile
    )


# --------------------------------------------------------------------------- rows and shapes


def test_flops_bytes_follow_the_cost_model_definition() -> None:
    rows = pd.DataFrame(
        {
            "batch_size": [4, 2],
            "tokens": [1023, 512],
            "num_heads": [32, 8],
            "num_kv_heads": [8, 1],
            "head_dim": [128, 64],
            "kv_dtype": ["bf16", "fp8"],
        }
    )
    flops, bytes_moved = att.flops_bytes(rows, "decode")
    assert (flops[0], bytes_moved[0]) == attention_flops_bytes(
        4, 4 * 1024, 4 * 1024, 32, 8, 128, 2.0
    )
    assert (flops[1], bytes_moved[1]) == attention_flops_bytes(2, 2 * 513, 2 * 513, 8, 1, 64, 1.0)
    flops, bytes_moved = att.flops_bytes(rows, "prefill")
    pairs = 4 * 1023 * 1024 / 2
    assert (flops[0], bytes_moved[0]) == attention_flops_bytes(
        4 * 1023, 4 * 1023, pairs, 32, 8, 128, 2.0
    )


def test_default_kernel_is_the_fully_swept_one() -> None:
    assert att.default_kernel(table("decode"), "decode", "bf16") == "vllm_flash_attn_fa3"
    assert att.default_kernel(table("prefill"), "prefill", "fp8") == "vllm_flash_attn_fa3"
    a100 = table("decode", "a100-80gb")
    assert att.default_kernel(a100, "decode", "bf16") == "vllm_flash_attn"
    assert att.default_kernel(a100, "decode", "fp8") is None
    assert att.default_kernel(table("decode", "l40s"), "decode", "bf16") == "vllm_flash_attn_fa2"
    assert (
        att.default_kernel(table("decode", "l40s"), "decode", "fp8") == "vllm_flashinfer_fidecode"
    )
    assert (
        att.default_kernel(table("prefill", "l40s"), "prefill", "fp8")
        == "vllm_flashinfer_fiprefill"
    )


@pytest.mark.parametrize("phase", att.PHASES)
def test_select_rows_keeps_serving_shapes(phase: str) -> None:
    rows = att.select_rows(table(phase), phase, "bf16")
    assert set(rows["kernel"]) == {"vllm_flash_attn_fa3"}
    assert set(rows["kv_dtype"]) == {"bf16"}
    assert set(rows["head_dim"]) == {64, 128}
    assert (rows["num_heads"] % rows["num_kv_heads"] == 0).all()
    assert rows["batch_size"].min() >= 1
    if phase == "prefill":
        assert rows["tokens"].min() > DECODE_QUERY_MAX
    everything = att.select_rows(table(phase), phase, "bf16", head_dims=None)
    assert set(everything["head_dim"]) > {64, 128}


# --------------------------------------------------------------------------- the fit is the cost model


@pytest.mark.parametrize("kv_dtype", att.KV_DTYPES)
def test_cost_model_attention_time_equals_predict_attention(kv_dtype: str) -> None:
    decode, prefill = fitted("decode", kv_dtype), fitted("prefill", kv_dtype)
    assert decode.correction is not None and decode.correction.features == ["batch", "tokens"]
    assert prefill.correction is not None and prefill.correction.features == ["batch", "tokens"]
    profile = CalibrationProfile(
        gpu="h100-sxm",
        name="test",
        decode_attention={kv_dtype: decode},
        prefill_attention={kv_dtype: prefill},
    )
    rows = sample("decode", kv_dtype)
    expected = att.predict_attention(decode, rows, H100, "decode", kv_dtype)
    for i, (_, row) in enumerate(rows.iterrows()):
        b, t = int(row["batch_size"]), int(row["tokens"])
        got = cost_model(row, profile, kv_dtype).attention_time(
            b, b * (t + 1), float(b * (t + 1)), decode=True, requests=b
        )
        assert got == pytest.approx(expected[i], rel=1e-9)
    rows = sample("prefill", kv_dtype)
    expected = att.predict_attention(prefill, rows, H100, "prefill", kv_dtype)
    for i, (_, row) in enumerate(rows.iterrows()):
        b, t = int(row["batch_size"]), int(row["tokens"])
        got = cost_model(row, profile, kv_dtype).attention_time(
            b * t, b * t, b * t * (t + 1) / 2, decode=False, requests=b
        )
        assert got == pytest.approx(expected[i], rel=1e-9)


def test_extended_fit_predicts_through_correction_inputs() -> None:
    rows = att.select_rows(table("prefill"), "prefill", "bf16")
    rows = rows[rows["num_kv_heads"] <= 2].reset_index(drop=True)
    fit = att.fit_attention(rows, H100, "prefill", "bf16", features=att.EXTENDED_FEATURES)
    assert fit.correction is not None
    assert fit.correction.features == list(att.EXTENDED_FEATURES)
    rows = sample("prefill", "bf16")
    expected = att.predict_attention(fit, rows, H100, "prefill", "bf16")
    flops, bytes_moved = att.flops_bytes(rows, "prefill")
    for i, (_, row) in enumerate(rows.iterrows()):
        features = att.correction_inputs(
            fit,
            batch=int(row["batch_size"]),
            tokens=int(row["tokens"]),
            q_heads=int(row["num_heads"]),
            kv_heads=int(row["num_kv_heads"]),
            head_dim=int(row["head_dim"]),
        )
        got = fit.predict(flops[i], bytes_moved[i], H100.bf16_flops, H100.hbm_bandwidth, *features)
        assert got == pytest.approx(expected[i], rel=1e-9)


def test_fit_is_a_valid_profile_entry_and_round_trips() -> None:
    fit = fitted("decode", "bf16")
    assert fit.floor_s > 0 and 0 < fit.memory_eff <= 1.5 and 0 < fit.compute_eff <= 1.5
    again = RooflineFit.model_validate(json.loads(json.dumps(fit.model_dump(mode="json"))))
    rows = sample("decode", "bf16", n=10)
    np.testing.assert_allclose(
        att.predict_attention(again, rows, H100, "decode", "bf16"),
        att.predict_attention(fit, rows, H100, "decode", "bf16"),
    )


def test_fp8_kv_uses_the_fp8_peak() -> None:
    fit = RooflineFit(floor_s=0.0, compute_eff=1.0, memory_eff=1e-3)  # compute never binds
    rows = sample("prefill", "fp8", n=5)
    flops, bytes_moved = att.flops_bytes(rows, "prefill")
    np.testing.assert_allclose(
        att.predict_attention(fit, rows, H100, "prefill", "fp8"),
        bytes_moved / (H100.hbm_bandwidth * 1e-3),
    )
    fit = RooflineFit(floor_s=0.0, compute_eff=1e-3, memory_eff=1.0)  # compute binds
    np.testing.assert_allclose(
        att.predict_attention(fit, rows, H100, "prefill", "fp8"), flops / (H100.fp8_flops * 1e-3)
    )


# --------------------------------------------------------------------------- cross-validation


def test_folds_hold_out_whole_head_configurations() -> None:
    rows = att.select_rows(table("prefill"), "prefill", "bf16")
    folds = att.head_folds(rows, folds=5, seed=0)
    per_config = pd.Series(folds).groupby([rows[c] for c in att.HEAD_COLUMNS]).nunique()
    assert (per_config == 1).all()
    configs = rows[att.HEAD_COLUMNS].drop_duplicates()
    sizes = pd.Series(folds).groupby([rows[c] for c in att.HEAD_COLUMNS]).first().value_counts()
    assert sorted(sizes.index) == [0, 1, 2, 3, 4]
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == len(configs)
    np.testing.assert_array_equal(folds, att.head_folds(rows, folds=5, seed=0))
    assert not np.array_equal(folds, att.head_folds(rows, folds=5, seed=1))


@cache
def held_out(gpu: str, phase: str, kv_dtype: str) -> dict[str, tuple[float, float]]:
    """(median, P90) held-out error per method: calibrated (batch, tokens) and the two baselines,
    all on the same folds."""
    spec = get_gpu(gpu)
    frame = pd.concat(
        [
            att.holdout_heads(table(phase, gpu), spec, phase, kv_dtype),
            att.baselines(table(phase, gpu), spec, phase, kv_dtype),
        ]
    )
    summary = att.summarize_holdout(frame)
    return {
        str(method): (float(median), float(p90))
        for method, median, p90 in zip(
            summary["method"], summary["median_ape"], summary["p90_ape"], strict=True
        )
    }


@cache
def held_out_extended(gpu: str, phase: str, kv_dtype: str) -> tuple[float, float]:
    frame = att.holdout_heads(
        table(phase, gpu), get_gpu(gpu), phase, kv_dtype, features=att.EXTENDED_FEATURES
    )
    return float(frame["ape"].median()), float(frame["ape"].quantile(0.9))


def beats_baselines(result: dict[str, tuple[float, float]], errors: tuple[float, float]) -> bool:
    return all(
        errors[0] < result[baseline][0] and errors[1] < result[baseline][1]
        for baseline in ("uncalibrated", "constant")
    )


def test_baselines_use_the_same_rows_and_folds() -> None:
    calibrated = att.holdout_heads(table("prefill"), H100, "prefill", "bf16")
    base = att.baselines(table("prefill"), H100, "prefill", "bf16")
    assert set(calibrated["method"]) == {"calibrated"}
    assert set(base["method"]) == {"uncalibrated", "constant"}
    for _, frame in base.groupby("method"):
        frame = frame.reset_index(drop=True)
        pd.testing.assert_series_equal(frame["fold"], calibrated["fold"])
        pd.testing.assert_series_equal(frame["latency_s"], calibrated["latency_s"])


# What the (batch, tokens) correction measurably reaches on H100 bf16 (decode 7.1 % / 25.6 %,
# prefill 11.1 % / 23.8 %), with a little headroom: the base cannot do better (module docstring).
DEFAULT_BOUNDS = {"decode": (0.08, 0.28), "prefill": (0.12, 0.26)}


@pytest.mark.parametrize("phase", att.PHASES)
def test_h100_held_out_heads_beat_baselines(phase: str) -> None:
    result = held_out("h100-sxm", phase, "bf16")
    assert beats_baselines(result, result["calibrated"]), result
    median, p90 = result["calibrated"]
    assert median <= DEFAULT_BOUNDS[phase][0] and p90 <= DEFAULT_BOUNDS[phase][1], result


@pytest.mark.slow  # 14 s; the default run keeps test_h100_held_out_heads_beat_baselines
@pytest.mark.parametrize("phase", att.PHASES)
def test_h100_held_out_heads_meet_targets_with_head_features(phase: str) -> None:
    median, p90 = held_out_extended("h100-sxm", phase, "bf16")
    assert median <= MEDIAN_TARGET and p90 <= P90_TARGET, (median, p90)
    assert beats_baselines(held_out("h100-sxm", phase, "bf16"), (median, p90))


def all_cases() -> list[tuple[str, str, str]]:
    cases: list[tuple[str, str, str]] = []
    for gpu in GPUS:
        for phase in att.PHASES:
            for kv_dtype in att.KV_DTYPES:
                if not att.select_rows(table(phase, gpu), phase, kv_dtype).empty:
                    cases.append((gpu, phase, kv_dtype))
    return cases


@pytest.mark.slow
@pytest.mark.parametrize(("gpu", "phase", "kv_dtype"), all_cases())
def test_held_out_heads_every_gpu(gpu: str, phase: str, kv_dtype: str) -> None:
    result = held_out(gpu, phase, kv_dtype)
    assert beats_baselines(result, result["calibrated"]), result
    extended = held_out_extended(gpu, phase, kv_dtype)
    assert beats_baselines(result, extended), (result, extended)
    assert extended[0] <= MEDIAN_TARGET and extended[1] <= P90_TARGET, extended


# H100 → H200 (H100's fit, H200's spec sheet): (median, P90) bounds per (head features, phase, KV
# dtype); measured: (batch, tokens) 8.2/28.3, 13.0/31.7, 13.3/32.5, 13.7/33.4 %; with head features
# 4.6/15.2, 5.4/22.6, 2.6/8.4, 2.6/7.7 %. fp8-KV decode on H200 is no faster than on H100 although
# the bandwidth is 1.43x: that kernel is not bandwidth-bound, so a bandwidth roofline overshoots.
TRANSFER_BOUNDS: dict[tuple[bool, str, str], tuple[float, float]] = {
    (False, "decode", "bf16"): (0.10, 0.31),
    (False, "decode", "fp8"): (0.15, 0.35),
    (False, "prefill", "bf16"): (0.15, 0.36),
    (False, "prefill", "fp8"): (0.15, 0.37),
    (True, "decode", "bf16"): (0.06, 0.18),
    (True, "decode", "fp8"): (0.07, 0.25),
    (True, "prefill", "bf16"): (0.04, 0.10),
    (True, "prefill", "fp8"): (0.04, 0.10),
}


@pytest.mark.slow
@pytest.mark.parametrize("phase", att.PHASES)
@pytest.mark.parametrize("kv_dtype", att.KV_DTYPES)
@pytest.mark.parametrize("extended", [False, True])
def test_h100_profile_transfers_to_h200(phase: str, kv_dtype: str, extended: bool) -> None:
    features = att.EXTENDED_FEATURES if extended else att.DEFAULT_FEATURES
    moved = att.transfer(
        table(phase),
        H100,
        table(phase, "h200"),
        get_gpu("h200"),
        phase,
        kv_dtype,
        features=features,
    )
    assert set(moved["method"]) == {"transfer"}
    median, p90 = float(moved["ape"].median()), float(moved["ape"].quantile(0.9))
    bound = TRANSFER_BOUNDS[(extended, phase, kv_dtype)]
    assert median <= bound[0] and p90 <= bound[1], (median, p90)


# --------------------------------------------------------------------------- errors


def test_bad_requests_are_clear_errors() -> None:
    with pytest.raises(CbsimError, match="kv_dtype fp8"):
        att.fit_attention(table("decode", "a100-80gb"), get_gpu("a100-80gb"), "decode", "fp8")
    with pytest.raises(CbsimError, match="phase"):
        att.select_rows(table("decode"), "verify", "bf16")
    with pytest.raises(CbsimError, match="features"):
        att.fit_attention(table("decode"), H100, "decode", "bf16", features=("tokens", "batch"))
    with pytest.raises(CbsimError, match="folds"):
        att.head_folds(att.select_rows(table("decode"), "decode", "bf16"), folds=1)
