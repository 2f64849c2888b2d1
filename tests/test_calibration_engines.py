"""Tests for the per-engine kernel tables (TensorRT-LLM, SGLang on H100/H200; vLLM on B200 with fp4
GEMMs), the profiles fitted on them, the engine all-reduce (custom kernel, NCCL beyond) and the
cross-engine comparisons of cbsim.studies.calibration.kernel_sources."""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.model_bytes import DTYPE_BYTES
from cbsim.common.errors import CbsimError
from cbsim.cost.roofline import gemm_flops_bytes
from cbsim.studies.calibration import comm, gemm, kernel_sources
from cbsim.studies.calibration.data import (
    aiconfigurator_silicon_h100,
    engine_name,
    load_table,
    measured_engines,
    measured_gpus,
)
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.fit import TRANSFER_SOURCE, leave_one_gpu_out, profile_name
from cbsim.studies.calibration.profile import load_profile, profile_names

ENGINES = ("trtllm", "sglang")
HOPPER = ("h100-sxm", "h200")
SHIPPED = files("cbsim.catalog") / "data" / "calibration"

SILICON_COLUMNS = [
    "id", "backend", "backend_version", "model_path", "system", "precision", "mode", "isl", "osl",
    "gemm_quant_mode", "moe_quant_mode", "batch_size", "tp_size", "pp_size", "attention_dp_size",
    "moe_tp_size", "moe_ep_size", "prefill_batch_size", "prefill_num_workers", "prefill_tp_size",
    "prefill_pp_size", "prefill_attention_dp_size", "prefill_moe_tp_size", "prefill_moe_ep_size",
    "decode_batch_size", "decode_num_workers", "decode_tp_size", "decode_pp_size",
    "decode_attention_dp_size", "decode_moe_tp_size", "decode_moe_ep_size", "silicon_ttft_ms",
    "silicon_tpot_ms", "concurrency", "measured", "image",
]  # fmt: skip


def shipped_meta(*parts: str) -> dict[str, str]:
    path = SHIPPED.joinpath(*parts)
    with path.open("rb") as handle:
        meta = pq.read_schema(handle).metadata
    return {k.decode(): v.decode() for k, v in meta.items() if k != b"pandas"}


# --------------------------------------------------------------------------- tables


def test_engines_with_tables_per_gpu() -> None:
    assert "b200" in measured_gpus()
    for gpu in (*HOPPER, "b200"):
        assert measured_engines(gpu) == ["vllm", "trtllm", "sglang"]
    for gpu in ("a100-80gb", "l40s"):
        assert measured_engines(gpu) == ["vllm"]
    assert measured_engines("mi300x") == []
    assert engine_name("tensorrt-llm") == "trtllm"
    with pytest.raises(CbsimError, match="known: sglang, trtllm, vllm"):
        engine_name("llama.cpp")


def test_vllm_stays_the_default_source() -> None:
    default = load_table("gemm", "h100-sxm")
    assert default.equals(load_table("gemm", "h100-sxm", engine="vllm"))
    assert len(default) == 71484  # the table shipped before engines were added
    assert not default.equals(load_table("gemm", "h100-sxm", engine="sglang"))
    # NCCL does not depend on the engine
    assert load_table("nccl", "h200", engine="trtllm").equals(load_table("nccl", "h200"))


def test_an_engine_without_tables_is_a_clear_error() -> None:
    with pytest.raises(
        CbsimError, match=r"no trtllm kernel tables are shipped for a100-80gb.*vllm"
    ):
        load_table("gemm", "a100-80gb", engine="tensorrt-llm")
    with pytest.raises(CbsimError, match="no shipped moe table for h200/sglang"):
        load_table("moe", "h200", engine="sglang")  # the engines' MoE tables: H100 and B200
    with pytest.raises(CbsimError, match="no shipped custom_allreduce table for h100-sxm"):
        load_table("custom_allreduce", "h100-sxm")  # vLLM's all-reduce is NCCL


