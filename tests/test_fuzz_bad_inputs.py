"""Bad inputs, generated: every one must end in exit status 2 and one clear error line.

A fixed-seed campaign mutates the shipped scenarios (``scenarios/*.yaml``) and writes broken
traces, model configs, engine and calibration profiles, acceptance traces and sweep files, then
runs each through the command line in-process (click's ``CliRunner``): out-of-range numbers
(below and above every :mod:`cbsim.common.limits` range), wrong types, huge and tiny floats, NaN and
infinities, unknown names, unknown keys, files that are not UTF-8, deeply nested files,
duplicated keys, YAML alias bombs, ranges that are fine one by one but not together, and bad
command-line options. For each case it checks:

- exit status 2 (never 0, never 1);
- exactly one ``error:`` line (click's usage errors say ``Error:``), naming what the case broke:
  the file and the field, or the option;
- no traceback;
- no hang: each case runs under an alarm of :data:`CASE_TIMEOUT_S` seconds.

The default run checks a stratified quick slice of :data:`QUICK_CASES` cases; the whole campaign
(several hundred cases) is marked ``slow``. ``python -m tests.test_fuzz_bad_inputs`` runs the
whole campaign and prints its figures.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from cbsim.cli.commands import cli
from cbsim.common.errors import CbsimError
from cbsim.common.limits import (
    BATCH_SIZE,
    BLOCK_SIZE,
    CLIENTS,
    CONCENTRATION,
    DIVERGENCE,
    DURATION,
    GAMMA_CV,
    LOGNORMAL_SIGMA,
    MAX_NESTING,
    RATE,
    REPLICAS,
    REQUESTS,
    SEED,
    SIMULATED_TIME,
    STEPS,
    TIME_SCALE,
    TOKENS,
    WINDOW,
    Limit,
)
from cbsim.run.loading import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
SEED_OF_CAMPAIGN = 20241111
CASE_TIMEOUT_S = 20
QUICK_CASES = 100
ERROR_LINE = re.compile(r"^(error|Error): ", re.MULTILINE)


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class BadInput:
    """One bad input: the arguments of a ``cbsim`` command, the files it needs (written under a
    fresh folder, ``{tmp}`` in arguments and names stands for it) and the names its error line
    must mention (all of them: the file, the field path or the option)."""

    category: str
    label: str
    args: tuple[str, ...]
    names: tuple[str, ...]
    files: dict[str, bytes] = field(default_factory=dict)
    may_pass: bool = False  # a value that is extreme but may be fine: exit 0 is right too

    def materialise(self, folder: Path) -> tuple[list[str], list[str]]:
        """Write the files under ``folder``; the files, arguments and names with ``{tmp}`` filled
        in."""
        fill = str(folder)
        for name, content in self.files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content.replace(b"{tmp}", fill.encode()))
        return [a.replace("{tmp}", fill) for a in self.args], [
            n.replace("{tmp}", fill) for n in self.names
        ]


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


BASES: dict[str, dict[str, Any]] = {p.stem: _load(p) for p in SCENARIOS}


def _dump(data: Any) -> bytes:
    """``data`` as YAML, written by libyaml's emitter (the same bytes as PyYAML's own, which took
    most of the seconds a campaign takes to draw)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # PyYAML built without libyaml
    return yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True).encode("utf-8")


