"""Request traces: when requests arrived and how many tokens each read and wrote.

A trace is a log of real LLM serving traffic reduced to what the simulator needs per request: its
arrival time, its prompt length (tokens to prefill) and its output length (tokens to decode).
Replaying one replaces the synthetic arrival process and length distributions of a workload, so the
simulated cluster sees real burstiness and real, heavy-tailed length mixes.

Shipped traces (load by name; stored as parquet under ``cbsim/data/traces/``):

``azure-conv-2023``
    19,366 requests to a conversational (chat) LLM service in Azure, about one hour on 2023-11-16
    (about 5.5 requests/s; mean prompt 1,155 tokens, mean output 211 tokens).
``azure-code-2023``
    8,819 requests to a code-completion LLM service in Azure over the same hour (about 2.6
    requests/s; long prompts, mean 2,048 tokens, short outputs, mean 28 tokens).

    Both are from the Azure LLM inference traces 2023, Azure/AzurePublicDataset, licensed
    CC-BY-4.0. Cite: Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase
    Splitting", ISCA 2024.
``mooncake-conversation``
    12,031 requests of the conversation workload of Moonshot AI's Kimi service, from the Mooncake
    FAST'25 release (kvcache-ai/Mooncake, licensed Apache-2.0; Qin et al., "Mooncake: Trading
    More Storage for Less Computation", USENIX FAST 2025). Besides the lengths it has
    ``prefix_hash_ids``: for each request, the ids of its prompt's 512-token blocks, where equal
    ids mean a shared prompt prefix (what a prefix cache could reuse).

The shipped files keep their source, licence and citation in the parquet key-value metadata, and
``cbsim/data/LICENSES.md`` (installed with the package) lists them with what was transformed.

User trace files (``.parquet``, ``.csv``, or ``.jsonl``/``.json`` with one JSON object per line; a
``.json`` file holding one JSON array of objects also works) are recognised by these column names,
case-sensitive, the first present one winning:

- arrival: ``arrival_s`` (seconds) | ``timestamp_s`` (seconds) | ``timestamp`` (numbers are
  milliseconds, as in the Mooncake traces; strings are parsed as date-times) | ``TIMESTAMP``
  (date-time strings, as in the Azure traces). Optional: a trace with lengths only (such as Vidur's
  arXiv summarization lengths) gets ``arrival_s`` all NaN and ``attrs["has_arrivals"] = False``,
  and the workload must supply arrivals itself.
- prompt length: ``prompt_tokens`` | ``input_length`` | ``ContextTokens`` | ``num_prefill_tokens``.
- output length: ``output_tokens`` | ``output_length`` | ``GeneratedTokens`` |
  ``num_decode_tokens``.
- prefix block ids (optional): ``prefix_hash_ids`` | ``hash_ids`` — a list of integers per request
  (in a CSV, a JSON list such as ``[1, 2, 3]``).

Other columns are ignored; a parquet date-time column under an arrival name is used as is.
Arrivals are shifted so the first request arrives at 0 s, and requests are sorted by arrival
(stably, so ties keep the file's order). Token counts must be positive integers and arrivals
non-negative and present; an error names the first bad row, counting data rows from 1 (a CSV
header is not a row).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from cbsim.errors import CbsimError

__all__ = ["TRACE_NAMES", "load_trace"]

TRACE_NAMES: tuple[str, ...] = ("azure-code-2023", "azure-conv-2023", "mooncake-conversation")

ARRIVAL_COLUMNS: tuple[str, ...] = ("arrival_s", "timestamp_s", "timestamp", "TIMESTAMP")
PROMPT_COLUMNS: tuple[str, ...] = (
    "prompt_tokens",
    "input_length",
    "ContextTokens",
    "num_prefill_tokens",
)
OUTPUT_COLUMNS: tuple[str, ...] = (
    "output_tokens",
    "output_length",
    "GeneratedTokens",
    "num_decode_tokens",
)
PREFIX_COLUMNS: tuple[str, ...] = ("prefix_hash_ids", "hash_ids")

_COLUMN_ORDER = ("arrival_s", "prompt_tokens", "output_tokens", "prefix_hash_ids")
_SUFFIXES = (".parquet", ".csv", ".jsonl", ".json")


@dataclass(frozen=True)
class _Where:
    """Where a trace came from, for error messages: the trace file plus the caller's location."""

    label: str
    source: str | None
    field: str | None

    def error(self, reason: str) -> CbsimError:
        return CbsimError(
            f"trace file {self.label}: {reason}", source=self.source, field=self.field
        )

    def bad_cell(self, row: int, column: str, value: Any, expected: str) -> CbsimError:
        """Error for the cell in 1-based data ``row`` of ``column``."""
        return self.error(f"row {row}: column {column!r} is {_show(value)}, expected {expected}")


