"""Measured end-to-end serving benchmarks: what real serving runs measured, one row per run.

An end-to-end serving benchmark drives a running engine (vLLM, SGLang, TensorRT-LLM) with requests
and times what its clients see: the time to first token (TTFT: queueing, prefill and the front
end), the time per output token after the first (TPOT: the decode iteration, engine overhead
included), every gap between streamed tokens (ITL), the whole request (end-to-end latency) and the
throughput. Kernel tables leave out what an engine adds around its kernels (scheduling, sampling,
detokenising, the HTTP front end); these runs are what fits and checks that part
(``cbsim calibrate e2e``, the end-to-end validation report).

The load of a run is described one of two ways. *Closed loop*: ``concurrency`` clients, each
sending its next request as soon as its last one finishes (AI Configurator; ``vllm bench serve
--max-concurrency C`` at the default infinite request rate). *Open loop*: requests arrive at
``request_rate`` per second whatever the server does (``--request-rate R``; ``inf`` sends them all
at once). A vLLM run with a finite rate *and* a concurrency cap keeps both.

:func:`read_benchmarks` reads any mix of three formats into one table with the columns
:data:`BENCHMARK_COLUMNS` (seconds, tokens, requests per second):

1. NVIDIA AI Configurator's silicon CSV (recognised by its ``silicon_ttft_ms`` column; the shipped
   H100 copy is :func:`shared_h100_benchmarks`). ``backend`` trtllm becomes ``tensorrt-llm``;
   ``system`` names map to cbsim's GPUs (``h100_sxm`` → ``h100-sxm``, ...); an empty ``precision``
   is an unquantised bf16 checkpoint, fp4/nvfp4 is ``fp4``; milliseconds become seconds and its one
   TTFT and TPOT figure per run are filed as the means. An empty ``concurrency`` is
   ``batch_size × attention_dp_size`` for aggregated rows and ``decode_batch_size ×
   decode_num_workers × decode_attention_dp_size`` for disaggregated ones (the recorded values
   obey both). Disaggregated rows (``mode`` ``disagg``) keep ``tp``, ``pp``, ``dp``, ``ep`` and
   ``batch_size`` empty and describe each pool in :data:`POOL_COLUMNS` instead (``prefill_tp``,
   ``decode_workers``, ...). ``moe_ep_size`` 0 (dense models) is ``ep`` 1.
2. vLLM's ``vllm bench serve --save-result`` JSON (formerly ``benchmarks/benchmark_serving.py``),
   with or without ``--save-detailed``; ``--append-result`` files (one JSON object per line) too.
   ``isl``/``osl`` are the mean prompt and output tokens of the completed requests, ``*_ms`` become
   seconds, and a latency of exactly 0 is "not measured" (vLLM writes 0 when, for instance, a
   non-streaming endpoint gave no TTFT). A statistic missing from the summary is computed from the
   per-request lists where those were saved. The file does not say which GPU, tensor-parallel
   degree or dtype ran: give them as options (``gpu=``, ``tp=``, ``dtype=``), or record them with
   ``--metadata gpu=h100-sxm tp=1 dtype=bf16``. The engine is vLLM unless the benchmark's
   ``--backend`` named another engine (``sglang``, ``tensorrt-llm``, ...); such a backend is
   recorded, and an ``engine`` option naming another engine is an error.
3. A CSV (or parquet) in the normalised columns, for measurements typed by hand. Required:
   ``engine``, ``gpu``, ``dtype``, ``tp`` (on aggregated rows), ``isl``, ``osl``, ``hf_model`` or
   ``model``, and per row at least one measured latency or throughput; every other column may be
   left out or empty; an unknown column is an error (so a misspelt one is not silently lost).
   :func:`read_benchmarks` output written back to CSV reads again unchanged.

Options (``engine``, ``gpu``, ``model``, ``dtype``, ``kv_dtype``, ``tp``, ...) describe the runs
where a file does not record something; what a file records always wins, and the AI Configurator
layout, which records everything, ignores them. ``model`` is the cbsim catalog name or a path to a
Hugging Face ``config.json``; when not given it comes from ``hf_model`` through
:data:`HF_MODEL_IDS`, and stays None for models cbsim does not know (MoE models, for instance),
which stay in the table so that a caller can report them as skipped.

Bad input raises :class:`~cbsim.errors.CbsimError` naming the file, the column or key and the row;
numbers outside their physical range (:data:`_FIELD_LIMITS`, from :mod:`cbsim.limits`: token
counts, clients, requests, latencies, throughputs, parallel sizes) are bad input too.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from cbsim.calibration.data import shipped_root
from cbsim.errors import CbsimError, unknown_name
from cbsim.hardware import GPU_NAMES
from cbsim.limits import (
    BATCH_SIZE,
    BENCHMARK_CLIENTS,
    BENCHMARK_REQUESTS,
    MEASURED_LATENCY,
    MEASURED_THROUGHPUT,
    RATE,
    TOKENS,
    TOTAL_GPUS,
    Limit,
)
from cbsim.models import MODEL_NAMES, get_model

MEASURED_COLUMNS: tuple[str, ...] = (
    "ttft_mean_s", "ttft_p50_s", "ttft_p99_s",
    "tpot_mean_s", "tpot_p50_s", "tpot_p99_s",
    "itl_mean_s", "itl_p50_s", "itl_p99_s",
    "e2e_mean_s", "output_tokens_per_s", "request_throughput_rps",
)  # fmt: skip
POOL_COLUMNS: tuple[str, ...] = tuple(
    f"{pool}_{what}"
    for pool in ("prefill", "decode")
    for what in ("tp", "pp", "dp", "ep", "workers", "batch_size")
)
BENCHMARK_COLUMNS: tuple[str, ...] = (
    "source", "engine", "engine_version", "hf_model", "model", "gpu", "dtype", "kv_dtype",
    "tp", "pp", "dp", "ep", "mode",
    "isl", "osl", "concurrency", "request_rate", "num_requests", "batch_size",
    *MEASURED_COLUMNS,
    *POOL_COLUMNS,
)  # fmt: skip
"""One row per benchmark run: identification, layout, load, what was measured, the pools of a
disaggregated run. Text columns hold str or None; ``tp``, ``pp``, ``dp``, ``ep`` and the pools'
counts are nullable integers (``Int64``); the rest are float64, NaN where unknown."""

_TEXT_COLUMNS = frozenset(BENCHMARK_COLUMNS[:8]) | {"mode"}
_COUNT_COLUMNS = frozenset(
    ["tp", "pp", "dp", "ep", *(c for c in POOL_COLUMNS if not c.endswith("batch_size"))]
)
OPTIONS: tuple[str, ...] = (
    "engine", "engine_version", "gpu", "model", "dtype", "kv_dtype", "tp", "pp", "dp", "ep",
)  # fmt: skip
"""What the options of :func:`read_benchmarks` can describe (and vLLM ``--metadata`` record)."""

HF_MODEL_IDS: Mapping[str, str] = MappingProxyType(
    {
        "meta-llama/Llama-2-7b-hf": "llama-2-7b",
        "meta-llama/Llama-2-13b-hf": "llama-2-13b",
        "meta-llama/Llama-2-70b-hf": "llama-2-70b",
        "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
        "meta-llama/Meta-Llama-3-70B": "llama-3-70b",
        "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
        "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",
        "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
        "meta-llama/Meta-Llama-3.1-70B": "llama-3.1-70b",
        "meta-llama/Llama-3.2-1B": "llama-3.2-1b",
        "mistralai/Mistral-7B-v0.1": "mistral-7b",
        "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b",
        "Qwen/Qwen2-7B": "qwen2.5-7b",  # the same shape as Qwen2.5-7B
        "Qwen/Qwen2.5-7B": "qwen2.5-7b",
        "Qwen/Qwen2.5-72B": "qwen2.5-72b",
        "Qwen/Qwen3-32B": "qwen3-32b",
    }
)
"""Hugging Face model ids → catalog names. Matching ignores case and the organisation (so a local
path ending in the repository name matches), and strips the ``-Instruct``, ``-chat``, ``-hf`` and
``-FP8`` variant suffixes, which keep the base model's shape."""

