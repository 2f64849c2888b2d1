"""The report of one run: a result directory :meth:`cbsim.run.results.Results.write` wrote, or
:class:`~cbsim.run.results.Results` in memory.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from cbsim.common.errors import CbsimError
from cbsim.engine.recorder import prefix_hit_rates
from cbsim.run import plots
from cbsim.run.results import Results
from cbsim.studies.report.autoscale_section import autoscale_section, fleet_fact
from cbsim.studies.report.document import Code, Facts, Report, Section, Table
from cbsim.studies.report.formatting import _figure_image, _get, _with_unit, format_value
from cbsim.studies.report.pools_section import cluster_fact, ms, pools_section
from cbsim.studies.report.sources import _read_json
from cbsim.studies.report.speculation_section import compare_no_spec_section, read_no_spec_summary
from cbsim.studies.report.verdict import verdict_section


@dataclass
class _RunData:
    """What a run report needs, read without requiring the scenario to still validate."""

    summary: dict[str, Any]
    scenario: dict[str, Any]
    scenario_text: str
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    run_info: dict[str, Any]
    results: Results | None  # when the scenario still loads (exact timeseries window, SLO)
    no_spec: dict[str, Any] | None = None  # the --compare-no-spec baseline's summary


def _read_run(path: Path) -> _RunData:
    summary_data = _read_json(path / "summary.json")
    if not isinstance(summary_data, dict):
        raise CbsimError("summary.json does not hold a JSON object", source=str(path))
    summary = {k: (math.nan if v is None else v) for k, v in summary_data.items()}
    scenario_path = path / "scenario.yaml"
    scenario_text = ""
    scenario: dict[str, Any] = {}
    if scenario_path.is_file():
        scenario_text = scenario_path.read_text(encoding="utf-8")
        with contextlib.suppress(yaml.YAMLError):
            loaded = yaml.safe_load(scenario_text)
            if isinstance(loaded, dict):
                scenario = loaded
    frames: dict[str, pd.DataFrame] = {}
    for name in ("requests", "timeseries"):
        file = path / f"{name}.parquet"
        try:
            frames[name] = pd.read_parquet(file)
        except (OSError, ValueError) as err:
            raise CbsimError(f"cannot read {file.name}: {err}", source=str(path)) from None
    run_info_data = _read_json(path / "run_info.json") if (path / "run_info.json").is_file() else {}
    results: Results | None = None
    if scenario_path.is_file():
        from cbsim.run.loading import load_scenario

        # the scenario may no longer validate here (a trace moved): plot from the frames then;
        # the iterations (the largest table, unused by the figures) are not read
        with contextlib.suppress(CbsimError, OSError, ValueError):
            results = Results(
                scenario=load_scenario(scenario_path, written=True),
                requests=frames["requests"],
                iterations=pd.DataFrame(),
                timeseries=frames["timeseries"],
                summary=summary,
            )
    return _RunData(
        summary=summary,
        scenario=scenario,
        scenario_text=scenario_text,
        requests=frames["requests"],
        timeseries=frames["timeseries"],
        run_info=run_info_data if isinstance(run_info_data, dict) else {},
        results=results,
        no_spec=read_no_spec_summary(path),
    )


def _run_report_from_dir(path: Path, title: str | None) -> Report:
    data = _read_run(path)
    return _run_report(data, title=title, source=str(path))


def run_report(
    results: Results, *, title: str | None = None, source: str = "(in memory)"
) -> Report:
    """The report of a :class:`Results` in memory (what ``cbsim report RUN_DIR`` shows)."""
    summary = dict(results.summary)
    scenario = results.scenario.to_dict()
    data = _RunData(
        summary=summary,
        scenario=scenario,
        scenario_text=yaml.safe_dump(scenario, sort_keys=False),
        requests=results.requests,
        timeseries=results.timeseries,
        run_info=dict(results.run_info),
        results=results,
        no_spec=results.no_spec_summary,
    )
    return _run_report(data, title=title, source=source)


def _scenario_facts(
    scenario: Mapping[str, Any], summary: Mapping[str, Any] | None = None
) -> list[tuple[str, str]]:
    facts: list[tuple[str, str]] = []
    cluster = scenario.get("cluster") or {}
    pooled = cluster_fact(cluster) if cluster else None
    if pooled:
        facts.append(("cluster", pooled))
    elif cluster:
        replicas = cluster.get("replicas", 1)
        # an autoscaled fleet: the replicas it served with, not the max_replicas it was built with
        fleet = fleet_fact(summary or {}, scenario)
        count = fleet or f"{replicas} replica{'s' if replicas != 1 else ''}"
        facts.append(
            (
                "cluster",
                f"{cluster.get('model')} on {cluster.get('gpu')}, tp={cluster.get('tp', 1)}, "
                f"{cluster.get('dtype', 'bf16')}, {count}"
                + (f", router {cluster.get('router')}" if replicas != 1 else ""),
            )
        )
    scheduler = scenario.get("scheduler") or {}
    if scheduler:
        facts.append(("scheduler", str(scheduler.get("kind"))))
    workload = scenario.get("workload") or {}
    if workload:
        parts: list[str] = []
        if workload.get("num_requests") is not None:
            parts.append(f"{workload['num_requests']} requests")
        if workload.get("duration_s") is not None:
            parts.append(f"{format_value(workload['duration_s'])} s of arrivals")
        trace = workload.get("trace")
        arrival = workload.get("arrival")
        if isinstance(trace, Mapping):
            parts.append(f"trace {trace.get('path')}")
        elif isinstance(arrival, Mapping):
            rate = arrival.get("rate")
            parts.append(
                f"{arrival.get('kind')} arrivals"
                + (f" at {format_value(rate)} req/s" if rate is not None else "")
            )
        facts.append(("workload", ", ".join(parts) or "—"))
    spec = scenario.get("speculative") or {}
    if spec.get("enabled"):
        facts.append(
            (
                "speculation",
                f"proposer {_get(spec, 'proposer.kind')}, k policy {_get(spec, 'policy.kind')}, "
                f"acceptance {_get(spec, 'acceptance.kind')}",
            )
        )
    elif scenario:
        facts.append(("speculation", "off"))
    slo = scenario.get("slo") or {}
    targets = [
        f"{name} ≤ {format_value(slo[f'{name}_s'])} s"
        for name in ("ttft", "tpot", "e2e")
        if slo.get(f"{name}_s") is not None
    ]
    if targets:
        facts.append(("SLO (per request)", ", ".join(targets)))
    return facts


def _run_report(data: _RunData, *, title: str | None, source: str) -> Report:
    s = data.summary
    name = str(s.get("name") or data.scenario.get("name") or "run")
    seed = s.get("seed", data.scenario.get("seed"))
    report = Report(title=title or f"cbsim run: {name}", kind="run", source=source)

    overview = _scenario_facts(data.scenario, s)
    overview.insert(0, ("scenario", f"{name} (seed {format_value(seed)})"))
    if data.run_info:
        overview.append(
            (
                "run",
                f"{_with_unit(data.run_info.get('simulated_s'), 's')} simulated in "
                f"{_with_unit(data.run_info.get('wall_s'), 's')} of wall time",
            )
        )
    # the verdict first: what a reader looks for, on the first screen
    report.sections.append(verdict_section(s, data.scenario))
    report.sections.append(Section("Overview", [Facts(overview)]))

    speculated = bool(
        "drafted_tokens" in data.requests.columns
        and float(pd.to_numeric(data.requests["drafted_tokens"]).sum()) > 0
    )
    headline: list[tuple[str, str, str]] = [
        ("requests", format_value(s.get("requests")), ""),
        ("completed", format_value(s.get("completed")), ""),
        ("rejected", format_value(s.get("rejected")), ""),
        ("unfinished", format_value(s.get("unfinished")), ""),
        ("throughput", format_value(s.get("throughput_rps")), "req/s"),
        ("output throughput", format_value(s.get("output_tokens_per_s")), "tokens/s"),
        ("goodput (requests meeting the SLO)", format_value(s.get("goodput_rps")), "req/s"),
        ("SLO attainment", format_value(s.get("slo_attainment")), "fraction"),
        ("preemptions", format_value(s.get("preemptions")), ""),
        ("mean batch size", format_value(s.get("mean_batch_size")), "requests"),
        ("busy fraction", format_value(s.get("busy_fraction")), "fraction"),
        ("makespan", format_value(s.get("makespan_s")), "s"),
    ]
    if s.get("timed_out"):  # the client gave them up (workload.client.timeout_s)
        headline.insert(4, ("timed out", format_value(s.get("timed_out")), ""))
    cached = bool(
        "cached_tokens" in data.requests.columns
        and float(pd.to_numeric(data.requests["cached_tokens"]).sum()) > 0
    )
    if cached or data.run_info.get("prefix_caching"):
        headline.append(
            ("prefix cache hit rate (reused / prompt tokens)", format_value(
                s.get("prefix_hit_rate")), "fraction")
        )  # fmt: skip
        if s.get("prefix_hit_rate_cpu"):
            headline.append(
                ("of which loaded from the CPU tier", format_value(s.get("prefix_hit_rate_cpu")),
                 "fraction")
            )  # fmt: skip
    if speculated:
        headline += [
            (
                "draft acceptance rate (accepted / drafted)",
                format_value(s.get("acceptance_rate")),
                "",
            ),
            ("conditional acceptance α", format_value(s.get("conditional_acceptance")), ""),
            ("tokens per verify step", format_value(s.get("mean_acceptance_length")), "tokens"),
            ("mean draft length k", format_value(s.get("mean_k")), "tokens"),
            ("share of steps speculating", format_value(s.get("spec_step_fraction")), "fraction"),
        ]
    latency_rows = []
    # with speculation ITL per chunk (vLLM's ITL) first: per token, accepted drafts read 0
    itl: tuple[tuple[str, str], ...] = (
        (("itl_chunk", "ITL per chunk (vLLM's ITL)"), ("itl", "ITL per token"))
        if speculated and "itl_chunk_p50_s" in s
        else (("itl", "ITL"),)
    )
    for metric, label in (
        ("ttft", "TTFT"),
        ("tpot", "TPOT"),
        ("e2e", "E2E latency"),
        ("queue", "queueing delay"),
        *itl,
    ):
        cells = [s.get(f"{metric}_{q}_s") for q in ("p50", "p90", "p99", "mean")]
        if any(c is not None for c in cells):
            latency_rows.append([label, *(ms(c) for c in cells)])
    report.sections.append(
        Section(
            "Summary",
            [
                Table(["metric", "value", "unit"], [list(row) for row in headline]),
                Table(
                    ["latency (ms)", "p50", "p90", "p99", "mean"],
                    latency_rows,
                    caption="Latency of finished requests, in milliseconds.",
                ),
            ],
        )
    )
    report.sections += [
        section
        for section in (
            pools_section(data.scenario.get("cluster") or {}, data.requests),
            autoscale_section(s, data.scenario, data.timeseries, data.run_info),
        )
        if section is not None
    ]

    source_run: Results | pd.DataFrame
    source_run = data.results if data.results is not None else data.timeseries
    report.sections.append(
        Section(
            "Throughput and queue",
            [
                _figure_image(
                    plots.throughput_and_queue(source_run),
                    "throughput-and-queue",
                    "Output tokens per second and waiting requests over time",
                    "Output throughput (left axis) and time-averaged waiting requests (right axis) "
                    "per timeseries window.",
                )
            ],
        )
    )
    slo = data.scenario.get("slo") or {}
    cdf_source: Results | pd.DataFrame
    cdf_source = data.results if data.results is not None else data.requests
    cdf_slo = (
        None if data.results is not None else {k: slo.get(k) for k in ("ttft_s", "tpot_s", "e2e_s")}
    )
    report.sections.append(
        Section(
            "Latency",
            [
                _figure_image(
                    plots.latency_cdfs(cdf_source, slo=cdf_slo),
                    "latency-cdfs",
                    "Empirical CDFs of TTFT, TPOT and end-to-end latency",
                    "Empirical CDFs of finished requests; dashed lines are the per-request SLO "
                    "targets.",
                )
            ],
        )
    )
    k_words = (" and draft length", " and mean draft length") if speculated else ("", "")
    report.sections.append(
        Section(
            f"Batch, KV cache{k_words[0]}",
            [
                _figure_image(
                    plots.batch_kv_k_over_time(source_run),
                    "batch-kv-k",
                    f"Batch size, KV cache utilisation{k_words[1]} over time",
                )
            ],
        )
    )
    if cached:
        rates = prefix_hit_rates(data.requests)
        report.sections.append(
            Section(
                "Prefix cache",
                [
                    _figure_image(
                        plots.prefix_hit_rate_over_time(source_run),
                        "prefix-hit-rate",
                        "Prefix cache hit rate over time",
                        "Prompt tokens reused from the prefix cache over the prompt tokens of the "
                        "requests first admitted in each window.",
                    ),
                    Table(
                        ["replica", "hit rate"],
                        [[str(r), format_value(v)] for r, v in rates.items()],
                        caption="Hit rate per replica (reused / prompt tokens of its requests).",
                    ),
                ],
            )
        )
    if speculated:
        report.sections.append(
            Section(
                "Speculative decoding",
                [
                    _figure_image(
                        plots.acceptance_per_request(
                            data.results if data.results is not None else data.requests
                        ),
                        "acceptance",
                        "Per-request draft acceptance rate",
                        "Acceptance rate per request (accepted / drafted): histogram and against "
                        "output length; the dashed line is the run's overall rate.",
                    )
                ],
            )
        )
    compared = compare_no_spec_section(s, data.no_spec)
    if compared is not None:
        report.sections.append(compared)
    if data.scenario_text:
        report.sections.append(Section("Scenario", [Code(data.scenario_text.rstrip(), "yaml")]))
    report.sections.append(
        Section(
            "All summary fields",
            [Table(["field", "value"], [[k, format_value(v)] for k, v in s.items()])],
        )
    )
    return report
