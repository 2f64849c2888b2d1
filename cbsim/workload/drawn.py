"""Drawn workloads: what the request sources send.

An open-loop workload is materialised up front as three arrays — arrival times (seconds), prompt
lengths and output lengths (tokens) — because its arrivals do not depend on the simulation, as real
traffic's do not: :class:`RequestSpecs`. A closed-loop load (``closed_loop``: C clients, each
sending its next request when its last one finished) has no arrival times until the simulation
makes them: it is a :class:`ClosedLoopWorkload`, whose i-th request sent gets the i-th lengths
drawn. So is a staged load (``stages``, :class:`StagedWorkload`): its send times within each stage
are drawn up front, but a stage starts when the previous one has drained, which only the
simulation tells. Sessions are :class:`cbsim.workload.sessions.SessionWorkload`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from cbsim.workload.prompt_pool import PoolPrompts
from cbsim.workload.sessions import SessionWorkload


@dataclass(frozen=True, slots=True)
class RequestSpecs:
    """The requests of a run, sorted by arrival time."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    warnings: tuple[str, ...] = ()  # doubts about a replayed trace's times (units, order)
    # a replayed trace's prefix block ids per request (None: the trace has none), each standing
    # for prefix_block_tokens tokens of the prompt (prefix caching)
    prefix_ids: np.ndarray | None = None
    prefix_block_tokens: int = 512
    # a prompt pool's prompts (workload.prompt_pool): the pool, and each request's prompt in it
    pool: PoolPrompts | None = None
    pool_picks: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)


LENGTH_CHUNK = 1024


# count -> the next count prompt lengths, output lengths and prompt pool picks (None: no pool)
LengthDraw = Callable[[int], tuple[np.ndarray, np.ndarray, np.ndarray | None]]


@dataclass
class ClosedLoopLengths:
    """Prompt and output lengths in sending order: request i gets the i-th pair, whatever the
    timing. They are drawn in chunks from the same named streams, so a run that sends more
    requests extends the sequence and never changes its start. With a prompt pool, request i's
    prompt in it is :meth:`pick`."""

    draw: LengthDraw
    pool: PoolPrompts | None = None
    _prompts: list[int] = field(default_factory=list)
    _outputs: list[int] = field(default_factory=list)
    _picks: list[int] = field(default_factory=list)

    def __getitem__(self, index: int) -> tuple[int, int]:
        while index >= len(self._prompts):
            prompts, outputs, picks = self.draw(LENGTH_CHUNK)
            self._prompts.extend(prompts.tolist())
            self._outputs.extend(outputs.tolist())
            if picks is not None:
                self._picks.extend(picks.tolist())
        return self._prompts[index], self._outputs[index]

    def pick(self, index: int) -> int:
        """Request ``index``'s prompt in the prompt pool (-1: no pool)."""
        if self.pool is None:
            return -1
        self[index]
        return self._picks[index]


@dataclass
class ClosedLoopWorkload:
    """A closed-loop load: ``concurrency`` clients sending until ``max_requests`` have been sent
    or, with ``duration_s``, until that time has passed (no request is sent after it). With
    ``ready_s`` (an open-loop arrival's ``max_concurrency``), request i is sent no earlier than
    ``ready_s[i]``: the clients are the slots of a cap on an open loop."""

    concurrency: int
    think_time_s: float
    think_time_random: bool
    ramp_s: float
    max_requests: int | None
    duration_s: float | None
    lengths: ClosedLoopLengths
    ready_s: np.ndarray | None = None

    def __len__(self) -> int:
        """Requests it will send, when that is known in advance (0 when only a duration is)."""
        return self.max_requests or 0


@dataclass
class StagedWorkload:
    """A staged load (``stages``): stage i sends at ``offsets[i]`` seconds after its start, which
    the simulation sets (when stage i - 1 has drained, plus ``gap_s``); the i-th request sent
    gets the i-th lengths."""

    offsets: list[np.ndarray]
    durations: list[float]
    gap_s: float
    lengths: ClosedLoopLengths

    def __len__(self) -> int:
        """Requests it sends (fewer when a horizon stops it)."""
        return sum(len(o) for o in self.offsets)


Workload = RequestSpecs | ClosedLoopWorkload | SessionWorkload | StagedWorkload
