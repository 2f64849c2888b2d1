"""The model catalog (a data table): the shipped models' shapes, by name and Hugging Face id.

One :class:`CatalogModel` per published model: its shape (:class:`~cbsim.catalog.model_shape.ModelShape`,
named by its catalog name) holds the values of its Hugging Face ``config.json`` — architecture,
layers, width, query and KV heads, head width, MLP and expert widths, vocabulary, tied
embeddings, latent-attention ranks, sliding-window and chunked-attention layers, context — and
the vision encoder of a multimodal checkpoint (:mod:`cbsim.catalog.vision_towers`). Beside the shape:
the Hugging Face ids that load it (base and instruct checkpoints; the first is what a plan
launches), its FP8 checkpoints (the same architecture with 8-bit linear weights), the weight
format of the main checkpoints, any id whose ``max_position_embeddings`` differs (Qwen's
instruct checkpoints say 32,768 where the base says 131,072), and the total its model card
states, with where, which ``tests/test_model_catalog.py`` holds the count to.

Each entry cites its ``config.json``. Where a cited file is vendored elsewhere and was read
there, that copy is named too. :data:`CATALOG` lists the entries in catalog order,
:data:`MODEL_NAMES` their names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cbsim.catalog.model_shape import ModelShape
from cbsim.catalog.vision_towers import llama4_params, mllama_params, pixtral_params, siglip_params


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """One published model: its shape and the names and checkpoints it goes by.

    Attributes:
        shape: the model's shape; ``shape.name`` is its catalog name.
        repos: Hugging Face ids of checkpoints with exactly this shape (the first is launched).
        fp8_repos: ids of FP8 checkpoints of it (linear layers in 8 bits, the embedding, LM
            head and norms in 16).
        checkpoint_dtype: the weight format of ``repos`` (``bf16``; ``fp8`` for DeepSeek's and
            Kimi's block-scaled checkpoints; ``mxfp4`` for gpt-oss's experts).
        contexts: ``max_position_embeddings`` of the ids whose config differs from the shape's.
        aliases: other names it is typed as.
        card: the total parameter count its model card (or the Hub's safetensors index) states,
            as written there (``"8.03B"``); ``card_source`` says where.
        launch: the repository a plan launches when ``repos`` is empty.
        note: what the shape leaves out, or a caveat.
    """

    shape: ModelShape
    repos: tuple[str, ...] = ()
    fp8_repos: tuple[str, ...] = ()
    checkpoint_dtype: str = "bf16"
    contexts: Mapping[str, int] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    card: str = ""
    card_source: str = ""
    launch: str | None = None
    note: str = ""

    @property
    def name(self) -> str:
        """The catalog name."""
        return self.shape.name

    @property
    def launch_repo(self) -> str | None:
        """The Hugging Face repository a plan launches for this model."""
        return self.repos[0] if self.repos else self.launch

    def dtype_of(self, repo: str) -> str:
        """The weight format of one of this model's checkpoints."""
        return "fp8" if repo in self.fp8_repos else self.checkpoint_dtype


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
    **extra: Any,
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
        **extra,
    )


def _as(shape: ModelShape, name: str, **changes: Any) -> ModelShape:
    """Another model with ``shape``'s dimensions (a fine-tune, a distillation)."""
    return replace(shape, name=name, **changes)


def _m(shape: ModelShape, *repos: str, card: str, source: str, **fields: Any) -> CatalogModel:
    return CatalogModel(shape=shape, repos=repos, card=card, card_source=source, **fields)


def _every(period: int, layers: int) -> int:
    """Local layers when every ``period``-th layer (the last of each group) is global."""
    return layers - layers // period


def _gemma3(
    name: str, layers: int, hidden: int, heads: int, kv: int, inter: int, **kw: Any
) -> ModelShape:
    """Gemma 3 text model: tied, four norms and q/k norms a layer, 5 of 6 layers local."""
    window = kw.pop("window", 1024)
    return _llama(
        name,
        layers,
        hidden,
        heads,
        kv,
        inter,
        kw.pop("vocab", 262208),
        max_pos=kw.pop("max_pos", 131072),
        tied=True,
        head_dim=kw.pop("head_dim", 256),
        qk_norm=True,
        post_norms=True,
        sliding_window=window,
        sliding_window_layers=_every(6, layers),
        **kw,
    )


def _siglip(text_hidden: int) -> int:
    """Gemma 3's SigLIP-400M vision encoder (its ``vision_config``) and projector."""
    vision = {
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "patch_size": 14,
    }
    return siglip_params(vision, {"hidden_size": text_hidden})


# Llama 3.2 Vision's vision_config (11B and 90B alike) and Llama 4's.
_MLLAMA_VISION = {
    "hidden_size": 1280,
    "image_size": 560,
    "intermediate_size": 5120,
    "num_hidden_layers": 32,
    "num_global_layers": 8,
    "patch_size": 14,
    "max_num_tiles": 4,
    "vision_output_dim": 7680,
    "supported_aspect_ratios": [[1, 1], [1, 2], [1, 3], [1, 4], [2, 1], [2, 2], [3, 1], [4, 1]],
}
_LLAMA4_VISION = {
    "hidden_size": 1408,
    "image_size": 336,
    "intermediate_size": 5632,
    "num_hidden_layers": 34,
    "patch_size": 14,
    "projector_input_dim": 4096,
    "projector_output_dim": 4096,
    "vision_output_dim": 4096,
}


def _mllama(name: str, layers: int, hidden: int, heads: int, inter: int) -> ModelShape:
    """Llama 3.2 Vision: a Llama 3.1 text model with a cross-attention layer every fifth
    (from the fourth), counted as decoder layers (same projections; their KV is counted too,
    as vLLM's encoder-decoder cache held it), and the tiled vision encoder."""
    cross = list(range(3, layers, 5))
    text = {"hidden_size": hidden, "num_attention_heads": heads, "cross_attention_layers": cross}
    return _llama(
        name,
        layers,
        hidden,
        heads,
        8,
        inter,
        128256,
        max_pos=131072,
        multimodal_params=mllama_params(_MLLAMA_VISION, text),
    )


def _qwen2(
    name: str, layers: int, hidden: int, heads: int, kv: int, inter: int, vocab: int, **kw: Any
) -> ModelShape:
    return _llama(name, layers, hidden, heads, kv, inter, vocab, qkv_bias=True, **kw)


def _qwen3(name: str, layers: int, hidden: int, heads: int, inter: int, **kw: Any) -> ModelShape:
    return _llama(
        name,
        layers,
        hidden,
        heads,
        8,
        inter,
        151936,
        max_pos=40960,
        head_dim=128,
        qk_norm=True,
        **kw,
    )


