"""Pack llm-d-benchmark's per-request serving runs into cbsim/catalog/data/calibration/e2e/.

Usage: python tools/pack_per_request.py SOURCE_DIR [--out FILE]

SOURCE_DIR is the folder of the 56 per-request CSVs and their ``runs.csv`` index as published
(llm-d/llm-d-benchmark commit 5fbe3ac4, Apache-2.0; see cbsim/catalog/data/LICENSES.md). The packed file
``llm_d_a100_per_request.parquet`` holds one row per request with the run's deployment facts
(``run``, ``deployment``, ``engine_image``, ``replicas``, ``tp``, ``workload``, ``qps``) and the
client's own columns (``prompt_tokens``, ``generation_tokens``, ``ttft``, ``generation_time``,
``launch_time`` relative to the run's first send, ``user_id`` and ``question_id`` where the
workload has them); source and licence in the file's metadata.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

DEFAULT_OUT = (
    Path(__file__).resolve().parents[1]
    / "cbsim"
    / "data"
    / "calibration"
    / "e2e"
    / "llm_d_a100_per_request.parquet"
)
SOURCE = (
    "llm-d/llm-d-benchmark commit 5fbe3ac44e0f810d6f9c660076829546c5902c31, "
    "data/openshift/{exp-0/vllm-70b,exp-0/baseline-llm-d-70b,exp-2/vllm-70b-2replicas}"
)
LICENCE = "Apache-2.0 (llm-d/llm-d-benchmark; client LMCache/LMBenchmark, Apache-2.0)"


def pack(source: Path) -> pd.DataFrame:
    runs = pd.read_csv(source / "runs.csv")
    frames = []
    for _, run in runs.iterrows():
        data = pd.read_csv(source / run["file"])
        data = data.sort_values("launch_time", kind="stable").reset_index(drop=True)
        start = float(data["launch_time"].min())
        frame = pd.DataFrame(
            {
                "run": Path(run["file"]).stem,
                "deployment": run["deployment"],
                "engine_image": run["engine_version"],
                "replicas": int(run["replicas"]),
                "tp": int(run["tp"]),
                "workload": run["workload"],
                "qps": float(run["qps"]),
                "send_s": data["launch_time"] - start,
                "prompt_tokens": data["prompt_tokens"].round().astype("int32"),
                "generation_tokens": data["generation_tokens"].round().astype("int32"),
                "ttft_s": data["ttft"],
                "generation_time_s": data["generation_time"],
                "user_id": data.get("user_id", -1),
                "question_id": data.get("question_id", -1),
            }
        )
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True)
    for column in ("run", "deployment", "engine_image", "workload"):
        table[column] = table[column].astype("category")
    for column in ("user_id", "question_id", "replicas", "tp"):
        table[column] = table[column].fillna(-1).astype("int32")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    table = pa.Table.from_pandas(pack(args.source), preserve_index=False)
    meta = {
        b"cbsim": json.dumps(
            {
                "source": SOURCE,
                "licence": LICENCE,
                "gpu": "A100-SXM4-80GB",
                "model": "meta-llama/Llama-3.1-70B-Instruct",
            }
        ).encode()
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    pq.write_table(table, args.out, compression="zstd")
    print(f"wrote {args.out} ({table.num_rows} requests)")


if __name__ == "__main__":
    main()
