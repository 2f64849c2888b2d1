"""Per-op pricing: the seconds of one kernel or collective on one GPU of a replica.

Each op takes ``max(FLOPs / (peak · η_c), bytes / (bandwidth · η_m)) + floor``, with efficiencies,
floors and corrections from a calibration profile fitted to measured kernel timings
(:mod:`cbsim.cost.profile`; :class:`~cbsim.cost.params.CostParams` for the raw roofline): GEMMs,
attention over a group of requests, the element-wise kernels of a layer, all-reduces and
all-to-alls (over NVLink inside a node, the NICs between nodes), the activation sends between
pipeline stages and an MoE layer's experts. Where a GPU has no kernel profile of the engine's own,
its ops are scaled by the engine's ratio to a reference on another GPU (``KernelTransfer``).
:class:`OpPricing` holds what every op needs (the model's shard, the GPU, the fits, the parallel
layout); how the ops add up to an iteration is :mod:`cbsim.cost.roofline`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from cbsim.catalog.hardware import GPU, get_gpu
from cbsim.catalog.model_bytes import (
    DTYPE_BYTES,
    dense_weight_dtype,
    kv_heads_per_shard,
    stage_layers,
)
from cbsim.catalog.models import ModelShape, expert_parallel_problem, get_model
from cbsim.common.errors import CbsimError
from cbsim.cost.custom_allreduce import CustomAllreduce
from cbsim.cost.engine_profile import EngineProfile, bare_profile, load_engine_profile
from cbsim.cost.kernel_cache import ColdStart
from cbsim.cost.mla import mla_pricing
from cbsim.cost.moe import EXPERT_ROUTINGS, moe_pricing
from cbsim.cost.params import CostParams
from cbsim.cost.profile import (
    DEFAULT_PROFILE,
    UNCALIBRATED,
    CalibrationProfile,
    RooflineFit,
    load_profile,
)

DEFAULT_ENGINE = "vllm"
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "fp4", "mxfp4", "int8", "int4", "fp32")
KV_DTYPES = ("bf16", "fp16", "fp8", "fp32")
TRANSFERRED_GEMM_FITS: dict[str, tuple[str, ...]] = {
    "int4": ("bf16",),
    "int8": ("fp8", "bf16"),
    "fp32": ("bf16",),
}
"""The measured GEMM fits a format's GEMMs borrow their efficiencies from, first found first,
where no table measured their own (:func:`gemm_fit_for`): Marlin's int4 GEMMs multiply on the
16-bit tensor cores; int8 W8A8 runs vLLM's ``cutlass_scaled_mm``, the kernel its fp8 W8A8
GEMMs run, on 8-bit tensor cores of the same peak on Hopper and Ada (where the GPU has no fp8
tensor cores, A100, the fp8 fit is Marlin's weight-only one and bf16's is taken); fp32 GEMMs
are cuBLAS's SGEMM on the CUDA cores (no TF32: :attr:`cbsim.catalog.hardware.GPU.fp32_flops`), priced
at their own bytes and fp32 peak with the bf16 GEMMs' efficiency."""
TRANSFERRED_ATTENTION_FITS: dict[str, str] = {"fp32": "bf16"}
"""The measured attention fit a KV-cache precision no table measured borrows (applied to its
own FLOPs, bytes and peak): an fp32 cache's attention, bf16's."""
NETWORK_STEP_LATENCY_S = 10e-6
"""Latency of one step of a collective between nodes over RDMA (an assumption; NCCL's
inter-node steps take some microseconds on InfiniBand)."""

ELEMENTWISE_KERNELS_PER_LAYER = 5  # 2 norms, rotary, activation, residual (partly fused)
FUSED_ELEMENTWISE_KERNELS = 4  # 2 add+RMSNorm, SwiGLU, rotary


def gemm_flops_bytes(m: int, n: int, k: int, dtype: str) -> tuple[float, float]:
    """FLOPs and bytes of an (m × k)·(k × n) GEMM: weights and (fp8, fp4) inputs in ``dtype``, the
    output in 16 bits. Calibration fits and predictions both use this one definition.

    fp4 is NVFP4 (W4A4): weights and activations are 4-bit values with an fp8 scale per 16
    (``DTYPE_BYTES["fp4"]`` = 0.5625 bytes each), and the layer first quantises its 16-bit
    activations to NVFP4 (vLLM's ``scaled_fp4_quant``, part of every measured fp4 layer): m × k
    read at 2 bytes and written at 0.5625 before the GEMM reads them, so those bytes count too.
    (On B200 this traffic is what separates fp4 from bf16 at large m and small n: 0.15 against
    0.09 ms at m = 32768, n = 128, k = 8192.)

    int8 is W8A8: its activations are quantised to int8 per token the same way (read at 2
    bytes, written at 1) before the GEMM reads them. int4 is W4A16 (Marlin): 4-bit weights with
    their group scales (``DTYPE_BYTES["int4"]``), 16-bit activations read as they are. fp32
    reads and writes everything in 4 bytes."""
    in_bytes = DTYPE_BYTES[dtype]
    if dtype == "fp32":  # inputs, weights and output all in 4 bytes
        return 2.0 * m * n * k, (k * n + m * k + m * n) * in_bytes
    if dtype == "int4":
        return 2.0 * m * n * k, k * n * in_bytes + m * k * 2.0 + m * n * 2.0
    bytes_moved = (k * n + m * k) * in_bytes + m * n * 2.0
    if dtype in ("fp4", "int8"):
        bytes_moved += m * k * (2.0 + in_bytes)
    return 2.0 * m * n * k, bytes_moved


