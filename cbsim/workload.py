"""Workloads: when requests arrive and how long their prompts and outputs are.

A workload is materialised up front as three arrays — arrival times (seconds), prompt lengths and
output lengths (tokens) — because arrivals do not depend on the simulation: an open-loop load, as
real traffic is. Arrivals are Poisson (exponential gaps), gamma (gaps with a chosen coefficient of
variation, bursty above 1) or replayed from a real trace with a time scale; lengths are fixed,
uniform, lognormal (arithmetic mean, log-space sigma, clipped) or resampled from a trace. Each draws
from its own named random stream, so changing one never changes the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cbsim.errors import CbsimError
from cbsim.rng import stream
from cbsim.scenario import (
    EmpiricalLength,
    FixedLength,
    GammaArrival,
    Length,
    LognormalLength,
    OfflineArrival,
    PoissonArrival,
    Scenario,
    TraceAcceptance,
    TraceArrival,
    UniformLength,
)
from cbsim.speculative.acceptance_trace import load_acceptance_trace
from cbsim.traces import load_trace


@dataclass(frozen=True, slots=True)
class RequestSpecs:
    """The requests of a run, sorted by arrival time."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)


def _gaps(arrival: PoissonArrival | GammaArrival, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(arrival, PoissonArrival):
        return rng.exponential(1.0 / arrival.rate, n)
    shape = 1.0 / arrival.cv**2
    return rng.gamma(shape, 1.0 / (arrival.rate * shape), n)


def synthetic_arrivals(
    arrival: PoissonArrival | GammaArrival | OfflineArrival,
    num_requests: int | None,
    duration_s: float | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Arrival times of a renewal process, the first gap included, cut at a count and/or duration;
    all zeros for an offline batch."""
    if isinstance(arrival, OfflineArrival):
        assert num_requests is not None
        return np.zeros(num_requests)
    if num_requests is not None:
        times = np.cumsum(_gaps(arrival, num_requests, rng))
    else:
        assert duration_s is not None
        expected = arrival.rate * duration_s
        chunk = int(expected + 10 * math.sqrt(expected) + 16)
        times = np.cumsum(_gaps(arrival, chunk, rng))
        while times[-1] < duration_s:
            more = np.cumsum(_gaps(arrival, chunk, rng)) + times[-1]
            times = np.concatenate([times, more])
    if duration_s is not None:
        times = times[times <= duration_s]
    return times


def sample_lengths(
    spec: Length, n: int, rng: np.random.Generator, *, field: str, source: str | None
) -> np.ndarray:
    """``n`` token lengths from a length distribution (always ≥ 1)."""
    if isinstance(spec, FixedLength):
        return np.full(n, spec.value, dtype=np.int64)
    if isinstance(spec, UniformLength):
        return rng.integers(spec.low, spec.high + 1, n, dtype=np.int64)
    if isinstance(spec, LognormalLength):
        mu = math.log(spec.mean) - spec.sigma**2 / 2.0
        values = np.rint(rng.lognormal(mu, spec.sigma, n)).astype(np.int64)
        return np.clip(values, spec.min, spec.max if spec.max is not None else None)
    assert isinstance(spec, EmpiricalLength)
    trace = load_trace(spec.trace, source=source, field=f"{field}.trace")
    column = "prompt_tokens" if field.endswith("prompt_tokens") else "output_tokens"
    rows = rng.integers(0, len(trace), n)
    return trace[column].to_numpy(dtype=np.int64)[rows]


def build_workload(scenario: Scenario, source: str | None = None) -> RequestSpecs:
    """Materialise the scenario's requests."""
    wl = scenario.workload
    seed = scenario.seed
    if wl.trace is not None:
        trace = load_trace(wl.trace.path, source=source, field="workload.trace.path")
        return _with_acceptance_trace_lengths(
            scenario, _from_trace(scenario, trace, source), source
        )
    assert wl.arrival is not None and not isinstance(wl.arrival, TraceArrival)
    arrivals = synthetic_arrivals(
        wl.arrival, wl.num_requests, wl.duration_s, stream(seed, "arrivals")
    )
    n = len(arrivals)
    if _acceptance_trace(scenario) is not None:
        placeholder = np.zeros(n, dtype=np.int64)
        return _with_acceptance_trace_lengths(
            scenario, RequestSpecs(arrivals, placeholder, placeholder), source
        )
    if wl.prompt_tokens is None or wl.output_tokens is None:
        missing = scenario.missing_lengths()[0]
        raise CbsimError("required field is missing", source=source, field=f"workload.{missing}")
    return RequestSpecs(
        arrival_s=arrivals,
        prompt_tokens=_lengths(scenario, wl.prompt_tokens, n, "workload.prompt_tokens", source),
        output_tokens=_lengths(scenario, wl.output_tokens, n, "workload.output_tokens", source),
    )


def _lengths(
    scenario: Scenario, spec: Length, n: int, field: str, source: str | None
) -> np.ndarray:
    # Empirical lengths draw from a stream per trace: prompt and output from one trace share rows.
    name = f"lengths:{spec.trace}" if isinstance(spec, EmpiricalLength) else field
    return sample_lengths(spec, n, stream(scenario.seed, name), field=field, source=source)


def _from_trace(scenario: Scenario, trace: pd.DataFrame, source: str | None) -> RequestSpecs:
    wl = scenario.workload
    assert wl.trace is not None
    has_arrivals = bool(trace.attrs.get("has_arrivals", True))
    synthetic = wl.arrival is not None and not isinstance(wl.arrival, TraceArrival)
    if not has_arrivals and not synthetic:
        raise CbsimError(
            "this trace has lengths but no arrival times; give workload.arrival (poisson or gamma)",
            source=source,
            field="workload.trace.path",
        )
    if synthetic:
        assert isinstance(wl.arrival, PoissonArrival | GammaArrival | OfflineArrival)
        count = wl.num_requests if wl.num_requests is not None else len(trace)
        arrivals = synthetic_arrivals(
            wl.arrival, count, wl.duration_s, stream(scenario.seed, "arrivals")
        )
        rows = np.arange(len(arrivals)) % len(trace)
    else:
        times = trace["arrival_s"].to_numpy(dtype=np.float64)
        keep = times >= wl.trace.start_s
        rows = np.flatnonzero(keep)
        arrivals = (times[keep] - wl.trace.start_s) * wl.trace.effective_time_scale
        if wl.duration_s is not None:
            within = arrivals <= wl.duration_s
            rows, arrivals = rows[within], arrivals[within]
        if wl.num_requests is not None:
            rows, arrivals = rows[: wl.num_requests], arrivals[: wl.num_requests]
    if len(arrivals) == 0:
        raise CbsimError(
            "the trace selection holds no requests", source=source, field="workload.trace"
        )
    n = len(arrivals)
    prompts = trace["prompt_tokens"].to_numpy(dtype=np.int64)[rows]
    outputs = trace["output_tokens"].to_numpy(dtype=np.int64)[rows]
    if wl.prompt_tokens is not None:
        prompts = _lengths(scenario, wl.prompt_tokens, n, "workload.prompt_tokens", source)
    if wl.output_tokens is not None:
        outputs = _lengths(scenario, wl.output_tokens, n, "workload.output_tokens", source)
    return RequestSpecs(
        arrival_s=np.asarray(arrivals, dtype=np.float64),
        prompt_tokens=prompts,
        output_tokens=outputs,
    )


def _acceptance_trace(scenario: Scenario) -> TraceAcceptance | None:
    acceptance = scenario.speculative.acceptance
    if scenario.speculative.enabled and isinstance(acceptance, TraceAcceptance):
        return acceptance
    return None


def _with_acceptance_trace_lengths(
    scenario: Scenario, specs: RequestSpecs, source: str | None
) -> RequestSpecs:
    """With a speculative acceptance trace, its requests supply the lengths: request i replays
    trace row i (cycling), so every request has an acceptance length for each output position."""
    config = _acceptance_trace(scenario)
    if config is None:
        return specs
    trace = load_acceptance_trace(config.path, source=source)
    rows = np.arange(len(specs)) % len(trace.output_len)
    return RequestSpecs(specs.arrival_s, trace.prompt_len[rows], trace.output_len[rows])
