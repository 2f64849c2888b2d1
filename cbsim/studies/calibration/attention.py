"""Attention calibration: fitting one layer's attention time to measured kernel timings.

What is measured. The attention tables (NVIDIA AI Configurator's sweeps of vLLM's kernels) time one
layer's attention for a batch of identical requests: ``batch_size`` requests with ``num_heads``
query heads and ``num_kv_heads`` key/value heads of width ``head_dim``; ``tokens`` is cached context
for decode (one new query token per request attends to ``tokens`` cached keys plus its own) and
prompt length for prefill (``tokens`` new tokens per request attend causally to each other).

The model. A decode step is bandwidth-bound: it reads every cached key and value once, so its time
grows with the KV bytes (batch × context × KV heads × head width × bytes per element). A prefill is
compute-bound: QKᵀ and PV over every causal (query, key) pair. Both take one roofline form,

    t = (floor + max(FLOPs / (peak · η_c), bytes / (bandwidth · η_m))) · exp(g(features))

with FLOPs and bytes from :func:`cbsim.cost.roofline.attention_flops_bytes` — the definition the
cost model evaluates — and the GPU's spec-sheet peak (bf16 tensor cores, fp8 ones when the KV cache
is fp8) and HBM bandwidth. The base (``floor``, ``η_c``, ``η_m``) carries the head configuration
through FLOPs and bytes; ``g`` is a smooth correction on a log grid (:mod:`cbsim.studies.calibration.grid`,
one node per octave) over, by default, (batch, tokens) — what the cost model passes today: the
requests in a group and their mean cached context (decode) or mean new tokens (prefill). It bends
the roofline where kernels leave it: launch and setup cost at small shapes, split-KV and tile
quantisation, the knee where a decode turns from latency- to bandwidth-bound.

Fitting, in two steps. (1) The base: least squares on log(measured / base) after removing the mean
of each (batch, tokens) cell — the part ``g`` absorbs anyway — so the base is chosen for how well
it ranks head configurations against each other inside a cell, the one thing ``g`` cannot do; the
overall mean is kept, so the base alone is right on average and ``g`` averages zero. (2) ``g``:
regularised least squares on what is left, with a second-difference smoothness penalty.

Which rows. One kernel per GPU, phase and KV dtype: the one the tables sweep fully
(:func:`default_kernel`), which is what vLLM runs there by default — FlashAttention 3
(``vllm_flash_attn_fa3``) on H100 and H200 for bf16 and fp8 KV (the FA4 rows cover five head
configurations), FlashAttention 2 on A100 (``vllm_flash_attn``) and L40S (``vllm_flash_attn_fa2``)
for bf16, FlashInfer on L40S for fp8 KV (``vllm_flashinfer_fidecode``,
``vllm_flashinfer_fiprefill``), FlashInfer's TensorRT-LLM-generated kernels on B200
(``vllm_flashinfer_trtllmdecode``, ``vllm_flashinfer_trtllmprefill``). A100 has no fp8 KV rows. The
other engines' tables (``load_table(..., engine=...)``) are fitted the same way: TensorRT-LLM has
one kernel path (``torch_flow``: its own decode kernels and context FMHA, the latter in fp8 over an
fp8 KV cache), SGLang FlashAttention 3 (``fa3``; its Triton rows cover only head width 512). Of
those, the shapes a served model runs: head widths 64 and 128 (Llama, Mistral, Qwen; the tables
also hold 192, 256 and 512: MLA and Gemma shapes), query heads a multiple of KV heads, batch and
tokens ≥ 1, and for prefill queries longer than :data:`~cbsim.cost.roofline.DECODE_QUERY_MAX`
tokens — the cost model sends shorter ones to the decode fit, so the prefill fit is never asked
about them.

Checking. :func:`holdout_heads` cross-validates holding out whole head configurations (num_heads,
num_kv_heads, head_dim) — a new model's shape — never random rows, which would leak a held-out
configuration's own (batch, tokens) neighbours into training. :func:`baselines` scores the raw
roofline (efficiency 1, no floor) and a constant-efficiency roofline (one floor and efficiency
pair, no correction) on the same folds; :func:`transfer` fits one GPU and predicts another from its
spec sheet.

A limit of (batch, tokens) corrections, measured. Inside one (batch, tokens) cell every head
configuration gets the same correction, so only the base ranks them, and the kernels do not follow
the roofline's ranking: a short-context decode at large batch costs per (request, KV head) tile
whatever the number of query heads, while the bytes count each query head's input and output; the
split-KV knee moves with the number of KV heads; FlashAttention runs head width 64 at a lower
fraction of peak than 128; L40S kernels switch variants with the GQA group. Even a free value per
cell leaves a P90 error of about 24 % on H100 decode (40–55 % on A100 and L40S). With head features
in the correction as well (:data:`EXTENDED_FEATURES`: KV heads per GPU, query heads per KV head,
head width) held-out errors fall to a few percent; the cost model then has to pass them by name
(:func:`correction_inputs`). With head features the prefill base is compute-only (η_m pinned at the
spec-sheet bandwidth, :data:`PREFILL_MEMORY_EFF`): prefill time does not depend on bandwidth (H100
and H200 agree within 2 %), so the fit then transfers between GPUs that share tensor cores; without
them a fitted η_m lets the bytes term stand in for the head dependence of short prefills.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, cast

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve

from cbsim.catalog.hardware import GPU
from cbsim.catalog.model_bytes import DTYPE_BYTES
from cbsim.common.errors import CbsimError
from cbsim.cost.roofline import DECODE_QUERY_MAX, attention_flops_bytes
from cbsim.studies.calibration.errors import ape, summarize
from cbsim.studies.calibration.grid import interpolation_matrix, log2_nodes, second_differences
from cbsim.studies.calibration.profile import GridCorrection, RooflineFit

Phase = Literal["decode", "prefill"]

PHASES: tuple[Phase, ...] = ("decode", "prefill")
KV_DTYPES = ("bf16", "fp8")
TABLES: dict[str, str] = {"decode": "decode_attention", "prefill": "prefill_attention"}

# The correction's features, in the order the cost model passes them: (requests in the group, mean
# cached context for decode / mean new tokens for prefill).
DEFAULT_FEATURES: tuple[str, ...] = ("batch", "tokens")
# Head features the correction can also take: KV heads on one GPU, query heads per KV head (the
# GQA group) and head width. Needs a cost model that passes features by name.
HEAD_FEATURES: tuple[str, ...] = ("kv_heads", "group", "head_dim")
EXTENDED_FEATURES: tuple[str, ...] = (*DEFAULT_FEATURES, *HEAD_FEATURES)
KNOWN_FEATURES = frozenset(EXTENDED_FEATURES)

SERVING_HEAD_DIMS: tuple[int, ...] = (64, 128)
HEAD_COLUMNS = ["num_heads", "num_kv_heads", "head_dim"]

# Fitting knobs, chosen by held-out error (they matter only with head features: with (batch, tokens)
# alone every cell is measured and the grid nearly interpolates).
SMOOTHNESS: dict[str, float] = {"decode": 0.1, "prefill": 0.3}
# With head features in the correction, prefill's memory efficiency is pinned at the spec-sheet
# bandwidth (a true bound), leaving a compute-bound base; see the module docstring.
PREFILL_MEMORY_EFF = 1.0
# Octaves between grid nodes, per feature.
NODE_OCTAVES: dict[str, float] = {
    "batch": 1.0,
    "tokens": 1.0,
    "kv_heads": 1.0,
    "group": 1.0,
    "head_dim": 1.0,
}
RIDGE = 1e-3
# A weak pull of the base parameters towards a plain prior (10 µs, 70 % of peak), so that one the
# data does not determine (the compute efficiency of a bandwidth-bound decode) stays sensible.
_PRIOR = np.log(np.array([1e-5, 0.7, 0.7]))
_PRIOR_WEIGHT = 1e-3
_LOWER = np.log(np.array([1e-8, 1e-3, 1e-3]))
_UPPER = np.log(np.array([1e-3, 1.5, 1.5]))


# --------------------------------------------------------------------------- rows


def _check_phase(phase: str) -> Phase:
    if phase == "decode":
        return "decode"
    if phase == "prefill":
        return "prefill"
    raise CbsimError(f"phase must be 'decode' or 'prefill', got {phase!r}", field="phase")


def _check_kv_dtype(kv_dtype: str) -> str:
    if kv_dtype not in DTYPE_BYTES:
        raise CbsimError(
            f"unknown KV dtype {kv_dtype!r}; known: {', '.join(DTYPE_BYTES)}", field="kv_dtype"
        )
    return kv_dtype


def default_kernel(table: pd.DataFrame, phase: str, kv_dtype: str) -> str | None:
    """The kernel whose rows to fit: the one with the most rows of this KV dtype among queries the
    phase's fit is used for (the kernel the sweep covers fully, vLLM's default on that GPU).
    None when the table has no ``kernel`` column."""
    if "kernel" not in table.columns:
        return None
    rows = table[table["kv_dtype"] == kv_dtype]
    if _check_phase(phase) == "prefill":
        rows = rows[rows["tokens"] > DECODE_QUERY_MAX]
    if rows.empty:
        return None
    counts = rows["kernel"].value_counts()
    return str(counts.index[0])


def select_rows(
    table: pd.DataFrame,
    phase: str,
    kv_dtype: str,
    *,
    kernel: str | None = None,
    head_dims: Sequence[int] | None = SERVING_HEAD_DIMS,
) -> pd.DataFrame:
    """The rows a fit uses (see the module docstring): one kernel (``kernel``, or
    :func:`default_kernel`), one KV dtype, head widths in ``head_dims`` (None: all), query heads a
    multiple of KV heads, batch and tokens ≥ 1, and for prefill queries longer than
    ``DECODE_QUERY_MAX`` tokens."""
    phase = _check_phase(phase)
    _check_kv_dtype(kv_dtype)
    rows = table[table["kv_dtype"] == kv_dtype]
    if kernel is not None and "kernel" not in table.columns:
        raise CbsimError(f"kernel {kernel!r} asked for, but the table has no kernel column")
    chosen = kernel if kernel is not None else default_kernel(table, phase, kv_dtype)
    if chosen is not None:
        rows = rows[rows["kernel"] == chosen]
    keep = (
        (rows["batch_size"] >= 1)
        & (rows["tokens"] >= 1)
        & (rows["num_kv_heads"] >= 1)
        & (rows["num_heads"] % rows["num_kv_heads"] == 0)
    )
    if head_dims is not None:
        keep &= rows["head_dim"].isin(list(head_dims))
    if phase == "prefill":
        keep &= rows["tokens"] > DECODE_QUERY_MAX
    return rows[keep].reset_index(drop=True)


# --------------------------------------------------------------------------- shapes


def flops_bytes(table: pd.DataFrame, phase: str) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs and bytes of each row's attention, as the cost model counts them.

    Decode (one query per request over ``tokens`` cached keys plus its own): new tokens = batch,
    keys read = pairs = batch · (tokens + 1). Prefill (``tokens`` new tokens per request, no cache):
    new tokens = keys read = batch · tokens, pairs = batch · tokens · (tokens + 1) / 2. Heads and
    width from the row, KV bytes per element from its ``kv_dtype``.
    """
    phase = _check_phase(phase)
    batch = table["batch_size"].to_numpy(dtype=np.float64)
    tokens = table["tokens"].to_numpy(dtype=np.float64)
    unknown = sorted(set(table["kv_dtype"]) - set(DTYPE_BYTES))
    if unknown:
        raise CbsimError(f"unknown kv_dtype value(s) {', '.join(map(str, unknown))}")
    kv_bytes = table["kv_dtype"].map(DTYPE_BYTES).to_numpy(dtype=np.float64)
    if phase == "decode":
        new = batch
        kv_tokens = batch * (tokens + 1.0)
        pairs = kv_tokens
    else:
        new = batch * tokens
        kv_tokens = new
        pairs = new * (tokens + 1.0) * 0.5
    # the scalar definition, evaluated element-wise on arrays (it is plain arithmetic)
    elementwise = cast(Callable[..., tuple[np.ndarray, np.ndarray]], attention_flops_bytes)
    flops, bytes_moved = elementwise(
        new,
        kv_tokens,
        pairs,
        table["num_heads"].to_numpy(dtype=np.float64),
        table["num_kv_heads"].to_numpy(dtype=np.float64),
        table["head_dim"].to_numpy(dtype=np.float64),
        kv_bytes,
    )
    return np.asarray(flops, dtype=np.float64), np.asarray(bytes_moved, dtype=np.float64)


