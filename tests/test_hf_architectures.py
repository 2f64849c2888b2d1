"""The Hugging Face architectures beyond the Llama family's first members: each checkpoint's own
``config.json`` keys (those that matter, as the files write them — Gemma 3's multimodal configs
leave most text keys to their defaults) read as the catalog entry of that model, vision tower
included, and unknown architectures refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from cbsim.catalog.models import get_model, model_from_hf_config
from cbsim.common.errors import CbsimError

SIGLIP = {
    "hidden_size": 1152,
    "image_size": 896,
    "intermediate_size": 4304,
    "model_type": "siglip_vision_model",
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "patch_size": 14,
    "vision_use_head": False,
}

CONFIGS: dict[str, dict[str, Any]] = {
    "gemma-2-9b": {  # google/gemma-2-9b-it
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0,
        "head_dim": 256,
        "hidden_size": 3584,
        "intermediate_size": 14336,
        "max_position_embeddings": 8192,
        "num_attention_heads": 16,
        "num_hidden_layers": 42,
        "num_key_value_heads": 8,
        "query_pre_attn_scalar": 256,
        "sliding_window": 4096,
        "vocab_size": 256000,
    },
    "gemma-3-1b": {  # google/gemma-3-1b-it
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "head_dim": 256,
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "max_position_embeddings": 32768,
        "num_attention_heads": 4,
        "num_hidden_layers": 26,
        "num_key_value_heads": 1,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "vocab_size": 262144,
    },
    "gemma-3-4b": {  # google/gemma-3-4b-it: the text model's keys left to their defaults
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "model_type": "gemma3_text",
            "num_hidden_layers": 34,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "sliding_window": 1024,
        },
        "vision_config": SIGLIP,
    },
    "gemma-3-27b": {  # google/gemma-3-27b-it
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "text_config": {
            "head_dim": 128,
            "hidden_size": 5376,
            "intermediate_size": 21504,
            "model_type": "gemma3_text",
            "num_attention_heads": 32,
            "num_hidden_layers": 62,
            "num_key_value_heads": 16,
            "query_pre_attn_scalar": 168,
            "sliding_window": 1024,
        },
        "vision_config": SIGLIP,
    },
    "phi-3-mini-4k": {  # microsoft/Phi-3-mini-4k-instruct
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "max_position_embeddings": 4096,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "sliding_window": 2047,
        "tie_word_embeddings": False,
        "vocab_size": 32064,
    },
    "phi-4-mini": {  # microsoft/Phi-4-mini-instruct
        "architectures": ["Phi3ForCausalLM"],
        "model_type": "phi3",
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "max_position_embeddings": 131072,
        "num_attention_heads": 24,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "partial_rotary_factor": 0.75,
        "sliding_window": 262144,
        "tie_word_embeddings": True,
        "vocab_size": 200064,
    },
    "phi-3.5-moe": {  # microsoft/Phi-3.5-MoE-instruct
        "architectures": ["PhiMoEForCausalLM"],
        "model_type": "phimoe",
        "attention_bias": True,
        "hidden_size": 4096,
        "intermediate_size": 6400,
        "lm_head_bias": True,
        "max_position_embeddings": 131072,
        "num_attention_heads": 32,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 16,
        "sliding_window": 131072,
        "tie_word_embeddings": False,
        "vocab_size": 32064,
    },
    "granite-3.1-8b": {  # ibm-granite/granite-3.1-8b-instruct
        "architectures": ["GraniteForCausalLM"],
        "model_type": "granite",
        "attention_bias": False,
        "attention_multiplier": 0.0078125,
        "embedding_multiplier": 12.0,
        "hidden_size": 4096,
        "intermediate_size": 12800,
        "logits_scaling": 16.0,
        "max_position_embeddings": 131072,
        "mlp_bias": False,
        "num_attention_heads": 32,
        "num_hidden_layers": 40,
        "num_key_value_heads": 8,
        "residual_multiplier": 0.22,
        "tie_word_embeddings": True,
        "vocab_size": 49155,
    },
    "qwen1.5-moe-a2.7b": {  # Qwen/Qwen1.5-MoE-A2.7B
        "architectures": ["Qwen2MoeForCausalLM"],
        "model_type": "qwen2_moe",
        "decoder_sparse_step": 1,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "max_position_embeddings": 8192,
        "moe_intermediate_size": 1408,
        "num_attention_heads": 16,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 24,
        "num_key_value_heads": 16,
        "shared_expert_intermediate_size": 5632,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
    },
    "deepseek-v2-lite": {  # deepseek-ai/DeepSeek-V2-Lite: no q_lora_rank
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "first_k_dense_replace": 1,
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "moe_intermediate_size": 1408,
        "moe_layer_freq": 1,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_attention_heads": 16,
        "num_experts_per_tok": 6,
        "num_hidden_layers": 27,
        "num_key_value_heads": 16,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "tie_word_embeddings": False,
        "topk_method": "greedy",
        "v_head_dim": 128,
        "vocab_size": 102400,
    },
    "glm-4-9b": {  # THUDM/GLM-4-9B-0414
        "architectures": ["Glm4ForCausalLM"],
        "model_type": "glm4",
        "attention_bias": True,
        "head_dim": 128,
        "hidden_size": 4096,
        "intermediate_size": 13696,
        "max_position_embeddings": 32768,
        "num_attention_heads": 32,
        "num_hidden_layers": 40,
        "num_key_value_heads": 2,
        "partial_rotary_factor": 0.5,
        "tie_word_embeddings": False,
        "vocab_size": 151552,
    },
    "glm-4.5-air": {  # zai-org/GLM-4.5-Air
        "architectures": ["Glm4MoeForCausalLM"],
        "model_type": "glm4_moe",
        "attention_bias": True,
        "first_k_dense_replace": 1,
        "head_dim": 128,
        "hidden_size": 4096,
        "intermediate_size": 10944,
        "max_position_embeddings": 131072,
        "moe_intermediate_size": 1408,
        "n_routed_experts": 128,
        "n_shared_experts": 1,
        "num_attention_heads": 96,
        "num_experts_per_tok": 8,
        "num_hidden_layers": 46,
        "num_key_value_heads": 8,
        "num_nextn_predict_layers": 1,
        "partial_rotary_factor": 0.5,
        "tie_word_embeddings": False,
        "use_qk_norm": False,
        "vocab_size": 151552,
    },
    "llama-3.2-11b-vision": {  # meta-llama/Llama-3.2-11B-Vision-Instruct
        "architectures": ["MllamaForConditionalGeneration"],
        "model_type": "mllama",
        "text_config": {
            "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38],
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "max_position_embeddings": 131072,
            "model_type": "mllama_text_model",
            "num_attention_heads": 32,
            "num_hidden_layers": 40,
            "num_key_value_heads": 8,
            "tie_word_embeddings": False,
            "vocab_size": 128256,
        },
        "vision_config": {
            "hidden_size": 1280,
            "image_size": 560,
            "intermediate_layers_indices": [3, 7, 15, 23, 30],
            "intermediate_size": 5120,
            "max_num_tiles": 4,
            "model_type": "mllama_vision_model",
            "num_attention_heads": 16,
            "num_channels": 3,
            "num_global_layers": 8,
            "num_hidden_layers": 32,
            "patch_size": 14,
            "supported_aspect_ratios": [
                [1, 1],
                [1, 2],
                [1, 3],
                [1, 4],
                [2, 1],
                [2, 2],
                [3, 1],
                [4, 1],
            ],
            "vision_output_dim": 7680,
        },
    },
    "mistral-small-3.1-24b": {  # mistralai/Mistral-Small-3.1-24B-Instruct-2503
        "architectures": ["Mistral3ForConditionalGeneration"],
        "model_type": "mistral3",
        "multimodal_projector_bias": False,
        "spatial_merge_size": 2,
        "text_config": {
            "head_dim": 128,
            "hidden_size": 5120,
            "intermediate_size": 32768,
            "max_position_embeddings": 131072,
            "model_type": "mistral",
            "num_attention_heads": 32,
            "num_hidden_layers": 40,
            "num_key_value_heads": 8,
            "sliding_window": None,
            "vocab_size": 131072,
        },
        "vision_config": {
            "head_dim": 64,
            "hidden_size": 1024,
            "image_size": 1540,
            "intermediate_size": 4096,
            "model_type": "pixtral",
            "num_attention_heads": 16,
            "num_hidden_layers": 24,
            "patch_size": 14,
        },
    },
    "exaone-4.0-32b": {  # LGAI-EXAONE/EXAONE-4.0-32B
        "architectures": ["Exaone4ForCausalLM"],
        "model_type": "exaone4",
        "head_dim": 128,
        "hidden_size": 5120,
        "intermediate_size": 27392,
        "max_position_embeddings": 131072,
        "num_attention_heads": 40,
        "num_hidden_layers": 64,
        "num_key_value_heads": 8,
        "sliding_window": 4096,
        "sliding_window_pattern": "LLLG",
        "tie_word_embeddings": False,
        "vocab_size": 102400,
    },
    "seed-oss-36b": {  # ByteDance-Seed/Seed-OSS-36B-Instruct
        "architectures": ["SeedOssForCausalLM"],
        "model_type": "seed_oss",
        "attention_bias": True,
        "attention_out_bias": False,
        "head_dim": 128,
        "hidden_size": 5120,
        "intermediate_size": 27648,
        "max_position_embeddings": 524288,
        "num_attention_heads": 80,
        "num_hidden_layers": 64,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
        "vocab_size": 155136,
    },
}


@pytest.mark.parametrize("name", CONFIGS)
def test_config_reads_as_the_catalog_entry(name: str) -> None:
    assert model_from_hf_config(CONFIGS[name], name) == get_model(name)


def test_llama4_vision_config_counts_the_vision_tower() -> None:
    config = {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
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
            "vocab_size": 202048,
        },
        "vision_config": {
            "hidden_size": 1408,
            "image_size": 336,
            "intermediate_size": 5632,
            "num_attention_heads": 16,
            "num_hidden_layers": 34,
            "patch_size": 14,
            "pixel_shuffle_ratio": 0.5,
            "projector_input_dim": 4096,
            "projector_output_dim": 4096,
            "vision_output_dim": 4096,
        },
    }
    shape = model_from_hf_config(config, "llama-4-scout-17b-16e")
    assert shape == get_model("llama-4-scout-17b-16e")
    assert shape.param_count() == 108_641_793_536


def test_exaone_integer_pattern_and_layer_types_agree() -> None:
    as_string = CONFIGS["exaone-4.0-32b"]
    as_integer = {**as_string, "sliding_window_pattern": 4}
    kinds = ["sliding_attention"] * 3 + ["full_attention"]
    as_list = {**as_string, "sliding_window_pattern": None, "layer_types": kinds * 16}
    shapes = {model_from_hf_config(c, "x").sliding_window_layers for c in (as_integer, as_list)}
    assert shapes == {48}


@pytest.mark.parametrize(
    ("architecture", "reason"),
    [
        ("LlavaForConditionalGeneration", "unsupported architecture"),
        ("Qwen2VLForConditionalGeneration", "unsupported architecture"),
        ("JambaForCausalLM", "mixture-of-experts architecture is not supported"),
    ],
)
def test_unknown_architectures_are_refused_by_name(architecture: str, reason: str) -> None:
    config = {**CONFIGS["gemma-3-4b"], "architectures": [architecture], "model_type": None}
    with pytest.raises(CbsimError, match=reason) as info:
        model_from_hf_config(config, "x")
    assert architecture in info.value.message and info.value.field == "architectures"


@pytest.mark.parametrize(
    ("name", "key"),
    [("qwen1.5-moe-a2.7b", "num_experts"), ("phi-3.5-moe", "num_experts_per_tok"),
     ("glm-4.5-air", "moe_intermediate_size")],
)  # fmt: skip
def test_a_missing_expert_key_says_the_architecture_needs_it(name: str, key: str) -> None:
    config = {k: v for k, v in CONFIGS[name].items() if k != key}
    with pytest.raises(CbsimError) as info:
        model_from_hf_config(config, "x")
    assert info.value.field == key
    assert "missing required key" in info.value.message
    assert f"model_type {CONFIGS[name]['model_type']} is a mixture-of-experts" in info.value.message
