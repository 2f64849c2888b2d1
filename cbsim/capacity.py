"""Capacity planning: how much traffic a replica sustains within a latency SLO, and what a load costs.

The question a capacity planner asks is "how many GPUs of which kind serve this traffic within this
SLO, and at what price per token?". cbsim answers it by simulation, in three steps:

1. **Maximum sustainable rate of one replica.** With ``cluster.replicas`` forced to 1, the offered
   load is varied: ``workload.arrival.rate`` for synthetic arrivals, ``workload.trace.rate_scale``
   for a replayed trace (rate = the trace's base rate × scale, base rate = requests / span of the
   replayed part). Each rate is simulated over a window of arrivals (``window_s``, 300 s by
   default, stretched to at least ``min_requests`` arrivals; a trace replay can end sooner). A rate
   *passes* when, for every seed,

   * the queue is stable: late arrivals are admitted about as fast as early ones. Of the admitted
     requests arriving in the last quarter of the window, at least 95 % (``served_ratio``) wait
     for admission (``queue_s``) no longer than three times the p90 admission delay of the first
     half's requests (``served_lag_s``), and never less than 1 s: a backlog that grows makes late
     arrivals wait ever longer, while a bursty trace's long outputs do not count against it;
     the time-averaged waiting count of the last quarter is not growing
     against the second quarter (``waiting_q4`` ≤ ``waiting_q2`` + max(2, ``waiting_q2``/2, 1 % of
     the window's arrivals), read from the run's timeseries in windows of a twentieth of the
     window); and nothing is still queued at the horizon (2 × window + 600 s);
   * every SLO metric is within its threshold. A metric is any numeric key of the run's summary
     (``ttft_p99_s``, ``tpot_p99_s``, ``e2e_p90_s``, ...), which must be at most its threshold, or
     one of the ratios ``slo_attainment`` / ``goodput_ratio`` (its alias: the fraction of requests
     meeting the scenario's per-request ``slo``), which must be at least its threshold. An
     undefined metric (NaN) fails.

   The search brackets the limit by doubling from a start rate (1 req/s; halving when that already
   fails, down to 1/64 of it: failing there means the SLO cannot be met at all), then bisects the
   bracket until its width is within a relative tolerance (2 %). Every simulation is counted.

2. **Fleet for a target load.** ``replicas = ceil(target / max_rate)``, then the fleet is
   simulated at the target rate (``cluster.replicas = N``, router ``least_loaded``) under the same
   checks and grown one replica at a time until it passes. ``gpus = replicas × tp``,
   ``cost_per_hour = gpus × price per GPU-hour`` (:attr:`cbsim.hardware.GPU.price_per_hour`, or a
   ``prices`` override), and ``cost_per_million_output_tokens = cost_per_hour / output tokens per
   hour × 1e6`` with output tokens per hour = target × 3600 × output tokens per arrived request in
   the fleet simulation (its summary's ``output_tokens`` / ``requests``; rejected requests count
   as zero). Without a target the cost figures are those of one replica at its maximum rate.

3. **Alternatives.** ``vary`` maps dotted scenario keys to lists of values; every combination is
   planned on its own and ``best`` is the cheapest that meets the SLO (by cost per million output
   tokens, then cost per hour). Combinations that make an invalid scenario are reported with
   their error and skipped. The keys the search sets itself (load, window, replicas, router,
   seed, horizon) cannot be varied or ``--set``.

:func:`find_max_rate` does step 1, :func:`plan` all three and returns one JSON-ready mapping;
:data:`capacity_command` is the ``cbsim capacity`` command line. The search is serial and
deterministic: same scenario, SLO and seeds give the same answer.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, Union, get_args, get_origin

import click
import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from cbsim import outputs
from cbsim.documents import parse_json, parse_yaml, read_text_file
from cbsim.errors import CbsimError, UserError
from cbsim.hardware import GPU_NAMES, get_gpu
from cbsim.limits import DURATION, RATE, SWEEP_POINTS
from cbsim.results import Results
from cbsim.scenario import (
    GammaArrival,
    PoissonArrival,
    Scenario,
    apply_overrides,
    load_scenario,
    parse_override,
)
from cbsim.simulate import simulate
from cbsim.traces import load_trace

__all__ = [
    "EXIT_INFEASIBLE",
    "CapacityResult",
    "Evaluation",
    "Infeasible",
    "capacity_command",
    "evaluate_rate",
    "find_max_rate",
    "parse_prices",
    "parse_slo",
    "parse_vary",
    "plan",
    "scenario_field_paths",
]

DEFAULT_WINDOW_S = 300.0
DEFAULT_START_RPS = 1.0
DEFAULT_TOLERANCE = 0.02
DEFAULT_MIN_REQUESTS = 200
MAX_HALVINGS = 6  # the lowest rate tried is start / 2**6
MAX_DOUBLINGS = 20
QUEUE_DELAY_FLOOR_S = 1.0  # admission delays below this never count as a backlog
SERVED_FRACTION = 0.95
TIMESERIES_WINDOWS = 20  # the check reads quarters of the window: 5 timeseries windows each

#: SLO metrics that must be *at least* their threshold (every other metric: at most).
AT_LEAST_METRICS = frozenset({"slo_attainment", "goodput_ratio"})
METRIC_ALIASES = {"goodput_ratio": "slo_attainment"}

#: Scenario keys the search sets itself: not allowed in ``vary`` or ``--set``.
CONTROLLED_KEYS = frozenset(
    {
        "seed",
        "horizon_s",
        "cluster.replicas",
        "cluster.router",
        "workload.arrival.rate",
        "workload.trace.rate_scale",
        "workload.trace.time_scale",
        "workload.duration_s",
        "workload.num_requests",
        "output.timeseries_window_s",
    }
)

#: Exit status of ``cbsim capacity`` when nothing meets the SLO (bad input is 2).
EXIT_INFEASIBLE = 3

Progress = Callable[[str], None]


# --------------------------------------------------------------------------- results


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


# --------------------------------------------------------------------------- parsing


def _parse_number(text: str, what: str, option: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CbsimError(f"{what}: {text!r} is not a number", field=option) from None
    if not math.isfinite(value):
        raise CbsimError(f"{what}: must be finite, got {text!r}", field=option)
    return value


def parse_slo(texts: str | Sequence[str]) -> dict[str, float]:
    """``"ttft_p99_s=2,tpot_p99_s=0.1"`` (one string or several) as ``{metric: threshold}``."""
    items = [texts] if isinstance(texts, str) else list(texts)
    slo: dict[str, float] = {}
    for text in items:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep or not key:
                raise CbsimError(f"{part!r} is not METRIC=THRESHOLD", field="--slo")
            slo[key] = _parse_number(raw.strip(), key, "--slo")
    return slo


def parse_prices(texts: str | Sequence[str]) -> dict[str, float]:
    """``"h100-sxm=2.5,h200=3.2"`` as ``{gpu: USD per GPU-hour}`` (catalog GPU names only)."""
    items = [texts] if isinstance(texts, str) else list(texts)
    prices: dict[str, float] = {}
    for text in items:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            gpu, sep, raw = part.partition("=")
            gpu = gpu.strip()
            if not sep or not gpu:
                raise CbsimError(f"{part!r} is not GPU=USD_PER_HOUR", field="--prices")
            prices[gpu] = _parse_number(raw.strip(), gpu, "--prices")
    _check_prices(prices)
    return prices


def _check_prices(prices: Mapping[str, float]) -> None:
    for gpu, price in prices.items():
        if gpu not in GPU_NAMES:
            raise CbsimError(
                f"unknown gpu {gpu!r}; known: {', '.join(sorted(GPU_NAMES))}", field="--prices"
            )
        if not math.isfinite(price) or price < 0:
            raise CbsimError(f"{gpu}: price must be >= 0, got {price!r}", field="--prices")


def parse_vary(texts: Sequence[str]) -> dict[str, list[Any]]:
    """``["cluster.gpu=h100-sxm,h200", ...]`` as ``{key: [values]}`` (values parsed as YAML)."""
    vary: dict[str, list[Any]] = {}
    for text in texts:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise CbsimError(f"{text!r} is not KEY=V1,V2,...", field="--vary")
        values: list[Any] = []
        for item in raw.split(","):
            item = item.strip()
            try:
                values.append(parse_yaml(item, None) if item else "")
            except CbsimError as err:
                if not err.message.startswith("invalid YAML"):
                    raise CbsimError(err.message, field="--vary") from None
                values.append(item)
        vary[key] = values
    return vary


def _parse_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            seed = int(part)
        except ValueError:
            raise CbsimError(f"{part!r} is not an integer", field="--seeds") from None
        if seed < 0:
            raise CbsimError(f"seeds must be >= 0, got {seed}", field="--seeds")
        seeds.append(seed)
    if not seeds:
        raise CbsimError("give at least one seed", field="--seeds")
    return seeds


# --------------------------------------------------------------------------- scenario fields


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Annotated, Optional and unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        found: list[type[BaseModel]] = []
        for arg in get_args(annotation):
            found.extend(m for m in _models_in(arg) if m not in found)
        return found
    return []


def _kind_of(model: type[BaseModel]) -> str | None:
    info = model.model_fields.get("kind")
    if info is None or get_origin(info.annotation) is not Literal:
        return None
    args = get_args(info.annotation)
    return str(args[0]) if args else None


def _walk(
    model: type[BaseModel], prefix: str, paths: dict[str, bool], variants: dict[str, dict[str, Any]]
) -> None:
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        subs = _models_in(info.annotation)
        paths[path] = not subs
        if len(subs) > 1:
            variants[path] = {
                kind: set(sub.model_fields) for sub in subs if (kind := _kind_of(sub)) is not None
            }
        for sub in subs:
            _walk(sub, f"{path}.", paths, variants)


@functools.cache
def _field_tree() -> tuple[dict[str, bool], dict[str, dict[str, Any]]]:
    paths: dict[str, bool] = {}
    variants: dict[str, dict[str, Any]] = {}
    _walk(Scenario, "", paths, variants)
    return paths, variants


def scenario_field_paths(*, leaves_only: bool = True) -> list[str]:
    """Every dotted field path of a scenario (union sections: the fields of all their kinds),
    found by walking the :class:`~cbsim.scenario.Scenario` model: ``cluster.gpu``, ``cluster.tp``,
    ``scheduler.kind``, ``speculative.enabled``, ``speculative.policy.kind``, ...
    """
    paths, _ = _field_tree()
    return sorted(p for p, leaf in paths.items() if leaf or not leaves_only)


def _check_key(key: str, option: str) -> None:
    paths, _ = _field_tree()
    if key in CONTROLLED_KEYS:
        raise CbsimError(
            f"{key!r} is set by the capacity search itself (load, window, replicas, seeds); "
            "it cannot be given here",
            field=option,
        )
    if key not in paths:
        valid = [p for p in sorted(paths) if paths[p] and p not in CONTROLLED_KEYS]
        raise CbsimError(
            f"unknown scenario key {key!r}; valid keys: {', '.join(valid)}", field=option
        )


def _set_keys(data: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``apply_overrides``, except that changing a section's ``kind`` drops the sibling keys the
    new kind does not have (so ``speculative.policy.kind=goodput`` works over a ``fixed`` policy
    with ``k`` set)."""
    _, variants = _field_tree()
    result = apply_overrides(data, overrides)
    for dotted, value in overrides.items():
        parent, _, leaf = dotted.rpartition(".")
        if leaf != "kind" or parent not in variants or value not in variants[parent]:
            continue
        node: Any = result
        for part in parent.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            allowed = variants[parent][value]
            explicit = {k.rpartition(".")[2] for k in overrides if k.rpartition(".")[0] == parent}
            for key in list(node):
                if key not in allowed and key not in explicit:
                    del node[key]
    return result


