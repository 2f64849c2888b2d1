"""Per-request speculative figures held as slot arrays: the same floats as one request at a time."""

from __future__ import annotations

import math

import numpy as np

from cbsim.engine.scheduler.base import SchedulerPolicy
from cbsim.engine.speculative.decoder import PRIOR_STRENGTH
from cbsim.engine.speculative.draft_reservation import UNBUDGETED, reserve_drafts
from cbsim.engine.speculative.policy_base import AlphaEstimator
from cbsim.engine.speculative.slots import EMA_WEIGHT, SpecSlots
from cbsim.memory.kvcache import KVCache


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


class _Request:
    def __init__(self, kv_tokens: int, blocks: int) -> None:
        self.kv_tokens = kv_tokens
        self.blocks = blocks


class _Scheduler:
    """What reserve_drafts uses of a scheduler: its KV cache and _try_grow."""

    def __init__(self, total_blocks: int, used_blocks: int, cached_blocks: int) -> None:
        self.kv = KVCache(total_blocks=total_blocks, block_size=16)
        self.kv.used_blocks = used_blocks
        self.kv.cached_blocks = cached_blocks
        self.kv.evict = self._evict

    def _evict(self, blocks: int) -> None:
        self.kv.cached_blocks -= blocks

    _try_grow = SchedulerPolicy._try_grow


def _one_by_one(sched: _Scheduler, reqs: list[_Request], ks: list[int], spare: int) -> list[int]:
    kept = []
    for req, k in zip(reqs, ks, strict=True):
        k = min(k, spare)
        if k > 0 and -(-(req.kv_tokens + k + 1) // 16) > req.blocks:
            while k > 0 and not sched._try_grow(req, k + 1):  # type: ignore[arg-type]
                k -= 1
        kept.append(k)
        spare -= k
    return kept


def test_reserve_drafts_is_the_one_by_one_reservation() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(rng.integers(1, 80))  # below and from GROUPED_ENTRIES
        contexts = rng.integers(0, 200, n)
        held = [-(-(c + 1) // 16) for c in contexts.tolist()]
        ks = rng.integers(0, 7, n)
        spare = int(rng.integers(0, 120)) if rng.random() < 0.7 else UNBUDGETED
        used, cached = sum(held), int(rng.integers(0, 10))
        total = used + cached + int(rng.integers(0, 40))  # short of blocks now and then
        runs = []
        for fast in (True, False):
            sched = _Scheduler(total, used, cached)
            reqs = [_Request(c, b) for c, b in zip(contexts.tolist(), held, strict=True)]
            if fast:
                kept = reserve_drafts(sched, reqs, ks, contexts, spare)  # type: ignore[arg-type]
            else:
                kept = _one_by_one(sched, reqs, ks.tolist(), spare)
            runs.append(
                (kept, [r.blocks for r in reqs], sched.kv.used_blocks, sched.kv.cached_blocks)
            )
        assert runs[0] == runs[1]