def load_trace(
    name_or_path: str | os.PathLike[str],
    *,
    source: str | None = None,
    field: str | None = None,
) -> pd.DataFrame:
    """Load a shipped trace by name, or a trace file by path.

    Returns one row per request, sorted by arrival, index ``0..n-1``, with columns ``arrival_s``
    (float64 seconds, 0 for the first request; NaN everywhere when the file has no arrival column),
    ``prompt_tokens`` and ``output_tokens`` (int64, positive), plus ``prefix_hash_ids`` (a tuple of
    ints per request) when the source has it. ``attrs["has_arrivals"]`` says whether arrivals were
    given. The frame is the caller's own copy.

    ``source`` and ``field`` locate the reference in the caller's input (for example the scenario
    file and ``"workload.trace.path"``) and prefix every :class:`CbsimError` raised here.
    """
    key = os.fspath(name_or_path)
    if key in TRACE_NAMES:
        cached = _load_shipped(key)
        frame = cached.copy()
        frame.attrs = dict(cached.attrs)
        return frame
    path = Path(key)
    if not path.exists():
        where = f" (resolved to {path.resolve()})" if not path.is_absolute() else ""
        raise CbsimError(
            f"unknown trace {key!r}: not a shipped trace (shipped: {', '.join(TRACE_NAMES)}) "
            f"and the path does not exist{where}",
            source=source,
            field=field,
        )
    return _load_file(path, _Where(str(path), source, field))


@functools.lru_cache(maxsize=len(TRACE_NAMES))
def _load_shipped(name: str) -> pd.DataFrame:
    resource = files("cbsim") / "data" / "traces" / f"{name}.parquet"
    with resource.open("rb") as fh:
        raw = _read_parquet(fh, _Where(f"shipped trace {name!r}", None, None))
    return _normalize(raw, _Where(f"shipped trace {name!r}", None, None))


def _load_file(path: Path, where: _Where) -> pd.DataFrame:
    if path.is_dir():
        raise where.error("is a directory, not a trace file")
    suffix = path.suffix.lower()
    if suffix not in _SUFFIXES:
        raise where.error(
            f"unsupported file type {path.suffix!r}; use one of {', '.join(_SUFFIXES)}"
        )
    try:
        if path.stat().st_size == 0:
            raise where.error("is empty")
        if suffix == ".parquet":
            with path.open("rb") as fh:
                raw = _read_parquet(fh, where)
        elif suffix == ".csv":
            raw = _read_csv(path, where)
        else:
            raw = _read_json_lines(path, where)
    except OSError as exc:
        raise where.error(f"cannot be read: {exc.strerror or exc}") from exc
    return _normalize(raw, where)


# --- readers: file -> raw DataFrame -------------------------------------------------------------


def _read_parquet(fh: IO[bytes], where: _Where) -> pd.DataFrame:
    try:
        table = pq.read_table(fh)
    except (pa.ArrowException, ValueError) as exc:
        raise where.error(f"is not a readable parquet file ({exc})") from exc
    frame: pd.DataFrame = table.to_pandas()
    return frame


def _read_csv(path: Path, where: _Where) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError as exc:
        raise where.error("is empty") from exc
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise where.error(f"is not a readable CSV file ({reason})") from exc


def _read_json_lines(path: Path, where: _Where) -> pd.DataFrame:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise where.error(f"is not UTF-8 text ({exc.reason})") from exc
    if not text.strip():
        raise where.error("is empty")
    records: list[Any]
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise where.error(f"is not valid JSON (line {exc.lineno}: {exc.msg})") from exc
        bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
        if bad is not None:
            raise where.error(f"row {bad + 1}: expected a JSON object with the request's fields")
    else:
        records = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise where.error(f"line {lineno}: not valid JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise where.error(f"line {lineno}: expected a JSON object, one request per line")
            records.append(record)
    return pd.DataFrame.from_records(records)


# --- normalization: raw DataFrame -> validated trace --------------------------------------------


def _normalize(raw: pd.DataFrame, where: _Where) -> pd.DataFrame:
    if len(raw) == 0:
        raise where.error("contains no requests")
    prompt_col = _require(raw, PROMPT_COLUMNS, "prompt-length", where)
    output_col = _require(raw, OUTPUT_COLUMNS, "output-length", where)
    arrival_col = _find(raw, ARRIVAL_COLUMNS)
    prefix_col = _find(raw, PREFIX_COLUMNS)

    columns: dict[str, Any] = {
        "prompt_tokens": _token_counts(raw[prompt_col], prompt_col, where),
        "output_tokens": _token_counts(raw[output_col], output_col, where),
    }
    if prefix_col is not None:
        columns["prefix_hash_ids"] = pd.Series(
            _prefix_ids(raw[prefix_col], prefix_col, where), dtype=object
        )

    has_arrivals = arrival_col is not None
    columns["arrival_s"] = (
        _arrival_seconds(raw[arrival_col], arrival_col, where)
        if arrival_col is not None
        else np.full(len(raw), np.nan)
    )
    frame = pd.DataFrame({name: columns[name] for name in _COLUMN_ORDER if name in columns})
    if has_arrivals:
        frame = frame.sort_values("arrival_s", kind="stable", ignore_index=True)
        frame["arrival_s"] -= frame["arrival_s"].iloc[0]
    frame.attrs["has_arrivals"] = has_arrivals
    return frame


def _find(raw: pd.DataFrame, accepted: tuple[str, ...]) -> str | None:
    """The first of the ``accepted`` column names that ``raw`` has."""
    return next((name for name in accepted if name in raw.columns), None)


def _require(raw: pd.DataFrame, accepted: tuple[str, ...], what: str, where: _Where) -> str:
    found = _find(raw, accepted)
    if found is None:
        present = ", ".join(str(c) for c in raw.columns) or "none"
        raise where.error(
            f"no {what} column; accepted names: {', '.join(accepted)} (columns present: {present})"
        )
    return found


def _show(value: Any) -> str:
    """A cell's value as quoted in an error message."""
    if pd.api.types.is_scalar(value) and pd.isna(value):
        return "missing"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)


