"""The ``cbsim bench`` command: ``vllm bench serve``'s flags, a simulated run, vLLM's output.

Option parsing and printing only; the scenario comes from :mod:`cbsim.bench.load`, the run and
the files from :mod:`cbsim.bench.run`, the figures from :mod:`cbsim.bench.vllm_result`, the text
from :mod:`cbsim.bench.render`. Bad flags exit 2 with one ``error:`` line naming the flag.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import click

from cbsim.bench.load import BenchOptions, load_points, parse_concurrencies, parse_rates
from cbsim.bench.render import result_block, sweep_table, traffic_lines
from cbsim.bench.run import (
    Reporting,
    check_result_file,
    metadata_of,
    run_bench,
    save_paths,
    write_result_file,
)
from cbsim.bench.vllm_result import METRICS
from cbsim.errors import CbsimError, did_you_mean
from cbsim.limits import REQUESTS, SEED, TOKENS, Limit

__all__ = ["bench_command"]

DEFAULT_PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
GOODPUT_METRICS = ("ttft", "tpot", "e2el")


def parse_percentile_metrics(text: str) -> tuple[str, ...]:
    """``--percentile-metrics``: vLLM's metric names, comma-separated."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise CbsimError("give at least one metric", field="--percentile-metrics")
    for name in names:
        if name not in METRICS:
            raise CbsimError(
                f"unknown metric {name!r}; known: {', '.join(METRICS)}"
                f"{did_you_mean(name, METRICS)}",
                field="--percentile-metrics",
            )
    return names


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``--metric-percentiles``: numbers in [0, 100], comma-separated."""
    values: list[float] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            raise CbsimError(f"{item!r} is not a number", field="--metric-percentiles") from None
        if not 0 <= value <= 100:
            raise CbsimError(f"{item}: must be within [0, 100]", field="--metric-percentiles")
        values.append(value)
    if not values:
        raise CbsimError("give at least one percentile", field="--metric-percentiles")
    return tuple(dict.fromkeys(values))


def parse_goodput(values: tuple[str, ...]) -> dict[str, float]:
    """``--goodput``: ``KEY:MS`` pairs (ttft, tpot, e2el), space- or comma-separated, repeatable."""
    targets: dict[str, float] = {}
    for item in (i for v in values for i in v.replace(",", " ").split()):
        name, sep, number = item.partition(":")
        if not sep:
            raise CbsimError(f"{item!r} is not KEY:VALUE (e.g. ttft:200)", field="--goodput")
        if name not in GOODPUT_METRICS:
            raise CbsimError(
                f"unknown metric {name!r}; known: {', '.join(GOODPUT_METRICS)}"
                f"{did_you_mean(name, GOODPUT_METRICS)}",
                field="--goodput",
            )
        try:
            ms = float(number)
        except ValueError:
            raise CbsimError(
                f"{item!r}: {number!r} is not milliseconds", field="--goodput"
            ) from None
        if not ms >= 0 or math.isinf(ms):
            raise CbsimError(f"{item!r}: must be a finite number >= 0", field="--goodput")
        targets[name] = ms
    return targets


def _check_within(value: int, limit: Limit, option: str) -> None:
    problem = limit.violation(value)
    if problem is not None:
        raise CbsimError(problem, field=option)


def _check_ratio(ratio: float) -> None:
    if not 0 <= ratio < 1:
        raise CbsimError(f"must be within [0, 1), got {ratio}", field="--random-range-ratio")


def _check_burstiness(burstiness: float) -> None:
    if not burstiness > 0:
        raise CbsimError(f"must be positive, got {burstiness}", field="--burstiness")


@click.command("bench")
@click.option("--model", "-m", required=True, help="Catalog model name or a config.json path.")
@click.option("--gpu", "-g", required=True, help="Catalog GPU name, e.g. h100-sxm.")
@click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option(
    "--engine", default="vllm", show_default=True,
    help="Serving engine: vllm, sglang, tensorrt-llm, none, or an engine profile JSON.",
)  # fmt: skip
@click.option(
    "--dtype", type=click.Choice(["bf16", "fp16", "fp8", "fp4", "mxfp4"]), default="bf16",
    show_default=True, help="Weight precision.",
)  # fmt: skip
@click.option("--input-len", type=int, default=1024, show_default=True, help="Prompt tokens.")
@click.option("--output-len", type=int, default=128, show_default=True, help="Output tokens.")
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
    help="C closed-loop clients (at the default --request-rate inf). Several values sweep.",
)  # fmt: skip
@click.option(
    "--burstiness", type=float, default=1.0, show_default=True,
    help="Gamma shape of the inter-arrival times (1: Poisson; coefficient of variation 1/sqrt(b)).",
)  # fmt: skip
@click.option(
    "--random-range-ratio", type=float, default=0.0, show_default=True,
    help="Lengths uniform in [L(1-r), L(1+r)] (0: fixed), as vLLM's random dataset.",
)  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Scenario seed.")
@click.option(
    "--save-result", "save", type=click.Path(dir_okay=False, path_type=Path), default=None,
    metavar="FILE.json",
    help="Write vLLM's result JSON (a sweep: FILE-<load>.json per point, e.g. FILE-2qps.json).",
)  # fmt: skip
@click.option(
    "--save-detailed", is_flag=True,
    help="Keep the per-request lists (input_lens, ttfts, itls, ...) in the result JSON.",
)  # fmt: skip
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
    "--set", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Any other scenario field, e.g. --set scheduler.kind=sarathi (repeatable).",
)  # fmt: skip
@click.option(
    "--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Also write cbsim's results: a run folder (one point) or a sweep folder (several).",
)  # fmt: skip
def bench_command(
    model: str,
    gpu: str,
    tp: int,
    engine: str,
    dtype: str,
    input_len: int,
    output_len: int,
    num_prompts: int,
    rates: tuple[str, ...],
    concurrencies: tuple[str, ...],
    burstiness: float,
    random_range_ratio: float,
    seed: int,
    save: Path | None,
    save_detailed: bool,
    label: str | None,
    percentile_metrics: str,
    metric_percentiles: str,
    goodput: tuple[str, ...],
    overrides: tuple[str, ...],
    out: Path | None,
) -> None:
    """Simulate `vllm bench serve` from its flags and print (and save) its result.

    A random dataset of --num-prompts prompts of --input-len tokens asking for --output-len
    tokens, sent at --request-rate (or by --max-concurrency clients) to --model on --gpu."""
    _check_within(input_len, TOKENS, "--input-len")
    _check_within(output_len, TOKENS, "--output-len")
    _check_within(num_prompts, REQUESTS, "--num-prompts")
    _check_within(seed, SEED, "--seed")
    _check_ratio(random_range_ratio)
    _check_burstiness(burstiness)
    options = BenchOptions(
        model=model,
        gpu=gpu,
        tp=tp,
        engine=engine,
        dtype=dtype,
        input_len=input_len,
        output_len=output_len,
        num_prompts=num_prompts,
        random_range_ratio=random_range_ratio,
        burstiness=burstiness,
        seed=seed,
        overrides=overrides,
        goodput_ms=parse_goodput(goodput),
    )
    reporting = Reporting(
        percentile_metrics=parse_percentile_metrics(percentile_metrics),
        percentiles=parse_percentiles(metric_percentiles),
        label=label,
        detailed=save_detailed,
    )
    points = load_points(parse_rates(rates), parse_concurrencies(concurrencies))
    paths = save_paths(save, points) if save is not None else []
    for each in paths:
        check_result_file(each)
    runs = run_bench(options, points, reporting, out=out, say=lambda m: click.echo(m, err=True))
    targets: list[Path | None] = list(paths) if paths else [None] * len(runs)
    for run, target in zip(runs, targets, strict=True):
        for line in traffic_lines(run.point, burstiness):
            click.echo(line)
        click.echo(
            result_block(
                run.benchmark,
                run.point,
                percentile_metrics=reporting.percentile_metrics,
                percentiles=reporting.percentiles,
            )
        )
        _print_notes(run.results.summary.get("warnings", ""), run.records.approximated)
        _print_failures(run.records.errors)
        if target is not None:
            metadata = metadata_of(run.results.scenario, options)
            written = write_result_file(target, run.result_json(options, reporting, metadata))
            click.echo(f"result: {written}")
    if len(runs) > 1:
        click.echo(sweep_table(points, [r.benchmark for r in runs], reporting.percentile_metrics))
    if out is not None:
        click.echo(f"results: {out}")


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
