"""Inter-token latency: every output token's gap to the previous token of its request, as the client
receives it, and the percentiles over them.

The gaps are computed exactly from the iterations: tokens of consecutive steps are one step apart,
a token after a pause (preemption, a budget that left the request out) has the whole pause, and
drafts accepted together in one speculative step arrive with gap 0. A run has about as many gaps
as output tokens, so they are never listed one by one: a row of the iterations stands for the
tokens it gave one step after their previous one (a gap with a count), a pause for one token, and
percentiles are taken over those weighted entries (:func:`weighted_percentile`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator

import numpy as np

from cbsim.outputs.metric_columns import CHUNK_ROWS, PERCENTILES


def weighted_percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(values, counts), q)`` (linear interpolation) without repeating."""
    keep = counts > 0
    values, counts = values[keep], counts[keep]
    order = np.argsort(values, kind="stable")
    return _sorted_percentile(values[order], np.cumsum(counts[order]), q)


def _sorted_percentile(values: np.ndarray, cumulative: np.ndarray, q: float) -> float:
    """:func:`weighted_percentile` of ``values`` sorted ascending, given the running sum of their
    counts (values with count zero may be among them: they are never picked)."""
    total = int(cumulative[-1]) if len(cumulative) else 0
    if total == 0:
        return math.nan
    position = q / 100.0 * (total - 1)
    low = math.floor(position)
    high = min(low + 1, total - 1)
    value_low = float(values[np.searchsorted(cumulative, low, side="right")])
    value_high = float(values[np.searchsorted(cumulative, high, side="right")])
    return value_low + (value_high - value_low) * (position - low)


def _merged_percentiles(
    values: np.ndarray, counts: np.ndarray, pauses: np.ndarray, total: int
) -> dict[str, float]:
    """The ITL percentiles over two sorted groups of gaps: ``values`` with ``counts`` tokens each,
    and ``pauses`` with one token each (``total`` tokens in all). The gap at a rank is the same
    whatever the order of equal gaps, so the groups need no merging."""
    cumulative = np.cumsum(counts, dtype=np.int64)

    def tokens_up_to(gap: float) -> int:
        """Tokens with a gap of at most ``gap``."""
        i = int(np.searchsorted(values, gap, side="right"))
        in_pauses = int(np.searchsorted(pauses, gap, side="right"))
        return (int(cumulative[i - 1]) if i else 0) + in_pauses

    def gap_of(rank: int) -> float:
        """The ``rank``-th smallest gap over every token (from 0)."""
        best = math.inf
        for group in (values, pauses):  # each group's first gap with more tokens up to it
            lo, hi = 0, len(group)
            while lo < hi:
                mid = (lo + hi) // 2
                if tokens_up_to(float(group[mid])) > rank:
                    hi = mid
                else:
                    lo = mid + 1
            if lo < len(group):
                best = min(best, float(group[lo]))
        return best

    out: dict[str, float] = {}
    for p in PERCENTILES:  # as weighted_percentile does it
        if total == 0:
            out[f"itl_p{p}_s"] = math.nan
            continue
        position = p / 100.0 * (total - 1)
        low = math.floor(position)
        value_low, value_high = gap_of(low), gap_of(min(low + 1, total - 1))
        out[f"itl_p{p}_s"] = value_low + (value_high - value_low) * (position - low)
    return out


