"""How a serving engine sizes its KV cache: the rule an engine profile carries.

Each engine decides at start-up how much GPU memory its KV cache gets, by a rule of its own, and
prints the result (``GPU KV cache size: N tokens``, ``max_total_num_tokens=N``, ``Allocated X GiB
for max tokens in paged KV cache (N)``). :class:`MemoryRule` names the rule and holds the few
quantities it needs that are not the model's or the GPU's: what the engine's profiling run finds
beside the weights. :mod:`cbsim.cost.engine_memory` applies it.

* ``vllm`` (V1 engine): the budget is the GPU's total memory as CUDA reports it times
  ``gpu_memory_utilization``; the weights, the peak activations of one profiling forward of
  ``max_num_batched_tokens`` tokens and its sampler over ``min(max_num_seqs, tokens)`` rows of
  logits, the memory that grew outside PyTorch (communication buffers, cuBLAS workspaces) and,
  from 0.20, an estimate of the CUDA graphs come out of it; the rest is KV cache.
* ``vllm-v0``: the same budget; the profiling run is ``max_num_seqs`` whole prompts of
  ``max_num_batched_tokens`` tokens in all, whose sampler also keeps probabilities and
  log-probabilities in fp32.
* ``sglang``: ``mem_fraction_static`` of the memory free after the communicators start, minus the
  weights; activations and CUDA graphs live in the rest. Its default fraction is a rule of the
  GPU's memory, the parallel layout and the prefill chunk that changed between releases
  (``fraction_rule``).
* ``tensorrt-llm`` (PyTorch backend): ``free_gpu_memory_fraction`` of what a dry run of
  ``max_num_tokens`` leaves free (weights, activations, CUDA graphs and communication buffers out).
* ``flat``: ``fraction`` of the GPU's memory less the weights and a flat reserve (engines
  without a known rule).

Memory figures are GiB per GPU, as the engines print them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

RuleKind = Literal["vllm", "vllm-v0", "sglang", "tensorrt-llm", "flat"]
SglangFractionRule = Literal[
    "tp", "tp-pp", "reserve-by-memory", "reserve-by-budget", "reserve-by-budget-piecewise"
]


class MemoryRule(BaseModel):
    """One engine's KV-cache sizing rule and its profiling-run quantities (GiB per GPU).

    ``fraction``: the engine's default memory flag (vLLM ``gpu_memory_utilization``, TensorRT-LLM
    ``free_gpu_memory_fraction``; SGLang's default ``mem_fraction_static`` comes from
    ``fraction_rule`` unless this is set). ``context_gib``: what the CUDA context holds before
    anything is loaded, counted where the engine counts it (vLLM 0.8.0-0.9.0, SGLang's and
    TensorRT-LLM's free memory). ``non_torch_gib``: memory that grows outside PyTorch during the
    profiling run on one GPU; ``comm_gib``: the further growth with tensor or pipeline parallelism
    over NVLink (NCCL's buffers and the custom all-reduce's or fused all-reduce's workspaces);
    ``pcie_comm_gib``: the same over PCIe, where engines turn their custom all-reduce off;
    ``gpu_comm_gib``: GPUs whose communicators hold a different amount (an A100 has neither
    NCCL's NVLink SHARP buffers nor FlashInfer's fused all-reduce workspace, which Hopper and
    later GPUs allocate). ``sampler_bytes_per_logit``: bytes per element of the
    sampler's ``rows x vocabulary`` logits at its peak (bf16 logits, their fp32 copy, the sort's
    values and indices). ``cuda_graph_gib``: the CUDA graphs' memory, inside the budget where
    ``cuda_graphs_in_budget`` (vLLM 0.20 and later, TensorRT-LLM's dry run). ``reserve_gib``: the
    flat rule's reserve.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: RuleKind = "flat"
    fraction: float | None = Field(default=None, gt=0.0, le=1.0)
    fraction_rule: SglangFractionRule | None = None
    context_gib: float = Field(default=0.0, ge=0.0)
    context_counted: bool = False
    non_torch_gib: float = Field(default=0.0, ge=0.0)
    comm_gib: float = Field(default=0.0, ge=0.0)
    pcie_comm_gib: float = Field(default=0.0, ge=0.0)
    gpu_comm_gib: dict[str, float] = Field(default_factory=dict)
    sampler_bytes_per_logit: float = Field(default=0.0, ge=0.0)
    cuda_graph_gib: float = Field(default=0.0, ge=0.0)
    cuda_graphs_in_budget: bool = False
    reserve_gib: float = Field(default=1.5, ge=0.0)
