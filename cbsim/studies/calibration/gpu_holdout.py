"""Leave one GPU out: an engine's step terms fitted on one GPU's serving data, judged on another's.

An engine profile's kernels come from each GPU's own kernel tables; what is fitted end to end is
the engine's time beyond its kernels (:class:`~cbsim.cost.engine_profile.StepOverhead`). Whether
that transfers is the question a capacity plan for an unmeasured GPU rests on, so it is measured
in both directions on the vLLM data shipped:

* **fit H100, predict A100**: the profile fitted on the H100 closed-loop benchmarks
  (:func:`cbsim.studies.calibration.e2e_report.fit_shared`) replays the A100 per-request runs
  (:mod:`cbsim.studies.calibration.per_request`) and is scored per request and on the TTFT, TPOT and
  end-to-end p50/p90/p99 of each run;
* **fit A100, predict H100**: the serial step time fitted on the A100 per-request runs
  (:func:`cbsim.studies.calibration.per_request.fit_serial`) predicts the H100 benchmarks by full
  simulation.

The two data sets also differ in engine version (vLLM 0.8.5 on the A100s; 0.11 to 0.18 on the
H100s) and in load (open-loop fixed-interval sends against closed loops), so an error here mixes
what the GPU changes with what the version and the workload change: it is the transfer a user
asking about an unmeasured GPU faces.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cbsim.cost.engine_profile import EngineProfile
from cbsim.studies.calibration import e2e, per_request
from cbsim.studies.calibration.errors import ape


def h100_to_a100(h100_profile: EngineProfile, files: e2e.ProfileFiles) -> pd.DataFrame:
    """The H100-fitted profile on the A100 per-request runs: :func:`per_request.summarize_runs`."""
    runs = list(per_request.shared_runs())
    errors = per_request.validate_runs(runs, files.path(h100_profile))
    return per_request.summarize_runs(errors).assign(direction="fit H100 -> predict A100")


def a100_to_h100(
    h100_rows: pd.DataFrame, base: EngineProfile, files: e2e.ProfileFiles
) -> tuple[EngineProfile, pd.DataFrame]:
    """The serial step time fitted on the A100 runs (from ``base``'s other terms), predicting the
    H100 benchmarks ``h100_rows`` (as :func:`e2e.fit_engine` returns them) by full simulation:
    median and P90 absolute % error of mean TTFT, TPOT and tokens/s."""
    runs = list(per_request.shared_runs())
    profile, _ = per_request.fit_serial(runs, base)
    predicted = e2e.simulate_rows(h100_rows, profile, files)
    row: dict[str, object] = {"direction": "fit A100 -> predict H100", "count": len(predicted)}
    for name, measured, column in (
        ("ttft", "ttft_mean_s", "predicted_ttft_s"),
        ("tpot", "tpot_mean_s", "predicted_tpot_s"),
        ("tokens/s", "measured_tokens_per_s", "predicted_tokens_per_s"),
    ):
        errors = 100.0 * ape(predicted[column].to_numpy(), predicted[measured].to_numpy())
        row[f"{name} median"] = float(np.median(errors))
        row[f"{name} p90"] = float(np.percentile(errors, 90))
    return profile, pd.DataFrame([row])
