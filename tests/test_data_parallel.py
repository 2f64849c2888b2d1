"""Attention data parallelism (``cluster.dp``) for mixture-of-experts models: a replica of dp ranks
of tp GPUs, each rank with its own share of the batch, KV cache and attention, the experts spread
over all tp x dp GPUs and reached through two all-to-alls per MoE layer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import cbsim
from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.model_bytes import model_weight_bytes, weight_bytes_per_gpu
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.cost.engine_memory import MemoryInputs, plan_memory
from cbsim.cost.memory_rule import MemoryRule
from cbsim.cost.roofline import CostModel
from cbsim.engine.loop import Simulation
from cbsim.memory.kvcache import KVCache
from cbsim.run.preflight import gpu_layout
from cbsim.studies.calibration import comm
from cbsim.studies.calibration.data import load_table
from tests.conftest import BASE_SCENARIO

V3 = get_model("deepseek-v3")
SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _v3(tp: int, dp: int, ep: int) -> CostModel:
    return CostModel("deepseek-v3", "h200", tp=tp, dtype="fp8", ep=ep, dp=dp)


def test_each_gpu_holds_its_ranks_dense_slice_and_a_share_of_the_experts() -> None:
    experts = V3.num_moe_layers * V3.num_experts * V3.expert_param_count()
    # the fp8 checkpoint keeps its embedding and LM head in bf16
    dense = model_weight_bytes(V3, "fp8") - experts
    assert weight_bytes_per_gpu(V3, "fp8", 1, 8) == pytest.approx(dense + experts / 8)
    assert weight_bytes_per_gpu(V3, "fp8", 2, 4) == pytest.approx(dense / 2 + experts / 8)
    assert weight_bytes_per_gpu(V3, "fp8", 8, 1) == model_weight_bytes(V3, "fp8") / 8
    # each rank keeps its own requests' latents: 8 ranks of one GPU hold far more KV than one
    # tp-8 group, which keeps every latent on every GPU
    gpu = get_gpu("h200")
    flat = MemoryRule(kind="flat")
    dp8_plan = plan_memory(flat, MemoryInputs(V3, gpu, tp=1, dtype="fp8", fraction=0.9, dp=8))
    dp8 = KVCache.from_plan(dp8_plan, 0.0)
    tp8 = KVCache.from_plan(plan_memory(flat, MemoryInputs(V3, gpu, tp=8, dtype="fp8")), 0.0)
    per_rank = dp8_plan.kv_bytes // (16 * 61 * 576 * 2)
    assert dp8.total_blocks == 8 * per_rank
    assert dp8.total_blocks > 5 * tp8.total_blocks


def test_a_rank_prices_its_share_and_the_experts_see_every_token() -> None:
    dp8, one = _v3(1, 8, 8), CostModel("deepseek-v3", "h200", tp=1, dtype="fp8")
    batch = [(1, 3000)] * 64 + [(1, 500)] * 64
    share = [(1, 3000)] * 8 + [(1, 500)] * 8  # the same batch split evenly over 8 ranks
    ours, theirs = dp8.breakdown(batch), one.breakdown(share)
    for op in ("attn_decode", "elementwise", "lm_head"):
        assert ours[op] == pytest.approx(theirs[op], rel=1e-12)
    # the routed experts run all 128 tokens, spread over 8 GPUs (as tp 8 with ep 8 does)
    assert dp8._moe is not None and dp8._moe.ep == 8
    tp8 = _v3(8, 1, 8)
    assert tp8._moe is not None
    assert dp8._moe.routed_time(128) == tp8._moe.routed_time(128)
    # and reaching them costs two all-to-alls per MoE layer over the 8 GPUs
    calibration = dp8.calibration
    assert calibration is not None
    sent = 16 * V3.experts_per_token * V3.hidden_size * 2.0
    expected = V3.num_moe_layers * 2 * calibration.alltoall_time(8, sent)  # type: ignore[operator]
    assert ours["alltoall"] == pytest.approx(expected, rel=1e-12)
    assert tp8.breakdown(batch)["alltoall"] == 0.0  # ep over the tp group: all-reduces combine


def test_the_alltoall_curves_follow_nccls_measurements() -> None:
    rows = comm.alltoall_rows(load_table("nccl", "h100-sxm"))
    curves = comm.fit_alltoall(load_table("nccl", "h100-sxm"))
    assert set(curves) == {"2", "4", "8"}
    for num_gpus, group in rows.groupby("num_gpus"):
        curve = curves[str(num_gpus)]
        predicted = [curve(size) for size in group["size_bytes"]]
        errors = [abs(p / m - 1.0) for p, m in zip(predicted, group["latency_s"], strict=True)]
        assert sorted(errors)[len(errors) // 2] < 0.05  # de-noised, monotone: close to the data


def test_data_parallel_pays_where_tensor_parallel_latents_fill_the_kv_cache() -> None:
    """The shipped scenario (20 requests/s of chat on eight H200s) against TP 8 with EP 8."""
    scenario = cbsim.load_scenario(SCENARIOS / "deepseek-v3-dp-attention-h200.yaml")

    def run(tp: int, dp: int) -> dict[str, float]:
        cluster = scenario.cluster.model_copy(update={"tp": tp, "dp": dp})
        return cbsim.simulate(scenario.model_copy(update={"cluster": cluster})).summary

    tp8, dp8 = run(8, 1), run(1, 8)
    assert dp8["ttft_p50_s"] < tp8["ttft_p50_s"] / 5
    assert dp8["output_tokens_per_s"] > tp8["output_tokens_per_s"]


def test_a_rank_takes_the_schedulers_batch_limits() -> None:
    scenario = cbsim.load_scenario(
        {
            "workload": BASE_SCENARIO["workload"],
            "cluster": {"model": "qwen3-30b-a3b", "gpu": "h100-sxm", "tp": 1, "dp": 4, "ep": 4},
            "scheduler": {"kind": "sarathi", "max_batch_size": 64, "chunk_size": 256},
        }
    )
    sim = Simulation(scenario)
    config = sim.replicas[0].scheduler.config
    assert (config.max_batch_size, config.chunk_size) == (256, 1024)
    assert gpu_layout(scenario) == "h100-sxm, tp 1 x dp 4 x 1 replica = 4 GPUs in total"


@pytest.mark.parametrize(
    ("cluster", "field", "words"),
    [
        ({"model": "llama-3-8b", "dp": 2}, "dp", "has none"),
        ({"model": "deepseek-v3", "dtype": "fp8", "tp": 1, "dp": 8, "ep": 1}, "ep", "ep must be 8"),
    ],
)
def test_layouts_that_do_not_work_are_refused(
    cluster: dict[str, Any], field: str, words: str
) -> None:
    data = {"workload": BASE_SCENARIO["workload"], "cluster": {"gpu": "h200", **cluster}}
    with pytest.raises(CbsimError) as err:
        cbsim.simulate(cbsim.load_scenario(data))
    assert words in str(err.value) and field in str(err.value)


def test_capacity_cost_counts_every_gpu_of_a_replica() -> None:
    from cbsim.run.loading import Cluster

    assert (
        Cluster(model="deepseek-v3", gpu="h200", dtype="fp8", tp=2, dp=4, ep=8).gpus_per_replica
        == 8
    )


def test_a_dense_draft_head_drafts_for_its_ranks_share() -> None:
    from cbsim.engine.speculative.proposers import make_proposer
    from cbsim.run.loading import EagleProposer

    one_gpu = CostModel("deepseek-v3", "h200", tp=1, dtype="fp8")
    dp8 = make_proposer(EagleProposer(kind="eagle"), _v3(1, 8, 8))
    one = make_proposer(EagleProposer(kind="eagle"), one_gpu)
    assert dp8.draft_time_uniform(64, 2, 64 * 1000) == one.draft_time_uniform(8, 2, 8 * 1000)


def test_the_breakdown_adds_up_to_the_iteration() -> None:
    dp8 = _v3(1, 8, 8)
    batch = [(1, 3000)] * 100 + [(700, 0)]
    assert sum(dp8.breakdown(batch).values()) == pytest.approx(dp8.iteration_time(batch), rel=1e-12)


def test_a_request_stays_whole_on_one_rank() -> None:
    """A lone prompt runs on one rank: its attention is that rank's, whatever the other seven."""
    dp8, one = _v3(1, 8, 8), CostModel("deepseek-v3", "h200", tp=1, dtype="fp8")
    prompt = [(8192, 0)]
    assert dp8.breakdown(prompt)["attn_prefill"] == one.breakdown(prompt)["attn_prefill"]
    # two decodes over eight ranks: the busiest rank holds one of them
    pair = [(1, 4000), (1, 4000)]
    assert dp8.breakdown(pair)["attn_decode"] == one.breakdown([(1, 4000)])["attn_decode"]


