"""Preflight: what a scenario will run, told before running it.

``cbsim validate`` builds a scenario's workload exactly as ``cbsim run`` does (so both accept and
refuse the same scenarios, :mod:`cbsim.common.limits` included) and, instead of simulating it, describes
it in a few lines: how many requests arrive over how long and at what rate, how long their prompts
and outputs are (percentiles), and what serves them (model, GPU, tensor parallelism, replicas,
GPUs in total). Warnings (a trace whose time unit is doubtful, scheduler settings that cannot
batch the prompts) come with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cbsim.engine.fleet import scenario_memory_plans
from cbsim.run.simulate import scenario_warnings
from cbsim.schema.scenario import Scenario
from cbsim.workload.build import build_workload
from cbsim.workload.drawn import ClosedLoopWorkload, RequestSpecs, StagedWorkload
from cbsim.workload.sessions import SessionWorkload

PERCENTILES = (50, 90, 99)
CLOSED_LOOP_SAMPLE = 1024
"""Requests whose lengths describe a closed loop (its lengths are drawn as it sends)."""


@dataclass(frozen=True)
class Preflight:
    """A scenario checked as a run would check it: its description and its warnings."""

    lines: list[str]
    warnings: list[str] = field(default_factory=list)


def preflight(scenario: Scenario, source: str | None = None) -> Preflight:
    """Build the scenario's workload (raising what a run would raise) and describe it."""
    workload = build_workload(scenario, source)
    lines = [
        *_workload_lines(scenario, workload),
        _cluster_line(scenario),
        *memory_lines(scenario, _mean_request_tokens(workload)),
    ]
    return Preflight(lines, scenario_warnings(scenario, source, workload))


def _workload_lines(
    scenario: Scenario,
    workload: RequestSpecs | ClosedLoopWorkload | SessionWorkload | StagedWorkload,
) -> list[str]:
    if isinstance(workload, ClosedLoopWorkload):
        return _closed_loop_lines(workload)
    if isinstance(workload, StagedWorkload):
        return _staged_lines(workload)
    if isinstance(workload, SessionWorkload):
        return _session_lines(scenario, workload)
    arrivals = workload.arrival_s
    count = len(arrivals)
    span = float(arrivals[-1] - arrivals[0]) if count else 0.0
    kind = _arrival_kind(scenario)
    if span > 0:
        timing = f"over {_seconds(span)} ({count / span:,.3g} requests/s, {kind})"
    else:
        timing = f"all at t = {float(arrivals[0]) if count else 0.0:g} s ({kind})"
    return [
        f"requests: {count:,} {timing}",
        _lengths_line("prompt tokens", workload.prompt_tokens),
        _lengths_line("output tokens", workload.output_tokens),
    ]


def _closed_loop_lines(workload: ClosedLoopWorkload) -> list[str]:
    limits = []
    if workload.max_requests is not None:
        limits.append(f"{workload.max_requests:,} requests")
    if workload.duration_s is not None:
        limits.append(f"{_seconds(workload.duration_s)} of sending")
    think = f", think time {workload.think_time_s:g} s" if workload.think_time_s else ""
    sample = min(workload.max_requests or CLOSED_LOOP_SAMPLE, CLOSED_LOOP_SAMPLE)
    pairs = np.asarray([workload.lengths[i] for i in range(sample)], dtype=np.int64)
    note = f" (first {sample:,} requests)"
    return [
        f"requests: closed loop of {workload.concurrency:,} clients, until "
        f"{' or '.join(limits)}{think}",
        _lengths_line("prompt tokens", pairs[:, 0]) + note,
        _lengths_line("output tokens", pairs[:, 1]) + note,
    ]


def _staged_lines(workload: StagedWorkload) -> list[str]:
    stages = ", ".join(
        f"{len(offsets):,} in {_seconds(duration)}"
        for offsets, duration in zip(workload.offsets, workload.durations, strict=True)
    )
    gap = f", {workload.gap_s:g} s apart" if workload.gap_s else ""
    sample = min(len(workload), CLOSED_LOOP_SAMPLE)
    pairs = np.asarray([workload.lengths[i] for i in range(sample)], dtype=np.int64)
    pairs = pairs.reshape(sample, 2)
    note = f" (first {sample:,} requests)"
    return [
        f"requests: {len(workload):,} in {len(workload.offsets)} stages, each once the one "
        f"before has drained ({stages}){gap}",
        _lengths_line("prompt tokens", pairs[:, 0]) + note,
        _lengths_line("output tokens", pairs[:, 1]) + note,
    ]


def _session_lines(scenario: Scenario, workload: SessionWorkload) -> list[str]:
    starts = workload.starts
    span = float(starts[-1] - starts[0]) if len(starts) else 0.0
    think = f", think time {workload.think_time_s:g} s" if workload.think_time_s else ""
    return [
        f"sessions: {len(starts):,} over {_seconds(span)} ({_arrival_kind(scenario)}), "
        f"{len(workload):,} turns in all{think}",
        _lengths_line("turns per session", workload.turns),
        _lengths_line("prompt tokens", workload.prompt_lengths()),
        _lengths_line("output tokens", workload.answer_tokens),
    ]


