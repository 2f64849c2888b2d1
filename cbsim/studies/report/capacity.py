"""The report of a capacity plan: the JSON object of :func:`cbsim.studies.capacity.plan`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cbsim.common.errors import CbsimError
from cbsim.common.numbers import figure, finite
from cbsim.outputs.metric_names import metric_name, slo_text
from cbsim.run import plots
from cbsim.studies.capacity.headline import capacity_headline
from cbsim.studies.capacity.headroom import headroom_facts
from cbsim.studies.report.document import Block, Facts, Paragraph, Report, Section, Table, _slug
from cbsim.studies.report.formatting import (
    _figure_image,
    _money,
    _plain_log_ticks,
    _slo_in_view,
    _slo_note,
)
from cbsim.studies.report.sources import _is_capacity

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _alternatives(plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The plan's alternatives (the plan itself when nothing was varied)."""
    alternatives = plan.get("alternatives")
    if isinstance(alternatives, list):
        return [a for a in alternatives if isinstance(a, dict)]
    return [dict(plan)]


def _alt_label(alt: Mapping[str, Any], keys: Sequence[str]) -> str:
    """``gpu=h200, tp=4``: the alternative's varied values with short keys (or the scenario)."""
    if keys:
        return plots.point_label(alt.get("overrides") or {}, keys)
    return str(alt.get("scenario") or "scenario")


@dataclass
class _OperatingPoint:
    """Where an alternative's cost was computed: its metrics there, which point it is, the load
    offered there and the GPUs serving it."""

    metrics: dict[str, Any] = field(default_factory=dict)
    basis: str = ""
    rate_rps: float | None = None
    gpus: float | None = None


def _replica_gpus(alt: Mapping[str, Any]) -> float | None:
    """GPUs one replica of an alternative takes (tp x dp x pp; plans written before data and
    pipeline parallelism record only tp)."""
    gpus = finite(alt.get("gpus_per_replica"))
    return gpus if gpus is not None else finite(alt.get("tp"))


def _achieved(alt: Mapping[str, Any]) -> _OperatingPoint:
    """The operating point the alternative's cost was computed for: the verified fleet at the
    target load, else one replica at its maximum rate (empty when there is none)."""
    tp = _replica_gpus(alt)
    fleet = alt.get("fleet")
    if isinstance(fleet, list):
        for run in reversed(fleet):
            if (
                isinstance(run, dict)
                and run.get("passed")
                and run.get("replicas") == alt.get("replicas")
            ):
                replicas = finite(run.get("replicas"))
                return _OperatingPoint(
                    dict(run.get("metrics") or {}),
                    "fleet at the target load",
                    finite(run.get("rate_rps")),
                    replicas * tp if replicas is not None and tp is not None else None,
                )
    max_rate = alt.get("max_rate_rps")
    for ev in alt.get("evaluations") or []:
        if isinstance(ev, dict) and ev.get("passed") and ev.get("rate_rps") == max_rate:
            return _OperatingPoint(
                dict(ev.get("metrics") or {}),
                "one replica at its maximum rate",
                finite(max_rate),
                tp,
            )
    return _OperatingPoint()


def _token_rates(
    rate_rps: float | None, metrics: Mapping[str, Any], gpus: float | None
) -> tuple[float | None, float | None]:
    """(output tokens/s per GPU, output tokens/s per user) at a load: the output tokens/s the
    run served over the GPUs serving it (plans written before it was recorded: the offered rate
    times the output tokens per request), and 1 / mean TPOT (None where a figure is missing, as
    in plans written before ``tpot_mean_s`` was recorded)."""
    served = finite(metrics.get("output_tokens_per_s"))
    tokens = finite(metrics.get("output_tokens_per_request"))
    if served is not None and gpus:
        per_gpu: float | None = served / gpus
    elif rate_rps is not None and tokens is not None and gpus:
        per_gpu = rate_rps * tokens / gpus
    else:
        per_gpu = None
    tpot = finite(metrics.get("tpot_mean_s"))
    return per_gpu, (1.0 / tpot if tpot else None)


