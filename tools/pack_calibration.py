"""Regenerate cbsim/catalog/data/calibration/ from the original measurement files.

Usage: python tools/pack_calibration.py SOURCE_DIR [--out DIR]

SOURCE_DIR holds the files as published (see cbsim/catalog/data/LICENSES.md): ``calibration/aiconfigurator/
{data,systems}``, ``calibration/vidur/{compute,network}``, ``e2e/argonne_a100_static_batch.csv`` and
``e2e/aiconfigurator_silicon_h100.csv``. The packed copy keeps only what calibration reads, in
compact parquet (zstd, float32 latencies in milliseconds, categorical strings), with the source,
licence and engine version in each file's metadata.

Layout. Kernel tables measured under vLLM (every GPU) sit directly in the GPU's folder, as they
always have; another serving engine's kernel tables sit in a subfolder named after it (the name
``cbsim.studies.calibration.data.load_table(..., engine=...)`` takes). NCCL does not depend on the engine,
so each GPU has one ``nccl.parquet``:

* ``aiconfigurator/<gpu>/{gemm,decode_attention,prefill_attention,nccl}.parquet``: vLLM (A100
  0.14.0; H100, H200, L40S, B200 0.24.0) and NCCL.
* ``aiconfigurator/<gpu>/<engine>/{gemm,decode_attention,prefill_attention,custom_allreduce}``
  ``.parquet`` for ``trtllm`` (TensorRT-LLM 1.3.0rc20) and ``sglang`` (SGLang 0.5.14) on
  ``h100-sxm``, ``h200`` and ``b200``, and ``aiconfigurator/<gpu>/<engine>/moe.parquet``, each
  engine's own fused-MoE kernels, on ``h100-sxm`` and ``b200`` (the subset described below).

Columns:

* ``gemm``: m, n, k, dtype, latency_ms. dtype ``bf16``, ``fp8`` (per-tensor scaled) and, on B200,
  ``fp4`` (NVFP4: fp4 e2m1 values with one fp8 scale per 16 elements, vLLM's ``nvfp4``).
  Block-scaled fp8 (``fp8_block``) rows are dropped. Each kept dtype is one kernel per engine (vLLM:
  ``torch.nn.functional.linear``, ``CutlassFP8ScaledMMLinearKernel``,
  ``FlashInferCuteDslNvFp4LinearKernel``; SGLang: ``sglang_torch_linear``,
  ``sglang_sgl_kernel_fp8_scaled_mm``; TensorRT-LLM: ``torch_flow``), kept as file metadata.
* ``{decode,prefill}_attention``: batch_size, tokens (decode: the cached context ``step``;
  prefill: the input length ``isl``), num_heads, num_kv_heads, head_dim, kv_dtype, kernel,
  latency_ms (full attention only, window_size 0). The tables also vary the dtype the attention
  math runs in (``attn_dtype``), which is not a column here: each engine's default for its KV-cache
  dtype is kept (:data:`ATTN_DTYPE_FOR_KV`). TensorRT-LLM's prefill runs FP8 context FMHA whenever
  the KV cache is fp8 and paged context FMHA is on (``mFP8ContextFMHA = ... || (fp8 KV &&
  use_paged_context_fmha)`` in its attention op), and KV-cache block reuse, on by default, turns
  paged context FMHA on; its table also sweeps bf16 math over an fp8 cache (dropped). SGLang's
  FlashAttention-3 rows pair them already (fp8 KV with fp8 math); vLLM's are all bf16 math.
* ``nccl``: op, dtype (half | int8 sweep), num_gpus, message_elements, latency_ms.
* ``mla_{decode,prefill}`` (H100, B200 vLLM 0.24.0): DeepSeek-V3's whole MLA module
  (projections and attention) per num_heads (query heads on the GPU), batch_size, tokens (decode:
  cached context; prefill: input length), kv_dtype, gemm_dtype (projections: bf16, fp8 =
  block-scaled, fp4 = NVFP4) and kernel (attention backend); latency_ms.
* ``moe`` (A100 vLLM 0.14.0, H100 and B200 vLLM 0.24.0): vLLM's fused MoE layer (routed experts
  only) per moe_dtype (bfloat16, fp8, fp8_block, int4_wo, w4a16_mxfp4, nvfp4, ...), distribution
  (balanced, power_law_1.01, power_law_1.2), num_tokens, hidden_size, inter_size, topk,
  num_experts, moe_tp_size, moe_ep_size; latency_ms. The kernel per dtype is in the metadata.
* ``<engine>/moe`` (TensorRT-LLM 1.3.0rc20, SGLang 0.5.14; H100 and B200): the same columns, only
  the rows cbsim prices (:func:`engine_moe_rows`): layouts with the experts either split (TP) or
  spread (EP), not both (cbsim's ``ep`` is 1 or the whole group); ``balanced`` and
  ``power_law_1.2`` routing (``power_law_1.01`` stands in for balanced only where a GPU measured
  none); gated experts only (the shapes any engine's table runs through a non-gated kernel,
  TensorRT-LLM's ``moe_torch_flow_nongated``, dropped from every engine: Nemotron-style ReLU²
  experts have two weight matrices, not the three the fit counts); and for TensorRT-LLM's nvfp4
  the kernel the engine runs, as AI Configurator's TensorRT-LLM backend selects it: its
  min-latency CUTLASS kernel (``moe_torch_flow_min_latency``) up to 128 tokens where measured,
  the throughput one (``moe_torch_flow_cutlass``) otherwise. The kernels behind each dtype are in
  the metadata (SGLang and TensorRT-LLM pick them per model: e.g. SGLang on B200 runs FlashInfer's
  TensorRT-LLM kernels for most shapes and its Triton kernel for some).
* ``custom_allreduce``: num_gpus, message_elements (16-bit elements), latency_ms: the engine's own
  all-reduce kernel (TensorRT-LLM's AUTO strategy; SGLang's custom all-reduce as replayed in a
  CUDA graph, ``SGLang_CustomAllReduce_graph`` — what its decode iterations run, and what AI
  Configurator itself reads; the eager sweep, which times the host launch, is dropped).
* ``vidur/<gpu>/<model>.parquet``: model shape, num_tokens, tp and the median per-op time (ms).
* ``vidur/network/<node>.parquet``: all-reduce median time (ms) by size (bytes) and workers.
* ``e2e/argonne_a100_static_batch.parquet``: the LLM-Inference-Bench A100 rows, renamed columns.
* ``e2e/aiconfigurator_silicon_h100.parquet``: AI Configurator's measured H100 serving benchmarks,
  all 917 rows with the CSV's column names; strings categorical (``id`` kept as text), whole-number
  columns without gaps int32, the others float32 (layout columns keep NaN where a deployment has
  no such pool).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

AIC_GPUS = {
    "a100_sxm": "a100-80gb",
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "l40s": "l40s",
    "b200_sxm": "b200",
}
# serving engines whose kernel tables are packed besides vLLM's (folder name upstream and here)
OTHER_ENGINES = ("trtllm", "sglang")
AIC_META = {
    "source": "NVIDIA AI Configurator (aiconfigurator-core 0.12.0), git ai-dynamo/aiconfigurator",
    "license": "Apache-2.0, Copyright NVIDIA CORPORATION & AFFILIATES",
}
AIC_NEW_META = {
    "source": (
        "NVIDIA AI Configurator, git ai-dynamo/aiconfigurator commit 095f58a, "
        "aic-core/src/aiconfigurator_core/systems/data"
    ),
    "license": "Apache-2.0, Copyright NVIDIA CORPORATION & AFFILIATES",
}
SILICON_META = {
    "source": (
        "NVIDIA AI Configurator, git ai-dynamo/aiconfigurator commit 095f58a, "
        "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv (H100 SXM rows; "
        "silicon_data_source parsed into concurrency, measured, image)"
    ),
    "license": "Apache-2.0, Copyright NVIDIA CORPORATION & AFFILIATES",
}
VIDUR_META = {
    "source": "microsoft/vidur data/profiling (commit 7d47513)",
    "license": "MIT, Copyright (c) Microsoft Corporation",
}
ARGONNE_META = {
    "source": "argonne-lcf/LLM-Inference-Bench (commit 4211f5d) Plots/All_results.csv, A100 rows",
    "license": "BSD-3-Clause",
    "citation": "Chitty-Venkata et al., LLM-Inference-Bench, SC'24 workshops",
}
VIDUR_OPS = (
    "emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
    "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add",
)  # fmt: skip
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "fp4"}
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
# The dtype attention math runs in, per engine and KV-cache dtype, where a table sweeps several
# (see the module docstring): TensorRT-LLM and SGLang run fp8 prefill math over an fp8 cache.
ATTN_DTYPE_FOR_KV: dict[str, dict[str, str]] = {
    "vllm": {"bfloat16": "bfloat16", "fp8": "bfloat16"},
    "trtllm": {"bfloat16": "bfloat16", "fp8": "fp8"},
    "sglang": {"bfloat16": "bfloat16", "fp8": "fp8"},
}
# SGLang's all-reduce as replayed inside a CUDA graph (its eager sweep times the host launch)
CUSTOM_ALLREDUCE_DROP_SUFFIX = "_eager"
NEW_DATA_GPUS = frozenset({"b200"})  # from the newer AI Configurator commit (095f58a)
# the vLLM tables shipped first keep upstream row order (see write)
UPSTREAM_ORDER_GPUS = frozenset({"a100-80gb", "h100-sxm", "h200", "l40s"})
GEMM_ORDER = ["dtype", "n", "k", "m"]
ATTENTION_ORDER = [
    "kv_dtype", "kernel", "num_heads", "num_kv_heads", "head_dim", "batch_size", "tokens",
]  # fmt: skip


def write(
    frame: pd.DataFrame, path: Path, meta: dict[str, str], sort_by: list[str] | None = None
) -> None:
    """zstd parquet with the metadata, in the smallest of three lossless encodings: parquet's
    default (dictionaries everywhere), or dictionaries for the text columns only or for every
    non-float column with the float columns byte-stream-split. ``sort_by`` orders the rows first
    (new tables: sorted rows compress about twice as well; the tables shipped before keep upstream
    order, so refitting them reproduces the shipped profiles bit for bit)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if sort_by:
        frame = frame.sort_values(sort_by, kind="stable")
    table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    fields = list(table.schema)
    text = [f.name for f in fields if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)]
    other = [f.name for f in fields if not pa.types.is_floating(f.type)]
    floats = {f.name: "BYTE_STREAM_SPLIT" for f in fields if pa.types.is_floating(f.type)}
    options: list[dict[str, Any]] = [{}]
    options += [
        {"use_dictionary": d or False, "column_encoding": floats or None} for d in (text, other)
    ]
    encoded = []
    for option in options:
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, compression="zstd", compression_level=19, **option)
        encoded.append(buffer.getvalue().to_pybytes())
    path.write_bytes(min(encoded, key=len))


