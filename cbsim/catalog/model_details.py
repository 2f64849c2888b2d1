"""One model in full: its shape, its parameters and its weights in each format, as
``cbsim catalog MODEL`` shows them.

The weights a checkpoint puts on the GPUs depend on how it stores them
(:func:`checkpoint_weight_bytes`): a bf16 checkpoint two bytes a parameter; an fp8 (or int8)
checkpoint one byte for the decoder layers' linear weights and two for the embedding, the LM
head, norms, biases, routers and a vision encoder, which such checkpoints keep in 16 bits (their
per-channel or per-block scales, under 0.1%, are not counted); NVFP4 (``fp4``) the same split at
4.5 bits; ``int4`` (AWQ, GPTQ, w4a16) the same split at 4.16 bits, its group scales and zero
points included (:mod:`cbsim.catalog.quantization`); MXFP4 (gpt-oss) only the routed experts in 4.25
bits. Per GPU of a tensor-parallel
group (:func:`weight_bytes_per_gpu`) every weight is split, the embedding and LM head by
vocabulary as vLLM's vocab-parallel layers do, except the key and value projections of a model
with fewer KV heads than GPUs, which each GPU holds for its whole KV head. The engine's rotary
cos/sin table (:func:`rope_cache_bytes`) is not a weight, but vLLM counts it in "Model loading
took": it is shown apart.
"""

from __future__ import annotations

from cbsim.catalog.model_bytes import DTYPE_BYTES, EXPERT_ONLY_DTYPES
from cbsim.catalog.model_shape import ModelShape
from cbsim.catalog.models import CatalogMatch

GIB = 2**30
WEIGHT_FORMATS = ("fp32", "bf16", "fp8", "int8", "int4", "fp4", "mxfp4")
"""The formats ``cbsim catalog MODEL`` shows weights in (mxfp4 for mixtures of experts only,
fp32 for the models fp32 is modelled for)."""


def _linear_bytes(dtype: str) -> float:
    """Bytes per weight of the linear layers (other than routed experts) in ``dtype``."""
    if dtype in EXPERT_ONLY_DTYPES:
        return DTYPE_BYTES["bf16"]
    return DTYPE_BYTES[dtype]


def routed_expert_params(model: ModelShape) -> int:
    """Weights of every routed expert of every MoE layer."""
    return model.num_moe_layers * model.num_experts * model.expert_param_count()


def checkpoint_weight_bytes(model: ModelShape, dtype: str) -> float:
    """Bytes of all of ``model``'s weights as a ``dtype`` checkpoint stores them (see the
    module's description)."""
    total = model.param_count()
    if dtype in EXPERT_ONLY_DTYPES:
        experts = routed_expert_params(model)
        return experts * DTYPE_BYTES[dtype] + (total - experts) * DTYPE_BYTES["bf16"]
    size = _linear_bytes(dtype)
    if size >= DTYPE_BYTES["bf16"]:
        return total * size
    linear = model.linear_param_count()
    return linear * size + (total - linear) * DTYPE_BYTES["bf16"]


def weight_bytes_per_gpu(model: ModelShape, dtype: str, tp: int = 1) -> float:
    """Bytes of weights each of ``tp`` tensor-parallel GPUs holds: a 1/tp share of everything,
    the key and value projections of each KV head whole on every GPU that serves it when
    there are fewer KV heads than GPUs (see the module's description)."""
    total = checkpoint_weight_bytes(model, dtype)
    if model.is_mla or tp <= model.num_kv_heads:
        return total / tp
    per_head = 2 * model.num_layers * model.hidden_size * model.head_dim
    if model.qkv_bias:
        per_head += 2 * model.num_layers * model.head_dim
    size = _linear_bytes(dtype)
    kv_bytes = per_head * model.num_kv_heads * size
    return (total - kv_bytes) / tp + per_head * size


def rope_cache_bytes(model: ModelShape) -> float:
    """vLLM's rotary cos/sin table: ``max_position_embeddings`` rows of one head's rotary
    width in bf16, shared by the layers (an engine buffer, not a weight)."""
    rotary = model.qk_rope_head_dim if model.is_mla else model.head_dim
    return model.max_position_embeddings * rotary * DTYPE_BYTES["bf16"]


def _formats(model: ModelShape) -> tuple[str, ...]:
    """mxfp4 for a mixture of experts only; fp32 for the models it runs (dense, no MLA)."""
    fp32 = not (model.is_moe or model.is_mla)
    return tuple(
        f for f in WEIGHT_FORMATS if (f != "mxfp4" or model.is_moe) and (f != "fp32" or fp32)
    )


