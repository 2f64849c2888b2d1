"""Tests for cbsim.engine.speculative.policies: the seed k rules worked by hand, the batch-level policies,
expected_emitted and the registry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cbsim.common.errors import CbsimError
from cbsim.engine.speculative.adaptive_hysteresis import AdaptiveHysteresisK
from cbsim.engine.speculative.policies import (
    AlphaEstimator,
    BatchTableK,
    BatchView,
    EwmaLookaheadController,
    EwmaLookaheadK,
    FixedK,
    GoodputK,
    HeuristicK,
    KController,
    KPolicy,
    PolicyConfig,
    StepOutcome,
    ThresholdK,
    expected_emitted,
    make_policy,
    policy_kinds,
    round_half_up,
)
from cbsim.run.loading import (
    BatchTablePolicy,
    EwmaLookaheadPolicy,
    FixedPolicy,
    GoodputPolicy,
    HeuristicPolicy,
    ThresholdPolicy,
)
from cbsim.schema.speculative import AdaptiveHysteresisPolicy


def run(controller: KController, outcomes: list[tuple[int, int]]) -> list[int]:
    """The controller's k after each (drafted, accepted) outcome."""
    ks = []
    for drafted, accepted in outcomes:
        controller.observe(StepOutcome(drafted, accepted))
        ks.append(controller.k)
    return ks


# --------------------------------------------------------------------------- seed rules


def test_threshold_sequence():
    # k=4, k_max=6, min rate 0.5, max rate 0.8; acceptance = accepted/drafted of the step:
    #   4/4 = 1.0  > 0.8 → 5        5/5 = 1.0 → 6          6/6 = 1.0 → 7, capped at k_max → 6
    #   1/6 = 0.17 < 0.5 → 5        3/5 = 0.6 → 5 (in band)
    #   4/5 = 0.8 is not > 0.8 → 5 (strict)                2/5 = 0.4 → 4
    #   2/4 = 0.5 is not < 0.5 → 4 (strict)                0/4 → 3, 0/3 → 2, 0/2 → 1
    #   0/1 → 0, floored at 1 → 1   1/1 = 1.0 → 2
    policy = make_policy(ThresholdPolicy(kind="threshold", k=4, k_max=6))
    controller = policy.controller()
    assert controller.k == 4
    outcomes = [(4, 4), (5, 5), (6, 6), (6, 1), (5, 3), (5, 4), (5, 2), (4, 2),
                (4, 0), (3, 0), (2, 0), (1, 0), (1, 1)]  # fmt: skip
    assert run(controller, outcomes) == [5, 6, 6, 5, 5, 5, 4, 4, 3, 2, 1, 1, 2]


def test_ewma_lookahead_sequence():
    # alpha 0.2, cooldown 4, initial 5 (k_min 2, k_max 12): s starts at 5 − 1 = 4;
    # s ← 0.2·accepted + 0.8·s; k = clamp(floor(s + 1 + 0.5), 2, 12) only after steps 4, 8, 12.
    #  step drafted accepted  s                              k
    #   1     5      5       1.0 + 3.2        = 4.2          5
    #   2     5      5       1.0 + 3.36       = 4.36         5
    #   3     5      5       1.0 + 3.488      = 4.488        5
    #   4     5      5       1.0 + 3.5904     = 4.5904       round(5.5904) = 6
    #   5     6      0       0.8 · 4.5904     = 3.67232      6  (s + 1 = 4.67 would give 5)
    #   6     6      0                        = 2.937856     6  (would give 4)
    #   7     6      0                        = 2.3502848    6  (would give 3)
    #   8     6      0                        = 1.88022784   round(2.88022784) = 3
    #   9     3      3       0.6 + 1.504182272 = 2.104182272 3
    #  10     3      3       0.6 + 1.6833458176 = 2.2833458176  3
    #  11     3      0       0.8 · 2.2833458176 = 1.82667665408 3
    #  12     3      0                        = 1.461341323264  round(2.46) = 2
    policy = make_policy(EwmaLookaheadPolicy(kind="ewma_lookahead", alpha=0.2, cooldown_steps=4))
    controller = policy.controller()
    assert isinstance(controller, EwmaLookaheadController)
    assert controller.k == 5
    assert controller.ewma == 4.0
    outcomes = [(5, 5)] * 4 + [(6, 0)] * 4 + [(3, 3), (3, 3), (3, 0), (3, 0)]
    expected_s = [4.2, 4.36, 4.488, 4.5904, 3.67232, 2.937856, 2.3502848, 1.88022784,
                  2.104182272, 2.2833458176, 1.82667665408, 1.461341323264]  # fmt: skip
    expected_k = [5, 5, 5, 6, 6, 6, 6, 3, 3, 3, 3, 2]
    for (drafted, accepted), s, k in zip(outcomes, expected_s, expected_k, strict=True):
        controller.observe(StepOutcome(drafted, accepted))
        assert controller.ewma == pytest.approx(s, rel=1e-12)
        assert controller.k == k
    assert controller.steps == 12
    # 20 + 0 + 6 accepted of 20 + 24 + 12 drafted, over 12 steps.
    assert controller.acceptance_rate == pytest.approx(26 / 56)
    assert controller.mean_accepted == pytest.approx(26 / 12)


