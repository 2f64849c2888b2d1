"""Model shapes from Hugging Face ``config.json`` files.

A config is read only when its architecture is one cbsim models (:data:`ARCHITECTURES`: the Llama
family — Mistral, Qwen2/3, Gemma 2/3, Phi-3/4, Granite, GLM-4, EXAONE 4, Seed-OSS — the
mixture-of-experts and latent-attention models built on it, and the vision-language models whose
text model is one of those); anything else is refused with the reason (:func:`check_architecture`),
never read as something it is not. The keys a shape needs must be present and within their
limits (a family's Hugging Face defaults fill the keys its configs leave out, as Gemma 3's do);
the expert, latent-attention and local-attention fields are read under each family's own key
names, and a vision-language config's vision tower is counted from its ``vision_config``
(:mod:`cbsim.catalog.vision_towers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from cbsim.catalog.model_shape import ModelShape
from cbsim.catalog.vision_towers import VISION_TOWERS
from cbsim.common.documents import parse_json, read_text_file
from cbsim.common.errors import CbsimError
from cbsim.common.limits import (
    MODEL_EXPERTS,
    MODEL_HEADS,
    MODEL_LAYERS,
    MODEL_WIDTH,
    TOKENS,
    VOCABULARY,
    Limit,
)

_REQUIRED_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)

# The range of each dimension read from a config.json (see cbsim.common.limits for the reasons).
_KEY_LIMITS: dict[str, Limit] = {
    "num_hidden_layers": MODEL_LAYERS,
    "hidden_size": MODEL_WIDTH,
    "num_attention_heads": MODEL_HEADS,
    "num_key_value_heads": MODEL_HEADS,
    "intermediate_size": MODEL_WIDTH,
    "head_dim": MODEL_WIDTH,
    "vocab_size": VOCABULARY,
    "max_position_embeddings": TOKENS,
    "num_local_experts": MODEL_EXPERTS,
    "num_experts": MODEL_EXPERTS,
    "n_routed_experts": MODEL_EXPERTS,
    "num_experts_per_tok": MODEL_EXPERTS,
    "n_shared_experts": MODEL_EXPERTS,
    "first_k_dense_replace": MODEL_LAYERS,
    "moe_layer_freq": MODEL_LAYERS,
    "interleave_moe_layer_step": MODEL_LAYERS,
    "decoder_sparse_step": MODEL_LAYERS,
    "no_rope_layer_interval": MODEL_LAYERS,
    "sliding_window": TOKENS,
    "attention_chunk_size": TOKENS,
    "num_nextn_predict_layers": MODEL_LAYERS,
    "moe_intermediate_size": MODEL_WIDTH,
    "shared_expert_intermediate_size": MODEL_WIDTH,
    "sliding_window_pattern": MODEL_LAYERS,
}

# model_type values whose architecture puts a bias on q/k/v even without attention_bias.
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe"})
# model_type values whose attention normalises each query and key head (RMSNorm) before rotary.
_QK_NORM_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe", "gemma3_text", "exaone4"})
# model_type values whose attention_bias puts a bias on q/k/v only, never on o.
_QKV_ONLY_BIAS_MODEL_TYPES = frozenset({"glm4", "glm4_moe", "seed_oss"})
# model_type values with a norm after attention and after the MLP besides the two before them.
_POST_NORM_MODEL_TYPES = frozenset({"gemma2", "gemma3_text", "glm4"})
# The Hugging Face config defaults of families whose configs leave keys out (Gemma 3's
# multimodal checkpoints give only the widths and depth of their text model).
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma2": {"tie_word_embeddings": True, "head_dim": 256},
    "gemma3_text": {
        "tie_word_embeddings": True,
        "vocab_size": 262208,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
}

# The dense decoder-only architectures a ModelShape describes exactly (Llama family: the others
# differ by biases, q/k norms, post-norms, local layers and costless scalings read here).
DENSE_ARCHITECTURES = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Phi3ForCausalLM",
        "PhiForCausalLM",
        "GraniteForCausalLM",
        "Glm4ForCausalLM",
        "Exaone4ForCausalLM",
        "SeedOssForCausalLM",
        # vision-language: the text model under text_config, the vision tower counted
        "Gemma3ForConditionalGeneration",
        "MllamaForConditionalGeneration",
        "Mistral3ForConditionalGeneration",
    }
)
DENSE_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma2",
        "gemma3_text",
        "phi3",
        "phi",
        "granite",
        "glm4",
        "exaone4",
        "seed_oss",
        "gemma3",
        "mllama",
        "mllama_text_model",
        "mistral3",
    }
)
# Phi-1, 1.5 and 2 (PhiForCausalLM, transformers' modeling_phi.py): biases on q, k, v and the
# dense output, a plain GELU MLP (fc1, fc2), LayerNorms with biases and a biased LM head. Their
# MLP biases (0.015% of Phi-2) are not counted; attention and MLP run in parallel off one norm,
# which changes neither the weights nor the FLOPs.
PHI_FIELDS: dict[str, Any] = {"gated_mlp": False, "norm_bias": True, "lm_head_bias": True}
# Mixture-of-experts and latent-attention architectures read exactly, by model_type.
MOE_MODEL_TYPES = frozenset(
    {
        "mixtral",
        "qwen3_moe",
        "deepseek_v3",
        "kimi_k2",
        "gpt_oss",
        "llama4",
        "llama4_text",
        "phimoe",
        "qwen2_moe",
        "deepseek_v2",
        "glm4_moe",
    }
)
MOE_ARCHITECTURES = frozenset(
    {
        "MixtralForCausalLM",
        "Qwen3MoeForCausalLM",
        "DeepseekV3ForCausalLM",
        "GptOssForCausalLM",
        "Llama4ForCausalLM",
        "Llama4ForConditionalGeneration",
        "PhiMoEForCausalLM",
        "Qwen2MoeForCausalLM",
        "DeepseekV2ForCausalLM",
        "Glm4MoeForCausalLM",
    }
)
ARCHITECTURES = DENSE_ARCHITECTURES | MOE_ARCHITECTURES
"""Every Hugging Face architecture :func:`model_from_hf_config` reads."""
MODEL_TYPES = DENSE_MODEL_TYPES | MOE_MODEL_TYPES
# Keys whose presence (with more than one expert) marks a mixture-of-experts config.
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_MOE_MARKERS = ("moe", "mixtral", "deepseek", "dbrx", "jamba", "arctic", "grok", "olmoe", "phimoe")
MOE_UNSUPPORTED = (
    "this mixture-of-experts architecture is not supported (cbsim reads "
    f"{', '.join(sorted(MOE_ARCHITECTURES))})"
)


def _int_key(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if value is None:
        raise CbsimError("missing required key", field=key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CbsimError(f"must be a positive integer, got {_shown(value)}", field=key)
    limit = _KEY_LIMITS.get(key)
    problem = limit.violation(value) if limit is not None else None
    if problem is not None:
        raise CbsimError(problem, field=key)
    return value


def _shown(value: Any) -> str:
    """A config value as quoted in an error message (long values cut)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge number"
    return text if len(text) <= 60 else text[:57] + "..."


