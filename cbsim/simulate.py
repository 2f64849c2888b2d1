"""The Python entry point: run a scenario and get :class:`~cbsim.results.Results`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cbsim.engine import ProgressCallback, Simulation
from cbsim.metrics import summarize, timeseries
from cbsim.results import Results
from cbsim.scenario import Scenario, load_scenario


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
    wall_start = time.perf_counter()
    recorder = Simulation(scenario, source=source, progress=progress).run()
    wall = time.perf_counter() - wall_start
    requests = recorder.requests
    iterations = recorder.iterations
    return Results(
        scenario=scenario,
        requests=requests,
        iterations=iterations,
        timeseries=timeseries(
            requests, iterations, scenario.output.timeseries_window_s, scenario.cluster.replicas
        ),
        summary=summarize(requests, iterations, scenario, recorder.preemptions),
        run_info={"wall_s": wall, "simulated_s": recorder.end_s},
    )
