"""Per-request speculative figures held as slot arrays: the same floats as one request at a time."""

from __future__ import annotations

import math

import numpy as np

from cbsim.engine.speculative.decoder import EMA_WEIGHT, PRIOR_STRENGTH, cut_to_room
from cbsim.engine.speculative.policy_base import AlphaEstimator
from cbsim.engine.speculative.slots import SpecSlots


def test_alphas_are_the_estimators_posterior_means() -> None:
    rng = np.random.default_rng(3)
    slots = SpecSlots(capacity=2)
    estimators = []
    for _ in range(50):  # past the initial capacity: the arrays grow
        slots.new(0.5)
        estimators.append(AlphaEstimator(weight=PRIOR_STRENGTH))
    for _ in range(20):
        rows = np.flatnonzero(rng.random(50) < 0.5)
        ks = rng.integers(1, 8, len(rows))
        accepted = rng.integers(0, ks + 1)
        slots.observe(rows, ks, accepted, EMA_WEIGHT)
        for row, k, a in zip(rows.tolist(), ks.tolist(), accepted.tolist(), strict=True):
            estimators[row].observe_counts(a, 1 if a < k else 0)
    prior = 0.63
    alphas = slots.alphas(np.arange(50), prior, PRIOR_STRENGTH).tolist()
    assert alphas == [e.estimate(prior) for e in estimators]


def test_ema_starts_at_the_first_rate() -> None:
    slots = SpecSlots()
    slot = slots.new(0.7)
    assert math.isnan(slots.ema[slot])
    rejected = slots.observe(np.array([slot]), np.array([4]), np.array([3]), EMA_WEIGHT)
    assert rejected == 1 and slots.ema[slot] == 0.75
    slots.observe(np.array([slot]), np.array([2]), np.array([2]), EMA_WEIGHT)
    assert slots.ema[slot] == EMA_WEIGHT * 1.0 + (1.0 - EMA_WEIGHT) * 0.75


def test_cut_to_room_is_the_cut_in_batch_order() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        ks = rng.integers(0, 7, rng.integers(1, 30))
        spare = int(rng.integers(0, 60))
        left, expected = spare, []
        for k in ks.tolist():
            expected.append(min(k, left))
            left -= expected[-1]
        assert cut_to_room(ks, spare).tolist() == expected
