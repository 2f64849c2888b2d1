"""Workload generation in one pass: a scenario's requests drawn from its workload section.

:func:`read_workload` reads the scenario once: its workload section and the few other fields that
shape the requests (the seed, a speculative acceptance trace that supplies the lengths, the horizon
and the timeseries window), into :class:`~cbsim.workload.inputs.WorkloadInputs`. From there
:func:`build_workload` checks the workload's size (:mod:`cbsim.workload.size_checks`) and hands
each lower module only its own part: an arrival spec and the ``arrivals`` stream to
:mod:`cbsim.workload.arrivals` (arrival or send times), a length spec and its stream to
:mod:`cbsim.workload.lengths` (token lengths), the sessions spec and their start times to
:mod:`cbsim.workload.sessions`, the prompt pool spec to :mod:`cbsim.workload.prompt_pool`, a
trace's path to :mod:`cbsim.workload.traces`. It assembles what they return into what the request
sources send (:mod:`cbsim.workload.drawn`); none of them sees the scenario or calls back up here.

Arrivals are Poisson (exponential gaps), gamma (gaps with a chosen coefficient of variation,
bursty above 1), a rate curve (a non-homogeneous Poisson process whose rate is piecewise linear in
time: a day of traffic), stages, or replayed from a real trace with a time scale; lengths are
fixed, uniform, lognormal (arithmetic mean, log-space sigma, clipped) or resampled from a trace.
Each draws from its own named random stream, so changing one never changes the others.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cbsim.common.columns import ColumnTable
from cbsim.common.errors import CbsimError
from cbsim.common.rng import stream
from cbsim.schema.scenario import Scenario
from cbsim.schema.speculative import TraceAcceptance
from cbsim.schema.workload import (
    EmpiricalLength,
    GammaArrival,
    Length,
    OfflineArrival,
    PoissonArrival,
    RateCurveArrival,
    StagesArrival,
    TraceArrival,
)
from cbsim.workload.acceptance_trace import load_acceptance_trace
from cbsim.workload.arrivals import (
    rate_curve,
    rate_curve_arrivals,
    stage_offsets,
    synthetic_arrivals,
)
from cbsim.workload.drawn import (
    ClosedLoopLengths,
    ClosedLoopWorkload,
    LengthDraw,
    RequestSpecs,
    StagedWorkload,
    Workload,
)
from cbsim.workload.inputs import WorkloadInputs
from cbsim.workload.lengths import sample_lengths
from cbsim.workload.prompt_pool import PoolPrompts, draw_prompt_pool
from cbsim.workload.sessions import SessionWorkload, draw_sessions
from cbsim.workload.size_checks import check_arrivals, check_size
from cbsim.workload.traces import trace_table


def read_workload(scenario: Scenario, source: str | None = None) -> WorkloadInputs:
    """What generating the scenario's workload needs of it, read once."""
    acceptance = scenario.speculative.acceptance
    acceptance_trace = None
    if scenario.speculative.enabled and isinstance(acceptance, TraceAcceptance):
        acceptance_trace = acceptance.path
    return WorkloadInputs(
        workload=scenario.workload,
        seed=scenario.seed,
        acceptance_trace=acceptance_trace,
        missing_lengths=tuple(scenario.missing_lengths()),
        horizon_s=scenario.horizon_s,
        window_s=scenario.output.timeseries_window_s,
        source=source,
    )


def check_workload_size(scenario: Scenario, source: str | None) -> None:
    """Before anything is drawn: the scenario's workload stays within :mod:`cbsim.common.limits`
    (:func:`cbsim.workload.size_checks.check_size`)."""
    check_size(read_workload(scenario, source))


def build_workload(scenario: Scenario, source: str | None = None) -> Workload:
    """Materialise the scenario's requests (or, closed-loop, the source of their lengths; with
    sessions, the drawn sessions; staged, each stage's send times), after checking they stay
    within :mod:`cbsim.common.limits`."""
    inputs = read_workload(scenario, source)
    check_size(inputs)
    wl = inputs.workload
    if wl.prompt_pool is not None and inputs.acceptance_trace is not None:
        raise CbsimError(
            "an acceptance trace supplies the prompt lengths: it cannot be combined with "
            "workload.prompt_pool",
            source=source,
            field="speculative.acceptance",
        )
    if wl.sessions is not None:
        if inputs.acceptance_trace is not None:
            raise CbsimError(
                "sessions draw their own lengths: an acceptance trace cannot supply them",
                source=source,
                field="speculative.acceptance",
            )
        sessions = _sessions(inputs)
        check_arrivals(inputs, sessions.starts)
        return sessions
    specs = _build(inputs)
    if isinstance(specs, RequestSpecs):
        check_arrivals(inputs, specs.arrival_s)
    return specs


