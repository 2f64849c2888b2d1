"""Disaggregated capacity plans: how many prefill and how many decode instances (xPyD), of which
GPU and tensor parallelism, serve a target load within an SLO, and whether that is cheaper than the
best aggregated fleet of the same candidates.

A planner sizes the two pools on their own, as DistServe does, then checks them together:

1. **Prefill capacity** of each prefill candidate (GPU, tp). A prefill instance does what an
   aggregated replica does with one-token outputs (it asks the model for one token), so its
   maximum rate is :func:`~cbsim.studies.capacity.search.find_max_rate` of the scenario with every output
   one token long, against the SLO's TTFT target (``ttft_p99_s``; the transfer and the decode
   instance's first step come on top and are checked in step 3).
2. **Decode capacity** of each decode candidate: the maximum rate one decode instance sustains
   within the whole SLO, fed by as many instances of the fastest prefill candidate as the rate
   needs and one more (so the prefill pool is never what fails).
3. **Pools for the target**, for every (prefill, decode) pair: ``x = ceil(target / prefill rate)``,
   ``y = ceil(target / decode rate)``, simulated together at the target under the search's checks
   and grown until they pass — the decode pool where the TPOT target fails or requests wait for
   decode blocks (``kv_wait_s`` p99 above a tenth of the TTFT target), else the prefill pool.
4. **The aggregated alternative**: :func:`~cbsim.studies.capacity.planning.plan` of the scenario without
   disaggregation over the same GPUs and tensor-parallel degrees, at the same target and SLO.

Cost per hour is the pools' GPUs times their price per GPU-hour, cost per million output tokens
as :mod:`cbsim.studies.capacity` defines it. Each verified layout also reports what aiconfigurator users
compare: output tokens/s per GPU (the fleet's throughput over its GPUs) against tokens/s per user
(1 / mean TPOT). The answer says whether disaggregation pays: the cheapest of all by cost per
million output tokens.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cbsim.common.errors import CbsimError
from cbsim.run.loading import load_scenario
from cbsim.schema.scenario import Scenario
from cbsim.studies.capacity.planning import _json_object, _per_million, _price, plan
from cbsim.studies.capacity.search import (
    DEFAULT_MIN_REQUESTS,
    DEFAULT_START_RPS,
    DEFAULT_TOLERANCE,
    DEFAULT_WINDOW_S,
    CapacityResult,
    Evaluation,
    Progress,
    _check_search,
    _checked_slo,
    _find_max_rate,
    _load_axis,
    _Runner,
    _scenario_data,
)
from cbsim.studies.capacity.workers import Job, JobPool, run_jobs, worker_count

MAX_GROWTH = 12
"""Instances added to the pools at most while checking a pair at the target."""
KV_WAIT_SHARE = 0.1
"""Decode admission waits (p99) above this share of the TTFT target make the decode pool grow."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """An instance layout a pool may use: a GPU and its tensor-parallel degree."""

    gpu: str
    tp: int

    @classmethod
    def parse(cls, text: str, option: str) -> Candidate:
        gpu, _, tp = text.partition(":")
        try:
            degree = int(tp) if tp else 1
        except ValueError:
            raise CbsimError(f"{text!r}: expected GPU:TP, e.g. h100-sxm:2", field=option) from None
        return cls(gpu.strip(), degree)

    def label(self) -> str:
        return f"{self.gpu} tp {self.tp}"


def _load_candidate(data: dict[str, Any], candidate: Candidate, option: str) -> Scenario:
    """The scenario of a pool candidate; a candidate that makes it invalid (an unknown GPU, a
    tensor-parallel degree the model cannot use, weights that do not fit) is an error naming
    the option that gave it, not a field of the user's scenario."""
    try:
        return load_scenario(data)
    except CbsimError as err:
        raise CbsimError(f"{candidate.gpu}:{candidate.tp}: {err.message}", field=option) from None


def _aggregated_data(scenario: Scenario) -> dict[str, Any]:
    """The scenario as written, without disaggregation (its pools' keys dropped)."""
    data = _scenario_data(scenario)
    data.get("cluster", {}).pop("disaggregation", None)
    return data


def _with_instance(data: dict[str, Any], candidate: Candidate) -> dict[str, Any]:
    out = copy.deepcopy(data)
    out.setdefault("cluster", {}).update(gpu=candidate.gpu, tp=candidate.tp)
    return out


def _split_data(
    data: Mapping[str, Any], prefill: Candidate, decode: Candidate, kv_transfer: dict[str, Any]
) -> dict[str, Any]:
    out = copy.deepcopy(dict(data))
    cluster = out.setdefault("cluster", {})
    cluster.pop("replicas", None)
    cluster["disaggregation"] = {
        "prefill": {"replicas": 1, "gpu": prefill.gpu, "tp": prefill.tp},
        "decode": {"replicas": 1, "gpu": decode.gpu, "tp": decode.tp},
        "kv_transfer": kv_transfer,
    }
    return out


