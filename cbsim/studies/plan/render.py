"""Showing a plan: the terminal tables (latencies in ms) and the Pareto plot.

The terminal shows what aiconfigurator's ``cli default`` shows: the layouts that meet the SLO,
best first, with their rate, latencies, tokens/s per GPU and per user and their cost; those that
do not (and why); the Pareto front; the winner with its planned load, its verification and the
command that starts it. The plot draws every passing point (tokens/s per user across, tokens/s
per GPU up), each GPU kind's front as a line, and the winner.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cbsim.common.numbers import figure
from cbsim.outputs.metric_names import metric_name, metric_value, slo_text
from cbsim.studies.plan.pareto import objective

WIDE = 170
"""Columns the tables get even when the output is not a terminal (rich would squeeze to 80)."""
FAILED_SHOWN = 12
"""Failing and pruned layouts listed by name; the rest are counted."""


def wide_console() -> Console:
    """A terminal's own width (a wider table would be cut off at its right edge), else at least
    :data:`WIDE` columns (see :func:`cbsim.common.console.wide_console`)."""
    from cbsim.common.console import wide_console as console_for_output

    console = console_for_output()
    return console if console.is_terminal else Console(width=max(console.width, WIDE))


def _num(value: Any) -> str:
    """A number in the one format of every table (:func:`cbsim.common.numbers.figure`)."""
    return figure(value)


def _ms(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return figure(value * 1000)
    return "—"


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _gpus(count: int) -> str:
    return _count(count, "GPU")


def _money(value: Any, spec: str = ",.3f") -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return f"${value:{spec}}"
    return "—"


def _batching(layout: Mapping[str, Any]) -> str:
    seqs = layout.get("max_num_seqs")
    tokens = layout.get("max_num_batched_tokens")
    if seqs is None and tokens is None:
        return "default"
    return (
        f"{seqs if seqs is not None else 'default'}/{tokens if tokens is not None else 'default'}"
    )


def _slo_text(plan: Mapping[str, Any]) -> str:
    return slo_text(plan["slo"], plan.get("slo_directions"))


def _header(plan: Mapping[str, Any], console: Console) -> None:
    wl = plan["workload"]
    space = plan["space"]
    budget = space.get("total_gpus")
    console.print(
        f"plan: {plan['model']} on {', '.join(space['gpus'])} · {plan['engine']} {plan['dtype']} · "
        f"prompts {wl['prompt_tokens_mean']:,.0f} / outputs {wl['output_tokens_mean']:,.0f} "
        f"tokens · SLO {_slo_text(plan)}" + (f" · {budget} GPUs" if budget else ""),
        highlight=False,
        markup=False,
    )


def _metric_header(metric: str) -> str:
    """``ttft_p99_s`` as ``TTFT p99``."""
    return metric_name(metric)


def _layout_table(plan: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Table:
    budget = plan["space"].get("total_gpus")
    slo = list(plan["slo"])
    best = plan.get("best") or {}
    table = Table(title=f"layouts that meet the SLO ({len(rows)}), best first; latencies in ms")
    columns = [
        ("layout", "left"), ("seqs/tokens", "right"), ("GPUs", "right"),
        ("req/s", "right"), *((_metric_header(m), "right") for m in slo),
        ("tok/s/GPU", "right"), ("tok/s/user", "right"), ("$/h", "right"),
        ("$/M out", "right"), ("$/M in+out", "right"), ("", "left"),
    ]  # fmt: skip
    if budget:
        columns.insert(3, ("replicas", "right"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=name == "layout")  # type: ignore[arg-type]
    for row in rows:
        point = row["operating_point"]
        metrics = point.get("slo_metrics") or {}
        # the best point is on the front (see cbsim.studies.plan.pareto)
        mark = "best" if row["id"] == best.get("id") else "front" if point.get("on_front") else ""
        cells = [
            row["name"], _batching(row), str(point["gpus"]), _num(point["rate_rps"]),
            *(_ms(metrics.get(m)) if m.endswith("_s") else _num(metrics.get(m)) for m in slo),
            _num(point["tokens_per_s_per_gpu"]), _num(point["tokens_per_s_per_user"]),
            _money(point["cost_per_hour"], ",.2f"), _money(point["cost_per_million_output_tokens"]),
            _money(point["cost_per_million_tokens"]), mark,
        ]  # fmt: skip
        if budget:
            cells.insert(3, str(point["replicas"]))
        table.add_row(*cells)
    return table


def _front_table(plan: Mapping[str, Any]) -> Table:
    table = Table(title="Pareto front: output tokens/s per GPU against tokens/s per user")
    for name in ("layout", "seqs/tokens", "req/s", "tok/s/user", "tok/s/GPU"):
        table.add_column(name, justify="left" if name == "layout" else "right")
    layouts = plan["layouts"]
    shown: set[tuple[str, str, str]] = set()
    for point in plan["pareto"]:
        key = (
            point["gpu"],
            _num(point["tokens_per_s_per_user"]),
            _num(point["tokens_per_s_per_gpu"]),
        )
        if key in shown:  # the same figures from another batching of the same layout
            continue
        shown.add(key)
        layout = layouts[point["layout"]]
        table.add_row(
            point["name"], _batching(layout), _num(point["rate_rps"]),
            _num(point["tokens_per_s_per_user"]), _num(point["tokens_per_s_per_gpu"]),
        )  # fmt: skip
    return table


def _others(plan: Mapping[str, Any], console: Console) -> None:
    layouts = plan["layouts"]
    for verdict, title in (
        ("fails SLO", "failing the SLO at every rate"),
        ("infeasible", "pruned"),
    ):
        rows = [r for r in layouts if r["verdict"] == verdict]
        if not rows:
            continue
        console.print(f"{_count(len(rows), 'layout')} {title}:", highlight=False)
        for row in rows[:FAILED_SHOWN]:
            console.print(
                f"  {row['name']} ({_batching(row)}): {row['reason']}",
                highlight=False,
                markup=False,
            )
        if len(rows) > FAILED_SHOWN:
            console.print(
                f"  ... and {len(rows) - FAILED_SHOWN} more (plan.json lists all)", highlight=False
            )
    skipped = [r for r in layouts if r["verdict"] == "not searched"]
    if skipped:
        console.print(_skipped_text(skipped, plan["settings"].get("refine")), highlight=False)
    for note in plan.get("notes") or []:
        console.print(note, highlight=False, markup=False)


def _skipped_text(skipped: Sequence[Mapping[str, Any]], refine: Any) -> str:
    """Why batching variants were not searched: their layout ranked below the ``--refine``
    best, or was pruned or failed at the default batching."""
    below = sum("ranks" in (r["reason"] or "") for r in skipped)
    parts = []
    if below:
        if refine == 0:
            why = "--refine 0 searches no layout's batching"
        else:
            why = f"their layout ranks below the best {_count(refine, 'layout')}"
        parts.append(f"{below} because {why} (--refine all searches every one)")
    if len(skipped) > below:
        parts.append(
            f"{len(skipped) - below} because their layout was pruned or failed the SLO at the "
            "default batching"
        )
    return f"{_count(len(skipped), 'batching variant')} not searched: {'; '.join(parts)}"


def _knee_line(plan: Mapping[str, Any], best: Mapping[str, Any]) -> str:
    """The winner's knee, the window it was found over, and its screened value."""
    settings = plan["settings"]
    unit = "unit" if best["mode"] == "disaggregated" else "replica"
    text = (
        f"knee: {figure(best.get('max_rate_rps'))} req/s per {unit}, the highest rate that passed "
        f"over {figure(settings['window_s'])} s of arrivals"
    )
    screen = settings.get("screen_window_s")
    if plan.get("confirmations") and screen is not None:
        text += (
            f" (screened at {figure(best.get('screened_max_rate_rps'))} over {figure(screen)} s)"
        )
    return text


