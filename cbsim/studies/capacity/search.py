"""Step 1 of a capacity plan: the highest rate one replica sustains within an SLO.

The result types, the load axis (how an offered rate maps onto the scenario), the runner that
simulates a rate for every seed, and the bracketing and bisection search (:func:`find_max_rate`);
:func:`evaluate_rate` checks one rate.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cbsim.common.errors import CbsimError
from cbsim.common.limits import DURATION, RATE
from cbsim.common.numbers import figure
from cbsim.common.progress import tell
from cbsim.engine.cost_models import CostModelCache
from cbsim.run.loading import load_scenario
from cbsim.run.simulate import simulate_tables
from cbsim.schema.scenario import Scenario
from cbsim.schema.workload import GammaArrival, PoissonArrival
from cbsim.studies.capacity.checks import (
    TIMESERIES_WINDOWS,
    _check_run,
    _combine,
    _slo_from_scenario,
)
from cbsim.studies.capacity.defaults import START_RPS, TOLERANCE, WINDOW_S
from cbsim.studies.capacity.diagnosis import diagnose
from cbsim.workload.traces import trace_table

DEFAULT_WINDOW_S = (
    WINDOW_S  # the shared defaults (cbsim.studies.capacity.defaults), by their old names
)
DEFAULT_START_RPS = START_RPS
DEFAULT_TOLERANCE = TOLERANCE
DEFAULT_MIN_REQUESTS = 200
MAX_HALVINGS = 6  # the lowest rate tried is start / 2**6
MAX_DOUBLINGS = 20
# routers a fleet keeps (they see the replicas' load); any other becomes least_loaded
LOAD_AWARE_ROUTERS = ("least_loaded", "prefix_aware", "session_affinity")


Progress = Callable[[str], None]


@dataclass
class Evaluation:
    """One offered rate, simulated for every seed (until the first failing one).

    Unpacks as ``rate_rps, passed, metrics``; ``reason`` says why it failed (empty when it passed).
    ``metrics`` holds the SLO metrics (worst over the seeds run), ``served_ratio``, ``waiting_q2``,
    ``waiting_q4``, ``window_s``, ``requests``, ``output_tokens_per_request`` and ``tpot_mean_s``.
    """

    rate_rps: float
    passed: bool
    metrics: dict[str, float | None]
    reason: str = ""
    simulations: int = 0

    def __iter__(self) -> Iterator[Any]:
        return iter((self.rate_rps, self.passed, self.metrics))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rate_rps": self.rate_rps,
            "passed": self.passed,
            "reason": self.reason or None,
            "simulations": self.simulations,
            "metrics": dict(self.metrics),
        }


@dataclass
class CapacityResult:
    """The highest arrival rate one replica sustains within an SLO (step 1 of the module doc).

    ``max_rate_rps`` is None when even the lowest rate tried fails (``feasible`` False and
    ``reason`` saying so). ``evaluations`` lists every rate tried, in order; ``simulations``
    counts every simulation run.
    """

    max_rate_rps: float | None
    simulations: int
    feasible: bool
    reason: str | None
    evaluations: list[Evaluation]
    slo: dict[str, float]
    seeds: list[int]
    window_s: float
    tolerance: float
    load_key: str
    base_rate_rps: float  # requests/s at load value 1 (the trace's base rate; 1 for synthetic)
    output_tokens_per_request: float | None = None  # at the maximum rate
    lowest_rate_rps: float | None = None  # the lowest rate tried

    @property
    def max_load_value(self) -> float | None:
        """The load key's value at the maximum rate (the rate, or the trace's rate_scale)."""
        if self.max_rate_rps is None:
            return None
        return self.max_rate_rps / self.base_rate_rps

    def passing(self) -> Evaluation | None:
        """The evaluation at the maximum rate."""
        for ev in self.evaluations:
            if ev.passed and ev.rate_rps == self.max_rate_rps:
                return ev
        return None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "feasible": self.feasible,
            "reason": self.reason,
            "max_rate_rps": self.max_rate_rps,
            "load_key": self.load_key,
            "slo": dict(self.slo),
            "seeds": list(self.seeds),
            "window_s": self.window_s,
            "tolerance": self.tolerance,
            "simulations": self.simulations,
            "output_tokens_per_request": self.output_tokens_per_request,
            "evaluations": [ev.to_dict() for ev in self.evaluations],
        }
        if self.load_key != "workload.arrival.rate":
            data["base_rate_rps"] = self.base_rate_rps
            data["max_rate_scale"] = self.max_load_value
        return data


@dataclass(frozen=True)
class _LoadAxis:
    """How an offered rate maps onto the scenario: the key to set and the trace's timing."""

    key: str
    base_rate_rps: float = 1.0
    trace_span_s: float | None = None  # replayed span at scale 1 (trace replay only)

    def window(self, rate: float, window_s: float, min_requests: int) -> tuple[float, float]:
        """(duration_s to set, effective window: the span the arrivals really cover)."""
        duration = max(window_s, min_requests / rate)
        if self.trace_span_s is None:
            return duration, duration
        scaled_span = self.trace_span_s * self.base_rate_rps / rate
        return duration, min(duration, scaled_span)


