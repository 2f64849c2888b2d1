"""Model shapes: the transformer dimensions that decide what an LLM costs to serve.

The cost of a serving iteration depends on a model only through its shape: how many decoder
layers, how wide the hidden state and the MLP are, how many query and key/value heads attention
has (grouped-query attention shares each KV head among several query heads, shrinking the KV
cache), how large the vocabulary is (the LM head runs for every generated token) and whether the
output projection shares the input embedding's weights. From those follow the parameter count
(weights to read from memory each iteration), the KV-cache bytes per token (what bounds how many
requests fit) and the FLOPs per token.

A :class:`ModelShape` covers the Llama family of decoder-only transformers (pre-norm RMSNorm,
rotary positions, gated SwiGLU MLP, no linear biases), which also describes Mistral and Qwen2
(Qwen2 adds biases on the q/k/v projections). The catalog holds the exact values of the Hugging
Face ``config.json`` of each checkpoint; :func:`get_model` also accepts a path to any such
``config.json`` (or to the directory holding it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cbsim.documents import parse_json, read_text_file
from cbsim.errors import CbsimError, canonical_name, unknown_name
from cbsim.limits import (
    MODEL_HEADS,
    MODEL_LAYERS,
    MODEL_WIDTH,
    TOKENS,
    VOCABULARY,
    Limit,
)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """Dimensions of a decoder-only transformer (Hugging Face ``config.json`` field names noted).

    Attributes:
        name: catalog name, or where the config came from.
        num_layers: decoder layers (``num_hidden_layers``).
        hidden_size: residual-stream width (``hidden_size``).
        num_heads: query heads (``num_attention_heads``).
        num_kv_heads: key/value heads (``num_key_value_heads``); fewer than ``num_heads`` is GQA.
        head_dim: width of one attention head (``head_dim``, default ``hidden_size // num_heads``).
        intermediate_size: MLP inner width (``intermediate_size``).
        vocab_size: vocabulary size, rows of the embedding and the LM head (``vocab_size``).
        tie_word_embeddings: the LM head reuses the embedding matrix (no separate weights).
        gated_mlp: SwiGLU MLP with gate, up and down projections (Llama, Mistral, Qwen); False
            is a plain two-matrix MLP.
        max_position_embeddings: longest context the model supports, prompt plus output.
        qkv_bias: the q, k and v projections carry a bias (Qwen2/2.5).
        qk_norm: an RMSNorm over each query and key head before rotary embedding (Qwen3), with
            ``head_dim`` weights each for q and k per layer.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    gated_mlp: bool = True
    max_position_embeddings: int = 4096
    qkv_bias: bool = False
    qk_norm: bool = False

    def __post_init__(self) -> None:
        for field in (
            "num_layers",
            "hidden_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CbsimError(f"must be a positive integer, got {value!r}", field=field)
        if self.num_heads % self.num_kv_heads:
            raise CbsimError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})",
                field="num_kv_heads",
            )

    @property
    def q_dim(self) -> int:
        """Width of all query heads together (output of the q projection)."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all key (or all value) heads together (output of the k or v projection)."""
        return self.num_kv_heads * self.head_dim

    def attention_param_count(self) -> int:
        """Parameters of one layer's attention: q, k, v, o projections (+ q/k/v biases)."""
        count = self.hidden_size * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden_size
        if self.qkv_bias:
            count += self.q_dim + 2 * self.kv_dim
        return count

    def mlp_param_count(self) -> int:
        """Parameters of one layer's MLP: gate, up, down (gated) or up, down (plain)."""
        matrices = 3 if self.gated_mlp else 2
        return matrices * self.hidden_size * self.intermediate_size

    def layer_param_count(self) -> int:
        """Parameters of one decoder layer: attention, MLP, its two RMSNorm weights and the
        per-head q/k norms where the model has them."""
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        return (
            self.attention_param_count() + self.mlp_param_count() + 2 * self.hidden_size + qk_norm
        )

    def embedding_param_count(self) -> int:
        """Parameters of the token embedding (also of the LM head, when it is not tied)."""
        return self.vocab_size * self.hidden_size

    def param_count(self) -> int:
        """Total parameters: embedding, layers, final norm and the LM head unless tied."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_param_count()
        return (
            self.embedding_param_count()
            + self.num_layers * self.layer_param_count()
            + self.hidden_size
            + lm_head
        )

    def weight_bytes(self, bytes_per_param: float) -> float:
        """Bytes of all weights at ``bytes_per_param`` (2 for bf16/fp16, 1 for fp8)."""
        return self.param_count() * bytes_per_param

    def kv_bytes_per_token(self, bytes_per_elem: float) -> float:
        """KV-cache bytes one token occupies across all layers: keys and values."""
        return 2 * self.num_layers * self.kv_dim * bytes_per_elem


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
    )
}

MODEL_NAMES: tuple[str, ...] = tuple(_CATALOG)

_REQUIRED_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)

# The range of each dimension read from a config.json (see cbsim.limits for the reasons).
_KEY_LIMITS: dict[str, Limit] = {
    "num_hidden_layers": MODEL_LAYERS,
    "hidden_size": MODEL_WIDTH,
    "num_attention_heads": MODEL_HEADS,
    "num_key_value_heads": MODEL_HEADS,
    "intermediate_size": MODEL_WIDTH,
    "head_dim": MODEL_WIDTH,
    "vocab_size": VOCABULARY,
    "max_position_embeddings": TOKENS,
}

# model_type values whose architecture puts a bias on q/k/v even without attention_bias.
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2", "qwen2_moe"})
# model_type values whose attention normalises each query and key head (RMSNorm) before rotary.
_QK_NORM_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe"})

# The dense decoder-only architectures a ModelShape describes exactly (Llama family: Mistral and
# Qwen2/Qwen3 differ only by the q/k/v bias and the q/k norm read above).
DENSE_ARCHITECTURES = frozenset(
    {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}
)
DENSE_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})
# Keys whose presence (with more than one expert) marks a mixture-of-experts config.
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_MOE_MARKERS = ("moe", "mixtral", "deepseek", "dbrx", "jamba", "arctic", "grok", "olmoe", "phimoe")
MOE_UNSUPPORTED = (
    "mixture-of-experts models are not supported yet (cbsim models dense transformers only: "
    f"{', '.join(sorted(DENSE_ARCHITECTURES))})"
)


def _int_key(config: Mapping[str, Any], key: str) -> int:
    value = config[key]
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
    """Refuse a config that is not one of the dense architectures :class:`ModelShape` describes:
    a mixture-of-experts config (Mixtral's ``num_local_experts``, ``MixtralForCausalLM``, a
    ``*_moe`` model type) with a message saying MoE is not supported yet, any other unknown
    ``architectures`` or ``model_type`` with the known ones. A config naming neither is read as
    a Llama-family model."""
    for key in _EXPERT_KEYS:
        experts = config.get(key)
        if isinstance(experts, int) and not isinstance(experts, bool) and experts > 1:
            raise CbsimError(f"{MOE_UNSUPPORTED}; this config has {experts} experts", field=key)
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
            if name not in DENSE_ARCHITECTURES:
                reason = MOE_UNSUPPORTED if _is_moe_name(name) else "unsupported architecture"
                raise CbsimError(
                    f"{name!r}: {reason}; known: {', '.join(sorted(DENSE_ARCHITECTURES))}",
                    field="architectures",
                )
    model_type = config.get("model_type")
    if model_type is not None and model_type not in DENSE_MODEL_TYPES:
        reason = (
            MOE_UNSUPPORTED
            if isinstance(model_type, str) and _is_moe_name(model_type)
            else "unsupported model type"
        )
        raise CbsimError(
            f"{_shown(model_type)}: {reason}; known: {', '.join(sorted(DENSE_MODEL_TYPES))}",
            field="model_type",
        )


def model_from_hf_config(config: Mapping[str, Any], name: str) -> ModelShape:
    """A :class:`ModelShape` from a Hugging Face ``config.json`` mapping.

    Required keys: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
    ``intermediate_size``, ``vocab_size``. ``num_key_value_heads`` defaults to the number of
    attention heads, ``head_dim`` to ``hidden_size // num_attention_heads``,
    ``tie_word_embeddings`` to False and ``max_position_embeddings`` to 4096. A multimodal config
    whose text model sits under ``text_config`` is read from there. Only dense Llama-family
    architectures are accepted (see :func:`check_architecture`); every dimension must lie within
    its :mod:`cbsim.limits` range. Raises :class:`CbsimError` naming the offending key.
    """
    if not isinstance(config, Mapping):
        raise CbsimError(f"expected a JSON object, got {type(config).__name__}")
    text_config = config.get("text_config")
    if "num_hidden_layers" not in config and isinstance(text_config, Mapping):
        try:
            return model_from_hf_config(
                {"tie_word_embeddings": config.get("tie_word_embeddings"), **text_config}, name
            )
        except CbsimError as err:
            raise err.located(field="text_config") from None
    check_architecture(config)
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
    qkv_bias = bool(config.get("attention_bias", False)) or (
        config.get("model_type") in _QKV_BIAS_MODEL_TYPES
    )
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
            qkv_bias=qkv_bias,
            qk_norm=config.get("model_type") in _QK_NORM_MODEL_TYPES,
        )
    except CbsimError as err:  # name the config's key, not the ModelShape attribute
        raise CbsimError(err.message, field=_CONFIG_KEYS.get(err.field or "", err.field)) from None


# ModelShape attribute -> the config.json key it is read from.
_CONFIG_KEYS = {
    "num_layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
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


def get_model(name_or_path: str) -> ModelShape:
    """A catalog model by name, or the model described by a Hugging Face ``config.json``.

    A catalog name (compared without case) wins over a same-named file. Otherwise a string ending in ``.json``, or naming
    an existing file or directory (read as ``DIR/config.json``), is loaded as a config. Anything
    else raises :class:`CbsimError` listing the catalog names.
    """
    model = _CATALOG.get(name_or_path)
    if model is not None:
        return model
    canonical = canonical_name(name_or_path, MODEL_NAMES)
    if canonical is not None:
        return _CATALOG[canonical]
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith(".json") or path.exists():
        return _load_config_file(path)
    raise unknown_name("model", name_or_path, MODEL_NAMES)