def feature_columns(table: pd.DataFrame, names: Sequence[str]) -> list[np.ndarray]:
    """The correction's features of each row, by name: ``batch``, ``tokens`` (cached context for
    decode, new tokens for prefill — both the ``tokens`` column), ``kv_heads``, ``group`` (query
    heads per KV head), ``head_dim``."""
    columns = {
        "batch": lambda: table["batch_size"],
        "tokens": lambda: table["tokens"],
        "kv_heads": lambda: table["num_kv_heads"],
        "group": lambda: table["num_heads"] / table["num_kv_heads"],
        "head_dim": lambda: table["head_dim"],
    }
    out = []
    for name in names:
        if name not in columns:
            raise CbsimError(
                f"unknown correction feature {name!r}; known: {', '.join(EXTENDED_FEATURES)}"
            )
        out.append(columns[name]().to_numpy(dtype=np.float64))
    return out


def correction_inputs(
    fit: RooflineFit,
    *,
    batch: float,
    tokens: float,
    q_heads: int,
    kv_heads: int,
    head_dim: int,
) -> list[float]:
    """The positional features ``fit.predict`` wants, in the order of its correction's feature
    names — how a cost model evaluates a fit with head features (or the plain two)."""
    values = {
        "batch": float(batch),
        "tokens": float(tokens),
        "kv_heads": float(kv_heads),
        "group": q_heads / kv_heads,
        "head_dim": float(head_dim),
    }
    if fit.correction is None:
        return []
    return [values[name] for name in fit.correction.features]