_VARIANT_SUFFIXES = ("-instruct", "-chat", "-hf", "-fp8")
_ENGINES = MappingProxyType({
    "vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm", "trt-llm": "tensorrt-llm",
    "tensorrt-llm": "tensorrt-llm", "tensorrt_llm": "tensorrt-llm", "tensorrtllm": "tensorrt-llm",
})  # fmt: skip
# vLLM benchmark --backend values that name the engine that served (others are plain endpoints).
_BENCH_BACKEND_ENGINES = frozenset(
    {"sglang", "tensorrt-llm", "lmdeploy", "tgi", "deepspeed-mii", "scalellm"}
)
_GPU_ALIASES = MappingProxyType({
    "a100_sxm": "a100-80gb", "a100": "a100-80gb", "h100_sxm": "h100-sxm", "h100": "h100-sxm",
    "h200_sxm": "h200", "b200_sxm": "b200",
})  # fmt: skip
_DTYPES = MappingProxyType({
    "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_block": "fp8", "fp4": "fp4", "nvfp4": "fp4",
    "mxfp4": "fp4",
})  # fmt: skip
_AIC_REQUIRED = (
    "backend", "model_path", "system", "mode", "isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms",
)  # fmt: skip
_NORMALISED_REQUIRED = ("engine", "gpu", "dtype", "tp", "isl", "osl")
_VLLM_REQUIRED = ("model_id", "completed", "total_input_tokens", "total_output_tokens")
# normalised column → vLLM result key (milliseconds), and the throughputs (already per second).
_VLLM_LATENCIES = MappingProxyType(
    {
        f"{metric}_{stat}_s": f"{key}_{metric}_ms"
        for metric in ("ttft", "tpot", "itl")
        for stat, key in (("mean", "mean"), ("p50", "median"), ("p99", "p99"))
    }
    | {"e2e_mean_s": "mean_e2el_ms"}
)
_VLLM_THROUGHPUTS = MappingProxyType(
    {"output_tokens_per_s": "output_throughput", "request_throughput_rps": "request_throughput"}
)
SHIPPED_H100 = "aiconfigurator_silicon_h100.parquet"
_FIELD_LIMITS: Mapping[str, Limit] = MappingProxyType(
    {
        "isl": TOKENS,
        "osl": TOKENS,
        "output_lens": TOKENS,
        "concurrency": BENCHMARK_CLIENTS,
        "max_concurrency": BENCHMARK_CLIENTS,
        "num_requests": BENCHMARK_REQUESTS,
        "num_prompts": BENCHMARK_REQUESTS,
        "completed": BENCHMARK_REQUESTS,
        "failed": BENCHMARK_REQUESTS,
        "request_rate": RATE,
        "ttfts": MEASURED_LATENCY,
        "latencies": MEASURED_LATENCY,
        "itls": MEASURED_LATENCY,
        **{c: MEASURED_LATENCY for c in MEASURED_COLUMNS if c.endswith("_s")},
        "output_tokens_per_s": MEASURED_THROUGHPUT,
        "request_throughput_rps": MEASURED_THROUGHPUT,
        "output_throughput": MEASURED_THROUGHPUT,
        "request_throughput": MEASURED_THROUGHPUT,
    }
)
"""Physical ranges of the numbers a benchmark file gives (:mod:`cbsim.limits`): a typo or a
corrupt file ends in an error naming the file, the row and the field, not in an absurd fit or a
simulation of a million clients."""
_LAYOUT_SUFFIXES = ("tp", "pp", "dp", "ep", "_size", "workers")

