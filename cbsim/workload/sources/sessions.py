"""Multi-turn sessions: conversations whose next turn follows the answer to the last.

Each session starts at its drawn time and sends its first turn; every next turn leaves its user
once the previous answer has reached them, plus a think time, until the session's turns are done
(:class:`cbsim.workload.sessions.SessionWorkload` draws the turns: each prompt carries the conversation so
far, so a turn's prompt shares its prefix with the previous one's). A rejected or timed-out turn
ends its session.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from cbsim.common.event_time import exact_delay
from cbsim.common.rng import stream
from cbsim.workload.request import Request
from cbsim.workload.sessions import SessionWorkload
from cbsim.workload.sources.base import RequestSource, Sender

__all__ = ["Sessions"]


class Sessions(RequestSource):
    """The sessions of a multi-turn workload (see the module docstring)."""

    closes_loop = True

    def __init__(self, sim: Sender, sessions: SessionWorkload) -> None:
        self.sim = sim
        self.sessions = sessions
        self._users = stream(sim.scenario.seed, "clients")
        self._turn_of: dict[int, int] = {}  # request id -> its turn
        self._next_session = 0

    def start(self) -> None:
        self.sim.env.process(self._session_starts())

    def next_send_s(self) -> float:
        if self._next_session < len(self.sessions.starts):
            return float(self.sessions.starts[self._next_session])
        return super().next_send_s()

    def all_sent(self) -> bool:
        return self._next_session >= len(self.sessions.starts) and self.sim.idle()

    def finished(self, req: Request, delivered_s: float) -> None:
        """``req``'s answer reached its user: the session's next turn follows."""
        sessions = self.sessions
        turn = self._turn_of.pop(req.request_id) + 1
        if turn < int(sessions.turns[req.session]):
            self._send_turn(req.session, turn, delivered_s + sessions.think(self._users))

    def rejected(self, req: Request, reason: str) -> None:
        self._turn_of.pop(req.request_id)  # a rejected turn ends its session

    def gave_up(self, req: Request, now: float) -> None:
        self._turn_of.pop(req.request_id, None)  # (its replica drops it at its next step)

    def prompt_lengths(self) -> np.ndarray:
        return self.sessions.prompt_lengths()

    def _session_starts(self) -> Generator[simpy.Event, Any, None]:
        """Each session sends its first turn when it starts."""
        env = self.sim.env
        for session, start in enumerate(self.sessions.starts.tolist()):
            if start > env.now:
                yield env.timeout(exact_delay(env.now, start))
            self._next_session = session + 1
            self._send_turn(session, 0, start)

    def _send_turn(self, session: int, turn: int, sent: float) -> None:
        """Turn ``turn`` of ``session`` leaves its user at ``sent`` (now or later)."""
        sim = self.sim
        horizon = sim.scenario.horizon_s
        if horizon is not None and sent >= horizon:
            return
        spec = self.sessions.turn(session, turn)
        index = sim.sent
        req = Request(index, sent, spec.prompt_tokens, spec.output_tokens, sent_s=sent,
                      client=session)  # fmt: skip
        req.session = session
        if sim.interner is not None:
            limit = spec.prompt_tokens + spec.output_tokens
            req.segments = sim.interner.segments(spec.content, spec.sizes, limit, sim.block_size)
        self._turn_of[index] = turn
        sim.submit(req)
