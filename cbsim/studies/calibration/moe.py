"""Mixture-of-experts calibration: one MoE layer's routed experts fitted to measured timings.

What is measured. AI Configurator's sweeps of vLLM's fused MoE kernels (``moe.parquet``; A100,
H100, B200), and of TensorRT-LLM's and SGLang's own (``<engine>/moe.parquet``; H100, B200), time
one layer's routed experts for ``num_tokens`` tokens: the router's choice is
given (``topk`` of ``num_experts`` experts per token, spread ``balanced`` or by a power law,
``power_law_1.01`` / ``power_law_1.2``: a few hot experts), each expert a gated MLP of
``hidden_size`` → ``inter_size`` → ``hidden_size``; ``moe_tp_size`` splits every expert's inner
width over GPUs, ``moe_ep_size`` gives each GPU ``num_experts / moe_ep_size`` whole experts and
the tokens routed to them (the token exchange itself is not in these timings). The weights are
stored as ``moe_dtype``: ``bfloat16``, ``fp8`` (per tensor), ``fp8_block`` (128 × 128 block
scales), ``int4_wo`` and ``w4a16_mxfp4`` (4-bit weights, 16-bit math), ``nvfp4`` (Blackwell).
vLLM picks the kernel by dtype and layout (on H100: Triton for bf16 and for fp8_block without EP,
FlashInfer's CUTLASS kernels for per-tensor fp8 and for fp8_block with EP, Marlin or OpenAI's
Triton kernels for 4-bit weights), so each (dtype, routing, with or without EP) slice is fitted on
its own: a *kernel path* (:func:`kernel_paths`). The other engines pick their own kernels the same
way (TensorRT-LLM: its CUTLASS MoE for 16-bit, fp8 and nvfp4 weights, DeepGEMM for block-scaled
fp8 on B200; SGLang: its Triton fused MoE on H100, FlashInfer's TensorRT-LLM kernels for most
shapes on B200), and an engine's table is fitted per kernel path just as vLLM's.

The model. One GPU computes ``pairs = tokens · topk / ep`` (token, expert) pairs over its
``experts / ep`` local experts; with balanced routing ``active = min(local experts, pairs)`` of
them see a token, and each active expert's weights are read once, whatever its token count:

    FLOPs   = 2 · pairs · 3 · hidden · inter / tp
    bytes   = active · 3 · hidden · inter / tp · bytes per weight
              + 2 bytes · pairs · (6 · inter / tp + 2 · hidden)          (its pairs' activations)
    buffers = 2 bytes · (2 · tokens · hidden + tokens · topk · (6 · inter / tp + 2 · hidden))

    t = (floor + max(FLOPs / (peak · η_c), bytes / (bandwidth · η_m)) + γ · buffers / bandwidth)
        · exp(g(pairs per active expert, hidden, inter / tp))

``buffers`` is the traffic over *every* (token, expert) pair, local or not: vLLM's Triton path
sizes its intermediate buffers for all of them and runs the activation and the final sum over all
rows under EP too (measured: at 16,384 tokens one layer takes 2.0 ms with one local expert of 256,
EP 256, and 3.4 ms with 32, EP 8 — not 1/32 of it), while FlashInfer's kernels touch only local
rows; ``γ ≥ 0`` is fitted per kernel path and says which. Peak is the GPU's spec-sheet tensor-core
rate for the math the kernel runs (fp8 for fp8 weights, 16-bit for 16-bit and 4-bit-weight-only
kernels, fp4 for nvfp4), bandwidth its HBM. ``g`` is a smooth correction on a log grid
(:mod:`cbsim.studies.calibration.grid`) over the three sizes of each expert's GEMMs: m = pairs per active
expert, k = hidden, n = inter / tp, strongly smoothed (:data:`SMOOTHNESS`) since a held-out shape
must inherit it from neighbours few and far between. Routing skew is not in the formulas (they
count balanced routing): each routing has its own fit, whose parameters absorb the hot experts.

Fitting: the four base parameters by a robust (soft-L1) least squares on log(measured / base),
then ``g`` by regularised least squares on what is left — plain least squares for vLLM's shipped
fits, or (``robust=True``) under the same soft-L1 loss as the base
(:func:`cbsim.studies.calibration.grid.robust_log_grid`). TensorRT-LLM's and SGLang's tables hold whole
layout series timed 2–4× off the rest at every token count (H100 TensorRT-LLM bf16: 16 of 170
(shape, TP, EP) series more than 2× off the base fit, vLLM's H100 bf16: 2 of 200); a least-squares
correction bends towards them and mis-prices their neighbours (H100 TensorRT-LLM bf16 held out:
17.2 / 69.3% median / P90 against 5.4 / 39.5% robust), so the engines' fits are robust. vLLM's keep
the least-squares correction they shipped with, which keeps their prices (robust would take H100
bf16 from 8.1 / 30.2 to 7.3 / 29.6).

Checking. :func:`holdout_shapes` cross-validates holding out whole model shapes (hidden, inter,
topk, experts: every token count, layout and routing of a model at once), never random rows: five
folds, or one per shape where fewer were measured (:func:`holdout_folds`: the 4-bit kernels of a
few models);
:func:`transfer_error` fits one GPU and predicts another from its spec sheet (leave one GPU out).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cbsim.catalog.hardware import GPU
from cbsim.common.errors import CbsimError
from cbsim.cost.moe import (
    FEATURES,
    MOE_DTYPES,
    MoeDtype,
    MoeTerms,
    fit_key,
    moe_base,
    moe_terms,
    peak_for,
)
from cbsim.cost.profile import GridCorrection, MoeFit
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.gemm import EFF_BOUNDS, FLOOR_BOUNDS_S, _at_least_two, group_folds
from cbsim.studies.calibration.grid import fit_log_grid, log2_nodes, robust_log_grid

__all__ = [
    "DISTRIBUTIONS",
    "FEATURES",
    "MOE_DTYPES",
    "MoeDtype",
    "MoeTerms",
    "fit_all",
    "fit_key",
    "fit_moe",
    "holdout_folds",
    "holdout_shapes",
    "kernel_paths",
    "moe_rows",
    "moe_terms",
    "predict_moe",
    "shape_folds",
    "transfer_error",
]

DISTRIBUTIONS: tuple[str, ...] = ("balanced", "power_law_1.01", "power_law_1.2")
SHAPE_COLUMNS: list[str] = ["hidden_size", "inter_size", "topk", "num_experts"]
SMOOTHNESS = 3.0
BUFFER_BOUNDS = (1e-6, 10.0)
MIN_ROWS = 50
"""Fewest measurements a kernel path is fitted on."""


def moe_rows(table: pd.DataFrame, moe_dtype: str, distribution: str) -> pd.DataFrame:
    """One (weight dtype, routing) slice of a ``moe`` table, with ``latency_s``."""
    rows = table[
        (table["moe_dtype"].astype(str) == moe_dtype)
        & (table["distribution"].astype(str) == distribution)
    ]
    if rows.empty:
        raise CbsimError(f"no {moe_dtype} rows routed {distribution}", field="moe_dtype")
    return rows.assign(latency_s=rows["latency_ms"].to_numpy(np.float64) * 1e-3).reset_index(
        drop=True
    )


def _columns(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    return {
        name: rows[name].to_numpy(np.float64)
        for name in (*SHAPE_COLUMNS, "num_tokens", "moe_tp_size", "moe_ep_size")
    }


def _terms(rows: pd.DataFrame, moe_dtype: str) -> MoeTerms:
    c = _columns(rows)
    return moe_terms(
        c["num_tokens"], c["hidden_size"], c["inter_size"], c["topk"], c["num_experts"],
        c["moe_tp_size"], c["moe_ep_size"], moe_dtype,
    )  # fmt: skip


def _fit_base(terms: MoeTerms, measured: np.ndarray, peak: float, bandwidth: float) -> np.ndarray:
    log_measured = np.log(measured)

    def residual(x: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.log(moe_base(np.exp(x), terms, peak, bandwidth)) - log_measured
        return out

    lower = np.log([FLOOR_BOUNDS_S[0], EFF_BOUNDS[0], EFF_BOUNDS[0], BUFFER_BOUNDS[0]])
    upper = np.log([FLOOR_BOUNDS_S[1], EFF_BOUNDS[1], EFF_BOUNDS[1], BUFFER_BOUNDS[1]])
    start = np.clip(np.log([0.5 * float(np.min(measured)), 0.5, 0.7, 0.1]), lower, upper)
    from scipy.optimize import least_squares  # slow to import: fits only

    solution = least_squares(residual, start, bounds=(lower, upper), loss="soft_l1", f_scale=0.1)
    fitted: np.ndarray = np.exp(solution.x)
    return fitted


def fit_moe(
    rows: pd.DataFrame,
    gpu: GPU,
    moe_dtype: str,
    *,
    smoothness: float = SMOOTHNESS,
    robust: bool = False,
) -> MoeFit:
    """The MoE roofline and its correction fitted to ``rows`` (one kernel path: a dtype, a
    routing, with or without EP; see :func:`kernel_paths`) measured on ``gpu``; ``robust``: the
    correction under a soft-L1 loss (see the module docstring)."""
    measured = rows["latency_s"].to_numpy(np.float64)
    terms = _terms(rows, moe_dtype)
    peak, bandwidth = peak_for(gpu, moe_dtype), gpu.hbm_bandwidth
    params = _fit_base(terms, measured, peak, bandwidth)
    base = moe_base(params, terms, peak, bandwidth)
    axes = [_at_least_two(log2_nodes(float(f.min()), float(f.max()))) for f in terms.features]
    fit_grid = robust_log_grid if robust else fit_log_grid
    grid = fit_grid(axes, terms.features, np.log(measured / base), smoothness=smoothness)
    grid_axes, values = grid.to_lists()
    floor_s, compute_eff, memory_eff, buffer_weight = (float(v) for v in params)
    return MoeFit(
        floor_s=floor_s,
        compute_eff=compute_eff,
        memory_eff=memory_eff,
        buffer_weight=buffer_weight,
        correction=GridCorrection(features=list(FEATURES), axes=grid_axes, values=values),
    )


def predict_moe(fit: MoeFit, rows: pd.DataFrame, gpu: GPU, moe_dtype: str) -> np.ndarray:
    """Predicted seconds for every row of ``rows`` (columns as :func:`moe_rows`)."""
    terms = _terms(rows, moe_dtype)
    params = np.array([fit.floor_s, fit.compute_eff, fit.memory_eff, fit.buffer_weight])
    base = moe_base(params, terms, peak_for(gpu, moe_dtype), gpu.hbm_bandwidth)
    if fit.correction is None:
        return base
    result: np.ndarray = base * np.exp(fit.correction.grid().evaluate(*terms.features))
    return result


def kernel_paths(rows: pd.DataFrame) -> np.ndarray:
    """Which kernel path each row ran within its dtype and routing: 0 without expert
    parallelism, 1 with it (vLLM switches kernels there for some dtypes)."""
    result: np.ndarray = (rows["moe_ep_size"].to_numpy() > 1).astype(np.int64)
    return result


def shape_folds(rows: pd.DataFrame, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Fold of every row, drawn per model shape (hidden, inter, topk, experts)."""
    return group_folds(rows[SHAPE_COLUMNS], folds, seed, "MoE shapes")


