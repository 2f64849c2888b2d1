"""Mixture-of-experts and latent-attention model shapes: read from the checkpoints' own
``config.json`` values, parameter counts against the published totals, the MLA KV cache, and
the refusal to simulate what the cost model cannot price yet."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from cbsim.catalog.model_bytes import kv_bytes_per_token_per_gpu
from cbsim.catalog.models import get_model, model_from_hf_config
from cbsim.common.errors import CbsimError
from tests.conftest import small_scenario

# The keys that matter of each checkpoint's Hugging Face config.json.
CONFIGS: dict[str, dict[str, Any]] = {
    "mixtral-8x7b": {  # mistralai/Mixtral-8x7B-v0.1
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "num_attention_heads": 32,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "vocab_size": 32000,
    },
    "qwen3-30b-a3b": {  # Qwen/Qwen3-30B-A3B
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "decoder_sparse_step": 1,
        "head_dim": 128,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "max_position_embeddings": 40960,
        "mlp_only_layers": [],
        "moe_intermediate_size": 768,
        "num_attention_heads": 32,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 48,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
    },
    "qwen3-235b-a22b": {  # Qwen/Qwen3-235B-A22B
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "decoder_sparse_step": 1,
        "head_dim": 128,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "max_position_embeddings": 40960,
        "mlp_only_layers": [],
        "moe_intermediate_size": 1536,
        "num_attention_heads": 64,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 94,
        "num_key_value_heads": 4,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
    },
    "deepseek-v3": {  # deepseek-ai/DeepSeek-V3
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "first_k_dense_replace": 3,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_attention_heads": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 61,
        "num_key_value_heads": 128,
        "num_nextn_predict_layers": 1,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "tie_word_embeddings": False,
        "topk_method": "noaux_tc",
        "v_head_dim": 128,
        "vocab_size": 129280,
    },
    "gpt-oss-120b": {  # openai/gpt-oss-120b
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": True,
        "head_dim": 64,
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
        "max_position_embeddings": 131072,
        "num_attention_heads": 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "num_local_experts": 128,
        "sliding_window": 128,
        "tie_word_embeddings": False,
        "vocab_size": 201088,
    },
    "llama-4-scout": {  # meta-llama/Llama-4-Scout-17B-16E (the text model of a multimodal one)
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "llama4_text",
            "attention_chunk_size": 8192,
            "head_dim": 128,
            "hidden_size": 5120,
            "interleave_moe_layer_step": 1,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "max_position_embeddings": 10485760,
            "num_attention_heads": 40,
            "num_experts_per_tok": 1,
            "num_hidden_layers": 48,
            "num_key_value_heads": 8,
            "num_local_experts": 16,
            "use_qk_norm": True,
            "vocab_size": 202048,
        },
    },
}

# Published totals (model cards); Llama 4 Scout's 109B counts its vision encoder, not read here.
PUBLISHED_TOTAL = {
    "mixtral-8x7b": 46.7e9,
    "qwen3-30b-a3b": 30.5e9,
    "qwen3-235b-a22b": 235e9,
    "deepseek-v3": 671e9,
    "gpt-oss-120b": 116.8e9,
}
# Published active parameters, and whether that figure counts the embedding table (gpt-oss's
# card counts the unembedding only, as active_param_count does).
PUBLISHED_ACTIVE = {
    "mixtral-8x7b": (12.9e9, True),
    "qwen3-30b-a3b": (3.3e9, True),
    "qwen3-235b-a22b": (22e9, True),
    "deepseek-v3": (37e9, True),
    "gpt-oss-120b": (5.1e9, False),
    "llama-4-scout": (17e9, True),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_config_reads_as_the_catalog_entry(name: str) -> None:
    shape = model_from_hf_config(CONFIGS[name], name)
    assert shape == get_model(name)


@pytest.mark.parametrize(("name", "published"), PUBLISHED_TOTAL.items())
def test_param_count_within_1pct_of_published(name: str, published: float) -> None:
    assert get_model(name).param_count() == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize(("name", "published"), PUBLISHED_ACTIVE.items())
def test_active_params_match_published(name: str, published: tuple[float, bool]) -> None:
    model = get_model(name)
    count, with_embedding = published
    active = model.active_param_count()
    if with_embedding:
        active += model.embedding_param_count()
    assert active == pytest.approx(count, rel=0.025)


def test_deepseek_v3_caches_one_latent_and_rope_key_per_layer() -> None:
    model = get_model("deepseek-v3")
    assert model.kv_elements_per_token() == 61 * (512 + 64)
    assert model.kv_bytes_per_token(2) == 61 * 576 * 2
    # every tensor-parallel rank keeps the whole latent: the cache per GPU does not shrink
    assert kv_bytes_per_token_per_gpu(model, 8, "bf16") == 61 * 576 * 2
    assert model.num_moe_layers == 58 and model.num_dense_layers == 3


def test_mla_attention_parameters_by_hand() -> None:
    m = get_model("deepseek-v3")
    q = 7168 * 1536 + 1536 + 1536 * 128 * 192
    kv = 7168 * 576 + 512 + 512 * 128 * 256
    assert m.attention_param_count() == q + kv + 128 * 128 * 7168


def test_gpt_oss_biases_sinks_and_windows() -> None:
    m = get_model("gpt-oss-120b")
    assert m.sliding_window == 128 and m.sliding_window_layers == 18
    plain = dataclasses.replace(
        m, qkv_bias=False, o_bias=False, attention_sinks=False, expert_bias=False, router_bias=False
    )
    per_layer = (4096 + 2 * 512) + 2880 + 64 + 128 * (2 * 2880 + 2880) + 128
    assert m.param_count() - plain.param_count() == 36 * per_layer


def test_interleaved_moe_layers_and_their_check() -> None:
    text = dict(CONFIGS["llama-4-scout"]["text_config"])
    text |= {"interleave_moe_layer_step": 2, "moe_layers": list(range(1, 48, 2))}
    shape = model_from_hf_config(text, "maverick-like")
    assert shape.num_moe_layers == 24 and shape.num_dense_layers == 24
    with pytest.raises(CbsimError, match="MoE layers other than every 2th") as info:
        model_from_hf_config({**text, "moe_layers": [0, 5]}, "odd")
    assert info.value.field == "moe_layers"


def test_dense_models_have_no_moe_and_read_every_parameter_but_the_embedding() -> None:
    m = get_model("llama-3.1-8b")
    assert not m.is_moe and not m.is_mla and m.num_moe_layers == 0
    assert m.active_param_count() == m.param_count() - m.embedding_param_count()


@pytest.mark.parametrize("name", CONFIGS)
def test_every_moe_model_loads_in_a_scenario(name: str) -> None:
    from cbsim.run.loading import load_scenario

    tp = 8 if get_model(name).param_count() > 60e9 else 4
    data = small_scenario({"cluster.model": name, "cluster.tp": tp, "cluster.dtype": "fp8"})
    data["cluster"]["gpu"] = "h200"
    assert load_scenario(data).cluster.model == name


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"num_experts_per_tok": 0}, "num_experts_per_tok"),
        ({"num_experts_per_tok": 16}, "num_experts_per_tok"),
        ({"num_local_experts": 10**9}, "num_local_experts"),
        ({"num_experts_per_tok": None}, "num_experts_per_tok"),
    ],
)
def test_bad_expert_settings_name_the_key(changes: dict[str, Any], key: str) -> None:
    config = {k: v for k, v in {**CONFIGS["mixtral-8x7b"], **changes}.items() if v is not None}
    with pytest.raises(CbsimError) as info:
        model_from_hf_config(config, "bad")
    assert info.value.field == key
