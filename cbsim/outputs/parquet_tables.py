"""A run's tables written to parquet as pandas writes their frames, without importing pandas.

A run's requests, iterations and time windows are numpy columns
(:class:`~cbsim.common.columns.ColumnTable`) that users read as pandas DataFrames. A result
folder holds them as the parquet files ``DataFrame.to_parquet(path, index=False)`` writes:
pyarrow's ``Table.from_pandas`` of the frame (an arrow schema whose ``pandas`` metadata tells a
reader each column's pandas dtype, a float's NaN stored as null), the frame's ``attrs`` as JSON
under ``PANDAS_ATTRS``, snappy compression. Importing pandas costs ``cbsim run`` about a fifth of
its CPU (0.2 s of about one second for the quick-start scenario) for that alone.

So a table is written with pyarrow alone (:func:`write_parquet`). Its arrow schema, with the
pandas metadata, is the one pandas makes of a frame with no rows and the same columns (names,
dtypes, a categorical's categories): found once per machine with pandas and kept in the
parsed-file cache (:mod:`cbsim.cost.profile_cache`) under a hash of the columns' names and kinds,
of the pandas and pyarrow installations and of the code that makes the frames' columns. The
values are converted as ``Table.from_pandas`` converts them: a column's numbers as they are (NaN
in a float column as null), a categorical's codes under its categories, text as text. A table
with a column of Python objects (none of a run's has one) is written through pandas, as before.
The files are the ones pandas writes: the tests compare them, schema, metadata and values, for
every kind of run.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cbsim.common.columns import Coded, ColumnTable
from cbsim.cost.profile_cache import cached_json, store_json

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["arrow_table", "pandas_schema", "write_parquet"]

COMPRESSION = "snappy"
"""What ``DataFrame.to_parquet`` compresses with by default."""


def write_parquet(table: ColumnTable, path: Path) -> None:
    """Write ``table`` to ``path`` as ``table.frame().to_parquet(path, index=False)`` would."""
    import pyarrow.parquet as pq

    pq.write_table(arrow_table(table), path, compression=COMPRESSION)


def arrow_table(table: ColumnTable) -> pa.Table:
    """``table`` as the arrow table pandas writes of its frame (see the module docstring)."""
    if _has_objects(table) or not _json_safe(table.attrs):
        return _through_pandas(table)
    import pyarrow as pa

    schema = pandas_schema(table)
    arrays = [_arrow_column(table.columns[field.name], field.type) for field in schema]
    if any(array is None for array in arrays):
        return _through_pandas(table)
    return pa.Table.from_arrays(arrays, schema=_with_attrs(schema, table.attrs))


def _json_safe(attrs: dict[str, Any]) -> bool:
    try:
        json.dumps(attrs)
    except (TypeError, ValueError):
        return False
    return True


def _with_attrs(schema: pa.Schema, attrs: dict[str, Any]) -> pa.Schema:
    """The schema with the frame's ``attrs`` where pandas and pyarrow put them: the pandas
    metadata's ``attributes`` (where this pyarrow writes them) and, when there are any, the
    ``PANDAS_ATTRS`` entry after it."""
    metadata = dict(schema.metadata or {})
    described = metadata.get(b"pandas")
    if described is not None:
        pandas_metadata = json.loads(described)
        if "attributes" in pandas_metadata:
            pandas_metadata["attributes"] = attrs
            metadata[b"pandas"] = json.dumps(pandas_metadata).encode("utf8")
    if attrs:
        metadata[b"PANDAS_ATTRS"] = json.dumps(attrs).encode("utf8")
    return schema.with_metadata(metadata)


def pandas_schema(table: ColumnTable) -> pa.Schema:
    """The arrow schema (with its pandas metadata) of ``table``'s frame: kept from an earlier
    process, else made with pandas and kept."""
    import pyarrow as pa

    key = _schema_key(table, pa.__version__)
    entry = cached_json(key)
    if entry is not None and isinstance(entry.get("schema"), bytes):
        try:
            return pa.ipc.read_schema(pa.py_buffer(entry["schema"]))
        except (pa.ArrowInvalid, OSError, ValueError):
            pass  # a corrupt entry: made again, and rewritten
    schema = _through_pandas(_no_rows(table)).schema
    store_json(key, {"schema": schema.serialize().to_pybytes()})
    return schema


def _has_objects(table: ColumnTable) -> bool:
    """Whether a column holds Python objects (what pandas writes of them depends on the values)."""
    return any(
        not isinstance(column, Coded) and np.asarray(column).dtype.kind == "O"
        for column in table.columns.values()
    )


def _through_pandas(table: ColumnTable) -> pa.Table:
    """The arrow table pandas makes of ``table``'s frame, as ``DataFrame.to_parquet`` does."""
    import pyarrow as pa

    frame = table.frame()
    converted = pa.Table.from_pandas(frame, preserve_index=False)
    if frame.attrs:
        metadata = {**(converted.schema.metadata or {}), b"PANDAS_ATTRS": json.dumps(frame.attrs)}
        converted = converted.replace_schema_metadata(metadata)
    return converted


