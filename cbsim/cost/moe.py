"""Mixture-of-experts layers in the cost model: the roofline terms of one layer's routed experts
and the calibrated fit that prices them.

An MoE layer's MLP is a router, ``num_experts`` routed experts of which each token goes through
``experts_per_token``, and optionally shared experts every token goes through. The router and the
shared experts are plain GEMMs (priced as such by :class:`~cbsim.cost.roofline.CostModel`); the
routed experts run as one fused kernel whose time this module gives: FLOPs over the (token,
expert) pairs, bytes over the weights of the experts that see a token (each read once, whatever
its token count), plus the kernel's buffers over every pair. :mod:`cbsim.studies.calibration.moe` fits
its efficiencies and correction to each engine's measured kernels (per weight dtype, token routing
and kernel path) and documents the formulas; :class:`MoePricing` picks the fit for a served model.

Which fit. The cluster's weight dtype names the kernel's (``bf16``/``fp16`` → ``bfloat16``;
``fp8`` → ``fp8_block``, the 128 × 128 block-scaled checkpoints DeepSeek, Qwen and most MoE
releases ship; ``fp4`` → ``nvfp4``), ``cluster.expert_routing`` the routing (``balanced`` →
``balanced``, or ``power_law_1.01`` where a GPU measured no balanced rows, as A100;
``skewed`` → ``power_law_1.2``; ``int4`` → ``int4_wo``, the 4-bit weight-only kernels SGLang and
vLLM were measured with on H100 and B200; ``int8`` → ``int8_w8a8``, which no table measured).
A dtype no profile measured borrows the ``bfloat16`` fit's efficiencies for its own bytes and
peak, and says so in its ``source``. The fit comes from the first profile of
:func:`~cbsim.cost.profile.profiles_to_try` that has it: the calibration profile in use (under
SGLang or TensorRT-LLM on H100 and B200, the engine's kernel profile, fitted on its own MoE
tables); H100's profile of the same engine on this GPU's spec sheet (SGLang and TensorRT-LLM on
H200, whose MoE kernels were not measured); the GPU's default profile (vLLM's kernels: an engine
on a GPU without its tables, A100, L40S, MI300X, where the engine/vLLM ratio that moves its
GEMMs does not carry over to MoE kernels, ``cbsim.studies.calibration.kernel_sources``); else H100's
default applied to this GPU's spec sheet (H200, L40S, MI300X measured none); uncalibrated, the
raw roofline with the GEMM efficiencies of :class:`~cbsim.cost.params.CostParams`.

Which experts a step reads: the router's, not the table's. AI Configurator's ``balanced`` rows
route deterministically, token ``i``'s ``j``-th choice expert ``(i + j · ⌈E / k⌉) mod E``: every
(token, expert) pair lands on a new expert until all ``E`` are covered, so a table row reads
``min(E, T · k)`` experts (what the fit's roofline counts). A served model's router picks each
token's ``k`` experts by its own scores, independently of the other tokens and, for a router
trained to balance load, uniformly on average: an expert escapes all ``T`` tokens of a step with
probability ``(1 − k / E)^T``, so a step reads ``E · (1 − (1 − k / E)^T)`` experts on average (the
coupon collector's count), fewer than the table's once ``T · k`` nears ``E`` (Qwen3-235B, 128
experts top-8, at 16 tokens: 82 against 128). Under expert parallelism every GPU holds
``E / ep`` experts, each read with that probability (:func:`routed_experts`). The GPUs' counts
vary around that mean, and a layer waits for its busiest GPU; independent uniform routing would
make the busiest read 3.5 of a token's 8 experts at EP 4 against an even 2, but the measured
TensorRT-LLM EP 4 and EP 8 runs at 4 clients, where that is the whole difference, are already
too slow without it (``docs/engines.md``): a trained router's picks spread more evenly across
GPUs than independent draws do, so the mean is priced. A ``balanced`` cluster is priced so
(:attr:`MoePricing.independent_routing`); ``skewed`` keeps the power-law fit's own routing,
whose hot experts its parameters absorb. ``MoePricing.table_time`` gives the table's routing,
for checks against the measured rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cbsim.catalog.hardware import GPU
from cbsim.catalog.models import ModelShape
from cbsim.common.errors import CbsimError
from cbsim.cost.params import CostParams
from cbsim.cost.profile import FALLBACK_GPU, CalibrationProfile, MoeFit, profiles_to_try

__all__ = [
    "EXPERT_ROUTINGS",
    "FEATURES",
    "MOE_DTYPES",
    "MoeDtype",
    "MoePricing",
    "MoeTerms",
    "fit_key",
    "moe_base",
    "moe_terms",
    "peak_for",
    "routed_experts",
]

FEATURES: tuple[str, ...] = ("pairs_per_expert", "hidden", "inner")
"""The correction's features: each expert GEMM's m (pairs per active expert), k and n."""
ACTIVATION_BYTES = 2.0
EXPERT_ROUTINGS: tuple[str, ...] = ("balanced", "skewed")
_ROUTING_FITS: dict[str, tuple[str, ...]] = {
    "balanced": ("balanced", "power_law_1.01"),
    "skewed": ("power_law_1.2",),
}
_WEIGHT_KERNELS = {
    "bf16": "bfloat16",
    "fp16": "bfloat16",
    "fp8": "fp8_block",
    "fp4": "nvfp4",
    "mxfp4": "w4a16_mxfp4",
    "int4": "int4_wo",
    "int8": "int8_w8a8",
}
_TRANSFERRED_FIT = "bfloat16"
"""The kernel whose fit prices a weight dtype no profile measured (int8 W8A8; int4 where its
``int4_wo`` tables are missing): its efficiencies on the dtype's own bytes and peak."""


