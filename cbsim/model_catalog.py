"""The model catalog (a data table): the shipped models' shapes, by name.

Each entry holds the exact values of the Hugging Face ``config.json`` of its checkpoint; dense
Llama-family models are written through :func:`_llama`, the others as full
:class:`~cbsim.model_shape.ModelShape` values. :data:`MODEL_NAMES` lists them in catalog order.
"""

from __future__ import annotations

from dataclasses import replace

from cbsim.model_shape import ModelShape


def _llama(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    inter: int,
    vocab: int,
    *,
    max_pos: int,
    tied: bool = False,
    head_dim: int | None = None,
    qkv_bias: bool = False,
    qk_norm: bool = False,
) -> ModelShape:
    return ModelShape(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim if head_dim is not None else hidden // heads,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        max_position_embeddings=max_pos,
        qkv_bias=qkv_bias,
        qk_norm=qk_norm,
    )


# Values from each checkpoint's Hugging Face config.json (repository in the comment).
_CATALOG: dict[str, ModelShape] = {
    m.name: m
    for m in (
        # meta-llama/Llama-2-{7b,13b,70b}-hf
        _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, max_pos=4096),
        _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, max_pos=4096),
        _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, max_pos=4096),
        # meta-llama/Meta-Llama-3-{8B,70B}
        _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, max_pos=8192),
        _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, max_pos=8192),
        # meta-llama/Llama-3.1-{8B,70B} (same shapes, 128k context)
        _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, max_pos=131072),
        _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, max_pos=131072),
        # meta-llama/Llama-3.2-1B
        _llama(
            "llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, max_pos=131072, tied=True, head_dim=64
        ),
        # mistralai/Mistral-7B-v0.1
        _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, max_pos=32768),
        # Qwen/Qwen2.5-{7B,72B}
        _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, max_pos=131072, qkv_bias=True),
        _llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, max_pos=131072, qkv_bias=True),
        # Qwen/Qwen3-32B (explicit head_dim 128 > hidden/heads; per-head q/k RMSNorm)
        _llama(
            "qwen3-32b", 64, 5120, 64, 8, 25600, 151936, max_pos=40960, head_dim=128, qk_norm=True
        ),
        # mistralai/Mixtral-8x7B-v0.1: 8 experts, 2 per token, every layer
        replace(
            _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, max_pos=32768),
            num_experts=8,
            experts_per_token=2,
            expert_intermediate_size=14336,
        ),
        # Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B: 128 experts, 8 per token, no shared one
        replace(
            _llama(
                "qwen3-30b-a3b",
                48,
                2048,
                32,
                4,
                6144,
                151936,
                max_pos=40960,
                head_dim=128,
                qk_norm=True,
            ),
            num_experts=128,
            experts_per_token=8,
            expert_intermediate_size=768,
        ),
        replace(
            _llama(
                "qwen3-235b-a22b",
                94,
                4096,
                64,
                4,
                12288,
                151936,
                max_pos=40960,
                head_dim=128,
                qk_norm=True,
            ),
            num_experts=128,
            experts_per_token=8,
            expert_intermediate_size=1536,
        ),
        # deepseek-ai/DeepSeek-V3: MLA, 3 dense layers then 58 MoE layers of 256 routed experts
        # (8 per token) and one shared; the multi-token-prediction module is not counted
        replace(
            _llama("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, max_pos=163840, head_dim=192),
            num_experts=256,
            experts_per_token=8,
            expert_intermediate_size=2048,
            shared_expert_intermediate_size=2048,
            dense_layers=3,
            router_bias=True,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            mtp_layers=1,
        ),
        # openai/gpt-oss-120b: 128 experts (4 per token) with biases, alternating 128-token
        # sliding-window and full attention, attention sinks and biases
        replace(
            _llama(
                "gpt-oss-120b",
                36,
                2880,
                64,
                8,
                2880,
                201088,
                max_pos=131072,
                head_dim=64,
                qkv_bias=True,
            ),
            num_experts=128,
            experts_per_token=4,
            expert_intermediate_size=2880,
            expert_bias=True,
            router_bias=True,
            sliding_window=128,
            sliding_window_layers=18,
            attention_sinks=True,
            o_bias=True,
        ),
        # meta-llama/Llama-4-Scout-17B-16E (text model): 16 experts, 1 per token, one shared
        # expert, every layer; 3 of 4 layers attend within 8,192-token chunks
        replace(
            _llama("llama-4-scout", 48, 5120, 40, 8, 16384, 202048, max_pos=10485760, head_dim=128),
            num_experts=16,
            experts_per_token=1,
            expert_intermediate_size=8192,
            shared_expert_intermediate_size=8192,
            sliding_window=8192,
            sliding_window_layers=36,
        ),
    )
}

MODEL_NAMES: tuple[str, ...] = tuple(_CATALOG)