def _no_rows(table: ColumnTable) -> ColumnTable:
    """``table``'s columns with no rows (the same dtypes and categories), without its attrs."""
    columns: dict[str, np.ndarray | Coded] = {}
    for name, column in table.columns.items():
        if isinstance(column, Coded):
            columns[name] = Coded(column.codes[:0], column.names, column.as_pandas)
        else:
            columns[name] = np.asarray(column)[:0]
    return ColumnTable(columns, 0)


def _arrow_column(column: np.ndarray | Coded, arrow_type: pa.DataType) -> pa.Array | None:
    """A column's values as ``Table.from_pandas`` converts its frame's column to ``arrow_type``
    (None: a type this does not build; pandas then converts the table). Built from the arrays'
    buffers: ``pyarrow.array`` would import pandas to ask whether they are pandas'."""
    import pyarrow as pa

    if not isinstance(column, Coded):
        return _numbers(np.asarray(column), arrow_type)
    if pa.types.is_dictionary(arrow_type):  # a categorical: its codes under its categories
        indices = _numbers(np.asarray(column.codes), arrow_type.index_type)
        categories = _text(list(column.names), arrow_type.value_type)
        if indices is None or categories is None:
            return None
        return pa.DictionaryArray.from_arrays(indices, categories, ordered=arrow_type.ordered)
    return _text(column.decoded(), arrow_type)


def _numbers(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array | None:
    """Whole numbers, floats (NaN as null) or booleans, as ``arrow_type`` (the same width)."""
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type) and values.dtype == np.bool_:
        data = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(data)])
    kinds = {"i": pa.types.is_signed_integer, "u": pa.types.is_unsigned_integer}
    kinds["f"] = pa.types.is_floating
    same_kind = kinds.get(values.dtype.kind)
    if same_kind is None or not same_kind(arrow_type):
        return None
    if values.dtype.itemsize * 8 != arrow_type.bit_width or values.dtype.byteorder == ">":
        return None
    values = np.ascontiguousarray(values)  # a column broadcast from one value: copied
    validity = None
    nulls = 0
    if values.dtype.kind == "f":
        missing = np.isnan(values)
        nulls = int(missing.sum())
        if nulls:
            validity = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    return pa.Array.from_buffers(
        arrow_type, len(values), [validity, pa.py_buffer(values)], null_count=nulls
    )


def _text(values: Any, arrow_type: pa.DataType) -> pa.Array | None:
    """Strings as ``arrow_type`` (``string`` or ``large_string``)."""
    import pyarrow as pa

    if pa.types.is_string(arrow_type):
        offset_type: type = np.int32
    elif pa.types.is_large_string(arrow_type):
        offset_type = np.int64
    else:
        return None
    encoded = [str(value).encode() for value in values]
    offsets: np.ndarray = np.zeros(len(encoded) + 1, dtype=offset_type)
    np.cumsum([len(item) for item in encoded], out=offsets[1:])
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(arrow_type, len(encoded), buffers)


def _schema_key(table: ColumnTable, pyarrow_version: str) -> bytes:
    """What a table's schema depends on: its columns' names and kinds (a coded column's names and
    the function making its frame column), the pandas installation (where it is, and its
    ``__init__``'s size and time: another release rewrites it), pyarrow's version, and the
    source of the modules that make the frames' columns."""
    kinds: list[Any] = []
    for name, column in table.columns.items():
        if isinstance(column, Coded):
            maker = f"{column.as_pandas.__module__}.{column.as_pandas.__qualname__}"
            kinds.append([name, "coded", list(column.names), maker])
        else:
            kinds.append([name, np.asarray(column).dtype.str])
    digest = hashlib.sha256(json.dumps(kinds).encode())
    digest.update(_code_fingerprint(pyarrow_version))
    return b"parquet-schema\0" + digest.digest()


@functools.cache
def _code_fingerprint(pyarrow_version: str) -> bytes:
    """What every table's schema key shares: pyarrow's version, the pandas installation and the
    source of the modules that make the frames' columns (read once per process, not per table
    or streamed row group)."""
    digest = hashlib.sha256(f"\0pyarrow {pyarrow_version}\0{_pandas_installation()}".encode())
    for module in ("cbsim.common.columns", "cbsim.workload.request_table", __name__):
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.origin is not None:
            digest.update(Path(spec.origin).read_bytes())
    return digest.digest()


def _pandas_installation() -> str:
    """Where pandas is installed and its ``__init__``'s size and time ("" when absent)."""
    spec = importlib.util.find_spec("pandas")
    if spec is None or spec.origin is None:
        return ""
    try:
        stat = os.stat(spec.origin)
    except OSError:
        return spec.origin
    return f"{spec.origin} {stat.st_size} {stat.st_mtime_ns}"
