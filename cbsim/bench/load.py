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
* ``--max-concurrency C`` at the default infinite rate: vLLM queues every prompt behind a
  semaphore of C slots, which is C closed-loop clients without think time
  (``kind: closed_loop, concurrency: C``). A *finite* rate with a cap (vLLM's open loop throttled
  by a client-side semaphore) has no cbsim arrival process and is refused.
* ``--random-range-ratio r``: lengths uniform over the integers in ``[floor(L(1-r)),
  ceil(L(1+r))]`` as vLLM's random dataset draws them (the output's low end at least 1), else
  fixed at L.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cbsim.errors import CbsimError
from cbsim.limits import GAMMA_CV, RATE, TOKENS

__all__ = [
    "BenchOptions",
    "LoadPoint",
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
    "workload.output_tokens": "--output-len",
    "workload.arrival.rate": "--request-rate",
    "workload.arrival.cv": "--burstiness",
    "workload.arrival.concurrency": "--max-concurrency",
    "seed": "--seed",
}


@dataclass(frozen=True)
class BenchOptions:
    """The flags of one ``cbsim bench`` call that every load point shares."""

    model: str
    gpu: str
    tp: int = 1
    engine: str = "vllm"
    dtype: str = "bf16"
    input_len: int = 1024
    output_len: int = 128
    num_prompts: int = 1000
    random_range_ratio: float = 0.0
    burstiness: float = 1.0
    seed: int = 0
    overrides: tuple[str, ...] = ()
    goodput_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadPoint:
    """One load of a sweep: a request rate (``inf``: all at once) and an optional concurrency cap."""

    request_rate: float = math.inf
    max_concurrency: int | None = None

    @property
    def label(self) -> str:
        """How a sweep names this point: ``2qps``, ``infqps``, ``concurrency16``."""
        if self.max_concurrency is not None:
            return f"concurrency{self.max_concurrency}"
        return f"{_number_text(self.request_rate)}qps"


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


def load_points(rates: Sequence[float], concurrencies: Sequence[int]) -> list[LoadPoint]:
    """The sweep's load points: one per rate, or one per concurrency (repeats dropped).

    Several values of both, or a finite rate with a concurrency cap, are refused."""
    rates, concurrencies = _distinct(rates), _distinct(concurrencies)
    if not concurrencies:
        return [LoadPoint(request_rate=r) for r in rates or [math.inf]]
    finite = [r for r in rates if not math.isinf(r)]
    if finite:
        raise CbsimError(
            f"a finite rate ({_number_text(finite[0])}) with --max-concurrency: cbsim simulates "
            "an open loop at a rate or C closed-loop clients (vLLM's default --request-rate inf "
            "with --max-concurrency), not a rate throttled by a client-side cap; give one of them",
            field="--request-rate",
        )
    return [LoadPoint(max_concurrency=c) for c in concurrencies]


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


def arrival_spec(point: LoadPoint, burstiness: float) -> dict[str, Any]:
    """The scenario's ``workload.arrival`` for one load point."""
    if point.max_concurrency is not None:
        return {"kind": "closed_loop", "concurrency": point.max_concurrency}
    if math.isinf(point.request_rate):
        return {"kind": "offline"}
    if burstiness == 1.0:
        return {"kind": "poisson", "rate": point.request_rate}
    return {"kind": "gamma", "rate": point.request_rate, "cv": gamma_cv(burstiness)}


def slo_of(goodput_ms: dict[str, float]) -> dict[str, float]:
    """``--goodput`` targets (ms) as the scenario's ``slo`` (seconds)."""
    names = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}
    return {names[k]: v / 1000.0 for k, v in goodput_ms.items()}


def scenario_data(options: BenchOptions, point: LoadPoint) -> dict[str, Any]:
    """The scenario mapping of one load point (``--set`` overrides not yet applied)."""
    ratio = options.random_range_ratio
    data: dict[str, Any] = {
        "name": SCENARIO_NAME,
        "seed": options.seed,
        "workload": {
            "num_requests": options.num_prompts,
            "arrival": arrival_spec(point, options.burstiness),
            "prompt_tokens": length_spec(
                options.input_len, ratio, option="--input-len", floor_one=False
            ),
            "output_tokens": length_spec(
                options.output_len, ratio, option="--output-len", floor_one=True
            ),
        },
        "cluster": {
            "model": options.model,
            "gpu": options.gpu,
            "tp": options.tp,
            "dtype": options.dtype,
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