def fit_key(moe_dtype: str, routing: str, expert_parallel: bool) -> str:
    """The key of a kernel path's fit in :attr:`CalibrationProfile.moe`."""
    return f"{moe_dtype}/{routing}/{'ep' if expert_parallel else 'tp'}"


@dataclass(frozen=True, slots=True)
class MoeDtype:
    """How a kernel stores expert weights and which tensor cores its math runs on."""

    bytes_per_weight: float
    math: str


MOE_DTYPES: dict[str, MoeDtype] = {
    "bfloat16": MoeDtype(2.0, "bf16"),
    "fp8": MoeDtype(1.0, "fp8"),
    "fp8_block": MoeDtype(1.0 + 4.0 / (128 * 128), "fp8"),
    "int4_wo": MoeDtype(0.5 + 2.0 / 128, "bf16"),
    "int8_w8a8": MoeDtype(1.0, "int8"),
    "w4a16_mxfp4": MoeDtype(0.5 + 1.0 / 32, "bf16"),
    "w4a8_mxfp4_mxfp8": MoeDtype(0.5 + 1.0 / 32, "fp8"),
    "nvfp4": MoeDtype(0.5 + 1.0 / 16, "fp4"),
}
"""Bytes per weight (scales included) and math precision of each measured ``moe_dtype``."""


def moe_dtype_of(moe_dtype: str) -> MoeDtype:
    found = MOE_DTYPES.get(moe_dtype)
    if found is None:
        raise CbsimError(
            f"unknown MoE weight dtype {moe_dtype!r}; known: {', '.join(MOE_DTYPES)}",
            field="moe_dtype",
        )
    return found


@dataclass(frozen=True, slots=True)
class MoeTerms:
    """The roofline terms of rows of a ``moe`` table (arrays, one value per row)."""

    flops: np.ndarray
    bytes_moved: np.ndarray
    buffers: np.ndarray
    features: tuple[np.ndarray, np.ndarray, np.ndarray]


def moe_terms(
    tokens: np.ndarray,
    hidden: np.ndarray,
    inter: np.ndarray,
    topk: np.ndarray,
    experts: np.ndarray,
    tp: np.ndarray,
    ep: np.ndarray,
    moe_dtype: str,
    active: np.ndarray | None = None,
) -> MoeTerms:
    """FLOPs, bytes, buffer bytes and correction features of one GPU's share of an MoE layer
    (see the module docstring); arrays broadcast. ``active``: the experts the GPU reads, by
    default the measured tables' deterministic balanced routing's ``min(E / ep, pairs)``."""
    kind = moe_dtype_of(moe_dtype)
    pairs = tokens * topk / ep
    if active is None:
        active = np.minimum(experts / ep, np.maximum(pairs, 1.0))
    inner = inter / tp
    per_pair = ACTIVATION_BYTES * (6.0 * inner + 2.0 * hidden)
    return MoeTerms(
        flops=2.0 * pairs * 3.0 * hidden * inner,
        bytes_moved=active * 3.0 * hidden * inner * kind.bytes_per_weight + pairs * per_pair,
        buffers=ACTIVATION_BYTES * 2.0 * tokens * hidden + tokens * topk * per_pair,
        features=(pairs / active, hidden * np.ones_like(pairs), inner * np.ones_like(pairs)),
    )