def test_ewma_lookahead_rounds_half_up():
    # With alpha 0.2 and an integer start, s always has a power-of-5 denominator, so s + 1 is
    # never exactly x.5; alpha 0.5 keeps every value exact in binary floating point.
    # initial 5, s starts at 4; s ← 0.5·accepted + 0.5·s:
    #   accepted 0 → 2.0, 0 → 1.0, 1 → 1.0, 2 → 1.5;  s + 1 = 2.5 → floor(3.0) = 3
    # (Python's round(2.5) would give 2.)
    config = EwmaLookaheadPolicy(kind="ewma_lookahead", alpha=0.5, cooldown_steps=4)
    controller = make_policy(config).controller()
    assert run(controller, [(5, 0), (5, 0), (5, 1), (5, 2)]) == [5, 5, 5, 3]
    assert isinstance(controller, EwmaLookaheadController)
    assert controller.ewma == 1.5
    assert round_half_up(2.5) == 3 and round(2.5) == 2
    assert round_half_up(4.5) == 5 and round_half_up(4.49) == 4


def test_ewma_lookahead_clamps():
    # k_max 5: s after four full acceptances is 4.5904 → round(5.5904) = 6 → clamped to 5.
    high = EwmaLookaheadPolicy(kind="ewma_lookahead", initial=5, k_max=5)
    assert run(make_policy(high).controller(), [(5, 5)] * 4) == [5, 5, 5, 5]
    # k_min 4: s after four rejections is 1.6384 → round(2.6384) = 3 → clamped to 4.
    low = EwmaLookaheadPolicy(kind="ewma_lookahead", initial=5, k_min=4)
    assert run(make_policy(low).controller(), [(5, 0)] * 4) == [5, 5, 5, 4]


def test_heuristic_sequence():
    # k=4, k_max=8: all accepted → min(k + 2, 8), else max(1, k − 1).
    #   4/4 → 6, 6/6 → 8, 8/8 → 10 capped → 8, 7/8 → 7, 0/7 → 6, 5/6 → 5, 0/5 → 4,
    #   3/4 → 3, 0/3 → 2, 1/2 → 1, 0/1 → 0 floored → 1, 1/1 → 3
    controller = make_policy(HeuristicPolicy(kind="heuristic", k=4, k_max=8)).controller()
    outcomes = [(4, 4), (6, 6), (8, 8), (8, 7), (7, 0), (6, 5), (5, 0),
                (4, 3), (3, 0), (2, 1), (1, 0), (1, 1)]  # fmt: skip
    assert run(controller, outcomes) == [6, 8, 8, 7, 6, 5, 4, 3, 2, 1, 1, 3]


def test_controllers_are_independent():
    policy = make_policy(ThresholdPolicy(kind="threshold", k=4))
    a, b = policy.controller(), policy.controller()
    a.observe(StepOutcome(4, 4))
    assert (a.k, b.k) == (5, 4)


def test_fixed():
    policy = make_policy(FixedPolicy(k=3))
    controller = policy.controller()
    assert run(controller, [(3, 0), (3, 3), (3, 1)]) == [3, 3, 3]
    view = BatchView(5, [3, 3], np.array([0.1, 0.9]), np.array([10, 10]), lambda ks: 1.0)
    assert policy.choose(view) == [3, 3]
    assert policy.k_max == 3 and not policy.batch_aware


def test_per_request_policies_return_proposals():
    policy = make_policy(HeuristicPolicy(kind="heuristic"))
    view = BatchView(4, [1, 5, 8], np.full(3, 0.5), np.full(3, 100), lambda ks: 1.0)
    assert policy.choose(view) == [1, 5, 8]


def test_step_outcome_validation():
    assert StepOutcome(4, 3).rate == 0.75
    for drafted, accepted in [(0, 0), (3, 4), (3, -1)]:
        with pytest.raises(ValueError):
            StepOutcome(drafted, accepted)


# --------------------------------------------------------------------------- batch table


def view_of(batch_size: int, n: int) -> BatchView:
    return BatchView(batch_size, [4] * n, np.full(n, 0.7), np.full(n, 50), lambda ks: 1.0)


