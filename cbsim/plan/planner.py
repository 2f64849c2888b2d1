"""The whole plan: every layout searched, the Pareto front, the winner verified with headroom.

:func:`plan_deployment` runs the search in three passes and returns one JSON-ready mapping:

1. **Parallel layouts.** Every aggregated layout of every GPU kind at the engine's default
   batching, and (with a TTFT and a TPOT target) every disaggregated ``xP1D`` unit: the prefill
   instance that serves the most prompts per GPU within the TTFT target feeding each decode
   instance. Layouts that cannot run are pruned with their reason.
2. **Batching.** The ``refine`` best parallel layouts (all with ``refine=None``) are searched again
   at every batch cap × token budget of the space, each starting from its parent's rate; the
   others' variants are listed as not searched, with why.
3. **The winner.** Of every passing point (:mod:`cbsim.plan.pareto`) the cheapest per output
   token, or the most tokens on a GPU budget, is planned at ``headroom`` × its rate and
   re-simulated there for every verification seed; if that fails the fraction drops (see
   :func:`~cbsim.plan.search.verify`), and after that the next layout is tried. The winner gets its
   engine's launch command (:mod:`cbsim.plan.launch`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import ValidationError

from cbsim.capacity.checks import _direction
from cbsim.capacity.planning import _json_object
from cbsim.capacity.search import Progress
from cbsim.capacity.workers import Job, JobPool, run_jobs, worker_count
from cbsim.errors import CbsimError
from cbsim.models import get_model
from cbsim.plan.launch import launch_commands
from cbsim.plan.layouts import (
    Instance,
    Layout,
    SearchSpace,
    batching_variants,
    layout_data,
    parallel_layouts,
    single_instances,
)
from cbsim.plan.pareto import mark_fronts, objective, operating_point
from cbsim.plan.search import (
    LayoutResult,
    PrefillResult,
    Settings,
    search_aggregated,
    search_disaggregated,
    search_prefill,
    verify,
)
from cbsim.scenario import load_scenario
from cbsim.schema.pools import pool_plans
from cbsim.schema.problems import validation_problem
from cbsim.schema.scenario import Scenario
from cbsim.workload import RequestSpecs, build_workload

VERIFY_CANDIDATES = 3
"""Layouts tried in turn when the best one fails its verification."""
REQUEST_QUANTILE = 99
"""A KV cache must hold one request of this percentile of prompt + output tokens."""


@dataclass(frozen=True)
class PlanSettings:
    """How hard to search: the rate search's window and tolerance, how many parallel layouts
    get their batching refined (None: all), the headroom and the verification seeds."""

    window_s: float = 60.0
    tolerance: float = 0.05
    min_requests: int = 200
    refine: int | None = 3
    headroom: float = 0.8
    verify_seeds: int = 3


def described(base: Mapping[str, Any]) -> Scenario:
    """``base`` as a scenario, its fields checked but not its layout (the plan picks that)."""
    try:
        return Scenario.model_validate(dict(base))
    except ValidationError as err:
        raise validation_problem(err) from None


def workload_figures(scenario: Scenario) -> tuple[float, float, int]:
    """Mean prompt and output tokens per request, and the prompt + output tokens of a request at
    the :data:`REQUEST_QUANTILE` percentile, from the requests the scenario would send."""
    specs = build_workload(scenario)
    if not isinstance(specs, RequestSpecs) or not len(specs):
        raise CbsimError(
            "a plan needs requests with known lengths (poisson, gamma or a trace)",
            field="workload",
        )
    prompts = specs.prompt_tokens.astype(float)
    outputs = specs.output_tokens.astype(float)
    request = int(np.ceil(np.percentile(prompts + outputs, REQUEST_QUANTILE)))
    return float(prompts.mean()), float(outputs.mean()), request


def _aggregated_job(
    settings: Settings,
    layout: Layout,
    stage: str,
    start_rps: float | None,
    *,
    progress: Progress | None,
) -> LayoutResult:
    """:func:`search_aggregated` as a job (it may run in a worker process)."""
    return search_aggregated(replace(settings, progress=progress), layout, stage, start_rps)


def _prefill_job(
    settings: Settings, instance: Instance, *, progress: Progress | None
) -> PrefillResult:
    """:func:`search_prefill` as a job."""
    return search_prefill(replace(settings, progress=progress), instance)


def _unit_job(
    settings: Settings,
    layout: Layout,
    prefill_rate: float,
    stage: str,
    start_rps: float | None,
    *,
    progress: Progress | None,
) -> LayoutResult:
    """:func:`search_disaggregated` as a job."""
    settings = replace(settings, progress=progress)
    return search_disaggregated(settings, layout, prefill_rate, stage, start_rps)


def _search_parallel(
    settings: Settings, space: SearchSpace, model: str, workers: JobPool
) -> tuple[list[LayoutResult], list[PrefillResult], list[str]]:
    """Pass 1: every aggregated layout and, per GPU kind, the prefill instances' rates, then one
    ``xP1D`` unit per decode instance fed by the prefill instance with the most requests/s per
    GPU. The searches of each stage run at once on ``workers`` processes; an error is the one
    the serial order (aggregated layouts, then per GPU its prefill instances and its units)
    meets first."""
    plain = replace(settings, progress=None)  # jobs get their own progress
    layouts = parallel_layouts(space, model)
    split = bool(space.disaggregated and settings.ttft_key and settings.tpot_key)
    instances = {gpu: single_instances(space, gpu) for gpu in (space.gpus if split else ())}
    jobs: list[Job[LayoutResult | PrefillResult]] = [
        Job(_aggregated_job, (plain, layout, "parallel", None)) for layout in layouts
    ]
    jobs += [Job(_prefill_job, (plain, inst)) for found in instances.values() for inst in found]
    first = run_jobs(jobs, workers)
    if first.error_index is not None and first.error_index < len(layouts):
        first.results()  # raises
    results = [r for r in first.values[: len(layouts)] if isinstance(r, LayoutResult)]
    searched = iter(first.values[len(layouts) :])
    prefills: list[PrefillResult] = []
    notes: list[str] = []
    units: list[Job[LayoutResult]] = []
    for gpu, gpu_instances in instances.items():
        done = [p for p in (next(searched) for _ in gpu_instances) if isinstance(p, PrefillResult)]
        if len(done) < len(gpu_instances):
            break  # a prefill search failed: its error comes after the units before it
        prefills.extend(done)
        feeding = [p for p in done if p.rate_rps]
        if not feeding:
            notes.append(f"{gpu}: no prefill instance meets the TTFT target, so no xPyD unit")
            continue
        best = max(feeding, key=lambda p: (p.rate_rps or 0.0) / p.instance.gpus)
        assert best.rate_rps is not None
        for inst in gpu_instances:
            layout = Layout(inst, prefill=best.instance)
            units.append(Job(_unit_job, (plain, layout, best.rate_rps, "parallel", None)))
    results.extend(run_jobs(units, workers).results())
    first.results()  # a prefill search's error, if one failed
    if space.disaggregated and not split:
        notes.append("disaggregated units need a TTFT and a TPOT target: not searched")
    return results, prefills, notes


def _unsearched(parent: LayoutResult, rank: int, ranked: int, refine: int | None) -> str:
    """Why a batching variant of ``parent`` was not searched."""
    if parent.best is None:
        why = "is infeasible" if parent.verdict == "infeasible" else "fails the SLO at every rate"
        return f"its parallel layout {why} at the engine's default batching ({parent.reason})"
    return (
        f"its parallel layout ranks {rank} of {ranked} at the engine's default batching; "
        f"--refine {refine} searches the batching of the top {refine}"
    )


def _refine(
    settings: Settings,
    space: SearchSpace,
    parents: list[LayoutResult],
    refine: int | None,
    workers: JobPool,
) -> list[LayoutResult]:
    """Batching variants of every parallel layout: searched for the ``refine`` best passing
    ones (each from its parent's rate, on ``workers`` processes at once), listed as not
    searched, with why, for the others."""
    plain = replace(settings, progress=None)
    ranked = sorted(
        (r for r in parents if r.best is not None),
        key=lambda r: objective(r.best or {}, settings.budget),
    )
    order = [*ranked, *(r for r in parents if r.best is None)]
    out: list[LayoutResult | Job[LayoutResult]] = []
    for rank, parent in enumerate(order, start=1):
        chosen = parent.best is not None and (refine is None or rank <= refine)
        for variant in batching_variants(space, parent.layout):
            if variant.batching == parent.layout.batching:
                continue
            if not chosen:
                reason = _unsearched(parent, rank, len(ranked), refine)
                out.append(LayoutResult(variant, "batching", "not searched", reason))
            elif variant.prefill is None:
                start = (parent.best or {})["rate_rps"]
                out.append(Job(_aggregated_job, (plain, variant, "batching", start)))
            else:
                assert parent.prefill_rate_rps is not None
                start = (parent.best or {})["rate_rps"]
                rate = parent.prefill_rate_rps
                out.append(Job(_unit_job, (plain, variant, rate, "batching", start)))
    jobs = [entry for entry in out if isinstance(entry, Job)]
    searched = iter(run_jobs(jobs, workers).results())
    return [next(searched) if isinstance(entry, Job) else entry for entry in out]


def _launch(settings: Settings, result: LayoutResult, engine: str, model: str) -> dict[str, Any]:
    scenario = load_scenario(layout_data(settings.base, result.layout))
    cluster = pool_plans(scenario)[-1].scenario.cluster  # the replica's, or the decode pool's
    user_memory = "gpu_memory_utilization" in scenario.cluster.model_fields_set
    return launch_commands(
        engine,
        model,
        result.layout,
        prefill_instances=(result.best or {}).get("prefill_instances") or 1,
        dtype=cluster.dtype,
        kv_dtype=cluster.kv_dtype,
        memory_fraction=cluster.gpu_memory_utilization if user_memory else None,
    )


def _choose(
    settings: Settings, results: list[LayoutResult], plan: PlanSettings
) -> tuple[LayoutResult | None, dict[str, Any] | None, list[dict[str, Any]]]:
    """The best passing layout whose headroom verification passes, with that verification and
    every verification tried."""
    ranked = sorted(
        (r for r in results if r.best is not None),
        key=lambda r: objective(r.best or {}, settings.budget),
    )
    seeds = [settings.seed + i for i in range(plan.verify_seeds)]
    tried: list[dict[str, Any]] = []
    for result in ranked[:VERIFY_CANDIDATES]:
        check = verify(settings, result, plan.headroom, seeds)
        tried.append({"layout": results.index(result), **check})
        if check["passed"]:
            return result, check, tried
    return None, None, tried


def _layout_entry(index: int, result: LayoutResult) -> dict[str, Any]:
    prefill = (result.best or {}).get("prefill_instances")
    found = result.found
    return {
        "id": index,
        "name": result.layout.name(prefill),
        **result.layout.to_dict(),
        "stage": result.stage,
        "verdict": result.verdict,
        "reason": result.reason,
        "max_rate_rps": found.max_rate_rps if found is not None else None,
        "prefill_rate_rps": result.prefill_rate_rps,
        "simulations": result.simulations,
        "operating_point": result.best,
        "evaluations": [ev.to_dict() for ev in found.evaluations] if found is not None else [],
    }


def _planned(settings: Settings, result: LayoutResult, check: Mapping[str, Any]) -> dict[str, Any]:
    assert result.best is not None
    metrics = check["metrics"]
    tokens = metrics.get("output_tokens_per_request")
    point = operating_point(
        rate_rps=check["rate_rps"],
        gpus=result.best["gpus"],
        price_per_gpu_hour=settings.price(result.layout.gpu),
        output_tokens=float(tokens) if tokens is not None else settings.output_tokens,
        prompt_tokens=settings.prompt_tokens,
        tpot_mean_s=metrics.get("tpot_mean_s"),
        budget=settings.budget,
    )
    return {**point, **{k: v for k, v in check.items() if k != "rate_rps"}}


def _search_all(
    settings: Settings, space: SearchSpace, model: str, refine: int | None, workers: JobPool
) -> tuple[list[LayoutResult], list[PrefillResult], list[str]]:
    """Passes 1 and 2 of the module docstring: every layout's result, the prefill instances'
    rates, and notes on what could not be searched."""
    results, prefills, notes = _search_parallel(settings, space, model, workers)
    if space.max_gpus is None and all(r.verdict == "infeasible" for r in results):
        notes.append(
            "every layout within one node was pruned; --total-gpus N allows layouts of up to N GPUs"
        )
    results.extend(_refine(settings, space, list(results), refine, workers))
    return results, prefills, notes


def _collect_points(
    results: list[LayoutResult],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every passing point, tagged with its layout's id, and the fronts' points."""
    points: list[dict[str, Any]] = []
    for index, result in enumerate(results):
        for point in result.points:
            point["layout"] = index
            points.append(point)
    return points, mark_fronts(points)


def _space_entry(space: SearchSpace) -> dict[str, Any]:
    return {
        "gpus": list(space.gpus),
        "tp": list(space.tp),
        "pp": list(space.pp),
        "dp": list(space.dp),
        "max_num_seqs": list(space.max_num_seqs),
        "max_num_batched_tokens": list(space.max_num_batched_tokens),
        "total_gpus": space.max_gpus,
        "disaggregated": space.disaggregated,
    }


def _settings_entry(settings: Settings, plan: PlanSettings, gpus: Sequence[str]) -> dict[str, Any]:
    return {
        "window_s": plan.window_s,
        "tolerance": plan.tolerance,
        "min_requests": plan.min_requests,
        "refine": plan.refine,
        "headroom": plan.headroom,
        "verify_seeds": plan.verify_seeds,
        "seed": settings.seed,
        "prices": {gpu: settings.price(gpu) for gpu in gpus},
    }


def plan_deployment(
    base: Mapping[str, Any],
    slo: Mapping[str, float],
    *,
    space: SearchSpace,
    prices: Mapping[str, float] | None = None,
    settings: PlanSettings | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Plan ``base``'s workload (a scenario's data: workload, engine, precision, seed; its layout
    keys are replaced) within ``slo`` (summary metrics, e.g. ``ttft_p99_s``, at most their
    values) over ``space``; see the module docstring. JSON-ready.

    The layouts of each pass are searched on ``workers`` processes at once (None or 1: one
    after the other in this process; ``cbsim plan`` asks for one per CPU;
    :mod:`cbsim.capacity.workers`), with the same plan (``wall_s`` apart). The processes are
    started with ``spawn``, so a script that asks for several at import level needs the usual
    ``if __name__ == "__main__":`` guard."""
    plan = settings or PlanSettings()
    worker_count(workers)
    started = time.perf_counter()
    scenario = described(base)
    prompt, output, request = workload_figures(scenario)
    shared = Settings(
        base=dict(base), slo=dict(slo),
        ttft_key=next((k for k in slo if k.startswith("ttft_")), None),
        tpot_key=next((k for k in slo if k.startswith("tpot_")), None),
        seed=scenario.seed, window_s=plan.window_s, tolerance=plan.tolerance,
        min_requests=plan.min_requests, prompt_tokens=prompt, output_tokens=output,
        request_tokens=request, budget=space.max_gpus, prices=dict(prices or {}),
        progress=progress,
    )  # fmt: skip
    model = scenario.cluster.model
    get_model(model)
    with JobPool(workers, progress) as pool:  # one pool for both passes
        results, prefills, notes = _search_all(shared, space, model, plan.refine, pool)
    points, front = _collect_points(results)
    best, check, tried = _choose(shared, results, plan)
    best_entry: dict[str, Any] | None = None
    if best is not None and check is not None:
        best_entry = {
            **_layout_entry(results.index(best), best),
            "planned": _planned(shared, best, check),
            "launch": _launch(shared, best, scenario.cluster.engine, model),
        }
        best_entry.pop("evaluations")
    reason = None
    if best is None:
        reason = (
            "no layout meets the SLO"
            if not any(r.best for r in results)
            else "no layout passes its verification at the headroom over every seed"
        )
    verdicts = [r.verdict for r in results]
    return _json_object(
        {
            "model": model,
            "engine": scenario.cluster.engine,
            "dtype": scenario.cluster.dtype,
            "workload": {
                "prompt_tokens_mean": prompt,
                "output_tokens_mean": output,
                "request_tokens_p99": request,
            },
            "slo": dict(slo),
            "slo_directions": {k: _direction(k) for k in slo},
            "space": _space_entry(space),
            "settings": _settings_entry(shared, plan, space.gpus),
            "counts": {v: verdicts.count(v) for v in dict.fromkeys(verdicts)},
            "layouts": [_layout_entry(i, r) for i, r in enumerate(results)],
            "prefill_searches": [p.to_dict() for p in prefills],
            "points": points,
            "pareto": front,
            "best": best_entry,
            "verifications": tried,
            "feasible": best_entry is not None,
            "reason": reason,
            "notes": notes,
            "simulations": sum(r.simulations for r in results)
            + sum(p.simulations for p in prefills)
            + sum(int(t["simulations"]) for t in tried),
            "wall_s": time.perf_counter() - started,
        }
    )
