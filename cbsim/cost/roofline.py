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

This module is the layer assembly: how the ops of :mod:`cbsim.cost.op_pricing` (each priced on
one GPU) add up to an iteration, per layer and over the layers a GPU runs, with its share of the
batch under attention data parallelism or pipeline stages, plus the engine's step overhead. A batch
comes as its sums (:mod:`cbsim.cost.batch_stats`). The decode-step pricing is also compiled here
into the tables the numba kernels of :mod:`cbsim.cost.compiled` read (:func:`compile_cost`), so those
kernels sit below the cost model and know nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from cbsim.catalog.hardware import GPU
from cbsim.catalog.model_bytes import DTYPE_BYTES, model_weight_bytes, split_weight_bytes
from cbsim.catalog.models import ModelShape
from cbsim.cost.batch_stats import DECODE_QUERY_MAX, BatchStats
from cbsim.cost.compiled import (
    EXTRA,
    FIT_AXIS0,
    FIT_AXIS1,
    FIT_COMPUTE,
    FIT_FLOOR,
    FIT_GRID1,
    FIT_GRID2,
    FIT_MEMORY,
    FIT_MODE,
    FIT_PLAIN,
    FIT_STRIDE0,
    FIT_USES_BATCH,
    HEAD,
    HEAD_FLOOR,
    LINEAR,
    LINEAR_FLOOR,
    ROOFLINE,
    TABLE_CHUNK,
    TABLE_ROWS,
    TOKEN,
    TRANSFER_FIT_FIELDS,
    CompiledCost,
    FloatArray,
    prefill_attention,
    stepped_seconds,
)
from cbsim.cost.kernel_call import KernelCall
from cbsim.cost.mla import MlaPricing, mla_weight_params
from cbsim.cost.op_pricing import (
    DEFAULT_ENGINE,
    ELEMENTWISE_KERNELS_PER_LAYER,
    FUSED_ELEMENTWISE_KERNELS,
    NETWORK_STEP_LATENCY_S,
    WEIGHT_DTYPES,
    OpPricing,
    attention_flops_bytes,
    default_kv_dtype,
    gemm_flops_bytes,
    windowed,
)
from cbsim.cost.params import CostParams
from cbsim.cost.profile import UNCALIBRATED, RooflineFit

__all__ = [
    "DECODE_QUERY_MAX",
    "DEFAULT_ENGINE",
    "ELEMENTWISE_KERNELS_PER_LAYER",
    "FUSED_ELEMENTWISE_KERNELS",
    "NETWORK_STEP_LATENCY_S",
    "WEIGHT_DTYPES",
    "BatchStats",
    "CostModel",
    "attention_flops_bytes",
    "compile_cost",
    "default_kv_dtype",
    "extend_tables",
    "gemm_flops_bytes",
    "windowed",
]


