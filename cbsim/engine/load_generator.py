"""Load generators as benchmarks run them: rate stages that wait for each other, client timeouts.

Two things a benchmark's load generator does that plain arrivals do not, run inside a
:class:`cbsim.engine.loop.Simulation` (which owns one :class:`LoadGenerator` when the scenario uses
either):

* **Stages** (``workload.arrival.kind: stages``): each stage sends at its rate for its duration
  (its send times drawn up front, :class:`cbsim.workload.drawn.StagedWorkload`), and the next stage
  starts once every request of this one is done as its client sees it (the last token delivered,
  a rejection, a timeout) and ``gap_s`` has passed, as ``vllm bench serve`` over several rates,
  guidellm and LMBenchmark run their rate points. The start of a stage comes out of the
  simulation, as a closed loop's sends do: a finish may end a stage, so decode runs stop at
  finishes (see :mod:`cbsim.engine.loop`).
* **Client timeouts** (``workload.client.timeout_s``): at ``sent + timeout_s`` a request not yet
  done is given up by its client (a closed-loop client sends its next request; the stage counts
  it done) and aborted on the server at its replica's next step boundary, as vLLM handles an
  abort between engine steps: the step under way completes (its tokens count; a request it
  finishes is still timed out: its client left), then the request leaves the waiting queue or
  the running batch, its KV blocks are freed and its prefix-cache entries released
  (:meth:`cbsim.engine.scheduler.base.SchedulerPolicy.abort`). A request still in a front end is dropped
  when it lands; disaggregated, one waiting for a decode instance's blocks gives back its
  prefill instance's, one whose KV is crossing is dropped when the transfer ends (its decode
  blocks freed). A replica in a decode run is poked at the timeout, as an arrival pokes it, so
  the run stops at the first iteration ending after it, exactly where stepping drops the
  request; decode runs stop at finishes, so whether a request finished before its timeout is
  known exactly at the timeout.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import simpy

from cbsim.common.event_time import exact_delay
from cbsim.workload.request import Request, Status

if TYPE_CHECKING:
    from cbsim.engine.replica import Replica
    from cbsim.schema.scenario import Scenario
    from cbsim.workload.drawn import StagedWorkload
    from cbsim.workload.prefix_segments import Segments

__all__ = ["LoadGenerator", "LoadTarget"]


class LoadTarget(Protocol):
    """What the load generator needs of the simulation it sends to
    (:class:`cbsim.engine.loop.Simulation`): its clock and scenario, the requests sent so far and its
    replicas, and the calls that send a request, wake a replica and settle a request's end."""

    @property
    def env(self) -> simpy.Environment: ...

    @property
    def scenario(self) -> Scenario: ...

    @property
    def sent(self) -> int: ...

    @property
    def requests(self) -> Mapping[int, Request]: ...

    @property
    def replicas(self) -> Sequence[Replica]: ...

    def pool_segments(self, pick: int, prompt_tokens: int) -> Segments | None: ...

    def submit(self, req: Request) -> None: ...

    def notify(self, replica: Replica) -> None: ...

    def free_prefill_blocks(self, req: Request) -> None: ...

    def done_with(self, req: Request) -> None: ...

    def client_gave_up(self, req: Request, now: float) -> None: ...


