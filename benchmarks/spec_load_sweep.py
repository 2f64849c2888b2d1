"""Speculative decoding under load: where it helps, where it hurts, and what the goodput policy does.

Llama-3-8B on one H100 (vllm scheduler) with an EAGLE-style proposer; each request has its own
conditional acceptance α drawn from Beta(mean 0.6, concentration 8), short chat requests (prompt and
output about 300 tokens each, so decode batches reach the hundreds). For request rates from light
load to saturation it simulates: no speculation, fixed k ∈ {1, 3, 5}, and the batch-aware
``goodput`` policy, and reports mean TPOT and output throughput per load, the crossover where
fixed-k speculation starts to hurt, and how far goodput is from the best alternative at each load.

Usage: python benchmarks/spec_load_sweep.py [--requests N] [--out DIR]
Writes DIR/sweep.csv, DIR/table.md and DIR/tpot_throughput.png (DIR defaults to
results/spec-load-sweep).
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

import cbsim

RATES = (2.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0)
POLICIES: dict[str, dict[str, Any]] = {
    "no-spec": {"enabled": False},
    "fixed k=1": {"enabled": True, "policy": {"kind": "fixed", "k": 1}},
    "fixed k=3": {"enabled": True, "policy": {"kind": "fixed", "k": 3}},
    "fixed k=5": {"enabled": True, "policy": {"kind": "fixed", "k": 5}},
    "goodput": {"enabled": True, "policy": {"kind": "goodput", "k_max": 8}},
}


def scenario(
    rate: float, policy: str, requests: int, calibration: str = "default"
) -> dict[str, Any]:
    """One sweep point; ``calibration="none"`` prices it on the bare roofline (uncalibrated, no
    engine overhead) instead of the calibrated H100 profile and vLLM's engine profile."""
    speculative = {
        "proposer": {"kind": "eagle"},
        "acceptance": {"kind": "per_request", "mean": 0.6, "concentration": 8},
        **POLICIES[policy],
    }
    return {
        "name": "spec-load-sweep",
        "seed": 11,
        "workload": {
            "num_requests": requests,
            "arrival": {"kind": "poisson", "rate": rate},
            "prompt_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.8, "max": 2048},
            "output_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.6, "max": 1024},
        },
        "cluster": {
            "model": "llama-3-8b",
            "gpu": "h100-sxm",
            "calibration": calibration,
            "engine": "none" if calibration == "none" else "vllm",
        },
        "scheduler": {"kind": "prefill_first"},
        "speculative": speculative,
    }


def run_point(args: tuple[float, str, int] | tuple[float, str, int, str]) -> dict[str, Any]:
    rate, policy, requests, *rest = args
    calibration = rest[0] if rest else "default"
    summary = cbsim.simulate(
        cbsim.load_scenario(scenario(rate, policy, requests, calibration))
    ).summary
    return {
        "rate_rps": rate,
        "policy": policy,
        "tpot_mean_ms": summary["tpot_mean_s"] * 1e3,
        "tpot_p50_ms": summary["tpot_p50_s"] * 1e3,
        "output_tokens_per_s": summary["output_tokens_per_s"],
        "ttft_p50_s": summary["ttft_p50_s"],
        "mean_k": summary["mean_k"],
        "acceptance_rate": summary["acceptance_rate"],
        "mean_batch_size": summary["mean_batch_size"],
    }


def sweep(requests: int, workers: int = 2, calibration: str = "default") -> pd.DataFrame:
    points = [(rate, policy, requests, calibration) for rate in RATES for policy in POLICIES]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        rows = list(pool.map(run_point, points))
    return pd.DataFrame(rows)


def goodput_gap(frame: pd.DataFrame) -> pd.DataFrame:
    """Per load: goodput's mean TPOT and throughput against the best of no-spec and fixed k."""
    rows = []
    for rate, group in frame.groupby("rate_rps"):
        others = group[group.policy != "goodput"]
        mine = group[group.policy == "goodput"].iloc[0]
        best_tpot = others.tpot_mean_ms.min()
        best_tput = others.output_tokens_per_s.max()
        rows.append(
            {
                "rate_rps": rate,
                "best_alternative_tpot": others.sort_values("tpot_mean_ms").policy.iloc[0],
                "goodput_tpot_vs_best_pct": 100.0 * (mine.tpot_mean_ms / best_tpot - 1.0),
                "goodput_throughput_vs_best_pct": 100.0
                * (mine.output_tokens_per_s / best_tput - 1.0),
                "goodput_mean_k": mine.mean_k,
            }
        )
    return pd.DataFrame(rows)


def plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_tpot, ax_tput) = plt.subplots(1, 2, figsize=(11, 4.2))
    for policy, group in frame.groupby("policy", sort=False):
        style = {"linewidth": 2.5, "color": "black"} if policy == "goodput" else {}
        ax_tpot.plot(group.rate_rps, group.tpot_mean_ms, marker="o", label=policy, **style)
        ax_tput.plot(group.rate_rps, group.output_tokens_per_s, marker="o", label=policy, **style)
    ax_tpot.set(
        xlabel="request rate (req/s)", ylabel="mean TPOT (ms)", title="Time per output token"
    )
    ax_tput.set(xlabel="request rate (req/s)", ylabel="output tokens/s", title="Throughput")
    for ax in (ax_tpot, ax_tput):
        ax.grid(alpha=0.3)
    ax_tpot.legend()
    fig.suptitle(
        "llama-3-8b / h100-sxm / vllm, EAGLE proposer, per-request α ~ Beta(mean 0.6, concentration 8)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--out", type=Path, default=Path("results/spec-load-sweep"))
    parser.add_argument(
        "--calibration",
        default="default",
        help="'default' (calibrated H100 + vLLM engine profile) or 'none' (bare roofline)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    frame = sweep(args.requests, calibration=args.calibration)
    frame.to_csv(args.out / "sweep.csv", index=False)
    tpot = frame.pivot(index="rate_rps", columns="policy", values="tpot_mean_ms")[list(POLICIES)]
    tput = frame.pivot(index="rate_rps", columns="policy", values="output_tokens_per_s")[
        list(POLICIES)
    ]
    gap = goodput_gap(frame)
    text = (
        "Mean TPOT (ms)\n\n"
        + tpot.round(2).to_markdown()
        + "\n\nOutput tokens/s\n\n"
        + tput.round(0).to_markdown()
        + "\n\nGoodput policy vs the best alternative\n\n"
        + gap.round(2).to_markdown(index=False)
        + "\n"
    )
    (args.out / "table.md").write_text(text)
    plot(frame, args.out / "tpot_throughput.png")
    print(text)
    print(f"wrote {args.out}/sweep.csv, table.md, tpot_throughput.png")


if __name__ == "__main__":
    main()
