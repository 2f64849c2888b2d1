"""Proposers: who drafts the k tokens, and what drafting costs.

* ``draft_model``: a small catalog model (e.g. Llama-3.2-1B for Llama-3 targets) runs k sequential
  decode steps for the batch on the same GPUs, each step over the requests still drafting. Its weights
  and its own KV cache take GPU memory from the target's KV cache.
* ``eagle``: an EAGLE-style head — one decoder layer plus the target's LM head, fed the target's
  hidden state — so each draft token costs one layer, a fusion GEMM and the LM head.
* ``ngram``: prompt lookup; proposing is a CPU string match, negligible next to a GPU step, and its
  acceptance is usually low and bursty (pair it with a per-request or trace acceptance model).
* ``mtp``: multi-token prediction (DeepSeek-V3's MTP module): ``layers`` layers of the target's own
  architecture — a mixture of experts with latent attention for DeepSeek — plus a projection of
  [embedding; hidden state], sharing the target's embedding and LM head, so each draft token
  costs those layers (their experts spread as the target's), the projection and the LM head; its
  layers keep their own KV cache.

With attention data parallelism (``cluster.dp``) each rank drafts for its own requests: a dense
head's steps are priced at a rank's share of the batch, an MTP module's like the target's layers.

A draft model runs on the target's kernels (the same calibration profile). Every draft step is a
separate forward pass with its own launch overhead; under CUDA graphs that is a fraction of the
target step's fixed engine overhead (``DRAFT_STEP_OVERHEAD_FRACTION``, an assumption until
calibrated), with no per-request CPU work of its own.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from functools import cached_property
from typing import ClassVar

import numba
import numpy as np
import numpy.typing as npt

from cbsim.catalog.model_bytes import (
    DTYPE_BYTES,
    dense_weight_dtype,
    end_dtype,
    kv_bytes_per_token_per_gpu,
    model_weight_bytes,
    weight_bytes_per_gpu,
)
from cbsim.catalog.models import ModelShape, get_model
from cbsim.common.errors import CbsimError
from cbsim.cost import CostModel
from cbsim.cost.compiled import EXTRA, CompiledCost, decode_seconds
from cbsim.cost.engine_profile import Frontend, StepOverhead
from cbsim.cost.kernel_call import KernelCall
from cbsim.schema.speculative import DraftModelProposer, EagleProposer, MtpProposer, NgramProposer

ProposerConfig = DraftModelProposer | EagleProposer | NgramProposer | MtpProposer
"""A scenario's ``speculative.proposer``."""

DRAFT_STEP_OVERHEAD_FRACTION = 0.2
NGRAM_SECONDS_PER_REQUEST = 5e-6


def _draft_steps(ks: np.ndarray, contexts: np.ndarray) -> list[tuple[int, int]]:
    """(requests, keys/values read) of each sequential draft step: step s runs the requests with
    k > s, each at context c + s + 1."""
    if len(ks) == 0:
        return []
    k_low, k_high = int(ks.min()), int(ks.max())
    if k_low == k_high:
        return uniform_draft_steps(len(ks), k_high, int(contexts.sum()))
    steps = []
    for s in range(k_high):
        active = ks > s
        n = int(active.sum())
        steps.append((n, int(contexts[active].sum()) + n * (s + 1)))
    return steps


