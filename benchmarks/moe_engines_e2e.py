"""Mixture-of-experts serving per engine (not a test): cbsim's mean TPOT and TTFT against NVIDIA
AI Configurator's measured H100 serving benchmarks (the shipped silicon table) for every MoE run
cbsim can lay out, by engine, model and concurrency band (<= 32, 33-99, >= 100 clients), with the
shipped profiles and nothing fitted to these runs:

* aggregated runs (:mod:`cbsim.studies.calibration.moe_e2e`): gpt-oss-120b under vLLM and TensorRT-LLM,
  Qwen3-235B-A22B fp8 under TensorRT-LLM (below the saturating 512 clients);
* disaggregated runs (``benchmarks/disaggregated_e2e.py``'s scenarios): DeepSeek-R1/V3 fp8 under
  SGLang and TensorRT-LLM, Qwen3-235B-A22B fp8 under vLLM; runs cbsim cannot lay out are counted
  and skipped. MiniMax-M2.5 (vLLM) is not in cbsim's catalog and is not simulated.

Writes every run (measured, predicted, band) to ``--out`` as CSV; with ``--before FILE`` (an
earlier run's CSV, e.g. from the commit before a change) prints both side by side. First it prints
the MoE step itself at 128 and 256 tokens (a decode step of 100+ sequences) for each served
layout: the engine's measured kernel (its table's row, balanced routing), cbsim's price from
vLLM's H100 fit (what SGLang and TensorRT-LLM took before they had their own) and from the
engine's own fit (table routing both, to compare with the row).

    python benchmarks/moe_engines_e2e.py --out results/moe_engines_after.csv [--before FILE]
        [--only agg|disagg|kernels] [--requests-per-client N]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd

from cbsim import simulate
from cbsim.common.errors import CbsimError
from cbsim.cost.roofline import CostModel
from cbsim.run.loading import load_scenario
from cbsim.studies.calibration.benchmarks import shared_h100_benchmarks
from cbsim.studies.calibration.data import engine_name, load_table
from cbsim.studies.calibration.moe_e2e import FAMILIES, band_errors, measured_runs, predict

HERE = Path(__file__).resolve().parent
STEP_LAYOUTS: tuple[tuple[str, str, int, int, str], ...] = (
    # (model, engine, tp, ep, dtype) as the measured H100 runs serve them
    ("qwen3-235b-a22b", "tensorrt-llm", 4, 4, "fp8"),
    ("qwen3-235b-a22b", "tensorrt-llm", 8, 8, "fp8"),
    ("deepseek-v3", "tensorrt-llm", 16, 16, "fp8"),
    ("deepseek-v3", "sglang", 16, 1, "fp8"),
    ("gpt-oss-120b", "tensorrt-llm", 4, 1, "mxfp4"),
)
STEP_TOKENS = (128, 256)
KEYS = ["engine", "model", "mode"]
MOE_DISAGG = ("DeepSeek", "Qwen3-235B")


def _disaggregated() -> ModuleType:
    """``benchmarks/disaggregated_e2e.py`` (its scenario of a measured disaggregated run)."""
    spec = importlib.util.spec_from_file_location(
        "disaggregated_e2e", HERE / "disaggregated_e2e.py"
    )
    if spec is None or spec.loader is None:
        raise SystemExit("benchmarks/disaggregated_e2e.py is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def aggregated_runs() -> pd.DataFrame:
    """Every family's runs, predicted."""
    frames = []
    for name, family in FAMILIES.items():
        print(f"{name}: simulating", file=sys.stderr)
        runs = predict(family, measured_runs(family), lambda line: print(line, file=sys.stderr))
        frames.append(runs.assign(model=family.model, mode="agg"))
    return pd.concat(frames, ignore_index=True)


def disaggregated_runs(per_client: int) -> pd.DataFrame:
    """Every disaggregated MoE run cbsim can lay out, predicted."""
    disagg = _disaggregated()
    table = shared_h100_benchmarks()
    chosen = table[
        (table["mode"] == "disagg")
        & table["hf_model"].astype(str).str.contains("|".join(MOE_DISAGG))
    ]
    rows = []
    for _, row in chosen.iterrows():
        name = str(row["hf_model"]).rsplit("/", 1)[-1]
        base = {
            "engine": str(row["engine"]),
            "model": name,
            "mode": "disagg",
            "concurrency": disagg.clients(row),
            "layout": disagg.layout(row),
            "ttft_mean_s": float(row["ttft_mean_s"]),
            "tpot_mean_s": float(row["tpot_mean_s"]),
        }
        try:
            scenario = load_scenario(disagg.scenario_of(row, per_client))
        except CbsimError as err:
            print(f"{name} {base['engine']}: not modelled: {err}", file=sys.stderr)
            continue
        summary = simulate(scenario).summary
        rows.append(
            base
            | {
                "predicted_ttft_s": float(summary["ttft_mean_s"]),
                "predicted_tpot_s": float(summary["tpot_mean_s"]),
            }
        )
        print(f"{name} {base['engine']} {base['concurrency']} clients: done", file=sys.stderr)
    return pd.DataFrame(rows)


