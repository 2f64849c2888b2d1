"""The ``cbsim`` command line: run, validate and cost.

* ``cbsim run SCENARIO.yaml [--out DIR] [--seed N] [--set dotted.key=value ...] [--quiet]
  [--stream]`` simulates a scenario and writes its results (parquet + ``summary.json`` +
  ``scenario.yaml``) to ``--out`` or ``results/<scenario name>/<UTC timestamp>-s<seed>/``;
  ``--stream`` writes the iterations during the run instead of holding them (automatic with
  ``--out`` above :data:`AUTO_STREAM_REQUESTS` open-loop requests).
* ``cbsim validate SCENARIO.yaml [--set ...]`` loads and validates a scenario, nothing more.
* ``cbsim cost --model M --gpu G --batch 1x1000,512x0`` prints the roofline cost model's
  per-op breakdown of one iteration.
* ``cbsim catalog [gpus|models|engines|traces]`` lists the names a scenario can use.

Errors a user can cause (:class:`~cbsim.common.errors.CbsimError`: a file, a field, a name) print one
``error: ...`` line on stderr and exit with status 2, as do usage errors; an interrupt prints
``interrupted`` and exits with 130 (results are written atomically, so nothing is half-written).
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from cbsim import __version__
from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import get_model
from cbsim.cli.terminal import long_prefill_cap, print_run, scheduler_name
from cbsim.common.console import wide_console
from cbsim.common.errors import CbsimError, UserError
from cbsim.common.interrupts import EXIT_INTERRUPTED, Interrupted, caused_by_interrupt
from cbsim.common.limits import BATCH_SIZE, CACHED_TOKENS, TOKENS, option_within
from cbsim.common.output_folders import check_path, check_replaceable, new_temporary_file
from cbsim.common.progress import CountLines
from cbsim.cost import CostModel
from cbsim.engine.loop import ProgressCallback
from cbsim.memory.prefix_cache import prefix_caching_on
from cbsim.run.loading import load_scenario
from cbsim.run.preflight import preflight
from cbsim.run.results import RUN_RESULT, Results
from cbsim.run.simulate import compare_no_spec as compare_speculation
from cbsim.run.simulate import simulate
from cbsim.schema.scenario import Scenario
from cbsim.schema.setting_warnings import implausible_targets
from cbsim.schema.slo_syntax import (
    AT_LEAST,
    SloTarget,
    check_known,
    parse_slo,
    per_request_targets,
    verdicts,
)
from cbsim.workload.build import build_workload
from cbsim.workload.drawn import ClosedLoopWorkload

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table

EXIT_USER_ERROR = 2

LAZY_COMMANDS: dict[str, dict[str, tuple[str, str]]] = {
    "cli": {
        "sweep": ("cbsim.studies.sweep.runner", "sweep_command"),
        "capacity": ("cbsim.studies.capacity", "capacity_command"),
        "report": ("cbsim.studies.report", "report_command"),
        "catalog": ("cbsim.cli.catalog", "catalog_command"),
        "plan": ("cbsim.studies.plan", "plan_command"),
        "bench": ("cbsim.studies.bench", "bench_command"),
        "spec-advise": ("cbsim.engine.speculative.advise", "spec_advise_command"),
    },
    "calibrate": {
        "measure": ("cbsim.studies.calibration.measure", "measure_command"),
        "e2e": ("cbsim.studies.calibration.e2e_report", "e2e_command"),
    },
}
"""Commands whose modules are imported when the command is looked up: group, name, module and
the command's attribute there."""


# --------------------------------------------------------------------------- errors


