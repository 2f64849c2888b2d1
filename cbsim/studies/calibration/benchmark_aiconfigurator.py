"""NVIDIA AI Configurator's silicon CSV as benchmark rows.

A row is one measured run of TensorRT-LLM, SGLang or vLLM (``backend``) on a ``system``; it records
everything (engine, GPU, model, precision, layout), so options never override it. Milliseconds
become seconds and its one TTFT and TPOT figure per run are filed as the means. An empty
``concurrency`` is ``batch_size × attention_dp_size`` for aggregated rows and ``decode_batch_size ×
decode_num_workers × decode_attention_dp_size`` for disaggregated ones (``mode`` ``disagg``), which
describe each pool in :data:`~cbsim.studies.calibration.benchmark_fields.POOL_COLUMNS` instead of one
layout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cbsim.studies.calibration.benchmark_fields import (
    _blank,
    _check_context,
    _count,
    _dtype,
    _engine,
    _gpu,
    _mode,
    _number,
    _required,
    _text,
    _Where,
    catalog_model,
)

_AIC_REQUIRED = (
    "backend", "model_path", "system", "mode", "isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms",
)  # fmt: skip


# --- NVIDIA AI Configurator's silicon table -------------------------------------------------------


def _aiconfigurator_row(source: str, number: int, cells: Mapping[str, Any]) -> dict[str, Any]:
    name = _text(cells.get("id"))
    where = _Where(source, f"row {number}" + (f" ({name})" if name else ""))
    mode = _mode(where, cells["mode"])
    hf_model = _required(where, "model_path", _text(cells["model_path"]))
    row: dict[str, Any] = {
        "source": f"{source}:{name or f'row {number}'}",
        "engine": _required(where, "backend", _engine(cells["backend"])),
        "engine_version": _text(cells.get("backend_version")),
        "hf_model": hf_model,
        "model": catalog_model(hf_model),
        "gpu": _required(where, "system", _gpu(where, "system", cells["system"])),
        "dtype": _dtype(where, "precision", cells.get("precision")) or "bf16",
        "kv_dtype": None,
        "mode": mode,
        "isl": _required(where, "isl", _number(where, "isl", cells["isl"])),
        "osl": _required(where, "osl", _number(where, "osl", cells["osl"])),
        "ttft_mean_s": _number(where, "silicon_ttft_ms", cells["silicon_ttft_ms"]) / 1e3,
        "tpot_mean_s": _number(where, "silicon_tpot_ms", cells["silicon_tpot_ms"]) / 1e3,
    }
    layout = _aggregated_layout(where, cells) if mode == "agg" else _pools_layout(where, cells)
    row.update(layout)
    concurrency = _number(where, "concurrency", cells.get("concurrency"))
    row["concurrency"] = concurrency if not math.isnan(concurrency) else _clients(row)
    if math.isnan(row["ttft_mean_s"]) and math.isnan(row["tpot_mean_s"]):
        raise where.error("has neither silicon_ttft_ms nor silicon_tpot_ms")
    _check_context(where, row, "isl")
    return row


def _layout(where: _Where, cells: Mapping[str, Any], prefix: str) -> dict[str, int | None]:
    """tp, pp, dp, ep of an engine (prefix "") or a pool ("prefill_"/"decode_")."""
    ep = cells.get(f"{prefix}moe_ep_size")
    return {
        "tp": _count(where, f"{prefix}tp_size", cells.get(f"{prefix}tp_size"), None),
        "pp": _count(where, f"{prefix}pp_size", cells.get(f"{prefix}pp_size"), 1),
        "dp": _count(
            where, f"{prefix}attention_dp_size", cells.get(f"{prefix}attention_dp_size"), 1
        ),
        # 0 marks a dense model: no experts to spread.
        "ep": _count(where, f"{prefix}moe_ep_size", None if _is_zero(ep) else ep, 1),
    }


def _is_zero(value: Any) -> bool:
    try:
        return not _blank(value) and float(value) == 0
    except (TypeError, ValueError):
        return False


def _aggregated_layout(where: _Where, cells: Mapping[str, Any]) -> dict[str, Any]:
    layout: dict[str, Any] = dict(_layout(where, cells, ""))
    if layout["tp"] is None:
        raise where.error("is empty on an aggregated (agg) row", "tp_size")
    layout["batch_size"] = _number(where, "batch_size", cells.get("batch_size"))
    return layout


def _pools_layout(where: _Where, cells: Mapping[str, Any]) -> dict[str, Any]:
    layout: dict[str, Any] = {}
    for pool in ("prefill", "decode"):
        for key, value in _layout(where, cells, f"{pool}_").items():
            layout[f"{pool}_{key}"] = value
        workers = f"{pool}_num_workers"
        layout[f"{pool}_workers"] = _count(where, workers, cells.get(workers), None)
        batch = f"{pool}_batch_size"
        layout[batch] = _number(where, batch, cells.get(batch))
    return layout


def _clients(row: Mapping[str, Any]) -> float:
    """Closed-loop clients implied by the running batches when the table leaves them out."""
    if row["mode"] == "agg":
        return float(row["batch_size"] * row["dp"])
    parts = (row["decode_batch_size"], row["decode_workers"], row["decode_dp"])
    return math.nan if any(p is None for p in parts) else float(math.prod(parts))
