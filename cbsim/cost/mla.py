"""Multi-head latent attention (DeepSeek-V2/V3, Kimi K2) in the cost model.

MLA compresses each token's keys and values into one ``kv_lora_rank``-wide latent plus a
``qk_rope_head_dim``-wide rotary key shared by all heads; that is all the KV cache holds (so every
tensor-parallel rank keeps all of it: :func:`cbsim.memory.kvcache.kv_bytes_per_token_per_gpu`). vLLM runs
the module two ways, which is what the measured tables time (projections and attention together,
for ``h`` query heads on one GPU; :mod:`cbsim.studies.calibration.mla` fits them):

* **decode** (absorbed): each query head's no-rope part is mapped into the latent space through
  ``W_UK``, attention runs over the cached latents directly (one 576-wide key per token for all
  heads, values the 512-wide latent), and ``W_UV`` maps the result back per head. Per layer, for
  ``B`` requests of ``C`` cached tokens:

      FLOPs = 2 · B · (H·q_r + q_r·h·d_qk + H·(r + d_rope) + h·d_nope·r + h·r·d_v + h·d_v·H)
              + 2 · B · h · (C + 1) · (r + d_rope + r)
      bytes = weights · bytes per weight + B · (C + 1) · (r + d_rope) · KV bytes

* **prefill** (naive): ``W_UKV`` decompresses per-head keys and values for the new tokens and
  attention runs per head (head dim ``d_nope + d_rope`` for q·k, ``d_v`` for values), causal:

      FLOPs = 2 · n · (H·q_r + q_r·h·d_qk + H·(r + d_rope) + r·h·(d_nope + d_v) + h·d_v·H)
              + 2 · B · h · L(L+1)/2 · (d_qk + d_v)
      bytes = weights · bytes per weight + 2 bytes · n · h · (2 · d_qk + 2 · d_v)

with ``H`` hidden, ``q_r`` the query rank, ``r`` the KV rank, ``d_qk = d_nope + d_rope``,
``n = B · L`` new tokens. The down projections (``q_a``, ``kv_a``) are not split over
tensor-parallel ranks in vLLM; the per-head ones are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cbsim.catalog.hardware import GPU
from cbsim.catalog.model_bytes import DTYPE_BYTES
from cbsim.catalog.models import ModelShape
from cbsim.common.errors import CbsimError
from cbsim.cost.params import CostParams
from cbsim.cost.profile import FALLBACK_GPU, CalibrationProfile, RooflineFit, profiles_to_try

__all__ = ["FEATURES", "MlaPricing", "fit_key", "mla_pricing", "mla_terms", "mla_weight_params"]

FEATURES: tuple[str, ...] = ("batch", "tokens")
ACTIVATION_BYTES = 2.0


def mla_weight_params(model: ModelShape, heads: Any) -> Any:
    """Parameters of one layer's MLA module a GPU with ``heads`` query heads reads."""
    h_size = model.hidden_size
    q_rank, kv_rank = model.q_lora_rank, model.kv_lora_rank
    d_qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    q = h_size * q_rank + q_rank * heads * d_qk if q_rank else h_size * heads * d_qk
    kv_down = h_size * (kv_rank + model.qk_rope_head_dim)
    kv_up = kv_rank * heads * (model.qk_nope_head_dim + model.v_head_dim)
    return q + kv_down + kv_up + heads * model.v_head_dim * h_size