class CbsimGroup(click.Group):
    """A click group that turns user errors and interrupts into clean exits, and imports the
    commands of :data:`LAZY_COMMANDS` only when they are run or listed (their modules, the
    calibration reports' above all, are not imported by the other commands)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS.get(self.name or "", {})})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        lazy = LAZY_COMMANDS.get(self.name or "", {})
        if command is None and cmd_name in lazy:
            module, attribute = lazy[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            self.add_command(command, cmd_name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CbsimError as err:
            raise UserError(str(err)) from None
        except KeyboardInterrupt:
            raise Interrupted() from None
        except Exception as err:
            if caused_by_interrupt(err):
                raise Interrupted() from None
            raise


# --------------------------------------------------------------------------- formatting


def format_duration(seconds: float) -> str:
    """Simulated time for the progress display: ``6.5 s``, ``12m05s``, ``3h02m10s``."""
    if not math.isfinite(seconds) or seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    return f"{minutes}m{secs:02d}s"


def _per_share(dp: int, pp: int) -> str:
    """How the scheduler's limits apply with data-parallel ranks or pipeline micro-batches."""
    if dp > 1:
        return f" per rank, {dp} ranks"
    if pp > 1:
        return f" per micro-batch, {pp} in flight"
    return ""


def describe(scenario: Scenario) -> str:
    """One line: model, GPU, tensor parallelism, precisions, replicas, engine, scheduler and its
    budget, prefix caching, speculation (with the engine's defaults filled in); with pools, one
    such description per pool."""
    if scenario.cluster.pooled:
        from cbsim.schema.pools import pool_plans

        return "; ".join(f"{plan.name}: {describe(plan.scenario)}" for plan in pool_plans(scenario))
    cluster = scenario.cluster
    sched = scenario.scheduler
    spec = scenario.speculative
    if spec.enabled:
        speculation = f"speculation on ({spec.proposer.kind}, k policy {spec.policy.kind})"
    else:
        speculation = "speculation off"
    replicas = f"{cluster.replicas} replica{'s' if cluster.replicas != 1 else ''}"
    if cluster.autoscale is not None:
        scale = cluster.autoscale
        replicas = (
            f"{scale.min_replicas}-{scale.max_replicas} replicas autoscaled on {scale.metric}"
        )
    if cluster.replicas > 1:
        replicas += f" ({cluster.router})"
    caching = "prefix caching on" if prefix_caching_on(scenario) else "prefix caching off"
    budget = sched.max_batched_tokens
    label, cap = scheduler_name(scenario), long_prefill_cap(scenario)
    return (
        f"{cluster.model} on {cluster.gpu}, tp={cluster.tp}"
        f"{f', dp={cluster.dp}, ep={cluster.ep}' if cluster.dp > 1 else ''}"
        f"{f', pp={cluster.pp}' if cluster.pp > 1 else ''}, {cluster.dtype} weights, "
        f"{cluster.effective_kv_dtype} KV cache, {replicas}, engine {cluster.engine}, "
        f"scheduler {label}, token budget {budget}{cap}, batch up to {sched.max_batch_size}"
        f"{_per_share(cluster.dp, cluster.pp)}, "
        f"blocks of {sched.block_size}, {caching}, {speculation}"
    )


# --------------------------------------------------------------------------- run helpers


def progress_enabled(quiet: bool) -> bool:
    """Whether to draw a progress bar: only on a terminal and not with ``--quiet``."""
    if quiet:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextmanager
