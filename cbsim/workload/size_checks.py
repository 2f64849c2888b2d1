"""A workload's size against cbsim's limits (:mod:`cbsim.common.limits`).

Before anything is drawn, what the workload section promises is checked: its arrivals span at
most the simulated-time limit, it expects at most the request limit, and the run's timeseries
stays within the windows limit. Once arrivals are drawn or replayed, the last one is checked too.
"""

from __future__ import annotations

import numpy as np

from cbsim.common.errors import CbsimError
from cbsim.common.limits import REQUESTS, SIMULATED_TIME, WINDOWS
from cbsim.schema.workload import (
    ClosedLoopArrival,
    FixedLength,
    GammaArrival,
    Length,
    LognormalLength,
    PoissonArrival,
    RateCurveArrival,
    StagesArrival,
    UniformLength,
)
from cbsim.workload.arrivals import rate_curve
from cbsim.workload.inputs import WorkloadInputs


def expected_span_s(inputs: WorkloadInputs) -> float | None:
    """About how long the arrivals of a synthetic open-loop workload last, before drawing them:
    ``duration_s``, or ``num_requests / rate`` when that is shorter; None when only the trace or
    the simulation can tell."""
    wl = inputs.workload
    arrival = wl.arrival
    if isinstance(arrival, StagesArrival):  # without the drains, which the simulation tells
        return _stages_span(arrival)
    if isinstance(arrival, RateCurveArrival):
        curve = rate_curve(arrival, wl.duration_s, None)
        if wl.num_requests is not None and wl.num_requests < curve.expected:
            return float(curve.inverse(np.array([float(wl.num_requests)]))[0])
        return curve.end_s
    if not isinstance(arrival, PoissonArrival | GammaArrival):
        return wl.duration_s if isinstance(arrival, ClosedLoopArrival) else None
    spans = [wl.duration_s] if wl.duration_s is not None else []
    if wl.num_requests is not None:
        spans.append(wl.num_requests / arrival.rate)
    elif wl.trace is not None and wl.duration_s is None:
        return None  # as many requests as the trace has rows: known once it is read
    return min(spans) if spans else None


def check_size(inputs: WorkloadInputs) -> None:
    """Before anything is drawn: the arrivals span at most the simulated-time limit, a duration
    expects at most the request limit, and the timeseries windows stay within their limit."""
    wl, source = inputs.workload, inputs.source
    arrival = wl.arrival
    if isinstance(arrival, StagesArrival):
        _check_stages(arrival, source)
    if isinstance(arrival, RateCurveArrival):  # its CSV file read here, its problems told
        curve = rate_curve(arrival, wl.duration_s, source)
        if wl.num_requests is None and curve.expected > REQUESTS.high:
            given = "points" if arrival.csv is None else "csv"
            where = "" if arrival.csv is None else f" in {arrival.csv}"
            raise CbsimError(
                f"the rate curve{where} over {curve.end_s:.3g} s expects about "
                f"{curve.expected:.3g} requests; a run's requests "
                f"{REQUESTS.violation(curve.expected)} (give workload.num_requests or "
                "workload.duration_s to cut it)",
                source=source,
                field=f"workload.arrival.{given}",
            )
    if isinstance(arrival, PoissonArrival | GammaArrival):
        if wl.num_requests is not None and wl.num_requests / arrival.rate > SIMULATED_TIME.high:
            span = wl.num_requests / arrival.rate
            raise CbsimError(
                f"{wl.num_requests:,} requests at {arrival.rate:g} requests/s arrive over about "
                f"{span:.3g} s; simulated time {SIMULATED_TIME.violation(span)}",
                source=source,
                field="workload.arrival.rate",
            )
        if wl.num_requests is None and wl.duration_s is not None and wl.sessions is None:
            expected = arrival.rate * wl.duration_s
            if expected > REQUESTS.high:
                raise CbsimError(
                    f"{arrival.rate:g} requests/s for {wl.duration_s:g} s is about "
                    f"{expected:.3g} requests; a run's requests {REQUESTS.violation(expected)}",
                    source=source,
                    field="workload.duration_s",
                )
    if wl.sessions is not None:
        _check_sessions(inputs)
    expected_span = expected_span_s(inputs)
    if expected_span is None:
        expected_span = inputs.horizon_s  # the run stops there at the latest
    if expected_span is not None:
        check_windows(inputs, expected_span)


