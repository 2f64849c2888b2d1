"""The report of a disaggregated capacity plan: the JSON object of
:func:`cbsim.studies.capacity.disaggregated.plan_disaggregated` (``cbsim capacity --disaggregated``).

It says which xPyD layout is cheapest and whether it beats the best aggregated fleet, shows what
one instance of each pool's candidates sustains, every layout checked at the target beside the
aggregated fleet, the tokens-per-GPU against tokens-per-user view, and how each layout's pools
were grown until they passed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from cbsim.common.errors import CbsimError
from cbsim.common.numbers import finite
from cbsim.run import plots
from cbsim.studies.report.document import Block, Facts, Paragraph, Report, Section, Table
from cbsim.studies.report.formatting import _figure_image, _money, _with_unit, format_value


def is_disaggregated_plan(data: Any) -> bool:
    return (
        isinstance(data, Mapping)
        and "layouts" in data
        and "aggregated" in data
        and "verdict" in data
    )


def disaggregated_report(
    plan: Mapping[str, Any], *, title: str | None = None, source: str = "(in memory)"
) -> Report:
    """The report of a disaggregated plan (see the module docstring)."""
    if not is_disaggregated_plan(plan):
        raise CbsimError("not a disaggregated capacity plan", source=source)
    slo = dict(plan.get("slo") or {})
    slo_text = ", ".join(f"{k} ≤ {format_value(v)}" for k, v in slo.items())
    report = Report(
        title=title or "cbsim capacity plan: disaggregated prefill and decode",
        kind="capacity",
        source=source,
    )
    best = plan.get("best")
    aggregated = plan.get("aggregated") or {}
    items = [("verdict", str(plan.get("verdict")))]
    if best is not None:
        items += [
            ("layout", str(best.get("name"))),
            ("GPUs", format_value(best.get("gpus"))),
            ("cost per hour", _money(best.get("cost_per_hour"))),
            ("cost per million output tokens", _money(best.get("cost_per_million_output_tokens"), ".4f")),
        ]  # fmt: skip
    if aggregated.get("feasible"):
        items += [
            ("best aggregated", str(aggregated.get("name"))),
            ("its cost per million output tokens",
             _money(aggregated.get("cost_per_million_output_tokens"), ".4f")),
        ]  # fmt: skip
    items += [
        ("target load", _with_unit(plan.get("target_rps"), "req/s")),
        ("SLO", slo_text),
        ("simulations", format_value(plan.get("simulations"))),
    ]
    report.sections.append(
        Section("Recommendation", [Facts(items, tone="good" if best else "bad")])
    )

    capacity_rows = [
        [
            pool,
            str(c.get("gpu")),
            format_value(c.get("tp")),
            format_value(c.get("max_rate_rps")),
            str(c.get("reason") or ""),
        ]
        for pool in ("prefill", "decode")
        for c in plan.get(f"{pool}_candidates") or []
    ]
    report.sections.append(
        Section(
            "One instance of each candidate",
            [
                Table(
                    ["pool", "GPU", "tp", "max req/s", "note"],
                    capacity_rows,
                    caption="Prefill: the highest rate one instance sustains with one-token "
                    "outputs within the TTFT target. Decode: one instance fed by enough prefill "
                    "instances, within the whole SLO.",
                )
            ],
        )
    )

    layouts = [*(plan.get("layouts") or [])]
    if aggregated.get("feasible"):
        layouts.append(aggregated)
    metric_names = list(slo)
    rows: list[list[str]] = []
    best_name = best.get("name") if best else None
    for layout in layouts:
        metrics = layout.get("metrics") or {}
        status = "best" if layout.get("name") == best_name else (
            "ok" if layout.get("feasible", True) else "fails the SLO"
        )  # fmt: skip
        rows.append(
            [
                str(layout.get("name")),
                format_value(layout.get("gpus")),
                _money(layout.get("cost_per_hour")),
                _money(layout.get("cost_per_million_output_tokens"), ".4f"),
                *(format_value(metrics.get(m)) for m in metric_names),
                format_value(layout.get("tokens_per_s_per_gpu")),
                format_value(layout.get("tokens_per_s_per_user")),
                status,
            ]
        )
    best_rows = {i for i, row in enumerate(rows) if row[-1] == "best"}
    layout_blocks: list[Block] = [
        Table(
            [
                "layout",
                "GPUs",
                "$/hour",
                "$/M output tokens",
                *metric_names,
                "output tok/s per GPU",
                "output tok/s per user",
                "status",
            ],
            rows,
            caption="Every prefill x decode pair at the target load (pools grown until they "
            "pass), and the cheapest aggregated fleet of the same GPUs and tensor-parallel "
            "degrees; output tokens/s per user = 1 / mean TPOT.",
            highlight=best_rows,
        )
    ]
    layout_blocks += [
        Paragraph(f"{layout.get('name')}: {layout['reason']}", note=True)
        for layout in layouts
        if layout.get("reason")
    ]
    report.sections.append(Section("Layouts", layout_blocks))

    points = [
        {
            "alternative": str(layout.get("name")),
            "offered_rate_rps": finite(plan.get("target_rps")),
            "passed": bool(layout.get("feasible", True)),
            "output_tokens_per_s_per_gpu": finite(layout.get("tokens_per_s_per_gpu")),
            "output_tokens_per_s_per_user": finite(layout.get("tokens_per_s_per_user")),
        }
        for layout in layouts
    ]
    frame = pd.DataFrame(points)
    if len(frame) and frame["output_tokens_per_s_per_gpu"].notna().any():
        figure_blocks: list[Block] = [
            _figure_image(
                plots.tokens_per_gpu_vs_per_user(frame, order="offered_rate_rps", passed="passed"),
                "disaggregated-tokens-per-gpu-vs-per-user",
                "Output tokens per second per GPU against per user, every layout",
                "Each layout at the target load: output tokens/s per GPU (the fleet's output over "
                "its GPUs) against output tokens/s per user (1 / mean TPOT). Up and to the right "
                "is better.",
            )
        ]
    else:
        figure_blocks = [Paragraph("No layout met the SLO: nothing to compare.", note=True)]
    report.sections.append(Section("Tokens per GPU vs tokens per user", figure_blocks))

    tried_rows = [
        [
            str(layout.get("name")),
            format_value(run.get("prefill")),
            format_value(run.get("decode")),
            *(format_value((run.get("metrics") or {}).get(m)) for m in metric_names),
            format_value(run.get("kv_wait_p99_s")),
            "pass" if run.get("passed") else "fail",
            str(run.get("reason") or ""),
        ]
        for layout in plan.get("layouts") or []
        for run in layout.get("tried") or []
    ]
    report.sections.append(
        Section(
            "Pool sizes tried",
            [
                Table(
                    [
                        "layout",
                        "prefill",
                        "decode",
                        *metric_names,
                        "kv_wait p99",
                        "result",
                        "reason",
                    ],
                    tried_rows,
                    caption="Each pair starts at the pools its instances' rates call for and "
                    "grows one pool at a time (decode where the TPOT target fails or requests "
                    "wait for decode blocks, else prefill) until it passes.",
                )
            ],
        )
    )
    return report
