"""Arrival times of a renewal process: the open-loop clock of a synthetic workload.

Poisson arrivals have exponential gaps at the given rate; gamma arrivals have gamma gaps of the
same mean whose coefficient of variation ``cv`` sets how bursty they are (cv 1 is Poisson, above
1 burstier, below 1 more regular); an offline batch arrives all at once. Sessions start their
conversations on the same clock. A rate curve (a day of traffic) is a non-homogeneous Poisson
process whose rate is piecewise linear in time (:func:`rate_curve_arrivals`). A staged load's
stages each send on their own clock from their start (:func:`stage_offsets`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cbsim.common.errors import CbsimError
from cbsim.schema.workload import (
    GammaArrival,
    OfflineArrival,
    PoissonArrival,
    RateCurveArrival,
    StagesArrival,
    curve_problem,
)


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


def stage_offsets(arrival: StagesArrival, rng: np.random.Generator) -> list[np.ndarray]:
    """Each stage's send times from its start: Poisson (exponential gaps, the first included) or
    constant (every 1/rate seconds from 0), within its duration (the end excluded)."""
    offsets = []
    for stage in arrival.stages:
        rate, duration = stage.rate, stage.duration_s
        if arrival.process_of(stage) == "constant":
            times = np.arange(math.ceil(rate * duration)) / rate
        else:
            expected = rate * duration
            chunk = int(expected + 10 * math.sqrt(expected) + 16)
            times = np.cumsum(rng.exponential(1.0 / rate, chunk))
            while times[-1] < duration:
                more = np.cumsum(rng.exponential(1.0 / rate, chunk)) + times[-1]
                times = np.concatenate([times, more])
        offsets.append(times[times < duration])
    return offsets


# --------------------------------------------------------------------------- rate curves


@dataclass(frozen=True)
class RateCurve:
    """A piecewise-linear rate (requests per second) between ``times_s``, starting at time 0, and
    its integral ``cumulative`` (expected arrivals) at each point."""

    times_s: np.ndarray
    rates: np.ndarray
    cumulative: np.ndarray

    @classmethod
    def of(cls, times_s: np.ndarray, rates: np.ndarray, end_s: float | None = None) -> RateCurve:
        """The curve through the points, flat at the first rate from 0 to the first point, cut at
        ``end_s`` when that comes before the last point."""
        times = np.asarray(times_s, dtype=np.float64)
        values = np.asarray(rates, dtype=np.float64)
        if times[0] > 0:
            times, values = np.concatenate([[0.0], times]), np.concatenate([values[:1], values])
        if end_s is not None and end_s < times[-1]:
            keep = times < end_s
            end_rate = float(np.interp(end_s, times, values))
            times = np.concatenate([times[keep], [end_s]])
            values = np.concatenate([values[keep], [end_rate]])
        areas = np.diff(times) * (values[:-1] + values[1:]) / 2
        return cls(times, values, np.concatenate([[0.0], np.cumsum(areas)]))

    @property
    def end_s(self) -> float:
        """When arrivals end."""
        return float(self.times_s[-1])

    @property
    def expected(self) -> float:
        """Expected arrivals over the whole curve: the rate's integral."""
        return float(self.cumulative[-1])

    def integral(self, t: np.ndarray | float) -> np.ndarray:
        """Expected arrivals from 0 to ``t`` (within the curve)."""
        t = np.asarray(t, dtype=np.float64)
        i = np.clip(np.searchsorted(self.times_s, t, side="right") - 1, 0, len(self.times_s) - 2)
        s = t - self.times_s[i]
        slope = (self.rates[i + 1] - self.rates[i]) / np.diff(self.times_s)[i]
        return np.asarray(self.cumulative[i] + self.rates[i] * s + 0.5 * slope * s * s)

    def inverse(self, u: np.ndarray) -> np.ndarray:
        """The times at which ``u`` arrivals are expected (``u`` below :attr:`expected`): the
        root of a quadratic within the segment holding each, in a form stable for every slope."""
        i = np.searchsorted(self.cumulative, u, side="right") - 1
        i = np.clip(i, 0, len(self.times_s) - 2)
        d = u - self.cumulative[i]
        r0 = self.rates[i]
        slope = (self.rates[i + 1] - r0) / np.diff(self.times_s)[i]
        root = np.sqrt(np.maximum(r0 * r0 + 2.0 * slope * d, 0.0))
        denominator = r0 + root
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(denominator > 0, 2.0 * d / denominator, 0.0)
        return np.asarray(np.minimum(self.times_s[i] + s, self.times_s[i + 1]))


def rate_curve_arrivals(
    curve: RateCurve, num_requests: int | None, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times of a non-homogeneous Poisson process with the curve's rate, exactly: a
    unit-rate Poisson process's times (cumulated exponential gaps) are expected-arrival counts,
    mapped to time through the inverse of the integrated rate; cut at the curve's end and at
    ``num_requests``. A longer curve or a larger count extends the same draws."""
    total = curve.expected
    limit = num_requests if num_requests is not None else math.inf
    chunk = int(min(total, limit) + 10 * math.sqrt(min(total, limit)) + 16)
    units = np.cumsum(rng.exponential(1.0, chunk))
    while units[-1] < total and len(units) < limit:
        units = np.concatenate([units, units[-1] + np.cumsum(rng.exponential(1.0, chunk))])
    units = units[units < total]
    if num_requests is not None:
        units = units[:num_requests]
    return curve.inverse(units)


def load_rate_curve_csv(path: str, source: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The (t_s, rate) points of a rate-curve CSV file (a header with ``t_s`` and ``rate``),
    checked as the YAML points are; problems name the file and the row."""
    import pandas as pd  # only for a rate curve from a file

    field = "workload.arrival.csv"
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise CbsimError(
            f"rate curve file {path!r} not found", source=source, field=field
        ) from None
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise CbsimError(
            f"cannot read rate curve {path!r}: {err}", source=source, field=field
        ) from None
    missing = [c for c in ("t_s", "rate") if c not in frame.columns]
    if missing:
        raise CbsimError(
            f"rate curve {path!r} lacks column(s) {', '.join(missing)} (it needs t_s,rate)",
            source=source,
            field=field,
        )
    try:
        times = frame["t_s"].to_numpy(dtype=np.float64)
        rates = frame["rate"].to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise CbsimError(
            f"rate curve {path!r}: t_s and rate must be numbers", source=source, field=field
        ) from None
    bad = np.flatnonzero(~(np.isfinite(times) & np.isfinite(rates)))
    problem: tuple[int | None, str] | None
    if len(bad):
        problem = int(bad[0]), "t_s and rate must be finite numbers"
    else:
        problem = curve_problem(times.tolist(), rates.tolist())
    if problem is not None:
        index, why = problem
        where = f"{path} row {index + 2}" if index is not None else path  # header is line 1
        raise CbsimError(f"rate curve {where}: {why}", source=source, field=field)
    return times, rates


def rate_curve(
    arrival: RateCurveArrival, duration_s: float | None, source: str | None
) -> RateCurve:
    """The arrival's rate curve (its points, or its CSV file read), cut at ``duration_s``."""
    if arrival.points is not None:
        points = np.asarray(arrival.points, dtype=np.float64)
        times, rates = points[:, 0], points[:, 1]
    else:
        assert arrival.csv is not None
        times, rates = load_rate_curve_csv(arrival.csv, source)
    return RateCurve.of(times, rates, duration_s)