def one(directory: Path, name: str) -> Path:
    matches = sorted(directory.glob(f"*/*/{name}"))
    if not matches:
        raise SystemExit(f"no {name} under {directory}")
    return matches[-1]


def engine_file(base: Path, family: str, engine: str, name: str) -> Path:
    """``<base>/<family>/<engine>/<version>/<name>`` (the newest version when there are several)."""
    matches = sorted((base / family / engine).glob(f"*/{name}"))
    if not matches:
        raise SystemExit(f"no {name} under {base / family / engine}")
    return matches[-1]


def kernels_of(frame: pd.DataFrame, key: str) -> str:
    """'value: kernel, ...' for the metadata: which kernel each kept dtype ran."""
    pairs = frame.groupby(key, observed=True)["kernel_source"].unique()
    return "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in pairs.items())


def pack_gemm(path: Path, out: Path, meta: dict[str, str], *, sort: bool) -> None:
    gemm = pd.read_parquet(path)
    gemm = gemm[gemm.gemm_dtype.isin(list(GEMM_DTYPES))]
    frame = pd.DataFrame(
        {
            "m": gemm.m.astype("int32"),
            "n": gemm.n.astype("int32"),
            "k": gemm.k.astype("int32"),
            "dtype": gemm.gemm_dtype.map(GEMM_DTYPES).astype("category"),
            "latency_ms": gemm.latency.astype("float32"),
        }
    )
    kernels = kernels_of(gemm.assign(dtype=frame["dtype"].astype(str)), "dtype")
    write(frame, out, {**meta, "kernels": kernels}, GEMM_ORDER if sort else None)


