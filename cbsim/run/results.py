"""Results of a run: DataFrames, a summary, and writing them to disk atomically.

``requests``, ``iterations`` and ``timeseries`` are pandas DataFrames (columns in
:mod:`cbsim.engine.recorder`); ``summary`` is a flat dict of key figures; ``no_spec_summary``, when the
run was compared with speculation off (:func:`cbsim.run.simulate.compare_no_spec`), is that
baseline's summary. :meth:`Results.write` stores them as parquet plus ``summary.json`` (and
``summary_no_spec.json``) and the resolved ``scenario.yaml`` in a folder of kind
:data:`RUN_RESULT` (see :mod:`cbsim.common.output_folders`): staged beside the target and renamed into place, so
a killed run never leaves a half-written result, and an existing folder is replaced only when it
is an earlier run result that holds nothing but what cbsim wrote.

A streamed run (``simulate(..., stream_to=PATH)``, ``cbsim run --stream``) holds no iterations:
``iterations`` is an empty frame with the columns, ``iterations_path`` the parquet file written
during the run, and :meth:`Results.load_iterations` reads it. :meth:`Results.write` links (or
copies) that file into the result directory; once written, the run's own file is removed and
``iterations_path`` points at the written one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from cbsim.common import output_folders as outputs
from cbsim.common.columns import ColumnTable
from cbsim.outputs.parquet_tables import write_parquet
from cbsim.schema.scenario import Scenario
from cbsim.workload.request_table import status_dtype

if TYPE_CHECKING:
    import pandas as pd

RESULT_FILES = (
    "requests.parquet",
    "iterations.parquet",
    "timeseries.parquet",
    "summary.json",
    "scenario.yaml",
    "run_info.json",
)
COMPARISON_FILES = ("summary_no_spec.json",)
"""Written beside the result when it was compared with speculation off."""

RUN_RESULT = outputs.OutputKind(
    name="run",
    description="a run result",
    entries=frozenset((*RESULT_FILES, *COMPARISON_FILES)),
    required=frozenset({"requests.parquet", "summary.json", "scenario.yaml"}),
)
"""A run's result folder: what :meth:`Results.write` may replace."""


def read_requests(path: Path) -> pd.DataFrame:
    """The requests frame from its parquet file, with the dtypes the run gave it: parquet keeps a
    categorical column's categories in its dictionary pages, which a file without rows lacks, so
    ``status`` is given its categories back."""
    import pandas as pd

    requests = pd.read_parquet(path)
    if "status" in requests:
        requests["status"] = requests["status"].astype(status_dtype())
    return requests


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _write_summary(path: Path, summary: dict[str, Any]) -> None:
    """A summary as JSON, non-finite numbers as null."""
    safe = {k: _json_safe(v) for k, v in summary.items()}
    path.write_text(json.dumps(safe, indent=2) + "\n")


def _read_summary(path: Path) -> dict[str, Any]:
    """A summary written by :func:`_write_summary`, nulls back as NaN."""
    summary = json.loads(path.read_text())
    return {k: (math.nan if v is None else v) for k, v in summary.items()}


class _Frame:
    """A frame of :class:`Results`, which may be given as the columns it is made of
    (:class:`~cbsim.common.columns.ColumnTable`, :meth:`Results.of_tables`): the frame is then
    built when it is first read, and a result written before that writes the columns without
    pandas (:mod:`cbsim.outputs.parquet_tables`: the same files). A run (:func:`cbsim.simulate`)
    gives its tables so, and ``cbsim run`` never imports pandas unless something reads a frame."""

    def __init__(self, name: str) -> None:
        self.slot = f"_{name}_held"

    def __get__(self, obj: Results | None, objtype: Any = None) -> Any:
        if obj is None:
            return self
        held = obj.__dict__[self.slot]
        if isinstance(held, ColumnTable):
            held = obj.__dict__[self.slot] = held.frame()
        return held

    def __set__(self, obj: Results, value: pd.DataFrame | ColumnTable) -> None:
        obj.__dict__[self.slot] = value

    def columns(self, obj: Results) -> ColumnTable:
        """The table's columns: as held while the frame is not built, else the frame's."""
        held = obj.__dict__[self.slot]
        return held if isinstance(held, ColumnTable) else ColumnTable.of_frame(held)

    def write(self, obj: Results, path: Path) -> None:
        """Write the frame to ``path`` as ``to_parquet(path, index=False)`` does (its columns
        while the frame is not built)."""
        held = obj.__dict__[self.slot]
        if isinstance(held, ColumnTable):
            write_parquet(held, path)
        else:
            held.to_parquet(path, index=False)


def _frame_of(cls: type, name: str) -> _Frame:
    """The :class:`_Frame` of ``cls`` named ``name``."""
    frame = vars(cls)[name]
    assert isinstance(frame, _Frame)
    return frame