def _set(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``data`` with ``dotted`` set (intermediate mappings created)."""
    result = json.loads(json.dumps(data))
    node = result
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value
    return result


def _validate_or_run(rng: random.Random, scenario: str, *extra: str) -> tuple[str, ...]:
    """``validate`` most of the time, ``run`` (which must refuse the same input) otherwise."""
    if rng.random() < 0.3:
        return ("run", scenario, "--quiet", "--out", "{tmp}/out", *extra)
    return ("validate", scenario, *extra)


# --- numbers out of range, wrong types ------------------------------------------------------

WRONG_TYPES: tuple[Any, ...] = ("abc", [1, 2], {"a": 1}, True, float("nan"), float("inf"))
HUGE: tuple[Any, ...] = (10**400, 2**63, 2**64, 1e308, -1e308, float("-inf"))


def _outside(limit: Limit, integer: bool) -> list[Any]:
    """Values just and far outside ``limit``."""
    values: list[Any] = []
    if integer:
        values += [int(limit.low) - 1, int(limit.high) + 1, int(limit.high) * 10**6]
        values.append(1.5)
    else:
        below = limit.low if limit.low_exclusive else limit.low / 10 if limit.low > 0 else -1e-9
        values += [below, -1.0, limit.high * 10, 1e-300 if limit.low > 0 else -1e-300]
    return values


@dataclass(frozen=True)
class NumberField:
    """A numeric scenario field: where it lives (a section set to ``template`` around it) and
    its range."""

    path: str
    limit: Limit | None
    integer: bool
    template: dict[str, Any] | None = None
    extra_bad: tuple[Any, ...] = ()
    spec: dict[str, Any] | None = None  # more keys to set (e.g. speculative.enabled)

    def section(self) -> str:
        return self.path.rsplit(".", 1)[0] if "." in self.path else ""

    def bad_values(self) -> list[Any]:
        values = list(self.extra_bad)
        if self.limit is not None:
            values += _outside(self.limit, self.integer)
        return [*values, *WRONG_TYPES, *HUGE]


GAMMA = {"kind": "gamma", "rate": 8.0, "cv": 2.0}
CLOSED = {"kind": "closed_loop", "concurrency": 8}
FIXED = {"kind": "fixed", "value": 100}
UNIFORM = {"kind": "uniform", "low": 10, "high": 100}
LOGNORMAL = {"kind": "lognormal", "mean": 500, "sigma": 0.5}
TRACE = {"path": "azure-conv-2023"}
PER_REQUEST = {"kind": "per_request", "mean": 0.7}
TOKEN_LEVEL = {"kind": "token_level"}
SPEC_ON = {"speculative.enabled": True}
STAGES = {"kind": "stages", "stages": [{"rate": 4.0, "duration_s": 5.0}]}
CLIENT = {"timeout_s": 30.0}
POOL = {"system_prompts": 2, "system_tokens": 100, "questions": 3, "question_tokens": 20}
AUTOSCALE = {"max_replicas": 3, "target": 2.0}
NUMBER_FIELDS: tuple[NumberField, ...] = (
    NumberField("seed", SEED, True),
    NumberField("workload.num_requests", REQUESTS, True),
    NumberField("workload.duration_s", DURATION, False),
    NumberField("workload.arrival.rate", RATE, False, {"kind": "poisson", "rate": 1.0}),
    NumberField("workload.arrival.rate", RATE, False, GAMMA),
    NumberField("workload.arrival.cv", GAMMA_CV, False, GAMMA),
    NumberField("workload.arrival.concurrency", CLIENTS, True, CLOSED),
    NumberField("workload.arrival.think_time_s", SIMULATED_TIME, False, CLOSED),
    NumberField("workload.arrival.ramp_s", SIMULATED_TIME, False, CLOSED),
    NumberField("workload.prompt_tokens.value", TOKENS, True, FIXED),
    NumberField("workload.output_tokens.value", TOKENS, True, FIXED),
    NumberField("workload.prompt_tokens.low", TOKENS, True, UNIFORM),
    NumberField("workload.output_tokens.high", TOKENS, True, UNIFORM),
    NumberField("workload.prompt_tokens.mean", TOKENS, False, LOGNORMAL),
    NumberField("workload.prompt_tokens.sigma", LOGNORMAL_SIGMA, False, LOGNORMAL),
    NumberField("workload.output_tokens.max", TOKENS, True, LOGNORMAL),
    NumberField("workload.arrival.gap_s", SIMULATED_TIME, False, STAGES),
    NumberField("workload.client.timeout_s", DURATION, False, CLIENT),
    NumberField("workload.prompt_pool.system_prompts", None, True, POOL, (0, -1, 100_001)),
    NumberField("workload.prompt_pool.questions", None, True, POOL, (0, -3, 10**7 + 1)),
    NumberField("workload.prompt_pool.zipf", None, False, POOL, (-1.0, 10.5)),
    NumberField("workload.trace.time_scale", TIME_SCALE, False, TRACE),
    NumberField("workload.trace.rate_scale", TIME_SCALE, False, TRACE),
    NumberField("workload.trace.start_s", SIMULATED_TIME, False, TRACE),
    NumberField("cluster.tp", None, True, extra_bad=(0, -1, 3, 6, 128)),
    NumberField("cluster.replicas", REPLICAS, True),
    NumberField("cluster.gpu_memory_utilization", None, False, extra_bad=(0.0, -0.5, 1.5)),
    NumberField("cluster.max_model_len", TOKENS, True),
    NumberField("cluster.autoscale.min_replicas", REPLICAS, True, AUTOSCALE),
    NumberField("cluster.autoscale.max_replicas", REPLICAS, True, AUTOSCALE),
    NumberField("cluster.autoscale.initial_replicas", REPLICAS, True, AUTOSCALE),
    NumberField("cluster.autoscale.target", None, False, AUTOSCALE, (0.0, -1.0, 1e10)),
    NumberField("cluster.autoscale.scale_up_delay_s", SIMULATED_TIME, False, AUTOSCALE),
    NumberField("cluster.autoscale.cooldown_s", SIMULATED_TIME, False, AUTOSCALE),
    NumberField("cluster.autoscale.stabilization_s", SIMULATED_TIME, False, AUTOSCALE),
    NumberField("cluster.autoscale.interval_s", None, False, AUTOSCALE, (0.0, -1.0, 1e6)),
    NumberField("cluster.autoscale.weight_load_gbps", None, False, AUTOSCALE, (0.0, -2.0, 1e6)),
    NumberField("scheduler.max_batch_size", BATCH_SIZE, True),
    NumberField("scheduler.max_batched_tokens", TOKENS, True),
    NumberField("scheduler.block_size", BLOCK_SIZE, True),
    NumberField("scheduler.chunk_size", TOKENS, True),
    NumberField("scheduler.watermark", None, False, extra_bad=(-0.1, 1.0, 7.0)),
    NumberField("slo.ttft_s", DURATION, False),
    NumberField("slo.tpot_s", DURATION, False),
    NumberField("output.timeseries_window_s", WINDOW, False),
    NumberField("horizon_s", DURATION, False),
    NumberField(
        "speculative.acceptance.concentration", CONCENTRATION, False, PER_REQUEST, spec=SPEC_ON
    ),
    NumberField("speculative.acceptance.mean", None, False, PER_REQUEST, (0.0, 1.0, -2.0), SPEC_ON),
    NumberField("speculative.acceptance.divergence", DIVERGENCE, False, TOKEN_LEVEL, spec=SPEC_ON),
    NumberField(
        "speculative.acceptance.vocab_size", None, True, TOKEN_LEVEL, (1, 0, 10**6), SPEC_ON
    ),
    NumberField("speculative.policy.k", None, True, {"kind": "fixed"}, (0, 33, -4), SPEC_ON),
    NumberField(
        "speculative.policy.cooldown_steps", STEPS, True, {"kind": "ewma_lookahead"}, spec=SPEC_ON
    ),
)


def number_cases(rng: random.Random) -> Iterator[BadInput]:
    """Every numeric field, each bad value, on a base scenario picked at random."""
    for spec in NUMBER_FIELDS:
        for value in spec.bad_values():
            base_name = rng.choice(sorted(BASES))
            data = BASES[base_name]
            if spec.template is not None:
                data = _set(data, spec.section(), dict(spec.template))
            for key, extra in (spec.spec or {}).items():
                data = _set(data, key, extra)
            data = _set(data, spec.path, value)
            yield BadInput(
                "number",
                f"{spec.path}={value!r:.40} on {base_name}",
                _validate_or_run(rng, "{tmp}/scenario.yaml"),
                ("{tmp}/scenario.yaml", spec.path),
                {"scenario.yaml": _dump(data)},
            )


# --- fields fine one by one, not together -------------------------------------------------

NO_SYNTHETIC = {
    "workload.arrival": None,
    "workload.num_requests": None,
    "workload.duration_s": None,
}
COMBINATIONS: tuple[tuple[str, dict[str, Any], str], ...] = (
    (
        "10M requests at 1e-6/s span 317 years",
        {
            "workload.num_requests": 10_000_000,
            "workload.arrival": {"kind": "poisson", "rate": 1e-6},
        },
        "workload.arrival.rate",
    ),
    (
        "a year at a million requests/s",
        {
            "workload.num_requests": None,
            "workload.duration_s": 3e7,
            "workload.arrival": {"kind": "poisson", "rate": 1e6},
        },
        "workload.duration_s",
    ),
    (
        "a year in millisecond windows",
        {
            "workload.num_requests": None,
            "workload.duration_s": 3e7,
            "workload.arrival": {"kind": "poisson", "rate": 0.01},
            "output.timeseries_window_s": 0.001,
        },
        "output.timeseries_window_s",
    ),
    (
        "trace slowed a million times",
        {"workload.trace": {"path": "azure-conv-2023", "time_scale": 1e6}, **NO_SYNTHETIC},
        "workload.trace",
    ),
    (
        "trace start past its end",
        {"workload.trace": {"path": "azure-conv-2023", "start_s": 1e7}, **NO_SYNTHETIC},
        "workload.trace",
    ),
    (
        "uniform low above high",
        {"workload.prompt_tokens": {"kind": "uniform", "low": 50, "high": 10}},
        "workload.prompt_tokens",
    ),
    (
        "lognormal min above max",
        {
            "workload.output_tokens": {
                "kind": "lognormal",
                "mean": 9,
                "sigma": 1,
                "min": 9,
                "max": 3,
            }
        },
        "workload.output_tokens",
    ),
    (
        "both trace scales",
        {"workload.trace": {"path": "azure-conv-2023", "time_scale": 2, "rate_scale": 2}},
        "workload.trace",
    ),
    (
        "70B on one L40S",
        {"cluster.model": "llama-3-70b", "cluster.gpu": "l40s", "cluster.tp": 1},
        "cluster.tp",
    ),
    (
        "tp beyond 64",
        {"cluster.tp": 128},
        "cluster.tp",
    ),
    (
        "10,000 replicas of tp 16 GPUs",
        {"cluster.replicas": 10_000, "cluster.tp": 16},
        "cluster",
    ),
    (
        "fp4 on an H100",
        {"cluster.dtype": "fp4", "cluster.gpu": "h100-sxm"},
        "cluster.dtype",
    ),
    (
        "stages and num_requests",
        {"workload.arrival": STAGES, "workload.num_requests": 50, "workload.duration_s": None},
        "workload",
    ),
    (
        "a stage at no rate",
        {
            "workload.arrival": {"kind": "stages", "stages": [{"rate": 0, "duration_s": 5.0}]},
            "workload.num_requests": None,
            "workload.duration_s": None,
        },
        "workload.arrival.stages[0].rate",
    ),
    (
        "a stage without a duration",
        {
            "workload.arrival": {"kind": "stages", "stages": [{"rate": 1.0}], "gap_s": 1},
            "workload.num_requests": None,
            "workload.duration_s": None,
        },
        "workload.arrival.stages[0].duration_s",
    ),
    (
        "stages of a year at a million requests/s",
        {
            "workload.arrival": {"kind": "stages", "stages": [{"rate": 1e6, "duration_s": 3e7}]},
            "workload.num_requests": None,
            "workload.duration_s": None,
        },
        "workload.arrival.stages",
    ),
    (
        "a rate curve out of order",
        {"workload.arrival": {"kind": "rate_curve", "points": [[0, 1], [10, 2], [5, 1]]}},
        "workload.arrival.points",
    ),
    (
        "a rate curve of one point",
        {"workload.arrival": {"kind": "rate_curve", "points": [[0, 1]]}},
        "workload.arrival.points",
    ),
    (
        "a rate curve at rate 0 throughout",
        {"workload.arrival": {"kind": "rate_curve", "points": [[0, 0], [60, 0]]}},
        "workload.arrival.points",
    ),
    (
        "a rate curve point that is no pair",
        {"workload.arrival": {"kind": "rate_curve", "points": [[0, 1], [60, 2, 3]]}},
        "workload.arrival.points[1]",
    ),
    (
        "a rate curve with both points and csv",
        {"workload.arrival": {"kind": "rate_curve", "points": [[0, 1], [9, 1]], "csv": "a.csv"}},
        "workload.arrival",
    ),
    (
        "a rate curve of a million requests/s for a day",
        {
            "workload.arrival": {"kind": "rate_curve", "points": [[0, 1e6], [86400, 1e6]]},
            "workload.num_requests": None,
            "workload.duration_s": None,
        },
        "workload.arrival",
    ),
    (
        "a prompt pool beside prompt lengths",
        {"workload.prompt_pool": POOL, "workload.prompt_tokens": FIXED},
        "workload",
    ),
    (
        "a prompt pool of 100 million prompts",
        {"workload.prompt_pool": {**POOL, "system_prompts": 10_000, "questions": 10_000}},
        "workload.prompt_pool",
    ),
    (
        "autoscale metric misspelt",
        {"cluster.autoscale": {"max_replicas": 2, "target": 1.0, "metric": "queu"}},
        "cluster.autoscale.metric",
    ),
    (
        "autoscale min_replicas above max_replicas",
        {"cluster.autoscale": {"min_replicas": 3, "max_replicas": 2, "target": 1.0}},
        "cluster.autoscale",
    ),
    (
        "autoscale kv_utilization target above 1",
        {"cluster.autoscale": {"max_replicas": 2, "target": 4.0, "metric": "kv_utilization"}},
        "cluster.autoscale",
    ),
    (
        "autoscale initial_replicas beyond max_replicas",
        {"cluster.autoscale": {"max_replicas": 2, "target": 1.0, "initial_replicas": 5}},
        "cluster.autoscale",
    ),
    (
        "autoscale beside a fleet of other replicas",
        {"cluster.replicas": 7, "cluster.autoscale": {"max_replicas": 2, "target": 1.0}},
        "cluster",
    ),
    (
        "autoscale of a mixed fleet",
        {
            "cluster.pools": [{"replicas": 1}],
            "cluster.autoscale": {"max_replicas": 2, "target": 1.0},
        },
        "cluster",
    ),
    (
        "threshold k above k_max",
        {
            "speculative.enabled": True,
            "speculative.policy": {"kind": "threshold", "k": 9, "k_max": 3},
        },
        "speculative.policy",
    ),
)


POOLED_KEYS = frozenset({"disaggregation", "pools", "dp", "ep"})
"""Cluster keys of a base whose pools or MoE ranks a combination of cluster keys would not
reach (its pools' GPUs serve) or would meet first (a dense model with ``dp``)."""


def combination_cases(rng: random.Random) -> Iterator[BadInput]:
    for (label, settings, field_path), base_name in itertools.product(COMBINATIONS, sorted(BASES)):
        data = BASES[base_name]
        if "sessions" in data["workload"] and any(k.startswith("workload.") for k in settings):
            continue  # combinations of a request-level workload's keys: not a sessions base's
        if any(k.startswith("cluster.") for k in settings) and POOLED_KEYS & set(data["cluster"]):
            continue  # its pools (or its MoE ranks) say what the cluster's keys would
        for key, value in settings.items():
            data = _set(data, key, value)
        data["workload"] = {k: v for k, v in data["workload"].items() if v is not None}
        yield BadInput(
            "combination",
            f"{label} on {base_name}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", field_path),
            {"scenario.yaml": _dump(data)},
        )


# --- unknown names and keys, wrong structure ----------------------------------------------

UNKNOWN_NAMES: tuple[tuple[str, Any], ...] = (
    ("cluster.gpu", "h100"),
    ("cluster.gpu", "H100 SXM"),
    ("cluster.gpu", "tpu-v5e"),
    ("cluster.gpu", ""),
    ("cluster.gpu", 100),
    ("cluster.model", "llama3-8b"),
    ("cluster.model", "gpt-4"),
    ("cluster.model", "missing-config.json"),
    ("cluster.model", ["llama-3-8b"]),
    ("cluster.engine", "vllmm"),
    ("cluster.engine", "missing-profile.json"),
    ("cluster.calibration", "no-such-profile"),
    ("cluster.dtype", "int3"),
    ("cluster.kv_dtype", "fp4"),
    ("cluster.router", "rr"),
    ("scheduler.kind", "vllm2"),
    ("workload.arrival.kind", "poison"),
    ("workload.prompt_tokens.kind", "normal"),
    ("workload.trace.path", "azure-conv"),
    ("workload.trace.path", "no-such-trace.csv"),
    ("speculative.proposer.kind", "medusa"),
    ("speculative.acceptance.kind", "oracle"),
    ("speculative.policy.kind", "adaptive"),
    ("speculative.proposer.model", "llama-3.2-1bb"),
)
UNKNOWN_KEYS = (
    "nmae",
    "workload.num_request",
    "cluster.gpus",
    "scheduler.max_batch_sise",
    "slo.ttft",
    "output.window_s",
    "speculative.enable",
)
WRONG_SECTIONS: tuple[tuple[str, Any], ...] = (
    ("workload", 5),
    ("workload", [1, 2]),
    ("cluster", "h100-sxm"),
    ("scheduler", [{"kind": "vllm"}]),
    ("slo", 0.1),
    ("speculative", True),
    ("name", "a/b"),
    ("name", ""),
    ("fast_forward", "maybe"),
)


def name_cases(rng: random.Random) -> Iterator[BadInput]:
    for (path, value), base_name in zip(
        UNKNOWN_NAMES * 2, itertools.cycle(sorted(BASES)), strict=False
    ):
        if "sessions" in BASES[base_name]["workload"] and path.startswith("workload."):
            continue  # a sessions base refuses a request-level workload's keys first
        data = _set(BASES[base_name], path, value)
        if path.startswith("speculative."):
            data = _set(data, "speculative.enabled", True)
        where = path if not path.endswith((".kind", ".path")) else path.rsplit(".", 1)[0]
        yield BadInput(
            "name",
            f"{path}={value!r} on {base_name}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", where),
            {"scenario.yaml": _dump(data)},
        )
    for path in UNKNOWN_KEYS:
        data = _set(BASES[rng.choice(sorted(BASES))], path, 1)
        yield BadInput(
            "name",
            f"unknown key {path}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", path),
            {"scenario.yaml": _dump(data)},
        )
    for path, value in WRONG_SECTIONS:
        data = _set(BASES[rng.choice(sorted(BASES))], path, value)
        yield BadInput(
            "name",
            f"section {path}={value!r}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", path),
            {"scenario.yaml": _dump(data)},
        )
    for label, text in (
        ("top-level list", b"- 1\n- 2\n"),
        ("empty file", b""),
        ("no workload", b"name: x\nseed: 1\n"),
        ("a scalar", b"42\n"),
    ):
        yield BadInput(
            "name",
            label,
            ("validate", "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml",),
            {"scenario.yaml": text},
        )