def mla_terms(
    model: ModelShape,
    heads: np.ndarray,
    batch: np.ndarray,
    tokens: np.ndarray,
    *,
    decode: bool,
    weight_bytes: float,
    kv_bytes: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bytes) of one layer's MLA module on one GPU (see the module docstring): decode
    over ``tokens`` cached tokens per request, prefill of ``tokens`` new tokens per request."""
    flops, bytes_moved = _terms(
        model, heads, batch, tokens, decode=decode, weight_bytes=weight_bytes, kv_bytes=kv_bytes
    )
    return np.asarray(flops, dtype=np.float64), np.asarray(bytes_moved, dtype=np.float64)


def _terms(
    model: ModelShape,
    heads: Any,
    batch: Any,
    tokens: Any,
    *,
    decode: bool,
    weight_bytes: float,
    kv_bytes: float,
) -> tuple[Any, Any]:
    """:func:`mla_terms` over arrays or Python floats alike: the same IEEE operations in the same
    order either way, so one point priced as floats is the float its one-element array holds."""
    weights = mla_weight_params(model, heads)
    rank, rope = model.kv_lora_rank, model.qk_rope_head_dim
    d_qk = model.qk_nope_head_dim + rope
    d_v = model.v_head_dim
    if decode:
        new = batch
        projections = 2.0 * new * weights
        attention = 2.0 * batch * heads * (tokens + 1) * (rank + rope + rank)
        cache = batch * (tokens + 1) * (rank + rope) * kv_bytes
        flops = projections + attention
        bytes_moved = weights * weight_bytes + cache
    else:
        new = batch * tokens
        projections = 2.0 * new * weights
        attention = 2.0 * batch * heads * tokens * (tokens + 1) / 2.0 * (d_qk + d_v)
        activations = ACTIVATION_BYTES * new * heads * (2.0 * d_qk + 2.0 * d_v)
        flops = projections + attention
        bytes_moved = weights * weight_bytes + activations
    return flops, bytes_moved


def fit_key(phase: str, kv_dtype: str, gemm_dtype: str) -> str:
    """The key of an MLA fit in :attr:`CalibrationProfile.mla`."""
    return f"{phase}/{kv_dtype}/{gemm_dtype}"


_GEMM_DTYPES = {
    "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp4", "mxfp4": "bf16",
    "int4": "bf16", "int8": "bf16",  # no table: the bf16 fit on their own bytes and peak
}  # fmt: skip
_KV_DTYPES = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}


@dataclass(frozen=True, slots=True)
class MlaPricing:
    """Prices one layer's MLA module (projections and attention) for a served model: the fits
    for decode and prefill (None: the raw roofline with ``params``' attention efficiencies)."""

    model: ModelShape
    gpu: GPU
    heads: int
    gemm_dtype: str
    kv_dtype: str
    decode: RooflineFit | None
    prefill: RooflineFit | None
    params: CostParams
    source: str
    weight_dtype: str | None = None  # an integer format priced with ``gemm_dtype``'s fits

    def module_time(self, requests: int, per_request: float, *, decode: bool) -> float:
        """Seconds of one layer's MLA module for ``requests`` requests of ``per_request`` cached
        tokens (decode: one new token each) or new tokens (prefill)."""
        if requests <= 0:
            return 0.0
        flops, bytes_moved = _terms(  # as floats: one-element arrays' values, none allocated
            self.model,
            float(self.heads),
            float(requests),
            float(per_request),
            decode=decode,
            weight_bytes=DTYPE_BYTES[self.weight_dtype or self.gemm_dtype],
            kv_bytes=DTYPE_BYTES[self.kv_dtype],
        )
        peak = self.gpu.peak_flops(self.weight_dtype or self.gemm_dtype)
        bandwidth = self.gpu.hbm_bandwidth
        fit = self.decode if decode else self.prefill
        if fit is None:
            p = self.params
            return float(
                max(
                    flops / (peak * p.attn_compute_eff),
                    bytes_moved / (bandwidth * p.attn_memory_eff),
                )
                + p.attn_floor_s
            )
        return fit.predict(
            float(flops), float(bytes_moved), peak, bandwidth, float(requests),
            max(float(per_request), 1.0),
        )  # fmt: skip


def mla_pricing(
    model: ModelShape,
    gpu: GPU,
    tp: int,
    dtype: str,
    kv_dtype: str,
    calibration: CalibrationProfile | None,
    params: CostParams,
) -> MlaPricing:
    """The pricing of ``model``'s MLA modules: the calibration in use's fits for these dtypes,
    else the GPU's default profile's, else H100's on this GPU's spec sheet; uncalibrated, the raw
    roofline."""
    gemm_dtype, kv = _GEMM_DTYPES[dtype], _KV_DTYPES[kv_dtype]
    weights = dtype if dtype in ("int4", "int8") else None
    heads = max(1, model.num_heads // tp)
    if calibration is None:
        return MlaPricing(
            model, gpu, heads, gemm_dtype, kv, None, None, params, "roofline", weights
        )
    for where, profile in profiles_to_try(gpu.name, calibration):
        decode = profile.mla.get(fit_key("decode", kv, gemm_dtype))
        prefill = profile.mla.get(fit_key("prefill", kv, gemm_dtype))
        if decode is not None and prefill is not None:
            return MlaPricing(
                model, gpu, heads, gemm_dtype, kv, decode, prefill, params, where, weights
            )
    raise CbsimError(
        f"no measured MLA module for {kv} KV and {gemm_dtype} projections on {gpu.name} or "
        f"{FALLBACK_GPU}",
        field="dtype",
    )