def default_attention_math(attn: pd.DataFrame, engine: str) -> pd.DataFrame:
    """The rows whose attention math dtype is the engine's default for their KV dtype; a (kernel,
    KV dtype) group the table measures in one math dtype only is kept whole."""
    if "attn_dtype" not in attn.columns:
        return attn
    wanted = attn.kv_cache_dtype.map(ATTN_DTYPE_FOR_KV[engine]).astype(object)
    matches = attn.attn_dtype.astype(object) == wanted
    group = [attn.kernel_source.astype(object), attn.kv_cache_dtype.astype(object)]
    has_default = matches.groupby(group).transform("any")
    return attn[matches | ~has_default]


def pack_attention(
    path: Path, out: Path, tokens: str, engine: str, meta: dict[str, str], *, sort: bool
) -> None:
    attn = pd.read_parquet(path)
    if "window_size" in attn.columns:
        attn = attn[attn.window_size == 0]
    attn = default_attention_math(attn[attn.kv_cache_dtype.isin(list(KV_DTYPES))], engine)
    frame = pd.DataFrame(
        {
            "batch_size": attn.batch_size.astype("int32"),
            "tokens": attn[tokens].astype("int32"),
            "num_heads": attn.num_heads.astype("int16"),
            "num_kv_heads": attn.num_key_value_heads.astype("int16"),
            "head_dim": attn.head_dim.astype("int16"),
            "kv_dtype": attn.kv_cache_dtype.map(KV_DTYPES).astype("category"),
            "kernel": attn.kernel_source.astype("category"),
            "latency_ms": attn.latency.astype("float32"),
        }
    )
    math = attn.groupby(attn.kv_cache_dtype.map(KV_DTYPES), observed=True)["attn_dtype"].unique()
    meta = {
        **meta,
        "attn_dtype": "; ".join(f"kv {k}: {', '.join(map(str, v))}" for k, v in math.items()),
    }
    write(frame, out, meta, ATTENTION_ORDER if sort else None)