# --- files that are not UTF-8, nested too deep, with duplicate keys, alias bombs ---------

BAD_BYTES = (
    b"\xff",
    b"\xfe\xff",
    b"\xc3\x28",
    b"\xa0\xa1",
    b"\xed\xa0\x80",
    b"\xf8\x88\x80\x80\x80",
    b"\x80",
)


def _insert_bad_bytes(text: bytes, rng: random.Random) -> bytes:
    lines = text.split(b"\n")
    row = rng.randrange(len(lines))
    column = rng.randrange(len(lines[row]) + 1)
    lines[row] = lines[row][:column] + rng.choice(BAD_BYTES) + lines[row][column:]
    return b"\n".join(lines)


def _nested(depth: int, style: str) -> str:
    if style == "flow-list":
        return "[" * depth + "1" + "]" * depth
    if style == "flow-map":
        return "{a: " * depth + "1" + "}" * depth
    return "\n" + "".join("  " * (i + 1) + "a:\n" for i in range(depth)) + "  " * (depth + 1) + "1"


def _bomb(levels: int, width: int) -> str:
    lines = ["  x0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"  x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines)


def file_cases(rng: random.Random) -> Iterator[BadInput]:
    """Scenario files broken as text: encoding, nesting, duplicate keys, aliases, syntax."""
    for i in range(26):
        base = rng.choice(SCENARIOS)
        raw = base.read_bytes()
        content = (
            raw.decode("utf-8").encode("utf-16")
            if i % 13 == 12
            else raw.replace(b"name: ", b"name: caf\xe9-", 1)
            if i % 13 == 11
            else _insert_bad_bytes(raw, rng)
        )
        yield BadInput(
            "file",
            f"not UTF-8 #{i} ({base.stem})",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "UTF-8"),
            {"scenario.yaml": content},
        )
    for depth, style in itertools.product(
        (MAX_NESTING + 1, 200, 3000, 20000), ("flow-list", "flow-map", "block")
    ):
        if style == "block" and depth > 3000:
            continue
        text = SCENARIOS[0].read_text(encoding="utf-8") + f"extra: {_nested(depth, style)}\n"
        yield BadInput(
            "file",
            f"nested {depth} deep ({style})",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "nested"),
            {"scenario.yaml": text.encode("utf-8")},
        )
    for base in SCENARIOS:
        text = base.read_text(encoding="utf-8")
        lines = text.splitlines()
        top = [line for line in lines if re.match(r"^[a-z_]+:", line)]
        yield BadInput(
            "file",
            f"duplicate top-level key ({base.stem})",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "duplicate key"),
            {"scenario.yaml": (text + rng.choice(top) + "\n").encode("utf-8")},
        )
        yield BadInput(
            "file",
            f"duplicate nested key ({base.stem})",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "duplicate key 'tp'"),
            {"scenario.yaml": (text + "extra:\n  tp: 1\n  tp: 2\n").encode("utf-8")},
        )
    for levels, width in ((9, 10), (6, 10), (30, 2), (4, 40)):
        text = SCENARIOS[0].read_text(encoding="utf-8") + "bomb:\n" + _bomb(levels, width) + "\n"
        yield BadInput(
            "file",
            f"alias bomb {width}^{levels}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "aliases"),
            {"scenario.yaml": text.encode("utf-8")},
        )
    for label, text, name in (
        ("recursive alias", "name: &n [*n]\n", "alias"),
        ("unclosed bracket", "workload: {num_requests: 3\n", "invalid YAML"),
        ("tab indentation", "workload:\n\tnum_requests: 3\n", "invalid YAML"),
        ("impossible date", "name: 2023-13-45\nworkload: {}\n", "invalid YAML"),
        ("python tag", "name: !!python/object/apply:os.system ['true']\n", "invalid YAML"),
        ("unhashable key", "? [a, b]\n: 1\n", "invalid YAML"),
        ("NUL byte", "name: a\x00b\n", "invalid YAML"),
    ):
        yield BadInput(
            "file",
            label,
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", name),
            {"scenario.yaml": text.encode("utf-8")},
        )


# --- traces -------------------------------------------------------------------------------


def _csv(
    rows: list[tuple[Any, Any, Any]], header: str = "timestamp,input_length,output_length"
) -> bytes:
    return ("\n".join([header, *(",".join(str(v) for v in row) for row in rows)]) + "\n").encode()


BAD_TOKENS: tuple[Any, ...] = (0, -5, 2**63, 2**64 + 3, "1e30", 1.5, "abc", "nan", "inf", 10**25)
BAD_TIMES: tuple[Any, ...] = (-1, "nan", "x", "inf", "-inf")


def trace_files(rng: random.Random) -> Iterator[tuple[str, str, bytes, str]]:
    """(label, file name, content, what the error names) of broken trace files."""
    for value in BAD_TOKENS:
        column = rng.choice(("input_length", "output_length"))
        rows = [(0, 100, 10), (250, 100, 10), (400, 100, 10)]
        row = rng.randrange(len(rows))
        rows[row] = (
            rows[row][0],
            value if column == "input_length" else 100,
            value if column == "output_length" else 10,
        )
        yield f"token count {value!r}", "trace.csv", _csv(rows), column
        record = {"timestamp": 0, "input_length": 100, "output_length": 10, column: value}
        yield (
            f"jsonl token count {value!r}",
            "trace.jsonl",
            (json.dumps(record) + "\n").encode(),
            column,
        )
    for value in BAD_TIMES:
        yield f"arrival {value!r}", "trace.csv", _csv([(0, 5, 5), (value, 5, 5)]), "timestamp"
    yield (
        "span of 300 years",
        "trace.csv",
        _csv([(0, 5, 5), (1e13, 5, 5)], "arrival_s,prompt_tokens,output_tokens"),
        "spans",
    )
    yield "not UTF-8", "trace.csv", _csv([(0, 5, 5)]).replace(b"input", b"inp\xffut"), "CSV"
    yield "jsonl not UTF-8", "trace.jsonl", b'{"timestamp": 0, "input_length": "\xff"}\n', "UTF-8"
    yield "empty", "trace.csv", b"", "empty"
    yield "header only", "trace.csv", b"timestamp,input_length,output_length\n", "no requests"
    yield "no length column", "trace.csv", b"timestamp,foo\n0,1\n", "prompt-length"
    yield "json deeply nested", "trace.jsonl", ("[" * 5000 + "]" * 5000).encode(), "trace"
    yield "not a trace type", "trace.txt", b"hello\n", "unsupported"
    yield "broken parquet", "trace.parquet", b"PAR1 not really", "parquet"


def trace_cases(rng: random.Random) -> Iterator[BadInput]:
    for label, name, content, what in trace_files(rng):
        base = rng.choice(["azure-conv-replay", "multi-replica-70b", "capacity-70b-azure"])
        replay = rng.random() < 0.7
        if replay:
            data = _set(BASES[base], "workload.trace.path", f"{{tmp}}/{name}")
            data["workload"].pop("duration_s", None)
            field_path = "workload.trace.path"
        else:
            data = _set(
                BASES["chat-llama3-8b-h100"],
                "workload.prompt_tokens",
                {"kind": "empirical", "trace": f"{{tmp}}/{name}"},
            )
            field_path = "workload.prompt_tokens.trace"
        yield BadInput(
            "trace",
            f"{label} ({'replayed' if replay else 'empirical'})",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", field_path, what),
            {"scenario.yaml": _dump(data), name: content},
        )
    for label, content, what in (
        (
            "prompt_len 2^70",
            b"request_id,prompt_len,output_len,acc_len\nr,%d,2,1 1\n" % 2**70,
            "prompt_len",
        ),
        (
            "output_len abc",
            b"request_id,prompt_len,output_len,acc_len\nr,5,abc,1 1\n",
            "output_len",
        ),
        (
            "acc_len huge",
            b"request_id,prompt_len,output_len,acc_len\nr,5,2,1 %d\n" % 10**30,
            "acc_len",
        ),
        ("missing columns", b"request_id,prompt_len\nr,5\n", "missing column"),
        ("not UTF-8", b"request_id,prompt_len,output_len,acc_len\n\xff,5,2,1 1\n", "CSV"),
        ("empty", b"request_id,prompt_len,output_len,acc_len\n", "no requests"),
    ):
        data = _set(
            BASES["spec-eagle-goodput"],
            "speculative.acceptance",
            {"kind": "trace", "path": "{tmp}/acc.csv"},
        )
        yield BadInput(
            "trace",
            f"acceptance trace {label}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "speculative.acceptance.path", what),
            {"scenario.yaml": _dump(data), "acc.csv": content},
        )
    yield from rate_curve_file_cases()


