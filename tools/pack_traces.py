"""Regenerate the request traces shipped in ``cbsim/catalog/data/traces/`` from the original files.

Usage::

    python tools/pack_traces.py SOURCE_DIR [--out cbsim/catalog/data/traces]

``SOURCE_DIR`` holds the files as published upstream (see ``cbsim/catalog/data/LICENSES.md``):
``azure_llm_conv_2023.csv``, ``azure_llm_code_2023.csv`` and ``mooncake_conversation.jsonl``.
Each is written as a zstd-compressed parquet file with columns ``arrival_s`` (float64, seconds since
the first request), ``prompt_tokens`` and ``output_tokens`` (int32), plus ``prefix_hash_ids``
(list<int32>) for Mooncake, and its source, licence and citation in the file's key-value metadata.
Rows keep the upstream order (both sources are already sorted by arrival); nothing is dropped.

This is a one-off maintenance script, not part of the package; the package never reads SOURCE_DIR.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

AZURE_CITATION = (
    "Pratyush Patel, Esha Choukse, Chaojie Zhang, Aashaka Shah, Íñigo Goiri, Saeed Maleki, "
    'Ricardo Bianchini. "Splitwise: Efficient Generative LLM Inference Using Phase Splitting". '
    "ISCA 2024."
)
MOONCAKE_CITATION = (
    'Ruoyu Qin et al. "Mooncake: Trading More Storage for Less Computation — A KVCache-centric '
    'Architecture for Serving LLM Chatbot". USENIX FAST 2025.'
)


@dataclass(frozen=True)
class TraceSpec:
    name: str
    source_file: str
    source: str
    license: str
    citation: str
    transform: str


AZURE_TRANSFORM = (
    "TIMESTAMP (datetime, 100 ns resolution) -> arrival_s = seconds since the first row; "
    "ContextTokens -> prompt_tokens; GeneratedTokens -> output_tokens; "
    "all rows kept, upstream order."
)
SPECS = (
    TraceSpec(
        name="azure-conv-2023",
        source_file="azure_llm_conv_2023.csv",
        source="https://github.com/Azure/AzurePublicDataset commit b469a11, "
        "data/AzureLLMInferenceTrace_conv.csv",
        license="CC-BY-4.0",
        citation=AZURE_CITATION,
        transform=AZURE_TRANSFORM,
    ),
    TraceSpec(
        name="azure-code-2023",
        source_file="azure_llm_code_2023.csv",
        source="https://github.com/Azure/AzurePublicDataset commit b469a11, "
        "data/AzureLLMInferenceTrace_code.csv",
        license="CC-BY-4.0",
        citation=AZURE_CITATION,
        transform=AZURE_TRANSFORM,
    ),
    TraceSpec(
        name="mooncake-conversation",
        source_file="mooncake_conversation.jsonl",
        source="https://github.com/kvcache-ai/Mooncake commit 3b5a594, "
        "FAST25-release/traces/conversation_trace.jsonl",
        license="Apache-2.0",
        citation=MOONCAKE_CITATION,
        transform=(
            "timestamp (ms) -> arrival_s = (timestamp - first timestamp) / 1000; "
            "input_length -> prompt_tokens; output_length -> output_tokens; "
            "hash_ids -> prefix_hash_ids (list<int32>, ids of 512-token prefix blocks); "
            "all rows kept, upstream order."
        ),
    ),
)


def _azure(path: Path) -> pa.Table:
    raw = pd.read_csv(path)
    ts = pd.to_datetime(raw["TIMESTAMP"], format="%Y-%m-%d %H:%M:%S.%f")
    ns = ts.astype("datetime64[ns]").to_numpy().astype(np.int64)
    return pa.table(
        {
            "arrival_s": pa.array((ns - ns[0]) / 1e9, pa.float64()),
            "prompt_tokens": pa.array(raw["ContextTokens"].to_numpy(), pa.int32()),
            "output_tokens": pa.array(raw["GeneratedTokens"].to_numpy(), pa.int32()),
        }
    )


def _mooncake(path: Path) -> pa.Table:
    with path.open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    ms = np.array([r["timestamp"] for r in rows], dtype=np.int64)
    return pa.table(
        {
            "arrival_s": pa.array((ms - ms[0]) / 1000.0, pa.float64()),
            "prompt_tokens": pa.array([r["input_length"] for r in rows], pa.int32()),
            "output_tokens": pa.array([r["output_length"] for r in rows], pa.int32()),
            "prefix_hash_ids": pa.array([r["hash_ids"] for r in rows], pa.list_(pa.int32())),
        }
    )


def pack(source_dir: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for spec in SPECS:
        src = source_dir / spec.source_file
        table = _mooncake(src) if src.suffix == ".jsonl" else _azure(src)
        arrival = table.column("arrival_s").to_numpy()
        assert arrival[0] == 0.0 and bool(np.all(np.diff(arrival) >= 0)), spec.name
        metadata = {
            "name": spec.name,
            "source": spec.source,
            "license": spec.license,
            "citation": spec.citation,
            "transform": spec.transform,
        }
        table = table.replace_schema_metadata({k: v.encode() for k, v in metadata.items()})
        dest = out_dir / f"{spec.name}.parquet"
        pq.write_table(
            table,
            dest,
            compression="zstd",
            compression_level=19,
            use_dictionary=False,
            column_encoding={
                "arrival_s": "BYTE_STREAM_SPLIT",
                "prompt_tokens": "DELTA_BINARY_PACKED",
                "output_tokens": "DELTA_BINARY_PACKED",
                **(
                    {"prefix_hash_ids.list.element": "DELTA_BINARY_PACKED"}
                    if "prefix_hash_ids" in table.column_names
                    else {}
                ),
            },
        )
        print(f"{dest}: {table.num_rows} rows, {dest.stat().st_size} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source_dir", type=Path, help="directory with the original trace files")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "cbsim" / "catalog" / "data" / "traces",
        help="output directory (default: cbsim/catalog/data/traces in this repository)",
    )
    args = parser.parse_args()
    pack(args.source_dir, args.out)


if __name__ == "__main__":
    main()