def _load_axis(scenario: Scenario) -> _LoadAxis:
    wl = scenario.workload
    if isinstance(wl.arrival, PoissonArrival | GammaArrival):
        return _LoadAxis("workload.arrival.rate")
    if wl.trace is None:
        raise CbsimError(
            f"capacity search needs an arrival rate to vary; arrival kind "
            f"{wl.arrival.kind if wl.arrival else None!r} has none (use poisson, gamma or a trace)",
            field="workload.arrival",
        )
    trace = trace_table(wl.trace.path, field="workload.trace.path")
    times = np.asarray(trace["arrival_s"], np.float64)
    kept = times[times >= wl.trace.start_s] - wl.trace.start_s
    span = float(kept.max()) if len(kept) else 0.0
    if len(kept) < 2 or span <= 0:
        raise CbsimError(
            "the replayed trace needs at least two requests spread over time to have a rate",
            field="workload.trace",
        )
    return _LoadAxis("workload.trace.rate_scale", len(kept) / span, span)


def _scenario_data(scenario: Scenario) -> dict[str, Any]:
    """The scenario as the plain data it was written as (defaults left out, so kinds can change)."""
    return scenario.model_dump(mode="json", exclude_unset=True)


def _point_data(
    base: Mapping[str, Any],
    axis: _LoadAxis,
    rate: float,
    seed: int,
    replicas: int,
    duration: float,
    window: float,
    pools: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The scenario of one simulated point: ``replicas`` replicas, or, for a disaggregated
    scenario, ``pools`` = (prefill, decode) instances."""
    data = copy.deepcopy(dict(base))
    wl = data.setdefault("workload", {})
    wl["num_requests"] = None
    wl["duration_s"] = duration
    if axis.key == "workload.arrival.rate":
        wl["arrival"]["rate"] = rate
    else:
        wl["trace"]["rate_scale"] = rate / axis.base_rate_rps
        wl["trace"]["time_scale"] = None
    cluster = data.setdefault("cluster", {})
    if pools is None:
        cluster["replicas"] = replicas
    else:
        cluster.pop("replicas", None)
        cluster["disaggregation"]["prefill"]["replicas"] = pools[0]
        cluster["disaggregation"]["decode"]["replicas"] = pools[1]
    if (replicas > 1 or pools is not None) and cluster.get("router") not in LOAD_AWARE_ROUTERS:
        cluster["router"] = "least_loaded"
    data["seed"] = seed
    data["horizon_s"] = 2 * duration + 600.0
    data.setdefault("output", {})["timeseries_window_s"] = window / TIMESERIES_WINDOWS
    return data


class _Runner:
    """Simulates one scenario at offered rates, counting simulations."""

    def __init__(
        self,
        base: Mapping[str, Any],
        axis: _LoadAxis,
        slo: Mapping[str, float],
        seeds: Sequence[int],
        window_s: float,
        min_requests: int,
        progress: Progress | None,
        label: str = "",
        option: str = "--window-s",
        cost_models: CostModelCache | None = None,
    ) -> None:
        self.base = base
        self.option = option  # what an invalid point of the search is put down to
        self.axis = axis
        self.slo = slo
        self.seeds = list(seeds)
        self.window_s = window_s
        self.min_requests = min_requests
        self.progress = progress
        self.label = label
        self.simulations = 0
        # every point of this search prices the same cluster (a plan's fleet checks price the
        # replica its search did: one cache serves both, its tables filled once)
        self.cost_models = CostModelCache() if cost_models is None else cost_models
        self.kv_wait_p99_s = 0.0  # disaggregated points: the last one's worst decode wait
        self.diagnosis: str | None = None  # the last failing run's tail, when not the rate
        self.fleet = False  # whether its runs are fleets at a target (the progress says so)
        self.step: tuple[int, int] | None = None  # (step, estimated steps) of a search

    def evaluate(
        self, rate: float, replicas: int = 1, pools: tuple[int, int] | None = None
    ) -> Evaluation:
        """The checks at ``rate`` for every seed (until one fails), with ``replicas`` replicas
        or, disaggregated, ``pools`` = (prefill, decode) instances."""
        duration, window = self.axis.window(rate, self.window_s, self.min_requests)
        runs: list[dict[str, float | None]] = []
        reasons: list[str] = []
        sims = 0
        self.kv_wait_p99_s = 0.0
        for seed in self.seeds:
            if self.progress is not None:
                self._tell(rate, replicas, pools, seed)
            data = _point_data(self.base, self.axis, rate, seed, replicas, duration, window, pools)
            results = simulate_tables(self._load_point(data, rate), cost_models=self.cost_models)
            sims += 1
            if pools is not None and len(results.requests):
                waits = results.requests["kv_wait_s"]
                waits = waits[~np.isnan(waits)]
                wait = float(np.quantile(waits, 0.99)) if len(waits) else math.nan
                self.kv_wait_p99_s = max(self.kv_wait_p99_s, wait)
            reasons, metrics = _check_run(results, window, self.slo)
            runs.append(metrics)
            if reasons:
                self.diagnosis = diagnose(results.requests)
                if len(self.seeds) > 1:
                    reasons = [f"seed {seed}: {r}" for r in reasons]
                break
        self.simulations += sims
        return Evaluation(rate, not reasons, _combine(runs, self.slo), "; ".join(reasons), sims)

    def _tell(self, rate: float, replicas: int, pools: tuple[int, int] | None, seed: int) -> None:
        """Report the simulation about to run: what, at which step of the search, which seed."""
        if pools is not None:
            what = f"{pools[0]}P{pools[1]}D at {_rate(rate)} req/s"
        elif self.fleet or replicas > 1:
            what = (
                f"fleet of {replicas} replica{'s' if replicas != 1 else ''} at {_rate(rate)} req/s"
            )
        else:
            what = f"rate {_rate(rate)} req/s"
        step = ""
        done = total = None
        if self.step is not None:
            number, total = self.step
            done = number - 1
            step = f" (step {number} of ~{total})"
        tell(self.progress, f"{self.label}{what}{step}, seed {seed}", done, total)

    def check(self, rate: float, pools: tuple[int, int] | None = None) -> None:
        """Whether the search's run at ``rate`` is a valid scenario (an error now, not after
        minutes of searching, when it is not)."""
        duration, window = self.axis.window(rate, self.window_s, self.min_requests)
        data = _point_data(self.base, self.axis, rate, self.seeds[0], 1, duration, window, pools)
        self._load_point(data, rate)

    def _load_point(self, data: dict[str, Any], rate: float) -> Scenario:
        """The scenario of one point of the search; one the scenario's limits refuse is put down
        to the option that led there (:attr:`option`), not to a field of the user's file whose
        value the search chose (the rate, the duration)."""
        try:
            return load_scenario(data)
        except CbsimError as err:
            duration = data["workload"]["duration_s"]
            raise CbsimError(
                f"the search would simulate {rate:.6g} req/s for {duration:.6g} s, which is not "
                f"a valid run: {err.message}",
                field=self.option,
            ) from None


def _resolve(
    scenario: Scenario | str | Path | Mapping[str, Any],
) -> tuple[Scenario, dict[str, Any]]:
    if isinstance(scenario, Scenario):
        return scenario, _scenario_data(scenario)
    loaded = load_scenario(scenario)
    return loaded, _scenario_data(loaded)


def _checked_slo(scenario: Scenario, slo: Mapping[str, float] | None) -> dict[str, float]:
    targets = dict(slo) if slo else _slo_from_scenario(scenario)
    if not targets:
        raise CbsimError("give an SLO (e.g. ttft_p99_s=2,tpot_p99_s=0.1)", field="--slo")
    for metric, threshold in targets.items():
        if not isinstance(threshold, int | float) or not math.isfinite(threshold):
            raise CbsimError(f"{metric}: threshold must be a finite number", field="--slo")
    return {k: float(v) for k, v in targets.items()}


def _check_search(window_s: float, tolerance: float, start_rps: float, min_requests: int) -> None:
    if not (math.isfinite(window_s) and window_s > 0):
        raise CbsimError(f"must be > 0, got {window_s!r}", field="--window-s")
    if not DURATION.contains(window_s):
        raise CbsimError(DURATION.violation(window_s) or "", field="--window-s")
    if not RATE.contains(start_rps) and math.isfinite(start_rps) and start_rps > 0:
        raise CbsimError(RATE.violation(start_rps) or "", field="--start-rps")
    if not (math.isfinite(tolerance) and 0 < tolerance < 1):
        raise CbsimError(f"must be in (0, 1), got {tolerance!r}", field="--tolerance")
    if not (math.isfinite(start_rps) and start_rps > 0):
        raise CbsimError(f"must be > 0, got {start_rps!r}", field="--start-rps")
    if min_requests < 1:
        raise CbsimError(f"must be >= 1, got {min_requests!r}", field="min_requests")


def find_max_rate(
    scenario: Scenario | str | Path | Mapping[str, Any],
    slo: Mapping[str, float] | None = None,
    *,
    seeds: Sequence[int] | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    start_rps: float = DEFAULT_START_RPS,
    tolerance: float = DEFAULT_TOLERANCE,
    min_requests: int = DEFAULT_MIN_REQUESTS,
    progress: Progress | None = None,
) -> CapacityResult:
    """The highest arrival rate (requests/s) one replica of ``scenario`` sustains within ``slo``.

    ``slo`` maps summary metrics to thresholds (``{"ttft_p99_s": 2, "tpot_p99_s": 0.1}``; default:
    the p99 of the scenario's own ``slo`` targets); ``seeds`` default to the scenario's seed; each
    rate is simulated over ``window_s`` seconds of arrivals (at least ``min_requests`` of them).
    See the module docstring for the checks and the search.
    """
    loaded, base = _resolve(scenario)
    return _find_max_rate(
        loaded,
        base,
        _checked_slo(loaded, slo),
        seeds=list(seeds) if seeds else [loaded.seed],
        window_s=window_s,
        start_rps=start_rps,
        tolerance=tolerance,
        min_requests=min_requests,
        progress=progress,
    )


def evaluate_rate(
    scenario: Scenario | str | Path | Mapping[str, Any],
    rate_rps: float,
    slo: Mapping[str, float] | None = None,
    *,
    replicas: int = 1,
    seeds: Sequence[int] | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    min_requests: int = DEFAULT_MIN_REQUESTS,
) -> Evaluation:
    """Whether ``replicas`` replicas of ``scenario`` sustain ``rate_rps`` within ``slo``: the same
    checks, window and seeds as the search (a fleet routes ``least_loaded`` unless the scenario
    routes ``prefix_aware`` or ``session_affinity``)."""
    loaded, base = _resolve(scenario)
    targets = _checked_slo(loaded, slo)
    _check_search(window_s, DEFAULT_TOLERANCE, rate_rps, min_requests)
    if replicas < 1:
        raise CbsimError(f"must be >= 1, got {replicas}", field="replicas")
    runner = _Runner(
        base,
        _load_axis(loaded),
        targets,
        list(seeds) if seeds else [loaded.seed],
        window_s,
        min_requests,
        None,
    )
    return runner.evaluate(rate_rps, replicas)


def _find_max_rate(
    scenario: Scenario,
    base: dict[str, Any],
    slo: dict[str, float],
    *,
    seeds: list[int],
    window_s: float,
    start_rps: float,
    tolerance: float,
    min_requests: int,
    progress: Progress | None,
    label: str = "",
    pools_for: Callable[[float], tuple[int, int]] | None = None,
    cost_models: CostModelCache | None = None,
) -> CapacityResult:
    """The search; ``pools_for``: a disaggregated scenario's (prefill, decode) instances at a
    rate (default: one replica); ``cost_models``: the cache its simulations price with."""
    _check_search(window_s, tolerance, start_rps, min_requests)
    axis = _load_axis(scenario)
    base = copy.deepcopy(base)
    if pools_for is None:
        base.setdefault("cluster", {})["replicas"] = 1
    runner = _Runner(
        base, axis, slo, seeds, window_s, min_requests, progress, label, cost_models=cost_models
    )
    evaluations: list[Evaluation] = []
    bracketing = _steps_left(1.0, 2.0, tolerance) + 1  # one more doubling, then the bisection

    def evaluate(rate: float, left: int) -> Evaluation:
        number = len(evaluations) + 1
        runner.step = (number, number + left - 1)
        ev = runner.evaluate(rate, pools=None if pools_for is None else pools_for(rate))
        evaluations.append(ev)
        return ev

    def result(
        best: Evaluation | None, feasible: bool, reason: str | None, lowest: float
    ) -> CapacityResult:
        tokens = best.metrics.get("output_tokens_per_request") if best else None
        return CapacityResult(
            max_rate_rps=best.rate_rps if best else None,
            simulations=runner.simulations,
            feasible=feasible,
            reason=reason,
            evaluations=evaluations,
            slo=dict(slo),
            seeds=list(seeds),
            window_s=window_s,
            tolerance=tolerance,
            load_key=axis.key,
            base_rate_rps=axis.base_rate_rps,
            output_tokens_per_request=tokens,
            lowest_rate_rps=lowest,
        )

    # bracket: lo passes, hi fails
    first = evaluate(start_rps, bracketing + 1)
    lo: Evaluation | None = first if first.passed else None
    hi: Evaluation | None = None if first.passed else first
    if lo is None:
        rate = start_rps
        for _ in range(MAX_HALVINGS):
            rate /= 2
            ev = evaluate(rate, bracketing)
            if ev.passed:
                lo = ev
                break
            hi = ev
        if lo is None:
            assert hi is not None
            reason = f"SLO cannot be met even at {_rate(rate)} req/s ({hi.reason})"
            if runner.diagnosis:  # huge prompts or bursts, not the rate
                reason += f"; {runner.diagnosis}"
            return result(None, False, reason, rate)
    else:
        for _ in range(MAX_DOUBLINGS):
            ev = evaluate(lo.rate_rps * 2, bracketing)
            if not ev.passed:
                hi = ev
                break
            lo = ev
        if hi is None:
            reason = f"no failure found up to {_rate(lo.rate_rps)} req/s (search limit)"
            return result(lo, True, reason, start_rps)
    # bisect
    assert hi is not None
    while hi.rate_rps - lo.rate_rps > tolerance * lo.rate_rps:
        left = _steps_left(lo.rate_rps, hi.rate_rps, tolerance)
        ev = evaluate((lo.rate_rps + hi.rate_rps) / 2, left)
        if ev.passed:
            lo = ev
        else:
            hi = ev
    lowest = min(e.rate_rps for e in evaluations)
    return result(lo, True, None, lowest)


def _steps_left(lo: float, hi: float, tolerance: float) -> int:
    """Bisection steps until ``[lo, hi]`` is within ``tolerance`` of ``lo`` (each halves it)."""
    if hi - lo <= tolerance * lo:
        return 0
    return max(1, math.ceil(math.log2((hi - lo) / (tolerance * lo))))


def _rate(rate: float) -> str:
    return figure(rate)
