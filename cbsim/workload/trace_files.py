"""Trace files: a log of requests in a user's file, read and checked.

User trace files (``.parquet``, ``.csv``, or ``.jsonl``/``.json`` with one JSON object per line; a
``.json`` file holding one JSON array of objects also works) are recognised by these column names,
case-sensitive, the first present one winning:

- arrival: ``arrival_s`` (seconds) | ``timestamp_s`` (seconds) | ``timestamp_ms`` (milliseconds)
  | ``timestamp`` (strings are parsed as date-times; numbers carry no unit, which is detected: see
  below) | ``TIMESTAMP`` (date-time strings, as in the Azure traces). Optional: a trace with lengths
  only (such as Vidur's arXiv summarization lengths) gets ``arrival_s`` all NaN and
  ``attrs["has_arrivals"] = False``, and the workload must supply arrivals itself.
- prompt length: ``prompt_tokens`` | ``input_length`` | ``ContextTokens`` | ``num_prefill_tokens``.
- output length: ``output_tokens`` | ``output_length`` | ``GeneratedTokens`` |
  ``num_decode_tokens``.
- prefix block ids (optional): ``prefix_hash_ids`` | ``hash_ids`` — a list of integers per request
  (in a CSV, a JSON list such as ``[1, 2, 3]``).

Other columns are ignored; a parquet date-time column under an arrival name is used as is.
Arrivals are shifted so the first request arrives at 0 s, and requests are sorted by arrival
(stably, so ties keep the file's order; a file out of time order gets a warning). Token counts
must be positive integers up to :data:`cbsim.common.limits.TOKENS`, arrivals non-negative and present, a
trace at most :data:`cbsim.common.limits.REQUESTS` rows long and its span at most a year; an error names
the first bad row, counting data rows from 1 (a CSV header is not a row).

Units of a numeric ``timestamp``: since-the-epoch values say their unit by their size (about
1.7e9 is seconds, 1.7e12 milliseconds, 1.7e15 microseconds, 1.7e18 nanoseconds); relative values
are milliseconds, as in the Mooncake traces, unless that would put more than
:data:`PLAUSIBLE_RATE` requests in every second, when they are read as seconds. Either way a
guess that could be wrong gets a warning (in ``attrs["warnings"]``, which ``cbsim validate`` and
``cbsim run`` print), as do seconds so sparse they look like milliseconds: name the column
``timestamp_s`` or ``timestamp_ms`` to say which.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from cbsim.common.errors import CbsimError
from cbsim.common.limits import REQUESTS, SIMULATED_TIME, TOKENS

__all__ = ["Where", "load_trace_file", "normalize", "read_parquet"]

ARRIVAL_COLUMNS: tuple[str, ...] = (
    "arrival_s",
    "timestamp_s",
    "timestamp_ms",
    "timestamp",
    "TIMESTAMP",
)
# Units per second of the numeric arrival columns whose name states it.
_STATED_UNITS = {"arrival_s": 1.0, "timestamp_s": 1.0, "timestamp_ms": 1000.0}
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

PLAUSIBLE_RATE = 1000.0
"""Requests per second above which a whole trace's mean rate is implausible for one service (the
Azure traces run at 2.6 and 5.5, Mooncake's at 3.4): a unit read wrongly by 1000."""
SPARSE_RATE = 1e-3
"""Requests per second below which a trace in seconds looks like one in milliseconds."""
MIN_REQUESTS_TO_JUDGE = 10
"""Fewer requests than this say too little about a trace's rate to judge its unit."""
# Since-the-epoch magnitudes of today's times in each unit: (at least, units per second, name).
_EPOCH_UNITS = ((1e17, 1e9, "nanoseconds"), (1e14, 1e6, "microseconds"), (1e11, 1e3, "milliseconds"), (1e8, 1.0, "seconds"))  # fmt: skip
_SUFFIXES = (".parquet", ".csv", ".jsonl", ".json")


@dataclass(frozen=True)
class Where:
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


