"""Mixture-of-experts models end to end: cbsim's engines against the measured H100 MoE benchmarks.

The shipped H100 benchmarks (NVIDIA AI Configurator's silicon table, Apache-2.0; see
``cbsim/catalog/data/LICENSES.md``) hold closed-loop runs of two MoE models that cbsim's catalog serves
with their measured layout (aggregated, attention not data-parallel, ``ep`` 1 or the TP group):

* gpt-oss-120b under vLLM, TP 2/4/8, MXFP4 experts (vLLM's 4-bit-weight MoE kernels);
* gpt-oss-120b under TensorRT-LLM, TP 2 and 4, MXFP4 experts (the table records ``fp8``: the
  engine's quantisation setting; the checkpoint's experts are MXFP4, its other layers bf16). Laid
  out as recorded, with a caveat: these runs record a per-rank batch of clients / TP, as if
  attention ran data-parallel, which cbsim cannot serve with the experts split by TP;
* Qwen3-235B-A22B-FP8 under TensorRT-LLM, TP 4 and 8 with the experts spread over the TP group,
  block-scaled fp8 experts, the rest from TensorRT-LLM's kernel profile.

The routed experts are priced from the engine's own fused-MoE kernel table on H100 where its
calibration profile has one (:mod:`cbsim.cost.moe`). Runs are reported by concurrency band
(:data:`BANDS`: a decode step's batch grows with the clients, and with it the experts a step
reads) as well as in all.

What is held out. The engine profiles' step overhead and front end are fitted on the dense models'
benchmarks only (``tools/fit_engines.py``) and the MoE kernels on kernel tables, so every MoE
model here is predicted by a profile fitted without it: the leave-one-model-out figure of the
dense models, with nothing of any MoE run fitted. Runs at the saturating 512 clients (queues of
minutes, which measure the benchmark's length more than the engine) are left out, and so are the
two Qwen3 runs whose expert TP sits inside EP (cbsim's layouts are ``ep`` 1 or ``tp``) and the
DeepSeek/Qwen3 disaggregated ones (``benchmarks/disaggregated_e2e.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cbsim.engine.cost_models import CostModelCache
from cbsim.run.simulate import simulate
from cbsim.studies.calibration.benchmarks import shared_h100_benchmarks
from cbsim.studies.calibration.e2e import benchmark_scenario

__all__ = [
    "BANDS",
    "FAMILIES",
    "SATURATED_CLIENTS",
    "Family",
    "band_errors",
    "band_of",
    "errors",
    "measured_runs",
    "predict",
]

SATURATED_CLIENTS = 512
BANDS: tuple[tuple[str, int, int], ...] = (
    ("<=32", 1, 32),
    ("33-99", 33, 99),
    (">=100", 100, SATURATED_CLIENTS),
)
"""Concurrency bands (label, fewest clients, most clients) the serving check is reported by."""


@dataclass(frozen=True, slots=True)
class Family:
    """The measured runs of one MoE model: how to find them and how cbsim serves them."""

    model: str
    hf_suffix: str
    engine: str
    dtype: str


FAMILIES: dict[str, Family] = {
    "gpt-oss-120b": Family("gpt-oss-120b", "gpt-oss-120b", "vllm", "mxfp4"),
    "gpt-oss-120b-trtllm": Family("gpt-oss-120b", "gpt-oss-120b", "tensorrt-llm", "mxfp4"),
    "qwen3-235b-a22b": Family("qwen3-235b-a22b", "Qwen3-235B-A22B-FP8", "tensorrt-llm", "fp8"),
}


def measured_runs(family: Family) -> pd.DataFrame:
    """The aggregated, unsaturated runs of ``family`` that cbsim's layouts can serve."""
    table = shared_h100_benchmarks()
    chosen = table[
        table["hf_model"].astype(str).str.endswith(family.hf_suffix)
        & (table["engine"] == family.engine)
        & (table["mode"] == "agg")
        & (table["concurrency"] < SATURATED_CLIENTS)
    ].copy()
    ep = chosen["ep"].fillna(1).astype(int)
    chosen = chosen[(ep == 1) | (ep == chosen["tp"].astype(int))]
    chosen["ep"] = chosen["ep"].fillna(1).astype(int)
    chosen["model"], chosen["dtype"], chosen["kv_dtype"] = family.model, family.dtype, None
    return chosen.reset_index(drop=True)


def predict(
    family: Family, runs: pd.DataFrame, progress: Callable[[str], None] | None = None
) -> pd.DataFrame:
    """``runs`` with cbsim's mean TTFT and TPOT under the family's shipped engine profile."""
    ttft, tpot = [], []
    cost_models = CostModelCache()  # each layout's tables filled once, not once a run
    for i, (_, row) in enumerate(runs.iterrows()):
        scenario = benchmark_scenario(row, family.engine)
        cluster = scenario.cluster.model_copy(update={"ep": int(row["ep"])})
        scenario = scenario.model_copy(update={"cluster": cluster})
        summary = simulate(scenario, cost_models=cost_models).summary
        ttft.append(float(summary["ttft_mean_s"]))
        tpot.append(float(summary["tpot_mean_s"]))
        if progress is not None and (i + 1) % 25 == 0:
            progress(f"{family.model}: {i + 1}/{len(runs)} runs")
    return runs.assign(predicted_ttft_s=ttft, predicted_tpot_s=tpot)


def errors(rows: pd.DataFrame) -> dict[str, float]:
    """Median / P90 absolute and median signed % error of mean TTFT and TPOT over ``rows``."""
    out: dict[str, float] = {"runs": float(len(rows))}
    for metric in ("ttft", "tpot"):
        ratio = rows[f"predicted_{metric}_s"].to_numpy() / rows[f"{metric}_mean_s"].to_numpy() - 1
        out[f"{metric}_median_pct"] = float(100 * np.median(np.abs(ratio)))
        out[f"{metric}_p90_pct"] = float(100 * np.percentile(np.abs(ratio), 90))
        out[f"{metric}_signed_pct"] = float(100 * np.median(ratio))
    return out


def band_of(clients: float) -> str:
    """The :data:`BANDS` label of a run of ``clients`` closed-loop clients."""
    for label, low, high in BANDS:
        if low <= clients <= high:
            return label
    return f">{SATURATED_CLIENTS}" if clients > SATURATED_CLIENTS else "none"


def band_errors(rows: pd.DataFrame, clients: str = "concurrency") -> pd.DataFrame:
    """:func:`errors` per concurrency band of ``rows`` (bands without runs left out) and over
    all of them, one row each with a ``band`` column."""
    bands = rows[clients].map(band_of)
    order = [label for label, _, _ in BANDS if (bands == label).any()]
    found = [{"band": label, **errors(rows[bands == label])} for label in order]
    return pd.DataFrame([*found, {"band": "all", **errors(rows)}])
