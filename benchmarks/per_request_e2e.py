"""Per-request validation on a GPU nothing was fitted on (not a test): the llm-d-benchmark runs
(Llama-3.1-70B, TP 2 on A100s, vLLM 0.8.5; one replica or two behind a Kubernetes Service)
replayed request by request (:mod:`cbsim.studies.calibration.per_request`) under ``vllm@0.8.5``: its
KV cache as that release sizes it, its synchronous step, the front end fitted on these runs'
light load (leave-one-workload-out below), two replicas reached at random as kube-proxy does.

Prints per run the per-request median absolute % error of TTFT, TPOT and E2E and the signed %
error of the run's p50/p90/p99 (positive: cbsim slower), the medians over stable runs (measured
TTFT p90 <= 2 s) and over all; for the overloaded runs the tokens in flight, throughput and TTFT
p50 (:mod:`cbsim.studies.calibration.saturation`); the knee of each deployment; the front end fitted
leaving each workload out (:mod:`cbsim.studies.calibration.frontend_fit`); then, unless --no-reverse,
the leave-one-GPU-out table.

    python benchmarks/per_request_e2e.py [--engine PROFILE] [--no-reverse] [--no-frontend-fit]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd

from cbsim.studies.calibration import e2e, frontend_fit, gpu_holdout, per_request, saturation
from cbsim.studies.calibration.benchmarks import shared_h100_benchmarks
from cbsim.studies.calibration.engines import base_profile

COLUMNS = [
    "run", "qps", "ttft_req_mape", "ttft_p50_err", "ttft_p90_err", "ttft_p99_err",
    "tpot_req_mape", "tpot_p50_err", "tpot_p99_err", "e2e_req_mape", "e2e_p50_err",
]  # fmt: skip


def _group(run: per_request.PerRequestRun) -> str:
    exp, deployment = run.name.split("_")[:2]
    return f"{exp}/{deployment} {run.workload}"


def replayed(engine: str | None) -> pd.DataFrame:
    """One row per shared run: its errors, deployment group and saturation figures."""
    rows = []
    for run in per_request.shared_runs():
        compared = per_request.replay(run, engine)
        errors = per_request.run_errors(compared)
        errors["ttft_p90_pred_s"] = errors["ttft_p90_s"] * (1.0 + errors["ttft_p90_err"] / 100.0)
        if errors["ttft_p90_s"] > per_request.STABLE_TTFT_P90_S:
            errors.update(saturation.overload_errors(compared, run.deployment.replicas))
        row: dict[str, object] = {
            "run": run.name,
            "group": _group(run),
            "workload": run.workload,
            "qps": run.qps,
            **errors,
        }
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--engine", default=None, help="engine name or profile JSON (default: the runs')"
    )
    parser.add_argument("--no-reverse", action="store_true", help="skip the A100 -> H100 fit")
    parser.add_argument("--no-frontend-fit", action="store_true", help="skip the front-end fit")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    errors = replayed(args.engine)
    shown = errors.assign(run=errors["run"].str.replace("vllm-70b", "v70b"))
    print(shown[COLUMNS].round(1).to_string(index=False))
    print()
    print(per_request.summarize_runs(errors).round(1).to_string(index=False))
    overloaded = errors[errors["ttft_p90_s"] > per_request.STABLE_TTFT_P90_S]
    print(f"\noverloaded runs ({len(overloaded)}), signed % error and its median absolute:")
    columns = [
        "run",
        "qps",
        "in_flight_measured",
        "in_flight_err",
        "throughput_err",
        "ttft_p50_err",
    ]
    print(overloaded.assign(run=shown["run"])[columns].round(1).to_string(index=False))
    for name in ("in_flight_err", "throughput_err", "ttft_p50_err"):
        print(f"  {name}: median |error| {overloaded[name].abs().median():.1f}%")
    print("\nknee (highest QPS whose TTFT p90 <= 2 s):")
    print(saturation.knee_table(errors).to_string(index=False))
    if not args.no_frontend_fit:
        runs = list(per_request.shared_runs())
        engine = args.engine or per_request.LLM_D_ENGINE
        print("\nfront end fitted leaving each workload out (stable runs of the held-out one):")
        table = frontend_fit.leave_one_workload_out(runs, engine)
        print(table.round(4).to_string(index=False))
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
