"""``cbsim plan`` read as ``aiconfigurator cli default``: AI Configurator's flags, and SLOs with units.

AI Configurator (NVIDIA's ``aiconfigurator cli default --model M --total-gpus N --system
h200_sxm --backend trtllm --isl I --osl O --ttft MS --tpot MS``) answers the question
``cbsim plan`` answers, and its users type its flags. ``cbsim plan`` takes them:

* as its own options' other names: ``--model-path`` is ``--model``, ``--system`` is ``--gpus``
  (AI Configurator's system names are catalog GPUs: :data:`cbsim.catalog.hardware.GPU_ALIASES`),
  ``--backend`` is ``--engine`` (``trtllm`` is ``tensorrt-llm``), ``--save-dir`` is ``--out``;
  the underscore spellings of its older releases (``--total_gpus``, ``--model_path``) too;
* ``--backend-version V``: the engine as it was in release V (``--engine NAME@V``);
* ``--request-latency``: an end-to-end target, like ``--slo e2e=...``;
* the rest (:data:`IGNORED`) are taken and named, in one ``note:`` line, as not applying.

Targets (``--ttft``, ``--tpot``, ``--request-latency``, ``--slo``) are seconds, as everywhere in
cbsim, or durations with a unit (``--ttft 300ms``). AI Configurator reads a bare ``--ttft 300`` as
milliseconds; cbsim reads it as seconds and warns that a TTFT over a minute (a TPOT over five
seconds) is almost surely milliseconds, so the unit is never guessed (:mod:`cbsim.schema.slo_syntax`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from cbsim.common.errors import CbsimError
from cbsim.cost.engine_profile import canonical_engine
from cbsim.schema.setting_warnings import implausible_targets
from cbsim.schema.slo_syntax import (
    parse_duration,
    parse_slo,
    statistic_targets,
)

__all__ = ["IGNORED", "aic_options", "plan_vocabulary"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Ignored:
    """An AI Configurator flag with no meaning for ``cbsim plan``: its name, whether it takes a
    value, and why it does not apply."""

    flag: str
    takes_value: bool
    why: str


_SEARCH = "cbsim plan searches with its own simulation"
IGNORED: tuple[Ignored, ...] = (
    Ignored("--decode-system", True, "one GPU kind per layout: list both in --gpus to compare"),
    Ignored("--database-mode", True, _SEARCH),
    Ignored("--systems-paths", True, _SEARCH),
    Ignored("--top-n", True, "every layout is printed"),
    Ignored("--strict-sla", False, "the plan keeps only layouts within every target"),
    Ignored("--prefix", True, "give a scenario with workload.prompt_pool for shared prefixes"),
    Ignored("--nextn", True, "speculation is not searched: see cbsim spec-advise"),
    Ignored("--nextn-accept-rates", True, "speculation is not searched: see cbsim spec-advise"),
    Ignored("--enable-chunked-prefill", False, "the engine's own scheduler is simulated"),
    Ignored("--free-gpu-memory-fraction", True, "the engine's default memory fraction is used"),
    Ignored("--max-seq-len", True, "the model's context is used"),
    Ignored("--enable-wideep", False, "--dp and expert parallelism are searched for MoE models"),
    Ignored("--moe-backend", True, "the engine's MoE kernels are priced"),
    Ignored("--deployment-target", True, "the plan prints the engine's launch command"),
    Ignored("--generator-config", True, "no deployment files are generated"),
    Ignored("--generator-set", True, "no deployment files are generated"),
    Ignored("--generator-dynamo-version", True, "no deployment files are generated"),
    Ignored("--generated-config-version", True, "no deployment files are generated"),
    Ignored("--debug", False, "no effect here"),
    Ignored("--no-color", False, "no effect here"),
)
"""AI Configurator's ``cli default`` flags (``src/aiconfigurator/cli/main.py``) that ``cbsim
plan`` takes without using, each with the reason printed."""


def _dest(flag: str) -> str:
    return "aic_" + flag.removeprefix("--").replace("-", "_")


def aic_options(command: F) -> F:
    """Add AI Configurator's own flags to ``cbsim plan`` (hidden from ``--help``: docs/plan.md
    lists them)."""
    decorators = [
        click.option("--backend-version", "aic_backend_version", default=None, hidden=True),
        click.option("--request-latency", "aic_request_latency", default=None, hidden=True),
    ]
    for item in IGNORED:
        if item.takes_value:
            option = click.option(item.flag, _dest(item.flag), multiple=True, hidden=True)
        else:
            option = click.option(item.flag, _dest(item.flag), is_flag=True, hidden=True)
        decorators.append(option)
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


def _duration(value: Any, option: str) -> float | None:
    if value is None or isinstance(value, float):
        return value
    return parse_duration(str(value), default_unit="s", field=option)


def _engine(options: dict[str, Any], notes: list[str]) -> None:
    """``--backend auto`` and ``--backend-version``."""
    engine = options.get("engine")
    if engine is not None and engine.strip().lower() == "auto":
        notes.append(
            "--backend auto: cbsim plan searches one engine per run; this one plans vllm "
            "(run it with --backend vllm, sglang and trtllm to compare)"
        )
        engine = options["engine"] = None
    version = options.pop("aic_backend_version", None)
    if version:
        if engine is not None and "@" in engine:
            raise CbsimError("the engine already names its release", field="--backend-version")
        engine = f"{engine or 'vllm'}@{version}"
    if engine is not None:
        options["engine"] = canonical_engine(engine)


def _targets(options: dict[str, Any]) -> list[str]:
    """``--ttft``/``--tpot`` as seconds, ``--slo`` and ``--request-latency`` into the options'
    targets (``slo_extra``: those beyond the TTFT and TPOT at ``--percentile``); the warnings."""
    for name in ("ttft", "tpot"):
        options[name] = _duration(options.get(name), f"--{name}")
    targets = parse_slo(options.pop("slo_texts", ()) or (), field="--slo")
    latency = options.pop("aic_request_latency", None)
    if latency is not None:
        targets += parse_slo(f"e2e={latency}", field="--request-latency")
    extra = statistic_targets([t for t in targets if not t.per_request])
    for target in targets:
        if not target.per_request:
            continue
        if target.metric in ("ttft", "tpot"):
            if options.get(target.metric) is not None:
                raise CbsimError(
                    f"{target.text!r}: --{target.metric} gives this target already",
                    field="--slo",
                )
            options[target.metric] = target.value
        else:
            extra[f"{target.metric}_{options.get('percentile') or 'p99'}_s"] = target.value
    options["slo_extra"] = extra
    return implausible_targets(targets, per_request=False)


def _ignored_note(options: dict[str, Any]) -> str | None:
    """One line naming the AI Configurator flags given that do not apply, with why."""
    given: dict[str, list[str]] = {}
    for item in IGNORED:
        value = options.pop(_dest(item.flag), None)
        if value:
            given.setdefault(item.why, []).append(item.flag)
    if not given:
        return None
    parts = [f"{', '.join(flags)} ({why})" for why, flags in given.items()]
    return "ignored (AI Configurator's, no effect on this plan): " + "; ".join(parts)


def plan_vocabulary(options: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Rewrite ``cbsim plan``'s options in place as its own (see the module docstring); the
    ``note:`` lines and the ``warning:`` lines to print."""
    notes: list[str] = []
    _engine(options, notes)
    warnings = _targets(options)
    note = _ignored_note(options)
    if note is not None:
        notes.append(note)
    return notes, warnings
