"""The parts every k policy is built from: what a verification step tells a policy
(:class:`StepOutcome`), what it sees of the batch (:class:`BatchView`), the acceptance estimate
(:class:`AlphaEstimator`), per-request controllers, the :class:`KPolicy` interface and the
registry that maps a scenario's ``speculative.policy.kind`` to its class (:func:`register`,
:func:`make_policy`). The policies themselves are in :mod:`cbsim.engine.speculative.policies` and in
modules of their own (:mod:`cbsim.engine.speculative.adaptive_hysteresis`), each importing this one.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from cbsim.common.errors import unknown_name
from cbsim.schema.speculative import (
    AdaptiveHysteresisPolicy,
    BatchTablePolicy,
    EwmaLookaheadPolicy,
    FixedPolicy,
    GoodputPolicy,
    HeuristicPolicy,
    ThresholdPolicy,
)

PolicyConfig = (
    AdaptiveHysteresisPolicy
    | FixedPolicy
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
    # the replica whose iteration this is (policies that keep server state key it by replica)
    replica: int = 0

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
    # True for policies that learn from each verify step of the batch (:meth:`observe_batch`)
    observes_batches: ClassVar[bool] = False

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

    def observe_batch(  # noqa: B027 (a no-op unless a policy learns from batches)
        self, replica: int, ks: Sequence[int], accepted: Sequence[int]
    ) -> None:
        """Learn from one verify step of ``replica``'s batch (its decoding requests' k and
        accepted drafts); only called when :attr:`observes_batches`."""


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
