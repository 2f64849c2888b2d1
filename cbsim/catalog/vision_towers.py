"""The weights a vision-language checkpoint loads beside its text model.

A multimodal checkpoint served for text still loads its vision encoder and the projector that
maps image features into the text model's width: they take GPU memory (and so KV-cache room)
although no text token reads them. Each function here counts them exactly, as the Hugging Face
model builds them, from the checkpoint's ``vision_config`` (missing keys take the Hugging Face
defaults of that config class) and the text model's width:

* :func:`siglip_params`: Gemma 3's SigLIP encoder and its one-matrix projector;
* :func:`pixtral_params`: Mistral Small 3.1's Pixtral encoder and its patch-merging projector;
* :func:`mllama_params`: Llama 3.2 Vision's tiled encoder (local and gated global layers) and
  projector, plus what its text model adds for images (the cross-attention layers' gates and
  q/k norms, eight image-token embeddings);
* :func:`llama4_params`: Llama 4's encoder, pixel-shuffle adapter and projector.

:data:`VISION_TOWERS` maps each architecture's ``model_type`` to its counter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cbsim.common.errors import CbsimError

VisionCounter = Callable[[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]], int]
"""A counter of ``(vision_config, text_config, the whole config)``."""
EMPTY: Mapping[str, Any] = {}


def _int(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value > 10**7:
        raise CbsimError(f"must be a positive integer, got {value!r}", field=key)
    return value


def _layer_norm(width: int) -> int:
    return 2 * width


def _linear(inputs: int, outputs: int, bias: bool) -> int:
    return inputs * outputs + (outputs if bias else 0)


def siglip_params(
    vision: Mapping[str, Any], text: Mapping[str, Any], outer: Mapping[str, Any] = EMPTY
) -> int:
    """Gemma 3: a SigLIP encoder (conv patch embedding with bias, learned positions, layers of
    biased attention and a biased two-matrix MLP, LayerNorms, no pooling head) and the
    projector (a vision-to-text matrix after an RMSNorm)."""
    width = _int(vision, "hidden_size", 768)
    inner = _int(vision, "intermediate_size", 3072)
    layers = _int(vision, "num_hidden_layers", 12)
    patch = _int(vision, "patch_size", 16)
    image = _int(vision, "image_size", 224)
    channels = _int(vision, "num_channels", 3)
    embedding = channels * patch * patch * width + width + (image // patch) ** 2 * width
    layer = (
        4 * _linear(width, width, True)
        + _linear(width, inner, True)
        + _linear(inner, width, True)
        + 2 * _layer_norm(width)
    )
    if vision.get("vision_use_head"):
        raise CbsimError("a SigLIP pooling head is not counted", field="vision_use_head")
    encoder = embedding + layers * layer + _layer_norm(width)
    return encoder + width * _int(text, "hidden_size", 2560) + width


def pixtral_params(
    vision: Mapping[str, Any], text: Mapping[str, Any], outer: Mapping[str, Any] = EMPTY
) -> int:
    """Mistral Small 3.1/3.2: a Pixtral encoder (conv patch embedding without bias, RMSNorms,
    unbiased attention and gated MLP, rotary positions) and the projector (an RMSNorm, a
    ``spatial_merge_size``-squared patch merger, two matrices into the text width, biased when
    ``multimodal_projector_bias``)."""
    merge = _int(outer, "spatial_merge_size", 2)
    bias = bool(outer.get("multimodal_projector_bias", False))
    width = _int(vision, "hidden_size", 1024)
    inner = _int(vision, "intermediate_size", 4096)
    layers = _int(vision, "num_hidden_layers", 24)
    patch = _int(vision, "patch_size", 16)
    channels = _int(vision, "num_channels", 3)
    hidden = _int(text, "hidden_size", 5120)
    layer = 4 * width * width + 3 * width * inner + 2 * width
    encoder = channels * patch * patch * width + width + layers * layer
    projector = width + merge * merge * width * width
    projector += _linear(width, hidden, bias) + _linear(hidden, hidden, bias)
    return encoder + projector


def mllama_params(
    vision: Mapping[str, Any], text: Mapping[str, Any], outer: Mapping[str, Any] = EMPTY
) -> int:
    """Llama 3.2 Vision: the tiled encoder (patch embedding, class token, gated position and
    tile embeddings, local layers and gated global layers of biased-MLP LayerNorm transformer)
    and the projector from the concatenated intermediate features, plus the text model's image
    parts: each cross-attention layer's two gates and q/k norms, eight image-token embeddings."""
    width = _int(vision, "hidden_size", 1280)
    inner = _int(vision, "intermediate_size", 5120)
    local = _int(vision, "num_hidden_layers", 32)
    global_layers = _int(vision, "num_global_layers", 8)
    patch = _int(vision, "patch_size", 14)
    image = _int(vision, "image_size", 448)
    channels = _int(vision, "num_channels", 3)
    tiles = _int(vision, "max_num_tiles", 4)
    ratios = vision.get("supported_aspect_ratios")
    ratio_ids = (len(ratios) if isinstance(ratios, list) else 8) + 1
    output = _int(vision, "vision_output_dim", 7680)
    patches = (image // patch) ** 2 + 1
    embedding = (
        channels * patch * patch * width  # patch embedding, no bias
        + width  # class embedding
        + 1 + patches * width + ratio_ids * tiles * patches * width  # gated position, tile
        + 2 * (ratio_ids * tiles * width + 1)  # gated pre- and post-tile embeddings
        + 2 * _layer_norm(width)
    )  # fmt: skip
    layer = 4 * width * width + _linear(width, inner, True) + _linear(inner, width, True)
    layer += 2 * _layer_norm(width)
    encoder = embedding + local * layer + global_layers * (layer + 2)
    hidden = _int(text, "hidden_size", 4096)
    heads = _int(text, "num_attention_heads", 32)
    head_dim = hidden // heads
    cross = text.get("cross_attention_layers")
    cross_layers = len(cross) if isinstance(cross, list) else 8
    text_parts = cross_layers * (2 * head_dim + 2) + 8 * hidden
    return encoder + _linear(output, hidden, True) + text_parts


def llama4_params(
    vision: Mapping[str, Any], text: Mapping[str, Any], outer: Mapping[str, Any] = EMPTY
) -> int:
    """Llama 4: the encoder (unbiased patch projection, class token, learned positions,
    LayerNorm layers of biased attention and MLP), the pixel-shuffle adapter's two matrices and
    the projector into the text width."""
    width = _int(vision, "hidden_size", 768)
    inner = _int(vision, "intermediate_size", 3072)
    layers = _int(vision, "num_hidden_layers", 34)
    patch = _int(vision, "patch_size", 14)
    image = _int(vision, "image_size", 448)
    channels = _int(vision, "num_channels", 3)
    adapter_in = _int(vision, "projector_input_dim", 4096)
    adapter_out = _int(vision, "projector_output_dim", 4096)
    output = _int(vision, "vision_output_dim", 7680)
    patches = (image // patch) ** 2 + 1
    embedding = channels * patch * patch * width + width + patches * width
    layer = 4 * _linear(width, width, True) + _linear(width, inner, True)
    layer += _linear(inner, width, True) + 2 * _layer_norm(width)
    adapter = inner * adapter_in + adapter_out * adapter_out
    encoder = embedding + 2 * _layer_norm(width) + layers * layer + adapter
    return encoder + output * _int(text, "hidden_size", 5120)


VISION_TOWERS: dict[str, VisionCounter] = {
    "gemma3": siglip_params,
    "mistral3": pixtral_params,
    "mllama": mllama_params,
    "llama4": llama4_params,
}
"""The vision-tower counter of each multimodal ``model_type``."""
