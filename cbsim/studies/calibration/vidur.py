"""Whole-layer checks against Vidur's profiles, and the "vidur" calibration profile.

Vidur (microsoft/vidur, MIT) profiled one decoder layer of Llama-2-7B and Llama-3-8B at a time,
per tensor-parallel shard, in fp16 under sarathi-serve's layers: for every iteration size N
(``num_tokens``, 1 to 4096 or 32768) and TP degree (1, 2, 4, 8) the median time of each operator —
the four linear layers (QKV ``attn_pre_proj``, O ``attn_post_proj``, gate+up ``mlp_up_proj``, down
``mlp_down_proj``) and the element-wise kernels (two RMSNorms, rotary embedding, SiLU-and-multiply,
residual add). Attention itself is profiled separately and is not part of this table.

That makes it the one source of *whole-layer* timings for cbsim, distinct from the per-kernel GEMM
tables of NVIDIA AI Configurator. This module

* fits cbsim's element-wise term (:func:`elementwise_fit`) — the bytes the cost model says one
  layer's norms, rotary, activation and residual adds move, against Vidur's summed times;
* compares, per Vidur row, the measured layer (linear layers + element-wise kernels) with what
  :class:`~cbsim.cost.CostModel` predicts under a calibration profile (:func:`layer_totals`);
* measures how far the two sources disagree on the very same GEMM shapes
  (:func:`gemm_disagreement`): a floor for any single model judged against both;
* builds the profile named "vidur" (:func:`fit_vidur_profile`): GEMM and element-wise fits from
  Vidur's per-op timings, all-reduce from Vidur's network profile, optionally leaving out one
  model, some TP degrees or a range of N so that the reported error is out of sample.

About ``add``: Vidur's layer (``GPTBlock._forward_with_post_attn_norm`` in
``vidur/profiling/mlp/mlp_impl.py``) runs two residual adds but times only the second, after the
MLP; Vidur's own predictor also counts it once per layer. Both adds have the same shape, so here the
layer's element-wise time counts ``add`` twice (:data:`RESIDUAL_ADDS_PER_LAYER`), matching the two
adds whose bytes :meth:`CostModel.elementwise_time` counts. It is under 1% of a layer.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from cbsim.catalog.hardware import GPU, get_gpu
from cbsim.catalog.models import ModelShape
from cbsim.common.errors import CbsimError
from cbsim.cost.roofline import CostModel, gemm_flops_bytes
from cbsim.studies.calibration.comm import VIDUR_NODES, fit_vidur_allreduce
from cbsim.studies.calibration.data import load_table, vidur_tables
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.grid import fit_log_grid, log2_nodes
from cbsim.studies.calibration.profile import (
    CalibrationProfile,
    GridCorrection,
    Measured,
    RooflineFit,
)

VIDUR_DTYPE = "fp16"
RESIDUAL_ADDS_PER_LAYER = 2
ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act")
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
GEMM_FEATURES = ["m", "n", "k"]
# Vidur model names → cbsim catalog names (for reports; shapes are always built from the rows).
CATALOG_NAMES = {"Llama-2-7b-hf": "llama-2-7b", "Meta-Llama-3-8B": "llama-3-8b"}

GemmFitter = Callable[[pd.DataFrame, str, str], RooflineFit]
"""``fitter(table, gpu, dtype)`` for a GEMM table (m, n, k, dtype, latency_ms, latency_s)."""


# --------------------------------------------------------------------------- rows and shapes


@dataclass(frozen=True)
class Holdout:
    """Which Vidur rows a fit leaves out (and an evaluation keeps): a model, TP degrees, and/or
    an inclusive range of num_tokens. A row is held out when it matches every field given."""

    model: str | None = None
    tp: tuple[int, ...] | None = None
    tokens: tuple[int, int] | None = None

    def mask(self, frame: pd.DataFrame) -> np.ndarray:
        if self.model is None and self.tp is None and self.tokens is None:
            return np.zeros(len(frame), dtype=bool)
        selected = np.ones(len(frame), dtype=bool)
        if self.model is not None:
            selected &= (frame["model"] == self.model).to_numpy()
        if self.tp is not None:
            selected &= frame["tp"].isin(self.tp).to_numpy()
        if self.tokens is not None:
            low, high = self.tokens
            n = frame["num_tokens"].to_numpy()
            selected &= (n >= low) & (n <= high)
        return selected

    def describe(self) -> str:
        parts = []
        if self.model is not None:
            parts.append(f"model {self.model}")
        if self.tp is not None:
            parts.append("tp " + ",".join(str(t) for t in self.tp))
        if self.tokens is not None:
            parts.append(f"num_tokens {self.tokens[0]}-{self.tokens[1]}")
        return " and ".join(parts) or "nothing"


def vidur_rows(gpu: str) -> pd.DataFrame:
    """All of Vidur's per-layer rows for a GPU, one frame with a ``model`` column."""
    tables = vidur_tables(gpu)
    if not tables:
        raise CbsimError(f"no Vidur profiles for {gpu} (have: a100-80gb, h100-sxm)", field="gpu")
    frames = [frame.assign(model=name) for name, frame in tables.items()]
    return pd.concat(frames, ignore_index=True)


