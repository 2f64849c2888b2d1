"""Fitting the smooth log-grid corrections (:class:`~cbsim.cost.grid.LogGrid`) to measurements.

A roofline gets the scaling right but not the details: kernels reach different fractions of peak at
different shapes (tile and wave quantisation, split-K, launch latency). Calibration models
``log(measured / roofline)`` as a smooth function of the log2 of a few shape features (for a GEMM:
m, n, k), stored as values on a regular grid of nodes and read by multilinear interpolation
(clamped at the edges). It is fitted by regularised least squares: each measurement pulls on the
nodes around it, and a penalty on second differences keeps the surface smooth, so shapes never
measured — held out, or of a new model — get the correction of their neighbours.

:func:`robust_log_grid` fits the same grid under a soft-L1 loss instead (iteratively reweighted
least squares): a measurement far from its neighbours — a whole series timed 2–4× off the rest, as
if another kernel ran — then pulls on the nodes about as hard as one ``f_scale`` off, not in
proportion to its distance, and does not bend the correction of every shape near it.

The grid itself and its interpolation live beside the cost model that reads them
(:mod:`cbsim.cost.grid`); they are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import lsqr

from cbsim.cost.grid import LogGrid, interpolation_matrix

__all__ = [
    "LogGrid",
    "fit_log_grid",
    "interpolation_matrix",
    "log2_nodes",
    "robust_log_grid",
    "second_differences",
]

ROBUST_F_SCALE = 0.1
"""Residual (in log time) where the soft-L1 loss turns from quadratic to linear: about 10% off."""
ROBUST_ITERATIONS = 8


def second_differences(shape: tuple[int, ...]) -> sp.csr_matrix:
    count = int(np.prod(shape))
    index = np.arange(count).reshape(shape)
    blocks = []
    for axis in range(len(shape)):
        if shape[axis] < 3:
            continue
        moved = np.moveaxis(index, axis, 0)
        a, b, c = moved[:-2].ravel(), moved[1:-1].ravel(), moved[2:].ravel()
        m = len(a)
        r = np.arange(m)
        blocks.append(
            sp.csr_matrix(
                (
                    np.concatenate([np.ones(m), -2.0 * np.ones(m), np.ones(m)]),
                    (np.concatenate([r, r, r]), np.concatenate([a, b, c])),
                ),
                shape=(m, count),
            )
        )
    return sp.vstack(blocks).tocsr() if blocks else sp.csr_matrix((0, count))


def fit_log_grid(
    axes: Sequence[Sequence[float]],
    features: Sequence[np.ndarray],
    target: np.ndarray,
    *,
    smoothness: float = 1.0,
    ridge: float = 1e-3,
    weights: np.ndarray | None = None,
) -> LogGrid:
    """Least-squares fit of a grid to ``target`` (e.g. log(measured/roofline)) at ``features``;
    ``weights`` (one per measurement) weigh each squared residual."""
    arrays = tuple(np.asarray(a, dtype=np.float64) for a in axes)
    shape = tuple(len(a) for a in arrays)
    design = interpolation_matrix(arrays, [np.asarray(f, dtype=np.float64) for f in features])
    if weights is not None:
        root = np.sqrt(np.asarray(weights, dtype=np.float64))
        design = sp.diags(root) @ design
        target = root * target
    penalty = second_differences(shape) * smoothness
    shrink = sp.identity(int(np.prod(shape)), format="csr") * ridge
    system = sp.vstack([design, penalty, shrink]).tocsr()
    rhs = np.concatenate([target, np.zeros(penalty.shape[0] + shrink.shape[0])])
    solution = lsqr(system, rhs, atol=1e-10, btol=1e-10, iter_lim=20000)[0]
    return LogGrid(arrays, solution.reshape(shape))


def log2_nodes(low: float, high: float, step: float = 1.0) -> list[float]:
    """Grid nodes covering [log2 low, log2 high] every ``step`` octaves."""
    start = np.floor(np.log2(low) / step) * step
    stop = np.ceil(np.log2(high) / step) * step
    return [float(x) for x in np.arange(start, stop + step / 2, step)]


def robust_log_grid(
    axes: Sequence[Sequence[float]],
    features: Sequence[np.ndarray],
    target: np.ndarray,
    *,
    smoothness: float = 1.0,
    f_scale: float = ROBUST_F_SCALE,
    iterations: int = ROBUST_ITERATIONS,
) -> LogGrid:
    """:func:`fit_log_grid` under a soft-L1 loss (see the module docstring): refitted
    ``iterations`` times, each measurement weighted ``1 / sqrt(1 + (residual / f_scale)²)`` by
    its residual in the fit before."""
    grid = fit_log_grid(axes, features, target, smoothness=smoothness)
    for _ in range(iterations):
        residual = grid.evaluate(*features) - target
        weights = 1.0 / np.sqrt(1.0 + (residual / f_scale) ** 2)
        grid = fit_log_grid(axes, features, target, smoothness=smoothness, weights=weights)
    return grid