def _sessions(inputs: WorkloadInputs) -> SessionWorkload:
    """Sessions starting on the workload's arrival clock (the ``arrivals`` stream)."""
    wl = inputs.workload
    config, arrival = wl.sessions, wl.arrival
    assert config is not None and isinstance(arrival, PoissonArrival | GammaArrival)  # validated
    rng = stream(inputs.seed, "arrivals")
    starts = synthetic_arrivals(arrival, config.count, wl.duration_s, rng)
    return draw_sessions(config, starts, inputs.seed, inputs.source)


def _build(inputs: WorkloadInputs) -> RequestSpecs | ClosedLoopWorkload | StagedWorkload:
    wl, seed, source = inputs.workload, inputs.seed, inputs.source
    pool = draw_prompt_pool(wl.prompt_pool, seed, source) if wl.prompt_pool is not None else None
    if isinstance(wl.arrival, StagesArrival):
        return StagedWorkload(
            offsets=stage_offsets(wl.arrival, stream(seed, "arrivals")),
            durations=[stage.duration_s for stage in wl.arrival.stages],
            gap_s=wl.arrival.gap_s,
            lengths=ClosedLoopLengths(_closed_loop_draw(inputs, pool), pool),
        )
    closed = wl.closed_loop
    if closed is not None:
        max_requests = wl.num_requests
        if max_requests is None and wl.duration_s is None:
            if inputs.acceptance_trace is not None:
                acceptance = load_acceptance_trace(inputs.acceptance_trace, source=source)
                max_requests = len(acceptance.output_len)
            else:
                assert wl.trace is not None  # validated: a count, a duration or a trace
                trace = trace_table(wl.trace.path, source=source, field="workload.trace.path")
                max_requests = len(trace)
        return ClosedLoopWorkload(
            concurrency=closed.concurrency,
            think_time_s=closed.think_time_s,
            think_time_random=closed.think_time == "exponential",
            ramp_s=closed.ramp_s,
            max_requests=max_requests,
            duration_s=wl.duration_s,
            lengths=ClosedLoopLengths(_closed_loop_draw(inputs, pool), pool),
        )
    if wl.concurrency_cap is not None:
        return _capped_open_loop(inputs, wl.concurrency_cap, pool)
    if wl.trace is not None:
        trace = trace_table(wl.trace.path, source=source, field="workload.trace.path")
        return _with_acceptance_trace_lengths(inputs, _from_trace(inputs, trace))
    arrivals = _open_loop_arrivals(inputs, wl.num_requests)
    n = len(arrivals)
    if inputs.acceptance_trace is not None:
        placeholder = np.zeros(n, dtype=np.int64)
        return _with_acceptance_trace_lengths(
            inputs, RequestSpecs(arrivals, placeholder, placeholder)
        )
    missing = inputs.missing_lengths
    if missing:
        raise CbsimError("required field is missing", source=source, field=f"workload.{missing[0]}")
    assert wl.output_tokens is not None
    picks = None
    if pool is not None:
        picks = pool.picker(seed)(n)
        prompts = pool.prompt_tokens(picks)
    else:
        assert wl.prompt_tokens is not None
        prompts = _lengths(inputs, wl.prompt_tokens, n, "workload.prompt_tokens")
    return RequestSpecs(
        arrival_s=arrivals,
        prompt_tokens=prompts,
        output_tokens=_lengths(inputs, wl.output_tokens, n, "workload.output_tokens"),
        pool=pool,
        pool_picks=picks,
    )


def _capped_open_loop(
    inputs: WorkloadInputs, cap: int, pool: PoolPrompts | None
) -> ClosedLoopWorkload:
    """An open loop behind a client-side cap of ``cap`` requests in flight (``max_concurrency``):
    the arrivals drawn as usual, sent by ``cap`` slots in order; the lengths as a closed loop's
    (a trace's rows in order, when the trace only gives lengths)."""
    wl = inputs.workload
    count = wl.num_requests
    if count is None and wl.trace is not None and not isinstance(wl.arrival, RateCurveArrival):
        trace = trace_table(wl.trace.path, source=inputs.source, field="workload.trace.path")
        count = len(trace)
    ready = _open_loop_arrivals(inputs, count)
    check_arrivals(inputs, ready)
    return ClosedLoopWorkload(
        concurrency=cap,
        think_time_s=0.0,
        think_time_random=False,
        ramp_s=0.0,
        max_requests=len(ready),
        duration_s=None,
        lengths=ClosedLoopLengths(_closed_loop_draw(inputs, pool), pool),
        ready_s=ready,
    )