def progress_display(enabled: bool, quiet: bool = True) -> Iterator[ProgressCallback | None]:
    """A rich progress bar on stderr (requests done / total, simulated time) when ``enabled``
    (a terminal); else, unless ``quiet``, plain lines once the run has taken ten seconds (one
    per tenth of its requests, :class:`cbsim.common.progress.CountLines`)."""
    if not enabled:
        yield None if quiet else CountLines("run", "requests")
        return
    from rich.console import Console  # a terminal's bar: rich is imported when one shows
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("[bold]simulating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests"),
        TextColumn("[cyan]sim {task.fields[sim]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress:
        task = progress.add_task("simulating", total=None, sim=format_duration(0.0))

        def update(done: int, total: int, sim_seconds: float) -> None:
            progress.update(task, completed=done, total=total, sim=format_duration(sim_seconds))

        yield update


def run_id(seed: int, now: datetime | None = None) -> str:
    """``YYYYmmdd-HHMMSS-s<seed>`` from the UTC time."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-s{seed}"


def _check_out(out: Path, scenario: Path) -> None:
    """Refuse, before simulating, an ``--out`` that cannot be written (:func:`check_path`) or
    that writing would destroy: one holding anything but an earlier run result (see
    :mod:`cbsim.common.output_folders`), or the scenario file itself."""
    try:
        check_path(out)
        if scenario.resolve().is_relative_to(out.resolve()):
            raise CbsimError(
                f"holds {scenario}, the scenario file being run, and --out is replaced as a "
                "whole: give a new or empty folder",
                source=str(out),
            )
        check_replaceable(out, RUN_RESULT)
    except CbsimError as err:
        raise err.located(field="--out") from None


AUTO_STREAM_REQUESTS = 500_000
"""``cbsim run --out`` streams the iterations of an open-loop workload of more requests."""


def _request_count(scenario: Scenario, source: str) -> int | None:
    """How many requests an open-loop workload sends (None: a closed loop)."""
    if scenario.workload.closed_loop is not None:
        return None
    if scenario.workload.num_requests is not None:
        return scenario.workload.num_requests
    workload = build_workload(scenario, source)
    return None if isinstance(workload, ClosedLoopWorkload) else len(workload)


def _stream_file(out: Path | None, name: str) -> Path:
    """A hidden file for the streamed iterations beside the result directory (on its file
    system, so that writing the results links it rather than copying it), named as cbsim's
    temporaries are: a killed run's is deleted by the next write there."""
    parent = out.resolve().parent if out is not None else (Path("results") / name).resolve()
    stem = out.name if out is not None else name
    return new_temporary_file(parent, f"{stem[:24]}.iterations.parquet")


def _should_stream(stream: bool, scenario: Scenario, out: Path | None, source: str) -> bool:
    """``--stream``, or ``--out`` with more than :data:`AUTO_STREAM_REQUESTS` open-loop requests
    (a note on stderr says so)."""
    if stream or out is None:
        return stream
    count = _request_count(scenario, source)
    if count is None or count <= AUTO_STREAM_REQUESTS:
        return False
    click.echo(
        f"note: {count:,} requests: streaming iterations to {out}/iterations.parquet", err=True
    )
    return True


def _write_results(results: Results, out: Path | None, rid: str) -> Path:
    """Write to ``out`` or to a new run folder; OS errors become user errors."""
    target = out if out is not None else Path("results") / results.scenario.name
    try:
        if out is not None:
            results.write(out)
            return out
        return results.write_new(target, rid)
    except OSError as err:
        where = err.filename or target
        raise UserError(f"{where}: cannot write results: {err.strerror or err}") from None


# --------------------------------------------------------------------------- commands


def _parse_batch_entries(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> list[tuple[int, int]]:
    """``--batch`` values (``QxC``, comma-separated and/or repeated) as (new, cached) pairs."""
    entries: list[tuple[int, int]] = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            q_text, sep, c_text = item.lower().partition("x")
            try:
                if not sep:
                    raise ValueError
                q, c = int(q_text), int(c_text)
            except ValueError:
                raise click.BadParameter(
                    f"{item!r} is not QxC (new tokens x cached tokens), e.g. 1x1000 or 512x0",
                    ctx=ctx,
                    param=param,
                ) from None
            if q < 1 or c < 0:
                raise click.BadParameter(
                    f"{item!r}: need new tokens >= 1 and cached tokens >= 0", ctx=ctx, param=param
                )
            problem = TOKENS.violation(q) or CACHED_TOKENS.violation(c)
            if problem is not None:
                raise click.BadParameter(f"{item!r}: {problem}", ctx=ctx, param=param)
            entries.append((q, c))
            if len(entries) > BATCH_SIZE.high:
                raise click.BadParameter(
                    f"more than {BATCH_SIZE.high:,} entries ({BATCH_SIZE.reason})",
                    ctx=ctx,
                    param=param,
                )
    return entries


_SET_HELP = "Override a scenario field, e.g. --set scheduler.kind=sarathi (repeatable)."


@click.group(cls=CbsimGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="cbsim")
def cli() -> None:
    """cbsim: simulate continuous-batching LLM serving with speculative decoding."""


@cli.command()
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Result folder: new, empty, or an earlier run result (replaced). "
    "Default: results/<name>/<run-id>/.",
)
@click.option("--seed", type=int, default=None, help="Replace the scenario's seed.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress or summary; print only the result directory."
)
@click.option(
    "--compare-no-spec",
    is_flag=True,
    help="Also run with speculation off: both side by side, the speedups added to the summary "
    "and the baseline's summary written as summary_no_spec.json.",
)
@click.option(
    "--stream",
    is_flag=True,
    help="Write iterations.parquet during the run (row groups) instead of holding it in memory; "
    f"automatic with --out above {AUTO_STREAM_REQUESTS:,} requests.",
)
@click.option(
    "--slo",
    "slo_texts",
    multiple=True,
    metavar="METRIC=VALUE",
    help="SLO targets, e.g. ttft=300ms,tpot=50ms (per request: the scenario's slo) or "
    "ttft_p99=2s (the run's p99, said met or not); units ms/s, a bare number in seconds, "
    "vLLM's p99_ttft_ms=300 and ttft:300 (ms) too.",
)
def run(
    scenario: Path,
    out: Path | None,
    seed: int | None,
    overrides: tuple[str, ...],
    quiet: bool,
    compare_no_spec: bool,
    stream: bool,
    slo_texts: tuple[str, ...],
) -> None:
    """Simulate SCENARIO (a YAML file) and write its results."""
    started = datetime.now(UTC)
    targets = parse_slo(slo_texts, field="--slo")
    check_known(targets, AT_LEAST, field="--slo")
    overrides = (*overrides, *slo_overrides(targets))
    loaded = load_scenario(scenario, overrides=list(overrides), seed=seed)
    for warning in implausible_targets(targets, per_request=False):
        click.echo(f"warning: {warning}", err=True)
    if out is not None:
        _check_out(out, scenario)
    else:  # the run folder is created after the run: find out before it whether it can be
        check_path(Path("results") / loaded.name / run_id(loaded.seed, started))
    if compare_no_spec and not loaded.speculative.enabled:
        raise CbsimError("--compare-no-spec needs speculative.enabled: true", source=str(scenario))
    stream_to: Path | None = None
    if _should_stream(stream, loaded, out, str(scenario)):
        stream_to = _stream_file(out, loaded.name)
    try:
        with progress_display(progress_enabled(quiet), quiet) as callback:
            results = simulate(loaded, progress=callback, source=str(scenario), stream_to=stream_to)
        if compare_no_spec:
            compare_speculation(results, source=str(scenario))
        written = _write_results(results, out, run_id(loaded.seed, started))
    finally:
        if stream_to is not None:
            stream_to.unlink(missing_ok=True)  # a failed run's (a written one's is gone already)
    _print_warnings(results.summary.get("warnings", ""))
    if quiet:
        click.echo(str(written))
    else:
        console = wide_console()
        print_run(console, results, overrides)
        for line in verdicts(targets, results.summary):
            console.print(line, highlight=False, soft_wrap=True)
        console.print(f"results: {written}", highlight=False, soft_wrap=True)
    _fail_if_nothing_served(results.summary, str(scenario))


def slo_overrides(targets: Sequence[SloTarget]) -> list[str]:
    """The per-request targets of ``--slo`` as ``--set slo.<field>=<seconds>`` overrides."""
    return [f"slo.{key}={value!r}" for key, value in per_request_targets(targets).items()]


def _fail_if_nothing_served(summary: Mapping[str, Any], source: str) -> None:
    """Exit with status 1 when the run rejected every request (its results are written: they
    say why request by request)."""
    requests = int(summary.get("requests", 0))
    if requests and int(summary.get("rejected", 0)) == requests:
        click.echo(
            f"error: {source}: every one of the {requests:,} requests was rejected", err=True
        )
        raise click.exceptions.Exit(1)


def _print_warnings(warnings: str | list[str]) -> None:
    """Each warning as one ``warning:`` line on stderr."""
    items = warnings.split("; ") if isinstance(warnings, str) else warnings
    for item in items:
        if item:
            click.echo(f"warning: {item}", err=True)


@cli.command()
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)
def validate(scenario: Path, overrides: tuple[str, ...]) -> None:
    """Check SCENARIO (a YAML file) as a run would, without running it, and say what it would
    run: requests, time span, arrival rate, length percentiles, cluster and GPUs in total."""
    loaded = load_scenario(scenario, overrides=list(overrides))
    checked = preflight(loaded, source=str(scenario))
    click.echo(f"OK: {scenario} ({loaded.name})")
    click.echo(describe(loaded))
    for line in checked.lines:
        click.echo(line)
    _print_warnings(checked.warnings)


