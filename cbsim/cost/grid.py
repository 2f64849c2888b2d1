"""Smooth corrections on a log grid: how calibration bends the roofline to measured timings.

A roofline gets the scaling right but not the details: kernels reach different fractions of peak at
different shapes (tile and wave quantisation, split-K, launch latency). Calibration models
``log(measured / roofline)`` as a smooth function of the log2 of a few shape features (for a GEMM:
m, n, k), stored as values on a regular grid of nodes and read by multilinear interpolation
(clamped at the edges). It is fitted by regularised least squares: each measurement pulls on the
nodes around it, and a penalty on second differences keeps the surface smooth, so shapes never
measured — held out, or of a new model — get the correction of their neighbours.

This module holds the grid a cost model reads (:class:`LogGrid`) and its multilinear
interpolation; fitting one is calibration's business (:func:`cbsim.studies.calibration.grid.fit_log_grid`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import scipy.sparse as sp


@dataclass(frozen=True, eq=False)
class LogGrid:
    """A correction surface: ``values`` on the product of ``axes`` (log2 nodes, ascending)."""

    axes: tuple[np.ndarray, ...]
    values: np.ndarray
    # plain-Python copies for the scalar hot path (a cost model evaluates one point per call)
    _axes_lists: tuple[list[float], ...] = field(init=False, repr=False, compare=False)
    _flat: list[float] = field(init=False, repr=False, compare=False)
    _strides: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_axes_lists", tuple(a.tolist() for a in self.axes))
        object.__setattr__(self, "_flat", self.values.ravel().tolist())
        strides = []
        step = 1
        for axis in reversed(self.axes):
            strides.append(step)
            step *= len(axis)
        object.__setattr__(self, "_strides", tuple(reversed(strides)))

    @classmethod
    def from_lists(cls, axes: Sequence[Sequence[float]], values: Sequence[float]) -> LogGrid:
        arrays = tuple(np.asarray(a, dtype=np.float64) for a in axes)
        shape = tuple(len(a) for a in arrays)
        flat = np.asarray(values, dtype=np.float64)
        if flat.size != int(np.prod(shape)):
            raise ValueError(f"grid has {flat.size} values, axes need {int(np.prod(shape))}")
        for axis in arrays:
            if len(axis) < 2 or np.any(np.diff(axis) <= 0):
                raise ValueError("each grid axis needs at least two ascending nodes")
        return cls(arrays, flat.reshape(shape))

    def to_lists(self) -> tuple[list[list[float]], list[float]]:
        return [a.tolist() for a in self.axes], [round(float(v), 6) for v in self.values.ravel()]

    def __call__(self, *features: float) -> float:
        """The correction at one point (features in natural units, not log2); pure Python, fast."""
        axes = self._axes_lists
        if len(features) != len(axes):
            raise ValueError(f"expected {len(axes)} features, got {len(features)}")
        base = 0
        corners: list[tuple[int, float]] = [(0, 1.0)]
        for axis, stride, value in zip(axes, self._strides, features, strict=True):
            x = math.log2(value) if value > 1e-30 else -100.0
            i = bisect.bisect_right(axis, x) - 1
            i = 0 if i < 0 else (len(axis) - 2 if i > len(axis) - 2 else i)
            w = (x - axis[i]) / (axis[i + 1] - axis[i])
            w = 0.0 if w < 0.0 else (1.0 if w > 1.0 else w)
            base += i * stride
            corners = [
                pair
                for offset, weight in corners
                for pair in ((offset, weight * (1.0 - w)), (offset + stride, weight * w))
            ]
        flat = self._flat
        total = 0.0  # added left to right (Python 3.12's sum() of floats compensates)
        for offset, weight in corners:
            total += weight * flat[base + offset]
        return total

    def compiled(self) -> Callable[..., float]:
        """:meth:`__call__` as a plain closure over this grid's lists, for the hot path: the same
        float operations in the same order (so bit for bit the same value), specialised for one
        and two features (a cost model's attention corrections, once the head layout is fixed)."""
        axes = self._axes_lists
        flat = self._flat
        log2 = math.log2
        right = bisect.bisect_right
        if len(axes) == 1:
            (axis,) = axes
            top = len(axis) - 2

            def one(value: float) -> float:
                x = log2(value) if value > 1e-30 else -100.0
                i = right(axis, x) - 1
                i = 0 if i < 0 else (top if i > top else i)
                w = (x - axis[i]) / (axis[i + 1] - axis[i])
                w = 0.0 if w < 0.0 else (1.0 if w > 1.0 else w)
                return 0 + (1.0 - w) * flat[i] + w * flat[i + 1]

            return one
        if len(axes) == 2:
            first, second = axes
            top0, top1 = len(first) - 2, len(second) - 2
            stride0 = self._strides[0]

            def two(value0: float, value1: float) -> float:
                x = log2(value0) if value0 > 1e-30 else -100.0
                i = right(first, x) - 1
                i = 0 if i < 0 else (top0 if i > top0 else i)
                w0 = (x - first[i]) / (first[i + 1] - first[i])
                w0 = 0.0 if w0 < 0.0 else (1.0 if w0 > 1.0 else w0)
                y = log2(value1) if value1 > 1e-30 else -100.0
                j = right(second, y) - 1
                j = 0 if j < 0 else (top1 if j > top1 else j)
                w1 = (y - second[j]) / (second[j + 1] - second[j])
                w1 = 0.0 if w1 < 0.0 else (1.0 if w1 > 1.0 else w1)
                base = i * stride0 + j
                low, high = 1.0 - w0, w0
                return (
                    0
                    + low * (1.0 - w1) * flat[base]
                    + low * w1 * flat[base + 1]
                    + high * (1.0 - w1) * flat[base + stride0]
                    + high * w1 * flat[base + stride0 + 1]
                )

            return two
        if len(axes) == 3:
            return self._three()
        return self.__call__

    def _three(self) -> Callable[[float, float, float], float]:
        """:meth:`compiled` for three features (a GEMM's m, n, k): the corners' weights multiplied
        and their terms added in :meth:`__call__`'s order (1.0 times a weight is that weight)."""
        first, second, third = self._axes_lists
        top0, top1, top2 = len(first) - 2, len(second) - 2, len(third) - 2
        stride0, stride1, stride2 = self._strides
        flat = self._flat
        log2 = math.log2
        right = bisect.bisect_right

        def three(value0: float, value1: float, value2: float) -> float:
            x = log2(value0) if value0 > 1e-30 else -100.0
            i = right(first, x) - 1
            i = 0 if i < 0 else (top0 if i > top0 else i)
            w0 = (x - first[i]) / (first[i + 1] - first[i])
            w0 = 0.0 if w0 < 0.0 else (1.0 if w0 > 1.0 else w0)
            y = log2(value1) if value1 > 1e-30 else -100.0
            j = right(second, y) - 1
            j = 0 if j < 0 else (top1 if j > top1 else j)
            w1 = (y - second[j]) / (second[j + 1] - second[j])
            w1 = 0.0 if w1 < 0.0 else (1.0 if w1 > 1.0 else w1)
            z = log2(value2) if value2 > 1e-30 else -100.0
            m = right(third, z) - 1
            m = 0 if m < 0 else (top2 if m > top2 else m)
            w2 = (z - third[m]) / (third[m + 1] - third[m])
            w2 = 0.0 if w2 < 0.0 else (1.0 if w2 > 1.0 else w2)
            b = i * stride0 + j * stride1 + m * stride2
            low0, high0, low1, low2 = 1.0 - w0, w0, 1.0 - w1, 1.0 - w2
            ll, lh, hl, hh = low0 * low1, low0 * w1, high0 * low1, high0 * w1
            s1, s2, s12 = stride1, stride2, stride1 + stride2
            return (
                0
                + ll * low2 * flat[b]
                + ll * w2 * flat[b + s2]
                + lh * low2 * flat[b + s1]
                + lh * w2 * flat[b + s12]
                + hl * low2 * flat[b + stride0]
                + hl * w2 * flat[b + stride0 + s2]
                + hh * low2 * flat[b + stride0 + s1]
                + hh * w2 * flat[b + stride0 + s12]
            )

        return three

    def at_points(self, *features: np.ndarray | float) -> np.ndarray:
        """:meth:`__call__` at many points (each feature an array, or one value for all), the
        same float per point bit for bit: log2 taken by :func:`math.log2` point by point as
        ``__call__`` takes it, then ``__call__``'s interpolation, its corners' weights multiplied
        and their terms added in its order, element-wise (exact arithmetic, no rounding of
        numpy's own). Unlike :meth:`evaluate`, which adds the corners in column order."""
        axes = self.axes
        if len(features) != len(axes):
            raise ValueError(f"expected {len(axes)} features, got {len(features)}")
        base: np.ndarray | int = 0
        corners: list[tuple[int, np.ndarray | float]] = [(0, 1.0)]
        for axis, stride, value in zip(axes, self._strides, features, strict=True):
            x = _log2_points(value)
            i = np.searchsorted(axis, x, side="right") - 1
            i = np.where(i < 0, 0, np.where(i > len(axis) - 2, len(axis) - 2, i))
            w = (x - axis[i]) / (axis[i + 1] - axis[i])
            w = np.where(w < 0.0, 0.0, np.where(w > 1.0, 1.0, w))
            base = base + i * stride
            corners = [
                pair
                for offset, weight in corners
                for pair in ((offset, weight * (1.0 - w)), (offset + stride, weight * w))
            ]
        flat = self.values.ravel()
        total: np.ndarray | float = 0.0
        for offset, weight in corners:
            total = total + weight * flat[base + offset]
        return np.asarray(total, dtype=np.float64)

    def evaluate(self, *features: np.ndarray) -> np.ndarray:
        """The correction at many points: the product of :func:`interpolation_matrix` with the
        values (the same floats: each point's corners added in column order, as the sparse
        product adds them), without building the matrix."""
        points = [np.asarray(f, dtype=np.float64) for f in features]
        flat = self.values.ravel()
        terms = _corner_columns(self.axes, points)
        # every point's corners lie at the same offsets from its first: one order serves all
        if len(points[0]):
            terms.sort(key=lambda term: int(term[0][0]))
        result = np.zeros(len(points[0]))
        for columns, weight in terms:
            result += weight * flat[columns]
        return result


def _log2_points(value: np.ndarray | float) -> np.ndarray | float:
    """``log2(value)`` as :meth:`LogGrid.__call__` takes it (``math.log2``, -100 at or below
    1e-30), at each point of an array or at one value."""
    log2 = math.log2
    if np.ndim(value) == 0:
        one = value.item() if isinstance(value, np.generic) else value
        return log2(one) if one > 1e-30 else -100.0
    points = np.asarray(value).tolist()
    return np.array([log2(v) if v > 1e-30 else -100.0 for v in points], dtype=np.float64)


def _weights(
    axes: Sequence[np.ndarray], features: Sequence[np.ndarray]
) -> list[tuple[tuple[np.ndarray, ...], np.ndarray]]:
    """Corner indices and multilinear weights of each point (features in natural units)."""
    lower: list[np.ndarray] = []
    frac: list[np.ndarray] = []
    for axis, values in zip(axes, features, strict=True):
        x = np.log2(np.maximum(values, 1e-30))
        i = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2)
        w = np.clip((x - axis[i]) / (axis[i + 1] - axis[i]), 0.0, 1.0)
        lower.append(i)
        frac.append(w)
    corners = []
    for corner in range(2 ** len(axes)):
        index = []
        weight = np.ones_like(frac[0])
        for d in range(len(axes)):
            up = (corner >> d) & 1
            index.append(lower[d] + up)
            weight = weight * (frac[d] if up else 1.0 - frac[d])
        corners.append((tuple(index), weight))
    return corners


def _corner_columns(
    axes: Sequence[np.ndarray], features: Sequence[np.ndarray]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per corner of the points' cells: each point's node (its column in the flattened values)
    and its weight."""
    shape = tuple(len(a) for a in axes)
    return [
        (np.ravel_multi_index(index, shape), weight) for index, weight in _weights(axes, features)
    ]


def interpolation_matrix(
    axes: Sequence[np.ndarray], features: Sequence[np.ndarray]
) -> sp.csr_matrix:
    """Sparse (points × nodes) matrix of multilinear interpolation weights."""
    import scipy.sparse as sp  # for fitting: not on a run's path (LogGrid.evaluate needs none)

    shape = tuple(len(a) for a in axes)
    n = len(features[0])
    rows, cols, vals = [], [], []
    for columns, weight in _corner_columns(axes, features):
        rows.append(np.arange(n))
        cols.append(columns)
        vals.append(weight)
    return sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(n, int(np.prod(shape))),
    )
