"""Integer-quantized checkpoints: the weight formats ``int4`` and ``int8``, the names they go by,
and how a checkpoint's id or ``config.json`` tells its format.

Two integer formats cover the quantized checkpoints engines serve besides FP8 and FP4:

* ``int4`` — 4-bit weights, 16-bit activations (W4A16), as AWQ (AutoAWQ), GPTQ (AutoGPTQ,
  GPTQModel, AutoRound) and compressed-tensors ``w4a16`` checkpoints store them: eight 4-bit
  values packed in an int32, and per group of 128 input weights of an output channel one
  16-bit scale and one packed 4-bit zero point (AutoAWQ's ``quant_config``: ``"w_bit": 4,
  "q_group_size": 128, "zero_point": true``; GPTQ's ``qweight``/``qzeros``/``scales``; vLLM's
  ``AWQConfig``/``GPTQMarlinConfig``, ``pack_factor = 32 // weight_bits``). That is
  ``0.5 + (2 + 0.5) / 128`` bytes a weight (:data:`INT4_BYTES`; compressed-tensors' symmetric
  ``w4a16`` has no zero point, 0.4% less, and GPTQ's act-order ``g_idx``, one int32 per input
  row, is not counted either). vLLM runs them with its Marlin kernels (``awq_marlin``,
  ``gptq_marlin``, compressed-tensors ``WNA16``): the 4-bit weights are read and dequantised in
  registers, the multiply runs on the 16-bit tensor cores. Marlin needs compute capability 8.0
  (Ampere) or later and does not run on AMD GPUs (vLLM, "Supported Hardware" of its
  quantization docs), so ``int4`` is refused on the catalog's AMD GPUs.
* ``int8`` — 8-bit weights and 8-bit activations (W8A8: SmoothQuant, compressed-tensors
  ``quantized.w8a8``): one byte a weight plus one scale per output channel (under 0.1% at the
  hidden sizes served here, not counted, as FP8's), activations quantised per token before each
  GEMM, the multiply on the int8 tensor cores (vLLM's ``cutlass_scaled_mm``). vLLM runs it on
  NVIDIA GPUs from Turing on, not on AMD ones (same table).

Both keep the token embedding, the LM head, norms, biases and MoE routers in 16 bits, as the
checkpoints ship them (AutoAWQ and GPTQ quantise the decoder layers' ``nn.Linear`` modules only;
``lm_head`` is in compressed-tensors recipes' ``ignore`` list).

Names. A cluster's ``dtype`` takes the format's name or what people call it
(:data:`DTYPE_ALIASES`: ``awq``, ``gptq``, ``w4a16``, ``awq_marlin``, ``gptq_marlin`` for
``int4``; ``w8a8``, ``int8_w8a8``, ``smoothquant`` for ``int8``; ``nvfp4`` for ``fp4``).
A Hugging Face id of a quantized checkpoint is its base model's with a suffix
(``Qwen/Qwen2.5-7B-Instruct-AWQ``, ``hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4``,
``Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4``, ``RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8``,
``...-quantized.w4a16``): :func:`split_quantized_id` gives the base name and the format, which
the catalog then looks up (:func:`cbsim.catalog.models.find_model`). A ``config.json``'s
``quantization_config`` names its format too (:func:`format_of_quantization_config`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cbsim.common.errors import CbsimError

INT4_GROUP = 128
"""Weights per quantization group of an ``int4`` checkpoint (AutoAWQ's and GPTQ's default)."""
INT4_BYTES = 0.5 + (2.0 + 0.5) / INT4_GROUP
"""Bytes per ``int4`` weight: the packed 4-bit value, and a 16-bit scale and a 4-bit zero point
per group of :data:`INT4_GROUP`."""
INT8_BYTES = 1.0
"""Bytes per ``int8`` (W8A8) weight (per-channel scales not counted)."""

INTEGER_FORMATS: frozenset[str] = frozenset({"int4", "int8"})
"""The integer weight formats, whose kernels vLLM runs on NVIDIA GPUs only."""

DTYPE_ALIASES: Mapping[str, str] = {
    "awq": "int4",
    "awq_marlin": "int4",
    "gptq": "int4",
    "gptq_marlin": "int4",
    "w4a16": "int4",
    "int4_wo": "int4",
    "w8a8": "int8",
    "int8_w8a8": "int8",
    "smoothquant": "int8",
    "nvfp4": "fp4",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
}
"""Other names of the weight formats, as engines' ``--quantization`` flags and quantization
tools call them (compared without case)."""


def canonical_dtype(value: Any) -> Any:
    """The format a weight ``dtype`` names (its alias resolved, lower case); anything not a
    string as given, for the schema to refuse."""
    if not isinstance(value, str):
        return value
    folded = value.strip().lower()
    return DTYPE_ALIASES.get(folded, folded)


_ID_SUFFIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[-_.](?:autoround[-_])?(?:awq|gptq)(?:[-_](?:int4|4bit|w4a16))?$", re.I), "int4"),
    (re.compile(r"[-_.](?:autoround[-_])?(?:quantized[-_.])?w4a16$", re.I), "int4"),
    (re.compile(r"[-_.](?:quantized[-_.])?w8a8$", re.I), "int8"),
)


def split_quantized_id(name: str) -> tuple[str, str] | None:
    """``(base name, format)`` of a quantized checkpoint's id (``Qwen/Qwen3-14B-AWQ`` ->
    ``("Qwen/Qwen3-14B", "int4")``), or None when ``name`` has no quantization suffix."""
    for pattern, weight_format in _ID_SUFFIXES:
        found = pattern.search(name)
        if found is not None and found.start() > 0:
            return name[: found.start()], weight_format
    return None


def _compressed_tensors_format(config: Mapping[str, Any]) -> str:
    """The format of a compressed-tensors ``quantization_config`` (its first config group)."""
    groups = config.get("config_groups")
    group = next(iter(groups.values()), None) if isinstance(groups, Mapping) and groups else None
    weights = group.get("weights") if isinstance(group, Mapping) else None
    if not isinstance(weights, Mapping):
        raise CbsimError("compressed-tensors quantization_config without config_groups weights")
    bits, kind = weights.get("num_bits"), weights.get("type", "int")
    activations = group.get("input_activations") if isinstance(group, Mapping) else None
    if kind == "float" and bits == 8:
        return "fp8"
    if kind == "float" and bits == 4:
        return "fp4"
    if kind == "int" and bits == 4 and not activations:
        return "int4"
    int8_activations = isinstance(activations, Mapping) and activations.get("num_bits") == 8
    if kind == "int" and bits == 8 and int8_activations:
        return "int8"
    raise CbsimError(
        f"compressed-tensors weights of {bits} bits ({kind}"
        f"{', 16-bit activations' if not activations else ''}) are not modelled; int4 "
        "weight-only (w4a16), int8 W8A8, fp8 and nvfp4 are"
    )


def format_of_quantization_config(config: Mapping[str, Any]) -> str:
    """The weight format a Hugging Face ``quantization_config`` describes: AWQ and GPTQ at 4
    bits -> ``int4``; compressed-tensors by its weights' and activations' bits; ``fp8``;
    ModelOpt's FP8 and NVFP4; ``mxfp4``. Anything else (bitsandbytes, 8-bit GPTQ, GGUF...)
    raises :class:`CbsimError` naming it."""
    method = str(config.get("quant_method", "")).lower()
    bits = config.get("bits", config.get("w_bit"))
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round", "autoround"):
        if bits in (4, None):
            return "int4"
        raise CbsimError(
            f"{method} weights of {bits} bits are not modelled (4-bit AWQ and GPTQ are: int4)"
        )
    if method == "compressed-tensors":
        return _compressed_tensors_format(config)
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method == "modelopt":
        algo = str(config.get("quant_algo", "")).upper()
        if algo.startswith("FP8"):
            return "fp8"
        if algo == "NVFP4":
            return "fp4"
    raise CbsimError(
        f"quantization_config: {method or 'a'} quantization is not modelled; cbsim models int4 "
        "(AWQ, GPTQ, w4a16), int8 (W8A8), fp8, nvfp4 and mxfp4 checkpoints"
    )


def config_weight_format(path: Path) -> str | None:
    """The weight format a ``config.json`` (or its folder) declares in ``quantization_config``,
    or None when it has none (a 16-bit checkpoint) or cannot be read."""
    from cbsim.catalog.hf_config import read_config_dict

    config = read_config_dict(path)
    if config is None:
        return None
    quantization = config.get("quantization_config")
    if not isinstance(quantization, Mapping):
        return None
    try:
        return format_of_quantization_config(quantization)
    except CbsimError as err:
        where = path / "config.json" if path.is_dir() else path
        raise err.located(source=str(where), field="quantization_config") from None


def kv_dtype_problem(dtype: str, kv_dtype: str | None) -> str | None:
    """Why a KV cache of ``kv_dtype`` cannot go with ``dtype`` weights, or None. vLLM keeps the
    KV cache in the model's dtype (``--kv-cache-dtype auto``) or in fp8; an fp32 cache exists
    only as an fp32 model's ``auto``, and a 16-bit one under an fp32 model is no option
    (vLLM's ``bfloat16``/``float16`` cache dtypes are for models whose default is fp8)."""
    if kv_dtype == "fp32" and dtype != "fp32":
        return (
            f"kv_dtype: an fp32 KV cache goes with fp32 weights only (engines keep the cache in "
            f"the model's dtype or fp8), not {dtype}"
        )
    if dtype == "fp32" and kv_dtype in ("bf16", "fp16"):
        return (
            f"kv_dtype: fp32 weights keep an fp32 KV cache (vLLM's --kv-cache-dtype auto) or fp8, "
            f"not {kv_dtype}"
        )
    return None
