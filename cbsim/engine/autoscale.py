"""Autoscaling: a fleet that follows its load, and the record of what every replica did.

``cluster.autoscale`` (:class:`cbsim.schema.cluster.Autoscale`) builds ``max_replicas`` replicas
of which ``initial_replicas`` serve from t = 0; the others are off. The :class:`Autoscaler`, a
SimPy process, wakes every ``interval_s`` and does what a Kubernetes Horizontal Pod Autoscaler
does to a serving Deployment (the HPA algorithm, ``kube-controller-manager``'s defaults):

- It reads its metric over the serving replicas: ``queue``, the requests waiting in their
  schedulers per serving replica at that instant (vLLM's ``vllm:num_requests_waiting``, the usual
  custom metric of an LLM HPA); ``kv_utilization``, the mean fraction of their KV blocks in use
  (``vllm:gpu_cache_usage_perc``); ``rps``, the requests routed to the fleet in the last interval
  per serving replica, per second.
- ``current`` counts the replicas serving or starting; ``desired = ceil(current x metric /
  target)`` clamped to ``[min_replicas, max_replicas]``, unchanged while ``|metric / target - 1|
  <= 0.1`` (the HPA's tolerance).
- Stabilization (:func:`stabilized_replicas`, the HPA's ``behavior`` windows): the fleet shrinks
  only to the most replicas asked for within the last ``stabilization_s`` (300 s by default, as
  ``behavior.scaleDown.stabilizationWindowSeconds``) and grows only to the fewest asked for
  within the last ``scale_up_stabilization_s`` (0 by default: at once, as
  ``behavior.scaleUp.stabilizationWindowSeconds``). One evaluation that finds the queues empty
  does not remove a replica the load still needs: that is what keeps a fleet from flapping.
- Scale up: the off replicas needed start at once (the lowest-numbered first); each serves (the
  router sees it) after ``scale_up_delay_s`` (provisioning: a node, a pod, the container) plus
  its weights per GPU over ``weight_load_gbps`` GB/s (loading the checkpoint), as a pod turns
  Ready only once the engine has loaded the model.
- Scale down: only when no scale event happened within ``cooldown_s`` (the HPA's older
  scale-down delay, 300 s by default), to the stabilized count at once or by at most
  ``scale_down_step`` replicas (an HPA ``behavior.scaleDown`` policy of ``type: Pods``).
  Starting replicas are cancelled first (an HPA deletes pods that are not Ready first), then the
  serving replicas with the fewest outstanding tokens (ties: the highest-numbered): each stops
  receiving requests at once, drains what it holds (waiting, running and in its front end), then
  is released: a pod's ``preStop`` drain, as serving engines shut down gracefully. A replica
  still draining is not started again.

Every replica's time is recorded (:class:`FleetLog`): when it was acquired (the scale-up
decision, or 0) and released (the end of its drain, or the end of the run), and when it served.
A fixed fleet's replicas are acquired at 0, serve throughout and are released at the end of the
run. From that log come the summary's ``gpu_hours``, ``cost_usd``, ``replicas_mean``,
``replicas_max``, ``scale_ups`` and ``scale_downs`` and the timeseries' ``replicas`` column.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.model_bytes import weight_bytes_per_gpu
from cbsim.catalog.models import get_model
from cbsim.outputs.timeseries_windows import window_pieces

if TYPE_CHECKING:
    import simpy

    from cbsim.engine.replica import Replica, ReplicaPool
    from cbsim.schema.cluster import Autoscale

__all__ = [
    "TOLERANCE",
    "Autoscaler",
    "FleetLog",
    "WindowExtreme",
    "desired_replicas",
    "load_time_s",
    "stabilized_replicas",
    "windows_from_events",
]

TOLERANCE = 0.1
"""The HPA's tolerance: no change while the metric is within 10% of its target."""

_REMOVALS = ("drain", "cancel")
"""The scale events of a scale-down decision."""


def desired_replicas(current: int, metric: float, target: float, low: int, high: int) -> int:
    """The Kubernetes HPA rule: ``ceil(current x metric / target)`` within ``[low, high]``,
    ``current`` itself (clamped) while ``metric / target`` is within :data:`TOLERANCE` of 1."""
    ratio = metric / target
    if abs(ratio - 1.0) <= TOLERANCE:
        desired = current
    elif current * ratio >= high:  # also a ratio too large for an integer (a tiny target)
        desired = high
    else:
        desired = math.ceil(current * ratio)
    return min(max(desired, low), high)


