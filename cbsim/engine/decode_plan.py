"""The plan of a decode run: the type the engine's planner (:mod:`cbsim.engine.decode_run`) and a
speculative run (:mod:`cbsim.engine.speculative.fast_run`) produce and a scheduler applies
(:meth:`cbsim.engine.scheduler.base.SchedulerPolicy.apply_decode_run`).

It imports nothing engine-side, so the schedulers can use it without knowing the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(slots=True)
class SpecColumns:
    """A speculative run's per-iteration columns (as the recorder keeps them for stepped ones),
    contiguous rows of the run kernel's output that the recorder copies as they are."""

    verify: IntArray
    drafted: IntArray
    accepted: IntArray
    k_min: IntArray
    k_max: IntArray
    draft_s: FloatArray


@dataclass(slots=True)
class RunRows:
    """A compiled run's per-iteration columns as its kernel wrote them (contiguous float64 and
    int64 rows), which the recorder copies as machine words rather than from the run's lists."""

    starts: FloatArray
    durations: FloatArray
    batch_sizes: IntArray
    # a speculative run's tokens emitted and plain decodes (None: the batch sizes)
    emitted: IntArray | None = None
    decode_tokens: IntArray | None = None


@dataclass(slots=True)
class DecodeRun:
    """A planned run of ``len(durations)`` pure-decode iterations starting at ``starts[0]``.

    Without speculation every running request emits one token per iteration; a speculative run
    (:mod:`cbsim.engine.speculative.fast_run`) also has its emitted and plain-decode tokens, its
    speculative columns, the outputs still to come after each iteration and its effects."""

    starts: list[float]
    durations: list[float]
    batch_sizes: list[int]
    kv_used: list[int]
    end_s: float
    kv_used_after: int
    # running requests whose previous token came before the replica's previous iteration (set
    # when the run is applied; their first token in the run has a gap of its own)
    paused_at_start: int = 0
    emitted: list[int] | None = None
    speculation: SpecColumns | None = None
    remaining_after: list[int] | None = None
    spec: Any = None
    # the running requests' outputs still to come when the run started (in running order)
    remaining: Any = None
    rows: RunRows | None = None  # the columns as the kernel wrote them (None: a Python plan)
    _ends: list[float] | None = field(default=None, init=False, repr=False)  # see ends

    @property
    def iterations(self) -> int:
        return len(self.durations)

    @property
    def ends(self) -> list[float]:
        """Each iteration's end (its start plus its duration), computed once."""
        ends = self._ends
        if ends is None:
            ends = self._ends = [a + d for a, d in zip(self.starts, self.durations, strict=True)]
        return ends
