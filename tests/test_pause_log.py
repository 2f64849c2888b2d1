"""The pause log (cbsim.engine.pause_log): logging a group of pauses in one call writes the pairs
that logging them one by one writes, as a multiset (the ITL reads them in any order)."""

from __future__ import annotations

from array import array

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from cbsim.engine.pause_log import log_own_pauses, log_pauses, log_shared_pause
from cbsim.outputs.itl import inter_token_latency
from cbsim.workload.request import Request


def _pairs(log: array[int]) -> list[tuple[int, int]]:
    return sorted(zip(log[0::2], log[1::2], strict=True))


@given(
    row=st.integers(0, 2**31 - 1),
    previous=st.lists(st.integers(0, 2**31 - 1), max_size=40),
    before=st.lists(st.integers(0, 1000), max_size=6).filter(lambda x: len(x) % 2 == 0),
)
def test_log_pauses_appends_one_pair_per_row(
    row: int, previous: list[int], before: list[int]
) -> None:
    log = array("i", before)
    one_by_one = array("i", before)
    for last in previous:
        one_by_one.extend((row, last))
    log_pauses(log, row, np.array(previous, dtype=np.int64))
    assert log.tolist() == one_by_one.tolist()  # in order, whichever way it was written


@given(row=st.integers(0, 10**6), previous=st.integers(0, 10**6), count=st.integers(0, 50))
def test_a_shared_pause_is_count_copies_of_its_pair(row: int, previous: int, count: int) -> None:
    log = array("i", [7, 3])
    log_shared_pause(log, row, previous, count)
    assert log.tolist() == [7, 3] + [row, previous] * count


def test_the_latency_does_not_depend_on_the_order_pauses_were_logged() -> None:
    rng = np.random.default_rng(5)
    rows = 200
    delivered = np.cumsum(rng.uniform(0.001, 0.05, rows))
    gap_tokens = rng.integers(0, 4, rows).astype(np.int32)
    pairs = [(int(r), int(rng.integers(0, r))) for r in rng.integers(1, rows, 300)]
    shuffled = [pairs[i] for i in rng.permutation(len(pairs))]
    logs = [array("i", [x for pair in order for x in pair]) for order in (pairs, shuffled)]
    first = inter_token_latency(delivered, None, gap_tokens.copy(), [logs[0]], 3)
    second = inter_token_latency(delivered, None, gap_tokens.copy(), [logs[1]], 3)
    assert first == second
    assert first["itl_mean_s"] > 0


def test_own_pauses_are_the_requests_whose_last_token_was_not_in_the_previous_row() -> None:
    requests = [Request(i, 0.0, 4, 4) for i in range(5)]
    for req, last in zip(requests, [9, 3, 9, 7, -1], strict=True):
        req.last_row = last
    log = array("i")
    assert log_own_pauses(log, 10, 9, requests) == 3
    assert _pairs(log) == [(10, -1), (10, 3), (10, 7)]
    assert log_own_pauses(log, 11, 9, []) == 0
