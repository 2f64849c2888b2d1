"""Draft-length (k) policies: how many tokens each decoding request drafts per iteration.

In speculative decoding a cheap proposer drafts k tokens for a request and the target model
verifies all of them in one forward pass over k + 1 positions. The request emits the accepted
prefix plus one correction (or bonus) token, so a step emits between 1 and k + 1 tokens. The
draft length k is the knob: too short wastes the acceptance a good draft would have earned, too
long spends proposer and verifier work on tokens that will be rejected. A *k policy* sets that
knob every iteration on every replica. ``k = 0`` means plain decoding (one token, no drafting).

Two families live here.

*Per-request controllers* (``fixed``, ``threshold``, ``ewma_lookahead``, ``heuristic``) each own
one :class:`KController` per request. The controller sees only its own request's outcomes
(``accepted`` of ``drafted``) and adapts its k from them. Such a rule can learn that one request
drafts well and another poorly, but it cannot see the load: a request accepting 90% of its drafts
keeps asking for long drafts whether it shares the GPU with 3 requests or with 250.

*Batch-aware policies* (``batch_table``, ``goodput``) choose k from the whole iteration, a
:class:`BatchView`. That is the only way to reproduce what SpecDecode-Bench, SmartSpec/TurboSpec
and vLLM all measure: **speculation helps at low load and hurts at high load**. A decode
iteration is memory-bound at small batch size B: its time is dominated by reading the weights
once, so verifying B·(k + 1) tokens costs about as much as decoding B, and extra accepted tokens
are nearly free. As B grows the iteration turns compute-bound and its time grows with the number
of batched tokens B·(k + 1) (plus the proposer's k draft steps), so rejected drafts now cost real
time that every request in the batch pays. ``goodput`` maximises expected emitted tokens per
second of the predicted iteration time, which turns speculation up for small batches and down or
off for large ones; ``batch_table`` hard-codes the same lesson as a table of batch-size ranges.

Tokens per step is not speedup. With i.i.d. conditional acceptance α a step emits on average
:func:`expected_emitted` = (1 − α^(k+1)) / (1 − α) tokens (accepted drafts + 1). That is the
*tokens per step*; the *speedup* over plain decoding is tokens per step × (plain decode iteration
time / speculative iteration time), and the second factor is below 1 — well below at large
batches — because a speculative iteration drafts k tokens and verifies k + 1. A policy that
maximises tokens per step (as the per-request controllers implicitly do) ignores that factor;
``goodput`` maximises the ratio. Likewise the marginal draft acceptance rate accepted / drafted
(vLLM's ``draft_acceptance_rate``) is not α: :class:`AlphaEstimator` converts outcomes into an
estimate of the conditional α the batch-aware policies need.

Usage: ``make_policy(config)`` builds the policy named by a scenario's
``speculative.policy.kind``; ``policy.controller()`` makes a controller when a request starts
decoding; every iteration the scheduler calls ``policy.choose(view)`` for the final k per decoding
request (and then clamps each k to that request's remaining outputs − 1); after each verification
step it calls ``controller.observe(StepOutcome(drafted, accepted))``. A new policy is one
registered class in this file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from cbsim.engine.speculative.expected import expected_tokens, powers
from cbsim.engine.speculative.policy_base import (  # noqa: F401 (re-exported)
    _REGISTRY,
    AlphaEstimator,
    BatchView,
    EwmaLookaheadController,
    FloatArray,
    HeuristicController,
    IntArray,
    KController,
    KPolicy,
    PolicyConfig,
    StaticController,
    StepOutcome,
    ThresholdController,
    check_outcome,
    expected_emitted,
    make_policy,
    policy_kinds,
    register,
    round_half_up,
)
from cbsim.schema.speculative import (
    BatchTablePolicy,
    EwmaLookaheadPolicy,
    FixedPolicy,
    GoodputPolicy,
    HeuristicPolicy,
    ThresholdPolicy,
)


class PerRequestPolicy(KPolicy):
    """A policy whose k is each request's controller's proposal."""

    def choose(self, view: BatchView) -> list[int]:
        return [int(k) for k in view.proposals]


@register("fixed")
class FixedK(PerRequestPolicy):
    """Always ``config.k``."""

    def __init__(self, config: FixedPolicy) -> None:
        super().__init__(config)
        self.k = config.k

    @property
    def k_max(self) -> int:
        return self.k

    def controller(self) -> KController:
        return StaticController(self.k)


@register("threshold")
class ThresholdK(PerRequestPolicy):
    """Per-request :class:`ThresholdController`."""

    def __init__(self, config: ThresholdPolicy) -> None:
        super().__init__(config)
        self.threshold = config

    @property
    def k_max(self) -> int:
        return self.threshold.k_max

    def controller(self) -> KController:
        c = self.threshold
        if not c.adaptive:
            return StaticController(c.k)
        return ThresholdController(c.k, c.k_max, c.min_acceptance_rate, c.max_acceptance_rate)


@register("ewma_lookahead")
class EwmaLookaheadK(PerRequestPolicy):
    """Per-request :class:`EwmaLookaheadController`."""

    def __init__(self, config: EwmaLookaheadPolicy) -> None:
        super().__init__(config)
        self.ewma = config

    @property
    def k_max(self) -> int:
        return self.ewma.k_max

    def controller(self) -> KController:
        c = self.ewma
        return EwmaLookaheadController(c.initial, c.k_min, c.k_max, c.alpha, c.cooldown_steps)


@register("heuristic")
class HeuristicK(PerRequestPolicy):
    """Per-request :class:`HeuristicController`."""

    def __init__(self, config: HeuristicPolicy) -> None:
        super().__init__(config)
        self.heuristic = config

    @property
    def k_max(self) -> int:
        return self.heuristic.k_max

    def controller(self) -> KController:
        return HeuristicController(self.heuristic.k, self.heuristic.k_max)


@register("batch_table")
class BatchTableK(KPolicy):
    """k from the table row whose [min_batch, max_batch] holds the batch size (0 outside every
    row), the same for every decoding request. Controllers propose the table's largest k."""

    batch_aware = True

    def __init__(self, config: BatchTablePolicy) -> None:
        super().__init__(config)
        self.table: list[tuple[int, int, int]] = sorted(config.table)

    @property
    def k_max(self) -> int:
        return max(k for _, _, k in self.table)

    def k_for(self, batch_size: int) -> int:
        for low, high, k in self.table:
            if low <= batch_size <= high:
                return k
        return 0

    def controller(self) -> KController:
        return StaticController(self.k_max)

    def choose(self, view: BatchView) -> list[int]:
        return [self.k_for(view.batch_size)] * len(view.proposals)


