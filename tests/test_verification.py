"""Exact speculative sampling: the emitted tokens follow the target, acceptance is 1 − TV.

The distribution tests are chi-square goodness-of-fit tests with fixed seeds (p-value > 0.001);
the acceptance tests compare Monte-Carlo means with closed forms within 4 standard errors.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from cbsim.engine.speculative.verification import (
    VerifyResult,
    acceptance_rate,
    propose_and_verify,
    sample,
    verify,
)

P_MIN = 1e-3
TRIALS = 200_000
V = 6

# Named (p, q) pairs over a 6-token vocabulary.
PAIRS: dict[str, tuple[list[float], list[float]]] = {
    "q_close": (
        [0.30, 0.25, 0.20, 0.15, 0.07, 0.03],
        [0.28, 0.27, 0.19, 0.16, 0.06, 0.04],
    ),
    "q_far": (
        [0.50, 0.25, 0.10, 0.08, 0.05, 0.02],
        [0.02, 0.05, 0.08, 0.10, 0.25, 0.50],
    ),
    "q_support_where_p_zero": (
        [0.40, 0.35, 0.25, 0.00, 0.00, 0.00],
        [0.10, 0.10, 0.20, 0.30, 0.20, 0.10],
    ),
    "p_support_where_q_zero": (
        [0.20, 0.20, 0.20, 0.20, 0.10, 0.10],
        [0.50, 0.30, 0.20, 0.00, 0.00, 0.00],
    ),
}


def chi2_pvalue(tokens: np.ndarray, probs: np.ndarray) -> float:
    """Goodness of fit of the token sample to ``probs`` (flattened categories); tokens on
    zero-probability categories fail outright."""
    chisquare = pytest.importorskip("scipy.stats").chisquare
    probs = np.asarray(probs, dtype=float).ravel()
    counts = np.bincount(np.asarray(tokens).ravel(), minlength=probs.size)
    assert counts.size == probs.size, "token id outside the vocabulary"
    assert counts[probs == 0].sum() == 0, "emitted a token the target gives probability 0"
    support = probs > 0
    expected = probs[support] * counts.sum() / probs[support].sum()
    pvalue = float(chisquare(counts[support], expected).pvalue)
    print(f"chi-square p-value {pvalue:.4f} (n={counts.sum()}, categories={support.sum()})")
    return pvalue


def tile(dists: npt.ArrayLike, n: int) -> np.ndarray:
    """``(n, positions, V)`` read-only view of per-position distributions shared by all trials."""
    arr = np.asarray(dists, dtype=float)
    return np.broadcast_to(arr, (n, *arr.shape))


def tv(p: npt.ArrayLike, q: npt.ArrayLike) -> float:
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


# --- sample -------------------------------------------------------------------------------------


def test_sample_matches_distribution_and_shape() -> None:
    probs = np.array([0.5, 0.0, 0.2, 0.3, 0.0])
    rng = np.random.default_rng(1)
    draws = sample(np.broadcast_to(probs, (TRIALS, probs.size)), rng)
    assert draws.shape == (TRIALS,)
    assert draws.dtype == np.int64
    assert chi2_pvalue(draws, probs) > P_MIN
    nd = sample(np.full((2, 3, 4), 0.25), rng)
    assert nd.shape == (2, 3)


def test_sample_uses_one_uniform_per_row() -> None:
    rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
    sample(np.full((7, 3, 4), 0.25), rng_a)
    rng_b.random((7, 3))
    assert rng_a.random() == rng_b.random()


# --- the emitted tokens follow p ----------------------------------------------------------------


@pytest.mark.parametrize("name", list(PAIRS))
def test_k1_first_token_and_bonus_follow_target(name: str) -> None:
    p0, q0 = PAIRS[name]
    p1 = [0.1, 0.1, 0.2, 0.2, 0.3, 0.1]  # bonus position, context-free
    rng = np.random.default_rng([11, list(PAIRS).index(name)])
    result = propose_and_verify(tile([p0, p1], TRIALS), tile([q0], TRIALS), rng)
    assert chi2_pvalue(result.tokens[:, 0], np.array(p0)) > P_MIN
    bonus = result.tokens[result.accepted == 1, 1]
    assert chi2_pvalue(bonus, np.array(p1)) > P_MIN


def k3_distributions() -> tuple[np.ndarray, np.ndarray]:
    """Per-position (context-free) p_0..p_3 and q_0..q_2 mixing the PAIRS cases."""
    names = list(PAIRS)
    p = np.array([PAIRS[n][0] for n in names])  # 4 positions
    q = np.array([PAIRS[n][1] for n in names[:3]])  # 3 drafts
    return p, q


def test_k3_token_at_each_position_follows_target() -> None:
    p, q = k3_distributions()
    rng = np.random.default_rng(12)
    result = propose_and_verify(tile(p, TRIALS), tile(q, TRIALS), rng)
    for i in range(4):
        # Position i is emitted iff the i earlier drafts were accepted; with context-free
        # distributions the token there must follow p_i exactly (draft, correction or bonus).
        emitted_here = result.accepted >= i
        assert chi2_pvalue(result.tokens[emitted_here, i], p[i]) > P_MIN


def test_k3_first_two_tokens_of_the_output_follow_target_jointly() -> None:
    p, q = k3_distributions()
    rng = np.random.default_rng(13)
    first = propose_and_verify(tile(p, TRIALS), tile(q, TRIALS), rng)
    second = first.tokens[:, 1].copy()
    # Steps that emitted a single token: the next token comes from the next step, which starts at
    # output position 1 (context-free distributions, so the same p_1.., q_1..).
    short = np.flatnonzero(first.accepted == 0)
    nxt = propose_and_verify(tile(p[1:], short.size), tile(q[1:], short.size), rng)
    second[short] = nxt.tokens[:, 0]
    assert (second >= 0).all()
    joint = first.tokens[:, 0] * V + second
    assert chi2_pvalue(joint, np.outer(p[0], p[1])) > P_MIN


def test_k0_samples_from_p0() -> None:
    p0 = np.array(PAIRS["q_far"][0])
    rng = np.random.default_rng(14)
    result = verify(
        tile([p0], TRIALS), np.empty((TRIALS, 0, V)), np.empty((TRIALS, 0), dtype=int), rng
    )
    assert result.tokens.shape == (TRIALS, 1)
    assert (result.accepted == 0).all()
    assert chi2_pvalue(result.tokens[:, 0], p0) > P_MIN
    via_propose = propose_and_verify(tile([p0], 10), np.empty((10, 0, V)), rng)
    assert via_propose.tokens.shape == (10, 1)


# --- acceptance ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PAIRS))
def test_first_position_acceptance_is_one_minus_tv(name: str) -> None:
    p0, q0 = PAIRS[name]
    alpha = 1.0 - tv(p0, q0)
    assert acceptance_rate(np.array(p0), np.array(q0)) == pytest.approx(alpha, abs=1e-12)
    rng = np.random.default_rng([21, list(PAIRS).index(name)])
    result = propose_and_verify(tile([p0, p0], TRIALS), tile([q0], TRIALS), rng)
    rate = float(result.accepted.mean())
    se = np.sqrt(alpha * (1 - alpha) / TRIALS)
    assert abs(rate - alpha) < 4 * se + 1e-12


@pytest.mark.parametrize("k", [1, 3, 5])
def test_iid_positions_mean_accepted_and_emitted(k: int) -> None:
    p0, q0 = PAIRS["q_close"][0], PAIRS["q_far"][0]  # α = 0.8
    alpha = 1.0 - tv(p0, q0)
    rng = np.random.default_rng(22 + k)
    result = propose_and_verify(tile([p0] * (k + 1), TRIALS), tile([q0] * k, TRIALS), rng)
    acc = result.accepted.astype(float)
    emitted = result.emitted.astype(float)
    want_acc = alpha * (1 - alpha**k) / (1 - alpha)
    want_emitted = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert abs(acc.mean() - want_acc) < 4 * acc.std() / np.sqrt(TRIALS)
    assert abs(emitted.mean() - want_emitted) < 4 * emitted.std() / np.sqrt(TRIALS)
    # Number of emitted tokens is truncated geometric: P(accepted = j) = α^j (1 − α), j < k.
    for j in range(k):
        want = alpha**j * (1 - alpha)
        assert abs((result.accepted == j).mean() - want) < 4 * np.sqrt(want * (1 - want) / TRIALS)


def test_identical_distributions_accept_everything() -> None:
    rng = np.random.default_rng(31)
    p = rng.dirichlet(np.ones(50), size=(1000, 5))
    result = propose_and_verify(p, p[:, :4].copy(), rng)
    assert (result.accepted == 4).all()
    assert (result.tokens >= 0).all()


def test_disjoint_supports_accept_nothing() -> None:
    p0 = [0.5, 0.5, 0.0, 0.0, 0.0, 0.0]
    q0 = [0.0, 0.0, 0.2, 0.3, 0.4, 0.1]
    assert acceptance_rate(np.array(p0), np.array(q0)) == 0.0
    rng = np.random.default_rng(32)
    result = propose_and_verify(tile([p0] * 4, 10_000), tile([q0] * 3, 10_000), rng)
    assert (result.accepted == 0).all()
    assert np.isin(result.tokens[:, 0], [0, 1]).all()
    assert (result.tokens[:, 1:] == -1).all()


def test_residual_is_used_on_rejection() -> None:
    # Only token 1 has p > q, so every correction token must be 1.
    p0 = [0.5, 0.5]
    q0 = [0.9, 0.1]
    rng = np.random.default_rng(33)
    drafts = np.zeros((5000, 1), dtype=int)  # always draft token 0: accepted w.p. 5/9
    result = verify(tile([p0, p0], 5000), tile([q0], 5000), drafts, rng)
    assert (result.tokens[result.accepted == 0, 0] == 1).all()
    rate = result.accepted.mean()
    assert abs(rate - 5 / 9) < 4 * np.sqrt((5 / 9) * (4 / 9) / 5000)


# --- result layout, T = 1, determinism ---------------------------------------------------------


def test_tokens_layout_and_padding() -> None:
    p, q = k3_distributions()
    rng = np.random.default_rng(41)
    n = 2000
    drafts = sample(tile(q, n), rng)
    result = verify(tile(p, n), tile(q, n), drafts, rng)
    assert isinstance(result, VerifyResult)
    assert result.accepted.shape == (n,)
    assert result.tokens.shape == (n, 4)
    assert result.k == 3
    assert set(np.unique(result.accepted)) <= {0, 1, 2, 3}
    for i in range(n):
        a = int(result.accepted[i])
        assert (result.tokens[i, :a] == drafts[i, :a]).all()
        assert result.tokens[i, a] >= 0
        assert (result.tokens[i, a + 1 :] == -1).all()


def test_single_trial() -> None:
    p, q = k3_distributions()
    rng = np.random.default_rng(42)
    result = propose_and_verify(p[None], q[None], rng)
    assert result.accepted.shape == (1,)
    assert result.tokens.shape == (1, 4)
    assert 0 <= result.accepted[0] <= 3


def test_seeded_and_consumes_fixed_randomness() -> None:
    p, q = k3_distributions()
    n = 100
    a = propose_and_verify(tile(p, n), tile(q, n), np.random.default_rng(7))
    b = propose_and_verify(tile(p, n), tile(q, n), np.random.default_rng(7))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    # verify draws T·k acceptance uniforms then T uniforms, whatever the outcome.
    rng, ref = np.random.default_rng(8), np.random.default_rng(8)
    drafts = np.zeros((n, 3), dtype=int)
    verify(tile(p, n), tile(np.full((3, V), 1 / V), n), drafts, rng)
    ref.random((n, 3))
    ref.random(n)
    assert rng.random() == ref.random()


# --- bad inputs ---------------------------------------------------------------------------------


def test_acceptance_rate_shapes_and_values() -> None:
    rng = np.random.default_rng(51)
    p = rng.dirichlet(np.ones(8), size=(3, 4))
    q = rng.dirichlet(np.ones(8), size=(3, 4))
    alpha = acceptance_rate(p, q)
    assert alpha.shape == (3, 4)
    np.testing.assert_allclose(alpha, 1 - 0.5 * np.abs(p - q).sum(-1))
    with pytest.raises(ValueError, match="same shape"):
        acceptance_rate(p, q[:, :3])
    with pytest.raises(ValueError, match="sum to 1"):
        acceptance_rate(p * 2, q)


GOOD_P = np.full((2, 3, 4), 0.25)
GOOD_Q = np.full((2, 2, 4), 0.25)
GOOD_D = np.zeros((2, 2), dtype=int)


@pytest.mark.parametrize(
    ("p", "q", "drafts", "match"),
    [
        (GOOD_P[0], GOOD_Q, GOOD_D, "p must have shape"),
        (GOOD_P, GOOD_Q[0], GOOD_D, "q must have shape"),
        (GOOD_P, GOOD_Q[:1], GOOD_D, "q must have shape"),
        (GOOD_P, np.full((2, 3, 4), 0.25), GOOD_D, "q must have shape"),
        (GOOD_P, np.full((2, 2, 5), 0.2), GOOD_D, "q must have shape"),
        (np.full((2, 0, 4), 0.25), np.full((2, 0, 4), 0.25), GOOD_D[:, :0], "k\\+1 >= 1"),
        (GOOD_P, GOOD_Q, GOOD_D[:, :1], "drafts must have shape"),
        (GOOD_P, GOOD_Q, GOOD_D.astype(float), "integer"),
        (GOOD_P, GOOD_Q, GOOD_D + 4, "token ids in"),
        (GOOD_P, GOOD_Q, GOOD_D - 1, "token ids in"),
        (GOOD_P * 1.1, GOOD_Q, GOOD_D, "sum to 1"),
        (GOOD_P - 0.5, GOOD_Q, GOOD_D, "negative"),
        (np.where(GOOD_P > 0, np.nan, 0), GOOD_Q, GOOD_D, "NaN"),
        (GOOD_P, np.broadcast_to([1.0, 0.0, 0.0, 0.0], (2, 2, 4)), GOOD_D + 1, "support of q"),
        (GOOD_P, [["a"]], GOOD_D, "array of probabilities"),
    ],
)
def test_verify_rejects_bad_input(p, q, drafts, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        verify(p, q, drafts, np.random.default_rng(0))


def test_propose_and_sample_reject_bad_input() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="sum to 1"):
        propose_and_verify(GOOD_P, GOOD_Q * 0.5, rng)
    with pytest.raises(ValueError, match="q must have shape"):
        propose_and_verify(GOOD_P, GOOD_P, rng)
    with pytest.raises(ValueError, match="negative"):
        sample([0.5, 0.7, -0.2], rng)
    with pytest.raises(ValueError, match="sum to 1"):
        sample([0.5, 0.4], rng)
    with pytest.raises(ValueError, match="non-empty"):
        sample(np.empty((3, 0)), rng)