def stabilized_replicas(
    current: int,
    desired: int,
    recent: Iterable[tuple[float, int]],
    now: float,
    up_window_s: float,
    down_window_s: float,
) -> int:
    """The HPA's stabilization (``behavior.scaleUp`` / ``scaleDown.stabilizationWindowSeconds``):
    the count to scale to given this evaluation's ``desired`` and the earlier ones ``recent``
    (``(time, desired)``). The fleet grows only to the fewest replicas asked for within the last
    ``up_window_s`` and shrinks only to the most asked for within the last ``down_window_s`` (each
    window includes ``desired`` itself, so a window of 0 takes ``desired`` as it is)."""
    up = min([desired, *(n for at, n in recent if at >= now - up_window_s)])
    down = max([desired, *(n for at, n in recent if at >= now - down_window_s)])
    return min(max(current, up), down)


class WindowExtreme:
    """The largest (``largest``) or smallest of the counts asked for within the last
    ``window_s``, as :func:`stabilized_replicas` takes them, kept in a monotonic deque: each
    evaluation costs O(1) amortized however many evaluations the window holds (a 300 s window
    evaluated every millisecond holds 300,000; scanning them all made each evaluation slower
    than the last)."""

    def __init__(self, window_s: float, largest: bool) -> None:
        self.window_s = window_s
        self.largest = largest
        self.kept: deque[tuple[float, int]] = deque()  # (when, asked), values monotonic

    def with_(self, now: float, desired: int) -> int:
        """The extreme of ``desired`` and the counts asked for within the window before now."""
        kept = self.kept
        while kept and kept[0][0] < now - self.window_s:
            kept.popleft()
        if not kept:
            return desired
        first = kept[0][1]
        return max(first, desired) if self.largest else min(first, desired)

    def add(self, now: float, asked: int) -> None:
        """Keep ``asked``, dropping the counts it outlasts and outdoes."""
        kept = self.kept
        if self.largest:
            while kept and kept[-1][1] <= asked:
                kept.pop()
        else:
            while kept and kept[-1][1] >= asked:
                kept.pop()
        kept.append((now, asked))


def load_time_s(pool: ReplicaPool, gbps: float) -> float:
    """Seconds a replica of ``pool`` takes to load its weights: the bytes each GPU holds (a draft
    model's too) over ``gbps`` GB/s per GPU (its GPUs load in parallel)."""
    cluster = pool.scenario.cluster
    model = get_model(cluster.model)
    weights = weight_bytes_per_gpu(model, cluster.dtype, cluster.tp, cluster.dp, cluster.pp)
    if pool.spec is not None:
        weights += pool.spec.proposer.weight_bytes_per_gpu()
    return weights / (gbps * 1e9)