PathLike = str | os.PathLike[str]


def read_benchmarks(
    paths: PathLike | Iterable[PathLike],
    *,
    engine: str | None = None,
    engine_version: str | None = None,
    gpu: str | None = None,
    model: str | None = None,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    ep: int | None = None,
) -> pd.DataFrame:
    """Benchmark runs from AI Configurator CSVs, vLLM result JSONs and normalised CSVs, one table.

    The options describe what a file does not record (see the module docstring); an invalid one
    raises :class:`CbsimError` naming it. Returns the columns :data:`BENCHMARK_COLUMNS`, files in
    the order given, rows in file order, index ``0..n-1``.
    """
    options = _validated_options(
        {
            "engine": engine,
            "engine_version": engine_version,
            "gpu": gpu,
            "model": model,
            "dtype": dtype,
            "kv_dtype": kv_dtype,
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "ep": ep,
        }
    )
    listed = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not listed:
        raise CbsimError("no benchmark files given")
    rows: list[dict[str, Any]] = []
    for path in listed:
        rows.extend(_file_rows(Path(path), options))
    return _table(rows)


def shared_h100_benchmarks() -> pd.DataFrame:
    """NVIDIA AI Configurator's measured serving runs on H100 SXM, as shipped with cbsim.

    917 runs of vLLM, SGLang and TensorRT-LLM (ai-dynamo/aiconfigurator commit 095f58a,
    ``silicon_sample.csv``, Apache-2.0; see ``cbsim/data/LICENSES.md``), normalised like
    :func:`read_benchmarks`.
    """
    resource = shipped_root() / "e2e" / SHIPPED_H100
    if not resource.is_file():
        raise CbsimError(f"the shipped benchmarks {SHIPPED_H100} are missing; reinstall cbsim")
    data = resource.read_bytes()
    return _table(_rows_from_bytes(data, f"{SHIPPED_H100} (shipped)", ".parquet", {}))


def catalog_model(hf_model: str) -> str | None:
    """The catalog name of a Hugging Face model id (or a local path ending in one) of a dense
    model cbsim can price, else None: mixture-of-experts models too, whose measured deployments'
    layouts (expert, attention data and pipeline parallelism) the end-to-end fit does not set up
    yet (``benchmarks/moe_e2e.py`` compares them on their own)."""
    wanted = _base_name(hf_model)
    if wanted not in MODEL_NAMES:
        known = {_base_name(hf_id): name for hf_id, name in HF_MODEL_IDS.items()}
        found = known.get(wanted)
        if found is None:
            return None
        wanted = found
    model = get_model(wanted)
    return None if model.is_moe else wanted


def _base_name(model_id: str) -> str:
    name = model_id.strip().rstrip("/").replace("\\", "/").rsplit("/", 1)[-1].lower()
    stripped = True
    while stripped:
        stripped = False
        for suffix in _VARIANT_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name, stripped = name.removesuffix(suffix), True
    return name


# --- locating errors and reading cells ------------------------------------------------------------


@dataclass(frozen=True)
class _Where:
    """Where a value came from: a file (None for an option) and a row or line within it."""

    source: str | None
    row: str | None = None

    def error(self, reason: str, field: str | None = None) -> CbsimError:
        message = f"{self.row}: {reason}" if self.row else reason
        return CbsimError(message, source=self.source, field=field)

    def missing(self, field: str) -> CbsimError:
        flag = field.replace("_", "-")
        return self.error(
            f"not recorded; add it to the file or give the {field!r} option (--{flag})", field
        )


def _blank(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, str) and not value.strip()


