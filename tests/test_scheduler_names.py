"""The prefill-first scheduler by its name, ``vllm`` as a deprecated alias, and the run naming
each scheduler as its engine calls it (issue 37: ``kind: vllm`` read as vLLM's scheduler while
vLLM V1 runs ``sarathi``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import cbsim
from cbsim.cli.commands import describe
from cbsim.engine.scheduler.names import scheduler_label
from cbsim.run.simulate import scenario_warnings
from tests.conftest import small_scenario

SCENARIOS = sorted(Path(__file__).resolve().parent.parent.glob("scenarios/*.yaml"))


def test_the_old_name_runs_prefill_first_and_warns_naming_both_schedulers() -> None:
    scenario = cbsim.load_scenario(small_scenario({"scheduler": {"kind": "vllm"}}))
    assert scenario.scheduler.kind == "prefill_first"
    assert scenario.scheduler.deprecated_kind == "vllm"
    (warning,) = [w for w in scenario_warnings(scenario) if "deprecated" in w]
    assert "scheduler.kind: vllm" in warning
    assert "prefill_first" in warning and "sarathi" in warning


def test_the_new_name_gives_no_deprecation_warning_and_the_same_batches() -> None:
    new = cbsim.load_scenario(small_scenario({"scheduler": {"kind": "prefill_first"}}))
    old = cbsim.load_scenario(small_scenario({"scheduler": {"kind": "vllm"}}))
    assert not [w for w in scenario_warnings(new) if "deprecated" in w]
    assert new.scheduler.model_dump() == old.scheduler.model_dump()
    assert cbsim.simulate(new).summary["ttft_p50_s"] == cbsim.simulate(old).summary["ttft_p50_s"]


def test_a_written_scenario_names_the_kind_by_its_new_name() -> None:
    scenario = cbsim.load_scenario(small_scenario({"scheduler": {"kind": "vllm"}}))
    written = yaml.safe_load(yaml.safe_dump(scenario.model_dump(mode="json")))
    assert written["scheduler"]["kind"] == "prefill_first"


def test_a_pool_may_use_the_old_name_and_is_warned() -> None:
    data = small_scenario()
    data["cluster"]["pools"] = [
        {"replicas": 1, "scheduler": {"kind": "vllm", "watermark": 0.02}},
        {"replicas": 1},
    ]
    data["cluster"].pop("replicas", None)
    scenario = cbsim.load_scenario(data)
    assert any("cluster.pools[0].scheduler.kind: vllm" in w for w in scenario_warnings(scenario))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_no_shipped_scenario_uses_a_deprecated_name(path: Path) -> None:
    assert cbsim.load_scenario(path).scheduler.deprecated_kind is None


def test_the_quick_start_runs_the_engines_own_scheduler() -> None:
    scenario = cbsim.load_scenario("scenarios/chat-llama3-8b-h100.yaml")
    assert scenario.scheduler.kind == "sarathi"
    assert "scheduler sarathi (vLLM V1's scheduler" in describe(scenario)


def test_a_scheduler_its_engine_does_not_run_is_said_to_be_so() -> None:
    assert scheduler_label("prefill_first", "vllm", "sarathi") == (
        "prefill_first (whole prompts before decodes, as vLLM V0 and SGLang schedule; "
        "not vllm's own, sarathi)"
    )
    assert scheduler_label("prefill_first", "sglang", "prefill_first").startswith(
        "prefill_first (SGLang's scheduler"
    )
    assert scheduler_label("orca", "tensorrt-llm", "orca").startswith(
        "orca (TensorRT-LLM's in-flight batching"
    )