def pack_nccl(path: Path, out: Path, meta: dict[str, str]) -> None:
    nccl = pd.read_parquet(path)
    frame = pd.DataFrame(
        {
            "op": nccl.op_name.astype("category"),
            "dtype": nccl.nccl_dtype.astype("category"),
            "num_gpus": nccl.num_gpus.astype("int16"),
            "message_elements": nccl.message_size.astype("int64"),
            "latency_ms": nccl.latency.astype("float32"),
        }
    )
    write(frame, out, meta)


def pack_custom_allreduce(path: Path, out: Path, meta: dict[str, str]) -> None:
    raw = pd.read_parquet(path)
    eager = raw.kernel_source.astype(str).str.endswith(CUSTOM_ALLREDUCE_DROP_SUFFIX)
    if "backend" in raw.columns:
        eager |= raw.backend.astype(str).str.endswith(CUSTOM_ALLREDUCE_DROP_SUFFIX)
    raw = raw[~eager]
    frame = pd.DataFrame(
        {
            "num_gpus": raw.num_gpus.astype("int16"),
            "message_elements": raw.message_size.astype("int64"),
            "latency_ms": raw.latency.astype("float32"),
        }
    )
    kernels = ", ".join(sorted(map(str, raw.kernel_source.unique())))
    write(frame.sort_values(["num_gpus", "message_elements"]), out, {**meta, "kernels": kernels})


def pack_engine(base: Path, gpu: str, engine: str, out: Path, meta: dict[str, str]) -> None:
    """One engine's kernel tables of one GPU into ``out`` (see the module docstring)."""
    gemm_file = engine_file(base, "gemm", engine, "gemm_perf.parquet")
    version = gemm_file.parent.name
    tagged = {**meta, "gpu": gpu, "framework": f"{engine} {version}"}
    sort = engine != "vllm" or gpu not in UPSTREAM_ORDER_GPUS
    pack_gemm(gemm_file, out / "gemm.parquet", tagged, sort=sort)
    for phase, file, tokens in (
        ("decode", "generation_attention_perf.parquet", "step"),
        ("prefill", "context_attention_perf.parquet", "isl"),
    ):
        path = engine_file(base, "attention", engine, file)
        tagged = {**meta, "gpu": gpu, "framework": f"{engine} {path.parent.name}"}
        pack_attention(path, out / f"{phase}_attention.parquet", tokens, engine, tagged, sort=sort)
    if engine != "vllm":
        path = engine_file(base, "comm", engine, "custom_allreduce_perf.parquet")
        tagged = {**meta, "gpu": gpu, "framework": f"{engine} {path.parent.name}"}
        pack_custom_allreduce(path, out / "custom_allreduce.parquet", tagged)