def _text(value: Any) -> str | None:
    return None if _blank(value) else str(value).strip()


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _number(
    where: _Where, field: str, value: Any, *, positive: bool = True, allow_inf: bool = False
) -> float:
    """A non-negative (or positive) finite number, NaN for an empty cell."""
    if _blank(value):
        return math.nan
    try:
        if isinstance(value, bool):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise where.error(f"{_show(value)} is not a number", field) from None
    except OverflowError:
        raise where.error("is too large to be a measured quantity", field) from None
    if math.isnan(number):
        return math.nan
    if number < 0 or (positive and number == 0):
        sign = "positive" if positive else "non-negative"
        raise where.error(f"must be {sign}, got {_show(value)}", field)
    if math.isinf(number) and not allow_inf:
        raise where.error(f"must be finite, got {_show(value)}", field)
    if number > 0 and math.isfinite(number):
        _check_range(where, field, value, number)
    return number


def _limit_of(field: str) -> tuple[Limit, float] | None:
    """The range of a benchmark field (a file's key or column) and the factor to its range's
    unit (milliseconds to seconds), or None for a field without one."""
    name = field.split("[", 1)[0]
    if name in _FIELD_LIMITS:
        return _FIELD_LIMITS[name], 1.0
    if name.endswith("_ms"):
        return MEASURED_LATENCY, 1e-3
    if name.endswith("batch_size"):
        return BATCH_SIZE, 1.0
    if name.endswith(_LAYOUT_SUFFIXES):
        return TOTAL_GPUS, 1.0
    return None


def _check_range(where: _Where, field: str, value: Any, number: float) -> None:
    """An error naming ``field`` when ``number`` lies outside the field's physical range."""
    found = _limit_of(field)
    if found is None:
        return
    limit, scale = found
    if not limit.contains(number * scale):
        unit = " ms" if scale == 1e-3 else ""
        raise where.error(
            f"{_show(value)}{unit} is out of range: {limit.what} must be {limit.describe()} "
            f"({limit.reason})",
            field,
        )


def _count(
    where: _Where, field: str, value: Any, default: int | None, *, zero: bool = False
) -> int | None:
    """A positive (or, with ``zero``, non-negative) whole number; ``default`` for an empty cell."""
    number = _number(where, field, value, positive=not zero)
    if math.isnan(number):
        return default
    if not number.is_integer():
        raise where.error(f"must be a whole number, got {_show(value)}", field)
    return int(number)


