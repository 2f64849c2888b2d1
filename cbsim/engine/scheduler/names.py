"""What each scheduler kind is called by the engines that run it.

cbsim names its schedulers for what they do (``sarathi``: chunked prefill with decodes first;
``prefill_first``: whole prompts before decodes; ``orca``: iteration-level batching with
full-length KV reserved; ``static``: request-level batches); an engine's user knows them by the
engine's name for them. vLLM V1 runs ``sarathi`` (its one scheduler since 0.8, chunked prefill
always on); vLLM V0 ran ``prefill_first``, and so does SGLang (a new prefill batch before
decoding); TensorRT-LLM's in-flight batching with ``GUARANTEED_NO_EVICT`` is ``orca``. The run's
description line gives both names, and says when a scenario runs a scheduler its engine does not.
"""

from __future__ import annotations

KIND_DESCRIPTIONS: dict[str, str] = {
    "sarathi": "chunked prefill, decodes first, as vLLM V1 schedules",
    "prefill_first": "whole prompts before decodes, as vLLM V0 and SGLang schedule",
    "orca": "iteration-level batching with full-length KV reserved, as TensorRT-LLM schedules",
    "static": "request-level batching: a batch runs until all its requests finish",
}
"""What a kind does, with the engines that schedule so."""

ENGINE_SCHEDULERS: dict[tuple[str, str], str] = {
    ("vllm", "sarathi"): "vLLM V1's scheduler: chunked prefill, decodes first",
    ("vllm-v0", "prefill_first"): "vLLM V0's scheduler: prefills first",
    ("sglang", "prefill_first"): "SGLang's scheduler: a new prefill batch before decoding",
    ("tensorrt-llm", "orca"): "TensorRT-LLM's in-flight batching, GUARANTEED_NO_EVICT",
}
"""The engine's own name for its scheduler, by (engine, cbsim kind)."""


def scheduler_label(kind: str, engine: str, engine_kind: str | None) -> str:
    """How a run names its scheduler: cbsim's ``kind`` and what ``engine`` calls it, or what the
    kind does and that it is not the engine's own (``engine_kind``; None: the engine has no
    scheduler of its own, a bare roofline or a profile without defaults)."""
    own = ENGINE_SCHEDULERS.get((engine, kind))
    if own is not None:
        return f"{kind} ({own})"
    text = f"{kind} ({KIND_DESCRIPTIONS.get(kind, kind)}"
    if engine_kind is not None and engine_kind != kind:
        text += f"; not {engine}'s own, {engine_kind}"
    return text + ")"
