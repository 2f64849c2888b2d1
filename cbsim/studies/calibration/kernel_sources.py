"""Kernels across serving engines: how far one engine's kernel times are from another's on the same
GPU, and what best predicts an engine's kernels on a GPU where it has no measurements.

Why it matters. vLLM, TensorRT-LLM and SGLang run the same operations with different kernels: bf16
GEMMs through cuBLAS (vLLM, SGLang) or TensorRT-LLM's own dispatch; per-tensor fp8 GEMMs through
three different CUTLASS paths; FlashAttention 3 (vLLM, SGLang) against TensorRT-LLM's XQA decode
and FP8 context FMHA; NCCL against each engine's one-shot all-reduce. NVIDIA AI Configurator
measured all three on H100 and H200 over the same shapes, so the differences can be measured
rather than assumed, and calibration fits one profile per engine
(:func:`cbsim.studies.calibration.fit.fit_profile` with ``engine=``).

:func:`matched_ratios` pairs every measurement of one engine with the other engine's measurement
of the identical shape (GEMM: m, n, k; attention: batch, tokens and head layout with each engine's
default kernel; all-reduce: GPU count and message size) and returns engine / reference time.

The open question is a GPU where an engine has no tables (TensorRT-LLM on B200 or A100, say).
:func:`cross_engine_predictions` answers it where it can be checked, holding out a measured GPU:
the target engine's kernels on the target GPU predicted, without any of its measurements, by

* ``target vLLM fit``: the target GPU's own vLLM profile, as if engines did not matter;
* ``source engine fit, target spec``: the engine's profile on the source GPU applied to the
  target's spec sheet (what :func:`cbsim.studies.calibration.transfer.transfer_profile` does);
* ``target vLLM fit x source engine/vLLM (per shape)``: the target's vLLM profile times the
  engine/vLLM ratio of the two source-GPU profiles at the same shape;
* ``target vLLM fit x source engine/vLLM (median)``: the same with one median ratio per op family.

Each is scored (median / P90 absolute percentage error) on the target engine's measurements.

Measured (H200 held out, H100 as source; ``docs/calibration.md`` has every row). The target's own
vLLM profile is the worst guess wherever the engine runs different kernels: TensorRT-LLM fp8 GEMM
25.7 / 58.5 %, decode attention 22–47 / 58–145 %, all-reduce 116 / 365 % (NCCL against its
one-shot kernel). The engine's H100 fit on H200's spec sheet: 1.5–8.4 / 5.7–26.3 % over the seven
op families of both engines. The H200 vLLM fit times the per-shape engine/vLLM ratio of the H100
fits: 1.3–7.9 / 5.3–19.0 %, the best or tied median in most families and clearly so for decode
attention (1.7–3.2 / 5.7–17.8 % against 5.3–8.4 / 17.7–26.3 %), since it takes the target GPU's
own memory behaviour from vLLM; TensorRT-LLM's fp8 GEMMs are the exception (4.7 / 13.9 against
2.5 / 9.0 %). One median ratio per family is not enough (2.4–52 / 8.9–118 %). H100 and H200 share
tensor cores: across architectures (an engine's tables on Hopper, the GPU a Blackwell) neither the
transfer nor the ratio is tested by these data — except for MoE layers.

MoE layers (:func:`moe_cross_engine_predictions`). H200 has no MoE table of any engine, but B200
has all three engines': it is held out instead, each engine's B200 MoE kernels predicted from H100
by the first three methods. Across the Hopper → Blackwell change the engines switch kernels
(TensorRT-LLM's block-scaled fp8 runs DeepGEMM on B200, CUTLASS on H100; SGLang's Triton gives
way to FlashInfer's TensorRT-LLM kernels for most shapes), and no method wins: the engine/vLLM
ratio beats B200's own vLLM fit in 2 of 8 (engine, dtype, path) families by median (TensorRT-LLM
bf16 TP 14.6 against 17.4 %, fp8-block EP 19.6 against 27.3 % with P90 153.6 against 244.8 %),
loses in 6 (SGLang bf16 EP 22.8 against 20.7 %, TensorRT-LLM bf16 EP 34.4 against 13.2 %); the
engine's H100 fit on B200's spec sheet is best for TensorRT-LLM (8.8–24.9 against 13.2–28.1 %)
and for SGLang better in no family (16.3–43.3 against 9.7–20.7 %). So the cost model carries
neither over to MoE layers: a GPU of another architecture without the engine's MoE table (A100, L40S,
MI300X) prices its routed experts from vLLM's table; H200, Hopper like H100 with the engines'
same kernels, takes the engine's H100 MoE fit on its own spec sheet (untested: no H200 MoE
table). ``docs/calibrating.md`` has the table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from cbsim.catalog.hardware import get_gpu
from cbsim.common.errors import CbsimError
from cbsim.studies.calibration import attention, comm, gemm, moe
from cbsim.studies.calibration.data import DEFAULT_ENGINE, engine_name, load_table
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.profile import CalibrationProfile, load_profile

HEAD_KEYS = ["batch_size", "tokens", "num_heads", "num_kv_heads", "head_dim"]
GEMM_DTYPES: tuple[str, ...] = ("bf16", "fp8")
KV_DTYPES: tuple[str, ...] = ("bf16", "fp8")
PHASES: tuple[str, ...] = ("decode", "prefill")

ProfileSource = Callable[[str, str], CalibrationProfile]
"""(gpu, engine) -> that engine's kernel profile on that GPU."""

