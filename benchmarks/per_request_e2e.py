"""Per-request validation on a GPU nothing was fitted on (not a test): the shipped vLLM profile,
fitted on H100 closed-loop benchmarks, replays the 56 A100 per-request runs of llm-d-benchmark
(Llama-3.1-70B, TP 2, vLLM V1 of May 2025; one replica or two) request by request
(:mod:`cbsim.calibration.per_request`), and, the other way round, vLLM's serial step time fitted on
those A100 runs predicts the H100 benchmarks (:mod:`cbsim.calibration.gpu_holdout`).

Prints per run the per-request median absolute % error of TTFT, TPOT and E2E and the signed %
error of the run's p50/p90/p99 (positive: cbsim slower), then the medians over stable runs
(measured TTFT p90 <= 2 s) and over all, then the leave-one-GPU-out table.

    python benchmarks/per_request_e2e.py [--engine PROFILE] [--no-reverse]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd

from cbsim.calibration import e2e, gpu_holdout, per_request
from cbsim.calibration.benchmarks import shared_h100_benchmarks
from cbsim.calibration.engines import base_profile

COLUMNS = [
    "run", "qps", "ttft_req_mape", "ttft_p50_err", "ttft_p90_err", "ttft_p99_err",
    "tpot_req_mape", "tpot_p50_err", "tpot_p99_err", "e2e_req_mape", "e2e_p50_err",
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="vllm", help="engine name or profile JSON")
    parser.add_argument("--no-reverse", action="store_true", help="skip the A100 -> H100 fit")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    errors = per_request.validate_runs(list(per_request.shared_runs()), args.engine)
    errors["run"] = errors["run"].str.replace("vllm-70b", "v70b")
    print(errors[COLUMNS].round(1).to_string(index=False))
    print()
    print(per_request.summarize_runs(errors).round(1).to_string(index=False))
    if args.no_reverse:
        return
    shared = shared_h100_benchmarks()
    rows, _ = e2e.usable(shared[shared["engine"] == "vllm"])
    with tempfile.TemporaryDirectory() as folder:
        files = e2e.ProfileFiles(Path(folder))
        sequences = e2e.record_sequences(rows, base_profile("vllm"), files)
        rows = rows[~e2e.below_kernel_floor(rows, sequences)].reset_index(drop=True)
        profile, table = gpu_holdout.a100_to_h100(rows, base_profile("vllm"), files)
    print()
    print(f"serial step time fitted on the A100 runs: {1e3 * profile.overhead.serial_s:.2f} ms")
    print(table.round(1).to_string(index=False))


if __name__ == "__main__":
    main()