def _fleet_lines(plan: Mapping[str, Any], best: Mapping[str, Any]) -> list[str]:
    """The knee, the fleet for the target and its margin (with ``--target-rps``)."""
    fleet = best["fleet"]
    metrics = fleet["metrics"]
    seeds = ",".join(str(s) for s in fleet["seeds"])
    slo = ", ".join(f"{metric_name(m)} {metric_value(m, metrics.get(m))}" for m in plan["slo"])
    knee = fleet["knee_rps"]
    share = fleet["headroom"]
    unit = "unit" if best["mode"] == "disaggregated" else "replica"
    return [
        _knee_line(plan, best),
        f"planning load: {figure(share * knee)} req/s per {unit} ({share:.0%} of the knee, "
        f"{1 / share - 1:.0%} headroom)",
        f"fleet: {fleet['replicas']} × {best['name']} serve up to "
        f"{figure(fleet['replicas'] * knee)} req/s for a target of "
        f"{figure(fleet['target_rps'])}: {fleet['fleet_headroom']:.0%} headroom; verified at the "
        f"target on seeds {seeds}: {slo}",
        f"cost: {_gpus(fleet['gpus_used'])}, {_money(fleet['cost_per_hour'], ',.2f')}/h, "
        f"{_money(fleet['cost_per_million_output_tokens'])} per million output tokens, "
        f"{_money(fleet['cost_per_million_tokens'])} per million input+output tokens",
    ]


