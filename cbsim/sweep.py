"""Sweeps: one base scenario, many variations, every result in one table.

A capacity question is rarely one run: "which of two schedulers meets the SLO at 4, 8 and 16
requests per second, over three seeds?" is eighteen runs. A sweep file names a ``base``
scenario (a path relative to the sweep file, or an inline mapping), a ``grid`` of dotted scenario
keys with the values to try (the sweep is their Cartesian product), optional explicit ``points``
(override mappings, instead of or beside the grid) and the ``seeds`` to run each point with
(default: the base scenario's seed)::

    name: sched-vs-load
    base: ../scenarios/chat-llama3-8b-h100.yaml
    grid:
      workload.arrival.rate: [4, 8, 16]
      scheduler.kind: [vllm, sarathi]
    points:
      - {scheduler.kind: sarathi, scheduler.max_batched_tokens: 256}
    seeds: [1, 2, 3]

Every point (override mapping × seed) is resolved to a validated :class:`~cbsim.scenario.Scenario`
and named by its *key*: a short SHA-256 of the canonical JSON of the resolved scenario (seed
included). Results go to ``<out>/points/<key>/`` (the files of
:meth:`~cbsim.results.Results.write` plus ``point.json`` with the overrides, seed and key, written
atomically) and one row per point × seed to ``<out>/sweep.parquet``: the override values (dotted key names as columns),
``seed``, ``key`` and every summary field. Because the key is derived from the resolved scenario,
re-running a sweep skips points already done, and a point whose scenario changed (a new base, a
new default) is simulated afresh; old results are never mixed in. Relative file paths in the base
are taken relative to the base file, those in overrides relative to the sweep file; both are
resolved to absolute paths before hashing, so keys do not depend on the working directory.
``<out>`` must be new, empty or an earlier sweep's folder (:data:`SWEEP`, see :mod:`cbsim.outputs`);
a resumed sweep also finishes point writes and deletes temporaries that killed processes left.

Points run on a local process pool (``backend="local"``; its workers end when the sweep's process
dies, see :mod:`cbsim.parent_watch`) or as Ray tasks (``backend="ray"``, optional extra
``cbsim[ray]``). A simulation draws its randomness only from generators derived
from its scenario's seed, so the same point gives the same summary on any backend, in any process.

A point whose scenario is invalid, or whose run fails, is reported with its overrides and skipped;
the other points still run. ``cbsim sweep`` exits 0 when at least one point succeeded and no point
hit an internal error (failures are listed on stderr), 1 when no point succeeded or a point hit an
internal error (a bug: its traceback is printed), and 2 when the sweep file itself is wrong.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import importlib
import itertools
import json
import logging
import math
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import click
import pandas as pd
from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidationError,
    field_validator,
)

from cbsim import outputs
from cbsim.errors import CbsimError, UserError
from cbsim.limits import SWEEP_POINTS, Seed
from cbsim.parent_watch import exit_with_parent
from cbsim.results import RESULT_FILES, Results
from cbsim.scenario import (
    Scenario,
    _error_from_validation,
    _resolve_relative_paths,
    apply_overrides,
    load_scenario,
    read_yaml,
)

__all__ = [
    "PointFailure",
    "Sweep",
    "SweepPoint",
    "SweepReport",
    "execute_sweep",
    "expand_points",
    "load_sweep",
    "point_key",
    "resolve_points",
    "run_sweep",
    "sweep_command",
    "sweep_frame",
    "write_point",
]

Backend = Literal["local", "ray"]
BACKENDS: tuple[str, ...] = ("local", "ray")

# progress(points_done, points_total); points resumed from an earlier run count as done.
SweepProgress = Callable[[int, int], None]

KEY_LENGTH = 12
TABLE_FILE = "sweep.parquet"
POINTS_DIR = "points"
POINT_FILE = "point.json"
RAY_INSTALL_HINT = "pip install 'cbsim[ray]'"
# sweep.parquet is rewritten as points complete, but not more often than this (and at the end)
TABLE_REWRITE_INTERVAL_S = 1.0


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


# --------------------------------------------------------------------------- the sweep file


class Sweep(BaseModel):
    """A validated sweep file: a base scenario, the variations to run and the seeds."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    base: str | dict[str, Any]
    grid: dict[str, list[Any]] = {}
    points: list[dict[str, Any]] = []
    seeds: list[Seed] | None = None

    _source: Path | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str | None) -> str | None:
        if name is not None and (
            not name or any(c in name for c in "/\\\0") or name in {".", ".."}
        ):
            raise ValueError("name must be a non-empty string without path separators")
        return name

    @field_validator("base", mode="before")
    @classmethod
    def _base_kind(cls, base: Any) -> Any:
        if isinstance(base, os.PathLike):
            base = os.fspath(base)
        if isinstance(base, str) and not base.strip():
            raise ValueError("must be a scenario file path or a scenario mapping, not empty")
        if not isinstance(base, str | dict):
            raise ValueError("must be a scenario file path or a scenario mapping")
        return base

    @field_validator("grid")
    @classmethod
    def _grid_axes(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in grid.items():
            _check_override_key(key)
            if not values:
                raise ValueError(f"{key}: needs at least one value")
        return grid

    @field_validator("points")
    @classmethod
    def _point_keys(cls, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, point in enumerate(points):
            for key in point:
                try:
                    _check_override_key(key)
                except ValueError as err:
                    raise ValueError(f"[{i}]: {err}") from None
        return points

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int] | None) -> list[int] | None:
        if seeds is None:
            return None
        if not seeds:
            raise ValueError("needs at least one seed (or leave it out for the base's seed)")
        repeated = sorted({s for s in seeds if seeds.count(s) > 1})
        if repeated:
            raise ValueError(f"seeds repeat: {repeated}")
        return seeds

    def size(self) -> int:
        """Points it runs (override mappings times seeds), counted without forming the grid."""
        grid = math.prod(len(v) for v in self.grid.values()) if self.grid else 0
        return max(grid + len(self.points), 1) * len(self.seeds or [0])

    @property
    def source(self) -> Path | None:
        """The sweep file this came from (None for a mapping)."""
        return self._source

    @property
    def sweep_name(self) -> str:
        """``name``, else the sweep file's stem, else ``sweep``."""
        if self.name is not None:
            return self.name
        return self._source.stem if self._source is not None else "sweep"

    def override_sets(self) -> list[dict[str, Any]]:
        """The override mappings: the grid's product (first key slowest), then ``points``.

        With neither a grid nor points the sweep is the base alone (one empty mapping).
        """
        sets: list[dict[str, Any]] = []
        if self.grid:
            keys = list(self.grid)
            for values in itertools.product(*(self.grid[k] for k in keys)):
                sets.append(dict(zip(keys, values, strict=True)))
        sets.extend(dict(p) for p in self.points)
        return sets or [{}]