def attention_flops_bytes(
    tokens: float, kv_tokens: float, pairs: float, q_heads: int, kv_heads: int, head_dim: int,
    kv_bytes: float, act_bytes: float = 2.0,
) -> tuple[float, float]:  # fmt: skip
    """FLOPs and bytes of one layer's attention over a group of requests on one GPU: QKᵀ and PV for
    every causal (query, key) pair; every key and value read once, queries and outputs in
    ``act_bytes`` (16 bits; 32 in an fp32 model)."""
    flops = 4.0 * pairs * q_heads * head_dim
    bytes_moved = (
        kv_tokens * 2 * kv_heads * head_dim * kv_bytes + 2 * tokens * q_heads * head_dim * act_bytes
    )
    return flops, bytes_moved


def _fit_for(fits: dict[str, RooflineFit], dtype: str) -> RooflineFit | None:
    """The fit for a dtype; fp16 and bf16 run the same tensor-core paths, so either serves both."""
    if dtype in fits:
        return fits[dtype]
    twin = {"fp16": "bf16", "bf16": "fp16"}.get(dtype)
    return fits.get(twin) if twin else None


def gemm_fit_for(
    fits: dict[str, RooflineFit], dtype: str, gpu: GPU
) -> tuple[RooflineFit | None, str | None]:
    """The fit a ``dtype`` GEMM is priced with on ``gpu``, and the dtype whose fit it is when
    another's: its own (fp16 and bf16 stand for each other), else, for an integer format no
    table measured (``int4``, ``int8``), the fit of :data:`TRANSFERRED_GEMM_FITS` applied to
    its own FLOPs, bytes and peak (the measured efficiency transferred)."""
    own = _fit_for(fits, dtype)
    if own is not None or dtype not in TRANSFERRED_GEMM_FITS:
        return own, None
    for other in TRANSFERRED_GEMM_FITS[dtype]:
        if other == "fp8" and not gpu.fp8_flops > gpu.bf16_flops:
            continue
        borrowed = _fit_for(fits, other)
        if borrowed is not None:
            return borrowed, other
    return None, None


def _engine_profile(engine: EngineProfile | str | None) -> EngineProfile:
    if engine is None:
        return bare_profile()
    if isinstance(engine, str):
        return load_engine_profile(engine)
    return engine


def calibration_profile(
    calibration: CalibrationProfile | str | None, gpu: str, engine: EngineProfile
) -> CalibrationProfile | None:
    """The kernel profile a cost model reads: the engine's own on this GPU for ``"default"``."""
    if calibration is None or isinstance(calibration, CalibrationProfile):
        return calibration
    if calibration == UNCALIBRATED:
        return None
    if calibration != DEFAULT_PROFILE:
        return load_profile(gpu, calibration)
    own = engine.kernel_profile(gpu)
    profile = load_profile(gpu, own) if own is not None else load_profile(gpu, calibration)
    stand_in = engine.allreduce.get(gpu)
    if profile is not None and stand_in is not None:
        other = load_profile(gpu, stand_in)
        if other is not None:
            profile = profile.model_copy(update={"allreduce": other.allreduce})
    return profile


def _transfer_models(
    model: ModelShape, gpu: str, tp: int, dtype: str, kv_dtype: str, engine: EngineProfile
) -> tuple[OpPricing, OpPricing] | None:
    """Bare cost models of the engine's and the reference's kernels on the engine's transfer GPU,
    when this GPU has no kernel profile of the engine's own (see ``KernelTransfer``)."""
    transfer = engine.kernel_transfer
    if transfer is None or gpu in engine.kernels or gpu == transfer.gpu:
        return None
    try:
        get_gpu(transfer.gpu).peak_flops(dtype)
    except CbsimError:
        return None  # e.g. fp4 weights: the reference GPU cannot run them
    pair = tuple(
        OpPricing(model, transfer.gpu, tp, dtype, kv_dtype, calibration=name, engine=None)
        for name in (transfer.profile, transfer.reference)
    )
    return pair[0], pair[1]


def _custom_allreduce(engine: EngineProfile, gpu: str) -> CustomAllreduce | None:
    """The engine's all-reduce mechanism where it prices this GPU: a GPU it lists that has no
    measured table of the engine's kernel (its own kernel profile or an all-reduce stand-in)."""
    model = engine.custom_allreduce
    if model is None or gpu not in model.gpus or gpu in engine.kernels or gpu in engine.allreduce:
        return None
    return model