def _is_moe_name(name: str) -> bool:
    return any(marker in name.casefold() for marker in _MOE_MARKERS)


def check_architecture(config: Mapping[str, Any]) -> None:
    """Refuse a config that is not one of the architectures :class:`ModelShape` describes: an
    unknown mixture-of-experts architecture with a message saying so, experts in a dense
    architecture's config, any other unknown ``architectures`` or ``model_type`` with the known
    ones. A config naming neither is read as a Llama-family model."""
    architectures = config.get("architectures")
    if architectures is not None:
        if not isinstance(architectures, list) or not all(
            isinstance(a, str) for a in architectures
        ):
            raise CbsimError(
                f"must be a list of architecture names, got {_shown(architectures)}",
                field="architectures",
            )
        for name in architectures:
            if name not in ARCHITECTURES:
                reason = MOE_UNSUPPORTED if _is_moe_name(name) else "unsupported architecture"
                raise CbsimError(
                    f"{name!r}: {reason}; known: {', '.join(sorted(ARCHITECTURES))}",
                    field="architectures",
                )
    model_type = config.get("model_type")
    if model_type is not None and model_type not in MODEL_TYPES:
        reason = (
            MOE_UNSUPPORTED
            if isinstance(model_type, str) and _is_moe_name(model_type)
            else "unsupported model type"
        )
        raise CbsimError(
            f"{_shown(model_type)}: {reason}; known: {', '.join(sorted(MODEL_TYPES))}",
            field="model_type",
        )
    if _family(config) in MOE_MODEL_TYPES:
        return
    for key in _EXPERT_KEYS:
        experts = config.get(key)
        if isinstance(experts, int) and not isinstance(experts, bool) and experts > 1:
            raise CbsimError(
                f"{experts} experts in a dense architecture's config: give the model_type of a "
                f"mixture-of-experts architecture ({', '.join(sorted(MOE_MODEL_TYPES))})",
                field=key,
            )


