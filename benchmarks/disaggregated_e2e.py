"""Disaggregated serving end to end (not a test): cbsim against the disaggregated runs of NVIDIA
AI Configurator's measured H100 serving benchmarks (the shipped silicon table), with the shipped
engine profiles and nothing fitted to these runs.

Each measured run becomes a scenario: its prefill and decode pools (workers, TP, attention DP,
expert parallelism), a closed loop of its concurrency (where the table leaves it empty, the
decode pool's batch size x workers x attention DP, as :mod:`cbsim.studies.calibration.benchmarks` reads
it), fixed prompt and output lengths, the KV crossing by RDMA between nodes or NVLink within one
(cbsim's packing, :mod:`cbsim.memory.kv_transfer`); DeepSeek's 16-GPU instances span two nodes, their
collectives' inter-node part priced over the NICs (:meth:`cbsim.cost.roofline.CostModel.allreduce_time`,
a model: no multi-node NCCL table is shipped). Runs cbsim cannot lay out are listed with the reason.

Prints every run's measured and simulated mean TTFT and TPOT and their errors, the median over
the runs simulated and per configuration (engine, model, lengths, layout) (each configuration is its own check: nothing is fitted, so every run is
held out).

    python benchmarks/disaggregated_e2e.py [--requests-per-client N]
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import pandas as pd

from cbsim import simulate
from cbsim.common.errors import CbsimError
from cbsim.run.loading import load_scenario
from cbsim.studies.calibration.benchmarks import shared_h100_benchmarks

MODELS = {
    "Qwen3-32B": "qwen3-32b",
    "Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "DeepSeek-V3": "deepseek-v3",
    "DeepSeek-R1": "deepseek-v3",  # the same architecture and shapes
}


def _count(value: object, default: int = 1) -> int:
    if value is None or pd.isna(value):  # type: ignore[call-overload]
        return default
    number = float(value)  # type: ignore[arg-type]
    return int(number) if math.isfinite(number) and number >= 1 else default


def pool(row: pd.Series, side: str) -> dict[str, Any]:
    """One pool of a measured run as cbsim pool keys."""
    tp, dp = _count(row[f"{side}_tp"]), _count(row[f"{side}_dp"])
    keys: dict[str, Any] = {"replicas": _count(row[f"{side}_workers"]), "tp": tp}
    if dp > 1:
        keys |= {"dp": dp, "ep": tp * dp}
    elif _count(row[f"{side}_ep"]) > 1:
        keys["ep"] = tp
    if _count(row[f"{side}_pp"]) > 1:
        keys["pp"] = _count(row[f"{side}_pp"])
    return keys


def clients(row: pd.Series) -> int:
    return _count(row["concurrency"])


def scenario_of(row: pd.Series, per_client: int) -> dict[str, Any]:
    model = MODELS[str(row["hf_model"]).rsplit("/", 1)[-1]]
    count = clients(row)
    return {
        "name": "disaggregated-benchmark",
        "workload": {
            "num_requests": max(per_client * count, 64),
            "arrival": {"kind": "closed_loop", "concurrency": count},
            "prompt_tokens": {"kind": "fixed", "value": int(row["isl"])},
            "output_tokens": {"kind": "fixed", "value": int(row["osl"])},
        },
        "cluster": {
            "model": model,
            "gpu": "h100-sxm",
            "dtype": str(row["dtype"]),
            "engine": str(row["engine"]),
            "router": "least_loaded",
            "disaggregation": {"prefill": pool(row, "prefill"), "decode": pool(row, "decode")},
        },
    }


def layout(row: pd.Series) -> str:
    def side(name: str) -> str:
        keys = pool(row, name)
        extra = "".join(f" {k}{v}" for k, v in keys.items() if k in ("dp", "ep", "pp"))
        return f"{keys['replicas']}x tp{keys['tp']}{extra}"

    return f"{side('prefill')} | {side('decode')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests-per-client", type=int, default=4)
    args = parser.parse_args()
    table = shared_h100_benchmarks()
    runs = table[table["mode"] == "disagg"].reset_index(drop=True)
    rows = []
    for _, row in runs.iterrows():
        name = str(row["hf_model"]).rsplit("/", 1)[-1]
        base = {
            "engine": row["engine"],
            "model": name,
            "isl/osl": f"{int(row['isl'])}/{int(row['osl'])}",
            "clients": clients(row),
            "layout": layout(row),
            "ttft_s": float(row["ttft_mean_s"]),
            "tpot_ms": 1e3 * float(row["tpot_mean_s"]),
        }
        try:
            scenario = load_scenario(scenario_of(row, args.requests_per_client))
        except CbsimError as err:
            rows.append(base | {"note": f"not modelled: {err}"})
            continue
        summary = simulate(scenario).summary
        sim_ttft, sim_tpot = summary["ttft_mean_s"], 1e3 * summary["tpot_mean_s"]
        rows.append(
            base
            | {
                "sim_ttft_s": sim_ttft,
                "sim_tpot_ms": sim_tpot,
                "ttft_err_%": 100 * (sim_ttft / base["ttft_s"] - 1),
                "tpot_err_%": 100 * (sim_tpot / base["tpot_ms"] - 1),
            }
        )
        print(pd.DataFrame([rows[-1]]).to_string(index=False, header=False), flush=True)
    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_colwidth", 90):
        shown = frame.drop(columns=["note"], errors="ignore").dropna()
        print(shown.round(3).to_string(index=False))
        simulated = frame.dropna(subset=["tpot_err_%"]) if "tpot_err_%" in frame else frame[:0]
        print(
            f"\n{len(simulated)} of {len(frame)} runs simulated: mean TTFT error median "
            f"{simulated['ttft_err_%'].abs().median():.1f}%, mean TPOT error median "
            f"{simulated['tpot_err_%'].abs().median():.1f}% (absolute)"
        )
        groups = simulated.assign(
            ttft=simulated["ttft_err_%"].abs(), tpot=simulated["tpot_err_%"].abs()
        ).groupby(["engine", "model", "isl/osl", "layout"])
        print("\nper configuration (median absolute error over its concurrencies, %):")
        print(
            groups.agg(
                runs=("tpot", "size"),
                ttft=("ttft", "median"),
                tpot=("tpot", "median"),
                tpot_signed=("tpot_err_%", "median"),
            )
            .round(1)
            .to_string()
        )
        if "note" in frame:
            skipped = frame[frame["note"].notna()]
            for (model, note), group in skipped.groupby(["model", "note"]):
                print(f"{len(group)} {model} runs {note}")


if __name__ == "__main__":
    main()
