"""Closed-loop clients: a fixed number of clients, each sending its next request once answered.

A client has no clock of its own: it sends its first request when it starts (all at once, or
spread uniformly over ``ramp_s``) and each next one when the last token of its previous one has
reached it, or it was rejected or timed out, plus its think time (fixed, or exponential about
its mean). So a finish makes the next send, and the server's speed sets the load. The loop stops
sending at ``max_requests``, after ``duration_s`` or at the horizon.

The slots of a cap on an open loop (an open-loop arrival's ``max_concurrency``) are clients too:
each sends the next request once its last one is done, but never before that request is ready
(its drawn arrival time), so the first free slot takes the next ready request, as a semaphore of
C slots in front of an open loop does.

Three guards stop a loop that would never end: every request rejected at once (sends with no
time passing), every request rejected for ever (none finishing), and a pace that would send far
more than a run's request limit over ``duration_s``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from cbsim.errors import CbsimError
from cbsim.limits import REQUESTS
from cbsim.request import Request
from cbsim.rng import stream
from cbsim.sources.base import RequestSource, Sender
from cbsim.workload import ClosedLoopWorkload

__all__ = ["PROJECTION_SENDS", "ClosedLoop"]

PROJECTION_SENDS = 1_000
"""Sends after which a closed loop's pace is projected over its duration (``_check_projection``)."""


class ClosedLoop(RequestSource):
    """The clients of a closed loop (see the module docstring)."""

    closes_loop = True

    def __init__(self, sim: Sender, closed: ClosedLoopWorkload) -> None:
        self.sim = sim
        self.closed = closed
        self._clients = stream(sim.scenario.seed, "clients")
        self._sends_now = (-1.0, 0)  # (time, sends at that time): catches a loop of rejections
        self._rejected_run = (0, 0)  # (finished then, rejections since): a loop of rejections
        self._outbox: deque[tuple[int, float]] = deque()
        self._sending = False

    def start(self) -> None:
        closed = self.closed
        if closed.ramp_s > 0.0:
            starts = self._clients.uniform(0.0, closed.ramp_s, closed.concurrency)
        else:
            starts = np.zeros(closed.concurrency)
        for client in np.argsort(starts, kind="stable").tolist():
            self._send(client, float(starts[client]))

    def all_sent(self) -> bool:
        return self.sim.idle()

    def finished(self, req: Request, delivered_s: float) -> None:
        self._send(req.client, delivered_s + self._think_time())

    def rejected(self, req: Request, reason: str) -> None:
        self._check_rejections(reason)
        self._send(req.client, self.sim.env.now + self._think_time())

    def gave_up(self, req: Request, now: float) -> None:
        self._send(req.client, now + self._think_time())

    def prompt_lengths(self) -> np.ndarray:
        lengths = self.closed.lengths  # request i was sent with the i-th lengths
        return np.fromiter((lengths[i][0] for i in range(self.sim.sent)), dtype=np.int64)

    def _send(self, client: int, sent: float) -> None:
        """Client ``client`` sends its next request at ``sent`` (now or later), if it may. Sends
        that a send causes (a rejection lets its client send again) queue up, never recurse."""
        self._outbox.append((client, sent))
        if self._sending:
            return
        self._sending = True
        try:
            while self._outbox:
                self._send_one(*self._outbox.popleft())
        finally:
            self._sending = False

    def _send_one(self, client: int, sent: float) -> None:
        closed = self.closed
        sim = self.sim
        index = sim.sent
        if closed.max_requests is not None and index >= closed.max_requests:
            return
        if closed.ready_s is not None:  # a capped open loop: not before the request is ready
            sent = max(sent, float(closed.ready_s[index]))
        if closed.duration_s is not None and sent > closed.duration_s:
            return
        horizon = sim.scenario.horizon_s
        if horizon is not None and sent >= horizon:  # as an open-loop arrival then: never seen
            return
        if index >= REQUESTS.high:
            raise CbsimError(
                f"the closed loop has sent {index:,} requests by t = {sent:.6g} s; a run's "
                f"requests {REQUESTS.violation(index + 1)}: give num_requests or a shorter "
                "duration_s",
                field="workload.duration_s",
            )
        self._check_progress(sent)
        if index == max(PROJECTION_SENDS, 10 * closed.concurrency):
            self._check_projection(index, sent)
        prompt, output = closed.lengths[index]
        req = Request(index, sent, prompt, output, sent_s=sent, client=client)
        pick = closed.lengths.pick(index)
        if pick >= 0:
            req.segments = sim.pool_segments(pick, prompt)
        sim.submit(req)

    def _think_time(self) -> float:
        closed = self.closed
        if closed.think_time_random and closed.think_time_s > 0.0:
            return float(self._clients.exponential(closed.think_time_s))
        return closed.think_time_s

    def _check_progress(self, sent: float) -> None:
        """A closed loop whose every request is rejected at once would send forever at one time."""
        when, count = self._sends_now
        count = count + 1 if when == sent else 1
        self._sends_now = (sent, count)
        if count > 100 * self.closed.concurrency + 1000:
            raise CbsimError(
                f"closed loop: {count} requests sent at t = {sent:.6g} s without time passing "
                "(each one rejected at once?); check the lengths against the model's context "
                "and KV capacity, or set think_time_s",
                field="workload.arrival",
            )

    def _check_rejections(self, reason: str) -> None:
        """A closed loop whose every request is rejected (longer than the context, or than the
        KV cache holds) would send until the request limit, think time or not: stop it once
        many in a row have been rejected with none finishing meanwhile."""
        done, count = self._rejected_run
        count = count + 1 if done == self.sim.done else 1
        self._rejected_run = (self.sim.done, count)
        if count > 100 * self.closed.concurrency + 1000:
            raise CbsimError(
                f"closed loop: {count:,} requests in a row were rejected ({reason}) and none "
                "finished; check the lengths against the model's context and KV capacity",
                field="workload.arrival",
            )

    def _check_projection(self, index: int, sent: float) -> None:
        """A closed loop sending for ``duration_s`` at the pace of its first ``index`` requests:
        an error now, not minutes later at the request limit, when that pace would send far
        more than the limit allows."""
        closed = self.closed
        if closed.duration_s is None or sent <= 0.0:
            return
        if closed.max_requests is not None and closed.max_requests <= REQUESTS.high:
            return
        span = closed.duration_s
        horizon = self.sim.scenario.horizon_s
        if horizon is not None:
            span = min(span, horizon)
        projected = index / sent * span
        if projected > 2 * REQUESTS.high:
            raise CbsimError(
                f"the closed loop sent {index:,} requests in its first {sent:.6g} s: over "
                f"{span:.6g} s it would send about {projected:.3g}; a run's requests "
                f"{REQUESTS.violation(projected)}: give num_requests or a shorter duration_s",
                field="workload.duration_s",
            )