def _check_override_key(key: str) -> None:
    if not key or any(not part.strip() for part in key.split(".")):
        raise ValueError(f"{key!r} is not a dotted scenario key")
    if key == "seed":
        raise ValueError("sweep seeds with seeds: [...], not as an override")


def load_sweep(sweep: str | Path | Mapping[str, Any]) -> Sweep:
    """Read and validate a sweep from a YAML path or a mapping.

    A relative ``base`` path is taken relative to the sweep file (to the working directory for a
    mapping). Errors name the sweep file and the field.
    """
    if isinstance(sweep, Mapping):
        data, path = dict(sweep), None
    else:
        path = Path(sweep)
        data = read_yaml(path)
    try:
        model = Sweep.model_validate(data)
    except ValidationError as err:
        raise _error_from_validation(err, str(path) if path is not None else None) from None
    size = model.size()
    if not SWEEP_POINTS.contains(size):
        raise CbsimError(
            f"the sweep has {size:,} points; a sweep {SWEEP_POINTS.violation(size)}",
            source=str(path) if path is not None else None,
            field="grid" if model.grid else "points",
        )
    model._source = path
    return model


# --------------------------------------------------------------------------- points


class SweepPoint(NamedTuple):
    """One run of a sweep: an override mapping, a seed and the scenario they resolve to."""

    overrides: dict[str, Any]
    seed: int
    scenario: Scenario

    @property
    def key(self) -> str:
        """The point's key: see :func:`point_key`."""
        return point_key(self.scenario)


