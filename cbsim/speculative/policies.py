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

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from cbsim.errors import unknown_name
from cbsim.scenario import (
    BatchTablePolicy,
    EwmaLookaheadPolicy,
    FixedPolicy,
    GoodputPolicy,
    HeuristicPolicy,
    ThresholdPolicy,
)
from cbsim.speculative.expected import expected_tokens

PolicyConfig = (
    FixedPolicy
    | ThresholdPolicy
    | EwmaLookaheadPolicy
    | HeuristicPolicy
    | BatchTablePolicy
    | GoodputPolicy
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


# --------------------------------------------------------------------------- outcomes and views


def check_outcome(drafted: int, accepted: int) -> None:
    """Refuse a step outcome that cannot happen: fewer than one draft, or accepted drafts outside
    0..drafted."""
    if drafted < 1:
        raise ValueError(f"drafted must be >= 1, got {drafted}")
    if not 0 <= accepted <= drafted:
        raise ValueError(f"accepted must be in [0, {drafted}], got {accepted}")


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one verification step of one request showed.

    ``drafted`` is the k used in the step (>= 1); ``accepted`` the number of leading draft tokens
    the target accepted, 0..drafted. The correction/bonus token the step also emits is not counted.
    """

    drafted: int
    accepted: int

    def __post_init__(self) -> None:
        check_outcome(self.drafted, self.accepted)

    @property
    def rate(self) -> float:
        """This step's marginal acceptance rate accepted / drafted (not the conditional α)."""
        return self.accepted / self.drafted


@dataclass(frozen=True, slots=True)
class BatchView:
    """One iteration as a batch-aware policy sees it; arrays are indexed by decoding request.

    ``batch_size`` counts every request in the iteration's batch (decodes and prefills);
    ``proposals`` are the decoding requests' controllers' k; ``alphas`` their running estimates of
    conditional acceptance α in [0, 1]; ``remaining`` the outputs each still has to produce (>= 1);
    ``step_time(ks)`` the predicted iteration seconds (draft + verify + the batch's other work)
    when decoding request i drafts ``ks[i]`` tokens.
    """

    batch_size: int
    proposals: Sequence[int]
    alphas: FloatArray
    remaining: IntArray
    step_time: Callable[[Sequence[int]], float]
    # optional: step_time(min(k, caps)) for every k from 0 to caps.max() in one pass
    step_time_sweep: Callable[[IntArray], list[float]] | None = None

    def __post_init__(self) -> None:
        n = len(self.proposals)
        if len(self.alphas) != n or len(self.remaining) != n:
            raise ValueError(
                f"proposals, alphas and remaining must have one entry per decoding request "
                f"(got {n}, {len(self.alphas)}, {len(self.remaining)})"
            )


def expected_emitted(
    alpha: npt.ArrayLike | float, k: npt.ArrayLike | int
) -> npt.NDArray[np.float64]:
    """Expected tokens one step emits with k drafts and i.i.d. conditional acceptance α.

    Σ_{j=0..k} α^j = (1 − α^(k+1)) / (1 − α): k + 1 at α = 1 (exactly, no 0/0), 1 at k = 0 or
    α = 0. Broadcasts over arrays of α and k; accurate near α = 1.
    """
    a = np.asarray(alpha, dtype=np.float64)
    kk = np.asarray(k, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        # 1 − α^(k+1) as −expm1((k+1)·log α) keeps precision when α is close to 1.
        series = -np.expm1((kk + 1.0) * np.log1p(a - 1.0)) / (1.0 - a)
    out = np.where(a >= 1.0, kk + 1.0, series)
    return np.where(kk <= 0, 1.0, out)


class AlphaEstimator:
    """Running estimate of one request's conditional acceptance α from its step outcomes.

    A step that accepted a of k drafts shows a accepted positions and, when a < k, one rejected
    position (positions after the first rejection are never tested). Under i.i.d. acceptance the
    likelihood is α^A (1 − α)^R with A = Σ accepted and R = the number of steps that rejected
    something, so with a Beta(prior·weight, (1 − prior)·weight) prior the posterior mean is
    (A + prior·weight) / (A + R + weight). Unlike accepted / drafted it does not count the
    positions after a rejection as failures, so it does not underestimate α.
    """

    __slots__ = ("_accepted", "_rejected", "prior", "weight")

    def __init__(self, prior: float = 0.5, weight: float = 2.0) -> None:
        if not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior must be in [0, 1], got {prior}")
        if weight < 0.0:
            raise ValueError(f"weight must be >= 0, got {weight}")
        self.prior = prior
        self.weight = weight
        self._accepted = 0
        self._rejected = 0

    def observe(self, outcome: StepOutcome) -> None:
        self._accepted += outcome.accepted
        self._rejected += outcome.accepted < outcome.drafted

    def observe_counts(self, accepted: int, rejected: int) -> None:
        """Add ``accepted`` accepted drafts and ``rejected`` rejecting steps (the sums of
        :meth:`observe` over several outcomes)."""
        self._accepted += accepted
        self._rejected += rejected

    def restore(self, accepted: int, rejected: int) -> None:
        """Set the counts (after a run of steps computed elsewhere, e.g. compiled)."""
        self._accepted = accepted
        self._rejected = rejected

    @property
    def value(self) -> float:
        """The current estimate of α in [0, 1] (the prior before any step)."""
        return self.estimate(self.prior)

    def estimate(self, prior: float) -> float:
        """The posterior mean under a prior mean other than ``self.prior`` (same weight)."""
        denominator = self._accepted + self._rejected + self.weight
        if denominator == 0:
            return prior
        return (self._accepted + prior * self.weight) / denominator

    @property
    def accepted(self) -> int:
        """Accepted draft tokens observed."""
        return self._accepted

    @property
    def rejected(self) -> int:
        """Steps that stopped at a rejected draft."""
        return self._rejected


# --------------------------------------------------------------------------- controllers


class KController(ABC):
    """One request's draft-length controller, created when the request starts decoding."""

    @property
    @abstractmethod
    def k(self) -> int:
        """The k this controller proposes for its request's next step."""

    @abstractmethod
    def observe(self, outcome: StepOutcome) -> None:
        """Learn from one verification step of the request."""


class StaticController(KController):
    """A constant k that ignores outcomes (``fixed``, and the proposal of batch-level policies)."""

    __slots__ = ("_k",)

    def __init__(self, k: int) -> None:
        self._k = k

    @property
    def k(self) -> int:
        return self._k

    def observe(self, outcome: StepOutcome) -> None:
        pass


class ThresholdController(KController):
    """Seed rule 1: k + 1 when a step's accepted/drafted exceeds ``max_rate``, k − 1 when it is
    below ``min_rate`` (both strict), kept within [1, k_max]."""

    __slots__ = ("_k", "k_max", "max_rate", "min_rate")

    def __init__(self, k: int, k_max: int, min_rate: float, max_rate: float) -> None:
        self._k = k
        self.k_max = k_max
        self.min_rate = min_rate
        self.max_rate = max_rate

    @property
    def k(self) -> int:
        return self._k

    def observe(self, outcome: StepOutcome) -> None:
        rate = outcome.accepted / outcome.drafted
        if rate > self.max_rate:
            self._k += 1
        elif rate < self.min_rate:
            self._k -= 1
        self._k = min(max(self._k, 1), self.k_max)


def round_half_up(x: float) -> int:
    """floor(x + 0.5): 2.5 → 3, 4.5 → 5 (Python's round would give 2 and 4)."""
    return math.floor(x + 0.5)


class EwmaLookaheadController(KController):
    """Seed rule 2: an EWMA s of accepted tokens per step, s ← α·accepted + (1 − α)·s, starting
    at s = initial − 1 (so k starts at ``initial``); every ``cooldown`` observed steps
    k = clamp(round_half_up(s + 1), k_min, k_max).

    ``mean_accepted`` is what the seed called its "speedup estimate": it is accepted tokens per
    step (emitted per step is one more), not a speedup, which would also need the ratio of plain
    to speculative step time.
    """

    __slots__ = (
        "_accepted",
        "_drafted",
        "_k",
        "_s",
        "_steps",
        "cooldown",
        "k_max",
        "k_min",
        "smoothing",
    )

    def __init__(
        self, initial: int, k_min: int, k_max: int, smoothing: float, cooldown: int
    ) -> None:
        self.k_min = k_min
        self.k_max = k_max
        self.smoothing = smoothing
        self.cooldown = cooldown
        self._k = initial
        self._s = float(initial - 1)
        self._steps = 0
        self._accepted = 0
        self._drafted = 0

    @property
    def k(self) -> int:
        return self._k

    @property
    def ewma(self) -> float:
        """The EWMA s of accepted tokens per step."""
        return self._s

    @property
    def steps(self) -> int:
        """Observed steps so far."""
        return self._steps

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted over every observed step (0.0 before any)."""
        return self._accepted / self._drafted if self._drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        """Mean accepted draft tokens per step (0.0 before any); tokens per step, not speedup."""
        return self._accepted / self._steps if self._steps else 0.0

    def observe(self, outcome: StepOutcome) -> None:
        self._s = self.smoothing * outcome.accepted + (1.0 - self.smoothing) * self._s
        self._steps += 1
        self._accepted += outcome.accepted
        self._drafted += outcome.drafted
        if self._steps % self.cooldown == 0:
            self._k = min(max(round_half_up(self._s + 1.0), self.k_min), self.k_max)


class HeuristicController(KController):
    """k + 2 (capped at k_max) when every draft was accepted, else max(1, k − 1)."""

    __slots__ = ("_k", "k_max")

    def __init__(self, k: int, k_max: int) -> None:
        self._k = k
        self.k_max = k_max

    @property
    def k(self) -> int:
        return self._k

    def observe(self, outcome: StepOutcome) -> None:
        if outcome.accepted == outcome.drafted:
            self._k = min(self._k + 2, self.k_max)
        else:
            self._k = max(1, self._k - 1)


# --------------------------------------------------------------------------- policies


class KPolicy(ABC):
    """A registered draft-length policy, built from its scenario config.

    ``k_max`` is the largest k the policy ever returns. ``batch_aware`` is False for policies
    whose :meth:`choose` returns the controllers' proposals unchanged, so a caller may skip
    building the view's α estimates and step-time predictor for them.
    """

    kind: ClassVar[str] = ""
    batch_aware: ClassVar[bool] = False

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config

    @property
    @abstractmethod
    def k_max(self) -> int:
        """The largest k this policy returns."""

    @abstractmethod
    def controller(self) -> KController:
        """A fresh controller for a request that starts decoding."""

    @abstractmethod
    def choose(self, view: BatchView) -> list[int]:
        """The final k (0..k_max) per decoding request of this iteration, in ``view`` order."""


_REGISTRY: dict[str, type[KPolicy]] = {}


def register(kind: str) -> Callable[[type[KPolicy]], type[KPolicy]]:
    """Class decorator registering a k policy under its YAML ``kind``."""

    def decorate(cls: type[KPolicy]) -> type[KPolicy]:
        cls.kind = kind
        _REGISTRY[kind] = cls
        return cls

    return decorate


def policy_kinds() -> list[str]:
    """Names of the registered k policies."""
    return sorted(_REGISTRY)


def make_policy(config: PolicyConfig) -> KPolicy:
    """The registered policy named by ``config.kind``."""
    cls = _REGISTRY.get(config.kind)
    if cls is None:
        raise unknown_name("k policy", config.kind, policy_kinds())
    return cls(config)


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
                gain = alphas[up] ** (ks[up] + 1)  # expected extra tokens from one more draft
                order = up[np.argsort(-gain, kind="stable")]
                ks, current, changed = self._apply_prefix(ks, current, order, 1, rate, strict=True)
                moved |= changed
            down = np.flatnonzero(ks > 0)
            if down.size:
                loss = alphas[down] ** ks[down]  # expected tokens lost by one draft fewer
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
    "expected_emitted",
    "make_policy",
    "policy_kinds",
    "register",
    "round_half_up",
]