def _required(where: _Where, field: str, value: Any) -> Any:
    """``value``, unless it is missing (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise where.error("is empty", field)
    return value


def _engine(value: Any) -> str | None:
    name = _text(value)
    return None if name is None else _ENGINES.get(name.lower(), name)


def _gpu(where: _Where, field: str, value: Any) -> str | None:
    name = _text(value)
    if name is None:
        return None
    key = name.lower()
    if key in GPU_NAMES:
        return key
    if key in _GPU_ALIASES:
        return _GPU_ALIASES[key]
    known = f"{', '.join(GPU_NAMES)} (or AI Configurator's {', '.join(_GPU_ALIASES)})"
    raise where.error(f"unknown GPU {name!r}; known: {known}", field)


def _dtype(where: _Where, field: str, value: Any) -> str | None:
    name = _text(value)
    if name is None or (field == "kv_dtype" and name.lower() == "auto"):
        return None
    if name.lower() not in _DTYPES:
        raise where.error(unknown_name("dtype", name, sorted(set(_DTYPES.values()))).message, field)
    return _DTYPES[name.lower()]


def _model(where: _Where, field: str, value: Any) -> str | None:
    name = _text(value)
    if name is None or name in MODEL_NAMES or name.endswith(".json") or Path(name).exists():
        return name
    raise where.error(unknown_name("model", name, MODEL_NAMES).message, field)


def _mode(where: _Where, value: Any) -> str:
    mode = (_text(value) or "agg").lower()
    if mode not in ("agg", "disagg"):
        raise where.error(f"must be 'agg' or 'disagg', got {_show(value)}", "mode")
    return mode


def _validated_options(given: Mapping[str, Any]) -> dict[str, Any]:
    where = _Where(None)
    options = {
        "engine": _engine(given["engine"]),
        "engine_version": _text(given["engine_version"]),
        "gpu": _gpu(where, "gpu", given["gpu"]),
        "model": _model(where, "model", given["model"]),
        "dtype": _dtype(where, "dtype", given["dtype"]),
        "kv_dtype": _dtype(where, "kv_dtype", given["kv_dtype"]),
        **{name: _count(where, name, given[name], None) for name in ("tp", "pp", "dp", "ep")},
    }
    return {name: value for name, value in options.items() if value is not None}


# --- files ----------------------------------------------------------------------------------------


def _file_rows(path: Path, options: Mapping[str, Any]) -> list[dict[str, Any]]:
    source = str(path)
    if path.is_dir():
        raise CbsimError("is a directory, not a benchmark file", source=source)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CbsimError("benchmark file not found", source=source) from None
    except OSError as err:
        raise CbsimError(f"cannot read: {err.strerror or err}", source=source) from None
    return _rows_from_bytes(data, source, path.suffix.lower(), options)


def _rows_from_bytes(
    data: bytes, source: str, suffix: str, options: Mapping[str, Any]
) -> list[dict[str, Any]]:
    if not data.strip():
        raise CbsimError("is empty", source=source)
    if suffix == ".parquet":
        return _table_rows(_parquet(data, source), source, options)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise CbsimError(
            f"is not UTF-8 text ({err.reason} at byte {err.start})", source=source
        ) from None
    if suffix in (".json", ".jsonl") or (suffix != ".csv" and text.lstrip().startswith("{")):
        return [_vllm_row(where, record, options) for where, record in _json_records(text, source)]
    return _table_rows(_csv(text, source), source, options)


def _parquet(data: bytes, source: str) -> pd.DataFrame:
    try:
        return pd.read_parquet(io.BytesIO(data))
    except (OSError, ValueError) as err:
        raise CbsimError(f"is not a readable parquet file ({err})", source=source) from None


def _csv(text: str, source: str) -> pd.DataFrame:
    try:
        # Text cells stay text (an engine version "0.10" must not become 0.1); numbers are parsed
        # per column later, with errors naming the cell.
        return pd.read_csv(io.StringIO(text), dtype=str, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise CbsimError("is empty", source=source) from None
    except (pd.errors.ParserError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CbsimError(f"is not a readable CSV file ({reason})", source=source) from None


def _table_rows(
    frame: pd.DataFrame, source: str, options: Mapping[str, Any]
) -> list[dict[str, Any]]:
    frame = frame.rename(columns=lambda c: str(c).strip())
    if frame.empty:
        raise CbsimError("has a header but no rows", source=source)
    records = [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")]
    if "silicon_ttft_ms" in frame.columns or "silicon_tpot_ms" in frame.columns:
        _require_columns(frame, _AIC_REQUIRED, "an AI Configurator silicon table", source)
        return [_aiconfigurator_row(source, i, cells) for i, cells in enumerate(records, start=1)]
    _check_normalised_columns(frame, source, options)
    return [_normalised_row(source, i, cells, options) for i, cells in enumerate(records, start=1)]


def _require_columns(frame: pd.DataFrame, needed: Sequence[str], what: str, source: str) -> None:
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise CbsimError(
            f"missing column(s) {', '.join(missing)} for {what} (needs {', '.join(needed)})",
            source=source,
        )


def _table(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    columns: dict[str, Any] = {}
    for column in BENCHMARK_COLUMNS:
        values = [row.get(column) for row in rows]
        if column in _TEXT_COLUMNS:
            columns[column] = pd.Series(values, dtype=object)
        elif column in _COUNT_COLUMNS:
            columns[column] = pd.array(values, dtype="Int64")
        else:
            floats = [math.nan if v is None else v for v in values]
            columns[column] = np.asarray(floats, dtype=np.float64)
    return pd.DataFrame(columns)


# --- NVIDIA AI Configurator's silicon table -------------------------------------------------------


def _aiconfigurator_row(source: str, number: int, cells: Mapping[str, Any]) -> dict[str, Any]:
    name = _text(cells.get("id"))
    where = _Where(source, f"row {number}" + (f" ({name})" if name else ""))
    mode = _mode(where, cells["mode"])
    hf_model = _required(where, "model_path", _text(cells["model_path"]))
    row: dict[str, Any] = {
        "source": f"{source}:{name or f'row {number}'}",
        "engine": _required(where, "backend", _engine(cells["backend"])),
        "engine_version": _text(cells.get("backend_version")),
        "hf_model": hf_model,
        "model": catalog_model(hf_model),
        "gpu": _required(where, "system", _gpu(where, "system", cells["system"])),
        "dtype": _dtype(where, "precision", cells.get("precision")) or "bf16",
        "kv_dtype": None,
        "mode": mode,
        "isl": _required(where, "isl", _number(where, "isl", cells["isl"])),
        "osl": _required(where, "osl", _number(where, "osl", cells["osl"])),
        "ttft_mean_s": _number(where, "silicon_ttft_ms", cells["silicon_ttft_ms"]) / 1e3,
        "tpot_mean_s": _number(where, "silicon_tpot_ms", cells["silicon_tpot_ms"]) / 1e3,
    }
    layout = _aggregated_layout(where, cells) if mode == "agg" else _pools_layout(where, cells)
    row.update(layout)
    concurrency = _number(where, "concurrency", cells.get("concurrency"))
    row["concurrency"] = concurrency if not math.isnan(concurrency) else _clients(row)
    if math.isnan(row["ttft_mean_s"]) and math.isnan(row["tpot_mean_s"]):
        raise where.error("has neither silicon_ttft_ms nor silicon_tpot_ms")
    _check_context(where, row, "isl")
    return row


def _layout(where: _Where, cells: Mapping[str, Any], prefix: str) -> dict[str, int | None]:
    """tp, pp, dp, ep of an engine (prefix "") or a pool ("prefill_"/"decode_")."""
    ep = cells.get(f"{prefix}moe_ep_size")
    return {
        "tp": _count(where, f"{prefix}tp_size", cells.get(f"{prefix}tp_size"), None),
        "pp": _count(where, f"{prefix}pp_size", cells.get(f"{prefix}pp_size"), 1),
        "dp": _count(
            where, f"{prefix}attention_dp_size", cells.get(f"{prefix}attention_dp_size"), 1
        ),
        # 0 marks a dense model: no experts to spread.
        "ep": _count(where, f"{prefix}moe_ep_size", None if _is_zero(ep) else ep, 1),
    }


def _is_zero(value: Any) -> bool:
    try:
        return not _blank(value) and float(value) == 0
    except (TypeError, ValueError):
        return False


def _aggregated_layout(where: _Where, cells: Mapping[str, Any]) -> dict[str, Any]:
    layout: dict[str, Any] = dict(_layout(where, cells, ""))
    if layout["tp"] is None:
        raise where.error("is empty on an aggregated (agg) row", "tp_size")
    layout["batch_size"] = _number(where, "batch_size", cells.get("batch_size"))
    return layout


def _pools_layout(where: _Where, cells: Mapping[str, Any]) -> dict[str, Any]:
    layout: dict[str, Any] = {}
    for pool in ("prefill", "decode"):
        for key, value in _layout(where, cells, f"{pool}_").items():
            layout[f"{pool}_{key}"] = value
        workers = f"{pool}_num_workers"
        layout[f"{pool}_workers"] = _count(where, workers, cells.get(workers), None)
        batch = f"{pool}_batch_size"
        layout[batch] = _number(where, batch, cells.get(batch))
    return layout


def _clients(row: Mapping[str, Any]) -> float:
    """Closed-loop clients implied by the running batches when the table leaves them out."""
    if row["mode"] == "agg":
        return float(row["batch_size"] * row["dp"])
    parts = (row["decode_batch_size"], row["decode_workers"], row["decode_dp"])
    return math.nan if any(p is None for p in parts) else float(math.prod(parts))


# --- normalised CSV ---------------------------------------------------------------------------


def _check_normalised_columns(frame: pd.DataFrame, source: str, options: Mapping[str, Any]) -> None:
    unknown = [c for c in frame.columns if c not in BENCHMARK_COLUMNS]
    if unknown:
        raise CbsimError(
            f"unknown column(s) {', '.join(map(repr, unknown))}; a benchmark table has the "
            f"columns {', '.join(BENCHMARK_COLUMNS)} (or is an AI Configurator silicon table)",
            source=source,
        )
    missing = [c for c in _NORMALISED_REQUIRED if c not in frame.columns and c not in options]
    if "hf_model" not in frame.columns and "model" not in frame.columns and "model" not in options:
        missing.append("hf_model or model")
    if missing:
        raise CbsimError(
            f"missing column(s) {', '.join(missing)}; add them, or give them as options when "
            "they are the same for every row",
            source=source,
        )
    if not any(c in frame.columns for c in MEASURED_COLUMNS):
        raise CbsimError(
            f"no measured column: give at least one of {', '.join(MEASURED_COLUMNS)}",
            source=source,
        )


def _normalised_row(
    source: str, number: int, cells: Mapping[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    where = _Where(source, f"row {number}")
    name = _text(cells.get("source"))
    row = _identity(where, cells, options)
    row["source"] = f"{source}:{name or f'row {number}'}"
    row["mode"] = _mode(where, cells.get("mode"))
    row.update(_parallel_layout(where, cells, options, row["mode"]))
    for field in ("isl", "osl", "concurrency", "num_requests", "batch_size"):
        row[field] = _number(where, field, cells.get(field))
    for field in ("isl", "osl"):
        _required(where, field, row[field])
    row["request_rate"] = _number(where, "request_rate", cells.get("request_rate"), allow_inf=True)
    for field in POOL_COLUMNS:
        if field.endswith("batch_size"):
            row[field] = _number(where, field, cells.get(field))
        else:
            row[field] = _count(where, field, cells.get(field), None)
    row.update(_measured(where, {c: cells.get(c) for c in MEASURED_COLUMNS}))
    _check_context(where, row, "isl")
    return row


def _parallel_layout(
    where: _Where, cells: Mapping[str, Any], options: Mapping[str, Any], mode: str
) -> dict[str, int | None]:
    """tp (required on aggregated runs), pp, dp and ep (1 when not given) of a normalised row."""
    layout = {
        field: _count(where, field, _given(cells, options, field), None if mode == "disagg" else 1)
        for field in ("pp", "dp", "ep")
    }
    layout["tp"] = _count(where, "tp", _given(cells, options, "tp"), None)
    if mode == "agg" and layout["tp"] is None:
        raise where.missing("tp")
    return layout


def _given(cells: Mapping[str, Any], options: Mapping[str, Any], field: str) -> Any:
    """The file's value for ``field``, else the option's."""
    value = cells.get(field)
    return options.get(field) if _blank(value) else value


def _identity(
    where: _Where,
    cells: Mapping[str, Any],
    options: Mapping[str, Any],
    default_engine: str | None = None,
) -> dict[str, Any]:
    """engine, engine_version, hf_model, model, gpu, dtype, kv_dtype of one run."""
    hf_model = _text(cells.get("hf_model"))
    model = _model(where, "model", _given(cells, options, "model"))
    if model is None and hf_model is not None:
        model = catalog_model(hf_model)
    if model is None and hf_model is None:
        raise where.missing("hf_model")
    row = {
        "engine": _engine(_given(cells, options, "engine")) or default_engine,
        "engine_version": _text(_given(cells, options, "engine_version")),
        "hf_model": hf_model,
        "model": model,
        "gpu": _gpu(where, "gpu", _given(cells, options, "gpu")),
        "dtype": _dtype(where, "dtype", _given(cells, options, "dtype")),
        "kv_dtype": _dtype(where, "kv_dtype", _given(cells, options, "kv_dtype")),
    }
    for field in ("engine", "gpu", "dtype"):
        if row[field] is None:
            raise where.missing(field)
    return row


def _measured(where: _Where, values: Mapping[str, Any]) -> dict[str, float]:
    measured = {column: _number(where, column, value) for column, value in values.items()}
    if all(math.isnan(v) for v in measured.values()):
        raise where.error(
            f"no measured latency or throughput (one of {', '.join(MEASURED_COLUMNS)})"
        )
    return measured


# --- vLLM bench serve result JSON -------------------------------------------------------------


def _json_records(text: str, source: str) -> Iterator[tuple[_Where, dict[str, Any]]]:
    """The result objects of a file: one (``--save-result``) or one per line (``--append-result``)."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as err:
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        if err.msg != "Extra data" or len(lines) < 2:
            raise CbsimError(
                f"is not JSON (line {err.lineno} column {err.colno}: {err.msg})", source=source
            ) from None
        for lineno, line in lines:
            where = _Where(source, f"line {lineno}")
            yield where, _json_object(line, where)
        return
    yield _Where(source), _as_object(whole, _Where(source))