def holdout_folds(rows: pd.DataFrame, most: int = 5) -> int:
    """Folds to hold ``rows``' model shapes out in: ``most``, or one per shape when fewer were
    measured; 0 when one shape (nothing to hold out)."""
    shapes = len(rows[SHAPE_COLUMNS].drop_duplicates())
    return 0 if shapes < 2 else min(most, shapes)


def holdout_shapes(
    rows: pd.DataFrame,
    gpu: GPU,
    moe_dtype: str,
    *,
    folds: int = 5,
    seed: int = 0,
    robust: bool = False,
) -> pd.DataFrame:
    """Cross-validated predictions holding out whole model shapes, each kernel path fitted on its
    own (``robust``: see :func:`fit_moe`): ``rows`` with columns measured_s, predicted_s, base_s
    (the fit without its correction) and fold."""
    fold = shape_folds(rows, folds, seed)
    path = kernel_paths(rows)
    predicted = np.full(len(rows), np.nan)
    base = np.full(len(rows), np.nan)
    for f in range(folds):
        for p in np.unique(path):
            train = (fold != f) & (path == p)
            test = (fold == f) & (path == p)
            if not test.any() or not train.any():
                continue
            fit = fit_moe(rows[train], gpu, moe_dtype, robust=robust)
            predicted[test] = predict_moe(fit, rows[test], gpu, moe_dtype)
            plain = fit.model_copy(update={"correction": None})
            base[test] = predict_moe(plain, rows[test], gpu, moe_dtype)
    return rows.assign(
        measured_s=rows["latency_s"].to_numpy(np.float64),
        predicted_s=predicted,
        base_s=base,
        fold=fold,
    )