@dataclass(frozen=True)
class PointFailure:
    """A point that could not run: invalid at load (``key`` is None) or failed while running."""

    overrides: dict[str, Any]
    seed: int
    error: str
    key: str | None = None
    internal: bool = False  # an unexpected exception (a bug): ``error`` holds the traceback

    def describe(self) -> str:
        """One line (plus the traceback for internal errors) naming the point and the problem."""
        what = "internal error" if self.internal else "error"
        where = f"{_compact_json(self.overrides)} seed {self.seed}"
        if self.key is not None:
            where += f" (key {self.key})"
        if self.internal:
            return f"{where}: {what}:\n{self.error.rstrip()}"
        return f"{where}: {self.error}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "overrides": self.overrides,
            "seed": self.seed,
            "key": self.key,
            "error": self.error,
            "internal": self.internal,
        }


def _canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _compact_json(data: Any) -> str:
    return json.dumps(data, separators=(", ", ": "), ensure_ascii=False, default=str)


def point_key(scenario: Scenario) -> str:
    """A short SHA-256 of the canonical JSON of the resolved scenario (seed included)."""
    digest = hashlib.sha256(_canonical_json(scenario.to_dict()).encode("utf-8")).hexdigest()
    return digest[:KEY_LENGTH]


def _as_sweep(sweep: str | Path | Mapping[str, Any] | Sweep) -> Sweep:
    return sweep if isinstance(sweep, Sweep) else load_sweep(sweep)


def _base_data(sweep: Sweep) -> tuple[dict[str, Any], str | None]:
    """The base scenario as plain data (relative paths made absolute) and its source for errors."""
    sweep_dir = (sweep.source.parent if sweep.source is not None else Path()).resolve()
    sweep_source = str(sweep.source) if sweep.source is not None else None
    if isinstance(sweep.base, dict):
        return _resolve_relative_paths(dict(sweep.base), sweep_dir), sweep_source
    shown = sweep.source.parent / sweep.base if sweep.source is not None else Path(sweep.base)
    path = sweep_dir / sweep.base
    try:
        raw = read_yaml(path)
    except CbsimError as err:
        raise CbsimError(err.message, source=sweep_source, field=f"base ({shown})") from None
    return _resolve_relative_paths(raw, path.parent), str(shown)


def _default_seed(data: Mapping[str, Any], source: str | None) -> int:
    seed = data.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise CbsimError("must be a non-negative integer", source=source, field="seed")
    return seed


def resolve_points(
    sweep: str | Path | Mapping[str, Any] | Sweep,
) -> tuple[list[SweepPoint], list[PointFailure]]:
    """Every point of the sweep, resolved: the valid ones, and the invalid ones with their error.

    Order: override mappings in :meth:`Sweep.override_sets` order, seeds inner. Problems with the
    sweep file itself (or an unreadable base file) raise :class:`CbsimError`.
    """
    spec = _as_sweep(sweep)
    base, base_source = _base_data(spec)
    sweep_dir = (spec.source.parent if spec.source is not None else Path()).resolve()
    seeds = spec.seeds if spec.seeds is not None else [_default_seed(base, base_source)]
    valid: list[SweepPoint] = []
    invalid: list[PointFailure] = []
    for overrides in spec.override_sets():
        for seed in seeds:
            try:
                data = _resolve_relative_paths(apply_overrides(base, overrides), sweep_dir)
                scenario = load_scenario(data, seed=seed)
            except CbsimError as err:
                invalid.append(PointFailure(overrides, seed, str(err.located(base_source))))
                continue
            valid.append(SweepPoint(overrides, seed, scenario))
    return valid, invalid


def expand_points(
    sweep: str | Path | Mapping[str, Any] | Sweep, *, skip_invalid: bool = False
) -> list[SweepPoint]:
    """The sweep's points as (overrides, seed, Scenario) tuples.

    An invalid point raises :class:`CbsimError` naming its overrides, unless ``skip_invalid``.
    """
    valid, invalid = resolve_points(sweep)
    if invalid and not skip_invalid:
        first = invalid[0]
        more = f" (and {len(invalid) - 1} more invalid points)" if len(invalid) > 1 else ""
        raise CbsimError(f"invalid point {first.describe()}{more}")
    return valid


# --------------------------------------------------------------------------- running one point


