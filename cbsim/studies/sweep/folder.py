"""A sweep's folder: the points written, what a resumed sweep finds done, and the table.

Each point's results go to ``<out>/points/<key>/`` (:data:`SWEEP_POINT`: the files of
:meth:`~cbsim.run.results.Results.write` plus ``point.json`` with its overrides, seed and key), written
atomically (:func:`write_point`). A point whose folder is complete is done: a resumed sweep skips
it, and because the key is derived from the resolved scenario, old results are never mixed in
(:func:`_is_complete`). Preparing a folder (:func:`_prepare_sweep_folder`) refuses one that is
neither new, empty nor an earlier sweep's (:data:`SWEEP`, see :mod:`cbsim.common.output_folders`) and finishes
point writes and deletes temporaries that killed processes left. The table
(``<out>/sweep.parquet``, :func:`sweep_frame`) has one row per point × seed: the override values
(dotted key names as columns), ``seed``, ``key`` and every summary field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError
from cbsim.run.results import RESULT_FILES, Results
from cbsim.studies.sweep.grid import SweepPoint

TABLE_FILE = "sweep.parquet"
POINTS_DIR = "points"
POINT_FILE = "point.json"


SWEEP = outputs.OutputKind(
    name="sweep",
    description="a sweep",
    entries=frozenset({TABLE_FILE, POINTS_DIR}),
    required=frozenset({TABLE_FILE, POINTS_DIR}),
    directories=frozenset({POINTS_DIR}),
    whole_folder=False,
)
"""A sweep's folder: cbsim adds points and rewrites its table; other files in it stay untouched."""

SWEEP_POINT = outputs.OutputKind(
    name="sweep point",
    description="a sweep point",
    entries=frozenset({*RESULT_FILES, POINT_FILE}),
    required=frozenset({"summary.json", "scenario.yaml", POINT_FILE}),
)
"""One point's folder in ``<sweep>/points/``: replaced as a whole."""


def _point_meta(point: SweepPoint, key: str) -> dict[str, Any]:
    return {"key": key, "seed": point.seed, "overrides": point.overrides}


def write_point(points_dir: Path, key: str, results: Results, meta: Mapping[str, Any]) -> Path:
    """Write one point's results and ``point.json`` to ``points_dir/key`` atomically (replacing
    only an earlier result of that point, see :data:`SWEEP_POINT`)."""
    text = json.dumps(dict(meta), indent=2, ensure_ascii=False, default=str) + "\n"

    def fill(folder: Path) -> None:
        results.write_files(folder)
        (folder / POINT_FILE).write_text(text, encoding="utf-8")

    # the sweep deletes its points' stale temporaries once when it starts, not at every point
    return outputs.replace_folder(points_dir / key, SWEEP_POINT, fill, clean_parent=False)


# --------------------------------------------------------------------------- the table


def _read_summary(point_dir: Path) -> dict[str, Any]:
    summary = json.loads((point_dir / "summary.json").read_text(encoding="utf-8"))
    return {k: (math.nan if v is None else v) for k, v in summary.items()}


def _is_complete(point_dir: Path) -> bool:
    return (point_dir / "summary.json").is_file()


def _column_values(values: list[Any]) -> list[Any]:
    """Override values as one parquet-friendly column: scalars of one kind stay, else JSON text."""
    present = [v for v in values if v is not None]
    kinds = set()
    for v in present:
        if isinstance(v, bool):
            kinds.add("bool")
        elif isinstance(v, int | float):
            kinds.add("number")
        elif isinstance(v, str):
            kinds.add("str")
        else:
            kinds.add("other")
    if len(kinds) <= 1 and "other" not in kinds:
        return values
    return [
        None if v is None else v if isinstance(v, str) else _canonical_json_default(v)
        for v in values
    ]


def _canonical_json_default(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sweep_frame(
    points: Sequence[SweepPoint], summaries: Mapping[str, dict[str, Any]]
) -> pd.DataFrame:
    """One row per point (in sweep order) whose summary is known: overrides, seed, key, summary."""
    override_columns = list(dict.fromkeys(k for p in points for k in p.overrides))
    rows: list[dict[str, Any]] = []
    summary_columns: dict[str, None] = {}
    for point in points:
        key = point.key
        summary = summaries.get(key)
        if summary is None:
            continue
        row: dict[str, Any] = {c: point.overrides.get(c) for c in override_columns}
        row["seed"] = point.seed
        row["key"] = key
        for name, value in summary.items():
            if name not in row:
                row[name] = value
                summary_columns[name] = None
        rows.append(row)
    columns = [*override_columns, "seed", "key"]
    columns += [c for c in summary_columns if c not in columns]
    data = {c: [r.get(c) for r in rows] for c in columns}
    for c in override_columns:
        data[c] = _column_values(data[c])
    frame = pd.DataFrame(data, columns=columns)
    if not rows:
        frame = frame.astype({"seed": "int64", "key": "str"})
    return frame


def _write_table(frame: pd.DataFrame, path: Path) -> None:
    """Write ``frame`` as parquet to ``path`` atomically (temporary file, then rename)."""
    outputs.write_file(path, lambda tmp: frame.to_parquet(tmp, index=False))


# --------------------------------------------------------------------------- running a sweep


def _prepare_sweep_folder(out_dir: Path) -> None:
    """Create (or resume) the sweep folder: refuse one that is not a sweep's; finish point
    replacements and delete temporaries that killed processes left in it."""
    points_dir = out_dir / POINTS_DIR
    try:
        outputs.prepare_folder(out_dir, SWEEP)
        points_dir.mkdir(exist_ok=True)
        outputs.recover_all(points_dir, SWEEP_POINT)
        outputs.remove_stale_temporaries(points_dir)
    except OSError as err:
        raise CbsimError(
            f"cannot create the sweep directory: {err.strerror or err}", source=str(out_dir)
        ) from None
