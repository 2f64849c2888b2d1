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
that ends after the next arrival (one ending at its very time forms the next batch first, see
:mod:`cbsim.engine.loop` on ties), after the first finish when requests are waiting, before
an iteration that would need more KV blocks than are free (the step-by-step path then preempts)
and before an iteration that would end at or after the horizon.

The plan's type (:class:`~cbsim.engine.decode_plan.DecodeRun`) lives in :mod:`cbsim.engine.decode_plan`, where the
schedulers that apply a run can import it without importing the engine side; it is re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

import numba
import numpy as np
import numpy.typing as npt

from cbsim.common.stable_sort import stable_argsort
from cbsim.cost import CostModel
from cbsim.cost.compiled import CompiledCost, decode_seconds
from cbsim.cost.kernel_call import KernelCall
from cbsim.engine.decode_plan import DecodeRun, RunRows, SpecColumns
from cbsim.workload.request import Request

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

MAX_RUN_ITERATIONS = 8192
KV_TOKENS = attrgetter("kv_tokens")
OUTPUTS = attrgetter("output_tokens")
GENERATED = attrgetter("generated")
BLOCKS = attrgetter("blocks")

__all__ = [
    "MAX_RUN_ITERATIONS",
    "DecodeRun",
    "RunRows",
    "SpecColumns",
    "decode_run_kernel",
    "plan_decode_run",
    "plan_decode_run_python",
]


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
    kernel: KernelCall | None = None,
    shares_blocks: bool = False,
    state: tuple[IntArray, IntArray, IntArray] | None = None,
) -> DecodeRun | None:
    """Plan the run starting now, or None when not even one iteration can be planned (compiled
    when the cost model compiles, else in Python: the same run either way). ``kernel``: the
    simulation's call of :func:`decode_run_kernel` (dispatched once, :mod:`cbsim.cost.kernel_call`).
    ``shares_blocks``: some requests hold prefix-cache blocks (``Request.shared_blocks``), which
    a finish does not free here (the prefix cache settles them after the run). ``state``: the
    running requests' KV tokens, outputs left and blocks, in any order, where the scheduler's
    decode cohort has them (the compiled planner reads them instead of the requests)."""
    count = len(running)
    compiled = cost.compiled_decode(count) if count else None
    if compiled is None:
        return plan_decode_run_python(
            running,
            cost=cost,
            start_s=start_s,
            block_size=block_size,
            used_blocks=used_blocks,
            total_blocks=total_blocks,
            grows_kv=grows_kv,
            stop_on_finish=stop_on_finish,
            next_arrival_s=next_arrival_s,
            horizon_s=horizon_s,
            shares_blocks=shares_blocks,
        )
    if state is not None:
        kv, rem, blocks = state
        shared = _NO_SHARED
    else:
        kv = np.fromiter(map(KV_TOKENS, running), np.int64, count)
        rem = np.fromiter(map(OUTPUTS, running), np.int64, count) - np.fromiter(
            map(GENERATED, running), np.int64, count
        )
        blocks = np.fromiter(map(BLOCKS, running), np.int64, count)
        shared = _shared_blocks(running, shares_blocks)
    planned = (decode_run_kernel if kernel is None else kernel)(
        kv, rem, blocks, shared, compiled, start_s, block_size, used_blocks, total_blocks,
        grows_kv, stop_on_finish, next_arrival_s, horizon_s, MAX_RUN_ITERATIONS,
    )  # fmt: skip
    n, reals, ints, end, used_after = planned
    if n <= 0:
        return None
    reals, ints = reals[:, :n], ints[:, :n]
    starts, durations = reals.tolist()
    batch_sizes, kv_used = ints.tolist()
    return DecodeRun(
        starts=starts,
        durations=durations,
        batch_sizes=batch_sizes,
        kv_used=kv_used,
        end_s=end,
        kv_used_after=used_after,
        remaining=rem,
        rows=RunRows(reals[0], reals[1], ints[0]),
    )