def _peak(gpu: GPU, kv_dtype: str) -> float:
    """The tensor-core peak attention runs at: fp8 with an fp8 KV cache, else bf16 (as
    :class:`~cbsim.cost.roofline.CostModel` does)."""
    return gpu.peak_flops("fp8" if kv_dtype == "fp8" else "bf16")


def _base(
    theta: np.ndarray, flops: np.ndarray, bytes_moved: np.ndarray, peak: float, bw: float
) -> np.ndarray:
    floor, compute_eff, memory_eff = np.exp(theta)
    result: np.ndarray = floor + np.maximum(
        flops / (peak * compute_eff), bytes_moved / (bw * memory_eff)
    )
    return result


# --------------------------------------------------------------------------- fitting


def _cells(table: pd.DataFrame) -> np.ndarray:
    """An integer id per (batch, tokens) cell."""
    key = table["batch_size"].to_numpy(dtype=np.int64) * (1 << 32) + table["tokens"].to_numpy(
        dtype=np.int64
    )
    codes: np.ndarray = pd.factorize(key)[0]
    return codes


def _fit_base(
    log_measured: np.ndarray,
    flops: np.ndarray,
    bytes_moved: np.ndarray,
    peak: float,
    bandwidth: float,
    cells: np.ndarray | None,
    memory_eff: float | None = None,
) -> np.ndarray:
    """log(floor, η_c, η_m) minimising the squared log error left after removing each cell's mean
    (``cells``; plus the overall mean, see below), or the plain squared log error (``cells``
    None). ``memory_eff`` pins η_m instead of fitting it."""
    free = [0, 1] if memory_eff is not None else [0, 1, 2]
    pinned = np.log(memory_eff) if memory_eff is not None else 0.0
    weight = _PRIOR_WEIGHT * np.sqrt(len(log_measured))
    root_n = np.sqrt(len(log_measured))
    if cells is not None:
        count = int(cells.max()) + 1
        sizes = np.bincount(cells, minlength=count).astype(np.float64)

    def full(x: np.ndarray) -> np.ndarray:
        return np.append(x, pinned) if memory_eff is not None else x

    def demean(values: np.ndarray) -> np.ndarray:
        """Within-cell deviations with the overall mean appended (rows × columns)."""
        if cells is None:
            return values
        means = np.stack(
            [np.bincount(cells, weights=v, minlength=count) / sizes for v in values.T], axis=1
        )
        return np.vstack([values - means[cells], root_n * values.mean(axis=0)])

    def residuals(x: np.ndarray) -> np.ndarray:
        r = log_measured - np.log(_base(full(x), flops, bytes_moved, peak, bandwidth))
        # within-cell deviations, plus the overall mean: it fixes the scale (a common factor on
        # floor and 1/η that the cell means would otherwise absorb), so the base alone is right
        # on average and the correction averages zero
        return np.concatenate([demean(r[:, None])[:, 0], weight * (x - _PRIOR[free])])

    def jacobian(x: np.ndarray) -> np.ndarray:
        floor, compute_eff, memory_eff_ = np.exp(full(x))
        compute = flops / (peak * compute_eff)
        memory = bytes_moved / (bandwidth * memory_eff_)
        base = floor + np.maximum(compute, memory)
        binds = compute >= memory
        d_log_base = np.stack(
            [
                floor / base,
                np.where(binds, -compute, 0.0) / base,
                np.where(binds, 0.0, -memory) / base,
            ],
            axis=1,
        )[:, free]
        return np.vstack([-demean(d_log_base), weight * np.eye(len(free))])

    best: np.ndarray | None = None
    best_cost = np.inf
    floor0 = float(np.clip(np.exp(log_measured.min()) * 0.8, 1e-7, 5e-4))
    for compute0 in (0.3, 1.0):
        for memory0 in (0.3, 1.0) if memory_eff is None else (1.0,):
            start = np.log(np.array([floor0, compute0, memory0]))[free]
            from scipy.optimize import least_squares  # slow to import: fits only

            solution = least_squares(
                residuals, start, jac=jacobian, bounds=(_LOWER[free], _UPPER[free])
            )
            if solution.cost < best_cost:
                best, best_cost = full(solution.x), float(solution.cost)
    assert best is not None
    return best


