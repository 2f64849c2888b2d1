"""Request sources: who sends the requests a run serves, and when.

A source is one way clients load a server: open-loop arrivals at their own times, a replayed
trace, closed-loop clients that send again when answered, multi-turn sessions, rate stages. The
engine knows none of them; it asks a source one small set of things:

* :meth:`RequestSource.start`: begin sending (a SimPy process, or the first sends scheduled);
* :meth:`RequestSource.next_send_s`: the earliest time a request not sent yet will be (decode runs
  stop where stepping would see it);
* :meth:`RequestSource.finished`, :meth:`RequestSource.rejected`, :meth:`RequestSource.gave_up`:
  what a request's end means to its client (with :attr:`RequestSource.closes_loop`, a finish may
  make the next send, so decode runs stop at finishes);
* :meth:`RequestSource.all_sent`: whether nothing more will come.

A source sends through a :class:`Sender` (the simulation): a request sent now or later goes to
the dispatcher (:mod:`cbsim.engine.dispatch`), its id the next of the run's.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import simpy

from cbsim.schema.scenario import Scenario
from cbsim.workload.prefix_segments import PrefixInterner, Segments
from cbsim.workload.request import Request

__all__ = ["RequestSource", "Sender"]


class Sender(Protocol):
    """What a source sees of the simulation it sends into."""

    env: simpy.Environment
    scenario: Scenario
    sent: int  # requests sent so far (the next one's id)
    done: int  # requests done for their clients so far (finished, timed out)
    interner: PrefixInterner | None  # prompt content as cache keys (None: nothing cached)

    @property
    def block_size(self) -> int:
        """The KV block size prompts are cut into for the prefix caches."""
        ...

    def submit(self, req: Request) -> None:
        """Send ``req`` (the next request) at ``req.sent_s``: now, or then."""
        ...

    def send_now(self, req: Request) -> None:
        """Send ``req`` (the next request) now, whatever its ``sent_s`` says."""
        ...

    def pool_segments(self, pick: int, prompt_tokens: int) -> Segments | None:
        """The prompt pool's prompt ``pick`` as cache segments."""
        ...

    def idle(self) -> bool:
        """Whether nothing is pending (sends, front ends) and no replica has work."""
        ...


class RequestSource:
    """One way requests are sent (see the module docstring); the defaults suit a source whose
    sends do not depend on what the server does."""

    closes_loop = False
    """Whether a finish may make the next send (closed-loop clients, sessions)."""

    stopped = ""
    """Why the source stopped sending before its workload said (empty: it did not)."""

    def start(self) -> None:
        """Begin sending."""
        raise NotImplementedError

    def next_send_s(self) -> float:
        """When the next request not sent yet will be sent (inf: none known)."""
        return math.inf

    def all_sent(self) -> bool:
        """Whether every request this source will send has been sent and is done with."""
        raise NotImplementedError

    def finished(self, req: Request, delivered_s: float) -> None:
        """``req``'s last token reached its client at ``delivered_s`` (now or later)."""

    def rejected(self, req: Request, reason: str) -> None:
        """``req`` was rejected now (it can never be served)."""

    def gave_up(self, req: Request, now: float) -> None:
        """``req``'s client gave up on it (a client timeout) at ``now``."""

    def prompt_lengths(self) -> np.ndarray:
        """The prompt lengths of the requests this source sends (so far, where sends come out of
        the run)."""
        raise NotImplementedError
