"""The report of a deployment plan: the folder (or ``plan.json``) ``cbsim plan --out`` writes.

It opens with the line to buy on and the winner (its knee, its planned load or its fleet for
the target, its cost, its verification and the command that starts it), then what was searched,
the layouts that meet the SLO (best first, latencies in ms), the Pareto front of output tokens/s
per GPU against tokens/s per user (the plot ``cbsim plan`` draws), the layouts that fail or were
pruned or not searched, with why, and every verification tried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cbsim.common.errors import CbsimError
from cbsim.common.numbers import figure
from cbsim.outputs.metric_names import metric_name, metric_value, slo_text
from cbsim.studies.report.document import (
    Block,
    Code,
    Facts,
    Image,
    Paragraph,
    Report,
    Section,
    Table,
)

__all__ = ["deployment_report", "is_deployment_plan"]

_KEYS = frozenset({"layouts", "space", "settings", "pareto", "best", "points"})
OTHERS_SHOWN = 40
"""Layouts that do not meet the SLO listed by name in the report; the rest are counted."""


def is_deployment_plan(data: Any) -> bool:
    """Whether ``data`` is the JSON of :func:`cbsim.studies.plan.plan_deployment` (``plan.json``)."""
    return isinstance(data, Mapping) and set(data) >= _KEYS and isinstance(data["layouts"], list)


def _money(value: Any, decimals: int = 2) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"${value:,.{decimals}f}"
    return "—"


def _batching(layout: Mapping[str, Any]) -> str:
    seqs, tokens = layout.get("max_num_seqs"), layout.get("max_num_batched_tokens")
    if seqs is None and tokens is None:
        return "default"
    return (
        f"{seqs if seqs is not None else 'default'}/{tokens if tokens is not None else 'default'}"
    )


def _slo_values(slo: Sequence[str], metrics: Mapping[str, Any]) -> str:
    return ", ".join(f"{metric_name(m)} {metric_value(m, metrics.get(m))}" for m in slo)


def _winner_items(plan: Mapping[str, Any], best: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The winner's facts: layout, knee, planned load or fleet, cost, verification."""
    settings = plan.get("settings") or {}
    slo = list(plan.get("slo") or {})
    point = best.get("operating_point") or {}
    unit = "unit" if best.get("mode") == "disaggregated" else "replica"
    knee = (
        f"{figure(best.get('max_rate_rps'))} req/s per {unit} over "
        f"{figure(settings.get('window_s'))} s of arrivals"
    )
    if plan.get("confirmations"):
        knee += (
            f" (screened at {figure(best.get('screened_max_rate_rps'))} over "
            f"{figure(settings.get('screen_window_s'))} s)"
        )
    items = [
        ("layout", f"{best.get('name')} (batch {_batching(best)})"),
        ("knee", knee),
        (
            "at the knee",
            f"{figure(point.get('tokens_per_s_per_gpu'))} output tok/s per GPU, "
            f"{figure(point.get('tokens_per_s_per_user'))} tok/s per user",
        ),
    ]
    fleet = best.get("fleet")
    if fleet is not None:
        seeds = ",".join(str(s) for s in fleet.get("seeds") or [])
        items += [
            ("target load", f"{figure(fleet.get('target_rps'))} req/s"),
            (
                "fleet",
                f"{fleet.get('replicas')} × {best.get('name')}, {figure(fleet.get('gpus_used'))} "
                f"GPUs, up to {figure((fleet.get('replicas') or 0) * (fleet.get('knee_rps') or 0))}"
                f" req/s at the knee: {fleet.get('fleet_headroom', 0):.0%} headroom",
            ),
            (
                "verified",
                f"at the target on seeds {seeds}: {_slo_values(slo, fleet.get('metrics') or {})}",
            ),
            ("cost per hour", _money(fleet.get("cost_per_hour"))),
            ("cost per million output tokens", _money(fleet.get("cost_per_million_output_tokens"), 3)),
        ]  # fmt: skip
        return items
    planned = best.get("planned") or {}
    seeds = ",".join(str(s) for s in planned.get("seeds") or [])
    items += [
        (
            "planned load",
            f"{figure(planned.get('rate_rps'))} req/s per {unit} "
            f"({planned.get('fraction', 0):.0%} of the knee)",
        ),
        (
            "verified",
            f"on seeds {seeds}: {_slo_values(slo, planned.get('metrics') or {})}",
        ),
        ("cost per hour", _money(planned.get("cost_per_hour"))),
        ("cost per million output tokens", _money(planned.get("cost_per_million_output_tokens"), 3)),
    ]  # fmt: skip
    return items


