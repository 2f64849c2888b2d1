"""Valid inputs over the newer features, generated: every run keeps the simulator's invariants.

:mod:`tests.test_fuzz_valid_scenarios` draws the core scenario space (arrival processes, lengths,
dense models, schedulers, speculation). This campaign draws what came after it, each case built
around one *feature* and mixed with others at random:

- ``pools``: a mixed aggregated fleet (``cluster.pools``) of GPUs, layouts, engines, precisions
  and block sizes of their own;
- ``disaggregation``: prefill and decode pools with their own GPUs and schedulers, the KV cache
  crossing a link (auto, NVLink, RDMA, layer-wise, bandwidth and latency overrides);
- ``sessions``: multi-turn conversations (shared system prompts, think times) under prefix
  caching and session-affinity routing;
- ``closed_loop``: a client population with think times and ramps;
- ``prefix_trace``: a short slice of the Mooncake trace, whose prompts carry prefix block ids,
  under prefix caching and prefix-aware routing;
- ``cpu_tier``: a CPU tier under a small GPU prefix cache (``kv_offload``);
- ``moe``: mixture-of-experts and latent-attention models with expert, attention-data and
  pipeline parallelism, skewed routing, fp8, fp4 and mxfp4 weights (Blackwell);
- ``mtp``: DeepSeek-V3's multi-token prediction;
- ``engine_profile``: the other shipped engine profiles, by name and by path, and a profile
  JSON of changed overheads and defaults.

Any case may also speculate under a tight token budget (drawn from a stream of its own, as the
autoscale block is): a small ``max_batched_tokens`` beside a large ``max_batch_size`` and draft
length, under every scheduler kind, so that k × batch exceeds the budget.

Any case of a plain cluster may also be autoscaled (``cluster.autoscale``, drawn from a stream of
its own so that the other draws stay what they were): each metric, bounds, an initial count,
quick evaluation intervals, start-up delays and cooldowns. A share (:data:`TIMEOUT_SHARE`) of the
cases without a client timeout get one, from a stream of its own too, drawn against the
requests' expected service time so that it fires while a request is prefilled, while it decodes,
or (a plain dense cluster's KV cache cut to a few GiB) while it waits preempted.

A draw that ``cbsim validate`` refuses is drawn again (counted). Each scenario is checked for the
invariants of :mod:`tests.test_fuzz_valid_scenarios` (its checks are reused: ``runs``,
``conservation``, ``summary``, ``time``, ``kv``, ``determinism``, ``fast_forward`` every
:data:`FAST_FORWARD_EVERY`-th case, ``round_trip``) and these:

- ``round_trip`` also reads the written ``scenario.yaml`` with ``cbsim.load_scenario(...,
  written=True)`` and, every :data:`RERUN_EVERY`-th case, runs it again: the same results (the
  written scenario is the run's, pools and their resolved settings included);
- ``busy``: ``busy_fraction`` within [0, 1] (NaN without a finished request), and no replica
  busier than the run is long;
- ``autoscale``: serving replicas within ``[min_replicas, max_replicas]``, and no request routed
  to (nor iteration run on) a replica outside its serve windows (held spans);
- ``prefix``: no request reuses more than its prompt, more from the CPU tier than it reuses,
  nor (prompts with prefix block ids) more than it shares with an earlier prompt;
- ``budget``: every iteration's scheduled tokens (prefill chunks, plain decodes and verify
  tokens, k + 1 per speculating request, as the engines count them) within its replica's
  ``max_batched_tokens`` where the scheduler budgets decodes (``sarathi``, ``orca``; a prompt
  alone on an idle replica excepted, as ``orca`` without chunked prefill admits it whole), and
  in every iteration that batches prompts (``prefill_first``, ``static``, whose decode steps
  are not budgeted);
- ``time`` also: no float column of the requests, iterations or timeseries below zero;
- ``memory``: the timeseries has no more windows than the run is long, and (every
  :data:`MEMORY_EVERY`-th case) the run's peak of traced allocations stays within
  :data:`MEMORY_BASE_BYTES` plus :data:`MEMORY_PER_ROW_BYTES` per request and iteration row.

The default run checks :data:`QUICK_CASES` cases; the whole campaign is marked ``slow``.
``python -m tests.test_fuzz_features [N]`` runs the campaign (or its first N cases) and prints
its figures: scenarios, redraws, and violations per invariant and per feature.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import cbsim
from cbsim.common.errors import CbsimError
from cbsim.engine.autoscale import windows_from_events
from cbsim.engine.fleet import rank_limits
from cbsim.run.preflight import preflight
from cbsim.schema.pools import pool_plans
from cbsim.workload.build import build_workload
from cbsim.workload.drawn import RequestSpecs
from tests.test_fuzz_valid_scenarios import (
    CHECKS,
    Draw,
    Fail,
    Hang,
    _check,
    _length,
    _maybe,
    alarm,
    as_written,
    frames_differ,
)

ROOT = Path(__file__).resolve().parents[1]
ENGINE_DIR = ROOT / "cbsim" / "catalog" / "data" / "profiles" / "engines"
SEED_OF_CAMPAIGN = 20250712
CAMPAIGN_SIZE = 600
QUICK_CASES = 12
FAST_FORWARD_EVERY = 3
RERUN_EVERY = 4
MEMORY_EVERY = 5
MEMORY_BASE_BYTES = 48 * 2**20
MEMORY_PER_ROW_BYTES = 4096
CASE_TIMEOUT_S = 60
MAX_DRAWS = 200

FEATURES = (
    "pools", "disaggregation", "sessions", "closed_loop", "prefix_trace", "cpu_tier", "moe", "mtp",
    "engine_profile",
)  # fmt: skip
INVARIANTS = (
    "runs", "conservation", "summary", "time", "kv", "determinism", "fast_forward", "round_trip",
    "busy", "prefix", "memory", "autoscale", "budget",
)  # fmt: skip

# Violations found and left to other work, counted apart (``known``) rather than as failures:
# (invariant, start of the message) -> the defect. Remove an entry once it is fixed.
KNOWN_ISSUES: dict[tuple[str, str], str] = {}

DENSE_MODELS = ("llama-3-8b", "llama-3.1-8b", "llama-3.2-1b", "mistral-7b", "qwen2.5-7b")
GPUS = ("a100-80gb", "h100-sxm", "h200", "l40s", "b200", "mi300x")
ENGINES = ("vllm", "sglang", "tensorrt-llm", "none")
# (model, tp choices, dp choices, pp choices, dtypes); layouts chosen to fit 8 GPUs or fewer
MOE_MODELS: tuple[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...] = (
    ("mixtral-8x7b", (2, 4, 8), (1,), (1, 2)),
    ("qwen3-30b-a3b", (1, 2, 4), (1, 2, 4), (1, 2)),
    ("gpt-oss-120b", (1, 2, 4), (1, 2), (1, 2)),
    ("llama-4-scout", (2, 4, 8), (1,), (1, 2)),
    ("deepseek-v3", (8,), (1,), (1,)),
    ("deepseek-v3", (1,), (8,), (1,)),
    ("qwen3-235b-a22b", (4, 8), (1,), (1, 2)),
)


# --------------------------------------------------------------------------- generation


def _small_lengths(rng: random.Random, workload: Draw, prompt_max: int = 1500) -> None:
    workload["prompt_tokens"] = _length(rng, 1, prompt_max)
    workload["output_tokens"] = _length(rng, 1, 120)
    for name in ("prompt_tokens", "output_tokens"):
        if workload[name]["kind"] == "empirical":  # the shipped traces' lengths reach far
            workload[name] = {"kind": "uniform", "low": 1, "high": 400}


def _open_loop(rng: random.Random) -> Draw:
    rate = round(10 ** rng.uniform(-0.3, 2.0), 3)
    if _maybe(rng, 0.2):
        return {"kind": "gamma", "rate": rate, "cv": round(rng.uniform(0.3, 4.0), 3)}
    return {"kind": "poisson", "rate": rate}


def _closed_loop(rng: random.Random) -> Draw:
    arrival: Draw = {"kind": "closed_loop", "concurrency": rng.randint(1, 8)}
    if _maybe(rng, 0.5):
        arrival["think_time_s"] = round(rng.uniform(0.0, 0.5), 3)
        arrival["think_time"] = rng.choice(["fixed", "exponential"])
    if _maybe(rng, 0.4):
        arrival["ramp_s"] = round(rng.uniform(0.0, 1.0), 3)
    return arrival


def _synthetic_workload(rng: random.Random, closed: bool) -> Draw:
    workload: Draw = {
        "num_requests": rng.randint(1, 16),
        "arrival": _closed_loop(rng) if closed else _open_loop(rng),
    }
    _small_lengths(rng, workload)
    if not closed and _maybe(rng, 0.15):
        workload["duration_s"] = round(rng.uniform(0.05, 2.0), 3)
        if _maybe(rng, 0.5):
            del workload["num_requests"]
    return workload


def _sessions_workload(rng: random.Random) -> Draw:
    sessions: Draw = {
        "turns": rng.choice(
            [
                {"kind": "fixed", "value": rng.randint(1, 4)},
                {"kind": "uniform", "low": 1, "high": 4},
            ]
        ),
        "user_tokens": _length(rng, 1, 300),
        "answer_tokens": _length(rng, 1, 80),
    }
    for name in ("user_tokens", "answer_tokens"):
        if sessions[name]["kind"] == "empirical":
            sessions[name] = {"kind": "fixed", "value": rng.randint(1, 200)}
    workload: Draw = {"arrival": _open_loop(rng), "sessions": sessions}
    if _maybe(rng, 0.8):
        sessions["count"] = rng.randint(1, 6)
    if "count" not in sessions or _maybe(rng, 0.2):
        workload["duration_s"] = round(rng.uniform(0.01, 2.0), 3)
    if _maybe(rng, 0.6):
        sessions["think_time_s"] = round(rng.uniform(0.0, 0.5), 3)
        sessions["think_time"] = rng.choice(["fixed", "exponential"])
    if _maybe(rng, 0.6):
        sessions["system_prompt"] = {
            "templates": rng.randint(1, 4),
            "tokens": {"kind": "fixed", "value": rng.randint(1, 1200)},
            "zipf": round(rng.uniform(0.0, 2.0), 3),
        }
    return workload


def _prefix_trace_workload(rng: random.Random) -> Draw:
    trace: Draw = {
        "path": "mooncake-conversation",
        "start_s": round(rng.uniform(0.0, 800.0), 2),
        "time_scale": round(10 ** rng.uniform(-2, 0), 4),
    }
    if _maybe(rng, 0.5):
        trace["prefix_block_tokens"] = rng.choice([16, 64, 128, 256, 512])
    workload: Draw = {"trace": trace, "num_requests": rng.randint(2, 12)}
    if _maybe(rng, 0.5):
        workload["output_tokens"] = _length(rng, 1, 60)
        if workload["output_tokens"]["kind"] == "empirical":
            workload["output_tokens"] = {"kind": "fixed", "value": 16}
    return workload


def _dense_cluster(rng: random.Random) -> Draw:
    return {
        "model": rng.choice(DENSE_MODELS),
        "gpu": rng.choice(GPUS),
        "tp": rng.choice([1, 1, 2]),
        "engine": rng.choice(ENGINES),
    }


def _moe_cluster(rng: random.Random) -> Draw:
    model, tps, dps, pps = rng.choice(MOE_MODELS)
    tp, dp, pp = rng.choice(tps), rng.choice(dps), rng.choice(pps)
    if dp > 1:
        pp = 1
    gpu = rng.choice(
        ("h100-sxm", "h200", "b200", "mi300x") if model != "deepseek-v3" else ("h200", "b200")
    )
    dtypes = ["bf16", "fp8"] + (["fp4"] if gpu == "b200" else [])
    if model == "gpt-oss-120b":
        dtypes.append("mxfp4")
    cluster: Draw = {
        "model": model,
        "gpu": gpu,
        "tp": tp,
        "dtype": "fp8" if model == "deepseek-v3" and gpu != "b200" else rng.choice(dtypes),
        "engine": rng.choice(("vllm", "sglang", "none")),
    }
    if dp > 1:
        cluster["dp"], cluster["ep"] = dp, tp * dp
    elif tp > 1 and _maybe(rng, 0.4):
        cluster["ep"] = tp
    if pp > 1:
        cluster["pp"] = pp
    if _maybe(rng, 0.4):
        cluster["expert_routing"] = "skewed"
    return cluster


def _pool_overrides(rng: random.Random, base: Draw, decode: bool = False) -> Draw:
    """Keys a pool sets over the cluster's."""
    pool: Draw = {"replicas": rng.randint(1, 2)}
    if _maybe(rng, 0.6):
        pool["gpu"] = rng.choice(GPUS)
    if _maybe(rng, 0.3) and not base.get("dp"):
        pool["tp"] = rng.choice([1, 2, 4]) if "ep" not in base else base["tp"]
    if _maybe(rng, 0.3):
        pool["engine"] = rng.choice(ENGINES)
    if _maybe(rng, 0.2):
        pool["dtype"] = rng.choice(["bf16", "fp8"])
    if _maybe(rng, 0.2):
        pool["kv_dtype"] = rng.choice(["bf16", "fp8"])
    if _maybe(rng, 0.2):
        pool["gpu_memory_utilization"] = round(rng.uniform(0.5, 0.95), 3)
    if _maybe(rng, 0.2):
        pool["prefix_caching"] = _maybe(rng, 0.5)
    if _maybe(rng, 0.3):
        kind = rng.choice(["orca", "prefill_first", "sarathi"] + ([] if decode else ["static"]))
        scheduler: Draw = {"kind": kind, "block_size": rng.choice([8, 16, 32, 64])}
        if kind != "static" and _maybe(rng, 0.5):
            scheduler["max_batch_size"] = rng.randint(1, 32)
        pool["scheduler"] = scheduler
    elif _maybe(rng, 0.2):
        pool["scheduler"] = {"block_size": rng.choice([8, 16, 32, 64])}
    return pool