RATE_CURVE_FILES: tuple[tuple[str, bytes, str], ...] = (
    ("out of order", b"t_s,rate\n0,1\n10,2\n5,1\n", "row 4"),
    ("no rate column", b"t_s,r\n0,1\n10,2\n", "rate"),
    ("a rate abc", b"t_s,rate\n0,abc\n10,2\n", "numbers"),
    ("a negative rate", b"t_s,rate\n0,-1\n10,2\n", "row 2"),
    ("a rate inf", b"t_s,rate\n0,inf\n10,2\n", "row 2"),
    ("a time of 2 years", b"t_s,rate\n0,1\n63072000,2\n", "row 3"),
    ("all rates 0", b"t_s,rate\n0,0\n10,0\n", "every rate"),
    ("one point", b"t_s,rate\n0,1\n", "at least 2"),
    ("empty", b"", "curve.csv"),
    ("not UTF-8", b"t_s,rate\n\xff,1\n10,2\n", "curve.csv"),
)


def rate_curve_file_cases() -> Iterator[BadInput]:
    """Bad rate-curve CSV files (``workload.arrival.csv``): the error names the scenario, the
    field and what is wrong (the row, when one is). Their own random stream, so the campaign's
    other cases stay as they were."""
    rng = random.Random("rate-curve-files")
    for label, content, what in RATE_CURVE_FILES:
        data = _set(
            BASES["chat-llama3-8b-h100"],
            "workload.arrival",
            {"kind": "rate_curve", "csv": "curve.csv"},  # relative to the scenario
        )
        data["workload"].pop("num_requests", None)
        yield BadInput(
            "trace",
            f"rate curve file {label}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "workload.arrival.csv", what),
            {"scenario.yaml": _dump(data), "curve.csv": content},
        )
    data = _set(BASES["chat-llama3-8b-h100"], "workload.arrival", {"kind": "rate_curve"})
    data["workload"]["arrival"]["csv"] = "missing.csv"
    yield BadInput(
        "trace",
        "rate curve file missing",
        _validate_or_run(rng, "{tmp}/scenario.yaml"),
        ("{tmp}/scenario.yaml", "workload.arrival.csv", "missing.csv"),
        {"scenario.yaml": _dump(data)},
    )


# --- model configs and profiles -----------------------------------------------------------

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}
BAD_CONFIGS: tuple[tuple[str, dict[str, Any], str], ...] = (
    (
        "Mixtral",
        {
            **LLAMA_CONFIG,
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "num_local_experts": 8,
        },
        "num_experts_per_tok",
    ),
    (
        "Qwen2-MoE",
        {**LLAMA_CONFIG, "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe"},
        "mixture-of-experts",
    ),
    ("DeepSeek-V3 experts", {**LLAMA_CONFIG, "n_routed_experts": 256}, "n_routed_experts"),
    ("GPT-2", {**LLAMA_CONFIG, "architectures": ["GPT2LMHeadModel"]}, "architectures"),
    ("unknown model_type", {**LLAMA_CONFIG, "model_type": "falcon"}, "model_type"),
    (
        "missing hidden_size",
        {k: v for k, v in LLAMA_CONFIG.items() if k != "hidden_size"},
        "hidden_size",
    ),
    ("negative layers", {**LLAMA_CONFIG, "num_hidden_layers": -1}, "num_hidden_layers"),
    ("huge layers", {**LLAMA_CONFIG, "num_hidden_layers": 10**30}, "num_hidden_layers"),
    ("string heads", {**LLAMA_CONFIG, "num_attention_heads": "32"}, "num_attention_heads"),
    ("huge vocabulary", {**LLAMA_CONFIG, "vocab_size": 2**62}, "vocab_size"),
    ("kv heads not dividing", {**LLAMA_CONFIG, "num_key_value_heads": 5}, "num_key_value_heads"),
    (
        "huge context",
        {**LLAMA_CONFIG, "max_position_embeddings": 10**12},
        "max_position_embeddings",
    ),
    ("float head_dim", {**LLAMA_CONFIG, "head_dim": 12.5}, "head_dim"),
)
BAD_JSON: tuple[tuple[str, bytes, str], ...] = (
    ("invalid JSON", b'{"a": ', "JSON"),
    ("not UTF-8", b'{"a": "\xff"}', "UTF-8"),
    ("nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000, "nested"),
    ("nested 70 deep", b'{"a": ' * 70 + b"1" + b"}" * 70, "nested"),
    ("a list", b"[1, 2]", ""),
)


def config_cases(rng: random.Random) -> Iterator[BadInput]:
    for label, config, key in BAD_CONFIGS:
        base = rng.choice(sorted(BASES))
        yield BadInput(
            "config",
            f"config.json {label}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "cluster.model", "{tmp}/m/config.json", key),
            {
                "scenario.yaml": _dump(_set(BASES[base], "cluster.model", "{tmp}/m/config.json")),
                "m/config.json": json.dumps(config).encode(),
            },
        )
    for (label, content, what), (field_path, name) in itertools.product(
        BAD_JSON,
        (
            ("cluster.model", "config.json"),
            ("cluster.engine", "engine.json"),
            ("cluster.calibration", "calib.json"),
        ),
    ):
        data = _set(BASES[rng.choice(sorted(BASES))], field_path, f"{{tmp}}/{name}")
        yield BadInput(
            "config",
            f"{field_path} {label}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", field_path, f"{{tmp}}/{name}", what),
            {"scenario.yaml": _dump(data), name: content},
        )


# --- sweep files --------------------------------------------------------------------------


def sweep_cases(rng: random.Random) -> Iterator[BadInput]:
    base = str(SCENARIOS[0])
    ten = list(range(1, 11))
    sweeps: list[tuple[str, Any, str]] = [
        ("10^10-point grid", {"base": base, "grid": {f"a.k{i}": ten for i in range(10)}}, "grid"),
        (
            "10^4 grid x 3 seeds",
            {"base": base, "grid": {f"a.k{i}": ten for i in range(4)}, "seeds": [1, 2, 3]},
            "grid",
        ),
        ("negative seed", {"base": base, "seeds": [-1]}, "seeds"),
        ("huge seed", {"base": base, "seeds": [2**64]}, "seeds"),
        ("boolean seed", {"base": base, "seeds": [True]}, "seeds"),
        ("repeated seeds", {"base": base, "seeds": [1, 1]}, "seeds"),
        ("empty grid axis", {"base": base, "grid": {"scheduler.kind": []}}, "grid"),
        ("grid axis not a list", {"base": base, "grid": {"scheduler.kind": "vllm"}}, "grid"),
        ("seed as a grid key", {"base": base, "grid": {"seed": [1, 2]}}, "grid"),
        ("points not a list", {"base": base, "points": {"a": 1}}, "points"),
        ("no base", {"grid": {"scheduler.kind": ["vllm"]}}, "base"),
        ("missing base file", {"base": "nope.yaml"}, "base"),
        ("base a number", {"base": 5}, "base"),
        ("unknown key", {"base": base, "gird": {}}, "gird"),
        ("name with a slash", {"base": base, "name": "a/b"}, "name"),
    ]
    for label, data, what in sweeps:
        yield BadInput(
            "sweep",
            label,
            ("sweep", "{tmp}/sweep.yaml", "--out", "{tmp}/out", "--quiet"),
            ("{tmp}/sweep.yaml", what),
            {"sweep.yaml": _dump(data)},
        )
    good = f"base: {base}\ngrid:\n  workload.arrival.rate: [1, 2]\n"
    texts: list[tuple[str, bytes, str]] = [
        ("not UTF-8", _insert_bad_bytes(good.encode(), rng), "UTF-8"),
        ("duplicate grid key", (good + "  workload.arrival.rate: [3]\n").encode(), "duplicate key"),
        ("duplicate section", (good + "grid: {}\n").encode(), "duplicate key"),
        (
            "alias bomb in points",
            (
                f"base: {base}\nbomb:\n{_bomb(9, 10)}\npoints:\n  - {{workload.arrival.rate: *a8}}\n"
            ).encode(),
            "aliases",
        ),
        (
            "nested 5000 deep",
            (good + "points: " + _nested(5000, "flow-list") + "\n").encode(),
            "nested",
        ),
        ("base nested 300 deep", f"base: {_nested(300, 'flow-map')}\n".encode(), "nested"),
    ]
    for label, content, what in texts:
        yield BadInput(
            "sweep",
            label,
            ("sweep", "{tmp}/sweep.yaml", "--out", "{tmp}/out", "--quiet"),
            ("{tmp}/sweep.yaml", what),
            {"sweep.yaml": content},
        )
    bad_base = _insert_bad_bytes(SCENARIOS[0].read_bytes(), rng)
    yield BadInput(
        "sweep",
        "base file not UTF-8",
        ("sweep", "{tmp}/sweep.yaml", "--out", "{tmp}/out", "--quiet"),
        ("{tmp}/sweep.yaml", "base", "UTF-8"),
        {"sweep.yaml": b"base: base.yaml\n", "base.yaml": bad_base},
    )


# --- engine profiles ----------------------------------------------------------------------

SESSIONS = {
    "turns": {"kind": "uniform", "low": 3, "high": 9},
    "user_tokens": {"kind": "fixed", "value": 100},
    "answer_tokens": {"kind": "fixed", "value": 50},
}
SMALL_LOAD = {
    "name": "guard",
    "workload": {
        "num_requests": 100,
        "arrival": {"kind": "poisson", "rate": 2.0},
        "prompt_tokens": {"kind": "fixed", "value": 100},
        "output_tokens": {"kind": "fixed", "value": 10},
    },
    "cluster": {"model": "llama-3.1-8b", "gpu": "h100-sxm"},
    "slo": {"ttft_s": 2.0, "tpot_s": 0.1},
}


VLLM_PROFILE: dict[str, Any] = json.loads(
    (ROOT / "cbsim" / "catalog" / "data" / "profiles" / "engines" / "vllm.json").read_text(
        encoding="utf-8"
    )
)
BAD_PROFILE_VALUES: tuple[tuple[str, Any], ...] = (
    ("overhead.serial_s", math.inf),
    ("overhead.serial_s", math.nan),
    ("overhead.cpu_per_token_s", 1e300),
    ("overhead.serial_per_layer_s", 11.0),
    ("frontend.request_s", math.inf),
    ("frontend.output_token_s", -1.0),
    ("defaults.scheduler.block_size", 10**9),
    ("defaults.scheduler.max_batch_size", 10**12),
    ("defaults.scheduler.max_batched_tokens", 2**40),
    ("gpu_defaults.h100-sxm.scheduler.block_size", 0),
    ("custom_allreduce.latency_s", math.inf),
    ("fitted_range.batch_size", [64, 1]),
)


