"""Workloads: when requests arrive and how long their prompts and outputs are.

An open-loop workload is materialised up front as three arrays — arrival times (seconds), prompt
lengths and output lengths (tokens) — because its arrivals do not depend on the simulation, as real
traffic's do not. A closed-loop load (``closed_loop``: C clients, each sending its next request when
its last one finished) has no arrival times until the simulation makes them: it is a
:class:`ClosedLoopWorkload`, whose i-th request sent gets the i-th lengths drawn. So is a staged
load (``stages``, :class:`StagedWorkload`): its send times within each stage are drawn up front,
but a stage starts when the previous one has drained, which only the simulation tells. Arrivals are Poisson (exponential gaps), gamma (gaps with a chosen coefficient of
variation, bursty above 1), a rate curve (a non-homogeneous Poisson process whose rate is piecewise
linear in time: a day of traffic) or replayed from a real trace with a time scale; lengths are fixed,
uniform, lognormal (arithmetic mean, log-space sigma, clipped) or resampled from a trace. Each draws
from its own named random stream, so changing one never changes the others.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cbsim.common.errors import CbsimError
from cbsim.common.limits import REQUESTS, SIMULATED_TIME, WINDOWS
from cbsim.common.rng import stream
from cbsim.schema.scenario import Scenario
from cbsim.schema.speculative import TraceAcceptance
from cbsim.schema.workload import (
    ClosedLoopArrival,
    EmpiricalLength,
    FixedLength,
    GammaArrival,
    Length,
    LognormalLength,
    OfflineArrival,
    PoissonArrival,
    RateCurveArrival,
    StagesArrival,
    TraceArrival,
    UniformLength,
)
from cbsim.workload.acceptance_trace import load_acceptance_trace
from cbsim.workload.arrivals import rate_curve, rate_curve_arrivals, synthetic_arrivals
from cbsim.workload.lengths import sample_lengths
from cbsim.workload.prompt_pool import PoolPrompts, build_prompt_pool
from cbsim.workload.sessions import SessionWorkload, build_sessions
from cbsim.workload.traces import load_trace


@dataclass(frozen=True, slots=True)
class RequestSpecs:
    """The requests of a run, sorted by arrival time."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    warnings: tuple[str, ...] = ()  # doubts about a replayed trace's times (units, order)
    # a replayed trace's prefix block ids per request (None: the trace has none), each standing
    # for prefix_block_tokens tokens of the prompt (prefix caching)
    prefix_ids: np.ndarray | None = None
    prefix_block_tokens: int = 512
    # a prompt pool's prompts (workload.prompt_pool): the pool, and each request's prompt in it
    pool: PoolPrompts | None = None
    pool_picks: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)


LENGTH_CHUNK = 1024


# count -> the next count prompt lengths, output lengths and prompt pool picks (None: no pool)
LengthDraw = Callable[[int], tuple[np.ndarray, np.ndarray, np.ndarray | None]]


@dataclass
class ClosedLoopLengths:
    """Prompt and output lengths in sending order: request i gets the i-th pair, whatever the
    timing. They are drawn in chunks from the same named streams, so a run that sends more
    requests extends the sequence and never changes its start. With a prompt pool, request i's
    prompt in it is :meth:`pick`."""

    draw: LengthDraw
    pool: PoolPrompts | None = None
    _prompts: list[int] = field(default_factory=list)
    _outputs: list[int] = field(default_factory=list)
    _picks: list[int] = field(default_factory=list)

    def __getitem__(self, index: int) -> tuple[int, int]:
        while index >= len(self._prompts):
            prompts, outputs, picks = self.draw(LENGTH_CHUNK)
            self._prompts.extend(prompts.tolist())
            self._outputs.extend(outputs.tolist())
            if picks is not None:
                self._picks.extend(picks.tolist())
        return self._prompts[index], self._outputs[index]

    def pick(self, index: int) -> int:
        """Request ``index``'s prompt in the prompt pool (-1: no pool)."""
        if self.pool is None:
            return -1
        self[index]
        return self._picks[index]


@dataclass
class ClosedLoopWorkload:
    """A closed-loop load: ``concurrency`` clients sending until ``max_requests`` have been sent
    or, with ``duration_s``, until that time has passed (no request is sent after it). With
    ``ready_s`` (an open-loop arrival's ``max_concurrency``), request i is sent no earlier than
    ``ready_s[i]``: the clients are the slots of a cap on an open loop."""

    concurrency: int
    think_time_s: float
    think_time_random: bool
    ramp_s: float
    max_requests: int | None
    duration_s: float | None
    lengths: ClosedLoopLengths
    ready_s: np.ndarray | None = None

    def __len__(self) -> int:
        """Requests it will send, when that is known in advance (0 when only a duration is)."""
        return self.max_requests or 0


