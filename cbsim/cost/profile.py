"""Calibration profiles: the fitted parameters a cost model reads, one JSON file per GPU and source.

A profile holds, for one GPU and one measurement source (a serving engine and version, say), what
calibration fitted: per GEMM dtype a floor, a compute and a memory efficiency and a smooth
correction over (m, n, k); the same for decode and prefill attention per KV-cache dtype; all-reduce
latency by message size per GPU count; element-wise kernel bandwidth. What a serving engine adds
beyond its kernels lives in engine profiles (:mod:`cbsim.cost.engine_profile`). Profiles ship in
``cbsim/catalog/data/profiles/`` and are written by ``cbsim calibrate fit``; simulation reads only these
small files, never the measurement tables.

This module holds what a cost model reads: the profile types, reading and loading them, and their
predictions. Writing a fitted profile is calibration's business
(:func:`cbsim.studies.calibration.profile.write_json`).

Every file carries ``schema_version``; a file that does not parse or has another version is an
error naming it — there is no silent fallback to defaults.

A GPU without kernel measurements has a *transferred* profile: a small file naming the measured
profile it is ``based_on``, whose dimensionless fits (efficiencies, floors, corrections) then
price this GPU's kernels on its own spec sheet. Its provenance records the error that transfer
carries, measured by holding out GPUs that do have tables (``transfer error <family>`` entries,
written by :mod:`cbsim.studies.calibration.transfer`), and :func:`transfer_note` says it in a line. The
source's measured all-reduce and all-to-all curves carry over only between equal links
(:func:`keeps_collectives`); elsewhere collectives take the roofline ring on the GPU's own link.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from cbsim.catalog.hardware import get_gpu
from cbsim.common.documents import decode_utf8, parse_json
from cbsim.common.errors import CbsimError, unknown_name
from cbsim.cost.grid import LogGrid
from cbsim.cost.profile_cache import cached_json, store_json

SCHEMA_VERSION = 1
PROFILE_DIR = "profiles"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GridCorrection(_Strict):
    """``log(measured / base)`` on a grid over log2 of the named features."""

    features: list[str]
    axes: list[list[float]]
    values: list[float]
    _grid: LogGrid | None = PrivateAttr(default=None)

    def grid(self) -> LogGrid:
        if self._grid is None:
            self._grid = LogGrid.from_lists(self.axes, self.values)
        return self._grid

    def __call__(self, *features: float) -> float:
        return self.grid()(*features)

    def restrict(self, fixed: dict[str, float]) -> GridCorrection:
        """The correction with some features held at given values (exact for multilinear grids)."""
        keep = [i for i, name in enumerate(self.features) if name not in fixed]
        if len(keep) == len(self.features):
            return self
        mesh = np.meshgrid(*[np.exp2(np.asarray(self.axes[i])) for i in keep], indexing="ij")
        count = mesh[0].size
        columns = []
        position = 0
        for name in self.features:
            if name in fixed:
                columns.append(np.full(count, fixed[name], dtype=np.float64))
            else:
                columns.append(mesh[position].ravel())
                position += 1
        values = self.grid().evaluate(*columns)
        return GridCorrection(
            features=[self.features[i] for i in keep],
            axes=[self.axes[i] for i in keep],
            values=[float(v) for v in values],
        )


class RooflineFit(_Strict):
    """``floor + max(FLOPs / (peak · compute_eff), bytes / (bandwidth · memory_eff))``, times
    ``exp(correction(features))``."""

    floor_s: float = Field(ge=0.0)
    compute_eff: float = Field(gt=0.0, le=1.5)
    memory_eff: float = Field(gt=0.0, le=1.5)
    correction: GridCorrection | None = None

    def base(self, flops: float, bytes_moved: float, peak: float, bandwidth: float) -> float:
        return self.floor_s + max(
            flops / (peak * self.compute_eff), bytes_moved / (bandwidth * self.memory_eff)
        )

    def specialize(self, fixed: dict[str, float]) -> RooflineFit:
        """This fit with the correction's features named in ``fixed`` held at those values."""
        if self.correction is None or not set(fixed) & set(self.correction.features):
            return self
        return self.model_copy(update={"correction": self.correction.restrict(fixed)})

    def predict(
        self, flops: float, bytes_moved: float, peak: float, bandwidth: float, *features: float
    ) -> float:
        base = self.base(flops, bytes_moved, peak, bandwidth)
        if self.correction is None:
            return base
        return base * math.exp(self.correction(*features))

    def compiled(self) -> Callable[..., float]:
        """:meth:`predict` as a plain closure (no model attribute lookups on the hot path), the
        same value bit for bit."""
        floor, compute, memory = self.floor_s, self.compute_eff, self.memory_eff
        if self.correction is None:

            def plain(
                flops: float, bytes_moved: float, peak: float, bandwidth: float, *features: float
            ) -> float:
                return floor + max(flops / (peak * compute), bytes_moved / (bandwidth * memory))

            return plain
        grid = self.correction.grid().compiled()
        exp = math.exp

        def corrected(
            flops: float, bytes_moved: float, peak: float, bandwidth: float, *features: float
        ) -> float:
            base = floor + max(flops / (peak * compute), bytes_moved / (bandwidth * memory))
            return base * exp(grid(*features))

        return corrected

    def predict_points(
        self,
        flops: np.ndarray | float,
        bytes_moved: np.ndarray | float,
        peak: float,
        bandwidth: float,
        *features: np.ndarray | float,
    ) -> np.ndarray:
        """:meth:`predict` at many points (arrays, or one value for all), the same float per
        point bit for bit: the roofline element-wise in :meth:`predict`'s order (``max`` as
        Python's, the second where it is greater), the correction by
        :meth:`~cbsim.cost.grid.LogGrid.at_points` and ``math.exp`` point by point."""
        compute = flops / (peak * self.compute_eff)
        memory = bytes_moved / (bandwidth * self.memory_eff)
        base = self.floor_s + np.where(memory > compute, memory, compute)
        if self.correction is None:
            return np.asarray(base, dtype=np.float64)
        exp = math.exp
        scale = [exp(c) for c in self.correction.grid().at_points(*features).tolist()]
        return np.asarray(base * np.array(scale, dtype=np.float64), dtype=np.float64)