def pack_moe(
    path: Path,
    out: Path,
    meta: dict[str, str],
    select: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
) -> None:
    """A fused MoE layer: one row per (weight dtype, routing, tokens, shape, layout), all of
    them (vLLM's) or those ``select`` keeps."""
    moe = pd.read_parquet(path)
    if select is not None:
        moe = select(moe)
    frame = pd.DataFrame(
        {
            "moe_dtype": moe.moe_dtype.astype("category"),
            "distribution": moe.distribution.astype("category"),
            "num_tokens": moe.num_tokens.astype("int32"),
            "hidden_size": moe.hidden_size.astype("int32"),
            "inter_size": moe.inter_size.astype("int32"),
            "topk": moe.topk.astype("int16"),
            "num_experts": moe.num_experts.astype("int16"),
            "moe_tp_size": moe.moe_tp_size.astype("int16"),
            "moe_ep_size": moe.moe_ep_size.astype("int16"),
            "latency_ms": moe.latency.astype("float32"),
        }
    )
    order = list(frame.columns[:-1])
    write(frame, out, {**meta, "kernels": kernels_of(moe, "moe_dtype")}, order)


MOE_KEY = [
    "moe_dtype", "distribution", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
    "moe_tp_size", "moe_ep_size",
]  # fmt: skip
MOE_SHAPE = ["hidden_size", "inter_size", "topk", "num_experts"]
ENGINE_MOE_ROUTINGS = ("balanced", "power_law_1.2")
NONGATED_SUFFIX = "_nongated"
LOW_LATENCY_KERNEL = "moe_torch_flow_min_latency"
LOW_LATENCY_DTYPE = "nvfp4"
LOW_LATENCY_MAX_TOKENS = 128


def nongated_shapes(data: Path) -> set[tuple[int, ...]]:
    """(hidden, inter, topk, experts) of every MoE shape some engine's table under ``data`` (the
    ``calibration/aiconfigurator/data`` folder) times with a non-gated kernel."""
    shapes: set[tuple[int, ...]] = set()
    for path in sorted(data.glob("*/moe/*/*/moe_perf.parquet")):
        moe = pd.read_parquet(path, columns=["kernel_source", *MOE_SHAPE])
        nongated = moe[moe.kernel_source.astype(str).str.endswith(NONGATED_SUFFIX)]
        shapes |= {tuple(int(v) for v in row) for row in nongated[MOE_SHAPE].to_numpy()}
    return shapes


def engine_kernel_choice(moe: pd.DataFrame) -> pd.DataFrame:
    """One row per key, the kernel the engine runs there: TensorRT-LLM's nvfp4 min-latency kernel
    up to :data:`LOW_LATENCY_MAX_TOKENS` tokens where it was measured, else the other kernel
    (AI Configurator's TensorRT-LLM backend selects them so); tables without it unchanged."""
    kernel = moe.kernel_source.astype(str)
    low = kernel == LOW_LATENCY_KERNEL
    if not low.any():
        return moe
    small = moe.num_tokens <= LOW_LATENCY_MAX_TOKENS
    key = [moe[c].astype(str) if c in ("moe_dtype", "distribution") else moe[c] for c in MOE_KEY]
    covered = (low & small).groupby(key).transform("any")
    keep = (low & small) | (~low & ~(covered & small))
    wrong = low & (moe.moe_dtype.astype(str) != LOW_LATENCY_DTYPE)
    if wrong.any():
        raise SystemExit(f"{LOW_LATENCY_KERNEL} rows outside {LOW_LATENCY_DTYPE}")
    return moe[keep]