def engine_profile_cases(rng: random.Random) -> Iterator[BadInput]:
    """Engine profiles (``cluster.engine: profile.json``) with a value out of its range: the
    error names the scenario, its field, the profile file and the profile's field."""
    for dotted, value in BAD_PROFILE_VALUES:
        profile = _set(VLLM_PROFILE, dotted, value)
        scenario = _set(SMALL_LOAD, "cluster.engine", "{tmp}/engine.json")
        yield BadInput(
            "profile",
            f"engine profile {dotted} {value!r}",
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "cluster.engine", "{tmp}/engine.json", dotted),
            {"scenario.yaml": _dump(scenario), "engine.json": json.dumps(profile).encode()},
        )


# --- calibrate e2e data -------------------------------------------------------------------

VLLM_RESULT: dict[str, Any] = {
    "backend": "vllm",
    "model_id": "meta-llama/Llama-3.1-8B",
    "completed": 64,
    "num_prompts": 64,
    "max_concurrency": 4,
    "request_rate": "inf",
    "total_input_tokens": 64 * 512,
    "total_output_tokens": 64 * 128,
    "mean_ttft_ms": 40.0,
    "mean_tpot_ms": 8.0,
    "gpu": "h100-sxm",
    "tp": 1,
    "dtype": "bf16",
}
NORMALISED_HEADER = "engine,gpu,model,dtype,tp,isl,osl,concurrency,ttft_mean_s,tpot_mean_s"
NORMALISED_ROW = ("vllm", "h100-sxm", "llama-3.1-8b", "bf16", 1, 1024, 128, 8, 0.19, 0.008)
PER_REQUEST_HEADER = "send_s,prompt_tokens,output_tokens,ttft_s,generation_time_s"
BAD_RESULT_VALUES: tuple[tuple[str, Any, str], ...] = (
    ("completed", 1e30, "completed"),
    ("mean_ttft_ms", 1e308, "mean_ttft_ms"),
    ("mean_tpot_ms", 1e12, "mean_tpot_ms"),
    ("max_concurrency", 1_000_000, "max_concurrency"),
    ("num_prompts", 10**9, "num_prompts"),
    ("total_input_tokens", 64 * 200_000, "total_input_tokens"),  # beyond the context
    ("total_input_tokens", 10, "total_input_tokens"),  # under one token a request
    ("output_throughput", 1e30, "output_throughput"),
    ("tp", 10**6, "tp"),
    ("backend", "tensorrt-llm", "backend"),  # fitted as --engine vllm
)
BAD_NORMALISED_CELLS: tuple[tuple[int, Any, str], ...] = (
    (5, 200_000, "isl"),  # beyond llama-3.1-8b's 131,072-token context
    (5, 0.5, "isl"),
    (7, 1e6, "concurrency"),
    (8, 1e9, "ttft_mean_s"),
    (4, 3, "tp"),  # not a tensor-parallel degree: named in the file, not as cluster.tp
)
BAD_PER_REQUEST_CELLS: tuple[tuple[int, Any, str], ...] = (
    (1, 1e30, "prompt_tokens"),
    (1, 200_000, "prompt_tokens"),  # beyond the context
    (1, 100.5, "prompt_tokens"),
    (3, -0.05, "ttft_s"),
    (3, "inf", "ttft_s"),
    (0, 1e30, "send_s"),
)


def _per_request_csv(column: int, value: Any) -> bytes:
    rows = [[0.0, 100, 10, 0.05, 0.1], [1.0, 120, 12, 0.06, 0.12]]
    rows[1][column] = value
    lines = [PER_REQUEST_HEADER, *(",".join(str(v) for v in row) for row in rows)]
    return ("\n".join(lines) + "\n").encode()


def benchmark_cases(rng: random.Random) -> Iterator[BadInput]:
    """``cbsim calibrate e2e`` data (vLLM results, normalised tables, per-request logs) with a
    value out of range: the error names the data file and its field, never a field of the
    scenario cbsim makes of it."""
    fit = ("calibrate", "e2e", "--engine", "vllm", "--out", "{tmp}/profile.json")
    for key, value, field_name in BAD_RESULT_VALUES:
        record = {**VLLM_RESULT, key: value}
        yield BadInput(
            "benchmark",
            f"vllm result {key} {value!r}",
            (*fit, "--data", "{tmp}/bench.json"),
            ("{tmp}/bench.json", field_name),
            {"bench.json": json.dumps(record).encode()},
        )
    for column, value, field_name in BAD_NORMALISED_CELLS:
        row = list(NORMALISED_ROW)
        row[column] = value
        table = f"{NORMALISED_HEADER}\n{','.join(str(v) for v in row)}\n"
        yield BadInput(
            "benchmark",
            f"normalised table {field_name} {value!r}",
            (*fit, "--data", "{tmp}/bench.csv"),
            ("{tmp}/bench.csv", field_name),
            {"bench.csv": table.encode()},
        )
    for column, value, field_name in BAD_PER_REQUEST_CELLS:
        yield BadInput(
            "benchmark",
            f"per-request log {field_name} {value!r}",
            (*fit, "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--data", "{tmp}/log.csv"),
            ("{tmp}/log.csv", field_name),
            {"log.csv": _per_request_csv(column, value)},
        )
    rows = ("0.0,0.0,100,10,0.05,0.1", "1.0,1.0,120,12,0.06,0.12")
    for label, header, named in (
        ("both conventions", "send_s,launch_time,prompt_tokens,output_tokens,ttft_s,generation_time_s", "launch_time"),
        ("a column twice", "send_s,prompt_tokens,output_tokens,ttft_s,ttft_s,generation_time_s", "ttft_s"),
    ):  # fmt: skip
        yield BadInput(
            "benchmark",
            f"per-request log with {label}",
            (*fit, "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--data", "{tmp}/log.csv"),
            ("{tmp}/log.csv", named),
            {"log.csv": "\n".join((header, *rows)).encode() + b"\n"},
        )


# --- prefix ids and dates in traces -------------------------------------------------------

TRACE_HEADER = "timestamp,input_length,output_length,hash_ids"


def _ids_trace(cell: str) -> bytes:
    return f'{TRACE_HEADER}\n0,600,10,"[1, 2]"\n1,600,10,"{cell}"\n'.encode()


def _ids_parquet(ids: list[int]) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "timestamp": [0, 1],
            "input_length": [600, 600],
            "output_length": [10, 10],
            "hash_ids": pa.array([[1, 2], ids], type=pa.list_(pa.uint64())),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def trace_id_cases(rng: random.Random) -> Iterator[BadInput]:
    """Traces whose prefix block ids or dates cbsim cannot hold: nested lists, integers beyond
    int64, date-times outside what a nanosecond clock holds."""
    files: list[tuple[str, str, bytes, str]] = [
        ("ids nested 3,000 deep", "trace.csv", _ids_trace("[" * 3000 + "]" * 3000), "hash_ids"),
        ("ids nested once", "trace.csv", _ids_trace("[[1, 2], [3]]"), "hash_ids"),
        ("id 2^64", "trace.csv", _ids_trace(f"[1, {2**64}]"), "hash_ids"),
        ("id -2^63 - 1", "trace.csv", _ids_trace(f"[{-(2**63) - 1}]"), "hash_ids"),
        (
            "jsonl id 2^64",
            "trace.jsonl",
            b'{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [%d]}\n'
            % 2**64,
            "hash_ids",
        ),
        ("parquet uint64 id", "trace.parquet", _ids_parquet([2**64 - 1]), "hash_ids"),
        (
            "timestamp in year 1",
            "trace.csv",
            b"timestamp,input_length,output_length\n"
            b"0001-01-01 00:00:00,600,10\n0001-01-01 00:00:05,600,10\n",
            "timestamp",
        ),
        (
            "timestamp in year 9999",
            "trace.csv",
            b"timestamp,input_length,output_length\n"
            b"2024-01-01 00:00:00,600,10\n9999-01-01 00:00:00,600,10\n",
            "timestamp",
        ),
    ]
    for label, name, content, column in files:
        data = _set(SMALL_LOAD, "workload", {"trace": {"path": f"{{tmp}}/{name}"}})
        data["cluster"]["prefix_caching"] = True
        yield BadInput(
            "trace ids",
            label,
            _validate_or_run(rng, "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "workload.trace.path", f"{{tmp}}/{name}", column),
            {"scenario.yaml": _dump(data), name: content},
        )


# --- what only a run or a search tells ------------------------------------------------------


def _workload(**workload: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(SMALL_LOAD))
    data["workload"] = workload
    return data


def _closed(concurrency: int, **extra: Any) -> dict[str, Any]:
    arrival = {"kind": "closed_loop", "concurrency": concurrency, **extra}
    return {**SMALL_LOAD["workload"], "num_requests": None, "arrival": arrival}


GUARDED: tuple[tuple[str, dict[str, Any], tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "9M sessions of 6 turns",
        _workload(arrival={"kind": "poisson", "rate": 2.0}, sessions={**SESSIONS, "count": 9e6}),
        ("validate",),
        ("{tmp}/scenario.yaml", "workload.sessions.count"),
    ),
    (
        "sessions at 1,000/s for 5,000 s",
        _workload(arrival={"kind": "poisson", "rate": 1000.0}, duration_s=5000, sessions=SESSIONS),
        ("validate",),
        ("{tmp}/scenario.yaml", "workload.duration_s"),
    ),
    (
        "1 ms windows up to a one-day horizon",
        {
            **_workload(**{**SMALL_LOAD["workload"], "arrival": {"kind": "offline"}}),
            "horizon_s": 86_400,
            "output": {"timeseries_window_s": 0.001},
        },
        ("validate",),
        ("{tmp}/scenario.yaml", "output.timeseries_window_s"),
    ),
    (
        "closed loop of one client for a year",
        _workload(**{**_closed(1), "duration_s": 31_536_000}),
        ("run", "--quiet", "--out", "{tmp}/out"),
        ("{tmp}/scenario.yaml", "workload.duration_s"),
    ),
    # A closed loop whose every request is rejected is no bad input: the loop stops sending,
    # reports what it sent and exits 1 (tests/test_closed_loop.py, tests/test_verdicts.py).
    (
        "capacity of a closed loop",
        _workload(**{**_closed(4), "num_requests": 100}),
        ("capacity",),
        ("{tmp}/scenario.yaml", "workload.arrival"),
    ),
    (
        "capacity --vary a misspelt GPU beside a good one",
        SMALL_LOAD,
        ("capacity", "--vary", "cluster.gpu=h100,h200", "--window-s", "10"),
        ("--vary", "'h100'"),
    ),
    (
        "capacity --vary an unknown GPU",
        SMALL_LOAD,
        ("capacity", "--vary", "cluster.gpu=h900", "--window-s", "10"),
        ("--vary", "'h900'"),
    ),
    (
        "capacity --prefill h100-sxm:3",
        SMALL_LOAD,
        ("capacity", "--disaggregated", "--target-rps", "5", "--prefill", "h100-sxm:3"),
        ("--prefill", "h100-sxm:3", "power of two"),
    ),
    (
        "capacity of sessions at a target past the request limit",
        _workload(arrival={"kind": "poisson", "rate": 2.0}, duration_s=60, sessions=SESSIONS),
        ("capacity", "--target-rps", "60000", "--window-s", "200"),
        ("--target-rps", "60000"),
    ),
)


def guard_cases(rng: random.Random) -> Iterator[BadInput]:
    """Inputs valid field by field whose run or search would exceed a limit (requests, windows)
    or could not happen: each refused early, naming the field or option that leads there."""
    for label, data, command, names in GUARDED:
        args = (command[0], "{tmp}/scenario.yaml", *command[1:])
        yield BadInput("guard", label, args, names, {"scenario.yaml": _dump(data)})


# --- command-line options -----------------------------------------------------------------

COST = ("cost", "--model", "llama-3-8b", "--gpu", "h100-sxm")
# One line of flow YAML whose aliases expand to 10^6 values.
FLOW_BOMB = (
    "{a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], "
    + ", ".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 6))
    + "}"
)
PLAN_FLAGS = ("plan", "--model", "llama-3-8b", "--isl", "100", "--osl", "10", "--ttft", "1s",
              "--gpus", "h100-sxm", "--no-disagg")  # fmt: skip