METHODS: tuple[str, ...] = (
    "target vLLM fit",
    "source engine fit, target spec",
    "target vLLM fit x source engine/vLLM (per shape)",
    "target vLLM fit x source engine/vLLM (median)",
)


def shipped_profile(gpu: str, engine: str) -> CalibrationProfile:
    """The shipped ``aiconfigurator-<engine>`` profile of ``gpu``."""
    profile = load_profile(gpu, f"aiconfigurator-{engine_name(engine)}")
    if profile is None:  # pragma: no cover - load_profile returns None only for "none"
        raise CbsimError(f"no profile for {engine} on {gpu}")
    return profile


# --------------------------------------------------------------------------- matched rows


def _allreduce(gpu: str, engine: str) -> pd.DataFrame:
    """An engine's all-reduce measurements: its own kernel's table, or NCCL's for vLLM."""
    if engine == DEFAULT_ENGINE:
        return comm.allreduce_rows(load_table("nccl", gpu))
    return comm.custom_allreduce_rows(load_table("custom_allreduce", gpu, engine=engine))


def matched_rows(gpu: str, engine: str, reference: str = DEFAULT_ENGINE) -> pd.DataFrame:
    """Every shape both engines measured on ``gpu``: columns family, measured_s (``engine``),
    reference_s and the shape's keys (m, n, k; batch_size, tokens, heads; num_gpus,
    size_bytes). GEMMs: bf16 and per-tensor fp8; attention: each engine's default kernel,
    serving head widths (:func:`cbsim.studies.calibration.attention.select_rows`); all-reduce: the
    engine's own kernel (NCCL for vLLM) at equal GPU count and message size."""
    engine, reference = engine_name(engine), engine_name(reference)
    parts: list[pd.DataFrame] = []
    ours = load_table("gemm", gpu, engine=engine)
    theirs = load_table("gemm", gpu, engine=reference)
    for dtype in GEMM_DTYPES:
        a = gemm.gemm_rows(ours, dtype)[["m", "n", "k", "latency_s"]]
        b = gemm.gemm_rows(theirs, dtype)[["m", "n", "k", "latency_s"]]
        both = a.merge(b, on=["m", "n", "k"], suffixes=("", "_ref"))
        parts.append(
            both.rename(columns={"latency_s": "measured_s", "latency_s_ref": "reference_s"}).assign(
                family=f"gemm {dtype}"
            )
        )
    for phase in PHASES:
        ours = load_table(f"{phase}_attention", gpu, engine=engine)
        theirs = load_table(f"{phase}_attention", gpu, engine=reference)
        for kv_dtype in KV_DTYPES:
            a = attention.select_rows(ours, phase, kv_dtype)[[*HEAD_KEYS, "latency_s"]]
            b = attention.select_rows(theirs, phase, kv_dtype)[[*HEAD_KEYS, "latency_s"]]
            both = a.merge(b, on=HEAD_KEYS, suffixes=("", "_ref"))
            parts.append(
                both.rename(
                    columns={"latency_s": "measured_s", "latency_s_ref": "reference_s"}
                ).assign(family=f"{phase} attention kv {kv_dtype}")
            )
    a = _allreduce(gpu, engine)
    b = _allreduce(gpu, reference)
    both = a.merge(b, on=["num_gpus", "size_bytes"], suffixes=("", "_ref"))
    parts.append(
        both.rename(columns={"latency_s": "measured_s", "latency_s_ref": "reference_s"}).assign(
            family="all-reduce"
        )
    )
    return pd.concat(parts, ignore_index=True)


