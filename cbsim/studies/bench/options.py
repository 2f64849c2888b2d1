"""``cbsim bench``'s flags, checked and turned into what a run needs.

:func:`bench_plan` takes the command's keywords (vLLM's flags as :mod:`cbsim.studies.bench.cli`
declares them) and returns a :class:`BenchPlan`: the :class:`~cbsim.studies.bench.load.BenchOptions`
every load point shares, what the result reports, the load points, where each result file goes,
the SLO targets to judge, and the ``note:`` and ``warning:`` lines to print. Every problem is a
:class:`~cbsim.common.errors.CbsimError` naming the flag, raised before anything is simulated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cbsim.common.errors import CbsimError, did_you_mean
from cbsim.common.limits import REQUESTS, SEED, TOKENS, Limit
from cbsim.cost.engine_profile import canonical_engine, engine_names
from cbsim.schema.setting_warnings import implausible_targets
from cbsim.schema.slo_syntax import (
    SloTarget,
    check_known,
    parse_duration,
    parse_slo,
)
from cbsim.studies.bench.datasets import Prompts, parse_range_ratio, prompts_of
from cbsim.studies.bench.load import (
    BenchOptions,
    LoadPoint,
    RampUp,
    load_points,
    parse_concurrencies,
    parse_rates,
)
from cbsim.studies.bench.run import Reporting, check_result_file, save_paths, vllm_file_name
from cbsim.studies.bench.vllm_flags import ignored_note, pop_ignored
from cbsim.studies.bench.vllm_result import METRICS, backend_of

__all__ = [
    "BenchPlan",
    "bench_plan",
    "parse_goodput",
    "parse_percentile_metrics",
    "parse_percentiles",
]

DEFAULT_PERCENTILE_METRICS = "ttft,tpot,itl,e2el"
GOODPUT_METRICS = ("ttft", "tpot", "e2el")
VLLM_NAME = "\0vllm-name"
"""``--save-result`` given without a file: vLLM's own file name (``--result-filename``,
``--result-dir``)."""


@dataclass
class BenchPlan:
    """Everything one ``cbsim bench`` call does (see the module docstring)."""

    options: BenchOptions
    reporting: Reporting
    points: list[LoadPoint]
    paths: list[Path]
    append: bool
    targets: list[SloTarget]
    metadata: dict[str, str]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- reporting


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
    """``--goodput``: ``KEY:MS`` pairs (ttft, tpot, e2el), space- or comma-separated, repeatable
    (a value may carry its unit: ``ttft:0.3s``)."""
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
        targets[name] = parse_duration(number, default_unit="ms", field="--goodput") * 1000.0
    return targets


def _goodput_of(targets: list[SloTarget], goodput: dict[str, float]) -> dict[str, float]:
    """``--slo``'s per-request targets added to ``--goodput``'s (ms; ``e2e`` is vLLM's
    ``e2el``)."""
    merged = dict(goodput)
    for target in targets:
        if not target.per_request:
            continue
        name = {"e2e": "e2el"}.get(target.metric, target.metric)
        if name not in GOODPUT_METRICS:
            raise CbsimError(
                f"{target.text!r}: a request is held to a ttft, tpot or e2e target; give "
                f"{target.metric} a statistic, e.g. {target.metric}_p99=50ms",
                field="--slo",
            )
        merged[name] = target.value * 1000.0
    return merged


# --------------------------------------------------------------------------- checks


def _check_within(value: int, limit: Limit, option: str) -> None:
    problem = limit.violation(value)
    if problem is not None:
        raise CbsimError(problem, field=option)


def _check_burstiness(burstiness: float) -> None:
    if not burstiness > 0:
        raise CbsimError(f"must be positive (or inf), got {burstiness}", field="--burstiness")


def parse_metadata(values: tuple[str, ...]) -> dict[str, str]:
    """``--metadata KEY=VALUE ...``: keys and values as vLLM records them (strings)."""
    found: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CbsimError(f"{item!r} is not KEY=VALUE", field="--metadata")
        found[key.strip()] = value.strip()
    return found


def _engine(engine: str | None, backend: str | None, notes: list[str]) -> str:
    """``--engine``, else vLLM's ``--backend`` when it names an engine (``sglang``,
    ``tensorrt-llm``, ``trtllm``), else vllm."""
    if backend is None:
        return engine or "vllm"
    named = canonical_engine(backend)
    if engine is None and named in engine_names():
        return named
    notes.append(
        f"--backend {backend}: the API vLLM's client would call; the simulated engine is "
        f"{engine or 'vllm'} (--engine)"
    )
    return engine or "vllm"


def _ramp(flags: dict[str, Any]) -> RampUp | None:
    """vLLM's ``--ramp-up-*`` (its checks: both rates, start <= end, exponential from above 0)."""
    strategy = flags["ramp_up_strategy"]
    start, end = flags["ramp_up_start_rps"], flags["ramp_up_end_rps"]
    if strategy is None:
        if start is not None or end is not None:
            raise CbsimError("give --ramp-up-strategy linear or exponential", field="--ramp-up-strategy")  # fmt: skip
        return None
    if start is None or end is None:
        raise CbsimError(
            "a ramp-up needs both --ramp-up-start-rps and --ramp-up-end-rps",
            field="--ramp-up-start-rps",
        )
    for value, option in ((start, "--ramp-up-start-rps"), (end, "--ramp-up-end-rps")):
        if not (value > 0 and math.isfinite(value)):
            raise CbsimError(
                f"must be a positive rate, got {value:g} (vLLM refuses a request rate of 0 too)",
                field=option,
            )
    if start > end:
        raise CbsimError(
            f"{start:g} is above --ramp-up-end-rps {end:g}: a ramp goes up",
            field="--ramp-up-start-rps",
        )
    return RampUp(strategy, float(start), float(end))


