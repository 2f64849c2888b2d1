"""What each engine release does with GPU memory and its step, as its source code and published
start-up logs say (facts, each with its source; nothing here is fitted to a benchmark).

**Memory** (:class:`~cbsim.cost.memory_rule.MemoryRule`, applied by :mod:`cbsim.cost.engine_memory`):

* vLLM V1 (``vllm/v1/worker/gpu_worker.py::determine_available_memory``): KV = total x
  ``gpu_memory_utilization`` − weights − the profiling run's torch peak − non-torch growth
  (− the CUDA-graph estimate from 0.20). The profiling run is one forward of
  ``max_num_batched_tokens`` tokens and the sampler over ``min(max_num_seqs, tokens)`` rows
  (``gpu_model_runner.py::profile_run``/``_dummy_sampler_run``: logits upcast to fp32 and sorted
  for top-k/top-p). Published ``Memory profiling takes ... torch peak memory increase`` lines of
  vLLM 0.19 at 8192 tokens and 1024 sequences give 14.8-17.0 bytes per logit element (Llama-3.1-8B
  1.89 GiB, Qwen2.5-7B 2.21, Qwen1.5-MoE 2.47, Mistral-Small-24B 2.18, gpt-oss-20b 2.87), and
  1.8 on Llama-3.2-1B at 2048 and 256 (0.45 GiB): 15. Non-torch growth on one GPU 0.24-0.26 GiB
  (0.19), 0.02-0.07 (0.10); with tensor parallelism the communicators' buffers come on top.
  CUDA graphs: captured after the KV cache is sized until 0.19 (their memory comes out of the
  1 − utilisation headroom: ``Graph capturing finished in N secs, took X GiB``), estimated and
  budgeted from 0.20 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 1 in the 0.20.0
  wheel; PR #30515); the 0.19 estimates print 0.71-1.09 GiB at 8192 tokens.
  0.8.0-0.9.0 subtract *all* memory outside PyTorch (the CUDA context included: 0.51 GiB on an
  H100 in the ``worker init memory snapshot`` lines) instead of its growth.
* vLLM V0 (``vllm/worker/worker.py::determine_num_available_blocks``, 0.6.4 and later): the same
  budget; the profiling run is ``max_num_seqs`` prompts of the token budget in all, whose sampler
  keeps logits, probabilities and log-probabilities in fp32 and sorts them (``PyTorch activation
  peak memory takes`` 1.16-1.78 GiB for 160-320 sequences: 39 bytes per logit element).
* SGLang (``model_runner.py::profile_max_num_token``): ``mem_fraction_static`` of the memory free
  after the communicators start, less the weights (its ``Load weight begin. avail mem=78.81 GB``
  on an H100: 0.4-0.7 GiB below the total on one GPU; ``Init torch distributed ends. mem
  usage=1.96 GB`` at TP 8 on H200). Its default fraction
  (``server_args.py``): by TP size in 0.4.0-0.4.3, by TP x PP in 0.4.6-0.4.7, a reserve by
  GPU memory in 0.4.8-0.5.2, a reserve by prefill chunk, CUDA-graph batch and TP from 0.5.3, and
  piecewise CUDA graphs on by default from 0.5.12.
* TensorRT-LLM (PyTorch backend, ``_torch/pyexecutor/_util.py::KvCacheCreator``):
  ``free_gpu_memory_fraction`` (0.9) of what a dry run of ``max_num_tokens`` leaves free
  (weights, activations, CUDA graphs, communicators and the context taken out).

**Releases** (:class:`~cbsim.cost.engine_profile.EngineVersion`): each profile holds its newest
release's behaviour; a range says how older releases differ.
"""

from __future__ import annotations

from typing import Any

from cbsim.cost.engine_profile import EngineVersion
from cbsim.cost.memory_rule import MemoryRule

# NCCL's ring buffers and the custom all-reduce's IPC buffers only: no NVLink SHARP, no fused
# all-reduce workspace before Hopper (V0 0.8.3 on A100-40GB at TP 8 x PP 2 prints 0.93-1.07 GiB
# of non-torch memory, the CUDA context and NCCL's initialisation included)
AMPERE_COMM_GIB = {"a100-80gb": 0.3, "a100-40gb": 0.3}

