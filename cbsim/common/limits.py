"""Limits: the physical range of every number a user gives cbsim, and why.

A scenario, a trace, a sweep or a command-line option is checked against these ranges before
anything is built, so a typo (``num_requests: 1e12``, ``rate: 1e-300``, ``replicas: 1e30``) ends in
one clear error naming the field, the range and the reason, instead of an hour-long run, an
exhausted memory or an integer that wraps around. The ranges are wide: each is far beyond what any
real deployment or benchmark uses, and only as tight as keeping a run's memory and time finite
needs. They are stated here, in one place, and used by the scenario models (as annotated types),
the trace and model-config readers, the sweep file and the command-line options alike.

Every :class:`Limit` is inclusive at both ends unless ``low_exclusive`` says otherwise. Time is in
seconds, rates in requests per second, lengths in tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import click
from pydantic import AfterValidator, BeforeValidator, Field

DAY_S = 86_400.0


@dataclass(frozen=True)
class Limit:
    """A closed range ``[low, high]`` (``(low, high]`` with ``low_exclusive``) for one family of
    numbers, its unit and the reason for its ends."""

    what: str
    low: float
    high: float
    unit: str
    reason: str
    low_exclusive: bool = False

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the range (NaN never does)."""
        above_low = value > self.low if self.low_exclusive else value >= self.low
        return bool(above_low and value <= self.high)

    def describe(self) -> str:
        """The range in words: ``between 1 and 10,000,000 requests``."""
        unit = f" {self.unit}" if self.unit else ""
        if self.low_exclusive:
            return f"above {_number(self.low)} and at most {_number(self.high)}{unit}"
        return f"between {_number(self.low)} and {_number(self.high)}{unit}"

    def violation(self, value: float) -> str | None:
        """Why ``value`` is out of range (``must be ... (reason); got ...``), or None."""
        if self.contains(value):
            return None
        return f"must be {self.describe()} ({self.reason}); got {_number(value)}"

    def check(self, value: Any) -> Any:
        """``value`` unchanged when in range, else :class:`ValueError` (for pydantic)."""
        problem = self.violation(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    def table_row(self) -> tuple[str, str, str]:
        """(what, range, reason) for documentation."""
        return self.what, self.describe(), self.reason


def _number(value: float) -> str:
    """A bound as people read it: ``10,000,000``, ``0.001``, ``1e-06``, ``3.15e+07``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        if abs(value) < 10**19:
            return f"{value:,}"
        return f"about 10^{int(value.bit_length() * 0.30103)}"  # str() of 10^5000 raises
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.4g}"


# --------------------------------------------------------------------------- the limits

SIMULATED_TIME = Limit(
    "simulated time (durations, horizons, trace spans, think times, start offsets)",
    0.0,
    365 * DAY_S,
    "s",
    "one year of traffic; a day simulates in minutes, and longer spans overflow the timeseries",
)
DURATION = Limit(
    "durations and latency targets (duration_s, horizon_s, SLOs)",
    0.0,
    SIMULATED_TIME.high,
    "s",
    SIMULATED_TIME.reason,
    low_exclusive=True,
)
REQUESTS = Limit(
    "requests in one run (num_requests, trace rows, rate x duration)",
    1,
    10_000_000,
    "requests",
    "one million requests take about a minute and 1.6 GiB; ten million about 16 GiB",
)
RATE = Limit(
    "arrival rate",
    1e-6,
    1e6,
    "requests/s",
    "a million requests per second is beyond any fleet; below 1e-6/s one request arrives "
    "every 11.6 days",
)
GAMMA_CV = Limit(
    "coefficient of variation of gamma inter-arrival times",
    0.01,
    100.0,
    "",
    "the gamma shape is 1/cv^2: outside [1e-4, 1e4] the draws degenerate (all gaps equal, "
    "or all zero but one)",
)
TOKENS = Limit(
    "token counts (lengths, budgets, chunks, contexts)",
    1,
    2**24,
    "tokens",
    "above the longest context any model supports (Llama 4 Scout: 10,485,760) and far "
    "below where token arithmetic overflows",
)
CACHED_TOKENS = Limit(
    "cached tokens of a request (cbsim cost --context, --batch QxC)",
    0,
    TOKENS.high,
    "tokens",
    TOKENS.reason,
)
LOGNORMAL_SIGMA = Limit(
    "log-space sigma of lognormal lengths",
    0.0,
    4.0,
    "",
    "at sigma 4 the 99th percentile is 10^4 times the median; larger spreads overflow",
    low_exclusive=True,
)
TIME_SCALE = Limit(
    "trace time_scale and rate_scale",
    1e-6,
    1e6,
    "",
    "a million-fold speed-up or slow-down of a real trace is no longer that trace",
)
REPLICAS = Limit(
    "replicas",
    1,
    10_000,
    "replicas",
    "ten thousand replicas of one model is beyond any serving fleet; each is simulated",
)
TOTAL_GPUS = Limit(
    "GPUs in total (replicas x tp)",
    1,
    100_000,
    "GPUs",
    "the largest GPU clusters hold about 100,000 GPUs",
)
BLOCK_SIZE = Limit(
    "KV-cache block size",
    1,
    4096,
    "tokens",
    "engines page the KV cache in blocks of 8 to 128 tokens",
)
BATCH_SIZE = Limit(
    "batch sizes (max_batch_size, batch_table ranges, cbsim cost entries)",
    1,
    2**20,
    "requests",
    "engines batch at most a few thousand requests; each entry is simulated",
)
CLIENTS = Limit(
    "closed-loop clients",
    1,
    1_000_000,
    "clients",
    "a million concurrent clients is beyond any benchmark; each is simulated",
)
WINDOW = Limit(
    "timeseries window",
    1e-3,
    SIMULATED_TIME.high,
    "s",
    "iterations last milliseconds: a shorter window only adds empty rows",
)
AUTOSCALE_INTERVAL = Limit(
    "autoscaler evaluation interval (autoscale.interval_s)",
    1e-3,
    DAY_S,
    "s",
    "Kubernetes evaluates every 15 s and iterations last milliseconds: evaluating more often "
    "sees nothing new, and each evaluation is simulated (1e-300 s would never let the clock move)",
)
WEIGHT_LOAD = Limit(
    "weight loading bandwidth per GPU (autoscale.weight_load_gbps)",
    1e-3,
    100_000.0,
    "GB/s",
    "at 1 MB/s a 16 GB checkpoint takes 4.4 hours to load; NVLink moves 900 GB/s",
)
WINDOWS = Limit(
    "timeseries windows in one run",
    1,
    10_000_000,
    "windows",
    "a year in 10 s windows is 3.2 million rows; ten million rows take about 1 GiB",
)
SEED = Limit(
    "seeds",
    0,
    2**63 - 1,
    "",
    "seeds are stored in int64 columns",
)
SWEEP_POINTS = Limit(
    "points of one sweep (grid product plus points, times seeds)",
    1,
    10_000,
    "points",
    "each point is a simulation; ten thousand is already days of compute",
)
CONCENTRATION = Limit(
    "Beta concentration of per-request acceptance",
    0.0,
    1e6,
    "",
    "at 1e6 every request already has the mean acceptance",
    low_exclusive=True,
)
DIVERGENCE = Limit(
    "token-level draft divergence",
    0.0,
    1000.0,
    "",
    "beyond about 10 the draft is unrelated to the target and acceptance stops changing",
)
STEPS = Limit(
    "policy step counts (cooldown_steps)",
    1,
    1_000_000,
    "steps",
    "a policy that waits a million steps never adapts",
)
MODEL_LAYERS = Limit(
    "model layers",
    1,
    1024,
    "layers",
    "eight times the deepest released model (Llama 3.1 405B: 126 layers)",
)
MODEL_WIDTH = Limit(
    "model widths (hidden, intermediate, head sizes)",
    1,
    2**20,
    "",
    "twenty times the widest released model (Llama 3.1 405B: intermediate 53,248)",
)
MODEL_HEADS = Limit(
    "attention heads",
    1,
    16_384,
    "heads",
    "a hundred times the most heads of a released model (128)",
)
MODEL_EXPERTS = Limit(
    "experts per layer",
    1,
    65_536,
    "experts",
    "a hundred times the most routed experts of a released model (Kimi K2: 384)",
)
VOCABULARY = Limit(
    "vocabulary size",
    1,
    2**24,
    "tokens",
    "sixty-four times the largest released vocabulary (Gemma 3: 262,144)",
)
ENGINE_TIME = Limit(
    "engine-profile times (step overheads, front-end delays, all-reduce latencies)",
    0.0,
    10.0,
    "s",
    "measured engines spend microseconds to milliseconds per step, request or token; ten "
    "seconds is thousands of times that",
)
BENCHMARK_CLIENTS = Limit(
    "concurrent clients of a measured serving benchmark (cbsim calibrate e2e)",
    1,
    16_384,
    "clients",
    "serving benchmarks run at most a few thousand clients; each benchmark is simulated "
    "several times to fit",
)
BENCHMARK_REQUESTS = Limit(
    "requests of a measured serving benchmark (cbsim calibrate e2e)",
    1,
    100_000,
    "requests",
    "serving benchmarks send thousands of prompts; each benchmark is simulated several times "
    "to fit",
)
MEASURED_LATENCY = Limit(
    "measured latencies of a serving benchmark (TTFT, TPOT, ITL, end-to-end)",
    0.0,
    DAY_S,
    "s",
    "no serving benchmark waits a day for a token",
)
MEASURED_THROUGHPUT = Limit(
    "measured throughputs of a serving benchmark (requests/s, tokens/s)",
    0.0,
    1e9,
    "per second",
    "a billion tokens per second is beyond any fleet",
)

ALL_LIMITS: tuple[Limit, ...] = (
    REQUESTS,
    SIMULATED_TIME,
    DURATION,
    RATE,
    GAMMA_CV,
    TOKENS,
    CACHED_TOKENS,
    LOGNORMAL_SIGMA,
    TIME_SCALE,
    REPLICAS,
    TOTAL_GPUS,
    BLOCK_SIZE,
    BATCH_SIZE,
    CLIENTS,
    WINDOW,
    AUTOSCALE_INTERVAL,
    WEIGHT_LOAD,
    WINDOWS,
    SEED,
    SWEEP_POINTS,
    CONCENTRATION,
    DIVERGENCE,
    STEPS,
    MODEL_LAYERS,
    MODEL_WIDTH,
    MODEL_HEADS,
    MODEL_EXPERTS,
    VOCABULARY,
    ENGINE_TIME,
    BENCHMARK_CLIENTS,
    BENCHMARK_REQUESTS,
    MEASURED_LATENCY,
    MEASURED_THROUGHPUT,
)

# Files: how deep and how large a YAML or JSON document may be once its aliases are expanded.
MAX_NESTING = 64
"""Nesting depth of a YAML/JSON document: a scenario nests five levels deep, a sweep six."""
MAX_YAML_NODES = 100_000
"""Values a YAML document's aliases may add to those written in it: a sweep of a thousand points
shares a few thousand; a "billion laughs" alias bomb adds 10^9. (A document without aliases, a
rate curve of 100,000 points, is bounded by its points' own limit.)"""


# --------------------------------------------------------------------------- pydantic types


def _not_bool(value: Any) -> Any:
    """YAML ``true`` is not a number (pydantic would take it as 1)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


NotBool = BeforeValidator(_not_bool)

# Each type keeps pydantic's own sign check (its familiar "greater than 0") before the range.
Positive = Field(gt=0)
NonNegative = Field(ge=0)
RequestCount = Annotated[int, NotBool, Positive, AfterValidator(REQUESTS.check)]
Seconds = Annotated[float, NotBool, Positive, AfterValidator(DURATION.check)]
TimeOffset = Annotated[float, NotBool, NonNegative, AfterValidator(SIMULATED_TIME.check)]
Rate = Annotated[float, NotBool, Positive, AfterValidator(RATE.check)]
GammaCv = Annotated[float, NotBool, Positive, AfterValidator(GAMMA_CV.check)]
TokenCount = Annotated[int, NotBool, Positive, AfterValidator(TOKENS.check)]
TokenMean = Annotated[float, NotBool, Positive, AfterValidator(TOKENS.check)]
LognormalSigma = Annotated[float, NotBool, Positive, AfterValidator(LOGNORMAL_SIGMA.check)]
TimeScale = Annotated[float, NotBool, Positive, AfterValidator(TIME_SCALE.check)]
ReplicaCount = Annotated[int, NotBool, Positive, AfterValidator(REPLICAS.check)]
BlockSize = Annotated[int, NotBool, Positive, AfterValidator(BLOCK_SIZE.check)]
BatchSize = Annotated[int, NotBool, Positive, AfterValidator(BATCH_SIZE.check)]
ClientCount = Annotated[int, NotBool, Field(ge=1), AfterValidator(CLIENTS.check)]
WindowSeconds = Annotated[float, NotBool, Positive, AfterValidator(WINDOW.check)]
IntervalSeconds = Annotated[float, NotBool, Positive, AfterValidator(AUTOSCALE_INTERVAL.check)]
LoadBandwidth = Annotated[float, NotBool, Positive, AfterValidator(WEIGHT_LOAD.check)]
Seed = Annotated[int, NotBool, NonNegative, AfterValidator(SEED.check)]
Concentration = Annotated[float, NotBool, Positive, AfterValidator(CONCENTRATION.check)]
Divergence = Annotated[float, NotBool, NonNegative, AfterValidator(DIVERGENCE.check)]
StepCount = Annotated[int, NotBool, Positive, AfterValidator(STEPS.check)]
EngineSeconds = Annotated[float, NotBool, NonNegative, AfterValidator(ENGINE_TIME.check)]


# --------------------------------------------------------------------------- command line


OptionCallback = Callable[[click.Context, click.Parameter, Any], Any]


def option_within(limit: Limit) -> OptionCallback:
    """A click option callback that refuses a value (or any of a repeated option's values)
    outside ``limit``, giving its reason: ``--decode: must be between 1 and ... (...)``."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        values = value if isinstance(value, tuple | list) else (value,)
        for item in values:
            problem = None if item is None else limit.violation(item)
            if problem is not None:
                raise click.BadParameter(problem, ctx=ctx, param=param)
        return value

    return callback


def bounds_table() -> str:
    """Every limit as a Markdown table (what, range, reason), for the documentation."""
    rows = ["| what | range | why |", "|---|---|---|"]
    rows += [f"| {what} | {span} | {why} |" for what, span, why in map(Limit.table_row, ALL_LIMITS)]
    return "\n".join(rows)
