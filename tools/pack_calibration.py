"""Regenerate cbsim/data/calibration/ from the original measurement files.

Usage: python tools/pack_calibration.py SOURCE_DIR [--out DIR]

SOURCE_DIR holds the files as published (see cbsim/data/LICENSES.md): ``calibration/aiconfigurator/
{data,systems}``, ``calibration/vidur/{compute,network}`` and ``e2e/argonne_a100_static_batch.csv``.
The packed copy keeps only what calibration reads, in compact parquet (zstd, float32 latencies in
milliseconds, categorical strings), with the source and licence in each file's metadata:

* ``aiconfigurator/<gpu>/gemm.parquet``: m, n, k, dtype (bf16 | fp8 per-tensor), latency_ms.
* ``aiconfigurator/<gpu>/{decode,prefill}_attention.parquet``: batch_size, tokens (decode: the
  cached context ``step``; prefill: the input length ``isl``), num_heads, num_kv_heads, head_dim,
  kv_dtype, kernel, latency_ms (full attention only, window_size 0).
* ``aiconfigurator/<gpu>/nccl.parquet``: op, dtype (half | int8 sweep), num_gpus, message_elements,
  latency_ms.
* ``vidur/<gpu>/<model>.parquet``: model shape, num_tokens, tp and the median per-op time (ms).
* ``vidur/network/<node>.parquet``: all-reduce median time (ms) by size (bytes) and workers.
* ``e2e/argonne_a100_static_batch.parquet``: the LLM-Inference-Bench A100 rows, renamed columns.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

AIC_GPUS = {"a100_sxm": "a100-80gb", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "l40s": "l40s"}
AIC_META = {
    "source": "NVIDIA AI Configurator (aiconfigurator-core 0.12.0), git ai-dynamo/aiconfigurator",
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


def write(frame: pd.DataFrame, path: Path, meta: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    pq.write_table(table, path, compression="zstd", compression_level=19)


def one(directory: Path, name: str) -> Path:
    matches = sorted(directory.glob(f"*/*/{name}"))
    if not matches:
        raise SystemExit(f"no {name} under {directory}")
    return matches[-1]


def pack_aiconfigurator(source: Path, out: Path) -> None:
    for folder, gpu in AIC_GPUS.items():
        base = source / "calibration" / "aiconfigurator" / "data" / folder
        gemm_file = one(base / "gemm", "gemm_perf.parquet")
        gemm = pd.read_parquet(gemm_file)
        gemm = gemm[gemm.gemm_dtype.isin(["bfloat16", "fp8"])]
        gemm = pd.DataFrame(
            {
                "m": gemm.m.astype("int32"),
                "n": gemm.n.astype("int32"),
                "k": gemm.k.astype("int32"),
                "dtype": gemm.gemm_dtype.map({"bfloat16": "bf16", "fp8": "fp8"}).astype("category"),
                "latency_ms": gemm.latency.astype("float32"),
            }
        )
        meta = {**AIC_META, "gpu": gpu, "framework": f"vllm {gemm_file.parent.name}"}
        write(gemm, out / "aiconfigurator" / gpu / "gemm.parquet", meta)
        for phase, file, tokens in (
            ("decode", "generation_attention_perf.parquet", "step"),
            ("prefill", "context_attention_perf.parquet", "isl"),
        ):
            path = one(base / "attention", file)
            attn = pd.read_parquet(path)
            if "window_size" in attn.columns:
                attn = attn[attn.window_size == 0]
            frame = pd.DataFrame(
                {
                    "batch_size": attn.batch_size.astype("int32"),
                    "tokens": attn[tokens].astype("int32"),
                    "num_heads": attn.num_heads.astype("int16"),
                    "num_kv_heads": attn.num_key_value_heads.astype("int16"),
                    "head_dim": attn.head_dim.astype("int16"),
                    "kv_dtype": attn.kv_cache_dtype.map({"bfloat16": "bf16", "fp8": "fp8"}).astype(
                        "category"
                    ),
                    "kernel": attn.kernel_source.astype("category"),
                    "latency_ms": attn.latency.astype("float32"),
                }
            )
            meta = {**AIC_META, "gpu": gpu, "framework": f"vllm {path.parent.name}"}
            write(frame, out / "aiconfigurator" / gpu / f"{phase}_attention.parquet", meta)
        nccl_file = one(base / "comm", "nccl_perf.parquet")
        nccl = pd.read_parquet(nccl_file)
        frame = pd.DataFrame(
            {
                "op": nccl.op_name.astype("category"),
                "dtype": nccl.nccl_dtype.astype("category"),
                "num_gpus": nccl.num_gpus.astype("int16"),
                "message_elements": nccl.message_size.astype("int64"),
                "latency_ms": nccl.latency.astype("float32"),
            }
        )
        meta = {**AIC_META, "gpu": gpu, "framework": f"nccl {nccl_file.parent.name}"}
        write(frame, out / "aiconfigurator" / gpu / "nccl.parquet", meta)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "cbsim" / "data" / "calibration",
    )
    args = parser.parse_args()
    pack_aiconfigurator(args.source, args.out)
    pack_vidur(args.source, args.out)
    pack_argonne(args.source, args.out)
    total = sum(p.stat().st_size for p in args.out.rglob("*.parquet"))
    print(f"wrote {args.out} ({total / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