def test_batch_table_lookup():
    default = make_policy(BatchTablePolicy(kind="batch_table"))  # (1,8,4) (9,32,2) (33,∞,0)
    assert [default.choose(view_of(b, 2)) for b in (1, 8, 9, 32, 33, 500)] == [
        [4, 4], [4, 4], [2, 2], [2, 2], [0, 0], [0, 0]
    ]  # fmt: skip
    assert default.k_max == 4 and default.batch_aware
    # Unsorted rows with a gap (5..9) and nothing above 20: both mean k = 0.
    gappy = make_policy(BatchTablePolicy(kind="batch_table", table=[(10, 20, 1), (1, 4, 3)]))
    assert isinstance(gappy, BatchTableK)
    assert [gappy.k_for(b) for b in (1, 4, 5, 9, 10, 20, 21)] == [3, 3, 0, 0, 1, 1, 0]
    assert gappy.choose(view_of(7, 3)) == [0, 0, 0]
    assert gappy.choose(view_of(3, 0)) == []


# --------------------------------------------------------------------------- expected_emitted


def test_expected_emitted():
    ks = np.arange(0, 9)
    assert np.array_equal(expected_emitted(0.0, ks), np.ones(9))
    assert np.array_equal(expected_emitted(1.0, ks), ks + 1.0)
    assert np.array_equal(expected_emitted(np.linspace(0, 1, 5), 0), np.ones(5))
    for alpha in (0.1, 0.5, 0.7, 0.8, 0.95, 0.999):
        for k in range(9):
            series = sum(alpha**j for j in range(k + 1))
            assert float(expected_emitted(alpha, k)) == pytest.approx(series, rel=1e-12)
    # Broadcasting, and accuracy next to α = 1 where the closed form is 0/0-ish.
    grid = expected_emitted(np.array([[0.5], [0.8]]), np.array([1, 2]))
    assert grid == pytest.approx(np.array([[1.5, 1.75], [1.8, 2.44]]))
    assert float(expected_emitted(1 - 1e-12, 4)) == pytest.approx(5.0, rel=1e-10)
    assert isinstance(expected_emitted(0.5, 3), np.ndarray)


def test_alpha_estimator():
    # Steps 4 of 4 and 2 of 4: 6 accepted positions, 1 rejected one (the 3rd of the 2nd step;
    # the 4th was never tested). accepted/drafted = 6/8 underestimates α; the MLE is 6/7.
    estimator = AlphaEstimator(prior=0.5, weight=2.0)
    assert estimator.value == 0.5
    for drafted, accepted in [(4, 4), (4, 2)]:
        estimator.observe(StepOutcome(drafted, accepted))
    assert estimator.value == pytest.approx((6 + 1) / (6 + 1 + 2))
    mle = AlphaEstimator(prior=0.3, weight=0.0)
    assert mle.value == 0.3
    mle.observe(StepOutcome(4, 4))
    mle.observe(StepOutcome(4, 2))
    assert mle.value == pytest.approx(6 / 7)


# --------------------------------------------------------------------------- goodput


class LinearStep:
    """step_time(ks) = base + c·Σ(k_i + 1): weights read once per iteration plus a per-token cost."""

    def __init__(self, base: float = 1.0, per_token: float = 0.05) -> None:
        self.base = base
        self.per_token = per_token
        self.calls = 0

    def __call__(self, ks) -> float:
        self.calls += 1
        return float(self.base + self.per_token * sum(k + 1 for k in ks))


def goodput_view(alphas, remaining=100, step=None, batch_size=None) -> BatchView:
    alphas = np.asarray(alphas, dtype=float)
    n = len(alphas)
    return BatchView(
        batch_size if batch_size is not None else n,
        [8] * n,
        alphas,
        np.broadcast_to(np.asarray(remaining), (n,)).astype(np.int64),
        step if step is not None else LinearStep(),
    )


def test_goodput_turns_speculation_down_as_the_batch_grows():
    policy = make_policy(GoodputPolicy(kind="goodput", k_max=8))
    assert isinstance(policy, GoodputK) and policy.batch_aware
    chosen = {}
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        step = LinearStep()
        ks = policy.choose(goodput_view(np.full(b, 0.8), step=step))
        assert len(set(ks)) == 1 and len(ks) == b
        assert step.calls <= policy.k_max + 1
        chosen[b] = ks[0]
    assert chosen[1] >= 3 and chosen[4] >= 3 and chosen[8] >= 3
    assert chosen[256] <= 1
    values = list(chosen.values())
    assert values == sorted(values, reverse=True)  # never more speculation for a larger batch