def transfer_error(
    source: pd.DataFrame,
    source_gpu: GPU,
    target: pd.DataFrame,
    target_gpu: GPU,
    moe_dtype: str,
    *,
    robust: bool = False,
) -> dict[str, float]:
    """Leave one GPU out: each kernel path fitted on ``source_gpu``'s rows predicts
    ``target_gpu``'s from its spec sheet; median / P90 absolute percentage error over the target
    rows whose path the source measured."""
    predicted = np.full(len(target), np.nan)
    source_path, target_path = kernel_paths(source), kernel_paths(target)
    for p in np.unique(target_path):
        if not (source_path == p).any():
            continue
        fit = fit_moe(source[source_path == p], source_gpu, moe_dtype, robust=robust)
        test = target_path == p
        predicted[test] = predict_moe(fit, target[test], target_gpu, moe_dtype)
    known = ~np.isnan(predicted)
    return summarize(predicted[known], target["latency_s"].to_numpy(np.float64)[known])


def fit_all(table: pd.DataFrame, gpu: GPU, *, robust: bool = False) -> dict[str, MoeFit]:
    """A fit for every kernel path ``table`` measures (see :func:`fit_key`), on ``gpu``
    (``robust``: see :func:`fit_moe`)."""
    fits: dict[str, MoeFit] = {}
    for moe_dtype in sorted(table["moe_dtype"].astype(str).unique()):
        if moe_dtype not in MOE_DTYPES:
            continue
        for distribution in sorted(table["distribution"].astype(str).unique()):
            try:
                rows = moe_rows(table, moe_dtype, distribution)
            except CbsimError:  # this dtype was not measured under this routing
                continue
            path = kernel_paths(rows)
            for expert_parallel in (False, True):
                chosen = rows[path == int(expert_parallel)]
                if len(chosen) >= MIN_ROWS:
                    key = fit_key(moe_dtype, distribution, expert_parallel)
                    fits[key] = fit_moe(chosen, gpu, moe_dtype, robust=robust)
    return fits
