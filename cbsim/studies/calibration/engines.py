"""What each serving engine does by default, as its documentation and launch code say.

These are facts about the engines, not fitted numbers: the scheduler each runs, its token budget
and batch cap (which depend on the GPU's memory), the KV block size, the KV-cache precision it
keeps for an fp8 checkpoint and how much GPU memory it takes. ``cbsim calibrate e2e`` writes them
into the engine profiles it fits, and the fit simulates each measured benchmark with them, so the
fitted overhead is the overhead *under these defaults*.

* **vLLM** (V1 engine, 0.8 and later): chunked prefill always on; each step schedules the running
  requests first (decodes, then the next chunk of partial prefills) and admits waiting prompts with
  what is left of ``max_num_batched_tokens`` — cbsim's ``sarathi`` scheduler with that budget
  (``max_batched_tokens``). On GPUs with at least 70 GiB (not the A100) the server defaults are 8192
  batched tokens and 1024 sequences, else 2048 and 256. Paged KV in blocks of 16;
  ``gpu_memory_utilization`` 0.9 of all memory; ``kv_cache_dtype=auto`` keeps the activations'
  precision (bf16) for fp8 weights. Automatic prefix caching on (V1's default).
* **vLLM V0** (``vllm-v0``; the engine of 0.6 and earlier, still selectable until 0.10): one
  synchronous loop — schedule, prepare every sequence's inputs and sampling metadata in Python,
  run the model, sample, detokenise — so its CPU time per step (a constant plus a cost per
  running sequence) adds to the kernels instead of hiding behind them. Prefills first without
  chunking (cbsim's ``prefill_first`` scheduler) within ``max_num_batched_tokens`` (8192 for 8k-context
  models), 256 sequences, blocks of 16, 0.9 of memory; prefix caching off by default.
* **SGLang** (0.4-0.5): a new prefill batch takes priority over decoding (prefill-first, no mixed
  batches by default) within ``chunked_prefill_size`` tokens (8192 on 80-141 GiB GPUs, 16384 on
  larger ones, 4096 on 48 GiB ones; a longer prompt is chunked) — cbsim's ``prefill_first`` scheduler with
  that budget. A token-granular radix KV cache (page size 1), ``mem_fraction_static`` about 0.87
  of all memory, running requests limited only by KV capacity, bf16 KV for fp8 weights; the radix
  cache reuses prompt prefixes (on unless ``--disable-radix-cache``).
* **TensorRT-LLM** (PyTorch backend, 1.0 and later, ``trtllm-serve``): in-flight batching mixes
  whole context (prefill) requests with generation steps within ``max_num_tokens`` 8192 and
  ``max_batch_size`` 2048, and the default ``GUARANTEED_NO_EVICT`` capacity policy admits a
  request only when its whole length fits — cbsim's ``orca`` scheduler. Chunked context is taken
  as on (``chunked_prefill``): without it an 8,192-token prompt never fits beside running
  generation steps in the 8,192-token budget and long-prompt benchmarks would run one request at
  a time, which no measured deployment shows. KV blocks
  of 32 tokens; ``free_gpu_memory_fraction`` 0.9 of what is free after weights and activations;
  NVIDIA's fp8 checkpoints quantise the KV cache to fp8 too. KV block reuse
  (``enable_block_reuse``) on by default.

All three fuse each residual add into the RMSNorm that follows it and the SwiGLU activation into
one kernel. All three overlap the CPU side of a step with the GPU's work on the previous one — vLLM's async
scheduling (on by default since the end of 2025), SGLang's overlap scheduler, TensorRT-LLM's
overlap scheduler — so their CPU time per step hides behind the kernels until it exceeds them:
the fit learns how much CPU time there is, not whether it overlaps. The same overlap means the
batch of the next step is formed while the current one runs, so a request reaching a busy engine
joins the step after next (``scheduler.async_scheduling``). The shipped profiles leave that off:
on the H100 closed-loop benchmarks they are fitted to, turning it on doubles vLLM's held-out TTFT
error (42.6% to 82.6% median; TPOT 11.4% to 12.4%), because cbsim's fixed-length closed loops
stay in lockstep where the measured clients evidently did not, and the extra step lands on top
of that; per-request data of an engine that schedules asynchronously would settle it.
"""

from __future__ import annotations

from cbsim.cost.engine_profile import (
    EngineDefaults,
    EngineProfile,
    KernelTransfer,
    SchedulerDefaults,
    StepOverhead,
)
from cbsim.studies.calibration.custom_allreduce import engine_model
from cbsim.studies.calibration.engine_releases import MEMORY_RULES, RELEASES

LARGE_MEMORY_GPUS = ("h100-sxm", "h200", "b200", "mi300x")