class MoeFit(_Strict):
    """One MoE layer's routed experts: ``floor + max(FLOPs / (peak · compute_eff), bytes /
    (bandwidth · memory_eff)) + buffer_weight · buffer bytes / bandwidth``, times
    ``exp(correction(features))`` (see :mod:`cbsim.studies.calibration.moe`)."""

    floor_s: float = Field(ge=0.0)
    compute_eff: float = Field(gt=0.0, le=1.5)
    memory_eff: float = Field(gt=0.0, le=1.5)
    buffer_weight: float = Field(ge=0.0, le=10.0)
    correction: GridCorrection | None = None


class CommFit(_Strict):
    """All-reduce seconds by message size (bytes) for one GPU count, log-log interpolated;
    beyond the largest size, extrapolated linearly at ``bus_bandwidth`` message bytes per second
    (the algorithm bandwidth; NCCL's "bus bandwidth" is this × 2(n − 1)/n)."""

    sizes_bytes: list[float]
    latency_s: list[float]
    bus_bandwidth: float = Field(gt=0.0)

    def __call__(self, size_bytes: float) -> float:
        sizes = np.asarray(self.sizes_bytes)
        times = np.asarray(self.latency_s)
        if size_bytes <= sizes[0]:
            return float(times[0])
        if size_bytes >= sizes[-1]:
            return float(times[-1] + (size_bytes - sizes[-1]) / self.bus_bandwidth)
        return float(np.exp(np.interp(np.log(size_bytes), np.log(sizes), np.log(times))))

    def at_sizes(self, size_bytes: np.ndarray) -> np.ndarray:
        """:meth:`__call__` at many message sizes, the same float per size bit for bit (numpy's
        log, interp and exp, as ``__call__`` takes them, over an array)."""
        sizes = np.asarray(self.sizes_bytes)
        times = np.asarray(self.latency_s)
        x = np.asarray(size_bytes, dtype=np.float64)
        inside = (x > sizes[0]) & (x < sizes[-1])
        result: np.ndarray = np.where(
            x <= sizes[0], times[0], times[-1] + (x - sizes[-1]) / self.bus_bandwidth
        )
        if inside.any():
            logs = np.interp(np.log(x[inside]), np.log(sizes), np.log(times))
            result[inside] = np.exp(logs)
        return result


class Measured(_Strict):
    """Where a fit came from and how well it did (for reports; not used to predict)."""

    source: str
    rows: int = 0
    holdout_median_ape: float | None = None
    holdout_p90_ape: float | None = None


