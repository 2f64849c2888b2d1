"""Exact speculative sampling on explicit token distributions.

Speculative decoding (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
Decoding"; Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative
Sampling") lets a cheap draft propose ``k`` tokens that one forward pass of the target model then
verifies. The verification is a rejection sampler whose output is distributed *exactly* as if the
target had generated the tokens itself:

* at draft position ``i`` the draft token ``x ~ q_i`` is accepted with probability
  ``min(1, p_i(x) / q_i(x))`` (one uniform draw per trial and position);
* at the first rejection the step emits a correction token drawn from the residual
  ``norm(max(0, p_i - q_i))`` and stops (if the residual is all zero, i.e. ``p_i == q_i``, which
  can only be reached through floating-point rounding, it samples from ``p_i``);
* if all ``k`` drafts are accepted it emits a bonus token from ``p_k``, the target distribution the
  verifying forward pass computes after the last draft.

So a step emits ``accepted + 1`` tokens, ``accepted`` in ``0..k``. The probability that position
``i`` accepts is ``α_i = Σ_x min(p_i(x), q_i(x)) = 1 − TV(p_i, q_i)`` (:func:`acceptance_rate`).

Everything here is vectorised over ``T`` independent trials (requests or Monte-Carlo repetitions)
and over the vocabulary; the randomness consumed is fixed by the shapes alone (``T·k`` acceptance
uniforms then ``T`` uniforms for the last token), never by the outcomes, so a seeded generator
gives identical results whatever the distributions are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "SUM_TOLERANCE",
    "VerifyResult",
    "acceptance_rate",
    "propose_and_verify",
    "sample",
    "verify",
]

#: How far a distribution's total may be from 1 before it is rejected as not a distribution.
SUM_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """The outcome of verifying ``T`` independent speculative steps of ``k`` drafts each."""

    #: ``(T,)`` int64: the number of leading draft tokens accepted, ``0..k``.
    accepted: np.ndarray
    #: ``(T, k + 1)`` int64: the emitted tokens (accepted drafts, then the correction or bonus
    #: token), padded with ``-1`` after the first ``accepted + 1`` entries.
    tokens: np.ndarray

    @property
    def emitted(self) -> np.ndarray:
        """``(T,)`` int64: the number of tokens each step emits, ``accepted + 1``."""
        return self.accepted + 1

    @property
    def k(self) -> int:
        """The number of draft tokens per step."""
        return int(self.tokens.shape[1]) - 1


def _as_float_array(name: str, x: npt.ArrayLike) -> np.ndarray:
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of probabilities: {exc}") from exc
    return arr


def _check_distributions(name: str, arr: np.ndarray) -> None:
    """Raise ValueError unless every row over the last axis of ``arr`` is a distribution."""
    if arr.ndim < 1 or arr.shape[-1] < 1:
        raise ValueError(
            f"{name} must have a non-empty last (vocabulary) axis, got shape {arr.shape}"
        )
    if arr.size == 0:
        return
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if np.any(arr < 0.0):
        raise ValueError(f"{name} contains negative probabilities (min {arr.min():.3g})")
    totals = arr.sum(axis=-1)
    worst = float(np.max(np.abs(totals - 1.0)))
    if worst > SUM_TOLERANCE:
        raise ValueError(
            f"{name} rows must sum to 1 within {SUM_TOLERANCE:g} over the last axis; "
            f"the worst row is off by {worst:.3g}"
        )


def _inverse_cdf(weights: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Index drawn per row of non-negative ``weights`` (..., V), not necessarily normalised,
    by inverse CDF with the uniforms ``u`` (shape ``weights.shape[:-1]``).

    Token ``j`` is chosen when ``cdf[j-1] <= u·total < cdf[j]``, so a zero-weight token is never
    chosen; the result is clamped to the last positive-weight token against rounding at the top.
    """
    cdf = np.cumsum(weights, axis=-1)
    target = u * cdf[..., -1]
    idx = np.count_nonzero(cdf <= target[..., None], axis=-1)
    vocab = weights.shape[-1]
    last_positive = vocab - 1 - np.argmax(weights[..., ::-1] > 0.0, axis=-1)
    return np.asarray(np.minimum(idx, last_positive), dtype=np.int64)


def sample(probs: npt.ArrayLike, rng: np.random.Generator) -> np.ndarray:
    """One categorical sample per row of ``probs`` (shape ``(..., V)``), returned with shape
    ``probs.shape[:-1]`` (int64), by inverse CDF with exactly one uniform per row.

    Raises ValueError unless every row is a distribution (non-negative, sums to 1 within 1e-6).
    """
    arr = _as_float_array("probs", probs)
    _check_distributions("probs", arr)
    u = rng.random(arr.shape[:-1])
    return _inverse_cdf(arr, np.asarray(u))


def _check_verify_shapes(p: np.ndarray, q: np.ndarray) -> tuple[int, int, int]:
    if p.ndim != 3:
        raise ValueError(
            f"p must have shape (T, k+1, V), got {p.shape} (use p[None] for a single trial)"
        )
    if q.ndim != 3:
        raise ValueError(
            f"q must have shape (T, k, V), got {q.shape} (use q[None] for a single trial)"
        )
    n_trials, k_plus_1, vocab = p.shape
    if k_plus_1 < 1:
        raise ValueError(f"p must hold k+1 >= 1 positions, got shape {p.shape}")
    if vocab < 1:
        raise ValueError(f"p must have a non-empty vocabulary axis, got shape {p.shape}")
    k = k_plus_1 - 1
    if q.shape != (n_trials, k, vocab):
        raise ValueError(
            f"q must have shape (T, k, V) = {(n_trials, k, vocab)} to match p {p.shape}, "
            f"got {q.shape}"
        )
    return n_trials, k, vocab


