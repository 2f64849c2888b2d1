"""Arrival times of a renewal process: the open-loop clock of a synthetic workload.

Poisson arrivals have exponential gaps at the given rate; gamma arrivals have gamma gaps of the
same mean whose coefficient of variation ``cv`` sets how bursty they are (cv 1 is Poisson, above
1 burstier, below 1 more regular); an offline batch arrives all at once. Sessions start their
conversations on the same clock.
"""

from __future__ import annotations

import math

import numpy as np

from cbsim.schema.workload import GammaArrival, OfflineArrival, PoissonArrival


def _gaps(arrival: PoissonArrival | GammaArrival, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(arrival, PoissonArrival):
        return rng.exponential(1.0 / arrival.rate, n)
    shape = 1.0 / arrival.cv**2
    return rng.gamma(shape, 1.0 / (arrival.rate * shape), n)


def synthetic_arrivals(
    arrival: PoissonArrival | GammaArrival | OfflineArrival,
    num_requests: int | None,
    duration_s: float | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Arrival times of a renewal process, the first gap included, cut at a count and/or duration;
    all zeros for an offline batch."""
    if isinstance(arrival, OfflineArrival):
        assert num_requests is not None
        return np.zeros(num_requests)
    if num_requests is not None:
        times = np.cumsum(_gaps(arrival, num_requests, rng))
    else:
        assert duration_s is not None
        expected = arrival.rate * duration_s
        chunk = int(expected + 10 * math.sqrt(expected) + 16)
        times = np.cumsum(_gaps(arrival, chunk, rng))
        while times[-1] < duration_s:
            more = np.cumsum(_gaps(arrival, chunk, rng)) + times[-1]
            times = np.concatenate([times, more])
    if duration_s is not None:
        times = times[times <= duration_s]
    return times