def _typical_length(length: Length) -> float:
    """About the mean of a length distribution (1 where only its trace can tell)."""
    if isinstance(length, FixedLength):
        return float(length.value)
    if isinstance(length, UniformLength):
        return (length.low + length.high) / 2
    if isinstance(length, LognormalLength):
        return float(min(max(length.mean, length.min), length.max or length.mean))
    return 1.0


def _check_sessions(inputs: WorkloadInputs) -> None:
    """Sessions expect at most the request limit: sessions started (``count``, or rate x
    ``duration_s``, whichever is fewer) times their typical number of turns."""
    wl = inputs.workload
    sessions, arrival = wl.sessions, wl.arrival
    assert sessions is not None and isinstance(arrival, PoissonArrival | GammaArrival)
    started: list[tuple[float, str]] = []
    if sessions.count is not None:
        started.append((float(sessions.count), "workload.sessions.count"))
    if wl.duration_s is not None:
        started.append((arrival.rate * wl.duration_s, "workload.duration_s"))
    if not started:
        return
    count, field = min(started)
    turns = _typical_length(sessions.turns)
    expected = count * turns
    if expected > REQUESTS.high:
        raise CbsimError(
            f"about {count:.3g} sessions of about {turns:.3g} turns each send about "
            f"{expected:.3g} requests; a run's requests {REQUESTS.violation(expected)}",
            source=inputs.source,
            field=field,
        )


def _stages_span(arrival: StagesArrival) -> float:
    """How long the stages send, their gaps included (their drains left out)."""
    return sum(s.duration_s for s in arrival.stages) + arrival.gap_s * (len(arrival.stages) - 1)


def _check_stages(arrival: StagesArrival, source: str | None) -> None:
    """The stages span at most the simulated-time limit and expect at most the request limit."""
    span = _stages_span(arrival)
    if not SIMULATED_TIME.contains(span):
        raise CbsimError(
            f"the stages and their gaps last {span:.3g} s; simulated time "
            f"{SIMULATED_TIME.violation(span)}",
            source=source,
            field="workload.arrival.stages",
        )
    expected = sum(s.rate * s.duration_s for s in arrival.stages)
    if expected > REQUESTS.high:
        raise CbsimError(
            f"the stages send about {expected:.3g} requests; a run's requests "
            f"{REQUESTS.violation(expected)}",
            source=source,
            field="workload.arrival.stages",
        )


def check_windows(inputs: WorkloadInputs, span_s: float) -> None:
    """The timeseries of a run lasting ``span_s`` (at most ``horizon_s``) has at most the windows
    limit of rows."""
    if inputs.horizon_s is not None:
        span_s = min(span_s, inputs.horizon_s)
    window = inputs.window_s
    windows = span_s / window + 1
    if windows > WINDOWS.high:
        raise CbsimError(
            f"{span_s:.3g} s of traffic in windows of {window:g} s is {windows:.3g} windows; "
            f"the timeseries {WINDOWS.violation(windows)}: raise the window",
            source=inputs.source,
            field="output.timeseries_window_s",
        )


def check_arrivals(inputs: WorkloadInputs, arrivals: np.ndarray) -> None:
    """Once drawn or replayed: the last arrival within the simulated-time limit, the windows
    within theirs."""
    if len(arrivals) == 0:
        return
    last = float(arrivals[-1])
    if not SIMULATED_TIME.contains(last):
        field = "workload.trace" if inputs.workload.trace is not None else "workload.arrival"
        raise CbsimError(
            f"the last request arrives at {last:.3g} s; simulated time "
            f"{SIMULATED_TIME.violation(last)}",
            source=inputs.source,
            field=field,
        )
    check_windows(inputs, last)