@register("goodput")
class GoodputK(KPolicy):
    """Maximise expected emitted tokens per second of predicted iteration time.

    Request i drafting k_i is expected to emit min(expected_emitted(α_i, k_i), remaining_i)
    tokens; the iteration is predicted to take ``step_time(ks)``. Every k is first clamped to
    min(k_max, remaining_i − 1), as the caller will, so the prediction prices the step that will
    actually run and a request with one output left never drafts.

    Per batch (default): the one k in [0, k_max] maximising Σ_i tokens_i / step_time, with at most
    k_max + 1 calls of ``step_time``. Per request: from that k, repeated passes move individual
    requests up by one (highest marginal gain α_i^(k_i+1) first) and down by one (smallest loss
    α_i^(k_i) first) while the ratio improves; each direction searches how many of its ordered
    moves to apply in O(log n) step-time calls, and at most ``max_passes`` passes run.
    Ties go to the smaller k. Controllers propose k_max (their proposal is not used).
    """

    batch_aware = True
    max_passes: ClassVar[int] = 4
    # Relative margin below which two rates count as a tie (then the smaller k wins).
    tie_tolerance: ClassVar[float] = 1e-12

    def __init__(self, config: GoodputPolicy) -> None:
        super().__init__(config)
        self._k_max = config.k_max
        self.per_request = config.per_request

    @property
    def k_max(self) -> int:
        return self._k_max

    def controller(self) -> KController:
        return StaticController(self._k_max)

    def choose(self, view: BatchView) -> list[int]:
        n = len(view.proposals)
        if n == 0:
            return []
        alphas = np.clip(np.asarray(view.alphas, dtype=np.float64), 0.0, 1.0)
        remaining = np.ascontiguousarray(view.remaining, dtype=np.int64)
        caps = np.clip(remaining - 1, 0, self._k_max)

        def rate(ks: IntArray) -> float:
            tokens = expected_tokens(alphas, ks, remaining)
            seconds = view.step_time([int(k) for k in ks])
            if not seconds > 0.0:
                raise ValueError(f"step_time must be positive, got {seconds}")
            return tokens / seconds

        # Above the largest cap every k clamps to the same ks: no need to price those.
        top = int(caps.max())
        swept = view.step_time_sweep(caps) if view.step_time_sweep is not None else None

        def rate_of(k: int, ks: IntArray) -> float:
            if swept is None:
                return rate(ks)
            tokens = expected_tokens(alphas, ks, remaining)
            seconds = swept[k]
            if not seconds > 0.0:
                raise ValueError(f"step_time must be positive, got {seconds}")
            return tokens / seconds

        best_ks = np.zeros(n, dtype=np.int64)
        best_rate = rate_of(0, best_ks)
        for k in range(1, top + 1):
            ks = np.minimum(k, caps)
            r = rate_of(k, ks)
            if r > best_rate * (1.0 + self.tie_tolerance):
                best_ks, best_rate = ks, r
        if self.per_request:
            best_ks = self._refine(best_ks, best_rate, alphas, caps, rate)
        return [int(k) for k in best_ks]

    def _refine(
        self,
        ks: IntArray,
        current: float,
        alphas: FloatArray,
        caps: IntArray,
        rate: Callable[[IntArray], float],
    ) -> IntArray:
        """Greedy per-request ±1 adjustments, highest marginal gain first, while the ratio improves."""
        for _ in range(self.max_passes):
            moved = False
            up = np.flatnonzero(ks < caps)
            if up.size:
                # expected extra tokens from one more draft (libm's pow, as the compiled choice)
                gain = powers(alphas[up], ks[up] + 1)
                order = up[np.argsort(-gain, kind="stable")]
                ks, current, changed = self._apply_prefix(ks, current, order, 1, rate, strict=True)
                moved |= changed
            down = np.flatnonzero(ks > 0)
            if down.size:
                loss = powers(alphas[down], ks[down])  # expected tokens lost by one draft fewer
                order = down[np.argsort(loss, kind="stable")]
                ks, current, changed = self._apply_prefix(
                    ks, current, order, -1, rate, strict=False
                )
                moved |= changed
            if not moved:
                break
        return ks

    def _apply_prefix(
        self,
        ks: IntArray,
        current: float,
        order: IntArray,
        step: int,
        rate: Callable[[IntArray], float],
        *,
        strict: bool,
    ) -> tuple[IntArray, float, bool]:
        """Apply the first m moves of ``order`` (each request's k += step) for the m that the
        search finds best: doubling m while the ratio improves, then bisecting. ``strict``: a move
        must raise the ratio; otherwise a tie is enough (ties prefer the smaller k)."""
        tol = self.tie_tolerance

        def better(r: float, ref: float) -> bool:
            return r > ref * (1.0 + tol) if strict else r >= ref * (1.0 - tol)

        def moved(m: int) -> IntArray:
            out = ks.copy()
            out[order[:m]] += step
            return out

        size = len(order)
        best_m, best_rate = 0, current
        hi = size + 1
        m = 1
        while m <= size:
            r = rate(moved(m))
            if not better(r, best_rate):
                hi = m
                break
            best_m, best_rate = m, r
            if m == size:
                break
            m = min(2 * m, size)
        while hi - best_m > 1 and hi <= size:
            mid = (best_m + hi) // 2
            r = rate(moved(mid))
            if better(r, best_rate):
                best_m, best_rate = mid, r
            else:
                hi = mid
        if best_m == 0:
            return ks, current, False
        return moved(best_m), best_rate, True


# engine policies registered in their own modules
from cbsim.engine.speculative import adaptive_hysteresis as _adaptive_hysteresis  # noqa: E402, F401

__all__ = [
    "AlphaEstimator",
    "BatchTableK",
    "BatchView",
    "EwmaLookaheadController",
    "EwmaLookaheadK",
    "FixedK",
    "GoodputK",
    "HeuristicController",
    "HeuristicK",
    "KController",
    "KPolicy",
    "PerRequestPolicy",
    "PolicyConfig",
    "StaticController",
    "StepOutcome",
    "ThresholdController",
    "ThresholdK",
    "check_outcome",
    "expected_emitted",
    "make_policy",
    "policy_kinds",
    "register",
    "round_half_up",
]
