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
from rich.table import Table

from cbsim.plan.pareto import objective

WIDE = 170
"""Columns the tables get even when the output is not a terminal (rich would squeeze to 80)."""
FAILED_SHOWN = 12
"""Failing and pruned layouts listed by name; the rest are counted."""


def wide_console() -> Console:
    """A terminal's own width (a wider table would be cut off at its right edge), else at least
    :data:`WIDE` columns (see :func:`cbsim.console.wide_console`)."""
    from cbsim.console import wide_console as console_for_output

    console = console_for_output()
    return console if console.is_terminal else Console(width=max(console.width, WIDE))


def _num(value: Any, spec: str) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return f"{value:{spec}}"
    return "—"


def _ms(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return f"{value * 1000:,.0f}" if value >= 0.1 else f"{value * 1000:,.1f}"
    return "—"


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _gpus(count: int) -> str:
    return _count(count, "GPU")


def _money(value: Any, spec: str = ".3f") -> str:
    text = _num(value, spec)
    return text if text == "—" else f"${text}"


def _batching(layout: Mapping[str, Any]) -> str:
    seqs = layout.get("max_num_seqs")
    tokens = layout.get("max_num_batched_tokens")
    if seqs is None and tokens is None:
        return "default"
    return (
        f"{seqs if seqs is not None else 'default'}/{tokens if tokens is not None else 'default'}"
    )


def _slo_text(plan: Mapping[str, Any]) -> str:
    parts = []
    for metric, value in plan["slo"].items():
        name, _, rest = metric.partition("_")
        pct = rest.removesuffix("_s")
        sign = plan.get("slo_directions", {}).get(metric, "≤")
        shown = f"{value * 1000:g} ms" if metric.endswith("_s") else f"{value:g}"
        parts.append(f"{name.upper()} {pct} {sign} {shown}")
    return ", ".join(parts)


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
    name, _, rest = metric.removesuffix("_s").partition("_")
    return f"{name.upper()} {rest}".strip()


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
        # the best point is on the front (see cbsim.plan.pareto)
        mark = "best" if row["id"] == best.get("id") else "front" if point.get("on_front") else ""
        cells = [
            row["name"], _batching(row), str(point["gpus"]), _num(point["rate_rps"], ".3g"),
            *(_ms(metrics.get(m)) if m.endswith("_s") else _num(metrics.get(m), ".3g") for m in slo),
            _num(point["tokens_per_s_per_gpu"], ",.1f"), _num(point["tokens_per_s_per_user"], ".1f"),
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
            _num(point["tokens_per_s_per_user"], ".1f"),
            _num(point["tokens_per_s_per_gpu"], ",.1f"),
        )
        if key in shown:  # the same figures from another batching of the same layout
            continue
        shown.add(key)
        layout = layouts[point["layout"]]
        table.add_row(
            point["name"], _batching(layout), _num(point["rate_rps"], ".3g"),
            _num(point["tokens_per_s_per_user"], ".1f"), _num(point["tokens_per_s_per_gpu"], ",.1f"),
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
        refine = plan["settings"].get("refine")
        below = sum("ranks" in (r["reason"] or "") for r in skipped)
        parts = []
        if below:
            parts.append(f"{below} of layouts ranked below the top {refine} (--refine all)")
        if len(skipped) > below:
            parts.append(f"{len(skipped) - below} of layouts pruned or failing by default")
        console.print(
            f"{_count(len(skipped), 'batching variant')} not searched: {'; '.join(parts)}",
            highlight=False,
        )
    for note in plan.get("notes") or []:
        console.print(note, highlight=False, markup=False)


def _best(plan: Mapping[str, Any], console: Console) -> None:
    best = plan.get("best")
    if best is None:
        console.print(f"no plan: {plan.get('reason')}", highlight=False, markup=False)
        return
    point = best["operating_point"]
    planned = best["planned"]
    metrics = planned["metrics"]
    seeds = ",".join(str(s) for s in planned["seeds"])
    slo = ", ".join(
        f"{_metric_header(m)} {_ms(metrics.get(m))} ms"
        if m.endswith("_s")
        else f"{m} {_num(metrics.get(m), '.3g')}"
        for m in plan["slo"]
    )
    lines = [
        f"best: {best['name']} (batch {_batching(best)}): up to {_num(point['rate_rps'], '.4g')} "
        f"req/s per {'unit' if best['mode'] == 'disaggregated' else 'replica'}, "
        f"{_num(point['tokens_per_s_per_gpu'], ',.1f')} tok/s/GPU at {_num(point['tokens_per_s_per_user'], '.1f')} tok/s/user",
        f"planned at {planned['fraction']:.0%} of it: {_num(planned['rate_rps'], '.4g')} req/s, verified on seeds "
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
            f"{_num(planned['fleet_rate_rps'], '.4g')} req/s, "
            f"{_num(planned['output_tokens_per_s'], ',.0f')} output tokens/s"
        )
    for line in lines:
        console.print(line, highlight=False, markup=False)
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
    """Print a plan (:func:`~cbsim.plan.planner.plan_deployment`)."""
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
        f"{len(plan['layouts'])} layouts ({counts}) · {plan['simulations']} simulations in "
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

    from cbsim.plots import to_png_bytes

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