SPEC_ADVISE = ("spec-advise", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--requests", "4")
BENCH_FLAGS = ("bench", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-prompts", "4")
OPTION_CASES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("--decode 1e9", (*COST, "--decode", "1e9", "--context", "10"), "--decode"),
    ("--decode 10^9", (*COST, "--decode", "1000000000", "--context", "10"), "--decode"),
    ("--decode 0", (*COST, "--decode", "0", "--context", "10"), "--decode"),
    ("--context 10^12", (*COST, "--decode", "4", "--context", "1000000000000"), "--context"),
    ("--context -1", (*COST, "--decode", "4", "--context", "-1"), "--context"),
    ("--prefill 10^10", (*COST, "--prefill", "10000000000"), "--prefill"),
    ("--prefill -3", (*COST, "--prefill", "-3"), "--prefill"),
    ("--batch huge q", (*COST, "--batch", "99999999999x0"), "--batch"),
    ("--batch huge c", (*COST, "--batch", "1x99999999999"), "--batch"),
    ("--batch not QxC", (*COST, "--batch", "12"), "--batch"),
    ("--batch 10^400", (*COST, "--batch", "1" + "0" * 400 + "x1"), "--batch"),
    ("--tp 3", (*COST, "--tp", "3", "--prefill", "10"), "--tp"),
    ("--tp 0", (*COST, "--tp", "0", "--prefill", "10"), "--tp"),
    ("--tp 2^70", (*COST, "--tp", str(2**70), "--prefill", "10"), "--tp"),
    ("--tp 128", (*COST, "--tp", "128", "--prefill", "10"), "--tp"),
    (
        "--gpu h100",
        ("cost", "--model", "llama-3-8b", "--gpu", "h100", "--prefill", "1"),
        "h100-sxm",
    ),
    (
        "--model llama3-8b",
        ("cost", "--model", "llama3-8b", "--gpu", "h100-sxm", "--prefill", "1"),
        "llama-3-8b",
    ),
    ("--engine vllmm", (*COST, "--engine", "vllmm", "--prefill", "1"), "--engine"),
    ("--dtype fp4 on h100", (*COST, "--dtype", "fp4", "--prefill", "1"), "--dtype"),
    ("--dtype int3", (*COST, "--dtype", "int3", "--prefill", "1"), "--dtype"),
    ("--calibration missing", (*COST, "--calibration", "nope", "--prefill", "1"), "--calibration"),
    ("cost without batch", COST, "batch"),
    ("validate missing file", ("validate", "{tmp}/nope.yaml"), "{tmp}/nope.yaml"),
    ("validate a directory", ("validate", "{tmp}"), "{tmp}"),
    ("--set without =", ("validate", str(SCENARIOS[0]), "--set", "novalue"), "--set"),
    ("--set through a scalar", ("validate", str(SCENARIOS[0]), "--set", "seed.x=1"), "seed.x"),
    ("--set alias bomb", ("validate", str(SCENARIOS[0]), "--set", "name=" + FLOW_BOMB), "aliases"),
    (
        "--set nested 10,000 deep",
        ("validate", str(SCENARIOS[0]), "--set", "name=" + "[" * 10_000 + "]" * 10_000),
        "nested",
    ),
    (
        "--set replicas 1e30",
        ("validate", str(SCENARIOS[0]), "--set", "cluster.replicas=1.0e+30"),
        "cluster.replicas",
    ),
    ("run --seed -1", ("run", str(SCENARIOS[0]), "--seed", "-1", "--out", "{tmp}/o"), "seed"),
    (
        "run --seed 2^70",
        ("run", str(SCENARIOS[0]), "--seed", str(2**70), "--out", "{tmp}/o"),
        "seed",
    ),
    (
        "run --compare-no-spec without speculation",
        ("run", str(SCENARIOS[0]), "--compare-no-spec", "--out", "{tmp}/o"),
        "speculative.enabled",
    ),
    (
        "sweep --workers 0",
        ("sweep", str(ROOT / "scenarios/sweeps/capacity-70b-grid.yaml"), "--workers", "0"),
        "--workers",
    ),
    (
        "sweep --backend spark",
        ("sweep", str(ROOT / "scenarios/sweeps/capacity-70b-grid.yaml"), "--backend", "spark"),
        "--backend",
    ),
    (
        "capacity --target-rps 1e30",
        ("capacity", str(SCENARIOS[0]), "--target-rps", "1e30"),
        "--target-rps",
    ),
    (
        "capacity --window-s 1e308",
        ("capacity", str(SCENARIOS[0]), "--window-s", "1e308"),
        "--window-s",
    ),
    ("capacity --tolerance 2", ("capacity", str(SCENARIOS[0]), "--tolerance", "2"), "--tolerance"),
    ("capacity --seeds -1", ("capacity", str(SCENARIOS[0]), "--seeds", "-1"), "--seeds"),
    (
        "capacity --vary 10^10",
        (
            "capacity",
            str(SCENARIOS[0]),
            *itertools.chain.from_iterable(
                ("--vary", f"scheduler.k{i}=1,2,3,4,5,6,7,8,9,10") for i in range(10)
            ),
        ),
        "--vary",
    ),
    ("catalog unknown section", ("catalog", "gpuz"), "gpuz"),
    ("spec-advise --rates ''", (*SPEC_ADVISE, "--rates", ""), "--rates"),
    ("spec-advise --rates nan", (*SPEC_ADVISE, "--rates", "1,nan"), "--rates"),
    ("spec-advise --rates -1", (*SPEC_ADVISE, "--rates", "-1"), "--rates"),
    (
        "bench --set rate -1",
        (*BENCH_FLAGS, "--request-rate", "3", "--set", "workload.arrival.rate=-1"),
        "--set workload.arrival.rate",
    ),
    (
        "timeout_ms for timeout_s",
        ("validate", str(SCENARIOS[0]), "--set", "workload.client.timeout_ms=3000"),
        "did you mean 'timeout_s'",
    ),
    # options that leave plan no layout at all: bad input (2), not "nothing meets the SLO" (3)
    ("plan --pp beyond the node", (*PLAN_FLAGS, "--pp", "16"), "--pp: every value (16)"),
    ("plan --pp beyond the layers", (*PLAN_FLAGS, "--pp", "40"), "--pp: every value (40)"),
    ("plan --pp 0", (*PLAN_FLAGS, "--pp", "0"), "--pp: '0': must be between 1 and 4,096 GPUs"),
    ("plan --tp 3", (*PLAN_FLAGS, "--tp", "3"), "--tp: tp must be a power of two"),
    ("plan --tp x --pp", (*PLAN_FLAGS, "--tp", "4", "--pp", "4"), "--tp x --pp = 16 GPUs"),
    (
        "plan --scenario of sessions",
        ("plan", "--scenario", str(ROOT / "scenarios" / "chat-sessions.yaml"), "--no-disagg"),
        "chat-sessions.yaml: workload.sessions",
    ),
    (
        "gpu_memory_utilization 1e-300",
        ("validate", str(SCENARIOS[0]), "--set", "cluster.gpu_memory_utilization=1e-300"),
        "cluster.gpu_memory_utilization: 1e-300 leaves",
    ),
    (
        "bench --sonnet-prefix-len -3",
        (*BENCH_FLAGS, "--dataset-name", "sonnet", "--sonnet-prefix-len", "-3"),
        "--sonnet-prefix-len: must be 0 or more",
    ),
    (
        "bench --prefix-repetition-prefix-len -1",
        (
            *BENCH_FLAGS,
            "--dataset-name",
            "prefix_repetition",
            "--prefix-repetition-prefix-len",
            "-1",
        ),
        "--prefix-repetition-prefix-len: must be 0 or more",
    ),
    (
        "bench --sonnet-input-len -5",
        (*BENCH_FLAGS, "--dataset-name", "sonnet", "--sonnet-input-len", "-5"),
        "--sonnet-input-len: must be at least 1",
    ),
)


def option_cases(rng: random.Random) -> Iterator[BadInput]:
    for label, args, name in OPTION_CASES:
        yield BadInput("option", label, args, (name,))


# --- autoscale: extreme numbers ------------------------------------------------------------

AUTOSCALE_EXTREMES: dict[str, tuple[Any, ...]] = {
    # below the interval's millisecond the clock would never move (1e-300 s hung)
    "interval_s": (1e-300, 5e-324, 1e-9, 1e300, float("inf"), float("nan")),
    "weight_load_gbps": (1e-300, 5e-324, 1e300, float("inf"), float("nan")),
    "target": (1e300, float("inf"), float("-inf"), float("nan")),
    "scale_up_delay_s": (-1e-300, 1e300, float("inf"), float("nan")),
    "cooldown_s": (-1e-300, 1e300, float("inf"), float("nan")),
    "stabilization_s": (-1e-300, 1e300, float("inf"), float("nan")),
    "scale_up_stabilization_s": (-1e-300, 1e300, float("inf"), float("nan")),
    "max_replicas": (1e300, float("inf"), float("nan")),
    "scale_down_step": (1e300, float("inf"), float("nan")),
}
"""Numbers of ``cluster.autoscale`` that must be refused: tiny, huge, infinite and NaN."""


def autoscale_cases(rng: random.Random) -> Iterator[BadInput]:
    """Each autoscale number at its extremes, on the shipped autoscaled day (a value let through
    would simulate the whole day: a hang) or on another base scenario autoscaled."""
    for key, values in AUTOSCALE_EXTREMES.items():
        for value in values:
            base_name = rng.choice(["diurnal-autoscale-llama3-70b", *sorted(BASES)])
            data = BASES[base_name]
            if "autoscale" not in data.get("cluster", {}):
                data = _set(data, "cluster.autoscale", dict(AUTOSCALE))
                for pooled in ("pools", "disaggregation", "replicas"):
                    data["cluster"].pop(pooled, None)
            path = f"cluster.autoscale.{key}"
            yield BadInput(
                "autoscale",
                f"{path}={value!r:.40} on {base_name}",
                _validate_or_run(rng, "{tmp}/scenario.yaml"),
                ("{tmp}/scenario.yaml", path),
                {"scenario.yaml": _dump(_set(data, path, value))},
            )


# --- every numeric field at the extremes of a float ---------------------------------------

EXTREMES: tuple[float, ...] = (1e-300, 1e300, float("inf"), float("nan"))


def extreme_number_cases() -> Iterator[BadInput]:
    """Every numeric scenario field at 1e-300, 1e300, inf and NaN: refused with the file and
    the field named, or (a value that is fine there) validated. Their own random stream."""
    rng = random.Random("extreme-numbers")
    for spec in NUMBER_FIELDS:
        for value in EXTREMES:
            base_name, data = _valid_base(spec, rng)
            data = _set(data, spec.path, value)
            yield BadInput(
                "extreme number",
                f"{spec.path}={value!r} on {base_name}",
                ("validate", "{tmp}/scenario.yaml"),
                ("{tmp}/scenario.yaml", spec.path),
                {"scenario.yaml": _dump(data)},
                may_pass=True,
            )


def _with_template(spec: NumberField, base: str) -> dict[str, Any]:
    data = BASES[base]
    if spec.template is not None:
        data = _set(data, spec.section(), dict(spec.template))
    for key, extra in (spec.spec or {}).items():
        data = _set(data, key, extra)
    if spec.section() == "workload.prompt_pool":
        data["workload"].pop("prompt_tokens", None)  # the pool gives the prompt lengths
    return data


_VALID_BASES: dict[int, tuple[str, ...]] = {}  # a NumberField's (by identity): drawn once


def _valid_bases(spec: NumberField) -> tuple[str, ...]:
    """The shipped scenarios that stay valid with ``spec``'s section set (so that an extreme
    value that is fine in itself meets no other problem)."""
    valid = []
    for base in sorted(BASES):
        try:
            load_scenario(_with_template(spec, base))
        except CbsimError:
            continue
        valid.append(base)
    return tuple(valid)


def _valid_base(spec: NumberField, rng: random.Random) -> tuple[str, dict[str, Any]]:
    bases = _VALID_BASES.get(id(spec))
    if bases is None:
        bases = _VALID_BASES[id(spec)] = _valid_bases(spec) or tuple(sorted(BASES))
    base = rng.choice(bases)
    return base, _with_template(spec, base)


MAX_CURVE_POINTS = 100_000  # docs/scenarios.md: a rate curve's points


def _curve_csv(points: int, rate: float) -> bytes:
    return ("t_s,rate\n" + "".join(f"{i},{rate}\n" for i in range(points))).encode()


def rate_curve_limit_cases() -> Iterator[BadInput]:
    """Rate-curve CSV files at and just past the documented point limit, and one whose
    requests (the rate's integral) pass the request limit: the error names the scenario, the
    field and the curve's file."""
    data = _set(
        BASES["chat-llama3-8b-h100"], "workload.arrival", {"kind": "rate_curve", "csv": "curve.csv"}
    )
    data["workload"].pop("num_requests", None)
    data["workload"].pop("duration_s", None)
    for points, may_pass in (
        (MAX_CURVE_POINTS - 1, True),
        (MAX_CURVE_POINTS, True),
        (MAX_CURVE_POINTS + 1, False),
    ):
        yield BadInput(
            "rate curve limit",
            f"rate curve of {points:,} points",
            ("validate", "{tmp}/scenario.yaml"),
            ("{tmp}/scenario.yaml", "workload.arrival.csv", "100,000"),
            {"scenario.yaml": _dump(data), "curve.csv": _curve_csv(points, 0.05)},
            may_pass=may_pass,
        )
    yield BadInput(
        "rate curve limit",
        "rate curve expecting 3e9 requests",
        ("validate", "{tmp}/scenario.yaml"),
        ("{tmp}/scenario.yaml", "workload.arrival.csv", "curve.csv", "requests"),
        {"scenario.yaml": _dump(data), "curve.csv": b"t_s,rate\n0,1000\n3000000,1000\n"},
    )


# --- outputs onto a user's file, folder or symbolic link -----------------------------------

BENCH = ("bench", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-prompts", "4",
         "--input-len", "50", "--output-len", "8")  # fmt: skip
PLAN = ("plan", "--model", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--ttft", "1s",
        "--tpot", "50ms", "--gpus", "h100-sxm", "--tp", "1", "--pp", "1", "--no-disagg")  # fmt: skip
SMALL_SWEEP = f"base: {SCENARIOS[0]}\ngrid:\n  workload.arrival.rate: [1]\n".encode()
OUTPUT_COMMANDS: tuple[tuple[str, tuple[str, ...], dict[str, bytes]], ...] = (
    ("run --out", ("run", str(SCENARIOS[0]), "--quiet", "--out", "{out}"), {}),
    ("sweep --out", ("sweep", "{tmp}/sweep.yaml", "--quiet", "--out", "{out}"),
     {"sweep.yaml": SMALL_SWEEP}),
    ("bench --save-result", (*BENCH, "--save-result", "{out}"), {}),
    ("bench --result-dir --result-filename",
     (*BENCH, "--save-result", "--result-dir", "{out_dir}", "--result-filename", "{out_name}"), {}),
    ("bench --out", (*BENCH, "--out", "{out}"), {}),
    ("capacity --out", ("capacity", str(ROOT / "scenarios" / "static-baseline.yaml"), "--out",
                        "{out}"), {}),
    ("plan --out", (*PLAN, "--out", "{out}"), {}),
    ("report --out", ("report", "{tmp}/no-such-run", "--out", "{out}"), {}),
    ("spec-advise --out", ("spec-advise", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                           "--rates", "1", "--requests", "4", "--out", "{out}"), {}),
    ("calibrate fit --out", ("calibrate", "fit", "--gpu", "h100-sxm", "--no-validate", "--out",
                             "{out}"), {}),
    ("calibrate e2e --out", ("calibrate", "e2e", "--engine", "vllm", "--data", "{tmp}/bench.json",
                             "--out", "{out}"), {"bench.json": json.dumps(VLLM_RESULT).encode()}),
    ("calibrate report --out", ("calibrate", "report", "--gpu", "h100-sxm", "--out", "{out}"), {}),
    ("calibrate measure --out", ("calibrate", "measure", "--model", "llama-3.1-8b", "--device",
                                 "cpu", "--quick", "--out", "{out}"), {}),
)  # fmt: skip
USER_FILE = b"my notes, not cbsim's\n1,2,3\n"
USER_FORMS = {  # the form of the user's thing -> where --out points (relative to {tmp})
    "file": "user/mine.csv",
    "folder": "user/folder",
    "link to a file": "link-to-file",
    "link to a folder": "link-to-folder",
    "dangling link": "dangling-link",
}


@dataclass(frozen=True)
class UserOutput:
    """A command writing its output (``{out}`` in ``args``) onto a user's ``form``: a file, a
    folder holding a file, or a symbolic link (to either, or dangling)."""

    command: str
    args: tuple[str, ...]
    form: str
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.command} onto a user's {self.form}"

    def materialise(self, folder: Path) -> tuple[list[str], Path]:
        """The user's things and the command's files under ``folder``; the arguments, and the
        path ``--out`` names."""
        user = folder / "user"
        (user / "folder").mkdir(parents=True)
        (user / "mine.csv").write_bytes(USER_FILE)
        (user / "folder" / "notes.txt").write_bytes(USER_FILE)
        (folder / "link-to-file").symlink_to(user / "mine.csv")
        (folder / "link-to-folder").symlink_to(user / "folder")
        (folder / "dangling-link").symlink_to(folder / "elsewhere" / "gone.txt")
        for name, content in self.files.items():
            (folder / name).write_bytes(content)
        out = folder / USER_FORMS[self.form]
        fill = {"{tmp}": str(folder), "{out}": str(out), "{out_dir}": str(out.parent),
                "{out_name}": out.name}  # fmt: skip
        args = []
        for arg in self.args:
            for key, value in fill.items():
                arg = arg.replace(key, value)
            args.append(arg)
        return args, out