def _best(plan: Mapping[str, Any], console: Console) -> None:
    best = plan.get("best")
    if best is None:
        console.print(f"no plan: {plan.get('reason')}", highlight=False, markup=False)
        return
    point = best["operating_point"]
    if best.get("fleet") is not None:
        lines = [
            f"best: {best['name']} (batch {_batching(best)}): "
            f"{_num(point['tokens_per_s_per_gpu'])} tok/s/GPU at "
            f"{_num(point['tokens_per_s_per_user'])} tok/s/user at its knee",
            *_fleet_lines(plan, best),
        ]
        for line in lines:
            console.print(line, highlight=False, markup=False)
        _launch(best, console)
        return
    planned = best["planned"]
    metrics = planned["metrics"]
    seeds = ",".join(str(s) for s in planned["seeds"])
    slo = ", ".join(
        f"{_metric_header(m)} {_ms(metrics.get(m))} ms"
        if m.endswith("_s")
        else f"{m} {_num(metrics.get(m))}"
        for m in plan["slo"]
    )
    lines = [
        f"best: {best['name']} (batch {_batching(best)}): up to {_num(point['rate_rps'])} "
        f"req/s per {'unit' if best['mode'] == 'disaggregated' else 'replica'}, "
        f"{_num(point['tokens_per_s_per_gpu'])} tok/s/GPU at {_num(point['tokens_per_s_per_user'])} tok/s/user",
        _knee_line(plan, best),
        f"planned at {planned['fraction']:.0%} of it: {_num(planned['rate_rps'])} req/s, verified on seeds "
        f"{seeds}: {slo}; {_gpus(planned['gpus_used'])}, {_money(planned['cost_per_hour'], ',.2f')}/h, "
        f"{_money(planned['cost_per_million_output_tokens'])} per million output tokens, "
        f"{_money(planned['cost_per_million_tokens'])} per million input+output tokens",
    ]
    if planned["fraction"] < planned["headroom"]:
        lines.append(
            f"(the headroom {planned['headroom']:.0%} failed its verification; "
            f"{planned['fraction']:.0%} passed)"
        )
    if plan["space"].get("total_gpus"):
        lines.append(
            f"on {plan['space']['total_gpus']} GPUs: {planned['replicas']} × this layout, "
            f"{_num(planned['fleet_rate_rps'])} req/s, "
            f"{_num(planned['output_tokens_per_s'])} output tokens/s"
        )
    for line in lines:
        console.print(line, highlight=False, markup=False)
    _launch(best, console)


