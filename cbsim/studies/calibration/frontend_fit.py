"""The front end each request pays, fitted on per-request runs at light load.

Between a client sending a request and the engine scheduling it lie the API server's HTTP
handling, the chat template, tokenisation and the hand-off to the engine core; kernel tables do
not see any of it. At light load nothing queues, so a request's measured time to first token is
that front end plus its prefill: the per-request difference between a measured run and its
replay without a front end (:func:`cbsim.studies.calibration.per_request.replay`) is the front end.

:func:`fit_frontend` takes the per-request constant ``frontend.request_s`` and per-prompt-token
``frontend.prompt_token_s`` whose replayed TTFT distributions are closest to the measured ones
(p50, p90 and p99 of every run given: the figures an SLO reads), and :func:`leave_one_workload_out` measures how they
transfer: fitted on one workload's runs, judged on the other's by full simulation. The
per-token term is only identifiable where prompt lengths vary enough: on the shared runs the
ShareGPT prompts (190-2,000 tokens) carry it, the short-input ones (75-125 tokens) do not, so a
fit on those alone leaves it at 0.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cbsim.cost.engine_profile import EngineProfile, load_engine_profile, write_engine_profile
from cbsim.studies.calibration.per_request import (
    PerRequestRun,
    replay,
    stable,
    summarize_runs,
    validate_runs,
)

DELAY_GRID_S = np.arange(0.0, 0.0401, 0.001)  # per request: 0 to 40 ms in 1 ms steps
PER_TOKEN_GRID_S = np.arange(0.0, 80.1e-6, 4e-6)  # per prompt token: 0 to 80 µs in 4 µs steps
QUANTILES = (0.5, 0.9, 0.99)
IDENTIFIES_PER_TOKEN = 3.0  # prompts must span this ratio of lengths to tell the two terms apart


def without_frontend(profile: EngineProfile) -> EngineProfile:
    """``profile`` with no per-request front-end delay (the streaming queue kept)."""
    frontend = profile.frontend.model_copy(
        update={"request_s": 0.0, "prompt_token_s": 0.0, "request_jitter_s": 0.0}
    )
    return profile.model_copy(update={"frontend": frontend})


def _profile_file(profile: EngineProfile, folder: Path, name: str) -> str:
    path = folder / f"{name}.json"
    write_engine_profile(profile, path)
    return str(path)


def light_load_residuals(runs: list[PerRequestRun], profile: EngineProfile) -> pd.DataFrame:
    """Every request of the stable ``runs``: measured TTFT and the TTFT replayed without a front
    end (columns ``run``, ``workload``, ``ttft_s``, ``ttft_s_pred``)."""
    frames = []
    with tempfile.TemporaryDirectory(prefix="cbsim-frontend-") as folder:
        engine = _profile_file(without_frontend(profile), Path(folder), "bare-frontend")
        for run in stable(runs):
            compared = replay(run, engine)
            frames.append(
                pd.DataFrame(
                    {
                        "run": run.name,
                        "workload": run.workload,
                        "prompt_tokens": compared["prompt_tokens"].to_numpy(dtype=float),
                        "ttft_s": compared["ttft_s"].to_numpy(dtype=float),
                        "ttft_s_pred": compared["ttft_s_pred"].to_numpy(dtype=float),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def _quantile_error(frame: pd.DataFrame, request_s: float, token_s: float) -> float:
    """Mean over runs of the absolute log ratio of replayed to measured TTFT p50, p90, p99."""
    errors = []
    for _, run in frame.groupby("run", sort=False):
        measured = run["ttft_s"].to_numpy(dtype=float)
        predicted = (
            run["ttft_s_pred"].to_numpy(dtype=float)
            + request_s
            + token_s * run["prompt_tokens"].to_numpy(dtype=float)
        )
        for q in QUANTILES:
            errors.append(abs(np.log(np.quantile(predicted, q) / np.quantile(measured, q))))
    return float(np.mean(errors))


def fit_frontend(residuals: pd.DataFrame) -> tuple[float, float]:
    """The per-request delay and per-prompt-token delay (seconds) whose replayed TTFT p50, p90
    and p99 are closest to the measured ones over ``residuals``' runs (mean absolute log
    ratio); the per-token term is 0 where the prompts' lengths span too little to tell it from
    the constant (less than :data:`IDENTIFIES_PER_TOKEN` times, 5th to 95th percentile)."""
    keep = (
        np.isfinite(residuals["ttft_s"])
        & np.isfinite(residuals["ttft_s_pred"])
        & (residuals["ttft_s"] > 0)
    )
    frame = residuals[keep]
    prompts = frame["prompt_tokens"].to_numpy(dtype=float)
    spread = np.percentile(prompts, 95) / max(float(np.percentile(prompts, 5)), 1.0)
    per_token = PER_TOKEN_GRID_S if spread >= IDENTIFIES_PER_TOKEN else np.zeros(1)
    best = (np.inf, 0.0, 0.0)
    for b in per_token:
        for a in DELAY_GRID_S:
            error = _quantile_error(frame, float(a), float(b))
            if error < best[0]:
                best = (error, float(a), float(b))
    return best[1], best[2]


def with_frontend(profile: EngineProfile, request_s: float, prompt_token_s: float) -> EngineProfile:
    """``profile`` with the front end's per-request and per-prompt-token delays set."""
    frontend = profile.frontend.model_copy(
        update={"request_s": round(request_s, 6), "prompt_token_s": round(prompt_token_s, 9)}
    )
    return profile.model_copy(update={"frontend": frontend})


def leave_one_workload_out(runs: list[PerRequestRun], engine: str) -> pd.DataFrame:
    """For each workload: the front end fitted on the other workloads' stable runs, and the
    errors of full simulations of this workload's runs with it (:func:`summarize_runs`' stable
    row)."""
    profile = load_engine_profile(engine)
    residuals = light_load_residuals(runs, profile)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cbsim-frontend-") as folder:
        for workload in sorted(residuals["workload"].unique()):
            request_s, token_s = fit_frontend(residuals[residuals["workload"] != workload])
            fitted = _profile_file(
                with_frontend(profile, request_s, token_s), Path(folder), workload
            )
            held = [run for run in runs if run.workload == workload]
            summary = summarize_runs(validate_runs(held, fitted))
            stable_row = summary[summary["runs"] == "stable runs"]
            row: dict[str, Any] = {
                "held_out": workload,
                "request_s": request_s,
                "prompt_token_s": token_s,
            }
            if not stable_row.empty:
                row.update({str(k): v for k, v in stable_row.iloc[0].drop(["runs"]).items()})
            rows.append(row)
    return pd.DataFrame(rows)