def windowed(
    tokens: int, kv_tokens: int, pairs: float, requests: int, window: int, *, decode: bool
) -> tuple[int, float]:
    """A group's (KV tokens read, query-key pairs) in a layer that attends to at most the last
    ``window`` tokens, from the group's totals (each request taken at the group's mean context):
    decode requests read ``min(cached, window)`` cached tokens each; a prefill's new tokens attend
    to at most ``window`` keys each."""
    batch = max(requests, 1)
    if decode:
        cached = (kv_tokens - tokens) / batch
        if cached <= window:
            return kv_tokens, pairs
        kv = batch * window + tokens
        return kv, pairs * kv / kv_tokens if kv_tokens else pairs
    kv = min(kv_tokens, tokens + batch * window)
    return kv, min(pairs, float(tokens) * window)


def default_kv_dtype(engine: EngineProfile, gpu: str, dtype: str) -> str:
    """The KV-cache precision an engine keeps for ``dtype`` weights on ``gpu`` when not told:
    the profile's choice, else the weights' own 16-bit precision (bf16 for fp8 and fp4 weights)."""
    chosen = engine.defaults_for(gpu).kv_dtype.get(dtype)
    if chosen is not None:
        return chosen
    return dtype if dtype in ("bf16", "fp16", "fp32") else "bf16"


