"""The verdict at the top of a run report: did the run meet its SLO, and can it be believed.

:func:`verdict_section` opens a run report (the first screen a reader sees): one line that says
whether every per-request SLO target was met at p99 (never "met" for an unstable run,
:func:`cbsim.outputs.stability.slo_verdict`), the share of requests that met them all, the run's
stability and rejections, an autoscaled fleet's mean and most replicas, then each target against
what was measured. It works on the summary and the scenario as mappings (a result directory's
``summary.json`` and ``scenario.yaml``, which need not validate any more).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from cbsim.common.numbers import finite
from cbsim.outputs.stability import is_unstable, slo_verdict, unstable_note
from cbsim.studies.report.autoscale_section import fleet_fact
from cbsim.studies.report.document import Block, Facts, Section, Table
from cbsim.studies.report.pools_section import ms

__all__ = ["slo_rows", "verdict_line", "verdict_section"]

_TARGETS = (("ttft", "TTFT p99"), ("tpot", "TPOT p99"), ("e2e", "E2E p99"))


def slo_rows(summary: Mapping[str, Any], scenario: Mapping[str, Any]) -> list[list[str]]:
    """Per SLO target the scenario sets: label, threshold (ms), measured p99 (ms), verdict."""
    slo = scenario.get("slo") or {}
    rows = []
    for name, label in _TARGETS:
        target = slo.get(f"{name}_s") if isinstance(slo, Mapping) else None
        if target is None:
            continue
        measured = finite(summary.get(f"{name}_p99_s"))
        met = measured is not None and measured <= float(target)
        rows.append([label, f"≤ {ms(target)}", ms(measured), slo_verdict(met, summary)])
    return rows


def verdict_line(summary: Mapping[str, Any], rows: list[list[str]]) -> tuple[str, bool]:
    """The one-line verdict and whether it is good (every target met, the run stable)."""
    unstable = is_unstable(summary)
    if not rows:
        if unstable:
            return f"no SLO set; the run was {unstable_note(summary)}", False
        return "no SLO set in the scenario (slo: ttft_s, tpot_s, e2e_s)", True
    missed = [f"{label} {measured} ms > {threshold[2:]} ms" for label, threshold, measured, v in
              rows if v == "missed"]  # fmt: skip
    if unstable:
        return f"SLO not met: the run was {unstable_note(summary)}", False
    if missed:
        return f"SLO missed: {'; '.join(missed)}", False
    return "every SLO target met at p99", True


def _attainment(summary: Mapping[str, Any]) -> str | None:
    share = finite(summary.get("slo_attainment"))
    return None if share is None else f"{share:.1%} of requests met every target"


def verdict_section(summary: Mapping[str, Any], scenario: Mapping[str, Any]) -> Section:
    """The verdict, stability, rejections and fleet of a run, then its SLO targets one by one."""
    rows = slo_rows(summary, scenario)
    line, good = verdict_line(summary, rows)
    facts: list[tuple[str, str]] = [("verdict", line)]
    attained = _attainment(summary) if rows else None
    if attained:
        facts.append(("SLO attainment", attained))
    if "stable" in summary:
        facts.append(("stability", str(summary.get("stability", summary["stable"]))))
    rejected = summary.get("rejected")
    if isinstance(rejected, int | float) and rejected > 0:
        good = False
        facts.append(("rejected", f"{int(rejected):,} of {int(summary.get('requests', 0)):,}"))
    fleet = fleet_fact(summary, scenario)
    if fleet:
        facts.append(("fleet", fleet))
    tone: Literal["plain", "good", "bad"] = "bad" if not good else "good" if rows else "plain"
    blocks: list[Block] = [Facts(facts, tone=tone)]
    if rows:
        blocks.append(
            Table(
                ["SLO target", "threshold (ms)", "measured (ms)", "result"],
                rows,
                caption="Per-request targets read at p99; an unstable run meets none of them.",
            )
        )
    return Section("Verdict", blocks)
