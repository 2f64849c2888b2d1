"""Refit every shipped calibration profile (and the static-batch engine profiles), write the error tables.

Usage: python tools/fit_profiles.py [--no-validate]

Writes cbsim/data/profiles/<gpu>/<name>.json (+ default.txt naming each GPU's default): one kernel
profile per GPU and serving engine with shipped kernel tables (``aiconfigurator-vllm`` everywhere,
B200 included; ``aiconfigurator-trtllm`` and ``aiconfigurator-sglang`` on H100 and H200), the
transferred MI300X profile and the Vidur profiles; the engine profiles
cbsim/data/profiles/engines/<engine>.json; and docs/calibration.md with every held-out error table
quoted in the README, the engine/vLLM kernel-time ratios and the cross-engine prediction check
(:mod:`cbsim.calibration.kernel_sources`). Takes about ten minutes on two cores (the
cross-validation refits every op family five times per GPU and engine).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from cbsim.calibration import kernel_sources, vidur
from cbsim.calibration.data import DEFAULT_ENGINE, measured_engines, measured_gpus
from cbsim.calibration.fit import (
    DEFAULT_NAME,
    TRANSFER_SOURCE,
    fit_profile,
    leave_one_gpu_out,
    percent_table,
    profile_name,
    transfer_profile,
)
from cbsim.calibration.overhead import STATIC_BATCH_ENGINES, fit_engine_profile
from cbsim.calibration.profile import load_profile, write_json
from cbsim.cost.engine_profile import load_engine_profile, write_engine_profile

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "cbsim" / "data" / "profiles"
DOCS = ROOT / "docs" / "calibration.md"


def markdown(frame: pd.DataFrame) -> str:
    return frame.to_markdown(index=False)


def ratio_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Kernel-time ratios for the docs: median and 10-90 % range, rounded."""
    out = frame.copy()
    for column in ("median_ratio", "p10_ratio", "p90_ratio"):
        out[column] = out[column].round(2)
    out["engine_faster_pct"] = out["engine_faster_pct"].round(1)
    return out


