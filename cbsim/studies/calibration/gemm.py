"""GEMM calibration: fitting a linear layer's matrix multiply time to measured kernel timings.

What is measured. The GEMM tables (NVIDIA AI Configurator's sweeps of the cuBLAS/CUTLASS kernels a
serving engine runs) time one ``(m × k) · (k × n)`` product: ``m`` rows of activations (the tokens
of an iteration) times a ``k × n`` weight (a linear layer's shard), in bf16, in fp8 with 16-bit
outputs, or (B200) in NVFP4 (``fp4``: 4-bit weights and activations with block scales; the layer
quantises its 16-bit input first, which :func:`~cbsim.cost.roofline.gemm_flops_bytes` counts). Each
serving engine runs its own GEMM kernels (vLLM and SGLang call cuBLAS through PyTorch for bf16 but
different CUTLASS kernels for fp8; TensorRT-LLM its own), so a profile is fitted per engine on that
engine's tables (``load_table("gemm", gpu, engine=...)``). The shipped tables cover weight shapes
on a full lattice of ``n`` and ``k`` (32 … 65536, 21–22 values each) and, for every shape, ``m``
from 1 to 8192 (A100) or 32768 (Hopper, L40S, B200), including pairs such as 256 / 257 that
straddle a tile boundary. A100 has no fp8 rows; only B200 has fp4 ones.

The model. A GEMM is bounded by its tensor-core arithmetic or by the bytes it moves (the weight,
read once whatever ``m`` is, plus activations in and out), and costs at least a launch and pipeline
fill. The cost model evaluates, for every GEMM of an iteration,

    t = (floor + max(FLOPs / (peak · η_c), bytes / (bandwidth · η_m))) · exp(g(m, n, k))

with FLOPs and bytes from :func:`cbsim.cost.roofline.gemm_flops_bytes` (the one definition the cost
model uses), the GPU's dense spec-sheet peak for the dtype and its HBM bandwidth. The base's two
efficiencies are "speed of light" fractions, dimensionless, and the floor a latency. The correction
``g`` is a :class:`~cbsim.studies.calibration.grid.LogGrid` over log2 m, n, k: what a roofline cannot know —
which kernel cuBLAS's heuristics pick for the shape (split-K or not, tile shape), wave quantisation
of output tiles over the SMs, the knee where a GEMM turns from bandwidth- to compute-bound, the jump
in time one row past a tile boundary (fp8 on Hopper: m = 129 takes a median 1.4 times as long as
m = 128, 1.1–1.8 times across shapes), and quirks of single widths (``n`` an odd multiple of 512
running slower for every ``k``).

The grid (:data:`Layout`). By default its nodes sit at the measured values themselves, on all three
axes, so each measured shape's own m-profile — tile-boundary jumps included — is reproduced, and
what a *new* weight shape gets is decided by the penalties that tie nodes together:

* a weak second-difference penalty along each axis (``smoothness``) keeps the surface smooth where
  nothing pulls on it;
* a *twist* penalty on the mixed difference over (n, k) — ``g(n₁,k₁) − g(n₂,k₁) − g(n₁,k₂) +
  g(n₂,k₂)`` on adjacent nodes, at every m — makes the correction as close to additive in (n, k)
  as the data allow, so an unseen shape inherits its row's and its column's offsets ("n = 3584 is
  slow", "k = 12288 is slow"), which neighbouring shapes share far more reliably than a smooth
  trend. On held-out shapes it cuts the median error by a fifth to a half and the P90 by up to a
  third, against the same grid without it.

That is 74 × 22 × 22 = 35,816 values per fit on Hopper and L40S (9,261 on A100), about 0.3 MB of
JSON. ``layout="compact"`` (m every half octave plus a node just past each measured power of two,
n and k every octave: at most 5,616 values) costs 1.1–2.6 times the held-out error.

Fitting, in a fraction of a second. (1) Glitches — a row more than twice as slow as both its
neighbours in m within its shape (the tables hold a few 10× ones) — are left out
(:func:`spikes`). (2) The base (floor, η_c, η_m) by robust least squares (``soft_l1``) on the log
of measured / base. (3) The correction by regularised least squares on what is left, as sparse
normal equations solved by preconditioned conjugate gradients. (4) The correction is made monotone
in m (:func:`monotone_in_m`): a GEMM with more rows is never predicted faster, within the
multilinear interpolation between nodes (never more than 10 % faster when m doubles). Values are
stored rounded to 6 digits. Hyper-parameters are fixed globally, not chosen per GPU.

Checking. :func:`holdout_shapes` cross-validates holding out whole weight shapes (n, k) — a new
model's layer — never random rows, which would leak the held-out shape's own neighbours in m.
:func:`baselines` scores, on the same folds, the raw roofline (η = 1, no floor, no correction) and a
constant-efficiency roofline (one floor and efficiency pair). :func:`leave_one_gpu_out` fits one GPU
and predicts another of the same architecture from its spec sheet alone (:func:`transfer`).
:func:`holdout_report` tabulates all of it. Held-out median / P90 absolute error, 5 folds:

=========  =====  ===========  ==========  ============
GPU        dtype  shape-aware  constant η  uncalibrated
=========  =====  ===========  ==========  ============
a100-80gb  bf16   2.9 / 10.4   13.1 / 31   52 / 93
h100-sxm   bf16   2.5 / 9.0    8.6 / 27    35 / 91
h200       bf16   2.4 / 8.1    9.4 / 29    42 / 94
l40s       bf16   4.7 / 19.3   14.1 / 65   34 / 76
h100-sxm   fp8    2.1 / 8.4    27 / 66     75 / 98
h200       fp8    1.4 / 9.2    32 / 72     80 / 99
l40s       fp8    2.7 / 11.4   29 / 73     65 / 94
b200       bf16   3.4 / 10.5   11 / 38     51 / 95
b200       fp8    5.1 / 21.6   34 / 68     86 / 99
b200       fp4    2.5 / 8.9    11 / 31     79 / 99
=========  =====  ===========  ==========  ============

H200 predicted from the H100 fit and the H200 spec sheet: 5.1 / 14.1 % (bf16), 5.8 / 20.4 % (fp8);
it runs about 5 % slower than predicted in bandwidth-bound shapes (its HBM3e reaches a smaller
fraction of its peak than H100's HBM3 does).

Limits, measured. In bf16, neighbouring m (4096 against 4097) differ by a median 4–5 % and a P90
of 15–24 % with little pattern shared across shapes (a wave-quantisation term in the base explains
almost none of it), and cuBLAS switches kernels along diagonal bands of (n, k); no correction
interpolated from other shapes recovers that on a held-out shape. The L40S (power-capped, the
noisiest timings) is where it shows: its bf16 P90 stays near 19 %, about what averaging the same-m
timings of a held-out shape's four lattice neighbours achieves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, cg, spsolve

from cbsim.catalog.hardware import GPU, get_gpu
from cbsim.catalog.model_bytes import DTYPE_BYTES
from cbsim.common.errors import CbsimError
from cbsim.studies.calibration.data import load_table, measured_gpus
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.grid import LogGrid, interpolation_matrix, log2_nodes
from cbsim.studies.calibration.profile import GridCorrection, RooflineFit

FEATURES: tuple[str, ...] = ("m", "n", "k")
DTYPES: tuple[str, ...] = ("bf16", "fp8", "fp4")

Layout = Literal["measured", "compact"]
"""Where the correction's nodes go. ``"measured"``: at every distinct measured m, n and k (the
shipped tables: 74 × 22 × 22 = 35,816 values on Hopper and L40S, 21³ = 9,261 on A100), so the
correction reproduces every measured shape's own m-profile, tile-boundary jumps included, and a new
shape gets its row's and column's offsets. ``"compact"``: m every half octave plus a node just past
each measured power of two, n and k every octave (at most 39 × 12 × 12 = 5,616 values): a sixth of
the size, at 1.1–2.6 times the held-out error."""
DEFAULT_LAYOUT: Layout = "measured"
DEFAULT_SMOOTHNESS = 0.03
"""Weight of the second-difference penalty along each axis of the correction grid."""
DEFAULT_TWIST = 0.5
"""Weight of the mixed-difference penalty over (n, k): how additive a new shape's correction is."""
MAX_M_NODES = 128
"""More distinct m than this (a table of scattered shapes) get nodes every half octave instead."""
MAX_NK_NODES = 32
"""More distinct n (or k) than this get nodes every half octave instead."""
SPIKE_FACTOR = 2.0
"""A row timed this many times slower than both its neighbours in m is a glitch, not a kernel."""
RIDGE = 1e-3
"""Shrinks nodes no measurement and no penalty pins down towards no correction."""
FLOOR_BOUNDS_S = (1e-9, 1e-3)
EFF_BOUNDS = (1e-3, 1.5)


