"""Acceptance models: how many of a request's k draft tokens the target accepts in one step.

Exact speculative sampling accepts the draft's leading tokens one by one, each with probability
min(1, p/q), and stops at the first rejection; so a step accepts ``a`` ∈ [0, k] drafts and emits
a + 1 tokens (the correction, or the bonus token when all k pass). Three numbers describe acceptance
and are easy to confuse — this module converts between them:

* the *conditional* acceptance α: probability that a draft token is accepted given all before it
  were (α = 1 − TV(p, q) per position). With i.i.d. positions E[emitted] = (1 − α^(k+1)) / (1 − α).
* the *marginal draft acceptance rate* (vLLM's ``draft_acceptance_rate``): accepted / drafted over
  many steps, = α(1 − α^k) / (k(1 − α)) — lower than α, and dependent on k.
* the *mean acceptance length*: tokens emitted per step, E[a + 1].

Real acceptance is neither i.i.d. nor position-independent and varies per request; the models are
``iid`` (one α), ``positional`` (α per draft position), ``per_request`` (each request's own α from a
Beta, optionally drifting along its output), ``trace`` (replayed oracle acceptance lengths) and
``token_level`` (the exact verifier run on explicit per-position distributions).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

import numba
import numpy as np

from cbsim.common.errors import CbsimError, unknown_name
from cbsim.cost.kernel_call import KernelCall
from cbsim.schema.speculative import (
    IidAcceptance,
    PerRequestAcceptance,
    PositionalAcceptance,
    TokenLevelAcceptance,
    TraceAcceptance,
)
from cbsim.workload.acceptance_trace import AcceptanceTrace, load_acceptance_trace
from cbsim.workload.request import Request

AcceptanceConfig = (
    IidAcceptance
    | PositionalAcceptance
    | PerRequestAcceptance
    | TraceAcceptance
    | TokenLevelAcceptance
)

# --------------------------------------------------------------------------- conversions


def _check_alpha_k(alpha: float, k: int) -> None:
    if not 0.0 <= alpha <= 1.0:  # also rejects NaN
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")


def expected_emitted(alpha: float, k: int) -> float:
    """E[tokens emitted per step] = (1 − α^(k+1)) / (1 − α) under i.i.d. conditional α."""
    _check_alpha_k(alpha, k)
    if alpha >= 1.0:
        return float(k + 1)
    return float((1.0 - alpha ** (k + 1)) / (1.0 - alpha))


def expected_accepted(alpha: float, k: int) -> float:
    """E[draft tokens accepted per step] = α(1 − α^k) / (1 − α)."""
    return expected_emitted(alpha, k) - 1.0


def marginal_rate(alpha: float, k: int) -> float:
    """The marginal draft acceptance rate (accepted / drafted) that conditional α gives at k."""
    if k < 1:
        raise ValueError("k must be >= 1")
    return expected_accepted(alpha, k) / k


def _invert(target: float, forward: Callable[[float], float], what: str) -> float:
    low, high = 0.0, 1.0
    if not forward(low) <= target <= forward(high):
        raise ValueError(f"{what} {target} is outside [{forward(low)}, {forward(high)}]")
    for _ in range(100):
        mid = 0.5 * (low + high)
        if forward(mid) < target:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def alpha_from_marginal(rate: float, k: int) -> float:
    """Conditional α from a marginal draft acceptance rate measured at draft length k."""
    return _invert(rate, lambda a: marginal_rate(a, k), "marginal acceptance rate")


def alpha_from_acceptance_length(length: float, k: int) -> float:
    """Conditional α from a mean acceptance length (tokens per step, in [1, k + 1]) at draft length k."""
    if k < 1:
        raise ValueError("k must be >= 1 (with no drafts every α emits one token per step)")
    return _invert(length, lambda a: expected_emitted(a, k), "mean acceptance length")


def alpha_mle(accepted: int, rejections: int) -> float:
    """Maximum-likelihood conditional α from observed steps: each step contributes its accepted
    drafts as successes and, when it stopped short of k, one rejection."""
    if accepted < 0 or rejections < 0:
        raise ValueError("accepted and rejections must be non-negative counts")
    total = accepted + rejections
    return accepted / total if total else float("nan")


# --------------------------------------------------------------------------- models


def leading_successes(
    alphas: np.ndarray, ks: np.ndarray, rng: np.random.Generator, call: KernelCall | None = None
) -> np.ndarray:
    """Accepted drafts per request: leading successes of Bernoulli(alphas[i, j]) trials, capped at k.

    ``alphas`` is (n, width) conditional rates per draft position, or (n, 1) (one rate per
    request), (1, width) (one row for all) or (1, 1), broadcast to (n, width) with n = len(ks)
    and width = ks.max(); ``ks`` the draft lengths. The trials' uniforms are
    ``rng.random((n, width))``, one per trial whether or not it counts. ``call``: a model's
    :class:`~cbsim.cost.kernel_call.KernelCall` of the compiled count (dispatched once)."""
    n = len(ks)
    width = alphas.shape[1] if alphas.shape[1] > 1 else (int(ks.max()) if n else 0)
    if n == 0 or width == 0 or alphas.shape[1] == 0:
        return np.zeros(n, dtype=np.int64)
    uniforms = rng.random((n, width))
    rates = np.ascontiguousarray(alphas, dtype=np.float64)
    draft = np.ascontiguousarray(ks, dtype=np.int64)
    count = _leading_successes if call is None else call
    accepted: np.ndarray = count(uniforms, rates, draft)
    return accepted


@numba.njit(cache=True)
def _leading_successes(uniforms: np.ndarray, rates: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """:func:`leading_successes` compiled: row i's trial j succeeds when its uniform is below its
    rate (broadcast over rows or columns of length one) and j < k; the leading successes count."""
    n, width = uniforms.shape
    rows, columns = rates.shape
    accepted = np.zeros(n, dtype=np.int64)
    for i in range(n):
        row = i if rows > 1 else 0
        k = ks[i]
        for j in range(width):
            if j < k and uniforms[i, j] < rates[row, j if columns > 1 else 0]:
                accepted[i] += 1
            else:
                break
    return accepted


def beta_level(rng: np.random.Generator, mean: float, concentration: float) -> float:
    """A request's level θ ~ Beta(m·c, (1 − m)·c) for a mean m in (0, 1). Where m·c is below the
    smallest float (a mean such as 5e-324) the first parameter is 0, which numpy refuses: the
    distribution's limit there, θ = 0, with nothing drawn (likewise θ = 1 for the second)."""
    a, b = beta_shape(mean, concentration)
    fixed = fixed_level(a, b)
    return float(rng.beta(a, b)) if fixed is None else fixed