def _kv_transfer(rng: random.Random) -> Draw:
    link: Draw = {}
    if _maybe(rng, 0.5):
        link["link"] = rng.choice(["auto", "nvlink", "rdma"])
    if _maybe(rng, 0.3):
        link["bandwidth_gb_s"] = round(10 ** rng.uniform(-1, 3), 3)
    if _maybe(rng, 0.3):
        link["latency_s"] = round(rng.uniform(0.0, 0.05), 4)
    if _maybe(rng, 0.3):
        link["layerwise"] = True
    return link


@lru_cache(maxsize=1)
def _changed_profile_path() -> str:
    """An engine profile JSON of its own: vLLM V0's, with other overheads, a front end and other
    scheduler defaults (written once per process)."""
    profile = json.loads((ENGINE_DIR / "vllm-v0.json").read_text())
    profile["engine"] = "fuzz-engine"
    profile["overhead"].update({"cpu_s": 0.0005, "cpu_per_request_s": 2e-5, "overlap": True})
    profile["frontend"].update({"request_s": 0.001, "output_token_s": 1e-5})
    profile["defaults"]["scheduler"] = {
        "kind": "sarathi", "max_batch_size": 64, "max_batched_tokens": 1024, "block_size": 32,
    }  # fmt: skip
    profile["defaults"]["prefix_caching"] = True
    folder = Path(tempfile.mkdtemp(prefix="cbsim-fuzz-profile-"))
    path = folder / "fuzz-engine.json"
    path.write_text(json.dumps(profile))
    return str(path)


