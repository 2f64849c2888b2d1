"""Draft/target token distributions for the ``token_level`` acceptance model.

The ``token_level`` acceptance model does not draw accepted counts from a formula: it runs the
exact verifier (:mod:`cbsim.engine.speculative.verification`) on explicit next-token distributions of a
target ``p`` and a draft ``q`` over a vocabulary. This module generates those distributions.

Why a fresh pair at every position
    A real decode is a sequence of very different next-token problems: a closing bracket or the
    second half of a word is near-certain for both models, a content word after "The" is spread
    over many candidates on which the two models disagree. Acceptance is therefore a different
    number at every position, and that variation is what makes accepted lengths bursty (many steps
    accept everything, many reject at once) and what adaptive draft-length policies react to.
    Reusing one target distribution for every position would collapse the model into i.i.d.
    acceptance with a single α, the very thing the simpler ``iid`` model already does, and would
    hide that variance. So every position gets its own ``(p, q)`` pair, drawn independently.

Why the draft is not synthesised from the target
    The draft and the target are two separately trained models that approximate the same unknown
    continuation of the text; their disagreement is the sum of *both* their errors, not a
    perturbation of the target. Building ``q`` as "target logits plus noise" also has mechanical
    flaws: the added noise changes the draft's sharpness along with its agreement (its logits get
    a larger spread, so it becomes systematically more peaked than the target as the noise grows),
    and in the limit the draft turns into a one-hot on an arbitrary token, so acceptance falls
    towards zero instead of towards what two unrelated but plausible models agree on. Here neither
    is derived from the other: both are noisy views of one shared latent, with the same law.

The process, per position
    1. A shared latent ``z ~ N(0, I_V)``: how well each token continues the text, as far as the
       context tells. Each model has its own error ``ε_p, ε_q ~ N(0, I_V)``, independent.
    2. Each model's view is ``u = (z + d·ε) / sqrt(1 + d²)`` with ``d`` = ``divergence``. The two
       views have correlation ``1 / (1 + d²)`` and each is exactly ``N(0, I_V)`` whatever ``d``
       is, so ``d`` changes how much the models *agree*, never how confident either one is.
    3. ``p = softmax(β·u_p / temperature)``, ``q = softmax(β·u_q / temperature)`` with
       ``β = a·sqrt(2·ln V)`` and ``a`` = :data:`ZIPF_EXPONENT`. Scaled this way (the "frozen"
       phase of Derrida's random energy model), softmaxed Gaussian logits form, for a large
       vocabulary, a Poisson–Dirichlet(1/a) distribution: the ranked probabilities fall off like a
       Zipf law ``r^(-a)`` over a random permutation of the vocabulary, and the top token's
       probability varies widely from position to position (near-deterministic positions and flat
       ones both occur; median top probability ≈ 0.6–0.7 and median entropy ≈ 1 nat, varying
       little with ``V``), as with real language models.

    A confident position is one where the latent's best token stands far above the rest, and such
    a gap is exactly what the models' errors rarely overturn: acceptance is higher where the target
    is confident, as measured for real draft/target pairs, without a separate rule saying so.

Properties: ``divergence = 0`` gives ``q == p`` bit for bit (acceptance 1); expected acceptance
decreases monotonically as ``divergence`` grows, towards the acceptance of two unrelated
distributions of the same kind at ``divergence = inf`` (independent latents, see
:func:`acceptance_floor`). ``temperature`` divides the logits (``temperature = 0``: greedy, both
distributions one-hot on their view's best token). Use :func:`expected_acceptance` and
:func:`divergence_for_acceptance` to translate between a divergence and a mean per-token
acceptance α for a vocabulary size (at ``V = 1000``: α ≈ 0.8 at ``d = 0.1``, 0.6 at 0.2, 0.35 at
0.4).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

__all__ = [
    "ZIPF_EXPONENT",
    "acceptance_floor",
    "divergence_for_acceptance",
    "expected_acceptance",
    "position_distributions",
]

#: Zipf exponent ``a`` of the ranked token probabilities; the logits' scale is
#: ``a·sqrt(2 ln V)`` (see the module docstring). 1.8 gives a median top-token probability ≈ 0.6–0.7.
ZIPF_EXPONENT = 1.8

# Elements (positions x vocabulary) generated at once by the Monte-Carlo helpers.
_CHUNK_ELEMENTS = 1 << 20


def _check_args(n_positions: int, vocab_size: int, divergence: float, temperature: float) -> None:
    if isinstance(n_positions, bool) or not isinstance(n_positions, int | np.integer):
        raise ValueError(f"n_positions must be an integer, got {n_positions!r}")
    if n_positions < 0:
        raise ValueError(f"n_positions must be >= 0, got {n_positions}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer):
        raise ValueError(f"vocab_size must be an integer, got {vocab_size!r}")
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    if math.isnan(divergence) or divergence < 0.0:
        raise ValueError(f"divergence must be >= 0 (inf allowed), got {divergence}")
    if math.isnan(temperature) or math.isinf(temperature) or temperature < 0.0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")


def _mixing(divergence: float) -> tuple[float, float]:
    """Weights ``(c, s)`` of the shared latent and the own error: ``c² + s² = 1``."""
    if math.isinf(divergence):
        return 0.0, 1.0
    norm = math.hypot(1.0, divergence)
    return 1.0 / norm, divergence / norm


def _softmax_rows(u: np.ndarray, beta: float) -> np.ndarray:
    """Rows of ``softmax(beta·u)``, stable for any finite ``beta >= 0``."""
    with np.errstate(over="ignore", under="ignore"):
        weights: np.ndarray = np.exp((u - u.max(axis=-1, keepdims=True)) * beta)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights


def _greedy_rows(u: np.ndarray) -> np.ndarray:
    out = np.zeros_like(u)
    np.put_along_axis(out, u.argmax(axis=-1)[:, None], 1.0, axis=-1)
    return out


def position_distributions(
    rng: np.random.Generator,
    n_positions: int,
    vocab_size: int,
    divergence: float,
    temperature: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """A fresh target/draft pair ``(p, q)`` for each of ``n_positions`` positions.

    Returns two ``(n_positions, vocab_size)`` float64 arrays whose rows are distributions; row ``i``
    of ``p`` and of ``q`` belong together, rows are independent of each other. ``divergence >= 0``
    (``inf`` = unrelated models), ``temperature >= 0`` (0 = greedy). The random draws consumed
    depend only on the shapes, not on ``divergence`` or ``temperature`` (common random numbers).
    See the module docstring for the process.
    """
    _check_args(n_positions, vocab_size, divergence, temperature)
    n, vocab = int(n_positions), int(vocab_size)
    z = rng.standard_normal((n, vocab))
    eps_p = rng.standard_normal((n, vocab))
    eps_q = rng.standard_normal((n, vocab))
    c, s = _mixing(divergence)
    u_p = c * z + s * eps_p
    u_q = c * z + s * eps_q  # divergence 0: c = 1, s = 0, so u_q == u_p exactly
    scale = ZIPF_EXPONENT * math.sqrt(2.0 * math.log(vocab)) if vocab > 1 else 0.0
    beta = scale / temperature if temperature > 0.0 else math.inf
    if not math.isfinite(beta):  # greedy decoding
        return _greedy_rows(u_p), _greedy_rows(u_q)
    return _softmax_rows(u_p, beta), _softmax_rows(u_q, beta)


@lru_cache(maxsize=256)
def _expected_acceptance(
    divergence: float, vocab_size: int, samples: int, seed: int, temperature: float
) -> float:
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // vocab_size)
    total = 0.0
    done = 0
    while done < samples:
        n = min(chunk, samples - done)
        p, q = position_distributions(rng, n, vocab_size, divergence, temperature)
        total += float(np.minimum(p, q).sum())
        done += n
    return total / samples


def expected_acceptance(
    divergence: float,
    vocab_size: int,
    *,
    samples: int = 2000,
    seed: int = 0,
    temperature: float = 1.0,
) -> float:
    """Monte-Carlo mean of the per-position acceptance ``Σ_x min(p(x), q(x))`` under
    :func:`position_distributions`, over ``samples`` positions drawn with ``seed``.

    Deterministic for given arguments (results are cached) and computed with common random
    numbers, so it is a smooth function of ``divergence``, decreasing (checked on grids in the
    tests) from 1 at ``divergence = 0`` to :func:`acceptance_floor` at ``inf``. Cost grows with
    ``samples · vocab_size``.
    """
    _check_args(0, vocab_size, divergence, temperature)
    if isinstance(samples, bool) or not isinstance(samples, int | np.integer) or samples < 1:
        raise ValueError(f"samples must be a positive integer, got {samples!r}")
    return _expected_acceptance(
        float(divergence), int(vocab_size), int(samples), int(seed), float(temperature)
    )


def acceptance_floor(
    vocab_size: int, *, samples: int = 2000, seed: int = 0, temperature: float = 1.0
) -> float:
    """Expected acceptance of unrelated models (``divergence = inf``): the lowest α reachable."""
    return expected_acceptance(
        math.inf, vocab_size, samples=samples, seed=seed, temperature=temperature
    )


@lru_cache(maxsize=256)
def _divergence_for_acceptance(
    alpha: float, vocab_size: int, samples: int, seed: int, temperature: float, atol: float
) -> float:
    def f(theta: float) -> float:
        return _expected_acceptance(math.tan(theta), vocab_size, samples, seed, temperature)

    # Bisection on θ = atan(divergence) ∈ [0, π/2], where acceptance falls from 1 to the floor.
    lo, hi = 0.0, math.pi / 2.0
    mid = 0.5 * (lo + hi)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        value = f(mid)
        if abs(value - alpha) <= atol:
            break
        if value > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            mid = 0.5 * (lo + hi)
            break
    return math.tan(mid)


def divergence_for_acceptance(
    alpha: float,
    vocab_size: int,
    *,
    samples: int = 2000,
    seed: int = 0,
    temperature: float = 1.0,
    atol: float = 1e-5,
) -> float:
    """The ``divergence`` whose :func:`expected_acceptance` (same ``samples``, ``seed``,
    ``temperature``) equals ``alpha`` within ``atol``, found by bisection.

    ``alpha = 1`` gives 0. Raises ValueError for ``alpha`` outside ``(floor, 1]``, where the floor
    (:func:`acceptance_floor`) is the acceptance of two unrelated distributions for this vocabulary.
    """
    if math.isnan(alpha) or not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    if not atol > 0.0:
        raise ValueError(f"atol must be > 0, got {atol}")
    if alpha == 1.0:
        return 0.0
    floor = acceptance_floor(vocab_size, samples=samples, seed=seed, temperature=temperature)
    if alpha <= floor:
        raise ValueError(
            f"alpha {alpha} is not reachable: unrelated draft and target distributions over "
            f"{vocab_size} tokens already agree on {floor:.4f} (the floor); use a larger alpha"
        )
    return _divergence_for_acceptance(
        float(alpha), int(vocab_size), int(samples), int(seed), float(temperature), float(atol)
    )
