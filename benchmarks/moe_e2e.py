"""Mixture-of-experts models end to end (not a test): cbsim against NVIDIA AI Configurator's
measured serving benchmarks on H100 (the shipped silicon table), with the shipped engine profiles
and nothing fitted to these runs:

* gpt-oss-120b under vLLM: TP 2, 4 and 8, MXFP4 experts, closed loops of 4-512 clients;
* Qwen3-235B-A22B fp8 under TensorRT-LLM: TP 4 and 8 with the experts spread over the TP group
  (``moe_ep_size`` = tp; the two runs with expert TP inside EP are left out: cbsim's layouts are
  ep = 1 or tp), closed loops of 4-512 clients. cbsim prices its experts from vLLM's fused-MoE
  kernels (no TensorRT-LLM MoE tables exist), its other kernels and overhead from TensorRT-LLM's.

Prints each run and, per model, the median / P90 error of mean TTFT and mean TPOT over the runs
below saturation (512 clients queue for minutes: left out).

    python benchmarks/moe_e2e.py [--model gpt-oss-120b|qwen3-235b-a22b]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pandas as pd

from cbsim import simulate
from cbsim.calibration.benchmarks import shared_h100_benchmarks
from cbsim.calibration.e2e import benchmark_scenario

SATURATED_CLIENTS = 512


@dataclass(frozen=True)
class Family:
    """The measured runs of one model: how to find them and how cbsim serves them."""

    model: str
    hf_suffix: str
    engine: str
    dtype: str


FAMILIES = {
    "gpt-oss-120b": Family("gpt-oss-120b", "gpt-oss-120b", "vllm", "mxfp4"),
    "qwen3-235b-a22b": Family("qwen3-235b-a22b", "Qwen3-235B-A22B-FP8", "tensorrt-llm", "fp8"),
}


def runs(family: Family) -> pd.DataFrame:
    """The measured runs of ``family`` with cbsim's predictions beside them."""
    table = shared_h100_benchmarks()
    chosen = table[
        table["hf_model"].astype(str).str.endswith(family.hf_suffix)
        & (table["engine"] == family.engine)
        & (table["mode"] == "agg")
    ]
    rows = []
    for _, measured in chosen.iterrows():
        row = measured.copy()
        tp = int(row["tp"])
        ep = int(row["ep"]) if pd.notna(row["ep"]) else 1
        if ep not in (1, tp):
            continue
        row["model"], row["dtype"], row["kv_dtype"] = family.model, family.dtype, None
        scenario = benchmark_scenario(row, family.engine)
        cluster = scenario.cluster.model_copy(update={"ep": ep})
        summary = simulate(scenario.model_copy(update={"cluster": cluster})).summary
        rows.append(
            {
                "tp": tp,
                "ep": ep,
                "isl": int(row["isl"]),
                "osl": int(row["osl"]),
                "clients": int(row["concurrency"]),
                "ttft_measured_s": float(row["ttft_mean_s"]),
                "ttft_predicted_s": float(summary["ttft_mean_s"]),
                "tpot_measured_s": float(row["tpot_mean_s"]),
                "tpot_predicted_s": float(summary["tpot_mean_s"]),
            }
        )
    return pd.DataFrame(rows)


def report(name: str, frame: pd.DataFrame) -> None:
    kept = frame[frame["clients"] < SATURATED_CLIENTS]
    for metric in ("ttft", "tpot"):
        ratio = kept[f"{metric}_predicted_s"] / kept[f"{metric}_measured_s"] - 1
        errors = ratio.abs() * 100
        print(
            f"{name} {metric.upper()}: {len(kept)} runs, median error {errors.median():.1f}%, "
            f"P90 {errors.quantile(0.9):.1f}%, median signed {100 * ratio.median():+.1f}%"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(FAMILIES), action="append")
    names = parser.parse_args().model or sorted(FAMILIES)
    pd.set_option("display.width", 160)
    frames = {name: runs(FAMILIES[name]) for name in names}
    for name, frame in frames.items():
        print(f"\n{name}")
        print(frame.round(4).to_string(index=False))
    print()
    for name, frame in frames.items():
        report(name, frame)


if __name__ == "__main__":
    main()
