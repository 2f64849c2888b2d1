"""The Python entry point: run a scenario and get :class:`~cbsim.results.Results`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cbsim.engine import ProgressCallback, Simulation
from cbsim.metrics import summarize, timeseries
from cbsim.results import Results
from cbsim.scenario import Scenario, apply_engine_defaults, load_scenario
from cbsim.scheduler.warnings import scheduler_warnings
from cbsim.workload import ClosedLoopWorkload, build_workload


def simulate(
    scenario: Scenario | str | Path | dict[str, Any],
    *,
    progress: ProgressCallback | None = None,
    source: str | None = None,
) -> Results:
    """Simulate a scenario (a :class:`Scenario`, a YAML path or a mapping) and return its results."""
    if not isinstance(scenario, Scenario):
        if isinstance(scenario, str | Path):
            source = str(scenario)
        scenario = load_scenario(scenario)
    scenario = apply_engine_defaults(scenario)
    wall_start = time.perf_counter()
    simulation = Simulation(scenario, source=source, progress=progress)
    recorder = simulation.run()
    wall = time.perf_counter() - wall_start
    requests = recorder.requests
    iterations = recorder.iterations
    warnings = run_warnings(scenario, simulation, iterations)
    info = run_info(simulation, wall, recorder.end_s)
    del simulation  # its workload, schedulers and events: freed before the summaries' temporaries
    return Results(
        scenario=scenario,
        requests=requests,
        iterations=iterations,
        timeseries=timeseries(
            requests, iterations, scenario.output.timeseries_window_s, scenario.cluster.replicas
        ),
        summary=summarize(
            requests,
            iterations,
            scenario,
            recorder.preemptions,
            itl=recorder.itl,
            warnings=warnings,
        ),
        run_info=info,
    )


def run_info(simulation: Simulation, wall_s: float, simulated_s: float) -> dict[str, Any]:
    """How the run went: wall and simulated seconds, and whether decode runs were fast-forwarded
    (speculative ones by the compiled kernel, or stepped and why)."""
    info: dict[str, Any] = {"wall_s": wall_s, "simulated_s": simulated_s}
    info["fast_forward"] = simulation.fast_forward
    if simulation.fast_forward_note:
        info["fast_forward_note"] = simulation.fast_forward_note
    return info


def run_warnings(scenario: Scenario, simulation: Simulation, iterations: pd.DataFrame) -> list[str]:
    """What makes this run's figures doubtful: scheduler settings that cannot batch its prompts,
    batches far beyond what the engine's overhead was fitted on."""
    warnings = scheduler_warnings(scenario.scheduler, simulation.prompt_lengths())
    max_batch = int(iterations["batch_size"].max()) if len(iterations) else 0
    outside = simulation.cost.engine.outside_fitted_range(max_batch)
    if outside:
        warnings.append(outside)
    return warnings


def scenario_warnings(scenario: Scenario, source: str | None = None) -> list[str]:
    """The scheduler warnings of a scenario before it runs (closed loop: its first requests)."""
    workload = build_workload(scenario, source)
    if isinstance(workload, ClosedLoopWorkload):
        count = workload.max_requests or max(1024, workload.concurrency)
        prompts = np.asarray([workload.lengths[i][0] for i in range(count)], dtype=np.int64)
    else:
        prompts = workload.prompt_tokens
    return scheduler_warnings(scenario.scheduler, prompts)


def compare_no_spec(results: Results, *, source: str | None = None) -> dict[str, float]:
    """Speedup of a speculative run over the same scenario (same seed) with speculation off.

    Ratios > 1 favour speculation: ``speedup_tpot_mean`` and ``speedup_tpot_p50`` (no-spec TPOT /
    spec TPOT), ``speedup_e2e_mean``, ``speedup_output_tokens_per_s`` (spec / no-spec throughput);
    ``time_saved_s`` is the decode time speculation saved over all requests (Σ (finish − first
    token) without minus with), the seeds' "time saved" measured rather than assumed.
    The same figures are added to ``results.summary``, and the baseline's own summary is kept as
    ``results.no_spec_summary`` (written beside the result as ``summary_no_spec.json``).
    """
    if not results.scenario.speculative.enabled:
        raise ValueError("the scenario does not speculate: nothing to compare")
    data = results.scenario.to_dict()
    data["speculative"]["enabled"] = False
    baseline = simulate(load_scenario(data), source=source)
    spec, base = results.summary, baseline.summary

    def ratio(numerator: float, denominator: float) -> float:
        return numerator / denominator if denominator else float("nan")

    def decode_seconds(r: Results) -> float:
        done = r.requests[r.requests["status"] == "finished"]
        return float((done["finish_s"] - done["first_token_s"]).sum())

    figures = {
        "speedup_tpot_mean": ratio(base["tpot_mean_s"], spec["tpot_mean_s"]),
        "speedup_tpot_p50": ratio(base["tpot_p50_s"], spec["tpot_p50_s"]),
        "speedup_e2e_mean": ratio(base["e2e_mean_s"], spec["e2e_mean_s"]),
        "speedup_output_tokens_per_s": ratio(
            spec["output_tokens_per_s"], base["output_tokens_per_s"]
        ),
        "time_saved_s": decode_seconds(baseline) - decode_seconds(results),
    }
    results.summary.update(figures)
    results.no_spec_summary = dict(base)
    return figures
