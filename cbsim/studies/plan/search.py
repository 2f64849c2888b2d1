"""Searching one layout: its highest passing rate, by :mod:`cbsim.studies.capacity`'s search.

Every layout is searched as ``cbsim capacity`` searches a replica
(:func:`cbsim.studies.capacity.search.find_max_rate`: the same checks of a stable queue and every SLO
percentile, the same bracketing and bisection), starting from the cost model's guess
(:mod:`cbsim.studies.plan.estimate`) instead of 1 request/s — at the power of two next below it
(:func:`cbsim.studies.capacity.defaults.snapped_start`), whence doubling or halving meets the bracket a
search from 1 request/s meets: at the same window, tolerance and seed, a layout's knee is the
one ``cbsim capacity`` finds for that replica. A layout that cannot run is not simulated:
:func:`~cbsim.studies.plan.layouts.infeasible_reason` says why.

A disaggregated unit is searched the way ``cbsim capacity --disaggregated`` sizes pools: first the
rate one prefill instance sustains within the TTFT target (the scenario with one-token outputs),
then the unit's rate with one decode instance fed by as many prefill instances as the rate needs
(``ceil(rate / prefill rate)``, within the GPU budget). Each passing rate is an operating point
(:mod:`cbsim.studies.plan.pareto`); the layout's own is its best one.

:func:`verify` re-simulates a layout at a fraction of its rate (the headroom) for several seeds;
:func:`verify_fleet` sizes and verifies a fleet of it for a target load, as ``cbsim capacity`` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cbsim.catalog.hardware import get_gpu
from cbsim.run.loading import load_scenario
from cbsim.studies.capacity.defaults import fleet_size, snapped_start
from cbsim.studies.capacity.fleet_checks import fleet_evaluations
from cbsim.studies.capacity.planning import _price
from cbsim.studies.capacity.search import (
    CapacityResult,
    Evaluation,
    Progress,
    _find_max_rate,
    _load_axis,
    _Runner,
)
from cbsim.studies.plan.estimate import decode_guess, prefill_guess
from cbsim.studies.plan.layouts import (
    Instance,
    Layout,
    gpus_of,
    infeasible_reason,
    kv_tokens,
    layout_data,
    prefill_data,
    prefill_instances_for,
)
from cbsim.studies.plan.pareto import objective, operating_point

HEADROOM_STEP = 0.1
"""How far the planned fraction drops when the verification at the headroom fails."""
HEADROOM_TRIES = 3
"""Fractions tried at most per layout (the headroom, then lower by :data:`HEADROOM_STEP`)."""
MAX_EXTRA = 8
"""Replicas a fleet check adds at most (or as many as it started with), as ``cbsim capacity``."""


@dataclass
class Settings:
    """What every search of one plan shares."""

    base: dict[str, Any]  # the scenario's data without a layout
    slo: dict[str, float]
    ttft_key: str | None
    tpot_key: str | None
    seed: int
    window_s: float
    tolerance: float
    min_requests: int
    prompt_tokens: float  # mean per request
    output_tokens: float  # mean per request
    request_tokens: int  # prompt + output tokens a KV cache must hold for one request
    budget: int | None
    prices: Mapping[str, float]
    progress: Progress | None = None
    tag: str = ""  # what the progress lines call the search (``layout 3 of 12: ``)

    def gpu_limit(self, gpu: str) -> int:
        """The most GPUs one replica or disaggregated unit may take: the budget, else a node."""
        return self.budget if self.budget is not None else get_gpu(gpu).gpus_per_node

    def price(self, gpu: str) -> float:
        """USD per GPU-hour: the ``--price`` override, else the catalog's list price."""
        return _price(gpu, self.prices)


@dataclass
class LayoutResult:
    """One layout's verdict: ``meets SLO`` (with its passing points), ``fails SLO`` (searched,
    no rate passes), ``infeasible`` (not simulated: why in ``reason``) or ``not searched``."""

    layout: Layout
    stage: str
    verdict: str
    reason: str | None = None
    found: CapacityResult | None = None
    prefill_rate_rps: float | None = None
    prefill_cap: int | None = None
    points: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None

    @property
    def simulations(self) -> int:
        return self.found.simulations if self.found is not None else 0

    def prefill_instances(self, rate: float) -> int:
        if self.prefill_rate_rps is None:
            return 0
        return prefill_instances_for(rate, self.prefill_rate_rps, self.prefill_cap)


@dataclass
class PrefillResult:
    """The rate one prefill instance sustains within the TTFT target (None: not even lightly)."""

    instance: Instance
    rate_rps: float | None
    reason: str | None
    simulations: int

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.instance.to_dict(),
            "max_rate_rps": self.rate_rps,
            "reason": self.reason,
            "simulations": self.simulations,
        }


