"""Measured timing tables: the shipped copy or a user's own, validated.

Calibration reads tables in one schema (the shipped copy in ``cbsim/catalog/data/calibration`` follows it;
``cbsim calibrate measure`` writes it; ``tools/pack_calibration.py`` converts NVIDIA AI
Configurator's and Vidur's originals to it). A user's own data is a folder holding any of
``gemm``, ``decode_attention``, ``prefill_attention``, ``nccl`` and ``custom_allreduce`` as
``.parquet`` or ``.csv``:

* gemm: ``m, n, k, dtype (bf16|fp8|fp4), latency_ms``
* decode_attention / prefill_attention: ``batch_size, tokens, num_heads, num_kv_heads, head_dim,
  kv_dtype, latency_ms`` (decode: ``tokens`` = cached context; prefill: input length), optional
  ``kernel``
* nccl: ``op (all_reduce, ...), num_gpus, message_elements (fp16 elements), latency_ms``
* custom_allreduce: ``num_gpus, message_elements (16-bit elements), latency_ms`` — a serving
  engine's own all-reduce kernel (TensorRT-LLM's and SGLang's replace NCCL for the message sizes
  they measure)
* mla_decode / mla_prefill: ``num_heads, batch_size, tokens, kv_dtype, gemm_dtype, kernel,
  latency_ms`` — DeepSeek-V3's whole multi-head latent attention module (projections and
  attention) with ``num_heads`` query heads on the GPU (see :mod:`cbsim.studies.calibration.mla`),
  shipped for H100 and B200
* moe: ``moe_dtype, distribution, num_tokens, hidden_size, inter_size, topk, num_experts,
  moe_tp_size, moe_ep_size, latency_ms`` — one MoE layer's routed experts (an engine's fused MoE
  kernel; see :mod:`cbsim.studies.calibration.moe`), shipped for A100, H100 and B200 under vLLM, for H100
  and B200 under TensorRT-LLM and SGLang

Kernel sources. The same kernel is not the same on every serving engine: each ships its own GEMM
dispatch, attention kernels and all-reduce, so the shipped tables are kept per engine (the
*source* of a measurement) and :func:`load_table` takes ``engine=``: ``"vllm"`` (the default; every
measured GPU), ``"trtllm"`` (TensorRT-LLM 1.3.0rc20) and ``"sglang"`` (SGLang 0.5.14) on
``h100-sxm``, ``h200`` and ``b200`` (their MoE tables on ``h100-sxm`` and ``b200``). On disk
vLLM's tables sit in ``aiconfigurator/<gpu>/`` and another
engine's in ``aiconfigurator/<gpu>/<engine>/``; NCCL does not depend on the engine, so ``nccl`` is
read from ``aiconfigurator/<gpu>/`` whatever the engine. A user's ``data_dir`` holds one source, so
``engine`` does not change what is read from it.

Missing columns, non-positive or non-finite timings are errors naming the file and the column.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cbsim.common.errors import CbsimError, unknown_name

SCHEMAS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k", "dtype", "latency_ms"),
    "decode_attention": (
        "batch_size", "tokens", "num_heads", "num_kv_heads", "head_dim", "kv_dtype", "latency_ms",
    ),
    "prefill_attention": (
        "batch_size", "tokens", "num_heads", "num_kv_heads", "head_dim", "kv_dtype", "latency_ms",
    ),
    "nccl": ("op", "num_gpus", "message_elements", "latency_ms"),
    "custom_allreduce": ("num_gpus", "message_elements", "latency_ms"),
    "mla_decode": (
        "num_heads", "batch_size", "tokens", "kv_dtype", "gemm_dtype", "kernel", "latency_ms",
    ),
    "mla_prefill": (
        "num_heads", "batch_size", "tokens", "kv_dtype", "gemm_dtype", "kernel", "latency_ms",
    ),
    "moe": (
        "moe_dtype", "distribution", "num_tokens", "hidden_size", "inter_size", "topk",
        "num_experts", "moe_tp_size", "moe_ep_size", "latency_ms",
    ),
}  # fmt: skip

DEFAULT_ENGINE = "vllm"
ENGINES: tuple[str, ...] = ("vllm", "trtllm", "sglang")
"""Kernel sources the shipped tables can come from, by their folder name."""
ENGINE_ALIASES: dict[str, str] = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm"}
ENGINE_INDEPENDENT: frozenset[str] = frozenset({"nccl"})
"""Tables that do not depend on the serving engine (one per GPU, in its own folder)."""


def shipped_root() -> Any:
    return files("cbsim.catalog") / "data" / "calibration"


def measured_gpus() -> list[str]:
    """GPUs with shipped kernel measurements (vLLM's, at least)."""
    folder = shipped_root() / "aiconfigurator"
    return sorted(p.name for p in folder.iterdir() if p.is_dir())


def engine_name(engine: str) -> str:
    """The kernel-source name for ``engine`` (``"tensorrt-llm"`` is ``"trtllm"``); an error naming
    the known ones otherwise."""
    name = ENGINE_ALIASES.get(engine, engine)
    if name not in ENGINES:
        raise unknown_name("kernel source (serving engine)", engine, list(ENGINES))
    return name


def measured_engines(gpu: str) -> list[str]:
    """Serving engines with shipped kernel tables for ``gpu`` (vLLM first), [] for none."""
    folder = shipped_root() / "aiconfigurator" / gpu
    if not folder.is_dir():
        return []
    others = {p.name for p in folder.iterdir() if p.is_dir()}
    return [DEFAULT_ENGINE, *(e for e in ENGINES if e in others)]


def read_table_file(path: Any) -> pd.DataFrame:
    """A measurement file as it is (parquet, or CSV by its suffix); errors name the file."""
    name = str(path)
    try:
        if name.endswith(".csv"):
            _check_unique_columns(table_columns(path), name)
            return pd.read_csv(path)
        with path.open("rb") as handle:
            frame = pd.read_parquet(handle)
    except (OSError, ValueError) as err:
        raise CbsimError(f"cannot read measurements: {err}", source=name) from None
    _check_unique_columns([str(c) for c in frame.columns], name)
    return frame


def table_columns(path: Path) -> list[str]:
    """The column names of a measurement file as its header gives them (a name given twice
    listed twice); errors name the file."""
    name = str(path)
    try:
        if name.endswith(".csv"):
            header = pd.read_csv(path, header=None, nrows=1, dtype=str, keep_default_na=False)
            return [str(c) for c in header.iloc[0]] if len(header) else []
        with path.open("rb") as handle:
            return [str(c) for c in pd.read_parquet(handle).columns]
    except (OSError, ValueError) as err:
        raise CbsimError(f"cannot read measurements: {err}", source=name) from None


def _check_unique_columns(names: list[str], source: str) -> None:
    """Refuse a table that names a column twice (pandas would rename the second ``NAME.1``, and
    which one holds the data would be a guess)."""
    seen: set[str] = set()
    for column in names:
        if column in seen:
            raise CbsimError(
                f"the column {column!r} appears twice in the header; keep one", source=source
            )
        seen.add(column)


def validate(frame: pd.DataFrame, table: str, source: str) -> pd.DataFrame:
    """Check a table against its schema; return it with a ``latency_s`` column added."""
    missing = [c for c in SCHEMAS[table] if c not in frame.columns]
    if missing:
        raise CbsimError(
            f"missing column(s) {', '.join(missing)} for a {table} table "
            f"(need {', '.join(SCHEMAS[table])})",
            source=source,
        )
    if frame.empty:
        raise CbsimError(f"the {table} table has no rows", source=source)
    latency = pd.to_numeric(frame["latency_ms"], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(latency) | (latency <= 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise CbsimError(
            f"latency_ms must be positive and finite; row {row + 1} has {frame['latency_ms'].iloc[row]!r}",
            source=source,
        )
    out = frame.copy()
    out["latency_s"] = latency / 1e3
    return out


def table_file(folder: Path, table: str) -> Path | None:
    """A user's ``table`` in ``folder``: ``<table>.parquet``, else ``<table>.csv``, else None."""
    for suffix in (".parquet", ".csv"):
        path = folder / f"{table}{suffix}"
        if path.is_file():
            return path
    return None


def load_table(
    table: str, gpu: str, data_dir: str | Path | None = None, *, engine: str = DEFAULT_ENGINE
) -> pd.DataFrame:
    """One measured table for a GPU: from ``data_dir`` if given, else the shipped copy measured
    under ``engine`` (``"vllm"``, ``"trtllm"``, ``"sglang"``; see the module docstring)."""
    if table not in SCHEMAS:
        raise unknown_name("measurement table", table, list(SCHEMAS))
    source = engine_name(engine)
    if data_dir is not None:
        folder = Path(data_dir)
        path = table_file(folder, table)
        if path is not None:
            return validate(read_table_file(path), table, str(path))
        raise CbsimError(f"no {table}.parquet or {table}.csv in {folder}", source=str(folder))
    folder = shipped_root() / "aiconfigurator" / gpu
    if not folder.is_dir():
        raise unknown_name("GPU with shipped measurements", gpu, measured_gpus())
    where = gpu
    if source != DEFAULT_ENGINE and table not in ENGINE_INDEPENDENT:
        folder = folder / source
        where = f"{gpu}/{source}"
        if not folder.is_dir():
            raise CbsimError(
                f"no {source} kernel tables are shipped for {gpu} "
                f"(engines measured there: {', '.join(measured_engines(gpu))})",
                field="engine",
            )
    path = folder / f"{table}.parquet"
    if not path.is_file():
        raise CbsimError(f"no shipped {table} table for {where}", field="table")
    return validate(read_table_file(path), table, f"{where}/{table}.parquet (shipped)")


def vidur_tables(gpu: str) -> dict[str, pd.DataFrame]:
    """Vidur's per-layer operator medians (ms) for a GPU, by model name."""
    folder = shipped_root() / "vidur" / gpu
    if not folder.is_dir():
        return {}
    return {
        p.name.removesuffix(".parquet"): read_table_file(p)
        for p in sorted(folder.iterdir(), key=lambda p: p.name)
        if p.name.endswith(".parquet")
    }


def vidur_network(node: str) -> pd.DataFrame:
    """Vidur's all-reduce medians (ms) for a node type (``h100_dgx``, ``a100_dgx``, ...)."""
    return read_table_file(shipped_root() / "vidur" / "network" / f"{node}.parquet")


def argonne_static_batches() -> pd.DataFrame:
    """LLM-Inference-Bench's end-to-end static-batch latencies on A100."""
    return read_table_file(shipped_root() / "e2e" / "argonne_a100_static_batch.parquet")


def aiconfigurator_silicon_h100() -> pd.DataFrame:
    """NVIDIA AI Configurator's measured serving benchmarks on H100 SXM (917 rows: vLLM,
    TensorRT-LLM and SGLang; closed-loop ``concurrency`` clients, fixed ``isl``/``osl``, measured
    ``silicon_ttft_ms`` and ``silicon_tpot_ms``), with the original CSV's column names."""
    return read_table_file(shipped_root() / "e2e" / "aiconfigurator_silicon_h100.parquet")