def _arrival_kind(scenario: Scenario) -> str:
    workload = scenario.workload
    if workload.arrival is not None and workload.arrival.kind != "trace":
        return f"{workload.arrival.kind} arrivals"
    assert workload.trace is not None
    return f"replayed from {workload.trace.path} x{workload.trace.effective_time_scale:g} time"


def _lengths_line(what: str, lengths: np.ndarray) -> str:
    if len(lengths) == 0:
        return f"{what}: none"
    points = np.percentile(lengths, PERCENTILES, method="nearest")
    parts = [f"p{p} {int(v):,}" for p, v in zip(PERCENTILES, points, strict=True)]
    return f"{what}: {', '.join(parts)}, max {int(lengths.max()):,}"


def gpu_layout(scenario: Scenario) -> str:
    """``h100-sxm, tp 4 x 2 replicas = 8 GPUs in total`` (also what ``cbsim run`` prints); with
    pools, each pool's (``prefill: h100-sxm, tp 2 x 2 replicas; decode: ...; 8 GPUs in total``)."""
    if scenario.cluster.pooled:
        from cbsim.schema.pools import pool_plans

        plans = pool_plans(scenario)
        parts = [f"{plan.name}: {_pool_layout(plan.scenario, total=False)}" for plan in plans]
        gpus = sum(plan.gpus for plan in plans)
        return f"{'; '.join(parts)}; {gpus:,} GPU{'s' if gpus != 1 else ''} in total"
    return _pool_layout(scenario)


def _pool_layout(scenario: Scenario, *, total: bool = True) -> str:
    cluster = scenario.cluster
    replicas = f"{cluster.replicas:,} replica{'s' if cluster.replicas != 1 else ''}"
    gpus = cluster.replicas * cluster.gpus_per_replica
    layout = f"tp {cluster.tp}"
    if cluster.dp > 1:
        layout += f" x dp {cluster.dp}"
    if cluster.pp > 1:
        layout += f" x pp {cluster.pp}"
    if not total:
        return f"{cluster.gpu}, {layout} x {replicas}"
    scale = cluster.autoscale
    if scale is not None:  # the replicas built are the most it may serve
        low = f"{scale.min_replicas:,}-{scale.max_replicas:,} replicas (autoscaled)"
        most = f"at most {gpus:,} GPU{'s' if gpus != 1 else ''}"
        return f"{cluster.gpu}, {layout} x {low} = {most}"
    return f"{cluster.gpu}, {layout} x {replicas} = {gpus:,} GPU{'s' if gpus != 1 else ''} in total"


def _mean_request_tokens(
    workload: RequestSpecs | ClosedLoopWorkload | SessionWorkload | StagedWorkload,
) -> float:
    """Prompt plus output tokens of the workload's average request (of a sample where the
    lengths are drawn as requests go)."""
    if isinstance(workload, RequestSpecs):
        if not len(workload.prompt_tokens):
            return 0.0
        return float(np.mean(workload.prompt_tokens) + np.mean(workload.output_tokens))
    if isinstance(workload, SessionWorkload):
        prompts, answers = workload.prompt_lengths(), workload.answer_tokens
        return float(np.mean(prompts) + np.mean(answers)) if len(prompts) else 0.0
    size = workload.max_requests if isinstance(workload, ClosedLoopWorkload) else len(workload)
    sample = min(size or CLOSED_LOOP_SAMPLE, CLOSED_LOOP_SAMPLE)
    if sample <= 0:
        return 0.0
    return float(np.mean([sum(workload.lengths[i]) for i in range(sample)]))


def memory_lines(scenario: Scenario, request_tokens: float) -> list[str]:
    """Each pool's KV cache as its engine would print it at start-up, the requests of the mean
    length it holds at once, and where each GPU's memory goes."""
    lines = []
    for plan, memory in scenario_memory_plans(scenario):
        where = "" if plan.field == "cluster" else f" ({plan.name})"
        concurrency = memory.max_concurrency(request_tokens)
        lines.append(f"KV cache{where}: {memory.startup_line()}")
        lines.append(
            f"  {memory.tokens:,} tokens a replica, {concurrency:,.1f} requests of the mean "
            f"{request_tokens:,.0f} tokens at once; {memory.breakdown_line()}"
        )
    return lines


def _cluster_line(scenario: Scenario) -> str:
    return f"cluster: {scenario.cluster.model} on {gpu_layout(scenario)}"


def _seconds(value: float) -> str:
    """A span in the unit people read it in: ``42.0 s``, ``12.5 min``, ``3.2 h``, ``4.1 days``."""
    if value < 120:
        return f"{value:.3g} s"
    if value < 2 * 3600:
        return f"{value / 60:.3g} min"
    if value < 2 * 86_400:
        return f"{value / 3600:.3g} h"
    return f"{value / 86_400:.3g} days"
