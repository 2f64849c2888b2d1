"""Local attention (gpt-oss's sliding windows, Llama 4's chunks): its layers read at most the last
``sliding_window`` tokens of each request; full-attention layers read them all."""

from __future__ import annotations

import pytest

import cbsim
from cbsim.cost.roofline import CostModel, windowed
from tests.conftest import small_scenario


def test_windowed_group_totals() -> None:
    # 4 decode requests of 1,000 cached tokens each, window 128
    assert windowed(4, 4004, 4004.0, 4, 128, decode=True) == (4 * 128 + 4, 4004.0 * 516 / 4004)
    # contexts within the window: unchanged
    assert windowed(4, 404, 404.0, 4, 128, decode=True) == (404, 404.0)
    # a 2,048-token prefill: each token attends to at most 128 keys
    assert windowed(2048, 2048, 2048 * 2049 / 2, 1, 128, decode=False) == (2048, 2048.0 * 128)


def test_local_layers_cost_less_at_long_contexts_only() -> None:
    cost = CostModel("gpt-oss-120b", "h100-sxm", tp=4)
    full = cost.attention_time(32, 32 * 8001, 32 * 8001.0, decode=True, requests=32)
    local = cost.attention_time(32, 32 * 129, 32 * 129.0, decode=True, requests=32)
    parts = cost.breakdown([(1, 8000)] * 32)
    assert parts["attn_decode"] == pytest.approx(18 * full + 18 * local)
    short = cost.breakdown([(1, 100)] * 32)["attn_decode"]
    assert short == pytest.approx(
        36 * cost.attention_time(32, 32 * 101, 32 * 101.0, decode=True, requests=32)
    )


def test_gpt_oss_and_llama_4_scout_simulate() -> None:
    for model, tp in (("gpt-oss-120b", 4), ("llama-4-scout", 4)):
        data = small_scenario({"cluster.model": model, "cluster.tp": tp})
        results = cbsim.simulate(cbsim.load_scenario(data))
        assert results.summary["completed"] == len(results.requests)
