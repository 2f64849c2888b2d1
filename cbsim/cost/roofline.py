"""The roofline cost model: how long one iteration of a batch takes on one replica.

An iteration runs every layer of the model once over all the tokens in the batch: N = Σ q new tokens,
where a prefill chunk contributes its chunk, a decode one token, a speculative verify step k + 1.
Per layer and per tensor-parallel shard it runs

* four linear layers (QKV, O, gate+up, down): GEMMs of m = N rows that read their weights once per
  iteration whatever N is, which is why batching and speculation pay;
* attention, which reads each request's cached keys and values: a compute-bound kernel for prefill
  chunks and a bandwidth-bound one for decode and verify steps;
* element-wise kernels (norms, rotary embedding, activation, residual adds);
* with tp > 1, two all-reduces of the N × hidden activations.

Then the LM head turns every sampled position (each decode/verify token and each finishing prefill)
into logits. Each op takes ``max(FLOPs / (peak · η_c), bytes / (bandwidth · η_m)) + floor``, with
efficiencies, floors and corrections from a calibration profile fitted to measured kernel timings
(:mod:`cbsim.cost.profile`; :class:`~cbsim.cost.params.CostParams` for the raw roofline).
The serving engine's CPU-side work per step comes on top, overlapped with the kernels where the
engine overlaps them (:mod:`cbsim.cost.engine_profile`).

``CostModel(model, gpu, tp, dtype)`` prices an iteration the way ``cbsim run`` of that cluster
does: the GPU's calibrated kernels as the serving engine runs them (``engine="vllm"`` by default)
plus that engine's step overhead. :meth:`CostModel.bare_roofline` (or ``calibration="none",
engine="none"``) is the uncalibrated roofline without any engine overhead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cbsim.cost.custom_allreduce import CustomAllreduce
from cbsim.cost.engine_profile import EngineProfile, bare_profile, load_engine_profile
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
from cbsim.errors import CbsimError
from cbsim.hardware import GPU, get_gpu
from cbsim.kvcache import (
    DTYPE_BYTES,
    dense_weight_dtype,
    kv_heads_per_shard,
    model_weight_bytes,
    split_weight_bytes,
    stage_layers,
)
from cbsim.models import ModelShape, expert_parallel_problem, get_model

DEFAULT_ENGINE = "vllm"
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "fp4", "mxfp4")
NETWORK_STEP_LATENCY_S = 10e-6
"""Latency of one step of a collective between nodes over RDMA (an assumption; NCCL's
inter-node steps take some microseconds on InfiniBand)."""

# Batch entries with at most this many new tokens run in the bandwidth-bound decode attention
# kernel (decode steps, speculative verification, the tail chunk of a prefill); larger ones run the
# compute-bound prefill kernel.
DECODE_QUERY_MAX = 64

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
    0.09 ms at m = 32768, n = 128, k = 8192.)"""
    in_bytes = DTYPE_BYTES[dtype]
    bytes_moved = (k * n + m * k) * in_bytes + m * n * 2.0
    if dtype == "fp4":
        bytes_moved += m * k * (2.0 + in_bytes)
    return 2.0 * m * n * k, bytes_moved


def attention_flops_bytes(
    tokens: float, kv_tokens: float, pairs: float, q_heads: int, kv_heads: int, head_dim: int,
    kv_bytes: float,
) -> tuple[float, float]:  # fmt: skip
    """FLOPs and bytes of one layer's attention over a group of requests on one GPU: QKᵀ and PV for
    every causal (query, key) pair; every key and value read once, queries and outputs in 16 bits."""
    flops = 4.0 * pairs * q_heads * head_dim
    bytes_moved = (
        kv_tokens * 2 * kv_heads * head_dim * kv_bytes + 2 * tokens * q_heads * head_dim * 2.0
    )
    return flops, bytes_moved