def _engine_profile(rng: random.Random) -> str:
    return rng.choice(
        [
            "vllm-v0",
            "deepspeed-mii",
            "llama.cpp",
            str(ENGINE_DIR / "sglang.json"),
            str(ENGINE_DIR / "vllm-v0.json"),
            _changed_profile_path(),
        ]
    )


def draw_scenario(rng: random.Random, feature: str, name: str) -> Draw:
    """One random scenario around ``feature`` (a dict as a YAML file would hold it); not
    necessarily valid."""
    closed = feature == "closed_loop" or _maybe(rng, 0.15)
    if feature == "sessions" or (feature in ("pools", "disaggregation") and _maybe(rng, 0.2)):
        workload = _sessions_workload(rng)
    elif feature == "prefix_trace" or (feature == "cpu_tier" and _maybe(rng, 0.5)):
        workload = _prefix_trace_workload(rng)
    else:
        workload = _synthetic_workload(rng, closed)
    moe = feature in ("moe", "mtp") or _maybe(rng, 0.1)
    cluster = _moe_cluster(rng) if moe else _dense_cluster(rng)
    if feature == "mtp":
        cluster.update(model="deepseek-v3", gpu=rng.choice(["h200", "b200"]), tp=8, dtype="fp8")
        for key in ("dp", "pp", "ep"):
            cluster.pop(key, None)
    if feature == "engine_profile" or _maybe(rng, 0.1):
        cluster["engine"] = _engine_profile(rng)
    if feature in ("prefix_trace", "cpu_tier", "sessions") and not moe:
        cluster["model"] = "llama-3.1-8b"  # a 128k context for the Mooncake prompts
    data: Draw = {
        "name": name,
        "seed": rng.randint(0, 2**31),
        "workload": workload,
        "cluster": cluster,
        "fast_forward": _maybe(rng, 0.5),
    }
    if feature in ("prefix_trace", "sessions", "cpu_tier") or _maybe(rng, 0.2):
        cluster["prefix_caching"] = _maybe(rng, 0.85)
    if feature == "cpu_tier" or _maybe(rng, 0.1):
        cluster["kv_offload"] = {
            "cpu_gib": round(10 ** rng.uniform(-2, 2), 3),
            "bandwidth_gib_s": round(10 ** rng.uniform(0, 2), 2),
        }
        cluster["gpu_memory_utilization"] = round(rng.uniform(0.3, 0.9), 3)
    if feature == "pools":
        cluster["pools"] = [_pool_overrides(rng, cluster) for _ in range(rng.randint(1, 3))]
    elif feature == "disaggregation" or _maybe(rng, 0.08):
        cluster["disaggregation"] = {
            "prefill": _pool_overrides(rng, cluster),
            "decode": _pool_overrides(rng, cluster, decode=True),
        }
        if _maybe(rng, 0.7):
            cluster["disaggregation"]["kv_transfer"] = _kv_transfer(rng)
    else:
        cluster["replicas"] = rng.choice([1, 1, 2])
    routers = ["round_robin", "least_loaded", "random", "prefix_aware", "session_affinity"]
    if _maybe(rng, 0.6):
        cluster["router"] = rng.choice(routers)
    if _maybe(rng, 0.3):
        kind = rng.choice(["orca", "prefill_first", "sarathi"])
        data["scheduler"] = {"kind": kind, "block_size": rng.choice([16, 32])}
    if feature == "mtp" or (moe and _maybe(rng, 0.1)):
        data["speculative"] = {
            "enabled": True,
            "proposer": {"kind": "mtp", "layers": rng.randint(1, 2)},
            "acceptance": {"kind": "iid", "alpha": round(rng.uniform(0.3, 0.95), 3)},
            "policy": {"kind": "fixed", "k": rng.randint(1, 3)},
        }
    elif _maybe(rng, 0.1):
        data["speculative"] = {
            "enabled": True,
            "proposer": {"kind": rng.choice(["eagle", "ngram"])},
            "policy": {"kind": "fixed", "k": rng.randint(1, 4)},
        }
    if _maybe(rng, 0.25):
        data["output"] = {"timeseries_window_s": round(10 ** rng.uniform(-2, 1), 3)}
    if _maybe(rng, 0.2):
        data["horizon_s"] = round(10 ** rng.uniform(-1.5, 0.7), 4)
    if _maybe(rng, 0.1):
        data["workload"]["client"] = {"timeout_s": round(10 ** rng.uniform(-1, 1), 3)}
    tight = random.Random(f"spec-budget/{name}/{data['seed']}")  # the other draws unchanged
    if _maybe(tight, SPEC_BUDGET_SHARE):
        _tight_speculation(tight, data)
    scaling = random.Random(f"autoscale/{name}/{data['seed']}")  # the other draws unchanged
    if "replicas" in cluster and _maybe(scaling, AUTOSCALE_SHARE):
        del cluster["replicas"]
        cluster["autoscale"] = _autoscale(scaling)
        _quiet_spells(scaling, data["workload"])
    timing = random.Random(f"timeouts/{name}/{data['seed']}")  # the other draws unchanged
    if "client" not in data["workload"] and _maybe(timing, TIMEOUT_SHARE):
        _timed_client(timing, data)
    return data


