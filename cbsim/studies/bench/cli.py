"""The ``cbsim bench`` command: ``vllm bench serve``'s flags, a simulated run, vLLM's output.

Option parsing and printing only. Every flag of ``vllm bench serve --help`` is taken: the ones
that shape the run are declared here (what each simulates: docs/bench.md), the ones with no
meaning in a simulation in :mod:`cbsim.studies.bench.vllm_flags` (named on one ``note:`` line), and vLLM's
spellings (``--num_prompts``, ``--goodput ttft:300 tpot:50``) through
:class:`cbsim.studies.tool_flags.ToolCommand`. The checks are :mod:`cbsim.studies.bench.options`', the scenario
:mod:`cbsim.studies.bench.load`'s, the run and the files :mod:`cbsim.studies.bench.run`'s, the figures
:mod:`cbsim.studies.bench.vllm_result`'s, the text :mod:`cbsim.studies.bench.render`'s. Bad flags exit 2 with one
``error:`` line naming the flag.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import click

from cbsim.schema.slo_syntax import verdicts
from cbsim.studies.bench.options import DEFAULT_PERCENTILE_METRICS, VLLM_NAME, BenchPlan, bench_plan
from cbsim.studies.bench.render import result_block, sweep_table, traffic_lines
from cbsim.studies.bench.run import BenchRun, metadata_of, run_bench, write_result_file
from cbsim.studies.bench.vllm_flags import VARIADIC, VLLM_DATASETS, ignored_options
from cbsim.studies.bench.vllm_result import METRICS
from cbsim.studies.tool_flags import tool_command

__all__ = ["bench_command"]


@click.command("bench", cls=tool_command(VARIADIC))
@click.option("--model", "-m", required=True,
              help="Catalog model, Hugging Face id (meta-llama/Meta-Llama-3-8B-Instruct) or "
              "config.json path.")  # fmt: skip
@click.option("--gpu", "-g", default=None,
              help="The GPU the server runs on, e.g. h100-sxm or h200_sxm (required).")  # fmt: skip
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option("--engine", default=None,
              help="Serving engine: vllm (default), sglang, tensorrt-llm (trtllm), none, or an "
              "engine profile JSON.")  # fmt: skip
@click.option("--backend", default=None,
              help="vLLM's endpoint type; an engine's name (sglang, tensorrt-llm, vllm) sets the "
              "engine when --engine is not given.")  # fmt: skip
@click.option(
    "--dtype",
    type=click.Choice(["bf16", "fp16", "fp8", "fp4", "mxfp4", "int8", "int4", "fp32", "float32"]),
    default=None,
    help="Weight precision [default: bf16, or a quantized checkpoint's own: int4 for an -AWQ id].",
)  # fmt: skip
@click.option("--dataset-name", default="random", show_default=True,
              help="random, prefix_repetition, sonnet or timed_trace (simulated); vLLM's others "
              f"run as random ({', '.join(VLLM_DATASETS)}).")  # fmt: skip
@click.option("--dataset-path", "--dataset", "dataset_path", default=None,
              help="timed_trace: the trace file (or a shipped trace's name).")  # fmt: skip
@click.option("--input-len", type=int, default=None,
              help="Prompt tokens (vLLM: maps to --random-input-len, --sonnet-input-len).")  # fmt: skip
@click.option("--output-len", type=int, default=None,
              help="Output tokens (vLLM: maps to each dataset's output length).")  # fmt: skip
@click.option("--random-input-len", type=int, default=None, help="[default: 1024]")
@click.option("--random-output-len", type=int, default=None, help="[default: 128]")
@click.option("--random-range-ratio", default="0", show_default=True,
              help="Lengths uniform in [L(1-r), L(1+r)]; or JSON {\"input\": r, \"output\": r}.")  # fmt: skip
@click.option("--random-prefix-len", type=int, default=None,
              help="Tokens every random prompt shares before its own (prefix caching).  "
              "[default: 0]")  # fmt: skip
@click.option("--prefix-repetition-prefix-len", type=int, default=None, help="[default: 256]")
@click.option("--prefix-repetition-suffix-len", type=int, default=None, help="[default: 256]")
@click.option("--prefix-repetition-num-prefixes", type=int, default=None, help="[default: 10]")
@click.option("--prefix-repetition-output-len", type=int, default=None, help="[default: 128]")
@click.option("--sonnet-input-len", type=int, default=None, help="[default: 550]")
@click.option("--sonnet-output-len", type=int, default=None, help="[default: 150]")
@click.option("--sonnet-prefix-len", type=int, default=None, help="[default: 200]")
@click.option("--timed-trace-chunk-hash-size", type=int, default=None,
              help="Tokens per hash id of the trace (default 512, Mooncake's).")  # fmt: skip
@click.option("--timed-trace-sec-multiplier", type=float, default=None,
              help="Trace timestamps times this are seconds (default: the unit read off the file).")  # fmt: skip
@click.option("--self-timed/--no-self-timed", default=None,
              help="timed_trace: at the trace's timestamps (default) or at --request-rate.")  # fmt: skip
@click.option(
    "--num-prompts", type=int, default=1000, show_default=True, help="Requests to send (per point)."
)
@click.option(
    "--request-rate", "rates", multiple=True, metavar="R[,R...]",
    help="Requests per second (Poisson; gamma with --burstiness), or inf: all at once "
    "(the default). Several values (comma-separated or repeated) sweep.",
)  # fmt: skip
@click.option(
    "--max-concurrency", "concurrencies", multiple=True, metavar="C[,C...]",
    help="At most C requests in flight: C clients at --request-rate inf, a cap on the open "
    "loop at a finite rate. Several values sweep.",
)  # fmt: skip
@click.option(
    "--burstiness", type=float, default=1.0, show_default=True,
    help="Gamma shape of the inter-arrival times (1: Poisson; inf: constant gaps).",
)  # fmt: skip
@click.option("--ramp-up-strategy", type=click.Choice(["linear", "exponential"]), default=None,
              help="Ramp the rate from --ramp-up-start-rps to --ramp-up-end-rps over the run.")  # fmt: skip
@click.option("--ramp-up-start-rps", type=float, default=None)
@click.option("--ramp-up-end-rps", type=float, default=None)
@click.option("--seed", type=int, default=0, show_default=True, help="Scenario seed.")
@click.option(
    "--save-result", "save", is_flag=False, flag_value=VLLM_NAME, default=None,
    metavar="[FILE.json]",
    help="Write vLLM's result JSON: to FILE, or as vLLM names it ({label}-{rate}qps-{model}-"
    "{date}.json in --result-dir). A sweep without --append-result: FILE-<load>.json per point.",
)  # fmt: skip
@click.option("--result-dir", default=None, help="Folder of the result file.")
@click.option("--result-filename", default=None, help="The result file's name.")
@click.option("--append-result", is_flag=True,
              help="Append the result to the file as a JSON line (a sweep: every point).")  # fmt: skip
@click.option(
    "--save-detailed", is_flag=True,
    help="Keep the per-request lists (input_lens, ttfts, itls, ...) in the result JSON.",
)  # fmt: skip
@click.option("--metadata", multiple=True, metavar="KEY=VALUE",
              help="Keys recorded in the result JSON, e.g. --metadata version=0.3.3 tp=1.")  # fmt: skip
@click.option("--label", default=None, help="vLLM's result label (recorded as is).")
@click.option(
    "--percentile-metrics", default=DEFAULT_PERCENTILE_METRICS, show_default=True,
    help=f"Metrics to report ({', '.join(METRICS)}); vLLM's default leaves out e2el.",
)  # fmt: skip
@click.option(
    "--metric-percentiles", default="99", show_default=True,
    help="Percentiles reported, comma-separated, e.g. 50,90,99.",
)  # fmt: skip
@click.option(
    "--goodput", multiple=True, metavar="KEY:MS",
    help="SLO targets for request_goodput, e.g. 'ttft:200 tpot:50' (ttft, tpot, e2el in ms).",
)  # fmt: skip
@click.option(
    "--slo", "slo_texts", multiple=True, metavar="METRIC=VALUE",
    help="SLO targets in cbsim's syntax: ttft=300ms (goodput, as --goodput) or ttft_p99=1s "
    "(said met or not).",
)  # fmt: skip
@click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Any other scenario field, e.g. --set scheduler.kind=sarathi (repeatable).",
)  # fmt: skip
@click.option(
    "--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Also write cbsim's results: a run folder (one point) or a sweep folder (several).",
)  # fmt: skip
@ignored_options
def bench_command(out: Path | None, **flags: Any) -> None:
    """Simulate `vllm bench serve` from its flags and print (and save) its result.

    Prompts of --input-len tokens asking for --output-len tokens (vLLM's random dataset, or
    --dataset-name), --num-prompts of them, sent at --request-rate (and/or by --max-concurrency
    clients) to --model on --gpu. Every other flag of `vllm bench serve` is taken too; those
    that mean nothing in a simulation are named on a note: line."""
    plan = bench_plan(flags)
    for line in plan.notes:
        click.echo(f"note: {line}", err=True)
    for warning in plan.warnings:
        click.echo(f"warning: {warning}", err=True)
    runs = run_bench(
        plan.options, plan.points, plan.reporting, out=out, say=lambda m: click.echo(m, err=True)
    )
    targets: list[Path | None] = list(plan.paths) if plan.paths else [None] * len(runs)
    for run, target in zip(runs, targets, strict=True):
        _print_run(run, plan)
        if target is not None:
            metadata = metadata_of(run.results.scenario, plan.options, plan.metadata)
            result = run.result_json(plan.options, plan.reporting, metadata)
            written = write_result_file(target, result, append=plan.append)
            click.echo(f"result: {written}")
    if len(runs) > 1:
        benchmarks = [r.benchmark for r in runs]
        click.echo(sweep_table(plan.points, benchmarks, plan.reporting.percentile_metrics))
    if out is not None:
        click.echo(f"results: {out}")


def _print_run(run: BenchRun, plan: BenchPlan) -> None:
    """One point: vLLM's traffic lines and result block, the SLO verdicts, the notes."""
    for line in traffic_lines(run.point, plan.options.burstiness):
        click.echo(line)
    click.echo(
        result_block(
            run.benchmark,
            run.point,
            percentile_metrics=plan.reporting.percentile_metrics,
            percentiles=plan.reporting.percentiles,
        )
    )
    for line in verdicts(plan.targets, run.results.summary):
        click.echo(line)
    _print_notes(run.results.summary.get("warnings", ""), run.records.approximated)
    _print_failures(run.records.errors)


def _print_notes(warnings: str | list[str], approximated: int) -> None:
    """The run's warnings, and how many requests' ITL are equal shares, on stderr."""
    items = warnings.split("; ") if isinstance(warnings, str) else list(warnings)
    for item in items:
        if item:
            click.echo(f"warning: {item}", err=True)
    if approximated:
        click.echo(
            f"note: {approximated} request(s) sat out decoding steps (preempted or left out by "
            "the token budget): their ITLs are equal shares of their decode time",
            err=True,
        )


def _print_failures(errors: list[str]) -> None:
    """vLLM's failed requests, one line per distinct error with its count, on stderr."""
    failed = Counter(e for e in errors if e)
    if not failed:
        return
    reasons = "; ".join(f"{text} (x{count})" for text, count in failed.most_common(10))
    click.echo(
        f"warning: {sum(failed.values())} of {len(errors)} requests failed: {reasons}", err=True
    )