@pytest.mark.parametrize("gpu", HOPPER)
@pytest.mark.parametrize("engine", ENGINES)
def test_engine_tables_have_the_schema(gpu: str, engine: str) -> None:
    table = load_table("gemm", gpu, engine=engine)
    assert set(table["dtype"].astype(str)) == {"bf16", "fp8"}  # block-scaled fp8 dropped
    assert table["latency_ms"].dtype == np.float32
    for phase in ("decode", "prefill"):
        attn = load_table(f"{phase}_attention", gpu, engine=engine)
        assert set(attn["kv_dtype"].astype(str)) == {"bf16", "fp8"}
        assert {"batch_size", "tokens", "num_heads", "num_kv_heads", "head_dim", "kernel"} <= set(
            attn.columns
        )
    custom = load_table("custom_allreduce", gpu, engine=engine)
    for num_gpus, group in custom.groupby("num_gpus"):
        assert num_gpus in (2, 4, 8)
        # one sweep per GPU count (SGLang's eager sweep dropped), 128 to 2^29 elements
        assert len(group) == 23 and group["message_elements"].is_unique
        assert group["message_elements"].min() == 128
        assert group["message_elements"].max() == 2**29


@pytest.mark.parametrize("gpu", HOPPER)
def test_prefill_math_dtype_is_the_engines_default(gpu: str) -> None:
    trtllm = shipped_meta("aiconfigurator", gpu, "trtllm", "prefill_attention.parquet")
    # TensorRT-LLM runs FP8 context FMHA over an fp8 KV cache (its bf16-math sweep is dropped)
    assert trtllm["attn_dtype"] == "kv bf16: bfloat16; kv fp8: fp8"
    assert trtllm["framework"] == "trtllm 1.3.0rc20"
    sglang = shipped_meta("aiconfigurator", gpu, "sglang", "prefill_attention.parquet")
    assert sglang["attn_dtype"] == "kv bf16: bfloat16; kv fp8: fp8"
    vllm = shipped_meta("aiconfigurator", gpu, "prefill_attention.parquet")
    assert vllm["attn_dtype"] == "kv bf16: bfloat16; kv fp8: bfloat16"
    assert (
        "SGLang_CustomAllReduce_graph"
        in shipped_meta("aiconfigurator", gpu, "sglang", "custom_allreduce.parquet")["kernels"]
    )
    assert "Apache-2.0" in trtllm["license"]


def test_b200_tables() -> None:
    table = load_table("gemm", "b200")
    assert set(table["dtype"].astype(str)) == {"bf16", "fp8", "fp4"}
    assert (table["dtype"] == "fp4").sum() == 35742
    assert (
        "fp4: FlashInferCuteDslNvFp4LinearKernel"
        in shipped_meta("aiconfigurator", "b200", "gemm.parquet")["kernels"]
    )
    decode = load_table("decode_attention", "b200")
    assert set(decode["kernel"].astype(str)) >= {"vllm_flashinfer_trtllmdecode"}
    assert len(load_table("nccl", "b200")) == 504


def test_silicon_e2e_keeps_every_row_and_column() -> None:
    frame = aiconfigurator_silicon_h100()
    assert list(frame.columns) == SILICON_COLUMNS
    assert len(frame) == 917
    assert frame["backend"].value_counts().to_dict() == {
        "trtllm": 543,
        "vllm": 240,
        "sglang": 134,
    }
    assert frame["mode"].value_counts().to_dict() == {"agg": 810, "disagg": 107}
    assert frame["silicon_tpot_ms"].gt(0).all() and frame["id"].is_unique


# --------------------------------------------------------------------------- fp4