class LoadGenerator:
    """A simulation's stages and client timeouts (see the module docstring)."""

    def __init__(
        self, sim: LoadTarget, staged: StagedWorkload | None, timeout_s: float | None
    ) -> None:
        self.sim = sim
        self.staged = staged
        self.timeout_s = timeout_s
        # stages: the stage sending now, requests of each sent and not yet done (client view),
        # when the latest done one was done, the event its drain sets once its sending time is
        # over, its next send time (inf: none known) and whether stages still send
        self.stage = -1
        self.open = [0] * (len(staged.offsets) if staged is not None else 0)
        self.last_done_s = 0.0
        self.drained: simpy.Event | None = None
        self.next_send_s = math.inf
        self.sending = staged is not None
        # timeouts: per replica, the requests given up whose abort it has yet to make
        self.aborted: dict[int, list[Request]] = {}

    # ------------------------------------------------------------------ stages

    def stages(self) -> Generator[simpy.Event, Any, None]:
        """The stages' sends, each stage after the previous one has drained (a SimPy process)."""
        sim = self.sim
        env = sim.env
        staged = self.staged
        assert staged is not None
        horizon = sim.scenario.horizon_s if sim.scenario.horizon_s is not None else math.inf
        exact = exact_delay
        # the stages' own clock: times exactly as computed (SimPy's now + delay may round)
        clock = 0.0
        try:
            for stage, offsets in enumerate(staged.offsets):
                start = clock
                self.stage = stage
                for sent in (start + offsets).tolist():
                    if sent >= horizon:  # as an open-loop arrival then: never seen
                        return
                    self.next_send_s = sent
                    if sent > env.now:
                        yield env.timeout(exact(env.now, sent))
                    self._send(stage, sent)
                self.next_send_s = math.inf
                end = start + staged.durations[stage]
                if end > env.now:
                    yield env.timeout(exact(env.now, end))
                if self.open[stage] > 0:
                    self.drained = env.event()
                    yield self.drained
                    self.drained = None
                # drained when its last request was done for its client, then the gap
                clock = max(end, self.last_done_s) + staged.gap_s
                if clock >= horizon:
                    return
                if clock > env.now and stage + 1 < len(staged.offsets):
                    yield env.timeout(exact(env.now, clock))
        finally:
            self.next_send_s = math.inf
            self.sending = False

    def _send(self, stage: int, sent: float) -> None:
        """The next request of ``stage`` leaves its client now."""
        sim = self.sim
        staged = self.staged
        assert staged is not None
        index = sim.sent
        prompt, output = staged.lengths[index]
        req = Request(index, sent, prompt, output, sent_s=sent)
        req.stage = stage
        pick = staged.lengths.pick(index)
        if pick >= 0:
            req.segments = sim.pool_segments(pick, prompt)
        self.open[stage] += 1
        sim.submit(req)

    def done(self, req: Request, at: float) -> None:
        """``req`` is done as its client sees it, at ``at`` (now or, a token still streaming,
        later): its stage may have drained."""
        stage = req.stage
        if stage < 0:
            return
        self.open[stage] -= 1
        if at > self.last_done_s:
            self.last_done_s = at
        if not self.open[stage] and self.drained is not None and stage == self.stage:
            self.drained.succeed()

    # ------------------------------------------------------------------ timeouts

    def watch(self, req: Request) -> None:
        """Give ``req`` up at ``sent + timeout_s`` unless it is done by then."""
        if self.timeout_s is None:
            return
        env = self.sim.env
        deadline = req.sent_s + self.timeout_s
        delay = exact_delay(env.now, deadline) if deadline > env.now else 0.0
        env.timeout(delay).callbacks.append(lambda _: self._time_out(req))

    def _time_out(self, req: Request) -> None:
        """``req``'s client gives up now, unless it is done: it counts as done for its client (and
        stage), and its replica drops it at its next step boundary."""
        sim = self.sim
        if req.abandoned or req.request_id not in sim.requests:
            return
        req.abandoned = True
        assert self.timeout_s is not None
        now = req.sent_s + self.timeout_s  # (exactly: SimPy's clock may round)
        sim.client_gave_up(req, now)
        self.done(req, now)
        if req.replica >= 0:
            replica = sim.replicas[req.replica]
            self.aborted.setdefault(replica.index, []).append(req)
            sim.notify(replica)

    def abort_due(self, replica: Replica) -> None:
        """Between two steps of ``replica``: drop the requests given up there (one still in a
        front end, or crossing to a decode instance, is dropped when it lands)."""
        given_up = self.aborted.pop(replica.index, None)
        if not given_up:
            return
        sim = self.sim
        for req in given_up:
            if req.request_id not in sim.requests or req.replica != replica.index:
                continue
            if replica.scheduler.abort(req):
                pass
            elif req in replica.awaiting:  # prefilled, waiting for this decode instance's blocks
                replica.awaiting.remove(req)
                replica.inbound_tokens -= req.outstanding_tokens
                sim.free_prefill_blocks(req)
            elif req in replica.inbox:  # its KV has crossed: blocks here, not yet running
                replica.inbox.remove(req)
                replica.inbound_tokens -= req.outstanding_tokens
                replica.in_transfer -= 1
                replica.scheduler.kv.free(req.blocks)
                req.blocks = 0
            else:
                continue
            self.drop(req)

    def landed(self, req: Request, replica: Replica) -> bool:
        """A request whose KV has just crossed to ``replica``: True (dropped, its blocks there
        freed) when its client has given up on it."""
        if not req.abandoned:
            return False
        replica.in_transfer -= 1
        replica.inbound_tokens -= req.outstanding_tokens
        replica.scheduler.kv.free(req.blocks)
        req.blocks = 0
        self.drop(req)
        return True

    def drop(self, req: Request) -> None:
        """The server is done with ``req``, given up by its client: into the table, timed out."""
        req.status = Status.TIMED_OUT
        req.finish_s = math.nan
        req.output_tokens += req.deferred_outputs  # disaggregated: all its outputs asked again
        req.deferred_outputs = 0
        self.sim.done_with(req)