class CalibrationProfile(_Strict):
    schema_version: Literal[1] = 1
    gpu: str
    name: str
    description: str = ""
    gemm: dict[str, RooflineFit] = Field(default_factory=dict)
    decode_attention: dict[str, RooflineFit] = Field(default_factory=dict)
    prefill_attention: dict[str, RooflineFit] = Field(default_factory=dict)
    allreduce: dict[str, CommFit] = Field(default_factory=dict)
    alltoall: dict[str, CommFit] = Field(default_factory=dict)  # per GPU count (NCCL)
    elementwise: RooflineFit | None = None
    moe: dict[str, MoeFit] = Field(default_factory=dict)  # "dtype/routing/tp|ep" (calibration.moe)
    mla: dict[str, RooflineFit] = Field(default_factory=dict)  # "phase/kv/gemm" (calibration.mla)
    provenance: dict[str, Measured] = Field(default_factory=dict)
    # "gpu/name" of a profile whose fits this one reuses (a transfer to a GPU with no measurements)
    based_on: str | None = None

    def allreduce_time(self, num_gpus: int, size_bytes: float) -> float | None:
        """Seconds for an all-reduce, or None when this GPU count was not measured."""
        fit = self.allreduce.get(str(num_gpus))
        return None if fit is None else fit(size_bytes)

    def alltoall_time(self, num_gpus: int, size_bytes: float) -> float | None:
        """Seconds for an all-to-all in which each GPU sends ``size_bytes`` in all, or None when
        this GPU count was not measured."""
        fit = self.alltoall.get(str(num_gpus))
        return None if fit is None else fit(size_bytes)


# --------------------------------------------------------------------------- files


