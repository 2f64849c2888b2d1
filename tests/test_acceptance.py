"""Acceptance models and conversions: α, the marginal rate and the acceptance length, the draws of
every acceptance model, and acceptance traces (loading, errors, lengths they supply to a run).

Monte-Carlo checks use fixed seeds and compare means with their closed forms within 4 standard
errors (the standard error computed from the exact distribution where one is known).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import cbsim
from cbsim.common.errors import CbsimError
from cbsim.engine.speculative.acceptance import (
    ACCEPTANCE_KINDS,
    BetaLevels,
    IidModel,
    PerRequestModel,
    PositionalModel,
    TokenLevelModel,
    TraceModel,
    alpha_from_acceptance_length,
    alpha_from_marginal,
    alpha_mle,
    expected_accepted,
    expected_emitted,
    leading_successes,
    make_acceptance_model,
    marginal_rate,
)
from cbsim.engine.speculative.token_level import expected_acceptance
from cbsim.run.loading import (
    IidAcceptance,
    PerRequestAcceptance,
    PositionalAcceptance,
    TokenLevelAcceptance,
    TraceAcceptance,
)
from cbsim.workload.acceptance_trace import AcceptanceTrace, load_acceptance_trace
from cbsim.workload.build import build_workload
from cbsim.workload.request import Request
from tests.conftest import small_scenario

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_TRACE = ROOT / "scenarios" / "data" / "acceptance-example.csv"
FIELD = "speculative.acceptance.path"

ALPHAS = [0.05, 0.1, 0.25, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99]
KS = list(range(1, 9))


def requests(n: int, *, generated: int = 0, output: int = 10_000) -> list[Request]:
    """``n`` decoding requests (ids 0..n-1) that have emitted ``generated`` tokens."""
    reqs = []
    for i in range(n):
        req = Request(i, 0.0, 16, output)
        req.generated = generated
        reqs.append(req)
    return reqs


def accepted_pmf(alpha: float, k: int) -> np.ndarray:
    """Exact distribution of the accepted drafts a ∈ [0, k] under i.i.d. conditional α."""
    pmf = np.array([alpha**j * (1.0 - alpha) for j in range(k)] + [alpha**k])
    assert pmf.sum() == pytest.approx(1.0)
    return pmf


def assert_mean_within(samples: np.ndarray, expected: float, std: float, z: float = 4.0) -> None:
    se = std / math.sqrt(len(samples))
    mean = float(np.mean(samples))
    assert abs(mean - expected) <= z * se + 1e-12, f"mean {mean} vs {expected} (SE {se})"


# --------------------------------------------------------------------------- conversions


def test_expected_emitted_closed_form():
    assert expected_emitted(0.7, 4) == pytest.approx((1 - 0.7**5) / 0.3, rel=1e-12)
    assert expected_accepted(0.7, 4) == pytest.approx((1 - 0.7**5) / 0.3 - 1, rel=1e-12)
    # bounds: α = 0 emits only the correction token, α = 1 emits k + 1
    assert expected_emitted(0.0, 4) == 1.0
    assert expected_emitted(1.0, 4) == 5.0
    assert expected_emitted(0.7, 0) == pytest.approx(1.0)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("k", KS)
def test_expected_emitted_matches_exact_distribution(alpha: float, k: int):
    pmf = accepted_pmf(alpha, k)
    mean_accepted = float((np.arange(k + 1) * pmf).sum())
    assert expected_accepted(alpha, k) == pytest.approx(mean_accepted, rel=1e-10)
    assert expected_emitted(alpha, k) == pytest.approx(1.0 + mean_accepted, rel=1e-10)


def test_marginal_rate_value():
    assert marginal_rate(0.7, 4) == pytest.approx(0.443275, abs=1e-6)
    assert marginal_rate(0.7, 4) == pytest.approx(0.4433, abs=5e-5)
    # k = 1: the marginal rate is α itself; for k > 1 it is lower
    assert marginal_rate(0.7, 1) == pytest.approx(0.7)
    assert marginal_rate(0.7, 2) < 0.7


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("k", KS)
def test_conversions_round_trip(alpha: float, k: int):
    assert alpha_from_marginal(marginal_rate(alpha, k), k) == pytest.approx(alpha, abs=1e-9)
    length = expected_emitted(alpha, k)
    assert alpha_from_acceptance_length(length, k) == pytest.approx(alpha, abs=1e-9)


@pytest.mark.parametrize("k", KS)
def test_conversions_are_monotone_in_alpha(k: int):
    rates = [marginal_rate(a, k) for a in ALPHAS]
    lengths = [expected_emitted(a, k) for a in ALPHAS]
    assert all(np.diff(rates) > 0)
    assert all(np.diff(lengths) > 0)
    assert all(0.0 < r < 1.0 for r in rates)
    assert all(1.0 < n < k + 1 for n in lengths)


def test_conversion_endpoints():
    # near α = 1 the closed forms lose digits to cancellation: 1e-7 is plenty for an α
    assert alpha_from_marginal(0.0, 4) == pytest.approx(0.0, abs=1e-7)
    assert alpha_from_marginal(1.0, 4) == pytest.approx(1.0, abs=1e-7)
    assert alpha_from_acceptance_length(1.0, 4) == pytest.approx(0.0, abs=1e-7)
    assert alpha_from_acceptance_length(5.0, 4) == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize(
    ("rate", "k"),
    [(1.5, 4), (-0.1, 4), (1.0000001, 2), (math.nan, 4), (math.inf, 4), (0.5, 0), (0.5, -3)],
)
def test_alpha_from_marginal_rejects_out_of_range(rate: float, k: int):
    with pytest.raises(ValueError):
        alpha_from_marginal(rate, k)


@pytest.mark.parametrize(
    ("length", "k"),
    [(0.5, 4), (0.0, 4), (5.5, 4), (6.0, 4), (math.nan, 4), (math.inf, 4), (1.0, 0), (1.5, 0)],
)
def test_alpha_from_acceptance_length_rejects_out_of_range(length: float, k: int):
    # k = 0 included: every α gives length 1 there, so no α can be recovered from it
    with pytest.raises(ValueError):
        alpha_from_acceptance_length(length, k)


def test_alpha_from_acceptance_length_negative_k_is_value_error():
    with pytest.raises(ValueError):
        alpha_from_acceptance_length(1.0, -2)


@pytest.mark.parametrize("k", [0, -1])
def test_marginal_rate_rejects_k_below_one(k: int):
    with pytest.raises(ValueError):
        marginal_rate(0.7, k)


@pytest.mark.parametrize("func", [expected_emitted, marginal_rate], ids=lambda f: f.__name__)
@pytest.mark.parametrize("alpha", [-0.5, 1.5, math.nan])
def test_forward_conversions_reject_alpha_outside_unit_interval(func: Any, alpha: float):
    # α is a probability: α = −0.5 would give fewer than one emitted token per step (0.6875)
    with pytest.raises(ValueError):
        func(alpha, 4)


def test_expected_emitted_rejects_negative_k():
    with pytest.raises(ValueError):
        expected_emitted(0.7, -1)  # would be 0 tokens per step


def test_alpha_mle():
    # steps with k = 4: accepted 4 (no rejection), 2 (rejected), 0 (rejected) → 6 / (6 + 2)
    assert alpha_mle(6, 2) == pytest.approx(0.75)
    assert alpha_mle(0, 5) == 0.0
    assert alpha_mle(7, 0) == 1.0
    assert math.isnan(alpha_mle(0, 0))


def test_alpha_mle_recovers_alpha_from_simulated_steps():
    rng = np.random.default_rng(11)
    alpha, k, n = 0.65, 5, 20_000
    accepted = leading_successes(np.full((n, k), alpha), np.full(n, k), rng)
    rejections = int((accepted < k).sum())
    estimate = alpha_mle(int(accepted.sum()), rejections)
    # the MLE of a geometric-type likelihood: SE ≈ sqrt(α(1 − α) / trials)
    trials = int(accepted.sum()) + rejections
    assert abs(estimate - alpha) <= 4 * math.sqrt(alpha * (1 - alpha) / trials)


@pytest.mark.parametrize(("accepted", "rejections"), [(-1, 2), (2, -5)])
def test_alpha_mle_rejects_negative_counts(accepted: int, rejections: int):
    with pytest.raises(ValueError):
        alpha_mle(accepted, rejections)


# --------------------------------------------------------------------------- leading successes


def test_leading_successes_mean_matches_expected_accepted():
    rng = np.random.default_rng(2024)
    n, k, alpha = 40_000, 4, 0.7
    accepted = leading_successes(np.full((n, k), alpha), np.full(n, k), rng)
    pmf = accepted_pmf(alpha, k)
    values = np.arange(k + 1)
    std = math.sqrt(float((pmf * (values - expected_accepted(alpha, k)) ** 2).sum()))
    assert_mean_within(accepted, expected_accepted(alpha, k), std)
    # the whole distribution, not just the mean: each P(a = j) within 4 SE
    freq = np.bincount(accepted, minlength=k + 1) / n
    se = np.sqrt(pmf * (1 - pmf) / n)
    assert np.all(np.abs(freq - pmf) <= 4 * se), (freq, pmf)


def test_leading_successes_extremes_and_cap():
    rng = np.random.default_rng(5)
    ks = np.array([0, 1, 2, 3, 4, 4, 2, 0])
    ones = leading_successes(np.ones((len(ks), 4)), ks, rng)
    np.testing.assert_array_equal(ones, ks)
    zeros = leading_successes(np.zeros((len(ks), 4)), ks, rng)
    np.testing.assert_array_equal(zeros, np.zeros(len(ks)))
    for _ in range(20):
        mixed = leading_successes(rng.random((len(ks), 4)), ks, rng)
        assert mixed.dtype.kind == "i"
        assert np.all(mixed >= 0)
        assert np.all(mixed <= ks)


def test_leading_successes_stops_at_first_rejection():
    rng = np.random.default_rng(0)
    # position 1 always rejects: nothing after it counts, even though positions 2+ accept
    alphas = np.tile([1.0, 0.0, 1.0, 1.0], (50, 1))
    np.testing.assert_array_equal(leading_successes(alphas, np.full(50, 4), rng), 1)


def test_leading_successes_empty():
    rng = np.random.default_rng(0)
    assert len(leading_successes(np.zeros((0, 3)), np.zeros(0, dtype=np.int64), rng)) == 0
    np.testing.assert_array_equal(
        leading_successes(np.zeros((3, 0)), np.zeros(3, dtype=np.int64), rng), [0, 0, 0]
    )


# --------------------------------------------------------------------------- models


def test_make_acceptance_model_kinds():
    assert set(ACCEPTANCE_KINDS) == {"iid", "positional", "per_request", "trace", "token_level"}
    assert isinstance(make_acceptance_model(IidAcceptance(alpha=0.5)), IidModel)
    assert isinstance(
        make_acceptance_model(PositionalAcceptance(kind="positional")), PositionalModel
    )
    assert isinstance(
        make_acceptance_model(PerRequestAcceptance(kind="per_request")), PerRequestModel
    )
    trace = TraceAcceptance(kind="trace", path=str(EXAMPLE_TRACE))
    assert isinstance(make_acceptance_model(trace), TraceModel)
    level = TokenLevelAcceptance(kind="token_level", vocab_size=50, divergence=0.3)
    assert isinstance(make_acceptance_model(level), TokenLevelModel)


def test_iid_draw_statistics():
    model = IidModel(IidAcceptance(alpha=0.7))
    assert model.prior_alpha() == 0.7
    rng = np.random.default_rng(1)
    n, k = 30_000, 3
    reqs = requests(n)
    accepted = model.draw(reqs, np.full(n, 0.7), np.full(n, k), rng)
    assert np.all((accepted >= 0) & (accepted <= k))
    pmf = accepted_pmf(0.7, k)
    std = math.sqrt(float((pmf * (np.arange(k + 1) - expected_accepted(0.7, k)) ** 2).sum()))
    assert_mean_within(accepted, expected_accepted(0.7, k), std)


def test_iid_draw_respects_each_rows_k():
    model = IidModel(IidAcceptance(alpha=1.0))
    ks = np.array([1, 5, 2, 8, 3])
    accepted = model.draw(requests(len(ks)), np.ones(len(ks)), ks, np.random.default_rng(0))
    np.testing.assert_array_equal(accepted, ks)
    empty = model.draw([], np.zeros(0), np.zeros(0, dtype=np.int64), np.random.default_rng(0))
    assert len(empty) == 0


def test_positional_draw_statistics():
    model = PositionalModel(PositionalAcceptance(kind="positional", rates=[0.9, 0.5]))
    np.testing.assert_allclose(model.rates_for(4), [0.9, 0.5, 0.5, 0.5])  # last rate repeats
    rng = np.random.default_rng(7)
    n, k = 40_000, 2
    accepted = model.draw(requests(n), np.zeros(n), np.full(n, k), rng)
    first = accepted >= 1
    p_first = float(first.mean())
    assert abs(p_first - 0.9) <= 4 * math.sqrt(0.9 * 0.1 / n)
    given_first = accepted[first] >= 2
    p_second = float(given_first.mean())
    assert abs(p_second - 0.5) <= 4 * math.sqrt(0.25 / len(given_first))


def test_positional_uses_last_rate_beyond_its_list():
    model = PositionalModel(PositionalAcceptance(kind="positional", rates=[1.0, 0.0]))
    ks = np.array([1, 2, 5, 8])
    accepted = model.draw(requests(4), np.zeros(4), ks, np.random.default_rng(0))
    np.testing.assert_array_equal(accepted, [1, 1, 1, 1])


def test_per_request_start_draws_from_beta_with_the_mean():
    mean, concentration = 0.7, 10.0
    model = PerRequestModel(
        PerRequestAcceptance(kind="per_request", mean=mean, concentration=concentration)
    )
    assert model.prior_alpha() == mean
    rng = np.random.default_rng(3)
    req = Request(0, 0.0, 16, 100)
    draws = np.array([model.start(req, rng) for _ in range(20_000)])
    assert np.all((draws >= 0) & (draws <= 1))
    variance = mean * (1 - mean) / (concentration + 1)  # Beta(mean·c, (1 − mean)·c)
    assert_mean_within(draws, mean, math.sqrt(variance))
    assert float(draws.var()) == pytest.approx(variance, rel=0.05)


@settings(max_examples=60, deadline=None)
@given(
    mean=st.floats(0.0, 1.0, exclude_min=True, exclude_max=True)
    | st.sampled_from([5e-324, 1.0 - 2**-53]),
    concentration=st.floats(1e-3, 1e3),
    block=st.integers(1, 9),
    count=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_levels_drawn_by_the_block_are_the_scalar_draws(
    mean: float, concentration: float, block: int, count: int, seed: int
) -> None:
    """A replica's requests' levels drawn a block at a time are, one by one, what successive
    ``start`` calls draw from the same generator (the degenerate Beta parameters included)."""
    model = PerRequestModel(
        PerRequestAcceptance(kind="per_request", mean=mean, concentration=concentration)
    )
    req = Request(0, 0.0, 16, 100)
    scalar_rng = np.random.default_rng(seed)
    expected = [model.start(req, scalar_rng) for _ in range(count)]
    levels = BetaLevels(np.random.default_rng(seed), mean, concentration, block=block)
    assert [levels(req) for _ in range(count)] == expected
    by_model = model.levels(np.random.default_rng(seed))
    assert [by_model(req) for _ in range(count)] == expected


def test_positional_levels_match_start_with_and_without_variation():
    req = Request(0, 0.0, 16, 100)
    for concentration in (None, 6.0):
        model = PositionalModel(
            PositionalAcceptance(kind="positional", rates=[0.8, 0.6], concentration=concentration)
        )
        scalar_rng = np.random.default_rng(2)
        expected = [model.start(req, scalar_rng) for _ in range(70)]
        levels = model.levels(np.random.default_rng(2))
        assert [levels(req) for _ in range(70)] == expected


def test_per_request_draw_uses_each_requests_alpha():
    model = PerRequestModel(PerRequestAcceptance(kind="per_request", mean=0.5))
    rng = np.random.default_rng(4)
    n, k = 20_000, 4
    alphas = np.where(np.arange(n) % 2 == 0, 0.9, 0.2)
    accepted = model.draw(requests(n), alphas, np.full(n, k), rng)
    high, low = accepted[0::2], accepted[1::2]
    for alpha, sample in ((0.9, high), (0.2, low)):
        pmf = accepted_pmf(alpha, k)
        std = math.sqrt(float((pmf * (np.arange(k + 1) - expected_accepted(alpha, k)) ** 2).sum()))
        assert_mean_within(sample, expected_accepted(alpha, k), std)


def test_per_request_drift_moves_alpha_with_generated_tokens():
    # α 0.9 drifting −1 per 1k tokens: after 1000 generated tokens it is clamped to 0
    model = PerRequestModel(
        PerRequestAcceptance(kind="per_request", mean=0.5, drift_per_1k_tokens=-1.0)
    )
    rng = np.random.default_rng(0)
    late = model.draw(requests(50, generated=1000), np.full(50, 0.9), np.full(50, 4), rng)
    np.testing.assert_array_equal(late, 0)
    # +1 per 1k from α 0.2 at 1000 tokens: clamped to 1, everything accepted
    rising = PerRequestModel(
        PerRequestAcceptance(kind="per_request", mean=0.5, drift_per_1k_tokens=1.0)
    )
    full = rising.draw(requests(50, generated=1000), np.full(50, 0.2), np.full(50, 4), rng)
    np.testing.assert_array_equal(full, 4)


def hand_trace() -> AcceptanceTrace:
    return AcceptanceTrace(
        request_ids=["a", "b", "c"],
        prompt_len=np.array([10, 20, 30]),
        output_len=np.array([5, 4, 6]),
        acc_len=[
            np.array([1, 3, 1, 2, 1]),
            np.array([4, 1, 2, 1]),
            np.array([6, 5, 4, 3, 2, 1]),
        ],
    )


def expected_trace_accepted(trace: AcceptanceTrace, request_id: int, pos: int, k: int) -> int:
    row = trace.acc_len[request_id % len(trace.acc_len)]
    return min(int(row[pos]), k + 1) - 1


def test_trace_draw_replays_acceptance_lengths():
    trace = hand_trace()
    model = TraceModel(TraceAcceptance(kind="trace", path="unused.csv"), trace)
    rng = np.random.default_rng(0)
    for rid in range(7):  # ids beyond the trace cycle through its rows
        output = int(trace.output_len[rid % 3])
        for pos in range(output):
            for k in range(1, 8):
                req = Request(rid, 0.0, 10, output)
                req.generated = pos
                got = model.draw([req], np.zeros(1), np.array([k]), rng)
                assert got.tolist() == [expected_trace_accepted(trace, rid, pos, k)], (rid, pos, k)


def test_trace_draw_batch_of_mixed_requests():
    trace = hand_trace()
    model = TraceModel(TraceAcceptance(kind="trace", path="unused.csv"), trace)
    reqs = [Request(0, 0.0, 10, 5), Request(2, 0.0, 30, 6), Request(4, 0.0, 20, 4)]
    for req, pos in zip(reqs, (1, 0, 0), strict=True):
        req.generated = pos
    ks = np.array([4, 2, 8])
    got = model.draw(reqs, np.zeros(3), ks, np.random.default_rng(0))
    # row 0 pos 1: min(3, 5) - 1; row 2 pos 0: min(6, 3) - 1; row 1 pos 0: min(4, 9) - 1
    assert got.tolist() == [2, 2, 3]


def test_trace_mean_alpha_is_geometric_mle():
    trace = hand_trace()
    lengths = np.concatenate(trace.acc_len)
    assert trace.mean_alpha == pytest.approx((lengths - 1).sum() / lengths.sum())
    model = TraceModel(TraceAcceptance(kind="trace", path="unused.csv"), trace)
    assert model.prior_alpha() == trace.mean_alpha


def write_trace(
    path: Path, rows: list[tuple[str, int, int, str]], header: str | None = None
) -> Path:
    lines = [header or "request_id,prompt_len,output_len,acc_len"]
    lines += [f"{rid},{p},{o},{acc}" for rid, p, o, acc in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_trace_csv_loads_and_replays(tmp_path: Path):
    path = write_trace(
        tmp_path / "acc.csv",
        [("a", 10, 5, "1 3 1 2 1"), ("b", 20, 4, "4 1 2 1"), ("c", 30, 6, "6 5 4 3 2 1 9")],
    )
    trace = load_acceptance_trace(path)
    assert trace.request_ids == ["a", "b", "c"]
    assert trace.prompt_len.tolist() == [10, 20, 30]
    assert trace.output_len.tolist() == [5, 4, 6]
    assert [a.tolist() for a in trace.acc_len] == [
        [1, 3, 1, 2, 1],
        [4, 1, 2, 1],
        [6, 5, 4, 3, 2, 1, 9],  # extra positions beyond output_len are allowed
    ]
    # mean α counts only the first output_len positions of each row
    assert trace.mean_alpha == pytest.approx(hand_trace().mean_alpha)
    model = make_acceptance_model(TraceAcceptance(kind="trace", path=str(path)))
    rng = np.random.default_rng(0)
    for rid in range(6):
        output = int(trace.output_len[rid % 3])
        for pos in range(output):
            req = Request(rid, 0.0, 10, output)
            req.generated = pos
            got = model.draw([req], np.zeros(1), np.array([3]), rng)
            assert got.tolist() == [expected_trace_accepted(trace, rid, pos, 3)]


def test_token_level_acceptance_matches_expected_acceptance():
    vocab, divergence = 50, 0.3
    model = TokenLevelModel(
        TokenLevelAcceptance(kind="token_level", vocab_size=vocab, divergence=divergence)
    )
    alpha = expected_acceptance(divergence, vocab, samples=20_000, seed=123)
    assert 0.3 < alpha < 0.95
    assert model.prior_alpha() == pytest.approx(alpha, abs=0.05)
    rng = np.random.default_rng(9)
    n = 6000
    one = model.draw(requests(n), np.zeros(n), np.ones(n, dtype=np.int64), rng)
    assert set(np.unique(one)) <= {0, 1}
    # each position is a fresh (p, q) pair, so accept/reject is Bernoulli(E[1 − TV]) = α
    se = math.sqrt(alpha * (1 - alpha) / n + alpha * (1 - alpha) / 20_000)
    assert abs(float(one.mean()) - alpha) <= 4 * se
    # and positions are independent: leading successes of i.i.d. Bernoulli(α)
    k = 3
    three = model.draw(requests(n), np.zeros(n), np.full(n, k), rng)
    assert np.all((three >= 0) & (three <= k))
    pmf = accepted_pmf(alpha, k)
    std = math.sqrt(float((pmf * (np.arange(k + 1) - expected_accepted(alpha, k)) ** 2).sum()))
    assert abs(float(three.mean()) - expected_accepted(alpha, k)) <= 4 * std / math.sqrt(n) + 0.02


def test_token_level_mixed_ks_and_zero_divergence():
    model = TokenLevelModel(TokenLevelAcceptance(kind="token_level", vocab_size=50, divergence=0))
    ks = np.array([1, 4, 2, 4, 7, 1])
    accepted = model.draw(requests(len(ks)), np.zeros(len(ks)), ks, np.random.default_rng(2))
    np.testing.assert_array_equal(accepted, ks)  # q == p: every draft is accepted


# --------------------------------------------------------------------------- trace errors


def spec_scenario(path: Path | str, **extra: Any) -> dict[str, Any]:
    data = small_scenario(
        speculative={"enabled": True, "acceptance": {"kind": "trace", "path": str(path)}}, **extra
    )
    del data["workload"]["prompt_tokens"]
    del data["workload"]["output_tokens"]
    return data


BAD_TRACES: dict[str, tuple[str, int | None, str]] = {
    # name: (csv text, line number of the problem or None, a word the message must contain)
    "missing_column": (
        "request_id,prompt_len,output_len\nr0,10,3\n",
        None,
        "acc_len",
    ),
    "non_integer_entry": (
        "request_id,prompt_len,output_len,acc_len\nr0,10,3,1 2 3\nr1,10,3,1 x 3\n",
        3,
        "integer",
    ),
    "zero_entry": (
        "request_id,prompt_len,output_len,acc_len\nr0,10,3,1 2 3\nr1,10,3,1 2 3\nr2,10,3,2 0 1\n",
        4,
        ">= 1",
    ),
    "too_few_positions": (
        "request_id,prompt_len,output_len,acc_len\nr0,10,4,1 2\n",
        2,
        "fewer than output_len",
    ),
}


def check_trace_error(err: CbsimError, csv_path: str, line: int | None, word: str) -> None:
    text = str(err)
    assert csv_path in text, text
    assert FIELD in text, text
    assert word in text, text
    if line is not None:
        assert f"line {line}" in text, text
    assert "Traceback" not in text


@pytest.mark.parametrize("name", sorted(BAD_TRACES))
def test_bad_trace_via_loader(tmp_path: Path, name: str):
    text, line, word = BAD_TRACES[name]
    path = tmp_path / f"{name}.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CbsimError) as info:
        load_acceptance_trace(path)
    check_trace_error(info.value, str(path), line, word)


@pytest.mark.parametrize("name", sorted(BAD_TRACES))
def test_bad_trace_via_load_scenario_dict(tmp_path: Path, name: str):
    text, line, word = BAD_TRACES[name]
    path = tmp_path / f"{name}.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CbsimError) as info:
        cbsim.load_scenario(spec_scenario(path))
    check_trace_error(info.value, str(path), line, word)


@pytest.mark.parametrize("name", sorted(BAD_TRACES))
def test_bad_trace_via_load_scenario_file(tmp_path: Path, name: str):
    text, line, word = BAD_TRACES[name]
    path = tmp_path / f"{name}.csv"
    path.write_text(text, encoding="utf-8")
    yaml_path = tmp_path / "scenario.yaml"
    yaml_path.write_text(yaml.safe_dump(spec_scenario(path)), encoding="utf-8")
    with pytest.raises(CbsimError) as info:
        cbsim.load_scenario(yaml_path)
    check_trace_error(info.value, str(path), line, word)
    assert str(info.value).startswith(str(yaml_path)), str(info.value)


def test_missing_trace_file(tmp_path: Path):
    path = tmp_path / "does-not-exist.csv"
    with pytest.raises(CbsimError) as info:
        load_acceptance_trace(path)
    check_trace_error(info.value, str(path), None, "not found")
    with pytest.raises(CbsimError) as info:
        cbsim.load_scenario(spec_scenario(path))
    check_trace_error(info.value, str(path), None, "not found")
    yaml_path = tmp_path / "scenario.yaml"
    yaml_path.write_text(yaml.safe_dump(spec_scenario(path)), encoding="utf-8")
    with pytest.raises(CbsimError) as info:
        cbsim.load_scenario(yaml_path)
    check_trace_error(info.value, str(path), None, "not found")


def test_relative_trace_path_resolves_next_to_the_scenario(tmp_path: Path):
    write_trace(tmp_path / "acc.csv", [("a", 10, 3, "1 2 1")])
    yaml_path = tmp_path / "scenario.yaml"
    yaml_path.write_text(yaml.safe_dump(spec_scenario("acc.csv")), encoding="utf-8")
    scenario = cbsim.load_scenario(yaml_path)
    assert Path(scenario.speculative.acceptance.path) == tmp_path / "acc.csv"


def test_trace_not_checked_when_speculation_disabled(tmp_path: Path):
    data = small_scenario(
        speculative={
            "enabled": False,
            "acceptance": {"kind": "trace", "path": str(tmp_path / "nope.csv")},
        }
    )
    cbsim.load_scenario(data)  # lengths come from the workload; the trace is not used


def test_shipped_example_trace_loads():
    trace = load_acceptance_trace(EXAMPLE_TRACE)
    assert len(trace.request_ids) == 60
    assert len(set(trace.request_ids)) == 60
    assert len(trace.prompt_len) == len(trace.output_len) == len(trace.acc_len) == 60
    for row, output in zip(trace.acc_len, trace.output_len, strict=True):
        assert len(row) >= output
        assert row.min() >= 1
    assert 0.0 < trace.mean_alpha < 1.0


# --------------------------------------------------------------------------- lengths from a trace


def test_acceptance_trace_supplies_lengths(tmp_path: Path):
    rows = [("a", 11, 5, "1 3 1 2 1"), ("b", 22, 4, "4 1 2 1"), ("c", 33, 6, "6 5 4 3 2 1")]
    path = write_trace(tmp_path / "acc.csv", rows)
    data = spec_scenario(path, workload__num_requests=8)
    assert "prompt_tokens" not in data["workload"]
    assert "output_tokens" not in data["workload"]
    scenario = cbsim.load_scenario(data)
    specs = build_workload(scenario)
    assert specs.prompt_tokens.tolist() == [rows[i % 3][1] for i in range(8)]
    assert specs.output_tokens.tolist() == [rows[i % 3][2] for i in range(8)]
    results = cbsim.simulate(scenario)
    req = results.requests
    assert req["prompt_tokens"].tolist() == [rows[i % 3][1] for i in range(8)]
    assert req["output_tokens"].tolist() == [rows[i % 3][2] for i in range(8)]
    assert (req["status"] == "finished").all()


def test_acceptance_trace_lengths_override_workload_lengths(tmp_path: Path):
    path = write_trace(tmp_path / "acc.csv", [("a", 11, 5, "1 3 1 2 1"), ("b", 22, 4, "4 1 2 1")])
    data = small_scenario(
        workload__num_requests=5,
        speculative={"enabled": True, "acceptance": {"kind": "trace", "path": str(path)}},
    )
    specs = build_workload(cbsim.load_scenario(data))
    assert specs.prompt_tokens.tolist() == [11, 22, 11, 22, 11]
    assert specs.output_tokens.tolist() == [5, 4, 5, 4, 5]


def test_without_trace_lengths_are_required():
    data = small_scenario(speculative={"enabled": True, "acceptance": {"kind": "iid"}})
    del data["workload"]["output_tokens"]
    with pytest.raises(CbsimError) as info:
        cbsim.load_scenario(data)
    assert "workload.output_tokens" in str(info.value)


def replay(acc: np.ndarray, output: int, k_fixed: int) -> tuple[int, int, int]:
    """(spec steps, drafted, accepted) a request replays under a fixed k with no KV shortage: the
    prefill samples position 0; a step at position g drafts min(k, remaining − 1) tokens."""
    generated, steps, drafted, accepted = 1, 0, 0, 0
    while generated < output:
        k = min(k_fixed, output - generated - 1)
        if k == 0:
            generated += 1
            continue
        emitted = min(int(acc[generated]), k + 1)
        steps += 1
        drafted += k
        accepted += emitted - 1
        generated += emitted
    return steps, drafted, accepted


@pytest.mark.parametrize("k", [1, 3, 8])
def test_simulation_replays_the_trace_exactly(k: int):
    data = small_scenario(
        workload__num_requests=90,
        speculative={
            "enabled": True,
            "acceptance": {"kind": "trace", "path": str(EXAMPLE_TRACE)},
            "policy": {"kind": "fixed", "k": k},
        },
    )
    results = cbsim.simulate(cbsim.load_scenario(data))
    trace = load_acceptance_trace(EXAMPLE_TRACE)
    req = results.requests
    assert (req["status"] == "finished").all()
    assert int(req["preemptions"].sum()) == 0
    for row in req.itertuples():
        j = row.request_id % 60
        assert row.prompt_tokens == trace.prompt_len[j]
        assert row.output_tokens == trace.output_len[j]
        steps, drafted, accepted = replay(trace.acc_len[j], int(trace.output_len[j]), k)
        assert (row.spec_steps, row.drafted_tokens, row.accepted_tokens) == (
            steps,
            drafted,
            accepted,
        ), row.request_id
