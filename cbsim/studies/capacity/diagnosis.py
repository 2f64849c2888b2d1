"""Why a capacity search's slowest load still fails its SLO, when the load is not the cause.

A search that fails even at 1/64 of its start rate used to say "SLO cannot be met even at
0.016 req/s" — blaming a rate — when a replayed trace's tail was one 123k-token prompt or a
burst of requests sent at the same instant (time-scaling a trace stretches its gaps but keeps
simultaneous arrivals simultaneous). :func:`diagnose` reads the failing run's worst requests:

* **huge prompts** — the worst TTFTs belong to prompts :data:`HUGE_PROMPT_FACTOR` × the median
  or more: prefill alone is slow, at any rate;
* **bursts** — many requests arrived within :data:`BURST_WINDOW_S` of the worst ones: they queue
  behind each other, at any average rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from cbsim.common.columns import equals

if TYPE_CHECKING:
    from cbsim.common.columns import Table

__all__ = ["BURST_WINDOW_S", "HUGE_PROMPT_FACTOR", "MIN_BURST", "diagnose"]

HUGE_PROMPT_FACTOR = 8.0
"""A prompt this many times the median (or more) is huge."""
BURST_WINDOW_S = 1.0
"""Arrivals this close before a request count as its burst."""
MIN_BURST = 5
"""Fewest requests in a window for a burst."""
TAIL_SHARE = 0.01
"""The worst share of requests by TTFT read (at least one)."""


def _tail(requests: Table) -> np.ndarray:
    """The rows of the finished requests with the worst TTFTs (the worst :data:`TAIL_SHARE`,
    at least one), worst first, ties in row order."""
    finished = np.flatnonzero(equals(requests, "status", "finished"))
    if not len(finished):
        return finished
    count = max(1, round(TAIL_SHARE * len(finished)))
    ttft = np.asarray(requests["ttft_s"], float)[finished]
    timed = ~np.isnan(ttft)
    order = np.argsort(-ttft[timed], kind="stable")[:count]
    tail: np.ndarray = finished[timed][order]
    return tail


def _huge_prompts(requests: Table, tail: np.ndarray) -> str | None:
    prompts = np.asarray(requests["prompt_tokens"])
    median = float(np.median(prompts.astype(float)))
    huge = tail[prompts[tail] >= HUGE_PROMPT_FACTOR * max(median, 1.0)]
    if not len(huge):
        return None
    worst = int(huge[0])
    return (
        f"{len(huge)} of the {len(tail)} slowest first tokens belong to huge prompts (request "
        f"{int(np.asarray(requests['request_id'])[worst])}: {int(prompts[worst]):,} tokens, TTFT "
        f"{float(np.asarray(requests['ttft_s'], float)[worst]):.3g} s; median prompt "
        f"{median:,.0f} tokens)"
    )


def _bursts(requests: Table, tail: np.ndarray) -> str | None:
    arrival = np.asarray(requests["arrival_s"], float)
    arrivals = np.sort(arrival)
    span = float(arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0
    mean_per_window = len(arrivals) * BURST_WINDOW_S / span if span > 0 else float(len(arrivals))
    times = arrival[tail]
    counts = np.searchsorted(arrivals, times, side="right") - np.searchsorted(
        arrivals, times - BURST_WINDOW_S, side="left"
    )
    largest = int(counts.max()) if len(counts) else 0
    if largest < max(MIN_BURST, 5 * mean_per_window):
        return None
    return (
        f"the slowest first tokens come in bursts: up to {largest} requests arrived within "
        f"{BURST_WINDOW_S:g} s (on average {mean_per_window:.2g} do)"
    )


def diagnose(requests: Table) -> str | None:
    """Why the worst TTFTs of a failing run do not come from the offered rate, in words; None
    when neither huge prompts nor bursts explain them. ``requests``: the run's requests frame
    or its columns."""
    if requests.empty or "ttft_s" not in requests:
        return None
    tail = _tail(requests)
    if not len(tail):
        return None
    causes = [c for c in (_huge_prompts(requests, tail), _bursts(requests, tail)) if c]
    if not causes:
        return None
    return "not the rate: " + "; ".join(causes)
