"""``cbsim capacity``: the command line's option parsing, the plan file it writes and the command."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import click

from cbsim.catalog.hardware import get_gpu
from cbsim.common import output_folders as outputs
from cbsim.common.console import wide_console
from cbsim.common.documents import parse_json, parse_yaml, read_text_file
from cbsim.common.errors import CbsimError, UserError
from cbsim.common.progress import step_reporter
from cbsim.run.loading import load_scenario, parse_override
from cbsim.schema.scenario import Scenario
from cbsim.schema.slo_syntax import parse_slo as parse_slo_items
from cbsim.schema.slo_syntax import statistic_targets
from cbsim.studies.capacity.defaults import HEADROOM, check_headroom
from cbsim.studies.capacity.disaggregated import Candidate, plan_disaggregated
from cbsim.studies.capacity.fields import CONTROLLED_KEYS, _check_key
from cbsim.studies.capacity.options import (
    headroom_option,
    prices_option,
    quiet_option,
    target_option,
    tolerance_option,
    verify_seeds_option,
    window_option,
)
from cbsim.studies.capacity.planning import _check_prices, plan
from cbsim.studies.capacity.rendering import render, render_disaggregated
from cbsim.studies.capacity.search import DEFAULT_START_RPS, Progress
from cbsim.studies.capacity.workers import cli_workers

#: Exit status of ``cbsim capacity`` when nothing meets the SLO (bad input is 2).
EXIT_INFEASIBLE = 3


def _parse_number(text: str, what: str, option: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CbsimError(f"{what}: {text!r} is not a number", field=option) from None
    if not math.isfinite(value):
        raise CbsimError(f"{what}: must be finite, got {text!r}", field=option)
    return value


def parse_slo(texts: str | Sequence[str]) -> dict[str, float]:
    """``"ttft_p99_s=2,tpot_p99_s=0.1"`` (one string or several) as ``{metric: threshold}``, in
    the syntax every command reads (:mod:`cbsim.schema.slo_syntax`: ``ttft_p99=300ms``, vLLM's
    ``p99_ttft_ms=300``; a bare ``ttft=2s`` is checked at p99, as a scenario's ``slo`` is)."""
    return statistic_targets(parse_slo_items(texts, field="--slo"), "p99")


def parse_prices(texts: str | Sequence[str]) -> dict[str, float]:
    """``"h100-sxm=2.5,h200=3.2"`` as ``{gpu: USD per GPU-hour}`` (catalog GPU names only)."""
    items = [texts] if isinstance(texts, str) else list(texts)
    prices: dict[str, float] = {}
    for text in items:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            gpu, sep, raw = part.partition("=")
            gpu = gpu.strip()
            if not sep or not gpu:
                raise CbsimError(f"{part!r} is not GPU=USD_PER_HOUR", field="--prices")
            prices[gpu] = _parse_number(raw.strip(), gpu, "--prices")
    _check_prices(prices)
    return prices


def parse_vary(texts: Sequence[str]) -> dict[str, list[Any]]:
    """``["cluster.gpu=h100-sxm,h200", ...]`` as ``{key: [values]}`` (values parsed as YAML)."""
    vary: dict[str, list[Any]] = {}
    for text in texts:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key or not raw.strip():
            raise CbsimError(f"{text!r} is not KEY=V1,V2,...", field="--vary")
        values: list[Any] = []
        for item in raw.split(","):
            item = item.strip()
            try:
                values.append(parse_yaml(item, None) if item else "")
            except CbsimError as err:
                if not err.message.startswith("invalid YAML"):
                    raise CbsimError(err.message, field="--vary") from None
                values.append(item)
        vary[key] = values
    return vary


def _parse_seeds(text: str | None) -> list[int] | None:
    if text is None:
        return None
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            seed = int(part)
        except ValueError:
            raise CbsimError(f"{part!r} is not an integer", field="--seeds") from None
        if seed < 0:
            raise CbsimError(f"seeds must be >= 0, got {seed}", field="--seeds")
        seeds.append(seed)
    if not seeds:
        raise CbsimError("give at least one seed", field="--seeds")
    return seeds


PLAN_FILE_DESCRIPTION = "a capacity plan cbsim wrote"


def _pool_candidates(
    scenario: Scenario, prefill_texts: Sequence[str], decode_texts: Sequence[str]
) -> tuple[list[Candidate], list[Candidate]]:
    """The instance layouts each pool may use: as given, else the scenario's pools' (or its
    cluster's)."""
    from cbsim.schema.pools import pool_plans

    if scenario.cluster.disaggregation is not None:
        plans = pool_plans(scenario)
        defaults = [
            [Candidate(plan.scenario.cluster.gpu, plan.scenario.cluster.tp)] for plan in plans
        ]
    else:
        own = Candidate(scenario.cluster.gpu, scenario.cluster.tp)
        defaults = [[own], [own]]
    chosen = []
    for texts, option, default in (
        (prefill_texts, "--prefill", defaults[0]),
        (decode_texts, "--decode", defaults[1]),
    ):
        candidates = [Candidate.parse(text, option) for text in texts] or default
        for candidate in candidates:
            try:
                get_gpu(candidate.gpu)
            except CbsimError as err:
                raise CbsimError(err.message, field=option) from None
        chosen.append(list(dict.fromkeys(candidates)))
    return chosen[0], chosen[1]


def _is_plan_file(path: Path) -> bool:
    """Whether ``path`` holds a plan :func:`plan` or :func:`plan_disaggregated` made (so
    ``--out`` may replace it)."""
    try:
        data = parse_json(read_text_file(path), str(path))
    except CbsimError:
        return False
    if not isinstance(data, dict):
        return False
    keys = set(data)
    aggregated = {"slo", "max_rate_rps", "simulations"} <= keys and bool(
        {"evaluations", "alternatives"} & keys
    )
    disaggregated = {"slo", "simulations", "layouts", "prefill_candidates", "decode_candidates"}
    return aggregated or disaggregated <= keys


def _check_plan_file(out: Path) -> None:
    """Refuse, before searching, an ``--out`` that writing the plan would have to refuse."""
    try:
        outputs.check_path(out)  # before the first look at it: a name too long, a symlink loop
    except CbsimError as err:
        raise err.located(field="--out") from None
    if out.is_dir():
        raise CbsimError("is a folder; give the plan's file name", source=str(out), field="--out")
    if out.exists() and not _is_plan_file(out):
        raise CbsimError(
            f"exists and is not {PLAN_FILE_DESCRIPTION}, so cbsim will not overwrite it: give a "
            "new file name (or move the file away)",
            source=str(out),
            field="--out",
        )


def _write_plan(out: Path, text: str) -> None:
    """Write the plan's JSON to ``out`` atomically, creating its folders; a user error when it
    cannot be written."""

    def write(temporary: Path) -> None:
        temporary.write_text(text + "\n", encoding="utf-8")

    try:
        outputs.write_file(out, write, replaceable=_is_plan_file, description=PLAN_FILE_DESCRIPTION)
    except CbsimError as err:
        raise UserError(str(err.located(field="--out"))) from None
    except OSError as err:
        raise UserError(f"{err.filename or out}: cannot write the plan: {err.strerror}") from None


class Infeasible(click.ClickException):
    """On the command line: a plan that nothing meets. The plan is printed as usual (the JSON too,
    so it can be reported on); then one ``infeasible:`` line on stderr says why, and the command
    exits with :data:`EXIT_INFEASIBLE`."""

    exit_code = EXIT_INFEASIBLE

    def show(self, file: IO[Any] | None = None) -> None:
        message = " ".join(self.format_message().splitlines())
        click.echo(f"infeasible: {message}", file=file, err=file is None)


@click.command(name="capacity", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--slo",
    "slo_texts",
    multiple=True,
    metavar="METRIC=X,...",
    help="SLO as summary metrics and thresholds, e.g. ttft_p99=300ms,tpot_p99=50ms or "
    "ttft_p99_s=2 (at most X; slo_attainment/goodput_ratio: at least X; units ms/s, a bare "
    "number in seconds; vLLM's p99_ttft_ms=300 too). Default: p99 of the scenario's slo.",
)
@click.option(
    "--vary",
    "vary_texts",
    multiple=True,
    metavar="KEY=V1,V2",
    help="Compare alternatives, e.g. --vary cluster.gpu=h100-sxm,h200 (repeatable: the product).",
)
@target_option
@headroom_option
@click.option(
    "--seeds",
    default=None,
    help="Seeds every rate (and the fleet) must pass, e.g. 1,2,3. Default: the search on the "
    "scenario's seed, the fleet on --verify-seeds seeds.",
)
@verify_seeds_option
@window_option
@prices_option
@tolerance_option
@click.option(
    "--start-rps",
    type=float,
    default=DEFAULT_START_RPS,
    show_default=True,
    help="First rate tried.",
)
@click.option(
    "--disaggregated",
    is_flag=True,
    help="Plan prefill and decode pools (xPyD) against the best aggregated fleet (needs "
    "--target-rps; a scenario with cluster.disaggregation always plans this way).",
)
@click.option(
    "--prefill",
    "prefill_texts",
    multiple=True,
    metavar="GPU:TP",
    help="A prefill instance layout to consider, e.g. h100-sxm:2 (repeatable; default: the "
    "scenario's prefill pool, or its cluster).",
)
@click.option(
    "--decode",
    "decode_texts",
    multiple=True,
    metavar="GPU:TP",
    help="A decode instance layout to consider (repeatable; default as --prefill).",
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Processes searching alternatives (or pool candidates) at once (default: one per CPU; "
    "1: one after the other in this process). The plan is the same.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@quiet_option
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the plan's JSON to this file (its folders are created; an existing file is "
    "replaced only if it is a plan cbsim wrote), e.g. for cbsim report.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario field, e.g. --set scheduler.kind=sarathi (repeatable).",
)
def capacity_command(
    scenario: Path,
    slo_texts: tuple[str, ...],
    vary_texts: tuple[str, ...],
    target_rps: float | None,
    headroom: float,
    seeds: str | None,
    verify_seeds: int | None,
    window_s: float,
    price_texts: tuple[str, ...],
    tolerance: float,
    start_rps: float,
    disaggregated: bool,
    prefill_texts: tuple[str, ...],
    decode_texts: tuple[str, ...],
    workers: int | None,
    as_json: bool,
    quiet: bool,
    out: Path | None,
    overrides: tuple[str, ...],
) -> None:
    """Find the highest rate one replica of SCENARIO sustains within an SLO (its knee); size,
    verify and cost a fleet for --target-rps with each replica at --headroom of its knee; compare
    --vary alternatives. The first line is the one to buy on. Progress goes to stderr (a line per
    simulation when it is not a terminal; --quiet: none). Exits with status 3 (after printing the
    plan) when nothing meets the SLO, 2 on bad input."""
    with step_reporter("capacity", quiet=quiet) as progress:
        result = _search(
            scenario, slo_texts, vary_texts, target_rps, headroom, seeds, verify_seeds, window_s,
            price_texts, tolerance, start_rps, disaggregated, prefill_texts, decode_texts,
            workers, out, overrides, progress,
        )  # fmt: skip
    text = json.dumps(result, indent=2, allow_nan=False)
    if out is not None:
        _write_plan(out, text)
    if as_json:
        click.echo(text)
    elif "layouts" in result:
        render_disaggregated(result, wide_console())
    else:
        render(result, wide_console())
    if not result.get("feasible"):
        raise Infeasible(f"nothing meets the SLO: {result.get('reason') or 'no reason recorded'}")


def _search(
    scenario: Path,
    slo_texts: tuple[str, ...],
    vary_texts: tuple[str, ...],
    target_rps: float | None,
    headroom: float,
    seeds: str | None,
    verify_seeds: int | None,
    window_s: float,
    price_texts: tuple[str, ...],
    tolerance: float,
    start_rps: float,
    disaggregated: bool,
    prefill_texts: tuple[str, ...],
    decode_texts: tuple[str, ...],
    workers: int | None,
    out: Path | None,
    overrides: tuple[str, ...],
    progress: Progress | None,
) -> dict[str, Any]:
    """The options checked and the plan searched (bad input: a :class:`UserError`)."""
    try:
        workers = cli_workers(workers)
        for text in overrides:
            key, _ = parse_override(text)
            if key in CONTROLLED_KEYS:
                _check_key(key, "--set")
        loaded = load_scenario(scenario, overrides=list(overrides))
        if loaded.cluster.pools is not None:
            raise CbsimError(
                "capacity plans size replicas of one kind, or prefill and decode pools; a mixed "
                "fleet (cluster.pools) is not planned yet: simulate it with cbsim run",
                field="cluster.pools",
            )
        split = disaggregated or loaded.cluster.disaggregation is not None
        if not split and (prefill_texts or decode_texts):
            raise CbsimError(
                "--prefill and --decode plan pools: add --disaggregated", field="--prefill"
            )
        if out is not None:
            _check_plan_file(out)
        if split:
            if headroom != HEADROOM or verify_seeds is not None:
                raise CbsimError(
                    "a disaggregated plan sizes its pools at their knees and verifies them on "
                    "--seeds; --headroom and --verify-seeds are not taken",
                    field="--headroom" if headroom != HEADROOM else "--verify-seeds",
                )
            if vary_texts:
                raise CbsimError(
                    "a disaggregated plan compares the --prefill and --decode candidates "
                    "(and the aggregated fleet of the same GPUs); --vary is not taken",
                    field="--vary",
                )
            if target_rps is None:
                raise CbsimError(
                    "a disaggregated plan sizes pools for a load", field="--target-rps"
                )
            candidates = _pool_candidates(loaded, prefill_texts, decode_texts)
        slo = parse_slo(slo_texts) or None  # parsed in the order the options were always read
        prices = parse_prices(price_texts)
        vary = None if split else parse_vary(vary_texts)
        check_headroom(headroom)
        settings: dict[str, Any] = {
            "target_rps": target_rps,
            "prices": prices,
            "seeds": _parse_seeds(seeds),
            "window_s": window_s,
            "start_rps": start_rps,
            "tolerance": tolerance,
            "workers": workers,
        }
        if split:
            return plan_disaggregated(
                loaded, slo, prefill=candidates[0], decode=candidates[1], progress=progress,
                **settings,
            )  # fmt: skip
        return plan(
            loaded, slo, vary=vary, progress=progress, headroom=headroom,
            verify_seeds=verify_seeds, **settings,
        )  # fmt: skip
    except CbsimError as err:
        if err.source is None and err.field is not None and not err.field.startswith("-"):
            err = CbsimError(err.message, source=str(scenario), field=err.field)
        raise UserError(str(err)) from None