TIMEOUT_SHARE = 0.25
"""The share of cases (without a drawn client timeout) whose timeouts fire mid-request."""
PREFILL_S_PER_TOKEN = 2e-5
"""About what a prompt token costs a dense 8B model on an H100 (a scale to draw timeouts on)."""
DECODE_STEP_S = 0.01
"""About what a decode step costs (the same scale)."""


def _mean_tokens(length: Draw | None, default: float) -> float:
    """A length distribution's rough mean (``default`` where the draw does not say)."""
    if not isinstance(length, dict):
        return default
    if "value" in length:
        return float(length["value"])
    if "low" in length and "high" in length:
        return (length["low"] + length["high"]) / 2
    return float(length.get("mean", default))


def _timed_client(rng: random.Random, data: Draw) -> None:
    """A client timeout drawn against the requests' expected service time, to fire while a
    request is prefilled, while it decodes, or (a KV cache of a few GiB: preemption) while it
    waits preempted."""
    workload = data["workload"]
    lengths = workload.get("sessions") or workload
    prompt = _mean_tokens(lengths.get("prompt_tokens") or lengths.get("user_tokens"), 1000.0)
    output = _mean_tokens(lengths.get("output_tokens") or lengths.get("answer_tokens"), 60.0)
    prefill_s = prompt * PREFILL_S_PER_TOKEN
    during = rng.choice(["prefill", "decode", "preempted"])
    if during == "prefill":
        timeout = prefill_s * rng.uniform(0.1, 1.2)
    else:
        timeout = prefill_s + DECODE_STEP_S * output * rng.uniform(0.05, 1.0)
    workload["client"] = {"timeout_s": round(max(timeout, 1e-4), 6)}
    if during == "preempted":
        _tight_kv(rng, data)


def _tight_kv(rng: random.Random, data: Draw) -> None:
    """A plain cluster's memory flag set for a KV cache of a few thousand tokens (the engine's
    sizing probed at two settings: it is linear in the flag), which the campaign's bursts fill:
    preemption."""
    from cbsim.studies.plan.layouts import kv_tokens

    cluster = data["cluster"]
    if "pools" in cluster or "disaggregation" in cluster:
        return
    sized = []
    for flag in (0.5, 0.9):
        try:
            sized.append(kv_tokens(cbsim.load_scenario({**data, "cluster": {**cluster,
                         "gpu_memory_utilization": flag}})))  # fmt: skip
        except CbsimError:
            return
    per_flag = (sized[1] - sized[0]) / 0.4
    if per_flag <= 0:
        return
    flag = 0.5 + (rng.uniform(2500, 10000) - sized[0]) / per_flag
    if 0.05 <= flag <= 0.95:
        cluster["gpu_memory_utilization"] = round(flag, 4)


AUTOSCALE_SHARE = 0.3
"""The share of plain-cluster cases that are autoscaled."""
SPEC_BUDGET_SHARE = 0.15
"""The share of cases that speculate under a token budget below k × batch."""


def _tight_speculation(rng: random.Random, data: Draw) -> None:
    """Speculation (the case's own proposer where it has one) under a small token budget, a
    large batch and long drafts, with any scheduler kind."""
    spec = data.get("speculative") or {"enabled": True}
    if "proposer" not in spec or spec["proposer"]["kind"] != "mtp":
        spec["proposer"] = {"kind": rng.choice(["eagle", "ngram"])}
    spec["policy"] = rng.choice(
        [
            {"kind": "fixed", "k": rng.randint(3, 8)},
            {"kind": "goodput", "k_max": 8},
            {"kind": "batch_table", "preset": "vllm-dsd-example"},
            {"kind": "adaptive_hysteresis"},
        ]
    )
    data["speculative"] = spec
    kind = rng.choice(["sarathi", "sarathi", "orca", "prefill_first", "static"])
    scheduler: Draw = {
        "kind": kind,
        "max_batched_tokens": rng.randint(2, 64),
        "max_batch_size": rng.randint(16, 256),
    }
    if kind == "orca" and _maybe(rng, 0.5):
        scheduler["chunked_prefill"] = True
    data["scheduler"] = scheduler


def _autoscale(rng: random.Random) -> Draw:
    """An autoscale block for the campaign's short runs (seconds): quick intervals and starts."""
    low = rng.randint(1, 2)
    metric = rng.choice(["queue", "kv_utilization", "rps"])
    target = {
        "queue": round(10 ** rng.uniform(-1, 1), 3),
        "kv_utilization": round(10 ** rng.uniform(-4, -0.3), 5),
        "rps": round(10 ** rng.uniform(-0.5, 1.5), 3),
    }[metric]
    block: Draw = {
        "min_replicas": low,
        "max_replicas": low + rng.randint(0, 2),
        "metric": metric,
        "target": target,
        "interval_s": round(10 ** rng.uniform(-2, -0.3), 4),
        "scale_up_delay_s": round(rng.uniform(0.0, 0.3), 3),
        "cooldown_s": round(rng.uniform(0.0, 1.0), 3),
        "weight_load_gbps": round(10 ** rng.uniform(1.5, 3), 1),
    }
    if _maybe(rng, 0.5):
        block["initial_replicas"] = rng.randint(low, block["max_replicas"])
    if _maybe(rng, 0.3):
        block["stabilization_s"] = round(rng.uniform(0.0, 2.0), 3)
    if _maybe(rng, 0.25):  # a run that may end before the first decision, or the first start
        block["interval_s"] = round(10 ** rng.uniform(-0.3, 2), 3)
        block["scale_up_delay_s"] = round(10 ** rng.uniform(-1, 1.5), 3)
    if _maybe(rng, 0.3):
        block["scale_up_stabilization_s"] = round(rng.uniform(0.0, 1.0), 3)
    if _maybe(rng, 0.3):
        block["scale_down_step"] = rng.randint(1, 2)
    return block


