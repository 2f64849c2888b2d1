"""The catalog: every name a scenario can use, with a line of key facts each.

``cbsim catalog`` lists the GPUs (memory and what CUDA reports of it, bandwidth, peak FLOP/s,
interconnect, price; whether their kernels are measured or priced from another GPU's fits, with
that transfer's held-out error; where the figures come from), the models (parameters, layers,
width, heads, context, KV-cache bytes per token, Hugging Face ids), the serving engines (what
their profile was fitted on) and the shipped traces (requests, span, rate, mean lengths).
``cbsim catalog MODEL`` (a catalog name or a Hugging Face id) shows one model in full: its
shape, parameters, and weights in each format (:mod:`cbsim.catalog.model_details`). Names
compare without case in scenarios and options (``H100-SXM`` is ``h100-sxm``), and an unknown name
is answered with the close ones.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from cbsim.catalog.hardware import GB, GPU_NAMES, TB, TFLOPS, GiB, get_gpu
from cbsim.catalog.model_catalog import CATALOG
from cbsim.catalog.models import MODEL_NAMES, find_model, get_model
from cbsim.common.errors import CbsimError
from cbsim.cost.engine_profile import engine_names, load_engine_profile
from cbsim.cost.profile import CalibrationProfile, load_profile, transfer_errors
from cbsim.workload.traces import TRACE_NAMES, load_trace

SECTIONS = ("gpus", "models", "engines", "traces")


def kernel_line(profile: CalibrationProfile | None) -> str:
    """How a GPU's kernels are priced: its own measurements, another GPU's fits (with that
    transfer's held-out error, median / P90), or the raw roofline."""
    if profile is None:
        return "kernels: the raw roofline (no calibration profile)"
    if not profile.based_on:
        return f"kernels: measured ({profile.name})"
    errors = transfer_errors(profile)
    text = f"kernels: {profile.based_on} fits on this spec sheet"
    if not errors:
        return text
    held_out = next(iter(errors.values())).source.split(":")[0]
    parts = ", ".join(
        f"{family.split(' kv ')[0]} {100 * (m.holdout_median_ape or 0):.0f}/"
        f"{100 * (m.holdout_p90_ape or 0):.0f} %"
        for family, m in errors.items()
    )
    return f"{text} (held-out error, {held_out}, median/P90: {parts})"


def gpu_lines() -> list[tuple[str, str]]:
    """(name, facts) of every catalog GPU: its figures, how its kernels are priced and where the
    figures come from, a line each."""
    rows = []
    for name in GPU_NAMES:
        gpu = get_gpu(name)
        fp4 = f", {gpu.fp4_flops / TFLOPS:,.0f} fp4" if gpu.has_fp4 else ""
        figures = (
            f"{gpu.memory_gib:.0f} GiB at {gpu.hbm_bandwidth / TB:.2f} TB/s, "
            f"{gpu.cuda_total_bytes / GiB:.2f} GiB usable; "
            f"{gpu.bf16_flops / TFLOPS:,.0f} TFLOP/s bf16, {gpu.fp8_flops / TFLOPS:,.0f} "
            f"fp8{fp4}; {gpu.nvlink_bandwidth / GB:,.0f} GB/s link, {gpu.gpus_per_node} per "
            f"node; ${gpu.price_per_hour:.2f}/GPU-hour"
        )
        lines = [figures, kernel_line(load_profile(name))]
        if gpu.source:
            lines.append(f"source: {gpu.source}")
        rows.append((name, "\n".join(lines)))
    return rows


def model_lines() -> list[tuple[str, str]]:
    """(name, facts) of every catalog model."""
    rows = []
    for name in MODEL_NAMES:
        model = get_model(name)
        rows.append(
            (
                name,
                f"{model.param_count() / 1e9:.2f}B parameters"
                + (
                    f" ({model.active_param_count() / 1e9:.2f}B per token, {model.num_experts} "
                    f"experts, {model.experts_per_token} active)"
                    if model.is_moe
                    else ""
                )
                + f", {model.num_layers} layers, "
                f"hidden {model.hidden_size:,}, {model.num_heads}/{model.num_kv_heads} q/kv "
                f"heads, {model.max_position_embeddings:,}-token context, "
                f"{model.kv_bytes_per_token(2) / 1024:,.0f} KiB KV per token (bf16)"
                + (f"; {_ids(name)}" if _ids(name) else ""),
            )
        )
    return rows


def _ids(name: str) -> str:
    """The Hugging Face ids of a catalog model, for its catalog line."""
    entry = next(e for e in CATALOG if e.name == name)
    ids = [*entry.repos, *(f"{r} (fp8)" for r in entry.fp8_repos)]
    return ", ".join(ids)


def engine_lines() -> list[tuple[str, str]]:
    """(name, facts) of every shipped engine profile, ``none`` included."""
    return [(name, load_engine_profile(name).description or "-") for name in engine_names()]


def trace_lines() -> list[tuple[str, str]]:
    """(name, facts) of every shipped trace."""
    rows = []
    for name in TRACE_NAMES:
        trace = load_trace(name)
        span = float(trace["arrival_s"].max())
        rate = f" ({(len(trace) - 1) / span:.2f} requests/s)" if span > 0 else ""
        prefix = ", prefix block ids" if "prefix_hash_ids" in trace.columns else ""
        rows.append(
            (
                name,
                f"{len(trace):,} requests over {span / 60:.1f} min{rate}; mean prompt "
                f"{trace['prompt_tokens'].mean():,.0f}, mean output "
                f"{trace['output_tokens'].mean():,.0f} tokens{prefix}",
            )
        )
    return rows


SECTION_LINES: dict[str, tuple[str, Callable[[], list[tuple[str, str]]]]] = {
    "gpus": ("GPUs (cluster.gpu)", gpu_lines),
    "models": (
        "models (cluster.model: a name or a Hugging Face id; or a config.json path)",
        model_lines,
    ),
    "engines": ("engines (cluster.engine; or an engine profile JSON path)", engine_lines),
    "traces": ("traces (workload.trace.path; or a trace file path)", trace_lines),
}


def _entry(name: str, facts: str, width: int) -> str:
    """One name's facts: the first line beside the name, any further line indented under it."""
    first, *more = facts.split("\n")
    indent = " " * (width + 4)
    return "\n".join([f"  {name:<{width}}  {first}", *(indent + line for line in more)])


def render(sections: tuple[str, ...] = SECTIONS) -> str:
    """The catalog as text: a heading per section, then the facts of each name (a line each,
    GPUs three)."""
    blocks = []
    for section in sections:
        title, lines = SECTION_LINES[section]
        rows = lines()
        width = max(len(name) for name, _ in rows)
        blocks.append("\n".join([f"{title}:", *(_entry(n, f, width) for n, f in rows)]))
    return "\n\n".join(blocks)


@click.command("catalog")
@click.argument("names", nargs=-1, metavar="[SECTION|MODEL]...")
@click.option(
    "--tp", type=click.IntRange(1, 64), default=1, show_default=True,
    help="With MODEL: weights per GPU of this many tensor-parallel GPUs.",
)  # fmt: skip
def catalog_command(names: tuple[str, ...], tp: int) -> None:
    """List the GPUs, models, engines and shipped traces a scenario can name (or only the
    SECTIONS given: gpus, models, engines, traces), with a line of key facts each; a MODEL (a
    catalog name or Hugging Face id) is shown in full: shape, parameters, weights per format."""
    from cbsim.catalog.model_details import render as render_model

    sections: list[str] = []
    blocks: list[str] = []
    for name in names:
        if name.lower() in SECTIONS:
            sections.append(name.lower())
            continue
        match = find_model(name)
        if match is None:
            try:
                get_model(name)  # the catalog's own "unknown model" message, with suggestions
            except CbsimError as err:
                raise CbsimError(
                    f"{err.message}; or a section: {', '.join(SECTIONS)}", field="catalog"
                ) from None
            raise CbsimError(
                f"{name!r} is a config.json, not a catalog model; cbsim catalog shows catalog "
                "models",
                field="catalog",
            )
        blocks.append(render_model(match, tp))
    if sections or not blocks:
        chosen = tuple(sections) or SECTIONS
        blocks.insert(0, render(tuple(dict.fromkeys(chosen))))
    click.echo("\n\n".join(blocks))
