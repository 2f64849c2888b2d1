"""Multi-head latent attention: the MLA module's roofline terms, its fit on the shipped vLLM
tables with one head count held out, and DeepSeek-V3 priced and simulated with it."""

from __future__ import annotations

import numpy as np
import pytest

import cbsim
from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.model_bytes import kv_bytes_per_token_per_gpu
from cbsim.catalog.models import get_model
from cbsim.cost.mla import mla_terms, mla_weight_params
from cbsim.cost.roofline import CostModel
from cbsim.studies.calibration import mla
from cbsim.studies.calibration.data import load_table
from tests.conftest import small_scenario

DSV3 = get_model("deepseek-v3")


def test_weights_of_the_module_by_hand() -> None:
    heads = np.array([16.0])  # 128 heads over TP 8
    expected = 7168 * 1536 + 1536 * 16 * 192 + 7168 * 576 + 512 * 16 * 256 + 16 * 128 * 7168
    assert mla_weight_params(DSV3, heads)[0] == expected
    full = mla_weight_params(DSV3, np.array([128.0]))[0]
    assert full == DSV3.attention_param_count() - 1536 - 512  # less the two latent norms


def test_decode_reads_the_latent_cache_once_per_request() -> None:
    one = np.ones(1)
    _, small = mla_terms(
        DSV3, 16 * one, 4 * one, 1000 * one, decode=True, weight_bytes=1, kv_bytes=2
    )
    _, large = mla_terms(
        DSV3, 16 * one, 4 * one, 2000 * one, decode=True, weight_bytes=1, kv_bytes=2
    )
    assert large[0] - small[0] == 4 * 1000 * 576 * 2
    flops_16, _ = mla_terms(DSV3, 16 * one, one, 0 * one, decode=True, weight_bytes=1, kv_bytes=2)
    assert flops_16[0] == 2 * mla_weight_params(DSV3, 16 * one)[0] + 2 * 16 * (512 + 64 + 512)


def test_held_out_head_counts_on_h100() -> None:
    """Measured: decode 4.5 % median / 14.2 % P90 (bf16), prefill 2.3 / 5.9."""
    gpu = get_gpu("h100-sxm")
    for phase, limit in (("decode", 0.08), ("prefill", 0.05)):
        rows = mla.mla_rows(load_table(f"mla_{phase}", "h100-sxm"), "bf16", "bf16")
        assert set(rows["num_heads"]) == {1, 2, 4, 8, 16, 32, 64, 128}
        s = mla.holdout_heads(rows, gpu, phase, "bf16", "bf16")
        assert s["median_ape"] < limit and s["p90_ape"] < 0.25


def test_deepseek_is_priced_from_its_module_fit() -> None:
    cost = CostModel("deepseek-v3", "h100-sxm", tp=8, dtype="fp8")
    assert cost._mla.source == "h100-sxm/aiconfigurator-vllm"
    parts = cost.breakdown([(1, 2000)] * 32)
    assert parts["qkv_proj"] == 0.0 and parts["o_proj"] == 0.0  # inside the module
    module = cost._mla.module_time(32, 2000.0, decode=True)
    assert parts["attn_decode"] == pytest.approx(61 * module)
    h200 = CostModel("deepseek-v3", "h200", tp=8, dtype="fp8")
    assert h200._mla.source.startswith("h100-sxm/default on h200's spec sheet")
    assert h200.iteration_time([(1, 2000)] * 32) < cost.iteration_time([(1, 2000)] * 32)


def test_deepseek_v3_serves_on_eight_h200s_in_fp8() -> None:
    data = small_scenario(
        {
            "cluster.model": "deepseek-v3",
            "cluster.gpu": "h200",
            "cluster.tp": 8,
            "cluster.dtype": "fp8",
        }
    )
    results = cbsim.simulate(cbsim.load_scenario(data))
    assert results.summary["completed"] == len(results.requests)
    assert kv_bytes_per_token_per_gpu(DSV3, 8, "bf16") == 61 * 576 * 2
    with pytest.raises(cbsim.CbsimError, match="does not fit"):
        cbsim.load_scenario({**data, "cluster": {**data["cluster"], "dtype": "bf16"}})


def test_a_verify_step_adds_its_extra_tokens_projections_not_cache_reads() -> None:
    cost = CostModel("deepseek-v3", "h200", tp=8, dtype="fp8")
    plain = cost.attention_time(8, 8 * 2001, 8 * 2001.0, decode=True, requests=8)
    verify = cost.attention_time(32, 8 * 2004, 8 * 2004.0, decode=True, requests=8)
    one_each = cost.attention_time(32, 32 * 2001, 32 * 2001.0, decode=True, requests=32)
    assert plain < verify < one_each
