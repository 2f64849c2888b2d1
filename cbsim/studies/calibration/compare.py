"""How well a shipped calibration profile predicts someone's own measurements.

Before refitting the cost model to timings measured on your own GPU (``cbsim calibrate
measure``, then ``cbsim calibrate fit --data DIR``), the first question is whether the profile
cbsim already ships for that GPU predicts them: ``cbsim calibrate compare --gpu G --data DIR``
answers it per table, with the median and P90 absolute percentage error and the median ratio
predicted / measured (above 1: cbsim predicts slower than measured).

* ``gemm``: every row as a GEMM of its dtype, from the profile's fit for that dtype.
* ``decode_attention`` / ``prefill_attention``: every row through the profile's attention fit for
  its KV dtype (``fp16`` rows use the ``bf16`` fit: the same bytes and tensor-core rate). The
  measured kernel matters: ``cbsim calibrate measure`` times PyTorch's
  ``scaled_dot_product_attention``, not the serving engine's attention backend, so a gap here
  compares two kernels as much as it checks the model.
* ``iterations``: one decoder layer's time (the table's time over ``layers_timed``) against the
  cost model's per-layer compute for the same batch — linear layers, attention and the
  element-wise kernels, without the LM head, all-reduce or engine overhead. ``meta.json`` beside
  the tables names the model; prefills of one batch are taken as equally long (as the measured
  grids are).

Only tables present in the folder are compared; a dtype the profile has no fit for is reported
as skipped rather than guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from cbsim.catalog.hardware import GPU, get_gpu
from cbsim.catalog.models import ModelShape
from cbsim.common.errors import CbsimError
from cbsim.cost.profile import CalibrationProfile, RooflineFit, load_profile
from cbsim.cost.roofline import CostModel
from cbsim.studies.calibration.attention import predict_attention
from cbsim.studies.calibration.data import load_table, read_table_file, table_file
from cbsim.studies.calibration.errors import ape
from cbsim.studies.calibration.gemm import predict_gemm

__all__ = ["COLUMNS", "LAYER_PARTS", "compare_measurements", "layer_predictions"]

COLUMNS: tuple[str, ...] = (
    "table",
    "dtype",
    "points",
    "median_ape_pct",
    "p90_ape_pct",
    "median_ratio",
    "note",
)
LAYER_PARTS: tuple[str, ...] = (
    "qkv_proj",
    "o_proj",
    "mlp",
    "elementwise",
    "attn_prefill",
    "attn_decode",
)
"""Breakdown entries that make up the decoder layers' compute (times the layer count)."""
_KV_FIT = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}


@dataclass(frozen=True, slots=True)
class _Scored:
    table: str
    dtype: str
    predicted: np.ndarray
    measured: np.ndarray

    def row(self) -> dict[str, object]:
        errors = ape(self.predicted, self.measured) * 100.0
        return {
            "table": self.table,
            "dtype": self.dtype,
            "points": len(errors),
            "median_ape_pct": float(np.median(errors)),
            "p90_ape_pct": float(np.percentile(errors, 90)),
            "median_ratio": float(np.median(self.predicted / self.measured)),
            "note": "",
        }


def _skipped(table: str, dtype: str, points: int, note: str) -> dict[str, object]:
    return {
        "table": table,
        "dtype": dtype,
        "points": points,
        "median_ape_pct": float("nan"),
        "p90_ape_pct": float("nan"),
        "median_ratio": float("nan"),
        "note": note,
    }


def _gemm_rows(profile: CalibrationProfile, gpu: GPU, folder: Path) -> list[dict[str, object]]:
    table = load_table("gemm", gpu.name, data_dir=folder)
    rows: list[dict[str, object]] = []
    for dtype, group in table.groupby("dtype", sort=True):
        fit = profile.gemm.get(str(dtype))
        if fit is None:
            rows.append(_skipped("gemm", str(dtype), len(group), "no fit for this dtype"))
            continue
        predicted = predict_gemm(fit, group, gpu, str(dtype))
        measured = group["latency_s"].to_numpy(np.float64)
        rows.append(_Scored("gemm", str(dtype), predicted, measured).row())
    return rows