def _status(alt: Mapping[str, Any]) -> str:
    if alt.get("error"):
        return "invalid"
    if not alt.get("feasible"):
        return "fails SLO"
    return "ok"


def _slo_text(slo: Mapping[str, Any], directions: Mapping[str, Any]) -> str:
    return slo_text(slo, directions)


def _is_latency(metric: str) -> bool:
    return metric.endswith("_s") and not metric.endswith("_per_s")


def _metric_header(metric: str, what: str = "") -> str:
    """``TTFT p99 achieved (ms)``: a metric's name, ``what`` of it, the unit of its cells."""
    name = f"{metric_name(metric)}{what}"
    return f"{name} (ms)" if _is_latency(metric) else name


def _metric_cell(metric: str, value: Any) -> str:
    """A metric's value in the unit of its header: a latency in ms."""
    number = finite(value)
    if number is None:
        return "—"
    return figure(number * 1e3) if _is_latency(metric) else figure(number)


def _number(value: Any) -> str:
    """A cell in the one number format of the capacity output (:func:`cbsim.common.numbers.figure`);
    text as it is."""
    if isinstance(value, str):
        return value
    return figure(value)


def capacity_report(
    plan: Mapping[str, Any], *, title: str | None = None, source: str = "(in memory)"
) -> Report:
    """The report of a :func:`cbsim.studies.capacity.plan` result (its JSON object)."""
    if not _is_capacity(plan) or "layouts" in plan:
        raise CbsimError("not a capacity plan (the JSON of cbsim capacity --json)", source=source)
    slo: dict[str, Any] = dict(plan.get("slo") or {})
    directions: dict[str, Any] = dict(plan.get("slo_directions") or {})
    varied = isinstance(plan.get("alternatives"), list)
    keys = list(plan.get("vary") or {}) if varied else []
    alternatives = _alternatives(plan)
    best_index = plan.get("best_index") if varied else (0 if plan.get("feasible") else None)
    target = plan.get("target_rps")
    scenario_name = next((a.get("scenario") for a in alternatives if a.get("scenario")), None)
    report = Report(
        title=title or f"cbsim capacity plan: {scenario_name or 'scenario'}",
        kind="capacity",
        source=source,
    )

    # recommendation
    best = alternatives[best_index] if isinstance(best_index, int) else None
    if best is not None and plan.get("max_rate_rps") is not None:
        load = (
            f"{figure(target)} req/s on {figure(plan.get('replicas'))} replicas"
            if target is not None
            else f"up to {figure(plan.get('max_rate_rps'))} req/s per replica"
        )
        items = [
            ("headline", str(plan.get("headline") or capacity_headline(plan) or "—")),
            ("verdict", f"every SLO target met ({_slo_text(slo, directions)}) at {load}"),
            (
                "recommendation",
                plots.point_label(best.get("overrides") or {}, keys)
                if varied
                else str(scenario_name),
            ),
            (
                "hardware",
                f"{best.get('model')} on {best.get('gpu')}, tp={_number(best.get('tp'))}",
            ),
            ("knee per replica", f"{_number(plan.get('max_rate_rps'))} req/s"),
        ]
        if target is not None:
            items += [
                ("target load", f"{_number(target)} req/s"),
                ("replicas", _number(plan.get("replicas"))),
                ("GPUs", _number(plan.get("gpus"))),
                ("cost per hour", _money(plan.get("cost_per_hour"), ",.2f")),
            ]
        else:
            items.append(("cost per hour (one replica)", _money(plan.get("replica_cost_per_hour"))))
        items += [
            (
                "cost per million output tokens",
                _money(plan.get("cost_per_million_output_tokens"), ".4f"),
            ),
            ("cost basis", str(plan.get("cost_basis") or "—")),
            ("SLO", _slo_text(slo, directions)),
        ]
        items += headroom_facts(plan)
        if plan.get("reason"):
            items.append(("note", str(plan["reason"])))
        recommendation: Facts = Facts(items, tone="good")
    else:
        recommendation = Facts(
            [
                ("verdict", "SLO not met by any alternative searched"),
                ("recommendation", "none: the SLO cannot be met"),
                ("why", str(plan.get("reason") or "—")),
                ("SLO", _slo_text(slo, directions)),
            ],
            tone="bad",
        )
    report.sections.append(Section("Recommendation", [recommendation]))

    seeds = ", ".join(str(s) for s in plan.get("seeds") or []) or "—"
    report.sections.append(
        Section(
            "Search",
            [
                Facts(
                    [
                        ("SLO", _slo_text(slo, directions)),
                        ("seeds", seeds),
                        ("window", f"{_number(plan.get('window_s'))} s of arrivals per rate"),
                        ("tolerance", _number(plan.get("tolerance"))),
                        ("simulations", _number(plan.get("simulations"))),
                        *([("varied", ", ".join(keys))] if keys else []),
                    ]
                )
            ],
        )
    )

    # alternatives table
    metric_names = list(slo)
    show_gpu = "cluster.gpu" not in keys
    show_tp = "cluster.tp" not in keys
    short = plots.short_keys(keys)
    columns = [
        *([short[k] for k in keys] or ["scenario"]),
        *(["GPU"] if show_gpu else []),
        *(["tp"] if show_tp else []),
        "knee req/s per replica",
    ]
    if target is not None:
        columns += ["replicas", "GPUs", "$/hour"]
    else:
        columns += ["$/hour per replica"]
    columns += [
        "$/M output tokens",
        *(_metric_header(m, " achieved") for m in metric_names),
        "output tok/s per GPU",
        "output tok/s per user",
        "sims",
        "status",
    ]
    rows: list[list[str]] = []
    achieved: list[dict[str, Any]] = []
    bases: set[str] = set()
    notes: list[str] = []
    for i, alt in enumerate(alternatives):
        point = _achieved(alt)
        metrics = point.metrics
        if point.basis:
            bases.add(point.basis)
        achieved.append(metrics)
        per_gpu, per_user = _token_rates(point.rate_rps, metrics, point.gpus)
        status = "best" if i == best_index else _status(alt)
        row = [
            *(
                [_number((alt.get("overrides") or {}).get(k)) for k in keys]
                or [str(alt.get("scenario") or "scenario")]
            ),
            *([_number(alt.get("gpu"))] if show_gpu else []),
            *([_number(alt.get("tp"))] if show_tp else []),
            _number(alt.get("max_rate_rps")),
        ]
        if target is not None:
            row += [
                _number(alt.get("replicas")),
                _number(alt.get("gpus")),
                _money(alt.get("cost_per_hour"), ",.2f"),
            ]
        else:
            row.append(_money(alt.get("replica_cost_per_hour"), ",.2f"))
        row += [
            _money(alt.get("cost_per_million_output_tokens"), ",.4f"),
            *(_metric_cell(m, metrics.get(m)) for m in metric_names),
            _number(per_gpu),
            _number(per_user),
            _number(alt.get("simulations")),
            status,
        ]
        rows.append(row)
        if alt.get("reason"):
            notes.append(f"{_alt_label(alt, keys)}: {alt['reason']}")
    caption = "Achieved SLO metrics are those at the operating point the cost is computed for"
    caption += f" ({'; '.join(sorted(bases))})" if bases else ""
    caption += (
        "; there, output tokens/s per GPU = offered rate × output tokens per request ÷ GPUs, and "
        "output tokens/s per user = 1 / mean TPOT."
    )
    blocks: list[Block] = [
        Table(
            columns,
            rows,
            caption=caption,
            highlight={best_index} if isinstance(best_index, int) else set(),
        )
    ]
    blocks += [Paragraph(note, note=True) for note in notes]
    report.sections.append(Section("Alternatives" if varied else "Result", blocks))

    # cost vs SLO frontier, one figure per "at most" SLO metric
    labels = [_alt_label(alt, keys) for alt in alternatives]
    frontier_blocks: list[Block] = []
    for metric in metric_names:
        if directions.get(metric, "≤") != "≤":
            continue
        frame = pd.DataFrame(
            {
                "alternative": labels,
                "cost_per_million_output_tokens": [
                    finite(a.get("cost_per_million_output_tokens")) for a in alternatives
                ],
                metric: [finite(m.get(metric)) for m in achieved],
            },
            dtype=object,
        )
        frame["cost_per_million_output_tokens"] = pd.to_numeric(
            frame["cost_per_million_output_tokens"]
        )
        frame[metric] = pd.to_numeric(frame[metric])
        threshold = finite(slo.get(metric))
        drawn = _slo_in_view(threshold, frame[metric])
        fig = plots.cost_vs_slo_frontier(
            frame,
            cost="cost_per_million_output_tokens",
            slo_metric=metric,
            label="alternative",
            slo=threshold if drawn else None,
            title=f"Cost vs {plots.label_for(metric).split(' (')[0]}: Pareto frontier",
        )
        frontier_blocks.append(
            _figure_image(
                fig,
                f"frontier-{_slug(metric)}",
                f"Cost per million output tokens against achieved {metric_name(metric)}",
                f"Each alternative's cost per million output tokens against the "
                f"{metric_name(metric)} it achieves at its cost basis; lower-left is better"
                + _slo_note(f"{metric_name(metric)} ≤", threshold, drawn)
                + ".",
            )
        )
    if not frontier_blocks:
        frontier_blocks.append(
            Paragraph(
                "No latency-like SLO metric (one that must stay below a threshold).", note=True
            )
        )
    report.sections.append(Section("Cost vs SLO frontier", frontier_blocks))

    # latency vs offered load from the search's evaluations
    eval_rows: list[dict[str, Any]] = []
    for alt, label in zip(alternatives, labels, strict=True):
        for ev in alt.get("evaluations") or []:
            if not isinstance(ev, dict):
                continue
            metrics = ev.get("metrics") or {}
            eval_rows.append(
                {
                    "alternative": label,
                    "offered_rate_rps": finite(ev.get("rate_rps")),
                    "passed": bool(ev.get("passed")),
                    **{m: finite(metrics.get(m)) for m in metric_names},
                }
            )
    load_blocks: list[Block] = []
    if eval_rows:
        evals = pd.DataFrame(eval_rows)
        for metric in metric_names:
            evals[metric] = pd.to_numeric(evals[metric], errors="coerce")
        evals["offered_rate_rps"] = pd.to_numeric(evals["offered_rate_rps"], errors="coerce")
        evals = evals[np.isfinite(evals["offered_rate_rps"].to_numpy(dtype=float))]
        for metric in metric_names:
            load_blocks.append(
                _figure_image(
                    _load_figure(evals, metric, slo, directions, len(alternatives) > 1),
                    f"load-{_slug(metric)}",
                    f"{metric_name(metric)} against offered load per replica",
                    f"{metric_name(metric)} at every rate the search simulated (one replica; "
                    "worst over seeds); crosses mark rates that failed a check"
                    + _slo_note(
                        f"{metric_name(metric)} {directions.get(metric, '≤')}",
                        finite(slo.get(metric)),
                        _slo_in_view(finite(slo.get(metric)), evals[metric]),
                    )
                    + ".",
                )
            )
    else:
        load_blocks.append(Paragraph("The plan holds no evaluations.", note=True))
    report.sections.append(Section("Latency vs load", load_blocks))
    report.sections.append(
        Section("Tokens per GPU vs tokens per user", _token_rate_blocks(alternatives, labels))
    )

    # fleet verification
    fleet_rows: list[list[str]] = []
    for alt, label in zip(alternatives, labels, strict=True):
        for run in alt.get("fleet") or []:
            if not isinstance(run, dict):
                continue
            metrics = run.get("metrics") or {}
            fleet_rows.append(
                [
                    label,
                    _number(run.get("replicas")),
                    _number(run.get("rate_rps")),
                    *(_metric_cell(m, metrics.get(m)) for m in metric_names),
                    "pass" if run.get("passed") else "fail",
                    str(run.get("reason") or ""),
                ]
            )
    if fleet_rows:
        report.sections.append(
            Section(
                "Fleet verification",
                [
                    Table(
                        [
                            "alternative",
                            "replicas",
                            "req/s",
                            *(_metric_header(m) for m in metric_names),
                            "result",
                            "reason",
                        ],
                        fleet_rows,
                        caption="The fleet simulated at the target load (each replica at most "
                        "its headroom × its knee at first), grown one replica at a time until it "
                        "passes on every seed.",
                    )
                ],
            )
        )
    return report