def load_trace_file(path: Path, where: Where) -> pd.DataFrame:
    """The trace in the file at ``path``, read by its suffix and normalised (:func:`normalize`)."""
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
                raw = read_parquet(fh, where)
        elif suffix == ".csv":
            raw = _read_csv(path, where)
        else:
            raw = _read_json_lines(path, where)
    except OSError as exc:
        raise where.error(f"cannot be read: {exc.strerror or exc}") from exc
    return normalize(raw, where)


# --- readers: file -> raw DataFrame -------------------------------------------------------------


def read_parquet(fh: IO[bytes], where: Where) -> pd.DataFrame:
    """A parquet file's rows as they are (a shipped trace's too)."""
    try:
        table = pq.read_table(fh)
    except (pa.ArrowException, ValueError) as exc:
        raise where.error(f"is not a readable parquet file ({exc})") from exc
    frame: pd.DataFrame = table.to_pandas()
    return frame


def _read_csv(path: Path, where: Where) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError as exc:
        raise where.error("is empty") from exc
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise where.error(f"is not a readable CSV file ({reason})") from exc


def _read_json_lines(path: Path, where: Where) -> pd.DataFrame:
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
        except RecursionError:
            raise where.error("is not a trace: its JSON is nested too deeply") from None
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
            except RecursionError:
                raise where.error(f"line {lineno}: JSON nested too deeply") from None
            if not isinstance(record, dict):
                raise where.error(f"line {lineno}: expected a JSON object, one request per line")
            records.append(record)
    return pd.DataFrame.from_records(records)


# --- normalization: raw DataFrame -> validated trace --------------------------------------------


def normalize(raw: pd.DataFrame, where: Where) -> pd.DataFrame:
    """The trace in ``raw``'s recognised columns, checked, in seconds from the first arrival and
    sorted by it (see the module docstring and :func:`cbsim.workload.traces.load_trace`)."""
    if len(raw) == 0:
        raise where.error("contains no requests")
    if not REQUESTS.contains(len(raw)):
        raise where.error(f"has {len(raw):,} requests: a trace {REQUESTS.violation(len(raw))}")
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
    warnings: list[str] = []
    units: list[float] = []
    if arrival_col is not None:
        arrivals = _arrival_seconds(raw[arrival_col], arrival_col, where, warnings, units)
        _check_span(arrivals, arrival_col, where)
        _note_order(arrivals, warnings)
        columns["arrival_s"] = arrivals
    else:
        columns["arrival_s"] = np.full(len(raw), np.nan)
    frame = pd.DataFrame({name: columns[name] for name in _COLUMN_ORDER if name in columns})
    if has_arrivals:
        frame = frame.sort_values("arrival_s", kind="stable", ignore_index=True)
        frame["arrival_s"] -= frame["arrival_s"].iloc[0]
    frame.attrs["has_arrivals"] = has_arrivals
    frame.attrs["warnings"] = tuple(f"trace file {where.label}: {w}" for w in warnings)
    frame.attrs["units_per_second"] = units[0] if units else None
    return frame


def _check_span(arrivals: npt.NDArray[np.float64], column: str, where: Where) -> None:
    """A trace may span at most a year (a longer one is a unit mistake or not a replay)."""
    span = float(arrivals.max() - arrivals.min())
    if span > SIMULATED_TIME.high:
        raise where.error(
            f"column {column!r} spans {span / 86_400:,.0f} days; a trace "
            f"{SIMULATED_TIME.violation(span)}: are its times in milliseconds? (name the column "
            "timestamp_ms)"
        )


def _note_order(arrivals: npt.NDArray[np.float64], warnings: list[str]) -> None:
    """Warn when the file is not in time order (it is replayed sorted by arrival)."""
    earlier = np.flatnonzero(np.diff(arrivals) < 0)
    if earlier.size:
        row = int(earlier[0]) + 2
        warnings.append(
            f"rows are not in time order (row {row} arrives before row {row - 1}; "
            f"{earlier.size:,} row{'s' if earlier.size > 1 else ''} arrive before the one "
            "above); they are replayed sorted by arrival"
        )


