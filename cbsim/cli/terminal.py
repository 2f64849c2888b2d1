"""What ``cbsim run`` prints: the run as it was run, its key figures, and its SLO verdict.

A reader of the terminal should not need the YAML to know what a summary is about, so the summary
states:

* **the scenario as run** — its name, seed and every ``--set`` override applied (the title);
* **the set-up** — model and precisions, GPUs (``gpu, tp T x R replicas = N GPUs in total``), the
  scheduler with its token budget, the serving engine, and speculation (proposer and k policy)
  when it is on;
* **the figures** — throughput, goodput, latency percentiles (with speculation, ITL per streamed
  chunk — what ``vllm bench serve`` calls ITL — before ITL per token, whose median reads 0 when
  drafts are accepted together), acceptance when speculating, autoscaled, the autoscaler's settings, the replicas it served with (mean and most), its scale
  events and the GPU-hours held with their cost;
* **the SLO** — each target of the scenario's ``slo`` against the p99 it is read at (TTFT p99 vs
  ``slo.ttft_s``, TPOT p99 vs ``slo.tpot_s``, E2E p99 vs ``slo.e2e_s``) with *met* or *missed*,
  and goodput (requests meeting every target per second) with the share of requests meeting them,
  which passes at 99 % or more (the same p99 standard);
* **with** ``--compare-no-spec`` — the speculative and the plain run side by side (their own
  TTFT, TPOT, throughput and goodput) with the speed-up of each (> 1: speculation is better).

:func:`print_run` prints all of it; the tables are built by :func:`summary_table`,
:func:`slo_table` and :func:`comparison_table`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cbsim.common.errors import CbsimError
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.engine.scheduler.names import scheduler_label
from cbsim.outputs.stability import is_unstable, load_note, slo_verdict
from cbsim.run.preflight import gpu_layout
from cbsim.run.results import Results
from cbsim.schema.scenario import Scenario

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "GOODPUT_PASS_FRACTION",
    "comparison_table",
    "itl_rows",
    "print_run",
    "run_title",
    "setup_rows",
    "slo_rows",
    "slo_table",
    "summary_table",
]

GOODPUT_PASS_FRACTION = 0.99
"""Goodput passes when at least this share of requests meets every SLO target (the p99 standard
the latency targets are read at)."""


# --------------------------------------------------------------------------- numbers


def _finite(value: Any) -> float | None:
    """``value`` as a float if it is a finite number, else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _fmt(value: Any, spec: str = ".3f", unit: str = "") -> str:
    """A number with a format and unit, or ``n/a`` when missing or not finite."""
    number = _finite(value)
    if number is None:
        return "n/a"
    return f"{number:{spec}}{' ' + unit if unit else ''}"


def _seconds(value: Any) -> str:
    """A latency in ms below a second, else in s; ``n/a`` when missing."""
    number = _finite(value)
    if number is None:
        return "n/a"
    if abs(number) < 1.0:
        return f"{number * 1e3:.1f} ms"
    return f"{number:.3f} s"


def _fmt_latencies(summary: Mapping[str, Any], metric: str) -> str:
    """``p50 / p90 / p99`` of a latency metric in one unit (ms below a second, else s)."""
    values = [_finite(summary.get(f"{metric}_p{p}_s")) for p in (50, 90, 99)]
    finite = [v for v in values if v is not None]
    if not finite:
        return "n/a"
    if max(finite) < 1.0:
        scale, unit, spec = 1e3, "ms", ".1f"
    else:
        scale, unit, spec = 1.0, "s", ".3f"
    parts = ["n/a" if v is None else f"{v * scale:{spec}}" for v in values]
    return f"{' / '.join(parts)} {unit}"


def itl_rows(summary: Mapping[str, Any], speculative: bool) -> list[tuple[str, str]]:
    """(label, summary stem) of the ITL lines: one without speculation; with it, the gap per
    streamed chunk first (what ``vllm bench serve`` reports as ITL: one gap per chunk of accepted
    drafts + 1), then the gap per token (accepted drafts arrive together: a gap of 0, so its
    median can read 0.0 ms)."""
    if not speculative or "itl_chunk_p50_s" not in summary:
        return [("ITL p50 / p90 / p99", "itl")]
    return [
        ("ITL per chunk p50 / p90 / p99 (vLLM's ITL)", "itl_chunk"),
        ("ITL per token p50 / p90 / p99", "itl"),
    ]


