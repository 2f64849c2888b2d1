"""The serving engine's command line for a planned layout.

A plan is only useful if it can be deployed as planned, so the winner comes with the command that
starts it, in the chosen engine's own flag names:

* vLLM: ``vllm serve MODEL --tensor-parallel-size N --pipeline-parallel-size P
  --data-parallel-size D --enable-expert-parallel --max-num-seqs B --max-num-batched-tokens T
  --gpu-memory-utilization F [--quantization fp8] [--kv-cache-dtype fp8]``; a disaggregated unit
  runs prefill and decode instances with ``--kv-transfer-config`` naming the NIXL connector;
* SGLang: ``python -m sglang.launch_server --model-path MODEL --tp-size N --pp-size P --dp-size D
  --enable-dp-attention --ep-size E --max-running-requests B --chunked-prefill-size T
  --mem-fraction-static F``; disaggregated: ``--disaggregation-mode prefill|decode``;
* TensorRT-LLM: ``trtllm-serve MODEL --tp_size N --pp_size P --ep_size E --max_batch_size B
  --max_num_tokens T``; disaggregated units are started per worker and joined by
  ``trtllm-serve disaggregated -c CONFIG`` (noted, not generated).

Flags are emitted only where the plan differs from nothing: the parallel degrees always, batch
settings the plan chose (the engine's defaults otherwise), precision flags for fp8 weights or KV.
Catalog models map to their Hugging Face repositories (a Hugging Face id given is launched as
given); a model given as a ``config.json`` path is launched from that folder. Engines without a
server of their own (``none``, an engine profile file) get no command, with the reason.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cbsim.catalog.model_catalog import CATALOG
from cbsim.catalog.models import checkpoint_format, hf_repository
from cbsim.catalog.quantization import INTEGER_FORMATS
from cbsim.cost.engine_version import engine_family
from cbsim.studies.plan.layouts import Batching, Instance, Layout

#: Hugging Face repositories of the catalog models (instruct variants where the family has one),
#: from the model catalog: each entry's first checkpoint.
HF_REPOSITORIES: dict[str, str] = {
    entry.name: entry.launch_repo for entry in CATALOG if entry.launch_repo is not None
}

VLLM_ENGINES = frozenset({"vllm", "vllm-v0"})
SGLANG_ENGINES = frozenset({"sglang"})
TRTLLM_ENGINES = frozenset({"tensorrt-llm"})
NIXL_CONFIG = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})


def model_reference(model: str) -> str:
    """What the engine loads: the Hugging Face repository (a catalog name's checkpoint, or the
    id given), or the folder of a config.json."""
    repository = hf_repository(model)
    if repository is not None:
        return repository
    path = Path(model)
    return str(path.parent) if path.name.endswith(".json") else model


def _vllm(
    model: str, inst: Instance, batching: Batching, precision: Mapping[str, Any]
) -> list[str]:
    args = ["vllm", "serve", model, "--tensor-parallel-size", str(inst.tp)]
    if inst.pp > 1:
        args += ["--pipeline-parallel-size", str(inst.pp)]
    if inst.dp > 1:
        args += ["--data-parallel-size", str(inst.dp)]
    if inst.ep > 1:
        args.append("--enable-expert-parallel")
    if batching.max_num_seqs is not None:
        args += ["--max-num-seqs", str(batching.max_num_seqs)]
    if batching.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(batching.max_num_batched_tokens)]
    if precision.get("memory") is not None:
        args += ["--gpu-memory-utilization", f"{precision['memory']:g}"]
    if precision.get("dtype") == "fp8":
        args += ["--quantization", "fp8"]
    if precision.get("kv_dtype") == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    return args


def _sglang(
    model: str, inst: Instance, batching: Batching, precision: Mapping[str, Any]
) -> list[str]:
    args = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model,
        "--tp-size",
        str(inst.tp),
    ]
    if inst.pp > 1:
        args += ["--pp-size", str(inst.pp)]
    if inst.dp > 1:
        args += ["--dp-size", str(inst.dp), "--enable-dp-attention"]
    if inst.ep > 1:
        args += ["--ep-size", str(inst.ep)]
    if batching.max_num_seqs is not None:
        args += ["--max-running-requests", str(batching.max_num_seqs)]
    if batching.max_num_batched_tokens is not None:
        args += ["--chunked-prefill-size", str(batching.max_num_batched_tokens)]
    if precision.get("memory") is not None:
        args += ["--mem-fraction-static", f"{precision['memory']:g}"]
    if precision.get("dtype") == "fp8":
        args += ["--quantization", "fp8"]
    if precision.get("kv_dtype") == "fp8":
        args += ["--kv-cache-dtype", "fp8_e4m3"]
    return args


def _trtllm(
    model: str, inst: Instance, batching: Batching, precision: Mapping[str, Any]
) -> list[str]:
    args = ["trtllm-serve", model, "--tp_size", str(inst.tp)]
    if inst.pp > 1:
        args += ["--pp_size", str(inst.pp)]
    if inst.ep > 1:
        args += ["--ep_size", str(inst.ep)]
    if batching.max_num_seqs is not None:
        args += ["--max_batch_size", str(batching.max_num_seqs)]
    if batching.max_num_batched_tokens is not None:
        args += ["--max_num_tokens", str(batching.max_num_batched_tokens)]
    return args


def _role(engine: str, args: list[str], role: str) -> list[str]:
    if engine in VLLM_ENGINES:
        return [*args, "--kv-transfer-config", NIXL_CONFIG]
    if engine in SGLANG_ENGINES:
        return [*args, "--disaggregation-mode", role]
    return args


def _builder(engine: str) -> Any:
    if engine in VLLM_ENGINES:
        return _vllm
    if engine in SGLANG_ENGINES:
        return _sglang
    if engine in TRTLLM_ENGINES:
        return _trtllm
    return None


def launch_commands(
    engine: str,
    model: str,
    layout: Layout,
    *,
    prefill_instances: int = 1,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    memory_fraction: float | None = None,
) -> dict[str, Any]:
    """The command lines that start ``layout`` under ``engine``: ``{"engine", "commands": [{"role",
    "count", "argv", "command"}], "notes": [...]}`` (``commands`` empty, with the reason in
    ``notes``, for an engine with no server of its own)."""
    family = engine_family(engine)  # vllm@0.8.5 launches as vLLM does
    build = _builder(family)
    if build is None:
        return {
            "engine": engine,
            "commands": [],
            "notes": [f"engine {engine!r} is not a server cbsim knows the flags of"],
        }
    reference = model_reference(model)
    precision = {"dtype": dtype, "kv_dtype": kv_dtype, "memory": memory_fraction}
    if family in TRTLLM_ENGINES:
        precision["memory"] = None  # TensorRT-LLM sizes its KV cache from free memory
    notes: list[str] = []
    if family in TRTLLM_ENGINES and dtype == "fp8":
        notes.append("TensorRT-LLM: serve an FP8-quantized checkpoint (ModelOpt) for fp8 weights")
    if dtype in INTEGER_FORMATS and checkpoint_format(model) != dtype:
        kind = "an AWQ, GPTQ or w4a16" if dtype == "int4" else "a W8A8"
        notes.append(
            f"{dtype} weights: serve {kind} checkpoint of this model in place of {reference} "
            "(engines read its quantization from its config; no flag quantizes to it at load)"
        )
    if layout.prefill is None:
        argv = build(reference, layout.instance, layout.batching, precision)
        commands = [_command("replica", 1, argv)]
    else:
        prefill = _role(family, build(reference, layout.prefill, Batching(), precision), "prefill")
        decode = _role(
            family, build(reference, layout.instance, layout.batching, precision), "decode"
        )
        commands = [_command("prefill", prefill_instances, prefill), _command("decode", 1, decode)]
        notes.append(_disaggregation_note(family))
    return {"engine": engine, "commands": commands, "notes": notes}


def _command(role: str, count: int, argv: list[str]) -> dict[str, Any]:
    return {"role": role, "count": count, "argv": argv, "command": shlex.join(argv)}


def _disaggregation_note(engine: str) -> str:
    if engine in VLLM_ENGINES:
        return (
            "vLLM: start each prefill and decode instance as above (NIXL moves the KV cache) "
            "behind a prefill/decode proxy (vLLM's disaggregated examples, llm-d or Dynamo)"
        )
    if engine in SGLANG_ENGINES:
        return "SGLang: put the prefill and decode servers behind sglang_router with --pd-disaggregation"
    return (
        "TensorRT-LLM: give each worker a cache_transceiver_config and join them with "
        "trtllm-serve disaggregated -c CONFIG"
    )