def model_from_hf_config(config: Mapping[str, Any], name: str) -> ModelShape:
    """A :class:`ModelShape` from a Hugging Face ``config.json`` mapping.

    Required keys: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``. ``num_key_value_heads`` defaults to the number of
    attention heads, ``head_dim`` to ``hidden_size // num_attention_heads``,
    ``tie_word_embeddings`` to False and ``max_position_embeddings`` to 4096. A multimodal config
    whose text model sits under ``text_config`` is read from there, its vision tower counted from
    ``vision_config``. Only the architectures of :data:`ARCHITECTURES` are accepted (see
    :func:`check_architecture`); every dimension must lie within its :mod:`cbsim.common.limits` range.
    Raises :class:`CbsimError` naming the offending key.
    """
    if not isinstance(config, Mapping):
        raise CbsimError(f"expected a JSON object, got {type(config).__name__}")
    text_config = config.get("text_config")
    if "num_hidden_layers" not in config and isinstance(text_config, Mapping):
        return _multimodal(config, text_config, name)
    check_architecture(config)
    config = _with_defaults(config)
    for key in _REQUIRED_KEYS:
        if key not in config:
            raise CbsimError("missing required key", field=key)
    layers, hidden, heads, inter, vocab = (_int_key(config, key) for key in _REQUIRED_KEYS)
    kv_heads = (
        heads
        if config.get("num_key_value_heads") is None
        else _int_key(config, "num_key_value_heads")
    )
    if config.get("head_dim") is None:
        if hidden % heads:
            raise CbsimError(
                f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}) "
                "and head_dim is not given",
                field="head_dim",
            )
        head_dim = hidden // heads
    else:
        head_dim = _int_key(config, "head_dim")
    max_pos = (
        4096
        if config.get("max_position_embeddings") is None
        else _int_key(config, "max_position_embeddings")
    )
    tied = config.get("tie_word_embeddings")
    family = _family(config)
    attention_bias = bool(config.get("attention_bias", False))
    o_bias = attention_bias and family not in _QKV_ONLY_BIAS_MODEL_TYPES
    if family == "seed_oss":
        o_bias = bool(config.get("attention_out_bias", False))
    extra: dict[str, Any] = _local_attention_fields(config, family, layers, max_pos)
    if family in _POST_NORM_MODEL_TYPES:
        extra["post_norms"] = True
    if family == "phi":
        extra |= PHI_FIELDS
        attention_bias = o_bias = True
    if family in MOE_MODEL_TYPES:
        extra |= _expert_fields_named(config, family, layers)
        if family in _MLA_FAMILIES:
            extra |= _latent_attention_fields(config)
            head_dim = extra["qk_nope_head_dim"] + extra["qk_rope_head_dim"]
        if family == "llama4":
            inter = _int_key(config, "intermediate_size_mlp")
        if family == "gpt_oss":
            extra["attention_sinks"] = True
        if family == "phimoe":
            extra["norm_bias"] = True
            extra["lm_head_bias"] = bool(config.get("lm_head_bias", False))
        if family == "glm4_moe":
            extra["qk_norm"] = bool(config.get("use_qk_norm", False))
    try:
        return ModelShape(
            name=name,
            num_layers=layers,
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=inter,
            vocab_size=vocab,
            tie_word_embeddings=bool(tied) if tied is not None else False,
            max_position_embeddings=max_pos,
            qkv_bias=attention_bias or family in _QKV_BIAS_MODEL_TYPES,
            qk_norm=extra.pop("qk_norm", family in _QK_NORM_MODEL_TYPES),
            o_bias=o_bias,
            mtp_layers=_count_key(config, "num_nextn_predict_layers", 0),
            **extra,
        )
    except CbsimError as err:  # name the config's key, not the ModelShape attribute
        raise CbsimError(err.message, field=_CONFIG_KEYS.get(err.field or "", err.field)) from None