def _launch(best: Mapping[str, Any], console: Console) -> None:
    launch = best["launch"]
    console.print(f"launch ({launch['engine']}):", highlight=False)
    for command in launch["commands"]:
        role = "" if command["role"] == "replica" else f"{command['role']} × {command['count']}: "
        console.print(
            f"  {role}{command['command']}", highlight=False, markup=False, soft_wrap=True
        )
    for note in launch["notes"]:
        console.print(f"  {note}", highlight=False, markup=False)


def render(plan: Mapping[str, Any], console: Console, out: str | None = None) -> None:
    """Print a plan (:func:`~cbsim.studies.plan.planner.plan_deployment`): its headline first."""
    if plan.get("headline"):
        console.print(f"[bold]{escape(str(plan['headline']))}[/bold]", highlight=False)
    _header(plan, console)
    budget = plan["space"].get("total_gpus")
    passing = [r for r in plan["layouts"] if r["verdict"] == "meets SLO"]
    passing.sort(key=lambda r: objective(r["operating_point"], budget))
    if passing:
        console.print(_layout_table(plan, passing))
        console.print(_front_table(plan))
    _others(plan, console)
    _best(plan, console)
    counts = ", ".join(f"{n} {verdict}" for verdict, n in plan["counts"].items())
    where = f" · written to {out}" if out else ""
    console.print(
        f"{len(plan['layouts'])} layouts ({counts}) · {plan['simulations']:,} simulations in "
        f"{plan['wall_s']:.1f} s{where}",
        highlight=False,
        markup=False,
    )


def pareto_png(plan: Mapping[str, Any]) -> bytes | None:
    """The Pareto plot as PNG bytes (None when no point passes)."""
    points = plan.get("points") or []
    if not points:
        return None
    from matplotlib.figure import Figure

    from cbsim.run.plots import to_png_bytes

    fig = Figure(figsize=(8, 5.5), layout="constrained")
    ax = fig.add_subplot()
    kinds = list(dict.fromkeys(p["gpu"] for p in points))
    for i, gpu in enumerate(kinds):
        color = f"C{i}"
        mine = [p for p in points if p["gpu"] == gpu]
        for mode, marker in (("aggregated", "o"), ("disaggregated", "s")):
            chosen = [p for p in mine if p["mode"] == mode]
            if chosen:
                ax.scatter(
                    [p["tokens_per_s_per_user"] or 0 for p in chosen],
                    [p["tokens_per_s_per_gpu"] for p in chosen],
                    s=14, alpha=0.35, color=color, marker=marker,
                    label=f"{gpu} {mode}",
                )  # fmt: skip
        front = sorted(
            (p for p in mine if p.get("on_front")), key=lambda p: p["tokens_per_s_per_user"] or 0
        )
        ax.plot(
            [p["tokens_per_s_per_user"] or 0 for p in front],
            [p["tokens_per_s_per_gpu"] for p in front],
            color=color, linewidth=1.8, label=f"{gpu} front",
        )  # fmt: skip
    best = plan.get("best")
    if best is not None:
        point = best["operating_point"]
        ax.scatter(
            [point["tokens_per_s_per_user"] or 0], [point["tokens_per_s_per_gpu"]],
            s=160, marker="*", color="black", zorder=5, label=f"best: {best['name']}",
        )  # fmt: skip
        planned = best["planned"]
        ax.scatter(
            [planned["tokens_per_s_per_user"] or 0], [planned["tokens_per_s_per_gpu"]],
            s=70, marker="x", color="black", zorder=5,
            label=f"planned at {planned['fraction']:.0%} (verified)",
        )  # fmt: skip
    ax.set_xlabel("output tokens/s per user (1 / mean TPOT)")
    per_gpu = "per GPU of the budget" if plan["space"].get("total_gpus") else "per GPU"
    ax.set_ylabel(f"output tokens/s {per_gpu}")
    ax.set_title(f"{plan['model']}: layouts meeting the SLO ({_slo_text(plan)})", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return to_png_bytes(fig)
