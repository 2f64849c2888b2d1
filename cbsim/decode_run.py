"""Decode runs: advancing a replica through many pure-decode iterations in one SimPy event.

Between two things that can change a scheduler's decision — a request arriving, a finish while
requests wait, the KV cache running out of free blocks, the horizon — a replica whose running
requests are all decoding does the same thing every iteration: each running request feeds one
token and samples one, and the batch shrinks as requests reach their output length. Such a run is
fully determined by each request's cached tokens, remaining outputs and KV blocks, so it can be
computed in one go: iteration by iteration the batch size, the keys and values attention reads
and the cost model's duration, the blocks allocated at each block boundary and freed at each
finish. The engine then waits once for the whole run and applies it.

The result is *identical* to stepping the iterations one by one (same durations bit for bit,
same rows in the iterations table, same request times): the run stops at the first iteration
that ends at or after the next arrival, after the first finish when requests are waiting, before
an iteration that would need more KV blocks than are free (the step-by-step path then preempts)
and before an iteration that would end at or after the horizon.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cbsim.cost import CostModel
from cbsim.request import Request

MAX_RUN_ITERATIONS = 8192


@dataclass(slots=True)
class DecodeRun:
    """A planned run of ``len(durations)`` pure-decode iterations starting at ``starts[0]``."""

    starts: list[float]
    durations: list[float]
    batch_sizes: list[int]
    kv_used: list[int]
    end_s: float
    kv_used_after: int
    # running requests whose previous token came before the replica's previous iteration (set
    # when the run is applied; their first token in the run has a gap of its own)
    paused_at_start: int = 0

    @property
    def iterations(self) -> int:
        return len(self.durations)


def plan_decode_run(
    running: Sequence[Request],
    *,
    cost: CostModel,
    start_s: float,
    block_size: int,
    used_blocks: int,
    total_blocks: int,
    grows_kv: bool,
    stop_on_finish: bool,
    next_arrival_s: float,
    horizon_s: float,
) -> DecodeRun | None:
    """Plan the run starting now, or None when not even one iteration can be planned."""
    count = len(running)
    kv = np.fromiter((r.kv_tokens for r in running), dtype=np.int64, count=count)
    rem = np.fromiter((r.output_tokens - r.generated for r in running), dtype=np.int64, count=count)
    blocks = np.fromiter((r.blocks for r in running), dtype=np.int64, count=count)
    order = np.argsort(rem, kind="stable")
    rem_sorted = rem[order].tolist()
    kv_sorted = kv[order]
    # kv_suffix[i] = Σ kv of the requests from sorted position i on (the ones still active)
    kv_suffix = np.concatenate([np.cumsum(kv_sorted[::-1])[::-1], [0]]).tolist()
    if grows_kv:
        phase = blocks * block_size - kv  # iteration index of each request's next new block
        if count and (phase.min() < 0 or phase.max() >= block_size):
            return None
        phase_sorted = phase[order].tolist()
        phase_counts = np.bincount(phase, minlength=block_size).tolist()
        final_blocks = np.maximum(blocks, -(-(kv + rem) // block_size))[order].tolist()
    else:
        phase_sorted = []
        phase_counts = []
        final_blocks = blocks[order].tolist()

    free = total_blocks - used_blocks
    used = used_blocks
    starts: list[float] = []
    durations: list[float] = []
    batch_sizes: list[int] = []
    kv_used: list[int] = []
    decode_time = cost.decode_time
    now = start_s
    finished = 0  # sorted positions below this have finished
    j = 0
    while j < MAX_RUN_ITERATIONS:
        active = count - finished
        if active == 0:
            break
        if grows_kv:
            allocations = phase_counts[j % block_size]
            if allocations > free:
                break
            free -= allocations
            used += allocations
        duration = decode_time(active, kv_suffix[finished] + active * (j + 1))
        end = now + duration
        if end >= horizon_s:
            break
        starts.append(now)
        durations.append(duration)
        batch_sizes.append(active)
        kv_used.append(used)
        now = end
        j += 1
        finishing = False
        while finished < count and rem_sorted[finished] == j:
            released = final_blocks[finished]
            free += released
            used -= released
            if grows_kv:
                phase_counts[phase_sorted[finished] % block_size] -= 1
            finished += 1
            finishing = True
        if end >= next_arrival_s or (finishing and stop_on_finish):
            break
    if not durations:
        return None
    return DecodeRun(
        starts=starts,
        durations=durations,
        batch_sizes=batch_sizes,
        kv_used=kv_used,
        end_s=now,
        kv_used_after=used,
    )
