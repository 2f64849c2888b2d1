"""The iteration stream: where a streaming recorder's iterations go instead of memory.

A parquet file gets a row group per batch of rows written, and what the summary
(:class:`~cbsim.outputs.summary.IterationTotals`) and the timeseries
(:class:`~cbsim.outputs.timeseries_windows.WindowSums`) need of those rows is added up as they pass, so
that nothing of them has to be held or read back. A failed write (a full disk, a read-only folder)
is a user error naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cbsim.common.columns import ColumnTable
from cbsim.common.errors import CbsimError
from cbsim.outputs.parquet_tables import arrow_table
from cbsim.outputs.summary import IterationTotals
from cbsim.outputs.timeseries_windows import WindowSums

if TYPE_CHECKING:  # imported when a stream is written (a command that never streams need not)
    import pyarrow as pa
    import pyarrow.parquet as pq


class IterationStream:
    """Where a streaming recorder's iterations go: a parquet file at ``path``, a row group per
    :meth:`write`, and what the summary and the timeseries need of the rows written
    (:attr:`totals`, :attr:`sums`)."""

    def __init__(self, path: Path, window_s: float) -> None:
        self.path = path
        self.totals = IterationTotals()
        self.sums = WindowSums(window_s)
        self._writer: pq.ParquetWriter | None = None

    def write(self, columns: dict[str, np.ndarray]) -> None:
        """Write iteration rows (the iterations frame's columns) as one row group."""
        self.totals.add(columns)
        self.sums.add(columns)
        table = _arrow_table(columns)
        try:
            if self._writer is None:
                self._writer = self._open(table.schema)
            self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        except OSError as err:
            raise self._failure(err) from None

    def _failure(self, err: OSError) -> CbsimError:
        """A failed write (a full disk, a read-only folder) as a user error naming the file."""
        return CbsimError(
            f"cannot write the streamed iterations: {err.strerror or err}", source=str(self.path)
        )

    def _open(self, schema: pa.Schema) -> pq.ParquetWriter:
        """The parquet writer. Columns are dictionary-encoded but for the times, nearly all
        distinct (a dictionary only to give it up: about 3x the time to write them)."""
        import pyarrow.parquet as pq

        dictionary = [name for name in schema.names if name not in _DISTINCT_COLUMNS]
        return pq.ParquetWriter(self.path, schema, use_dictionary=dictionary)

    def close(self, empty: dict[str, np.ndarray]) -> None:
        """Finish the file; ``empty``: the columns with no rows (the schema, if none came)."""
        try:
            if self._writer is None:
                self._writer = self._open(_arrow_table(empty).schema)
            self._writer.close()
        except OSError as err:
            raise self._failure(err) from None
        finally:
            self._writer = None
        import pyarrow as pa

        pa.default_memory_pool().release_unused()  # the writer's buffers, before the ITL's


_DISTINCT_COLUMNS = ("start_s", "duration_s", "delivered_s")


def _arrow_table(columns: dict[str, np.ndarray]) -> pa.Table:
    """Iteration columns as an arrow table, as ``DataFrame.to_parquet`` writes the frame (without
    pandas: :mod:`cbsim.outputs.parquet_tables`)."""
    rows = len(next(iter(columns.values()))) if columns else 0
    return arrow_table(ColumnTable(columns, rows))