def _fit_grid(
    axes: list[np.ndarray],
    features: list[np.ndarray],
    target: np.ndarray,
    smoothness: float,
    ridge: float,
) -> np.ndarray:
    """Grid values minimising ‖A v − target‖² + s²‖D v‖² + ridge²‖v‖² (the same problem as
    :func:`cbsim.studies.calibration.grid.fit_log_grid`, solved directly: exact and fast on the
    five-feature grids)."""
    shape = tuple(len(a) for a in axes)
    design = interpolation_matrix(axes, features)
    penalty = second_differences(shape)
    normal = (
        design.T @ design
        + (smoothness**2) * (penalty.T @ penalty)
        + (ridge**2) * sp.identity(int(np.prod(shape)), format="csr")
    )
    values: np.ndarray = spsolve(normal.tocsc(), design.T @ target)
    return np.asarray(values, dtype=np.float64).reshape(shape)


def fit_attention(
    table: pd.DataFrame,
    gpu: GPU,
    phase: str,
    kv_dtype: str,
    *,
    features: Sequence[str] = DEFAULT_FEATURES,
    kernel: str | None = None,
    head_dims: Sequence[int] | None = SERVING_HEAD_DIMS,
    smoothness: float | None = None,
    select: bool = True,
) -> RooflineFit:
    """Fit decode or prefill attention for one KV dtype on one GPU (see the module docstring).

    ``table`` is a measured table (:func:`cbsim.studies.calibration.data.load_table`); its rows are first
    narrowed by :func:`select_rows` (``kernel``, ``head_dims``) unless ``select`` is False.
    ``features`` names the correction's features: the default ``("batch", "tokens")`` is what the
    cost model passes today; :data:`EXTENDED_FEATURES` adds head features (a head feature with a
    single value in the data, e.g. head width on A100, is left out of the grid).
    """
    phase = _check_phase(phase)
    _check_kv_dtype(kv_dtype)
    names = list(features)
    if names[:2] != list(DEFAULT_FEATURES) or not set(names) <= KNOWN_FEATURES:
        raise CbsimError(
            f"features must start with batch, tokens and may add {', '.join(HEAD_FEATURES)}; "
            f"got {names}"
        )
    rows = (
        select_rows(table, phase, kv_dtype, kernel=kernel, head_dims=head_dims) if select else table
    )
    if len(rows) < 8:
        raise CbsimError(
            f"only {len(rows)} {phase} attention rows with kv_dtype {kv_dtype} to fit on "
            f"{gpu.name} (kernel {kernel or default_kernel(table, phase, kv_dtype)}); need at least 8"
        )
    values = feature_columns(rows, names)
    kept = [
        (name, column)
        for name, column in zip(names, values, strict=True)
        if name in DEFAULT_FEATURES or np.unique(column).size > 1
    ]
    for name, column in kept[:2]:
        if np.unique(column).size < 2:
            raise CbsimError(f"the {phase} attention rows need at least two {name} values")

    peak = _peak(gpu, kv_dtype)
    flops, bytes_moved = flops_bytes(rows, phase)
    log_measured = np.log(rows["latency_s"].to_numpy(dtype=np.float64))
    head_features = any(name in HEAD_FEATURES for name, _ in kept)
    pin = PREFILL_MEMORY_EFF if phase == "prefill" and head_features else None
    theta = _fit_base(
        log_measured, flops, bytes_moved, peak, gpu.hbm_bandwidth, _cells(rows), memory_eff=pin
    )
    residual = log_measured - np.log(_base(theta, flops, bytes_moved, peak, gpu.hbm_bandwidth))
    axes = [
        np.asarray(log2_nodes(float(c.min()), float(c.max()), NODE_OCTAVES[name]))
        for name, c in kept
    ]
    grid = _fit_grid(axes, [c for _, c in kept], residual, smoothness or SMOOTHNESS[phase], RIDGE)
    floor, compute_eff, memory_eff = (float(x) for x in np.exp(theta))
    return RooflineFit(
        floor_s=floor,
        compute_eff=compute_eff,
        memory_eff=memory_eff,
        correction=GridCorrection(
            features=[name for name, _ in kept],
            axes=[a.tolist() for a in axes],
            values=[round(float(v), 6) for v in grid.ravel()],
        ),
    )


