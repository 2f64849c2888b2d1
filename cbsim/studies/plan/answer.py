"""The plan's answer: the layouts it may answer with, searched again at the shared window, the
winner verified, its fleet for a target load, and the headline to buy on.

The screening passes (:mod:`cbsim.studies.plan.planner`) search every layout over a short window, which
reads the knee a little high (see :mod:`cbsim.studies.capacity.defaults`). The :data:`CANDIDATES` best
screened layouts — by cost per output token, or with ``--target-rps`` by the cost of the fleet
the target needs — are searched again over the shared window and tolerance (``cbsim capacity``'s
defaults, from a power of two, so that the same replica gets the same knee as there), each from
the power of two below its screened knee (:func:`confirm`). Of those that still pass, the best is
verified (:func:`choose`):

* without a target, one replica at ``headroom`` × its knee on every verification seed
  (:func:`cbsim.studies.plan.search.verify`);
* with one, the fleet ``cbsim capacity`` would buy: ``ceil(target / (headroom × knee))``
  replicas simulated together at the target on every verification seed, grown until they pass
  (:func:`cbsim.studies.plan.search.verify_fleet`).

When one fails, the next is tried. :func:`headline` is the winner's one line
(:func:`cbsim.studies.capacity.headline.buy_line`, the same as ``cbsim capacity``'s).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from cbsim.studies.capacity.defaults import fleet_size, snapped_start, verify_seeds
from cbsim.studies.capacity.headline import buy_line
from cbsim.studies.capacity.search import Progress
from cbsim.studies.capacity.workers import Job, JobPool, run_jobs
from cbsim.studies.plan.layouts import gpus_of
from cbsim.studies.plan.pareto import objective, per_million
from cbsim.studies.plan.search import (
    LayoutResult,
    Settings,
    search_aggregated,
    search_disaggregated,
    verify,
    verify_fleet,
)

__all__ = ["CANDIDATES", "Answer", "choose", "confirm", "fleet_entry", "headline"]

CANDIDATES = 3
"""Screened layouts searched again, and tried in turn when the best fails its verification."""

Answer = tuple[int | None, LayoutResult | None, dict[str, Any] | None, list[dict[str, Any]]]
"""(layout id, its confirmed result, its verification, every verification tried)."""


def _fleet_cost(settings: Settings, result: LayoutResult, target: float, headroom: float) -> float:
    """$/hour of the fleet ``result``'s knee says ``target`` needs."""
    assert result.found is not None and result.found.max_rate_rps is not None
    knee = result.found.max_rate_rps
    units = fleet_size(target, knee, headroom)
    prefill = result.prefill_instances(knee) or 1
    return units * gpus_of(result.layout, prefill) * settings.price(result.layout.gpu)


def _rank_key(
    settings: Settings, result: LayoutResult, target: float | None, headroom: float
) -> tuple[float, ...]:
    """Best first: the cheapest fleet for the target (then per output token), or the cheapest per
    output token (the plan's objective)."""
    point = objective(result.best or {}, settings.budget)
    if target is None:
        return point
    return (_fleet_cost(settings, result, target, headroom), *point)


def _ranked(
    settings: Settings,
    results: list[tuple[int, LayoutResult]],
    target: float | None,
    headroom: float,
) -> list[tuple[int, LayoutResult]]:
    passing = [(i, r) for i, r in results if r.best is not None and r.found is not None]
    return sorted(passing, key=lambda item: _rank_key(settings, item[1], target, headroom))


def _confirm_job(
    settings: Settings, result: LayoutResult, *, progress: Progress | None
) -> LayoutResult:
    """One screened layout searched again at ``settings`` (a job: it may run in a worker)."""
    assert result.found is not None and result.found.max_rate_rps is not None
    settings = replace(settings, progress=progress)
    start = snapped_start(result.found.max_rate_rps)
    if result.layout.prefill is None:
        return search_aggregated(settings, result.layout, result.stage, start)
    assert result.prefill_rate_rps is not None
    rate = result.prefill_rate_rps
    return search_disaggregated(settings, result.layout, rate, result.stage, start)


