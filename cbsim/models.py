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
(Qwen2 adds biases on the q/k/v projections), and the mixture-of-experts and latent-attention
models built on it:

* **Mixture of experts** (Mixtral, Qwen3-MoE, DeepSeek-V3, gpt-oss, Llama 4): in an MoE layer
  the MLP is ``num_experts`` routed experts of width ``expert_intermediate_size``, a router
  choosing ``experts_per_token`` of them for each token, and optionally shared experts every
  token goes through; the other layers (DeepSeek's first three, every other one in Llama 4
  Maverick) keep a dense MLP of ``intermediate_size``. All experts' weights sit in memory; a
  token reads only its own experts' (:meth:`ModelShape.active_param_count`).
* **Multi-head latent attention** (DeepSeek-V2/V3, Kimi K2): queries through a low-rank
  ``q_lora_rank`` bottleneck, keys and values decompressed per head from one
  ``kv_lora_rank`` latent per token, which (with a ``qk_rope_head_dim`` rotary key shared by
  all heads) is all the KV cache holds.
* **Local attention** (gpt-oss, Llama 4): ``sliding_window_layers`` layers attend to the last
  ``sliding_window`` tokens only; gpt-oss adds per-head attention-sink logits and biases on
  every attention projection.

The catalog holds the exact values of the Hugging Face ``config.json`` of each checkpoint;
:func:`get_model` also accepts a path to any such ``config.json`` (or to the directory holding
it) of an architecture listed in :data:`ARCHITECTURES`. Anything else is refused, never read as
something it is not.

The shape lives in :mod:`cbsim.model_shape`, the catalog's data table in :mod:`cbsim.model_catalog`
and the reading of ``config.json`` files in :mod:`cbsim.hf_config`; this module is the lookup by
name or path (:func:`get_model`), and their names are importable from here too.
"""

from __future__ import annotations

from pathlib import Path

from cbsim.errors import canonical_name, unknown_name
from cbsim.hf_config import (
    ARCHITECTURES,
    DENSE_ARCHITECTURES,
    DENSE_MODEL_TYPES,
    MODEL_TYPES,
    MOE_ARCHITECTURES,
    MOE_MODEL_TYPES,
    MOE_UNSUPPORTED,
    _load_config_file,
    check_architecture,
    model_from_hf_config,
)
from cbsim.model_catalog import _CATALOG, MODEL_NAMES
from cbsim.model_shape import ModelShape, expert_parallel_problem

__all__ = [
    "ARCHITECTURES",
    "DENSE_ARCHITECTURES",
    "DENSE_MODEL_TYPES",
    "MODEL_NAMES",
    "MODEL_TYPES",
    "MOE_ARCHITECTURES",
    "MOE_MODEL_TYPES",
    "MOE_UNSUPPORTED",
    "ModelShape",
    "check_architecture",
    "expert_parallel_problem",
    "get_model",
    "model_from_hf_config",
]


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