def _quiet_spells(rng: random.Random, workload: Draw) -> None:
    """Open-loop arrivals of an autoscaled case replaced, sometimes, by a rate curve with
    spells of zero rate (at its start, between bursts, at its end): the autoscaler evaluates
    while nothing arrives, and a run may end long before the curve does."""
    arrival = workload.get("arrival") or {}
    if arrival.get("kind") not in ("poisson", "gamma") or "sessions" in workload:
        return
    if not _maybe(rng, 0.6):
        return
    rate = float(arrival["rate"])
    points: list[list[float]] = []
    at = 0.0
    for _ in range(rng.randint(1, 3)):
        quiet, burst = round(10 ** rng.uniform(-2, 0.5), 3), round(10 ** rng.uniform(-2, 0), 3)
        points += [[at, 0.0], [at + quiet, 0.0], [at + quiet + 0.001, rate]]
        at = round(at + quiet + 0.001 + burst, 3)
        points.append([at, rate])
        at = round(at + 0.001, 3)
    if _maybe(rng, 0.5):  # a quiet tail
        points += [[at, 0.0], [round(at + 10 ** rng.uniform(-1, 1.5), 3), 0.0]]
    workload["arrival"] = {"kind": "rate_curve", "points": points}
    if _maybe(rng, 0.5):
        workload.pop("num_requests", None)
        workload.pop("duration_s", None)


@dataclass(frozen=True)
class Case:
    """Case ``index`` of the campaign: its feature, data and the draws it took to be valid."""

    index: int
    feature: str
    data: Draw
    draws: int

    @property
    def label(self) -> str:
        cl = self.data["cluster"]
        layout = "/".join(f"{k}{cl[k]}" for k in ("tp", "dp", "ep", "pp") if k in cl)
        return f"#{self.index} {self.feature} {cl['model']} {cl['gpu']} {layout} {cl['engine']}"


def make_case(index: int, seed: int = SEED_OF_CAMPAIGN) -> Case:
    """Case ``index``: the first valid draw of its own seeded stream, around the feature
    ``FEATURES[index % len(FEATURES)]``."""
    feature = FEATURES[index % len(FEATURES)]
    rng = random.Random(f"features/{seed}/{index}")
    for draws in range(1, MAX_DRAWS + 1):
        data = draw_scenario(rng, feature, f"feature-{index}")
        try:
            preflight(cbsim.load_scenario(data))  # what ``cbsim validate`` checks
        except CbsimError:
            continue
        return Case(index, feature, data, draws)
    raise AssertionError(f"no valid scenario in {MAX_DRAWS} draws for case {index} ({feature})")


def campaign(size: int = CAMPAIGN_SIZE, seed: int = SEED_OF_CAMPAIGN) -> Iterator[Case]:
    """The campaign's cases, in order (each generated on demand)."""
    return (make_case(i, seed) for i in range(size))


def quick_slice(size: int = QUICK_CASES) -> list[Case]:
    """A seeded sample of ``size`` cases, each feature among them."""
    rng = random.Random(SEED_OF_CAMPAIGN + 1)
    per_feature = [range(f, CAMPAIGN_SIZE, len(FEATURES)) for f in range(len(FEATURES))]
    indices = [rng.choice(indices) for indices in per_feature]
    rest = sorted(set(range(CAMPAIGN_SIZE)) - set(indices))
    indices += rng.sample(rest, size - len(indices))
    return [make_case(i) for i in sorted(indices)]


# --------------------------------------------------------------------------- invariants


def check_busy(results: cbsim.Results, fail: Fail) -> None:
    """``busy_fraction`` in [0, 1]; no replica busy longer than the run."""
    value = results.summary.get("busy_fraction")
    ok = isinstance(value, float) and (math.isnan(value) or 0.0 <= value <= 1.0 + 1e-9)
    _check(fail, "busy", ok, f"busy_fraction {value}")
    it = results.iterations
    if len(it):
        span = float((it["start_s"] + it["duration_s"]).max() - results.requests["arrival_s"].min())
        busiest = float(it.groupby("replica")["duration_s"].sum().max())
        _check(fail, "busy", busiest <= span * (1 + 1e-9), f"a replica busy {busiest} in {span}")


def _shared_tokens(ids: np.ndarray, block: int, prompts: np.ndarray, i: int) -> int:
    """The most prompt tokens request ``i`` shares (by prefix block ids) with an earlier one."""
    mine = ids[i]
    best = 0
    for j in range(i):
        other = ids[j]
        common = 0
        for a, b in zip(mine, other, strict=False):  # prefixes of different lengths
            if a != b:
                break
            common += 1
        best = max(best, min(common * block, int(prompts[i])))
    return best


def check_prefix(results: cbsim.Results, fail: Fail) -> None:
    """Prefix reuse only of what can have been cached."""
    req = results.requests
    if "cached_tokens" not in req:
        return
    p = "prefix"
    cached = req["cached_tokens"].to_numpy()
    _check(fail, p, (cached >= 0).all(), "negative cached_tokens")
    _check(fail, p, (cached <= req["prompt_tokens"].to_numpy()).all(), "cached > prompt")
    if "cached_tokens_cpu" in req:
        cpu = req["cached_tokens_cpu"].to_numpy()
        _check(fail, p, ((cpu >= 0) & (cpu <= cached)).all(), "cached_tokens_cpu out of range")
    rate = results.summary.get("prefix_hit_rate")
    _check(fail, p, isinstance(rate, float) and 0.0 <= rate <= 1.0, f"prefix_hit_rate {rate}")
    scenario = results.scenario
    if scenario.workload.trace is None or scenario.workload.closed_loop is not None:
        return
    specs = build_workload(scenario)
    if not isinstance(specs, RequestSpecs) or specs.prefix_ids is None:
        return
    prompts = specs.prompt_tokens
    order = np.argsort(specs.arrival_s, kind="stable")
    ids = specs.prefix_ids[order]
    for row, i in enumerate(order[: len(req)]):
        bound = _shared_tokens(ids, specs.prefix_block_tokens, prompts[order], row)
        got = int(cached[i])
        _check(fail, p, got <= bound, f"request {i} reused {got} tokens, shares {bound}")


def check_memory_frames(results: cbsim.Results, fail: Fail) -> None:
    """No more timeseries windows than the run is long."""
    ts, it, req = results.timeseries, results.iterations, results.requests
    window = results.scenario.output.timeseries_window_s
    ends = [float(req["arrival_s"].max()) if len(req) else 0.0]
    if len(it):
        ends.append(float((it["start_s"] + it["duration_s"]).max()))
    for column in ("finish_s", "first_token_s"):
        if len(req) and req[column].notna().any():
            ends.append(float(req[column].max()))
    windows = math.floor(max(ends) / window) + 2
    _check(fail, "memory", len(ts) <= windows, f"{len(ts)} timeseries windows for {windows}")