def _recommendation(plan: Mapping[str, Any]) -> Section:
    best = plan.get("best")
    slo = slo_text(plan.get("slo") or {}, plan.get("slo_directions"))
    if best is None:
        facts = Facts(
            [("recommendation", "none: no layout meets the SLO"),
             ("why", str(plan.get("reason") or "—")), ("SLO", slo)],
            tone="bad",
        )  # fmt: skip
        return Section("Recommendation", [facts])
    from cbsim.studies.plan.answer import headline  # a plan written before it was recorded

    line = plan.get("headline") or headline(best) or "—"
    items = [("buy", str(line)), ("SLO", slo), *_winner_items(plan, best)]
    blocks: list[Block] = [Facts(items, tone="good")]
    launch = best.get("launch") or {}
    commands = [
        ("" if c.get("role") == "replica" else f"# {c.get('role')} × {c.get('count')}\n")
        + str(c.get("command"))
        for c in launch.get("commands") or []
    ]
    if commands:
        blocks.append(Paragraph(f"Launch ({launch.get('engine')}):"))
        blocks.append(Code("\n".join(commands), language="bash"))
    blocks += [Paragraph(str(note), note=True) for note in launch.get("notes") or []]
    return Section("Recommendation", blocks)


def _search(plan: Mapping[str, Any]) -> Section:
    settings = plan.get("settings") or {}
    space = plan.get("space") or {}
    workload = plan.get("workload") or {}
    counts = ", ".join(f"{n} {verdict}" for verdict, n in (plan.get("counts") or {}).items())
    screen = ""
    if plan.get("confirmations"):
        screen = (
            f"; layouts screened over {figure(settings.get('screen_window_s'))} s at "
            f"{figure(settings.get('screen_tolerance'))}, the best searched again"
        )
    items = [
        ("model", f"{plan.get('model')} · {plan.get('engine')} {plan.get('dtype')}"),
        (
            "workload",
            f"prompts {figure(workload.get('prompt_tokens_mean'))} / outputs "
            f"{figure(workload.get('output_tokens_mean'))} tokens (mean)",
        ),
        ("GPUs compared", ", ".join(str(g) for g in space.get("gpus") or [])),
        (
            "window",
            f"{figure(settings.get('window_s'))} s of arrivals per rate, tolerance "
            f"{figure(settings.get('tolerance'))}{screen}",
        ),
        ("headroom", f"{settings.get('headroom', 0):.0%} of the knee"),
        ("verification seeds", figure(settings.get("verify_seeds"))),
        ("layouts", f"{len(plan.get('layouts') or [])} ({counts})"),
        ("simulations", f"{plan.get('simulations', 0):,}"),
    ]
    if space.get("total_gpus"):
        items.append(("GPU budget", figure(space["total_gpus"])))
    return Section("Search", [Facts(items)])


def _passing_table(plan: Mapping[str, Any]) -> Section:
    slo = list(plan.get("slo") or {})
    best_id = (plan.get("best") or {}).get("id")
    rows = [r for r in plan.get("layouts") or [] if r.get("verdict") == "meets SLO"]
    rows.sort(key=lambda r: -(r["operating_point"].get("tokens_per_s_per_gpu") or 0))
    columns = [
        "layout", "seqs/tokens", "GPUs", "req/s", *(f"{metric_name(m)} (ms)" for m in slo),
        "tok/s/GPU", "tok/s/user", "$/h", "$/M out", "",
    ]  # fmt: skip
    table_rows = []
    highlight = set()
    for i, row in enumerate(rows):
        point = row["operating_point"]
        metrics = point.get("slo_metrics") or {}
        if row["id"] == best_id:
            highlight.add(i)
        table_rows.append(
            [
                str(row["name"]), _batching(row), figure(point.get("gpus")),
                figure(point.get("rate_rps")),
                *(figure((metrics.get(m) or 0) * 1e3) if metrics.get(m) is not None else "—"
                  for m in slo),
                figure(point.get("tokens_per_s_per_gpu")),
                figure(point.get("tokens_per_s_per_user")), _money(point.get("cost_per_hour")),
                _money(point.get("cost_per_million_output_tokens"), 3),
                "best" if row["id"] == best_id else "front" if point.get("on_front") else "",
            ]
        )  # fmt: skip
    if not table_rows:
        return Section("Layouts that meet the SLO", [Paragraph("None.", note=True)])
    caption = (
        "Each layout at its best passing rate of the screening (most output tokens/s per GPU "
        "first); the recommendation's own figures are those above."
    )
    return Section(
        "Layouts that meet the SLO",
        [Table(columns, table_rows, caption=caption, highlight=highlight)],
    )