def _read_json(path: Path | Any) -> dict[str, Any]:
    """The calibration file's JSON object, checked (valid JSON, an object, the schema version
    this cbsim reads); parsed once for every process (:mod:`cbsim.cost.profile_cache`)."""
    name = str(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise CbsimError(
            f"cannot read calibration file: {err.strerror or err}", source=name
        ) from None
    kept = cached_json(raw)
    if kept is not None and kept.get("schema_version") == SCHEMA_VERSION:
        return kept
    data = parse_json(decode_utf8(raw, name), name, invalid="not valid JSON")
    if not isinstance(data, dict):
        raise CbsimError("a calibration file must hold a JSON object", source=name)
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CbsimError(
            f"schema_version {version!r} is not supported (this cbsim reads version "
            f"{SCHEMA_VERSION}); refit with `cbsim calibrate fit`",
            source=name,
        )
    store_json(raw, data)
    return data


def read_profile(path: Path | Any) -> CalibrationProfile:
    data = _read_json(path)
    try:
        return CalibrationProfile.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CbsimError(f"{where}: {first['msg']}", source=str(path)) from None


def _shipped_dir() -> Any:
    return files("cbsim.catalog") / "data" / PROFILE_DIR


DEFAULT_PROFILE = "default"
UNCALIBRATED = "none"


def profile_names(gpu: str) -> list[str]:
    folder = _shipped_dir() / gpu
    if not folder.is_dir():
        return []
    return sorted(
        p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json")
    )


@lru_cache(maxsize=64)
def load_profile(gpu: str, name: str = DEFAULT_PROFILE) -> CalibrationProfile | None:
    """A shipped profile by GPU and name, a JSON file path, or None for ``"none"``.

    ``"default"`` is the GPU's documented default profile (``default.json`` naming it); a GPU with
    no measurements of its own has a profile transferred from its architecture's efficiencies.
    """
    if name == UNCALIBRATED:
        return None
    if name.endswith(".json") or Path(name).is_file():
        return read_profile(Path(name))
    folder = _shipped_dir() / gpu
    if name == DEFAULT_PROFILE:
        pointer = folder / "default.txt"
        if not pointer.is_file():
            return None
        name = pointer.read_text(encoding="utf-8").strip()
    path = folder / f"{name}.json"
    if not path.is_file():
        raise unknown_name(
            f"calibration profile for {gpu}", name, [*profile_names(gpu), UNCALIBRATED]
        )
    profile = read_profile(path)
    if profile.based_on:
        base_gpu, _, base_name = profile.based_on.partition("/")
        base = load_profile(base_gpu, base_name)
        if base is None:
            raise CbsimError(f"based_on {profile.based_on!r} is not a profile", source=str(path))
        update: dict[str, Any] = {
            "gpu": profile.gpu,
            "name": profile.name,
            "description": profile.description,
            "provenance": profile.provenance,
            "based_on": profile.based_on,
        }
        if not keeps_collectives(base.gpu, profile.gpu):
            update.update(allreduce={}, alltoall={})
        profile = base.model_copy(update=update)
    return profile


LINK_TOLERANCE = 0.10
"""How far two GPUs' links (``nvlink_bandwidth``) may differ for measured collective curves to
carry from one to the other."""


def keeps_collectives(base_gpu: str, gpu: str) -> bool:
    """Whether a profile transferred from ``base_gpu`` keeps its measured all-reduce and
    all-to-all curves on ``gpu``: only where the two links match within :data:`LINK_TOLERANCE`
    (H100 SXM's NVSwitch curves say nothing of a PCIe card's); elsewhere collectives take the
    roofline ring on ``gpu``'s own link. A GPU outside the catalog keeps them."""
    try:
        base, target = get_gpu(base_gpu).nvlink_bandwidth, get_gpu(gpu).nvlink_bandwidth
    except CbsimError:
        return True
    return abs(target / base - 1.0) <= LINK_TOLERANCE


TRANSFER = "transfer"
"""Provenance key of a transferred profile: the profile whose fits it takes."""
TRANSFER_ERROR = "transfer error "
"""Prefix of the provenance keys holding a transfer's held-out error, one per op family."""


def transfer_errors(profile: CalibrationProfile) -> dict[str, Measured]:
    """A transferred profile's held-out error per op family (``gemm bf16``, ...), as recorded."""
    return {
        key.removeprefix(TRANSFER_ERROR): measured
        for key, measured in profile.provenance.items()
        if key.startswith(TRANSFER_ERROR)
    }


def _percent(measured: Measured) -> str:
    median, p90 = measured.holdout_median_ape, measured.holdout_p90_ape
    if median is None or p90 is None:
        return "not measured"
    return f"{100 * median:.0f} % median / {100 * p90:.0f} % P90"


def transfer_note(profile: CalibrationProfile | None) -> str | None:
    """A line saying that ``profile`` prices a GPU without kernel measurements from another
    GPU's fits, with the held-out error of that transfer; None for a measured profile."""
    if profile is None or not profile.based_on:
        return None
    text = (
        f"{profile.gpu} has no measured kernel tables: its kernels are priced by "
        f"{profile.based_on}'s fitted efficiencies on the {profile.gpu} spec sheet"
    )
    errors = transfer_errors(profile)
    if not errors:
        return text + " (the error of that transfer is not measured)"
    held_out = next(iter(errors.values())).source
    parts = "; ".join(f"{family} {_percent(measured)}" for family, measured in errors.items())
    return f"{text}; held-out error of such a transfer ({held_out}): {parts}"


FALLBACK_GPU = "h100-sxm"
"""Whose fits a GPU without measurements of a layer family takes, on its own spec sheet."""


def _same_profile_on_fallback(
    gpu: str, calibration: CalibrationProfile, default: CalibrationProfile | None
) -> CalibrationProfile | None:
    """:data:`FALLBACK_GPU`'s shipped profile named as ``calibration`` (see
    :func:`profiles_to_try`), or None: on the fallback GPU itself, for the GPU's default profile
    (that order is the default's own), or where none is shipped."""
    if gpu == FALLBACK_GPU or calibration.name not in profile_names(FALLBACK_GPU):
        return None
    if default is not None and default.name == calibration.name:
        return None
    return load_profile(FALLBACK_GPU, calibration.name)


def profiles_to_try(
    gpu: str, calibration: CalibrationProfile
) -> Iterator[tuple[str, CalibrationProfile]]:
    """Where a layer family's fit is looked for, in order, with how each is described: the
    calibration in use; :data:`FALLBACK_GPU`'s shipped profile of the same name on this GPU's
    spec sheet, where that is not the GPU's default (an engine's kernel profile on a GPU where
    only some of its kernels were measured: H200 has TensorRT-LLM's and SGLang's GEMM and
    attention tables, H100 also their MoE tables); the GPU's default profile (an engine's kernel
    profile may lack a family only vLLM's tables measure), then :data:`FALLBACK_GPU`'s default on
    this GPU's spec sheet; each loaded only when the ones before it lack the fit."""
    yield f"{gpu}/{calibration.name}", calibration
    default = load_profile(gpu)
    same = _same_profile_on_fallback(gpu, calibration, default)
    if same is not None:
        yield f"{FALLBACK_GPU}/{calibration.name} on {gpu}'s spec sheet", same
    if default is not None:
        yield f"{gpu}/default", default
    fallback = load_profile(FALLBACK_GPU)
    if fallback is not None:
        yield f"{FALLBACK_GPU}/default on {gpu}'s spec sheet", fallback
