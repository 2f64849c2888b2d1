"""Names as other tools spell them: AI Configurator's systems and backends, Hugging Face ids, and
the message for a name the catalog does not know (the nearest catalog names)."""

from __future__ import annotations

import pytest

from cbsim import load_scenario
from cbsim.catalog.hardware import GPU_ALIASES, GPU_NAMES, get_gpu
from cbsim.catalog.models import find_model, get_model, model_spelling
from cbsim.common.errors import CbsimError
from cbsim.cost.engine_profile import canonical_engine, load_engine_profile
from tests.conftest import small_scenario

AIC_SYSTEMS = {
    "h200_sxm": "h200",
    "h100_sxm": "h100-sxm",
    "h100_pcie": "h100-pcie",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb200_sxm": "gb200",
    "a100_sxm": "a100-80gb",
    "a100_pcie": "a100-80gb-pcie",
    "l40s": "l40s",
    "l4": "l4",
    "h20_sxm": "h20",
    "rtx_5090": "rtx-5090",
}
"""AI Configurator's ``--system`` names (``aiconfigurator cli default --help``) and the catalog GPU
each is; its A30 and GB300 have no catalog GPU."""


@pytest.mark.parametrize(("system", "gpu"), sorted(AIC_SYSTEMS.items()))
def test_ai_configurator_systems_are_catalog_gpus(system: str, gpu: str) -> None:
    assert get_gpu(system).name == gpu
    assert get_gpu(system.upper()).name == gpu


def test_h200_sxm_is_the_h200_in_a_scenario_not_a_suggested_h100() -> None:
    scenario = load_scenario(small_scenario({"cluster.gpu": "h200_sxm"}))
    assert scenario.cluster.gpu == "h200"


def test_every_gpu_alias_names_a_catalog_gpu() -> None:
    assert set(GPU_ALIASES.values()) <= set(GPU_NAMES)
    assert not set(GPU_ALIASES) & set(GPU_NAMES)


def test_unknown_gpu_suggests_and_lists_ai_configurator_names() -> None:
    with pytest.raises(CbsimError) as info:
        get_gpu("gb300")
    message = str(info.value)
    assert "unknown gpu 'gb300'" in message and "h200_sxm" in message
    assert "did you mean" in message


@pytest.mark.parametrize("spelling", ["trtllm", "TRTLLM", "trt-llm", "tensorrt_llm"])
def test_trtllm_is_tensorrt_llm(spelling: str) -> None:
    assert canonical_engine(spelling) == "tensorrt-llm"
    assert canonical_engine(f"{spelling}@0.20") == "tensorrt-llm@0.20"
    assert load_engine_profile(spelling) == load_engine_profile("tensorrt-llm")
    scenario = load_scenario(small_scenario({"cluster.engine": spelling}))
    assert scenario.cluster.engine == "tensorrt-llm"


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("Qwen/Qwen3-32B", "qwen3-32b"),  # AI Configurator's --model
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),
    ],
)
def test_hugging_face_ids_name_catalog_models(spelling: str, name: str) -> None:
    match = find_model(spelling)
    assert match is not None and match.entry.name == name
    assert get_model(spelling).num_layers == get_model(name).num_layers
    scenario = load_scenario(small_scenario({"cluster.model": spelling}))
    assert scenario.cluster.model == model_spelling(spelling)


@pytest.mark.parametrize(
    ("name", "nearest"),
    [
        ("Qwen/Qwen3-32B-GGUF", "qwen3-32b"),  # AWQ ids are int4 checkpoints now
        ("meta-llama/Llama-3.1-8B-Instruct-GGUF", "llama-3.1-8b"),
        ("QWEN3_32B", "qwen3-32b"),  # AI Configurator's model names of 2025
        ("LLAMA3.1_70B", "llama-3.1-70b"),
        ("MOE_Mixtral8x7B", "mixtral-8x7b"),
        ("QWEN3_235B", "qwen3-235b-a22b"),
    ],
)
def test_unknown_ids_suggest_the_nearest_catalog_names(name: str, nearest: str) -> None:
    with pytest.raises(CbsimError) as info:
        get_model(name)
    message = str(info.value)
    assert f"unknown model {name!r}; did you mean {nearest!r}" in message
    assert "cbsim catalog models" in message and "config.json" in message
    assert "nothing is downloaded" in message
