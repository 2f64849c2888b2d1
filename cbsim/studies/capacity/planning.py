"""Steps 2 and 3 of a capacity plan: the fleet for a target load and its cost, and the alternatives
of ``vary`` (:func:`plan`, one JSON-ready mapping).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cbsim.catalog.hardware import GPU_NAMES, get_gpu
from cbsim.common.errors import CbsimError
from cbsim.common.limits import RATE, SWEEP_POINTS
from cbsim.engine.cost_models import CostModelCache
from cbsim.run.loading import load_scenario
from cbsim.schema.scenario import Scenario
from cbsim.studies.capacity.checks import _direction
from cbsim.studies.capacity.defaults import HEADROOM, check_headroom, fleet_size
from cbsim.studies.capacity.defaults import verify_seeds as default_verify_seeds
from cbsim.studies.capacity.fields import _check_key, _set_keys
from cbsim.studies.capacity.fleet_checks import fleet_evaluations
from cbsim.studies.capacity.headline import capacity_headline, layout_label
from cbsim.studies.capacity.search import (
    DEFAULT_MIN_REQUESTS,
    DEFAULT_START_RPS,
    DEFAULT_TOLERANCE,
    DEFAULT_WINDOW_S,
    Evaluation,
    Progress,
    _check_search,
    _checked_slo,
    _find_max_rate,
    _load_axis,
    _rate,
    _resolve,
    _Runner,
    _scenario_data,
)
from cbsim.studies.capacity.workers import Job, JobPool, run_jobs, worker_count


def _check_prices(prices: Mapping[str, float]) -> None:
    for gpu, price in prices.items():
        if gpu not in GPU_NAMES:
            raise CbsimError(
                f"unknown gpu {gpu!r}; known: {', '.join(sorted(GPU_NAMES))}", field="--prices"
            )
        if not math.isfinite(price) or price < 0:
            raise CbsimError(f"{gpu}: price must be >= 0, got {price!r}", field="--prices")


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
    headroom: float = HEADROOM,
    verify: list[int] | None = None,
    fleet_workers: int = 1,
) -> dict[str, Any]:
    cluster = scenario.cluster
    price = _price(cluster.gpu, prices)
    if target_rps is not None:  # the fleet's run at the target must be one cbsim can simulate
        axis = _load_axis(scenario)
        target = _Runner(base, axis, slo, seeds, window_s, min_requests, None, "", "--target-rps")
        target.check(target_rps)
    cost_models = CostModelCache()  # the search's and the fleet checks' replicas alike
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
        cost_models=cost_models,
    )
    out = found.to_dict()
    out.update(
        {
            "scenario": scenario.name,
            "model": cluster.model,
            "gpu": cluster.gpu,
            "tp": cluster.tp,
            "layout": layout_label(cluster.tp, cluster.pp, cluster.dp, cluster.ep),
            "gpus_per_replica": cluster.gpus_per_replica,
            "price_per_gpu_hour": price,
            "target_rps": target_rps,
            "replicas": None,
            "gpus": None,
            "cost_per_hour": None,
            "output_tokens_per_hour": None,
            "cost_per_million_output_tokens": None,
            "cost_basis": None,
            "replica_cost_per_hour": cluster.gpus_per_replica * price,
            "headroom": headroom,
            "planning_rate_rps": None,
            "fleet_headroom": None,
        }
    )
    if found.max_rate_rps is not None:
        out["planning_rate_rps"] = headroom * found.max_rate_rps
    simulations = found.simulations
    if found.max_rate_rps is None:
        out["simulations"] = simulations
        return out
    if target_rps is None:
        tokens = found.output_tokens_per_request
        per_hour = found.max_rate_rps * 3600 * tokens if tokens is not None else None
        out["output_tokens_per_hour"] = per_hour
        out["cost_per_million_output_tokens"] = _per_million(
            cluster.gpus_per_replica * price, per_hour
        )
        out["cost_basis"] = "one replica at its maximum rate"
        return out
    # fleet for the target load, verified by simulation
    axis = _load_axis(scenario)
    fleet_base = copy.deepcopy(base)
    fleet_seeds = list(verify) if verify else list(seeds)
    runner = _Runner(
        fleet_base,
        axis,
        slo,
        fleet_seeds,
        window_s,
        min_requests,
        progress,
        label,
        "--target-rps",
        cost_models=cost_models,
    )
    runner.fleet = True
    first = fleet_size(target_rps, found.max_rate_rps, headroom)
    extra = max_extra_replicas if max_extra_replicas is not None else max(8, first)
    fleet: list[dict[str, Any]] = []
    verified: Evaluation | None = None
    replicas = first
    sizes = range(first, first + extra + 1)
    checks = fleet_evaluations(runner, target_rps, sizes, fleet_workers)
    with contextlib.closing(checks):
        for replicas, ev in checks:
            fleet.append({"replicas": replicas, **ev.to_dict()})
            if ev.passed:
                verified = ev
                break
    simulations += runner.simulations
    out["simulations"] = simulations
    out["fleet"] = fleet
    out["fleet_seeds"] = fleet_seeds
    out["initial_replicas"] = first
    if verified is None:
        out["feasible"] = False
        out["reason"] = (
            f"a fleet of {first}–{replicas} replicas does not meet the SLO at "
            f"{_rate(target_rps)} req/s ({fleet[-1]['reason']})"
        )
        return out
    gpus = replicas * cluster.gpus_per_replica
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
            "fleet_headroom": replicas * found.max_rate_rps / target_rps - 1,
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
    workers: int | JobPool | None = None,
    headroom: float = HEADROOM,
    verify_seeds: Sequence[int] | int | None = None,
) -> dict[str, Any]:
    """Plan capacity for ``scenario`` (steps 1–3 of the module docstring) as one JSON-ready dict.

    Keys: ``max_rate_rps`` (per replica: the knee), ``planning_rate_rps`` (``headroom`` × the
    knee), ``feasible``, ``reason``, ``slo``, ``simulations`` (all runs), ``evaluations``; with
    ``target_rps``: ``replicas`` (at first ``ceil(target / planning rate)``, grown one at a time
    until the fleet passes at the target on every seed of ``fleet_seeds``), ``gpus``,
    ``cost_per_hour``, ``cost_per_million_output_tokens``, ``fleet_headroom`` (replicas × knee /
    target − 1) and the ``fleet`` runs; with ``vary``: ``alternatives`` (one such object per
    combination, with its ``overrides``) and ``best`` (the cheapest that meets the SLO, or None),
    whose figures are also the top level's; ``headline``: the one line to buy on
    (:func:`~cbsim.studies.capacity.headline.capacity_headline`). Floats that are not finite are None.

    ``seeds`` are the seeds every rate of the search must pass on (default: the scenario's);
    the fleet is verified on them too when given, else on ``verify_seeds`` (a count from the
    scenario's seed, or a list; default :data:`~cbsim.studies.capacity.defaults.VERIFY_SEEDS`). The
    defaults are :mod:`cbsim.studies.capacity.defaults`', shared with ``cbsim plan``.

    The alternatives are searched on ``workers`` processes at once (None or 1: one
    after the other in this process; see :mod:`cbsim.studies.capacity.workers`), with the same result.
    The processes are started from a fork server (or spawned: :mod:`cbsim.common.worker_start`),
    so a script that asks for several at import level needs the usual
    ``if __name__ == "__main__":`` guard.
    """
    loaded, base = _resolve(scenario)
    targets = _checked_slo(loaded, slo)
    price_table = dict(prices or {})
    _check_prices(price_table)
    seed_list = list(seeds) if seeds else [loaded.seed]
    fleet_seeds = seed_list if seeds else _verify_seeds(loaded.seed, verify_seeds)
    _check_search(window_s, tolerance, start_rps, min_requests)
    check_headroom(headroom)
    worker_count(workers)
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
        "headroom": headroom,
    }
    prepared = [_alternative(loaded, base, overrides) for overrides in combos]
    if vary_map:
        _check_vary_values(vary_map, combos, prepared)
    elif isinstance(prepared[0], CbsimError):  # the scenario itself cannot be searched
        raise prepared[0]
    settings = {
        "target_rps": target_rps, "prices": price_table, "seeds": seed_list,
        "window_s": window_s, "start_rps": start_rps, "tolerance": tolerance,
        "min_requests": min_requests, "max_extra_replicas": max_extra_replicas,
        "headroom": headroom, "verify": fleet_seeds,
    }  # fmt: skip
    jobs = [
        Job(_plan_one, (*ready, targets), {**settings, "label": _label(i, combos)})
        for i, ready in enumerate(prepared)
        if not isinstance(ready, CbsimError)
    ]
    if len(jobs) == 1:  # the cores the layouts would use check fleets ahead instead
        jobs[0].kwargs["fleet_workers"] = worker_count(workers)
    searched = iter(run_jobs(jobs, workers, progress).results())
    alternatives: list[dict[str, Any]] = []
    for overrides, ready in zip(combos, prepared, strict=True):
        if isinstance(ready, CbsimError):
            alternatives.append(
                {
                    "overrides": overrides,
                    "error": str(ready),
                    "feasible": False,
                    "reason": f"invalid scenario: {ready}",
                    "max_rate_rps": None,
                    "simulations": 0,
                    "replicas": None,
                    "gpus": None,
                    "cost_per_hour": None,
                    "cost_per_million_output_tokens": None,
                }
            )
        else:
            alternatives.append({"overrides": overrides, "error": None, **next(searched)})
    total = sum(int(a.get("simulations") or 0) for a in alternatives)
    if not vary_map:
        single = {**alternatives[0], **common, "simulations": total}
        return _json_object({**single, "headline": capacity_headline(single)})
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
    result = {
        **top,
        **common,
        "simulations": total,
        "vary": vary_map,
        "alternatives": alternatives,
        "best": best,
    }
    return _json_object({**result, "headline": capacity_headline(result)})


def _verify_seeds(seed: int, verify: Sequence[int] | int | None) -> list[int]:
    """The seeds the fleet is verified on: a list as given, else a count from ``seed``."""
    if verify is None:
        return default_verify_seeds(seed)
    if isinstance(verify, int):
        if isinstance(verify, bool) or verify < 1:
            raise CbsimError(f"must be >= 1, got {verify!r}", field="--verify-seeds")
        return default_verify_seeds(seed, verify)
    seeds = [int(s) for s in verify]
    if not seeds:
        raise CbsimError("give at least one seed", field="--verify-seeds")
    return seeds


def _label(i: int, combos: Sequence[Mapping[str, Any]]) -> str:
    """The progress lines' prefix of alternative ``i`` of ``combos``."""
    if len(combos) <= 1:
        return ""
    return f"alternative {i + 1} of {len(combos)} ({_describe_overrides(combos[i])}): "


def _alternative(
    loaded: Scenario, base: dict[str, Any], overrides: Mapping[str, Any]
) -> tuple[Scenario, dict[str, Any]] | CbsimError:
    """The scenario of one alternative and its data, or why it is not a valid scenario."""
    try:
        scenario = load_scenario(_set_keys(base, overrides)) if overrides else loaded
        data = _scenario_data(scenario)
        _load_axis(scenario)
    except CbsimError as err:
        return err
    return scenario, data


def _check_vary_values(
    vary: Mapping[str, Sequence[Any]],
    combos: Sequence[Mapping[str, Any]],
    prepared: Sequence[tuple[Scenario, dict[str, Any]] | CbsimError],
) -> None:
    """Bad input, before any search: a ``vary`` value that every alternative holding it refuses
    for that very key (a misspelt GPU, a tensor-parallel degree no model takes), or alternatives
    none of which is a valid scenario. An alternative that is invalid only in combination (a
    model too large for one of the GPUs at one tp) is reported and skipped as before."""
    for key, values in vary.items():
        for value in values:
            errors = [
                outcome
                for overrides, outcome in zip(combos, prepared, strict=True)
                if overrides[key] == value
            ]
            if errors and all(
                isinstance(e, CbsimError) and (e.field or "").startswith(key) for e in errors
            ):
                first = errors[0]
                assert isinstance(first, CbsimError)
                raise CbsimError(f"{key}={value}: {first.message}", field="--vary")
    if all(isinstance(outcome, CbsimError) for outcome in prepared):
        first_error = prepared[0]
        assert isinstance(first_error, CbsimError)
        if not any((first_error.field or "").startswith(key) for key in vary):
            raise first_error  # the scenario's own problem, whatever is varied
        raise CbsimError(
            f"no alternative is a valid scenario; {_describe_overrides(combos[0])}: {first_error}",
            field="--vary",
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


def _describe_overrides(overrides: Mapping[str, Any]) -> str:
    if not overrides:
        return "scenario"
    return ", ".join(f"{k}={v}" for k, v in overrides.items())