def _deepseek(
    name: str, layers: int, hidden: int, heads: int, inter: int, vocab: int, **kw: Any
) -> ModelShape:
    """A DeepSeek-V2/V3-style model: MLA (rotary 64, no-rope 128, value 128), routed and
    shared experts after ``dense_layers`` dense ones."""
    return _llama(
        name,
        layers,
        hidden,
        heads,
        heads,
        inter,
        vocab,
        head_dim=192,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        kv_lora_rank=512,
        **kw,
    )


_HUB = "the Hub's safetensors parameter count"

# --------------------------------------------------------------------------- Llama
LLAMA_2_7B = _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, max_pos=4096)
LLAMA_3_8B = _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, max_pos=8192)
LLAMA_31_8B = _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, max_pos=131072)
LLAMA_31_70B = _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, max_pos=131072)
LLAMA_4_SCOUT = replace(
    _llama("llama-4-scout", 48, 5120, 40, 8, 16384, 202048, max_pos=10485760, head_dim=128),
    num_experts=16,
    experts_per_token=1,
    expert_intermediate_size=8192,
    shared_expert_intermediate_size=8192,
    sliding_window=8192,
    sliding_window_layers=36,
)
# --------------------------------------------------------------------------- Mistral
MISTRAL_SMALL = _llama(
    "mistral-small-24b", 40, 5120, 32, 8, 32768, 131072, max_pos=32768, head_dim=128
)
# --------------------------------------------------------------------------- Qwen
QWEN25_05B = _qwen2("qwen2.5-0.5b", 24, 896, 14, 2, 4864, 151936, max_pos=32768, tied=True)
QWEN25_15B = _qwen2("qwen2.5-1.5b", 28, 1536, 12, 2, 8960, 151936, max_pos=131072, tied=True)
QWEN25_3B = _qwen2("qwen2.5-3b", 36, 2048, 16, 2, 11008, 151936, max_pos=32768, tied=True)
QWEN25_7B = _qwen2("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, max_pos=131072)
QWEN25_14B = _qwen2("qwen2.5-14b", 48, 5120, 40, 8, 13824, 152064, max_pos=131072)
QWEN25_32B = _qwen2("qwen2.5-32b", 64, 5120, 40, 8, 27648, 152064, max_pos=131072)
QWEN25_72B = _qwen2("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, max_pos=131072)
QWEN3_30B = replace(
    _qwen3("qwen3-30b-a3b", 48, 2048, 32, 6144),
    num_kv_heads=4,
    num_experts=128,
    experts_per_token=8,
    expert_intermediate_size=768,
)
QWEN3_235B = replace(
    _qwen3("qwen3-235b-a22b", 94, 4096, 64, 12288),
    num_kv_heads=4,
    num_experts=128,
    experts_per_token=8,
    expert_intermediate_size=1536,
)
# --------------------------------------------------------------------------- DeepSeek
DEEPSEEK_V3 = _deepseek(
    "deepseek-v3",
    61,
    7168,
    128,
    18432,
    129280,
    max_pos=163840,
    num_experts=256,
    experts_per_token=8,
    expert_intermediate_size=2048,
    shared_expert_intermediate_size=2048,
    dense_layers=3,
    router_bias=True,
    q_lora_rank=1536,
    mtp_layers=1,
)
GPT_OSS: dict[str, Any] = dict(
    expert_intermediate_size=2880,
    experts_per_token=4,
    expert_bias=True,
    router_bias=True,
    sliding_window=128,
    attention_sinks=True,
    o_bias=True,
)


def _instruct(org: str, *names: str, suffix: str = "-Instruct") -> tuple[str, ...]:
    """``org/NAME-Instruct`` and ``org/NAME`` for each name."""
    return tuple(r for n in names for r in (f"{org}/{n}{suffix}", f"{org}/{n}"))


CATALOG: tuple[CatalogModel, ...] = (
    # ----------------------------------------------------------------------- Llama 2 and 3
    # config: huggingface.co/meta-llama/Llama-2-{7b,13b,70b}-hf/blob/main/config.json
    _m(
        LLAMA_2_7B,
        "meta-llama/Llama-2-7b-chat-hf",
        "meta-llama/Llama-2-7b-hf",
        card="6.74B",
        source=_HUB,
    ),
    # config: huggingface.co/codellama/CodeLlama-7b-hf/blob/main/config.json: Llama 2 7B with a
    # 32,016-token vocabulary and 16,384 positions
    _m(
        _llama("codellama-7b", 32, 4096, 32, 32, 11008, 32016, max_pos=16384),
        "codellama/CodeLlama-7b-hf",
        "codellama/CodeLlama-7b-Instruct-hf",
        card="6.74B",
        source=_HUB,
    ),
    # config: huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0/blob/main/config.json: 22
    # layers, hidden 2048, 32 heads and 4 KV heads of 64, MLP 5632, vocabulary 32,000
    _m(
        _llama("tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, max_pos=2048),
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        "TinyLlama/TinyLlama_v1.1",
        card="1.1B",
        source=_HUB,
    ),
    _m(
        _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, max_pos=4096),
        "meta-llama/Llama-2-13b-chat-hf",
        "meta-llama/Llama-2-13b-hf",
        card="13.0B",
        source=_HUB,
    ),
    _m(
        _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, max_pos=4096),
        "meta-llama/Llama-2-70b-chat-hf",
        "meta-llama/Llama-2-70b-hf",
        card="69.0B",
        source=_HUB,
    ),
    # config: huggingface.co/meta-llama/Meta-Llama-3-{8B,70B}/blob/main/config.json
    _m(
        LLAMA_3_8B,
        *_instruct("meta-llama", "Meta-Llama-3-8B"),
        card="8.03B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Meta-Llama-3-8B-Instruct-FP8",
            "neuralmagic/Meta-Llama-3-8B-Instruct-FP8",
        ),
    ),
    _m(
        _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, max_pos=8192),
        *_instruct("meta-llama", "Meta-Llama-3-70B"),
        card="70.6B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Meta-Llama-3-70B-Instruct-FP8",
            "neuralmagic/Meta-Llama-3-70B-Instruct-FP8",
        ),
    ),
    # config: huggingface.co/meta-llama/Llama-3.1-{8B,70B,405B}/blob/main/config.json (same
    # shapes as Llama 3, 128k context); ids also under their first names (Meta-Llama-3.1-...)
    _m(
        LLAMA_31_8B,
        *_instruct("meta-llama", "Llama-3.1-8B", "Meta-Llama-3.1-8B"),
        card="8.03B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic",
            "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8",
            "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8",
            "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8-dynamic",
            "nvidia/Llama-3.1-8B-Instruct-FP8",
        ),
    ),
    _m(
        LLAMA_31_70B,
        *_instruct("meta-llama", "Llama-3.1-70B", "Meta-Llama-3.1-70B"),
        card="70.6B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8",
            "RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8-dynamic",
            "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8",
            "nvidia/Llama-3.1-70B-Instruct-FP8",
        ),
    ),
    _m(
        _llama("llama-3.1-405b", 126, 16384, 128, 8, 53248, 128256, max_pos=131072),
        *_instruct("meta-llama", "Llama-3.1-405B", "Meta-Llama-3.1-405B"),
        card="406B",
        source=_HUB,
        fp8_repos=(
            "meta-llama/Llama-3.1-405B-Instruct-FP8",
            "RedHatAI/Meta-Llama-3.1-405B-Instruct-FP8",
            "neuralmagic/Meta-Llama-3.1-405B-Instruct-FP8",
        ),
        note="meta-llama's FP8 checkpoint keeps the first and last layers in bf16",
    ),
    # config: huggingface.co/meta-llama/Llama-3.2-{1B,3B}/blob/main/config.json (tied)
    _m(
        _llama(
            "llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, max_pos=131072, tied=True, head_dim=64
        ),
        *_instruct("meta-llama", "Llama-3.2-1B"),
        card="1.24B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic",
            "neuralmagic/Llama-3.2-1B-Instruct-FP8-dynamic",
        ),
    ),
    _m(
        _llama(
            "llama-3.2-3b", 28, 3072, 24, 8, 8192, 128256, max_pos=131072, tied=True, head_dim=128
        ),
        *_instruct("meta-llama", "Llama-3.2-3B"),
        card="3.21B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Llama-3.2-3B-Instruct-FP8-dynamic",
            "neuralmagic/Llama-3.2-3B-Instruct-FP8-dynamic",
        ),
    ),
    # config: huggingface.co/meta-llama/Llama-3.2-{11B,90B}-Vision/blob/main/config.json
    # (MllamaForConditionalGeneration: text_config 40/100 layers, 8/20 of them cross-attention)
    _m(
        _mllama("llama-3.2-11b-vision", 40, 4096, 32, 14336),
        *_instruct("meta-llama", "Llama-3.2-11B-Vision"),
        card="10,670,220,835",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Llama-3.2-11B-Vision-Instruct-FP8-dynamic",
            "neuralmagic/Llama-3.2-11B-Vision-Instruct-FP8-dynamic",
        ),
        note="cross-attention layers are priced and cached as self-attention layers",
    ),
    _m(
        _mllama("llama-3.2-90b-vision", 100, 8192, 64, 28672),
        *_instruct("meta-llama", "Llama-3.2-90B-Vision"),
        card="88.6B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Llama-3.2-90B-Vision-Instruct-FP8-dynamic",
            "neuralmagic/Llama-3.2-90B-Vision-Instruct-FP8-dynamic",
        ),
        note="cross-attention layers are priced and cached as self-attention layers",
    ),
    # config: huggingface.co/meta-llama/Llama-3.3-70B-Instruct/blob/main/config.json (vendored
    # in ai-dynamo/aiconfigurator src/aiconfigurator/model_configs/)
    _m(
        _as(LLAMA_31_70B, "llama-3.3-70b"),
        "meta-llama/Llama-3.3-70B-Instruct",
        card="70.6B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
            "nvidia/Llama-3.3-70B-Instruct-FP8",
            "neuralmagic/Llama-3.3-70B-Instruct-FP8-dynamic",
        ),
    ),
    # ----------------------------------------------------------------------- Llama 4
    # config: huggingface.co/meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json: 16
    # experts, 1 per token, one shared expert, every layer; 3 of 4 layers attend within
    # 8,192-token chunks. This entry is the text model alone (kept as it was for the goldens);
    # the checkpoint's ids name llama-4-scout-17b-16e, which counts the vision encoder too.
    CatalogModel(
        LLAMA_4_SCOUT,
        launch="meta-llama/Llama-4-Scout-17B-16E-Instruct",
        card="107.77B",
        card_source="the text model of the 109B checkpoint (computed)",
        note="text model only; the checkpoint is llama-4-scout-17b-16e",
    ),
    _m(
        _as(
            LLAMA_4_SCOUT,
            "llama-4-scout-17b-16e",
            multimodal_params=llama4_params(_LLAMA4_VISION, {"hidden_size": 5120}),
        ),
        *_instruct("meta-llama", "Llama-4-Scout-17B-16E"),
        card="109B",
        source="the model card",
        fp8_repos=("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic",),
        note="chunked attention taken as a sliding window",
    ),
    # config: huggingface.co/meta-llama/Llama-4-Maverick-17B-128E/blob/main/config.json: 128
    # experts, 1 per token, one shared, on every other layer (interleave_moe_layer_step 2)
    _m(
        _as(
            LLAMA_4_SCOUT,
            "llama-4-maverick-17b-128e",
            num_experts=128,
            moe_layer_step=2,
            max_position_embeddings=1048576,
            multimodal_params=llama4_params(_LLAMA4_VISION, {"hidden_size": 5120}),
        ),
        *_instruct("meta-llama", "Llama-4-Maverick-17B-128E"),
        card="400B",
        source="the model card",
        fp8_repos=("meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8",),
        note="chunked attention taken as a sliding window",
    ),
    # ----------------------------------------------------------------------- Mistral
    # config: huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json; v0.2 has the
    # same shape (and no sliding window)
    _m(
        _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, max_pos=32768),
        "mistralai/Mistral-7B-Instruct-v0.1",
        "mistralai/Mistral-7B-v0.1",
        "mistralai/Mistral-7B-Instruct-v0.2",
        card="7.24B",
        source=_HUB,
        note="v0.1's 4,096-token sliding window (every layer) is not modelled",
    ),
    # config: huggingface.co/mistralai/Mistral-7B-v0.3/blob/main/config.json (vocab 32,768)
    _m(
        _llama("mistral-7b-v0.3", 32, 4096, 32, 8, 14336, 32768, max_pos=32768),
        "mistralai/Mistral-7B-Instruct-v0.3",
        "mistralai/Mistral-7B-v0.3",
        card="7.25B",
        source=_HUB,
    ),
    # config: huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
    _m(
        replace(
            _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, max_pos=32768),
            num_experts=8,
            experts_per_token=2,
            expert_intermediate_size=14336,
        ),
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "mistralai/Mixtral-8x7B-v0.1",
        card="46.7B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Mixtral-8x7B-Instruct-v0.1-FP8",
            "neuralmagic/Mixtral-8x7B-Instruct-v0.1-FP8",
        ),
    ),
    # config: huggingface.co/mistralai/Mixtral-8x22B-Instruct-v0.1/blob/main/config.json
    # (vocab 32,768; the base v0.1 checkpoint's 32,000 differs and is not listed)
    _m(
        replace(
            _llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, max_pos=65536),
            num_experts=8,
            experts_per_token=2,
            expert_intermediate_size=16384,
        ),
        "mistralai/Mixtral-8x22B-Instruct-v0.1",
        card="141B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Mixtral-8x22B-Instruct-v0.1-FP8",
            "neuralmagic/Mixtral-8x22B-Instruct-v0.1-FP8",
        ),
    ),
    # config: huggingface.co/mistralai/Mistral-Nemo-Instruct-2407/blob/main/config.json (its
    # 1,024,000 positions quoted in NVIDIA NeMo's MistralNeMoConfig12B; the base checkpoint
    # taken as the same)
    _m(
        _llama("mistral-nemo-12b", 40, 5120, 32, 8, 14336, 131072, max_pos=1024000, head_dim=128),
        "mistralai/Mistral-Nemo-Instruct-2407",
        "mistralai/Mistral-Nemo-Base-2407",
        card="12.2B",
        source=_HUB,
        fp8_repos=(
            "RedHatAI/Mistral-Nemo-Instruct-2407-FP8",
            "neuralmagic/Mistral-Nemo-Instruct-2407-FP8",
        ),
    ),
    # config: huggingface.co/mistralai/Mistral-Small-24B-Instruct-2501/blob/main/config.json
    _m(
        MISTRAL_SMALL,
        "mistralai/Mistral-Small-24B-Instruct-2501",
        "mistralai/Mistral-Small-24B-Base-2501",
        card="23.6B",
        source=_HUB,
        fp8_repos=("RedHatAI/Mistral-Small-24B-Instruct-2501-FP8-dynamic",),
    ),
    # config: huggingface.co/mistralai/Mistral-Small-3.1-24B-Instruct-2503/blob/main/config.json
    # (Mistral3ForConditionalGeneration: the 2501 text model, 128k context, a Pixtral encoder);
    # 3.2 (2506) has the same shape
    _m(
        _as(
            MISTRAL_SMALL,
            "mistral-small-3.1-24b",
            max_position_embeddings=131072,
            multimodal_params=pixtral_params(
                {
                    "hidden_size": 1024,
                    "intermediate_size": 4096,
                    "num_hidden_layers": 24,
                    "patch_size": 14,
                },
                {"hidden_size": 5120},
            ),
        ),
        "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
        "mistralai/Mistral-Small-3.1-24B-Base-2503",
        "mistralai/Mistral-Small-3.2-24B-Instruct-2506",
        card="24.0B",
        source=_HUB,
        aliases=("mistral-small-3.2-24b",),
        fp8_repos=("RedHatAI/Mistral-Small-3.1-24B-Instruct-2503-FP8-dynamic",),
    ),
    # ----------------------------------------------------------------------- Qwen2 and Qwen2.5
    # config: huggingface.co/Qwen/Qwen2-{0.5B,1.5B,7B,72B}/blob/main/config.json (q/k/v bias;
    # the instruct checkpoints say 32,768 positions); Qwen2-0.5B vendored in
    # rwth-i6/i6_experiments (users/juanola/.../qwen2_configs.py)
    _m(
        _as(QWEN25_05B, "qwen2-0.5b", max_position_embeddings=131072),
        *_instruct("Qwen", "Qwen2-0.5B"),
        card="494M",
        source=_HUB,
        contexts={"Qwen/Qwen2-0.5B-Instruct": 32768},
    ),
    _m(
        _as(QWEN25_15B, "qwen2-1.5b"),
        *_instruct("Qwen", "Qwen2-1.5B"),
        card="1.54B",
        source=_HUB,
        contexts={"Qwen/Qwen2-1.5B-Instruct": 32768},
    ),
    _m(
        _as(QWEN25_7B, "qwen2-7b"),
        *_instruct("Qwen", "Qwen2-7B"),
        card="7.62B",
        source=_HUB,
        contexts={"Qwen/Qwen2-7B-Instruct": 32768},
    ),
    _m(
        _as(QWEN25_72B, "qwen2-72b"),
        *_instruct("Qwen", "Qwen2-72B"),
        card="72.7B",
        source=_HUB,
        contexts={"Qwen/Qwen2-72B-Instruct": 32768},
    ),
    # config: huggingface.co/Qwen/Qwen2.5-{0.5B,...,72B}/blob/main/config.json
    _m(QWEN25_05B, *_instruct("Qwen", "Qwen2.5-0.5B"), card="494M", source=_HUB),
    _m(
        QWEN25_15B,
        *_instruct("Qwen", "Qwen2.5-1.5B"),
        card="1.54B",
        source=_HUB,
        contexts={"Qwen/Qwen2.5-1.5B-Instruct": 32768},
    ),
    _m(QWEN25_3B, *_instruct("Qwen", "Qwen2.5-3B"), card="3.09B", source=_HUB),
    _m(
        QWEN25_7B,
        *_instruct("Qwen", "Qwen2.5-7B"),
        card="7.62B",
        source=_HUB,
        contexts={"Qwen/Qwen2.5-7B-Instruct": 32768},
        fp8_repos=(
            "RedHatAI/Qwen2.5-7B-Instruct-FP8-dynamic",
            "neuralmagic/Qwen2.5-7B-Instruct-FP8-dynamic",
        ),
    ),
    _m(
        QWEN25_14B,
        *_instruct("Qwen", "Qwen2.5-14B"),
        card="14.8B",
        source=_HUB,
        contexts={"Qwen/Qwen2.5-14B-Instruct": 32768},
    ),
    _m(
        QWEN25_32B,
        *_instruct("Qwen", "Qwen2.5-32B"),
        card="32.8B",
        source=_HUB,
        contexts={"Qwen/Qwen2.5-32B-Instruct": 32768},
        fp8_repos=("RedHatAI/Qwen2.5-32B-Instruct-FP8-dynamic",),
    ),
    _m(
        QWEN25_72B,
        *_instruct("Qwen", "Qwen2.5-72B"),
        card="72.7B",
        source=_HUB,
        contexts={"Qwen/Qwen2.5-72B-Instruct": 32768},
        fp8_repos=(
            "RedHatAI/Qwen2.5-72B-Instruct-FP8-dynamic",
            "neuralmagic/Qwen2.5-72B-Instruct-FP8-dynamic",
        ),
    ),
    # config: huggingface.co/Qwen/Qwen2.5-Coder-{1.5B,7B,14B,32B}/blob/main/config.json (the
    # Qwen2.5 shapes, 32,768 positions)
    _m(
        _as(QWEN25_15B, "qwen2.5-coder-1.5b", max_position_embeddings=32768),
        *_instruct("Qwen", "Qwen2.5-Coder-1.5B"),
        card="1.54B",
        source=_HUB,
    ),
    _m(
        _as(QWEN25_7B, "qwen2.5-coder-7b", max_position_embeddings=32768),
        *_instruct("Qwen", "Qwen2.5-Coder-7B"),
        card="7.62B",
        source=_HUB,
    ),
    _m(
        _as(QWEN25_14B, "qwen2.5-coder-14b", max_position_embeddings=32768),
        *_instruct("Qwen", "Qwen2.5-Coder-14B"),
        card="14.8B",
        source=_HUB,
    ),
    _m(
        _as(QWEN25_32B, "qwen2.5-coder-32b", max_position_embeddings=32768),
        *_instruct("Qwen", "Qwen2.5-Coder-32B"),
        card="32.8B",
        source=_HUB,
    ),
    # config: huggingface.co/Qwen/QwQ-32B/blob/main/config.json
    _m(
        _as(QWEN25_32B, "qwq-32b", max_position_embeddings=40960),
        "Qwen/QwQ-32B",
        card="32.8B",
        source=_HUB,
    ),
    # ----------------------------------------------------------------------- Qwen3
    # config: huggingface.co/Qwen/Qwen3-{0.6B,1.7B,4B,8B,14B,32B}/blob/main/config.json (head
    # 128, q/k norms; the three smallest tied); Qwen's own FP8 checkpoints (128 x 128 blocks)
    _m(
        _qwen3("qwen3-0.6b", 28, 1024, 16, 3072, tied=True),
        "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-0.6B-Base",
        card="0.6B",
        source="the model card",
        fp8_repos=("Qwen/Qwen3-0.6B-FP8",),
    ),
    _m(
        _qwen3("qwen3-1.7b", 28, 2048, 16, 6144, tied=True),
        "Qwen/Qwen3-1.7B",
        "Qwen/Qwen3-1.7B-Base",
        card="1.7B",
        source="the model card",
        fp8_repos=("Qwen/Qwen3-1.7B-FP8",),
    ),
    _m(
        _qwen3("qwen3-4b", 36, 2560, 32, 9728, tied=True),
        "Qwen/Qwen3-4B",
        "Qwen/Qwen3-4B-Base",
        "Qwen/Qwen3-4B-Instruct-2507",
        "Qwen/Qwen3-4B-Thinking-2507",
        card="4.0B",
        source="the model card",
        fp8_repos=("Qwen/Qwen3-4B-FP8", "Qwen/Qwen3-4B-Instruct-2507-FP8"),
        contexts={
            "Qwen/Qwen3-4B-Instruct-2507": 262144,
            "Qwen/Qwen3-4B-Thinking-2507": 262144,
            "Qwen/Qwen3-4B-Instruct-2507-FP8": 262144,
        },
    ),
    _m(
        _qwen3("qwen3-8b", 36, 4096, 32, 12288),
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-8B-Base",
        card="8.2B",
        source="the model card",
        fp8_repos=("Qwen/Qwen3-8B-FP8", "RedHatAI/Qwen3-8B-FP8-dynamic"),
    ),
    _m(
        _qwen3("qwen3-14b", 40, 5120, 40, 17408),
        "Qwen/Qwen3-14B",
        "Qwen/Qwen3-14B-Base",
        card="14.8B",
        source="the model card",
        fp8_repos=("Qwen/Qwen3-14B-FP8", "RedHatAI/Qwen3-14B-FP8-dynamic"),
    ),
    _m(
        _qwen3("qwen3-32b", 64, 5120, 64, 25600),
        "Qwen/Qwen3-32B",
        card="32.8B",
        source="the model card",
        fp8_repos=("Qwen/Qwen3-32B-FP8", "RedHatAI/Qwen3-32B-FP8-dynamic"),
    ),
    # config: huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json and Qwen3-235B-A22B: 128
    # experts, 8 per token, no shared one; the 2507 updates have the same shapes, 262,144
    # positions
    _m(
        QWEN3_30B,
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-30B-A3B-Base",
        "Qwen/Qwen3-30B-A3B-Instruct-2507",
        "Qwen/Qwen3-30B-A3B-Thinking-2507",
        "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        card="30.5B",
        source="the model card",
        fp8_repos=("Qwen/Qwen3-30B-A3B-FP8", "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8"),
        contexts={
            "Qwen/Qwen3-30B-A3B-Instruct-2507": 262144,
            "Qwen/Qwen3-30B-A3B-Thinking-2507": 262144,
            "Qwen/Qwen3-Coder-30B-A3B-Instruct": 262144,
            "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8": 262144,
        },
    ),
    _m(
        QWEN3_235B,
        "Qwen/Qwen3-235B-A22B",
        "Qwen/Qwen3-235B-A22B-Instruct-2507",
        "Qwen/Qwen3-235B-A22B-Thinking-2507",
        card="235B",
        source="the model card",
        fp8_repos=("Qwen/Qwen3-235B-A22B-FP8", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"),
        contexts={
            "Qwen/Qwen3-235B-A22B-Instruct-2507": 262144,
            "Qwen/Qwen3-235B-A22B-Thinking-2507": 262144,
            "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8": 262144,
        },
    ),
    # config: huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json (Qwen2MoeForCausalLM:
    # 60 experts of 1,408, 4 per token, a gated shared expert of 5,632, q/k/v bias)
    _m(
        replace(
            _qwen2("qwen1.5-moe-a2.7b", 24, 2048, 16, 16, 5632, 151936, max_pos=8192),
            num_experts=60,
            experts_per_token=4,
            expert_intermediate_size=1408,
            shared_expert_intermediate_size=5632,
            shared_expert_gate=True,
        ),
        "Qwen/Qwen1.5-MoE-A2.7B-Chat",
        "Qwen/Qwen1.5-MoE-A2.7B",
        card="14.3B",
        source="the model card",
    ),
    # config: huggingface.co/Qwen/Qwen2-57B-A14B/blob/main/config.json (64 experts of 2,560,
    # 8 per token, a gated shared expert of 20,480)
    _m(
        replace(
            _qwen2("qwen2-57b-a14b", 28, 3584, 28, 4, 18944, 151936, max_pos=131072),
            num_experts=64,
            experts_per_token=8,
            expert_intermediate_size=2560,
            shared_expert_intermediate_size=20480,
            shared_expert_gate=True,
        ),
        *_instruct("Qwen", "Qwen2-57B-A14B"),
        card="57.4B",
        source=_HUB,
        contexts={"Qwen/Qwen2-57B-A14B-Instruct": 32768},
    ),
    # ----------------------------------------------------------------------- DeepSeek
    # config: huggingface.co/deepseek-ai/DeepSeek-R1-Distill-{Qwen,Llama}-*/blob/main/config.json
    # (Qwen2.5-Math-1.5B/7B, Qwen2.5-14B/32B, Llama-3.1-8B, Llama-3.3-70B shapes; the 1.5B's
    # head is not tied)
    _m(
        _as(QWEN25_15B, "deepseek-r1-distill-qwen-1.5b", tie_word_embeddings=False),
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        card="1.78B",
        source=_HUB,
    ),
    _m(
        _as(QWEN25_7B, "deepseek-r1-distill-qwen-7b"),
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        card="7.62B",
        source=_HUB,
    ),
    _m(
        _as(QWEN25_14B, "deepseek-r1-distill-qwen-14b"),
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
        card="14.8B",
        source=_HUB,
    ),
    _m(
        _as(QWEN25_32B, "deepseek-r1-distill-qwen-32b"),
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
        card="32.8B",
        source=_HUB,
        fp8_repos=("RedHatAI/DeepSeek-R1-Distill-Qwen-32B-FP8-dynamic",),
    ),
    _m(
        _as(LLAMA_31_8B, "deepseek-r1-distill-llama-8b"),
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        card="8.03B",
        source=_HUB,
        fp8_repos=("RedHatAI/DeepSeek-R1-Distill-Llama-8B-FP8-dynamic",),
    ),
    _m(
        _as(LLAMA_31_70B, "deepseek-r1-distill-llama-70b"),
        "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
        card="70.6B",
        source=_HUB,
        fp8_repos=("RedHatAI/DeepSeek-R1-Distill-Llama-70B-FP8-dynamic",),
    ),
    # config: huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json: MLA, one dense
    # layer, then 160 experts of 1,536 (6 per token) and two shared; V2.5 the same
    _m(
        _deepseek(
            "deepseek-v2",
            60,
            5120,
            128,
            12288,
            102400,
            max_pos=163840,
            q_lora_rank=1536,
            num_experts=160,
            experts_per_token=6,
            expert_intermediate_size=1536,
            shared_expert_intermediate_size=3072,
            dense_layers=1,
        ),
        "deepseek-ai/DeepSeek-V2-Chat",
        "deepseek-ai/DeepSeek-V2",
        "deepseek-ai/DeepSeek-V2.5",
        "deepseek-ai/DeepSeek-V2-Chat-0628",
        "deepseek-ai/DeepSeek-V2.5-1210",
        card="236B",
        source="the model card",
        aliases=("deepseek-v2.5",),
    ),
    # config: huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json: no q_lora_rank
    # (queries projected directly), 64 experts of 1,408 (6 per token), two shared
    _m(
        _deepseek(
            "deepseek-v2-lite",
            27,
            2048,
            16,
            10944,
            102400,
            max_pos=163840,
            num_experts=64,
            experts_per_token=6,
            expert_intermediate_size=1408,
            shared_expert_intermediate_size=2816,
            dense_layers=1,
        ),
        "deepseek-ai/DeepSeek-V2-Lite-Chat",
        "deepseek-ai/DeepSeek-V2-Lite",
        card="15.7B",
        source="the model card",
    ),
    # config: huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json: MLA, 3 dense
    # layers then 58 MoE layers of 256 routed experts (8 per token) and one shared; the
    # multi-token-prediction module is not counted; checkpoints in fp8 (128 x 128 blocks)
    _m(
        DEEPSEEK_V3,
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-V3-0324",
        "deepseek-ai/DeepSeek-V3-Base",
        card="671B",
        source="the model card",
        checkpoint_dtype="fp8",
    ),
    _m(
        _as(DEEPSEEK_V3, "deepseek-r1"),
        "deepseek-ai/DeepSeek-R1",
        "deepseek-ai/DeepSeek-R1-0528",
        "deepseek-ai/DeepSeek-R1-Zero",
        card="671B",
        source="the model card",
        checkpoint_dtype="fp8",
    ),
    # config: huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json (vendored in
    # ai-dynamo/aiconfigurator src/aiconfigurator/model_configs/): DeepSeek-V3's architecture
    # with 64 heads, one dense layer, 384 experts, no MTP; fp8 checkpoints
    _m(
        _deepseek(
            "kimi-k2",
            61,
            7168,
            64,
            18432,
            163840,
            max_pos=131072,
            q_lora_rank=1536,
            num_experts=384,
            experts_per_token=8,
            expert_intermediate_size=2048,
            shared_expert_intermediate_size=2048,
            dense_layers=1,
            router_bias=True,
        ),
        "moonshotai/Kimi-K2-Instruct",
        "moonshotai/Kimi-K2-Base",
        "moonshotai/Kimi-K2-Instruct-0905",
        card="1,026,408,232,448",
        source=_HUB,
        checkpoint_dtype="fp8",
        contexts={"moonshotai/Kimi-K2-Instruct-0905": 262144},
    ),
    # ----------------------------------------------------------------------- gpt-oss
    # config: huggingface.co/openai/gpt-oss-{20b,120b}/blob/main/config.json: experts with
    # biases, alternating 128-token sliding-window and full attention, sinks; MXFP4 experts
    _m(
        replace(
            _llama(
                "gpt-oss-20b",
                24,
                2880,
                64,
                8,
                2880,
                201088,
                max_pos=131072,
                head_dim=64,
                qkv_bias=True,
            ),
            num_experts=32,
            sliding_window_layers=12,
            **GPT_OSS,
        ),
        "openai/gpt-oss-20b",
        card="20.9B",
        source=_HUB,
        checkpoint_dtype="mxfp4",
    ),
    _m(
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
            sliding_window_layers=18,
            **GPT_OSS,
        ),
        "openai/gpt-oss-120b",
        card="116.8B",
        source="the model card",
        checkpoint_dtype="mxfp4",
    ),
    # ----------------------------------------------------------------------- Gemma
    # config: huggingface.co/google/gemma-7b/blob/main/config.json (GemmaForCausalLM): 28
    # layers, hidden 3072, 16 heads of 256 (multi-head), GeGLU MLP of 24,576, vocabulary
    # 256,000, tied; its card: 8.54B
    _m(
        _llama("gemma-7b", 28, 3072, 16, 16, 24576, 256000, max_pos=8192, tied=True, head_dim=256),
        "google/gemma-7b",
        "google/gemma-7b-it",
        card="8.54B",
        source=_HUB,
    ),
    # config: huggingface.co/google/gemma-2-{2b,9b,27b}/blob/main/config.json: tied, head 256
    # (27B: 128), four norms a layer, every other layer (from the first) within 4,096 tokens;
    # soft-capping costs nothing
    _m(
        _llama(
            "gemma-2-2b",
            26,
            2304,
            8,
            4,
            9216,
            256000,
            max_pos=8192,
            tied=True,
            head_dim=256,
            post_norms=True,
            sliding_window=4096,
            sliding_window_layers=13,
        ),
        "google/gemma-2-2b-it",
        "google/gemma-2-2b",
        card="2.61B",
        source=_HUB,
    ),
    _m(
        _llama(
            "gemma-2-9b",
            42,
            3584,
            16,
            8,
            14336,
            256000,
            max_pos=8192,
            tied=True,
            head_dim=256,
            post_norms=True,
            sliding_window=4096,
            sliding_window_layers=21,
        ),
        "google/gemma-2-9b-it",
        "google/gemma-2-9b",
        card="9.24B",
        source=_HUB,
    ),
    _m(
        _llama(
            "gemma-2-27b",
            46,
            4608,
            32,
            16,
            36864,
            256000,
            max_pos=8192,
            tied=True,
            head_dim=128,
            post_norms=True,
            sliding_window=4096,
            sliding_window_layers=23,
        ),
        "google/gemma-2-27b-it",
        "google/gemma-2-27b",
        card="27.2B",
        source=_HUB,
    ),
    # config: huggingface.co/google/gemma-3-{1b,4b,12b,27b}-it/blob/main/config.json: q/k
    # norms, four norms a layer, 5 of 6 layers within 512 (1B) or 1,024 tokens; 4B and up are
    # Gemma3ForConditionalGeneration with a SigLIP encoder and the text_config defaults (vocab
    # 262,208, 8 heads, 4 KV heads, head 256; configs vendored in tests of several
    # repositories, found by "sliding_window_pattern": 6)
    _m(
        _gemma3("gemma-3-1b", 26, 1152, 4, 1, 6912, vocab=262144, max_pos=32768, window=512),
        "google/gemma-3-1b-it",
        "google/gemma-3-1b-pt",
        card="999,885,952",
        source=_HUB,
    ),
    _m(
        _gemma3("gemma-3-4b", 34, 2560, 8, 4, 10240, multimodal_params=_siglip(2560)),
        "google/gemma-3-4b-it",
        "google/gemma-3-4b-pt",
        card="4,300,079,472",
        source=_HUB,
        fp8_repos=("RedHatAI/gemma-3-4b-it-FP8-dynamic",),
    ),
    _m(
        _gemma3("gemma-3-12b", 48, 3840, 16, 8, 15360, multimodal_params=_siglip(3840)),
        "google/gemma-3-12b-it",
        "google/gemma-3-12b-pt",
        card="12,187,325,040",
        source=_HUB,
        fp8_repos=("RedHatAI/gemma-3-12b-it-FP8-dynamic",),
    ),
    _m(
        _gemma3(
            "gemma-3-27b", 62, 5376, 32, 16, 21504, head_dim=128, multimodal_params=_siglip(5376)
        ),
        "google/gemma-3-27b-it",
        "google/gemma-3-27b-pt",
        card="27,432,406,640",
        source=_HUB,
        fp8_repos=("RedHatAI/gemma-3-27b-it-FP8-dynamic",),
    ),
    # ----------------------------------------------------------------------- Phi
    # config: huggingface.co/microsoft/Phi-3-mini-{4k,128k}-instruct/blob/main/config.json
    # (fused qkv and gate/up projections, the same counts); the 4k model attends within
    # 2,047 tokens on every layer, the 128k one's window exceeds its context
    _m(
        _llama(
            "phi-3-mini-4k",
            32,
            3072,
            32,
            32,
            8192,
            32064,
            max_pos=4096,
            sliding_window=2047,
            sliding_window_layers=32,
        ),
        "microsoft/Phi-3-mini-4k-instruct",
        card="3.82B",
        source=_HUB,
    ),
    _m(
        _llama("phi-3-mini-128k", 32, 3072, 32, 32, 8192, 32064, max_pos=131072),
        "microsoft/Phi-3-mini-128k-instruct",
        card="3.82B",
        source=_HUB,
    ),
    # config: huggingface.co/microsoft/Phi-3.5-mini-instruct/blob/main/config.json
    _m(
        _llama("phi-3.5-mini", 32, 3072, 32, 32, 8192, 32064, max_pos=131072),
        "microsoft/Phi-3.5-mini-instruct",
        card="3.82B",
        source=_HUB,
    ),
    # config: huggingface.co/microsoft/Phi-3-medium-{4k,128k}-instruct/blob/main/config.json
    _m(
        _llama(
            "phi-3-medium-4k",
            40,
            5120,
            40,
            10,
            17920,
            32064,
            max_pos=4096,
            sliding_window=2047,
            sliding_window_layers=40,
        ),
        "microsoft/Phi-3-medium-4k-instruct",
        card="14.0B",
        source=_HUB,
    ),
    _m(
        _llama("phi-3-medium-128k", 40, 5120, 40, 10, 17920, 32064, max_pos=131072),
        "microsoft/Phi-3-medium-128k-instruct",
        card="14.0B",
        source=_HUB,
    ),
    # config: huggingface.co/microsoft/Phi-3.5-MoE-instruct/blob/main/config.json
    # (PhiMoEForCausalLM: 16 experts of 6,400, 2 per token; biases on q/k/v/o and the LM head,
    # LayerNorms with biases)
    _m(
        replace(
            _llama(
                "phi-3.5-moe",
                32,
                4096,
                32,
                8,
                6400,
                32064,
                max_pos=131072,
                qkv_bias=True,
                o_bias=True,
                norm_bias=True,
                lm_head_bias=True,
            ),
            num_experts=16,
            experts_per_token=2,
            expert_intermediate_size=6400,
        ),
        "microsoft/Phi-3.5-MoE-instruct",
        card="41.9B",
        source=_HUB,
    ),
    # config: huggingface.co/microsoft/phi-2/blob/main/config.json (PhiForCausalLM: biased
    # q/k/v/dense, a GELU fc1/fc2 MLP, one LayerNorm a layer, a biased LM head; hf_config.PHI_FIELDS)
    _m(
        _llama(
            "phi-2",
            32,
            2560,
            32,
            32,
            10240,
            51200,
            max_pos=2048,
            qkv_bias=True,
            o_bias=True,
            gated_mlp=False,
            norm_bias=True,
            lm_head_bias=True,
        ),
        "microsoft/phi-2",
        card="2.78B",
        source=_HUB,
    ),
    # config: huggingface.co/microsoft/phi-4/blob/main/config.json and Phi-4-mini-instruct
    # (tied, 200k vocabulary); Phi3ForCausalLM both
    _m(
        _llama("phi-4", 40, 5120, 40, 10, 17920, 100352, max_pos=16384),
        "microsoft/phi-4",
        "microsoft/Phi-4-reasoning",
        "microsoft/Phi-4-reasoning-plus",
        card="14.7B",
        source=_HUB,
        fp8_repos=("RedHatAI/phi-4-FP8-dynamic",),
        contexts={"microsoft/Phi-4-reasoning": 32768, "microsoft/Phi-4-reasoning-plus": 32768},
    ),
    _m(
        _llama("phi-4-mini", 32, 3072, 24, 8, 8192, 200064, max_pos=131072, tied=True),
        "microsoft/Phi-4-mini-instruct",
        "microsoft/Phi-4-mini-reasoning",
        card="3.84B",
        source=_HUB,
    ),
    # ----------------------------------------------------------------------- Granite
    # config: huggingface.co/ibm-granite/granite-3.1-{2b,8b}-instruct/blob/main/config.json
    # (GraniteForCausalLM: tied; the multipliers cost nothing); 3.0 the same at 4,096
    # positions, 3.2 the same
    _m(
        _llama("granite-3.1-2b", 40, 2048, 32, 8, 8192, 49155, max_pos=131072, tied=True),
        "ibm-granite/granite-3.1-2b-instruct",
        "ibm-granite/granite-3.1-2b-base",
        "ibm-granite/granite-3.0-2b-instruct",
        "ibm-granite/granite-3.0-2b-base",
        "ibm-granite/granite-3.2-2b-instruct",
        card="2.53B",
        source=_HUB,
        contexts={
            "ibm-granite/granite-3.0-2b-instruct": 4096,
            "ibm-granite/granite-3.0-2b-base": 4096,
        },
    ),
    _m(
        _llama("granite-3.1-8b", 40, 4096, 32, 8, 12800, 49155, max_pos=131072, tied=True),
        "ibm-granite/granite-3.1-8b-instruct",
        "ibm-granite/granite-3.1-8b-base",
        "ibm-granite/granite-3.0-8b-instruct",
        "ibm-granite/granite-3.0-8b-base",
        "ibm-granite/granite-3.2-8b-instruct",
        card="8.17B",
        source=_HUB,
        contexts={
            "ibm-granite/granite-3.0-8b-instruct": 4096,
            "ibm-granite/granite-3.0-8b-base": 4096,
        },
        fp8_repos=("RedHatAI/granite-3.1-8b-instruct-FP8-dynamic",),
    ),
    # ----------------------------------------------------------------------- GLM
    # config: huggingface.co/THUDM/GLM-4-9B-0414/blob/main/config.json (Glm4ForCausalLM: two
    # KV heads, q/k/v bias, four norms a layer)
    _m(
        _llama(
            "glm-4-9b",
            40,
            4096,
            32,
            2,
            13696,
            151552,
            max_pos=32768,
            head_dim=128,
            qkv_bias=True,
            post_norms=True,
        ),
        "THUDM/GLM-4-9B-0414",
        "zai-org/GLM-4-9B-0414",
        "THUDM/GLM-Z1-9B-0414",
        card="9.4B",
        source=_HUB,
    ),
    # config: huggingface.co/zai-org/GLM-4.5/blob/main/config.json (Glm4MoeForCausalLM: 3 dense
    # layers, 160 experts of 1,536, 8 per token, one shared, q/k norms, q/k/v bias, one MTP
    # layer not counted) and GLM-4.5-Air (read in a vendored ms-swift model_config: 1 dense
    # layer, 128 experts of 1,408, no q/k norm); GLM-4.6 has 4.5's shape at 202,752 positions
    _m(
        replace(
            _llama(
                "glm-4.5",
                92,
                5120,
                96,
                8,
                12288,
                151552,
                max_pos=131072,
                head_dim=128,
                qkv_bias=True,
                qk_norm=True,
            ),
            num_experts=160,
            experts_per_token=8,
            expert_intermediate_size=1536,
            shared_expert_intermediate_size=1536,
            dense_layers=3,
            router_bias=True,
            mtp_layers=1,
        ),
        "zai-org/GLM-4.5",
        "zai-org/GLM-4.6",
        card="355B",
        source="the model card",
        fp8_repos=("zai-org/GLM-4.5-FP8", "zai-org/GLM-4.6-FP8"),
        contexts={"zai-org/GLM-4.6": 202752, "zai-org/GLM-4.6-FP8": 202752},
    ),
    _m(
        replace(
            _llama(
                "glm-4.5-air",
                46,
                4096,
                96,
                8,
                10944,
                151552,
                max_pos=131072,
                head_dim=128,
                qkv_bias=True,
            ),
            num_experts=128,
            experts_per_token=8,
            expert_intermediate_size=1408,
            shared_expert_intermediate_size=1408,
            dense_layers=1,
            router_bias=True,
            mtp_layers=1,
        ),
        "zai-org/GLM-4.5-Air",
        card="106B",
        source="the model card",
        fp8_repos=("zai-org/GLM-4.5-Air-FP8",),
    ),
    # ----------------------------------------------------------------------- others
    # config: huggingface.co/LGAI-EXAONE/EXAONE-4.0-32B/blob/main/config.json (vendored in
    # NVIDIA/TensorRT-LLM's Exaone4 test): q/k norms, norms after attention and MLP (two),
    # three of four layers within 4,096 tokens
    _m(
        _llama(
            "exaone-4.0-32b",
            64,
            5120,
            40,
            8,
            27392,
            102400,
            max_pos=131072,
            head_dim=128,
            qk_norm=True,
            sliding_window=4096,
            sliding_window_layers=48,
        ),
        "LGAI-EXAONE/EXAONE-4.0-32B",
        card="32.0B",
        source="the model card",
        fp8_repos=("LGAI-EXAONE/EXAONE-4.0-32B-FP8",),
    ),
    # config: huggingface.co/ByteDance-Seed/Seed-OSS-36B-Instruct/blob/main/config.json
    # (SeedOssForCausalLM: q/k/v bias, no o bias; vendored in a Swift port's test)
    _m(
        _llama(
            "seed-oss-36b",
            64,
            5120,
            80,
            8,
            27648,
            155136,
            max_pos=524288,
            head_dim=128,
            qkv_bias=True,
        ),
        "ByteDance-Seed/Seed-OSS-36B-Instruct",
        "ByteDance-Seed/Seed-OSS-36B-Base",
        card="36.2B",
        source=_HUB,
    ),
)

_CATALOG: dict[str, ModelShape] = {entry.name: entry.shape for entry in CATALOG}
MODEL_NAMES: tuple[str, ...] = tuple(_CATALOG)
