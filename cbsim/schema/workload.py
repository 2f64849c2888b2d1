"""The ``workload`` section: what traffic arrives.

An arrival process (Poisson, gamma, offline, closed-loop clients, rate stages, a rate curve or a
replayed trace's timestamps), prompt and output lengths (fixed, uniform, lognormal or drawn from a trace),
multi-turn ``sessions``, a shared-prefix ``prompt_pool`` and the benchmark ``client``'s timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from cbsim.common.limits import (
    RATE,
    SIMULATED_TIME,
    ClientCount,
    GammaCv,
    LognormalSigma,
    NotBool,
    Rate,
    RequestCount,
    Seconds,
    TimeOffset,
    TimeScale,
    TokenCount,
    TokenMean,
)
from cbsim.schema.base import StrictModel, default_kind


class PoissonArrival(StrictModel):
    """Exponential inter-arrival times at ``rate`` requests per second. With ``max_concurrency``
    C the client holds each request until fewer than C of its own are in flight (see
    :data:`MAX_CONCURRENCY_DOC`)."""

    kind: Literal["poisson"] = "poisson"
    rate: Rate
    max_concurrency: ClientCount | None = None


class GammaArrival(StrictModel):
    """Gamma inter-arrival times: ``rate`` per second, coefficient of variation ``cv`` (1 = Poisson);
    ``max_concurrency`` as for :class:`PoissonArrival`."""

    kind: Literal["gamma"]
    rate: Rate
    cv: GammaCv = 1.0
    max_concurrency: ClientCount | None = None


MAX_CONCURRENCY_DOC = """``max_concurrency: C`` on an open-loop arrival (poisson, gamma, rate_curve) is vLLM's
``bench serve --request-rate R --max-concurrency C``: requests become ready at the drawn times,
but the client sends one only while fewer than C of its requests are in flight; the others wait,
first come first served, for a slot. A request's times (``arrival_s``, TTFT, E2E) count from when
it is sent, as vLLM's do; the wait is not the server's. Requests gain a ``client`` column (the slot
that sent it)."""


class OfflineArrival(StrictModel):
    """Every request arrives at time 0: offline batch inference (a benchmark's static batch)."""

    kind: Literal["offline"]


class TraceArrival(StrictModel):
    """Arrival times replayed from ``workload.trace``."""

    kind: Literal["trace"]


class ClosedLoopArrival(StrictModel):
    """``concurrency`` clients, each sending its next request once its previous one has finished
    and ``think_time_s`` has passed: the load of vLLM's ``bench serve --max-concurrency``,
    genai-perf/aiperf and trtllm-bench. Arrival times come out of the simulation (a finish
    releases the next request), never more than ``concurrency`` requests are in flight, and
    requests gain a ``client`` column.

    All clients send their first request at time 0, or, with ``ramp_s``, each at a uniformly
    random time in ``[0, ramp_s)`` (the scenario's ``clients`` stream): with fixed lengths,
    clients that start together finish together and stay in lockstep, while real benchmark
    clients drift apart; a ramp of about one request's duration starts them spread out.
    ``think_time: exponential`` makes each think time random with mean ``think_time_s`` (the
    ``clients`` stream), which also lets clients drift apart."""

    kind: Literal["closed_loop"]
    concurrency: ClientCount
    think_time_s: TimeOffset = 0.0
    think_time: Literal["fixed", "exponential"] = "fixed"
    ramp_s: TimeOffset = 0.0


ArrivalProcess = Literal["poisson", "constant"]
MAX_STAGES = 64


class Stage(StrictModel):
    """One rate point of a staged load: ``rate`` requests per second for ``duration_s`` seconds,
    sent as ``process`` says (default: the stages' ``process``)."""

    rate: Rate
    duration_s: Seconds
    process: ArrivalProcess | None = None


class StagesArrival(StrictModel):
    """A load generator's sweep of rate points, as ``vllm bench serve`` over several request
    rates, guidellm's rate sweeps and LMBenchmark run it: each stage sends at its ``rate`` for its
    ``duration_s``, Poisson (exponential gaps, the first gap included; the scenario's
    ``arrivals`` stream) or ``constant`` (one request every 1/rate seconds from the stage's start,
    as LMBenchmark and many load generators send). A stage starts once every request of the
    previous one is done (finished, rejected or timed out, as the client sees it: its last token
    delivered) and ``gap_s`` more seconds have passed, so stage start times come out of the
    simulation and stages never overlap. The stages say how many requests are sent: leave
    ``num_requests`` and ``duration_s`` out. Requests gain a ``stage`` column (0, 1, ...) and the
    summary per-stage figures (``stage0_ttft_p50_s``, ...; see :func:`cbsim.engine.recorder.stage_summary`)."""

    kind: Literal["stages"]
    stages: list[Stage] = Field(min_length=1, max_length=MAX_STAGES)
    process: ArrivalProcess = "poisson"
    gap_s: TimeOffset = 0.0

    def process_of(self, stage: Stage) -> ArrivalProcess:
        """How ``stage`` sends its requests."""
        return stage.process if stage.process is not None else self.process


MAX_CURVE_POINTS = 100_000


def curve_problem(times: Sequence[float], rates: Sequence[float]) -> tuple[int | None, str] | None:
    """What is wrong with a rate curve's (t_s, rate) points, as (the index of the point at fault,
    or None for the whole curve; why), or None when they make a curve: at least two points,
    times within simulated time and increasing, rates between 0 and the arrival-rate limit and
    not all 0."""
    if len(times) < 2:
        return None, f"a rate curve needs at least 2 (t_s, rate) points; got {len(times)}"
    if len(times) > MAX_CURVE_POINTS:
        return None, f"a rate curve has at most {MAX_CURVE_POINTS:,} points; got {len(times):,}"
    for i, (t, rate) in enumerate(zip(times, rates, strict=True)):
        if not SIMULATED_TIME.contains(t):
            return i, f"t_s {SIMULATED_TIME.violation(t)}"
        if not (0.0 <= rate <= RATE.high):
            return i, f"rate must be between 0 and {RATE.high:,.0f} requests/s; got {rate:g}"
        if i and t <= times[i - 1]:
            return i, f"t_s {t:g} does not come after the previous point's {times[i - 1]:g}"
    if max(rates) <= 0:
        return None, "every rate of the curve is 0: no request would arrive"
    return None


def _number_pair(value: Any) -> Any:
    """A point must be a [t_s, rate] pair of numbers (booleans are not numbers)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError("a point is a [t_s, rate] pair")
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in value):
        raise ValueError("a point is a [t_s, rate] pair of numbers")
    return value


CurvePoint = Annotated[tuple[float, float], BeforeValidator(_number_pair)]


class RateCurveArrival(StrictModel):
    """A day of traffic: a non-homogeneous Poisson process whose rate (requests per second)
    follows the (t_s, rate) ``points`` (or the ``csv`` file's ``t_s,rate`` columns, a path
    relative to the scenario), linearly between neighbouring points. Before the first point the
    rate is the first point's; arrivals end at the last point's time, or earlier at
    ``workload.duration_s`` or after ``workload.num_requests`` requests (both optional here). The
    draw is exact: unit-rate exponential gaps (the scenario's ``arrivals`` stream) mapped through
    the inverse of the integrated rate, so the expected count in a window is the rate's integral
    over it (:func:`cbsim.workload.arrivals.rate_curve_arrivals`). ``max_concurrency`` as for
    :class:`PoissonArrival`."""

    kind: Literal["rate_curve"]
    points: list[CurvePoint] | None = None
    csv: str | None = None
    max_concurrency: ClientCount | None = None

    @field_validator("points")
    @classmethod
    def _curve(cls, points: list[tuple[float, float]] | None) -> list[tuple[float, float]] | None:
        if points is None:
            return None
        problem = curve_problem([p[0] for p in points], [p[1] for p in points])
        if problem is not None:
            index, why = problem
            raise ValueError(why if index is None else f"points[{index}]: {why}")
        return points

    @model_validator(mode="after")
    def _one_source(self) -> RateCurveArrival:
        if (self.points is None) == (self.csv is None):
            raise ValueError("give points ([[t_s, rate], ...]) or csv (a file of t_s,rate), one")
        return self


Arrival = Annotated[
    PoissonArrival
    | GammaArrival
    | OfflineArrival
    | TraceArrival
    | ClosedLoopArrival
    | StagesArrival
    | RateCurveArrival,
    Field(discriminator="kind"),
    default_kind("poisson"),
]


class Client(StrictModel):
    """How the benchmark client treats a request: one still unfinished ``timeout_s`` seconds after
    it was sent is given up (its status ``timed_out``, counted in the summary's ``timed_out``) and
    aborted on the server, as vLLM aborts a request whose client disconnected: at its replica's
    next step boundary it leaves the waiting queue or the running batch (the step already under
    way completes), its KV blocks are freed and its prefix-cache entries released (computed
    prefixes stay cached). A closed-loop client then sends its next request (after its think
    time); a session's timed-out turn ends the session. A timed-out request keeps the tokens the
    server generated for it (``generated_tokens``) and its first token's time when that reached
    the client before the timeout (``first_token_s``, ``ttft_s``; else NaN); ``finish_s``,
    ``e2e_s`` and ``tpot_s`` are NaN, so it never enters the completed requests' latency
    percentiles. The inter-token latency counts every token streamed, a timed-out request's
    included."""

    timeout_s: Seconds


class FixedLength(StrictModel):
    kind: Literal["fixed"]
    value: TokenCount


class UniformLength(StrictModel):
    """Integers drawn uniformly from [low, high], both inclusive."""

    kind: Literal["uniform"]
    low: TokenCount
    high: TokenCount

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self


class LognormalLength(StrictModel):
    """Lognormal lengths with arithmetic ``mean`` and log-space ``sigma``, clipped to [min, max]."""

    kind: Literal["lognormal"]
    mean: TokenMean
    sigma: LognormalSigma
    min: TokenCount = 1
    max: TokenCount | None = None

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLength:
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        return self


class EmpiricalLength(StrictModel):
    """Lengths resampled (with replacement) from a trace: a shipped trace name or a file path.

    When prompt and output lengths are both empirical from the same trace they are drawn from the
    same rows, so their correlation is kept.
    """

    kind: Literal["empirical"]
    trace: str


Length = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength, Field(discriminator="kind")
]


class TraceReplay(StrictModel):
    """Replay a real request log: its arrival times (scaled) and its prompt/output lengths.

    ``prefix_block_tokens``: the tokens each of the trace's prefix block ids stands for (512 in
    the Mooncake traces); used by prefix caching."""

    path: str
    time_scale: TimeScale | None = None
    rate_scale: TimeScale | None = None
    start_s: TimeOffset = 0.0
    prefix_block_tokens: TokenCount = 512

    @model_validator(mode="after")
    def _one_scale(self) -> TraceReplay:
        if self.time_scale is not None and self.rate_scale is not None:
            raise ValueError("give time_scale or rate_scale, not both (rate_scale = 1/time_scale)")
        return self

    @property
    def effective_time_scale(self) -> float:
        """Factor applied to the trace's arrival times (0.5 replays twice as fast)."""
        if self.rate_scale is not None:
            return 1.0 / self.rate_scale
        return self.time_scale if self.time_scale is not None else 1.0


class SystemPrompt(StrictModel):
    """A system prompt sessions share: ``templates`` different ones, each ``tokens`` long (drawn
    once per template); a session uses template r (r = 1, 2, ...) with probability proportional
    to 1 / r**zipf (0: all alike)."""

    templates: Annotated[int, NotBool, Field(ge=1, le=10_000)] = 4
    tokens: Length
    zipf: Annotated[float, NotBool, Field(ge=0.0, le=10.0)] = 1.0


class Sessions(StrictModel):
    """Multi-turn conversations (:mod:`cbsim.workload.sessions`). Sessions start by ``workload.arrival``
    (poisson or gamma; its rate counts sessions per second), ``count`` of them or as many as
    start within ``workload.duration_s``. A session has ``turns`` turns; turn t sends the whole
    conversation so far as its prompt (the system prompt, every earlier user message and answer,
    then its own ``user_tokens`` message) and asks for ``answer_tokens`` tokens; it is sent
    ``think_time_s`` (``fixed``, or ``exponential`` with that mean) after the previous answer has
    reached the user. A rejected turn ends its session."""

    count: RequestCount | None = None
    turns: Length
    user_tokens: Length
    answer_tokens: Length
    think_time_s: TimeOffset = 0.0
    think_time: Literal["fixed", "exponential"] = "fixed"
    system_prompt: SystemPrompt | None = None


def _fixed_if_number(value: Any) -> Any:
    """A bare token count is a fixed length."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"kind": "fixed", "value": value}
    return value


PoolLength = Annotated[
    FixedLength | UniformLength | LognormalLength,
    Field(discriminator="kind"),
    BeforeValidator(_fixed_if_number),
]
MAX_POOL_PROMPTS = 10_000_000


class PromptPool(StrictModel):
    """Shared-prefix prompts as benchmark tools generate them (SGLang's ``generated-shared-prefix``
    dataset, vLLM's ``prefix_repetition``, genai-perf's prefix prompts): ``system_prompts``
    system prompts of ``system_tokens`` tokens each (a length distribution, or a number: fixed),
    each with ``questions`` questions of its own of ``question_tokens`` tokens, drawn once
    (:mod:`cbsim.workload.prompt_pool`). Every request's prompt is one system prompt (prompt r, r = 1, 2,
    ..., with probability proportional to 1 / r**zipf; 0: all alike) followed by one of its
    questions (uniformly), drawn with replacement, so prompts recur and the prefix cache reuses
    the system prompts and whole recurring prompts as a server would. The pool replaces
    ``prompt_tokens``; ``output_tokens`` still gives the output lengths. Works with every arrival
    process but a replayed trace."""

    system_prompts: Annotated[int, NotBool, Field(ge=1, le=100_000)]
    system_tokens: PoolLength
    questions: Annotated[int, NotBool, Field(ge=1, le=MAX_POOL_PROMPTS)]
    question_tokens: PoolLength
    zipf: Annotated[float, NotBool, Field(ge=0.0, le=10.0)] = 0.0

    @model_validator(mode="after")
    def _bounded(self) -> PromptPool:
        prompts = self.system_prompts * self.questions
        if prompts > MAX_POOL_PROMPTS:
            raise ValueError(
                f"{self.system_prompts:,} system prompts x {self.questions:,} questions is "
                f"{prompts:,} prompts; at most {MAX_POOL_PROMPTS:,}"
            )
        return self


class Workload(StrictModel):
    """What arrives: a synthetic process (rate stages among them, :class:`StagesArrival`), a
    replayed trace, trace lengths with synthetic arrivals, or multi-turn sessions; ``client``: the
    benchmark client's timeout (:class:`Client`); ``prompt_pool``: shared-prefix prompts in place
    of prompt lengths (:class:`PromptPool`)."""

    num_requests: RequestCount | None = None
    duration_s: Seconds | None = None
    arrival: Arrival | None = None
    prompt_tokens: Length | None = None
    output_tokens: Length | None = None
    trace: TraceReplay | None = None
    sessions: Sessions | None = None
    client: Client | None = None
    prompt_pool: PromptPool | None = None

    @model_validator(mode="after")
    def _complete(self) -> Workload:
        if self.prompt_pool is not None:
            self._pool_alone()
        if self.sessions is not None:
            return self._sessions_complete()
        if isinstance(self.arrival, StagesArrival):
            extra = [n for n in ("num_requests", "duration_s") if getattr(self, n) is not None]
            if extra:
                raise ValueError(
                    f"with arrival kind 'stages' leave out {' and '.join(extra)} (each stage's "
                    "rate and duration_s say how many requests are sent)"
                )
            return self
        if self.trace is None:
            if self.arrival is None:
                raise ValueError(
                    "without a trace the workload needs arrival "
                    "(or give workload.trace to replay a real log)"
                )
            if isinstance(self.arrival, TraceArrival):
                raise ValueError("arrival kind 'trace' needs workload.trace")
            rate_curve = isinstance(self.arrival, RateCurveArrival)  # its last point ends it
            if self.num_requests is None and self.duration_s is None and not rate_curve:
                raise ValueError("give num_requests or duration_s (or a trace)")
        if isinstance(self.arrival, OfflineArrival) and self.num_requests is None:
            raise ValueError("arrival kind 'offline' needs num_requests")
        return self

    def _sessions_complete(self) -> Workload:
        assert self.sessions is not None
        if getattr(self.arrival, "max_concurrency", None) is not None:
            raise ValueError(
                "arrival.max_concurrency caps requests in flight, and sessions' arrival starts "
                "sessions: leave it out (a session sends its next turn once answered)"
            )
        if not isinstance(self.arrival, PoissonArrival | GammaArrival):
            raise ValueError(
                "sessions start by workload.arrival: give it (kind poisson or gamma; its rate "
                "is sessions per second)"
            )
        extra = [
            name
            for name in ("trace", "prompt_tokens", "output_tokens", "num_requests")
            if getattr(self, name) is not None
        ]
        if extra:
            raise ValueError(
                f"with sessions leave out {', '.join(extra)} (sessions.count, user_tokens and "
                "answer_tokens say it)"
            )
        if self.sessions.count is None and self.duration_s is None:
            raise ValueError("give sessions.count or duration_s")
        return self

    def _pool_alone(self) -> None:
        """A prompt pool makes the prompts: nothing else may."""
        clashing = {
            "prompt_tokens": "the pool gives the prompt lengths",
            "trace": "a replayed trace brings its own prompts",
            "sessions": "sessions build their own prompts",
        }
        for name, why in clashing.items():
            if getattr(self, name) is not None:
                raise ValueError(f"prompt_pool: leave out workload.{name} ({why})")

    @property
    def closed_loop(self) -> ClosedLoopArrival | None:
        """The closed-loop client population, when the load is closed-loop."""
        return self.arrival if isinstance(self.arrival, ClosedLoopArrival) else None

    @property
    def concurrency_cap(self) -> int | None:
        """An open-loop arrival's ``max_concurrency`` (None: uncapped, or not open-loop)."""
        cap: int | None = getattr(self.arrival, "max_concurrency", None)
        return cap
