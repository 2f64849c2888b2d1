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

Bad input raises :class:`~cbsim.common.errors.CbsimError` naming the file, the column or key and the row;
numbers outside their physical range
(:data:`~cbsim.studies.calibration.benchmark_fields._FIELD_LIMITS`, from :mod:`cbsim.common.limits`: token
counts, clients, requests, latencies, throughputs, parallel sizes) are bad input too.

This module finds the files and tells their formats apart; each format's rows are read in its own
module (:mod:`~cbsim.studies.calibration.benchmark_aiconfigurator`,
:mod:`~cbsim.studies.calibration.benchmark_vllm`, :mod:`~cbsim.studies.calibration.benchmark_normalised`), the
columns and the checks of single fields in :mod:`~cbsim.studies.calibration.benchmark_fields`.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cbsim.common.errors import CbsimError
from cbsim.studies.calibration.benchmark_aiconfigurator import (
    _AIC_REQUIRED,
    _aiconfigurator_row,
)
from cbsim.studies.calibration.benchmark_fields import (
    _COUNT_COLUMNS,
    _TEXT_COLUMNS,
    BENCHMARK_COLUMNS,
    HF_MODEL_IDS,
    MEASURED_COLUMNS,
    OPTIONS,
    POOL_COLUMNS,
    PathLike,
    _validated_options,
    catalog_model,
)
from cbsim.studies.calibration.benchmark_normalised import (
    _check_normalised_columns,
    _normalised_row,
)
from cbsim.studies.calibration.benchmark_vllm import (
    _json_records,
    _vllm_row,
)
from cbsim.studies.calibration.data import shipped_root

__all__ = [
    "BENCHMARK_COLUMNS",
    "HF_MODEL_IDS",
    "MEASURED_COLUMNS",
    "OPTIONS",
    "POOL_COLUMNS",
    "SHIPPED_H100",
    "PathLike",
    "catalog_model",
    "read_benchmarks",
    "shared_h100_benchmarks",
]

SHIPPED_H100 = "aiconfigurator_silicon_h100.parquet"


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
    ``silicon_sample.csv``, Apache-2.0; see ``cbsim/catalog/data/LICENSES.md``), normalised like
    :func:`read_benchmarks`.
    """
    resource = shipped_root() / "e2e" / SHIPPED_H100
    if not resource.is_file():
        raise CbsimError(f"the shipped benchmarks {SHIPPED_H100} are missing; reinstall cbsim")
    data = resource.read_bytes()
    return _table(_rows_from_bytes(data, f"{SHIPPED_H100} (shipped)", ".parquet", {}))


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