def check_round_trip_read(results: cbsim.Results, fail: Fail, rerun: bool) -> None:
    """Written, read back (and the written scenario loaded and, with ``rerun``, run): the same."""
    r = "round_trip"
    with tempfile.TemporaryDirectory() as folder:
        written = results.write(Path(folder) / "out")
        try:
            read = cbsim.Results.read(written)
            scenario = cbsim.load_scenario(written / "scenario.yaml", written=True)
        except CbsimError as err:
            fail(r, f"written result does not read back: {err}"[:300])
            return
    # summary.json holds a figure that is not finite as null, read back as NaN (docs/outputs.md)
    problem = frames_differ(dataclasses.replace(results, summary=as_written(results.summary)), read)
    _check(fail, r, problem is None, str(problem))
    same = read.scenario.to_dict() == results.scenario.to_dict()
    _check(fail, r, same, "scenario differs after reading")
    if rerun:
        again = frames_differ(results, cbsim.simulate(scenario))
        _check(fail, r, again is None, f"the written scenario runs otherwise: {again}")


# --------------------------------------------------------------------------- running


@dataclass
class Outcome:
    """What checking one case found: ``(invariant, what)`` per violation, and its time."""

    case: Case
    violations: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    peak_bytes: int | None = None

    def fail(self, invariant: str, what: str) -> None:
        self.violations.append((invariant, what))

    @property
    def unexpected(self) -> list[tuple[str, str]]:
        return [v for v in self.violations if known_issue(*v) is None]


def check_autoscale(results: cbsim.Results, fail: Fail) -> None:
    """Autoscaled: serving replicas within bounds, requests routed and iterations run only where
    a replica served (held) at the time."""
    auto = results.scenario.cluster.autoscale
    if auto is None:
        return
    events = results.run_info["scale_events"]
    serving = auto.start_replicas
    for event in events:
        serving += {"serve": 1, "drain": -1}.get(event["event"], 0)
        ok = auto.min_replicas <= serving <= auto.max_replicas
        _check(fail, "autoscale", ok, f"{serving} serving at {event['time_s']}")
    end = results.run_info["simulated_s"]
    check_fleet_figures(results, fail)
    served, held = windows_from_events(events, auto.start_replicas, auto.max_replicas, end)
    requests = results.requests
    for replica, sent in zip(requests["replica"], requests["arrival_s"], strict=True):
        if replica >= 0 and not any(a <= sent <= b for a, b in served[replica]):
            fail("autoscale", f"request sent at {sent} to replica {replica}, not serving")
            return
    iterations = results.iterations
    for replica, start in zip(iterations["replica"], iterations["start_s"], strict=True):
        if not any(a <= start <= b for a, b in held[replica]):
            fail("autoscale", f"replica {replica} ran an iteration at {start}, not held")
            return


BUDGETED_DECODES = ("sarathi", "orca")
"""Schedulers whose every iteration, decodes and verify tokens included, keeps the budget."""


def _replica_schedulers(scenario: cbsim.Scenario) -> list[tuple[Any, str]]:
    """Each replica's scheduler settings (data-parallel ranks' and micro-batches' limits
    summed, as the replica takes them) and its pool's role, in replica order (an autoscaled
    pool's replicas all its own)."""
    schedulers = []
    for plan in pool_plans(scenario):
        schedulers += [(rank_limits(plan.scenario), plan.role)] * plan.replicas
    return schedulers


def check_budget(results: cbsim.Results, fail: Fail) -> None:
    """Every iteration's scheduled tokens within its replica's token budget (see the module
    docstring for which iterations each kind budgets)."""
    it = results.iterations
    if not len(it):
        return
    schedulers = _replica_schedulers(results.scenario)
    verify = it.get("verify_tokens", 0)
    tokens = (it["prefill_tokens"] + it["decode_tokens"] + verify).to_numpy()
    replicas = it["replica"].to_numpy() if "replica" in it else np.zeros(len(it), dtype=int)
    sizes = it["batch_size"].to_numpy()
    prefills = it["prefill_tokens"].to_numpy()
    for row in range(len(it)):
        config, role = schedulers[min(int(replicas[row]), len(schedulers) - 1)]
        lone = sizes[row] == 1 and tokens[row] == prefills[row]
        if config.kind in BUDGETED_DECODES:
            budgeted = not (config.kind == "orca" and lone)
        else:  # a decode pool's prompts were computed by the prefill pool: a transferred
            # request's one-token first step rides in its decode steps, which are not budgeted
            budgeted = prefills[row] > 0 and sizes[row] > 1 and role != "decode"
        if budgeted and tokens[row] > config.max_batched_tokens:
            fail(
                "budget",
                f"{config.kind} iteration {row} scheduled {tokens[row]} tokens "
                f"over max_batched_tokens {config.max_batched_tokens}",
            )
            return


def check_no_negative_times(results: cbsim.Results, fail: Fail) -> None:
    """No float column of the requests, the iterations or the timeseries below zero (a time, a
    wait, a latency, a rate: a float subtraction written as a negative wait was one)."""
    frames = (results.requests, results.iterations, results.timeseries)
    for name, frame in zip(("requests", "iterations", "timeseries"), frames, strict=True):
        for column in frame.columns:
            values = frame[column]
            if values.dtype.kind == "f" and (values < 0).any():
                fail("time", f"negative {name}.{column}: {float(values.min())!r}")


def check_fleet_figures(results: cbsim.Results, fail: Fail) -> None:
    """Autoscaled: the replicas of the timeseries and the summary within ``[min_replicas,
    max_replicas]``, no scale event after the run's end, ``scale_ups`` and ``scale_downs`` the
    decisions its events show (starts; drains or cancels)."""
    auto = results.scenario.cluster.autoscale
    assert auto is not None
    low, high = auto.min_replicas, auto.max_replicas
    within = lambda value: low - 1e-9 <= value <= high + 1e-9  # noqa: E731
    replicas = results.timeseries["replicas"].to_numpy(dtype=float)
    outside = [float(v) for v in replicas if not within(v)]
    _check(fail, "autoscale", not outside, f"timeseries replicas {outside[:3]} outside bounds")
    summary = results.summary
    for key in ("replicas_mean", "replicas_max"):
        _check(fail, "autoscale", within(summary[key]), f"{key} {summary[key]} outside bounds")
    end = results.run_info["simulated_s"]
    events = results.run_info["scale_events"]
    late = [e for e in events if e["time_s"] > end]
    _check(fail, "autoscale", not late, f"{len(late)} scale events after the end {end}")
    ups = len({e["time_s"] for e in events if e["event"] == "start"})
    downs = len({e["time_s"] for e in events if e["event"] in ("drain", "cancel")})
    counted = (summary["scale_ups"], summary["scale_downs"])
    _check(
        fail,
        "autoscale",
        counted == (ups, downs),
        f"scale ups/downs {counted}, events show {(ups, downs)}",
    )


def known_issue(invariant: str, what: str) -> str | None:
    """The known, unfixed defect a violation is, or None."""
    for (known_invariant, start), defect in KNOWN_ISSUES.items():
        if invariant == known_invariant and what.startswith(start):
            return defect
    return None