def fit_constant(
    table: pd.DataFrame,
    gpu: GPU,
    phase: str,
    kv_dtype: str,
    *,
    kernel: str | None = None,
    head_dims: Sequence[int] | None = SERVING_HEAD_DIMS,
    select: bool = True,
) -> RooflineFit:
    """The constant-efficiency baseline: one floor, compute and memory efficiency fitted by least
    squares on the log error over all rows, no correction."""
    phase = _check_phase(phase)
    rows = (
        select_rows(table, phase, kv_dtype, kernel=kernel, head_dims=head_dims) if select else table
    )
    if rows.empty:
        raise CbsimError(f"no {phase} attention rows with kv_dtype {kv_dtype} on {gpu.name}")
    flops, bytes_moved = flops_bytes(rows, phase)
    log_measured = np.log(rows["latency_s"].to_numpy(dtype=np.float64))
    theta = _fit_base(
        log_measured, flops, bytes_moved, _peak(gpu, kv_dtype), gpu.hbm_bandwidth, None
    )
    floor, compute_eff, memory_eff = (float(x) for x in np.exp(theta))
    return RooflineFit(floor_s=floor, compute_eff=compute_eff, memory_eff=memory_eff)


UNCALIBRATED = RooflineFit(floor_s=0.0, compute_eff=1.0, memory_eff=1.0)
"""The raw roofline baseline: spec-sheet peaks, no floor, no correction."""