# --------------------------------------------------------------------------- load axis


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
    trace = load_trace(wl.trace.path, field="workload.trace.path")
    times = trace["arrival_s"].to_numpy(dtype=np.float64)
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
) -> dict[str, Any]:
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
    cluster["replicas"] = replicas
    if replicas > 1:
        cluster["router"] = "least_loaded"
    data["seed"] = seed
    data["horizon_s"] = 2 * duration + 600.0
    data.setdefault("output", {})["timeseries_window_s"] = window / TIMESERIES_WINDOWS
    return data


# --------------------------------------------------------------------------- checks


def _slo_from_scenario(scenario: Scenario) -> dict[str, float]:
    slo: dict[str, float] = {}
    for name in ("ttft", "tpot", "e2e"):
        value = getattr(scenario.slo, f"{name}_s")
        if value is not None:
            slo[f"{name}_p99_s"] = float(value)
    return slo


def _direction(metric: str) -> str:
    return "≥" if metric in AT_LEAST_METRICS else "≤"


def _metric_value(summary: Mapping[str, Any], metric: str) -> float:
    key = METRIC_ALIASES.get(metric, metric)
    if key not in summary:
        numeric = sorted(
            [
                k
                for k, v in summary.items()
                if isinstance(v, int | float) and not isinstance(v, bool)
            ]
            + list(METRIC_ALIASES)
        )
        raise CbsimError(
            f"unknown SLO metric {metric!r}; known (summary keys): {', '.join(numeric)}",
            field="--slo",
        )
    value = summary[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CbsimError(f"SLO metric {metric!r} is not a number", field="--slo")
    return float(value)


def _check_run(
    results: Results, window: float, slo: Mapping[str, float]
) -> tuple[list[str], dict[str, float | None]]:
    """Why a run fails the capacity checks (empty when it passes) and the figures checked."""
    summary = results.summary
    requests = results.requests
    status = requests["status"].to_numpy()
    arrival = requests["arrival_s"].to_numpy(dtype=float)
    admitted = status != "rejected"
    # Stability: a stable queue admits late arrivals about as fast as early ones; a backlog that
    # grows makes the admission delay of late arrivals grow with it. (Completion-based checks
    # misread a bursty trace's long outputs as a backlog when the window holds few requests.)
    queue = requests["queue_s"].to_numpy(dtype=float)
    queue = np.where(np.isfinite(queue), queue, np.inf)
    with np.errstate(invalid="ignore"):
        early = admitted & (arrival <= window / 2)
        late = admitted & (arrival >= 3 * window / 4) & (arrival <= window)
        lag = float(np.percentile(queue[early], 90)) if early.any() else 0.0
        limit = max(QUEUE_DELAY_FLOOR_S, 3.0 * lag)
        cohort = late
        served_in_time = late & (queue <= limit)
    arrived = int(cohort.sum())
    served = int(served_in_time.sum()) / arrived if arrived else 1.0
    waiting = results.timeseries["waiting"].to_numpy(dtype=float)
    quarter = TIMESERIES_WINDOWS // 4
    q2 = float(waiting[quarter : 2 * quarter].mean()) if len(waiting) >= 2 * quarter else 0.0
    q4_values = waiting[3 * quarter : 4 * quarter]
    q4 = float(q4_values.mean()) if len(q4_values) else 0.0
    arrivals_in_window = int(((arrival >= 0) & (arrival <= window)).sum())
    allowance = max(2.0, q2 / 2, 0.01 * arrivals_in_window)
    metrics: dict[str, float | None] = {}
    reasons: list[str] = []
    if served < SERVED_FRACTION:
        reasons.append(_admission_reason(served, arrived, limit, lag))
    if q4 > q2 + allowance:
        reasons.append(f"queue growing: waiting {q2:.1f} → {q4:.1f} requests")
    unfinished = int(summary.get("unfinished", 0))
    if unfinished:
        reasons.append(f"{unfinished} requests still queued at the horizon")
    for metric, threshold in slo.items():
        value = _metric_value(summary, metric)
        metrics[metric] = value
        if math.isnan(value):
            reasons.append(f"{metric} is undefined")
        elif metric in AT_LEAST_METRICS and value < threshold:
            reasons.append(f"{metric} = {value:.4g} < {threshold:g}")
        elif metric not in AT_LEAST_METRICS and value > threshold:
            reasons.append(f"{metric} = {value:.4g} > {threshold:g}")
    n_requests = int(summary.get("requests", 0))
    metrics.update(
        {
            "served_ratio": served,
            "served_lag_s": lag,  # p90 admission delay of the first half's requests
            "waiting_q2": q2,
            "waiting_q4": q4,
            "window_s": window,
            "requests": float(n_requests),
            "output_tokens_per_request": (
                float(summary.get("output_tokens", 0)) / n_requests if n_requests else None
            ),
            # 1 / TPOT is the output tokens/s each user sees (the report's per-user axis)
            "tpot_mean_s": float(summary.get("tpot_mean_s", math.nan)),
        }
    )
    return reasons, metrics


def _admission_reason(admitted: float, arrived: int, limit_s: float, lag_s: float) -> str:
    """Why the admission-delay check failed, in the terms it measured."""
    basis = (
        f"3 × the first half's p90 admission delay of {lag_s:.3g} s"
        if limit_s > QUEUE_DELAY_FLOOR_S
        else f"the {QUEUE_DELAY_FLOOR_S:g} s floor"
    )
    return (
        f"queue unstable: only {admitted:.1%} of the {arrived} requests arriving in the last "
        f"quarter of the window were admitted within {limit_s:.3g} s ({basis}); "
        f"a stable queue admits at least {SERVED_FRACTION:.0%}"
    )


def _combine(
    runs: list[dict[str, float | None]], slo: Mapping[str, float]
) -> dict[str, float | None]:
    """Metrics over seeds: the worst value for SLO metrics, served ratio and queue growth, the mean
    of the rest."""
    combined: dict[str, float | None] = {}
    for key in runs[0]:
        values = [v for run in runs if (v := run.get(key)) is not None]
        if not values:
            combined[key] = None
        elif any(math.isnan(v) for v in values):
            combined[key] = math.nan
        elif key in AT_LEAST_METRICS or key == "served_ratio":
            combined[key] = min(values)
        elif key in slo or key == "waiting_q4":
            combined[key] = max(values)
        else:
            combined[key] = sum(values) / len(values)
    return combined


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
    ) -> None:
        self.base = base
        self.axis = axis
        self.slo = slo
        self.seeds = list(seeds)
        self.window_s = window_s
        self.min_requests = min_requests
        self.progress = progress
        self.label = label
        self.simulations = 0

    def evaluate(self, rate: float, replicas: int = 1) -> Evaluation:
        duration, window = self.axis.window(rate, self.window_s, self.min_requests)
        runs: list[dict[str, float | None]] = []
        reasons: list[str] = []
        sims = 0
        for seed in self.seeds:
            if self.progress is not None:
                fleet = f", {replicas} replicas" if replicas > 1 else ""
                self.progress(f"{self.label}{rate:.4g} req/s{fleet}, seed {seed}")
            data = _point_data(self.base, self.axis, rate, seed, replicas, duration, window)
            results = simulate(load_scenario(data))
            sims += 1
            reasons, metrics = _check_run(results, window, self.slo)
            runs.append(metrics)
            if reasons:
                if len(self.seeds) > 1:
                    reasons = [f"seed {seed}: {r}" for r in reasons]
                break
        self.simulations += sims
        return Evaluation(rate, not reasons, _combine(runs, self.slo), "; ".join(reasons), sims)


