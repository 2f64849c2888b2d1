"""GPU memory as a serving engine allocates it: how many tokens of KV cache a replica holds.

Where a replica saturates is decided by its KV cache: the requests it runs at once are the
tokens the cache holds over the tokens each request needs. Every engine sizes that cache at
start-up by a rule of its own (:class:`~cbsim.cost.memory_rule.MemoryRule`) and prints the
result; this module applies the rule to a model, a GPU and a layout, per GPU of the replica:

* **the GPU's memory** as a process sees it (:attr:`~cbsim.catalog.hardware.GPU.cuda_total_bytes`: 79.15
  GiB of an 80 GB A100), and as ``nvidia-smi`` prints it for SGLang's default fraction;
* **the weights** as the checkpoint stores them (an FP8 checkpoint keeps its embedding and LM
  head in bf16), a 1/tp slice per GPU, the largest pipeline stage's layers;
* **the profiling run's activations** (vLLM): one forward of the token budget —
  the residual stream and the MLP's gate/up output and activation of every token
  (:func:`forward_activation_bytes`) — and, on the last pipeline stage, the sampler over
  ``min(max_num_seqs, budget)`` rows of logits at :attr:`MemoryRule.sampler_bytes_per_logit`
  bytes each; the larger of the two is the peak;
* **memory outside PyTorch** that the run grows (communication buffers with tensor or pipeline
  parallelism, workspaces), the CUDA context where the engine counts it, and the CUDA graphs
  where the engine's release budgets them.

What is left, in whole blocks of ``block_size`` tokens, is the KV cache (:class:`MemoryPlan`). A
draft model adds its weights and its own KV per token. Nothing here is fitted to a run; the
profiling-run quantities of each engine release are in its profile (``memory``), each with the
published start-up logs it was read from (``docs/kv-memory.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cbsim.catalog.hardware import GPU
from cbsim.catalog.model_bytes import kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from cbsim.catalog.models import ModelShape
from cbsim.cost.memory_rule import MemoryRule

GiB = 2**30
MiB = 2**20
ACTIVATION_BYTES = 2.0  # bf16/fp16 activations


def activation_bytes(dtype: str) -> float:
    """Bytes of one activation element in a ``dtype`` model: 4 in an fp32 one, else 2 (fp8,
    fp4 and integer weights' activations are 16-bit between the GEMMs)."""
    return 4.0 if dtype == "fp32" else ACTIVATION_BYTES


FRACTION_FLAGS = {
    "vllm": "gpu_memory_utilization",
    "vllm-v0": "gpu_memory_utilization",
    "sglang": "mem_fraction_static",
    "tensorrt-llm": "free_gpu_memory_fraction",
    "flat": "gpu_memory_utilization",
}
DEFAULT_FRACTION = 0.9


@dataclass(frozen=True, slots=True)
class MemoryInputs:
    """What a replica's KV cache depends on beside the engine's rule.

    ``fraction``: the memory flag as the user set it (None: the engine's default);
    ``max_batched_tokens``/``max_batch_size``: the engine's token budget and sequence cap per
    attention rank (the profiling run's size); ``max_model_len``: the longest request (0: the
    model's); ``extra_*``: a draft model's weights and KV per token, per GPU.
    """

    model: ModelShape
    gpu: GPU
    tp: int = 1
    pp: int = 1
    dp: int = 1
    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    block_size: int = 16
    fraction: float | None = None
    max_batched_tokens: int = 8192
    max_batch_size: int = 256
    max_model_len: int = 0
    extra_weight_bytes: float = 0.0
    extra_kv_bytes_per_token: float = 0.0
    speculative: bool = False

    @property
    def group(self) -> int:
        """GPUs that talk to each other inside the replica."""
        return self.tp * self.pp * self.dp

    @property
    def context_len(self) -> int:
        return self.max_model_len or self.model.max_position_embeddings


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """One replica's memory, per GPU of its tightest stage, as its engine lays it out.

    ``budget_bytes``: what the engine's rule lets weights, activations and KV take (vLLM: total x
    utilisation; SGLang: free memory x ``mem_fraction_static``; TensorRT-LLM: what the dry run
    leaves free x its fraction, less nothing further); ``kv_bytes``: what is left for the KV
    cache (negative: the weights do not fit). ``blocks`` per attention rank; a replica of ``dp``
    ranks holds ``dp`` times that.
    """

    rule: str
    fraction: float
    total_bytes: float
    budget_bytes: float
    weight_bytes: float
    activation_bytes: float
    non_torch_bytes: float
    cuda_graph_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float
    block_size: int
    dp: int
    max_model_len: int

    @property
    def fits(self) -> bool:
        """Whether the KV cache holds at least one block (no request can run without one)."""
        return self.blocks > 0

    @property
    def block_bytes(self) -> float:
        """One KV block's bytes per GPU."""
        return self.block_size * self.kv_bytes_per_token

    @property
    def blocks(self) -> int:
        """KV blocks of one attention rank."""
        if self.kv_bytes <= 0:
            return 0
        return int(self.kv_bytes // self.block_bytes)

    @property
    def rank_tokens(self) -> int:
        """Tokens one attention rank's cache holds: what the engine prints."""
        return self.blocks * self.block_size

    @property
    def tokens(self) -> int:
        """Tokens the replica's cache holds (every rank's)."""
        return self.rank_tokens * self.dp

    @property
    def kv_gib(self) -> float:
        """KV-cache memory per GPU, GiB (what the engine allocates)."""
        return self.blocks * self.block_size * self.kv_bytes_per_token / GiB

    @property
    def fraction_flag(self) -> str:
        return FRACTION_FLAGS.get(self.rule, "gpu_memory_utilization")

    def max_concurrency(self, tokens_per_request: float) -> float:
        """Requests of ``tokens_per_request`` tokens the replica holds at once, each taking
        whole blocks (vLLM's ``Maximum concurrency``)."""
        if tokens_per_request <= 0:
            return 0.0
        per_request = math.ceil(tokens_per_request / self.block_size)
        return self.dp * self.blocks / per_request

    def startup_line(self) -> str:
        """The KV-cache line the engine prints at start-up, with this plan's numbers."""
        if self.rule == "sglang":
            return (
                f"max_total_num_tokens={self.rank_tokens}, mem_fraction_static={self.fraction:.3f}"
            )
        if self.rule == "tensorrt-llm":
            return (
                f"Allocated {self.kv_gib:.2f} GiB for max tokens in paged KV cache "
                f"({self.rank_tokens})"
            )
        concurrency = self.max_concurrency(self.max_model_len)
        return (
            f"GPU KV cache size: {self.rank_tokens:,} tokens; Maximum concurrency for "
            f"{self.max_model_len:,} tokens per request: {concurrency:.2f}x"
        )

    def breakdown_line(self) -> str:
        """Where each GPU's memory goes, GiB."""

        def gib(value: float) -> str:
            return f"{value / GiB:.2f}"

        return (
            f"per GPU {gib(self.total_bytes)} GiB, {self.fraction_flag} {self.fraction:.3f}: "
            f"weights {gib(self.weight_bytes)}, activations {gib(self.activation_bytes)}, "
            f"non-torch {gib(self.non_torch_bytes)}, CUDA graphs {gib(self.cuda_graph_bytes)}, "
            f"KV cache {gib(max(self.kv_bytes, 0.0))} GiB"
        )


# --------------------------------------------------------------------------- profiling run


def forward_activation_bytes(
    model: ModelShape, tokens: int, tp: int, element_bytes: float = ACTIVATION_BYTES
) -> float:
    """The largest set of activations one forward of ``tokens`` tokens holds at once on a GPU
    (attention skipped, as the profiling run does): the residual stream and the normalised
    input, and an MLP's gate/up output and activation — a dense layer's, or each token's
    routed experts' and the shared expert's in a mixture of experts."""
    if model.is_moe:
        routed = model.experts_per_token * model.expert_intermediate_size
        inner = routed + model.shared_expert_intermediate_size
        widest = max(inner, model.intermediate_size if model.num_dense_layers else 0)
    else:
        widest = model.intermediate_size
    per_token = 2 * model.hidden_size + 3 * widest / tp
    return tokens * per_token * element_bytes


def sampler_bytes(model: ModelShape, rows: int, bytes_per_logit: float) -> float:
    """The sampler's peak over ``rows`` rows of logits of the full vocabulary."""
    return rows * model.vocab_size * bytes_per_logit


def vllm_activation_bytes(rule: MemoryRule, x: MemoryInputs) -> float:
    """The profiling run's activation peak on the LM head's stage: the larger of the forward's
    and the sampler's (with the forward's last hidden states still held)."""
    tokens = x.max_batched_tokens
    rows = min(x.max_batch_size, tokens)
    element = activation_bytes(x.dtype)
    forward = forward_activation_bytes(x.model, tokens, x.tp, element)
    hidden = tokens * x.model.hidden_size * element
    sampler = hidden + sampler_bytes(x.model, rows, rule.sampler_bytes_per_logit)
    return max(forward, sampler)


# --------------------------------------------------------------------------- rules


def _weights(x: MemoryInputs) -> float:
    per_gpu = weight_bytes_per_gpu(x.model, x.dtype, x.tp, x.dp, x.pp)
    return per_gpu + x.extra_weight_bytes


PEER_LINK_BYTES_S = 100e9
"""A GPU whose peer bandwidth reaches this has NVLink (or Infinity Fabric): engines run their
own all-reduce over it, with its buffers; below it GPUs talk over PCIe and they do not."""


def comm_gib(rule: MemoryRule, x: MemoryInputs) -> float:
    """What the communicators add per GPU when the replica's GPUs talk to each other."""
    if x.group == 1:
        return 0.0
    if x.gpu.name in rule.gpu_comm_gib:
        return rule.gpu_comm_gib[x.gpu.name]
    return rule.comm_gib if x.gpu.nvlink_bandwidth >= PEER_LINK_BYTES_S else rule.pcie_comm_gib


def _non_torch(rule: MemoryRule, x: MemoryInputs) -> float:
    grown = rule.non_torch_gib + comm_gib(rule, x)
    return (grown + (rule.context_gib if rule.context_counted else 0.0)) * GiB


def _plan(
    rule: MemoryRule,
    x: MemoryInputs,
    fraction: float,
    total: float,
    budget: float,
    activations: float,
    non_torch: float,
    graphs: float,
    kv: float,
) -> MemoryPlan:
    per_token = kv_bytes_per_token_per_gpu(x.model, x.tp, x.kv_dtype, x.pp)
    return MemoryPlan(
        rule=rule.kind,
        fraction=fraction,
        total_bytes=total,
        budget_bytes=budget,
        weight_bytes=_weights(x),
        activation_bytes=activations,
        non_torch_bytes=non_torch,
        cuda_graph_bytes=graphs,
        kv_bytes=kv,
        kv_bytes_per_token=per_token + x.extra_kv_bytes_per_token,
        block_size=x.block_size,
        dp=x.dp,
        max_model_len=x.context_len,
    )


def default_fraction(rule: MemoryRule, x: MemoryInputs) -> float:
    """The memory flag the engine takes when its user sets none (SGLang's by its release's rule
    for this GPU and layout)."""
    if rule.fraction is not None:
        return rule.fraction
    if rule.kind == "sglang":
        return sglang_default_fraction(rule, x)
    return DEFAULT_FRACTION


def _vllm(rule: MemoryRule, x: MemoryInputs) -> MemoryPlan:
    """vLLM: total x utilisation, less weights, the profiling run's peak, non-torch growth and
    (where budgeted) CUDA graphs. V0 runs the same budget with its own sampler's bytes."""
    fraction = x.fraction or default_fraction(rule, x)
    total = x.gpu.cuda_total_bytes
    budget = total * fraction
    activations = vllm_activation_bytes(rule, x)
    non_torch = _non_torch(rule, x)
    graphs = rule.cuda_graph_gib * GiB if rule.cuda_graphs_in_budget else 0.0
    kv = budget - _weights(x) - activations - non_torch - graphs
    return _plan(rule, x, fraction, total, budget, activations, non_torch, graphs, kv)


def _sglang(rule: MemoryRule, x: MemoryInputs) -> MemoryPlan:
    """SGLang: ``mem_fraction_static`` of the memory free once the communicators are up, less
    the weights; activations and graphs live in the rest."""
    fraction = x.fraction or default_fraction(rule, x)
    total = x.gpu.cuda_total_bytes
    context = rule.context_gib + comm_gib(rule, x)
    free = total - context * GiB
    budget = free * fraction
    kv = budget - _weights(x)
    return _plan(rule, x, fraction, total, budget, 0.0, context * GiB, 0.0, kv)


def _tensorrt_llm(rule: MemoryRule, x: MemoryInputs) -> MemoryPlan:
    """TensorRT-LLM: ``free_gpu_memory_fraction`` of what its dry run of ``max_num_tokens``
    leaves free after weights, activations, CUDA graphs, communicators and the context."""
    fraction = x.fraction or default_fraction(rule, x)
    total = x.gpu.cuda_total_bytes
    activations = forward_activation_bytes(
        x.model, x.max_batched_tokens, x.tp, activation_bytes(x.dtype)
    )
    non_torch = (rule.context_gib + rule.non_torch_gib + comm_gib(rule, x)) * GiB
    graphs = rule.cuda_graph_gib * GiB
    free = total - _weights(x) - activations - non_torch - graphs
    kv = fraction * free if free > 0 else free
    return _plan(rule, x, fraction, total, kv, activations, non_torch, graphs, kv)


def _flat(rule: MemoryRule, x: MemoryInputs) -> MemoryPlan:
    """A fraction of the GPU's memory less the weights and a flat reserve."""
    fraction = x.fraction or default_fraction(rule, x)
    budget = x.gpu.memory_bytes * fraction
    reserve = rule.reserve_gib * GiB
    kv = budget - _weights(x) - reserve
    return _plan(rule, x, fraction, x.gpu.memory_bytes, budget, reserve, 0.0, 0.0, kv)


def plan_memory(rule: MemoryRule, inputs: MemoryInputs) -> MemoryPlan:
    """The replica's memory under ``rule``."""
    if rule.kind in ("vllm", "vllm-v0"):
        return _vllm(rule, inputs)
    if rule.kind == "sglang":
        return _sglang(rule, inputs)
    if rule.kind == "tensorrt-llm":
        return _tensorrt_llm(rule, inputs)
    return _flat(rule, inputs)


# --------------------------------------------------------------------------- SGLang's fraction


def sglang_default_fraction(rule: MemoryRule, x: MemoryInputs) -> float:
    """SGLang's default ``mem_fraction_static`` for this GPU and layout, by the release's rule
    (``sglang/srt/server_args.py``; ``nvidia-smi``'s capacity in MiB)."""
    gpu_mem = x.gpu.smi_mib
    parallel = x.tp * x.pp
    kind = rule.fraction_rule or "reserve-by-budget"
    if kind == "tp":
        return _by_parallel_size(x.tp)
    if kind == "tp-pp":
        fraction = _by_parallel_size(parallel) if gpu_mem <= 81920 else 0.88
        if gpu_mem > 96 * 1024:
            fraction = min(
                fraction + 48 * 1024 * (1 - fraction) / gpu_mem, (gpu_mem - 18 * 1024) / gpu_mem
            )
        return fraction
    if kind == "reserve-by-memory":
        reserved = _reserve_by_memory(gpu_mem, parallel)
        reserved += (2 * 1024 if x.speculative else 0) + (4 * 1024 if x.dp > 1 else 0)
    else:
        reserved = _reserve_by_budget(rule, x, gpu_mem)
    return round((gpu_mem - reserved) / gpu_mem, 3)


def _by_parallel_size(size: int) -> float:
    """SGLang 0.4.0-0.4.7: a fixed fraction by tensor (and pipeline) parallel size."""
    for at_least, fraction in ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87)):
        if size >= at_least:
            return fraction
    return 0.88