@dataclass
class FleetLog:
    """What every replica of a run did: when it was held (acquired to released) and when it
    served, per replica a list of ``[start, end]`` spans (``end`` is ``inf`` until closed), and
    the scale events (``time_s``, ``event``, ``replica``, ``serving``: replicas serving after it;
    events ``start`` (acquired: a scale-up decision), ``serve``, ``drain`` (a scale-down
    decision), ``cancel`` (a starting replica removed), ``release``)."""

    gpus: list[int]  # per replica
    prices: list[float]  # USD per GPU-hour, per replica
    held: list[list[list[float]]]
    served: list[list[list[float]]]
    drained: list[list[list[float]]] = field(default_factory=list)  # drain decision to release
    autoscaled: bool = False
    scale_ups: int = 0
    scale_downs: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    end_s: float = math.nan

    @classmethod
    def of(cls, replicas: Sequence[Replica], serving: int | None = None) -> FleetLog:
        """A fleet's log at t = 0: its first ``serving`` replicas (all: None) held and serving."""
        count = len(replicas) if serving is None else serving
        gpus, prices = [], []
        for replica in replicas:
            assert replica.pool is not None
            cluster = replica.pool.scenario.cluster
            gpus.append(cluster.gpus_per_replica)
            prices.append(get_gpu(cluster.gpu).price_per_hour)
        held = [[[0.0, math.inf]] if i < count else [] for i in range(len(replicas))]
        served = [[[0.0, math.inf]] if i < count else [] for i in range(len(replicas))]
        drained: list[list[list[float]]] = [[] for _ in replicas]
        return cls(gpus, prices, held, served, drained, autoscaled=serving is not None)

    def close(self, end_s: float) -> None:
        """End every open span at ``end_s`` (the end of the run); spans starting later go, and
        so do the scale events after it (a replica whose start-up ends after the last request
        has finished never served in the run) and the decisions they made."""
        self.end_s = end_s
        for spans in (*self.held, *self.served, *self.drained):
            for span in spans:
                span[0] = min(span[0], end_s)
                span[1] = min(span[1], end_s)
            spans[:] = [s for s in spans if s[1] > s[0] or (s[0] == s[1] == 0.0 == end_s)]
        late = [e for e in self.events if e["time_s"] > end_s]
        if late:
            self.events = [e for e in self.events if e["time_s"] <= end_s]
            # each decision is one evaluation's: its events share its time
            self.scale_ups -= len({e["time_s"] for e in late if e["event"] == "start"})
            self.scale_downs -= len({e["time_s"] for e in late if e["event"] in _REMOVALS})

    def _serving_steps(self) -> tuple[np.ndarray, np.ndarray]:
        """The serving count as a step function over the run and past its end: change times
        (the first 0) and the count from each on. The spans' closing at the end of the run is
        no change: the fleet serves on as it was."""
        changes: dict[float, int] = {0.0: 0}
        for spans in self.served:
            for start, end in spans:
                changes[start] = changes.get(start, 0) + 1
                if end < self.end_s:
                    changes[end] = changes.get(end, 0) - 1
        times = np.array(sorted(changes), dtype=float)
        counts = np.cumsum([changes[t] for t in times])
        return times, np.asarray(counts, dtype=float)

    def _serving_seconds(self, at: np.ndarray) -> np.ndarray:
        """Replica-seconds served from 0 to each of the times ``at``."""
        times, counts = self._serving_steps()
        before = np.concatenate([[0.0], np.cumsum(counts[:-1] * np.diff(times))])
        step = np.searchsorted(times, at, side="right") - 1
        seconds: np.ndarray = before[step] + counts[step] * (at - times[step])
        return seconds

    def summary(self) -> dict[str, float | int]:
        """``gpu_hours``, ``cost_usd``, ``replicas_mean``, ``replicas_max``, ``scale_ups``,
        ``scale_downs`` (see the module docstring)."""
        gpu_hours = 0.0
        cost = 0.0
        for gpus, price, spans in zip(self.gpus, self.prices, self.held, strict=True):
            hours = sum(end - start for start, end in spans) * gpus / 3600.0
            gpu_hours += hours
            cost += hours * price
        if not self.autoscaled:  # exactly the count, not an integral's rounding
            mean = float(sum(1 for spans in self.served if spans))
            top = int(mean)
        else:  # a run that ended at 0 (nothing arrived): the fleet it started with
            times, counts = self._serving_steps()
            if self.end_s > 0:
                mean = float(self._serving_seconds(np.array([self.end_s]))[0] / self.end_s)
            else:
                mean = float(counts[0])
            top = int(counts[times <= self.end_s].max())
        return {
            "gpu_hours": gpu_hours,
            "cost_usd": cost,
            "replicas_mean": mean,
            "replicas_max": top,
            "scale_ups": self.scale_ups,
            "scale_downs": self.scale_downs,
        }

    def replicas_per_window(self, window_s: float, spans: np.ndarray) -> np.ndarray:
        """The time-average number of serving replicas in each timeseries window (``spans``:
        the seconds each covers, from ``window_s`` times its index; a window past the end of
        the run sees the fleet as it was at the end)."""
        if not self.autoscaled:
            return np.full(len(spans), float(sum(1 for s in self.served if s)))
        starts = np.arange(len(spans)) * window_s
        served = self._serving_seconds(starts + spans) - self._serving_seconds(starts)
        per_window: np.ndarray = served / spans
        return per_window

    def holding_per_window(self, window_s: float, spans: np.ndarray) -> np.ndarray:
        """Replica-seconds in each window of the replicas holding requests (serving or
        draining): what the timeseries' ``kv_utilization`` averages over."""
        return _seconds_per_window([*self.served, *self.drained], window_s, len(spans))

    def serve_windows(self, replica: int) -> list[tuple[float, float]]:
        """When ``replica`` served (received requests from the router)."""
        return [(start, end) for start, end in self.served[replica]]


