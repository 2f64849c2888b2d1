"""A table held as numpy columns, its pandas DataFrame built only when someone asks for it.

A run's requests, iterations and time windows are recorded in typed numpy columns. Users read
them as pandas DataFrames (:class:`cbsim.run.results.Results`), but the figures a run reports
(its summary, its stability, the checks of a capacity search) need nothing numpy lacks. Importing
pandas costs a command about a third of a second of CPU, as much as a capacity search's
single-replica runs together, so the paths that only summarise runs (a search's points, a
plan's fleet checks) read a :class:`ColumnTable` and never import it.

A :class:`ColumnTable` reads like the DataFrame it stands for where the summaries read a frame:
``len(table)`` is its rows, ``table[name]`` a column (a numpy array), ``name in table`` whether
it has the column, ``table.empty`` whether it has no rows, ``table.attrs`` what the frame
holds in its ``attrs``. A coded column (the requests' ``status`` and ``rejected_reason``: a small
integer per row and the names its codes stand for) reads as the names, one Python string per
row, shared; the frame gets it as the categorical or text column the run's DataFrame always had
(:meth:`ColumnTable.frame`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    Table: TypeAlias = "pd.DataFrame | ColumnTable"
    """A run's requests, iterations or time windows: the DataFrame or the columns it is made of."""

__all__ = ["Coded", "ColumnTable", "equals", "frame_of"]


@dataclass(frozen=True)
class Coded:
    """A column of codes and the names they stand for; ``as_pandas`` makes the frame's column
    of it (categorical, text)."""

    codes: np.ndarray
    names: Sequence[str]
    as_pandas: Callable[[Coded], Any]

    def decoded(self) -> np.ndarray:
        """The names, one per row (an object array of shared strings)."""
        names: np.ndarray = np.asarray(list(self.names), dtype=object)[self.codes]
        return names


@dataclass
class ColumnTable:
    """Named columns of equal length, in frame order (see the module docstring)."""

    columns: Mapping[str, np.ndarray | Coded]
    rows: int
    attrs: dict[str, Any] = field(default_factory=dict)  # the frame's ``attrs``
    _decoded: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def of_frame(cls, frame: pd.DataFrame) -> ColumnTable:
        """A DataFrame's columns (as numpy arrays, not copied where pandas need not) and attrs."""
        columns: dict[str, np.ndarray | Coded] = {
            str(name): frame[name].to_numpy() for name in frame.columns
        }
        return cls(columns, len(frame), {str(key): v for key, v in frame.attrs.items()})

    def __len__(self) -> int:
        return self.rows

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __getitem__(self, name: str) -> np.ndarray:
        column = self.columns[name]
        if isinstance(column, Coded):
            if name not in self._decoded:
                self._decoded[name] = column.decoded()
            return self._decoded[name]
        return column

    @property
    def empty(self) -> bool:
        return self.rows == 0

    def frame(self) -> pd.DataFrame:
        """The DataFrame: the columns as they are (not copied), coded ones as their dtype."""
        import pandas as pd

        data: dict[str, Any] = {}
        for name, column in self.columns.items():
            if isinstance(column, Coded):
                data[name] = column.as_pandas(column)
            else:
                data[name] = column
        frame = pd.DataFrame(data, copy=False)
        if self.attrs:
            frame.attrs.update(self.attrs)
        return frame


def equals(table: Any, name: str, value: str) -> np.ndarray:
    """Whether each row's ``name`` is ``value``: a frame's or a table's column (a coded column
    compared by its codes, not its names)."""
    if isinstance(table, ColumnTable):
        column = table.columns[name]
        if isinstance(column, Coded):
            names = list(column.names)
            if value not in names:
                return np.zeros(table.rows, dtype=bool)
            return np.asarray(column.codes == names.index(value))
    return np.asarray(table[name] == value)


def frame_of(table: pd.DataFrame | ColumnTable) -> pd.DataFrame:
    """``table`` as a DataFrame (built from a :class:`ColumnTable`, a frame as it is)."""
    return table.frame() if isinstance(table, ColumnTable) else table
