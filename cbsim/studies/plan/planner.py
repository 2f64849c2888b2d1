"""The whole plan: every layout searched, the Pareto front, the winner verified with headroom.

:func:`plan_deployment` runs the search in three passes and returns one JSON-ready mapping:

1. **Parallel layouts.** Every aggregated layout of every GPU kind at the engine's default
   batching, and (with a TTFT and a TPOT target) every disaggregated ``xP1D`` unit: the prefill
   instance that serves the most prompts per GPU within the TTFT target feeding each decode
   instance. Layouts that cannot run are pruned with their reason.
2. **Batching.** The ``refine`` best parallel layouts (all with ``refine=None``) are searched again
   at every batch cap × token budget of the space, each starting from its parent's rate; the
   others' variants are listed as not searched, with why.
3. **The answer** (:mod:`cbsim.studies.plan.answer`). Passes 1 and 2 screen the layouts over a short
   window (``screen_window_s``, 60 s; at a 5 % tolerance), which reads every knee a little high.
   The best screened layouts (the cheapest per output token, or with ``target_rps`` the cheapest
   fleet for it) are searched again over the shared window and tolerance (``cbsim capacity``'s:
   300 s, 2 %), then the best of them is verified: one replica planned at ``headroom`` × its
   knee, re-simulated there for every verification seed (if that fails the fraction drops, see
   :func:`~cbsim.studies.plan.search.verify`), or, with ``target_rps``, the fleet ``cbsim capacity`` would
   buy, simulated at the target; after that the next layout is tried. The winner gets its
   engine's launch command (:mod:`cbsim.studies.plan.launch`) and a headline to buy on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from pydantic import ValidationError

from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.run.loading import load_scenario
from cbsim.schema.pools import pool_plans
from cbsim.schema.problems import validation_problem
from cbsim.schema.scenario import Scenario
from cbsim.studies.capacity.checks import _direction
from cbsim.studies.capacity.defaults import (
    HEADROOM,
    SCREEN_TOLERANCE,
    SCREEN_WINDOW_S,
    TOLERANCE,
    VERIFY_SEEDS,
    WINDOW_S,
    check_headroom,
)
from cbsim.studies.capacity.planning import _json_object
from cbsim.studies.capacity.search import Progress
from cbsim.studies.capacity.workers import Job, JobPool, run_jobs, worker_count
from cbsim.studies.plan.answer import choose, confirm, fleet_entry, headline
from cbsim.studies.plan.launch import launch_commands
from cbsim.studies.plan.layouts import (
    Instance,
    Layout,
    SearchSpace,
    batching_variants,
    layout_data,
    parallel_layouts,
    single_instances,
)
from cbsim.studies.plan.pareto import mark_fronts, objective, operating_point
from cbsim.studies.plan.search import (
    LayoutResult,
    PrefillResult,
    Settings,
    search_aggregated,
    search_disaggregated,
    search_prefill,
)
from cbsim.workload.build import build_workload
from cbsim.workload.drawn import RequestSpecs

REQUEST_QUANTILE = 99
"""A KV cache must hold one request of this percentile of prompt + output tokens."""


@dataclass(frozen=True)
class PlanSettings:
    """How hard to search: the window and tolerance of the answer's knee (``cbsim capacity``'s
    defaults), the screening window, how many parallel layouts get their batching refined
    (None: all), the headroom, the verification seeds and the target load (None: one replica)."""

    window_s: float = WINDOW_S
    tolerance: float = TOLERANCE
    min_requests: int = 200
    refine: int | None = 3
    headroom: float = HEADROOM
    verify_seeds: int = VERIFY_SEEDS
    screen_window_s: float = SCREEN_WINDOW_S
    target_rps: float | None = None

    @property
    def screen_window(self) -> float:
        """The window every layout is screened over (at most the answer's)."""
        return min(self.screen_window_s, self.window_s)

    @property
    def screen_tolerance(self) -> float:
        """The tolerance every layout is screened at (at least the answer's)."""
        return max(SCREEN_TOLERANCE, self.tolerance)

    @property
    def screens(self) -> bool:
        """Whether the screening differs from the answer's search (the candidates are then
        searched again)."""
        return (self.screen_window, self.screen_tolerance) != (self.window_s, self.tolerance)


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
    count = len(layouts) + sum(len(found) for found in instances.values())
    jobs: list[Job[LayoutResult | PrefillResult]] = [
        Job(_aggregated_job, (_tagged(plain, "layout", i, count), layout, "parallel", None))
        for i, layout in enumerate(layouts)
    ]
    prefill_instances = [inst for found in instances.values() for inst in found]
    jobs += [
        Job(_prefill_job, (_tagged(plain, "layout", len(layouts) + i, count), inst))
        for i, inst in enumerate(prefill_instances)
    ]
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
            unit = replace(plain)  # its own copy: tagged once the units are counted
            units.append(Job(_unit_job, (unit, layout, best.rate_rps, "parallel", None)))
    for i, job in enumerate(units):
        job.args[0].tag = f"xPyD unit {i + 1} of {len(units)}: "
    results.extend(run_jobs(units, workers).results())
    first.results()  # a prefill search's error, if one failed
    if space.disaggregated and not split:
        notes.append("disaggregated units need a TTFT and a TPOT target: not searched")
    return results, prefills, notes


def _tagged(settings: Settings, noun: str, index: int, count: int) -> Settings:
    """``settings`` whose progress lines name the search ``noun index+1 of count``."""
    return replace(settings, tag=f"{noun} {index + 1} of {count}: ")


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
                out.append(Job(_aggregated_job, (replace(plain), variant, "batching", start)))
            else:
                assert parent.prefill_rate_rps is not None
                start = (parent.best or {})["rate_rps"]
                rate = parent.prefill_rate_rps
                out.append(Job(_unit_job, (replace(plain), variant, rate, "batching", start)))
    jobs = [entry for entry in out if isinstance(entry, Job)]
    for i, job in enumerate(jobs):
        job.args[0].tag = f"batching {i + 1} of {len(jobs)}: "
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


def _confirmation(index: int, result: LayoutResult) -> dict[str, Any]:
    """A candidate searched again at the answer's window: its knee, verdict and evaluations."""
    found = result.found
    return {
        "layout": index,
        "verdict": result.verdict,
        "reason": result.reason,
        "max_rate_rps": found.max_rate_rps if found is not None else None,
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
        "screen_window_s": plan.screen_window,
        "screen_tolerance": plan.screen_tolerance,
        "target_rps": plan.target_rps,
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
    :mod:`cbsim.studies.capacity.workers`), with the same plan (``wall_s`` apart). The processes are
    started from a fork server (or spawned: :mod:`cbsim.common.worker_start`), so a script that
    asks for several at import level needs the usual ``if __name__ == "__main__":`` guard."""
    plan = settings or PlanSettings()
    worker_count(workers)
    started = time.perf_counter()
    scenario = described(base)
    prompt, output, request = workload_figures(scenario)
    check_headroom(plan.headroom)
    shared = Settings(
        base=dict(base), slo=dict(slo),
        ttft_key=next((k for k in slo if k.startswith("ttft_")), None),
        tpot_key=next((k for k in slo if k.startswith("tpot_")), None),
        seed=scenario.seed, window_s=plan.screen_window, tolerance=plan.screen_tolerance,
        min_requests=plan.min_requests, prompt_tokens=prompt, output_tokens=output,
        request_tokens=request, budget=space.max_gpus, prices=dict(prices or {}),
        progress=progress,
    )  # fmt: skip
    model = scenario.cluster.model
    get_model(model)
    final = replace(shared, window_s=plan.window_s, tolerance=plan.tolerance)
    target, headroom = plan.target_rps, plan.headroom
    with JobPool(workers, progress) as pool:  # one pool for every pass
        results, prefills, notes = _search_all(shared, space, model, plan.refine, pool)
        confirmed = confirm(
            shared, final, results, target=target, headroom=headroom, again=plan.screens,
            workers=pool,
        )  # fmt: skip
        index, best, check, tried = choose(
            final, confirmed, target=target, headroom=headroom, seeds=plan.verify_seeds,
            workers=pool.workers,
        )  # fmt: skip
    points, front = _collect_points(results)
    best_entry: dict[str, Any] | None = None
    if index is not None and best is not None and check is not None:
        screened = results[index].found
        best_entry = {
            **_layout_entry(index, best),
            "screened_max_rate_rps": screened.max_rate_rps if screened is not None else None,
            "launch": _launch(final, best, scenario.cluster.engine, model),
        }
        if target is None:
            best_entry["planned"] = _planned(final, best, check)
        else:
            best_entry["fleet"] = fleet_entry(final, best, check)
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
            "headline": headline(best_entry),
            "confirmations": [_confirmation(i, r) for i, r in confirmed] if plan.screens else [],
            "verifications": tried,
            "feasible": best_entry is not None,
            "reason": reason,
            "notes": notes,
            "simulations": sum(r.simulations for r in results)
            + sum(p.simulations for p in prefills)
            + (sum(r.simulations for _, r in confirmed) if plan.screens else 0)
            + sum(int(t["simulations"]) for t in tried),
            "wall_s": time.perf_counter() - started,
        }
    )
