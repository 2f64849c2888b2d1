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

The catalog holds the exact values of the Hugging Face ``config.json`` of each checkpoint, and
answers to the names people type, without network: its own names (``llama-3.1-70b``), the
Hugging Face ids of the checkpoints (``meta-llama/Llama-3.1-70B-Instruct``, FP8 ones such as
``RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic`` too, whose weight format
:func:`checkpoint_dtype` tells), an id without its organisation (``Llama-3.1-70B-Instruct``)
where only one checkpoint has that name, and aliases; all compared without case.
:func:`get_model` also accepts a path to any such ``config.json`` (or to the directory holding
it) of an architecture listed in :data:`ARCHITECTURES`. Anything else is refused, never read as
something it is not.

The shape lives in :mod:`cbsim.catalog.model_shape`, the catalog's data table in :mod:`cbsim.catalog.model_catalog`
and the reading of ``config.json`` files in :mod:`cbsim.catalog.hf_config`; this module is the lookup by
name or path (:func:`get_model`), and their names are importable from here too.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from pathlib import Path

from cbsim.catalog.hf_config import (
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
from cbsim.catalog.model_catalog import _CATALOG, CATALOG, MODEL_NAMES, CatalogModel
from cbsim.catalog.model_shape import ModelShape, expert_parallel_problem
from cbsim.catalog.quantization import config_weight_format, split_quantized_id
from cbsim.common.errors import CbsimError, squashed_name

__all__ = [
    "ARCHITECTURES",
    "DENSE_ARCHITECTURES",
    "DENSE_MODEL_TYPES",
    "MODEL_NAMES",
    "MODEL_TYPES",
    "MOE_ARCHITECTURES",
    "MOE_MODEL_TYPES",
    "MOE_UNSUPPORTED",
    "CatalogMatch",
    "ModelShape",
    "check_architecture",
    "checkpoint_dtype",
    "checkpoint_format",
    "expert_parallel_problem",
    "find_model",
    "get_model",
    "hf_repository",
    "model_from_hf_config",
    "model_spelling",
    "nearest_models",
    "unknown_model",
]


@dataclass(frozen=True, slots=True)
class CatalogMatch:
    """What a typed name found in the catalog: the entry, the checkpoint when a Hugging Face
    id was typed (in the catalog's spelling), and that checkpoint's shape (the entry's, with
    the checkpoint's own context length)."""

    entry: CatalogModel
    repo: str | None
    shape: ModelShape
    quantized: str | None = None

    @property
    def spelling(self) -> str:
        """The catalog's spelling of what was typed: the id, or the catalog name."""
        return self.repo or self.entry.name

    @property
    def checkpoint_dtype(self) -> str:
        """The checkpoint's weight format (the entry's main checkpoints' for a name; an integer
        checkpoint's, ``int4`` or ``int8``, for the id of one)."""
        if self.quantized is not None:
            return self.quantized
        return self.entry.dtype_of(self.repo) if self.repo else self.entry.checkpoint_dtype


def _build_index() -> dict[str, CatalogMatch]:
    """Every name the catalog answers to, folded, with what it finds: names and aliases,
    Hugging Face ids, and ids without their organisation where that is unambiguous."""
    index: dict[str, CatalogMatch] = {}
    short: dict[str, CatalogMatch | None] = {}
    for entry in CATALOG:
        for name in (entry.name, *entry.aliases):
            index[name.casefold()] = CatalogMatch(entry, None, entry.shape)
        for repo in (*entry.repos, *entry.fp8_repos):
            context = entry.contexts.get(repo)
            shape = entry.shape
            if context is not None:
                shape = replace(shape, max_position_embeddings=context)
            match = CatalogMatch(entry, repo, shape)
            index[repo.casefold()] = match
            base = repo.rsplit("/", 1)[-1].casefold()
            seen: CatalogMatch | None = short.get(base, match)
            short[base] = match if seen is not None and seen.entry is entry else None
    for base, unique in short.items():
        if unique is not None and base not in index:
            index[base] = unique
    return index


_INDEX = _build_index()
REPOSITORIES: tuple[str, ...] = tuple(
    repo for entry in CATALOG for repo in (*entry.repos, *entry.fp8_repos)
)
"""Every Hugging Face id the catalog knows, in catalog order."""


def find_model(name: str) -> CatalogMatch | None:
    """The catalog entry ``name`` (a catalog name, alias or Hugging Face id, any case) names,
    or None. The id of an integer-quantized checkpoint of a catalog model (its base id or
    repository name with a quantization suffix, ``Qwen/Qwen3-14B-AWQ``,
    ``RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8``; see
    :func:`cbsim.catalog.quantization.split_quantized_id`) finds that model, in its format."""
    found = _INDEX.get(name.casefold())
    if found is not None:
        return found
    split = split_quantized_id(name)
    if split is None:
        return None
    base, weight_format = split
    match = _INDEX.get(base.casefold()) or _INDEX.get(base.rsplit("/", 1)[-1].casefold())
    if match is None:
        return None
    return CatalogMatch(match.entry, name, match.shape, weight_format)


def checkpoint_format(name_or_path: str) -> str | None:
    """The weight format of the checkpoint a model name, id or ``config.json`` path names
    (:func:`checkpoint_dtype` for the catalog's; a config's ``quantization_config``, else None
    for a 16-bit config or anything else)."""
    found = checkpoint_dtype(name_or_path)
    if found is not None:
        return found
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith(".json") or path.exists():
        return config_weight_format(path)
    return None


NEAREST = 3


def nearest_models(name: str, limit: int = NEAREST) -> list[str]:
    """The catalog names closest to ``name`` (a name or a Hugging Face id, compared by its
    repository part without case and punctuation), best first; empty when nothing is close."""
    wanted = squashed_name(name.rsplit("/", 1)[-1])
    if not wanted:
        return []
    scores: dict[str, float] = {}
    for key, match in _INDEX.items():
        candidate = squashed_name(key.rsplit("/", 1)[-1])
        score = difflib.SequenceMatcher(None, wanted, candidate).ratio()
        if candidate.startswith(wanted) or wanted.startswith(candidate):
            score += 0.25
        name_of = match.entry.name
        scores[name_of] = max(score, scores.get(name_of, 0.0))
    ranked = sorted(scores, key=lambda n: (-scores[n], n))
    return [n for n in ranked if scores[n] >= MIN_SIMILARITY][:limit]


MIN_SIMILARITY = 0.5


def unknown_model(name: str) -> CbsimError:
    """An unknown model: the nearest catalog names, and what else is accepted."""
    nearest = [repr(n) for n in nearest_models(name)]
    hint = ""
    if nearest:
        listed = nearest[0] if len(nearest) == 1 else f"{', '.join(nearest[:-1])} or {nearest[-1]}"
        hint = f"; did you mean {listed}?"
    hint += ";"
    return CbsimError(
        f"unknown model {name!r}{hint} known: {', '.join(sorted(MODEL_NAMES))}, or the Hugging "
        "Face id of one (cbsim catalog models lists them), or the path of a checkpoint's "
        "config.json or of its folder (nothing is downloaded)"
    )


def model_spelling(name: str) -> str:
    """The catalog's spelling of a catalog name or id (``Meta-Llama/llama-3.1-8b-instruct`` ->
    ``meta-llama/Llama-3.1-8B-Instruct``); anything else (a config path) as given."""
    match = find_model(name)
    return match.spelling if match is not None else name


def checkpoint_dtype(name: str) -> str | None:
    """The weight format of the checkpoint ``name`` names (``fp8`` for an FP8 id, ``bf16`` for
    most), or None when it is not in the catalog."""
    match = find_model(name)
    return match.checkpoint_dtype if match is not None else None


def hf_repository(name: str) -> str | None:
    """The Hugging Face repository to serve for a catalog name or id (an id is itself; a name
    its entry's first checkpoint, instruct where the family has one), or None."""
    match = find_model(name)
    if match is None:
        return None
    return match.repo or match.entry.launch_repo


def get_model(name_or_path: str) -> ModelShape:
    """A catalog model by name or Hugging Face id, or the model a ``config.json`` describes.

    A catalog name, alias or id (compared without case) wins over a same-named file; an id
    gives its checkpoint's context length. Otherwise a string ending in ``.json``, or naming an
    existing file or directory (read as ``DIR/config.json``), is loaded as a config. Anything
    else raises :class:`CbsimError` listing the catalog names.
    """
    model = _CATALOG.get(name_or_path)
    if model is not None:
        return model
    match = find_model(name_or_path)
    if match is not None:
        return match.shape
    path = Path(name_or_path).expanduser()
    if name_or_path.endswith(".json") or path.exists():
        return _load_config_file(path)
    raise unknown_model(name_or_path)