def _first_bad(mask: npt.NDArray[np.bool_]) -> int | None:
    """The 1-based data row of the first True in ``mask``, or None."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) + 1 if hits.size else None


def _as_numbers(
    series: pd.Series[Any], column: str, where: _Where, what: str
) -> npt.NDArray[np.float64]:
    """The column as float64; a missing or non-numeric cell is an error naming its row."""
    if pd.api.types.is_bool_dtype(series.dtype):
        raise where.error(f"column {column!r} holds true/false values, expected {what}")
    numbers = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    row = _first_bad(np.isnan(numbers))
    if row is not None:
        raise where.bad_cell(row, column, series.iloc[row - 1], what)
    return numbers


def _token_counts(series: pd.Series[Any], column: str, where: _Where) -> npt.NDArray[np.int64]:
    what = "a positive integer token count"
    numbers = _as_numbers(series, column, where, what)
    bad = ~np.isfinite(numbers) | (numbers <= 0) | (numbers != np.floor(numbers))
    row = _first_bad(bad)
    if row is not None:
        raise where.bad_cell(row, column, series.iloc[row - 1], what)
    return numbers.astype(np.int64)


def _arrival_seconds(series: pd.Series[Any], column: str, where: _Where) -> npt.NDArray[np.float64]:
    """Arrival times in seconds (any origin) from the recognised arrival column."""
    is_datetime = pd.api.types.is_datetime64_any_dtype(series.dtype)
    is_numeric = pd.api.types.is_numeric_dtype(series.dtype) and not is_datetime
    if column == "TIMESTAMP" and is_numeric:
        raise where.error(
            "column 'TIMESTAMP' holds numbers, expected date-time strings as in the Azure traces; "
            "name a numeric column arrival_s (seconds) or timestamp (milliseconds)"
        )
    if is_datetime or (column in ("timestamp", "TIMESTAMP") and not is_numeric):
        return _datetime_seconds(series, column, where)
    what = "a non-negative arrival time in " + (
        "milliseconds" if column == "timestamp" else "seconds"
    )
    numbers = _as_numbers(series, column, where, what)
    row = _first_bad(~np.isfinite(numbers) | (numbers < 0))
    if row is not None:
        raise where.bad_cell(row, column, series.iloc[row - 1], what)
    return numbers / 1000.0 if column == "timestamp" else numbers


def _datetime_seconds(
    series: pd.Series[Any], column: str, where: _Where
) -> npt.NDArray[np.float64]:
    parsed = pd.to_datetime(series, errors="coerce", format="mixed", utc=True)
    row = _first_bad(parsed.isna().to_numpy())
    if row is not None:
        raise where.bad_cell(row, column, series.iloc[row - 1], "a date-time")
    nanoseconds = parsed.dt.tz_localize(None).astype("datetime64[ns]").to_numpy().astype(np.int64)
    relative: npt.NDArray[np.float64] = (nanoseconds - nanoseconds.min()) / 1e9
    return relative


def _prefix_ids(series: pd.Series[Any], column: str, where: _Where) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for row, value in enumerate(series.tolist(), start=1):
        ids = _block_ids(value)
        if ids is None:
            raise where.bad_cell(row, column, value, "a list of integer block ids")
        out.append(ids)
    return out


def _block_ids(value: Any) -> tuple[int, ...] | None:
    """A request's prefix block ids as a tuple of ints, or None if ``value`` is not such a list."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if isinstance(value, np.ndarray):
        return tuple(value.tolist()) if value.dtype.kind in "iu" and value.ndim == 1 else None
    if isinstance(value, list | tuple) and all(
        isinstance(v, int | np.integer) and not isinstance(v, bool) for v in value
    ):
        return tuple(int(v) for v in value)
    return None