@dataclass
class _Outcome:
    """What running one point gave: nothing (written by the worker), results, or an error."""

    key: str
    results: Results | None = None
    error: str | None = None
    internal: bool = False


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


def _simulate_point(
    scenario: Scenario,
    key: str,
    meta: dict[str, Any],
    points_dir: str | None,
    source: str | None,
) -> _Outcome:
    """Run one point (in a worker). Writes it when ``points_dir`` is given, else returns it."""
    from cbsim.simulate import simulate

    try:
        results = simulate(scenario, source=source)
    except CbsimError as err:
        return _Outcome(key, error=str(err))
    except Exception:
        return _Outcome(key, error=traceback.format_exc(), internal=True)
    if points_dir is None:
        return _Outcome(key, results=results)
    try:
        write_point(Path(points_dir), key, results, meta)
    except (OSError, CbsimError) as err:
        return _Outcome(key, error=f"cannot write results: {err}")
    except Exception:
        return _Outcome(key, error=traceback.format_exc(), internal=True)
    return _Outcome(key)


# --------------------------------------------------------------------------- backends


def _run_local(
    todo: Sequence[SweepPoint],
    keys: Sequence[str],
    points_dir: Path,
    workers: int,
    source: str | None,
) -> Generator[_Outcome, None, None]:
    """Run points on a spawn-context process pool; workers write their own results."""
    context = multiprocessing.get_context("spawn")
    pool = cf.ProcessPoolExecutor(
        max_workers=min(workers, len(todo)),
        mp_context=context,
        initializer=exit_with_parent,  # a killed sweep must not leave workers computing
        initargs=(os.getpid(),),
    )
    finished = False
    try:
        futures = {
            pool.submit(
                _simulate_point, p.scenario, k, _point_meta(p, k), str(points_dir), source
            ): k
            for p, k in zip(todo, keys, strict=True)
        }
        for future in cf.as_completed(futures):
            try:
                yield future.result()
            except Exception as err:  # the worker died (killed, out of memory, ...)
                yield _Outcome(futures[future], error=f"worker failed: {err!r}", internal=True)
        finished = True
    finally:
        pool.shutdown(wait=finished, cancel_futures=True)


def _import_ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise CbsimError(
            f"the ray backend needs Ray, which is not installed: {RAY_INSTALL_HINT}",
            field="backend",
        ) from None


@contextlib.contextmanager
def _ray_session(ray: Any, address: str | None, workers: int | None) -> Iterator[None]:
    """Connect to ``address``, reuse an initialised Ray, or start (and stop) a local one."""
    if ray.is_initialized():
        yield
        return
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.ERROR,
    }
    if address is not None:
        options["address"] = address
    else:
        options["address"] = "local"
        options["num_cpus"] = workers or os.cpu_count() or 1
    try:
        ray.init(**options)
    except Exception as err:
        where = f"cannot connect to Ray at {address!r}" if address else "cannot start Ray"
        raise CbsimError(f"{where}: {err}", field="address" if address else "backend") from None
    try:
        yield
    finally:
        ray.shutdown()


def _run_ray(
    todo: Sequence[SweepPoint],
    keys: Sequence[str],
    points_dir: Path,
    workers: int | None,
    address: str | None,
    source: str | None,
) -> Generator[_Outcome, None, None]:
    """Run each point as a Ray task; results come back to this process, which writes them."""
    ray = _import_ray()
    with _ray_session(ray, address, workers):
        task = ray.remote(num_cpus=1)(_simulate_point)
        window = workers if workers is not None else len(todo)
        queue = list(zip(todo, keys, strict=True))
        pending: dict[Any, tuple[SweepPoint, str]] = {}
        try:
            while queue or pending:
                while queue and len(pending) < window:
                    point, key = queue.pop(0)
                    ref = task.remote(point.scenario, key, _point_meta(point, key), None, source)
                    pending[ref] = (point, key)
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    point, key = pending.pop(ref)
                    try:
                        outcome: _Outcome = ray.get(ref)
                    except Exception as err:  # the task or its worker died
                        yield _Outcome(key, error=f"Ray task failed: {err!r}", internal=True)
                        continue
                    yield _write_returned(outcome, point, points_dir)
        finally:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)


