"""The pause log: one (row, row of the previous token) pair per token that came after a pause.

A token a request emits in the iteration right after its previous one has that iteration's gap,
and only a count of them is kept; a token after a pause (its request preempted, left out by a
token budget, or waiting while a prompt ran alone) is logged in its scheduler's ``gap_pairs``, a
flat ``array("i")`` of (this iteration's row, the row of its previous token) pairs that the
inter-token latency reads at the end (:mod:`cbsim.outputs.itl`). The latency sorts the pairs'
gaps before it reads them, so the order they were logged in does not matter, and a group of
requests is logged in one call: the members of a decode cohort that all decoded last in one row
get copies of one pair, and the rows compiled code hands back are written as one block of
memory.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from cbsim.workload.request import Request

__all__ = ["log_own_pauses", "log_pauses", "log_shared_pause"]

# pauses from which building the pairs in numpy beats appending them one by one (measured:
# about 1.2 us either way at 12, appending 0.8 us at 8 and 1.6 us at 16)
_BLOCK_FROM = 12


def log_shared_pause(log: array[int], row: int, previous: int, count: int) -> None:
    """Log ``count`` tokens in ``row`` whose previous token came in row ``previous``."""
    if count > 0:
        log.extend(array(log.typecode, (row, previous)) * count)


def log_pauses(log: array[int], row: int, previous: npt.NDArray[np.int64]) -> None:
    """Log a token in ``row`` for each row of ``previous`` its request's previous token came in."""
    count = len(previous)
    if count < _BLOCK_FROM:
        for last in previous.tolist():
            log.append(row)
            log.append(last)
        return
    pairs = np.empty((count, 2), dtype=np.dtype(log.typecode))
    pairs[:, 0] = row
    pairs[:, 1] = previous
    log.frombytes(pairs.tobytes())


def log_own_pauses(log: array[int], row: int, prev_row: int, requests: Iterable[Request]) -> int:
    """Log a token in ``row`` for each of ``requests`` whose previous token did not come in
    ``prev_row`` (the replica's previous row); returns how many."""
    paused = 0
    for req in requests:
        if req.last_row != prev_row:
            log.append(row)
            log.append(req.last_row)
            paused += 1
    return paused