def _count(n: float) -> str:
    return f"{n / 1e12:.3f}T" if n >= 1e12 else f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def shape_lines(model: ModelShape) -> list[str]:
    """The shape, a fact a line."""
    lines = [
        f"layers {model.num_layers}, hidden {model.hidden_size:,}, MLP {model.intermediate_size:,}, "
        f"vocabulary {model.vocab_size:,}{' (tied)' if model.tie_word_embeddings else ''}",
    ]
    if model.is_mla:
        q = f"q rank {model.q_lora_rank}" if model.q_lora_rank else "no q rank"
        lines.append(
            f"attention: {model.num_heads} heads, latent (MLA): kv rank {model.kv_lora_rank}, "
            f"{q}, rope {model.qk_rope_head_dim}, nope {model.qk_nope_head_dim}, "
            f"value {model.v_head_dim}"
        )
    else:
        extras = [
            name
            for name, on in (
                ("q/k/v bias", model.qkv_bias),
                ("o bias", model.o_bias),
                ("q/k norm", model.qk_norm),
                ("sinks", model.attention_sinks),
            )
            if on
        ]
        lines.append(
            f"attention: {model.num_heads} query / {model.num_kv_heads} KV heads of "
            f"{model.head_dim}" + (f" ({', '.join(extras)})" if extras else "")
        )
    if model.sliding_window:
        lines.append(
            f"local attention: {model.sliding_window_layers} of {model.num_layers} layers within "
            f"{model.sliding_window:,} tokens"
        )
    if model.is_moe:
        shared = (
            f", shared {model.shared_expert_intermediate_size:,}"
            if model.shared_expert_intermediate_size
            else ""
        )
        lines.append(
            f"experts: {model.num_experts} of {model.expert_intermediate_size:,}, "
            f"{model.experts_per_token} per token{shared}; {model.num_moe_layers} MoE layers, "
            f"{model.num_dense_layers} dense"
        )
    if model.mtp_layers:
        lines.append(f"multi-token prediction: {model.mtp_layers} layer(s), not counted")
    lines.append(f"context: {model.max_position_embeddings:,} tokens")
    return lines


def render(match: CatalogMatch, tp: int = 1) -> str:
    """What ``cbsim catalog MODEL`` prints for a catalog match."""
    entry, model = match.entry, match.shape
    head = f"{entry.name}" + (f" ({match.repo})" if match.repo else "")
    lines = [head, *(f"  {line}" for line in shape_lines(model))]
    params = f"  parameters: {_count(model.param_count())}"
    if model.multimodal_params:
        params += f" ({_count(model.multimodal_params)} of them the vision encoder)"
    if model.is_moe:
        params += f"; {_count(model.active_param_count())} read per token"
    lines.append(params)
    if entry.card:
        lines.append(f"  stated: {entry.card} ({entry.card_source})")
    local = " (every layer's, local ones in full)" if model.sliding_window else ""
    lines.append(
        f"  KV cache: {model.kv_bytes_per_token(2) / 1024:,.0f} KiB per token in bf16{local}"
    )
    lines.append(f"  weights ({'per GPU at tp ' + str(tp) if tp > 1 else 'one GPU'}):")
    for dtype in _formats(model):
        size = weight_bytes_per_gpu(model, dtype, tp) / GIB
        lines.append(f"    {dtype:<6} {size:10,.2f} GiB")
    lines.append(
        f"    (+ {rope_cache_bytes(model) / GIB:.3f} GiB rotary table vLLM counts in its load)"
    )
    lines.append(f"  checkpoint format: {match.checkpoint_dtype}")
    repos = [
        f"    {r}" + (" (fp8)" if r in entry.fp8_repos else "")
        for r in (*entry.repos, *entry.fp8_repos)
    ]
    if repos:
        lines.append("  Hugging Face ids:")
        lines.extend(repos)
        lines.append(
            "  quantized checkpoints: an id or name above with -AWQ, -GPTQ-Int4 or "
            "-quantized.w4a16 (int4), or -quantized.w8a8 (int8)"
        )
    if entry.aliases:
        lines.append(f"  aliases: {', '.join(entry.aliases)}")
    if entry.note:
        lines.append(f"  note: {entry.note}")
    return "\n".join(lines)