def _write_returned(outcome: _Outcome, point: SweepPoint, points_dir: Path) -> _Outcome:
    if outcome.results is None:
        return outcome
    try:
        write_point(points_dir, outcome.key, outcome.results, _point_meta(point, outcome.key))
    except (OSError, CbsimError) as err:
        return _Outcome(outcome.key, error=f"cannot write results: {err}")
    return _Outcome(outcome.key)


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


@dataclass
class SweepReport:
    """What a sweep run did: the table, where it went, what ran, what was resumed, what failed."""

    name: str
    frame: pd.DataFrame
    out: Path
    points: int  # distinct points (by key) that resolved to a valid scenario
    ran: int  # points simulated (or attempted) by this run
    resumed: int  # points skipped because an earlier run had completed them
    succeeded: int  # points with results, run now or resumed
    invalid: int  # points whose scenario did not validate (never run; listed in failures)
    failures: list[PointFailure] = field(default_factory=list)

    @property
    def internal_errors(self) -> list[PointFailure]:
        """Failures that were unexpected exceptions (bugs), not problems with the input."""
        return [f for f in self.failures if f.internal]


def _check_options(backend: str, workers: int | None, address: str | None) -> None:
    if backend not in BACKENDS:
        raise CbsimError(
            f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}", field="backend"
        )
    if workers is not None and workers < 1:
        raise CbsimError(f"must be at least 1, got {workers}", field="workers")
    if address is not None and backend != "ray":
        raise CbsimError("applies only to the ray backend (--backend ray)", field="address")


def execute_sweep(
    sweep: str | Path | Mapping[str, Any] | Sweep,
    *,
    backend: str = "local",
    workers: int | None = None,
    out: str | Path | None = None,
    address: str | None = None,
    progress: SweepProgress | None = None,
) -> SweepReport:
    """Run a sweep (see :func:`run_sweep`) and report what happened in detail."""
    _check_options(backend, workers, address)
    if backend == "ray":
        _import_ray()  # fail before anything is written
    spec = _as_sweep(sweep)
    points, failures = resolve_points(spec)
    invalid = len(failures)
    out_dir = Path(out) if out is not None else Path("results") / "sweeps" / spec.sweep_name
    points_dir = out_dir / POINTS_DIR
    table_path = out_dir / TABLE_FILE
    _prepare_sweep_folder(out_dir)

    keys = [p.key for p in points]
    unique: dict[str, SweepPoint] = {}
    for point, key in zip(points, keys, strict=True):
        unique.setdefault(key, point)
    summaries: dict[str, dict[str, Any]] = {}
    for key in unique:
        if _is_complete(points_dir / key):
            summaries[key] = _read_summary(points_dir / key)
    resumed = len(summaries)
    todo_keys = [k for k in unique if k not in summaries]
    todo = [unique[k] for k in todo_keys]

    total, done = len(unique), resumed
    if progress is not None:
        progress(done, total)
    source = str(spec.source) if spec.source is not None else None

    last_write = time.monotonic()

    def write_table() -> None:
        try:
            _write_table(sweep_frame(points, summaries), table_path)
        except OSError as err:
            raise CbsimError(
                f"cannot write: {err.strerror or err}", source=str(table_path)
            ) from None

    if todo:
        workers_n = workers if workers is not None else (os.cpu_count() or 1)
        outcomes = (
            _run_local(todo, todo_keys, points_dir, workers_n, source)
            if backend == "local"
            else _run_ray(todo, todo_keys, points_dir, workers, address, source)
        )
        with contextlib.closing(outcomes):
            for outcome in outcomes:
                point = unique[outcome.key]
                if outcome.error is not None:
                    failures.append(
                        PointFailure(
                            point.overrides,
                            point.seed,
                            outcome.error,
                            outcome.key,
                            outcome.internal,
                        )
                    )
                else:
                    summaries[outcome.key] = _read_summary(points_dir / outcome.key)
                done += 1
                if progress is not None:
                    progress(done, total)
                if time.monotonic() - last_write >= TABLE_REWRITE_INTERVAL_S:
                    write_table()
                    last_write = time.monotonic()
    # workers of a killed earlier sweep may have ended only after this one started
    outputs.remove_stale_temporaries(points_dir)
    write_table()
    frame = pd.read_parquet(table_path)
    return SweepReport(
        name=spec.sweep_name,
        frame=frame,
        out=out_dir,
        points=total,
        ran=len(todo),
        resumed=resumed,
        succeeded=len(summaries),
        invalid=invalid,
        failures=failures,
    )