# Architecture -> the model_type whose fields it is read by (when the config has no model_type).
_ARCHITECTURE_FAMILY = {
    "MixtralForCausalLM": "mixtral",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
    "Llama4ForCausalLM": "llama4",
    "Llama4ForConditionalGeneration": "llama4",
    "PhiMoEForCausalLM": "phimoe",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "Glm4MoeForCausalLM": "glm4_moe",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Phi3ForCausalLM": "phi3",
    "PhiForCausalLM": "phi",
    "GraniteForCausalLM": "granite",
    "Glm4ForCausalLM": "glm4",
    "Exaone4ForCausalLM": "exaone4",
    "SeedOssForCausalLM": "seed_oss",
}
# Families with multi-head latent attention.
_MLA_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2"})
# A text model's model_type -> the family it is read as.
_TEXT_FAMILIES = {"llama4_text": "llama4", "mllama_text_model": "llama"}


def _family(config: Mapping[str, Any]) -> str:
    """Which architecture's fields to read: the model type (Llama 4's text model as
    ``llama4``), else the first architecture named that has fields of its own, else
    ``llama``."""
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in MODEL_TYPES:
        return _TEXT_FAMILIES.get(model_type, model_type)
    for name in config.get("architectures") or ():
        if name in _ARCHITECTURE_FAMILY:
            return _ARCHITECTURE_FAMILY[name]
    return "llama"