def engine_moe_rows(moe: pd.DataFrame, nongated: set[tuple[int, ...]]) -> pd.DataFrame:
    """The rows of an engine's MoE table cbsim prices (see the module docstring)."""
    pure = (moe.moe_tp_size == 1) | (moe.moe_ep_size == 1)
    routed = moe.distribution.astype(str).isin(ENGINE_MOE_ROUTINGS)
    shapes = pd.Series(list(zip(*(moe[c] for c in MOE_SHAPE), strict=True)), index=moe.index)
    gated = ~shapes.isin(nongated) & ~moe.kernel_source.astype(str).str.endswith(NONGATED_SUFFIX)
    chosen = engine_kernel_choice(moe[pure & routed & gated])
    if chosen.duplicated(MOE_KEY).any():
        raise SystemExit("an engine MoE table keeps two rows of one key")
    return chosen


def pack_engine_moe(
    path: Path, out: Path, meta: dict[str, str], nongated: set[tuple[int, ...]]
) -> None:
    """An engine's own fused MoE layer: the rows cbsim prices (:func:`engine_moe_rows`)."""
    pack_moe(path, out, meta, lambda moe: engine_moe_rows(moe, nongated))


MLA_GEMM_DTYPES = {"bfloat16": "bf16", "fp8_block": "fp8", "nvfp4": "fp4"}


def pack_mla(path: Path, out: Path, phase: str, meta: dict[str, str]) -> None:
    """DeepSeek-V3's whole MLA module (projections and attention) per query heads on the GPU,
    batch, context (decode: the cached ``step``; prefill: the input length ``isl``), KV-cache and
    projection dtypes and attention backend."""
    mla = pd.read_parquet(path)
    frame = pd.DataFrame(
        {
            "num_heads": mla.num_heads.astype("int16"),
            "batch_size": mla.batch_size.astype("int32"),
            "tokens": (mla.step if phase == "decode" else mla.isl).astype("int32"),
            "kv_dtype": mla.kv_cache_dtype.map(KV_DTYPES).astype("category"),
            "gemm_dtype": mla.gemm_type.map(MLA_GEMM_DTYPES).astype("category"),
            "kernel": mla.kernel_source.astype("category"),
            "latency_ms": mla.latency.astype("float32"),
        }
    )
    order = ["kernel", "kv_dtype", "gemm_dtype", "num_heads", "batch_size", "tokens"]
    write(frame, out, {**meta, "model": str(mla.model.iloc[0])}, order)


def pack_aiconfigurator(source: Path, out: Path) -> None:
    nongated = nongated_shapes(source / "calibration" / "aiconfigurator" / "data")
    for folder, gpu in AIC_GPUS.items():
        base = source / "calibration" / "aiconfigurator" / "data" / folder
        meta = AIC_NEW_META if gpu in NEW_DATA_GPUS else AIC_META
        pack_engine(base, gpu, "vllm", out / "aiconfigurator" / gpu, meta)
        if (base / "mla" / "vllm").is_dir() and sorted(
            (base / "mla" / "vllm").glob("*/mla_*_module_perf.parquet")
        ):
            for phase, name in (("decode", "generation"), ("prefill", "context")):
                mla_file = engine_file(base, "mla", "vllm", f"mla_{name}_module_perf.parquet")
                tagged = {**meta, "gpu": gpu, "framework": f"vllm {mla_file.parent.name}"}
                pack_mla(
                    mla_file, out / "aiconfigurator" / gpu / f"mla_{phase}.parquet", phase, tagged
                )
        if (base / "moe" / "vllm").is_dir():
            moe_file = engine_file(base, "moe", "vllm", "moe_perf.parquet")
            tagged = {**meta, "gpu": gpu, "framework": f"vllm {moe_file.parent.name}"}
            pack_moe(moe_file, out / "aiconfigurator" / gpu / "moe.parquet", tagged)
        nccl_file = one(base / "comm", "nccl_perf.parquet")
        tagged = {**meta, "gpu": gpu, "framework": f"nccl {nccl_file.parent.name}"}
        pack_nccl(nccl_file, out / "aiconfigurator" / gpu / "nccl.parquet", tagged)
        for engine in OTHER_ENGINES:
            engine_dir = out / "aiconfigurator" / gpu / engine
            if (base / "gemm" / engine).is_dir():
                pack_engine(base, gpu, engine, engine_dir, AIC_NEW_META)
            if (base / "moe" / engine).is_dir():
                moe_file = engine_file(base, "moe", engine, "moe_perf.parquet")
                framework = f"{engine} {moe_file.parent.name}"
                tagged = {**AIC_NEW_META, "gpu": gpu, "framework": framework}
                pack_engine_moe(moe_file, engine_dir / "moe.parquet", tagged, nongated)