# --------------------------------------------------------------------------- the set-up


def run_title(scenario: Scenario, overrides: Sequence[str] = ()) -> str:
    """The scenario as run: ``name (seed N)``, then ``--set key=value`` for every override."""
    title = f"{scenario.name} (seed {scenario.seed})"
    if overrides:
        title += " with " + " ".join(f"--set {text}" for text in overrides)
    return title


def _speculation(scenario: Scenario) -> str:
    spec = scenario.speculative
    model = getattr(spec.proposer, "model", None)
    proposer = f"{spec.proposer.kind} ({model})" if model else str(spec.proposer.kind)
    k = getattr(spec.policy, "k", None)
    policy = f"{spec.policy.kind} k={k}" if k is not None else str(spec.policy.kind)
    return f"{proposer} proposer, {policy} policy"


def _autoscale(scenario: Scenario) -> list[tuple[str, str]]:
    """The autoscaler's settings: what it reads and aims at, its bounds, how a replica starts."""
    auto = scenario.cluster.autoscale
    assert auto is not None
    windows = f"scale-down window {auto.stabilization_s or 0:g} s"
    if auto.scale_up_stabilization_s:
        windows += f", scale-up window {auto.scale_up_stabilization_s:g} s"
    return [
        (
            "autoscale",
            f"{auto.metric} target {auto.target:g}, {auto.min_replicas}-{auto.max_replicas} "
            f"replicas ({auto.start_replicas} at first), every {auto.interval_s:g} s, "
            f"cooldown {auto.cooldown_s:g} s, {windows}",
        ),
        (
            "replica start-up",
            f"{auto.scale_up_delay_s:g} s + weights at {auto.weight_load_gbps:g} GB/s per GPU",
        ),
    ]


def scheduler_name(scenario: Scenario) -> str:
    """The scenario's scheduler by cbsim's name and its engine's (:mod:`cbsim.engine.scheduler.names`)."""
    cluster, kind = scenario.cluster, scenario.scheduler.kind
    try:
        profile = load_engine_profile(cluster.engine)
    except CbsimError:
        return scheduler_label(kind, cluster.engine, None)
    engine_kind = profile.defaults_for(cluster.gpu).scheduler.kind
    return scheduler_label(kind, profile.engine, engine_kind)


def long_prefill_cap(scenario: Scenario) -> str:
    """``, at most N of one prompt a step`` when ``chunk_size`` caps a prompt's chunk below the
    sarathi budget (vLLM's ``--long-prefill-token-threshold``), else nothing."""
    sched = scenario.scheduler
    if sched.kind == "sarathi" and sched.caps_long_prefills:
        return f", at most {sched.chunk_size} of one prompt a step"
    return ""


def setup_rows(scenario: Scenario) -> list[tuple[str, str]]:
    """(label, value) of what ran: model, GPUs, scheduler, engine, and speculation when on."""
    cluster, sched = scenario.cluster, scenario.scheduler
    budget = sched.max_batched_tokens
    rows = [
        (
            "model",
            f"{cluster.model} ({cluster.dtype} weights, {cluster.effective_kv_dtype} KV cache)",
        ),
        ("GPUs", gpu_layout(scenario)),
        (
            "scheduler",
            f"{scheduler_name(scenario)}, token budget {budget}{long_prefill_cap(scenario)}, "
            f"batch up to {sched.max_batch_size}",
        ),
        ("engine", cluster.engine),
    ]
    if cluster.replica_count > 1:
        rows.append(("router", cluster.router))
    if cluster.autoscale is not None:
        rows += _autoscale(scenario)
    if scenario.speculative.enabled:
        rows.append(("speculation", _speculation(scenario)))
    return rows


# --------------------------------------------------------------------------- the SLO