class CostModel(OpPricing):
    """Iteration time of a batch of (new_tokens, cached_tokens) pairs on one replica: the ops of
    :class:`~cbsim.cost.op_pricing.OpPricing` (whose arguments it takes) added up.
    """

    # ------------------------------------------------------------------ per-iteration terms

    def _attention_all_layers(
        self,
        tokens: int,
        kv_tokens: int,
        pairs: float,
        *,
        decode: bool,
        requests: int = 1,
        layer: Callable[[int, int, float, int], float] | None = None,
    ) -> float:
        """Seconds for every layer's attention over a group: full-attention layers read all
        cached tokens, local-attention layers (a sliding window or Llama 4's chunks, taken as a
        window) at most the last ``sliding_window`` of each request's. With attention data
        parallelism, a rank's share of the group (the ranks wait for the largest); with pipeline
        stages, a micro-batch's share through every stage, each as long as the largest.
        ``layer`` (tokens, kv_tokens, pairs, requests): one layer's attention priced otherwise
        than by :meth:`attention_time` (the same float)."""
        if self._split > 1 and tokens > 0 and requests > 0:
            held = -(-requests // self._split)  # whole requests: the largest share's
            tokens, kv_tokens = (
                self._share_of(tokens, requests),
                self._share_of(kv_tokens, requests),
            )
            pairs, requests = pairs * held / requests, held
        if layer is None:
            full = self.attention_time(tokens, kv_tokens, pairs, decode=decode, requests=requests)
        else:
            full = layer(tokens, kv_tokens, pairs, requests)
        m = self.model
        if not m.sliding_window:
            total = m.num_layers * full
        else:
            kv_local, pairs_local = windowed(
                tokens, kv_tokens, pairs, requests, m.sliding_window, decode=decode
            )
            if layer is None:
                local = self.attention_time(
                    tokens, kv_local, pairs_local, decode=decode, requests=requests
                )
            else:
                local = layer(tokens, kv_local, pairs_local, requests)
            total = (m.num_layers - m.sliding_window_layers) * full
            total += m.sliding_window_layers * local
        return total * self._stage_factor if self.pp > 1 else total

    def whole_prefill_attention(
        self, tokens: int, kv_tokens: int, pairs: float, requests: int
    ) -> float:
        """Every layer's attention over a prefill group (:meth:`_attention_all_layers` with
        ``decode=False``), each layer priced compiled where :meth:`time_stats` compiles (the
        same float), for the speculative kernels' steps beside prefill chunks."""
        return self._attention_all_layers(
            tokens, kv_tokens, pairs, decode=False, requests=requests, layer=self._prefill_layer
        )

    def _prefill_layer(self, tokens: int, kv_tokens: int, pairs: float, requests: int) -> float:
        """One layer's prefill attention: :meth:`compiled_prefill_attention` where it compiles,
        else :meth:`attention_time` (the same float)."""
        seconds = self.compiled_prefill_attention(tokens, kv_tokens, pairs, requests)
        if seconds is None:
            return self.attention_time(tokens, kv_tokens, pairs, decode=False, requests=requests)
        return seconds

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

    def _linear_table(self, counts: np.ndarray) -> np.ndarray:
        """The sum of :meth:`_linear_times` (qkv + o_proj + mlp + elementwise + allreduce) at
        each of ``counts``' token counts (positive; the batch whole: no data-parallel ranks or
        pipeline stages), each count's float bit for bit (the same operations in the same
        order, element-wise)."""
        if self._split > 1:
            raise ValueError("_linear_table prices no data-parallel ranks or pipeline stages")
        m = self.model
        layers = m.num_layers
        h = m.hidden_size
        qkv = self.gemm_times(counts, self._qkv_n, h)
        o_proj = self.gemm_times(counts, h, self._q_heads * m.head_dim)
        if self._mla is not None:
            qkv = o_proj = np.zeros(len(counts))
        mlp = self.gemm_times(counts, self._mlp_n, h) + self.gemm_times(
            counts, h, m.intermediate_size // self.tp
        )
        mlp_total = layers * mlp
        if self._moe is not None:
            moe = m.num_moe_layers * self.moe_layer_times(counts)
            # sum(self._moe_times(n)): 0 + the MoE MLPs + no dispatch (one rank)
            mlp_total = m.num_dense_layers * mlp + (0.0 + moe + m.num_moe_layers * 0.0)
        elementwise = layers * self.elementwise_times(counts)
        allreduce = layers * 2 * self.allreduce_times(counts)
        return np.asarray(layers * qkv + layers * o_proj + mlp_total + elementwise + allreduce)

    def _lm_head_table(self, counts: np.ndarray) -> np.ndarray:
        """:meth:`_lm_head_time` at each of ``counts``' sampled counts (positive; no pipeline
        stages or data-parallel ranks), bit for bit."""
        if self._split > 1:
            raise ValueError("_lm_head_table prices no data-parallel ranks or pipeline stages")
        return self._gemm_points(
            counts,
            self._vocab_shard,
            self.model.hidden_size,
            self._head_dtype,
            self._head_fit,
            self._head_peak,
        )

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
            if self._split == 1 and 0 < sampled <= num_tokens < ROW_LIMIT:
                cached = self._token_rows(num_tokens, sampled)
            else:
                qkv, o_proj, mlp, elementwise, allreduce = self._linear_times(num_tokens, requests)
                cached = qkv + o_proj + mlp + elementwise + allreduce
                cached += self._lm_head_time(sampled, requests)
                if self.pp > 1:
                    cached += self.pp_send_time(num_tokens, requests)
            if len(self._token_cache) < 262144:
                self._token_cache[key] = cached
        return cached

    def _token_rows(self, num_tokens: int, sampled: int) -> float:
        """:meth:`_token_time` of a whole batch (no data-parallel ranks or pipeline stages) from
        rows of every token count, filled a block at a time by :meth:`_linear_table` and
        :meth:`_lm_head_table`: the same floats as pricing the count alone, for a microsecond or
        two a count instead of some thirty."""
        linear, head = self._linear_row, self._head_row
        if num_tokens >= len(linear):
            linear = self._linear_row = _grown_row(linear, num_tokens, self._linear_table)
        if sampled >= len(head):
            head = self._head_row = _grown_row(head, sampled, self._lm_head_table)
        return float(linear[num_tokens] + head[sampled])

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
        """Iteration seconds for a batch given by its stats (the sum of :meth:`breakdown_stats`).

        Where the model compiles (:func:`compile_cost`), its attention and the engine's step
        overhead are one compiled call (:func:`cbsim.cost.compiled.stepped_seconds`: the same float
        operations in the same order, so the same seconds); otherwise, or while numba's cache is
        cold (:attr:`cold_start`), :meth:`python_time_stats`."""
        if stats.num_tokens <= 0:
            return 0.0
        if self.cold_start.left and self.cold_start.interpreted():
            return self.python_time_stats(stats)
        stepped = self._stepped
        if stepped is False:
            stepped = self._stepped = _stepped_pricing(self)
        if stepped is None:
            return self.python_time_stats(stats)
        call, compiled, fit, grid, _ = stepped
        return call(  # type: ignore[no-any-return]
            compiled,
            fit,
            grid,
            self._token_time(stats.num_tokens, stats.sampled_tokens, stats.num_requests),
            stats.num_requests,
            stats.num_tokens,
            stats.prefill_tokens,
            stats.prefill_kv_tokens,
            stats.prefill_pairs,
            stats.prefill_requests,
            stats.decode_tokens,
            stats.decode_kv_tokens,
            stats.decode_pairs,
            stats.decode_requests,
        )

    def compiled_prefill_attention(
        self, tokens: int, kv_tokens: int, pairs: float, requests: int
    ) -> float | None:
        """:meth:`attention_time` of one layer's prefill (``decode=False``) by the compiled
        pricing :meth:`time_stats` calls (the same float: the whole group, no share of it, also
        on stages or ranks), or None where that pricing does not compile. For callers already
        pricing compiled: it does not count as a cold call."""
        stepped = self._stepped
        if stepped is False:
            stepped = self._stepped = _stepped_pricing(self)
        if stepped is None:
            return None
        _, compiled, fit, grid, prefill = stepped
        seconds: float = prefill(compiled, fit, grid, tokens, kv_tokens, pairs, requests)
        return seconds

    def python_time_stats(self, stats: BatchStats) -> float:
        """:meth:`time_stats` priced in Python, term by term."""
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
        (:func:`compile_cost`; None when it cannot be compiled), kept and extended as larger
        batches come. None too while numba's cache is cold (:attr:`cold_start`): the caller then
        prices in Python, with the same results."""
        if tokens < self._compiled_size.get(extra_gemm, 0) and not self.cold_start.left:
            # the tables cover the batch (several calls per speculative iteration or run)
            return self._compiled[extra_gemm]
        return self._compile_tables(tokens, extra_gemm)

    def compiled_decode(self, requests: int) -> Any:
        """:meth:`compiled` for a plain decode run (:func:`~cbsim.cost.compiled.decode_seconds`
        alone), which compiles also where the batch splits over data-parallel ranks or pipeline
        stages (a pricing of its own, :data:`SHARED_DECODE`; a whole batch shares
        :meth:`compiled`'s tables); None as :meth:`compiled` gives it."""
        key = None if self._split == 1 else SHARED_DECODE
        if requests < self._compiled_size.get(key, 0) and not self.cold_start.left:
            return self._compiled[key]
        return self._compile_tables(requests, key)

    def _compile_tables(self, tokens: int, key: tuple[int, int] | str | None) -> Any:
        """:meth:`compiled` (or, ``key`` :data:`SHARED_DECODE`, :meth:`compiled_decode`) when
        its tables do not cover ``tokens`` yet or numba's cache is cold: built or extended,
        and kept."""
        have = self._compiled.get(key, False)
        if self.cold_start.left and self.cold_start.interpreted():
            return None
        if isinstance(key, str):
            if have is False:
                have = compile_shared_decode(self, tokens)
            elif have is not None and have.size <= tokens:
                have = extend_shared_decode(have, self, tokens)
        elif have is False:
            have = compile_cost(self, tokens, key)
        elif have is not None and have.size <= tokens:
            have = extend_tables(have, self, tokens, key)
        self._compiled[key] = have
        self._compiled_size[key] = 0 if have is None else have.size
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


def compile_cost(cost: CostModel, tokens: int, extra_gemm: tuple[int, int] | None = None) -> (
    CompiledCost | None
):  # fmt: skip
    """``cost`` compiled for decode batches of up to ``tokens`` tokens (None: not compilable).

    ``extra_gemm`` = (n, k) adds ``cost.gemm_time(m, n, k)`` per step of m requests (an EAGLE
    head's fusion layer), tabled like the token kernels."""
    base = _compiled_base(cost)
    return None if base is None else extend_tables(base, cost, tokens, extra_gemm)


def _compiled_base(
    cost: CostModel, shares: bool = False, decode_only: bool = False
) -> CompiledCost | None:
    """:func:`compile_cost` without its tables (None: not compilable). ``shares``: also a model
    whose batches split over data-parallel ranks or pipeline stages (for
    :func:`~cbsim.cost.compiled.decode_seconds` and :func:`~cbsim.cost.compiled.stepped_seconds`
    only), but with neither latent attention nor a transfer GPU unless ``decode_only`` (for
    :func:`~cbsim.cost.compiled.decode_seconds` alone)."""
    mla = cost._mla
    stepped = shares and not decode_only  # stepped_seconds: no latent attention or transfer GPU
    if (
        (cost._split > 1 and not shares)
        or (mla is not None and (stepped or mla.params is not cost.params))
        or (cost._transfer is not None and stepped)
    ):
        return None  # unless asked, ranks or stages; latent attention, a transfer GPU stepped
    fields = _compiled_fit(cost, cost._decode_fit_model if mla is None else mla.decode)
    if fields is None:
        return None
    transfer_at = -1
    if cost._transfer is not None and mla is None:  # MLA modules are priced without it
        block = _transfer_block(cost._transfer, len(fields["grid"]))
        if block is None:
            return None
        transfer_at = len(fields["grid"])
        fields["grid"] = np.concatenate([fields["grid"], block])
    cpu_s, per_request, per_token, serial_s, serial_per_request, overlap = cost._step_terms
    return CompiledCost(
        tables=np.zeros((TABLE_ROWS, 0)),
        mode=fields["mode"],
        layers=cost.model.num_layers,
        q_heads=cost._q_heads,
        kv_heads=cost._kv_heads,
        head_dim=cost.model.head_dim,
        kv_bytes=float(cost._kv_bytes),
        act_bytes=float(cost._act_bytes),
        attn_peak=float(cost._attn_flops),
        bandwidth=float(cost.gpu.hbm_bandwidth),
        floor_s=fields["floor_s"],
        compute_eff=fields["compute_eff"],
        memory_eff=fields["memory_eff"],
        grid=fields["grid"],
        axis0_size=fields["axis0_size"],
        axis1_size=fields["axis1_size"],
        stride0=fields["stride0"],
        uses_batch=fields["uses_batch"],
        cpu_s=float(cpu_s),
        cpu_per_request_s=float(per_request),
        cpu_per_token_s=float(per_token),
        serial_s=float(serial_s),
        serial_per_request_s=float(serial_per_request),
        overlap=bool(overlap),
        overhead_zero=bool(cost._overhead_zero),
        overhead_rises=False,
        split=int(cost._split),
        stage_factor=float(cost._stage_factor) if cost.pp > 1 else 1.0,
        window=int(cost.model.sliding_window),
        window_layers=int(cost.model.sliding_window_layers),
        **({} if mla is None else _mla_fields(mla)),
        transfer_at=transfer_at,
    )


def _transfer_block(pair: tuple[OpPricing, OpPricing], at: int) -> np.ndarray | None:
    """A transfer GPU's block of :attr:`CompiledCost.grid` starting at ``at`` (see
    ``cbsim.cost.compiled.TRANSFER_PEAK``): the engine's and the reference's bare cost models'
    decode fits there; None when they do not compile or their GPU's figures differ."""
    engine, reference = pair
    if engine._attn_flops != reference._attn_flops or engine.gpu != reference.gpu:
        return None
    head = [float(engine._attn_flops), float(engine.gpu.hbm_bandwidth)]
    grids_at = at + len(head) + 2 * TRANSFER_FIT_FIELDS
    grids: list[np.ndarray] = []
    for model in pair:
        fields = _compiled_fit(model, model._decode_fit_model)
        if fields is None:
            return None
        head += [
            float(fields["mode"]),
            1.0 if fields["uses_batch"] else 0.0,
            fields["floor_s"],
            fields["compute_eff"],
            fields["memory_eff"],
            float(fields["axis0_size"]),
            float(fields["axis1_size"]),
            float(fields["stride0"]),
            float(grids_at + sum(len(g) for g in grids)),
            float(len(fields["grid"])),
        ]
        grids.append(fields["grid"])
    return np.concatenate([np.asarray(head, dtype=np.float64), *grids])


def _mla_fields(mla: MlaPricing) -> dict[str, Any]:
    """:class:`CompiledCost`'s latent-attention fields: what ``MlaPricing.module_time`` reads,
    each the float it computes (the weights through ``mla_weight_params`` as it calls it)."""
    model = mla.model
    dtype = mla.weight_dtype or mla.gemm_dtype
    rank, rope = model.kv_lora_rank, model.qk_rope_head_dim
    return {
        "mla": True,
        "mla_weights": float(mla_weight_params(model, mla.heads * np.ones(1))[0]),
        "mla_heads": float(mla.heads),
        "mla_attention_width": int(rank + rope + rank),
        "mla_cache_width": int(rank + rope),
        "mla_weight_bytes": float(DTYPE_BYTES[dtype]),
        "mla_kv_bytes": float(DTYPE_BYTES[mla.kv_dtype]),
        "mla_peak": float(mla.gpu.peak_flops(dtype)),
    }


def _compiled_fit(cost: OpPricing, fit: RooflineFit | None) -> dict[str, Any] | None:
    """An attention fit (or, None, the raw roofline) as :class:`CompiledCost`'s attention fields;
    None when its correction is not over (batch, tokens) or one of them."""
    axis0 = axis1 = flat = np.zeros(0)
    stride0 = 0
    uses_batch = False
    if fit is None:
        p = cost.params
        mode, floor, compute, memory = (
            ROOFLINE,
            p.attn_floor_s,
            p.attn_compute_eff,
            p.attn_memory_eff,
        )
    else:
        floor, compute, memory = fit.floor_s, fit.compute_eff, fit.memory_eff
        if fit.correction is None:
            mode = FIT_PLAIN
        else:
            grid = fit.correction.grid()
            features = list(fit.correction.features)
            axes = grid._axes_lists
            if len(axes) == 1 and features[0] in ("batch", "tokens"):
                mode = FIT_GRID1
                uses_batch = features[0] == "batch"
                axis0 = np.asarray(axes[0], dtype=np.float64)
            elif len(axes) == 2 and features == ["batch", "tokens"]:
                mode = FIT_GRID2
                axis0 = np.asarray(axes[0], dtype=np.float64)
                axis1 = np.asarray(axes[1], dtype=np.float64)
                stride0 = grid._strides[0]
            else:
                return None
            flat = np.asarray(grid._flat, dtype=np.float64)
    return {
        "mode": mode,
        "floor_s": float(floor),
        "compute_eff": float(compute),
        "memory_eff": float(memory),
        "grid": np.concatenate([axis0, axis1, flat]),
        "axis0_size": len(axis0),
        "axis1_size": len(axis1),
        "stride0": int(stride0),
        "uses_batch": uses_batch,
    }


ROW_BLOCK = 256
"""The fewest token counts :meth:`CostModel._token_rows` prices at once."""
ROW_LIMIT = 1 << 15
"""Batches of this many tokens or more are priced alone (a row that long would cost more to
fill than the few such batches a run has)."""


def _grown_row(
    row: np.ndarray, index: int, table: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """``row`` (index: token count; 0 unused) extended past ``index``, at least doubled, the new
    counts priced by ``table`` all at once."""
    have = len(row)
    grown = np.empty(max(index + 1, 2 * have, ROW_BLOCK))
    grown[:have] = row
    grown[have:] = table(np.arange(have, len(grown), dtype=np.int64))
    return grown


def _stepped_pricing(
    cost: CostModel,
) -> tuple[KernelCall, CompiledCost, FloatArray, FloatArray, KernelCall] | None:
    """What :meth:`CostModel.time_stats` calls its compiled pricing with: the kernel, the model's
    pricing without tables (the batch's other kernels come from its token cache) and its prefill
    fit; and the prefill attention's own kernel; None when either cannot be compiled."""
    base = _compiled_base(cost, shares=True)  # stepped_seconds prices ranks and stages
    prefill = compile_prefill(cost) if base is not None else None
    if base is None or prefill is None:
        return None
    return (
        KernelCall(stepped_seconds),
        base,
        prefill[0],
        prefill[1],
        KernelCall(prefill_attention),
    )


def compile_prefill(cost: CostModel) -> tuple[FloatArray, FloatArray] | None:
    """``cost``'s prefill-attention fit as :func:`cbsim.cost.compiled.prefill_attention` reads it:
    (its fields, its correction grid); None when it cannot be compiled."""
    fields = _compiled_fit(cost, cost._prefill_fit_model)
    if fields is None:
        return None
    fit = np.zeros(8)
    fit[FIT_MODE] = fields["mode"]
    fit[FIT_USES_BATCH] = 1.0 if fields["uses_batch"] else 0.0
    fit[FIT_FLOOR] = fields["floor_s"]
    fit[FIT_COMPUTE] = fields["compute_eff"]
    fit[FIT_MEMORY] = fields["memory_eff"]
    fit[FIT_AXIS0] = fields["axis0_size"]
    fit[FIT_AXIS1] = fields["axis1_size"]
    fit[FIT_STRIDE0] = fields["stride0"]
    return fit, fields["grid"]


SHARED_CHUNK = 16
"""A shared decode pricing's TOKEN row grows to the next multiple of this past the batch."""

SHARED_DECODE = "shared decode"
"""The key of :meth:`CostModel.compiled_decode`'s pricing of a batch split over ranks or stages
among a cost model's compiled pricings (the others keyed by their extra GEMM, None for none)."""


def compile_shared_decode(cost: CostModel, requests: int) -> CompiledCost | None:
    """``cost``, whose batches split over data-parallel ranks or pipeline stages, compiled for
    :func:`~cbsim.cost.compiled.decode_seconds` of up to ``requests`` decoding requests (None:
    not compilable)."""
    base = _compiled_base(cost, shares=True, decode_only=True)
    return None if base is None else extend_shared_decode(base, cost, requests)


def extend_shared_decode(compiled: CompiledCost, cost: CostModel, requests: int) -> CompiledCost:
    """:func:`extend_tables` of a model with shares (ranks or stages): its TOKEN row the whole
    batch's non-attention kernels, each count's float ``CostModel._token_time(n, n, n)`` itself;
    the rows no decode step reads left NaN. Priced a count at a time in Python (a model of
    experts over ranks: a quarter of a millisecond a count), the row grows a few counts past the
    batch, not to a power of two: counts no batch reaches are not priced."""
    have = compiled.size
    if have > requests:
        return compiled
    size = (requests // SHARED_CHUNK + 1) * SHARED_CHUNK
    tables = np.full((TABLE_ROWS, size), np.nan)
    tables[:, :have] = compiled.tables
    tables[TOKEN, 0] = 0.0
    row = tables[TOKEN]
    for n in range(max(have, 1), size):
        row[n] = cost._token_time(n, n, n)
    return compiled._replace(tables=tables)


def extend_tables(
    compiled: CompiledCost, cost: CostModel, tokens: int, extra_gemm: tuple[int, int] | None
) -> CompiledCost:
    """``compiled`` with its tables covering batches of up to ``tokens`` tokens."""
    have = compiled.size
    if have > tokens:
        return compiled
    size = max(tokens + 1, 2 * have, TABLE_CHUNK)
    tables = np.zeros((TABLE_ROWS, size))
    tables[:, :have] = compiled.tables
    linear_s, head_s, extra_s = tables[LINEAR], tables[HEAD], tables[EXTRA]
    # every new count at once, each the float CostModel._linear_times and _lm_head_time give it
    counts = np.arange(max(have, 1), size, dtype=np.int64)
    linear_s[counts] = cost._linear_table(counts)
    head_s[counts] = cost._lm_head_table(counts)
    tables[TOKEN] = linear_s + head_s  # CostModel._token_time(n, n): the same sum, the same float
    if extra_gemm is not None:
        n_out, k_in = extra_gemm
        extra_s[counts] = cost.gemm_times(counts, n_out, k_in)
    tables[LINEAR_FLOOR] = np.minimum.accumulate(linear_s[::-1])[::-1]
    tables[HEAD_FLOOR] = np.minimum.accumulate(head_s[::-1])[::-1]
    return compiled._replace(tables=tables, overhead_rises=compiled.cpu_per_token_s >= 0.0)
