"""Pipeline parallelism (``cluster.pp``): stages of tp GPUs, each a share of the layers, the batch
split into pp micro-batches in flight, one round through every stage per iteration."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cbsim
from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.model_bytes import (
    kv_bytes_per_token_per_gpu,
    model_weight_bytes,
    weight_bytes_per_gpu,
)
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.cost.batch_stats import BatchStats
from cbsim.cost.engine_memory import MemoryInputs, plan_memory
from cbsim.cost.memory_rule import MemoryRule
from cbsim.cost.roofline import CostModel
from cbsim.memory.kvcache import KVCache
from cbsim.run.preflight import gpu_layout
from tests.conftest import BASE_SCENARIO
from tests.pricing_checks import (
    assert_decode_prices_as_in_python,
    assert_fast_forward_compiled_equals_stepping,
    layout_id,
    with_serial_cpu,
)

L70 = get_model("llama-3-70b")


def test_a_stage_holds_its_layers_weights_and_keys() -> None:
    whole = model_weight_bytes(L70, "bf16")
    embedding = L70.embedding_param_count() * 2.0
    # 80 layers over 2 stages: 40 each, plus the embedding (as large as the LM head)
    layers = whole - 2 * embedding - L70.hidden_size * 2.0
    assert weight_bytes_per_gpu(L70, "bf16", 1, pp=2) == pytest.approx(layers / 2 + embedding)
    assert weight_bytes_per_gpu(L70, "bf16", 2, pp=4) == pytest.approx((layers / 4 + embedding) / 2)
    assert kv_bytes_per_token_per_gpu(L70, 1, "bf16", pp=2) == (
        kv_bytes_per_token_per_gpu(L70, 1, "bf16") / 2
    )
    # 61 layers over 4 stages: the largest holds 16
    v3 = get_model("deepseek-v3")
    assert kv_bytes_per_token_per_gpu(v3, 8, "bf16", pp=4) == pytest.approx(16 * 576 * 2)
    gpu = get_gpu("h100-sxm")
    rule = MemoryRule(kind="flat")  # weights and keys alone: a stage's share equals tp's
    pp2 = KVCache.from_plan(plan_memory(rule, MemoryInputs(L70, gpu, tp=1, pp=2)), 0.0)
    tp2 = KVCache.from_plan(plan_memory(rule, MemoryInputs(L70, gpu, tp=2)), 0.0)
    assert pp2.total_blocks == pytest.approx(tp2.total_blocks, rel=0.02)  # the same memory


def test_a_round_is_every_stage_running_every_micro_batch() -> None:
    one, pp2 = CostModel(L70, "h100-sxm", tp=1), CostModel(L70, "h100-sxm", tp=1, pp=2)
    batch = [(1, 2000)] * 64
    ours, theirs = pp2.breakdown(batch), one.breakdown([(1, 2000)] * 32)
    # the layers of the whole model at a micro-batch of 32, the LM head once per micro-batch
    for op in ("qkv_proj", "o_proj", "mlp", "attn_decode"):
        assert ours[op] == pytest.approx(theirs[op], rel=1e-12)
    assert ours["lm_head"] == pytest.approx(2 * theirs["lm_head"], rel=1e-12)
    assert ours["pp_send"] > 0.0
    assert sum(ours.values()) == pytest.approx(pp2.iteration_time(batch), rel=1e-12)
    # no faster per token than the whole model on one GPU; slower per token than tp 2
    tp2 = CostModel(L70, "h100-sxm", tp=2)
    assert pp2.iteration_time([(1, 2000)]) > one.iteration_time([(1, 2000)])
    assert pp2.iteration_time(batch) > tp2.iteration_time(batch)


def test_stages_beyond_a_node_send_over_the_nic() -> None:
    inside = CostModel("deepseek-v3", "h100-sxm", tp=4, dtype="fp8", pp=2)
    across = CostModel("deepseek-v3", "h100-sxm", tp=8, dtype="fp8", pp=2)
    gpu = get_gpu("h100-sxm")
    assert inside._pp_bandwidth == gpu.nvlink_bandwidth
    assert across._pp_bandwidth == gpu.network_bandwidth == 50e9
    assert across.pp_send_time(4096) > inside.pp_send_time(4096)


def _scenario(**cluster: Any) -> cbsim.Scenario:
    return cbsim.load_scenario(
        {**BASE_SCENARIO, "cluster": {"gpu": "h100-sxm", "dtype": "fp8", **cluster}}
    )


def test_two_nodes_of_h100s_serve_deepseek_v3_with_pipeline_stages() -> None:
    with pytest.raises(CbsimError, match="does not fit"):
        cbsim.simulate(_scenario(model="deepseek-v3", tp=8))
    results = cbsim.simulate(_scenario(model="deepseek-v3", tp=8, pp=2))
    assert results.summary["completed"] == BASE_SCENARIO["workload"]["num_requests"]
    assert gpu_layout(_scenario(model="deepseek-v3", tp=8, pp=2)) == (
        "h100-sxm, tp 8 x pp 2 x 1 replica = 16 GPUs in total"
    )


@pytest.mark.parametrize(
    ("cluster", "words"),
    [
        ({"model": "llama-3.2-1b", "pp": 32}, "32 stages for 16 layers"),
        ({"model": "qwen3-30b-a3b", "dp": 2, "ep": 2, "pp": 2}, "not modelled"),
    ],
)
def test_layouts_that_do_not_work_are_refused(cluster: dict[str, Any], words: str) -> None:
    with pytest.raises(CbsimError, match=words):
        _scenario(**cluster)


def test_a_mixture_of_experts_breakdown_keeps_its_parts_apart() -> None:
    pp2 = CostModel("deepseek-v3", "h100-sxm", tp=8, dtype="fp8", pp=2)
    batch = [(1, 1000)] * 10 + [(900, 0)]
    parts = pp2.breakdown(batch)
    assert all(value >= 0.0 for value in parts.values())
    assert parts["moe"] > 0.0
    assert sum(parts.values()) == pytest.approx(pp2.iteration_time(batch), rel=1e-12)


def test_a_lone_request_is_never_split_between_micro_batches() -> None:
    """One prompt passes the stages one after another: no faster than on one group of GPUs."""
    prompt = [(7000, 0)]
    one = CostModel("llama-3-8b", "h100-sxm", tp=1).iteration_time(prompt)
    for pp in (2, 4):
        piped = CostModel("llama-3-8b", "h100-sxm", tp=1, pp=pp)
        assert piped.iteration_time(prompt) >= one
        assert piped.iteration_time([(1, 32000)]) >= CostModel(
            "llama-3-8b", "h100-sxm"
        ).iteration_time([(1, 32000)])


@pytest.mark.parametrize(
    "layout",
    [
        {"model": "llama-3-70b", "gpu": "h100-sxm", "tp": 2, "pp": 2},
        {"model": "llama-3-70b", "gpu": "h200", "tp": 4, "pp": 3, "engine": "sglang"},
        {"model": "qwen2.5-14b", "gpu": "b200", "tp": 1, "pp": 4, "engine": "tensorrt-llm"},
        {"model": "mixtral-8x7b", "gpu": "h200", "tp": 2, "dp": 2, "ep": 4},
        {"model": "qwen3-30b-a3b", "gpu": "a100-80gb", "tp": 1, "dp": 4, "ep": 4},
    ],
    ids=layout_id,
)
@pytest.mark.parametrize("serial_cpu", [False, True], ids=["engine-step", "serial-cpu-step"])
def test_a_decode_run_prices_stages_and_ranks_compiled_as_in_python(
    layout: dict[str, Any], serial_cpu: bool
) -> None:
    """A plain decode run's steps on stages or ranks (a share of the batch each) priced compiled
    give CostModel.decode_time's float, bit for bit: batch sizes that do not divide into the
    shares, one request, no keys yet, tables extended as larger batches come; and with an
    engine step whose CPU work is not overlapped and outweighs the kernels (the shipped
    engines' never shows), so the share its step counts shows."""
    cost = with_serial_cpu(CostModel(**layout)) if serial_cpu else CostModel(**layout)
    rng = np.random.default_rng(7)
    for top in (40, 700):
        compiled = cost.compiled_decode(top)
        assert compiled is not None and compiled.split == cost._split > 1
        requests = rng.integers(1, top + 1, 400)
        requests[:4] = [1, 2, 3, top]
        kv_tokens = requests * rng.integers(1, 5000, 400)
        kv_tokens[:2] = 0
        assert_decode_prices_as_in_python(cost, compiled, requests, kv_tokens)
    assert cost.compiled(10) is None  # the other kernels still price it in Python


@pytest.mark.parametrize("cluster", [{"pp": 2}, {"pp": 3}])
def test_a_pipelined_replica_fast_forwards_as_it_steps(cluster: dict[str, Any]) -> None:
    data = {
        **BASE_SCENARIO,
        "cluster": {**BASE_SCENARIO["cluster"], **cluster},
        "workload": {**BASE_SCENARIO["workload"], "num_requests": 120},
        "scheduler": {"kind": "sarathi", "max_batch_size": 48},
    }
    assert_fast_forward_compiled_equals_stepping(data)


@pytest.mark.parametrize(
    "layout",
    [
        {"model": "llama-3-70b", "gpu": "h100-sxm", "tp": 2, "pp": 3},
        {"model": "mixtral-8x7b", "gpu": "b200", "tp": 1, "dp": 4, "ep": 4, "engine": "sglang"},
    ],
    ids=["pp3", "dp4"],
)
@pytest.mark.parametrize("serial_cpu", [False, True], ids=["engine-step", "serial-cpu-step"])
def test_a_stepped_iteration_on_shares_is_priced_compiled_as_in_python(
    layout: dict[str, Any], serial_cpu: bool
) -> None:
    """Prefill chunks beside decodes and verify entries, on stages or ranks: time_stats (one
    compiled call) gives python_time_stats' float, empty groups and lone requests included (and
    with a step whose CPU work shows, as above)."""
    cost = with_serial_cpu(CostModel(**layout)) if serial_cpu else CostModel(**layout)
    rng = np.random.default_rng(11)
    batches: list[list[tuple[int, int]]] = [[(1, 0)], [(900, 0)], [(3, 100), (1, 7)]]
    for _ in range(300):
        decodes = [(1, int(c)) for c in rng.integers(0, 9000, int(rng.integers(0, 50)))]
        prefills = [
            (int(q), int(c)) for q, c in rng.integers(1, 3000, (int(rng.integers(0, 8)), 2))
        ]
        batches.append(decodes + prefills or [(1, 1)])
    for batch in batches:
        stats = BatchStats.from_pairs(batch)
        assert cost.time_stats(stats) == cost.python_time_stats(stats), batch
    assert cost._stepped not in (None, False)  # it was priced compiled