def test_fp4_bytes_count_block_scales_and_the_activation_quantisation() -> None:
    assert DTYPE_BYTES["fp4"] == 0.5625
    m, n, k = 32, 4096, 1024
    flops, moved = gemm_flops_bytes(m, n, k, "fp4")
    assert flops == 2.0 * m * n * k
    gemm_bytes = (k * n + m * k) * 0.5625 + m * n * 2.0
    assert moved == gemm_bytes + m * k * (2.0 + 0.5625)
    # the weight read dominates a decode-sized fp4 GEMM: a bit over half of fp8's
    assert 0.55 < moved / gemm_flops_bytes(m, n, k, "fp8")[1] < 0.65
    arrays = gemm.flops_bytes(np.array([m * 1.0]), np.array([n * 1.0]), np.array([k * 1.0]), "fp4")
    assert (arrays[0][0], arrays[1][0]) == (flops, moved)


def test_fp4_gemm_needs_fp4_tensor_cores() -> None:
    table = load_table("gemm", "b200")
    rows = gemm.gemm_rows(table, "fp4").iloc[:50]
    with pytest.raises(CbsimError, match="h100-sxm has no FP4 tensor cores"):
        gemm.predict_gemm(load_profile("b200").gemm["fp4"], rows, get_gpu("h100-sxm"), "fp4")


# --------------------------------------------------------------------------- all-reduce


def test_engine_allreduce_uses_its_own_kernel_where_measured() -> None:
    custom = pd.DataFrame(
        {
            "num_gpus": [2, 2, 2],
            "message_elements": [1024, 2048, 4096],
            "latency_s": [3e-6, 3.2e-6, 3.5e-6],
        }
    )
    nccl = pd.DataFrame(
        {
            "op": ["all_reduce"] * 8,
            "num_gpus": [2, 2, 2, 2, 4, 4, 4, 4],
            "message_elements": [512, 1024, 4096, 8192] * 2,
            "dtype": ["half"] * 8,
            "latency_s": [1e-5, 1.1e-5, 1.2e-5, 1.4e-5, 2e-5, 2.1e-5, 2.2e-5, 2.4e-5],
        }
    )
    rows = comm.engine_allreduce_rows(custom, nccl)
    two = rows[rows.num_gpus == 2]
    # NCCL only beyond the largest custom size: below it the one-shot kernel is never slower
    assert two["size_bytes"].tolist() == [2048.0, 4096.0, 8192.0, 16384.0]
    assert two["source"].tolist() == ["custom", "custom", "custom", "nccl"]
    assert rows[rows.num_gpus == 4]["source"].eq("nccl").all()  # no custom rows at 4 GPUs
    curves = comm.fit_allreduce_rows(rows)
    assert curves["2"](1024.0) == curves["2"](2048.0) == pytest.approx(3e-6)
    assert curves["2"](16384.0) == pytest.approx(1.4e-5)
    assert curves["4"](2048.0) == pytest.approx(2.1e-5)


def test_a_glitch_is_left_out_of_an_allreduce_curve() -> None:
    sizes = [256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0]
    times = [3.3e-6, 3.5e-6, 38e-6, 3.5e-6, 3.6e-6, 3.8e-6]
    fit = comm.fit_comm_curve(sizes, times)
    assert 1024.0 not in fit.sizes_bytes
    assert fit(2048.0) == pytest.approx(3.5e-6)
    assert comm.glitches(np.array(times)).tolist() == [False, False, True, False, False, False]


# --------------------------------------------------------------------------- shipped profiles


@pytest.mark.parametrize("gpu", HOPPER)
@pytest.mark.parametrize("engine", ENGINES)
def test_engine_profiles_are_shipped(gpu: str, engine: str) -> None:
    name = profile_name(engine)
    assert name in profile_names(gpu)
    profile = load_profile(gpu, name)
    assert profile is not None and profile.name == name and profile.gpu == gpu
    assert set(profile.gemm) == {"bf16", "fp8"}
    assert set(profile.decode_attention) == set(profile.prefill_attention) == {"bf16", "fp8"}
    assert set(profile.allreduce) == {"2", "4", "8"}
    assert profile.elementwise is not None
    assert "custom all-reduce" in profile.provenance["allreduce"].source
    # small messages: the engine's one-shot kernel, several times faster than NCCL
    vllm = load_profile(gpu, "aiconfigurator-vllm")
    assert vllm is not None
    own, nccl = profile.allreduce_time(8, 8192.0), vllm.allreduce_time(8, 8192.0)
    assert own is not None and nccl is not None and own < 0.5 * nccl


