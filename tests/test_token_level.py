"""The token_level distribution generator: divergence 0 is the target itself, acceptance falls
monotonically with divergence, every position is a fresh pair, and α ↔ divergence round-trips."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from cbsim.engine.speculative.token_level import (
    acceptance_floor,
    divergence_for_acceptance,
    expected_acceptance,
    position_distributions,
)
from cbsim.engine.speculative.verification import acceptance_rate, propose_and_verify

V = 64
SAMPLES = 1000


def test_shapes_and_rows_are_distributions() -> None:
    p, q = position_distributions(np.random.default_rng(0), 50, 200, 0.4)
    assert p.shape == q.shape == (50, 200)
    for x in (p, q):
        assert (x >= 0).all()
        np.testing.assert_allclose(x.sum(axis=-1), 1.0, atol=1e-12)
    empty_p, empty_q = position_distributions(np.random.default_rng(0), 0, 10, 0.4)
    assert empty_p.shape == empty_q.shape == (0, 10)


def test_divergence_zero_gives_the_target_exactly() -> None:
    p, q = position_distributions(np.random.default_rng(1), 200, 500, 0.0)
    np.testing.assert_array_equal(p, q)
    np.testing.assert_allclose(acceptance_rate(p, q), 1.0, atol=1e-12)
    assert expected_acceptance(0.0, V, samples=200) == pytest.approx(1.0, abs=1e-12)
    p3, q3 = p.reshape(40, 5, 500), q.reshape(40, 5, 500)[:, :4]
    result = propose_and_verify(p3, q3, np.random.default_rng(2))
    assert (result.accepted == 4).all()
    greedy_p, greedy_q = position_distributions(np.random.default_rng(1), 50, 500, 0.0, 0.0)
    np.testing.assert_array_equal(greedy_p, greedy_q)


def test_acceptance_decreases_monotonically_with_divergence() -> None:
    grid = [0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, math.inf]
    # Common random numbers (one seed): strictly decreasing on a fine grid.
    crn = [expected_acceptance(d, V, samples=SAMPLES, seed=3) for d in grid]
    assert all(a > b for a, b in itertools.pairwise(crn)), crn
    # Independent seeds per point: still decreasing where the steps exceed Monte-Carlo noise.
    coarse = [0.0, 0.1, 0.3, 1.0, math.inf]
    indep = [expected_acceptance(d, V, samples=SAMPLES, seed=100 + i) for i, d in enumerate(coarse)]
    assert all(a > b for a, b in itertools.pairwise(indep)), indep
    # Towards the acceptance of two unrelated distributions of the same kind.
    floor = acceptance_floor(V, samples=SAMPLES, seed=3)
    assert floor == crn[-1]
    assert 0.0 < floor < 0.5
    assert expected_acceptance(20.0, V, samples=SAMPLES, seed=3) - floor < 0.01


def test_floor_falls_with_vocabulary() -> None:
    assert acceptance_floor(1000, samples=300) < acceptance_floor(64, samples=300)


def test_distributions_differ_across_positions() -> None:
    p, q = position_distributions(np.random.default_rng(4), 200, V, 0.3)
    assert len({tuple(row) for row in np.round(p, 12)}) == 200
    assert len(np.unique(p.argmax(axis=1))) > V // 2  # the likely token moves around
    top = p.max(axis=1)
    assert top.min() < 0.3 < 0.7 < top.max()  # flat and near-deterministic positions both occur
    alpha = acceptance_rate(p, q)
    assert alpha.std() > 0.1  # acceptance varies position by position
    # Acceptance is higher where the target is confident, as with real models.
    assert np.corrcoef(top, alpha)[0, 1] > 0.2


def entropy(x: np.ndarray) -> np.ndarray:
    return np.asarray(-(x * np.log(np.where(x > 0, x, 1.0))).sum(axis=-1))


def test_target_and_draft_have_the_same_law_at_any_divergence() -> None:
    # Neither is derived from the other: the draft is not sharper or flatter than the target, and
    # divergence changes agreement only, not how confident either model is.
    n = 4000
    p0, _ = position_distributions(np.random.default_rng(5), n, V, 0.0)
    p, q = position_distributions(np.random.default_rng(5), n, V, 2.0)
    for stat in (entropy, lambda x: x.max(axis=1)):
        ref = stat(p0)
        for x in (p, q):
            assert abs(stat(x).mean() - ref.mean()) < 4 * ref.std() * np.sqrt(2 / n)
    assert (p.argmax(axis=1) != q.argmax(axis=1)).mean() > 0.5


def test_target_is_peaked_like_a_language_model() -> None:
    for vocab in (64, 1000, 32000):
        p, _ = position_distributions(np.random.default_rng(6), 100, vocab, 0.3)
        assert 0.5 < np.median(p.max(axis=1)) < 0.8
        assert 0.5 < np.median(entropy(p)) < 1.5


def test_temperature() -> None:
    p1, _ = position_distributions(np.random.default_rng(6), 100, V, 0.3, temperature=1.0)
    p2, _ = position_distributions(np.random.default_rng(6), 100, V, 0.3, temperature=2.0)
    assert (p2.max(axis=1) < p1.max(axis=1)).all()
    np.testing.assert_array_equal(p1.argmax(axis=1), p2.argmax(axis=1))
    g_p, g_q = position_distributions(np.random.default_rng(6), 100, V, 0.3, temperature=0.0)
    assert ((g_p == 0) | (g_p == 1)).all() and (g_p.sum(axis=1) == 1).all()
    np.testing.assert_array_equal(g_p.argmax(axis=1), p1.argmax(axis=1))
    assert set(np.unique(acceptance_rate(g_p, g_q))) <= {0.0, 1.0}


def test_seeded_and_common_random_numbers() -> None:
    a = position_distributions(np.random.default_rng(7), 10, V, 0.5)
    b = position_distributions(np.random.default_rng(7), 10, V, 0.5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    rng_a, rng_b = np.random.default_rng(8), np.random.default_rng(8)
    position_distributions(rng_a, 10, V, 0.0)
    position_distributions(rng_b, 10, V, math.inf, temperature=0.5)
    assert rng_a.random() == rng_b.random()  # draws depend on shapes only
    assert expected_acceptance(0.5, V, samples=300, seed=1) == expected_acceptance(
        0.5, V, samples=300, seed=1
    )


def test_verifier_acceptance_matches_expected_acceptance() -> None:
    n, k = 20_000, 1
    p, q = position_distributions(np.random.default_rng(9), n * (k + 1), V, 0.3)
    p = p.reshape(n, k + 1, V)
    q = q.reshape(n, k + 1, V)[:, :k]
    result = propose_and_verify(p, q, np.random.default_rng(10))
    alpha = acceptance_rate(p[:, 0], q[:, 0])
    assert abs(result.accepted.mean() - alpha.mean()) < 4 * np.sqrt(0.25 / n)
    # expected_acceptance is itself a Monte-Carlo mean over 2000 positions.
    se = alpha.std() * np.sqrt(1 / n + 1 / 2000)
    assert abs(alpha.mean() - expected_acceptance(0.3, V)) < 4 * se


@pytest.mark.parametrize("divergence", [0.05, 0.2, 0.6, 1.5])
def test_divergence_for_acceptance_inverts_expected_acceptance(divergence: float) -> None:
    alpha = expected_acceptance(divergence, V, samples=500)
    found = divergence_for_acceptance(alpha, V, samples=500)
    assert found == pytest.approx(divergence, rel=0.02)
    assert expected_acceptance(found, V, samples=500) == pytest.approx(alpha, abs=1e-4)


def test_divergence_for_acceptance_edges() -> None:
    assert divergence_for_acceptance(1.0, V) == 0.0
    floor = acceptance_floor(V, samples=500)
    with pytest.raises(ValueError, match="not reachable"):
        divergence_for_acceptance(floor * 0.9, V, samples=500)
    for bad in (0.0, -0.1, 1.2, math.nan):
        with pytest.raises(ValueError, match="alpha"):
            divergence_for_acceptance(bad, V)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"divergence": -0.1}, "divergence"),
        ({"divergence": math.nan}, "divergence"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"vocab_size": 2.5}, "vocab_size"),
        ({"n_positions": -1}, "n_positions"),
        ({"n_positions": 1.0}, "n_positions"),
    ],
)
def test_bad_arguments_raise(kwargs: dict[str, float], match: str) -> None:
    args: dict[str, float] = {"n_positions": 3, "vocab_size": V, "divergence": 0.5}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        position_distributions(np.random.default_rng(0), **args)  # type: ignore[arg-type]


def test_expected_acceptance_bad_arguments() -> None:
    with pytest.raises(ValueError, match="samples"):
        expected_acceptance(0.5, V, samples=0)
    with pytest.raises(ValueError, match="divergence"):
        expected_acceptance(-1.0, V)