def _find(raw: pd.DataFrame, accepted: tuple[str, ...]) -> str | None:
    """The first of the ``accepted`` column names that ``raw`` has."""
    return next((name for name in accepted if name in raw.columns), None)


def _require(raw: pd.DataFrame, accepted: tuple[str, ...], what: str, where: Where) -> str:
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
    series: pd.Series[Any], column: str, where: Where, what: str
) -> npt.NDArray[np.float64]:
    """The column as float64; a missing or non-numeric cell is an error naming its row."""
    if pd.api.types.is_bool_dtype(series.dtype):
        raise where.error(f"column {column!r} holds true/false values, expected {what}")
    numbers = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    row = _first_bad(np.isnan(numbers))
    if row is not None:
        raise where.bad_cell(row, column, series.iloc[row - 1], what)
    return numbers


def _token_counts(series: pd.Series[Any], column: str, where: Where) -> npt.NDArray[np.int64]:
    what = f"a positive integer token count up to {TOKENS.high:,} ({TOKENS.reason})"
    numbers = _as_numbers(series, column, where, what)
    bad = (
        ~np.isfinite(numbers)
        | (numbers <= 0)
        | (numbers != np.floor(numbers))
        | (numbers > TOKENS.high)
    )
    row = _first_bad(bad)
    if row is not None:
        raise where.bad_cell(row, column, series.iloc[row - 1], what)
    return numbers.astype(np.int64)


def _arrival_seconds(
    series: pd.Series[Any],
    column: str,
    where: Where,
    warnings: list[str],
    units: list[float] | None = None,
) -> npt.NDArray[np.float64]:
    """Arrival times in seconds (any origin) from the recognised arrival column; a doubtful
    unit adds to ``warnings``, and the column's units per second (stated or detected; 1 for
    date-times) go to ``units``."""
    is_datetime = pd.api.types.is_datetime64_any_dtype(series.dtype)
    is_numeric = pd.api.types.is_numeric_dtype(series.dtype) and not is_datetime
    if column == "TIMESTAMP" and is_numeric:
        raise where.error(
            "column 'TIMESTAMP' holds numbers, expected date-time strings as in the Azure traces; "
            "name a numeric column arrival_s (seconds) or timestamp_ms (milliseconds)"
        )
    if is_datetime or (column in ("timestamp", "TIMESTAMP") and not is_numeric):
        if units is not None:
            units.append(1.0)
        return _datetime_seconds(series, column, where)
    stated = _STATED_UNITS.get(column)
    unit = "milliseconds" if stated == 1000.0 else "seconds" if stated else "an unstated unit"
    what = f"a non-negative arrival time in {unit}"
    numbers = _as_numbers(series, column, where, what)
    row = _first_bad(~np.isfinite(numbers) | (numbers < 0))
    if row is not None:
        raise where.bad_cell(row, column, series.iloc[row - 1], what)
    if stated is None:
        stated = _detect_unit(numbers, column, warnings)
    elif stated == 1.0:
        _note_sparse_seconds(numbers, column, warnings)
    if units is not None:
        units.append(stated)
    seconds: npt.NDArray[np.float64] = numbers / stated
    return seconds


def _mean_rate(times: npt.NDArray[np.float64], units_per_second: float) -> float | None:
    """Requests per second over the trace's span in that unit; None when too few to judge."""
    span = float(times.max() - times.min()) / units_per_second
    if len(times) < MIN_REQUESTS_TO_JUDGE or span <= 0:
        return None
    return (len(times) - 1) / span


def _detect_unit(numbers: npt.NDArray[np.float64], column: str, warnings: list[str]) -> float:
    """Units per second of a numeric column that does not name its unit (see the module doc)."""
    first = float(numbers.min())
    for magnitude, units_per_second, name in _EPOCH_UNITS:
        if first >= magnitude:
            if units_per_second != 1000.0:
                warnings.append(
                    f"column {column!r} read as {name} since the epoch (its values are about "
                    f"{first:.3g}); name the column for its unit to be sure"
                )
            return units_per_second
    as_ms = _mean_rate(numbers, 1000.0)
    if as_ms is not None and as_ms > PLAUSIBLE_RATE:
        span = float(numbers.max() - numbers.min())
        warnings.append(
            f"column {column!r} read as seconds: as milliseconds (the Mooncake convention) its "
            f"{len(numbers):,} requests would arrive within {span:,.6g} ms, {as_ms:,.0f} "
            "requests/s; name the column timestamp_s or timestamp_ms to say which"
        )
        return 1.0
    return 1000.0