MEMORY_RULES: dict[str, MemoryRule] = {
    "vllm": MemoryRule(
        kind="vllm",
        fraction=0.9,
        context_gib=0.5,
        non_torch_gib=0.26,
        comm_gib=2.1,
        pcie_comm_gib=0.1,
        gpu_comm_gib=AMPERE_COMM_GIB,
        sampler_bytes_per_logit=14.74,
        cuda_graph_gib=0.85,
        cuda_graphs_in_budget=True,
    ),
    "vllm-v0": MemoryRule(
        kind="vllm-v0",
        fraction=0.9,
        context_gib=0.5,
        non_torch_gib=0.1,
        comm_gib=2.1,
        pcie_comm_gib=0.1,
        gpu_comm_gib=AMPERE_COMM_GIB,
        sampler_bytes_per_logit=39.0,
    ),
    "sglang": MemoryRule(
        kind="sglang",
        fraction_rule="reserve-by-budget-piecewise",
        context_gib=0.55,
        comm_gib=1.5,
        pcie_comm_gib=0.15,
    ),
    "tensorrt-llm": MemoryRule(
        kind="tensorrt-llm",
        fraction=0.9,
        context_gib=0.5,
        non_torch_gib=0.3,
        comm_gib=1.5,
        pcie_comm_gib=0.15,
        cuda_graph_gib=0.5,
        cuda_graphs_in_budget=True,
    ),
}

# vLLM 0.8.5 and 0.9.0 give every GPU of 70 GiB or more the large budget; 0.9.x leaves the A100
# out (vllm/engine/arg_utils.py::_set_default_args_v1, PR #17885).
_A100_LARGE_DEFAULTS: dict[str, Any] = {
    "gpu_defaults": {
        "a100-80gb": {"scheduler": {"max_batched_tokens": 8192, "max_batch_size": 1024}}
    }
}


# the API server's delay per request and per prompt token in vLLM 0.8.5, fitted on the light-load
# per-request runs of llm-d-benchmark (cbsim.studies.calibration.frontend_fit.fit_frontend over every
# stable run; leave-one-workload-out in docs/engine-profiles.md)
FRONTEND_0_8 = (0.009, 2.8e-05)


def _changes(**sections: Any) -> dict[str, Any]:
    return dict(sections)


RELEASES: dict[str, list[EngineVersion]] = {
    "vllm": [
        EngineVersion(
            since="0.4",
            until="0.8",
            profile="vllm-v0",
            note="V0 engine",
        ),
        EngineVersion(
            since="0.8",
            until="0.9.1",
            note="non-torch memory counted whole, CUDA context included (gpu_worker.py 0.8.5)",
            changes=_changes(memory={"context_counted": True}),
        ),
        EngineVersion(
            since="0.8",
            until="0.9.1",
            note="A100 takes the large-GPU budget (arg_utils.py 0.8.5; PR #17885)",
            changes=_A100_LARGE_DEFAULTS,
        ),
        EngineVersion(
            since="0.8",
            until="0.11",
            note=(
                "synchronous scheduling, no serial step time, a front end of 9 ms + 28 us per "
                "prompt token (fitted on vLLM 0.8.5's A100 per-request runs)"
            ),
            changes=_changes(
                overhead={"serial_s": 0.0},
                frontend={"request_s": FRONTEND_0_8[0], "prompt_token_s": FRONTEND_0_8[1]},
            ),
        ),
        EngineVersion(
            since="0.8",
            until="0.20",
            note="CUDA graphs outside the KV budget (PR #30515, default on in 0.20.0)",
            changes=_changes(memory={"cuda_graphs_in_budget": False}),
        ),
    ],
    "sglang": [
        EngineVersion(
            since="0.4",
            until="0.4.4",
            note="mem_fraction_static by TP size (server_args.py 0.4.0-0.4.3)",
            changes=_changes(memory={"fraction_rule": "tp"}),
        ),
        EngineVersion(
            since="0.4.4",
            until="0.4.8",
            note="mem_fraction_static by TP x PP (server_args.py 0.4.6)",
            changes=_changes(memory={"fraction_rule": "tp-pp"}),
        ),
        EngineVersion(
            since="0.4.8",
            until="0.5.3",
            note="mem_fraction_static from a reserve by GPU memory (server_args.py 0.4.8-0.5.2)",
            changes=_changes(memory={"fraction_rule": "reserve-by-memory"}),
        ),
        EngineVersion(
            since="0.5.3",
            until="0.5.12",
            note="no piecewise CUDA graphs by default (server_args.py 0.5.3-0.5.11)",
            changes=_changes(memory={"fraction_rule": "reserve-by-budget"}),
        ),
    ],
    "vllm-v0": [
        EngineVersion(
            since="0.4",
            until="0.6.4",
            note="all non-torch memory counted, CUDA context included (worker.py 0.6.3)",
            changes=_changes(memory={"context_counted": True}),
        ),
    ],
    "tensorrt-llm": [
        EngineVersion(since="0.17", note="PyTorch backend's KV-cache estimation"),
    ],
}
