"""Open-loop arrivals: every request is sent at its own time, whatever the server does.

The times and lengths are drawn up front (:class:`cbsim.workload.drawn.RequestSpecs`: a Poisson or
gamma process, a trace's timestamps), so the next send is always known and a finish never makes
one. Requests are made a chunk at a time, their numbers turned into Python's once per chunk.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from cbsim.common.event_time import exact_delay
from cbsim.workload.drawn import RequestSpecs
from cbsim.workload.prefix_segments import Segments
from cbsim.workload.request import Request
from cbsim.workload.sources.base import RequestSource, Sender

__all__ = ["ARRIVAL_CHUNK", "OpenLoop"]

ARRIVAL_CHUNK = 4096
"""Requests made at a time (their numbers converted to Python's together)."""


class OpenLoop(RequestSource):
    """Requests sent at the times drawn for them; a prompt pool's picks give them content."""

    def __init__(self, sim: Sender, specs: RequestSpecs) -> None:
        self.sim = sim
        self.specs = specs
        self.next_arrival = 0  # the next request to send
        # its send time as a Python float (a replica reads it before every iteration)
        self._next_send_s = float(specs.arrival_s[0]) if len(specs) else super().next_send_s()

    def start(self) -> None:
        self.sim.env.process(self._arrivals())

    def next_send_s(self) -> float:
        return self._next_send_s

    def all_sent(self) -> bool:
        return self.sim.sent == len(self.specs)

    def prompt_lengths(self) -> np.ndarray:
        return self.specs.prompt_tokens

    def _content(self, chunk: int, end: int) -> np.ndarray | None:
        """The prompts' content of requests ``chunk`` to ``end`` as the workload gives it (None:
        none beyond a prompt pool's picks)."""
        return None

    def _content_segments(self, ids: tuple[int, ...] | None, prompt_tokens: int) -> Segments | None:
        """One prompt's content (from :meth:`_content`) as cache segments."""
        raise NotImplementedError

    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        """Every request is sent at its time and goes through the front end."""
        sim = self.sim
        env = sim.env
        specs = self.specs
        for chunk in range(0, len(specs), ARRIVAL_CHUNK):  # Python numbers a chunk at a time
            end = chunk + ARRIVAL_CHUNK
            arrival_s = specs.arrival_s[chunk:end].tolist()
            prompts = specs.prompt_tokens[chunk:end].tolist()
            outputs = specs.output_tokens[chunk:end].tolist()
            content = self._content(chunk, end)
            picks = None
            if specs.pool_picks is not None:
                picks = specs.pool_picks[chunk:end].tolist()
            following = arrival_s[1:]
            following.append(
                float(specs.arrival_s[end]) if end < len(specs) else super().next_send_s()
            )
            for j, sent in enumerate(arrival_s):
                if sent > env.now:
                    yield env.timeout(exact_delay(env.now, sent))
                i = chunk + j
                self.next_arrival = i + 1
                self._next_send_s = following[j]
                req = Request(i, sent, prompts[j], outputs[j], sent_s=sent)
                if content is not None:
                    req.segments = self._content_segments(content[j], prompts[j])
                elif picks is not None:
                    req.segments = sim.pool_segments(picks[j], prompts[j])
                sim.send_now(req)