def _json_object(line: str, where: _Where) -> dict[str, Any]:
    try:
        return _as_object(json.loads(line), where)
    except json.JSONDecodeError as err:
        raise where.error(f"is not JSON (column {err.colno}: {err.msg})") from None


def _as_object(value: Any, where: _Where) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.error(
            f"expected a JSON object (a vllm bench serve result), got a {type(value).__name__}"
        )
    return value


def _vllm_row(
    where: _Where, record: Mapping[str, Any], options: Mapping[str, Any]
) -> dict[str, Any]:
    missing = [key for key in _VLLM_REQUIRED if key not in record]
    if missing:
        raise where.error(
            f"missing key(s) {', '.join(missing)} of a vllm bench serve result", missing[0]
        )
    completed = _count(where, "completed", record["completed"], None)
    if completed is None:
        raise where.error("no request completed: nothing was measured", "completed")
    model_id = _required(where, "model_id", _text(record["model_id"]))
    cells = {**{k: record.get(k) for k in OPTIONS}, "hf_model": model_id}
    backend = _backend_engine(record)
    if backend is not None:  # the file records its engine: an option cannot contradict it
        recorded = _engine(cells["engine"])
        if recorded is not None and recorded != backend:
            raise where.error(
                f"engine {recorded!r} contradicts backend {record.get('backend')!r}", "engine"
            )
        cells["engine"] = backend
        given = options.get("engine")
        if given is not None and given != backend:
            raise where.error(
                f"{record.get('backend')!r}: the benchmark ran {backend}, not {given} (--engine); "
                f"fit it with --engine {backend}",
                "backend",
            )
    row = _identity(where, cells, options, default_engine="vllm")
    row.update(_parallel_layout(where, cells, options, "agg"))
    file_label = where.source or ""
    row.update(
        source=f"{file_label}:{where.row}" if where.row else file_label,
        mode="agg",
        isl=_mean_tokens(where, record, "total_input_tokens", completed),
        osl=_mean_tokens(where, record, "total_output_tokens", completed),
        num_requests=_requests_sent(where, record, completed),
        **_vllm_load(where, record),
    )
    row.update(_vllm_measured(where, record))
    _check_context(where, row, "total_input_tokens")
    return row


