"""Mixture-of-experts end-to-end error on the shipped H100 benchmarks, into docs/engines.md.

Usage: python tools/moe_held_out.py [--out results/calibration/e2e]

Simulates every unsaturated aggregated MoE run cbsim can lay out (cbsim/studies/calibration/moe_e2e.py:
gpt-oss-120b under vLLM and TensorRT-LLM, Qwen3-235B-A22B fp8 under TensorRT-LLM) with the shipped
engine
profiles, whose terms were fitted on dense models only: each MoE model is held out. Writes the
predictions to the --out folder and replaces the "Mixture-of-experts models" section of
docs/engines.md (tools/fit_engines.py writes the same section). A few minutes on two cores.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from cbsim.studies.calibration import moe_e2e

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "engines.md"
HEADING = "## Mixture-of-experts models (held out: no MoE run fitted)"
NOTE = (
    "Before the served router's expert count (every (token, expert) pair a new expert, as the "
    "tables route): gpt-oss TPOT 40.8% median / 58.9% P90, Qwen3 20.6% / 48.5% (+19.7% signed; "
    "+41% at TP 8 with 16 clients), TTFT unchanged. Pricing the busiest GPU of the EP group "
    "under independent routing instead of the mean was tried and not kept: Qwen3 TPOT 23.0% / "
    "36.5%, worse at 4 clients (TP 4: +26.5% against +17.5%), where the imbalance is the only "
    "difference. That choice was made on these runs; gpt-oss (TP only) does not depend on it. "
    "Still too slow: vLLM's 2.16 ms serial step (fitted on 0.11-0.12 dense runs; 58 of these 60 "
    "runs are vLLM 0.18). Qwen3 under TensorRT-LLM priced from vLLM's MoE tables (before "
    "TensorRT-LLM's own): TPOT 13.7% / 29.9% (+12.8% signed; TP 4 21.9%, TP 8 9.7%). gpt-oss "
    "under TensorRT-LLM (3 runs, 192-384 clients) is far too fast (-43%): its runs record a "
    "per-rank batch of clients / TP, as if attention ran data-parallel, which cbsim cannot lay "
    "out with the experts split by TP, and TensorRT-LLM measured its MXFP4 MoE under EP only, so "
    "its TP layers keep vLLM's kernel.\n"
)


def section(out: Path | None = None) -> str:
    """The Markdown section: per model and TP degree, median / P90 / signed % error."""
    rows = []
    for name, family in moe_e2e.FAMILIES.items():
        print(f"{name}: simulating")
        predicted = moe_e2e.predict(family, moe_e2e.measured_runs(family), print)
        if out is not None:
            predicted.to_csv(out / f"moe_{name}_predictions.csv", index=False)
        groups = [(f"TP {tp}", part) for tp, part in predicted.groupby("tp")]
        for label, part in [*groups, ("all", predicted)]:
            errors = moe_e2e.errors(part)
            rows.append({"model": name, "engine": family.engine, "layout": label, **errors})
    table = pd.DataFrame(rows)
    table["runs"] = table["runs"].astype(int)
    return (
        f"{HEADING}\n\n"
        "Mean TTFT and TPOT of every aggregated run below 512 clients, simulated with the shipped "
        "profile (its step terms fitted on the dense models above); median / P90 absolute and "
        "median signed % error (`python tools/moe_held_out.py`). Routed experts are priced from the "
        "engine's own fused-MoE tables (vLLM's, TensorRT-LLM's) with the experts a served router "
        "reads (`cbsim/cost/moe.py`); by concurrency band in [moe.md](moe.md).\n\n"
        + table.round(1).to_markdown(index=False)
        + "\n\n"
        + NOTE
    )


def replace_section(text: str, new: str) -> str:
    """``text`` with its MoE section replaced by ``new`` (appended where there is none)."""
    start = text.find(HEADING)
    if start < 0:
        return text.rstrip("\n") + "\n\n" + new
    end = text.find("\n## ", start + len(HEADING))
    return text[:start] + new + ("" if end < 0 else text[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "calibration" / "e2e")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    new = section(args.out)
    DOCS.write_text(replace_section(DOCS.read_text(), new))
    print(f"wrote {DOCS}")


if __name__ == "__main__":
    main()