def run_sweep(
    sweep: str | Path | Mapping[str, Any] | Sweep,
    *,
    backend: str = "local",
    workers: int | None = None,
    out: str | Path | None = None,
    address: str | None = None,
    progress: SweepProgress | None = None,
) -> pd.DataFrame:
    """Run every point of a sweep and return the ``sweep.parquet`` table.

    ``sweep`` is a sweep YAML path, a mapping or a :class:`Sweep`. ``backend`` is ``"local"`` (a
    process pool of ``workers`` processes, default one per CPU) or ``"ray"`` (one Ray task per
    point; ``address`` connects to an existing cluster, else a Ray already initialised in this
    process is used, else a local one with ``workers`` CPUs is started and shut down). Results go
    to ``out`` (default ``results/sweeps/<sweep name>/``); completed points are not run again.
    ``progress(done, total)`` is called as points finish.

    The frame's ``attrs`` hold ``failures`` (a list of dicts: overrides, seed, key, error,
    internal), ``ran``, ``resumed`` and ``out``. Invalid or failing points do not raise.

    The local backend starts its workers with the ``spawn`` method, so a script that calls this
    at import level needs the usual ``if __name__ == "__main__":`` guard.
    """
    report = execute_sweep(
        sweep, backend=backend, workers=workers, out=out, address=address, progress=progress
    )
    frame = report.frame
    frame.attrs.update(
        failures=[f.to_dict() for f in report.failures],
        ran=report.ran,
        resumed=report.resumed,
        out=str(report.out),
    )
    return frame


# --------------------------------------------------------------------------- command line


def _progress_enabled(quiet: bool) -> bool:
    if quiet:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def _progress_display(enabled: bool) -> Iterator[SweepProgress | None]:
    """A rich progress bar on stderr: points done / total, elapsed time and ETA."""
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task("sweep", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@click.command("sweep")
@click.argument("sweep_file", metavar="SWEEP.yaml", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--backend",
    type=click.Choice(BACKENDS),
    default="local",
    show_default=True,
    help="local: a process pool; ray: one Ray task per point (needs cbsim[ray]).",
)
@click.option(
    "--workers",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Parallel points (default: one per CPU; with --address, the tasks in flight).",
)
@click.option(
    "--out",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Sweep directory. Default: results/sweeps/<sweep name>/.",
)
@click.option("--address", default=None, help="Ray cluster address to connect to (ray backend).")
@click.option("--quiet", "-q", is_flag=True, help="No progress or summary; print the directory.")
def sweep_command(
    sweep_file: Path,
    backend: str,
    workers: int | None,
    out: Path | None,
    address: str | None,
    quiet: bool,
) -> None:
    """Run every point of SWEEP.yaml (a base scenario × grid × seeds) and collect one table.

    Completed points are skipped on a re-run. Exit status: 0 when at least one point succeeded
    (failed points are listed on stderr), 1 when none did or a point hit an internal error,
    2 for a bad sweep file or option.
    """
    try:
        with _progress_display(_progress_enabled(quiet)) as progress:
            report = execute_sweep(
                sweep_file,
                backend=backend,
                workers=workers,
                out=out,
                address=address,
                progress=progress,
            )
    except CbsimError as err:
        if err.field in ("backend", "workers", "address") and err.source is None:
            raise UserError(f"--{err.field}: {err.message}") from None
        raise UserError(str(err)) from None
    for failure in report.failures:
        click.echo(f"failed: {failure.describe()}", err=True)
    if quiet:
        click.echo(str(report.out))
    else:
        total = report.points + report.invalid
        click.echo(
            f"sweep {report.name}: {total} point{'s' if total != 1 else ''}: "
            f"{report.succeeded} succeeded ({report.resumed} resumed), "
            f"{len(report.failures)} failed"
            + (f" ({report.invalid} invalid)" if report.invalid else "")
        )
        click.echo(f"results: {report.out / TABLE_FILE} ({len(report.frame)} rows)")
    if report.succeeded == 0 or report.internal_errors:
        raise click.exceptions.Exit(1)