def kernel_sections(validate: bool) -> list[str]:
    """Fit and write every kernel calibration profile; the docs sections on their error."""
    sections: list[str] = []
    errors = []
    fitted = {}
    for gpu in measured_gpus():
        for engine in measured_engines(gpu):
            name = profile_name(engine)
            profile, table, _ = fit_profile(gpu, name=name, validate=validate, engine=engine)
            write_json(profile, PROFILES / gpu / f"{name}.json")
            errors.append(table)
            if engine == DEFAULT_ENGINE:
                fitted[gpu] = profile
            print(f"{gpu} {engine}: fitted")
        (PROFILES / gpu / "default.txt").write_text(DEFAULT_NAME + "\n")
        for stale in (PROFILES / gpu).glob("transfer-*.json"):  # measured now: no transfer
            stale.unlink()
    for target, source in TRANSFER_SOURCE.items():
        transferred = transfer_profile(fitted[source], target)
        write_json(transferred, PROFILES / target / f"{transferred.name}.json")
        (PROFILES / target / "default.txt").write_text(transferred.name + "\n")
    for gpu in ("a100-80gb", "h100-sxm"):
        write_json(vidur.fit_vidur_profile(gpu), PROFILES / gpu / "vidur.json")
    load_profile.cache_clear()
    if not validate:
        return sections
    table = percent_table(pd.concat(errors, ignore_index=True))
    sections.append(
        "## Per GPU, engine and op family (5-fold, whole shapes / head configurations held out)\n"
    )
    sections.append(
        "Engine: whose kernel tables the profile is fitted on (`aiconfigurator-<engine>`). "
        "TensorRT-LLM and SGLang all-reduce: the engine's own kernel where measured, NCCL beyond; "
        "vLLM: NCCL.\n"
    )
    sections.append(markdown(table) + "\n")
    transfer = percent_table(leave_one_gpu_out("h100-sxm", "h200"))
    sections.append("## H200 predicted from H100's fit and H200's spec sheet\n")
    sections.append(markdown(transfer) + "\n")
    engines = [e for e in measured_engines("h200") if e != DEFAULT_ENGINE]
    moved = [
        leave_one_gpu_out(
            "h100-sxm",
            "h200",
            engine=engine,
            gemm_dtypes=("bf16", "fp8"),
            kv_dtypes=("bf16", "fp8"),
            allreduce=True,
        )
        for engine in engines
    ]
    sections.append(
        "## Engine profiles: H200 predicted from H100's fit of the same engine and H200's "
        "spec sheet\n"
    )
    sections.append(markdown(percent_table(pd.concat(moved, ignore_index=True))) + "\n")
    ratios = pd.concat(
        [
            kernel_sources.matched_ratios(gpu, engine)
            for gpu in ("h100-sxm", "h200")
            for engine in measured_engines(gpu)
            if engine != DEFAULT_ENGINE
        ],
        ignore_index=True,
    )
    sections.append("## Measured kernel time, engine / vLLM, on identical shapes\n")
    sections.append(
        "Median and 10th-90th percentile of the ratio over every shape both engines measured "
        "(attention: each engine's default kernel, head widths 64 and 128; all-reduce: the "
        "engine's own kernel against NCCL).\n"
    )
    sections.append(markdown(ratio_table(ratios)) + "\n")
    predictions = pd.concat(
        [kernel_sources.cross_engine_predictions(engine) for engine in engines],
        ignore_index=True,
    )
    sections.append(
        "## An engine without tables on a GPU: what predicts its kernels (H200 held out)\n"
    )
    sections.append(
        "Each engine's H200 kernels predicted without its H200 tables: by H200's vLLM profile; "
        "by the engine's H100 profile on H200's spec sheet; by H200's vLLM profile times the "
        "engine/vLLM ratio of the two H100 profiles at the same shape, or times one median "
        "ratio per op family.\n"
    )
    sections.append(markdown(percent_table(predictions)) + "\n")
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
    sections.append("## Per-layer totals (linear layers + norms) against Vidur's operator tables\n")
    sections.append(
        markdown(percent_table(pd.DataFrame(layer_rows).assign(family="layer", method="-"))) + "\n"
    )
    disagreement = vidur.gemm_disagreement_summary(vidur.gemm_disagreement("h100-sxm"))
    sections.append(
        "## Cross-source floor: Vidur vs AI Configurator on the same H100 GEMM shapes\n"
    )
    sections.append(markdown(disagreement) + "\n")
    return sections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-validate", action="store_true")
    args = parser.parse_args()
    validate = not args.no_validate
    sections: list[str] = [
        "# Calibration: error on held-out data\n",
        "Regenerate: `python tools/fit_profiles.py`.\n",
        *kernel_sections(validate),
    ]
    engine_rows = []
    for engine in STATIC_BATCH_ENGINES:
        engine_profile, _ = fit_engine_profile(engine)
        write_engine_profile(engine_profile, PROFILES / "engines" / f"{engine}.json")
        stats = engine_profile.provenance["e2e"]
        step = engine_profile.overhead
        engine_rows.append(
            {
                "engine": engine,
                "batches": stats.rows,
                "overhead_ms": 1e3 * step.cpu_s,
                "per_request_us": 1e6 * step.cpu_per_request_s,
                "per_token_us": 1e6 * step.cpu_per_token_s,
                "median_ape_pct": 100 * (stats.holdout_median_ape or float("nan")),
                "p90_ape_pct": 100 * (stats.holdout_p90_ape or float("nan")),
            }
        )
        print(f"engine {engine}: fitted")
    load_engine_profile.cache_clear()
    sections.append(
        "## Serving-engine overhead of engines without closed-loop benchmarks "
        "(A100 static batches, leave-one-model-out; vLLM, SGLang and TensorRT-LLM: "
        "`python tools/fit_engines.py`, docs/engines.md)\n"
    )
    sections.append(markdown(pd.DataFrame(engine_rows).round(2)) + "\n")
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text("\n".join(sections))
    print(f"wrote {DOCS}")


if __name__ == "__main__":
    main()