def _simulate(data: Draw, **overrides: Any) -> cbsim.Results:
    return cbsim.simulate(cbsim.load_scenario({**data, **overrides}))


def _traced_simulate(data: Draw, outcome: Outcome) -> cbsim.Results:
    """The run, its peak of traced allocations kept in ``outcome`` and checked."""
    tracemalloc.start()
    try:
        results = _simulate(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    outcome.peak_bytes = peak
    rows = len(results.requests) + len(results.iterations)
    bound = MEMORY_BASE_BYTES + MEMORY_PER_ROW_BYTES * rows
    _check(outcome.fail, "memory", peak <= bound, f"peak {peak / 2**20:.0f} MiB for {rows} rows")
    return results


BASIC_CHECKS: tuple[Callable[[cbsim.Results, Fail], None], ...] = (
    *CHECKS,
    check_busy,
    check_prefix,
    check_memory_frames,
    check_autoscale,
    check_budget,
    check_no_negative_times,
)


def _check_case(case: Case, outcome: Outcome) -> None:
    if case.index % MEMORY_EVERY == 0:
        results = _traced_simulate(case.data, outcome)
    else:
        results = _simulate(case.data)
    for check in BASIC_CHECKS:
        check(results, outcome.fail)
    again = frames_differ(results, _simulate(case.data))
    _check(outcome.fail, "determinism", again is None, str(again))
    if case.index % FAST_FORWARD_EVERY == 0:
        flipped = _simulate(case.data, fast_forward=not case.data["fast_forward"])
        problem = frames_differ(results, flipped)
        _check(outcome.fail, "fast_forward", problem is None, str(problem))
    check_round_trip_read(results, outcome.fail, rerun=case.index % RERUN_EVERY == 0)


def run_case(case: Case) -> Outcome:
    """Run and check one case; an exception or a hang is a ``runs`` violation."""
    outcome = Outcome(case)
    started = time.perf_counter()
    try:
        with alarm(CASE_TIMEOUT_S):
            _check_case(case, outcome)
    except Hang:
        outcome.fail("runs", f"over {CASE_TIMEOUT_S} s")
    except Exception as err:  # any exception is a finding
        outcome.fail("runs", f"{type(err).__name__}: {err}"[:300])
    outcome.seconds = time.perf_counter() - started
    return outcome


def figures(outcomes: list[Outcome]) -> dict[str, Any]:
    """Scenarios, redraws, violations per invariant and per feature (cases with at least one),
    and the known, unfixed ones apart."""
    per_invariant = Counter(inv for o in outcomes for inv in {i for i, _ in o.unexpected})
    per_feature = Counter(o.case.feature for o in outcomes if o.unexpected)
    known = Counter(
        inv for o in outcomes for inv in {i for i, w in o.violations if known_issue(i, w)}
    )
    cases = Counter(o.case.feature for o in outcomes)
    result: dict[str, Any] = {
        "scenarios": len(outcomes),
        "invalid draws redrawn": sum(o.case.draws - 1 for o in outcomes),
        "fast-forward twins": sum(1 for o in outcomes if o.case.index % FAST_FORWARD_EVERY == 0),
        "reruns of the written scenario": sum(
            1 for o in outcomes if o.case.index % RERUN_EVERY == 0
        ),
        "memory traced": sum(1 for o in outcomes if o.peak_bytes is not None),
    }
    result.update({f"violations: {inv}": per_invariant[inv] for inv in INVARIANTS})
    result.update({f"feature {f}: cases/failing": f"{cases[f]}/{per_feature[f]}" for f in FEATURES})
    result.update({f"known (unfixed): {inv}": n for inv, n in sorted(known.items())})
    return result


def report(outcomes: list[Outcome]) -> str:
    lines = [f"{k}: {v}" for k, v in figures(outcomes).items()]
    for outcome in [o for o in outcomes if o.violations][:40]:
        first = (outcome.unexpected or outcome.violations)[0]
        known = " (known)" if known_issue(*first) else ""
        lines.append(f"- {outcome.case.label}: [{first[0]}]{known} {first[1]}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- tests


def test_campaign_is_seeded_and_valid():
    first = [make_case(i) for i in range(len(FEATURES))]
    assert [c.feature for c in first] == list(FEATURES)
    assert [make_case(i) for i in range(3)] == first[:3]  # the same scenarios every time


def test_quick_slice_covers_every_feature():
    cases = quick_slice()
    assert len(cases) == QUICK_CASES
    assert {c.feature for c in cases} == set(FEATURES)
    clusters = [c.data["cluster"] for c in cases]
    assert any("pools" in cl for cl in clusters)
    assert any("disaggregation" in cl for cl in clusters)
    assert any("sessions" in c.data["workload"] for c in cases)


def test_quick_slice_of_feature_scenarios():
    outcomes = [run_case(case) for case in quick_slice()]
    assert all(not o.unexpected for o in outcomes), report(outcomes)


# --------------------------------------------------------------------------- defects found


def _small(**extra: Any) -> Draw:
    """A small scenario: a dozen short requests at 20 per second, then ``extra``."""
    workload = {
        "num_requests": 12,
        "arrival": {"kind": "poisson", "rate": 20.0},
        "prompt_tokens": {"kind": "uniform", "low": 10, "high": 900},
        "output_tokens": {"kind": "fixed", "value": 30},
    }
    return {"seed": 5, "workload": workload, **extra}


POOLED_CLUSTERS = {
    # the second pool's engine keeps an fp8 KV cache and batches otherwise than the cluster's
    "pools": {
        "model": "llama-3-8b",
        "pools": [
            {"replicas": 2, "gpu": "h100-sxm"},
            {"gpu": "a100-80gb", "engine": "tensorrt-llm", "dtype": "fp8"},
        ],
    },
    "disaggregation": {
        "model": "llama-3-8b",
        "prefix_caching": True,
        "disaggregation": {
            "prefill": {"engine": "sglang", "scheduler": {"block_size": 64}},
            "decode": {"replicas": 2, "gpu": "h200", "engine": "tensorrt-llm", "dtype": "fp8"},
        },
    },
}


@pytest.mark.parametrize("kind", sorted(POOLED_CLUSTERS))
def test_a_pooled_result_reads_back_and_runs_alike(kind: str, tmp_path: Path) -> None:
    """The written scenario of a mixed fleet or a disaggregated cluster reads back (it kept
    ``cluster.replicas`` beside the pools: "with pools, each pool says its replicas") and runs
    as the run did (each pool written with the settings it resolved, not the cluster's)."""
    results = _simulate(_small(cluster=POOLED_CLUSTERS[kind]))
    written = results.write(tmp_path / "out")
    read = cbsim.Results.read(written)
    assert read.scenario.to_dict() == results.scenario.to_dict()
    assert frames_differ(results, cbsim.simulate(read.scenario)) is None


def test_a_pooled_result_of_an_older_cbsim_still_reads(tmp_path: Path) -> None:
    """A folder written before the fix (``replicas`` beside the pools, every pool key it left to
    the cluster null) reads back, with the pools' replicas; ``cbsim report`` reads its
    scenario too."""
    from cbsim.studies.report.run import _read_run

    results = _simulate(_small(cluster=POOLED_CLUSTERS["pools"]))
    written = results.write(tmp_path / "out")
    old = results.scenario.model_dump(mode="json")  # what older cbsims wrote
    (written / "scenario.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    read = cbsim.Results.read(written)
    assert [p.replicas for p in read.scenario.cluster.pools or []] == [2, 1]
    assert _read_run(written).results is not None


def test_compare_no_spec_of_a_pooled_run() -> None:
    """``--compare-no-spec`` reloads the run's scenario with speculation off; with pools it
    failed on the written ``cluster.replicas``."""
    speculative = {"enabled": True, "proposer": {"kind": "ngram"}}
    results = _simulate(_small(cluster=POOLED_CLUSTERS["pools"], speculative=speculative))
    figures = cbsim.compare_no_spec(results)
    assert results.no_spec_summary is not None
    assert math.isfinite(figures["speedup_e2e_mean"])


def test_a_sarathi_budget_reads_back_by_the_name_it_was_given(tmp_path: Path) -> None:
    """A sarathi budget was written as both ``max_batched_tokens`` and ``chunk_size``, and read
    back as ``chunk_size``: the rerun's warning named the other key than the run's."""
    data = _small(cluster={"engine": "sglang"}, scheduler={"kind": "sarathi"})
    results = _simulate(data)
    assert "scheduler.max_batched_tokens" in results.summary["warnings"]
    read = cbsim.Results.read(results.write(tmp_path / "out"))
    assert cbsim.simulate(read.scenario).summary["warnings"] == results.summary["warnings"]


def test_pools_whose_front_ends_stream_and_do_not(tmp_path: Path) -> None:
    """A decode pool whose engine's front end streams tokens (``output_token_s``) beside a
    prefill pool whose does not: only the streaming replicas recorded delivery times, and
    building the requests frame failed (IndexError) on the rows without one."""
    profile = json.loads((ENGINE_DIR / "vllm-v0.json").read_text())
    profile["frontend"]["output_token_s"] = 1e-4
    path = tmp_path / "streaming.json"
    path.write_text(json.dumps(profile))
    split = {"prefill": {"engine": "none"}, "decode": {}}
    results = _simulate(_small(cluster={"engine": str(path), "disaggregation": split}))
    req = results.requests
    assert (req["status"] == "finished").all()
    assert (req["finish_s"] > req["server_finish_s"]).all()  # the tokens' streaming shows


def test_sessions_of_which_none_starts_run_empty() -> None:
    """Sessions whose first start falls after ``duration_s``: no request, not ``zip() argument 2
    is shorter than argument 1`` (each session's first turn was counted from a leading 0)."""
    sessions = {
        "turns": {"kind": "fixed", "value": 2},
        "user_tokens": {"kind": "fixed", "value": 10},
        "answer_tokens": {"kind": "fixed", "value": 5},
    }
    workload = {"arrival": {"kind": "poisson", "rate": 0.5}, "duration_s": 0.01}
    results = _simulate({"seed": 0, "workload": {**workload, "sessions": sessions}})
    assert len(results.requests) == 0
    assert results.summary["completed"] == 0


def test_busy_fraction_stays_within_one_when_a_horizon_cuts_the_run() -> None:
    """Iterations that run on after the last finish (a request still running at the horizon)
    were divided by the makespan (first arrival to last finish) alone: 1.45 here."""
    data = _small(horizon_s=2.0)
    data["workload"].update(num_requests=2, arrival={"kind": "poisson", "rate": 1000.0})
    data["workload"]["output_tokens"] = {"kind": "uniform", "low": 2, "high": 400}
    data["seed"] = 3
    results = _simulate(data)
    summary = results.summary
    assert summary["completed"] == 1 and summary["unfinished"] == 1
    assert 0.99 < summary["busy_fraction"] <= 1.0


@pytest.mark.parametrize("arrival", ["poisson", "closed_loop"])
def test_a_long_workload_cut_short_allocates_for_what_is_sent(arrival: str) -> None:
    """Two million requests of which a 0.2 s horizon lets a handful through: the request table
    was allocated for every one of them (about 450 MiB)."""
    data = _small(horizon_s=0.2)
    data["workload"]["num_requests"] = 2_000_000
    if arrival == "closed_loop":
        data["workload"]["arrival"] = {"kind": "closed_loop", "concurrency": 2}
    scenario = cbsim.load_scenario(data)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        cbsim.simulate(scenario)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20  # the two million arrival times drawn are 16 MiB a column


def test_a_decode_pools_transferred_first_step_is_no_prompt_batch() -> None:
    """Seed 21's case 343: under ``prefill_first`` (8-token budget) a disaggregated decode pool
    decodes a speculating request (9 verify tokens) beside a transferred request's one-token
    first step. The budget check read the step as a batch of prompts over its budget; the pool's
    prompts were computed by the prefill pool, and its decode steps are not budgeted."""
    case = make_case(343, seed=21)
    results = _simulate(case.data)
    iterations = results.iterations
    mixed = (iterations["prefill_tokens"] > 0) & (iterations["verify_tokens"] > 0)
    assert mixed.any()  # the step the check misread is still there
    outcome = Outcome(case)
    check_budget(results, outcome.fail)
    assert not outcome.violations


@pytest.mark.slow
def test_whole_campaign_of_feature_scenarios():
    outcomes = [run_case(case) for case in campaign()]
    assert all(not o.unexpected for o in outcomes), report(outcomes)


def main(argv: list[str]) -> None:
    """Run the campaign (or its first ``argv[0]`` cases) and print its figures."""
    size = int(argv[0]) if argv else CAMPAIGN_SIZE
    start = int(argv[1]) if len(argv) > 1 else 0
    started = time.perf_counter()
    outcomes = []
    for index in range(start, start + size):
        outcomes.append(run_case(make_case(index)))
        if len(outcomes) % 25 == 0:
            elapsed = time.perf_counter() - started
            print(f"{len(outcomes)} scenarios, {elapsed:.0f} s", file=sys.stderr, flush=True)
    print(report(outcomes))
    slowest = max(outcomes, key=lambda o: o.seconds)
    print(
        f"{time.perf_counter() - started:.1f} s in all; slowest {slowest.seconds:.2f} s "
        f"({slowest.case.label}); mean {math.fsum(o.seconds for o in outcomes) / len(outcomes):.2f} s"
    )
    sys.exit(0 if all(not o.unexpected for o in outcomes) else 1)


if __name__ == "__main__":
    main(sys.argv[1:])
