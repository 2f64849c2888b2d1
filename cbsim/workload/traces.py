"""Request traces: when requests arrived and how many tokens each read and wrote.

A trace is a log of real LLM serving traffic reduced to what the simulator needs per request: its
arrival time, its prompt length (tokens to prefill) and its output length (tokens to decode).
Replaying one replaces the synthetic arrival process and length distributions of a workload, so the
simulated cluster sees real burstiness and real, heavy-tailed length mixes.

Shipped traces (load by name; stored as parquet under ``cbsim/catalog/data/traces/``):

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
``cbsim/catalog/data/LICENSES.md`` (installed with the package) lists them with what was transformed.

User trace files are read and checked by :mod:`cbsim.workload.trace_files`.

The simulator reads a trace as columns (:func:`trace_table`), :func:`load_trace` as a DataFrame
made of them. A shipped trace, once read and checked, is kept for the next process in the cache
of parsed files (:mod:`cbsim.cost.profile_cache`), under a hash of its bytes, of the code that
checks it and of the versions of the libraries that read it: a later process loads its columns
in a millisecond instead of parsing the file with pandas (whose import alone costs about a
third of a second, about as much as a capacity search's single-replica runs together).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import io
import os
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cbsim.common.columns import ColumnTable
from cbsim.common.errors import CbsimError, canonical_name, did_you_mean
from cbsim.cost.profile_cache import cached_json, store_json

if TYPE_CHECKING:
    import pandas as pd

# the module that reads and checks trace files (it imports pandas: imported when a file is read)
_TRACE_FILES = "cbsim.workload.trace_files"

__all__ = ["TRACE_NAMES", "load_trace", "trace_table"]

TRACE_NAMES: tuple[str, ...] = ("azure-code-2023", "azure-conv-2023", "mooncake-conversation")


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
    given, ``attrs["units_per_second"]`` in what unit the file's arrival column was read (1:
    seconds, 1000: milliseconds; None without one). The frame is the caller's own copy.

    ``source`` and ``field`` locate the reference in the caller's input (for example the scenario
    file and ``"workload.trace.path"``) and prefix every :class:`CbsimError` raised here.
    """
    table = trace_table(name_or_path, source=source, field=field)
    frame = table.frame().copy(deep=True)
    frame.attrs.update(table.attrs)
    return frame


def trace_table(
    name_or_path: str | os.PathLike[str],
    *,
    source: str | None = None,
    field: str | None = None,
) -> ColumnTable:
    """:func:`load_trace`'s rows as columns, shared and read-only (a shipped trace's are read
    once per process)."""
    key = os.fspath(name_or_path)
    shipped = key if key in TRACE_NAMES else canonical_name(key, TRACE_NAMES)
    if shipped is not None and (key in TRACE_NAMES or not Path(key).exists()):
        return _shipped_table(shipped)
    path = Path(key)
    if not path.exists():
        where = f" (resolved to {path.resolve()})" if not path.is_absolute() else ""
        raise CbsimError(
            f"unknown trace {key!r}: not a shipped trace (shipped: {', '.join(TRACE_NAMES)}) "
            f"and the path does not exist{where}{did_you_mean(key, TRACE_NAMES)}",
            source=source,
            field=field,
        )
    from cbsim.workload.trace_files import Where, load_trace_file

    return _read_only(ColumnTable.of_frame(load_trace_file(path, Where(str(path), source, field))))


@functools.lru_cache(maxsize=len(TRACE_NAMES))
def _shipped_table(name: str) -> ColumnTable:
    resource = files("cbsim.catalog") / "data" / "traces" / f"{name}.parquet"
    raw = resource.read_bytes()
    key = raw + b"\0trace\0" + _checking_code()
    table = _from_entry(cached_json(key))
    if table is None:
        from cbsim.workload.trace_files import Where, normalize, read_parquet

        where = Where(f"shipped trace {name!r}", None, None)
        table = ColumnTable.of_frame(normalize(read_parquet(io.BytesIO(raw), where), where))
        store_json(key, _entry(table))
    return _read_only(table)


def _checking_code() -> bytes:
    """What makes a trace of a file: the source of the module that checks it and the versions
    of the libraries that read it (pandas parses the date-times), so a cached trace is the one
    they would make."""
    spec = importlib.util.find_spec(_TRACE_FILES)
    origin = spec.origin if spec is not None else None
    source = Path(origin).read_bytes() if origin is not None else b""
    versions = []
    for package in ("pandas", "pyarrow", "numpy"):
        try:
            versions.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package} none")
    return source + "\0".join(versions).encode()


def _read_only(table: ColumnTable) -> ColumnTable:
    for column in table.columns.values():
        if isinstance(column, np.ndarray):
            column.setflags(write=False)
    return table


def _entry(table: ColumnTable) -> dict[str, Any]:
    """A normalised trace as the cache keeps it: plain data ``marshal`` writes."""
    columns: dict[str, Any] = {}
    for name, column in table.columns.items():
        assert isinstance(column, np.ndarray)
        if column.dtype == object:  # prefix_hash_ids: a tuple of ints per request
            columns[name] = ("tuples", tuple(tuple(int(i) for i in ids) for ids in column))
        else:
            columns[name] = (column.dtype.str, column.tobytes())
    attrs = {
        "has_arrivals": bool(table.attrs.get("has_arrivals", True)),
        "warnings": tuple(table.attrs.get("warnings", ())),
        "units_per_second": table.attrs.get("units_per_second"),
    }
    return {"rows": table.rows, "columns": columns, "attrs": attrs}


def _from_entry(entry: dict[str, Any] | None) -> ColumnTable | None:
    """The trace :func:`_entry` kept (None: none, or not one)."""
    if entry is None:
        return None
    try:
        rows = int(entry["rows"])
        columns: dict[str, Any] = {}
        for name, (kind, data) in entry["columns"].items():
            if kind == "tuples":
                column = np.empty(len(data), dtype=object)
                for i, ids in enumerate(data):
                    column[i] = ids
            else:
                column = np.frombuffer(data, dtype=np.dtype(kind))
            if len(column) != rows:
                return None
            columns[name] = column
        attrs = dict(entry["attrs"])
    except (KeyError, TypeError, ValueError):
        return None
    return ColumnTable(columns, rows, attrs)
