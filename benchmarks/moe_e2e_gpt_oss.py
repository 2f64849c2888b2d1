"""gpt-oss-120b end to end (not a test): cbsim against NVIDIA AI Configurator's measured vLLM
serving benchmarks of gpt-oss-120b on H100 (the shipped silicon table: TP 2, 4 and 8, MXFP4
experts, closed loops of 4-512 clients), with the shipped vLLM engine profile and nothing fitted
to these runs. Prints each run and the median / P90 error of mean TTFT and mean TPOT over the runs
below saturation (512 clients queue for minutes: left out).

    python benchmarks/moe_e2e_gpt_oss.py
"""

from __future__ import annotations

import pandas as pd

from cbsim import simulate
from cbsim.calibration.benchmarks import shared_h100_benchmarks
from cbsim.calibration.e2e import benchmark_scenario

SATURATED_CLIENTS = 512


def runs() -> pd.DataFrame:
    """The measured runs with cbsim's predictions beside them."""
    table = shared_h100_benchmarks()
    chosen = table[
        table["hf_model"].astype(str).str.endswith("gpt-oss-120b")
        & (table["engine"] == "vllm")
        & (table["mode"] == "agg")
    ]
    rows = []
    for _, measured in chosen.iterrows():
        row = measured.copy()
        row["model"], row["dtype"], row["kv_dtype"] = "gpt-oss-120b", "mxfp4", None
        summary = simulate(benchmark_scenario(row, "vllm")).summary
        rows.append(
            {
                "tp": int(row["tp"]),
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


def main() -> None:
    frame = runs()
    pd.set_option("display.width", 160)
    print(frame.round(4).to_string(index=False))
    kept = frame[frame["clients"] < SATURATED_CLIENTS]
    for name in ("ttft", "tpot"):
        ratio = kept[f"{name}_predicted_s"] / kept[f"{name}_measured_s"] - 1
        errors = ratio.abs() * 100
        print(
            f"{name.upper()}: {len(kept)} runs, median error {errors.median():.1f}%, "
            f"P90 {errors.quantile(0.9):.1f}%, median signed {100 * ratio.median():+.1f}%"
        )


if __name__ == "__main__":
    main()