def _check_context(where: _Where, row: Mapping[str, Any], field: str) -> None:
    """A benchmark's prompt and output within its model's context (a longer one never ran:
    the file is wrong, or names the wrong model); ``field`` holds the prompt length."""
    model, isl, osl = row.get("model"), row["isl"], row["osl"]
    if model is None or math.isnan(isl):
        return
    try:
        context = get_model(str(model)).max_position_embeddings
    except CbsimError:
        return  # an unreadable model config: reported where the model is used
    output = 1.0 if math.isnan(osl) else max(1.0, osl)
    if isl + output > context:
        raise where.error(
            f"a prompt of {isl:,.0f} tokens and an output of {output:,.0f} exceed the "
            f"{context:,}-token context of {model}",
            field,
        )


def _backend_engine(record: Mapping[str, Any]) -> str | None:
    """The engine a vLLM result's ``backend`` names (``sglang``, ``tensorrt-llm``, ...), or None
    for a plain endpoint (``vllm``, ``openai``, ...: whatever served it)."""
    backend = (_text(record.get("backend")) or "").lower()
    engine = _ENGINES.get(backend, backend)
    return engine if engine in _BENCH_BACKEND_ENGINES else None


def _mean_tokens(where: _Where, record: Mapping[str, Any], key: str, completed: int) -> float:
    """Tokens per completed request from a total (``total_input_tokens``), within the range of
    token counts (a total that is not one, or a ``completed`` far too large, is an error)."""
    tokens: int = _required(where, key, _count(where, key, record[key], None, zero=True))
    mean = tokens / completed
    if not TOKENS.contains(mean):
        raise where.error(
            f"{tokens:,} tokens over {completed:,} completed requests is {mean:.4g} per request; "
            f"a request's token count must be {TOKENS.describe()} ({TOKENS.reason})",
            key,
        )
    return mean


