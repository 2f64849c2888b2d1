"""The benchmark table's columns, and the checked reading of one field of a row.

Every format is read into the columns :data:`BENCHMARK_COLUMNS` (seconds, tokens, requests per
second). A field becomes a column value through one check: text is trimmed, numbers must be finite
and within their physical range (:data:`_FIELD_LIMITS`, from :mod:`cbsim.common.limits`), counts whole,
and names (engine, GPU, dtype, model) map to cbsim's own (:data:`HF_MODEL_IDS`,
:func:`catalog_model`). A bad field raises :class:`~cbsim.common.errors.CbsimError` naming the file, the
column or key and the row (:class:`_Where`). The groups of columns every format fills the same
way (a run's identity, its parallel layout, what it measured) are built here too.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pandas as pd

from cbsim.catalog.hardware import GPU_NAMES
from cbsim.catalog.models import MODEL_NAMES, get_model
from cbsim.common.errors import CbsimError, unknown_name
from cbsim.common.limits import (
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
_GPU_ALIASES = MappingProxyType({
    "a100_sxm": "a100-80gb", "a100": "a100-80gb", "h100_sxm": "h100-sxm", "h100": "h100-sxm",
    "h200_sxm": "h200", "b200_sxm": "b200",
})  # fmt: skip
_DTYPES = MappingProxyType({
    "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "half": "fp16",
    "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_block": "fp8", "fp4": "fp4", "nvfp4": "fp4",
    "mxfp4": "fp4",
})  # fmt: skip
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
"""Physical ranges of the numbers a benchmark file gives (:mod:`cbsim.common.limits`): a typo or a
corrupt file ends in an error naming the file, the row and the field, not in an absurd fit or a
simulation of a million clients."""
_LAYOUT_SUFFIXES = ("tp", "pp", "dp", "ep", "_size", "workers")

PathLike = str | os.PathLike[str]


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