def user_things(folder: Path) -> dict[str, tuple[Any, ...]]:
    """What the user had under ``folder``: each link's target, each file's bytes and mtime."""
    things: dict[str, tuple[Any, ...]] = {}
    for path in sorted([*(folder / "user").rglob("*"), *folder.glob("*link*")]):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            things[name] = ("link", str(path.readlink()))
        elif path.is_file():
            things[name] = ("file", path.read_bytes(), path.stat().st_mtime_ns)
    return things


ADDS_TO_FOLDERS = ("calibrate report --out",)
"""Commands that write their files into a folder beside the user's (after minutes of fits):
only their forms that are not folders are cases."""


def user_output_cases() -> Iterator[UserOutput]:
    """Every command's output option onto every form of a user's thing."""
    for command, args, files in OUTPUT_COMMANDS:
        for form in USER_FORMS:
            if command in ADDS_TO_FOLDERS and form in ("folder", "link to a folder"):
                continue
            yield UserOutput(command, args, form, files)


def run_user_output(case: UserOutput, folder: Path) -> Outcome:
    """Run one case: the user's things untouched (else ``touched``), no traceback, no hang,
    exit 0 (written beside them), 3 (``cbsim capacity`` found no
    rate within the SLO) or 2 with one error line."""
    args, out = case.materialise(folder)
    before = user_things(folder)
    bad = BadInput("user output", case.label, tuple(args), ())
    started = time.perf_counter()
    try:
        with alarm(CASE_TIMEOUT_S):
            result = CliRunner().invoke(cli, args, catch_exceptions=True)
    except Hang:
        return Outcome(bad, None, "", f"hang: over {CASE_TIMEOUT_S} s", CASE_TIMEOUT_S)
    seconds = time.perf_counter() - started
    output = result.output
    if user_things(folder) != before:
        return Outcome(bad, result.exit_code, output, "touched: the user's things changed", seconds)
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    if crashed or "Traceback" in output:
        return Outcome(bad, result.exit_code, output, f"traceback: {result.exception!r}", seconds)
    if result.exit_code not in (0, 2, 3):
        return Outcome(bad, result.exit_code, output, f"exit code: {result.exit_code}", seconds)
    errors = [line for line in output.splitlines() if ERROR_LINE.match(line)]
    if result.exit_code == 2 and len(errors) != 1:
        return Outcome(bad, 2, output, f"error line: {len(errors)} error lines", seconds)
    named = (str(out), str(out.resolve()), str(folder / "no-such-run"))
    if result.exit_code == 2 and not any(name in errors[0] for name in named):
        return Outcome(bad, 2, output, "error line: does not name the output", seconds)
    return Outcome(bad, result.exit_code, output, None, seconds)