# --------------------------------------------------------------------------- step 1


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
    checks, window and seeds as the search (a fleet uses the ``least_loaded`` router)."""
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
) -> CapacityResult:
    _check_search(window_s, tolerance, start_rps, min_requests)
    axis = _load_axis(scenario)
    base = copy.deepcopy(base)
    base.setdefault("cluster", {})["replicas"] = 1
    runner = _Runner(base, axis, slo, seeds, window_s, min_requests, progress, label)
    evaluations: list[Evaluation] = []

    def evaluate(rate: float) -> Evaluation:
        ev = runner.evaluate(rate)
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
    first = evaluate(start_rps)
    lo: Evaluation | None = first if first.passed else None
    hi: Evaluation | None = None if first.passed else first
    if lo is None:
        rate = start_rps
        for _ in range(MAX_HALVINGS):
            rate /= 2
            ev = evaluate(rate)
            if ev.passed:
                lo = ev
                break
            hi = ev
        if lo is None:
            assert hi is not None
            reason = f"SLO cannot be met even at {_rate(rate)} req/s ({hi.reason})"
            return result(None, False, reason, rate)
    else:
        for _ in range(MAX_DOUBLINGS):
            ev = evaluate(lo.rate_rps * 2)
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
        ev = evaluate((lo.rate_rps + hi.rate_rps) / 2)
        if ev.passed:
            lo = ev
        else:
            hi = ev
    lowest = min(e.rate_rps for e in evaluations)
    return result(lo, True, None, lowest)


def _rate(rate: float) -> str:
    return f"{rate:.4g}"


# --------------------------------------------------------------------------- steps 2 and 3


def _price(gpu: str, prices: Mapping[str, float]) -> float:
    return float(prices[gpu]) if gpu in prices else get_gpu(gpu).price_per_hour


def _per_million(cost_per_hour: float, tokens_per_hour: float | None) -> float | None:
    if tokens_per_hour is None or tokens_per_hour <= 0:
        return None
    return cost_per_hour / tokens_per_hour * 1e6


def _plan_one(
    scenario: Scenario,
    base: dict[str, Any],
    slo: dict[str, float],
    *,
    target_rps: float | None,
    prices: Mapping[str, float],
    seeds: list[int],
    window_s: float,
    start_rps: float,
    tolerance: float,
    min_requests: int,
    max_extra_replicas: int | None,
    progress: Progress | None,
    label: str,
) -> dict[str, Any]:
    cluster = scenario.cluster
    price = _price(cluster.gpu, prices)
    found = _find_max_rate(
        scenario,
        base,
        slo,
        seeds=seeds,
        window_s=window_s,
        start_rps=start_rps,
        tolerance=tolerance,
        min_requests=min_requests,
        progress=progress,
        label=label,
    )
    out = found.to_dict()
    out.update(
        {
            "scenario": scenario.name,
            "model": cluster.model,
            "gpu": cluster.gpu,
            "tp": cluster.tp,
            "price_per_gpu_hour": price,
            "target_rps": target_rps,
            "replicas": None,
            "gpus": None,
            "cost_per_hour": None,
            "output_tokens_per_hour": None,
            "cost_per_million_output_tokens": None,
            "cost_basis": None,
            "replica_cost_per_hour": cluster.tp * price,
        }
    )
    simulations = found.simulations
    if found.max_rate_rps is None:
        out["simulations"] = simulations
        return out
    if target_rps is None:
        tokens = found.output_tokens_per_request
        per_hour = found.max_rate_rps * 3600 * tokens if tokens is not None else None
        out["output_tokens_per_hour"] = per_hour
        out["cost_per_million_output_tokens"] = _per_million(cluster.tp * price, per_hour)
        out["cost_basis"] = "one replica at its maximum rate"
        return out
    # fleet for the target load, verified by simulation
    axis = _load_axis(scenario)
    fleet_base = copy.deepcopy(base)
    runner = _Runner(fleet_base, axis, slo, seeds, window_s, min_requests, progress, label)
    first = max(1, math.ceil(target_rps / found.max_rate_rps * (1 - 1e-12)))
    extra = max_extra_replicas if max_extra_replicas is not None else max(8, first)
    fleet: list[dict[str, Any]] = []
    verified: Evaluation | None = None
    replicas = first
    for replicas in range(first, first + extra + 1):
        ev = runner.evaluate(target_rps, replicas)
        fleet.append({"replicas": replicas, **ev.to_dict()})
        if ev.passed:
            verified = ev
            break
    simulations += runner.simulations
    out["simulations"] = simulations
    out["fleet"] = fleet
    out["initial_replicas"] = first
    if verified is None:
        out["feasible"] = False
        out["reason"] = (
            f"a fleet of {first}–{replicas} replicas does not meet the SLO at "
            f"{_rate(target_rps)} req/s ({fleet[-1]['reason']})"
        )
        return out
    gpus = replicas * cluster.tp
    cost_per_hour = gpus * price
    tokens = verified.metrics.get("output_tokens_per_request")
    per_hour = target_rps * 3600 * tokens if tokens is not None else None
    out.update(
        {
            "replicas": replicas,
            "gpus": gpus,
            "cost_per_hour": cost_per_hour,
            "fleet_output_tokens_per_request": tokens,
            "output_tokens_per_hour": per_hour,
            "cost_per_million_output_tokens": _per_million(cost_per_hour, per_hour),
            "cost_basis": f"fleet of {replicas} at {_rate(target_rps)} req/s",
        }
    )
    return out


def _cost_key(alt: Mapping[str, Any]) -> tuple[float, float]:
    per_million = alt.get("cost_per_million_output_tokens")
    per_hour = alt.get("cost_per_hour")
    if per_hour is None:
        per_hour = alt.get("replica_cost_per_hour")
    return (
        per_million if per_million is not None else math.inf,
        per_hour if per_hour is not None else math.inf,
    )


def plan(
    scenario: Scenario | str | Path | Mapping[str, Any],
    slo: Mapping[str, float] | None = None,
    *,
    target_rps: float | None = None,
    prices: Mapping[str, float] | None = None,
    vary: Mapping[str, Sequence[Any]] | None = None,
    seeds: Sequence[int] | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    start_rps: float = DEFAULT_START_RPS,
    tolerance: float = DEFAULT_TOLERANCE,
    min_requests: int = DEFAULT_MIN_REQUESTS,
    max_extra_replicas: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Plan capacity for ``scenario`` (steps 1–3 of the module docstring) as one JSON-ready dict.

    Keys: ``max_rate_rps`` (per replica), ``feasible``, ``reason``, ``slo``, ``simulations`` (all
    runs), ``evaluations``; with ``target_rps``: ``replicas``, ``gpus``, ``cost_per_hour``,
    ``cost_per_million_output_tokens`` and the ``fleet`` runs; with ``vary``: ``alternatives``
    (one such object per combination, with its ``overrides``) and ``best`` (the cheapest that
    meets the SLO, or None), whose figures are also the top level's. Floats that are not finite
    are None.
    """
    loaded, base = _resolve(scenario)
    targets = _checked_slo(loaded, slo)
    price_table = dict(prices or {})
    _check_prices(price_table)
    seed_list = list(seeds) if seeds else [loaded.seed]
    _check_search(window_s, tolerance, start_rps, min_requests)
    if target_rps is not None and not (math.isfinite(target_rps) and target_rps > 0):
        raise CbsimError(f"must be > 0, got {target_rps!r}", field="--target-rps")
    if target_rps is not None and not RATE.contains(target_rps):
        raise CbsimError(RATE.violation(target_rps) or "", field="--target-rps")
    vary_map = {k: list(v) for k, v in (vary or {}).items()}
    for key, values in vary_map.items():
        _check_key(key, "--vary")
        if not values:
            raise CbsimError(f"{key}: give at least one value", field="--vary")
    combo_count = math.prod(len(v) for v in vary_map.values())
    if not SWEEP_POINTS.contains(combo_count):
        raise CbsimError(
            f"{combo_count:,} alternatives; {SWEEP_POINTS.violation(combo_count)}",
            field="--vary",
        )
    combos: list[dict[str, Any]] = [
        dict(zip(vary_map, values, strict=True)) for values in itertools.product(*vary_map.values())
    ]
    common = {
        "slo": targets,
        "slo_directions": {k: _direction(k) for k in targets},
        "seeds": seed_list,
        "window_s": window_s,
        "tolerance": tolerance,
        "target_rps": target_rps,
    }
    alternatives: list[dict[str, Any]] = []
    for i, overrides in enumerate(combos):
        label = f"[{i + 1}/{len(combos)}] " if len(combos) > 1 else ""
        try:
            alt_scenario = load_scenario(_set_keys(base, overrides)) if overrides else loaded
            alt_base = _scenario_data(alt_scenario)
            _load_axis(alt_scenario)
        except CbsimError as err:
            alternatives.append(
                {
                    "overrides": overrides,
                    "error": str(err),
                    "feasible": False,
                    "reason": f"invalid scenario: {err}",
                    "max_rate_rps": None,
                    "simulations": 0,
                    "replicas": None,
                    "gpus": None,
                    "cost_per_hour": None,
                    "cost_per_million_output_tokens": None,
                }
            )
            continue
        alt = _plan_one(
            alt_scenario,
            alt_base,
            targets,
            target_rps=target_rps,
            prices=price_table,
            seeds=seed_list,
            window_s=window_s,
            start_rps=start_rps,
            tolerance=tolerance,
            min_requests=min_requests,
            max_extra_replicas=max_extra_replicas,
            progress=progress,
            label=label,
        )
        alternatives.append({"overrides": overrides, "error": None, **alt})
    total = sum(int(a.get("simulations") or 0) for a in alternatives)
    if not vary_map:
        return _json_object({**alternatives[0], **common, "simulations": total})
    candidates = [a for a in alternatives if a.get("feasible") and a.get("max_rate_rps")]
    best = min(candidates, key=_cost_key) if candidates else None
    top: dict[str, Any]
    if best is not None:
        top = {k: v for k, v in best.items() if k != "evaluations"}
        top["best_index"] = alternatives.index(best)
    else:
        top = {
            "feasible": False,
            "reason": "no alternative meets the SLO: "
            + "; ".join(
                f"{_describe_overrides(a['overrides'])}: {a.get('reason')}" for a in alternatives
            ),
            "max_rate_rps": None,
            "replicas": None,
            "gpus": None,
            "cost_per_hour": None,
            "cost_per_million_output_tokens": None,
            "best_index": None,
        }
    return _json_object(
        {
            **top,
            **common,
            "simulations": total,
            "vary": vary_map,
            "alternatives": alternatives,
            "best": best,
        }
    )