def _front(plan: Mapping[str, Any]) -> Section:
    from cbsim.studies.plan.render import pareto_png

    blocks: list[Block] = []
    png = pareto_png(plan)
    if png is not None:
        blocks.append(
            Image(
                "pareto",
                png,
                "Output tokens/s per GPU against output tokens/s per user",
                "Every passing point; each GPU kind's front as a line; the star is the best, the "
                "cross its planned load.",
            )
        )
    rows: list[list[str]] = []
    for p in plan.get("pareto") or []:
        row = [str(p.get("name")), figure(p.get("rate_rps")),
               figure(p.get("tokens_per_s_per_user")), figure(p.get("tokens_per_s_per_gpu"))]  # fmt: skip
        if row not in rows:  # the same figures from another batching of the same layout
            rows.append(row)
    if rows:
        blocks.append(Table(["layout", "req/s", "tok/s/user", "tok/s/GPU"], rows))
    if not blocks:
        blocks.append(Paragraph("No layout meets the SLO, so there is no front.", note=True))
    return Section("Pareto front", blocks)


def _others(plan: Mapping[str, Any]) -> Section:
    rows = [r for r in plan.get("layouts") or [] if r.get("verdict") != "meets SLO"]
    shown = [
        [str(r.get("name")), _batching(r), str(r.get("verdict")), str(r.get("reason") or "")]
        for r in rows[:OTHERS_SHOWN]
    ]
    blocks: list[Block] = []
    if shown:
        blocks.append(Table(["layout", "seqs/tokens", "verdict", "why"], shown))
    if len(rows) > OTHERS_SHOWN:
        blocks.append(
            Paragraph(f"… and {len(rows) - OTHERS_SHOWN} more (plan.json lists all).", note=True)
        )
    blocks += [Paragraph(str(note), note=True) for note in plan.get("notes") or []]
    if not blocks:
        blocks.append(Paragraph("Every layout meets the SLO.", note=True))
    return Section("Other layouts", blocks)


def _verifications(plan: Mapping[str, Any]) -> Section:
    layouts = plan.get("layouts") or []
    slo = list(plan.get("slo") or {})
    rows = []
    for check in plan.get("verifications") or []:
        index = check.get("layout")
        name = layouts[index]["name"] if isinstance(index, int) and index < len(layouts) else "?"
        load = (
            f"{check.get('replicas')} replicas at {figure(check.get('target_rps'))} req/s"
            if "target_rps" in check
            else f"{figure(check.get('rate_rps'))} req/s ({check.get('fraction', 0):.0%})"
        )
        rows.append(
            [
                str(name), load, ",".join(str(s) for s in check.get("seeds") or []),
                _slo_values(slo, check.get("metrics") or {}),
                "pass" if check.get("passed") else f"fail: {check.get('reason')}",
            ]
        )  # fmt: skip
    if not rows:
        return Section("Verification", [Paragraph("No layout was verified.", note=True)])
    return Section(
        "Verification", [Table(["layout", "load", "seeds", "SLO metrics", "result"], rows)]
    )


def deployment_report(
    plan: Mapping[str, Any], *, title: str | None = None, source: str = "(in memory)"
) -> Report:
    """The report of a ``cbsim plan`` result (its ``plan.json``; see the module docstring)."""
    if not is_deployment_plan(plan):
        raise CbsimError("not a deployment plan (the plan.json of cbsim plan)", source=source)
    report = Report(
        title=title or f"cbsim deployment plan: {plan.get('model')}",
        kind="plan",
        source=source,
    )
    report.sections += [
        _recommendation(plan),
        _search(plan),
        _passing_table(plan),
        _front(plan),
        _others(plan),
        _verifications(plan),
    ]
    return report