# --------------------------------------------------------------------------- rows and the roofline


def gemm_rows(table: pd.DataFrame, dtype: str) -> pd.DataFrame:
    """The rows of a GEMM table in ``dtype``, index reset; an error if there are none."""
    if dtype not in DTYPES:
        raise CbsimError(f"GEMM dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    missing = [c for c in ("m", "n", "k", "latency_s") if c not in table.columns]
    if missing:
        raise CbsimError(f"GEMM table lacks column(s) {', '.join(missing)}")
    rows = table if "dtype" not in table.columns else table[table["dtype"] == dtype]
    if rows.empty:
        raise CbsimError(f"the GEMM table has no {dtype} rows")
    return rows.reset_index(drop=True)


def _shapes(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """m, n, k as float64 (the tables store int32, whose m·n·k overflows)."""
    m, n, k = (rows[c].to_numpy(dtype=np.float64) for c in FEATURES)
    return m, n, k


def flops_bytes(
    m: np.ndarray, n: np.ndarray, k: np.ndarray, dtype: str
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`cbsim.cost.roofline.gemm_flops_bytes` over arrays: the same operations in the same
    order, so every element equals what the cost model computes for that shape (fp4 adds the
    activation quantisation pass, as there)."""
    in_bytes = DTYPE_BYTES[dtype]
    bytes_moved = (k * n + m * k) * in_bytes + m * n * 2.0
    if dtype == "fp4":
        bytes_moved = bytes_moved + m * k * (2.0 + in_bytes)
    return 2.0 * m * n * k, bytes_moved


def roofline_base(
    floor_s: float,
    compute_eff: float,
    memory_eff: float,
    flops: np.ndarray,
    bytes_moved: np.ndarray,
    peak: float,
    bandwidth: float,
) -> np.ndarray:
    """:meth:`RooflineFit.base` over arrays (same operations, same order)."""
    result: np.ndarray = floor_s + np.maximum(
        flops / (peak * compute_eff), bytes_moved / (bandwidth * memory_eff)
    )
    return result


def fit_base(
    flops: np.ndarray,
    bytes_moved: np.ndarray,
    measured_s: np.ndarray,
    peak: float,
    bandwidth: float,
) -> tuple[float, float, float]:
    """(floor_s, compute_eff, memory_eff) minimising a robust (soft-L1) loss on
    log(base / measured)."""
    log_measured = np.log(measured_s)

    def residual(x: np.ndarray) -> np.ndarray:
        floor_s, compute_eff, memory_eff = np.exp(x)
        base = roofline_base(floor_s, compute_eff, memory_eff, flops, bytes_moved, peak, bandwidth)
        out: np.ndarray = np.log(base) - log_measured
        return out

    lower = np.log([FLOOR_BOUNDS_S[0], EFF_BOUNDS[0], EFF_BOUNDS[0]])
    upper = np.log([FLOOR_BOUNDS_S[1], EFF_BOUNDS[1], EFF_BOUNDS[1]])
    start = np.clip(np.log([0.5 * float(np.min(measured_s)), 0.7, 0.7]), lower, upper)
    from scipy.optimize import least_squares  # slow to import: fits only

    solution = least_squares(
        residual, start, bounds=(lower, upper), loss="soft_l1", f_scale=0.1, x_scale=1.0
    )
    floor_s, compute_eff, memory_eff = (float(v) for v in np.exp(solution.x))
    return floor_s, min(compute_eff, EFF_BOUNDS[1]), min(memory_eff, EFF_BOUNDS[1])


# --------------------------------------------------------------------------- the correction grid


def axis_nodes(values: np.ndarray, max_nodes: int, fallback_step: float) -> list[float]:
    """log2 nodes at the distinct measured ``values``, or every ``fallback_step`` octaves over their
    range when there are more than ``max_nodes`` of them (a table of scattered shapes)."""
    logs = np.unique(np.log2(np.asarray(values, dtype=np.float64)))
    if len(logs) > max_nodes:
        return _at_least_two(log2_nodes(float(2 ** logs[0]), float(2 ** logs[-1]), fallback_step))
    return _at_least_two([float(x) for x in logs])


def _at_least_two(nodes: list[float]) -> list[float]:
    """A grid axis needs two nodes; a table measuring a single value gets one an octave above."""
    return nodes if len(nodes) > 1 else [nodes[0], nodes[0] + 1.0]


def _boundary_nodes(m: np.ndarray) -> list[float]:
    """Every half octave of m, plus a node just past each power of two the table measures there
    (m = 2^j + 1 … 1.01 · 2^j): tiles are powers of two, so that is where time jumps."""
    nodes = set(log2_nodes(float(np.min(m)), float(np.max(m)), 0.5))
    measured = np.unique(m)
    for j in range(4, int(np.log2(np.max(m))) + 1):
        above = measured[(measured > 2**j) & (measured <= 1.01 * 2**j)]
        if len(above):
            nodes.add(float(np.log2(above[0])))
    return _at_least_two(sorted(nodes))


def grid_axes(
    m: np.ndarray, n: np.ndarray, k: np.ndarray, layout: Layout = DEFAULT_LAYOUT
) -> list[list[float]]:
    """The correction's nodes (log2 m, n, k) for a table's shapes; see :data:`Layout`."""
    if layout == "measured":
        return [
            axis_nodes(m, MAX_M_NODES, 0.5),
            axis_nodes(n, MAX_NK_NODES, 0.5),
            axis_nodes(k, MAX_NK_NODES, 0.5),
        ]
    if layout == "compact":
        return [
            _boundary_nodes(m),
            _at_least_two(log2_nodes(float(np.min(n)), float(np.max(n)), 1.0)),
            _at_least_two(log2_nodes(float(np.min(k)), float(np.max(k)), 1.0)),
        ]
    raise CbsimError(f"GEMM grid layout must be 'measured' or 'compact', got {layout!r}")


def _difference(shape: tuple[int, ...], axis: int) -> sp.csr_matrix:
    """Second differences of a grid's values along one axis (rows: node triples)."""
    count = int(np.prod(shape))
    if shape[axis] < 3:
        return sp.csr_matrix((0, count))
    moved = np.moveaxis(np.arange(count).reshape(shape), axis, 0)
    cols = [moved[:-2].ravel(), moved[1:-1].ravel(), moved[2:].ravel()]
    size = len(cols[0])
    rows = np.tile(np.arange(size), 3)
    vals = np.repeat([1.0, -2.0, 1.0], size)
    return sp.csr_matrix((vals, (rows, np.concatenate(cols))), shape=(size, count))


def _twist(shape: tuple[int, ...], axes: tuple[int, int]) -> sp.csr_matrix:
    """Mixed differences of a grid's values over two axes (rows: adjacent node squares)."""
    count = int(np.prod(shape))
    moved = np.moveaxis(np.arange(count).reshape(shape), axes, (0, 1))
    cols = [
        moved[:-1, :-1].ravel(),
        moved[1:, :-1].ravel(),
        moved[:-1, 1:].ravel(),
        moved[1:, 1:].ravel(),
    ]
    size = len(cols[0])
    rows = np.tile(np.arange(size), 4)
    vals = np.repeat([1.0, -1.0, -1.0, 1.0], size)
    return sp.csr_matrix((vals, (rows, np.concatenate(cols))), shape=(size, count))


def fit_correction(
    axes: Sequence[Sequence[float]],
    features: Sequence[np.ndarray],
    target: np.ndarray,
    *,
    smoothness: float = DEFAULT_SMOOTHNESS,
    twist: float = DEFAULT_TWIST,
    ridge: float = RIDGE,
) -> LogGrid:
    """Least-squares grid over (m, n, k) fitted to ``target`` (log measured/base), penalising
    second differences along every axis (``smoothness``) and mixed differences over (n, k)
    (``twist``). With ``twist=0`` this is the objective of
    :func:`cbsim.studies.calibration.grid.fit_log_grid`."""
    arrays = tuple(np.asarray(a, dtype=np.float64) for a in axes)
    shape = tuple(len(a) for a in arrays)
    design = interpolation_matrix(arrays, [np.asarray(f, dtype=np.float64) for f in features])
    normal = (design.T @ design).tocsr()
    for axis in range(len(shape)):
        diff = _difference(shape, axis)
        normal = normal + smoothness**2 * (diff.T @ diff)
    if twist > 0 and len(shape) == 3:
        mixed = _twist(shape, (1, 2))
        normal = normal + twist**2 * (mixed.T @ mixed)
    normal = (normal + ridge**2 * sp.identity(normal.shape[0], format="csr")).tocsr()
    rhs = design.T @ np.asarray(target, dtype=np.float64)
    inverse_diagonal = 1.0 / normal.diagonal()
    preconditioner = LinearOperator(normal.shape, matvec=lambda v: inverse_diagonal * v)
    solution, info = cg(normal, rhs, rtol=1e-10, atol=0.0, maxiter=20000, M=preconditioner)
    if info != 0:  # pragma: no cover - a fallback; CG converges in a few hundred steps here
        solution = spsolve(normal.tocsc(), rhs)
    return LogGrid(arrays, np.asarray(solution, dtype=np.float64).reshape(shape))


# ----------------------------------------------------------------------- glitches and monotonicity


def spikes(rows: pd.DataFrame, factor: float = SPIKE_FACTOR) -> np.ndarray:
    """Rows timed more than ``factor`` times slower than both their neighbours in m within the same
    weight shape: measurement glitches (a 10× outlier at one m), left out of fits."""
    order = np.lexsort((rows["m"].to_numpy(), rows["k"].to_numpy(), rows["n"].to_numpy()))
    sorted_rows = rows.iloc[order]
    latency = sorted_rows["latency_s"].to_numpy(dtype=np.float64)
    same_shape = (sorted_rows["n"].to_numpy()[1:] == sorted_rows["n"].to_numpy()[:-1]) & (
        sorted_rows["k"].to_numpy()[1:] == sorted_rows["k"].to_numpy()[:-1]
    )
    above_previous = np.zeros(len(rows), dtype=bool)
    above_next = np.zeros(len(rows), dtype=bool)
    above_previous[1:] = same_shape & (latency[1:] > factor * latency[:-1])
    above_next[:-1] = same_shape & (latency[:-1] > factor * latency[1:])
    result = np.zeros(len(rows), dtype=bool)
    result[order] = above_previous & above_next
    return result


def _isotonic(values: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit to a sequence (pool adjacent violators)."""
    means: list[float] = []
    sizes: list[int] = []
    for value in values:
        means.append(float(value))
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            size = sizes[-2] + sizes[-1]
            means[-2] = (means[-2] * sizes[-2] + means[-1] * sizes[-1]) / size
            sizes[-2] = size
            means.pop()
            sizes.pop()
    return np.repeat(means, sizes)


def monotone_in_m(
    grid: LogGrid,
    floor_s: float,
    compute_eff: float,
    memory_eff: float,
    peak: float,
    bandwidth: float,
    dtype: str,
) -> LogGrid:
    """The correction made monotone: at every (n, k) node, predicted log time at the m nodes
    replaced by its least-squares non-decreasing fit. A GEMM with more rows does not run faster
    (an engine could always pad); the tables' few exceptions — a kernel cuBLAS picks for m = 4 that
    is slower than the one it picks for m = 8 — are heuristics of one library version."""
    m, n, k = np.meshgrid(*(2.0**axis for axis in grid.axes), indexing="ij")
    flops, bytes_moved = flops_bytes(m, n, k, dtype)
    log_base = np.log(
        roofline_base(floor_s, compute_eff, memory_eff, flops, bytes_moved, peak, bandwidth)
    )
    log_time = (log_base + grid.values).reshape(len(grid.axes[0]), -1)
    projected = np.column_stack([_isotonic(column) for column in log_time.T])
    return LogGrid(grid.axes, projected.reshape(grid.values.shape) - log_base)


# --------------------------------------------------------------------------- fit and predict


def fit_gemm(
    table: pd.DataFrame,
    gpu: GPU,
    dtype: str,
    *,
    smoothness: float = DEFAULT_SMOOTHNESS,
    twist: float = DEFAULT_TWIST,
    layout: Layout = DEFAULT_LAYOUT,
    monotone: bool = True,
) -> RooflineFit:
    """Fit the GEMM roofline and its (m, n, k) correction to ``table``'s ``dtype`` rows measured on
    ``gpu``; the result predicts exactly as :meth:`cbsim.cost.CostModel.gemm_time` evaluates it."""
    rows = gemm_rows(table, dtype)
    rows = rows[~spikes(rows)]
    m, n, k = _shapes(rows)
    measured = rows["latency_s"].to_numpy(dtype=np.float64)
    peak, bandwidth = gpu.peak_flops(dtype), gpu.hbm_bandwidth
    flops, bytes_moved = flops_bytes(m, n, k, dtype)
    floor_s, compute_eff, memory_eff = fit_base(flops, bytes_moved, measured, peak, bandwidth)
    base = roofline_base(floor_s, compute_eff, memory_eff, flops, bytes_moved, peak, bandwidth)
    grid = fit_correction(
        grid_axes(m, n, k, layout),
        [m, n, k],
        np.log(measured / base),
        smoothness=smoothness,
        twist=twist,
    )
    if monotone:
        grid = monotone_in_m(grid, floor_s, compute_eff, memory_eff, peak, bandwidth, dtype)
    axes, values = grid.to_lists()
    return RooflineFit(
        floor_s=floor_s,
        compute_eff=compute_eff,
        memory_eff=memory_eff,
        correction=GridCorrection(features=list(FEATURES), axes=axes, values=values),
    )


def predict_gemm(fit: RooflineFit, table: pd.DataFrame, gpu: GPU, dtype: str) -> np.ndarray:
    """Seconds for every row of ``table`` (columns m, n, k) as a ``dtype`` GEMM on ``gpu``: what
    :meth:`RooflineFit.predict` gives, vectorised."""
    m, n, k = _shapes(table)
    flops, bytes_moved = flops_bytes(m, n, k, dtype)
    base = roofline_base(
        fit.floor_s,
        fit.compute_eff,
        fit.memory_eff,
        flops,
        bytes_moved,
        gpu.peak_flops(dtype),
        gpu.hbm_bandwidth,
    )
    if fit.correction is None:
        return base
    result: np.ndarray = base * np.exp(fit.correction.grid().evaluate(m, n, k))
    return result


def transfer(fit: RooflineFit) -> RooflineFit:
    """The fit to use on another GPU of the same architecture (H100 → H200): unchanged.

    Everything in it is dimensionless or per kernel — efficiencies are fractions of whatever the
    spec sheet says, the correction is a ratio, the floor a launch latency — so with the target's
    peak and bandwidth it predicts the target. Returned as a copy the caller may treat as its own.
    """
    return fit.model_copy(deep=True)


# --------------------------------------------------------------------------- checking


def group_folds(keys: pd.DataFrame, folds: int, seed: int, what: str) -> np.ndarray:
    """Fold of every row, drawn per distinct row of ``keys`` (all rows of a key share its fold):
    cross-validation that holds out whole ``what`` (weight shapes, model shapes)."""
    if folds < 2:
        raise CbsimError(f"cross-validation needs folds >= 2, got {folds}")
    index = pd.MultiIndex.from_frame(keys)
    groups = index.unique().sort_values()
    if len(groups) < folds:
        raise CbsimError(f"{len(groups)} {what} cannot fill {folds} folds")
    order = np.random.default_rng(seed).permutation(len(groups))
    fold_of_group = np.empty(len(groups), dtype=np.int64)
    fold_of_group[order] = np.arange(len(groups)) % folds
    result: np.ndarray = fold_of_group[groups.get_indexer(index)]
    return result


def shape_folds(rows: pd.DataFrame, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Fold of every row, drawn per weight shape (n, k): all m of a shape share its fold."""
    return group_folds(rows[["n", "k"]], folds, seed, "weight shapes")


def holdout_shapes(
    table: pd.DataFrame,
    gpu: GPU,
    dtype: str,
    *,
    folds: int = 5,
    seed: int = 0,
    **fit_options: Any,
) -> pd.DataFrame:
    """Cross-validated predictions holding out whole weight shapes: for each fold, fit on the other
    folds' shapes and predict this one's. Rows in the order of :func:`gemm_rows`, with columns m,
    n, k, measured_s, predicted_s, fold."""
    rows = gemm_rows(table, dtype)
    fold = shape_folds(rows, folds, seed)
    predicted = np.empty(len(rows))
    for f in range(folds):
        train = fold != f
        fit = fit_gemm(rows[train], gpu, dtype, **fit_options)
        predicted[~train] = predict_gemm(fit, rows[~train], gpu, dtype)
    return pd.DataFrame(
        {
            "m": rows["m"].to_numpy(),
            "n": rows["n"].to_numpy(),
            "k": rows["k"].to_numpy(),
            "measured_s": rows["latency_s"].to_numpy(dtype=np.float64),
            "predicted_s": predicted,
            "fold": fold,
        }
    )


def _constant_fit(rows: pd.DataFrame, gpu: GPU, dtype: str) -> RooflineFit:
    """The constant-efficiency reference: the shape-aware fit's base alone, on the same rows."""
    kept = rows[~spikes(rows)]
    m, n, k = _shapes(kept)
    flops, bytes_moved = flops_bytes(m, n, k, dtype)
    floor_s, compute_eff, memory_eff = fit_base(
        flops,
        bytes_moved,
        kept["latency_s"].to_numpy(dtype=np.float64),
        gpu.peak_flops(dtype),
        gpu.hbm_bandwidth,
    )
    return RooflineFit(floor_s=floor_s, compute_eff=compute_eff, memory_eff=memory_eff)


UNCALIBRATED = RooflineFit(floor_s=0.0, compute_eff=1.0, memory_eff=1.0)
"""The raw roofline: spec-sheet peak and bandwidth, no floor, no correction."""


def baselines(
    table: pd.DataFrame, gpu: GPU, dtype: str, *, folds: int = 5, seed: int = 0
) -> dict[str, np.ndarray]:
    """Predictions (seconds, rows in the order of :func:`gemm_rows`) of the two references the
    shape-aware fit must beat: ``"uncalibrated"`` (η = 1, no floor, no correction) and
    ``"constant"`` (one floor and efficiency pair, fitted on the same held-out-shape folds as
    :func:`holdout_shapes`)."""
    rows = gemm_rows(table, dtype)
    fold = shape_folds(rows, folds, seed)
    constant = np.empty(len(rows))
    for f in range(folds):
        train = fold != f
        fit = _constant_fit(rows[train], gpu, dtype)
        constant[~train] = predict_gemm(fit, rows[~train], gpu, dtype)
    return {"uncalibrated": predict_gemm(UNCALIBRATED, rows, gpu, dtype), "constant": constant}


def leave_one_gpu_out(
    source_gpu: str = "h100-sxm",
    target_gpu: str = "h200",
    dtype: str = "bf16",
    *,
    engine: str = "vllm",
) -> pd.DataFrame:
    """Fit on the source GPU's measurements, predict the target GPU's from its spec sheet alone
    (both measured under ``engine``).

    Columns m, n, k, measured_s (target), predicted_s (the transferred fit), and the baselines on
    the target: uncalibrated_s (raw roofline) and constant_s (the source's constant-efficiency fit).
    """
    source, target = get_gpu(source_gpu), get_gpu(target_gpu)
    source_rows = gemm_rows(load_table("gemm", source_gpu, engine=engine), dtype)
    target_rows = gemm_rows(load_table("gemm", target_gpu, engine=engine), dtype)
    fit = transfer(fit_gemm(source_rows, source, dtype))
    constant = transfer(_constant_fit(source_rows, source, dtype))
    return pd.DataFrame(
        {
            "m": target_rows["m"].to_numpy(),
            "n": target_rows["n"].to_numpy(),
            "k": target_rows["k"].to_numpy(),
            "measured_s": target_rows["latency_s"].to_numpy(dtype=np.float64),
            "predicted_s": predict_gemm(fit, target_rows, target, dtype),
            "uncalibrated_s": predict_gemm(UNCALIBRATED, target_rows, target, dtype),
            "constant_s": predict_gemm(constant, target_rows, target, dtype),
        }
    )


def holdout_report(
    gpus: Sequence[str] | None = None,
    dtypes: Sequence[str] = DTYPES,
    *,
    folds: int = 5,
    seed: int = 0,
) -> pd.DataFrame:
    """Held-out-shape median and P90 absolute percentage errors (as fractions) of the shape-aware
    fit and both baselines, per shipped GPU and dtype (GPUs without rows in a dtype are skipped)."""
    records: list[dict[str, object]] = []
    for name in gpus if gpus is not None else measured_gpus():
        table = load_table("gemm", name)
        gpu = get_gpu(name)
        for dtype in dtypes:
            if not (table["dtype"] == dtype).any():
                continue
            cv = holdout_shapes(table, gpu, dtype, folds=folds, seed=seed)
            refs = baselines(table, gpu, dtype, folds=folds, seed=seed)
            measured = cv["measured_s"].to_numpy()
            for model, predicted in (
                ("shape_aware", cv["predicted_s"].to_numpy()),
                ("constant", refs["constant"]),
                ("uncalibrated", refs["uncalibrated"]),
            ):
                records.append(
                    {"gpu": name, "dtype": dtype, "model": model, **summarize(predicted, measured)}
                )
    return pd.DataFrame(records)
