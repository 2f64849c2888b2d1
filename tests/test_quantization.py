"""Integer-quantized checkpoints (cbsim.catalog.quantization): int4 (AWQ, GPTQ, w4a16) and int8 (W8A8)
weights as checkpoints store them, their names and ids, config.json's quantization_config,
pricing and the GPUs that run them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.model_bytes import model_weight_bytes, weight_bytes_per_gpu
from cbsim.catalog.model_details import render
from cbsim.catalog.models import find_model, get_model
from cbsim.catalog.quantization import (
    INT4_BYTES,
    canonical_dtype,
    format_of_quantization_config,
    split_quantized_id,
)
from cbsim.common.errors import CbsimError
from cbsim.cost import CostModel
from cbsim.engine.cost_models import transfer_warnings
from cbsim.run.loading import load_scenario

# Llama 3.1 8B by hand: per layer q/k/v/o 4096 x (4096 + 2 x 1024) + 4096 x 4096 and the MLP
# 3 x 4096 x 14336; 32 layers. Embedding and LM head 128256 x 4096 each; 65 RMSNorms of 4096.
LINEAR = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
OTHER = 2 * 128256 * 4096 + 65 * 4096


def test_int4_weights_by_hand() -> None:
    model = get_model("llama-3.1-8b")
    assert model.param_count() == LINEAR + OTHER
    # 4-bit values, and a 16-bit scale and a 4-bit zero point per 128 weights
    assert INT4_BYTES == 0.5 + 2 / 128 + 0.5 / 128
    expected = LINEAR * (0.5 + 2.5 / 128) + OTHER * 2
    assert model_weight_bytes(model, "int4") == pytest.approx(expected, rel=1e-12)
    assert weight_bytes_per_gpu(model, "int4", 2) == pytest.approx(expected / 2, rel=1e-12)


def test_int8_weights_by_hand() -> None:
    model = get_model("llama-3.1-8b")
    assert model_weight_bytes(model, "int8") == pytest.approx(LINEAR + OTHER * 2, rel=1e-12)


def test_aliases_name_the_formats() -> None:
    assert canonical_dtype("AWQ") == "int4"
    assert canonical_dtype("gptq_marlin") == "int4"
    assert canonical_dtype("w4a16") == "int4"
    assert canonical_dtype("W8A8") == "int8"
    assert canonical_dtype("nvfp4") == "fp4"
    assert canonical_dtype(8) == 8


@pytest.mark.parametrize(
    ("typed", "name", "weights"),
    [
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "qwen2.5-7b", "int4"),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "qwen2.5-7b", "int4"),
        ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "llama-3.1-8b", "int4"),
        ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8", "llama-3.1-8b", "int8"),
        ("RedHatAI/Meta-Llama-3.1-70B-Instruct-quantized.w4a16", "llama-3.1-70b", "int4"),
        ("Qwen/Qwen3-30B-A3B-GPTQ-Int4", "qwen3-30b-a3b", "int4"),
        ("kaitchup/Phi-4-AutoRound-GPTQ-4bit", "phi-4", "int4"),
    ],
)
def test_quantized_ids_find_their_model_and_format(typed: str, name: str, weights: str) -> None:
    match = find_model(typed)
    assert match is not None
    assert (match.entry.name, match.checkpoint_dtype, match.spelling) == (name, weights, typed)


def test_a_suffix_on_an_unknown_model_finds_nothing() -> None:
    assert split_quantized_id("AWQ") is None
    assert split_quantized_id("org/No-Such-Model-AWQ") == ("org/No-Such-Model", "int4")
    assert find_model("org/No-Such-Model-AWQ") is None
    assert find_model("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8") is None  # 8-bit weight-only


def _scenario(**cluster: object) -> dict[str, object]:
    return {
        "workload": {
            "num_requests": 1,
            "arrival": {"kind": "poisson", "rate": 1.0},
            "prompt_tokens": {"kind": "fixed", "value": 16},
            "output_tokens": {"kind": "fixed", "value": 16},
        },
        "cluster": cluster,
    }


def test_a_quantized_id_runs_in_its_format_unless_told_another() -> None:
    scenario = load_scenario(_scenario(model="Qwen/Qwen3-14B-AWQ", gpu="l40s"))
    assert scenario.cluster.dtype == "int4"
    assert load_scenario(_scenario(model="qwen3-14b", dtype="AWQ")).cluster.dtype == "int4"
    with pytest.raises(CbsimError, match="int4 checkpoint"):
        load_scenario(_scenario(model="Qwen/Qwen3-14B-AWQ", dtype="bf16"))


def _config(tmp_path: Path, quantization: dict[str, object] | None) -> str:
    config: dict[str, object] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
    }
    if quantization is not None:
        config["quantization_config"] = quantization
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
W8A8 = {
    "quant_method": "compressed-tensors",
    "config_groups": {
        "group_0": {
            "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
            "input_activations": {"num_bits": 8, "type": "int", "dynamic": True},
        }
    },
}
W4A16 = {
    "quant_method": "compressed-tensors",
    "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 128}}},
}


@pytest.mark.parametrize(
    ("quantization", "weights"), [(AWQ, "int4"), (W8A8, "int8"), (W4A16, "int4"), (None, "bf16")]
)
def test_a_config_json_says_its_format(
    tmp_path: Path, quantization: dict[str, object] | None, weights: str
) -> None:
    scenario = load_scenario(_scenario(model=_config(tmp_path, quantization), gpu="a100-80gb"))
    assert scenario.cluster.dtype == weights


def test_a_config_json_in_an_unmodelled_format_is_refused(tmp_path: Path) -> None:
    model = _config(tmp_path, {"quant_method": "bitsandbytes", "load_in_4bit": True})
    with pytest.raises(CbsimError, match="quantization_config: bitsandbytes quantization"):
        load_scenario(_scenario(model=model))
    with pytest.raises(CbsimError, match="8 bits"):
        format_of_quantization_config({"quant_method": "gptq", "bits": 8})


@pytest.mark.parametrize("weights", ["int4", "int8"])
def test_integer_weights_need_an_nvidia_gpu(weights: str) -> None:
    with pytest.raises(CbsimError, match="NVIDIA-only"):
        load_scenario(_scenario(model="llama-3.1-8b", gpu="mi300x", dtype=weights))
    assert load_scenario(_scenario(model="llama-3.1-8b", gpu="a100-80gb", dtype=weights))


def test_int8_peak_per_gpu() -> None:
    assert get_gpu("h100-sxm").peak_flops("int8") == get_gpu("h100-sxm").fp8_flops
    assert get_gpu("a100-80gb").peak_flops("int8") == 2 * get_gpu("a100-80gb").bf16_flops
    assert get_gpu("b300").peak_flops("int8") < get_gpu("b300").bf16_flops  # Blackwell Ultra
    assert get_gpu("h100-sxm").peak_flops("int4") == get_gpu("h100-sxm").bf16_flops


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80gb", "l4"])
def test_int4_reads_less_at_decode_and_computes_as_bf16_at_prefill(gpu: str) -> None:
    bf16, int4 = (CostModel("llama-3.1-8b", gpu, dtype=d) for d in ("bf16", "int4"))
    n, k = 2 * 14336, 4096
    for m in (1, 8, 32):
        assert int4.gemm_time(m, n, k) < 0.5 * bf16.gemm_time(m, n, k)
    for m in (4096, 16384):
        assert int4.gemm_time(m, n, k) >= bf16.gemm_time(m, n, k) * (1 - 1e-9)


def test_int8_gemms_run_on_8_bit_tensor_cores() -> None:
    for gpu in ("h100-sxm", "a100-80gb"):
        bf16, int8 = (CostModel("llama-3.1-8b", gpu, dtype=d) for d in ("bf16", "int8"))
        assert int8.gemm_time(16384, 4096, 4096) < 0.9 * bf16.gemm_time(16384, 4096, 4096)
        assert int8.gemm_time(1, 4096, 4096) < bf16.gemm_time(1, 4096, 4096)


def test_int4_experts_come_from_their_measured_tables() -> None:
    model = CostModel("qwen3-30b-a3b", "h100-sxm", dtype="int4")
    assert model._moe is not None and model._moe.moe_dtype == "int4_wo"
    assert "transferred" not in model._moe.source
    int8 = CostModel("qwen3-30b-a3b", "h100-sxm", dtype="int8")
    assert int8._moe is not None and "bfloat16 fit transferred" in int8._moe.source


def test_the_transfer_of_efficiency_is_a_warning() -> None:
    def warnings(**cluster: object) -> list[str]:
        return transfer_warnings([load_scenario(_scenario(**cluster))])

    (note,) = warnings(model="llama-3.1-8b", gpu="h100-sxm", dtype="int4")
    assert note.startswith("int4 weights on h100-sxm") and "bf16 GEMMs' efficiency" in note
    (note,) = warnings(model="llama-3.1-8b", gpu="h100-sxm", dtype="int8")
    assert "fp8 GEMMs' efficiency" in note
    assert warnings(model="llama-3.1-8b", gpu="h100-sxm", dtype="fp8") == []


def test_catalog_shows_int4_weights() -> None:
    match = find_model("Qwen/Qwen3-14B-AWQ")
    assert match is not None
    text = render(match)
    assert "checkpoint format: int4" in text
    line = next(line for line in text.splitlines() if line.strip().startswith("int4"))
    assert float(line.split()[1]) == pytest.approx(
        weight_bytes_per_gpu(match.shape, "int4", 1) / 2**30, abs=0.006
    )
