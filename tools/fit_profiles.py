"""Refit every shipped calibration profile and engine overhead profile, and write the error tables.

Usage: python tools/fit_profiles.py [--no-validate]

Writes cbsim/data/profiles/<gpu>/<name>.json (+ default.txt naming each GPU's default), the engine
profiles cbsim/data/profiles/engines/<engine>.json, and docs/calibration.md with every held-out
error table quoted in the README. Takes a few minutes on two cores (the cross-validation refits
every op family five times per GPU).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from cbsim.calibration import vidur
from cbsim.calibration.data import measured_gpus
from cbsim.calibration.fit import (
    DEFAULT_NAME,
    TRANSFER_SOURCE,
    fit_profile,
    leave_one_gpu_out,
    percent_table,
    transfer_profile,
)
from cbsim.calibration.overhead import ENGINES, fit_engine_profile
from cbsim.calibration.profile import load_engine_profile, load_profile, write_json

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "cbsim" / "data" / "profiles"
DOCS = ROOT / "docs" / "calibration.md"


def markdown(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-validate", action="store_true")
    args = parser.parse_args()
    validate = not args.no_validate
    sections: list[str] = [
        "# Calibration: error on held-out data\n",
        "Regenerate: `python tools/fit_profiles.py`.\n",
    ]
    errors = []
    fitted = {}
    for gpu in measured_gpus():
        profile, table, _ = fit_profile(gpu, name=DEFAULT_NAME, validate=validate)
        write_json(profile, PROFILES / gpu / f"{DEFAULT_NAME}.json")
        (PROFILES / gpu / "default.txt").write_text(DEFAULT_NAME + "\n")
        fitted[gpu] = profile
        errors.append(table)
        print(f"{gpu}: fitted")
    for target, source in TRANSFER_SOURCE.items():
        moved = transfer_profile(fitted[source], target)
        write_json(moved, PROFILES / target / f"{moved.name}.json")
        (PROFILES / target / "default.txt").write_text(moved.name + "\n")
    for gpu in ("a100-80gb", "h100-sxm"):
        write_json(vidur.fit_vidur_profile(gpu), PROFILES / gpu / "vidur.json")
    load_profile.cache_clear()
    if validate:
        table = percent_table(pd.concat(errors, ignore_index=True))
        sections.append(
            "## Per GPU and op family (5-fold, whole shapes / head configurations held out)\n"
        )
        sections.append(markdown(table) + "\n")
        transfer = percent_table(leave_one_gpu_out("h100-sxm", "h200"))
        sections.append("## H200 predicted from H100's fit and H200's spec sheet\n")
        sections.append(markdown(transfer) + "\n")
        layer_rows = []
        for gpu, held in (("a100-80gb", "Llama-2-7b-hf"), ("a100-80gb", "Meta-Llama-3-8B")):
            profile = vidur.fit_vidur_profile(gpu, holdout_model=held)
            report = vidur.error_report(
                vidur.layer_totals(gpu, profile, holdout=vidur.Holdout(model=held))
            )
            layer_rows.append({"gpu": gpu, "profile": f"vidur, {held} held out", **report})
        for gpu in ("a100-80gb", "h100-sxm"):
            report = vidur.error_report(vidur.layer_totals(gpu, load_profile(gpu)))
            layer_rows.append({"gpu": gpu, "profile": f"{DEFAULT_NAME} (other source)", **report})
        sections.append(
            "## Per-layer totals (linear layers + norms) against Vidur's operator tables\n"
        )
        sections.append(
            markdown(percent_table(pd.DataFrame(layer_rows).assign(family="layer", method="-")))
            + "\n"
        )
        disagreement = vidur.gemm_disagreement_summary(vidur.gemm_disagreement("h100-sxm"))
        sections.append(
            "## Cross-source floor: Vidur vs AI Configurator on the same H100 GEMM shapes\n"
        )
        sections.append(markdown(disagreement) + "\n")
    engine_rows = []
    for engine in ENGINES.values():
        engine_profile, _ = fit_engine_profile(engine)
        write_json(engine_profile, PROFILES / "engines" / f"{engine}.json")
        stats = engine_profile.provenance["e2e"]
        engine_rows.append(
            {
                "engine": engine,
                "batches": stats.rows,
                "overhead_ms": 1e3 * engine_profile.overhead_s,
                "per_request_us": 1e6 * engine_profile.overhead_per_request_s,
                "per_token_us": 1e6 * engine_profile.overhead_per_token_s,
                "median_ape_pct": 100 * (stats.holdout_median_ape or float("nan")),
                "p90_ape_pct": 100 * (stats.holdout_p90_ape or float("nan")),
            }
        )
        print(f"engine {engine}: fitted")
    load_engine_profile.cache_clear()
    sections.append("## Serving-engine overhead (A100 static batches, leave-one-model-out)\n")
    sections.append(markdown(pd.DataFrame(engine_rows).round(2)) + "\n")
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text("\n".join(sections))
    print(f"wrote {DOCS}")


if __name__ == "__main__":
    main()
