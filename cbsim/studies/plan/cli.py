"""``cbsim plan``: the command line's options, the base scenario they make, the output folder.

A plan starts from a workload and an SLO given as aiconfigurator takes them (``--model --isl
--osl --ttft --tpot``: fixed prompt and output lengths, Poisson arrivals) or from a scenario file
(``--scenario``: its workload, seed, engine and precision; its layout is what the plan replaces).
Every option is checked before the search, and a bad one is one ``error:`` line naming it (exit
status 2). The defaults that decide the answer (window, tolerance, headroom, verification seeds,
prices) are ``cbsim capacity``'s (:mod:`cbsim.studies.capacity.defaults`, :mod:`cbsim.studies.capacity.options`),
so the same traffic and ``--target-rps`` buy the same fleet from both. The plan is printed (its
headline first; ``--json``: the JSON on stdout) and, with ``--out DIR``, written as ``plan.json``
(and ``pareto.png``), replacing the folder atomically (:func:`cbsim.common.output_folders.replace_folder`)
only if it is empty or an earlier plan; a plan that nothing meets is written and printed, then
exits with status 3. Progress goes to stderr (:mod:`cbsim.common.progress`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import checkpoint_format, get_model
from cbsim.catalog.quantization import INTEGER_FORMATS, canonical_dtype
from cbsim.common import output_folders as outputs
from cbsim.common.errors import CbsimError, UserError
from cbsim.common.limits import BATCH_SIZE, RATE, TOKENS, Limit
from cbsim.common.progress import step_reporter
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.run.loading import load_scenario
from cbsim.schema.setting_warnings import implausible_slo
from cbsim.studies.capacity.cli import Infeasible, parse_prices
from cbsim.studies.capacity.defaults import SCREEN_WINDOW_S, VERIFY_SEEDS, check_headroom
from cbsim.studies.capacity.options import (
    headroom_option,
    prices_option,
    quiet_option,
    target_option,
    tolerance_option,
    window_option,
)
from cbsim.studies.capacity.search import Progress, _check_search, _load_axis, _scenario_data
from cbsim.studies.capacity.workers import cli_workers
from cbsim.studies.plan.aic_flags import aic_options, plan_vocabulary
from cbsim.studies.plan.layouts import SearchSpace, unbuildable
from cbsim.studies.plan.planner import PlanSettings, described, plan_deployment
from cbsim.studies.plan.render import pareto_png, render, wide_console
from cbsim.studies.tool_flags import ToolCommand

PLAN_OUTPUT = outputs.OutputKind(
    name="plan",
    description="a deployment plan",
    entries=frozenset({"plan.json", "pareto.png"}),
    required=frozenset({"plan.json"}),
)

DEFAULT_GPU = "h100-sxm"
DEFAULT_SEED = 1
DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_PP = (1, 2)
DEFAULT_DP = (1, 2, 4, 8)  # mixture-of-experts models only
DEFAULT_SEQS = (64, 128, 256)
DEFAULT_TOKENS = (2048, 8192)
PERCENTILES = ("p50", "p90", "p99")
MAX_VERIFY_SEEDS = 20
MAX_TOTAL_GPUS = 4096
#: a parallel degree (--tp, --pp, --dp): GPUs, so within the GPU budget's own limit
DEGREE = Limit("parallel degrees", 1, MAX_TOTAL_GPUS, "GPUs", "the most GPUs a plan may take")
# scenario fields the options set, for errors found while checking the scenario they make
OPTION_OF_FIELD = {
    "cluster.model": "--model",
    "cluster.engine": "--engine",
    "cluster.dtype": "--dtype",
    "cluster.gpu": "--gpus",
    "workload.prompt_tokens": "--isl",
    "workload.output_tokens": "--osl",
    "slo.ttft_s": "--ttft",
    "slo.tpot_s": "--tpot",
}


def _int_list(
    text: str | None, option: str, default: Sequence[int], limit: Limit = TOKENS
) -> list[int]:
    """``"1,2,4"`` as ``[1, 2, 4]`` (each within ``limit``), or ``default``."""
    if text is None:
        return list(default)
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise CbsimError(f"{part!r} is not a whole number", field=option) from None
        if not limit.contains(value):
            raise CbsimError(f"{part!r}: {limit.violation(value)}", field=option)
        values.append(value)
    if not values:
        raise CbsimError("give at least one value", field=option)
    return list(dict.fromkeys(values))


def _gpu_list(text: str | None, default: str) -> list[str]:
    names = [p.strip() for p in (default if text is None else text).split(",") if p.strip()]
    if not names:
        raise CbsimError("give at least one GPU", field="--gpus")
    gpus = []
    for name in names:
        try:
            gpus.append(get_gpu(name).name)
        except CbsimError as err:
            raise CbsimError(err.message, field="--gpus") from None
    return list(dict.fromkeys(gpus))


def _checkpoint_dtype(cluster: dict[str, Any]) -> str:
    """The weight format a cluster without ``dtype`` runs: an integer-quantized checkpoint's
    own (:mod:`cbsim.catalog.quantization`), else bf16."""
    try:
        found = checkpoint_format(str(cluster.get("model", "")))
    except CbsimError:
        return "bf16"
    return found if found in INTEGER_FORMATS else "bf16"


def _check_precision(gpus: Sequence[str], dtype: str) -> None:
    """Every GPU compared runs the weights' precision (fp4 needs Blackwell)."""
    for gpu in gpus:
        try:
            get_gpu(gpu).peak_flops(canonical_dtype(dtype))
        except CbsimError as err:
            raise CbsimError(err.message, field="--dtype") from None