def _requests_sent(where: _Where, record: Mapping[str, Any], completed: int) -> float:
    """``--num-prompts``, else the completed and failed requests."""
    sent = _count(where, "num_prompts", record.get("num_prompts"), None)
    failed = _count(where, "failed", record.get("failed"), 0, zero=True) or 0
    if sent is None and not BENCHMARK_REQUESTS.contains(completed + failed):
        raise where.error(
            f"{completed:,} completed and {failed:,} failed requests: a benchmark's requests "
            f"must be {BENCHMARK_REQUESTS.describe()} ({BENCHMARK_REQUESTS.reason})",
            "failed",
        )
    return float(sent if sent is not None else completed + failed)


def _vllm_load(where: _Where, record: Mapping[str, Any]) -> dict[str, float]:
    """Closed-loop clients (``--max-concurrency``) and open-loop arrival rate (``--request-rate``)."""
    cap = _count(where, "max_concurrency", record.get("max_concurrency"), None)
    concurrency = math.nan if cap is None else float(cap)
    raw_rate = record.get("request_rate")
    if "ramp_up_strategy" in record or _blank(raw_rate):
        rate = math.nan  # a ramp has no single rate
    else:
        rate = _number(where, "request_rate", raw_rate, allow_inf=True)
    if cap is not None and math.isinf(rate):
        rate = math.nan  # everything queued at once behind C slots: C closed-loop clients
    return {"concurrency": concurrency, "request_rate": rate}


def _vllm_measured(where: _Where, record: Mapping[str, Any]) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for column, key in (_VLLM_LATENCIES | _VLLM_THROUGHPUTS).items():
        value = _number(where, key, record.get(key), positive=False)
        scale = 1e-3 if key.endswith("_ms") else 1.0
        seconds[column] = math.nan if value == 0 else value * scale  # 0: nothing was measured
    per_request = _per_request_statistics(where, record)
    for column, value in per_request.items():
        if math.isnan(seconds[column]):
            seconds[column] = value
    return _measured(where, seconds)


def _per_request_statistics(where: _Where, record: Mapping[str, Any]) -> dict[str, float]:
    """Means, medians and P99s from the per-request lists of a ``--save-detailed`` result.

    Failed requests carry a zero TTFT and latency and no token gaps; they are left out.
    """
    ttfts = _number_list(where, record, "ttfts")
    latencies = _number_list(where, record, "latencies")
    output_lens = _number_list(where, record, "output_lens")
    itls = _list(where, record, "itls")
    gaps = [g for i, request in enumerate(itls) for g in _numbers_of(where, f"itls[{i}]", request)]
    stats = _statistics("ttft", ttfts[ttfts > 0]) | _statistics("itl", np.asarray(gaps))
    if latencies.size:
        stats["e2e_mean_s"] = _mean(latencies[latencies > 0])
    if ttfts.size and ttfts.size == latencies.size == output_lens.size:
        decoded = (ttfts > 0) & (latencies > 0) & (output_lens > 1)
        tpots = (latencies - ttfts)[decoded] / (output_lens[decoded] - 1)
        stats |= _statistics("tpot", tpots)
    return stats


def _statistics(metric: str, values: np.ndarray) -> dict[str, float]:
    if not values.size:
        return {}
    return {
        f"{metric}_mean_s": _mean(values),
        f"{metric}_p50_s": float(np.median(values)),
        f"{metric}_p99_s": float(np.percentile(values, 99)),
    }


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if values.size else math.nan


def _list(where: _Where, record: Mapping[str, Any], key: str) -> list[Any]:
    value = record.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(f"must be a list, got {type(value).__name__}", key)
    return value


def _number_list(where: _Where, record: Mapping[str, Any], key: str) -> np.ndarray:
    return np.asarray(_numbers_of(where, key, _list(where, record, key)), dtype=np.float64)


def _numbers_of(where: _Where, key: str, values: Any) -> list[float]:
    if not isinstance(values, list):
        raise where.error(f"must be a list of numbers, got {type(values).__name__}", key)
    numbers = []
    for index, value in enumerate(values):
        number = _number(where, f"{key}[{index}]", value, positive=False)
        numbers.append(0.0 if math.isnan(number) else number)
    return numbers
