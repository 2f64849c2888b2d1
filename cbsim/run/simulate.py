"""The Python entry point: run a scenario and get :class:`~cbsim.run.results.Results`."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cbsim.common.columns import ColumnTable, equals
from cbsim.common.errors import CbsimError
from cbsim.common.output_folders import temporary_prefix
from cbsim.cost.engine_memory import memory_figures
from cbsim.cost.kernel_cache import INTERPRETED_CALLS
from cbsim.cost.link_bound import pool_warnings
from cbsim.engine.cost_models import CostModelCache, transfer_warnings
from cbsim.engine.fleet import replica_memory_plan
from cbsim.engine.loop import ProgressCallback, Simulation
from cbsim.engine.recorder import IterationTotals, summarize
from cbsim.engine.scheduler.warnings import scheduler_warnings
from cbsim.outputs.stability import with_stability
from cbsim.outputs.summary import rejection_counts, rejection_warning
from cbsim.outputs.timeseries_windows import timeseries_columns
from cbsim.run.loading import load_scenario
from cbsim.run.results import Results
from cbsim.schema.engine_defaults import apply_engine_defaults
from cbsim.schema.pools import pool_plans
from cbsim.schema.scenario import Scenario
from cbsim.schema.setting_warnings import deprecated_names, ignored_settings, slo_warnings
from cbsim.workload.build import build_workload
from cbsim.workload.drawn import ClosedLoopWorkload, RequestSpecs, StagedWorkload
from cbsim.workload.sessions import SessionWorkload

if TYPE_CHECKING:
    from cbsim.common.columns import Table


def simulate(
    scenario: Scenario | str | Path | dict[str, Any],
    *,
    progress: ProgressCallback | None = None,
    source: str | None = None,
    stream_to: str | Path | None = None,
    cost_models: CostModelCache | None = None,
    interpret_while_cold: bool = True,
) -> Results:
    """Simulate a scenario (a :class:`Scenario`, a YAML path or a mapping) and return its results.

    ``stream_to``: a parquet file the iterations are written to as they run, a row group per
    :data:`~cbsim.engine.recorder.STREAM_ROWS` rows, instead of being held (see :mod:`cbsim.engine.recorder`):
    ``results.iterations`` is then an empty frame, ``results.iterations_path`` the file and
    :meth:`Results.load_iterations` reads it. ``cost_models``: cost models shared with other
    simulations (a search's), built here when absent."""
    run = simulate_tables(
        scenario,
        progress=progress,
        source=source,
        stream_to=stream_to,
        cost_models=cost_models,
        interpret_while_cold=interpret_while_cold,
    )
    return Results.of_tables(
        run.scenario,
        run.requests,
        run.iterations,
        run.timeseries,
        run.summary,
        run.run_info,
        run.iterations_path,
    )


@dataclass
class RunTables:
    """A run's tables as the columns its frames are made of (:class:`~cbsim.common.columns.ColumnTable`),
    with its summary: what :func:`simulate_tables` returns to a caller that only reads figures
    (a capacity search's points), which then never imports pandas. :func:`simulate` makes the
    :class:`Results` of it."""

    scenario: Scenario
    requests: ColumnTable
    iterations: ColumnTable
    timeseries: ColumnTable
    summary: dict[str, Any]
    run_info: dict[str, Any]
    iterations_path: Path | None


def simulate_tables(
    scenario: Scenario | str | Path | dict[str, Any],
    *,
    progress: ProgressCallback | None = None,
    source: str | None = None,
    stream_to: str | Path | None = None,
    cost_models: CostModelCache | None = None,
    interpret_while_cold: bool = True,
) -> RunTables:
    """:func:`simulate`, its tables left as columns (see :class:`RunTables`)."""
    if not isinstance(scenario, Scenario):
        if isinstance(scenario, str | Path):
            source = str(scenario)
        scenario = load_scenario(scenario)
    scenario = apply_engine_defaults(scenario)
    wall_start = time.perf_counter()
    simulation = Simulation(
        scenario,
        source=source,
        progress=progress,
        cost_models=cost_models,
        interpret_while_cold=interpret_while_cold,
    )
    window_s = scenario.output.timeseries_window_s
    if stream_to is not None:
        simulation.recorder.stream(stream_to, window_s)
    try:
        recorder = simulation.run()
    except CbsimError as err:  # a run-time guard (the request limit, the windows) names a field
        raise err.located(source=source) from None
    wall = time.perf_counter() - wall_start
    requests = recorder.request_columns
    iterations = recorder.iteration_columns
    streamed = recorder.streamed
    totals = IterationTotals.of(iterations) if streamed is None else streamed.totals
    warnings = run_warnings(scenario, simulation, totals.max_batch)
    rejections = rejection_counts(requests)
    if rejections:
        counts = {"rejected": sum(rejections.values()), "requests": len(requests), **rejections}
        warnings.append(rejection_warning(counts, context_length(scenario)))
    info = run_info(simulation, wall, recorder.end_s)
    memory = memory_report(simulation, mean_request_tokens(requests))
    info["memory"] = memory
    if streamed is not None:
        info["streamed"] = True
    del simulation  # its workload, schedulers and events: freed before the summaries' temporaries
    try:
        series = timeseries_columns(
            requests,
            iterations,
            window_s,
            scenario.cluster.replica_count,
            sums=None if streamed is None else streamed.sums,
            fleet=recorder.fleet,
        )
    except CbsimError as err:  # too many windows for how long the run lasted
        raise err.located(source=source) from None
    summary = summarize(
        requests,
        iterations,
        scenario,
        recorder.preemptions,
        itl=recorder.itl,
        warnings=warnings,
        totals=totals,
        fleet=recorder.fleet,
    )
    return RunTables(
        scenario=scenario,
        requests=requests,
        iterations=iterations,
        timeseries=series,
        summary=with_memory(with_stability(summary, requests, series, scenario), memory),
        run_info=info,
        iterations_path=recorder.iterations_path,
    )


def mean_request_tokens(requests: Table) -> float:
    """Prompt plus output tokens of the run's average request (0 without requests)."""
    if requests.empty:
        return 0.0
    return float(
        (np.asarray(requests["prompt_tokens"]) + np.asarray(requests["output_tokens"])).mean()
    )


def memory_report(simulation: Simulation, request_tokens: float) -> list[dict[str, Any]]:
    """Each pool's replica memory as its engine lays it out: the figures of
    :func:`cbsim.cost.engine_memory.memory_figures`, the engine's start-up line and where each GPU's
    memory goes."""
    report = []
    for pool in simulation.pools:
        plan = replica_memory_plan(pool)
        report.append(
            {
                "pool": pool.plan.name,
                "role": pool.plan.role,
                **memory_figures(plan, request_tokens),
                "engine_line": plan.startup_line(),
                "breakdown": plan.breakdown_line(),
            }
        )
    return report


def with_memory(summary: dict[str, Any], memory: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary with the memory figures of the pool that decodes (the only one, or a
    disaggregated cluster's decode pool)."""
    decoding = [m for m in memory if m["role"] != "prefill"] or memory
    if decoding:
        for key in ("kv_cache_tokens", "kv_cache_gib", "max_concurrency"):
            summary[key] = decoding[0][key]
    return summary


def run_info(simulation: Simulation, wall_s: float, simulated_s: float) -> dict[str, Any]:
    """How the run went: wall and simulated seconds, and whether decode runs were fast-forwarded
    (speculative ones by the compiled kernel, or stepped and why)."""
    info: dict[str, Any] = {"wall_s": wall_s, "simulated_s": simulated_s}
    info["fast_forward"] = simulation.fast_forward
    if simulation.fast_forward_note:
        info["fast_forward_note"] = simulation.fast_forward_note
    info["prefix_caching"] = simulation.prefix_caching
    if simulation.interpreted:
        info["kernels_note"] = (
            "numba's cache was cold (a fresh install): priced in Python (the same results) for "
            f"up to {INTERPRETED_CALLS:,} calls before compiling"
        )
    if (
        simulation.autoscaler is not None
    ):  # the scale events (cbsim.engine.autoscale), in time order
        info["weight_load_gbps"] = simulation.autoscaler.config.weight_load_gbps
        info["replica_ready_after_s"] = simulation.autoscaler.ready_after_s
        info["scale_events"] = sorted(simulation.fleet.events, key=lambda e: e["time_s"])
    if simulation.prefix_caching:
        caches = [r.scheduler.prefix for r in simulation.replicas]
        info["prefix_evicted_blocks"] = sum(c.evicted_blocks for c in caches if c is not None)
        if simulation.scenario.cluster.kv_offload is not None:
            info["prefix_cpu_evicted_blocks"] = sum(
                c.cpu_evicted_blocks for c in caches if c is not None
            )
    return info


def context_length(scenario: Scenario) -> int:
    """The longest prompt + output a request may have: ``cluster.max_model_len`` or the
    model's context."""
    from cbsim.catalog.models import get_model

    return (
        scenario.cluster.max_model_len or get_model(scenario.cluster.model).max_position_embeddings
    )


def admissible(prompts: np.ndarray, scenario: Scenario) -> np.ndarray:
    """The prompts a replica can take at all (shorter than the context): those beyond it are
    rejected, so no scheduler setting concerns them."""
    prompts = np.asarray(prompts)
    return prompts[prompts < context_length(scenario)]


def run_warnings(scenario: Scenario, simulation: Simulation, max_batch: int) -> list[str]:
    """What makes this run's figures doubtful: a GPU without kernel tables (priced from another
    GPU's fits), scheduler settings that cannot batch its prompts, batches (the largest:
    ``max_batch``) far beyond what the engine's overhead was fitted on, doubts about a replayed
    trace's times."""
    specs = simulation.specs
    warnings = [
        *transfer_warnings(pool.scenario for pool in simulation.pools),
        *simulation.workload_warnings,
        *scheduler_warnings(scenario.scheduler, admissible(simulation.prompt_lengths(), scenario)),
        *ignored_settings(scenario, specs is not None and specs.prefix_ids is not None),
        *slo_warnings(scenario),
        *deprecated_names(scenario),
    ]
    if simulation.source.stopped:  # a closed loop that served nothing for long
        warnings.append(simulation.source.stopped)
    outside = simulation.cost.engine.outside_fitted_range(max_batch)
    if outside:
        warnings.append(outside)
    warnings += pool_warnings(simulation.pools, simulation.prompt_lengths())  # link-bound layouts
    return warnings


def scenario_warnings(
    scenario: Scenario,
    source: str | None = None,
    workload: RequestSpecs | ClosedLoopWorkload | SessionWorkload | StagedWorkload | None = None,
) -> list[str]:
    """The warnings of a scenario before it runs: a GPU without kernel tables, doubts about a
    replayed trace's times and the scheduler's (closed loop: on its first requests).
    ``workload`` saves building it again."""
    if workload is None:
        workload = build_workload(scenario, source)
    trace_ids = isinstance(workload, RequestSpecs) and workload.prefix_ids is not None
    notes = [
        *transfer_warnings(plan.scenario for plan in pool_plans(scenario)),
        *ignored_settings(scenario, trace_ids),
        *slo_warnings(scenario),
        *deprecated_names(scenario),
    ]
    if isinstance(workload, SessionWorkload):
        prompts = admissible(workload.prompt_lengths(), scenario)
        return [*scheduler_warnings(scenario.scheduler, prompts), *notes]
    if isinstance(workload, ClosedLoopWorkload | StagedWorkload):
        if isinstance(workload, StagedWorkload):
            count = min(len(workload), 1024)
        else:
            count = workload.max_requests or max(1024, workload.concurrency)
        pairs = np.asarray([workload.lengths[i] for i in range(count)], dtype=np.int64)
        pairs = pairs.reshape(count, 2)
        prompts = admissible(pairs[:, 0], scenario)
        return [
            *scheduler_warnings(scenario.scheduler, prompts),
            *_too_long(pairs[:, 0] + pairs[:, 1], scenario, sample=True),
            *_beyond_kv_cache(pairs[:, 0] + pairs[:, 1], scenario, sample=True),
            *notes,
        ]
    return [
        *workload.warnings,
        *scheduler_warnings(scenario.scheduler, admissible(workload.prompt_tokens, scenario)),
        *_too_long(workload.prompt_tokens + workload.output_tokens, scenario),
        *_beyond_kv_cache(workload.prompt_tokens + workload.output_tokens, scenario),
        *notes,
    ]


def _too_long(lengths: np.ndarray, scenario: Scenario, *, sample: bool = False) -> list[str]:
    """A warning when some requests (prompt + output) exceed the context: the router will
    reject them."""
    context = context_length(scenario)
    over = int((np.asarray(lengths) > context).sum())
    if not over:
        return []
    share = f"{over:,} of the first {len(lengths):,}" if sample else f"{over:,} of {len(lengths):,}"
    where = "cluster.max_model_len" if scenario.cluster.max_model_len else "the model's context"
    return [
        f"{share} requests have prompt + output beyond the {context:,}-token context ({where}): "
        "they will be rejected"
    ]


def _beyond_kv_cache(lengths: np.ndarray, scenario: Scenario, *, sample: bool = False) -> list[str]:
    """A warning, before the run, when some requests (prompt + output, within the context) hold
    more KV than a replica's whole cache (the smallest pool's): the router will reject them, as
    the run's rejection warning then counts."""
    from cbsim.engine.fleet import scenario_memory_plans

    lengths = np.asarray(lengths)
    lengths = lengths[lengths <= context_length(scenario)]  # (those: _too_long)
    tokens = min(memory.tokens for _, memory in scenario_memory_plans(scenario))
    over = int((lengths > tokens).sum())
    if not over:
        return []
    total = len(lengths)
    share = f"{over:,} of the first {total:,}" if sample else f"{over:,} of {total:,}"
    return [
        f"{share} requests are larger than a replica's whole KV cache ({tokens:,} tokens): they "
        "will be rejected (add tensor parallelism or GPU memory, or shorten the prompts)"
    ]


def compare_no_spec(results: Results, *, source: str | None = None) -> dict[str, float]:
    """Speedup of a speculative run over the same scenario (same seed) with speculation off.

    Ratios > 1 favour speculation: ``speedup_tpot_mean`` and ``speedup_tpot_p50`` (no-spec TPOT /
    spec TPOT), ``speedup_e2e_mean``, ``speedup_output_tokens_per_s`` (spec / no-spec throughput);
    ``time_saved_s`` is the decode time speculation saved over all requests (Σ (finish − first
    token) without minus with), the seeds' "time saved" measured rather than assumed.
    The same figures are added to ``results.summary``, and the baseline's own summary is kept as
    ``results.no_spec_summary`` (written beside the result as ``summary_no_spec.json``). When
    ``results`` streamed its iterations, so does the baseline, to a temporary file beside them
    (only its requests and summary are read).
    """
    if not results.scenario.speculative.enabled:
        raise ValueError("the scenario does not speculate: nothing to compare")
    data = results.scenario.to_dict()
    data["speculative"] = {"enabled": False}  # (its settings would warn, unread)
    if results.iterations_path is None:
        baseline = simulate(load_scenario(data), source=source)
    else:
        # named as cbsim's temporaries are: a killed run's is deleted by the next write there
        parent, prefix = results.iterations_path.parent, temporary_prefix("no-spec")
        with tempfile.TemporaryDirectory(prefix=prefix, suffix=".tmp", dir=parent) as tmp:
            stream_to = Path(tmp) / "iterations.parquet"
            baseline = simulate(load_scenario(data), source=source, stream_to=stream_to)
    spec, base = results.summary, baseline.summary

    def ratio(numerator: float, denominator: float) -> float:
        return numerator / denominator if denominator else float("nan")

    def decode_seconds(r: Results) -> float:  # from the columns: no frame built, no pandas
        requests = r.columns("requests")
        done = equals(requests, "status", "finished")
        decoding = (
            np.asarray(requests["finish_s"])[done] - np.asarray(requests["first_token_s"])[done]
        )
        return float(decoding.sum())

    figures = {
        "speedup_tpot_mean": ratio(base["tpot_mean_s"], spec["tpot_mean_s"]),
        "speedup_tpot_p50": ratio(base["tpot_p50_s"], spec["tpot_p50_s"]),
        "speedup_e2e_mean": ratio(base["e2e_mean_s"], spec["e2e_mean_s"]),
        "speedup_output_tokens_per_s": ratio(
            spec["output_tokens_per_s"], base["output_tokens_per_s"]
        ),
        "time_saved_s": decode_seconds(baseline) - decode_seconds(results),
    }
    results.summary.update(figures)
    results.no_spec_summary = dict(base)
    return figures