@dataclass
class Results:
    """Everything a run produced."""

    scenario: Scenario
    requests: pd.DataFrame
    iterations: pd.DataFrame
    timeseries: pd.DataFrame
    summary: dict[str, Any]
    run_info: dict[str, Any] = field(default_factory=dict)
    no_spec_summary: dict[str, Any] | None = None
    iterations_path: Path | None = None  # streamed: the iterations' parquet file
    _path_written: bool = field(default=False, repr=False, compare=False)

    @classmethod
    def of_tables(
        cls,
        scenario: Scenario,
        requests: ColumnTable,
        iterations: ColumnTable,
        timeseries: ColumnTable,
        summary: dict[str, Any],
        run_info: dict[str, Any],
        iterations_path: Path | None,
    ) -> Results:
        """The results of a run whose tables are ``requests``, ``iterations`` and
        ``timeseries``: each frame built from its table when first read (see :class:`_Frame`)."""
        held: Any = (requests, iterations, timeseries)  # set through the frames' descriptors
        return cls(
            scenario=scenario,
            requests=held[0],
            iterations=held[1],
            timeseries=held[2],
            summary=summary,
            run_info=run_info,
            iterations_path=iterations_path,
        )

    def columns(self, name: str) -> ColumnTable:
        """The ``requests``, ``iterations`` or ``timeseries`` table as numpy columns, without
        building its frame (and importing pandas) where it is not built yet."""
        if name not in ("requests", "iterations", "timeseries"):
            raise ValueError(f"no table {name!r}: requests, iterations or timeseries")
        return _frame_of(Results, name).columns(self)

    def load_iterations(self) -> pd.DataFrame:
        """The iterations: the frame held, or a streamed run's file read."""
        if self.iterations_path is None:
            return self.iterations
        import pandas as pd

        return pd.read_parquet(self.iterations_path)

    def _write_iterations(self, path: Path) -> None:
        """The iterations into ``path``: the frame, or a streamed run's file. The run's own file
        is hard-linked (copied across file systems), so that it stays whole if the write fails;
        one an earlier write put in a result directory is copied."""
        if self.iterations_path is None:
            _frame_of(Results, "iterations").write(self, path)
            return
        if not self._path_written:
            with suppress(OSError):
                os.link(self.iterations_path, path)
                return
        shutil.copyfile(self.iterations_path, path)

    def _written_iterations(self, target: Path) -> None:
        """After a write into ``target``: a streamed run's own file (not an earlier result's)
        removed, and ``iterations_path`` pointed at the written one."""
        if self.iterations_path is None:
            return
        written = (target / "iterations.parquet").resolve()
        if not self._path_written and self.iterations_path.resolve() != written:
            self.iterations_path.unlink(missing_ok=True)
        self.iterations_path = written
        self._path_written = True

    def write(self, directory: str | Path) -> Path:
        """Write all results into the folder ``directory`` atomically and return its path.

        An existing ``directory`` is replaced only if it is empty or an earlier run result holding
        nothing but what cbsim wrote; anything else raises :class:`~cbsim.common.errors.CbsimError`.
        """
        target = outputs.replace_folder(Path(directory), RUN_RESULT, self.write_files)
        self._written_iterations(target)
        return target

    def write_new(self, parent: str | Path, name: str) -> Path:
        """Write all results into a new folder ``parent/name`` (``name-2``, ... if taken), which
        appears complete or not at all; return its path."""
        target = outputs.publish_new_folder(Path(parent), name, RUN_RESULT, self.write_files)
        self._written_iterations(target)
        return target

    def write_files(self, folder: Path) -> None:
        """Write the result files into the existing folder ``folder`` (not atomically: writers
        stage a folder this fills, see :mod:`cbsim.common.output_folders`)."""
        _frame_of(Results, "requests").write(self, folder / "requests.parquet")
        self._write_iterations(folder / "iterations.parquet")
        _frame_of(Results, "timeseries").write(self, folder / "timeseries.parquet")
        _write_summary(folder / "summary.json", self.summary)
        if self.no_spec_summary is not None:
            _write_summary(folder / "summary_no_spec.json", self.no_spec_summary)
        (folder / "scenario.yaml").write_text(
            yaml.safe_dump(self.scenario.to_dict(), sort_keys=False)
        )
        if self.run_info:
            (folder / "run_info.json").write_text(json.dumps(self.run_info, indent=2) + "\n")

    @classmethod
    def read(cls, directory: str | Path) -> Results:
        """Load results written by :meth:`write`."""
        import pandas as pd

        from cbsim.run.loading import load_scenario

        path = Path(directory)
        if not path.exists():  # a replacement killed half way: the old result is restored
            outputs.recover(path, RUN_RESULT)
        baseline = path / "summary_no_spec.json"
        return cls(
            scenario=load_scenario(path / "scenario.yaml", written=True),
            requests=read_requests(path / "requests.parquet"),
            iterations=pd.read_parquet(path / "iterations.parquet"),
            timeseries=pd.read_parquet(path / "timeseries.parquet"),
            summary=_read_summary(path / "summary.json"),
            no_spec_summary=_read_summary(baseline) if baseline.is_file() else None,
        )


# the frames, held as their tables until read (the dataclass's __init__ sets them through these)
for _name in ("requests", "iterations", "timeseries"):
    setattr(Results, _name, _Frame(_name))
del _name