_NO_SHARED = np.zeros(0, dtype=np.int64)


def _shared_blocks(running: Sequence[Request], shares_blocks: bool) -> IntArray:
    """Each request's prefix-cache blocks (empty: none holds any)."""
    if not shares_blocks:
        return _NO_SHARED
    return np.fromiter((r.shared_blocks for r in running), dtype=np.int64, count=len(running))


@numba.njit(cache=True)
def decode_run_kernel(
    kv: IntArray,
    rem: IntArray,
    blocks: IntArray,
    shared: IntArray,
    c: CompiledCost,
    start_s: float,
    block_size: int,
    used_blocks: int,
    total_blocks: int,
    grows_kv: bool,
    stop_on_finish: bool,
    next_arrival_s: float,
    horizon_s: float,
    max_iterations: int,
) -> tuple[int, FloatArray, IntArray, float, int]:
    """:func:`plan_decode_run_python`'s loop, compiled (the same arithmetic in the same order):
    its iterations, their starts and durations (rows of one float table) and batch sizes and
    KV blocks used (rows of one integer table: an array handed back costs a microsecond), its
    end and the blocks used after it."""
    count = len(kv)
    longest = 0
    for i in range(count):
        longest = rem[i] if rem[i] > longest or i == 0 else longest
    size = max_iterations if max_iterations < longest else longest
    reals = np.empty((2, size))
    ints = np.empty((2, size), dtype=np.int64)
    starts, durations = reals[0], reals[1]
    batch_sizes, kv_used = ints[0], ints[1]
    order = stable_argsort(
        rem, count, np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
    )
    kv_active = 0
    for i in range(count):
        kv_active += kv[i]
    phase = np.empty(count, dtype=np.int64)
    phase_counts = np.empty(block_size, dtype=np.int64)
    for i in range(block_size):
        phase_counts[i] = 0
    final_blocks = np.empty(count, dtype=np.int64)
    for i in range(count):
        if grows_kv:
            phase[i] = blocks[i] * block_size - kv[i]
            if phase[i] < 0 or phase[i] >= block_size:
                return -1, reals, ints, start_s, used_blocks
            phase_counts[phase[i]] += 1
            needed = -(-(kv[i] + rem[i]) // block_size)
            final_blocks[i] = needed if needed > blocks[i] else blocks[i]
        else:
            final_blocks[i] = blocks[i]
    free = total_blocks - used_blocks
    used = used_blocks
    now = start_s
    finished = 0
    j = 0
    while j < size:
        active = count - finished
        if active == 0:
            break
        if grows_kv:
            allocations = phase_counts[j % block_size]
            if allocations > free:
                break
            free -= allocations
            used += allocations
        duration = decode_seconds(c, active, kv_active + active * (j + 1))
        end = now + duration
        if end >= horizon_s:
            break
        starts[j] = now
        durations[j] = duration
        batch_sizes[j] = active
        kv_used[j] = used
        now = end
        j += 1
        finishing = False
        while finished < count and rem[order[finished]] == j:
            i = order[finished]
            freed = final_blocks[i] - shared[i] if len(shared) else final_blocks[i]
            free += freed
            used -= freed
            kv_active -= kv[i]
            if grows_kv:
                phase_counts[phase[i] % block_size] -= 1
            finished += 1
            finishing = True
        if end > next_arrival_s or (finishing and stop_on_finish):
            break
    return j, reals, ints, now, used


def plan_decode_run_python(
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
    shares_blocks: bool = False,
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
        final = np.maximum(blocks, -(-(kv + rem) // block_size))
    else:
        phase_sorted = []
        phase_counts = []
        final = blocks
    shared = _shared_blocks(running, shares_blocks)
    final_blocks = (final - shared if len(shared) else final)[order].tolist()

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
        if end > next_arrival_s or (finishing and stop_on_finish):
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
        remaining=rem,
    )