def _seconds_per_window(
    spans: Sequence[Sequence[Sequence[float]]], window_s: float, windows: int
) -> np.ndarray:
    """Seconds of the ``[start, end]`` spans (per replica, a list of them) in each window."""
    flat = [span for replica_spans in spans for span in replica_spans]
    starts = np.array([start for start, _ in flat], dtype=np.float64)
    ends = np.array([end for _, end in flat], dtype=np.float64)
    _, cols, secs = window_pieces(starts, ends, window_s, windows)
    seconds: np.ndarray = np.bincount(cols, weights=secs, minlength=windows)
    return seconds


class Autoscaler:
    """The HPA-like control loop of an autoscaled cluster (see the module docstring).

    ``serving``: the list the dispatcher routes over (mutated in place, kept in replica order);
    ``routed``: how many requests the dispatcher has routed so far; ``done``: whether the run has
    nothing left to do (the loop then stops, so that a run without a horizon ends)."""

    def __init__(
        self,
        env: simpy.Environment,
        config: Autoscale,
        replicas: list[Replica],
        serving: list[Replica],
        routed: Callable[[], int],
        done: Callable[[], bool],
    ) -> None:
        self.env = env
        self.config = config
        self.replicas = replicas
        self.serving = serving
        self._routed = routed
        self._done = done
        first = config.start_replicas
        serving[:] = replicas[:first]
        self.log = FleetLog.of(replicas, first)
        pool = replicas[0].pool
        assert pool is not None
        self.ready_after_s = config.scale_up_delay_s + load_time_s(pool, config.weight_load_gbps)
        self.starting: list[Replica] = []
        self.draining: list[tuple[Replica, float]] = []  # (replica, when its drain began)
        self.off: list[Replica] = list(replicas[first:])
        self._last_event_s = -math.inf
        # the stabilization windows' history: the fleet at t = 0 is what the autoscaler,
        # running before the simulated span, last asked for
        self._fewest = WindowExtreme(config.scale_up_stabilization_s, largest=False)
        self._most = WindowExtreme(config.stabilization_s or 0.0, largest=True)
        for window in (self._fewest, self._most):
            window.add(0.0, first)
        self._last_routed = 0
        self._generation = [0] * len(replicas)
        self.closed = False

    def start(self) -> None:
        self.env.process(self._loop())

    def _loop(self) -> Generator[simpy.Event, Any, None]:
        interval = self.config.interval_s
        while True:
            yield self.env.timeout(interval)
            if self._done():
                return
            self.evaluate()

    # ------------------------------------------------------------------ the metric

    def metric(self) -> float:
        """The configured metric over the serving replicas now."""
        serving = self.serving
        kind = self.config.metric
        if kind == "queue":
            return sum(len(r.scheduler.waiting) for r in serving) / len(serving)
        if kind == "kv_utilization":
            return sum(_kv_fraction(r, self.env.now) for r in serving) / len(serving)
        routed = self._routed()
        recent, self._last_routed = routed - self._last_routed, routed
        return recent / self.config.interval_s / len(serving)

    # ------------------------------------------------------------------ one evaluation

    def evaluate(self) -> None:
        now = self.env.now
        self._release_drained(now)
        config = self.config
        current = len(self.serving) + len(self.starting)
        desired = desired_replicas(
            current, self.metric(), config.target, config.min_replicas, config.max_replicas
        )
        # stabilized_replicas, over the windows' extremes
        up, down = self._fewest.with_(now, desired), self._most.with_(now, desired)
        count = min(max(current, up), down)
        self._fewest.add(now, desired)
        self._most.add(now, desired)
        if count > current and self.off:
            self._scale_up(now, count - current)
        elif count < current and now - self._last_event_s >= config.cooldown_s:
            step = config.scale_down_step
            self._scale_down(now, current - count if step is None else min(step, current - count))

    def _event(self, now: float, event: str, replica: Replica) -> None:
        self.log.events.append(
            {"time_s": now, "event": event, "replica": replica.index, "serving": len(self.serving)}
        )

    def _scale_up(self, now: float, count: int) -> None:
        self._last_event_s = now
        self.log.scale_ups += 1
        for replica in self.off[:count]:
            self.starting.append(replica)
            self.log.held[replica.index].append([now, math.inf])
            self._event(now, "start", replica)
            generation = self._generation[replica.index]
            ready = self.env.timeout(self.ready_after_s)
            ready.callbacks.append(self._when_ready(replica, generation))
        del self.off[:count]

    def _when_ready(self, replica: Replica, generation: int) -> Callable[[simpy.Event], None]:
        return lambda _: self._ready(replica, generation)

    def _ready(self, replica: Replica, generation: int) -> None:
        """A started replica has loaded its weights: it serves from now (unless cancelled)."""
        if self.closed or self._generation[replica.index] != generation:
            return
        self.starting.remove(replica)
        indices = [r.index for r in self.serving]
        self.serving.insert(bisect.bisect(indices, replica.index), replica)
        self.log.served[replica.index].append([self.env.now, math.inf])
        self._event(self.env.now, "serve", replica)

    def _scale_down(self, now: float, count: int) -> None:
        self._last_event_s = now
        self.log.scale_downs += 1
        # starting replicas first, the latest started first
        while count and self.starting:
            replica = self.starting.pop()
            self._generation[replica.index] += 1
            self.log.held[replica.index][-1][1] = now
            self._return(replica)
            self._event(now, "cancel", replica)
            count -= 1
        if not count:
            return
        # the serving replicas with the least outstanding work (ties: the highest-numbered)
        order = sorted(self.serving, key=lambda r: (r.outstanding_tokens(), -r.index))
        for replica in order[:count]:
            self.serving.remove(replica)
            self.log.served[replica.index][-1][1] = now
            self.draining.append((replica, now))
            self.log.drained[replica.index].append([now, math.inf])
            self._event(now, "drain", replica)
        self._release_drained(now)

    def _return(self, replica: Replica) -> None:
        """``replica`` is off again: available to a later scale-up (lowest-numbered first)."""
        indices = [r.index for r in self.off]
        self.off.insert(bisect.bisect(indices, replica.index), replica)

    def _release_drained(self, now: float) -> None:
        """Release the draining replicas that have nothing left: at the end of their last
        iteration (or their drain decision, if later)."""
        still = []
        for replica, since in self.draining:
            if replica.busy or replica.inbound_tokens:
                still.append((replica, since))
                continue
            released = max(since, replica.step_end)
            self.log.held[replica.index][-1][1] = released
            self.log.drained[replica.index][-1][1] = released
            self._return(replica)
            self._event(released, "release", replica)
        self.draining = still

    def close(self) -> None:
        """The run is over: release what has drained (the rest is held to the end of the run)."""
        self._release_drained(self.env.now)
        self.closed = True


