"""vLLM's ``vllm bench serve --save-result`` JSON as benchmark rows.

With or without ``--save-detailed``; ``--append-result`` files (one JSON object per line) too.
``isl``/``osl`` are the mean prompt and output tokens of the completed requests, ``*_ms`` become
seconds, and a latency of exactly 0 is "not measured". A statistic missing from the summary is
computed from the per-request lists where those were saved. The GPU, tensor-parallel degree and
dtype come from options or ``--metadata``; the engine is vLLM unless the benchmark's
``--backend`` named another engine.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from cbsim.common.errors import CbsimError
from cbsim.common.limits import (
    BENCHMARK_REQUESTS,
    TOKENS,
)
from cbsim.studies.calibration.benchmark_fields import (
    _ENGINES,
    OPTIONS,
    _blank,
    _check_context,
    _count,
    _engine,
    _identity,
    _measured,
    _number,
    _parallel_layout,
    _required,
    _text,
    _Where,
)

# vLLM benchmark --backend values that name the engine that served (others are plain endpoints).
_BENCH_BACKEND_ENGINES = frozenset(
    {"sglang", "tensorrt-llm", "lmdeploy", "tgi", "deepspeed-mii", "scalellm"}
)
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