def beta_shape(mean: float, concentration: float) -> tuple[float, float]:
    """The Beta parameters (m·c, (1 − m)·c) of a level of mean ``mean``."""
    return mean * concentration, (1.0 - mean) * concentration


def fixed_level(a: float, b: float) -> float | None:
    """The level Beta(``a``, ``b``) gives with nothing drawn where a parameter is 0 (its limit:
    0 for ``a``, 1 for ``b``), else None."""
    if a <= 0.0:
        return 0.0
    if b <= 0.0:
        return 1.0
    return None


class BetaLevels:
    """Successive requests' levels θ ~ Beta(m·c, (1 − m)·c) (:func:`beta_level`) from one
    generator, drawn :attr:`block` at a time. numpy draws an array value after value from the same
    bit generator, so the n-th level is the n-th scalar draw whatever the block: a block only
    saves the call per request (a scalar draw costs several microseconds amid a simulation)."""

    __slots__ = ("_a", "_b", "_drawn", "_fixed", "_next", "_rng", "block")

    def __init__(
        self, rng: np.random.Generator, mean: float, concentration: float, block: int = 64
    ) -> None:
        self._rng = rng
        self._a, self._b = beta_shape(mean, concentration)
        self._fixed = fixed_level(self._a, self._b)
        self.block = block
        self._drawn: list[float] = []
        self._next = 0

    def __call__(self, req: Request) -> float:
        """The next request's level (``req``'s: every request draws alike)."""
        if self._fixed is not None:
            return self._fixed
        if self._next == len(self._drawn):
            self._drawn = self._rng.beta(self._a, self._b, size=self.block).tolist()
            self._next = 0
        level = self._drawn[self._next]
        self._next += 1
        return level


def level_scale(levels: np.ndarray, mean: float) -> np.ndarray:
    """Each request's level over the model's mean (θ / m), what its positional rates are scaled
    by. A zero mean (every rate zero) gives NaN, which accepts nothing, as the zero rates would."""
    with np.errstate(divide="ignore", invalid="ignore"):
        scale: np.ndarray = np.asarray(levels, dtype=np.float64) / mean
    return scale