def confirm(
    screen: Settings,
    final: Settings,
    results: list[LayoutResult],
    *,
    target: float | None,
    headroom: float,
    again: bool,
    workers: JobPool,
) -> list[tuple[int, LayoutResult]]:
    """The :data:`CANDIDATES` best screened layouts (with their ids), searched again at
    ``final``'s window and tolerance when ``again`` (else as screened: the settings are the
    same)."""
    ranked = _ranked(screen, list(enumerate(results)), target, headroom)[:CANDIDATES]
    if not again:
        return ranked
    jobs = [
        Job(
            _confirm_job,
            (replace(final, progress=None, tag=f"candidate {n + 1} of {len(ranked)}: "), result),
        )
        for n, (_, result) in enumerate(ranked)
    ]
    searched = run_jobs(jobs, workers).results()
    return [(index, result) for (index, _), result in zip(ranked, searched, strict=True)]


def choose(
    final: Settings,
    confirmed: list[tuple[int, LayoutResult]],
    *,
    target: float | None,
    headroom: float,
    seeds: int,
    workers: int,
) -> Answer:
    """The best confirmed layout whose verification passes (see the module docstring)."""
    tried: list[dict[str, Any]] = []
    chosen = verify_seeds(final.seed, seeds)
    for index, result in _ranked(final, confirmed, target, headroom):
        if target is None:
            check = verify(final, result, headroom, chosen)
        else:
            check = verify_fleet(final, result, target, headroom, chosen, workers)
        tried.append({"layout": index, **check})
        if check["passed"]:
            return index, result, check, tried
    return None, None, None, tried


def fleet_entry(
    settings: Settings, result: LayoutResult, check: Mapping[str, Any]
) -> dict[str, Any]:
    """The verified fleet for the target, with its price: what ``cbsim capacity`` reports."""
    price = settings.price(result.layout.gpu)
    cost = check["gpus"] * price
    tokens = check["metrics"].get("output_tokens_per_request")
    output = float(tokens) if tokens is not None else settings.output_tokens
    target = check["target_rps"]
    return {
        **{k: v for k, v in check.items() if k != "runs"},
        "gpus_used": check["gpus"],
        "price_per_gpu_hour": price,
        "cost_per_hour": cost,
        "cost_per_million_output_tokens": per_million(cost, target * output),
        "cost_per_million_tokens": per_million(cost, target * (settings.prompt_tokens + output)),
        "runs": check["runs"],
    }


def _unit(best: Mapping[str, Any]) -> str:
    seqs, tokens = best.get("max_num_seqs"), best.get("max_num_batched_tokens")
    if seqs is None and tokens is None:
        return str(best["name"])
    return f"{best['name']}, batch {seqs or 'default'}/{tokens or 'default'}"


def headline(best: Mapping[str, Any] | None) -> str | None:
    """The winner's line to buy on (None when nothing meets the SLO)."""
    if best is None:
        return None
    point = best["operating_point"]
    knee = best.get("max_rate_rps") or point["rate_rps"]
    fleet = best.get("fleet")
    if fleet is not None:
        return buy_line(
            replicas=int(fleet["replicas"]), unit=_unit(best), gpus=int(fleet["gpus"]),
            cost_per_hour=float(fleet["cost_per_hour"]), target_rps=float(fleet["target_rps"]),
            knee_rps=float(knee),
        )  # fmt: skip
    planned = best["planned"]
    return buy_line(
        replicas=1, unit=_unit(best), gpus=int(point["gpus"]),
        cost_per_hour=float(point["gpus"] * point["price_per_gpu_hour"]), target_rps=None,
        knee_rps=float(knee), planning_rps=float(planned["rate_rps"]),
        noun="unit" if best.get("mode") == "disaggregated" else "replica",
    )  # fmt: skip
