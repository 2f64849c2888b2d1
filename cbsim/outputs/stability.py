"""Is a run's queue stable? Offered load against served load, and the queue's trend.

A short run of an overloaded service can finish every request within its SLO simply because it
stopped sending before the queue grew long: 800 requests at 24 req/s on a service that serves
15.8 req/s show a fine TTFT p99 that 6,000 requests would not. So every run is checked:

* **offered vs served** — ``offered_rps`` is the arrival rate over the arrival span (first to
  last arrival; open-loop workloads only, a closed loop offers what it is served), ``served_rps``
  the completion rate while requests arrive: completions from one typical request's latency after
  the first arrival (the median end-to-end latency of the first quarter's requests) to the last
  arrival, over that stretch (the drain after the last arrival no longer dilutes it; a run too
  short for such a stretch, or a closed loop, takes the summary's ``throughput_rps``);
* **requests in the system** — arrived and not finished, waiting or running: a queue can hide
  inside the batch (every request admitted, each step slower), where no backlog shows. Its growth
  over the second half of the arrivals (``in_system_growth``), a quarter of it already there at
  three quarters of the arrivals and its mean over the last quarter of the arrivals at least half
  that over the second quarter's (a closing burst, or a Poisson stream's cluster, is not a trend);
* **backlog** — the requests that had arrived by the last arrival but were not yet admitted to a
  batch then (``backlog``; its share of the arrivals ``backlog_share``). A stable queue holds a
  few requests whatever the run's length; an overloaded one holds (offered − served) × time, so
  it already held most of that at three quarters of the arrival span (``backlog_3q``), where a
  trace's closing burst did not;
* **queue trend** — the growth of the timeseries' ``waiting`` over the second half of the arrival
  span (least-squares slope × that half's length, ``queue_growth``);
* **timeouts** — requests the client gave up on (``client.timeout_s``) are load not served;
* **latency growth** — the median end-to-end latency of the requests of the third and of the last
  quarter of the arrivals against the first quarter's (unfinished requests count as slower than
  any; both later quarters slower, so a closing burst is not a trend: ``latency_growth``), its
  pace per output token grown as much too (a replayed trace whose later requests ask for longer
  answers takes longer to answer them without any queue);
* **rejections** — a run that rejects every request (prompts beyond the context, or larger than a
  replica's cache) served nothing.

A batch handed over at one instant (an offline benchmark's, every request at time 0) has no
arrival stream to outrun and no trend through its arrivals: the requests waiting at its only
arrival are the batch itself. Only its timeouts and rejections can make it unstable.

The run is unstable (summary ``stable: false``) when the backlog (half of it already there at
three quarters of the arrivals) or the queue's growth reaches
:data:`BACKLOG_SHARE` of the arrivals (and at least :data:`MIN_BACKLOG` requests), or when more
than :data:`BACKLOG_SHARE` of the requests timed out, when the requests in the system grew
as much, when its latency grew :data:`LATENCY_GROWTH` times (and by :data:`LATENCY_GROWTH_S` at
least) through the arrivals, or when it rejected every request. ``stability`` says why in words. An
unstable run's SLO verdicts are never "met" (see :func:`slo_verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from cbsim.common.columns import equals

if TYPE_CHECKING:
    from cbsim.common.columns import Table
    from cbsim.schema.scenario import Scenario

__all__ = [
    "BACKLOG_SHARE",
    "MIN_BACKLOG",
    "STABILITY_KEYS",
    "is_unstable",
    "load_note",
    "slo_verdict",
    "stability_summary",
    "unstable_note",
    "with_stability",
]

BACKLOG_SHARE = 0.05
"""Share of the arrivals a backlog (or the queue's growth) must reach to make a run unstable."""
MIN_BACKLOG = 10
"""Fewest requests a backlog must hold to make a run unstable (a burst's few are no trend)."""
MIN_TREND_WINDOWS = 4
"""Fewest timeseries windows in the second half of the arrivals for the queue trend to count."""
LATENCY_GROWTH = 2.0
LATENCY_GROWTH_S = 1.0
"""How many times (and seconds) the last quarter's median latency must exceed the first's."""
MIN_STRETCH_SHARE = 0.25
"""Shortest stretch (of the arrival span) the served rate is read over; shorter: the run's."""

STABILITY_KEYS = (
    "stable",
    "stability",
    "offered_rps",
    "served_rps",
    "backlog",
    "backlog_share",
    "backlog_3q",
    "queue_growth",
    "in_system_growth",
    "latency_growth",
)
"""The summary keys :func:`stability_summary` adds."""


def _offered_rps(arrival: np.ndarray, closed_loop: bool) -> float:
    """Arrivals per second over the arrival span; NaN for a closed loop or a single instant."""
    if closed_loop or len(arrival) < 2:
        return math.nan
    span = float(arrival.max() - arrival.min())
    return (len(arrival) - 1) / span if span > 0 else math.nan


def _backlog(requests: Table, last: float) -> int:
    """Requests arrived by ``last`` and not admitted to a batch by then (never admitted: too)."""
    arrival = np.asarray(requests["arrival_s"], float)
    server = "server_arrival_s" if "server_arrival_s" in requests else "arrival_s"
    admitted = np.asarray(requests[server], float) + np.asarray(requests["queue_s"], float)
    rejected = equals(requests, "status", "rejected")
    waiting = (arrival <= last) & ~rejected & ~(admitted <= last)  # NaN admission: waiting
    return int(waiting.sum())


def _queue_growth(timeseries: Table, first: float, last: float) -> float:
    """Growth of the mean waiting queue over the second half of ``[first, last]``: the
    least-squares slope of ``waiting`` against window time times that half's length (NaN when
    the half holds fewer than :data:`MIN_TREND_WINDOWS` windows)."""
    if "waiting" not in timeseries or not len(timeseries):
        return math.nan
    t = np.asarray(timeseries["t_s"], float)
    span = np.asarray(timeseries["span_s"], float) if "span_s" in timeseries else None
    mid = (first + last) / 2
    ends = t + (span if span is not None else 0.0)
    inside = (t >= mid) & (ends <= last + 1e-9)
    if int(inside.sum()) < MIN_TREND_WINDOWS:
        return math.nan
    x, y = t[inside], np.asarray(timeseries["waiting"], float)[inside]
    if not np.isfinite(y).all():
        return math.nan
    slope = float(np.polyfit(x, y, 1)[0])
    return slope * (last - mid)


def _reasons(figures: Mapping[str, Any], arrivals: int, timed_out: int, requests: int) -> list[str]:
    """Why a run is unstable, in words (empty when it is stable)."""
    floor = max(MIN_BACKLOG, BACKLOG_SHARE * arrivals)
    reasons = []
    backlog = figures["backlog"]
    if backlog >= floor and figures["backlog_3q"] >= floor / 2:  # a growing queue, not a burst
        reasons.append(
            f"{backlog} of {arrivals} arrivals ({backlog / arrivals:.0%}) still waiting at the "
            f"last arrival ({figures['backlog_3q']} at three quarters of the arrivals)"
        )
    growth = figures["queue_growth"]
    if math.isfinite(growth) and growth >= floor:
        reasons.append(f"queue grew by {growth:.0f} requests over the second half of the arrivals")
    reasons += _failures(timed_out, requests)
    growth, by_3q = figures["in_system_growth"], figures["in_system_growth_3q"]
    trend = figures.get("in_system_trend", math.inf)
    if growth >= floor and by_3q >= growth / 4 and trend >= floor / 2:
        reasons.append(
            f"requests in the system (waiting or running) grew by {growth} over the second half "
            "of the arrivals"
        )
    first, later = figures["latency_first_s"], figures["latency_later_s"]
    pace = figures.get("pace_growth", math.inf)  # longer answers later are no queue
    grew = later >= LATENCY_GROWTH * first and later - first >= LATENCY_GROWTH_S
    if grew and not (math.isfinite(pace) and pace < LATENCY_GROWTH):
        late = "requests that did not finish" if math.isinf(later) else f"at least {later:.3g} s"
        reasons.append(
            f"latency grew through the run: median end-to-end {first:.3g} s for the first "
            f"quarter of the arrivals, {late} for the third and the last"
        )
    return reasons


def _failures(timed_out: int, requests: int) -> list[str]:
    """The load a run failed to serve whatever its arrivals' pattern: requests the client gave
    up on (at least :data:`BACKLOG_SHARE` of them, and :data:`MIN_BACKLOG`)."""
    if requests and timed_out >= max(MIN_BACKLOG, BACKLOG_SHARE * requests):
        return [f"{timed_out} of {requests} requests timed out"]
    return []


def _rates(figures: Mapping[str, Any]) -> str:
    """``offered X req/s, served Y req/s``; ``served Y req/s`` alone where no offered rate exists
    (a closed loop, or arrivals at a single instant: one request)."""
    offered, served = figures["offered_rps"], figures["served_rps"]
    served_text = f"served {served:.3g} req/s"
    return f"offered {offered:.3g} req/s, {served_text}" if math.isfinite(offered) else served_text


def stability_summary(
    requests: Table,
    timeseries: Table,
    scenario: Scenario,
    served_rps: float,
) -> dict[str, Any]:
    """The stability figures of a run (:data:`STABILITY_KEYS`), for its summary."""
    arrival = np.asarray(requests["arrival_s"], float)
    arrival = arrival[np.isfinite(arrival)]
    kind = getattr(scenario.workload.arrival, "kind", None)  # None: sessions, a trace
    closed_loop = kind == "closed_loop"
    figures: dict[str, Any] = {
        "offered_rps": _offered_rps(arrival, closed_loop),
        "served_rps": float(served_rps),
        "backlog": 0,
        "backlog_share": 0.0,
        "backlog_3q": 0,
        "queue_growth": math.nan,
    }
    first = float(arrival.min()) if len(arrival) else math.nan
    last = float(arrival.max()) if len(arrival) else math.nan
    # a batch handed over whole (every request at one instant, as an offline benchmark's): no
    # arrival stream to outrun, no trend through the arrivals, only the load it failed to serve
    at_once = len(arrival) > 1 and first == last
    if len(arrival) and not at_once:
        if not closed_loop:
            figures["backlog"] = _backlog(requests, last)
            figures["backlog_share"] = figures["backlog"] / len(arrival)
            figures["backlog_3q"] = _backlog(requests, first + 0.75 * (last - first))
        figures["queue_growth"] = _queue_growth(timeseries, first, last)
        if not closed_loop:
            figures["served_rps"] = _served_while_arriving(requests, first, last, served_rps)
    timed_out = int(equals(requests, "status", "timed_out").sum()) if len(requests) else 0
    if at_once:
        figures["in_system_growth"] = 0
        figures["latency_growth"] = math.nan
        reasons = _failures(timed_out, len(requests))
    else:
        kept = _kept_times(requests)
        growth, by_3q = _in_system_growth(requests, kept)
        figures["in_system_growth"] = growth
        trend = _in_system_trend(kept)
        first_q, later_q = _quarter_latencies(requests)
        figures["latency_growth"] = later_q / first_q if first_q > 0 else math.nan
        first_pace, later_pace = _quarter_latencies(requests, per_output_token=True)
        reasons = _reasons(
            {
                **figures,
                "in_system_growth_3q": by_3q,
                "in_system_trend": trend,
                "latency_first_s": first_q,
                "latency_later_s": later_q,
                "pace_growth": later_pace / first_pace if first_pace > 0 else math.nan,
            },
            len(arrival),
            timed_out,
            len(requests),
        )
    rejected = int(equals(requests, "status", "rejected").sum()) if len(requests) else 0
    if len(requests) and rejected == len(requests):
        reasons = [f"every one of the {rejected} requests was rejected"]
    verdict = "unstable: " + "; ".join(reasons) if reasons else "stable"
    if at_once and not reasons:
        verdict = f"stable: a batch, every request at {first:.3g} s (no arrival stream to outrun)"
    return {"stable": not reasons, "stability": f"{verdict} ({_rates(figures)})", **figures}


def _served_while_arriving(requests: Table, first: float, last: float, fallback: float) -> float:
    """Completions per second from one typical latency after the first arrival to the last
    arrival (see the module docstring); ``fallback`` where that stretch is too short."""
    done = equals(requests, "status", "finished")
    arrival = np.asarray(requests["arrival_s"], float)
    e2e = np.asarray(requests["e2e_s"], float)
    early = done & (arrival <= first + 0.25 * (last - first)) & np.isfinite(e2e)
    if not early.any():
        return 0.0 if not done.any() else fallback
    start = first + float(np.median(e2e[early]))
    if last - start < MIN_STRETCH_SHARE * (last - first):
        return fallback
    finish = np.asarray(requests["finish_s"], float)
    served = int((done & (finish >= start) & (finish <= last)).sum())
    return served / (last - start)


def _kept_times(requests: Table) -> tuple[np.ndarray, np.ndarray]:
    """Arrival and finish times of the requests that stay in the system until they finish
    (rejected ones aside, and those the client gave up on: they left the system at their
    timeout, not at the end of the run): two columns, never a copy of the table (a million
    requests' table is some 200 MiB)."""
    kept = ~(equals(requests, "status", "rejected") | equals(requests, "status", "timed_out"))
    arrival = np.asarray(requests["arrival_s"], float)[kept]
    return arrival, np.asarray(requests["finish_s"], float)[kept]


def _in_system(arrival: np.ndarray, finish: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Requests (those of :func:`_kept_times`, their ``arrival`` and ``finish`` times) arrived by
    each of ``times`` and not finished by then. A request finishes after it arrives, so the
    count is arrivals less finishes."""
    arrivals = np.sort(arrival[np.isfinite(arrival)])
    finishes = np.sort(finish[np.isfinite(finish)])
    arrived = np.searchsorted(arrivals, times, side="right")
    finished = np.searchsorted(finishes, times, side="right")
    counts: np.ndarray = arrived - finished
    return counts


def _in_system_growth(requests: Table, kept: tuple[np.ndarray, np.ndarray]) -> tuple[int, int]:
    """Growth of the requests in the system (``kept``: :func:`_kept_times`) over the second half
    of the arrivals, and over its first half (to three quarters of the arrivals)."""
    arrival = np.asarray(requests["arrival_s"], float)
    arrival = arrival[np.isfinite(arrival)]
    if len(arrival) < 2:
        return 0, 0
    first, last = float(arrival.min()), float(arrival.max())
    mid, q3 = first + 0.5 * (last - first), first + 0.75 * (last - first)
    times = np.array([mid, q3, last])
    at_mid, at_q3, at_last = _in_system(*kept, times).tolist()
    return at_last - at_mid, at_q3 - at_mid


TREND_SAMPLES = 64
"""Times per quarter of the arrival span at which the requests in the system are counted for
their trend."""


def _in_system_trend(kept: tuple[np.ndarray, np.ndarray]) -> float:
    """The mean count of requests in the system over the last quarter of the arrival span less
    its mean over the second quarter: about the growth over the second half where the system
    fills at a steady pace, near nothing where a burst at one instant made the count jump (a
    Poisson stream's clusters come and go; a queue that grows keeps growing). ``kept``: the
    arrival and finish times of :func:`_kept_times`."""
    arrival, finish = kept
    arrived = arrival[np.isfinite(arrival)]
    if len(arrived) < 2:
        return 0.0
    first, span = float(arrived.min()), float(arrived.max() - arrived.min())
    # the second quarter's samples, then the last quarter's, counted at once
    fractions = np.concatenate(
        [np.linspace(0.25, 0.5, TREND_SAMPLES), np.linspace(0.75, 1.0, TREND_SAMPLES)]
    )
    counts = _in_system(arrival, finish, first + span * fractions)
    second, last = counts[:TREND_SAMPLES], counts[TREND_SAMPLES:]
    return float(np.mean(last)) - float(np.mean(second))


def _quarter_latencies(requests: Table, per_output_token: bool = False) -> tuple[float, float]:
    """Median end-to-end latency of the requests of the first quarter of the arrivals, and the
    smaller of the third and the last quarter's (admitted requests; those not finished count as
    infinitely slow); NaN without enough requests. ``per_output_token``: each request's latency
    over its output tokens, so that a trace whose later requests ask for longer answers does not
    read as a queue growing."""
    if not len(requests) or (per_output_token and "output_tokens" not in requests):
        return math.nan, math.nan
    admitted = ~equals(requests, "status", "rejected")  # the columns it reads, not the table
    arrival = np.asarray(requests["arrival_s"], float)[admitted]
    if len(arrival) < 4 * MIN_BACKLOG:
        return math.nan, math.nan
    e2e = np.asarray(requests["e2e_s"], float)[admitted]
    e2e = np.where(equals(requests, "status", "finished")[admitted], e2e, math.inf)
    e2e = np.where(np.isnan(e2e), math.inf, e2e)
    if per_output_token:
        outputs = np.asarray(requests["output_tokens"], float)[admitted]
        e2e = e2e / np.maximum(outputs, 1.0)
    q1, q2, q3 = np.quantile(arrival, [0.25, 0.5, 0.75])
    third = _median(e2e[(arrival >= q2) & (arrival < q3)])
    last = _median(e2e[arrival >= q3])
    later = last if math.isnan(third) else min(third, last)
    return _median(e2e[arrival <= q1]), later


def _median(values: np.ndarray) -> float:
    """The median of ``values``; NaN for none (arrivals tied at a quarter's bounds can leave
    the third quarter empty: its requests all arrived with the last quarter's first)."""
    return float(np.median(values)) if len(values) else math.nan


def is_unstable(summary: Mapping[Any, Any]) -> bool:
    """Whether a summary says its run was unstable (summaries from before the check: never)."""
    return summary.get("stable") is False or summary.get("stable") == 0


def unstable_note(summary: Mapping[Any, Any]) -> str:
    """``unstable: offered X req/s, served Y`` for a verdict's cell (empty when stable)."""
    if not is_unstable(summary):
        return ""
    note = load_note(summary)
    return f"unstable: {note}" if note else "unstable"


def load_note(summary: Mapping[Any, Any]) -> str:
    """``offered X req/s, served Y`` of a run (``served Y`` alone for a closed loop)."""
    offered = summary.get("offered_rps")
    served = summary.get("served_rps", summary.get("throughput_rps"))
    parts = []
    if isinstance(offered, int | float) and math.isfinite(offered):
        parts.append(f"offered {offered:.3g} req/s")
    if isinstance(served, int | float) and math.isfinite(served):
        parts.append(f"served {served:.3g}")
    return ", ".join(parts)


def slo_verdict(met: bool, summary: Mapping[Any, Any]) -> str:
    """``met``/``missed``, but never ``met`` for an unstable run: ``not met (unstable: ...)``."""
    if met and is_unstable(summary):
        return f"not met ({unstable_note(summary)})"
    return "met" if met else "missed"


def with_stability(
    summary: dict[str, Any], requests: Table, timeseries: Table, scenario: Scenario
) -> dict[str, Any]:
    """``summary`` with :func:`stability_summary`'s keys added (served: its ``throughput_rps``)."""
    served = float(summary.get("throughput_rps", math.nan))
    summary.update(stability_summary(requests, timeseries, scenario, served))
    return summary
