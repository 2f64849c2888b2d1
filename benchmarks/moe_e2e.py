"""Mixture-of-experts models end to end (not a test): cbsim against NVIDIA AI Configurator's
measured serving benchmarks on H100 (the shipped silicon table), with the shipped engine profiles
and nothing fitted to these runs:

* gpt-oss-120b under vLLM: TP 2, 4 and 8, MXFP4 experts, closed loops of 4-512 clients;
* Qwen3-235B-A22B fp8 under TensorRT-LLM: TP 4 and 8 with the experts spread over the TP group
  (``moe_ep_size`` = tp; the two runs with expert TP inside EP are left out: cbsim's layouts are
  ep = 1 or tp), closed loops of 4-512 clients. cbsim prices its experts from vLLM's fused-MoE
  kernels (no TensorRT-LLM MoE tables exist), its other kernels and overhead from TensorRT-LLM's.

Prints each run below saturation (512 clients queue for minutes: left out, and not simulated) and,
per model, the median / P90 error of mean TTFT and mean TPOT over them. The runs, the predictions
and the errors are :mod:`cbsim.studies.calibration.moe_e2e`'s, as ``tools/moe_held_out.py`` writes them
into docs/engines.md.

    python benchmarks/moe_e2e.py [--model gpt-oss-120b|qwen3-235b-a22b]
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

from cbsim.studies.calibration.moe_e2e import FAMILIES, errors, measured_runs, predict

COLUMNS = {
    "tp": "tp",
    "ep": "ep",
    "isl": "isl",
    "osl": "osl",
    "concurrency": "clients",
    "ttft_mean_s": "ttft_measured_s",
    "predicted_ttft_s": "ttft_predicted_s",
    "tpot_mean_s": "tpot_measured_s",
    "predicted_tpot_s": "tpot_predicted_s",
}


def report(name: str, frame: pd.DataFrame) -> None:
    figures = errors(frame)
    for metric in ("ttft", "tpot"):
        print(
            f"{name} {metric.upper()}: {len(frame)} runs, median error "
            f"{figures[f'{metric}_median_pct']:.1f}%, P90 {figures[f'{metric}_p90_pct']:.1f}%, "
            f"median signed {figures[f'{metric}_signed_pct']:+.1f}%"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(FAMILIES), action="append")
    names = parser.parse_args().model or sorted(FAMILIES)
    pd.set_option("display.width", 160)
    frames = {}
    for name in names:
        family = FAMILIES[name]
        frames[name] = predict(
            family, measured_runs(family), lambda line: print(line, file=sys.stderr)
        )
    for name, frame in frames.items():
        print(f"\n{name}")
        table = frame[list(COLUMNS)].rename(columns=COLUMNS).astype({"ep": int, "clients": int})
        print(table.round(4).to_string(index=False))
    print()
    for name, frame in frames.items():
        report(name, frame)


if __name__ == "__main__":
    main()