def matched_ratios(gpu: str, engine: str, reference: str = DEFAULT_ENGINE) -> pd.DataFrame:
    """Per op family, engine / reference measured time over :func:`matched_rows`: median, the
    10th and 90th percentiles, the share of shapes where the engine is faster, and the count."""
    frame = matched_rows(gpu, engine, reference)
    frame = frame.assign(ratio=frame["measured_s"] / frame["reference_s"])
    rows = []
    for family, group in frame.groupby("family", sort=False):
        ratio = group["ratio"].to_numpy(np.float64)
        rows.append(
            {
                "gpu": gpu,
                "engine": engine_name(engine),
                "reference": engine_name(reference),
                "family": family,
                "median_ratio": float(np.median(ratio)),
                "p10_ratio": float(np.percentile(ratio, 10)),
                "p90_ratio": float(np.percentile(ratio, 90)),
                "engine_faster_pct": float(100.0 * np.mean(ratio < 1.0)),
                "points": len(ratio),
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- prediction


def _predict(
    profile: CalibrationProfile, family: str, rows: pd.DataFrame, gpu_name: str
) -> np.ndarray:
    """``profile``'s prediction for ``rows`` of one op family on ``gpu_name``'s spec sheet."""
    gpu = get_gpu(gpu_name)
    kind, _, rest = family.partition(" ")
    if kind == "gemm":
        return gemm.predict_gemm(profile.gemm[rest], rows, gpu, rest)
    if kind == "all-reduce":
        return np.array(
            [
                float(profile.allreduce[str(int(n))](float(size)))
                for n, size in zip(rows["num_gpus"], rows["size_bytes"], strict=True)
            ]
        )
    kv_dtype = family.rsplit(" ", 1)[-1]
    fits = profile.decode_attention if kind == "decode" else profile.prefill_attention
    return attention.predict_attention(fits[kv_dtype], rows, gpu, kind, kv_dtype)


def _target_rows(gpu: str, engine: str) -> dict[str, pd.DataFrame]:
    """The rows each family's prediction is scored on: what the engine's own fit uses."""
    out: dict[str, pd.DataFrame] = {}
    table = load_table("gemm", gpu, engine=engine)
    for dtype in GEMM_DTYPES:
        out[f"gemm {dtype}"] = gemm.gemm_rows(table, dtype)
    for phase in PHASES:
        table = load_table(f"{phase}_attention", gpu, engine=engine)
        for kv_dtype in KV_DTYPES:
            out[f"{phase} attention kv {kv_dtype}"] = attention.select_rows(table, phase, kv_dtype)
    out["all-reduce"] = _allreduce(gpu, engine)
    return out


def cross_engine_predictions(
    engine: str,
    source_gpu: str = "h100-sxm",
    target_gpu: str = "h200",
    *,
    profiles: ProfileSource = shipped_profile,
) -> pd.DataFrame:
    """Score the four ways (:data:`METHODS`, see the module docstring) of predicting ``engine``'s
    kernels on ``target_gpu`` without its measurements there, on those measurements. Profiles
    come from ``profiles(gpu, engine)`` (default: the shipped ones, each fitted on all of its
    GPU's and engine's tables; none of them saw the target engine's target-GPU tables).

    One row per op family and method: gpu ("<target> from <source>"), engine, family, method,
    median_ape, p90_ape, points."""
    engine = engine_name(engine)
    if engine == DEFAULT_ENGINE:
        raise CbsimError("cross-engine predictions need an engine other than vllm")
    target_vllm = profiles(target_gpu, DEFAULT_ENGINE)
    source_engine = profiles(source_gpu, engine)
    source_vllm = profiles(source_gpu, DEFAULT_ENGINE)
    medians = matched_ratios(source_gpu, engine).set_index("family")["median_ratio"]
    records: list[dict[str, object]] = []
    for family, rows in _target_rows(target_gpu, engine).items():
        measured = rows["latency_s"].to_numpy(np.float64)
        if family == "all-reduce":
            counts = {str(int(n)) for n in rows["num_gpus"]}
            usable = counts <= set(target_vllm.allreduce) & set(source_engine.allreduce)
            if not usable:
                continue
        base = _predict(target_vllm, family, rows, target_gpu)
        moved = _predict(source_engine, family, rows, target_gpu)
        ratio = _predict(source_engine, family, rows, source_gpu) / _predict(
            source_vllm, family, rows, source_gpu
        )
        predictions = (base, moved, base * ratio, base * float(medians[family]))
        for method, predicted in zip(METHODS, predictions, strict=True):
            records.append(
                {
                    "gpu": f"{target_gpu} from {source_gpu}",
                    "engine": engine,
                    "family": family,
                    "method": method,
                    **summarize(predicted, measured),
                }
            )
    return pd.DataFrame(records)


MOE_DTYPES: tuple[str, ...] = ("bfloat16", "fp8_block")
"""MoE weight dtypes the three engines measured on both H100 and B200 (fp8 per tensor: not
SGLang; nvfp4: not Hopper)."""


def moe_cross_engine_predictions(
    engine: str,
    source_gpu: str = "h100-sxm",
    target_gpu: str = "b200",
    *,
    routing: str = "balanced",
    profiles: ProfileSource = shipped_profile,
) -> pd.DataFrame:
    """Score the first three :data:`METHODS` on ``engine``'s MoE table of ``target_gpu`` (see
    the module docstring), per weight dtype of :data:`MOE_DTYPES` and kernel path (TP, EP), at
    the tables' own routing. One row per dtype, path and method: gpu, engine, family, method,
    median_ape, p90_ape, points."""
    engine = engine_name(engine)
    target_vllm = profiles(target_gpu, DEFAULT_ENGINE)
    source_engine = profiles(source_gpu, engine)
    source_vllm = profiles(source_gpu, DEFAULT_ENGINE)
    table = load_table("moe", target_gpu, engine=engine)
    target, source = get_gpu(target_gpu), get_gpu(source_gpu)
    records: list[dict[str, object]] = []
    for moe_dtype in MOE_DTYPES:
        rows = moe.moe_rows(table, moe_dtype, routing)
        for path, name in ((0, "tp"), (1, "ep")):
            chosen = rows[moe.kernel_paths(rows) == path].reset_index(drop=True)
            key = moe.fit_key(moe_dtype, routing, bool(path))
            base_fit = target_vllm.moe.get(key)
            engine_fit = source_engine.moe.get(key)
            reference_fit = source_vllm.moe.get(key)
            if chosen.empty or base_fit is None or engine_fit is None or reference_fit is None:
                continue
            base = moe.predict_moe(base_fit, chosen, target, moe_dtype)
            moved = moe.predict_moe(engine_fit, chosen, target, moe_dtype)
            ratio = moe.predict_moe(engine_fit, chosen, source, moe_dtype) / moe.predict_moe(
                reference_fit, chosen, source, moe_dtype
            )
            measured = chosen["latency_s"].to_numpy(np.float64)
            for method, predicted in zip(METHODS, (base, moved, base * ratio), strict=False):
                records.append(
                    {
                        "gpu": f"{target_gpu} from {source_gpu}",
                        "engine": engine,
                        "family": f"moe {moe_dtype} {name}",
                        "method": method,
                        **summarize(predicted, measured),
                    }
                )
    return pd.DataFrame(records)