@dataclass(slots=True)
class BatchStats:
    """The sufficient statistics of a batch for the cost model (sums over its requests).

    ``*_kv_tokens`` count the keys/values attention reads (cached + new), ``*_pairs`` the causal
    query-key pairs Σ q·(c + (q+1)/2). ``sampled_tokens`` are positions whose logits are needed.
    """

    num_requests: int = 0
    num_tokens: int = 0
    sampled_tokens: int = 0
    decode_tokens: int = 0
    decode_kv_tokens: int = 0
    decode_pairs: float = 0.0
    decode_requests: int = 0
    prefill_tokens: int = 0
    prefill_kv_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_requests: int = 0

    def add(self, new_tokens: int, cached_tokens: int, sampled: int) -> None:
        """Add one request's entry: q new tokens over c cached ones, ``sampled`` logits needed."""
        pairs = new_tokens * (cached_tokens + (new_tokens + 1) * 0.5)
        self.num_requests += 1
        self.num_tokens += new_tokens
        self.sampled_tokens += sampled
        if new_tokens <= DECODE_QUERY_MAX:
            self.decode_tokens += new_tokens
            self.decode_kv_tokens += cached_tokens + new_tokens
            self.decode_pairs += pairs
            self.decode_requests += 1
        else:
            self.prefill_tokens += new_tokens
            self.prefill_kv_tokens += cached_tokens + new_tokens
            self.prefill_pairs += pairs
            self.prefill_requests += 1

    def add_entries(
        self, new_tokens: Sequence[int], cached_tokens: Sequence[int], sampled: Sequence[int]
    ) -> None:
        """:meth:`add` of every entry (``new_tokens[i]``, ``cached_tokens[i]``, ``sampled[i]``) in
        order: the same sums in the same order, kept in locals while adding."""
        requests, tokens, sampled_tokens = self.num_requests, self.num_tokens, self.sampled_tokens
        d_tokens, d_kv, d_pairs = self.decode_tokens, self.decode_kv_tokens, self.decode_pairs
        d_requests = self.decode_requests
        p_tokens, p_kv, p_pairs = self.prefill_tokens, self.prefill_kv_tokens, self.prefill_pairs
        p_requests = self.prefill_requests
        for q, c, s in zip(new_tokens, cached_tokens, sampled, strict=True):
            pairs = q * (c + (q + 1) * 0.5)
            requests += 1
            tokens += q
            sampled_tokens += s
            if q <= DECODE_QUERY_MAX:
                d_tokens += q
                d_kv += c + q
                d_pairs += pairs
                d_requests += 1
            else:
                p_tokens += q
                p_kv += c + q
                p_pairs += pairs
                p_requests += 1
        self.num_requests, self.num_tokens, self.sampled_tokens = requests, tokens, sampled_tokens
        self.decode_tokens, self.decode_kv_tokens, self.decode_pairs = d_tokens, d_kv, d_pairs
        self.decode_requests = d_requests
        self.prefill_tokens, self.prefill_kv_tokens, self.prefill_pairs = p_tokens, p_kv, p_pairs
        self.prefill_requests = p_requests

    def add_many(self, count: int, new_tokens: int, cached_sum: int) -> None:
        """Add ``count`` decode/verify entries of ``new_tokens`` each (all sampled) whose cached
        tokens sum to ``cached_sum``; the same as ``count`` calls of :meth:`add`."""
        if count <= 0:
            return
        tokens = count * new_tokens
        self.num_requests += count
        self.num_tokens += tokens
        self.sampled_tokens += tokens
        pairs = new_tokens * cached_sum + count * new_tokens * (new_tokens + 1) * 0.5
        if new_tokens <= DECODE_QUERY_MAX:
            self.decode_tokens += tokens
            self.decode_kv_tokens += cached_sum + tokens
            self.decode_pairs += pairs
            self.decode_requests += count
        else:
            self.prefill_tokens += tokens
            self.prefill_kv_tokens += cached_sum + tokens
            self.prefill_pairs += pairs
            self.prefill_requests += count

    @classmethod
    def from_pairs(cls, batch: Iterable[Sequence[int]]) -> BatchStats:
        """Stats of a contract batch: (new_tokens, cached_tokens) pairs.

        Decode-sized entries sample every new token (a verify step needs k + 1 logits); prefill
        entries are taken as finishing, sampling one token.
        """
        stats = cls()
        for entry in batch:
            if len(entry) != 2:
                raise CbsimError(f"batch entry {entry!r} must be (new_tokens, cached_tokens)")
            q, c = int(entry[0]), int(entry[1])
            if q < 1 or c < 0:
                raise CbsimError(f"batch entry {entry!r}: need new_tokens >= 1, cached_tokens >= 0")
            stats.add(q, c, q if q <= DECODE_QUERY_MAX else 1)
        return stats