@dataclass
class StagedWorkload:
    """A staged load (``stages``): stage i sends at ``offsets[i]`` seconds after its start, which
    the simulation sets (when stage i - 1 has drained, plus ``gap_s``); the i-th request sent
    gets the i-th lengths."""

    offsets: list[np.ndarray]
    durations: list[float]
    gap_s: float
    lengths: ClosedLoopLengths

    def __len__(self) -> int:
        """Requests it sends (fewer when a horizon stops it)."""
        return sum(len(o) for o in self.offsets)


def stage_offsets(arrival: StagesArrival, rng: np.random.Generator) -> list[np.ndarray]:
    """Each stage's send times from its start: Poisson (exponential gaps, the first included) or
    constant (every 1/rate seconds from 0), within its duration (the end excluded)."""
    offsets = []
    for stage in arrival.stages:
        rate, duration = stage.rate, stage.duration_s
        if arrival.process_of(stage) == "constant":
            times = np.arange(math.ceil(rate * duration)) / rate
        else:
            expected = rate * duration
            chunk = int(expected + 10 * math.sqrt(expected) + 16)
            times = np.cumsum(rng.exponential(1.0 / rate, chunk))
            while times[-1] < duration:
                more = np.cumsum(rng.exponential(1.0 / rate, chunk)) + times[-1]
                times = np.concatenate([times, more])
        offsets.append(times[times < duration])
    return offsets


# --------------------------------------------------------------------------- size checks


def expected_span_s(scenario: Scenario) -> float | None:
    """About how long the arrivals of a synthetic open-loop workload last, before drawing them:
    ``duration_s``, or ``num_requests / rate`` when that is shorter; None when only the trace or
    the simulation can tell."""
    wl = scenario.workload
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


def check_workload_size(scenario: Scenario, source: str | None) -> None:
    """Before anything is drawn: the arrivals span at most the simulated-time limit, a duration
    expects at most the request limit, and the timeseries windows stay within their limit."""
    wl = scenario.workload
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
        _check_sessions(scenario, source)
    expected_span = expected_span_s(scenario)
    if expected_span is None:
        expected_span = scenario.horizon_s  # the run stops there at the latest
    if expected_span is not None:
        check_windows(scenario, expected_span, source)


def _typical_length(length: Length) -> float:
    """About the mean of a length distribution (1 where only its trace can tell)."""
    if isinstance(length, FixedLength):
        return float(length.value)
    if isinstance(length, UniformLength):
        return (length.low + length.high) / 2
    if isinstance(length, LognormalLength):
        return float(min(max(length.mean, length.min), length.max or length.mean))
    return 1.0


def _check_sessions(scenario: Scenario, source: str | None) -> None:
    """Sessions expect at most the request limit: sessions started (``count``, or rate x
    ``duration_s``, whichever is fewer) times their typical number of turns."""
    wl = scenario.workload
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
            source=source,
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


def check_windows(scenario: Scenario, span_s: float, source: str | None) -> None:
    """The timeseries of a run lasting ``span_s`` (at most ``horizon_s``) has at most the windows
    limit of rows."""
    if scenario.horizon_s is not None:
        span_s = min(span_s, scenario.horizon_s)
    window = scenario.output.timeseries_window_s
    windows = span_s / window + 1
    if windows > WINDOWS.high:
        raise CbsimError(
            f"{span_s:.3g} s of traffic in windows of {window:g} s is {windows:.3g} windows; "
            f"the timeseries {WINDOWS.violation(windows)}: raise the window",
            source=source,
            field="output.timeseries_window_s",
        )


def _check_arrivals(scenario: Scenario, arrivals: np.ndarray, source: str | None) -> None:
    """Once drawn or replayed: the last arrival within the simulated-time limit, the windows
    within theirs."""
    if len(arrivals) == 0:
        return
    last = float(arrivals[-1])
    if not SIMULATED_TIME.contains(last):
        field = "workload.trace" if scenario.workload.trace is not None else "workload.arrival"
        raise CbsimError(
            f"the last request arrives at {last:.3g} s; simulated time "
            f"{SIMULATED_TIME.violation(last)}",
            source=source,
            field=field,
        )
    check_windows(scenario, last, source)


Workload = RequestSpecs | ClosedLoopWorkload | SessionWorkload | StagedWorkload


