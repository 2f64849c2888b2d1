"""Mixture-of-experts models end to end: cbsim's engines against the measured H100 MoE benchmarks.

The shipped H100 benchmarks (NVIDIA AI Configurator's silicon table, Apache-2.0; see
``cbsim/data/LICENSES.md``) hold closed-loop runs of two MoE models that cbsim's catalog serves
with their measured layout (aggregated, attention not data-parallel, ``ep`` 1 or the TP group):

* gpt-oss-120b under vLLM, TP 2/4/8, MXFP4 experts (vLLM's 4-bit-weight MoE kernels);
* Qwen3-235B-A22B-FP8 under TensorRT-LLM, TP 4 and 8 with the experts spread over the TP group,
  block-scaled fp8 experts (priced from vLLM's fused-MoE tables: no TensorRT-LLM MoE table
  exists), the rest from TensorRT-LLM's kernel profile.

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

from cbsim.calibration.benchmarks import shared_h100_benchmarks
from cbsim.calibration.e2e import benchmark_scenario
from cbsim.simulate import simulate

__all__ = ["FAMILIES", "SATURATED_CLIENTS", "Family", "errors", "measured_runs", "predict"]

SATURATED_CLIENTS = 512


@dataclass(frozen=True, slots=True)
class Family:
    """The measured runs of one MoE model: how to find them and how cbsim serves them."""

    model: str
    hf_suffix: str
    engine: str
    dtype: str


FAMILIES: dict[str, Family] = {
    "gpt-oss-120b": Family("gpt-oss-120b", "gpt-oss-120b", "vllm", "mxfp4"),
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
    for i, (_, row) in enumerate(runs.iterrows()):
        scenario = benchmark_scenario(row, family.engine)
        cluster = scenario.cluster.model_copy(update={"ep": int(row["ep"])})
        summary = simulate(scenario.model_copy(update={"cluster": cluster})).summary
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