def _with_defaults(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The config with its family's Hugging Face defaults under the keys it leaves out."""
    defaults = _FAMILY_DEFAULTS.get(_family(config))
    if not defaults:
        return config
    missing = {k: v for k, v in defaults.items() if config.get(k) is None}
    return {**config, **missing}


def _multimodal(config: Mapping[str, Any], text_config: Mapping[str, Any], name: str) -> ModelShape:
    """A vision-language config: its text model (under ``text_config``), with the vision tower
    ``vision_config`` describes counted in ``multimodal_params``."""
    check_architecture({k: config.get(k) for k in ("architectures", "model_type")})
    try:
        text = model_from_hf_config(
            {"tie_word_embeddings": config.get("tie_word_embeddings"), **text_config}, name
        )
    except CbsimError as err:
        raise err.located(field="text_config") from None
    vision = config.get("vision_config")
    count = VISION_TOWERS.get(str(config.get("model_type")))
    if count is None or not isinstance(vision, Mapping):
        return text
    try:
        return replace(text, multimodal_params=count(vision, text_config, config))
    except CbsimError as err:
        raise err.located(
            field=f"vision_config.{err.field}" if err.field else "vision_config"
        ) from None


def _count_key(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """A count from the config (0 allowed), or ``default`` when absent or null."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise CbsimError("missing required key", field=key)
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CbsimError(f"must be an integer >= 0, got {_shown(value)}", field=key)
    limit = _KEY_LIMITS.get(key, MODEL_WIDTH)
    if value and limit.violation(value) is not None:
        raise CbsimError(str(limit.violation(value)), field=key)
    return value


def _expert_fields_named(config: Mapping[str, Any], family: str, layers: int) -> dict[str, Any]:
    """:func:`_expert_fields`, a missing key said to be one a mixture of experts needs."""
    try:
        return _expert_fields(config, family, layers)
    except CbsimError as err:
        if err.message != "missing required key":
            raise
        raise CbsimError(
            f"missing required key: model_type {family} is a mixture-of-experts architecture, "
            "whose config.json says how many experts each layer holds, how many each token is "
            "routed to and their width (the checkpoint's own config.json has them)",
            field=err.field,
        ) from None


def _expert_fields(config: Mapping[str, Any], family: str, layers: int) -> dict[str, Any]:
    """The mixture-of-experts fields of a config of ``family`` (a model type)."""
    experts_key = {
        "mixtral": "num_local_experts",
        "gpt_oss": "num_local_experts",
        "llama4": "num_local_experts",
        "phimoe": "num_local_experts",
        "qwen3_moe": "num_experts",
        "qwen2_moe": "num_experts",
        "deepseek_v2": "n_routed_experts",
        "deepseek_v3": "n_routed_experts",
        "kimi_k2": "n_routed_experts",
        "glm4_moe": "n_routed_experts",
    }[family]
    fields: dict[str, Any] = {
        "num_experts": _int_key(config, experts_key),
        "experts_per_token": _int_key(config, "num_experts_per_tok"),
    }
    if family in ("mixtral", "gpt_oss", "llama4", "phimoe"):
        fields["expert_intermediate_size"] = _int_key(config, "intermediate_size")
    else:
        fields["expert_intermediate_size"] = _int_key(config, "moe_intermediate_size")
    if family == "llama4":
        fields["shared_expert_intermediate_size"] = fields["expert_intermediate_size"]
        fields["moe_layer_step"] = _count_key(config, "interleave_moe_layer_step", 1) or 1
        _check_moe_layers(config, "moe_layers", layers, 0, fields["moe_layer_step"])
    elif family in ("qwen3_moe", "qwen2_moe"):
        if family == "qwen2_moe":
            width = _count_key(config, "shared_expert_intermediate_size", 0)
            fields["shared_expert_intermediate_size"] = width
            fields["shared_expert_gate"] = width > 0
        fields["moe_layer_step"] = _count_key(config, "decoder_sparse_step", 1) or 1
        dense = config.get("mlp_only_layers") or []
        if dense != list(range(len(dense))):
            raise CbsimError(
                "only leading dense layers are supported (0, 1, ... k-1)", field="mlp_only_layers"
            )
        fields["dense_layers"] = len(dense)
        if dense and fields["moe_layer_step"] > 1:
            raise CbsimError(
                "leading dense layers with a decoder_sparse_step above 1 are not supported",
                field="mlp_only_layers",
            )
    elif family in ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe"):
        shared = _count_key(config, "n_shared_experts", 0)
        fields["shared_expert_intermediate_size"] = shared * fields["expert_intermediate_size"]
        fields["dense_layers"] = _count_key(config, "first_k_dense_replace", 0)
        if _count_key(config, "moe_layer_freq", 1) > 1:
            raise CbsimError(
                "only an MoE layer after every dense one is supported (1)", field="moe_layer_freq"
            )
        # DeepSeek-V3's score correction (noaux_tc); GLM-4.5's router always has one
        fields["router_bias"] = family == "glm4_moe" or config.get("topk_method") == "noaux_tc"
    elif family == "gpt_oss":
        fields["expert_bias"] = True
        fields["router_bias"] = True
    return fields


def _check_moe_layers(
    config: Mapping[str, Any], key: str, layers: int, dense: int, step: int
) -> None:
    """An explicit list of MoE layers must be the one the step implies."""
    listed = config.get(key)
    if listed is None:
        return
    implied = [i for i in range(dense, layers) if (i - dense + 1) % step == 0]
    if listed != implied:
        raise CbsimError(
            f"MoE layers other than every {step}th are not supported, got {_shown(listed)}",
            field=key,
        )


def _latent_attention_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """Multi-head latent attention's ranks and head widths (DeepSeek-V3, Kimi K2)."""
    return {
        "q_lora_rank": _count_key(config, "q_lora_rank", 0),
        "kv_lora_rank": _int_key(config, "kv_lora_rank"),
        "qk_rope_head_dim": _int_key(config, "qk_rope_head_dim"),
        "qk_nope_head_dim": _int_key(config, "qk_nope_head_dim"),
        "v_head_dim": _int_key(config, "v_head_dim"),
    }


def _local_attention_fields(
    config: Mapping[str, Any], family: str, layers: int, max_pos: int
) -> dict[str, Any]:
    """Local attention: which layers attend only to the last ``sliding_window`` tokens —
    listed in ``layer_types`` where the config has it, else as the family places them: gpt-oss
    and Gemma 2 every other layer from the first, Gemma 3 and EXAONE 4 all but every
    ``sliding_window_pattern``-th (EXAONE 4 also writes the pattern as ``"LLLG"``), Phi-3 every
    layer (a window no shorter than the context is none); Llama 4's chunked-attention layers
    (those with rotary embedding, three of four) with the chunk taken as a window. Mistral's and
    Qwen2's windows are not read (Mistral-7B-v0.1's is not modelled; Qwen2's is off)."""
    if family == "llama4":
        window = _count_key(config, "attention_chunk_size", 0)
        rope = config.get("no_rope_layers")
        if rope is None:
            interval = _count_key(config, "no_rope_layer_interval", 4) or 4
            local = sum(1 for i in range(layers) if (i + 1) % interval)
        elif isinstance(rope, list) and len(rope) == layers:
            local = sum(1 for flag in rope if flag)
        else:
            raise CbsimError(f"must list {layers} flags", field="no_rope_layers")
        return {"sliding_window": window, "sliding_window_layers": local} if window else {}
    if family not in ("gpt_oss", "gemma2", "gemma3_text", "exaone4", "phi3"):
        return {}
    window = _count_key(config, "sliding_window", 0)
    if not window or window >= max_pos:
        return {}
    types = config.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise CbsimError(f"must list {layers} layer types", field="layer_types")
        local = sum(1 for t in types if t == "sliding_attention")
    elif family in ("gpt_oss", "gemma2"):
        local = (layers + 1) // 2
    elif family == "phi3":
        local = layers
    else:
        local = _pattern_layers(config, layers, 6 if family == "gemma3_text" else 4)
    return {"sliding_window": window, "sliding_window_layers": local} if local else {}


def _pattern_layers(config: Mapping[str, Any], layers: int, default: int) -> int:
    """Local layers of a ``sliding_window_pattern`` (``default`` when absent): an integer p
    (every p-th layer global) or EXAONE 4's string of ``L`` (local) and ``G`` (global) repeated
    over the layers."""
    pattern = config.get("sliding_window_pattern")
    if isinstance(pattern, str) and pattern and set(pattern) <= {"L", "G"}:
        return sum(1 for i in range(layers) if pattern[i % len(pattern)] == "L")
    period = _count_key(config, "sliding_window_pattern", default)
    if period < 1:
        raise CbsimError("must be at least 1", field="sliding_window_pattern")
    return layers - layers // period


# ModelShape attribute -> the config.json key it is read from.
_CONFIG_KEYS = {
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "experts_per_token": "num_experts_per_tok",
    "dense_layers": "first_k_dense_replace",
    "mtp_layers": "num_nextn_predict_layers",
}


def _load_config_file(path: Path) -> ModelShape:
    if path.is_dir():
        path = path / "config.json"
    source = str(path)
    try:
        text = read_text_file(path, what="model config")
        config = parse_json(text, source)
    except CbsimError as err:
        raise err.located(source=source) from None
    name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    try:
        return model_from_hf_config(config, name)
    except CbsimError as err:
        raise err.located(source=source) from None


def read_config_dict(path: Path) -> dict[str, Any] | None:
    """The JSON object of a ``config.json`` (or of its folder's), or None when there is no such
    readable object (the model's loading reports why)."""
    if path.is_dir():
        path = path / "config.json"
    try:
        config = parse_json(read_text_file(path, what="model config"), str(path))
    except CbsimError:
        return None
    return config if isinstance(config, dict) else None
