"""Refit the shipped engine profiles of vLLM, SGLang and TensorRT-LLM and write their report.

Usage: python tools/fit_engines.py [--out results/calibration/e2e]

Each engine's profile starts from its kernels per GPU and its documented defaults
(cbsim/studies/calibration/engines.py); its step overhead and front-end delay are fitted to the shipped
H100 closed-loop benchmarks (cbsim/studies/calibration/e2e.py), and every error is measured by full
simulation, in-sample and leave-one-model-out; the MoE models (tools/moe_held_out.py), which no term
is fitted on, are predicted by the new profiles. The profiles go to
cbsim/catalog/data/profiles/engines/<engine>.json; the tables (also quoted in the README) to
docs/engines.md and the --out folder. About ten minutes on two cores.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from moe_held_out import section as moe_section  # tools/moe_held_out.py, beside this script

from cbsim.cost.engine_profile import load_engine_profile, write_engine_profile
from cbsim.studies.calibration.e2e_report import (
    ARGONNE_FRAMEWORKS,
    SHARED_ENGINES,
    error_rows,
    fit_shared,
    overhead_at_batches,
    static_batch_check,
)
from cbsim.studies.calibration.errors import ape

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ROOT / "cbsim" / "catalog" / "data" / "profiles" / "engines"
DOCS = ROOT / "docs" / "engines.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "calibration" / "e2e")
    args = parser.parse_args()
    sections = [
        "# Engine profiles: fitted terms and end-to-end error\n",
        "Regenerate: `python tools/fit_engines.py` (full simulations of every benchmark).\n",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    for engine in SHARED_ENGINES:
        print(f"{engine}: fitting")
        fit = fit_shared(engine, _printer(engine))
        overhead = overhead_at_batches(fit.profile)
        errors = error_rows(fit.rows, ["model"])
        ttft = fit.profile.provenance["e2e_ttft"]
        tpot = fit.profile.provenance["e2e_tpot"]
        description = (
            f"{engine} fitted on {len(fit.rows)} closed-loop H100 benchmarks "
            f"({', '.join(sorted(fit.rows['model'].unique()))}); {ttft.holdout}: TTFT median "
            f"{100 * (ttft.holdout_median_ape or 0):.1f}%, TPOT median "
            f"{100 * (tpot.holdout_median_ape or 0):.1f}%."
        )
        profile = fit.profile.model_copy(update={"description": description})
        write_engine_profile(profile, ENGINES / f"{engine}.json")
        fit.rows.to_csv(args.out / f"{engine}_predictions.csv", index=False)
        sections.append(f"## {engine}\n\n{description}\n")
        step, front = profile.overhead, profile.frontend
        sections.append(
            f"Step: CPU {1e3 * step.cpu_s:.3f} ms + {1e6 * step.cpu_per_request_s:.2f} µs/request "
            f"+ {1e6 * step.cpu_per_token_s:.3f} µs/token "
            f"({'overlapped with the kernels' if step.overlap else 'not overlapped'}), serial "
            f"{1e3 * step.serial_s:.3f} ms + {1e6 * step.serial_per_request_s:.2f} µs/request; "
            f"front end {1e3 * front.request_s:.1f} ms per request. Fitted on batches of "
            f"{profile.fitted_range.batch_size if profile.fitted_range else '?'} requests.\n"
        )
        sections.append(errors.round(1).to_markdown(index=False) + "\n")
        sections.append(overhead.round(3).to_markdown(index=False) + "\n")
        excluded = fit.excluded.groupby("skipped").size().rename("benchmarks").reset_index()
        sections.append("Left out:\n\n" + excluded.to_markdown(index=False) + "\n")
        if engine in ARGONNE_FRAMEWORKS:
            load_engine_profile.cache_clear()
            check = static_batch_check(profile, ARGONNE_FRAMEWORKS[engine])
            errors_pct = 100.0 * ape(
                check["predicted_s"].to_numpy(), check["measured_s"].to_numpy()
            )
            check.to_csv(args.out / f"{engine}_a100_static.csv", index=False)
            sections.append(
                f"On LLM-Inference-Bench's A100 static batches ({len(check)} batches, another GPU "
                f"and older engine versions): median APE {float(_median(errors_pct)):.1f}%, "
                f"P90 {float(_p90(errors_pct)):.1f}%.\n"
            )
        print(f"{engine}: written")
    load_engine_profile.cache_clear()
    sections.append(moe_section(args.out))  # the MoE models, held out under the new profiles
    DOCS.write_text("\n".join(sections))
    print(f"wrote {DOCS}")


def _printer(engine: str) -> Callable[[str], None]:
    return lambda message: print(f"  {engine}: {message}")


def _median(values: object) -> float:
    import numpy as np

    return float(np.median(np.asarray(values)))


def _p90(values: object) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), 90))


if __name__ == "__main__":
    main()