def _pool_runner(
    split: dict[str, Any],
    targets: dict[str, float],
    search: dict[str, Any],
    label: str,
    progress: Progress | None,
) -> _Runner:
    """The search's runner over a disaggregated scenario (evaluated with ``pools``)."""
    return _Runner(
        split, _load_axis(load_scenario(split)), targets, search["seeds"], search["window_s"],
        search["min_requests"], progress, label, "--target-rps",
    )  # fmt: skip


def _prefill_capacity(
    data: dict[str, Any],
    candidate: Candidate,
    ttft: dict[str, float],
    search: dict[str, Any],
    *,
    progress: Progress | None,
) -> CapacityResult:
    """Step 1 for one prefill candidate (a job: it may run in a worker process)."""
    one_token = _with_instance(data, candidate)
    one_token["workload"]["output_tokens"] = {"kind": "fixed", "value": 1}
    loaded = _load_candidate(one_token, candidate, "--prefill")
    return _find_max_rate(
        loaded, one_token, ttft, label=f"prefill {candidate.label()}: ", progress=progress,
        **search,
    )  # fmt: skip


def _decode_capacity(
    data: dict[str, Any],
    kv_transfer: dict[str, Any],
    fastest: Candidate,
    fastest_rate: float,
    candidate: Candidate,
    targets: dict[str, float],
    search: dict[str, Any],
    *,
    progress: Progress | None,
) -> CapacityResult:
    """Step 2 for one decode candidate, fed by the ``fastest`` prefill candidate (a job)."""
    split = _split_data(data, fastest, candidate, kv_transfer)
    loaded = _load_candidate(split, candidate, "--decode")
    return _find_max_rate(
        loaded,
        split,
        targets,
        label=f"decode {candidate.label()}: ",
        pools_for=lambda rate: (math.ceil(rate / fastest_rate) + 1, 1),
        progress=progress,
        **search,
    )