def _json_object(data: dict[str, Any]) -> dict[str, Any]:
    safe: dict[str, Any] = _json_safe(data)
    return safe


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as None and numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# --------------------------------------------------------------------------- command line


def _describe_overrides(overrides: Mapping[str, Any]) -> str:
    if not overrides:
        return "scenario"
    return ", ".join(f"{k}={v}" for k, v in overrides.items())


def _money(value: Any, spec: str = ".2f") -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return f"${value:{spec}}"
    return "—"


def _number(value: Any, spec: str) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return f"{value:{spec}}"
    return "—"


def _status(alt: Mapping[str, Any]) -> str:
    if alt.get("error"):
        return "invalid"
    if not alt.get("feasible"):
        return "fails SLO"
    return "ok"


def render(result: Mapping[str, Any], console: Console) -> None:
    """Print a :func:`plan` result as a rich table with the verdict below it."""
    slo_text = ", ".join(
        f"{k} {result['slo_directions'].get(k, '≤')} {v:g}" for k, v in result["slo"].items()
    )
    seeds = ",".join(str(s) for s in result["seeds"])
    console.print(
        f"SLO: {slo_text} · seeds {seeds} · window {result['window_s']:g} s", highlight=False
    )
    varied = "alternatives" in result
    alternatives = result["alternatives"] if varied else [result]
    keys = list(result.get("vary") or {}) if varied else []
    target = result.get("target_rps")
    title = "capacity" + (f" for {target:g} req/s" if target else " of one replica")
    table = Table(title=title)
    for key in keys:
        table.add_column(key)
    if not keys:
        table.add_column("scenario")
    table.add_column("req/s per replica", justify="right")
    table.add_column("sims", justify="right")
    if target:
        table.add_column("replicas", justify="right")
        table.add_column("GPUs", justify="right")
        table.add_column("$/hour", justify="right")
    else:
        table.add_column("$/hour per replica", justify="right")
    table.add_column("$/M output tokens", justify="right")
    table.add_column("status")
    best_index = result.get("best_index") if varied else None
    notes: list[str] = []
    for i, alt in enumerate(alternatives):
        overrides = alt.get("overrides") or {}
        names = [str(overrides.get(k)) for k in keys] or [str(alt.get("scenario", "scenario"))]
        status = _status(alt)
        if best_index is not None and i == best_index:
            status = "[bold]best[/bold]"
        if status in ("invalid", "fails SLO") or (alt.get("feasible") and alt.get("reason")):
            label = _describe_overrides(overrides) if keys else str(alt.get("scenario"))
            notes.append(f"{label}: {alt.get('reason')}")
        row = [*names, _number(alt.get("max_rate_rps"), ".4g"), str(alt.get("simulations"))]
        if target:
            row += [
                _number(alt.get("replicas"), "d"),
                _number(alt.get("gpus"), "d"),
                _money(alt.get("cost_per_hour")),
            ]
        else:
            row.append(_money(alt.get("replica_cost_per_hour")))
        row += [_money(alt.get("cost_per_million_output_tokens"), ".3f"), status]
        table.add_row(*row)
    console.print(table)
    for note in notes:
        console.print(note, highlight=False, markup=False)
    if varied:
        best = result.get("best")
        if best is not None:
            console.print(
                f"best: {_describe_overrides(best['overrides'])} "
                f"({_money(best.get('cost_per_million_output_tokens'), '.3f')} per million "
                "output tokens)",
                highlight=False,
                markup=False,
            )
        else:
            console.print("no alternative meets the SLO", highlight=False)
    console.print(f"simulations: {result['simulations']}", highlight=False)