@numba.njit(cache=True)
def fused_step_costs(c: CompiledCost, steps: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Each draft step (requests, keys/values read) of a fused head: a decode step of its layers
    (:func:`cbsim.cost.compiled.decode_seconds`) plus its fusion projection (the ``EXTRA`` table)."""
    out = np.empty(len(steps))
    for i in range(len(steps)):
        n = steps[i, 0]
        out[i] = decode_seconds(c, n, steps[i, 1]) + c.tables[EXTRA, n]
    return out


def uniform_draft_steps(count: int, k: int, context_sum: int) -> list[tuple[int, int]]:
    """The draft steps when all ``count`` requests draft the same ``k``."""
    return [(count, context_sum + count * (s + 1)) for s in range(k)] if count else []


class Proposer(ABC):
    kind: ClassVar[str]

    @abstractmethod
    def draft_time(self, ks: np.ndarray, contexts: np.ndarray) -> float:
        """Seconds to draft ks[i] tokens for each request at KV context contexts[i]."""

    def draft_time_uniform(self, count: int, k: int, context_sum: int) -> float:
        """:meth:`draft_time` when all ``count`` requests draft ``k``, from the contexts' sum."""
        return self.draft_time(np.full(count, k), np.full(count, context_sum // max(count, 1)))

    def draft_time_sweep(self, caps: np.ndarray, contexts: np.ndarray) -> list[float]:
        """:meth:`draft_time` of ``ks = min(k, caps)`` for every k from 0 to ``caps.max()``, the
        same floats as pricing each k on its own."""
        return [self.draft_time(np.minimum(k, caps), contexts) for k in range(int(caps.max()) + 1)]

    def weight_bytes_per_gpu(self) -> float:
        return 0.0

    def kv_bytes_per_token_per_gpu(self) -> float:
        return 0.0


class _ModelProposer(Proposer):
    """Drafts with a (small) transformer on the target's GPUs."""

    shares_layout: ClassVar[bool] = False  # its experts spread as the target's

    def __init__(self, shape: ModelShape, target: CostModel) -> None:
        self.shape = shape
        self.tp = target.tp
        # experts spread as the target's: an MTP module's (its layers are the target's), or any
        # mixture of experts drafting on data-parallel ranks (whose layout requires it)
        self._spread = shape.is_moe and (self.shares_layout or target.dp > 1)
        self.dp = target.dp if self._spread else 1
        # a cost model of one rank (a dense head's) takes a rank's share of the batch per step
        self._ranks = target.dp // self.dp
        self.dtype = target.dtype
        self.kv_dtype = target.kv_dtype
        self._target = target

    @cached_property
    def cost(self) -> CostModel:
        """The proposer's own cost model, built when first priced (its memory needs none)."""
        target = self._target
        step = target.overhead
        overhead = StepOverhead(
            cpu_s=step.cpu_s * DRAFT_STEP_OVERHEAD_FRACTION,
            overlap=step.overlap,
            serial_s=step.serial_s * DRAFT_STEP_OVERHEAD_FRACTION,
        )
        engine = target.engine.model_copy(update={"overhead": overhead, "frontend": Frontend()})
        return CostModel(
            self.shape,
            target.gpu,
            tp=target.tp,
            dtype=target.dtype,
            kv_dtype=target.kv_dtype,
            params=target.params,
            calibration=target.calibration,
            engine=engine,
            expert_routing=target.expert_routing if self._spread else "balanced",
            ep=target.ep if self._spread else 1,
            dp=self.dp,
        )

    def _rank_steps(self, steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """``steps`` as one data-parallel rank of a dense head runs them (unchanged with one)."""
        ranks = self._ranks
        if ranks == 1:
            return steps
        return [(-(-n // ranks), -(-kv // ranks)) for n, kv in steps]

    def draft_time(self, ks: np.ndarray, contexts: np.ndarray) -> float:
        return self._steps_time(_draft_steps(ks, contexts))

    def draft_time_uniform(self, count: int, k: int, context_sum: int) -> float:
        return self._steps_time(uniform_draft_steps(count, k, context_sum))

    def _steps_time(self, steps: list[tuple[int, int]]) -> float:
        total = 0.0
        for cost in self._step_costs(steps):
            total += cost
        return total

    def _step_costs(self, steps: list[tuple[int, int]]) -> list[float]:
        decode_time = self.cost.decode_time
        return [decode_time(n, kv) for n, kv in self._rank_steps(steps)]

    def draft_time_sweep(self, caps: np.ndarray, contexts: np.ndarray) -> list[float]:
        """With ``ks = min(k, caps)``, draft step s runs exactly the requests whose cap exceeds s,
        whatever k is: the K steps are priced once and k's draft time is the running sum of the
        first k (added in the same order as :meth:`_steps_time`, so the same floats)."""
        top = int(caps.max()) if len(caps) else 0
        steps = []
        for s in range(top):
            active = caps > s
            n = int(active.sum())
            steps.append((n, int(contexts[active].sum()) + n * (s + 1)))
        times = [0.0]
        total = 0.0
        for cost in self._step_costs(steps):
            total += cost
            times.append(total)
        return times

    def weight_bytes_per_gpu(self) -> float:
        if self.dp > 1:
            return weight_bytes_per_gpu(self.shape, self.dtype, self.tp, self.dp)
        return model_weight_bytes(self.shape, self.dtype) / self.tp

    def kv_bytes_per_token_per_gpu(self) -> float:
        return kv_bytes_per_token_per_gpu(self.shape, self.tp, self.kv_dtype)


class DraftModel(_ModelProposer):
    kind = "draft_model"


class _FusedHead(_ModelProposer):
    """Layers over the target's hidden state and the next token's embedding, fused by a
    2h x h projection (EAGLE's fusion layer, MTP's projection): each draft step costs the layers,
    the projection and the LM head."""

    def __init__(self, shape: ModelShape, target: CostModel) -> None:
        super().__init__(shape, target)
        self._fusion_k = 2 * target.model.hidden_size
        self._compiled_steps = KernelCall(fused_step_costs)

    def _step_costs(self, steps: list[tuple[int, int]]) -> list[float]:
        hidden = self.shape.hidden_size
        cost = self.cost
        if self.dp == 1 and self._ranks == 1 and steps:
            # the layers and the projection from the head's compiled tables: the same floats
            top = max(n for n, _ in steps)
            compiled = cost.compiled(top, (hidden, self._fusion_k))
            if compiled is not None:
                table = np.array(steps, dtype=np.int64)
                costs: list[float] = self._compiled_steps(compiled, table).tolist()
                return costs
        decode_time, gemm_time = cost.decode_time, cost.gemm_time
        # a cost model of data-parallel ranks prices the projection at a rank's share
        share = cost.rank_share if cost.dp > 1 else None
        return [
            decode_time(n, kv) + gemm_time(share(n) if share else n, hidden, self._fusion_k)
            for n, kv in self._rank_steps(steps)
        ]


class EagleHead(_FusedHead):
    kind = "eagle"

    def __init__(self, target: CostModel) -> None:
        super().__init__(target.model.dense(f"{target.model.name}-eagle-head", 1), target)

    def weight_bytes_per_gpu(self) -> float:
        # one decoder layer and the fusion layer; embeddings and LM head are the target's own
        layer = self.shape.layer_param_count() + self._fusion_k * self.shape.hidden_size
        return layer * DTYPE_BYTES[dense_weight_dtype(self.dtype)] / self.tp


def mtp_problem(model: ModelShape) -> str | None:
    """Why an MTP module of ``model`` cannot be priced (None: it can)."""
    if model.sliding_window:
        return (
            f"an MTP module of {model.name} would mix local- and full-attention layers, which is "
            "not modelled (the models that ship MTP modules, DeepSeek-V3/R1 and Kimi K2, have "
            "none); use an eagle or draft_model proposer"
        )
    return None


class MtpModule(_FusedHead):
    kind = "mtp"
    shares_layout = True

    def __init__(self, target: CostModel, layers: int) -> None:
        problem = mtp_problem(target.model)
        if problem:
            raise CbsimError(problem, field="speculative.proposer.kind")
        shape = replace(target.model, name=f"{target.model.name}-mtp", num_layers=layers,
                        dense_layers=0)  # fmt: skip
        super().__init__(shape, target)

    def weight_bytes_per_gpu(self) -> float:
        # its layers (experts spread as the target's) and the projection; the embedding, final
        # norm and LM head are the target's own
        shape = self.shape
        ends = (2 - shape.tie_word_embeddings) * shape.embedding_param_count()
        dense_bytes = DTYPE_BYTES[dense_weight_dtype(self.dtype)]
        shared = ends * DTYPE_BYTES[end_dtype(self.dtype)] + shape.hidden_size * dense_bytes
        layers = weight_bytes_per_gpu(shape, self.dtype, self.tp, self.dp)
        return layers + (self._fusion_k * shape.hidden_size * dense_bytes - shared) / self.tp


class Ngram(Proposer):
    kind = "ngram"

    def draft_time(self, ks: np.ndarray, contexts: np.ndarray) -> float:
        return NGRAM_SECONDS_PER_REQUEST * int((ks > 0).sum())

    def draft_time_uniform(self, count: int, k: int, context_sum: int) -> float:
        return NGRAM_SECONDS_PER_REQUEST * count if k > 0 else 0.0


def make_proposer(config: ProposerConfig, target: CostModel) -> Proposer:
    if isinstance(config, DraftModelProposer):
        return DraftModel(get_model(config.model), target)
    if isinstance(config, EagleProposer):
        return EagleHead(target)
    if isinstance(config, MtpProposer):
        return MtpModule(target, config.layers)
    return Ngram()