def predict_attention(
    fit: RooflineFit, table: pd.DataFrame, gpu: GPU, phase: str, kv_dtype: str
) -> np.ndarray:
    """Predicted seconds for every row of ``table`` (no rows dropped): the fit's base from the
    row's FLOPs and bytes on ``gpu``, times its correction at the row's features — the same
    formula :meth:`cbsim.cost.roofline.CostModel.attention_time` evaluates."""
    phase = _check_phase(phase)
    _check_kv_dtype(kv_dtype)
    other = sorted(set(table["kv_dtype"]) - {kv_dtype})
    if other:
        raise CbsimError(
            f"rows with kv_dtype {', '.join(map(str, other))} in a {kv_dtype} prediction"
        )
    flops, bytes_moved = flops_bytes(table, phase)
    base = fit.floor_s + np.maximum(
        flops / (_peak(gpu, kv_dtype) * fit.compute_eff),
        bytes_moved / (gpu.hbm_bandwidth * fit.memory_eff),
    )
    if fit.correction is None:
        return np.asarray(base, dtype=np.float64)
    grid = fit.correction.grid()
    correction = grid.evaluate(*feature_columns(table, fit.correction.features))
    return np.asarray(base * np.exp(correction), dtype=np.float64)


# --------------------------------------------------------------------------- checking


