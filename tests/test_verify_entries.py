"""Verify entries added to a batch's stats grouped by k (``add_verify_entries``): the same stats,
bit for bit, as adding each entry in order, over a prefill chunk's stats or none."""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cbsim.cost.batch_stats import BatchStats
from cbsim.engine.speculative.decoder import add_verify_entries


@settings(max_examples=200, deadline=None)
@given(
    ks=st.lists(st.integers(0, 70), min_size=1, max_size=300),
    seed=st.integers(0, 2**32 - 1),
    prefill=st.lists(st.tuples(st.integers(1, 8192), st.integers(0, 200_000)), max_size=3),
)
def test_grouped_verify_entries_are_the_entries_one_by_one(
    ks: list[int], seed: int, prefill: list[tuple[int, int]]
) -> None:
    contexts = np.random.default_rng(seed).integers(0, 1_000_000, len(ks))
    base = BatchStats()
    for q, c in prefill:
        base.add(q, c, 1)
    one_by_one = copy.copy(base)
    queries = [k + 1 for k in ks]
    one_by_one.add_entries(queries, contexts.tolist(), queries)
    grouped = copy.copy(base)
    add_verify_entries(grouped, np.asarray(ks, dtype=np.int64), contexts)
    assert grouped == one_by_one
    assert grouped.decode_pairs.hex() == one_by_one.decode_pairs.hex()
    assert grouped.prefill_pairs.hex() == one_by_one.prefill_pairs.hex()