def build_workload(scenario: Scenario, source: str | None = None) -> Workload:
    """Materialise the scenario's requests (or, closed-loop, the source of their lengths; with
    sessions, the drawn sessions; staged, each stage's send times), after checking they stay
    within :mod:`cbsim.common.limits`."""
    check_workload_size(scenario, source)
    if scenario.workload.prompt_pool is not None and _acceptance_trace(scenario) is not None:
        raise CbsimError(
            "an acceptance trace supplies the prompt lengths: it cannot be combined with "
            "workload.prompt_pool",
            source=source,
            field="speculative.acceptance",
        )
    if scenario.workload.sessions is not None:
        if _acceptance_trace(scenario) is not None:
            raise CbsimError(
                "sessions draw their own lengths: an acceptance trace cannot supply them",
                source=source,
                field="speculative.acceptance",
            )
        sessions = build_sessions(scenario, source)
        _check_arrivals(scenario, sessions.starts, source)
        return sessions
    specs = _build(scenario, source)
    if isinstance(specs, RequestSpecs):
        _check_arrivals(scenario, specs.arrival_s, source)
    return specs


def _build(
    scenario: Scenario, source: str | None
) -> RequestSpecs | ClosedLoopWorkload | StagedWorkload:
    wl = scenario.workload
    seed = scenario.seed
    pool = build_prompt_pool(scenario, source)
    if isinstance(wl.arrival, StagesArrival):
        return StagedWorkload(
            offsets=stage_offsets(wl.arrival, stream(seed, "arrivals")),
            durations=[stage.duration_s for stage in wl.arrival.stages],
            gap_s=wl.arrival.gap_s,
            lengths=ClosedLoopLengths(_closed_loop_draw(scenario, pool, source), pool),
        )
    closed = wl.closed_loop
    if closed is not None:
        max_requests = wl.num_requests
        if max_requests is None and wl.duration_s is None:
            config = _acceptance_trace(scenario)
            if config is not None:
                max_requests = len(load_acceptance_trace(config.path, source=source).output_len)
            else:
                assert wl.trace is not None  # validated: a count, a duration or a trace
                trace = load_trace(wl.trace.path, source=source, field="workload.trace.path")
                max_requests = len(trace)
        return ClosedLoopWorkload(
            concurrency=closed.concurrency,
            think_time_s=closed.think_time_s,
            think_time_random=closed.think_time == "exponential",
            ramp_s=closed.ramp_s,
            max_requests=max_requests,
            duration_s=wl.duration_s,
            lengths=ClosedLoopLengths(_closed_loop_draw(scenario, pool, source), pool),
        )
    if wl.concurrency_cap is not None:
        return _capped_open_loop(scenario, wl.concurrency_cap, pool, source)
    if wl.trace is not None:
        trace = load_trace(wl.trace.path, source=source, field="workload.trace.path")
        return _with_acceptance_trace_lengths(
            scenario, _from_trace(scenario, trace, source), source
        )
    arrivals = _open_loop_arrivals(scenario, wl.num_requests, source)
    n = len(arrivals)
    if _acceptance_trace(scenario) is not None:
        placeholder = np.zeros(n, dtype=np.int64)
        return _with_acceptance_trace_lengths(
            scenario, RequestSpecs(arrivals, placeholder, placeholder), source
        )
    missing = scenario.missing_lengths()
    if missing:
        raise CbsimError("required field is missing", source=source, field=f"workload.{missing[0]}")
    assert wl.output_tokens is not None
    picks = None
    if pool is not None:
        picks = pool.picker(seed)(n)
        prompts = pool.prompt_tokens(picks)
    else:
        assert wl.prompt_tokens is not None
        prompts = _lengths(scenario, wl.prompt_tokens, n, "workload.prompt_tokens", source)
    return RequestSpecs(
        arrival_s=arrivals,
        prompt_tokens=prompts,
        output_tokens=_lengths(scenario, wl.output_tokens, n, "workload.output_tokens", source),
        pool=pool,
        pool_picks=picks,
    )