class AcceptanceModel(ABC):
    """Draws the number of accepted drafts for a batch of verification steps."""

    kind: ClassVar[str]

    def start(self, req: Request, rng: np.random.Generator) -> float:
        """Per-request set-up when the request first speculates; returns its prior α estimate."""
        return self.prior_alpha()

    def levels(self, rng: np.random.Generator) -> Callable[[Request], float]:
        """:meth:`start` of one replica's requests, one after the other, drawing from ``rng``:
        the same values in the same order (the models that draw a level per request draw them
        a block at a time, :class:`BetaLevels`)."""
        return lambda req: self.start(req, rng)

    @abstractmethod
    def prior_alpha(self) -> float:
        """The α a request is expected to have before anything is observed."""

    @abstractmethod
    def draw(
        self,
        reqs: Sequence[Request],
        req_alphas: np.ndarray,
        ks: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """Accepted drafts (0..k) for each request's step; ``req_alphas`` are per-request α from
        :meth:`start` (used by models with per-request acceptance)."""


class IidModel(AcceptanceModel):
    kind = "iid"

    def __init__(self, config: IidAcceptance) -> None:
        self.alpha = config.alpha
        self._leading = KernelCall(_leading_successes)

    def prior_alpha(self) -> float:
        return self.alpha

    def draw(
        self,
        reqs: Sequence[Request],
        req_alphas: np.ndarray,
        ks: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        return leading_successes(np.full((1, 1), self.alpha), ks, rng, self._leading)


def conditional_from_unconditional(rates: Sequence[float]) -> list[float]:
    """Conditional per-position rates from unconditional ones, as engines publish them.

    vLLM reports per-position acceptance as the fraction u_i of verify steps in which draft
    position i was accepted (its CI pins EAGLE-3 on Llama-3.1-8B, k = 3, MT-Bench to
    0.73 / 0.52 / 0.35, mean acceptance length 1 + Σ u_i = 2.60). Position i is accepted only if
    every position before it was, so u_i = c_1 ⋯ c_i and c_i = u_i / u_(i−1) (u_0 = 1; 0 after a
    position that is never accepted). ``rates`` must be non-increasing."""
    out: list[float] = []
    previous = 1.0
    for u in rates:
        if u > previous + 1e-12:
            raise ValueError(f"unconditional rates must be non-increasing, got {list(rates)}")
        out.append(min(1.0, u / previous) if previous > 0.0 else 0.0)
        previous = u
    return out


def mean_acceptance_length(rates: Sequence[float], k: int, *, unconditional: bool) -> float:
    """Closed-form mean acceptance length (tokens per step) of positional rates at draft length k:
    1 + Σ_(i ≤ k) u_i, with u_i = c_1 ⋯ c_i (the last conditional rate repeats past the list)."""
    conditional = conditional_from_unconditional(rates) if unconditional else list(rates)
    total, survive = 1.0, 1.0
    for i in range(k):
        survive *= conditional[min(i, len(conditional) - 1)]
        total += survive
    return total


class PositionalModel(AcceptanceModel):
    """Per-position conditional rates (the last repeats); ``form: unconditional`` rates are the
    fractions of verify steps accepting each position and are converted once here
    (:func:`conditional_from_unconditional`), so every consumer, compiled runs included, sees
    conditional rates."""

    kind = "positional"

    def __init__(self, config: PositionalAcceptance) -> None:
        rates = list(config.rates)
        if getattr(config, "form", "conditional") == "unconditional":
            rates = conditional_from_unconditional(rates)
        self.rates = np.asarray(rates, dtype=np.float64)
        # per-request variation: each request scales the rates by θ / m, θ ~ Beta(m·c, (1 − m)·c)
        concentration = getattr(config, "concentration", None)
        self.concentration: float | None = None if concentration is None else float(concentration)
        self._leading = KernelCall(_leading_successes)

    def prior_alpha(self) -> float:
        return float(self.rates[: min(4, len(self.rates))].mean())

    def start(self, req: Request, rng: np.random.Generator) -> float:
        """The request's own level θ (the prior without per-request variation)."""
        mean = self.prior_alpha()
        if self.concentration is None or not 0.0 < mean < 1.0:
            return mean
        return beta_level(rng, mean, self.concentration)

    def levels(self, rng: np.random.Generator) -> Callable[[Request], float]:
        mean = self.prior_alpha()
        if self.concentration is None or not 0.0 < mean < 1.0:
            return lambda req: mean
        return BetaLevels(rng, mean, self.concentration)

    def rates_for(self, width: int) -> np.ndarray:
        index = np.minimum(np.arange(width), len(self.rates) - 1)
        return np.asarray(self.rates[index])

    def draw(
        self,
        reqs: Sequence[Request],
        req_alphas: np.ndarray,
        ks: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        width = int(ks.max()) if len(ks) else 0
        rates = self.rates_for(width)[None, :]
        if self.concentration is not None:
            scale = level_scale(req_alphas, self.prior_alpha())
            rates = np.clip(rates * scale[:, None], 0.0, 1.0)
        return leading_successes(rates, ks, rng, self._leading)


class PerRequestModel(AcceptanceModel):
    kind = "per_request"

    def __init__(self, config: PerRequestAcceptance) -> None:
        self.mean = config.mean
        self.concentration = config.concentration
        self.drift = config.drift_per_1k_tokens
        self._leading = KernelCall(_leading_successes)

    def prior_alpha(self) -> float:
        return self.mean

    def start(self, req: Request, rng: np.random.Generator) -> float:
        return beta_level(rng, self.mean, self.concentration)

    def levels(self, rng: np.random.Generator) -> Callable[[Request], float]:
        return BetaLevels(rng, self.mean, self.concentration)

    def draw(
        self,
        reqs: Sequence[Request],
        req_alphas: np.ndarray,
        ks: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        alphas = req_alphas
        if self.drift:
            generated = np.fromiter((r.generated for r in reqs), dtype=np.float64, count=len(reqs))
            alphas = np.clip(req_alphas + self.drift * generated / 1000.0, 0.0, 1.0)
        return leading_successes(alphas[:, None], ks, rng, self._leading)


class TraceModel(AcceptanceModel):
    """Replays oracle acceptance lengths: a step with k drafts at output position i emits
    min(acc_len[i], k + 1) tokens. Request j of the run follows trace row j (cycling)."""

    kind = "trace"

    def __init__(self, config: TraceAcceptance, trace: AcceptanceTrace) -> None:
        self.trace = trace

    def prior_alpha(self) -> float:
        return self.trace.mean_alpha

    def draw(
        self,
        reqs: Sequence[Request],
        req_alphas: np.ndarray,
        ks: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        accepted = np.empty(len(reqs), dtype=np.int64)
        for i, req in enumerate(reqs):
            row = self.trace.acc_len[req.request_id % len(self.trace.acc_len)]
            emitted = min(int(row[req.generated]), int(ks[i]) + 1)
            accepted[i] = emitted - 1
        return accepted


class TokenLevelModel(AcceptanceModel):
    """Runs the exact verifier on fresh per-position draft/target distributions every step."""

    kind = "token_level"

    def __init__(self, config: TokenLevelAcceptance) -> None:
        from cbsim.engine.speculative.token_level import expected_acceptance

        self.vocab_size = config.vocab_size
        self.divergence = config.divergence
        self._prior = expected_acceptance(self.divergence, self.vocab_size, samples=400)

    def prior_alpha(self) -> float:
        return self._prior

    def draw(
        self,
        reqs: Sequence[Request],
        req_alphas: np.ndarray,
        ks: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        from cbsim.engine.speculative.token_level import position_distributions
        from cbsim.engine.speculative.verification import propose_and_verify

        accepted = np.zeros(len(ks), dtype=np.int64)
        for k in np.unique(ks):
            rows = np.flatnonzero(ks == k)
            p, q = position_distributions(
                rng, len(rows) * (int(k) + 1), self.vocab_size, self.divergence
            )
            p = p.reshape(len(rows), int(k) + 1, self.vocab_size)
            q = q.reshape(len(rows), int(k) + 1, self.vocab_size)[:, : int(k), :]
            accepted[rows] = propose_and_verify(p, q, rng).accepted
        return accepted


def make_acceptance_model(config: AcceptanceConfig, source: str | None = None) -> AcceptanceModel:
    """The acceptance model a scenario's ``speculative.acceptance`` section names."""
    if isinstance(config, IidAcceptance):
        return IidModel(config)
    if isinstance(config, PositionalAcceptance):
        return PositionalModel(config)
    if isinstance(config, PerRequestAcceptance):
        return PerRequestModel(config)
    if isinstance(config, TraceAcceptance):
        return TraceModel(config, load_acceptance_trace(config.path, source=source))
    if isinstance(config, TokenLevelAcceptance):
        return TokenLevelModel(config)
    raise unknown_name("acceptance model", str(getattr(config, "kind", config)), ACCEPTANCE_KINDS)


ACCEPTANCE_KINDS = ("iid", "positional", "per_request", "trace", "token_level")

__all__ = [
    "ACCEPTANCE_KINDS",
    "AcceptanceModel",
    "CbsimError",
    "alpha_from_acceptance_length",
    "alpha_from_marginal",
    "alpha_mle",
    "conditional_from_unconditional",
    "expected_accepted",
    "expected_emitted",
    "leading_successes",
    "make_acceptance_model",
    "marginal_rate",
    "mean_acceptance_length",
]