def _over_budget(gpus: int, gpu: str, settings: Settings) -> str | None:
    limit = settings.gpu_limit(gpu)
    if gpus <= limit:
        return None
    if settings.budget is not None:
        return f"takes {gpus} GPUs, more than --total-gpus {settings.budget}"
    return f"takes {gpus} GPUs, more than the {limit} of one {gpu} node (--total-gpus allows more)"


def _search(
    settings: Settings,
    data: dict[str, Any],
    slo: Mapping[str, float],
    start_rps: float,
    label: str,
    pools_for: Callable[[float], tuple[int, int]] | None = None,
) -> CapacityResult:
    return _find_max_rate(
        load_scenario(data),
        data,
        dict(slo),
        seeds=[settings.seed],
        window_s=settings.window_s,
        start_rps=snapped_start(start_rps),
        tolerance=settings.tolerance,
        min_requests=settings.min_requests,
        progress=settings.progress,
        label=f"{settings.tag}{label}",
        pools_for=pools_for,
    )


def _kv_requests(data: dict[str, Any], settings: Settings) -> int:
    return max(1, kv_tokens(load_scenario(data)) // max(1, settings.request_tokens))


def search_aggregated(
    settings: Settings, layout: Layout, stage: str, start_rps: float | None = None
) -> LayoutResult:
    """The highest rate one replica of ``layout`` sustains within the SLO."""
    data = layout_data(settings.base, layout)
    reason = _over_budget(layout.instance.gpus, layout.gpu, settings) or infeasible_reason(
        data, settings.request_tokens
    )
    if reason is not None:
        return LayoutResult(layout, stage, "infeasible", reason)
    if start_rps is None:
        start_rps = decode_guess(
            load_scenario(data),
            settings.prompt_tokens,
            settings.output_tokens,
            settings.slo.get(settings.tpot_key) if settings.tpot_key else None,
            _kv_requests(data, settings),
        )
    found = _search(settings, data, settings.slo, start_rps, f"{layout.name()}: ")
    return _finish(settings, LayoutResult(layout, stage, "", found=found))


def search_prefill(settings: Settings, instance: Instance) -> PrefillResult:
    """The rate one prefill ``instance`` sustains within the TTFT target."""
    data = prefill_data(settings.base, instance)
    reason = _over_budget(instance.gpus + 1, instance.gpu, settings) or infeasible_reason(
        data, settings.request_tokens
    )
    if reason is not None:
        return PrefillResult(instance, None, reason, 0)
    assert settings.ttft_key is not None
    found = _search(
        settings,
        data,
        {settings.ttft_key: settings.slo[settings.ttft_key]},
        prefill_guess(load_scenario(data), settings.prompt_tokens),
        f"{instance.gpu} prefill {instance.label()}: ",
    )
    return PrefillResult(instance, found.max_rate_rps, found.reason, found.simulations)


def search_disaggregated(
    settings: Settings,
    layout: Layout,
    prefill_rate: float,
    stage: str,
    start_rps: float | None = None,
) -> LayoutResult:
    """The highest rate an ``xP1D`` unit of ``layout`` sustains within the SLO, ``x`` growing
    with the rate (each prefill instance at most ``prefill_rate``)."""
    assert layout.prefill is not None
    decode_gpus = layout.instance.gpus
    cap = (settings.gpu_limit(layout.gpu) - decode_gpus) // layout.prefill.gpus
    if cap < 1:
        reason = _over_budget(decode_gpus + layout.prefill.gpus, layout.gpu, settings)
        return LayoutResult(layout, stage, "infeasible", reason)
    data = layout_data(settings.base, layout)
    reason = infeasible_reason(data, settings.request_tokens)
    if reason is not None:
        return LayoutResult(layout, stage, "infeasible", reason)
    result = LayoutResult(layout, stage, "", prefill_rate_rps=prefill_rate, prefill_cap=cap)
    if start_rps is None:
        decode_alone = layout_data(settings.base, Layout(layout.instance, layout.batching))
        guess = decode_guess(
            load_scenario(decode_alone),
            settings.prompt_tokens,
            settings.output_tokens,
            settings.slo.get(settings.tpot_key) if settings.tpot_key else None,
            _kv_requests(decode_alone, settings),
            prefills=False,
        )
        start_rps = min(guess, cap * prefill_rate)
    result.found = _search(
        settings,
        data,
        settings.slo,
        start_rps,
        f"{layout.name()}: ",
        pools_for=lambda rate: (result.prefill_instances(rate), 1),
    )
    return _finish(settings, result)


def _point(settings: Settings, result: LayoutResult, ev: Evaluation) -> dict[str, Any]:
    layout = result.layout
    prefill = result.prefill_instances(ev.rate_rps)
    tokens = ev.metrics.get("output_tokens_per_request")
    point = operating_point(
        rate_rps=ev.rate_rps,
        gpus=gpus_of(layout, prefill),
        price_per_gpu_hour=settings.price(layout.gpu),
        output_tokens=float(tokens) if tokens is not None else settings.output_tokens,
        prompt_tokens=settings.prompt_tokens,
        tpot_mean_s=ev.metrics.get("tpot_mean_s"),
        budget=settings.budget,
    )
    return {
        "name": layout.name(prefill or None),
        "gpu": layout.gpu,
        "mode": layout.mode,
        "price_per_gpu_hour": settings.price(layout.gpu),
        "prefill_instances": prefill or None,
        **point,
        "slo_metrics": {k: ev.metrics.get(k) for k in settings.slo},
    }


def _finish(settings: Settings, result: LayoutResult) -> LayoutResult:
    """The verdict and the operating points of a searched layout."""
    found = result.found
    assert found is not None
    passing = [ev for ev in found.evaluations if ev.passed]
    result.points = [_point(settings, result, ev) for ev in passing]
    if not passing:
        result.verdict = "fails SLO"
        result.reason = found.reason
        return result
    result.verdict = "meets SLO"
    result.reason = found.reason  # e.g. the search limit
    result.best = min(result.points, key=lambda p: objective(p, settings.budget))
    return result


def verify(
    settings: Settings, result: LayoutResult, headroom: float, seeds: list[int]
) -> dict[str, Any]:
    """Re-simulate ``result``'s layout at ``headroom`` × its operating rate for every seed
    (lower by :data:`HEADROOM_STEP` while that fails, :data:`HEADROOM_TRIES` fractions at most).
    A disaggregated unit keeps its prefill instances."""
    assert result.best is not None
    layout = result.layout
    data = layout_data(settings.base, layout)
    runner = _Runner(
        data, _load_axis(load_scenario(data)), settings.slo, seeds, settings.window_s,
        settings.min_requests, settings.progress, f"{settings.tag}verify {layout.name()}: ",
    )  # fmt: skip
    pools = None
    if layout.prefill is not None:
        pools = (result.best["prefill_instances"], 1)
    tries: list[dict[str, Any]] = []
    fraction = headroom
    for _ in range(HEADROOM_TRIES):
        rate = fraction * result.best["rate_rps"]
        ev = runner.evaluate(rate, pools=pools)
        tries.append({"fraction": fraction, **ev.to_dict()})
        if ev.passed:
            break
        fraction = round(fraction - HEADROOM_STEP, 10)
        if fraction <= 0:
            break
    last = tries[-1]
    return {
        "headroom": headroom,
        "fraction": last["fraction"],
        "rate_rps": last["rate_rps"],
        "seeds": list(seeds),
        "passed": bool(last["passed"]),
        "reason": last["reason"],
        "metrics": last["metrics"],
        "tries": tries,
        "simulations": runner.simulations,
    }


def verify_fleet(
    settings: Settings,
    result: LayoutResult,
    target_rps: float,
    headroom: float,
    seeds: list[int],
    workers: int = 1,
) -> dict[str, Any]:
    """The fleet of ``result``'s layout for ``target_rps``, sized and verified as ``cbsim
    capacity`` sizes one: ``ceil(target / (headroom × knee))`` replicas (or ``xP1D`` units, each
    keeping its prefill instances), simulated together at the target for every seed and grown
    one at a time until they pass (:data:`MAX_EXTRA` at most, or as many as the first size)."""
    assert result.found is not None and result.found.max_rate_rps is not None
    knee = result.found.max_rate_rps
    layout = result.layout
    data = layout_data(settings.base, layout)
    runner = _Runner(
        data, _load_axis(load_scenario(data)), settings.slo, seeds, settings.window_s,
        settings.min_requests, settings.progress, f"{settings.tag}{layout.name()}: ",
        "--target-rps",
    )  # fmt: skip
    runner.fleet = True
    first = fleet_size(target_rps, knee, headroom)
    sizes = range(first, first + max(MAX_EXTRA, first) + 1)
    prefill = result.prefill_instances(knee) if layout.prefill is not None else 0
    checks: Iterator[tuple[int, Evaluation]]
    if layout.prefill is None:
        checks = fleet_evaluations(runner, target_rps, sizes, workers)
    else:
        checks = ((n, runner.evaluate(target_rps, pools=(n * prefill, n))) for n in sizes)
    runs: list[dict[str, Any]] = []
    passed: Evaluation | None = None
    replicas = first
    with contextlib.closing(checks):
        for replicas, ev in checks:
            runs.append({"replicas": replicas, **ev.to_dict()})
            if ev.passed:
                passed = ev
                break
    return {
        "target_rps": target_rps,
        "headroom": headroom,
        "knee_rps": knee,
        "initial_replicas": first,
        "replicas": replicas,
        "prefill_instances": prefill or None,
        "gpus": replicas * gpus_of(layout, prefill or 1),
        "fleet_headroom": replicas * knee / target_rps - 1,
        "seeds": list(seeds),
        "passed": passed is not None,
        "reason": None if passed is not None else runs[-1]["reason"],
        "metrics": passed.metrics if passed is not None else runs[-1]["metrics"],
        "runs": runs,
        "simulations": runner.simulations,
    }