def _positive(value: float | None, option: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise CbsimError(f"must be a number > 0, got {value!r}", field=option)


def _refine(text: str) -> int | None:
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise CbsimError(f"{text!r}: give a whole number or 'all'", field="--refine") from None
    if value < 0:
        raise CbsimError(f"must be >= 0 (or 'all'), got {value}", field="--refine")
    return value


def _relocated(err: CbsimError) -> CbsimError:
    """An error in the scenario the options made, named by the option that set the field."""
    for prefix, option in OPTION_OF_FIELD.items():
        if err.field is not None and err.field.startswith(prefix):
            return CbsimError(err.message, field=option)
    return err


def _flag_base(
    model: str | None,
    isl: int | None,
    osl: int | None,
    gpu: str,
    engine: str | None,
    dtype: str | None,
    ttft: float | None,
    tpot: float | None,
    extra: bool = False,
) -> dict[str, Any]:
    """The scenario the flags describe: fixed lengths, Poisson arrivals (the rate is searched);
    ``extra``: targets beyond TTFT and TPOT were given."""
    for value, option in ((model, "--model"), (isl, "--isl"), (osl, "--osl")):
        if value is None:
            raise CbsimError("required (or give --scenario FILE)", field=option)
    assert model is not None and isl is not None and osl is not None
    for value, option in ((isl, "--isl"), (osl, "--osl")):
        if not TOKENS.contains(value):
            raise CbsimError(TOKENS.violation(value) or "", field=option)
    try:
        context = get_model(model).max_position_embeddings
    except CbsimError as err:
        raise CbsimError(err.message, field="--model") from None
    if isl + osl > context:
        raise CbsimError(
            f"{isl:,} prompt + {osl:,} output tokens exceed {model}'s {context:,}-token context",
            field="--isl",
        )
    if ttft is None and tpot is None and not extra:
        raise CbsimError("give a TTFT and/or a TPOT target (seconds)", field="--ttft")
    return {
        "name": f"plan-{Path(model).stem}",
        "seed": DEFAULT_SEED,
        "workload": {
            "num_requests": 1000,
            "arrival": {"kind": "poisson", "rate": 1.0},
            "prompt_tokens": {"kind": "fixed", "value": isl},
            "output_tokens": {"kind": "fixed", "value": osl},
        },
        "cluster": {
            "model": model,
            "gpu": gpu,
            "engine": engine or "vllm",
            **({"dtype": dtype} if dtype else {}),  # unset: bf16, or the checkpoint's int4/int8
        },
        "slo": {"ttft_s": ttft, "tpot_s": tpot},
    }


def _scenario_base(
    path: Path, model: str | None, engine: str | None, dtype: str | None
) -> dict[str, Any]:
    """A scenario file's data, with the flags' model, engine and precision over its own."""
    loaded = load_scenario(path)
    if loaded.workload.sessions is not None:
        raise CbsimError(
            "a plan sizes a deployment for requests of known prompt and output lengths; a "
            "session's prompts grow with each turn (the conversation so far), so its requests "
            "come out of the simulation: give --isl/--osl (a turn's typical prompt and answer) "
            "or a scenario of prompt_tokens/output_tokens or a trace",
            source=str(path),
            field="workload.sessions",
        )
    try:
        _load_axis(loaded)  # a rate to search: poisson, gamma or a trace
    except CbsimError as err:
        raise err.located(source=str(path)) from None
    base = _scenario_data(loaded)
    cluster = base.setdefault("cluster", {})
    for key, value in (("model", model), ("engine", engine), ("dtype", dtype)):
        if value is not None:
            cluster[key] = value
    base.setdefault("seed", loaded.seed)
    return base


def _slo(
    base: dict[str, Any],
    ttft: float | None,
    tpot: float | None,
    pct: str,
    extra: dict[str, float] | None = None,
) -> dict[str, float]:
    """The targets: the flags (``extra``: ``--slo``'s others), else the scenario's ``slo`` (its
    defaults included)."""
    scenario_slo = described(base).slo
    targets = dict(extra or {})
    for name, flag in (("ttft", ttft), ("tpot", tpot)):
        value = flag if flag is not None else getattr(scenario_slo, f"{name}_s")
        if value is not None:
            targets[f"{name}_{pct}_s"] = float(value)
    if not targets:
        raise CbsimError("give a TTFT and/or a TPOT target (seconds)", field="--ttft")
    return targets


def _check_out(out: Path) -> None:
    try:
        outputs.check_replaceable(out, PLAN_OUTPUT)
    except CbsimError as err:
        raise CbsimError(str(err), field="--out") from None


def write_plan(out: Path, plan: dict[str, Any]) -> Path:
    """``plan.json`` and ``pareto.png`` into ``out``, replacing it as a whole."""
    text = json.dumps(plan, indent=2, allow_nan=False) + "\n"
    png = pareto_png(plan)

    def fill(folder: Path) -> None:
        (folder / "plan.json").write_text(text, encoding="utf-8")
        if png is not None:
            (folder / "pareto.png").write_bytes(png)

    try:
        return outputs.replace_folder(out, PLAN_OUTPUT, fill)
    except CbsimError as err:
        raise UserError(str(err.located(field="--out"))) from None
    except OSError as err:
        raise UserError(f"{err.filename or out}: cannot write the plan: {err.strerror}") from None


def _check_numbers(options: dict[str, Any]) -> None:
    """The targets, windows, headroom, seeds, budget, target load and engine of the options."""
    for value, option in (
        (options["ttft"], "--ttft"), (options["tpot"], "--tpot"), (options["window_s"], "--window-s"),
        (options["screen_window_s"], "--screen-window-s"), (options["target_rps"], "--target-rps"),
    ):  # fmt: skip
        _positive(value, option)
    if options["target_rps"] is not None and not RATE.contains(options["target_rps"]):
        raise CbsimError(RATE.violation(options["target_rps"]) or "", field="--target-rps")
    check_headroom(options["headroom"])
    if not 1 <= options["seeds"] <= MAX_VERIFY_SEEDS:
        raise CbsimError(
            f"must be 1 to {MAX_VERIFY_SEEDS}, got {options['seeds']}", field="--seeds"
        )
    total = options["total_gpus"]
    if total is not None and not 1 <= total <= MAX_TOTAL_GPUS:
        raise CbsimError(f"must be 1 to {MAX_TOTAL_GPUS}, got {total}", field="--total-gpus")
    if options["engine"] is not None:
        try:
            load_engine_profile(options["engine"])
        except CbsimError as err:
            raise CbsimError(err.message, field="--engine") from None
    _check_search(options["window_s"], options["tolerance"], 1.0, 1)
    try:
        _check_search(options["screen_window_s"], options["tolerance"], 1.0, 1)
    except CbsimError as err:
        raise CbsimError(err.message, field="--screen-window-s") from None


def _base_and_gpus(options: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The base scenario (from the flags or ``--scenario``) and the GPU kinds, checked."""
    scenario: Path | None = options["scenario"]
    if scenario is None:
        gpus = _gpu_list(options["gpus"], DEFAULT_GPU)
        base = _flag_base(
            options["model"], options["isl"], options["osl"], gpus[0], options["engine"],
            options["dtype"], options["ttft"], options["tpot"], bool(options.get("slo_extra")),
        )  # fmt: skip
    else:
        for option in ("isl", "osl"):
            if options[option] is not None:
                raise CbsimError(
                    "the scenario gives the workload: leave out --isl/--osl", field=f"--{option}"
                )
        base = _scenario_base(scenario, options["model"], options["engine"], options["dtype"])
        gpus = _gpu_list(options["gpus"], base["cluster"].get("gpu", DEFAULT_GPU))
    base["cluster"]["gpu"] = gpus[0]
    _check_precision(gpus, base["cluster"].get("dtype") or _checkpoint_dtype(base["cluster"]))
    try:
        described(base)
    except CbsimError as err:
        raise _relocated(err) from None
    return base, gpus


def _space(options: dict[str, Any], gpus: list[str]) -> SearchSpace:
    return SearchSpace(
        gpus=gpus,
        tp=_int_list(options["tp"], "--tp", DEFAULT_TP, DEGREE),
        pp=_int_list(options["pp"], "--pp", DEFAULT_PP, DEGREE),
        dp=_int_list(options["dp"], "--dp", DEFAULT_DP, DEGREE),
        max_num_seqs=_int_list(options["max_num_seqs"], "--max-num-seqs", DEFAULT_SEQS, BATCH_SIZE),
        max_num_batched_tokens=_int_list(
            options["max_num_batched_tokens"], "--max-num-batched-tokens", DEFAULT_TOKENS
        ),
        max_gpus=options["total_gpus"],
        disaggregated=options["disagg"],
    )


@dataclass(frozen=True)
class PlanRequest:
    """The options, checked: what :func:`~cbsim.studies.plan.planner.plan_deployment` takes."""

    base: dict[str, Any]
    slo: dict[str, float]
    space: SearchSpace
    settings: PlanSettings
    prices: dict[str, float]
    workers: int | None = None


def build_request(options: dict[str, Any]) -> PlanRequest:
    """The options checked (bad input: a :class:`CbsimError` naming the option)."""
    workers = cli_workers(options.get("workers"))
    extra: dict[str, float] = options.get("slo_extra") or {}
    _check_numbers(options)
    base, gpus = _base_and_gpus(options)
    slo = _slo(base, options["ttft"], options["tpot"], options["percentile"], extra)
    settings = PlanSettings(
        window_s=options["window_s"],
        tolerance=options["tolerance"],
        refine=_refine(options["refine"]),
        headroom=options["headroom"],
        verify_seeds=options["seeds"],
        screen_window_s=options["screen_window_s"],
        target_rps=options["target_rps"],
    )
    prices = parse_prices(list(options["price_texts"]))
    space = _space(options, gpus)
    problem = unbuildable(space, base["cluster"]["model"])
    if problem is not None:
        raise CbsimError(problem[1], field=problem[0])
    return PlanRequest(base, slo, space, settings, prices, workers)


@click.command(
    name="plan", cls=ToolCommand, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--model", "--model-path", "model", default=None,
              help="Catalog model, Hugging Face id or config.json path.")  # fmt: skip
@click.option("--isl", type=int, default=None, help="Input (prompt) tokens per request.")
@click.option("--osl", type=int, default=None, help="Output tokens per request.")
@click.option("--ttft", default=None,
              help="TTFT target at --percentile: seconds, or with its unit (300ms).")  # fmt: skip
@click.option("--tpot", default=None,
              help="TPOT target at --percentile: seconds, or with its unit (20ms).")  # fmt: skip
@click.option("--slo", "slo_texts", multiple=True, metavar="METRIC=VALUE",
              help="More targets, e.g. e2e=10s or ttft_p90=500ms (vLLM's p99_ttft_ms=300 too).")  # fmt: skip
@click.option(
    "--scenario",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Take the workload (and seed, engine, precision, SLO) from this scenario instead of "
    "--isl/--osl.",
)
@click.option("--gpus", "--system", "gpus", default=None,
              help="GPU kinds to compare, e.g. h100-sxm,a100-80gb (or h200_sxm).")  # fmt: skip
@click.option(
    "--total-gpus",
    type=int,
    default=None,
    help="GPU budget: the most GPUs one layout may take, and the fleet the plan fills "
    "(default: one replica or unit within a node).",
)
@click.option("--engine", "--backend", "engine", default=None,
              help="Serving engine: vllm, sglang, tensorrt-llm (trtllm), ...")  # fmt: skip
@click.option(
    "--dtype",
    default=None,
    help="Weight precision: bf16, fp16, fp8, fp4, int8 (W8A8), int4 (AWQ/GPTQ/w4a16), fp32; unset: "
    "bf16, or a quantized checkpoint's own (an -AWQ, -GPTQ-Int4, .w8a8 id).",
)
@target_option
@headroom_option
@click.option("--seeds", "--verify-seeds", "seeds", type=int, default=VERIFY_SEEDS,
              show_default=True, help="Seeds the planned load (or fleet) is verified on.")  # fmt: skip
@click.option("--percentile", type=click.Choice(PERCENTILES), default="p99", show_default=True,
              help="Percentile the TTFT and TPOT targets apply to.")  # fmt: skip
@click.option("--tp", default=None, help="Tensor-parallel degrees (default 1,2,4,8).")
@click.option("--pp", default=None, help="Pipeline-parallel degrees (default 1,2).")
@click.option("--dp", default=None,
              help="Attention data-parallel degrees, mixture-of-experts models (default 1,2,4,8).")  # fmt: skip
@click.option("--max-num-seqs", default=None, help="Batch caps to try (default 64,128,256).")
@click.option("--max-num-batched-tokens", default=None,
              help="Token budgets per iteration to try (default 2048,8192).")  # fmt: skip
@click.option("--disagg/--no-disagg", default=True, show_default=True,
              help="Also search disaggregated xP1D units.")  # fmt: skip
@click.option("--refine", default="3", show_default=True,
              help="Parallel layouts whose batch caps and budgets are searched ('all': every one).")  # fmt: skip
@window_option
@tolerance_option
@click.option("--screen-window-s", type=float, default=SCREEN_WINDOW_S, show_default=True,
              help="Seconds of arrivals each layout is screened over (fast, a little optimistic); "
              "the best are searched again over --window-s.")  # fmt: skip
@prices_option
@click.option("--workers", type=int, default=None,
              help="Processes searching layouts at once (default: one per CPU; 1: one after the "
              "other in this process). The plan is the same.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON (on stdout).")
@quiet_option
@aic_options
@click.option("--out", "-o", "--save-dir", "out", type=click.Path(file_okay=False, path_type=Path),
              default=None,
              help="Folder for plan.json and pareto.png (created; replaced only if it holds a "
              "plan), e.g. for cbsim report. Default: printed only.")  # fmt: skip
def plan_command(as_json: bool, quiet: bool, out: Path | None, **options: Any) -> None:
    """Search every layout (GPU, TP, PP, EP/DP, aggregated or disaggregated xPyD, batch cap and
    token budget) for the workload and SLO; print the line to buy on, the layouts, the Pareto
    front of tokens/s per GPU against tokens/s per user, and the winner at --headroom of its knee
    (with --target-rps: its fleet for that load), verified on --seeds seeds, with its engine's
    launch command. Exit status 3 when nothing meets the SLO, 2 on bad input."""
    with step_reporter("plan", quiet=quiet) as progress:
        plan = _plan(options, out, progress)
    written = write_plan(out, plan) if out is not None else None
    if as_json:
        click.echo(json.dumps(plan, indent=2, allow_nan=False))
    else:
        render(plan, wide_console(), None if written is None else str(written))
    if not plan["feasible"]:
        raise Infeasible(f"no plan: {plan.get('reason')}")


def _plan(options: dict[str, Any], out: Path | None, progress: Progress | None) -> dict[str, Any]:
    """The options checked and the plan searched (bad input: a :class:`UserError`)."""
    try:
        notes, warnings = plan_vocabulary(options)
        for line in notes:
            click.echo(f"note: {line}", err=True)
        for warning in warnings:
            click.echo(f"warning: {warning}", err=True)
        request = build_request(options)
        for warning in implausible_slo({"ttft": options["ttft"], "tpot": options["tpot"]}, "--{}"):
            click.echo(f"warning: {warning}", err=True)
        if out is not None:
            _check_out(out)
        return plan_deployment(
            request.base, request.slo, space=request.space, prices=request.prices,
            settings=request.settings, progress=progress, workers=request.workers,
        )  # fmt: skip
    except CbsimError as err:
        raise UserError(str(err)) from None