def _measured_step(cost: CostModel, engine: str, tokens: int) -> float:
    """The engine's table row for ``cost``'s MoE layer at ``tokens`` (balanced), NaN if none."""
    pricing, m = cost._moe, cost.model
    assert pricing is not None
    table = load_table("moe", "h100-sxm", engine=engine)
    row = table[
        (table["moe_dtype"].astype(str) == pricing.moe_dtype)
        & (table["distribution"].astype(str) == "balanced")
        & (table["hidden_size"] == m.hidden_size)
        & (table["inter_size"] == m.expert_intermediate_size)
        & (table["topk"] == m.experts_per_token)
        & (table["num_experts"] == m.num_experts)
        & (table["moe_tp_size"] == pricing.tp // pricing.ep)
        & (table["moe_ep_size"] == pricing.ep)
        & (table["num_tokens"] == tokens)
    ]
    return float(row["latency_s"].iloc[0]) if len(row) else float("nan")


def step_table() -> pd.DataFrame:
    """The MoE step at :data:`STEP_TOKENS` per served layout (see the module docstring), µs."""
    records = []
    for model, engine, tp, ep, dtype in STEP_LAYOUTS:
        own = CostModel(model, "h100-sxm", tp=tp, ep=ep, dtype=dtype, engine=engine)
        vllm = CostModel(model, "h100-sxm", tp=tp, ep=ep, dtype=dtype, engine=None,
                         calibration="aiconfigurator-vllm")  # fmt: skip
        assert own._moe is not None and vllm._moe is not None
        for tokens in STEP_TOKENS:
            measured = _measured_step(own, engine_name(engine), tokens)
            before, after = vllm._moe.table_time(tokens), own._moe.table_time(tokens)
            records.append(
                {
                    "model": model,
                    "engine": engine,
                    "layout": f"TP {tp} EP {ep}",
                    "tokens": tokens,
                    "measured_us": 1e6 * measured,
                    "vllm_fit_us": 1e6 * before,
                    "own_fit_us": 1e6 * after,
                    "vllm_fit_pct": 100 * (before / measured - 1),
                    "own_fit_pct": 100 * (after / measured - 1),
                    "source": own._moe.source,
                }
            )
    return pd.DataFrame(records).round(1)


def band_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Median / P90 / signed TPOT and TTFT error per engine, model, mode and concurrency band."""
    frames = [
        band_errors(group).assign(**dict(zip(KEYS, map(str, key), strict=True)))
        for key, group in runs.groupby(KEYS, sort=True)
    ]
    table = pd.concat(frames, ignore_index=True)
    table["runs"] = table["runs"].astype(int)
    columns = [*KEYS, "band", "runs", "tpot_median_pct", "tpot_p90_pct", "tpot_signed_pct"]
    return table[[*columns, "ttft_median_pct", "ttft_signed_pct"]].round(1)


def side_by_side(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """The TPOT columns of two band tables next to each other."""
    key = [*KEYS, "band", "runs"]
    tpot = ["tpot_median_pct", "tpot_p90_pct", "tpot_signed_pct"]
    return before[key + tpot].merge(
        after[key + tpot], on=key, how="outer", suffixes=("_before", "_after")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--only", choices=("agg", "disagg", "kernels"))
    parser.add_argument("--requests-per-client", type=int, default=4)
    args = parser.parse_args()
    with pd.option_context("display.width", 250):
        print("MoE step (one layer's routed experts, µs):")
        print(step_table().to_string(index=False) + "\n")
    if args.only == "kernels":
        return
    frames = []
    if args.only in (None, "agg"):
        frames.append(aggregated_runs())
    if args.only in (None, "disagg"):
        frames.append(disaggregated_runs(args.requests_per_client))
    runs = pd.concat(frames, ignore_index=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runs.to_csv(args.out, index=False)
    after = band_table(runs)
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        print(after.to_string(index=False))
        if args.before is not None:
            print("\nTPOT error before / after (%):")
            before = band_table(pd.read_csv(args.before))
            print(side_by_side(before, after).to_string(index=False))


if __name__ == "__main__":
    main()