def _fit_for(fits: dict[str, RooflineFit], dtype: str) -> RooflineFit | None:
    """The fit for a dtype; fp16 and bf16 run the same tensor-core paths, so either serves both."""
    if dtype in fits:
        return fits[dtype]
    twin = {"fp16": "bf16", "bf16": "fp16"}.get(dtype)
    return fits.get(twin) if twin else None


def _engine_profile(engine: EngineProfile | str | None) -> EngineProfile:
    if engine is None:
        return bare_profile()
    if isinstance(engine, str):
        return load_engine_profile(engine)
    return engine


def _calibration_profile(
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
) -> tuple[CostModel, CostModel] | None:
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
        CostModel(model, transfer.gpu, tp, dtype, kv_dtype, calibration=name, engine=None)
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
    return dtype if dtype in ("bf16", "fp16") else "bf16"


class CostModel:
    """Iteration time of a batch of (new_tokens, cached_tokens) pairs on one replica.

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
        if self.kv_dtype not in ("bf16", "fp16", "fp8"):
            raise CbsimError(
                f"kv_dtype must be bf16, fp16 or fp8, got {self.kv_dtype!r}", field="kv_dtype"
            )
        self.params = params or CostParams()
        self.calibration = _calibration_profile(calibration, self.gpu.name, self.engine)
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
        self._attn_flops = self.gpu.peak_flops("bf16" if self.kv_dtype != "fp8" else "fp8")
        self._act_bytes = 2.0  # activations stay in 16-bit even with fp8 weights
        self._kv_bytes = DTYPE_BYTES[self.kv_dtype]
        m = self.model
        self._q_heads = max(1, m.num_heads // tp)
        self._kv_heads = kv_heads_per_shard(m, tp)
        self._qkv_n = (self._q_heads + 2 * self._kv_heads) * m.head_dim
        self._mlp_n = (2 if m.gated_mlp else 1) * m.intermediate_size // tp
        self._vocab_shard = -(-m.vocab_size // tp)
        cal = self.calibration
        self._gemm_fit = _fit_for(cal.gemm, self._gemm_dtype) if cal is not None else None
        self._head_dtype = dtype if dtype in ("bf16", "fp16") else "bf16"
        self._head_fit = _fit_for(cal.gemm, self._head_dtype) if cal is not None else None
        self._head_peak = self.gpu.peak_flops(self._head_dtype)
        # attention corrections may also depend on the head layout, fixed for this model and tp:
        # specialise them once to the two features that vary per batch (batch, tokens)
        heads = {
            "kv_heads": float(self._kv_heads),
            "group": self._q_heads / self._kv_heads,
            "head_dim": float(m.head_dim),
        }
        decode = _fit_for(cal.decode_attention, self.kv_dtype) if cal is not None else None
        prefill = _fit_for(cal.prefill_attention, self.kv_dtype) if cal is not None else None
        self._decode_fit_model = decode.specialize(heads) if decode is not None else None
        self._decode_fit = (
            self._decode_fit_model.compiled() if self._decode_fit_model is not None else None
        )
        self._compiled: dict[tuple[int, int] | None, Any] = {}
        self._prefill_fit = prefill.specialize(heads).compiled() if prefill is not None else None
        self._linear_cache: dict[
            int | tuple[int, int], tuple[float, float, float, float, float]
        ] = {}
        self._token_cache: dict[tuple[int, ...], float] = {}
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

    def _attention_all_layers(
        self, tokens: int, kv_tokens: int, pairs: float, *, decode: bool, requests: int = 1
    ) -> float:
        """Seconds for every layer's attention over a group: full-attention layers read all
        cached tokens, local-attention layers (a sliding window or Llama 4's chunks, taken as a
        window) at most the last ``sliding_window`` of each request's. With attention data
        parallelism, a rank's share of the group (the ranks wait for the largest); with pipeline
        stages, a micro-batch's share through every stage, each as long as the largest."""
        if self._split > 1 and tokens > 0 and requests > 0:
            held = -(-requests // self._split)  # whole requests: the largest share's
            tokens, kv_tokens = (
                self._share_of(tokens, requests),
                self._share_of(kv_tokens, requests),
            )
            pairs, requests = pairs * held / requests, held
        full = self.attention_time(tokens, kv_tokens, pairs, decode=decode, requests=requests)
        m = self.model
        if not m.sliding_window:
            total = m.num_layers * full
        else:
            kv_local, pairs_local = windowed(
                tokens, kv_tokens, pairs, requests, m.sliding_window, decode=decode
            )
            local = self.attention_time(
                tokens, kv_local, pairs_local, decode=decode, requests=requests
            )
            total = (m.num_layers - m.sliding_window_layers) * full
            total += m.sliding_window_layers * local
        return total * self._stage_factor if self.pp > 1 else total

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

    # ------------------------------------------------------------------ per-iteration terms

    def _linear_times(
        self, n_tokens: int, requests: int = 0
    ) -> tuple[float, float, float, float, float]:
        """(qkv, o_proj, mlp, elementwise, allreduce) seconds for all layers at N tokens of
        ``requests`` requests (with attention data parallelism: a rank's share of them, the
        experts all N; with pipeline stages: a micro-batch's, through every stage)."""
        key = n_tokens if self._split == 1 else (n_tokens, requests)
        cached = self._linear_cache.get(key)
        if cached is not None:
            return cached
        total = n_tokens
        if self._split > 1:
            n_tokens = self._share_of(n_tokens, requests)
        m = self.model
        layers = m.num_layers
        h = m.hidden_size
        qkv = self.gemm_time(n_tokens, self._qkv_n, h)
        o_proj = self.gemm_time(n_tokens, h, self._q_heads * m.head_dim)
        if self._mla is not None:  # priced with attention, in the MLA module
            qkv = o_proj = 0.0
        mlp = self.gemm_time(n_tokens, self._mlp_n, h) + self.gemm_time(
            n_tokens, h, m.intermediate_size // self.tp
        )
        mlp_total = layers * mlp
        if self._moe is not None:
            moe_tokens = total if self.dp > 1 else n_tokens  # ranks share experts; stages not
            mlp_total = m.num_dense_layers * mlp + sum(self._moe_times(moe_tokens, n_tokens))
        result = (
            layers * qkv,
            layers * o_proj,
            mlp_total,
            layers * self.elementwise_time(n_tokens),
            layers * 2 * self.allreduce_time(n_tokens),
        )
        if self.pp > 1:
            f = self._stage_factor
            result = (f * result[0], f * result[1], f * result[2], f * result[3], f * result[4])
        if len(self._linear_cache) < 65536:
            self._linear_cache[key] = result
        return result

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
        experts (:mod:`cbsim.calibration.moe`'s fit) and the shared experts. With attention data
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

    def _moe_times(self, tokens: int, local: int | None = None) -> tuple[float, float]:
        """(MoE MLPs, expert-parallel all-to-all) seconds over all MoE layers at ``tokens``
        tokens, ``local`` of them a data-parallel rank's (memoised)."""
        if local is None:
            local = self.rank_share(tokens) if self.dp > 1 else tokens
        key = tokens if self.dp == 1 else (tokens, local)
        cached = self._moe_cache.get(key)
        if cached is None:
            layers = self.model.num_moe_layers
            dispatch = self.dispatch_time(local) if self.dp > 1 else 0.0
            cached = (layers * self.moe_layer_time(tokens, local), layers * dispatch)
            if len(self._moe_cache) < 65536:
                self._moe_cache[key] = cached
        return cached

    def _lm_head_time(self, sampled: int, requests: int = 0) -> float:
        key = sampled if self._split == 1 else (sampled, requests)
        cached = self._lm_head_cache.get(key)
        if cached is None:
            # quantised checkpoints keep the LM head in 16 bits
            cached = self._gemm(
                self._share_of(sampled, requests),
                self._vocab_shard,
                self.model.hidden_size,
                self._head_dtype,
                self._head_predict,
                self._head_peak,
            )
            if self.pp > 1:  # the last stage samples every micro-batch of the round
                cached *= self._micro_batches(requests)
            if len(self._lm_head_cache) < 65536:
                self._lm_head_cache[key] = cached
        return cached

    def breakdown_stats(self, stats: BatchStats) -> dict[str, float]:
        """Seconds per op family for a batch given by its stats; values sum to the iteration time.
        ``overhead`` is what the engine's CPU-side work adds beyond the kernels."""
        if stats.num_tokens <= 0:
            return {}
        requests = stats.num_requests
        qkv, o_proj, mlp, elementwise, allreduce = self._linear_times(stats.num_tokens, requests)
        moe: dict[str, float] = {}
        if self._moe is not None:
            # what _linear_times counted: every rank's tokens (dp), or a micro-batch's (pp)
            share = self._share_of(stats.num_tokens, requests)
            tokens = stats.num_tokens if self.pp == 1 else share
            moe_s, alltoall_s = self._moe_times(tokens, share)
            if self.pp > 1:
                moe_s *= self._stage_factor
                alltoall_s *= self._stage_factor
            mlp -= moe_s + alltoall_s
            moe = {"moe": moe_s, "alltoall": alltoall_s}
        parts = {
            "qkv_proj": qkv,
            "o_proj": o_proj,
            "mlp": mlp,
            **moe,
            "elementwise": elementwise,
            "allreduce": allreduce,
            "lm_head": self._lm_head_time(stats.sampled_tokens, requests),
            "attn_prefill": self._attention_all_layers(
                stats.prefill_tokens,
                stats.prefill_kv_tokens,
                stats.prefill_pairs,
                decode=False,
                requests=stats.prefill_requests,
            ),
            "attn_decode": self._attention_all_layers(
                stats.decode_tokens,
                stats.decode_kv_tokens,
                stats.decode_pairs,
                decode=True,
                requests=stats.decode_requests,
            ),
        }
        if self.pp > 1:
            parts["pp_send"] = self.pp_send_time(stats.num_tokens, requests)
        gpu = sum(parts.values())
        tokens = stats.num_tokens
        if self._split > 1:  # as step_time counts them
            requests, tokens = self.rank_share(requests), self._share_of(tokens, requests)
        parts["overhead"] = self.overhead.added_time(gpu, requests, tokens)
        return parts

    def step_time(self, gpu_s: float, num_requests: int, num_tokens: int) -> float:
        """An engine step whose kernels take ``gpu_s``: the engine's CPU work added, overlapped
        with the kernels where the engine overlaps them (``StepOverhead.step_time``'s arithmetic,
        the same floats, without a model lookup per call)."""
        if self._overhead_zero:
            return gpu_s
        if self._split > 1:  # each rank's engine core (each micro-batch) schedules its share
            num_tokens = self._share_of(num_tokens, num_requests)
            num_requests = self.rank_share(num_requests)
        cpu_s, per_request, per_token, serial_s, serial_per_request, overlap = self._step_terms
        cpu = cpu_s + per_request * num_requests + per_token * num_tokens
        serial = serial_s + serial_per_request * num_requests
        if overlap:
            return (gpu_s if gpu_s > cpu else cpu) + serial
        return gpu_s + cpu + serial

    def _token_time(self, num_tokens: int, sampled: int, requests: int = 0) -> float:
        """Kernels other than attention: they depend only on the batch's counts (memoised; with
        data-parallel ranks or pipeline stages also on its requests, kept whole in a share)."""
        key = (num_tokens, sampled) if self._split == 1 else (num_tokens, sampled, requests)
        cached = self._token_cache.get(key)
        if cached is None:
            qkv, o_proj, mlp, elementwise, allreduce = self._linear_times(num_tokens, requests)
            cached = qkv + o_proj + mlp + elementwise + allreduce
            cached += self._lm_head_time(sampled, requests)
            if self.pp > 1:
                cached += self.pp_send_time(num_tokens, requests)
            if len(self._token_cache) < 262144:
                self._token_cache[key] = cached
        return cached

    def gpu_time_stats(self, stats: BatchStats) -> float:
        """Kernel seconds of a batch given by its stats (no engine overhead)."""
        if stats.num_tokens <= 0:
            return 0.0
        return (
            self._token_time(stats.num_tokens, stats.sampled_tokens, stats.num_requests)
            + self._attention_all_layers(
                stats.prefill_tokens,
                stats.prefill_kv_tokens,
                stats.prefill_pairs,
                decode=False,
                requests=stats.prefill_requests,
            )
            + self._attention_all_layers(
                stats.decode_tokens,
                stats.decode_kv_tokens,
                stats.decode_pairs,
                decode=True,
                requests=stats.decode_requests,
            )
        )

    def time_stats(self, stats: BatchStats) -> float:
        """Iteration seconds for a batch given by its stats (the sum of :meth:`breakdown_stats`)."""
        if stats.num_tokens <= 0:
            return 0.0
        return self.step_time(self.gpu_time_stats(stats), stats.num_requests, stats.num_tokens)

    def decode_time(self, num_requests: int, kv_tokens: int) -> float:
        """Iteration seconds of a pure decode batch: ``num_requests`` single-token steps reading
        ``kv_tokens`` keys/values in all (cached + new). Equal to :meth:`time_stats` of that batch."""
        gpu = self._token_time(
            num_requests, num_requests, num_requests
        ) + self._attention_all_layers(
            num_requests, kv_tokens, float(kv_tokens), decode=True, requests=num_requests
        )
        return self.step_time(gpu, num_requests, num_requests)

    def compiled(self, tokens: int, extra_gemm: tuple[int, int] | None = None) -> Any:
        """This model's decode pricing compiled for batches of up to ``tokens`` tokens
        (:func:`cbsim.compiled.compile_cost`; None when it cannot be compiled), kept and extended
        as larger batches come."""
        from cbsim.compiled import compile_cost, extend_tables

        have = self._compiled.get(extra_gemm, False)
        if have is False:
            have = compile_cost(self, tokens, extra_gemm)
        elif have is not None and have.size <= tokens:
            have = extend_tables(have, self, tokens, extra_gemm)
        self._compiled[extra_gemm] = have
        return have

    # ------------------------------------------------------------------ contract API

    def breakdown(self, batch: Iterable[Sequence[int]]) -> dict[str, float]:
        """Seconds per op family for a batch of (new_tokens, cached_tokens) pairs."""
        return self.breakdown_stats(BatchStats.from_pairs(batch))

    def iteration_time(self, batch: Iterable[Sequence[int]]) -> float:
        """Seconds one iteration over a batch of (new_tokens, cached_tokens) pairs takes."""
        return self.time_stats(BatchStats.from_pairs(batch))

    def weight_read_time(self) -> float:
        """The physical lower bound of a decode step: all weights of a shard over peak bandwidth."""
        m = self.model
        if m.is_moe:  # a batch of one reads its own experts only
            experts = m.num_moe_layers * m.experts_per_token * m.expert_param_count()
            if self.dp > 1:  # the experts spread over every rank's GPUs
                dense = split_weight_bytes(0, m.active_param_count() - experts, self.dtype)
                per_gpu = dense / self.tp + split_weight_bytes(experts, 0, self.dtype) / (
                    self.tp * self.dp
                )
                return per_gpu / self.gpu.hbm_bandwidth
            active = split_weight_bytes(experts, m.active_param_count() - experts, self.dtype)
            return active / self.tp / self.gpu.hbm_bandwidth
        return model_weight_bytes(m, self.dtype) / self.tp / self.gpu.hbm_bandwidth

    @classmethod
    def bare_roofline(
        cls,
        model: str | ModelShape = "llama-3-8b",
        gpu: str | GPU = "h100-sxm",
        tp: int = 1,
        dtype: str = "bf16",
        kv_dtype: str | None = None,
        params: CostParams | None = None,
    ) -> CostModel:
        """The uncalibrated roofline (``params``' efficiencies) with no engine overhead."""
        return cls(
            model, gpu, tp=tp, dtype=dtype, kv_dtype=kv_dtype, params=params,
            calibration=UNCALIBRATED, engine=None,
        )  # fmt: skip
