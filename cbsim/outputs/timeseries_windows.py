"""Timeseries windows: the run cut into fixed windows of time, and what happened in each.

An iteration belongs to the window its start falls in. ``waiting`` and ``kv_utilization`` are time
averages over the window (cluster-wide sum of waiting requests; mean KV utilisation over
replicas), ``batch_size`` the mean batch size of the iterations run. ``span_s`` is the time a
window covers: its width, except the last window, which ends with the run; rates
(``output_tokens_per_s``) and time averages are over that span, so the last window reads what
happened in it, not a false drop from dividing part of a window by all of it. ``prefix_hit_rate``
is the prompt tokens reused from the prefix cache over the prompt tokens of the requests first
admitted in the window (NaN when none was). Disaggregated runs add ``kv_transfers`` (prompts whose
KV reached a decode instance in the window), ``kv_transfer_s`` (their mean transfer time) and
``kv_wait_s`` (their mean wait from prefill end to transfer start). ``replicas`` is the
time-average number of replicas serving (receiving requests from the router) in the window: a
fixed fleet's count throughout; autoscaled (:mod:`cbsim.engine.autoscale`), what the autoscaler had
serving, and ``kv_utilization`` is then the mean over the replicas holding requests (serving or
draining) for the time they did.

The per-window sums over the iterations (:class:`WindowSums`) are added up a chunk of rows at a
time, so that a streamed run, whose iterations are not held, gets them too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

import numpy as np

from cbsim.common.columns import ColumnTable
from cbsim.common.errors import CbsimError
from cbsim.common.limits import WINDOWS
from cbsim.outputs.metric_columns import CHUNK_ROWS

if TYPE_CHECKING:
    import pandas as pd

    from cbsim.common.columns import Coded, Table


class FleetWindows(Protocol):
    """What the windows need of a run's fleet log (:class:`cbsim.engine.autoscale.FleetLog`): whether it
    was autoscaled, and its serving replicas and its replica-seconds holding requests per window."""

    @property
    def autoscaled(self) -> bool: ...

    def replicas_per_window(self, window_s: float, spans: np.ndarray) -> np.ndarray: ...

    def holding_per_window(self, window_s: float, spans: np.ndarray) -> np.ndarray: ...


# per-window sums of the timeseries: integrated over time, or summed by the window an iteration
# starts or ends in (name -> iteration column)
_INTEGRANDS = ("busy", "batch", "kv_frac", "k_weight", "waiting")
_AT_START = {"drafted": "drafted_tokens", "accepted": "accepted_tokens"}
_AT_END = {"emitted": "emitted_tokens"}
# the iteration columns the timeseries reads
_WINDOW_COLUMNS = (
    "start_s", "duration_s", "batch_size", "kv_blocks_used", "kv_blocks_total", "mean_k",
    "waiting", "drafted_tokens", "accepted_tokens", "emitted_tokens",
)  # fmt: skip


def _integrands(columns: Mapping[str, np.ndarray], rows: slice) -> dict[str, np.ndarray]:
    """The values integrated over time, as floats, at some rows."""

    def column(name: str) -> np.ndarray:
        values: np.ndarray = columns[name][rows].astype(float)
        return values

    kv_used, kv_total = column("kv_blocks_used"), column("kv_blocks_total")
    return {
        "busy": np.ones(len(columns["start_s"][rows])),
        "batch": column("batch_size"),
        "kv_frac": kv_used / np.maximum(kv_total, 1.0),
        "k_weight": column("mean_k"),
        "waiting": column("waiting"),
    }


class WindowSums:
    """Per-window sums of per-iteration values for the timeseries, fed the iterations a chunk at a
    time (:meth:`add`) and read once the number of windows is known (:meth:`result`).

    Values are added to their windows with ``np.add.at`` in row order: the same additions, in the
    same order, as one ``np.bincount`` over every row (so the same floats), without temporaries
    the length of the run; the windows grow as later rows reach them. An integral splits each
    iteration's duration across the windows it overlaps: most lie within one; the few that do not
    are kept aside and split exactly at the end, added apart (as before chunking)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        names = (*_INTEGRANDS, *_AT_START, *_AT_END)
        self.sums: dict[str, np.ndarray] = {name: np.zeros(0) for name in names}
        self.max_end_s: float | None = None  # the latest iteration end (None: no iterations)
        self._crossing: list[dict[str, np.ndarray]] = []  # start, duration and integrands

    @classmethod
    def of(cls, iterations: Table, window_s: float) -> WindowSums:
        """The sums over a whole iterations frame (or its columns)."""
        sums = cls(window_s)
        sums.add({name: np.asarray(iterations[name]) for name in _WINDOW_COLUMNS})
        return sums

    def _bins(self, times: np.ndarray) -> np.ndarray:
        return (times // self.window_s).astype(np.int64)

    def add(self, columns: Mapping[str, np.ndarray]) -> None:
        """Add iteration rows (the columns of :data:`_WINDOW_COLUMNS`, later rows than any
        added before) a chunk of :data:`CHUNK_ROWS` at a time."""
        for begin in range(0, len(columns["start_s"]), CHUNK_ROWS):
            self._add_chunk(columns, slice(begin, begin + CHUNK_ROWS))

    def _add_chunk(self, columns: Mapping[str, np.ndarray], rows: slice) -> None:
        start = np.asarray(columns["start_s"][rows], dtype=float)
        duration = np.asarray(columns["duration_s"][rows], dtype=float)
        end = start + duration
        latest = float(end.max())
        _window_count(latest, self.window_s)  # beyond the limit: an error before allocating
        first, last = self._bins(start), self._bins(end)
        self._grow(int(last.max()) + 1)
        self.max_end_s = latest if self.max_end_s is None else max(self.max_end_s, latest)
        sums = self.sums
        inside = first == last
        integrands = _integrands(columns, rows)
        for name, values in integrands.items():
            np.add.at(sums[name], first[inside], values[inside] * duration[inside])
        for name, column in _AT_START.items():
            np.add.at(sums[name], first, columns[column][rows].astype(float))
        for name, column in _AT_END.items():
            np.add.at(sums[name], last, columns[column][rows].astype(float))
        crossing = ~inside
        if crossing.any():
            kept = {"start": start[crossing], "duration": duration[crossing]}
            self._crossing.append(kept | {k: v[crossing] for k, v in integrands.items()})

    def _grow(self, windows: int) -> None:
        for name, values in self.sums.items():
            if len(values) < windows:
                self.sums[name] = np.concatenate([values, np.zeros(windows - len(values))])

    def result(self, windows: int) -> dict[str, np.ndarray]:
        """The sums over ``windows`` windows (at least as many as the rows reached)."""
        out = {name: _fit(values, windows) for name, values in self.sums.items()}
        if not self._crossing:
            return out
        crossing = {
            key: np.concatenate([part[key] for part in self._crossing]) for key in self._crossing[0]
        }
        pieces, cols, secs = window_pieces(
            crossing["start"], crossing["start"] + crossing["duration"], self.window_s, windows
        )
        for name in _INTEGRANDS:  # added apart, as before chunking
            out[name] = out[name] + np.bincount(
                cols, weights=crossing[name][pieces] * secs, minlength=windows
            )
        return out


def _fit(values: np.ndarray, windows: int) -> np.ndarray:
    """Per-window sums over exactly ``windows`` windows: zeros after those reached; a window past
    the last (where floor division rounded an end up) folded into the last."""
    if len(values) <= windows:
        return np.concatenate([values, np.zeros(windows - len(values))])
    fitted = values[:windows].copy()
    fitted[-1] += values[windows:].sum()
    return fitted


def window_pieces(
    start: np.ndarray, end: np.ndarray, window_s: float, windows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(span, window, seconds in it) of the spans ``[start, end]`` cut at window edges, the
    last window taking everything past it (iterations spanning several windows; replicas'
    serving spans)."""
    first = np.minimum((start // window_s).astype(np.int64), windows - 1)
    last = np.minimum((end // window_s).astype(np.int64), windows - 1)
    pieces: list[tuple[int, int, float]] = []
    for i in range(len(start)):
        for w in range(int(first[i]), int(last[i]) + 1):
            lo = max(float(start[i]), w * window_s)
            hi = min(float(end[i]), (w + 1) * window_s) if w < windows - 1 else float(end[i])
            if hi > lo:
                pieces.append((i, w, hi - lo))
    rows = np.array([p[0] for p in pieces], dtype=np.int64)
    cols = np.array([p[1] for p in pieces], dtype=np.int64)
    secs = np.array([p[2] for p in pieces], dtype=np.float64)
    return rows, cols, secs


def _window_count(end_s: float, window_s: float) -> int:
    """Windows covering ``[0, end_s]``; more than the limit is an error (before allocating)."""
    windows = end_s / window_s + 1
    if not WINDOWS.contains(windows):
        raise CbsimError(
            f"the run lasted {end_s:.6g} s: {windows:.3g} windows of {window_s:g} s; the "
            f"timeseries {WINDOWS.violation(windows)}: raise the window",
            field="output.timeseries_window_s",
        )
    return int(end_s // window_s) + 1


def timeseries(
    requests: Table,
    iterations: Table,
    window_s: float,
    replicas: int,
    sums: WindowSums | None = None,
    fleet: FleetWindows | None = None,
) -> pd.DataFrame:
    """Fixed-window aggregates over the run, as a DataFrame (see :func:`timeseries_columns`)."""
    return timeseries_columns(requests, iterations, window_s, replicas, sums, fleet).frame()


def timeseries_columns(
    requests: Table,
    iterations: Table,
    window_s: float,
    replicas: int,
    sums: WindowSums | None = None,
    fleet: FleetWindows | None = None,
) -> ColumnTable:
    """Fixed-window aggregates over the run (see the module docstring for definitions).

    ``sums``: the iterations' :class:`WindowSums` when they are not held (streaming); ``fleet``:
    what the replicas did (autoscaled: when each served), None for a fixed fleet of
    ``replicas``."""
    if sums is None:
        sums = WindowSums.of(iterations, window_s)
    ends = [0.0]
    if sums.max_end_s is not None:
        ends.append(sums.max_end_s)
    if len(requests):
        ends.append(float(np.asarray(requests["arrival_s"]).max()))
    windows = _window_count(max(ends), window_s)
    span = _window_spans(max(ends), window_s, windows)

    def total(times: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        bins = np.minimum((times // window_s).astype(np.int64), windows - 1)
        return np.bincount(bins, weights=weights, minlength=windows)[:windows]

    by_window = sums.result(windows)
    busy, drafted, accepted = by_window["busy"], by_window["drafted"], by_window["accepted"]
    finished = np.asarray(requests["finish_s"], float)
    finished = finished[~np.isnan(finished)]
    # prefix caching: prompt tokens reused / prompt tokens of the requests first admitted in a
    # window
    reused = prompted = np.zeros(windows)
    if all(name in requests for name in ("server_arrival_s", "queue_s", "cached_tokens")):
        admitted = np.asarray(requests["server_arrival_s"], float) + np.asarray(
            requests["queue_s"], float
        )
        seen = ~np.isnan(admitted)
        reused = total(admitted[seen], np.asarray(requests["cached_tokens"], float)[seen])
        prompted = total(admitted[seen], np.asarray(requests["prompt_tokens"], float)[seen])
    autoscaled = fleet is not None and fleet.autoscaled
    if fleet is not None:
        serving = fleet.replicas_per_window(window_s, span)
    else:
        serving = np.full(windows, float(replicas))
    replica_seconds = span * replicas
    if autoscaled:
        assert fleet is not None
        replica_seconds = fleet.holding_per_window(window_s, span)
    with np.errstate(invalid="ignore", divide="ignore"):
        columns: dict[str, np.ndarray | Coded] = {
            "t_s": np.arange(windows) * window_s,
            "output_tokens_per_s": by_window["emitted"] / span,
            "requests_completed": total(finished).astype(np.int64),
            "arrivals": total(np.asarray(requests["arrival_s"], float)).astype(np.int64),
            "waiting": by_window["waiting"] / span,
            "kv_utilization": by_window["kv_frac"] / replica_seconds
            if not autoscaled
            else np.where(replica_seconds > 0, by_window["kv_frac"] / replica_seconds, 0.0),
            "batch_size": np.where(busy > 0, by_window["batch"] / busy, 0.0),
            "mean_k": np.where(busy > 0, by_window["k_weight"] / busy, 0.0),
            "acceptance_rate": np.where(drafted > 0, accepted / drafted, np.nan),
            "prefix_hit_rate": np.where(prompted > 0, reused / prompted, np.nan),
            "span_s": span,
            "replicas": serving,
        }
    arrived = np.asarray(requests["kv_arrived_s"], float) if "kv_arrived_s" in requests else None
    if arrived is not None and not np.isnan(arrived).all():  # disaggregated
        crossed = ~np.isnan(arrived)
        count = total(arrived[crossed])
        seconds = total(arrived[crossed], np.asarray(requests["kv_transfer_s"], float)[crossed])
        waited = total(arrived[crossed], np.asarray(requests["kv_wait_s"], float)[crossed])
        with np.errstate(invalid="ignore", divide="ignore"):
            columns["kv_transfers"] = count.astype(np.int64)
            columns["kv_transfer_s"] = np.where(count > 0, seconds / count, np.nan)
            columns["kv_wait_s"] = np.where(count > 0, waited / count, np.nan)
    return ColumnTable(columns, windows)


def _window_spans(end_s: float, window_s: float, windows: int) -> np.ndarray:
    """Seconds of the run each window covers: ``window_s``, but the last window only up to the
    run's end ``end_s`` (a whole window when the run ends on its start, as an empty run does)."""
    span = np.full(windows, window_s)
    last = min(window_s, end_s - (windows - 1) * window_s)
    if last > 0:
        span[-1] = last
    return span