def test_goodput_matches_brute_force():
    # B = 8, α = 0.8, step = 1 + 0.05·8·(k + 1): rate(k) = 8·E(0.8, k) / (1 + 0.4·(k + 1)):
    # k=0: 8/1.4 = 5.71, 1: 14.4/1.8 = 8.0, 2: 19.52/2.2 = 8.87, 3: 23.62/2.6 = 9.08,
    # 4: 26.89/3.0 = 8.96 → k = 3.
    policy = make_policy(GoodputPolicy(kind="goodput"))
    assert policy.choose(goodput_view(np.full(8, 0.8))) == [3] * 8
    rates = [8 * float(expected_emitted(0.8, k)) / (1 + 0.4 * (k + 1)) for k in range(9)]
    assert int(np.argmax(rates)) == 3


def test_goodput_respects_k_max():
    free = LinearStep(
        base=1.0, per_token=0.0
    )  # verification costs nothing: draft as much as allowed
    for k_max in (1, 3, 8):
        policy = make_policy(GoodputPolicy(kind="goodput", k_max=k_max))
        assert policy.choose(goodput_view(np.full(4, 0.9), step=free)) == [k_max] * 4
        per_request = make_policy(GoodputPolicy(kind="goodput", k_max=k_max, per_request=True))
        assert max(per_request.choose(goodput_view([0.99, 0.5, 0.1], step=free))) <= k_max


def test_goodput_ties_prefer_smaller_k():
    # α = 0: drafting never adds a token, and with free verification every k ties → k = 0.
    policy = make_policy(GoodputPolicy(kind="goodput", per_request=True))
    free = LinearStep(base=1.0, per_token=0.0)
    assert policy.choose(goodput_view(np.zeros(4), step=free)) == [0] * 4


def test_goodput_remaining_one_gains_nothing():
    for per_request in (False, True):
        policy = make_policy(GoodputPolicy(kind="goodput", per_request=per_request))
        assert policy.choose(goodput_view(np.full(3, 0.9), remaining=1)) == [0, 0, 0]
        ks = policy.choose(goodput_view([0.9, 0.9, 0.9], remaining=[1, 100, 3]))
        assert ks[0] == 0 and ks[1] >= 3 and ks[2] <= 2


def test_goodput_per_request_favours_higher_alpha():
    alphas = [0.95] * 4 + [0.3] * 4
    batch = make_policy(GoodputPolicy(kind="goodput"))
    per_request = make_policy(GoodputPolicy(kind="goodput", per_request=True))
    step = LinearStep()
    ks = per_request.choose(goodput_view(alphas, step=step))
    assert min(ks[:4]) > max(ks[4:])
    assert step.calls < 100

    def rate(ks: list[int]) -> float:
        tokens = float(expected_emitted(np.array(alphas), np.array(ks)).sum())
        return tokens / LinearStep()(ks)

    assert rate(ks) > rate(batch.choose(goodput_view(alphas)))
    # A spread of α: k never increases as α decreases.
    spread = [0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.2]
    ks = per_request.choose(goodput_view(spread))
    assert ks == sorted(ks, reverse=True) and ks[0] > ks[-1]


def test_goodput_empty_batch():
    policy = make_policy(GoodputPolicy(kind="goodput"))
    assert policy.choose(goodput_view([], batch_size=3)) == []


# --------------------------------------------------------------------------- registry


def test_make_policy_from_each_config():
    configs: list[tuple[PolicyConfig, type[KPolicy]]] = [
        (FixedPolicy(), FixedK),
        (ThresholdPolicy(kind="threshold"), ThresholdK),
        (EwmaLookaheadPolicy(kind="ewma_lookahead"), EwmaLookaheadK),
        (HeuristicPolicy(kind="heuristic"), HeuristicK),
        (BatchTablePolicy(kind="batch_table"), BatchTableK),
        (GoodputPolicy(kind="goodput"), GoodputK),
        (AdaptiveHysteresisPolicy(kind="adaptive_hysteresis"), AdaptiveHysteresisK),
    ]
    for config, cls in configs:
        policy = make_policy(config)
        assert type(policy) is cls and policy.kind == config.kind
        assert policy.config is config
        assert 0 <= policy.controller().k <= policy.k_max
    assert policy_kinds() == sorted(c.kind for c, _ in configs)


def test_unknown_kind():
    with pytest.raises(
        CbsimError, match=r"unknown k policy 'oracle'; known: adaptive_hysteresis, batch_table"
    ):
        make_policy(FixedPolicy.model_construct(kind="oracle"))  # type: ignore[arg-type]


def test_view_lengths_must_match():
    with pytest.raises(ValueError, match="one entry per decoding request"):
        BatchView(2, [1, 2], np.array([0.5]), np.array([3, 3]), lambda ks: 1.0)


def test_no_nan_near_one():
    assert math.isfinite(float(expected_emitted(np.nextafter(1.0, 0.0), 8)))
