"""Fit the shipped ``vllm-v0`` engine profile (vLLM's V0 engine) and print its held-out error.

Usage: python tools/fit_vllm_v0.py

vLLM's V0 engine (0.6 and earlier) runs one synchronous loop per step, so its CPU work adds to the
kernels. Its documented defaults (cbsim/studies/calibration/engines.py) and the A100 kernel profile give
each of LLM-Inference-Bench's A100 vLLM static batches a kernel time and step counts; a constant
and a per-sequence cost per step are fitted to them (cbsim.studies.calibration.overhead), leave one model
out. Writes cbsim/catalog/data/profiles/engines/vllm-v0.json, then checks it by full simulation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cbsim.cost.engine_profile import write_engine_profile
from cbsim.studies.calibration.e2e_report import static_batch_check
from cbsim.studies.calibration.engines import base_profile
from cbsim.studies.calibration.errors import ape
from cbsim.studies.calibration.overhead import fit_engine_version

TARGET = Path(__file__).resolve().parents[1] / "cbsim" / "catalog" / "data" / "profiles" / "engines"


def main() -> None:
    profile, held = fit_engine_version(base_profile("vllm-v0"))
    write_engine_profile(profile, TARGET / "vllm-v0.json")
    step = profile.overhead
    print(profile.description)
    print(f"step: {1e3 * step.cpu_s:.3f} ms + {1e6 * step.cpu_per_request_s:.1f} µs per sequence")
    held = held.assign(error=100 * (held["predicted_s"] / held["measured_s"] - 1))
    print(held.groupby("model")["error"].agg(lambda e: float(np.median(np.abs(e)))).round(1))
    check = static_batch_check(profile, "vLLM")
    errors = 100 * ape(check["predicted_s"].to_numpy(), check["measured_s"].to_numpy())
    print(
        f"full simulation of the fitted profile (in-sample): median {np.median(errors):.1f}%, "
        f"P90 {np.percentile(errors, 90):.1f}%"
    )


if __name__ == "__main__":
    main()
