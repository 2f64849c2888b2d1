"""Sweep grid expansion: from a sweep file to the points it names.

A sweep file (:class:`Sweep`) names a base scenario, a ``grid`` of dotted scenario keys with the
values to try (their Cartesian product), explicit ``points`` beside or instead of it, and the
``seeds`` to run each with. Expanding it (:func:`expand_points`) gives one override mapping per
point; resolving them (:func:`resolve_points`) applies each to the base and validates the result,
so that every point is a :class:`SweepPoint` (a scenario and its seed) or a :class:`PointFailure`
(an invalid scenario, reported and skipped). A point is named by its *key* (:func:`point_key`):
a short SHA-256 of the canonical JSON of its resolved scenario, seed included, with relative paths
made absolute first, so keys do not depend on the working directory and a changed scenario gets a
new key.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidationError,
    field_validator,
)

from cbsim.common.errors import CbsimError
from cbsim.common.limits import SWEEP_POINTS, Seed
from cbsim.run.loading import _resolve_relative_paths, apply_overrides, load_scenario, read_yaml
from cbsim.schema.problems import _error_from_validation
from cbsim.schema.scenario import Scenario

KEY_LENGTH = 12


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