def _attention_rows(
    profile: CalibrationProfile, gpu: GPU, folder: Path, phase: str
) -> list[dict[str, object]]:
    name = f"{phase}_attention"
    table = load_table(name, gpu.name, data_dir=folder)
    fits: dict[str, RooflineFit] = getattr(profile, name)
    rows: list[dict[str, object]] = []
    for kv_dtype, group in table.groupby("kv_dtype", sort=True):
        fit_key = _KV_FIT.get(str(kv_dtype))
        fit = None if fit_key is None else fits.get(fit_key)
        if fit is None or fit_key is None:
            rows.append(_skipped(name, str(kv_dtype), len(group), "no fit for this KV dtype"))
            continue
        predicted = predict_attention(fit, group.assign(kv_dtype=fit_key), gpu, phase, fit_key)
        measured = group["latency_s"].to_numpy(np.float64)
        rows.append(_Scored(name, str(kv_dtype), predicted, measured).row())
    return rows


def _measured_model(folder: Path) -> tuple[ModelShape, str]:
    """The model ``cbsim calibrate measure`` built, and its dtype, from ``meta.json``."""
    path = folder / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        return ModelShape(**meta["model_shape"]), str(meta.get("dtype", "bf16"))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CbsimError(
            f"the iterations table needs the model_shape that `cbsim calibrate measure` "
            f"writes to meta.json ({err})",
            source=str(path),
        ) from None


def layer_predictions(
    iterations: pd.DataFrame, model: ModelShape, gpu: GPU, profile: CalibrationProfile, dtype: str
) -> np.ndarray:
    """Predicted seconds of one decoder layer for every row of an ``iterations`` table."""
    cost = CostModel(model, gpu, dtype=dtype, calibration=profile, engine=None)
    columns = ("batch_size", "num_prefill_tokens", "num_decode_tokens", "decode_context_tokens")
    predicted = []
    for size, prefill_tokens, decodes, context in iterations[list(columns)].to_numpy(np.int64):
        prefills = int(size - decodes)
        batch: list[tuple[int, int]] = []
        if prefills > 0:
            batch += [(int(prefill_tokens) // prefills, 0)] * prefills
        batch += [(1, int(context))] * int(decodes)
        parts = cost.breakdown(batch)
        predicted.append(sum(parts.get(key, 0.0) for key in LAYER_PARTS) / model.num_layers)
    return np.asarray(predicted, dtype=np.float64)


def _iteration_rows(profile: CalibrationProfile, gpu: GPU, path: Path) -> list[dict[str, object]]:
    iterations = read_table_file(path)
    model, dtype = _measured_model(path.parent)
    if dtype not in profile.gemm:
        return [_skipped("iterations", dtype, len(iterations), "no GEMM fit for this dtype")]
    predicted = layer_predictions(iterations, model, gpu, profile, dtype)
    measured = (
        iterations["latency_ms"].to_numpy(np.float64)
        / iterations["layers_timed"].to_numpy(np.float64)
        * 1e-3
    )
    return [_Scored("iterations (per layer)", dtype, predicted, measured).row()]


def compare_measurements(
    gpu: str, data_dir: str | Path, calibration: str = "default"
) -> pd.DataFrame:
    """Per table of ``data_dir``: the error of ``calibration`` (a shipped profile name or JSON
    path) for ``gpu`` on those measurements (columns :data:`COLUMNS`)."""
    folder = Path(data_dir)
    if not folder.is_dir():
        raise CbsimError("not a folder of measurements", source=str(folder))
    target = get_gpu(gpu)
    profile = load_profile(target.name, calibration)
    if profile is None:
        raise CbsimError("compare needs a calibration profile, not 'none'", field="calibration")
    rows: list[dict[str, object]] = []
    if table_file(folder, "gemm") is not None:
        rows += _gemm_rows(profile, target, folder)
    for phase in ("decode", "prefill"):
        if table_file(folder, f"{phase}_attention") is not None:
            rows += _attention_rows(profile, target, folder, phase)
    iterations = table_file(folder, "iterations")
    if iterations is not None:
        rows += _iteration_rows(profile, target, iterations)
    if not rows:
        raise CbsimError(
            "no gemm, decode_attention, prefill_attention or iterations table here",
            source=str(folder),
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))