def head_folds(table: pd.DataFrame, folds: int = 5, seed: int = 0) -> np.ndarray:
    """A fold number per row such that each head configuration (num_heads, num_kv_heads,
    head_dim) lies in one fold; configurations are dealt to folds in a seeded random order."""
    if folds < 2:
        raise CbsimError(f"folds must be >= 2, got {folds}", field="folds")
    configs = table[HEAD_COLUMNS].drop_duplicates().sort_values(HEAD_COLUMNS)
    if len(configs) < folds:
        raise CbsimError(f"{len(configs)} head configurations cannot fill {folds} folds")
    order = np.random.default_rng(seed).permutation(len(configs))
    fold_of = np.empty(len(configs), dtype=np.int64)
    fold_of[order] = np.arange(len(configs)) % folds
    lookup = dict(zip(configs.itertuples(index=False, name=None), fold_of.tolist(), strict=True))
    keys = table[HEAD_COLUMNS].itertuples(index=False, name=None)
    return np.fromiter((lookup[key] for key in keys), dtype=np.int64, count=len(table))


def _holdout_frame(
    rows: pd.DataFrame, fold: np.ndarray, predicted: np.ndarray, method: str
) -> pd.DataFrame:
    out = rows[["batch_size", "tokens", *HEAD_COLUMNS, "kv_dtype", "latency_s"]].copy()
    out["fold"] = fold
    out["method"] = method
    out["predicted_s"] = predicted
    out["ape"] = ape(predicted, out["latency_s"].to_numpy(dtype=np.float64))
    return out