def _token_rate_blocks(
    alternatives: Sequence[Mapping[str, Any]], labels: Sequence[str]
) -> list[Block]:
    """Output tokens/s per GPU against per user at every load the search simulated (one replica
    of each layout, so its GPUs are its tp x dp x pp), one line per alternative."""
    rows: list[dict[str, Any]] = []
    for alt, label in zip(alternatives, labels, strict=True):
        gpus = _replica_gpus(alt)
        for ev in alt.get("evaluations") or []:
            if not isinstance(ev, dict):
                continue
            rate = finite(ev.get("rate_rps"))
            per_gpu, per_user = _token_rates(rate, ev.get("metrics") or {}, gpus)
            if per_gpu is not None and per_user is not None:
                rows.append(
                    {
                        "alternative": label,
                        "offered_rate_rps": rate,
                        "passed": bool(ev.get("passed")),
                        "output_tokens_per_s_per_gpu": per_gpu,
                        "output_tokens_per_s_per_user": per_user,
                    }
                )
    if not rows:
        return [
            Paragraph(
                "The plan's evaluations do not record the mean TPOT (a plan written by an older "
                "cbsim), so there is no tokens-per-user figure.",
                note=True,
            )
        ]
    fig = plots.tokens_per_gpu_vs_per_user(
        pd.DataFrame(rows), order="offered_rate_rps", passed="passed"
    )
    return [
        _figure_image(
            fig,
            "tokens-per-gpu-vs-per-user",
            "Output tokens per second per GPU against output tokens per second per user",
            "Every rate the search simulated, one replica per layout: output tokens/s per GPU "
            "(offered rate × output tokens per request ÷ tp) against output tokens/s per user "
            "(1 / mean TPOT); hollow points failed a check. Up and to the right is better: more "
            "work per GPU bought, faster streams for each user.",
        )
    ]


