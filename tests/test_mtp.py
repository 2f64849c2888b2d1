"""Multi-token prediction (``proposer: {kind: mtp, layers: N}``): DeepSeek-V3's MTP module as a
proposer — layers of the target's own architecture over its hidden state, sharing its embedding
and LM head — priced, sized and simulated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cbsim
from cbsim.catalog.model_bytes import kv_bytes_per_token_per_gpu
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.cost.roofline import CostModel
from cbsim.engine.speculative.proposers import MtpModule, make_proposer
from cbsim.run.loading import MtpProposer

V3 = get_model("deepseek-v3")
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _target(tp: int = 8, dp: int = 1, ep: int = 1) -> CostModel:
    return CostModel(V3, "h200", tp=tp, dtype="fp8", ep=ep, dp=dp)


def test_the_module_is_one_of_the_targets_layers_and_a_projection() -> None:
    mtp = make_proposer(MtpProposer(kind="mtp"), _target())
    assert isinstance(mtp, MtpModule)
    assert (mtp.shape.num_layers, mtp.shape.num_moe_layers) == (1, 1)
    # fp8: one byte per weight; DeepSeek-V3's MoE layer (about 11.4B parameters) and the
    # 2h x h projection, spread over 8 GPUs
    layer = V3.moe_layer_param_count() + 2 * V3.hidden_size * V3.hidden_size
    assert mtp.weight_bytes_per_gpu() * 8 == pytest.approx(layer, rel=0.01)
    assert mtp.kv_bytes_per_token_per_gpu() == kv_bytes_per_token_per_gpu(V3, 8, "bf16") / 61
    two = make_proposer(MtpProposer(kind="mtp", layers=2), _target())
    assert two.weight_bytes_per_gpu() > 1.9 * mtp.weight_bytes_per_gpu()


def test_a_draft_step_costs_a_layer_and_the_lm_head_not_the_model() -> None:
    target = _target()
    mtp = make_proposer(MtpProposer(kind="mtp"), target)
    two = make_proposer(MtpProposer(kind="mtp", layers=2), target)
    step = mtp.draft_time_uniform(64, 1, 64 * 2000)
    # one of DeepSeek-V3's 61 layers, the projection, the LM head and a draft step's overhead
    full = target.decode_time(64, 64 * 2001)
    assert full / 61 < step < full / 10
    assert two.draft_time_uniform(64, 1, 64 * 2000) > step
    assert mtp.draft_time_uniform(64, 3, 64 * 2000) > 2.9 * step  # one step per draft token


def test_with_data_parallel_ranks_the_module_spreads_like_the_target() -> None:
    mtp = make_proposer(MtpProposer(kind="mtp"), _target(tp=1, dp=8, ep=8))
    assert isinstance(mtp, MtpModule) and mtp.cost.dp == 8 and mtp.cost.ep == 8
    assert mtp.cost.breakdown([(1, 2000)] * 64)["alltoall"] > 0.0


def _scenario(**speculative: Any) -> cbsim.Scenario:
    """``deepseek-v3-h200.yaml`` (TP 8, 2 requests/s of chat; its first 150 requests) with these
    speculative settings."""
    data = cbsim.load_scenario(SCENARIOS / "deepseek-v3-h200.yaml").model_dump(exclude_unset=True)
    data["workload"]["num_requests"] = 150
    return cbsim.load_scenario({**data, "speculative": speculative})


def test_mtp_speculation_lowers_tpot_at_light_load() -> None:
    plain = cbsim.simulate(_scenario(enabled=False)).summary
    spec = _scenario(
        enabled=True,
        proposer={"kind": "mtp", "layers": 1},
        acceptance={"kind": "per_request", "mean": 0.85, "concentration": 8},
        policy={"kind": "fixed", "k": 1},
    )
    fast = cbsim.simulate(spec).summary
    assert fast["tpot_p50_s"] < 0.8 * plain["tpot_p50_s"]
    assert 0.95 < fast["mean_k"] <= 1.0  # a request's last token drafts nothing


def test_layers_out_of_range_are_refused() -> None:
    with pytest.raises(CbsimError, match="layers"):
        _scenario(enabled=True, proposer={"kind": "mtp", "layers": 0})


def test_an_mtp_module_of_a_sliding_window_model_is_refused_with_the_reason() -> None:
    target = CostModel("gpt-oss-120b", "h100-sxm", tp=2, dtype="mxfp4")
    with pytest.raises(CbsimError, match="local- and full-attention"):
        make_proposer(MtpProposer(kind="mtp"), target)