def _note_sparse_seconds(
    numbers: npt.NDArray[np.float64], column: str, warnings: list[str]
) -> None:
    """Warn when a column in seconds is so sparse (or so large) it looks like milliseconds."""
    rate = _mean_rate(numbers, 1.0)
    if float(numbers.min()) >= 1e11:
        warnings.append(
            f"column {column!r} holds values of about {float(numbers.min()):.3g}, milliseconds "
            "since the epoch rather than seconds? name the column timestamp_ms if so"
        )
    elif rate is not None and rate < SPARSE_RATE:
        span = float(numbers.max() - numbers.min())
        warnings.append(
            f"column {column!r}: {len(numbers):,} requests over {span / 86_400:,.3g} days "
            f"({rate:.2g} requests/s) in seconds; are the times milliseconds? name the column "
            "timestamp_ms if so"
        )


def _datetime_seconds(series: pd.Series[Any], column: str, where: Where) -> npt.NDArray[np.float64]:
    parsed = pd.to_datetime(series, errors="coerce", format="mixed", utc=True)
    row = _first_bad(parsed.isna().to_numpy())
    if row is not None:
        raise where.bad_cell(row, column, series.iloc[row - 1], "a date-time")
    row = _first_bad(_outside_nanosecond_range(parsed))
    if row is not None:
        raise where.bad_cell(
            row, column, series.iloc[row - 1], "a date-time between the years 1678 and 2261"
        )
    nanoseconds = parsed.dt.tz_localize(None).astype("datetime64[ns]").to_numpy().astype(np.int64)
    relative: npt.NDArray[np.float64] = (nanoseconds - nanoseconds.min()) / 1e9
    return relative


_BLOCK_IDS = "a flat list of integer block ids, each within a signed 64-bit integer"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _outside_nanosecond_range(parsed: pd.Series[Any]) -> npt.NDArray[np.bool_]:
    """Which parsed date-times a nanosecond clock cannot hold (before 1677-09-21 or after
    2262-04-11, such as a year-1 placeholder)."""
    naive = parsed.dt.tz_localize(None)
    low, high = pd.Timestamp.min.ceil("s"), pd.Timestamp.max.floor("s")
    outside: npt.NDArray[np.bool_] = ((naive < low) | (naive > high)).to_numpy(dtype=bool)
    return outside


def _prefix_ids(series: pd.Series[Any], column: str, where: Where) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = []
    for row, value in enumerate(series.tolist(), start=1):
        ids = _block_ids(value)
        if ids is None:
            raise where.bad_cell(row, column, _shortened(value), _BLOCK_IDS)
        out.append(ids)
    return out


def _block_ids(value: Any) -> tuple[int, ...] | None:
    """A request's prefix block ids as a tuple of ints, or None if ``value`` is not a flat list
    of integers that fit in int64 (a nested or huge value included)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return None
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iu" or value.ndim != 1:
            return None
        value = value.tolist()
    if isinstance(value, list | tuple) and all(_is_int64(v) for v in value):
        return tuple(int(v) for v in value)
    return None


def _is_int64(value: Any) -> bool:
    """Whether ``value`` is an integer (not a bool) that a signed 64-bit integer holds."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return False
    return _INT64_MIN <= int(value) <= _INT64_MAX


def _shortened(value: Any, limit: int = 60) -> Any:
    """A cell's value cut to ``limit`` characters for an error message (a nested list can be
    thousands of characters long)."""
    text = value if isinstance(value, str) else None
    if text is None and isinstance(value, list | tuple | np.ndarray):
        try:
            text = str(value)
        except RecursionError:
            return "a list nested too deeply"
    if text is None or len(text) <= limit:
        return value
    return text[:limit] + "..."