def test_ranks_across_two_nodes_send_the_other_nodes_share_over_the_nics() -> None:
    """TP 1 x DP 16 on 8-GPU nodes (DeepSeek-V3 as TensorRT-LLM's wide-EP deployments run it):
    half of every GPU's all-to-all traffic leaves its node over its NIC, far slower than NVLink."""
    one_node = CostModel("deepseek-v3", "h200", tp=1, dtype="fp8", ep=8, dp=8)
    two_nodes = CostModel("deepseek-v3", "h200", tp=1, dtype="fp8", ep=16, dp=16)
    for tokens in (64, 2048):
        size = tokens * 8 * 7168 * 2.0  # eight experts' copies of each token's hidden state
        assert two_nodes.alltoall_time(size) > one_node.alltoall_time(size)
        assert two_nodes.alltoall_time(size) >= size / 2 / two_nodes.gpu.network_bandwidth
    scenario = cbsim.load_scenario(
        {
            "workload": {
                "num_requests": 20,
                "arrival": {"kind": "poisson", "rate": 1.0},
                "prompt_tokens": {"kind": "fixed", "value": 500},
                "output_tokens": {"kind": "fixed", "value": 20},
            },
            "cluster": {
                "model": "deepseek-v3",
                "gpu": "h200",
                "dtype": "fp8",
                "tp": 1,
                "dp": 16,
                "ep": 16,
            },
        }
    )
    assert scenario.cluster.gpus_per_replica == 16
    assert cbsim.simulate(scenario).summary["completed"] == 20
