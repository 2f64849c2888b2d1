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

Guards stop a loop that would never end. One stops its sending: every request rejected (at once
or not) or given up (client timeouts), :func:`give_up_after` of them in a row with none finishing;
the run then reports what was sent, the rejected requests with their reasons as an open loop's
are, and a warning in the summary says why it stopped. Two are errors, the limits a run is held
to: the request limit, and a pace that would send far more than it over ``duration_s``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from cbsim.common.errors import CbsimError
from cbsim.common.limits import REQUESTS
from cbsim.common.rng import stream
from cbsim.workload.drawn import ClosedLoopWorkload
from cbsim.workload.request import Request
from cbsim.workload.sources.base import RequestSource, Sender

__all__ = ["PROJECTION_SENDS", "ClosedLoop", "give_up_after"]

PROJECTION_SENDS = 1_000
"""Sends after which a closed loop's pace is projected over its duration (``_check_projection``)."""


def give_up_after(concurrency: int) -> int:
    """Requests of a closed loop of ``concurrency`` clients rejected or timed out in a row, with
    none finishing, after which it stops sending."""
    return 100 * concurrency + 1000


class ClosedLoop(RequestSource):
    """The clients of a closed loop (see the module docstring)."""

    closes_loop = True

    def __init__(self, sim: Sender, closed: ClosedLoopWorkload) -> None:
        self.sim = sim
        self.closed = closed
        self._clients = stream(sim.scenario.seed, "clients")
        # requests rejected or timed out since the last finish, and how each of them ended
        self._unserved = 0
        self._unserved_ends: set[str] = set()
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
        self._unserved = 0
        self._unserved_ends.clear()
        self._send(req.client, delivered_s + self._think_time())

    def rejected(self, req: Request, reason: str) -> None:
        self._count_unserved(f"were rejected ({reason})")
        self._send(req.client, self.sim.env.now + self._think_time())

    def gave_up(self, req: Request, now: float) -> None:
        client = self.sim.scenario.workload.client
        assert client is not None
        self._count_unserved(f"timed out (workload.client.timeout_s: {client.timeout_s:g} s)")
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
        if self.stopped:
            return
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

    def _count_unserved(self, end: str) -> None:
        """A request rejected or given up: a closed loop whose every request is rejected (longer
        than the context, or than the KV cache holds) or times out would send until the request
        limit, think time or not, serving nothing; it stops sending once
        :func:`give_up_after` in a row have, with none finishing meanwhile."""
        self._unserved += 1
        self._unserved_ends.add(end)
        if self.stopped or self._unserved < give_up_after(self.closed.concurrency):
            return
        ends = " or ".join(sorted(self._unserved_ends))
        if any(e.startswith("timed out") for e in self._unserved_ends):
            advice = "check the timeout against the time a request takes"
        else:
            advice = "check the lengths against the model's context and KV capacity"
        self.stopped = (
            f"the closed loop stopped sending at t = {self.sim.env.now:.6g} s: "
            f"{self._unserved:,} requests in a row {ends} and none finished ({advice})"
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
