"""fp32 weights (``cluster.dtype: fp32``, vLLM's ``--dtype float32``): every tensor and the KV
cache in 4 bytes, activations in fp32, GEMMs at the GPU's fp32 peak (no TF32) with the bf16
fits' efficiency transferred and said in a warning."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cbsim.catalog.hardware import GPU_NAMES, TFLOPS, get_gpu
from cbsim.catalog.model_bytes import kv_bytes_per_token_per_gpu, model_weight_bytes
from cbsim.catalog.model_details import render
from cbsim.catalog.models import find_model, get_model
from cbsim.catalog.quantization import canonical_dtype
from cbsim.cli.commands import cli
from cbsim.common.errors import CbsimError
from cbsim.cost import CostModel
from cbsim.engine.cost_models import transfer_warnings
from cbsim.engine.fleet import pool_memory
from cbsim.run.loading import load_scenario

# Llama 3.1 8B by hand (as tests/test_quantization.py): the linear layers of 32 layers, the
# embedding and the LM head of 128256 x 4096, 65 RMSNorms of 4096.
LINEAR = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336)
OTHER = 2 * 128256 * 4096 + 65 * 4096


def _scenario(**cluster: object) -> dict[str, object]:
    return {
        "workload": {
            "num_requests": 1,
            "arrival": {"kind": "poisson", "rate": 1.0},
            "prompt_tokens": {"kind": "fixed", "value": 16},
            "output_tokens": {"kind": "fixed", "value": 16},
        },
        "cluster": {"model": "llama-3.1-8b", "gpu": "h100-sxm", **cluster},
    }


def test_fp32_weights_and_kv_cache_by_hand() -> None:
    scenario = load_scenario(_scenario(dtype="fp32"))
    assert (scenario.cluster.dtype, scenario.cluster.effective_kv_dtype) == ("fp32", "fp32")
    plan = pool_memory(scenario)
    assert plan.weight_bytes == pytest.approx((LINEAR + OTHER) * 4, rel=1e-12)
    # 32 layers x 8 KV heads x 128 x (key + value) x 4 bytes
    assert plan.kv_bytes_per_token == 32 * 8 * 128 * 2 * 4
    bf16 = pool_memory(load_scenario(_scenario(dtype="bf16")))
    assert plan.weight_bytes == pytest.approx(2 * bf16.weight_bytes, rel=1e-12)
    assert plan.activation_bytes > bf16.activation_bytes  # fp32 activations (forward's: 2x)


def test_fp32_weights_keep_an_fp8_kv_cache_when_told() -> None:
    cluster = load_scenario(_scenario(dtype="fp32", kv_dtype="fp8")).cluster
    assert cluster.effective_kv_dtype == "fp8"
    model = get_model("llama-3.1-8b")
    assert kv_bytes_per_token_per_gpu(model, 1, "fp8") == 32 * 8 * 128 * 2


@pytest.mark.parametrize(
    ("dtype", "kv_dtype", "reason"),
    [
        ("fp32", "bf16", "fp32 KV cache .* or fp8, not bf16"),
        ("fp32", "fp16", "not fp16"),
        ("bf16", "fp32", "fp32 KV cache goes with fp32 weights only"),
    ],
)
def test_kv_caches_no_engine_keeps_are_refused(dtype: str, kv_dtype: str, reason: str) -> None:
    with pytest.raises(CbsimError, match=reason) as err:
        load_scenario(_scenario(dtype=dtype, kv_dtype=kv_dtype))
    assert str(err.value).startswith("cluster: kv_dtype: ")


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "deepseek-v3"])
def test_fp32_is_refused_for_moe_and_mla_naming_the_dtype(model: str) -> None:
    with pytest.raises(CbsimError, match="fp32 weights are not modelled") as err:
        load_scenario(_scenario(model=model, gpu="h200", tp=8, dtype="fp32"))
    assert str(err.value).startswith("cluster: dtype: ")


def test_float32_names_fp32() -> None:
    assert canonical_dtype("float32") == "fp32"
    assert canonical_dtype("FP32") == "fp32"
    assert load_scenario(_scenario(dtype="Float32")).cluster.dtype == "fp32"
    cluster = load_scenario(_scenario(dtype="float32", kv_dtype="float32")).cluster
    assert cluster.kv_dtype == "fp32"


def test_every_gpu_has_an_fp32_peak_below_its_16_bit_one() -> None:
    for name in GPU_NAMES:
        gpu = get_gpu(name)
        assert 0 < gpu.peak_flops("fp32") < gpu.bf16_flops, name
    # datasheet figures: the CUDA cores' FP32 (no TF32); AMD's FP32 matrix rate
    assert get_gpu("h100-sxm").peak_flops("float32") == 67 * TFLOPS
    assert get_gpu("a100-80gb").peak_flops("fp32") == 19.5 * TFLOPS
    assert get_gpu("l40s").peak_flops("fp32") == 91.6 * TFLOPS
    assert get_gpu("mi300x").peak_flops("fp32") == 163.4 * TFLOPS


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80gb", "l4"])
def test_fp32_decode_is_slower_and_prefill_much_slower(gpu: str) -> None:
    bf16, fp32 = (CostModel("llama-3.1-8b", gpu, dtype=d) for d in ("bf16", "fp32"))
    assert fp32.kv_dtype == "fp32"
    decode = [(1, 1000)] * 32
    assert 1.3 * bf16.iteration_time(decode) < fp32.iteration_time(decode)
    # a prefill is compute-bound: the fp32 peak is an order of magnitude below bf16's
    peaks = get_gpu(gpu).bf16_flops / get_gpu(gpu).fp32_flops
    prefill = [(4096, 0)]
    assert fp32.iteration_time(prefill) > 0.5 * peaks * bf16.iteration_time(prefill)
    n, k = 2 * 14336, 4096
    assert fp32.gemm_time(8192, n, k) == pytest.approx(bf16.gemm_time(8192, n, k) * peaks, rel=0.05)


def test_the_fp32_transfer_of_efficiency_is_a_warning() -> None:
    (note,) = transfer_warnings([load_scenario(_scenario(dtype="fp32"))])
    assert note.startswith("fp32 weights on h100-sxm")
    assert "67.0 TFLOP/s, no TF32" in note and "bf16 kernels' efficiency" in note
    assert "attention over the fp32 KV cache" in note
    (note,) = transfer_warnings([load_scenario(_scenario(dtype="fp32", kv_dtype="fp8"))])
    assert "attention" not in note


def test_catalog_shows_fp32_weights_for_dense_models_only() -> None:
    match = find_model("llama-3.1-8b")
    assert match is not None
    line = next(line for line in render(match).splitlines() if line.strip().startswith("fp32"))
    assert float(line.split()[1]) == pytest.approx((LINEAR + OTHER) * 4 / 2**30, abs=0.006)
    moe = find_model("qwen3-30b-a3b")
    assert moe is not None
    assert not any(line.strip().startswith("fp32") for line in render(moe).splitlines())


def test_cost_takes_float32() -> None:
    result = CliRunner().invoke(
        cli, ["cost", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--dtype", "float32",
              "--prefill", "512"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "fp32 weights, fp32 KV" in result.output
    assert "note: fp32 weights on h100-sxm" in result.output
    refused = CliRunner().invoke(
        cli, ["cost", "--model", "llama-3.1-8b", "--gpu", "l4", "--dtype", "fp32", "--kv-dtype", "bf16",
              "--prefill", "512"],
    )  # fmt: skip
    assert refused.exit_code == 2
    assert "--kv-dtype" in refused.output and "Traceback" not in refused.output


def test_fp32_activations_are_four_bytes() -> None:
    from cbsim.cost.engine_memory import activation_bytes, forward_activation_bytes

    model = get_model("llama-3.1-8b")
    assert activation_bytes("fp32") == 4.0
    assert forward_activation_bytes(model, 8192, 1, activation_bytes("fp32")) == 2 * (
        forward_activation_bytes(model, 8192, 1)
    )
    assert activation_bytes("bf16") == activation_bytes("fp8") == 2.0
    assert model_weight_bytes(get_model("llama-3.1-8b"), "fp32") == (LINEAR + OTHER) * 4