def row_model(row: Mapping[Any, Any], name: str = "vidur") -> ModelShape:
    """The shape of a Vidur row's model with one layer (so CostModel's per-model times are one
    layer's); vocabulary and depth do not enter a layer's time."""
    heads = int(row["n_head"])
    hidden = int(row["n_embd"])
    return ModelShape(
        name=name,
        num_layers=1,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(row["n_kv_head"]),
        head_dim=hidden // heads,
        intermediate_size=int(row["n_expanded_embd"]),
        vocab_size=int(row["vocab_size"]),
        tie_word_embeddings=False,
        gated_mlp=bool(row["use_gated_mlp"]),
    )


def gemm_shapes(model: ModelShape, tp: int) -> dict[str, tuple[int, int]]:
    """(n, k) per tensor-parallel shard of each Vidur GEMM op; m is the number of tokens."""
    head_dim = model.head_dim
    q_heads = model.num_heads // tp
    kv_heads = max(1, model.num_kv_heads // tp)
    inner = model.intermediate_size // tp
    return {
        "attn_pre_proj": ((q_heads + 2 * kv_heads) * head_dim, model.hidden_size),
        "attn_post_proj": (model.hidden_size, q_heads * head_dim),
        "mlp_up_proj": ((2 if model.gated_mlp else 1) * inner, model.hidden_size),
        "mlp_down_proj": (model.hidden_size, inner),
    }


def _by_model_tp(frame: pd.DataFrame) -> list[tuple[str, int, pd.DataFrame]]:
    """The rows of each (model, tp) pair, in sorted order."""
    models = frame["model"].astype(str).to_numpy()
    tps = frame["tp"].to_numpy(np.int64)
    return [
        (str(name), int(tp), frame[(models == name) & (tps == tp)])
        for name in np.unique(models)
        for tp in np.unique(tps[models == name])
    ]


def measured_elementwise_s(frame: pd.DataFrame) -> np.ndarray:
    """One layer's element-wise seconds: the two norms, rotary, activation, both residual adds."""
    total = sum(frame[f"{op}_ms"].to_numpy(np.float64) for op in ELEMENTWISE_OPS)
    total = total + RESIDUAL_ADDS_PER_LAYER * frame["add_ms"].to_numpy(np.float64)
    return np.asarray(total, dtype=np.float64) / 1e3


def measured_gemm_s(frame: pd.DataFrame) -> np.ndarray:
    """One layer's four linear layers, seconds."""
    total = sum(frame[f"{op}_ms"].to_numpy(np.float64) for op in GEMM_OPS)
    return np.asarray(total, dtype=np.float64) / 1e3


def gemm_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Vidur's GEMM timings as a GEMM table: model, op, tp, m, n, k, dtype, latency_ms, latency_s."""
    parts = []
    for model_name, tp, group in _by_model_tp(frame):
        shape = row_model(group.iloc[0].to_dict())
        for op, (n, k) in gemm_shapes(shape, tp).items():
            latency = group[f"{op}_ms"].to_numpy(np.float64)
            parts.append(
                pd.DataFrame(
                    {
                        "model": model_name,
                        "op": op,
                        "tp": tp,
                        "m": group["num_tokens"].to_numpy(np.int64),
                        "n": n,
                        "k": k,
                        "dtype": VIDUR_DTYPE,
                        "latency_ms": latency,
                        "latency_s": latency / 1e3,
                    }
                )
            )
    return pd.concat(parts, ignore_index=True)


# --------------------------------------------------------------------------- roofline fitting


def fit_roofline(
    flops: np.ndarray,
    bytes_moved: np.ndarray,
    latency_s: np.ndarray,
    peak: float,
    bandwidth: float,
    features: Sequence[np.ndarray],
    names: Sequence[str],
    *,
    step: float = 1.0,
    smoothness: float = 1.0,
) -> RooflineFit:
    """A :class:`RooflineFit` to measurements: floor and efficiencies by least squares on log
    time, then a smooth log-grid correction (nodes every ``step`` octaves of each feature) of what
    the roofline leaves. With ``flops`` all zero the compute efficiency stays 1 (unused)."""
    flops = np.asarray(flops, dtype=np.float64)
    bytes_moved = np.asarray(bytes_moved, dtype=np.float64)
    latency = np.asarray(latency_s, dtype=np.float64)
    log_latency = np.log(latency)
    compute_bound = bool(np.any(flops > 0))

    def base(x: np.ndarray) -> np.ndarray:
        floor, compute_eff, memory_eff = np.exp(x)
        t_mem = bytes_moved / (bandwidth * memory_eff)
        t_cmp = flops / (peak * compute_eff) if compute_bound else np.zeros_like(t_mem)
        result: np.ndarray = floor + np.maximum(t_cmp, t_mem)
        return result

    def residual(x: np.ndarray) -> np.ndarray:
        result: np.ndarray = np.log(base(x)) - log_latency
        return result

    # efficiencies stay physical (at most the spec sheet); the correction carries the rest
    low = np.log([1e-8, 0.05, 0.05])
    high = np.log([1e-3, 1.0, 1.0])
    start = np.log([max(float(np.min(latency)) * 0.5, 2e-8), 0.7, 0.7])
    from scipy.optimize import least_squares  # slow to import: fits only

    solution = least_squares(residual, start, bounds=(low, high), loss="soft_l1", f_scale=0.1)
    floor, compute_eff, memory_eff = (float(v) for v in np.exp(solution.x))
    if not compute_bound:
        compute_eff = 1.0
    left = log_latency - np.log(base(solution.x))
    arrays = [np.asarray(f, dtype=np.float64) for f in features]
    axes = [log2_nodes(float(a.min()), float(a.max()), step) for a in arrays]
    axes = [a if len(a) >= 2 else [a[0], a[0] + step] for a in axes]
    grid = fit_log_grid(axes, arrays, left, smoothness=smoothness)
    grid_axes, values = grid.to_lists()
    return RooflineFit(
        floor_s=floor,
        compute_eff=min(compute_eff, 1.0),
        memory_eff=min(memory_eff, 1.0),
        correction=GridCorrection(features=list(names), axes=grid_axes, values=values),
    )


def fit_gemm_table(table: pd.DataFrame, gpu: str, dtype: str) -> RooflineFit:
    """A GEMM :class:`RooflineFit` (floor, efficiencies, correction over m, n, k) to a GEMM table
    (columns m, n, k, latency_s) — the same form AI Configurator fits take, for any source."""
    device = get_gpu(gpu)
    m = table["m"].to_numpy(np.float64)
    n = table["n"].to_numpy(np.float64)
    k = table["k"].to_numpy(np.float64)
    flops, bytes_moved = gemm_flops_bytes(m, n, k, dtype)  # type: ignore[arg-type]
    return fit_roofline(
        np.asarray(flops),
        np.asarray(bytes_moved),
        table["latency_s"].to_numpy(np.float64),
        device.peak_flops(dtype),
        device.hbm_bandwidth,
        [m, n, k],
        GEMM_FEATURES,
    )


# --------------------------------------------------------------------------- element-wise


def _byte_counter(gpu: GPU) -> CalibrationProfile:
    """A profile whose element-wise 'time' is bytes / bandwidth: reads CostModel's byte count."""
    unit = RooflineFit(floor_s=0.0, compute_eff=1.0, memory_eff=1.0)
    return CalibrationProfile(gpu=gpu.name, name="bytes", elementwise=unit)


def elementwise_bytes(frame: pd.DataFrame, gpu: str) -> np.ndarray:
    """Bytes :meth:`CostModel.elementwise_time` counts for each Vidur row (its shape, tp, N)."""
    device = get_gpu(gpu)
    counter = _byte_counter(device)
    out = np.empty(len(frame))
    tokens = frame["num_tokens"].to_numpy(np.int64)
    for name, tp, group in _by_model_tp(frame):
        # Vidur timed unfused PyTorch operators: price them as the bare engine does
        cost = CostModel(
            row_model(group.iloc[0].to_dict(), name),
            device,
            tp,
            VIDUR_DTYPE,
            calibration=counter,
            engine=None,
        )
        where = np.flatnonzero(
            (frame["model"].astype(str).to_numpy() == name) & (frame["tp"].to_numpy() == tp)
        )
        for i in where:
            out[i] = cost.elementwise_time(int(tokens[i])) * device.hbm_bandwidth
    return out


def elementwise_fit(gpu: str, *, holdout: Holdout | None = None) -> RooflineFit:
    """Fit CostModel's element-wise term to Vidur's summed element-wise kernels of ``gpu``: floor
    and bandwidth efficiency, then a correction over num_tokens (the feature CostModel passes).

    Rows matching ``holdout`` are left out of the fit.
    """
    frame = vidur_rows(gpu)
    if holdout is not None:
        frame = frame[~holdout.mask(frame)]
    if frame.empty:
        raise CbsimError("the holdout leaves no Vidur rows to fit", field="holdout")
    device = get_gpu(gpu)
    tokens = frame["num_tokens"].to_numpy(np.float64)
    return fit_roofline(
        np.zeros(len(frame)),
        elementwise_bytes(frame, gpu),
        measured_elementwise_s(frame),
        device.peak_flops(VIDUR_DTYPE),
        device.hbm_bandwidth,
        [tokens],
        ["tokens"],
    )


# --------------------------------------------------------------------------- layer totals


def layer_totals(
    gpu: str, profile: CalibrationProfile | None, *, holdout: Holdout | None = None
) -> pd.DataFrame:
    """Measured against predicted time of one layer's linear layers and element-wise kernels
    (no attention, no all-reduce, no LM head, no overhead), per Vidur row of ``gpu``.

    Predictions come from :class:`CostModel` built from the row's shape and tp in fp16 under
    ``profile`` (None: the uncalibrated defaults). With ``holdout``, only the matching rows.
    Columns: model, num_tokens, tp, measured_gemm_s, predicted_gemm_s, measured_elementwise_s,
    predicted_elementwise_s, measured_s, predicted_s, ape.
    """
    frame = vidur_rows(gpu)
    if holdout is not None:
        frame = frame[holdout.mask(frame)].reset_index(drop=True)
    device = get_gpu(gpu)
    predicted_gemm = np.empty(len(frame))
    predicted_elementwise = np.empty(len(frame))
    tokens = frame["num_tokens"].to_numpy(np.int64)
    models = frame["model"].astype(str).to_numpy()
    tps = frame["tp"].to_numpy(np.int64)
    for name, tp, group in _by_model_tp(frame):
        shape = row_model(group.iloc[0].to_dict(), name)
        cost = CostModel(shape, device, tp, VIDUR_DTYPE, calibration=profile, engine=None)
        for i in np.flatnonzero((models == name) & (tps == tp)):
            # the shape has one layer, so these are one layer's times
            qkv, o_proj, mlp, elementwise, _ = cost._linear_times(int(tokens[i]))
            predicted_gemm[i] = qkv + o_proj + mlp
            predicted_elementwise[i] = elementwise
    measured_gemm = measured_gemm_s(frame)
    measured_elem = measured_elementwise_s(frame)
    measured = measured_gemm + measured_elem
    predicted = predicted_gemm + predicted_elementwise
    return pd.DataFrame(
        {
            "model": frame["model"].to_numpy(),
            "num_tokens": frame["num_tokens"].to_numpy(np.int64),
            "tp": frame["tp"].to_numpy(np.int64),
            "measured_gemm_s": measured_gemm,
            "predicted_gemm_s": predicted_gemm,
            "measured_elementwise_s": measured_elem,
            "predicted_elementwise_s": predicted_elementwise,
            "measured_s": measured,
            "predicted_s": predicted,
            "ape": np.abs(predicted / measured - 1.0),
        }
    )


# --------------------------------------------------------------------------- cross-source GEMMs


def _interpolate_m(
    table: pd.DataFrame, n: int, k: int, m: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """AI Configurator's time at (m, n, k): exact where m was measured, log-log interpolated
    between the measured m's of the same (n, k) otherwise; NaN outside them or with no (n, k).
    Also returns whether each value was an exact match."""
    same = table[(table["n"] == n) & (table["k"] == k)]
    if same.empty:
        return np.full(len(m), np.nan), np.zeros(len(m), dtype=bool)
    by_m = same.groupby("m", sort=True)["latency_s"].median()
    ms = by_m.index.to_numpy(np.float64)
    times = by_m.to_numpy(np.float64)
    values = np.exp(np.interp(np.log(m), np.log(ms), np.log(times)))
    values[(m < ms[0]) | (m > ms[-1])] = np.nan
    return values, np.isin(m, ms)


def gemm_disagreement(gpu: str, dtype: str = "bf16") -> pd.DataFrame:
    """Vidur's GEMM times against AI Configurator's on the same (m, n, k) of the same GPU.

    For every Vidur GEMM (op, tp, m = num_tokens) whose per-shard (n, k) AI Configurator measured,
    its time at m (interpolated in m when m itself was not measured; rows outside the measured m
    range are dropped). Vidur runs fp16 GEMMs, AI Configurator bf16: the same tensor-core rate.
    Columns: model, op, tp, m, n, k, vidur_s, aiconfigurator_s, ratio (vidur / aiconfigurator),
    ape, exact.
    """
    rows = gemm_rows(vidur_rows(gpu))
    table = load_table("gemm", gpu)
    table = table[table["dtype"].astype(str) == dtype]
    parts: list[pd.DataFrame] = []
    shapes = rows[["n", "k"]].to_numpy(np.int64)
    for n, k in np.unique(shapes, axis=0):
        group = rows[(shapes[:, 0] == n) & (shapes[:, 1] == k)]
        m = group["m"].to_numpy(np.float64)
        reference, exact = _interpolate_m(table, int(n), int(k), m)
        keep = np.isfinite(reference)
        if not keep.any():
            continue
        part = group[keep][["model", "op", "tp", "m", "n", "k"]].copy()
        part["vidur_s"] = group["latency_s"].to_numpy(np.float64)[keep]
        part["aiconfigurator_s"] = reference[keep]
        part["exact"] = exact[keep]
        parts.append(part)
    frame = pd.concat(parts, ignore_index=True)
    frame["ratio"] = frame["vidur_s"] / frame["aiconfigurator_s"]
    frame["ape"] = np.abs(frame["ratio"] - 1.0)
    return frame


def gemm_disagreement_summary(frame: pd.DataFrame, by: Sequence[str] = ("op",)) -> pd.DataFrame:
    """Median ratio, median and P90 APE and point count of a :func:`gemm_disagreement` frame,
    overall (group "all") and per distinct value of the ``by`` columns (joined with "/")."""
    labels = frame[list(by)].astype(str).agg("/".join, axis=1) if by else None
    groups: list[tuple[str, pd.DataFrame]] = [("all", frame)]
    if labels is not None:
        groups += [(str(v), frame[labels == v]) for v in sorted(labels.unique())]
    return pd.DataFrame(
        [
            {
                "group": label,
                "median_ratio": float(part["ratio"].median()),
                "median_ape": float(part["ape"].median()),
                "p90_ape": float(np.percentile(part["ape"], 90)),
                "points": len(part),
            }
            for label, part in groups
        ]
    )


# --------------------------------------------------------------------------- profiles


def _with_dtype_aliases(fit: RooflineFit) -> dict[str, RooflineFit]:
    # fp16 and bf16 run at the same tensor-core rate on every GPU cbsim knows
    return {"fp16": fit, "bf16": fit}


def fit_vidur_profile(
    gpu: str,
    *,
    holdout_model: str | None = None,
    holdout: Holdout | None = None,
    gemm_fitter: GemmFitter | None = None,
) -> CalibrationProfile:
    """The "vidur" profile of ``gpu``: GEMM and element-wise fits to Vidur's per-op timings and
    all-reduce from Vidur's network profile of the GPU's DGX node.

    ``holdout_model`` (or a general ``holdout``) leaves those rows out of the fits. ``gemm_fitter``
    replaces the GEMM fit (default :func:`fit_gemm_table`); it sees Vidur's GEMMs as a GEMM table.
    """
    if holdout_model is not None:
        if holdout is not None:
            raise CbsimError("give holdout_model or holdout, not both", field="holdout")
        holdout = Holdout(model=holdout_model)
    frame = vidur_rows(gpu)
    if holdout is not None:
        frame = frame[~holdout.mask(frame)].reset_index(drop=True)
    if frame.empty:
        raise CbsimError("the holdout leaves no Vidur rows to fit", field="holdout")
    gemms = gemm_rows(frame)
    fitter = gemm_fitter or fit_gemm_table
    gemm = fitter(gemms, gpu, VIDUR_DTYPE)
    elementwise = elementwise_fit(gpu, holdout=holdout)
    node = VIDUR_NODES.get(gpu)
    allreduce = fit_vidur_allreduce(node) if node is not None else {}
    left_out = holdout.describe() if holdout is not None else "nothing"
    models = ", ".join(sorted(frame["model"].unique()))
    source = f"microsoft/vidur data/profiling (commit 7d47513, MIT): {models}; held out {left_out}"
    return CalibrationProfile(
        gpu=gpu,
        name="vidur",
        description=(
            "Fitted to Vidur's per-layer operator profiles (fp16, sarathi-serve layers) and "
            f"network profile {node}; fp16 fits also serve bf16 (same tensor-core rate)"
        ),
        gemm=_with_dtype_aliases(gemm),
        allreduce=allreduce,
        elementwise=elementwise,
        provenance={
            "gemm": Measured(source=source, rows=len(gemms)),
            "elementwise": Measured(source=source, rows=len(frame)),
            "allreduce": Measured(source=f"microsoft/vidur data/profiling/network/{node}"),
        },
    )


def _project_gemm_fitter() -> GemmFitter | None:
    """The project's AI Configurator GEMM fit (``cbsim.studies.calibration.gemm.fit_gemm``) if present."""
    try:
        module = importlib.import_module("cbsim.studies.calibration.gemm")
    except ImportError:
        return None
    fitter = getattr(module, "fit_gemm", None)
    if not callable(fitter):
        return None

    def fit_on_catalog_gpu(table: pd.DataFrame, gpu: str, dtype: str) -> RooflineFit:
        fit: RooflineFit = fitter(table, get_gpu(gpu), dtype)  # it takes the GPU, not its name
        return fit

    return fit_on_catalog_gpu


def aiconfigurator_profile(
    gpu: str, *, elementwise: RooflineFit | None = None, gemm_fitter: GemmFitter | None = None
) -> CalibrationProfile:
    """A profile whose GEMMs are fitted to AI Configurator's bf16 GEMM table of ``gpu`` (by
    ``gemm_fitter``, else the project's ``gemm.fit_gemm``, else :func:`fit_gemm_table`), stored
    under fp16 too; ``elementwise`` is taken as given (AI Configurator has no element-wise data).
    """
    table = load_table("gemm", gpu)
    table = table[table["dtype"].astype(str) == "bf16"].reset_index(drop=True)
    fitter = gemm_fitter or _project_gemm_fitter() or fit_gemm_table
    fit = fitter(table, gpu, "bf16")
    return CalibrationProfile(
        gpu=gpu,
        name="aiconfigurator-gemm",
        description="bf16 GEMMs fitted to NVIDIA AI Configurator's table (also used for fp16)",
        gemm=_with_dtype_aliases(fit),
        elementwise=elementwise,
        provenance={
            "gemm": Measured(source=f"aiconfigurator {gpu} gemm bf16", rows=len(table)),
        },
    )


def error_report(frame: pd.DataFrame) -> dict[str, float]:
    """Median / P90 APE (fractions) and point count of a :func:`layer_totals` frame."""
    return summarize(frame["predicted_s"].to_numpy(), frame["measured_s"].to_numpy())


def part_errors(frame: pd.DataFrame) -> pd.DataFrame:
    """Median / P90 APE (fractions) and median predicted/measured ratio of a :func:`layer_totals`
    frame for the layer total, its linear layers and its element-wise kernels."""
    rows = []
    for part, suffix in (("layer", "s"), ("gemm", "gemm_s"), ("elementwise", "elementwise_s")):
        predicted = frame[f"predicted_{suffix}"].to_numpy(np.float64)
        measured = frame[f"measured_{suffix}"].to_numpy(np.float64)
        stats = summarize(predicted, measured)
        rows.append(
            {
                "part": part,
                "median_ape": stats["median_ape"],
                "p90_ape": stats["p90_ape"],
                "median_ratio": float(np.median(predicted / measured)),
                "points": int(stats["points"]),
            }
        )
    return pd.DataFrame(rows)
