"""Multi-head latent attention calibration: DeepSeek-V3's MLA module fitted to measured timings.

What is measured. AI Configurator's sweeps of vLLM's MLA module (``mla_decode`` and
``mla_prefill``, H100 and B200; DeepSeek-V3's dimensions) time one layer's whole attention module —
the query and KV projections, attention and the output projection — for ``num_heads`` query heads
on one GPU (128 / tensor-parallel degree), a batch of ``batch_size`` requests of ``tokens`` cached
(decode) or new (prefill) tokens, per KV-cache dtype, projection dtype and attention backend.

The model. The FLOPs and bytes of :func:`cbsim.cost.mla.mla_terms` (projections counted from the
model's shape and the GPU's heads, attention over the latent cache in decode and per head in
prefill) in the roofline form the attention fits use,

    t = (floor + max(FLOPs / (peak · η_c), bytes / (bandwidth · η_m))) · exp(g(batch, tokens))

with the projections' dtype's peak. One kernel per (phase, KV dtype, projection dtype): the
backend the tables sweep most (:func:`default_kernel`). Checking holds out one head count at a time
(a tensor-parallel degree never measured: :func:`holdout_heads`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cbsim.catalog.hardware import GPU
from cbsim.catalog.model_bytes import DTYPE_BYTES
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.cost.mla import FEATURES, fit_key, mla_terms
from cbsim.cost.profile import GridCorrection, RooflineFit
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.gemm import fit_base, roofline_base
from cbsim.studies.calibration.grid import fit_log_grid, log2_nodes

__all__ = [
    "PHASES",
    "default_kernel",
    "fit_all",
    "fit_key",
    "fit_mla",
    "holdout_heads",
    "holdout_predictions",
    "mla_rows",
    "predict_mla",
]

PHASES: tuple[str, ...] = ("decode", "prefill")
MEASURED_MODEL = "deepseek-v3"
SMOOTHNESS = 1.0


def default_kernel(table: pd.DataFrame, kv_dtype: str) -> str | None:
    """The attention backend a table sweeps most for ``kv_dtype`` (ties: the first by name)."""
    rows = table[table["kv_dtype"].astype(str) == kv_dtype]
    if rows.empty:
        return None
    counts: dict[str, int] = {}
    for kernel in rows["kernel"].astype(str):
        counts[kernel] = counts.get(kernel, 0) + 1
    best = max(counts.values())
    return sorted(k for k, c in counts.items() if c == best)[0]


def mla_rows(table: pd.DataFrame, kv_dtype: str, gemm_dtype: str) -> pd.DataFrame:
    """The default kernel's rows of one (KV dtype, projection dtype), with ``latency_s``."""
    kernel = default_kernel(table, kv_dtype)
    rows = table[
        (table["kv_dtype"].astype(str) == kv_dtype)
        & (table["gemm_dtype"].astype(str) == gemm_dtype)
        & (table["kernel"].astype(str) == (kernel or ""))
    ]
    if rows.empty:
        raise CbsimError(f"no MLA rows for {kv_dtype} KV and {gemm_dtype} projections")
    return rows.assign(latency_s=rows["latency_ms"].to_numpy(np.float64) * 1e-3).reset_index(
        drop=True
    )


def _terms(
    rows: pd.DataFrame, phase: str, gemm_dtype: str, kv_dtype: str
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """(FLOPs, bytes, correction features) of the rows, in the measured model's shape."""
    batch = rows["batch_size"].to_numpy(np.float64)
    tokens = rows["tokens"].to_numpy(np.float64)
    flops, bytes_moved = mla_terms(
        get_model(MEASURED_MODEL),
        rows["num_heads"].to_numpy(np.float64),
        batch,
        tokens,
        decode=phase == "decode",
        weight_bytes=DTYPE_BYTES[gemm_dtype],
        kv_bytes=DTYPE_BYTES[kv_dtype],
    )
    return flops, bytes_moved, [batch, tokens]


def fit_mla(
    rows: pd.DataFrame,
    gpu: GPU,
    phase: str,
    kv_dtype: str,
    gemm_dtype: str,
) -> RooflineFit:
    """The MLA module's roofline and (batch, tokens) correction fitted to ``rows``."""
    measured = rows["latency_s"].to_numpy(np.float64)
    flops, bytes_moved, features = _terms(rows, phase, gemm_dtype, kv_dtype)
    peak, bandwidth = gpu.peak_flops(gemm_dtype), gpu.hbm_bandwidth
    floor_s, compute_eff, memory_eff = fit_base(flops, bytes_moved, measured, peak, bandwidth)
    base = roofline_base(floor_s, compute_eff, memory_eff, flops, bytes_moved, peak, bandwidth)
    axes = [log2_nodes(float(f.min()), float(f.max())) for f in features]
    grid = fit_log_grid(axes, features, np.log(measured / base), smoothness=SMOOTHNESS)
    grid_axes, values = grid.to_lists()
    return RooflineFit(
        floor_s=floor_s,
        compute_eff=compute_eff,
        memory_eff=memory_eff,
        correction=GridCorrection(features=list(FEATURES), axes=grid_axes, values=values),
    )


def predict_mla(
    fit: RooflineFit,
    rows: pd.DataFrame,
    gpu: GPU,
    phase: str,
    kv_dtype: str,
    gemm_dtype: str,
) -> np.ndarray:
    """Predicted seconds for every row of ``rows``."""
    flops, bytes_moved, features = _terms(rows, phase, gemm_dtype, kv_dtype)
    base = roofline_base(
        fit.floor_s, fit.compute_eff, fit.memory_eff, flops, bytes_moved,
        gpu.peak_flops(gemm_dtype), gpu.hbm_bandwidth,
    )  # fmt: skip
    if fit.correction is None:
        return base
    result: np.ndarray = base * np.exp(fit.correction.grid().evaluate(*features))
    return result


def holdout_predictions(
    rows: pd.DataFrame, gpu: GPU, phase: str, kv_dtype: str, gemm_dtype: str
) -> np.ndarray:
    """Each row predicted by a fit that never saw its head count (a tensor-parallel degree)."""
    heads = rows["num_heads"].to_numpy()
    predicted = np.empty(len(rows))
    for h in np.unique(heads):
        test = heads == h
        fit = fit_mla(rows[~test], gpu, phase, kv_dtype, gemm_dtype)
        predicted[test] = predict_mla(fit, rows[test], gpu, phase, kv_dtype, gemm_dtype)
    return predicted


def holdout_heads(
    rows: pd.DataFrame, gpu: GPU, phase: str, kv_dtype: str, gemm_dtype: str
) -> dict[str, float]:
    """Median / P90 error holding out one head count at a time (:func:`holdout_predictions`)."""
    predicted = holdout_predictions(rows, gpu, phase, kv_dtype, gemm_dtype)
    return summarize(predicted, rows["latency_s"].to_numpy(np.float64))


def fit_all(tables: dict[str, pd.DataFrame], gpu: GPU) -> dict[str, RooflineFit]:
    """A fit per (phase, KV dtype, projection dtype) the tables (by phase) measure."""
    fits: dict[str, RooflineFit] = {}
    for phase, table in tables.items():
        for kv_dtype in sorted(table["kv_dtype"].astype(str).unique()):
            for gemm_dtype in sorted(table["gemm_dtype"].astype(str).unique()):
                try:
                    rows = mla_rows(table, kv_dtype, gemm_dtype)
                except CbsimError:
                    continue
                fits[fit_key(phase, kv_dtype, gemm_dtype)] = fit_mla(
                    rows, gpu, phase, kv_dtype, gemm_dtype
                )
    return fits
