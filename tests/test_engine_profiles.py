"""Engine profiles: kernels, step overhead with overlap, front end, defaults, fitted range."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import cbsim
from cbsim.common.errors import CbsimError
from cbsim.cost import CostModel
from cbsim.cost.engine_profile import (
    EngineProfile,
    FittedRange,
    StepOverhead,
    engine_names,
    load_engine_profile,
    read_engine_profile,
    write_engine_profile,
)
from cbsim.engine.cost_models import cost_model_for
from cbsim.engine.fleet import scenario_memory_plans
from cbsim.run.loading import load_scenario
from tests.conftest import small_scenario

DECODE_64 = [(1, 1000)] * 64


def test_shipped_engines_load_and_none_is_bare() -> None:
    names = engine_names()
    for name in ("vllm", "sglang", "tensorrt-llm", "none"):
        assert name in names
        assert load_engine_profile(name).engine == name
    bare = load_engine_profile("none")
    assert bare.overhead.is_zero and bare.frontend.is_zero
    assert bare.defaults.scheduler.values() == {}


def test_unknown_engine_lists_the_known_ones() -> None:
    with pytest.raises(CbsimError, match=r"unknown engine 'tensorrt'; known: .*tensorrt-llm"):
        load_engine_profile("tensorrt")


def test_engine_none_adds_nothing_to_the_kernels() -> None:
    cost = CostModel("llama-3-8b", "h100-sxm", engine="none")
    parts = cost.breakdown(DECODE_64)
    assert parts["overhead"] == 0.0
    assert cost.iteration_time(DECODE_64) == pytest.approx(sum(parts.values()), rel=1e-12)


@pytest.mark.parametrize("overlap", [True, False])
def test_step_time_overlaps_cpu_work_only_when_the_engine_does(overlap: bool) -> None:
    step = StepOverhead(cpu_s=2e-3, cpu_per_request_s=1e-5, overlap=overlap, serial_s=1e-4)
    cpu = 2e-3 + 64 * 1e-5
    for gpu in (1e-3, 5e-3):
        expected = (max(gpu, cpu) if overlap else gpu + cpu) + 1e-4
        assert step.step_time(gpu, 64, 64) == pytest.approx(expected)
        assert step.added_time(gpu, 64, 64) == pytest.approx(expected - gpu)


def test_breakdown_sums_to_the_iteration_time_with_overlap(tmp_path: Path) -> None:
    profile = EngineProfile(
        engine="test",
        overhead=StepOverhead(cpu_s=0.05, cpu_per_request_s=1e-4, overlap=True, serial_s=2e-4),
    )
    cost = CostModel("llama-3-8b", "h100-sxm", engine=profile)
    parts = cost.breakdown(DECODE_64)
    total = cost.iteration_time(DECODE_64)
    assert sum(parts.values()) == pytest.approx(total, rel=1e-12)
    # the CPU's 56 ms exceed the kernels' few ms: the step is the CPU's time plus the serial part
    assert total == pytest.approx(0.05 + 64e-4 + 2e-4)


def test_decode_time_equals_time_stats_under_overlap() -> None:
    profile = EngineProfile(
        engine="test", overhead=StepOverhead(cpu_s=4e-3, cpu_per_request_s=2e-5, overlap=True)
    )
    cost = CostModel("llama-3-8b", "h100-sxm", engine=profile)
    for batch in (1, 8, 200):
        entries = [(1, 900)] * batch
        assert cost.decode_time(batch, batch * 901) == cost.iteration_time(entries)


def test_cost_model_default_prices_like_a_run() -> None:
    scenario = load_scenario(small_scenario({"cluster.tp": 2, "cluster.model": "llama-3-70b"}))
    run_cost = cost_model_for(scenario)
    api_cost = CostModel("llama-3-70b", "h100-sxm", tp=2)
    batch = [(1, 2000)] * 16 + [(512, 0)]
    assert api_cost.iteration_time(batch) == run_cost.iteration_time(batch)
    assert api_cost.engine.engine == "vllm"
    bare = CostModel.bare_roofline("llama-3-70b", "h100-sxm", tp=2)
    assert bare.calibration is None and bare.overhead.is_zero
    explicit = CostModel("llama-3-70b", "h100-sxm", tp=2, calibration="none", engine="none")
    assert bare.iteration_time(batch) == explicit.iteration_time(batch)
    assert bare.iteration_time(batch) != api_cost.iteration_time(batch)


def test_version_1_files_still_load(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "engine": "mine",
                "overhead_s": 0.002,
                "overhead_per_request_s": 1e-5,
                "overhead_per_token_s": 0.0,
            }
        )
    )
    profile = read_engine_profile(path)
    assert profile.overhead.cpu_s == 0.002 and not profile.overhead.overlap
    cost = CostModel("llama-3-8b", "h100-sxm", engine=str(path))
    gpu = CostModel("llama-3-8b", "h100-sxm", engine="none").iteration_time(DECODE_64)
    assert cost.iteration_time(DECODE_64) == pytest.approx(gpu + 0.002 + 64e-5)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not valid JSON"),
        ("[]", "JSON object"),
        ('{"schema_version": 9, "engine": "x"}', "schema_version 9"),
        ('{"schema_version": 2, "engine": "x", "overhead": {"cpu_s": -1}}', "overhead.cpu_s"),
        ('{"schema_version": 2, "engine": "x", "turbo": true}', "turbo"),
    ],
)
def test_bad_profiles_name_the_file_and_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(CbsimError, match=message) as info:
        read_engine_profile(path)
    assert str(path) in str(info.value)


def test_not_utf8_profile_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(CbsimError, match="not UTF-8"):
        read_engine_profile(path)


# --------------------------------------------------------------------------- defaults


def test_engine_defaults_fill_what_the_scenario_leaves_unset() -> None:
    data = small_scenario({"cluster.engine": "tensorrt-llm"})
    del data["scheduler"]
    scenario = load_scenario(data)
    assert scenario.scheduler.kind == "orca"
    assert scenario.scheduler.max_batched_tokens == 8192
    assert scenario.scheduler.block_size == 32
    # what a sweep varies: the user's keys only, so another engine gets its own defaults
    assert "scheduler" not in scenario.model_dump(exclude_unset=True)
    data["cluster"]["engine"] = "vllm"
    assert load_scenario(data).scheduler.kind == "sarathi"


def test_scenario_keys_win_over_engine_defaults() -> None:
    data = small_scenario({"cluster.engine": "tensorrt-llm", "scheduler.block_size": 16})
    scenario = load_scenario(data)
    assert scenario.scheduler.kind == "prefill_first"  # set by the small scenario
    assert scenario.scheduler.block_size == 16
    assert scenario.scheduler.max_batched_tokens == 8192


def test_vllm_budget_depends_on_the_gpu() -> None:
    data = small_scenario({"cluster.engine": "vllm"})
    del data["scheduler"]
    assert load_scenario(data).scheduler.chunk_size == 8192
    data["cluster"]["gpu"] = "a100-80gb"
    small = load_scenario(data).scheduler
    assert (small.chunk_size, small.max_batch_size) == (2048, 256)


@pytest.mark.parametrize(
    ("engine", "kv"), [("vllm", "bf16"), ("sglang", "bf16"), ("tensorrt-llm", "fp8")]
)
def test_fp8_checkpoints_get_the_engines_kv_dtype(engine: str, kv: str) -> None:
    scenario = load_scenario(small_scenario({"cluster.engine": engine, "cluster.dtype": "fp8"}))
    assert scenario.cluster.effective_kv_dtype == kv
    assert cost_model_for(scenario).kv_dtype == kv
    explicit = small_scenario({"cluster.engine": engine, "cluster.dtype": "fp8"})
    explicit["cluster"]["kv_dtype"] = "bf16"
    assert load_scenario(explicit).cluster.effective_kv_dtype == "bf16"


def test_each_engine_takes_its_fraction_of_its_own_base() -> None:
    base = small_scenario({"cluster.model": "llama-3-70b", "cluster.tp": 4})
    plans = {}
    for engine in ("vllm", "sglang", "tensorrt-llm"):
        scenario = load_scenario({**base, "cluster": {**base["cluster"], "engine": engine}})
        plans[engine] = scenario_memory_plans(scenario)[0][1]
    # vLLM: 0.9 of all memory; TensorRT-LLM: 0.9 of what is free after the weights and its dry
    # run; SGLang: its default mem_fraction_static of the memory free once it starts
    vllm, trt, sglang = plans["vllm"], plans["tensorrt-llm"], plans["sglang"]
    assert vllm.budget_bytes == pytest.approx(0.9 * vllm.total_bytes)
    free = trt.total_bytes - trt.weight_bytes - trt.activation_bytes - trt.non_torch_bytes
    assert trt.kv_bytes == pytest.approx(0.9 * (free - trt.cuda_graph_bytes))
    assert (vllm.fraction_flag, trt.fraction_flag) == (
        "gpu_memory_utilization",
        "free_gpu_memory_fraction",
    )
    assert sglang.fraction_flag == "mem_fraction_static" and 0.7 < sglang.fraction < 0.95


def test_fitted_range_warning() -> None:
    profile = EngineProfile(engine="x", fitted_range=FittedRange(batch_size=(1, 128)))
    assert profile.outside_fitted_range(200) == ""
    assert "beyond the 1-128" in profile.outside_fitted_range(300)


def test_summary_warns_far_outside_the_fitted_range(tmp_path: Path) -> None:
    profile = load_engine_profile("vllm").model_copy(
        update={"fitted_range": FittedRange(batch_size=(1, 2))}
    )
    path = write_engine_profile(profile, tmp_path / "narrow.json")
    results = cbsim.simulate(load_scenario(small_scenario({"cluster.engine": str(path)})))
    assert "beyond the 1-2" in results.summary["warnings"]


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    profile = load_engine_profile("tensorrt-llm")
    path = write_engine_profile(profile, tmp_path / "copy.json")
    assert read_engine_profile(path) == profile
    assert not list(tmp_path.glob(".*.tmp"))


def test_draft_model_runs_on_the_targets_kernels() -> None:
    scenario = load_scenario(
        small_scenario({"speculative": {"enabled": True, "proposer": {"kind": "draft_model"}}})
    )
    from cbsim.engine.speculative.decoder import SpeculativeDecoding

    target = cost_model_for(scenario)
    spec = SpeculativeDecoding(scenario.speculative, target, scenario.seed, None)
    draft_cost = spec.proposer.cost  # type: ignore[attr-defined]
    assert draft_cost.calibration is target.calibration
    assert draft_cost.overhead.cpu_per_request_s == 0.0
    assert np.isclose(draft_cost.overhead.cpu_s, 0.2 * target.overhead.cpu_s)