ENGINE_DEFAULTS: dict[str, EngineDefaults] = {
    "vllm": EngineDefaults(
        scheduler=SchedulerDefaults(
            kind="sarathi",
            max_batched_tokens=2048,
            max_batch_size=256,
            block_size=16,
        ),
        memory_fraction=0.9,
        memory_basis="total",
        prefix_caching=True,
    ),
    "vllm-v0": EngineDefaults(
        scheduler=SchedulerDefaults(
            kind="prefill_first", max_batched_tokens=8192, max_batch_size=256, block_size=16
        ),
        memory_fraction=0.9,
        memory_basis="total",
        prefix_caching=False,
    ),
    "sglang": EngineDefaults(
        scheduler=SchedulerDefaults(
            kind="prefill_first",
            max_batched_tokens=8192,
            max_batch_size=4096,
            block_size=1,
        ),
        memory_fraction=0.87,
        memory_basis="total",
        prefix_caching=True,
    ),
    "tensorrt-llm": EngineDefaults(
        scheduler=SchedulerDefaults(
            kind="orca",
            max_batched_tokens=8192,
            max_batch_size=2048,
            block_size=32,
            chunked_prefill=True,
        ),
        kv_dtype={"fp8": "fp8"},
        memory_fraction=0.9,
        memory_basis="free",
        prefix_caching=True,
    ),
}

GPU_DEFAULTS: dict[str, dict[str, EngineDefaults]] = {
    "vllm": {
        gpu: EngineDefaults(
            scheduler=SchedulerDefaults(max_batched_tokens=8192, max_batch_size=1024)
        )
        for gpu in LARGE_MEMORY_GPUS
    },
    "sglang": {
        "l40s": EngineDefaults(scheduler=SchedulerDefaults(max_batched_tokens=4096)),
        "b200": EngineDefaults(scheduler=SchedulerDefaults(max_batched_tokens=16384)),
        "mi300x": EngineDefaults(scheduler=SchedulerDefaults(max_batched_tokens=16384)),
    },
}

# Each engine's own kernel tables, where the shipped measurements have them (H100 and B200 with
# its MoE kernels; H200 without: its MoE layers take the engine's H100 fit on H200's spec sheet);
# on other GPUs its kernels are the GPU's default (vLLM-measured) profile scaled by the
# engine/vLLM ratio on H100, except the routed experts, which stay vLLM's (the ratio did not
# predict B200's engine MoE kernels better than B200's vLLM fit: cbsim.studies.calibration.kernel_sources).
ENGINE_KERNELS: dict[str, dict[str, str]] = {
    "sglang": {
        "h100-sxm": "aiconfigurator-sglang",
        "h200": "aiconfigurator-sglang",
        "b200": "aiconfigurator-sglang",
    },
    "tensorrt-llm": {
        "h100-sxm": "aiconfigurator-trtllm",
        "h200": "aiconfigurator-trtllm",
        "b200": "aiconfigurator-trtllm",
    },
}

OVERLAPPING_ENGINES = ("vllm", "sglang", "tensorrt-llm")

# vLLM runs small all-reduces with its own one-shot/two-shot custom kernel (8 MB and below); it
# was not measured, but SGLang's custom all-reduce is the same kernel lineage and was: it stands
# in on the GPUs where it exists (NCCL, vLLM's other path, covers the larger messages in both).
# On A100 and B200, where no engine's own all-reduce was measured, every engine's is priced from
# its mechanism fitted on H100 (``custom_allreduce``: cbsim.studies.calibration.custom_allreduce).
ALLREDUCE_STAND_INS: dict[str, dict[str, str]] = {
    "vllm": {"h100-sxm": "aiconfigurator-sglang", "h200": "aiconfigurator-sglang"},
    "vllm-v0": {"h100-sxm": "aiconfigurator-sglang", "h200": "aiconfigurator-sglang"},
}

VERSIONS = {
    "vllm": "V1 engine (0.8+); fitted on 0.11-0.18 benchmarks",
    "vllm-v0": "V0 engine (0.6 and earlier, 2024); fitted on LLM-Inference-Bench's A100 batches",
    "sglang": "0.5; fitted on 0.5.1-0.5.8 benchmarks",
    "tensorrt-llm": "PyTorch backend (1.0+); fitted on 1.0-1.2 benchmarks",
}


def base_profile(engine: str) -> EngineProfile:
    """An engine's kernels per GPU and its defaults, before any overhead is fitted."""
    return EngineProfile(
        engine=engine,
        version=VERSIONS.get(engine, ""),
        overhead=StepOverhead(overlap=engine in OVERLAPPING_ENGINES),
        fused_elementwise=True,
        allreduce=ALLREDUCE_STAND_INS.get(engine, {}),
        custom_allreduce=engine_model(engine),
        kernel_transfer=(
            KernelTransfer(gpu="h100-sxm", profile=ENGINE_KERNELS[engine]["h100-sxm"])
            if engine in ENGINE_KERNELS
            else None
        ),
        kernels=ENGINE_KERNELS.get(engine, {}),
        defaults=ENGINE_DEFAULTS[engine],
        gpu_defaults=GPU_DEFAULTS.get(engine, {}),
        memory=MEMORY_RULES[engine],
        versions=RELEASES.get(engine, []),
    )