PLAN_FILE_DESCRIPTION = "a capacity plan cbsim wrote"


def _is_plan_file(path: Path) -> bool:
    """Whether ``path`` holds a plan :func:`plan` made (so ``--out`` may replace it)."""
    try:
        data = parse_json(read_text_file(path), str(path))
    except CbsimError:
        return False
    return (
        isinstance(data, dict)
        and {"slo", "max_rate_rps", "simulations"} <= set(data)
        and ("evaluations" in data or "alternatives" in data)
    )


def _check_plan_file(out: Path) -> None:
    """Refuse, before searching, an ``--out`` that writing the plan would have to refuse."""
    if out.is_dir():
        raise CbsimError("is a folder; give the plan's file name", source=str(out), field="--out")
    if out.exists() and not _is_plan_file(out):
        raise CbsimError(
            f"exists and is not {PLAN_FILE_DESCRIPTION}, so cbsim will not overwrite it: give a "
            "new file name (or move the file away)",
            source=str(out),
            field="--out",
        )


def _write_plan(out: Path, text: str) -> None:
    """Write the plan's JSON to ``out`` atomically, creating its folders; a user error when it
    cannot be written."""

    def write(temporary: Path) -> None:
        temporary.write_text(text + "\n", encoding="utf-8")

    try:
        outputs.write_file(out, write, replaceable=_is_plan_file, description=PLAN_FILE_DESCRIPTION)
    except CbsimError as err:
        raise UserError(str(err.located(field="--out"))) from None
    except OSError as err:
        raise UserError(f"{err.filename or out}: cannot write the plan: {err.strerror}") from None