def _kv_fraction(replica: Replica, now: float) -> float:
    """Fraction of ``replica``'s KV blocks in use now, as a stepping replica would show it (mid
    decode run: the blocks of the iteration running)."""
    kv = replica.scheduler.kv
    if not kv.total_blocks:
        return 0.0
    run = replica.run
    if run is not None:
        row = bisect.bisect_right(run.starts, now) - 1
        if 0 <= row < len(run.kv_used):
            return run.kv_used[row] / kv.total_blocks
    return kv.used_blocks / kv.total_blocks


def windows_from_events(
    events: Sequence[Mapping[str, Any]], initial: int, replicas: int, end_s: float
) -> tuple[list[list[tuple[float, float]]], list[list[tuple[float, float]]]]:
    """Each replica's serve windows and held spans, rebuilt from a run's scale events
    (``run_info["scale_events"]``, in time order) given the replicas serving at first: what a
    reader of a result checks requests and iterations against. Spans still open end at
    ``end_s``."""
    served: list[list[list[float]]] = [
        [[0.0, end_s]] if i < initial else [] for i in range(replicas)
    ]
    held: list[list[list[float]]] = [[[0.0, end_s]] if i < initial else [] for i in range(replicas)]
    for event in events:
        at, kind, index = float(event["time_s"]), event["event"], int(event["replica"])
        if kind == "serve":
            served[index].append([at, end_s])
        elif kind == "drain":
            served[index][-1][1] = at
        elif kind == "start":
            held[index].append([at, end_s])
        elif kind in ("cancel", "release"):
            held[index][-1][1] = at
    as_tuples = [[(s[0], s[1]) for s in spans] for spans in served]
    return as_tuples, [[(s[0], s[1]) for s in spans] for spans in held]
