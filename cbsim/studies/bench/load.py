"""What ``cbsim bench`` simulates: its flags as one scenario per load point.

``vllm bench serve`` describes a run by flags, not a file: the model, the lengths of its random
dataset (``--input-len``, ``--output-len``, ``--random-range-ratio``), how many prompts and how
they are sent (``--request-rate`` with ``--burstiness``, or ``--max-concurrency``). This module
turns those flags into the scenario mapping :func:`cbsim.load_scenario` validates, one per load
point of a sweep:

* ``--request-rate R`` (finite): an open loop, Poisson (``--burstiness 1``) or gamma
  inter-arrival times of shape ``b = --burstiness``, whose coefficient of variation is
  ``1/sqrt(b)`` (``workload.arrival: {kind: gamma, rate: R, cv: 1/sqrt(b)}``).
* ``--request-rate inf`` (vLLM's default) without a concurrency cap: every prompt sent at once
  (``kind: offline``).
* ``--burstiness inf``: vLLM's constant gaps of 1/R (``kind: stages`` with one constant stage).
* ``--max-concurrency C`` at the default infinite rate: vLLM queues every prompt behind a
  semaphore of C slots, which is C closed-loop clients without think time
  (``kind: closed_loop, concurrency: C``). With a *finite* rate it is the same semaphore in front
  of the open loop: ``max_concurrency: C`` on the poisson or gamma arrival (with ``--burstiness
  inf``, gamma gaps of the smallest coefficient of variation cbsim draws, 0.01).
* ``--ramp-up-strategy linear|exponential`` from ``--ramp-up-start-rps`` to ``--ramp-up-end-rps``:
  vLLM raises the rate request by request; cbsim draws the same ramp as a Poisson rate curve over
  time (``kind: rate_curve``) through the expected send time of each request.
* ``--random-range-ratio r`` (vLLM's JSON ``{"input": r1, "output": r2}`` too): lengths uniform
  over the integers in ``[floor(L(1-r)), ceil(L(1+r))]`` as vLLM's random dataset draws them (the
  output's low end at least 1), else fixed at L.

The prompts are vLLM's ``--dataset-name`` (:class:`Dataset`): random lengths; a shared prefix
before each (``--random-prefix-len``, the ``prefix_repetition`` and ``sonnet`` datasets) as a
``workload.prompt_pool`` whose cached prefixes the engine reuses; or a replayed trace
(``timed_trace``: ``workload.trace``, its timestamps unless ``--no-self-timed``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cbsim.common.errors import CbsimError
from cbsim.common.limits import GAMMA_CV, RATE, TOKENS

__all__ = [
    "BenchOptions",
    "Dataset",
    "LoadPoint",
    "RampUp",
    "load_points",
    "option_of_field",
    "parse_rates",
    "scenario_data",
]

SCENARIO_NAME = "bench"

# Scenario field paths and the flag that sets each (longest prefix first when matching).
_OPTION_OF_FIELD: dict[str, str] = {
    "cluster.model": "--model",
    "cluster.gpu": "--gpu",
    "cluster.tp": "--tp",
    "cluster.engine": "--engine",
    "cluster.dtype": "--dtype",
    "workload.num_requests": "--num-prompts",
    "workload.prompt_tokens": "--input-len",
    "workload.prompt_pool.system_tokens": "--random-prefix-len",
    "workload.prompt_pool.question_tokens": "--input-len",
    "workload.prompt_pool": "--dataset-name",
    "workload.output_tokens": "--output-len",
    "workload.trace": "--dataset-path",
    "workload.arrival.rate": "--request-rate",
    "workload.arrival.cv": "--burstiness",
    "workload.arrival.concurrency": "--max-concurrency",
    "workload.arrival.max_concurrency": "--max-concurrency",
    "workload.arrival.points": "--ramp-up-start-rps",
    "workload.arrival.stages": "--request-rate",
    "seed": "--seed",
}


@dataclass(frozen=True)
class Dataset:
    """The prompts (vLLM's ``--dataset-name``): ``name``, a shared prefix of ``prefix_tokens``
    tokens (one of ``prefixes`` different ones) before each prompt's own ``--input-len`` tokens,
    or a replayed ``trace`` (a file: its lengths, its prefix blocks of ``block_tokens`` tokens and,
    ``self_timed``, its timestamps scaled by ``time_scale``)."""

    name: str = "random"
    prefix_tokens: int = 0
    prefixes: int = 1
    trace: str | None = None
    self_timed: bool = True
    block_tokens: int | None = None
    time_scale: float | None = None


@dataclass(frozen=True)
class RampUp:
    """vLLM's ``--ramp-up-strategy``: the rate goes from ``start_rps`` (first request) to
    ``end_rps`` (last), linearly or exponentially in the request's index."""

    strategy: Literal["linear", "exponential"]
    start_rps: float
    end_rps: float

    @property
    def label(self) -> str:
        """vLLM's name for it in a result file: ``ramp-up-linear-1qps-10qps``."""
        start, end = _number_text(self.start_rps), _number_text(self.end_rps)
        return f"ramp-up-{self.strategy}-{start}qps-{end}qps"

    def rate_of(self, index: int, count: int) -> float:
        """The rate request ``index`` of ``count`` is sent at (vLLM's
        ``_get_current_request_rate``)."""
        progress = index / max(count - 1, 1)
        if self.strategy == "linear":
            return self.start_rps + (self.end_rps - self.start_rps) * progress
        return float(self.start_rps * (self.end_rps / self.start_rps) ** progress)


@dataclass(frozen=True)
class BenchOptions:
    """The flags of one ``cbsim bench`` call that every load point shares
    (``output_range_ratio``: the outputs' own ``--random-range-ratio``, when it differs)."""

    model: str
    gpu: str
    tp: int = 1
    engine: str = "vllm"
    dtype: str | None = None  # None: bf16, or an integer-quantized checkpoint's own format
    input_len: int = 1024
    output_len: int = 128
    num_prompts: int = 1000
    random_range_ratio: float = 0.0
    burstiness: float = 1.0
    seed: int = 0
    overrides: tuple[str, ...] = ()
    goodput_ms: dict[str, float] = field(default_factory=dict)
    output_range_ratio: float | None = None
    dataset: Dataset = Dataset()


@dataclass(frozen=True)
class LoadPoint:
    """One load of a sweep: a request rate (``inf``: all at once) or a ramp of rates, and an
    optional concurrency cap."""

    request_rate: float = math.inf
    max_concurrency: int | None = None
    ramp_up: RampUp | None = None

    @property
    def label(self) -> str:
        """How a sweep names this point: ``2qps``, ``infqps``, ``concurrency16``,
        ``2qps-concurrency16``, ``ramp-up-linear-1qps-10qps``."""
        cap = f"concurrency{self.max_concurrency}" if self.max_concurrency is not None else ""
        if self.ramp_up is not None:
            return f"{self.ramp_up.label}-{cap}" if cap else self.ramp_up.label
        if cap and math.isinf(self.request_rate):
            return cap
        rate = f"{_number_text(self.request_rate)}qps"
        return f"{rate}-{cap}" if cap else rate


def _number_text(value: float) -> str:
    """``2`` for 2.0, ``2.5``, ``inf``."""
    if math.isinf(value):
        return "inf"
    return str(int(value)) if value == int(value) else repr(value)


def parse_rates(values: Sequence[str]) -> list[float]:
    """``--request-rate`` values (comma-separated and/or repeated) as floats, ``inf`` allowed."""
    rates: list[float] = []
    for text in _items(values):
        try:
            rate = float(text)
        except ValueError:
            raise CbsimError(
                f"{text!r} is not a number of requests per second (or inf)", field="--request-rate"
            ) from None
        if math.isnan(rate) or rate <= 0:
            raise CbsimError(f"must be positive (or inf), got {text}", field="--request-rate")
        if not math.isinf(rate) and not RATE.contains(rate):
            raise CbsimError(f"{text}: {RATE.violation(rate)}", field="--request-rate")
        rates.append(rate)
    return rates


def parse_concurrencies(values: Sequence[str]) -> list[int]:
    """``--max-concurrency`` values (comma-separated and/or repeated) as positive integers."""
    caps: list[int] = []
    for text in _items(values):
        try:
            cap = int(text)
        except ValueError:
            raise CbsimError(
                f"{text!r} is not a whole number of requests", field="--max-concurrency"
            ) from None
        if cap < 1:
            raise CbsimError(f"must be at least 1, got {cap}", field="--max-concurrency")
        caps.append(cap)
    return caps


def _items(values: Sequence[str]) -> list[str]:
    """The comma-separated items of repeated option values, blanks dropped."""
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def _distinct(values: Sequence[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def load_points(
    rates: Sequence[float], concurrencies: Sequence[int], ramp_up: RampUp | None = None
) -> list[LoadPoint]:
    """The sweep's load points (repeats dropped): one per rate, each behind the concurrency cap
    when one is given, or one per cap at one rate (a ramp, with ``ramp_up``).

    Several rates with several caps are refused (a sweep varies one of them), as is a finite
    rate with a ramp (vLLM refuses it too)."""
    rates, concurrencies = _distinct(rates), _distinct(concurrencies)
    if ramp_up is not None:
        finite = [r for r in rates if not math.isinf(r)]
        if finite:
            raise CbsimError(
                f"a ramp-up sets the rate: leave out --request-rate {_number_text(finite[0])} "
                "(vLLM refuses both too)",
                field="--request-rate",
            )
        caps: list[int | None] = list(concurrencies) or [None]
        return [LoadPoint(max_concurrency=c, ramp_up=ramp_up) for c in caps]
    if len(rates) > 1 and len(concurrencies) > 1:
        raise CbsimError(
            "several rates and several concurrency caps: a sweep varies one of them (give one "
            "value of the other)",
            field="--max-concurrency",
        )
    if len(concurrencies) > 1:
        rate = rates[0] if rates else math.inf
        return [LoadPoint(request_rate=rate, max_concurrency=c) for c in concurrencies]
    cap = concurrencies[0] if concurrencies else None
    return [LoadPoint(request_rate=r, max_concurrency=cap) for r in rates or [math.inf]]


def length_spec(length: int, ratio: float, *, option: str, floor_one: bool) -> dict[str, Any]:
    """A length distribution as vLLM's random dataset draws it: fixed, or uniform over
    ``[floor(L(1-r)), ceil(L(1+r))]`` (``floor_one``: the low end raised to 1, as vLLM does for
    outputs)."""
    if ratio == 0:
        return {"kind": "fixed", "value": length}
    low = math.floor(length * (1 - ratio))
    high = math.ceil(length * (1 + ratio))
    if floor_one:
        low, high = max(low, 1), max(high, 1)
    if low < 1:
        raise CbsimError(
            f"{option} {length} with --random-range-ratio {ratio} draws lengths from {low}: "
            "a prompt needs at least one token; lower the ratio or raise the length",
            field="--random-range-ratio",
        )
    if high > TOKENS.high:
        raise CbsimError(
            f"{option} {length} with --random-range-ratio {ratio} draws lengths up to "
            f"{high:,}; {TOKENS.violation(high)}",
            field="--random-range-ratio",
        )
    return {"kind": "uniform", "low": low, "high": high}


def gamma_cv(burstiness: float) -> float:
    """The coefficient of variation of gamma gaps of shape ``burstiness``: ``1/sqrt(b)``."""
    if not burstiness > 0 or math.isinf(burstiness):
        raise CbsimError(
            f"must be a positive finite number, got {burstiness} (cbsim draws gamma gaps of "
            f"shape b, coefficient of variation 1/sqrt(b), {GAMMA_CV.describe()})",
            field="--burstiness",
        )
    cv = 1.0 / math.sqrt(burstiness)
    if not GAMMA_CV.contains(cv):
        low, high = 1.0 / GAMMA_CV.high**2, 1.0 / GAMMA_CV.low**2
        raise CbsimError(
            f"must be between {low:g} and {high:g}, got {burstiness:g} (the gamma gaps' "
            f"coefficient of variation 1/sqrt(b) must be {GAMMA_CV.describe()})",
            field="--burstiness",
        )
    return cv


RAMP_POINTS = 200
"""Points of the rate curve a ramp-up is drawn through."""


def ramp_curve(ramp: RampUp, count: int) -> list[list[float]]:
    """A ramp over ``count`` requests as a rate curve's (t_s, rate) points: the rate of request
    i at its expected send time (the sum of 1/rate over the requests up to it, the first gap
    included, as vLLM draws them), then held at the end rate well past the last request."""
    rates = [ramp.rate_of(i, count) for i in range(count)]
    expected, times = 0.0, []
    for rate in rates:
        expected += 1.0 / rate
        times.append(expected)
    step = max(1, count // RAMP_POINTS)
    picks = sorted({*range(0, count, step), count - 1})
    points = [[0.0, rates[0]]] + [[times[i], rates[i]] for i in picks]
    points = [p for j, p in enumerate(points) if j == 0 or p[0] > points[j - 1][0]]
    points.append([times[-1] * 2 + 10.0 / ramp.end_rps, ramp.end_rps])
    return points


def arrival_spec(point: LoadPoint, burstiness: float, num_prompts: int = 0) -> dict[str, Any]:
    """The scenario's ``workload.arrival`` for one load point (``num_prompts``: what a ramp-up
    ramps over)."""
    cap = point.max_concurrency
    capped = {"max_concurrency": cap} if cap is not None else {}
    if point.ramp_up is not None:
        return {"kind": "rate_curve", "points": ramp_curve(point.ramp_up, num_prompts), **capped}
    if math.isinf(point.request_rate):
        if cap is not None:
            return {"kind": "closed_loop", "concurrency": cap}
        return {"kind": "offline"}
    rate = point.request_rate
    if math.isinf(burstiness):
        if cap is None:
            return {"kind": "stages", "process": "constant", "stages": [constant_stage(rate, num_prompts)]}  # fmt: skip
        return {"kind": "gamma", "rate": rate, "cv": GAMMA_CV.low, **capped}
    if burstiness == 1.0:
        return {"kind": "poisson", "rate": rate, **capped}
    return {"kind": "gamma", "rate": rate, "cv": gamma_cv(burstiness), **capped}


def constant_stage(rate: float, count: int) -> dict[str, float]:
    """One stage sending ``count`` requests every 1/``rate`` s from 0 (vLLM's ``--burstiness
    inf``): a duration of (count - 1/2)/rate holds exactly ``count`` sends."""
    return {"rate": rate, "duration_s": (count - 0.5) / rate}


def slo_of(goodput_ms: dict[str, float]) -> dict[str, float]:
    """``--goodput`` targets (ms) as the scenario's ``slo`` (seconds)."""
    names = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}
    return {names[k]: v / 1000.0 for k, v in goodput_ms.items()}


MAX_POOL_PROMPTS = 1_000_000
"""Prompts a shared-prefix pool draws at most (see :func:`pool_spec`)."""


def pool_spec(dataset: Dataset, own: dict[str, Any], num_prompts: int) -> dict[str, Any]:
    """A shared-prefix dataset as a ``workload.prompt_pool``: ``prefixes`` prefixes of
    ``prefix_tokens`` tokens, each followed by a prompt's own tokens (``own``). vLLM sends every
    prompt once; the pool draws its prompts with replacement from a hundred times as many as are
    sent per prefix, so a whole prompt recurs rarely (under 1% of requests)."""
    per_prefix = math.ceil(num_prompts / dataset.prefixes)
    questions = max(1, min(100 * per_prefix, MAX_POOL_PROMPTS // dataset.prefixes))
    return {
        "system_prompts": dataset.prefixes,
        "system_tokens": dataset.prefix_tokens,
        "questions": questions,
        "question_tokens": own,
    }


def _trace_spec(dataset: Dataset) -> dict[str, Any]:
    trace: dict[str, Any] = {"path": dataset.trace}
    if dataset.block_tokens is not None:
        trace["prefix_block_tokens"] = dataset.block_tokens
    if dataset.time_scale is not None and dataset.self_timed:
        trace["time_scale"] = dataset.time_scale
    return trace


def workload_data(options: BenchOptions, point: LoadPoint) -> dict[str, Any]:
    """The scenario's ``workload`` of one load point: its prompts (:class:`Dataset`) and load."""
    dataset = options.dataset
    workload: dict[str, Any] = {"num_requests": options.num_prompts}
    if dataset.trace is None or not dataset.self_timed:
        workload["arrival"] = arrival_spec(point, options.burstiness, options.num_prompts)
    if workload.get("arrival", {}).get("kind") == "stages":
        del workload["num_requests"]  # the stage says how many
    if dataset.trace is not None:
        workload["trace"] = _trace_spec(dataset)
        return workload
    input_ratio = options.random_range_ratio
    output_ratio = input_ratio if options.output_range_ratio is None else options.output_range_ratio
    prompts = length_spec(options.input_len, input_ratio, option="--input-len", floor_one=False)
    if dataset.prefix_tokens > 0:
        workload["prompt_pool"] = pool_spec(dataset, prompts, options.num_prompts)
    else:
        workload["prompt_tokens"] = prompts
    workload["output_tokens"] = length_spec(
        options.output_len, output_ratio, option="--output-len", floor_one=True
    )
    return workload


def scenario_data(options: BenchOptions, point: LoadPoint) -> dict[str, Any]:
    """The scenario mapping of one load point (``--set`` overrides not yet applied)."""
    data: dict[str, Any] = {
        "name": SCENARIO_NAME,
        "seed": options.seed,
        "workload": workload_data(options, point),
        "cluster": {
            "model": options.model,
            "gpu": options.gpu,
            "tp": options.tp,
            **({"dtype": options.dtype} if options.dtype else {}),
            "engine": options.engine,
        },
    }
    if options.goodput_ms:
        data["slo"] = slo_of(options.goodput_ms)
    return data


def option_of_field(err: CbsimError) -> CbsimError:
    """A scenario error restated against the flag that set its field (``cluster.tp`` →
    ``--tp``); one about a field no flag sets (a ``--set`` key) stays as it is."""
    if err.field is None or err.field.startswith("--"):
        return err
    for path in sorted(_OPTION_OF_FIELD, key=len, reverse=True):
        if err.field == path or err.field.startswith(path + "."):
            return CbsimError(err.message, field=_OPTION_OF_FIELD[path])
    return err