def holdout_heads(
    table: pd.DataFrame,
    gpu: GPU,
    phase: str,
    kv_dtype: str,
    folds: int = 5,
    seed: int = 0,
    *,
    features: Sequence[str] = DEFAULT_FEATURES,
    kernel: str | None = None,
    head_dims: Sequence[int] | None = SERVING_HEAD_DIMS,
) -> pd.DataFrame:
    """Cross-validated predictions holding out whole head configurations: for each fold, fit on
    the others and predict its rows. One row per measurement: its shape, ``latency_s``, ``fold``,
    ``method`` ("calibrated"), ``predicted_s`` and ``ape`` (|predicted / measured − 1|)."""
    rows = select_rows(table, phase, kv_dtype, kernel=kernel, head_dims=head_dims)
    fold = head_folds(rows, folds, seed)
    predicted = np.empty(len(rows))
    for k in range(folds):
        test = fold == k
        fit = fit_attention(
            rows[~test].reset_index(drop=True),
            gpu,
            phase,
            kv_dtype,
            features=features,
            select=False,
        )
        predicted[test] = predict_attention(fit, rows[test], gpu, phase, kv_dtype)
    return _holdout_frame(rows, fold, predicted, "calibrated")


def baselines(
    table: pd.DataFrame,
    gpu: GPU,
    phase: str,
    kv_dtype: str,
    folds: int = 5,
    seed: int = 0,
    *,
    kernel: str | None = None,
    head_dims: Sequence[int] | None = SERVING_HEAD_DIMS,
) -> pd.DataFrame:
    """The two baselines on the same rows and folds as :func:`holdout_heads`: "uncalibrated"
    (spec-sheet roofline, no floor; nothing to fit) and "constant" (one floor and efficiency pair
    fitted on the training folds, no correction). Same columns as :func:`holdout_heads`."""
    rows = select_rows(table, phase, kv_dtype, kernel=kernel, head_dims=head_dims)
    fold = head_folds(rows, folds, seed)
    raw = predict_attention(UNCALIBRATED, rows, gpu, phase, kv_dtype)
    constant = np.empty(len(rows))
    for k in range(folds):
        test = fold == k
        fit = fit_constant(rows[~test].reset_index(drop=True), gpu, phase, kv_dtype, select=False)
        constant[test] = predict_attention(fit, rows[test], gpu, phase, kv_dtype)
    return pd.concat(
        [
            _holdout_frame(rows, fold, raw, "uncalibrated"),
            _holdout_frame(rows, fold, constant, "constant"),
        ],
        ignore_index=True,
    )


def summarize_holdout(frame: pd.DataFrame) -> pd.DataFrame:
    """Median and P90 absolute percentage error (fractions) and point count per ``method``."""
    rows = []
    for method, group in frame.groupby("method", sort=False):
        stats = summarize(group["predicted_s"].to_numpy(), group["latency_s"].to_numpy())
        rows.append({"method": method, **stats})
    return pd.DataFrame(rows)


def transfer(
    source: pd.DataFrame,
    source_gpu: GPU,
    target: pd.DataFrame,
    target_gpu: GPU,
    phase: str,
    kv_dtype: str,
    *,
    features: Sequence[str] = DEFAULT_FEATURES,
    kernel: str | None = None,
    head_dims: Sequence[int] | None = SERVING_HEAD_DIMS,
) -> pd.DataFrame:
    """Fit on ``source_gpu``'s table, predict ``target_gpu``'s rows with the target's spec sheet
    (peak and bandwidth): how far a profile carries to a GPU with no measurements of its own.
    Same columns as :func:`holdout_heads` (``fold`` is -1, ``method`` "transfer")."""
    fit = fit_attention(
        source, source_gpu, phase, kv_dtype, features=features, kernel=kernel, head_dims=head_dims
    )
    rows = select_rows(target, phase, kv_dtype, kernel=kernel, head_dims=head_dims)
    predicted = predict_attention(fit, rows, target_gpu, phase, kv_dtype)
    return _holdout_frame(rows, np.full(len(rows), -1), predicted, "transfer")