def plan_disaggregated(
    scenario: Scenario,
    slo: Mapping[str, float] | None,
    *,
    target_rps: float,
    prefill: Sequence[Candidate],
    decode: Sequence[Candidate],
    prices: Mapping[str, float] | None = None,
    seeds: Sequence[int] | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    start_rps: float = DEFAULT_START_RPS,
    tolerance: float = DEFAULT_TOLERANCE,
    min_requests: int = DEFAULT_MIN_REQUESTS,
    progress: Progress | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """The cheapest xPyD layout of ``prefill`` and ``decode`` candidates for ``target_rps``
    within ``slo`` (default: the scenario's p99 targets), beside the best aggregated fleet of the
    same candidates (see the module docstring). JSON-ready. The candidates of each step, and the
    aggregated alternatives, are searched on ``workers`` processes at once (as :func:`plan`)."""
    targets = _checked_slo(scenario, slo)
    _check_search(window_s, tolerance, start_rps, min_requests)
    worker_count(workers)
    if "ttft_p99_s" not in targets or "tpot_p99_s" not in targets:
        raise CbsimError(
            "a disaggregated plan needs a TTFT and a TPOT target (ttft_p99_s, tpot_p99_s): the "
            "prefill pool is sized by the first, the decode pool by the second",
            field="--slo",
        )
    if not prefill or not decode:
        raise CbsimError("give at least one prefill and one decode candidate", field="--prefill")
    if not (math.isfinite(target_rps) and target_rps > 0):
        raise CbsimError(f"must be > 0, got {target_rps!r}", field="--target-rps")
    prices = dict(prices or {})
    seed_list = list(seeds) if seeds else [scenario.seed]
    data = _aggregated_data(scenario)
    disaggregation = scenario.cluster.disaggregation
    kv_transfer = (
        disaggregation.kv_transfer.model_dump(exclude_unset=True)
        if disaggregation is not None
        else {}
    )
    search: dict[str, Any] = {
        "seeds": seed_list,
        "window_s": window_s,
        "start_rps": start_rps,
        "tolerance": tolerance,
        "min_requests": min_requests,
    }
    simulations = 0
    for option, candidates in (("--prefill", prefill), ("--decode", decode)):
        for candidate in candidates:
            _load_candidate(_with_instance(data, candidate), candidate, option)
    first_pair = _split_data(data, prefill[0], decode[0], kv_transfer)
    _pool_runner(first_pair, targets, search, "", None).check(target_rps, pools=(1, 1))

    with JobPool(workers, progress) as pool:  # one pool for every step
        # 1. prefill capacity: one-token outputs, the TTFT target
        ttft = {"ttft_p99_s": targets["ttft_p99_s"]}
        jobs = [Job(_prefill_capacity, (data, candidate, ttft, search)) for candidate in prefill]
        prefill_rates: dict[Candidate, float | None] = {}
        prefill_out = []
        for candidate, found in zip(prefill, run_jobs(jobs, pool).results(), strict=True):
            simulations += found.simulations
            prefill_rates[candidate] = found.max_rate_rps
            row = {"gpu": candidate.gpu, "tp": candidate.tp, "max_rate_rps": found.max_rate_rps}
            prefill_out.append(row | {"reason": found.reason})
        feeding = [c for c in prefill if prefill_rates[c]]
        if not feeding:
            raise CbsimError(
                "no prefill candidate meets the TTFT target even lightly loaded", field="--prefill"
            )
        fastest = max(feeding, key=lambda c: prefill_rates[c] or 0.0)
        fastest_rate = prefill_rates[fastest] or 0.0

        # 2. decode capacity: one decode instance fed by enough of the fastest prefill instances
        feed = (data, kv_transfer, fastest, fastest_rate)
        jobs = [Job(_decode_capacity, (*feed, candidate, targets, search)) for candidate in decode]
        decode_rates: dict[Candidate, float | None] = {}
        decode_out = []
        for candidate, found in zip(decode, run_jobs(jobs, pool).results(), strict=True):
            simulations += found.simulations
            decode_rates[candidate] = found.max_rate_rps
            row = {"gpu": candidate.gpu, "tp": candidate.tp, "max_rate_rps": found.max_rate_rps}
            decode_out.append(row | {"reason": found.reason})

        # 3. every pair at the target, grown until it passes
        pairs = [(p, d) for p in feeding for d in decode if decode_rates[d]]
        common = (data, kv_transfer, targets, target_rps)
        pair_jobs = [
            Job(
                _verify_pair,
                (*common, p, d, prefill_rates[p] or 0.0, decode_rates[d], prices, search),
            )
            for p, d in pairs
        ]
        layouts = []
        for layout, sims in run_jobs(pair_jobs, pool).results():
            simulations += sims
            layouts.append(layout)
        passing = [alt for alt in layouts if alt["feasible"]]
        best = min(passing, key=_layout_cost) if passing else None

        # 4. the aggregated fleet of the same candidates
        aggregated_scenario = load_scenario(data)
        gpus = sorted({c.gpu for c in (*prefill, *decode)})
        tps = sorted({c.tp for c in (*prefill, *decode)})
        vary: dict[str, list[Any]] = {}
        if len(gpus) > 1:
            vary["cluster.gpu"] = list(gpus)
        if len(tps) > 1:
            vary["cluster.tp"] = list(tps)
        aggregated = plan(
            aggregated_scenario,
            targets,
            target_rps=target_rps,
            prices=prices,
            vary=vary or None,
            seeds=seed_list,
            window_s=window_s,
            start_rps=start_rps,
            tolerance=tolerance,
            min_requests=min_requests,
            progress=progress,
            workers=pool,
            headroom=1.0,  # at its knee, as the pools above are sized: the same basis
        )
        simulations += int(aggregated.get("simulations") or 0)
    aggregated_best = aggregated.get("best") if vary else aggregated
    return _json_object(
        {
            "target_rps": target_rps,
            "slo": targets,
            "prefill_candidates": prefill_out,
            "decode_candidates": decode_out,
            "layouts": layouts,
            "best": best,
            "aggregated": _aggregated_summary(aggregated_best),
            "verdict": _verdict(best, aggregated_best),
            "feasible": best is not None,
            "reason": None if best is not None else _verdict(best, aggregated_best),
            "simulations": simulations,
        }
    )


def _verify_pair(
    data: dict[str, Any],
    kv_transfer: dict[str, Any],
    targets: dict[str, float],
    target_rps: float,
    prefill: Candidate,
    decode: Candidate,
    prefill_rate: float,
    decode_rate: float,
    prices: Mapping[str, float],
    search: dict[str, Any],
    *,
    progress: Progress | None,
) -> tuple[dict[str, Any], int]:
    """Step 3 for one (prefill, decode) pair (a job: it may run in a worker process)."""
    split = _split_data(data, prefill, decode, kv_transfer)
    label = f"{prefill.label()} | {decode.label()}: "
    runner = _pool_runner(split, targets, search, label, progress)
    x = max(1, math.ceil(target_rps / prefill_rate * (1 - 1e-12)))
    y = max(1, math.ceil(target_rps / decode_rate * (1 - 1e-12)))
    tried = []
    verified: Evaluation | None = None
    for _ in range(MAX_GROWTH + 1):
        evaluation = runner.evaluate(target_rps, pools=(x, y))
        kv_wait = runner.kv_wait_p99_s
        tried.append({"prefill": x, "decode": y, "kv_wait_p99_s": kv_wait, **evaluation.to_dict()})
        if evaluation.passed:
            verified = evaluation
            break
        tpot = evaluation.metrics.get("tpot_p99_s")
        decode_short = (
            tpot is None
            or tpot > targets["tpot_p99_s"]
            or kv_wait > KV_WAIT_SHARE * targets["ttft_p99_s"]
        )
        if decode_short:
            y += 1
        else:
            x += 1
    p_gpus = x * prefill.tp
    d_gpus = y * decode.tp
    cost = p_gpus * _price(prefill.gpu, prices) + d_gpus * _price(decode.gpu, prices)
    layout: dict[str, Any] = {
        "prefill": {"gpu": prefill.gpu, "tp": prefill.tp, "replicas": x},
        "decode": {"gpu": decode.gpu, "tp": decode.tp, "replicas": y},
        "name": f"{x}P{y}D ({prefill.label()} | {decode.label()})",
        "gpus": p_gpus + d_gpus,
        "cost_per_hour": cost,
        "tried": tried,
        "feasible": verified is not None,
    }
    if verified is None:
        layout["reason"] = f"no pool sizes up to {x}P{y}D meet the SLO ({tried[-1]['reason']})"
        return layout, runner.simulations
    layout.update(_throughput_figures(verified.metrics, target_rps, layout["gpus"], cost))
    return layout, runner.simulations


def _throughput_figures(
    metrics: Mapping[str, Any], target_rps: float, gpus: int, cost_per_hour: float
) -> dict[str, Any]:
    tokens = metrics.get("output_tokens_per_request")
    per_hour = target_rps * 3600 * tokens if tokens is not None else None
    tpot = metrics.get("tpot_mean_s")
    return {
        "metrics": dict(metrics),
        "output_tokens_per_hour": per_hour,
        "cost_per_million_output_tokens": _per_million(cost_per_hour, per_hour),
        "tokens_per_s_per_gpu": per_hour / 3600 / gpus if per_hour is not None else None,
        "tokens_per_s_per_user": 1.0 / tpot if tpot else None,
    }


def _layout_cost(layout: Mapping[str, Any]) -> tuple[float, float]:
    per_million = layout.get("cost_per_million_output_tokens")
    return (per_million if per_million is not None else math.inf, layout["cost_per_hour"])


def _aggregated_summary(best: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if best is None or best.get("replicas") is None:
        return None if best is None else {"feasible": False, "reason": best.get("reason")}
    gpus = best["gpus"]
    fleet = best.get("fleet") or []
    metrics = fleet[-1].get("metrics", {}) if fleet else {}
    per_hour = best.get("output_tokens_per_hour")
    tpot = metrics.get("tpot_mean_s")
    return {
        "feasible": True,
        "name": f"{best['replicas']} x {best['gpu']} tp {best['tp']} aggregated",
        "gpu": best["gpu"],
        "tp": best["tp"],
        "replicas": best["replicas"],
        "gpus": gpus,
        "cost_per_hour": best["cost_per_hour"],
        "cost_per_million_output_tokens": best["cost_per_million_output_tokens"],
        "tokens_per_s_per_gpu": per_hour / 3600 / gpus if per_hour else None,
        "tokens_per_s_per_user": 1.0 / tpot if tpot else None,
        "metrics": metrics,
    }


def _verdict(best: Mapping[str, Any] | None, aggregated: Mapping[str, Any] | None) -> str:
    agg = _aggregated_summary(aggregated)
    if best is None and (agg is None or not agg.get("feasible")):
        return "neither a disaggregated nor an aggregated layout of these candidates meets the SLO"
    if best is None:
        assert agg is not None
        return f"disaggregation does not meet the SLO here; aggregated: {agg['name']}"
    if agg is None or not agg.get("feasible"):
        return f"only disaggregation meets the SLO: {best['name']}"
    ours, theirs = _layout_cost(best)[0], agg["cost_per_million_output_tokens"]
    if ours < theirs:
        return (
            f"disaggregation pays: {best['name']} at {ours:.3f} per million output tokens "
            f"against {theirs:.3f} for {agg['name']} ({100 * (1 - ours / theirs):.0f}% less)"
        )
    return (
        f"disaggregation does not pay: {best['name']} at {ours:.3f} per million output tokens "
        f"against {theirs:.3f} for {agg['name']}"
    )