def _row_entries(
    replica: np.ndarray | None, gap_tokens: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Chunks of (rows with tokens one step after their previous token, the row before each on
    its replica); ``replica`` None: every row on one replica."""
    if replica is None:
        for start in range(1, len(gap_tokens), CHUNK_ROWS):
            rows = start + np.flatnonzero(gap_tokens[start : start + CHUNK_ROWS] > 0)
            yield rows, rows - 1
        return
    for index in np.flatnonzero(np.bincount(replica)):
        on_replica = np.flatnonzero(replica == index)
        for start in range(1, len(on_replica), CHUNK_ROWS):
            rows = on_replica[start : start + CHUNK_ROWS]
            keep = gap_tokens[rows] > 0
            yield rows[keep], on_replica[start - 1 : start - 1 + len(rows)][keep]


def inter_token_latency(
    delivered: np.ndarray,
    replica: np.ndarray | None,
    gap_tokens: np.ndarray,
    gap_pairs: list[array[int]],
    zero_gaps: int,
) -> dict[str, float]:
    """Percentiles and mean of every output token's gap to its request's previous token.

    ``delivered``, ``replica`` and ``gap_tokens`` are per iteration row (in recording order;
    ``replica`` None: every row on one replica): ``gap_tokens`` tokens of a row came one step
    after their previous token, so their gap is the time between this row's delivery and the
    previous row of the same replica. ``gap_pairs`` are the schedulers' logs of flat (row, row of
    the previous token) pairs, one pair per token after a pause; they are emptied as they are
    read, so that they can be freed. ``zero_gaps`` tokens arrived together with the one before
    them.

    Every gap is a (gap, tokens) entry; the mean sums gap × tokens over the entries sorted by gap,
    then tokens, which makes it independent of the logging order. There are about as many
    entries as rows and pauses together, so they are kept in two sorted groups: the rows' (and
    the zero gaps'), lexsorted, and the pauses' (one token each), sorted in place at the end of
    the array that the merged products are then written into, front to back."""
    head = sum(len(rows) for rows, _ in _row_entries(replica, gap_tokens)) + 1
    pause_count = sum(len(log) for log in gap_pairs) // 2
    merged = np.empty(head + pause_count)
    # the pauses' gaps at the end of ``merged``, each log freed from its end as it is read
    at = len(merged)
    while gap_pairs:
        log = gap_pairs.pop()
        while len(log):
            cut = max(0, len(log) - 2 * CHUNK_ROWS)
            pairs = np.frombuffer(log, dtype=log.typecode, offset=log.itemsize * cut)
            pairs = pairs.reshape(-1, 2)
            np.subtract(
                delivered[pairs[:, 0]], delivered[pairs[:, 1]], out=merged[at - len(pairs) : at]
            )
            at -= len(pairs)
            del pairs
            del log[cut:]
    pauses = merged[head:]
    pauses.sort()
    # the rows' entries and the zero gaps', sorted by gap, then tokens
    top = max(int(gap_tokens.max()) if len(gap_tokens) else 0, zero_gaps)
    values = np.empty(head)
    counts: np.ndarray = np.empty(head, dtype=np.int16 if top < 2**15 else np.int64)
    at = 0
    for rows, previous in _row_entries(replica, gap_tokens):
        end = at + len(rows)
        np.subtract(delivered[rows], delivered[previous], out=values[at:end])
        counts[at:end] = gap_tokens[rows]
        at = end
    values[at] = 0.0
    counts[at] = zero_gaps
    order = np.lexsort((counts, values))
    counts = counts[order]
    in_order = order.view(np.float64)  # the sorted gaps, into the order's own memory
    for start in range(0, head, CHUNK_ROWS):
        chunk = slice(start, start + CHUNK_ROWS)
        in_order[chunk] = values[order[chunk]]  # this chunk's indices are read first
    values = in_order
    del order, in_order
    total = int(counts.sum(dtype=np.int64)) + pause_count
    out = _merged_percentiles(values, counts, pauses, total)
    # merge front to back: a pause's (gap, 1) goes before the rows' entries of the same gap, which
    # have a token or more (a tie with one token is the same product; the zero gaps' entry may
    # have none, but a gap of 0 makes 0 whatever the tokens). An entry lands at or before the
    # place of the first pause still unmerged, which is never overwritten before it is read.
    placed = 0  # pauses merged so far
    for start in range(0, head, CHUNK_ROWS):
        gaps = values[start : start + CHUNK_ROWS]
        before = placed + np.searchsorted(pauses[placed:], gaps, side="right")
        upto = int(before[-1])
        for first in range(placed, upto, CHUNK_ROWS):
            moving = pauses[first : min(first + CHUNK_ROWS, upto)].copy()
            rank = np.arange(first, first + len(moving))
            merged[rank + np.searchsorted(values, moving, side="left")] = moving * 1
        placed = upto
        rank = np.arange(start, start + len(gaps))
        merged[rank + before] = gaps * counts[start : start + len(gaps)]
    # the pauses after every entry are in their place already
    out["itl_mean_s"] = float(merged.sum() / total) if total else math.nan
    return out