def slo_rows(summary: Mapping[str, Any], scenario: Scenario) -> list[tuple[str, str, str, str]]:
    """(target, threshold, measured, result) per SLO target of the scenario, then goodput.

    A latency target is met when the run's p99 is within it; a missing p99 (no finished request)
    is missed. Goodput passes when at least :data:`GOODPUT_PASS_FRACTION` of the requests meet
    every target. Empty when the scenario sets no target."""
    rows: list[tuple[str, str, str, str]] = []
    for name, label in (("ttft", "TTFT p99"), ("tpot", "TPOT p99"), ("e2e", "E2E p99")):
        target = getattr(scenario.slo, f"{name}_s")
        if target is None:
            continue
        measured = _finite(summary.get(f"{name}_p99_s"))
        met = measured is not None and measured <= target
        rows.append((label, f"≤ {_seconds(target)}", _seconds(measured), _verdict(met, summary)))
    if not rows:
        return rows
    attainment = _finite(summary.get("slo_attainment"))
    share = "n/a" if attainment is None else f"{attainment:.1%}"
    rows.append(
        (
            "goodput",
            f"≥ {GOODPUT_PASS_FRACTION:.0%} of requests",
            f"{_fmt(summary.get('goodput_rps'), '.3f', 'req/s')}, {share} of requests",
            _verdict(attainment is not None and attainment >= GOODPUT_PASS_FRACTION, summary),
        )
    )
    return rows


def _verdict(met: bool, summary: Mapping[str, Any]) -> str:
    """``met`` in green, ``missed`` in red; an unstable run's ``met`` is ``not met (unstable: ...)``
    (:func:`cbsim.outputs.stability.slo_verdict`): a short run of an overloaded service meets nothing."""
    verdict = slo_verdict(met, summary)
    return "[green]met[/green]" if verdict == "met" else f"[bold red]{verdict}[/bold red]"


def slo_table(summary: Mapping[str, Any], scenario: Scenario) -> Table | None:
    """The SLO targets against what the run measured, or None when the scenario sets none."""
    from rich.table import Table  # imported when printing: a --json run never does

    rows = slo_rows(summary, scenario)
    if not rows:
        return None
    table = Table(
        title="SLO (scenario slo; latency read at p99, goodput = requests meeting every target)"
    )
    table.add_column("target")
    table.add_column("threshold", justify="right")
    table.add_column("measured", justify="right")
    table.add_column("result")
    for row in rows:
        table.add_row(*row)
    return table


# --------------------------------------------------------------------------- the figures


def summary_table(results: Results) -> Table:
    """The set-up and key figures of a run as a rich table."""
    from rich.table import Table  # imported when printing: a --json run never does

    s = results.summary
    table = Table(title="set-up and key figures")
    table.add_column("")
    table.add_column("value", justify="right")
    for label, value in setup_rows(results.scenario):
        table.add_row(label, value)
    table.add_section()
    table.add_row("completed", f"{s.get('completed', 'n/a')} / {s.get('requests', 'n/a')}")
    table.add_row("rejected", str(s.get("rejected", "n/a")))
    if s.get("unfinished"):
        table.add_row("unfinished", str(s["unfinished"]))
    if s.get("timed_out"):
        table.add_row("timed out", str(s["timed_out"]))
    if "stable" in s:  # the reasons, when unstable, print below the table (print_run)
        verdict = "[bold red]NO[/bold red]" if is_unstable(s) else "yes"
        table.add_row("stable queue", f"{verdict} ({load_note(s)})")
    table.add_row("throughput", _fmt(s.get("throughput_rps"), ".3f", "req/s"))
    table.add_row("output tokens", _fmt(s.get("output_tokens_per_s"), ".1f", "tok/s"))
    table.add_row("goodput (SLO)", _fmt(s.get("goodput_rps"), ".3f", "req/s"))
    table.add_row("TTFT p50 / p90 / p99", _fmt_latencies(s, "ttft"))
    table.add_row("TPOT p50 / p90 / p99", _fmt_latencies(s, "tpot"))
    table.add_row("E2E p50 / p90 / p99", _fmt_latencies(s, "e2e"))
    for label, metric in itl_rows(s, results.scenario.speculative.enabled):
        table.add_row(label, _fmt_latencies(s, metric))
    for stem, label in (("kv_transfer", "KV transfer"), ("kv_wait", "KV wait")):
        if f"{stem}_p99_s" in s:  # disaggregated: prefill -> decode KV handoff
            pair = f"{_seconds(s.get(f'{stem}_p50_s'))} / {_seconds(s[f'{stem}_p99_s'])}"
            table.add_row(f"{label} p50 / p99", pair)
    if results.scenario.speculative.enabled:
        table.add_row("acceptance (accepted/drafted)", _fmt(s.get("acceptance_rate"), ".3f"))
        table.add_row("conditional acceptance α", _fmt(s.get("conditional_acceptance"), ".3f"))
        table.add_row("tokens per verify step", _fmt(s.get("mean_acceptance_length"), ".2f"))
        table.add_row("mean k", _fmt(s.get("mean_k"), ".2f"))
    if s.get("prefix_hit_rate"):
        table.add_row("prefix cache hit rate", _fmt(s.get("prefix_hit_rate"), ".3f"))
        if s.get("prefix_hit_rate_cpu"):
            table.add_row("  from the CPU tier", _fmt(s.get("prefix_hit_rate_cpu"), ".3f"))
    if results.scenario.cluster.autoscale is not None:
        table.add_row(
            "replicas serving mean / max",
            f"{_fmt(s.get('replicas_mean'), '.2f')} / {s.get('replicas_max', 'n/a')}",
        )
        table.add_row("scale-ups / scale-downs", f"{s.get('scale_ups')} / {s.get('scale_downs')}")
        table.add_row(
            "GPU-hours (cost)",
            f"{_fmt(s.get('gpu_hours'), '.2f')} ({_fmt(s.get('cost_usd'), ',.2f', 'USD')})",
        )
    table.add_row("preemptions", str(s.get("preemptions", "n/a")))
    table.add_row("mean batch size", _fmt(s.get("mean_batch_size"), ".2f"))
    table.add_row("wall time", _fmt(results.run_info.get("wall_s"), ".2f", "s"))
    return table