class OpPricing:
    """Seconds of single ops (kernels, collectives) on one GPU of a replica; the base of
    :class:`~cbsim.cost.roofline.CostModel`, which adds them up into iterations.

    ``calibration``: ``"default"`` (the engine's own kernel profile for this GPU where it has one,
    else the GPU's default profile), a profile name or JSON path, a :class:`CalibrationProfile`,
    or ``"none"``/None for the raw roofline with ``params``' efficiencies. ``engine``: a shipped
    engine name, a profile JSON path, an :class:`EngineProfile`, or ``"none"``/None for no engine
    overhead. ``kv_dtype`` defaults to what the engine keeps for ``dtype`` weights.
    """

    def __init__(
        self,
        model: str | ModelShape = "llama-3-8b",
        gpu: str | GPU = "h100-sxm",
        tp: int = 1,
        dtype: str = "bf16",
        kv_dtype: str | None = None,
        params: CostParams | None = None,
        calibration: CalibrationProfile | str | None = DEFAULT_PROFILE,
        engine: EngineProfile | str | None = DEFAULT_ENGINE,
        expert_routing: str = "balanced",
        ep: int = 1,
        dp: int = 1,
        pp: int = 1,
    ) -> None:
        self.model = get_model(model) if isinstance(model, str) else model
        self.gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
        if tp < 1:
            raise CbsimError(f"tp must be >= 1, got {tp}", field="tp")
        if dtype not in WEIGHT_DTYPES:
            raise CbsimError(
                f"dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {dtype!r}", field="dtype"
            )
        self.tp = tp
        self.dtype = dtype
        self.engine = _engine_profile(engine)
        self.kv_dtype = kv_dtype or default_kv_dtype(self.engine, self.gpu.name, dtype)
        if self.kv_dtype not in KV_DTYPES:
            raise CbsimError(
                f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {self.kv_dtype!r}",
                field="kv_dtype",
            )
        from cbsim.catalog.quantization import kv_dtype_problem

        problem = kv_dtype_problem(dtype, self.kv_dtype)
        if problem is not None:
            raise CbsimError(problem.removeprefix("kv_dtype: "), field="kv_dtype")
        if dtype == "fp32" and (self.model.is_moe or self.model.is_mla):
            raise CbsimError(
                f"fp32 weights are not modelled for {self.model.name} (a mixture of experts or "
                "latent attention); use bf16 or fp16",
                field="dtype",
            )
        self.params = params or CostParams()
        self.calibration = calibration_profile(calibration, self.gpu.name, self.engine)
        self._transfer = (
            _transfer_models(self.model, self.gpu.name, tp, dtype, self.kv_dtype, self.engine)
            if calibration == DEFAULT_PROFILE
            else None
        )
        self._custom_allreduce = (
            _custom_allreduce(self.engine, self.gpu.name)
            if calibration == DEFAULT_PROFILE
            else None
        )
        # the engine's all-reduce is its own here (a measured stand-in or the mechanism), not
        # the GPU's NCCL times the transfer GPU's engine/vLLM ratio
        self._own_allreduce = self._custom_allreduce is not None or (
            calibration == DEFAULT_PROFILE and self.gpu.name in self.engine.allreduce
        )
        # a step's kernel boundaries: as many as the layers one GPU runs (its pipeline stage's)
        layers = self.model.num_layers
        if 1 < pp <= layers:
            layers = stage_layers(self.model, pp)
        self.overhead = self.engine.overhead.for_layers(layers)
        self._overhead_zero = self.overhead.is_zero
        step = self.overhead  # its terms as plain floats for the hot path (see step_time)
        self._step_terms = (
            step.cpu_s,
            step.cpu_per_request_s,
            step.cpu_per_token_s,
            step.serial_s,
            step.serial_per_request_s,
            step.overlap,
        )
        # an expert-only weight format (MXFP4) leaves every other GEMM in bf16
        self._gemm_dtype = dense_weight_dtype(dtype)
        self._peak_flops = self.gpu.peak_flops(self._gemm_dtype)
        self._attn_flops = self.gpu.peak_flops(
            self.kv_dtype if self.kv_dtype in ("fp8", "fp32") else "bf16"
        )
        # activations stay in 16 bits even with fp8 weights; an fp32 model's are fp32
        self._act_bytes = DTYPE_BYTES["fp32"] if dtype == "fp32" else 2.0
        self._kv_bytes = DTYPE_BYTES[self.kv_dtype]
        m = self.model
        self._q_heads = max(1, m.num_heads // tp)
        self._kv_heads = kv_heads_per_shard(m, tp)
        self._qkv_n = (self._q_heads + 2 * self._kv_heads) * m.head_dim
        self._mlp_n = (2 if m.gated_mlp else 1) * m.intermediate_size // tp
        self._vocab_shard = -(-m.vocab_size // tp)
        cal = self.calibration
        self._gemm_fit, self.gemm_fit_from = (
            gemm_fit_for(cal.gemm, self._gemm_dtype, self.gpu) if cal is not None else (None, None)
        )
        self._head_dtype = dtype if dtype in ("bf16", "fp16", "fp32") else "bf16"
        self._head_fit = (
            gemm_fit_for(cal.gemm, self._head_dtype, self.gpu)[0] if cal is not None else None
        )
        self._head_peak = self.gpu.peak_flops(self._head_dtype)
        # attention corrections may also depend on the head layout, fixed for this model and tp:
        # specialise them once to the two features that vary per batch (batch, tokens)
        heads = {
            "kv_heads": float(self._kv_heads),
            "group": self._q_heads / self._kv_heads,
            "head_dim": float(m.head_dim),
        }
        attention_fit = TRANSFERRED_ATTENTION_FITS.get(self.kv_dtype, self.kv_dtype)
        decode = _fit_for(cal.decode_attention, attention_fit) if cal is not None else None
        prefill = _fit_for(cal.prefill_attention, attention_fit) if cal is not None else None
        self._decode_fit_model = decode.specialize(heads) if decode is not None else None
        self._decode_fit = (
            self._decode_fit_model.compiled() if self._decode_fit_model is not None else None
        )
        # CostModel.compiled's (by extra GEMM) and compiled_decode's (roofline.SHARED_DECODE)
        self._compiled: dict[tuple[int, int] | str | None, Any] = {}
        # the token counts each of them covers (0: none), read on every call of CostModel.compiled
        self._compiled_size: dict[tuple[int, int] | str | None, int] = {}
        self._stepped: Any = False  # see CostModel.time_stats (False: not worked out yet)
        # pricing in Python while numba's cache is cold (cbsim.cost.kernel_cache)
        self.cold_start = ColdStart()
        self._prefill_fit_model = prefill.specialize(heads) if prefill is not None else None
        self._prefill_fit = (
            self._prefill_fit_model.compiled() if self._prefill_fit_model is not None else None
        )
        self._linear_cache: dict[
            int | tuple[int, int], tuple[float, float, float, float, float]
        ] = {}
        self._token_cache: dict[tuple[int, ...], float] = {}
        # a whole batch's linear and LM-head seconds by token count (CostModel._token_rows)
        self._linear_row: np.ndarray = np.full(1, np.nan)
        self._head_row: np.ndarray = np.full(1, np.nan)
        self._lm_head_cache: dict[int | tuple[int, int], float] = {}
        self._gemm_cache: dict[tuple[int, int, int], float] = {}
        self._gemm_predict = self._gemm_fit.compiled() if self._gemm_fit is not None else None
        self._head_predict = self._head_fit.compiled() if self._head_fit is not None else None
        if expert_routing not in EXPERT_ROUTINGS:
            raise CbsimError(
                f"expert_routing must be one of {', '.join(EXPERT_ROUTINGS)}, got "
                f"{expert_routing!r}",
                field="expert_routing",
            )
        self.expert_routing = expert_routing
        if dp < 1:
            raise CbsimError(f"dp must be >= 1, got {dp}", field="dp")
        problem = expert_parallel_problem(self.model, tp, ep, dp)
        if problem is not None:
            raise CbsimError(problem, field="dp" if problem.startswith("attention data") else "ep")
        self.ep = ep
        self.dp = dp
        if pp < 1 or pp > self.model.num_layers:
            raise CbsimError(f"pp must be 1 to {self.model.num_layers} (the layers), got {pp}",
                             field="pp")  # fmt: skip
        if pp > 1 and dp > 1:
            raise CbsimError(
                "pipeline stages with data-parallel ranks are not modelled", field="pp"
            )
        self.pp = pp
        self._split = dp * pp  # the batch's shares: ranks, or micro-batches
        # every micro-batch passes every stage; the largest stage sets the pace
        self._stage_factor = pp * -(-self.model.num_layers // pp) / self.model.num_layers
        self._pp_bandwidth = (
            self.gpu.nvlink_bandwidth
            if tp * pp <= self.gpu.gpus_per_node
            else self.gpu.network_bandwidth
        )
        self._moe_cache: dict[int | tuple[int, int], tuple[float, float]] = {}
        # the experts spread over every GPU of the replica: tp x dp of them
        self._moe = (
            moe_pricing(self.model, self.gpu, tp * dp, ep, dtype, expert_routing, cal, self.params)
            if self.model.is_moe
            else None
        )
        self._mla = (
            mla_pricing(self.model, self.gpu, tp, dtype, self.kv_dtype, cal, self.params)
            if self.model.is_mla
            else None
        )

    # ------------------------------------------------------------------ primitives

    def gemm_time(self, m: int, n: int, k: int) -> float:
        """Seconds for an (m × k) · (k × n) GEMM in the model's dtype on one GPU (memoised: a
        proposer prices the same draft-step GEMMs every iteration)."""
        key = (m, n, k)
        cached = self._gemm_cache.get(key)
        if cached is not None:
            return cached
        t = self._gemm(m, n, k, self._gemm_dtype, self._gemm_predict, self._peak_flops)
        if self._transfer is not None and t > 0.0:
            engine, reference = self._transfer
            t *= engine.gemm_time(m, n, k) / reference.gemm_time(m, n, k)
        if len(self._gemm_cache) < 65536:
            self._gemm_cache[key] = t
        return t

    def _gemm(
        self,
        m: int,
        n: int,
        k: int,
        dtype: str,
        predict: Callable[..., float] | None,
        peak: float,
    ) -> float:
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        flops, bytes_moved = gemm_flops_bytes(m, n, k, dtype)
        if predict is not None:
            return predict(flops, bytes_moved, peak, self.gpu.hbm_bandwidth, m, n, k)
        p = self.params
        t_compute = flops / (peak * p.gemm_compute_eff)
        t_memory = bytes_moved / (self.gpu.hbm_bandwidth * p.gemm_memory_eff)
        return max(t_compute, t_memory) + p.gemm_floor_s

    def attention_time(
        self, tokens: int, kv_tokens: int, pairs: float, *, decode: bool, requests: int = 1
    ) -> float:
        """Seconds for one layer's attention over a group of ``requests`` on one GPU (with latent
        attention: the whole MLA module, its projections included)."""
        if tokens <= 0:
            return 0.0
        if self._mla is not None:
            batch = max(requests, 1)
            per_request = (kv_tokens - tokens) / batch if decode else tokens / batch
            module = self._mla.module_time(batch, max(per_request, 1.0), decode=decode)
            if decode and tokens > batch:
                # a verify step's extra query tokens: their projections (the cache is read once)
                extra = self._mla.module_time(tokens, 1.0, decode=True)
                module += max(extra - self._mla.module_time(batch, 1.0, decode=True), 0.0)
            return module
        flops, bytes_moved = attention_flops_bytes(
            tokens,
            kv_tokens,
            pairs,
            self._q_heads,
            self._kv_heads,
            self.model.head_dim,
            self._kv_bytes,
            self._act_bytes,
        )
        fit = self._decode_fit if decode else self._prefill_fit
        if fit is not None:
            batch = max(requests, 1)
            # decode data is keyed by cached context, prefill data by input length
            per_request = (kv_tokens - tokens) / batch if decode else tokens / batch
            fitted = fit(
                flops,
                bytes_moved,
                self._attn_flops,
                self.gpu.hbm_bandwidth,
                batch,
                max(per_request, 1.0),
            )
            # beyond the measured batches and contexts a correction can extrapolate past the
            # speed of light; no kernel reads its keys and values faster than the HBM delivers
            light = bytes_moved / self.gpu.hbm_bandwidth
            if self._transfer is not None:
                engine, reference = self._transfer
                fitted *= engine.attention_time(
                    tokens, kv_tokens, pairs, decode=decode, requests=requests
                ) / reference.attention_time(
                    tokens, kv_tokens, pairs, decode=decode, requests=requests
                )
            return fitted if fitted > light else light
        p = self.params
        t_compute = flops / (self._attn_flops * p.attn_compute_eff)
        t_memory = bytes_moved / (self.gpu.hbm_bandwidth * p.attn_memory_eff)
        return max(t_compute, t_memory) + p.attn_floor_s

    def elementwise_time(self, tokens: int) -> float:
        """Seconds for one layer's norms, rotary embedding, activation and residual adds."""
        if tokens <= 0:
            return 0.0
        m = self.model
        h = m.hidden_size
        activation = 3 * m.intermediate_size // self.tp  # read gate and up, write
        rotary = 2 * (self._q_heads + self._kv_heads) * m.head_dim  # q and k, in place
        if self.engine.fused_elementwise:
            # two add+RMSNorm kernels (read input and residual, write both), SwiGLU, rotary
            bytes_moved = tokens * (2 * 4 * h + activation + rotary) * self._act_bytes
            return self._streamed(bytes_moved, FUSED_ELEMENTWISE_KERNELS)
        per_token = (
            2 * 2 * h  # two RMSNorms, read + write
            + 2 * 3 * h  # two residual adds, read 2 + write 1
            + activation
            + rotary
        )
        bytes_moved = tokens * per_token * self._act_bytes
        fit = self.calibration.elementwise if self.calibration is not None else None
        if fit is not None:
            return fit.predict(0.0, bytes_moved, self._peak_flops, self.gpu.hbm_bandwidth, tokens)
        p = self.params
        t = bytes_moved / (self.gpu.hbm_bandwidth * p.elementwise_memory_eff)
        return t + ELEMENTWISE_KERNELS_PER_LAYER * p.elementwise_floor_s

    def _streamed(self, bytes_moved: float, kernels: int) -> float:
        """Memory-bound kernels at the efficiency and floor the GPU's 16-bit GEMMs were measured
        to stream weights with (the raw roofline's element-wise ones when uncalibrated)."""
        fit = self._head_fit
        if fit is not None:
            return bytes_moved / (self.gpu.hbm_bandwidth * fit.memory_eff) + kernels * fit.floor_s
        p = self.params
        t = bytes_moved / (self.gpu.hbm_bandwidth * p.elementwise_memory_eff)
        return t + kernels * p.elementwise_floor_s

    def allreduce_time(self, tokens: int) -> float:
        """Seconds for one ring all-reduce of the tokens' hidden states across the TP group (a
        group spanning nodes: see :meth:`_across_nodes`)."""
        if self.tp == 1 or tokens <= 0:
            return 0.0
        node = self.gpu.gpus_per_node
        if self.tp > node:
            shard = 2.0 * tokens * self.model.hidden_size * self._act_bytes / node  # out and back
            inside = self._node_allreduce(tokens, node)
            return inside + self._across_nodes(shard, self.tp // node)
        return self._node_allreduce(tokens, self.tp)

    def _across_nodes(self, bytes_per_nic: float, nodes: int) -> float:
        """Seconds for the inter-node part of a collective over ``nodes`` nodes: each GPU's NIC
        sends the ``(nodes - 1) / nodes`` of ``bytes_per_nic`` bound for other nodes (a ring
        all-reduce's shard out and back; an all-to-all's sends) over ``network_bandwidth``,
        rail by rail as NCCL's hierarchical algorithms do, with :data:`NETWORK_STEP_LATENCY_S`
        per step. A model, not a measurement: the shipped NCCL tables stop at one node."""
        if nodes <= 1:
            return 0.0
        steps = 2 * (nodes - 1)
        wire = bytes_per_nic * (nodes - 1) / nodes
        return steps * NETWORK_STEP_LATENCY_S + wire / self.gpu.network_bandwidth

    def _node_allreduce(self, tokens: int, gpus: int) -> float:
        """Seconds for an all-reduce of ``tokens`` hidden states over ``gpus`` GPUs of one node:
        measured (NCCL's, or the engine's own kernel's), the engine's own kernel from its
        mechanism where it was not measured (:mod:`cbsim.cost.custom_allreduce`), else the
        NVLink ring."""
        p = self.params
        message = tokens * self.model.hidden_size * self._act_bytes
        if self.calibration is not None:
            measured = self.calibration.allreduce_time(gpus, message)
            if measured is not None:
                own = self._custom_allreduce
                if own is not None:
                    small = self.calibration.allreduce_time(gpus, own.reference_size_bytes)
                    return own.time(
                        message, gpus, self.gpu.nvlink_bandwidth, measured, small or measured
                    )
                if self._transfer is not None and not self._own_allreduce:
                    engine, reference = self._transfer
                    mine = engine._node_allreduce(tokens, gpus)
                    theirs = reference._node_allreduce(tokens, gpus)
                    if mine > 0.0 and theirs > 0.0:
                        measured *= mine / theirs
                return measured
        wire = 2.0 * (gpus - 1) / gpus * message
        return p.allreduce_latency_s + wire / (self.gpu.nvlink_bandwidth * p.allreduce_bw_eff)

    def alltoall_time(self, size_bytes: float) -> float:
        """Seconds for one all-to-all over the replica's ``tp x dp`` GPUs in which each sends
        ``size_bytes`` in all: NCCL's measured curve for this GPU count where the calibration has
        one, else a latency plus the bytes leaving each GPU over its NVLink bandwidth."""
        group = self.tp * self.dp
        if group == 1 or size_bytes <= 0:
            return 0.0
        node = self.gpu.gpus_per_node
        if group > node:  # the node's share over NVLink while the rest leaves by the NICs
            inside = self._node_alltoall(size_bytes * node / group, node)
            return max(inside, self._across_nodes(size_bytes, group // node))
        return self._node_alltoall(size_bytes, group)

    def _node_alltoall(self, size_bytes: float, gpus: int) -> float:
        if self.calibration is not None:
            measured = self.calibration.alltoall_time(gpus, size_bytes)
            if measured is not None:
                return measured
        p = self.params
        wire = (gpus - 1) / gpus * size_bytes
        return p.allreduce_latency_s + wire / (self.gpu.nvlink_bandwidth * p.allreduce_bw_eff)

    def dispatch_time(self, tokens: int) -> float:
        """Seconds to send one rank's ``tokens`` tokens to their experts on other ranks and their
        outputs back (attention data parallelism): two all-to-alls of each token's 16-bit hidden
        state once per expert it goes to (at most one copy per GPU), as DeepEP and vLLM's
        all-to-all backends move them, the rank's ``tp`` GPUs sending a share each. Zero without
        data parallelism: then every GPU holds every token after attention's all-reduce and the
        MoE output's all-reduce combines."""
        if self.dp == 1 or tokens <= 0:
            return 0.0
        m = self.model
        copies = min(m.experts_per_token, self.tp * self.dp)
        sent = tokens * copies * m.hidden_size * self._act_bytes / self.tp
        return 2.0 * self.alltoall_time(sent)

    def _share_of(self, count: int, requests: int) -> int:
        """The largest rank's (micro-batch's) share of ``count`` (tokens, keys) of a batch of
        ``requests`` requests, each kept whole on one rank (in one micro-batch), split as evenly
        as they go: ceil(requests / shares) of them, at least one (``count`` split evenly when
        ``requests`` is unknown)."""
        if self._split == 1 or count <= 0:
            return count
        if requests <= 0:
            return -(-count // self._split)
        return -(-count * -(-requests // self._split) // requests)

    def _micro_batches(self, requests: int) -> int:
        """Micro-batches a round of a batch of ``requests`` holds (one per stage at most)."""
        return self.pp if requests <= 0 else min(self.pp, requests)

    def rank_share(self, count: int) -> int:
        """A data-parallel rank's (or a pipeline micro-batch's) share of ``count`` (requests,
        tokens) of a batch split evenly over the ``dp`` ranks (``pp`` micro-batches): the
        largest, which the ranks in lockstep (the stages) wait for."""
        return -(-count // self._split)

    def pp_send_time(self, tokens: int, requests: int = 0) -> float:
        """Seconds of one round's activation sends between pipeline stages: a micro-batch's
        hidden states (16-bit) passed on once per micro-batch of the round (on the critical path
        of the stage that waits for them), over NVLink inside a node, else the NIC."""
        if self.pp == 1 or tokens <= 0:
            return 0.0
        p = self.params
        message = self._share_of(tokens, requests) * self.model.hidden_size * self._act_bytes
        link = self._pp_bandwidth * p.allreduce_bw_eff
        return self._micro_batches(requests) * (p.allreduce_latency_s + message / link)

    def moe_layer_time(self, tokens: int, local: int | None = None) -> float:
        """Seconds for one MoE layer's MLP at ``tokens`` tokens on one GPU: the router, the routed
        experts (:mod:`cbsim.studies.calibration.moe`'s fit) and the shared experts. With attention data
        parallelism ``tokens`` are all ranks' (the routed experts see them all); the router and
        the shared experts run on a rank's share, ``local``."""
        if self._moe is None or tokens <= 0:
            return 0.0
        m = self.model
        routed = self._moe.routed_time(tokens)
        if local is None:
            local = self.rank_share(tokens) if self.dp > 1 else tokens
        router = self.gemm_time(local, m.num_experts, m.hidden_size)
        shared = 0.0
        if m.shared_expert_intermediate_size:
            inner = m.shared_expert_intermediate_size // self.tp
            shared = self.gemm_time(local, 2 * inner, m.hidden_size) + self.gemm_time(
                local, m.hidden_size, inner
            )
        return routed + router + shared

    # ------------------------------------------------------------------ at many token counts
    # The same seconds as the scalar ops above, each count's float bit for bit, for pricing a
    # whole range of batch sizes at once (the compiled cost's tables): the same operations in
    # the same order, element-wise over an int64 array of positive token counts.

    def gemm_times(self, m: np.ndarray, n: int, k: int) -> np.ndarray:
        """:meth:`gemm_time` at each of ``m``'s row counts."""
        m = np.asarray(m, dtype=np.int64)  # rows x columns x bytes overflows int32
        seconds = self._gemm_points(m, n, k, self._gemm_dtype, self._gemm_fit, self._peak_flops)
        if self._transfer is not None:
            engine, reference = self._transfer
            scaled = seconds > 0.0
            rows = m[scaled]
            seconds[scaled] *= engine.gemm_times(rows, n, k) / reference.gemm_times(rows, n, k)
        return seconds

    def _gemm_points(
        self, m: np.ndarray, n: int, k: int, dtype: str, fit: RooflineFit | None, peak: float
    ) -> np.ndarray:
        """:meth:`_gemm` at each of ``m``'s row counts (``fit`` the one ``predict`` compiles)."""
        if n <= 0 or k <= 0:
            return np.zeros(len(m))
        rows: Any = m  # gemm_flops_bytes's arithmetic, element-wise over the rows
        flops, bytes_moved = gemm_flops_bytes(rows, n, k, dtype)
        bandwidth = self.gpu.hbm_bandwidth
        if fit is not None:
            seconds = fit.predict_points(flops, bytes_moved, peak, bandwidth, m, n, k)
        else:
            p = self.params
            t_compute = flops / (peak * p.gemm_compute_eff)
            t_memory = bytes_moved / (bandwidth * p.gemm_memory_eff)
            seconds = np.where(t_memory > t_compute, t_memory, t_compute) + p.gemm_floor_s
        return np.where(m <= 0, 0.0, seconds)

    def elementwise_times(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`elementwise_time` at each of ``tokens``' counts."""
        m = self.model
        h = m.hidden_size
        activation = 3 * m.intermediate_size // self.tp
        rotary = 2 * (self._q_heads + self._kv_heads) * m.head_dim
        bandwidth = self.gpu.hbm_bandwidth
        if self.engine.fused_elementwise:
            bytes_moved = tokens * (2 * 4 * h + activation + rotary) * self._act_bytes
            fit = self._head_fit
            if fit is not None:
                streamed = bytes_moved / (bandwidth * fit.memory_eff)
                return np.asarray(streamed + FUSED_ELEMENTWISE_KERNELS * fit.floor_s)
            p = self.params
            t = bytes_moved / (bandwidth * p.elementwise_memory_eff)
            return np.asarray(t + FUSED_ELEMENTWISE_KERNELS * p.elementwise_floor_s)
        per_token = 2 * 2 * h + 2 * 3 * h + activation + rotary
        bytes_moved = tokens * per_token * self._act_bytes
        fit = self.calibration.elementwise if self.calibration is not None else None
        if fit is not None:
            return fit.predict_points(0.0, bytes_moved, self._peak_flops, bandwidth, tokens)
        p = self.params
        t = bytes_moved / (bandwidth * p.elementwise_memory_eff)
        return np.asarray(t + ELEMENTWISE_KERNELS_PER_LAYER * p.elementwise_floor_s)

    def allreduce_times(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`allreduce_time` at each of ``tokens``' counts, the same float per count bit for
        bit (the same operations in the same order, over arrays)."""
        counts = np.asarray(tokens, dtype=np.int64)  # token x hidden x bytes overflows int32
        if self.tp == 1:
            return np.zeros(len(counts))
        node = self.gpu.gpus_per_node
        if self.tp > node:
            # _across_nodes's arithmetic, element-wise over the shards
            shard: Any = 2.0 * counts * self.model.hidden_size * self._act_bytes / node
            inside = self._node_allreduces(counts, node)
            seconds = inside + self._across_nodes(shard, self.tp // node)
        else:
            seconds = self._node_allreduces(counts, self.tp)
        return np.where(counts <= 0, 0.0, seconds)

    def _node_allreduces(self, tokens: np.ndarray, gpus: int) -> np.ndarray:
        """:meth:`_node_allreduce` at each of ``tokens``' counts."""
        p = self.params
        message = tokens * self.model.hidden_size * self._act_bytes
        fit = self.calibration.allreduce.get(str(gpus)) if self.calibration is not None else None
        if fit is not None:
            measured = fit.at_sizes(message)
            own = self._custom_allreduce
            if own is not None:
                small = fit(own.reference_size_bytes)
                return own.times(
                    message, gpus, self.gpu.nvlink_bandwidth, measured, small or measured
                )
            if self._transfer is not None and not self._own_allreduce:
                engine, reference = self._transfer
                mine = engine._node_allreduces(tokens, gpus)
                theirs = reference._node_allreduces(tokens, gpus)
                scaled = (mine > 0.0) & (theirs > 0.0)
                measured[scaled] *= mine[scaled] / theirs[scaled]
            return measured
        wire = 2.0 * (gpus - 1) / gpus * message
        return np.asarray(
            p.allreduce_latency_s + wire / (self.gpu.nvlink_bandwidth * p.allreduce_bw_eff)
        )

    def moe_layer_times(self, tokens: np.ndarray) -> np.ndarray:
        """:meth:`moe_layer_time` at each of ``tokens``' counts, without data parallelism (each
        count its own ``local``)."""
        if self._moe is None:
            return np.zeros(len(tokens))
        if self.dp > 1:
            raise ValueError("moe_layer_times prices no data-parallel ranks")
        m = self.model
        routed = self._moe.routed_times(tokens)
        router = self.gemm_times(tokens, m.num_experts, m.hidden_size)
        shared: np.ndarray | float = 0.0
        if m.shared_expert_intermediate_size:
            inner = m.shared_expert_intermediate_size // self.tp
            shared = self.gemm_times(tokens, 2 * inner, m.hidden_size) + self.gemm_times(
                tokens, m.hidden_size, inner
            )
        return np.asarray(routed + router + shared)