# --------------------------------------------------------------------------- load and files


def _points(flags: dict[str, Any], prompts: Prompts, notes: list[str]) -> list[LoadPoint]:
    rates = parse_rates(flags["rates"])
    caps = parse_concurrencies(flags["concurrencies"])
    ramp = _ramp(flags)
    dataset = prompts.dataset
    if dataset.trace is not None and dataset.self_timed:
        if caps:
            raise CbsimError(
                "a trace replayed at its timestamps is not sent behind a concurrency cap here: "
                "give --no-self-timed (the trace's lengths, sent by the cap's clients) or drop "
                "--max-concurrency",
                field="--max-concurrency",
            )
        if rates or ramp is not None:
            notes.append(
                "--request-rate/--ramp-up: the trace's timestamps set the load (--self-timed, "
                "vLLM's default for timed_trace; --no-self-timed sends its requests at the rate)"
            )
        return [LoadPoint()]
    return load_points(rates, caps, ramp)


def _result_paths(
    flags: dict[str, Any], points: list[LoadPoint], engine: str, date: str, notes: list[str]
) -> list[Path]:
    """Where each point's result goes: vLLM's name (``{label}-{rate}qps-{model}-{date}.json``)
    in ``--result-dir``, or the file ``--save-result FILE`` or ``--result-filename`` names (a
    sweep: ``FILE-<load>.json`` per point, unless ``--append-result`` puts them in one)."""
    save, append = flags["save"], flags["append_result"]
    result_dir, filename = flags["result_dir"], flags["result_filename"]
    if save is None and not append:
        if result_dir is not None or filename is not None:
            notes.append("--result-dir/--result-filename: nothing is saved without --save-result")
        return []
    folder = Path(result_dir) if result_dir is not None else None
    named = save if save not in (None, VLLM_NAME) else filename
    if named is not None:
        path = Path(named)
        if folder is not None and not path.is_absolute():
            path = folder / path
        return save_paths(path, points, append=append)
    label = flags["label"] or flags["backend"] or backend_of(engine)
    names = [vllm_file_name(p, label=label, model_id=flags["model"], date=date) for p in points]
    return [(folder or Path(".")) / name for name in names]


def _prompts_checked(flags: dict[str, Any]) -> Prompts:
    prompts = prompts_of(flags)
    if prompts.dataset.trace is None:
        flags_of = prompts.length_flags
        _check_within(prompts.input_len, TOKENS, flags_of.get("input", "--input-len"))
        _check_within(prompts.output_len, TOKENS, flags_of.get("output", "--output-len"))
        prefix = prompts.dataset.prefix_tokens
        if prefix < 0:
            raise CbsimError(f"must be 0 or more tokens, got {prefix}", field=prompts.prefix_flag)
        if prefix:
            _check_within(prefix, TOKENS, prompts.prefix_flag)
    return prompts


def bench_plan(flags: dict[str, Any]) -> BenchPlan:
    """Check every flag and say what the call does (see the module docstring)."""
    notes: list[str] = []
    ignored = pop_ignored(flags)
    if flags["gpu"] is None:
        raise CbsimError(
            "required: the GPU the simulated server runs on (a real benchmark gets it from its "
            "server), e.g. --gpu h100-sxm or AI Configurator's h200_sxm",
            field="--gpu",
        )
    _check_within(flags["num_prompts"], REQUESTS, "--num-prompts")
    _check_within(flags["seed"], SEED, "--seed")
    _check_burstiness(flags["burstiness"])
    prompts = _prompts_checked(flags)
    notes += prompts.notes
    input_ratio, output_ratio = parse_range_ratio(flags["random_range_ratio"])
    engine = _engine(flags["engine"], flags["backend"], notes)
    targets = parse_slo(flags["slo_texts"], field="--slo")
    check_known(targets, ("slo_attainment", "goodput_ratio"), field="--slo")
    options = BenchOptions(
        model=flags["model"],
        gpu=flags["gpu"],
        tp=flags["tp"],
        engine=engine,
        dtype=flags["dtype"],
        input_len=prompts.input_len,
        output_len=prompts.output_len,
        num_prompts=flags["num_prompts"],
        random_range_ratio=input_ratio,
        output_range_ratio=output_ratio if output_ratio != input_ratio else None,
        burstiness=flags["burstiness"],
        seed=flags["seed"],
        overrides=flags["overrides"],
        goodput_ms=_goodput_of(targets, parse_goodput(flags["goodput"])),
        dataset=prompts.dataset,
    )
    reporting = Reporting(
        percentile_metrics=parse_percentile_metrics(flags["percentile_metrics"]),
        percentiles=parse_percentiles(flags["metric_percentiles"]),
        label=flags["label"],
        detailed=flags["save_detailed"],
    )
    points = _points(flags, prompts, notes)
    if math.isinf(flags["burstiness"]) and any(p.max_concurrency for p in points):
        notes.append(
            "--burstiness inf behind --max-concurrency: gaps of coefficient of variation 0.01 "
            "(nearly constant; constant gaps are simulated without a cap)"
        )
    if any(p.ramp_up for p in points) and flags["burstiness"] != 1.0:
        notes.append("--burstiness: a ramp-up's arrivals are Poisson here")
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = _result_paths(flags, points, engine, date, notes)
    for path in dict.fromkeys(paths):
        check_result_file(path)
    note = ignored_note(ignored)
    if note is not None:
        notes.append(note)
    return BenchPlan(
        options=options,
        reporting=reporting,
        points=points,
        paths=paths,
        append=flags["append_result"],
        targets=targets,
        metadata=parse_metadata(flags["metadata"]),
        notes=notes,
        warnings=implausible_targets(targets),
    )