def _open_loop_arrivals(inputs: WorkloadInputs, count: int | None) -> np.ndarray:
    """A synthetic open-loop workload's arrival times (the ``arrivals`` stream)."""
    wl = inputs.workload
    rng = stream(inputs.seed, "arrivals")
    if isinstance(wl.arrival, RateCurveArrival):
        curve = rate_curve(wl.arrival, wl.duration_s, inputs.source)
        return rate_curve_arrivals(curve, count, rng)
    assert isinstance(wl.arrival, PoissonArrival | GammaArrival | OfflineArrival)
    return synthetic_arrivals(wl.arrival, count, wl.duration_s, rng)


def _length_stream(seed: int, spec: Length, field: str) -> np.random.Generator:
    """The stream a length field draws from: empirical lengths from a stream per trace, so that
    prompt and output lengths from one trace share rows."""
    name = f"lengths:{spec.trace}" if isinstance(spec, EmpiricalLength) else field
    return stream(seed, name)


def _lengths(inputs: WorkloadInputs, spec: Length, n: int, field: str) -> np.ndarray:
    rng = _length_stream(inputs.seed, spec, field)
    return sample_lengths(spec, n, rng, field=field, source=inputs.source)


def _from_trace(inputs: WorkloadInputs, trace: ColumnTable) -> RequestSpecs:
    wl, source = inputs.workload, inputs.source
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
        arrivals = _open_loop_arrivals(inputs, count)
        rows = np.arange(len(arrivals)) % len(trace)
    else:
        times = np.asarray(trace["arrival_s"], np.float64)
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
    prompts = np.asarray(trace["prompt_tokens"], np.int64)[rows]
    outputs = np.asarray(trace["output_tokens"], np.int64)[rows]
    if wl.prompt_tokens is not None:
        prompts = _lengths(inputs, wl.prompt_tokens, n, "workload.prompt_tokens")
    if wl.output_tokens is not None:
        outputs = _lengths(inputs, wl.output_tokens, n, "workload.output_tokens")
    prefix_ids = None
    if "prefix_hash_ids" in trace:
        prefix_ids = np.asarray(trace["prefix_hash_ids"], object)[rows]
    return RequestSpecs(
        arrival_s=np.asarray(arrivals, dtype=np.float64),
        prompt_tokens=prompts,
        output_tokens=outputs,
        warnings=() if synthetic else tuple(trace.attrs.get("warnings", ())),
        prefix_ids=prefix_ids,
        prefix_block_tokens=wl.trace.prefix_block_tokens,
    )


def _closed_loop_draw(inputs: WorkloadInputs, pool: PoolPrompts | None) -> LengthDraw:
    """Where a closed loop's (or a staged load's) lengths come from: an acceptance trace's or a
    replayed trace's rows in order (cycling), else the length distributions (prompts: the prompt
    pool's, when there is one), each from its own continuing stream."""
    wl, source = inputs.workload, inputs.source
    rows: tuple[np.ndarray, np.ndarray] | None = None
    if inputs.acceptance_trace is not None:
        trace = load_acceptance_trace(inputs.acceptance_trace, source=source)
        rows = (trace.prompt_len, trace.output_len)
    elif wl.trace is not None:
        replayed = trace_table(wl.trace.path, source=source, field="workload.trace.path")
        rows = (
            np.asarray(replayed["prompt_tokens"], np.int64),
            np.asarray(replayed["output_tokens"], np.int64),
        )
    samplers: dict[str, Callable[[int], np.ndarray]] = {}
    for name in ("prompt_tokens", "output_tokens"):
        spec = getattr(wl, name)
        if spec is not None and inputs.acceptance_trace is None:
            samplers[name] = _length_sampler(inputs, spec, f"workload.{name}")
    position = [0]
    picker = pool.picker(inputs.seed) if pool is not None else None

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
    inputs: WorkloadInputs, spec: Length, field: str
) -> Callable[[int], np.ndarray]:
    rng = _length_stream(inputs.seed, spec, field)
    source = inputs.source
    return lambda count: sample_lengths(spec, count, rng, field=field, source=source)


def _with_acceptance_trace_lengths(inputs: WorkloadInputs, specs: RequestSpecs) -> RequestSpecs:
    """With a speculative acceptance trace, its requests supply the lengths: request i replays
    trace row i (cycling), so every request has an acceptance length for each output position."""
    if inputs.acceptance_trace is None:
        return specs
    trace = load_acceptance_trace(inputs.acceptance_trace, source=inputs.source)
    rows = np.arange(len(specs)) % len(trace.output_len)
    return RequestSpecs(
        specs.arrival_s, trace.prompt_len[rows], trace.output_len[rows], specs.warnings
    )