#: (label, summary key, kind): latencies in s (lower is better), rates (higher is better).
_COMPARED = (
    ("TTFT p50", "ttft_p50_s", "latency"),
    ("TTFT p99", "ttft_p99_s", "latency"),
    ("TPOT mean", "tpot_mean_s", "latency"),
    ("TPOT p50", "tpot_p50_s", "latency"),
    ("TPOT p99", "tpot_p99_s", "latency"),
    ("E2E mean", "e2e_mean_s", "latency"),
    ("E2E p99", "e2e_p99_s", "latency"),
    ("throughput", "throughput_rps", "req/s"),
    ("output tokens", "output_tokens_per_s", "tok/s"),
    ("goodput (SLO)", "goodput_rps", "req/s"),
)


def _speedup(spec: Any, base: Any, kind: str) -> str:
    """No-spec / spec for latencies, spec / no-spec for rates: > 1 favours speculation."""
    a, b = _finite(spec), _finite(base)
    if a is None or b is None:
        return "n/a"
    numerator, denominator = (b, a) if kind == "latency" else (a, b)
    return f"{numerator / denominator:.3f}x" if denominator else "n/a"


def _value(value: Any, kind: str) -> str:
    if kind == "latency":
        return _seconds(value)
    return _fmt(value, ".1f" if kind == "tok/s" else ".3f", kind)


def comparison_table(summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> Table:
    """The speculative run and the same scenario without speculation, side by side."""
    from rich.table import Table  # imported when printing: a --json run never does

    table = Table(
        title="speculation vs the same run without it (same seed; speed-up > 1 favours speculation)"
    )
    table.add_column("")
    table.add_column("speculative", justify="right")
    table.add_column("no speculation", justify="right")
    table.add_column("speed-up", justify="right")
    for label, key, kind in _COMPARED:
        spec, base = summary.get(key), baseline.get(key)
        table.add_row(label, _value(spec, kind), _value(base, kind), _speedup(spec, base, kind))
    saved = _finite(summary.get("time_saved_s"))
    if saved is not None:
        table.add_section()
        table.add_row("decode time saved", "", "", f"{saved:.1f} s")
        table.caption = (
            "decode time saved: Σ over finished requests of (finish − first token) without "
            "speculation minus with it; request-seconds, not wall time"
        )
    return table


def print_run(console: Console, results: Results, overrides: Sequence[str] = ()) -> None:
    """Print the summary of a run: the scenario as run (one line, never wrapped), set-up and
    figures, the SLO verdict, and the comparison with speculation off when the run has one
    (:attr:`Results.no_spec_summary`)."""
    title = run_title(results.scenario, overrides)
    console.print(f"run: {title}", soft_wrap=True, highlight=False, markup=False)
    console.print(summary_table(results))
    if is_unstable(results.summary):
        console.print(
            f"[bold red]{results.summary.get('stability', 'unstable')}[/bold red]",
            highlight=False,
        )
    slo = slo_table(results.summary, results.scenario)
    if slo is not None:
        console.print(slo)
    if results.no_spec_summary is not None:
        console.print(comparison_table(results.summary, results.no_spec_summary))