def _reserve_by_memory(gpu_mem: float, parallel: int) -> float:
    """SGLang 0.4.8-0.5.2: MiB kept out of the static pool, by the GPU's memory."""
    if gpu_mem < 35 * 1024:
        return (2.8 + parallel / 10) * 1024
    if gpu_mem < 90 * 1024:
        return (9.5 + parallel / 2) * 1024
    if gpu_mem < 160 * 1024:
        return (12 + parallel / 2) * 1024
    return 32 * 1024


def sglang_cuda_graph_max_bs(gpu_mem: float, tp: int) -> int:
    """SGLang 0.5.3 and later: the largest batch it captures a CUDA graph for, by memory."""
    small_tp = tp < 4
    if gpu_mem < 20 * 1024:
        return 8
    if gpu_mem < 35 * 1024:
        return 24 if small_tp else 80
    if gpu_mem < 60 * 1024:
        return 32 if small_tp else 160
    if gpu_mem < 160 * 1024:
        return 256 if small_tp else 512
    return 512


PIECEWISE_GRAPH_SIZES = 58  # SGLang's piecewise CUDA-graph token sizes up to a budget of 8192


def _reserve_by_budget(rule: MemoryRule, x: MemoryInputs, gpu_mem: float) -> float:
    """SGLang 0.5.3 and later: MiB kept out of the static pool for the prefill chunk's
    activations, the decode CUDA graphs, the communicators and (0.5.12) piecewise graphs."""
    graphs_bs = sglang_cuda_graph_max_bs(gpu_mem, x.tp)
    reserved = 512 + max(x.max_batched_tokens, 2048) * 1.5 + graphs_bs * 2
    reserved += x.tp * x.pp / 8 * 1024
    if x.dp > 1:
        reserved += graphs_bs * x.dp * 3 + (graphs_bs * x.dp * 1.5 if graphs_bs > 300 else 0)
    if rule.fraction_rule == "reserve-by-budget-piecewise":
        reserved += 1.5 * 1024 if x.model.is_mla else PIECEWISE_GRAPH_SIZES * 8
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if x.speculative:
        reserved += 2 * 1024
    return reserved


def memory_figures(plan: MemoryPlan, request_tokens: float) -> dict[str, float | int]:
    """The summary's memory figures of one replica: its KV cache in tokens (every rank's) and
    GiB per GPU, and the requests of ``request_tokens`` tokens it holds at once."""
    return {
        "kv_cache_tokens": plan.tokens,
        "kv_cache_gib": round(plan.kv_gib, 4),
        "max_concurrency": round(plan.max_concurrency(request_tokens), 3),
    }