def verify(
    p: npt.ArrayLike,
    q: npt.ArrayLike,
    drafts: npt.ArrayLike,
    rng: np.random.Generator,
    *,
    validate: bool = True,
) -> VerifyResult:
    """Verify ``T`` speculative steps of ``k`` drafts each by exact rejection sampling.

    ``p``: ``(T, k+1, V)`` target distributions at each of the ``k + 1`` positions (position ``k``
    gives the bonus token); ``q``: ``(T, k, V)`` draft distributions; ``drafts``: ``(T, k)`` draft
    tokens, sampled from ``q`` by the caller (each must have ``q > 0``). ``k = 0`` is allowed and
    just samples one token from ``p[:, 0]``.

    Consumes ``T·k`` uniforms (acceptance tests, row-major) then ``T`` uniforms (the correction or
    bonus token) from ``rng``. ``validate=False`` skips the input checks (hot loops whose inputs are
    known good); otherwise bad shapes, non-distributions or bad drafts raise ValueError.
    """
    p_arr = _as_float_array("p", p)
    q_arr = _as_float_array("q", q)
    n_trials, k, vocab = _check_verify_shapes(p_arr, q_arr)
    drafts_arr = np.asarray(drafts)
    if validate:
        if drafts_arr.shape != (n_trials, k):
            raise ValueError(
                f"drafts must have shape (T, k) = {(n_trials, k)}, got {drafts_arr.shape}"
            )
        if drafts_arr.size and not np.issubdtype(drafts_arr.dtype, np.integer):
            raise ValueError(f"drafts must be integer token ids, got dtype {drafts_arr.dtype}")
        _check_distributions("p", p_arr)
        _check_distributions("q", q_arr)
        if drafts_arr.size and (drafts_arr.min() < 0 or drafts_arr.max() >= vocab):
            raise ValueError(
                f"drafts must be token ids in [0, {vocab}), got range "
                f"[{drafts_arr.min()}, {drafts_arr.max()}]"
            )
    drafts_arr = drafts_arr.astype(np.int64, copy=False).reshape(n_trials, k)

    rows = np.arange(n_trials)
    if k > 0:
        p_x = np.take_along_axis(p_arr[:, :k, :], drafts_arr[..., None], axis=-1)[..., 0]
        q_x = np.take_along_axis(q_arr, drafts_arr[..., None], axis=-1)[..., 0]
        if validate and np.any(q_x <= 0.0):
            raise ValueError("drafts must lie in the support of q (q(draft) > 0)")
        u_accept = rng.random((n_trials, k))
        # u < p/q  <=>  accepted with probability min(1, p/q); p(x) = 0 always rejects.
        ok = u_accept * q_x < p_x
        accepted = np.cumprod(ok, axis=1, dtype=np.int64).sum(axis=1)
    else:
        accepted = np.zeros(n_trials, dtype=np.int64)

    # The last emitted token: from the residual at the first rejected position, or the bonus
    # token from p_k when every draft was accepted.
    last = p_arr[rows, accepted]  # (T, V)
    rejected = accepted < k
    weights = last.copy()
    if k > 0 and np.any(rejected):
        q_at = q_arr[rows[rejected], accepted[rejected]]
        residual = np.maximum(last[rejected] - q_at, 0.0)
        # p == q leaves no residual mass: then (and only then) fall back to p itself.
        has_mass = residual.sum(axis=-1) > 0.0
        weights[rejected] = np.where(has_mass[:, None], residual, last[rejected])
    final = _inverse_cdf(weights, np.asarray(rng.random(n_trials)))

    tokens = np.full((n_trials, k + 1), -1, dtype=np.int64)
    if k > 0:
        keep = np.arange(k)[None, :] < accepted[:, None]
        tokens[:, :k] = np.where(keep, drafts_arr, -1)
    tokens[rows, accepted] = final
    return VerifyResult(accepted=accepted, tokens=tokens)


def propose_and_verify(
    p: npt.ArrayLike, q: npt.ArrayLike, rng: np.random.Generator, *, validate: bool = True
) -> VerifyResult:
    """Sample the drafts from ``q`` (``T·k`` uniforms) and then :func:`verify` them against ``p``.

    ``p``: ``(T, k+1, V)``, ``q``: ``(T, k, V)``, as for :func:`verify`.
    """
    p_arr = _as_float_array("p", p)
    q_arr = _as_float_array("q", q)
    n_trials, k, _ = _check_verify_shapes(p_arr, q_arr)
    if validate:
        _check_distributions("p", p_arr)
        _check_distributions("q", q_arr)
    drafts = _inverse_cdf(q_arr, np.asarray(rng.random((n_trials, k))))
    # Drafts drawn by inverse CDF never land on q = 0, and p, q are already checked.
    return verify(p_arr, q_arr, drafts, rng, validate=False)


def acceptance_rate(p: npt.ArrayLike, q: npt.ArrayLike) -> np.ndarray:
    """Per-position acceptance probability ``α = Σ_x min(p(x), q(x)) = 1 − TV(p, q)`` over the last
    axis; ``p`` and ``q`` must have the same shape ``(..., V)``. Returns shape ``p.shape[:-1]``."""
    p_arr = _as_float_array("p", p)
    q_arr = _as_float_array("q", q)
    if p_arr.shape != q_arr.shape:
        raise ValueError(f"p and q must have the same shape, got {p_arr.shape} and {q_arr.shape}")
    _check_distributions("p", p_arr)
    _check_distributions("q", q_arr)
    return np.asarray(np.minimum(p_arr, q_arr).sum(axis=-1))