class Infeasible(click.ClickException):
    """On the command line: a plan that nothing meets. The plan is printed as usual (the JSON too,
    so it can be reported on); then one ``infeasible:`` line on stderr says why, and the command
    exits with :data:`EXIT_INFEASIBLE`."""

    exit_code = EXIT_INFEASIBLE

    def show(self, file: IO[Any] | None = None) -> None:
        message = " ".join(self.format_message().splitlines())
        click.echo(f"infeasible: {message}", file=file, err=file is None)


def _progress_printer() -> tuple[Progress | None, Callable[[], None]]:
    try:
        interactive = sys.stderr.isatty()
    except (AttributeError, ValueError):
        interactive = False
    if not interactive:
        return None, lambda: None
    console = Console(stderr=True)
    status = console.status("capacity search")
    status.start()
    return (lambda text: status.update(f"capacity search: {text}")), status.stop


@click.command(name="capacity", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--slo",
    "slo_texts",
    multiple=True,
    metavar="METRIC=X,...",
    help="SLO as summary metrics and thresholds, e.g. ttft_p99_s=2,tpot_p99_s=0.1 (at most X; "
    "slo_attainment/goodput_ratio: at least X). Default: p99 of the scenario's slo.",
)
@click.option(
    "--vary",
    "vary_texts",
    multiple=True,
    metavar="KEY=V1,V2",
    help="Compare alternatives, e.g. --vary cluster.gpu=h100-sxm,h200 (repeatable: the product).",
)
@click.option("--target-rps", type=float, default=None, help="Size a fleet for this load.")
@click.option("--seeds", default=None, help="Seeds every rate must pass, e.g. 1,2,3.")
@click.option(
    "--window-s",
    type=float,
    default=DEFAULT_WINDOW_S,
    show_default=True,
    help="Seconds of arrivals simulated per rate.",
)
@click.option(
    "--prices",
    "price_texts",
    multiple=True,
    metavar="GPU=USD,...",
    help="USD per GPU-hour, overriding the catalog defaults, e.g. h100-sxm=2.5.",
)
@click.option(
    "--tolerance",
    type=float,
    default=DEFAULT_TOLERANCE,
    show_default=True,
    help="Relative width at which the bisection stops.",
)
@click.option(
    "--start-rps",
    type=float,
    default=DEFAULT_START_RPS,
    show_default=True,
    help="First rate tried.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the plan's JSON to this file (its folders are created; an existing file is "
    "replaced only if it is a plan cbsim wrote), e.g. for cbsim report.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario field, e.g. --set scheduler.kind=sarathi (repeatable).",
)
def capacity_command(
    scenario: Path,
    slo_texts: tuple[str, ...],
    vary_texts: tuple[str, ...],
    target_rps: float | None,
    seeds: str | None,
    window_s: float,
    price_texts: tuple[str, ...],
    tolerance: float,
    start_rps: float,
    as_json: bool,
    out: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Find the highest rate one replica of SCENARIO sustains within an SLO; size and cost a fleet
    for --target-rps; compare --vary alternatives. Exits with status 3 (after printing the plan)
    when nothing meets the SLO, 2 on bad input."""
    stop: Callable[[], None] = lambda: None  # noqa: E731
    try:
        for text in overrides:
            key, _ = parse_override(text)
            if key in CONTROLLED_KEYS:
                _check_key(key, "--set")
        loaded = load_scenario(scenario, overrides=list(overrides))
        if out is not None:
            _check_plan_file(out)
        progress, stop = _progress_printer()
        result = plan(
            loaded,
            parse_slo(slo_texts) or None,
            target_rps=target_rps,
            prices=parse_prices(price_texts),
            vary=parse_vary(vary_texts),
            seeds=_parse_seeds(seeds),
            window_s=window_s,
            start_rps=start_rps,
            tolerance=tolerance,
            progress=progress,
        )
    except CbsimError as err:
        stop()
        if err.source is None and err.field is not None and not err.field.startswith("-"):
            err = CbsimError(err.message, source=str(scenario), field=err.field)
        raise UserError(str(err)) from None
    stop()
    text = json.dumps(result, indent=2, allow_nan=False)
    if out is not None:
        _write_plan(out, text)
    if as_json:
        click.echo(text)
    else:
        render(result, Console())
    if not result.get("feasible"):
        raise Infeasible(f"nothing meets the SLO: {result.get('reason') or 'no reason recorded'}")