@cli.command()
@click.option("--model", "-m", required=True, help="Catalog model name or a config.json path.")
@click.option("--gpu", "-g", required=True, help="Catalog GPU name, e.g. h100-sxm.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--ep",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Expert parallelism of a mixture-of-experts model: 1, or tp (experts spread over the "
    "tensor-parallel group), or tp x dp with --dp.",
)
@click.option(
    "--dp",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Attention data-parallel ranks of a mixture-of-experts model (each tp GPUs, its own "
    "share of the batch; needs --ep tp x dp). The batch is the whole replica's.",
)
@click.option(
    "--pp",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Pipeline stages (each tp GPUs and a share of the layers; the batch split into pp "
    "micro-batches). The batch is the whole replica's.",
)
@click.option(
    "--expert-routing",
    type=click.Choice(["balanced", "skewed"]),
    default="balanced",
    show_default=True,
    help="How the router spreads tokens over experts (mixture-of-experts models).",
)
@click.option(
    "--dtype",
    type=click.Choice(["bf16", "fp16", "fp8", "fp4", "mxfp4", "int8", "int4", "fp32", "float32"]),
    default="bf16",
    show_default=True,
    help="Weight precision (fp4: NVFP4, Blackwell GPUs only; mxfp4: a mixture of experts' "
    "expert weights, the rest bf16; int8: W8A8; int4: AWQ/GPTQ/w4a16, NVIDIA only; fp32: "
    "vLLM's --dtype float32, dense models).",
)
@click.option(
    "--kv-dtype",
    type=click.Choice(["bf16", "fp16", "fp8", "fp32"]),
    default=None,
    help="KV-cache precision (default: what the engine keeps for --dtype weights).",
)
@click.option(
    "--batch",
    "batch",
    multiple=True,
    callback=_parse_batch_entries,
    metavar="QxC[,QxC...]",
    help="Batch entries: new tokens x cached tokens, e.g. 1x1000,1x2000,512x0 (repeatable).",
)
@click.option(
    "--decode",
    type=int,
    callback=option_within(BATCH_SIZE),
    default=None,
    help="Add this many decode entries (1 new token each) at --context cached tokens.",
)
@click.option(
    "--context",
    type=int,
    callback=option_within(CACHED_TOKENS),
    default=None,
    help="Cached tokens of each --decode.",
)
@click.option(
    "--prefill",
    type=int,
    callback=option_within(TOKENS),
    multiple=True,
    help="Add a prefill of this many tokens (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print {op: seconds, ..., total_s} as JSON.")
@click.option(
    "--calibration",
    default="default",
    show_default=True,
    help="Calibration profile of the GPU (a name, a JSON path, or 'none' for the raw roofline); "
    "default: the engine's own kernels on this GPU where it has them.",
)
@click.option(
    "--engine",
    default="vllm",
    show_default=True,
    help="Serving engine (vllm, sglang, tensorrt-llm, none = bare roofline, or a profile JSON).",
)
def cost(
    model: str,
    gpu: str,
    tp: int,
    ep: int,
    dp: int,
    pp: int,
    expert_routing: str,
    dtype: str,
    kv_dtype: str | None,
    batch: list[tuple[int, int]],
    decode: int | None,
    context: int | None,
    prefill: tuple[int, ...],
    as_json: bool,
    calibration: str,
    engine: str,
) -> None:
    """Per-op roofline cost of one iteration over a batch."""
    entries = list(batch)
    if decode is not None:
        if context is None:
            raise click.UsageError("--decode needs --context (cached tokens per decode)")
        entries.extend([(1, context)] * decode)
    elif context is not None:
        raise click.UsageError("--context only applies with --decode")
    entries.extend((p, 0) for p in prefill)
    if not entries:
        raise click.UsageError("give a batch: --batch QxC,..., --decode B --context C, --prefill P")
    if len(entries) > BATCH_SIZE.high:
        raise CbsimError(
            f"{len(entries):,} entries in one batch; {BATCH_SIZE.violation(len(entries))}",
            field="--batch/--decode/--prefill",
        )
    try:
        model_shape = get_model(model)
    except CbsimError as err:  # a config.json's own file and key follow the option
        raise CbsimError(str(err), field="--model") from None
    try:
        gpu_spec = get_gpu(gpu)
    except CbsimError as err:
        raise err.located(field="--gpu") from None
    from cbsim.cost.engine_profile import load_engine_profile

    try:
        engine_profile = load_engine_profile(engine)
    except CbsimError as err:
        raise err.located(field="--engine") from None
    from cbsim.catalog.quantization import canonical_dtype

    dtype = canonical_dtype(dtype)
    try:
        gpu_spec.peak_flops(dtype)
    except CbsimError as err:
        raise CbsimError(err.message, field="--dtype") from None
    node = gpu_spec.gpus_per_node
    if tp & (tp - 1) or tp > 64 or (tp > node and tp % node):
        raise CbsimError(
            f"tp must be a power of two up to 64 (beyond the {node} GPUs of one "
            f"{gpu_spec.name} node, whole nodes), got {tp}",
            field="--tp",
        )
    split_problem = model_shape.attention_split_problem(tp)
    if split_problem:
        raise CbsimError(split_problem, field="--tp")
    if tp * dp > node and (tp * dp) % node:
        raise CbsimError(
            f"tp x dp = {tp * dp} exceeds the {node} GPUs of one {gpu_spec.name} node "
            "without filling whole nodes",
            field="--dp",
        )
    try:
        cost_model = CostModel(
            model=model_shape,
            gpu=gpu_spec,
            tp=tp,
            dtype=dtype,
            kv_dtype=kv_dtype,
            calibration=calibration,
            engine=engine_profile,
            expert_routing=expert_routing,
            ep=ep,
            dp=dp,
            pp=pp,
        )
    except CbsimError as err:
        if err.field in ("ep", "dp", "pp", "dtype", "kv_dtype"):
            raise CbsimError(err.message, field=f"--{err.field.replace('_', '-')}") from None
        raise err.located(field="--calibration") from None
    breakdown = cost_model.breakdown(entries)
    total = cost_model.iteration_time(entries)
    if as_json:
        click.echo(json.dumps({**breakdown, "total_s": total}, indent=2))
        return
    tokens = sum(q for q, _ in entries)
    console = wide_console()
    console.print(
        f"{model_shape.name} on {gpu_spec.name}, tp={tp}{f', dp={dp}, ep={ep}' if dp > 1 else ''}"
        f"{f', pp={pp}' if pp > 1 else ''}, "
        f"{dtype} weights, "
        f"{cost_model.kv_dtype} KV, engine {engine_profile.engine}: "
        f"{len(entries)} request{'s' if len(entries) != 1 else ''}, {tokens} new tokens",
        highlight=False,
    )
    from rich.table import Table

    table = Table()
    table.add_column("op")
    table.add_column("ms", justify="right")
    table.add_column("%", justify="right")
    for op, seconds in breakdown.items():
        share = 100.0 * seconds / total if total > 0 else 0.0
        table.add_row(op, f"{seconds * 1e3:.4f}", f"{share:.1f}")
    table.add_section()
    table.add_row("total", f"{total * 1e3:.4f}", "100.0")
    console.print(table)
    console.print(f"total iteration time: {total * 1e3:.4f} ms", highlight=False)
    if dtype == "fp32" and cost_model.calibration is not None:
        from cbsim.engine.cost_models import fp32_note

        console.print(f"note: {fp32_note(gpu_spec.name, cost_model.kv_dtype)}", highlight=False)


# --------------------------------------------------------------------------- other commands


@cli.group(cls=CbsimGroup)
def calibrate() -> None:
    """Fit the cost model to measured GPU timings, report its error, or measure your own GPU."""


def _error_table(frame: pd.DataFrame, title: str) -> Table:
    from rich.table import Table

    table = Table(title=title)
    for column in ("gpu", "family", "method", "median APE %", "P90 APE %", "points"):
        table.add_column(column, justify="right" if "%" in column or column == "points" else "left")
    for row in frame.itertuples(index=False):
        table.add_row(
            str(row.gpu),
            str(row.family),
            str(row.method),
            f"{row.median_ape_pct:.1f}",
            f"{row.p90_ape_pct:.1f}",
            f"{row.points:,}",
        )
    return table


def _say(message: str) -> None:
    """Progress of a long step, as one line on stderr (stdout keeps the results)."""
    click.echo(f"{message} ...", err=True)


@calibrate.command("fit")
@click.option("--gpu", "-g", required=True, help="Catalog GPU name the measurements are from.")
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of your own measurements (gemm.parquet, ...); default: the shipped tables.",
)
@click.option(
    "--name",
    default=None,
    help="Profile name (default aiconfigurator-vllm, or 'custom' with --data).",
)
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Profile JSON to write (default results/calibration/<gpu>/<name>.json).",
)
@click.option("--no-validate", is_flag=True, help="Skip the held-out cross-validation.")
def calibrate_fit(
    gpu: str, data: Path | None, name: str | None, out: Path | None, no_validate: bool
) -> None:
    """Fit a calibration profile for GPU and print its held-out error per op family."""
    from cbsim.studies.calibration.fit import DEFAULT_NAME, fit_profile, percent_table
    from cbsim.studies.calibration.profile import CalibrationProfile, check_json_target, write_json

    gpu = get_gpu(gpu).name
    profile_name = name or (DEFAULT_NAME if data is None else "custom")
    target = out or Path("results") / "calibration" / gpu / f"{profile_name}.json"
    try:
        check_json_target(CalibrationProfile, target)  # before the fit
    except CbsimError as err:
        raise err.located(field="--out") from None
    profile, errors, _ = fit_profile(
        gpu, data, name=profile_name, validate=not no_validate, progress=_say
    )
    write_json(profile, target)
    if not errors.empty:
        wide_console().print(_error_table(percent_table(errors), f"{gpu}: held-out error"))
    click.echo(f"profile: {target}  (use it with cluster.calibration: {target})")


@calibrate.command("report")
@click.option("--gpu", "-g", default=None, help="Catalog GPU name (kernel calibration report).")
@click.option(
    "--e2e", "end_to_end", is_flag=True,
    help="Instead: each engine's predicted vs measured TTFT, TPOT and throughput on the shipped "
    "H100 benchmarks, leave-one-model-out (several minutes).",
)  # fmt: skip
@click.option(
    "--data", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Folder of your own measurements; default: the shipped tables.",
)  # fmt: skip
@click.option(
    "--out", "-o", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Folder for errors.csv, report.md and predicted_vs_measured.png.",
)  # fmt: skip
def calibrate_report(
    gpu: str | None, end_to_end: bool, data: Path | None, out: Path | None
) -> None:
    """Held-out error per op family of GPU's calibration, with a predicted-vs-measured plot; or,
    with --e2e, the engine profiles against measured serving benchmarks."""
    if end_to_end:
        from cbsim.studies.calibration.e2e_report import print_shared_report, shared_report

        folder = out or Path("results") / "calibration" / "e2e"
        print_shared_report(shared_report(folder, progress=lambda m: click.echo(m, err=True)))
        click.echo(f"report: {folder}")
        return
    if gpu is None:
        raise click.UsageError("give --gpu (or --e2e)")
    from cbsim.studies.calibration.fit import (
        TRANSFER_SOURCE,
        check_kernel_report,
        fit_profile,
        leave_one_gpu_out,
        percent_table,
        write_kernel_report,
    )

    gpu = get_gpu(gpu).name
    folder = out or Path("results") / "calibration" / gpu
    check_kernel_report(folder)  # before the fit
    if gpu in TRANSFER_SOURCE and data is None:
        raise CbsimError(
            f"{gpu} has no measurements to report on (its profile is transferred from "
            f"{TRANSFER_SOURCE[gpu]}); give --data with your own",
            field="--gpu",
        )
    _, errors, points = fit_profile(gpu, data, progress=_say)
    frames = [errors]
    if gpu == "h200" and data is None:
        _say("h200: predicting from h100-sxm's fit (leave-one-GPU-out)")
        frames.append(leave_one_gpu_out("h100-sxm", "h200"))
    import pandas as pd

    table = percent_table(pd.concat(frames, ignore_index=True))
    write_kernel_report(folder, gpu, table, points)
    wide_console().print(_error_table(table, f"{gpu}: held-out error"))
    click.echo(f"report: {folder}")


@calibrate.command("compare")
@click.option("--gpu", "-g", required=True, help="Catalog GPU name the measurements are from.")
@click.option(
    "--data", required=True, type=click.Path(file_okay=False, path_type=Path),
    help="Folder of measurements (what `cbsim calibrate measure` writes).",
)  # fmt: skip
@click.option(
    "--calibration", default="default", show_default=True,
    help="Shipped profile name or a profile JSON path.",
)  # fmt: skip
def calibrate_compare(gpu: str, data: Path, calibration: str) -> None:
    """How well the shipped profile for GPU predicts your own measurements, per table."""
    from rich.table import Table

    from cbsim.studies.calibration.compare import compare_measurements

    frame = compare_measurements(gpu, data, calibration)
    table = Table(title=f"{get_gpu(gpu).name} ({calibration}) on {data}")
    for column in ("table", "dtype", "points", "median APE %", "P90 APE %", "pred/meas"):
        table.add_column(column, justify="left" if column in ("table", "dtype") else "right")
    for row in frame.itertuples(index=False):
        if row.note:
            table.add_row(str(row.table), str(row.dtype), f"{row.points:,}", "", "", str(row.note))
            continue
        table.add_row(
            str(row.table),
            str(row.dtype),
            f"{row.points:,}",
            f"{row.median_ape_pct:.1f}",
            f"{row.p90_ape_pct:.1f}",
            f"{row.median_ratio:.3f}",
        )
    wide_console().print(table)


# --------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point: run the CLI and exit with its status.

    0 success, 2 bad input or usage (one ``error:`` line, no traceback), 3 a capacity plan that
    nothing meets (``cbsim capacity``: one ``infeasible:`` line after the plan), 130 interrupted.
    """
    try:
        rv = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="cbsim",
            standalone_mode=False,
        )
    except click.ClickException as err:  # usage errors (2), UserError (2), Interrupted (130)
        err.show()
        sys.exit(err.exit_code)
    except CbsimError as err:  # raised outside a command (should not happen; be safe)
        UserError(str(err)).show()
        sys.exit(EXIT_USER_ERROR)
    except (click.Abort, KeyboardInterrupt):
        Interrupted().show()
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # the reader went away (``cbsim ... | head``): silence the final flush and stop
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    except Exception as err:
        if not caused_by_interrupt(err):
            raise
        Interrupted().show()
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
