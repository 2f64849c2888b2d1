"""Benchmark rows typed by hand: a CSV (or parquet) in the normalised columns.

Required: ``engine``, ``gpu``, ``dtype``, ``tp`` (on aggregated rows), ``isl``, ``osl``,
``hf_model`` or ``model``, and per row at least one measured latency or throughput; every other
column may be left out or empty, and an unknown column is an error (so a misspelt one is not
silently lost). :func:`~cbsim.studies.calibration.benchmarks.read_benchmarks` output written back to CSV
reads again unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from cbsim.common.errors import CbsimError
from cbsim.studies.calibration.benchmark_fields import (
    BENCHMARK_COLUMNS,
    MEASURED_COLUMNS,
    POOL_COLUMNS,
    _check_context,
    _count,
    _identity,
    _measured,
    _mode,
    _number,
    _parallel_layout,
    _required,
    _text,
    _Where,
)

_NORMALISED_REQUIRED = ("engine", "gpu", "dtype", "tp", "isl", "osl")


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
