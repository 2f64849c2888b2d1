"""MoE calibration (:mod:`cbsim.studies.calibration.moe`): the roofline terms by hand, the fit on the
shipped vLLM fused-MoE tables, and its error on whole model shapes it never saw."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cbsim.catalog.hardware import get_gpu
from cbsim.common.errors import CbsimError
from cbsim.studies.calibration.data import load_table
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.moe import (
    MOE_DTYPES,
    fit_moe,
    holdout_shapes,
    kernel_paths,
    moe_rows,
    moe_terms,
    predict_moe,
    transfer_error,
)


def test_terms_by_hand() -> None:
    # DeepSeek-V3's experts (hidden 7168, inner 2048, 8 of 256) at 4 tokens, TP 2, no EP
    t = moe_terms(*(np.array([v], dtype=float) for v in (4, 7168, 2048, 8, 256, 2, 1)), "bfloat16")
    pairs, inner = 32, 1024
    assert t.flops[0] == 2 * pairs * 3 * 7168 * inner
    per_pair = 2 * (6 * inner + 2 * 7168)
    assert t.bytes_moved[0] == 32 * 3 * 7168 * inner * 2 + pairs * per_pair
    assert t.buffers[0] == 2 * 2 * 4 * 7168 + 4 * 8 * per_pair
    assert [f[0] for f in t.features] == [1.0, 7168, inner]
    # EP 8: a GPU holds 32 experts and a balanced eighth of the pairs, but buffers every pair
    e = moe_terms(*(np.array([v], dtype=float) for v in (4096, 7168, 2048, 8, 256, 1, 8)), "fp8")
    assert e.features[0][0] == 4096 * 8 / 8 / 32
    assert e.bytes_moved[0] == 32 * 3 * 7168 * 2048 * 1.0 + 4096 * (2 * (6 * 2048 + 2 * 7168))
    assert e.buffers[0] == 2 * 2 * 4096 * 7168 + 4096 * 8 * 2 * (6 * 2048 + 2 * 7168)


def test_unknown_dtype_is_refused() -> None:
    with pytest.raises(CbsimError, match="unknown MoE weight dtype"):
        moe_terms(*(np.ones(1) for _ in range(7)), "int2")
    assert set(MOE_DTYPES) >= {"bfloat16", "fp8", "fp8_block", "nvfp4"}


@pytest.fixture(scope="module")
def h100_bf16() -> pd.DataFrame:
    return moe_rows(load_table("moe", "h100-sxm"), "bfloat16", "balanced")


def test_fit_reproduces_what_it_saw(h100_bf16: pd.DataFrame) -> None:
    gpu = get_gpu("h100-sxm")
    rows = h100_bf16[kernel_paths(h100_bf16) == 0]
    fit = fit_moe(rows, gpu, "bfloat16")
    s = summarize(predict_moe(fit, rows, gpu, "bfloat16"), rows["latency_s"].to_numpy())
    assert s["median_ape"] < 0.10  # measured 8.4 %: the correction is smoothed hard
    assert 0.2 < fit.compute_eff < 1.0 and 0.3 < fit.memory_eff <= 1.5


@pytest.mark.slow
def test_held_out_shapes_on_h100(h100_bf16: pd.DataFrame) -> None:
    """Measured 8.1 % median, 30.2 % P90 (the issue's target: 12 / 25; the P90 misses it)."""
    held = holdout_shapes(h100_bf16, get_gpu("h100-sxm"), "bfloat16")
    s = summarize(held["predicted_s"].to_numpy(), held["measured_s"].to_numpy())
    assert s["median_ape"] < 0.12
    assert s["p90_ape"] < 0.35


def test_skew_is_slower_with_few_experts_and_faster_with_many_as_measured() -> None:
    """Power-law routing loads a few hot experts: with 8 experts (Mixtral's) the hottest one's
    tokens take longer; with 256 (DeepSeek's) at few tokens fewer experts are read at all."""
    table = load_table("moe", "h100-sxm")
    gpu = get_gpu("h100-sxm")
    routings = ("balanced", "power_law_1.2")
    rows = {r: moe_rows(table, "bfloat16", r) for r in routings}
    fits = {r: fit_moe(rows[r][kernel_paths(rows[r]) == 0], gpu, "bfloat16") for r in routings}

    def times(shape: dict[str, int]) -> dict[str, tuple[float, float]]:
        out = {}
        for r in routings:
            mask = np.ones(len(rows[r]), dtype=bool)
            for key, value in {**shape, "moe_tp_size": 1, "moe_ep_size": 1}.items():
                mask &= rows[r][key].to_numpy() == value
            one = rows[r][mask]
            assert len(one) == 1
            out[r] = (
                float(one["latency_s"].iloc[0]),
                float(predict_moe(fits[r], one, gpu, "bfloat16")[0]),
            )
        return out

    mixtral = times(
        {"hidden_size": 4096, "inter_size": 14336, "topk": 2, "num_experts": 8, "num_tokens": 1024}
    )
    for i in (0, 1):  # measured, then fitted
        assert mixtral["power_law_1.2"][i] > mixtral["balanced"][i]
    many = times(
        {"hidden_size": 6144, "inter_size": 2048, "topk": 8, "num_experts": 256, "num_tokens": 64}
    )
    for i in (0, 1):
        assert many["power_law_1.2"][i] < many["balanced"][i]


def test_leave_one_gpu_out_runs_and_reports() -> None:
    h100 = moe_rows(load_table("moe", "h100-sxm"), "fp8_block", "balanced")
    b200 = moe_rows(load_table("moe", "b200"), "fp8_block", "balanced")
    s = transfer_error(h100, get_gpu("h100-sxm"), b200, get_gpu("b200"), "fp8_block")
    assert s["points"] == len(b200)
    assert 0 < s["median_ape"] < 0.3  # measured 19.4 %


def test_the_kernel_report_states_the_moe_held_out_error() -> None:
    from cbsim.studies.calibration.fit import _moe_holdout

    rows: list[dict[str, object]] = []
    points: list[pd.DataFrame] = []
    found = _moe_holdout(load_table("moe", "a100-80gb"), "a100-80gb", "vllm", rows, points, print)
    families = {str(r["family"]) for r in rows}
    assert families == {"moe bf16 skew 1.01", "moe bf16 skew 1.2"}  # A100: power-law rows only
    assert {str(r["method"]) for r in rows} == {"calibrated", "constant"}
    assert set(found) == {"moe_bfloat16_power_law_1.01", "moe_bfloat16_power_law_1.2"}
    assert all(0 < (m.holdout_median_ape or 0) < 0.25 for m in found.values())
    assert sum(len(p) for p in points) == sum(m.rows for m in found.values())


def _moe_e2e(family: str, keep: object = None) -> dict[str, float]:
    from cbsim.studies.calibration import moe_e2e

    chosen = moe_e2e.FAMILIES[family]
    runs = moe_e2e.measured_runs(chosen)
    if keep is not None:
        runs = runs[keep(runs)].reset_index(drop=True)  # type: ignore[operator]
    return moe_e2e.errors(moe_e2e.predict(chosen, runs))


def test_moe_tpot_held_out_on_measured_trtllm_runs() -> None:
    """Qwen3-235B-A22B fp8 under TensorRT-LLM (TP 8, EP 8, 16 clients: 12 measured runs), the
    engine profile fitted on dense models only: TPOT within 30% median (9.7% when written with
    TensorRT-LLM's own MoE kernels, 14.4% with vLLM's).
    Priced with the table's routing (every pair a new expert) it was 41% too slow; a served
    router's picks collide."""
    found = _moe_e2e("qwen3-235b-a22b", lambda r: (r["tp"] == 8) & (r["concurrency"] == 16))
    assert found["runs"] == 12
    assert found["tpot_median_pct"] < 30.0


@pytest.mark.slow
def test_moe_e2e_held_out_on_every_measured_run() -> None:
    """Every unsaturated aggregated MoE run cbsim can lay out (docs/engines.md's MoE table),
    loosely: a regression to the table's routing (Qwen3 TPOT 20.6% median, P90 48.5%; gpt-oss
    40.8%) fails. When written: Qwen3 9.8% / 24.6% with TensorRT-LLM's own MoE kernels (13.7% /
    29.9% with vLLM's), gpt-oss 34.9% (its excess is vLLM's serial step time, fitted on older
    versions' dense runs), TTFT 23.4% and 20.4%."""
    qwen = _moe_e2e("qwen3-235b-a22b")
    assert qwen["runs"] == 125
    assert qwen["tpot_median_pct"] < 13.0 and qwen["tpot_p90_pct"] < 30.0
    assert qwen["ttft_median_pct"] < 30.0
    gpt_oss = _moe_e2e("gpt-oss-120b")
    assert gpt_oss["runs"] == 60
    assert gpt_oss["tpot_median_pct"] < 38.0 and gpt_oss["ttft_median_pct"] < 30.0