# --------------------------------------------------------------------------- the campaign

GENERATORS: tuple[Callable[[random.Random], Iterator[BadInput]], ...] = (
    number_cases,
    combination_cases,
    name_cases,
    file_cases,
    trace_cases,
    config_cases,
    sweep_cases,
    option_cases,
    engine_profile_cases,
    benchmark_cases,
    trace_id_cases,
    guard_cases,
    autoscale_cases,
)

OWN_STREAM_GENERATORS: tuple[Callable[[], Iterator[BadInput]], ...] = (
    extreme_number_cases,
    rate_curve_limit_cases,
)
"""Generators added since the campaign's first draw, each on its own random stream (the cases
above stay as they were drawn)."""


def campaign(seed: int = SEED_OF_CAMPAIGN) -> list[BadInput]:
    """Every bad input of the campaign, in a fixed order for a fixed seed."""
    rng = random.Random(seed)
    cases = [case for generate in GENERATORS for case in generate(rng)]
    return cases + [case for generate in OWN_STREAM_GENERATORS for case in generate()]


def quick_slice(cases: list[BadInput], size: int = QUICK_CASES) -> list[BadInput]:
    """About ``size`` cases, every category represented: a seeded sample per category."""
    by_category: dict[str, list[BadInput]] = {}
    for case in cases:
        by_category.setdefault(case.category, []).append(case)
    share = max(1, size // len(by_category))
    rng = random.Random(SEED_OF_CAMPAIGN + 1)
    chosen = []
    for members in by_category.values():
        chosen += rng.sample(members, min(share, len(members)))
    return chosen


class Hang(BaseException):
    """The case ran past its alarm (a BaseException, so the CLI runner does not swallow it)."""


@contextmanager
def alarm(seconds: int) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class Outcome:
    case: BadInput
    exit_code: int | None
    output: str
    problem: str | None  # None: handled as the contract says
    seconds: float

    @property
    def kind(self) -> str:
        return "ok" if self.problem is None else self.problem.split(":", 1)[0]


def run_case(case: BadInput, folder: Path) -> Outcome:
    """Run one case and judge it: ``hang``, ``traceback``, ``exit code``, ``error line``."""
    args, names = case.materialise(folder)
    started = time.perf_counter()
    try:
        with alarm(CASE_TIMEOUT_S):
            result = CliRunner().invoke(cli, args, catch_exceptions=True)
    except Hang:
        return Outcome(
            case, None, "", f"hang: over {CASE_TIMEOUT_S} s", time.perf_counter() - started
        )
    seconds = time.perf_counter() - started
    output = result.output
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    if crashed or "Traceback" in output:
        return Outcome(case, result.exit_code, output, f"traceback: {result.exception!r}", seconds)
    if result.exit_code == 0 and case.may_pass:
        return Outcome(case, 0, output, None, seconds)
    if result.exit_code != 2:
        return Outcome(case, result.exit_code, output, f"exit code: {result.exit_code}", seconds)
    errors = [line for line in output.splitlines() if ERROR_LINE.match(line)]
    if len(errors) != 1:
        return Outcome(case, 2, output, f"error line: {len(errors)} error lines", seconds)
    missing = [n for n in names if n and n not in errors[0]]
    if missing:
        return Outcome(case, 2, output, f"error line: does not name {missing}", seconds)
    return Outcome(case, 2, output, None, seconds)


def run_all(cases: list[BadInput], root: Path) -> list[Outcome]:
    return [run_case(case, _fresh(root, i)) for i, case in enumerate(cases)]


def _fresh(root: Path, index: int) -> Path:
    folder = root / f"case{index:04d}"
    folder.mkdir(parents=True)
    return folder


def figures(outcomes: list[Outcome]) -> dict[str, int]:
    """Cases, and how many ended in each kind of failure (all but ``cases`` should be 0)."""
    kinds = [o.kind for o in outcomes]
    return {
        "cases": len(outcomes),
        "tracebacks": kinds.count("traceback"),
        "wrong exit codes": kinds.count("exit code"),
        "hangs": kinds.count("hang"),
        "unclear error lines": kinds.count("error line"),
        "user's things touched": kinds.count("touched"),
    }


def _report(outcomes: list[Outcome]) -> str:
    bad = [o for o in outcomes if o.problem is not None]
    lines = [f"{figures(outcomes)}"]
    for outcome in bad[:30]:
        tail = outcome.output.strip().splitlines()[-1:] if outcome.output.strip() else [""]
        lines.append(
            f"- [{outcome.case.category}] {outcome.case.label}: {outcome.problem} | {tail[0][:300]}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- tests


def test_campaign_is_big_and_varied():
    cases = campaign()
    assert len(cases) >= 300
    assert {c.category for c in cases} == {
        "number", "combination", "name", "file", "trace", "config", "sweep", "option",
        "autoscale", "extreme number", "rate curve limit", *NEW_FILE_KINDS,
    }  # fmt: skip
    assert campaign() == cases  # seeded: the same campaign every time


NEW_FILE_KINDS = ("profile", "benchmark", "trace ids", "guard")
"""Categories every case of which runs by default (:func:`test_every_case_of_the_new_kinds`),
each a defect once: left out of the quick slice."""


@functools.cache
def _new_kind_cases() -> tuple[BadInput, ...]:
    """The cases of :data:`NEW_FILE_KINDS`, drawn once (the whole campaign takes seconds)."""
    rng = random.Random(SEED_OF_CAMPAIGN)
    kinds = (engine_profile_cases, benchmark_cases, trace_id_cases, guard_cases)
    return tuple(case for generate in kinds for case in generate(rng))


@pytest.mark.parametrize("category", NEW_FILE_KINDS)
def test_every_case_of_the_new_kinds(category: str, tmp_path: Path):
    """Engine profiles, ``calibrate e2e`` data, trace ids and dates, and the limits only a run
    or a search meets: every case exits 2 with one error naming the file and field (or option),
    quickly."""
    cases = [c for c in _new_kind_cases() if c.category == category]
    assert len(cases) >= 8
    outcomes = run_all(cases, tmp_path)
    assert all(o.problem is None for o in outcomes), _report(outcomes)


def test_quick_slice_of_bad_inputs(tmp_path: Path):
    cases = quick_slice([c for c in campaign() if c.category not in NEW_FILE_KINDS])
    assert 90 <= len(cases) <= QUICK_CASES + 10
    outcomes = run_all(cases, tmp_path)
    assert all(o.problem is None for o in outcomes), _report(outcomes)


@pytest.mark.slow
def test_whole_campaign_of_bad_inputs(tmp_path: Path):
    outcomes = run_all(campaign(), tmp_path)
    assert all(o.problem is None for o in outcomes), _report(outcomes)


def run_user_outputs(cases: list[UserOutput], root: Path) -> list[Outcome]:
    return [run_user_output(case, _fresh(root, i)) for i, case in enumerate(cases)]


def quick_user_outputs() -> list[UserOutput]:
    """One form of a user's thing per command, the forms taken in turn."""
    cases = list(user_output_cases())
    commands = list(dict.fromkeys(c.command for c in cases))
    chosen = []
    for index, command in enumerate(commands):
        own = [c for c in cases if c.command == command]
        chosen.append(own[index % len(own)])
    return chosen


def test_outputs_onto_a_user_s_things_quick(tmp_path: Path):
    """Every command's output option, each onto one form of a user's thing: nothing of the
    user's touched (bytes, modification time, link target), a refusal naming the path."""
    cases = quick_user_outputs()
    assert {c.form for c in cases} == set(USER_FORMS)
    outcomes = run_user_outputs(cases, tmp_path)
    assert all(o.problem is None for o in outcomes), _report(outcomes)


@pytest.mark.slow
def test_outputs_onto_a_user_s_things_every_form(tmp_path: Path):
    outcomes = run_user_outputs(list(user_output_cases()), tmp_path)
    assert all(o.problem is None for o in outcomes), _report(outcomes)


def test_alarm_catches_a_hang():
    with pytest.raises(Hang), alarm(1):
        time.sleep(3)


def main() -> None:
    """Run the whole campaign and print its figures (and any failures)."""
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        outcomes = run_all(campaign(), Path(folder) / "campaign")
        outcomes += run_user_outputs(list(user_output_cases()), Path(folder) / "outputs")
        print(_report(outcomes))
        for category in dict.fromkeys(o.case.category for o in outcomes):
            print(f"  {category}: {figures([o for o in outcomes if o.case.category == category])}")
        slowest = max(outcomes, key=lambda o: o.seconds)
        print(
            f"{time.perf_counter() - started:.1f} s in all; slowest case "
            f"{slowest.seconds:.2f} s ({slowest.case.label}); "
            f"mean {math.fsum(o.seconds for o in outcomes) / len(outcomes) * 1e3:.0f} ms"
        )
    sys.exit(0 if all(o.problem is None for o in outcomes) else 1)


if __name__ == "__main__":
    main()