@pytest.mark.parametrize("gpu", HOPPER)
@pytest.mark.parametrize("engine", ENGINES)
def test_engine_allreduce_fit_follows_its_table(gpu: str, engine: str) -> None:
    profile = load_profile(gpu, profile_name(engine))
    assert profile is not None
    rows = comm.custom_allreduce_rows(load_table("custom_allreduce", gpu, engine=engine))
    pairs = zip(rows["num_gpus"], rows["size_bytes"], strict=True)
    predicted = [profile.allreduce_time(int(n), float(size)) for n, size in pairs]
    errors = summarize(np.array(predicted, dtype=float), rows["latency_s"].to_numpy())
    assert errors["median_ape"] < 0.05


def test_b200_is_fitted_on_its_own_measurements() -> None:
    assert "b200" not in TRANSFER_SOURCE
    # TensorRT-LLM's and SGLang's own B200 kernels beside vLLM's, which stay the default
    names = ["aiconfigurator-sglang", "aiconfigurator-trtllm", "aiconfigurator-vllm"]
    assert profile_names("b200") == names
    profile = load_profile("b200")
    assert profile is not None and profile.name == "aiconfigurator-vllm"
    assert profile.based_on is None
    assert set(profile.gemm) == {"bf16", "fp8", "fp4"}
    # in-sample: the fit reproduces B200's fp4 table
    rows = gemm.gemm_rows(load_table("gemm", "b200"), "fp4").iloc[::37]
    predicted = gemm.predict_gemm(profile.gemm["fp4"], rows, get_gpu("b200"), "fp4")
    assert summarize(predicted, rows["latency_s"].to_numpy())["median_ape"] < 0.03
    mi300x = load_profile("mi300x")
    assert mi300x is not None and mi300x.based_on == "h100-sxm/aiconfigurator-vllm"


# --------------------------------------------------------------------------- across engines


def test_matched_ratios_pair_identical_shapes() -> None:
    rows = kernel_sources.matched_rows("h100-sxm", "sglang")
    assert set(rows["family"]) == {
        "gemm bf16",
        "gemm fp8",
        "decode attention kv bf16",
        "decode attention kv fp8",
        "prefill attention kv bf16",
        "prefill attention kv fp8",
        "all-reduce",
    }
    ratios = kernel_sources.matched_ratios("h100-sxm", "sglang").set_index("family")
    # both call cuBLAS for bf16 GEMMs through PyTorch: within a few percent of each other
    assert 0.95 < ratios.loc["gemm bf16", "median_ratio"] < 1.1
    # SGLang's custom all-reduce against NCCL: at least twice as fast at the median size
    assert ratios.loc["all-reduce", "median_ratio"] < 0.6
    assert (ratios["p10_ratio"] <= ratios["median_ratio"]).all()
    assert (ratios["median_ratio"] <= ratios["p90_ratio"]).all()


def test_cross_engine_predictions_need_another_engine() -> None:
    with pytest.raises(CbsimError, match="other than vllm"):
        kernel_sources.cross_engine_predictions("vllm")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_h200_engine_kernels_from_h100(engine: str) -> None:
    table = leave_one_gpu_out(
        "h100-sxm", "h200", engine=engine, gemm_dtypes=("bf16",), kv_dtypes=("bf16",)
    )
    calibrated = table[table.method == "calibrated"].set_index("family")
    assert (calibrated["median_ape"] < 0.10).all()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_an_engines_own_fit_beats_vllms_on_its_kernels(engine: str) -> None:
    frame = kernel_sources.cross_engine_predictions(engine)
    by = frame.pivot(index="family", columns="method", values="median_ape")
    own = by["source engine fit, target spec"]
    assert (own <= by["target vLLM fit"]).mean() >= 0.5