def _capped_open_loop(
    scenario: Scenario, cap: int, pool: PoolPrompts | None, source: str | None
) -> ClosedLoopWorkload:
    """An open loop behind a client-side cap of ``cap`` requests in flight (``max_concurrency``):
    the arrivals drawn as usual, sent by ``cap`` slots in order; the lengths as a closed loop's
    (a trace's rows in order, when the trace only gives lengths)."""
    wl = scenario.workload
    count = wl.num_requests
    if count is None and wl.trace is not None and not isinstance(wl.arrival, RateCurveArrival):
        trace = load_trace(wl.trace.path, source=source, field="workload.trace.path")
        count = len(trace)
    ready = _open_loop_arrivals(scenario, count, source)
    _check_arrivals(scenario, ready, source)
    return ClosedLoopWorkload(
        concurrency=cap,
        think_time_s=0.0,
        think_time_random=False,
        ramp_s=0.0,
        max_requests=len(ready),
        duration_s=None,
        lengths=ClosedLoopLengths(_closed_loop_draw(scenario, pool, source), pool),
        ready_s=ready,
    )


def _open_loop_arrivals(scenario: Scenario, count: int | None, source: str | None) -> np.ndarray:
    """A synthetic open-loop workload's arrival times (the scenario's ``arrivals`` stream)."""
    wl = scenario.workload
    rng = stream(scenario.seed, "arrivals")
    if isinstance(wl.arrival, RateCurveArrival):
        return rate_curve_arrivals(rate_curve(wl.arrival, wl.duration_s, source), count, rng)
    assert isinstance(wl.arrival, PoissonArrival | GammaArrival | OfflineArrival)
    return synthetic_arrivals(wl.arrival, count, wl.duration_s, rng)


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
            "this trace has lengths but no arrival times; give workload.arrival (poisson, gamma "
            "or rate_curve)",
            source=source,
            field="workload.trace.path",
        )
    if synthetic:
        count: int | None = wl.num_requests if wl.num_requests is not None else len(trace)
        if isinstance(wl.arrival, RateCurveArrival):
            count = wl.num_requests  # the curve's end says how many
        arrivals = _open_loop_arrivals(scenario, count, source)
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
    prefix_ids = None
    if "prefix_hash_ids" in trace.columns:
        prefix_ids = trace["prefix_hash_ids"].to_numpy(dtype=object)[rows]
    return RequestSpecs(
        arrival_s=np.asarray(arrivals, dtype=np.float64),
        prompt_tokens=prompts,
        output_tokens=outputs,
        warnings=() if synthetic else tuple(trace.attrs.get("warnings", ())),
        prefix_ids=prefix_ids,
        prefix_block_tokens=wl.trace.prefix_block_tokens,
    )


def _closed_loop_draw(
    scenario: Scenario, pool: PoolPrompts | None, source: str | None
) -> LengthDraw:
    """Where a closed loop's (or a staged load's) lengths come from: an acceptance trace's or a
    replayed trace's rows in order (cycling), else the length distributions (prompts: the prompt
    pool's, when there is one), each from its own continuing stream."""
    wl = scenario.workload
    rows: tuple[np.ndarray, np.ndarray] | None = None
    config = _acceptance_trace(scenario)
    if config is not None:
        trace = load_acceptance_trace(config.path, source=source)
        rows = (trace.prompt_len, trace.output_len)
    elif wl.trace is not None:
        frame = load_trace(wl.trace.path, source=source, field="workload.trace.path")
        rows = (
            frame["prompt_tokens"].to_numpy(dtype=np.int64),
            frame["output_tokens"].to_numpy(dtype=np.int64),
        )
    samplers: dict[str, Callable[[int], np.ndarray]] = {}
    for name in ("prompt_tokens", "output_tokens"):
        spec = getattr(wl, name)
        if spec is not None and config is None:
            samplers[name] = _length_sampler(scenario, spec, f"workload.{name}", source)
    position = [0]
    picker = pool.picker(scenario.seed) if pool is not None else None

    def draw(count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        index = (np.arange(count) + position[0]) % len(rows[0]) if rows is not None else None
        position[0] += count
        picks = None
        columns = []
        for column, name in enumerate(("prompt_tokens", "output_tokens")):
            if name in samplers:
                columns.append(samplers[name](count))
            elif picker is not None and pool is not None and column == 0:
                picks = picker(count)
                columns.append(pool.prompt_tokens(picks))
            else:
                assert rows is not None and index is not None
                columns.append(rows[column][index])
        return columns[0], columns[1], picks

    return draw


def _length_sampler(
    scenario: Scenario, spec: Length, field: str, source: str | None
) -> Callable[[int], np.ndarray]:
    name = f"lengths:{spec.trace}" if isinstance(spec, EmpiricalLength) else field
    rng = stream(scenario.seed, name)
    return lambda count: sample_lengths(spec, count, rng, field=field, source=source)


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
    return RequestSpecs(
        specs.arrival_s, trace.prompt_len[rows], trace.output_len[rows], specs.warnings
    )