def _load_figure(
    evals: pd.DataFrame,
    metric: str,
    slo: Mapping[str, Any],
    directions: Mapping[str, Any],
    several: bool,
) -> Figure:
    threshold = finite(slo.get(metric))
    if not _slo_in_view(threshold, evals[metric]):
        threshold = None
    values = evals[metric].to_numpy(dtype=float)
    positive = values[np.isfinite(values) & (values > 0)]
    at_most = directions.get(metric, "≤") == "≤"
    log_y = bool(at_most and len(positive) and positive.max() > 20 * positive.min())
    fig = plots.latency_vs_load(
        evals,
        x="offered_rate_rps",
        y=metric,
        hue="alternative" if several else None,
        hue_is_label=True,
        slo=threshold,
        log_y=log_y,
        title=f"{plots.label_for(metric).split(' (')[0]} vs offered load (per replica)",
    )
    axis = fig.axes[0]
    failed = evals[~evals["passed"].astype(bool)]
    failed = failed[np.isfinite(failed[metric].to_numpy(dtype=float))]
    if len(failed):
        axis.scatter(
            failed["offered_rate_rps"].to_numpy(dtype=float),
            failed[metric].to_numpy(dtype=float),
            marker="x",
            s=60,
            color="black",
            zorder=4,
            label="failed a check",
        )
    rates = evals["offered_rate_rps"].to_numpy(dtype=float)
    rates = rates[rates > 0]
    if len(rates) and rates.max() > 8 * rates.min():
        axis.set_xscale("log")
    axis.legend(fontsize=8)
    _plain_log_ticks(fig)
    return fig