def pack_vidur(source: Path, out: Path) -> None:
    gpus = {"a100": "a100-80gb", "h100": "h100-sxm"}
    for csv in sorted((source / "calibration" / "vidur" / "compute").glob("*/*/mlp.csv")):
        gpu = gpus[csv.parent.parent.name]
        raw = pd.read_csv(csv)
        frame = pd.DataFrame(
            {
                "n_head": raw.n_head.astype("int16"),
                "n_kv_head": raw.n_kv_head.astype("int16"),
                "n_embd": raw.n_embd.astype("int32"),
                "n_expanded_embd": raw.n_expanded_embd.astype("int32"),
                "vocab_size": raw.vocab_size.astype("int32"),
                "use_gated_mlp": raw.use_gated_mlp.astype(bool),
                "num_tokens": raw.num_tokens.astype("int32"),
                "tp": raw.num_tensor_parallel_workers.astype("int16"),
            }
        )
        for op in VIDUR_OPS:
            frame[f"{op}_ms"] = raw[f"time_stats.{op}.median"].astype("float32")
        meta = {**VIDUR_META, "gpu": gpu, "model": csv.parent.name, "dtype": "fp16"}
        write(frame, out / "vidur" / gpu / f"{csv.parent.name}.parquet", meta)
    for csv in sorted((source / "calibration" / "vidur" / "network").glob("*/all_reduce.csv")):
        raw = pd.read_csv(csv)
        frame = pd.DataFrame(
            {
                "num_workers": raw.num_workers.astype("int16"),
                "size_bytes": raw["size"].astype("int64"),
                "latency_ms": raw["time_stats.all_reduce.median"].astype("float32"),
            }
        )
        medians = frame.groupby(["num_workers", "size_bytes"], as_index=False)[
            "latency_ms"
        ].median()
        write(
            pd.DataFrame(medians),
            out / "vidur" / "network" / f"{csv.parent.name}.parquet",
            {**VIDUR_META},
        )


def pack_argonne(source: Path, out: Path) -> None:
    raw = pd.read_csv(source / "e2e" / "argonne_a100_static_batch.csv")
    frame = pd.DataFrame(
        {
            "framework": raw.Framework.astype("category"),
            "model": raw.Model.astype("category"),
            "tp": raw["Num of Hardware"].astype("int16"),
            "length": raw["Input Output Length"].astype("int32"),
            "batch_size": raw["Batch Size"].astype("int32"),
            "latency_s": raw.Latency.astype("float64"),
        }
    )
    write(frame, out / "e2e" / "argonne_a100_static_batch.parquet", ARGONNE_META)


def pack_silicon(source: Path, out: Path) -> None:
    """AI Configurator's H100 serving benchmarks: every row, the same columns, compact dtypes."""
    raw = pd.read_csv(source / "e2e" / "aiconfigurator_silicon_h100.csv")
    frame = pd.DataFrame(index=raw.index)
    for column in raw.columns:
        values = raw[column]
        if column == "id":
            frame[column] = values.astype(str)
        elif pd.api.types.is_integer_dtype(values):
            frame[column] = values.astype("int32")
        elif pd.api.types.is_numeric_dtype(values):
            frame[column] = values.astype("float32")
        else:
            frame[column] = values.astype("category")
    if len(frame) != len(raw) or list(frame.columns) != list(raw.columns):
        raise SystemExit("the silicon table lost rows or columns")
    write(frame, out / "e2e" / "aiconfigurator_silicon_h100.parquet", SILICON_META)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "cbsim" / "catalog" / "data" / "calibration",
    )
    args = parser.parse_args()
    pack_aiconfigurator(args.source, args.out)
    pack_vidur(args.source, args.out)
    pack_argonne(args.source, args.out)
    pack_silicon(args.source, args.out)
    total = sum(p.stat().st_size for p in args.out.rglob("*.parquet"))
    print(f"wrote {args.out} ({total / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