def routed_experts(tokens: int, topk: int, experts: int, ep: int) -> float:
    """Expected experts one of ``ep`` GPUs reads for ``tokens`` tokens routed independently, each
    to ``topk`` distinct experts of ``experts`` chosen uniformly on average (see the module
    docstring): each of its ``experts / ep`` experts is read with probability
    ``1 − (1 − topk / experts)^tokens``."""
    if tokens <= 0:
        return 0.0
    return (experts // ep) * (1.0 - (1.0 - min(1.0, topk / experts)) ** tokens)


def peak_for(gpu: GPU, moe_dtype: str) -> float:
    return gpu.peak_flops(moe_dtype_of(moe_dtype).math)


def moe_base(params: np.ndarray, terms: MoeTerms, peak: float, bandwidth: float) -> np.ndarray:
    floor_s, compute_eff, memory_eff, buffer_weight = params
    result: np.ndarray = (
        floor_s
        + np.maximum(
            terms.flops / (peak * compute_eff), terms.bytes_moved / (bandwidth * memory_eff)
        )
        + buffer_weight * terms.buffers / bandwidth
    )
    return result


@dataclass(frozen=True, slots=True)
class MoePricing:
    """Prices one MoE layer's routed experts for a served model (see the module docstring)."""

    model: ModelShape
    gpu: GPU
    tp: int
    ep: int
    moe_dtype: str
    fit: MoeFit | None
    params: CostParams
    source: str
    independent_routing: bool = False

    def routed_time(self, tokens: int) -> float:
        """Seconds of one MoE layer's routed experts over ``tokens`` tokens on one GPU, the
        experts read as the served model's router picks them (see the module docstring)."""
        return self._time(tokens, self.independent_routing)

    def table_time(self, tokens: int) -> float:
        """:meth:`routed_time` under the measured tables' own routing (for checks against them)."""
        return self._time(tokens, False)

    def _time(self, tokens: int, independent: bool) -> float:
        if tokens <= 0:
            return 0.0
        m = self.model
        active = None
        if independent:
            routed = routed_experts(tokens, m.experts_per_token, m.num_experts, self.ep)
            active = max(1.0, routed) * np.ones(1, dtype=np.float64)
        terms, bases = self._bases(np.full(1, tokens, dtype=np.int64), active)
        base = float(bases[0])
        fit = self.fit
        if fit is None or fit.correction is None:
            return base
        return base * math.exp(fit.correction(*(float(f[0]) for f in terms.features)))

    def routed_times(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`routed_time` at many token counts (positive), the same float per count bit
        for bit: each step of ``_time`` element-wise over the counts (the powers of
        :func:`routed_experts` and the correction's logs and exponentials count by count)."""
        counts = np.asarray(tokens, dtype=np.int64)
        m = self.model
        active = None
        if self.independent_routing:
            expected = [
                max(1.0, routed_experts(t, m.experts_per_token, m.num_experts, self.ep))
                for t in counts.tolist()
            ]
            active = np.array(expected, dtype=np.float64)
        terms, base = self._bases(counts, active)
        fit = self.fit
        if fit is None or fit.correction is None:
            return base
        exp = math.exp
        corrections = fit.correction.grid().at_points(*terms.features).tolist()
        return base * np.array([exp(c) for c in corrections], dtype=np.float64)

    def _bases(self, counts: np.ndarray, active: np.ndarray | None) -> tuple[MoeTerms, np.ndarray]:
        """The layer's terms at ``counts`` tokens (``active``: the experts each reads, None:
        the tables' own routing) and its time before the fit's correction, count by count:
        the fitted floor and efficiencies, or the raw roofline's without a fit."""
        m = self.model
        one = np.ones(1, dtype=np.float64)
        terms = moe_terms(
            counts * one, m.hidden_size * one, m.expert_intermediate_size * one,
            m.experts_per_token * one, m.num_experts * one, (self.tp // self.ep) * one,
            self.ep * one, self.moe_dtype, active,
        )  # fmt: skip
        peak, bandwidth = peak_for(self.gpu, self.moe_dtype), self.gpu.hbm_bandwidth
        fit = self.fit
        if fit is None:
            p = self.params
            params = np.array([p.gemm_floor_s, p.gemm_compute_eff, p.gemm_memory_eff, 1.0])
        else:
            params = np.array([fit.floor_s, fit.compute_eff, fit.memory_eff, fit.buffer_weight])
        return terms, moe_base(params, terms, peak, bandwidth)


def moe_pricing(
    model: ModelShape,
    gpu: GPU,
    tp: int,
    ep: int,
    dtype: str,
    expert_routing: str,
    calibration: CalibrationProfile | None,
    params: CostParams,
) -> MoePricing:
    """The pricing of ``model``'s MoE layers served in ``dtype`` on ``gpu`` (see the module
    docstring for which fit it takes)."""
    moe_dtype = _WEIGHT_KERNELS.get(dtype)
    if moe_dtype is None:
        raise CbsimError(f"no MoE kernel for {dtype} weights", field="dtype")
    if calibration is None:
        return MoePricing(
            model, gpu, tp, ep, moe_dtype, None, params, "uncalibrated roofline",
            expert_routing == "balanced",
        )  # fmt: skip
    layout = "ep" if ep > 1 else "tp"
    kernels = [moe_dtype]
    if dtype in ("int4", "int8"):
        kernels.append(_TRANSFERRED_FIT)
    for kernel in kernels:
        for where, profile in profiles_to_try(gpu.name, calibration):
            for routing in _ROUTING_FITS[expert_routing]:
                fit = profile.moe.get(fit_key(kernel, routing, ep > 1))
                if fit is not None:
                    source = f"{where}: {routing}, {layout}"
                    if kernel != moe_dtype:
                        source += f" ({kernel} fit transferred to {moe_dtype})"
                    return MoePricing(
                        model, gpu, tp, ep, moe_dtype, fit, params, source, routing == "balanced"
                    )
    raise CbsimError(
        f"no measured MoE kernel for {dtype} weights ({moe_dtype}) "
        f"{'with' if ep > 1 else 'without'} expert parallelism on {gpu.name} or "
        f"{FALLBACK_GPU}",
        field="dtype",
    )
