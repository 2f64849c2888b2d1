"""Metrics: what a run records as it runs, and the tables it hands over at the end.

The :class:`Recorder` appends one row per iteration into typed column arrays (cheap enough to do on
every iteration) and, at the end, hands over the requests (from a
:class:`~cbsim.workload.request_table.RequestTable`) and iterations as column tables
(:class:`~cbsim.common.columns.ColumnTable`: ``request_columns``, ``iteration_columns``; their
columns: :mod:`cbsim.outputs.metric_columns`), whose DataFrames ``requests`` and ``iterations``
are built when first read. What is made of them lives beside it: the inter-token latency
(:mod:`cbsim.outputs.itl`), the summary's key figures (:mod:`cbsim.outputs.summary`) and the timeseries
(:mod:`cbsim.outputs.timeseries_windows`); their names are importable from here too. The request times are
what a *client* measures: arrival is when the client sent the request, first token and finish when
the front end delivered them (:class:`~cbsim.cost.engine_profile.Frontend`). The engine's own view
is kept beside them as ``server_arrival_s``, ``server_first_token_s``, ``server_finish_s`` and
``server_ttft_s``, ``server_tpot_s``, ``server_e2e_s``; with no front-end terms (``engine: none``)
both agree.

Streaming (:meth:`Recorder.stream`, ``simulate(..., stream_to=PATH)``): instead of holding every
iteration row until the end, the recorder writes its iteration columns to a parquet file, one row
group each time it holds :data:`STREAM_ROWS` rows (after a whole decode run, so a group may be a
little larger), and keeps of every row only what the end needs: its delivery time (the iteration's
end, or the front end's delivery), its count of tokens one step after their previous one, and with
several replicas its replica (12 or 20 bytes a row), from which the inter-token latency and the
requests' client times are computed exactly as for a held run. The timeseries' per-window sums
(:class:`~cbsim.outputs.timeseries_windows.WindowSums`) and the summary's iteration figures
(:class:`~cbsim.outputs.summary.IterationTotals`) are added up a row group at a time. So the requests
frame and every summary figure equal the held run's, except ``draft_time_s``, ``target_time_s``
and ``busy_fraction``: sums of per-row seconds, added group by group, they may differ by float
rounding. With one replica the timeseries is equal bit for bit
(the same additions in the same order) and the file holds exactly the held ``iterations`` frame.
With several, the held frame is sorted by (start, replica) as a whole, a streamed file only within
each row group (sorting the file by ``start_s``, then ``replica``, stably, gives the held frame),
and the timeseries, whose sums follow the row order, may differ by float rounding.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cbsim.common.columns import ColumnTable
from cbsim.memory.kvcache import KVCache
from cbsim.outputs.iteration_stream import IterationStream
from cbsim.outputs.itl import inter_token_latency, weighted_percentile
from cbsim.outputs.itl_chunk import token_and_chunk_latency
from cbsim.outputs.metric_columns import (
    CHUNK_ROWS,
    ITERATION_COLUMNS,
    PERCENTILES,
    REQUEST_COLUMNS,
    TIMESERIES_COLUMNS,
)
from cbsim.outputs.summary import (
    STAGE_FIGURES,
    IterationTotals,
    meets_slo,
    prefix_hit_rates,
    stage_summary,
    summarize,
)
from cbsim.outputs.timeseries_windows import WindowSums, timeseries
from cbsim.schema.scenario import Scenario
from cbsim.workload.request import Request
from cbsim.workload.request_table import RequestTable

if TYPE_CHECKING:
    import pandas as pd

    from cbsim.engine.autoscale import FleetLog
    from cbsim.engine.decode_plan import DecodeRun
    from cbsim.engine.scheduler.base import Batch

__all__ = [
    "CHUNK_ROWS",
    "ITERATION_COLUMNS",
    "PERCENTILES",
    "REQUEST_COLUMNS",
    "STAGE_FIGURES",
    "STREAM_ROWS",
    "TIMESERIES_COLUMNS",
    "IterationStream",
    "IterationTotals",
    "Recorder",
    "WindowSums",
    "inter_token_latency",
    "meets_slo",
    "prefix_hit_rates",
    "requests_frame",
    "stage_summary",
    "summarize",
    "timeseries",
    "weighted_percentile",
]

STREAM_ROWS = 1 << 17
"""Iteration rows a streaming recorder holds before it writes them as one parquet row group (a
decode run's rows are written together, so a group may be a little larger). The parquet writer
buffers a group's encoded columns, about its raw size (131,072 rows × 18 columns: 18 MiB), so
larger groups cost memory for no gain. A module constant that tests may lower."""

# iteration columns that are the same for every row, unless the run speculates
_CONSTANT_UNLESS_SPECULATIVE = (
    "verify_tokens", "drafted_tokens", "accepted_tokens", "kv_blocks_total", "mean_k", "k_min",
    "k_max", "draft_s",
)  # fmt: skip


class Recorder:
    """Collects iterations as they run and requests at the end.

    Held (the default), every iteration row stays in memory until :meth:`finish` turns the columns
    into the ``iterations`` frame. Streaming (:meth:`stream`), the rows are written to parquet as
    they accumulate (see the module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        replicas: int,
        kv: KVCache,
        kv_totals: Sequence[int] | None = None,
    ) -> None:
        self.scenario = scenario
        self.num_replicas = replicas
        self.kv_blocks_total = kv.total_blocks
        # disaggregated: per row, the prompts whose KV is leaving (a prefill instance) or
        # arriving (a decode instance) as the iteration starts
        self.disaggregated = scenario.cluster.disaggregation is not None
        self._transfers = array("q")
        # each replica's KV blocks where pools differ (None: every replica has kv's)
        self.kv_totals: np.ndarray | None = None
        if kv_totals is not None and len(set(kv_totals)) > 1:
            self.kv_totals = np.asarray(kv_totals, dtype=np.int64)
        self._replica = array("q")  # only with several replicas (one: all rows are replica 0)
        self._start = array("d")
        self._duration = array("d")
        self._batch = array("q")
        self._prefill = array("q")
        self._decode = array("q")
        self._emitted = array("q")
        self._kv_used = array("q")
        self._waiting = array("q")
        self._gap_tokens = array("i")  # per row: tokens one step after their previous one
        self._delivered = array("d")  # front-end delivery times, only when the front end streams
        self.itl: dict[str, float] = {}
        # speculative columns, filled only when the scenario speculates (no decode runs then)
        self.speculative = scenario.speculative.enabled
        self._verify = array("q")
        self._drafted = array("q")
        self._accepted = array("q")
        self._k_sum = array("q")
        self._k_min = array("q")
        self._k_max = array("q")
        self._draft_s = array("d")
        self._decoding = array("q")
        # the columns :meth:`finish` hands over (the frames :attr:`requests` and
        # :attr:`iterations` are made of them when first read)
        self.request_columns: ColumnTable
        self.iteration_columns: ColumnTable
        self.end_s = 0.0
        self.preemptions = 0
        # what every replica did (held, served; autoscaled: scale events), set by the engine
        self.fleet: FleetLog | None = None
        # rows before _offset are no longer in the columns above (streamed, or handed to the
        # iterations frame); ``_replica``, ``_gap_tokens`` and ``_delivered`` keep every row
        self._offset = 0
        self._stream: IterationStream | None = None
        self._ends = array("d")  # streamed rows' ends, when the front end does not stream

    @functools.cached_property
    def requests(self) -> pd.DataFrame:
        """The requests frame (built from :attr:`request_columns` when first read)."""
        return self.request_columns.frame()

    @functools.cached_property
    def iterations(self) -> pd.DataFrame:
        """The iterations frame (built from :attr:`iteration_columns` when first read)."""
        return self.iteration_columns.frame()

    def stream(self, path: str | Path, window_s: float) -> None:
        """Write the iterations to a parquet file at ``path`` as they run, a row group per
        :data:`STREAM_ROWS` rows, instead of holding them; ``window_s``: the timeseries window
        their per-window sums are kept for."""
        self._stream = IterationStream(Path(path), window_s)

    @property
    def iterations_path(self) -> Path | None:
        """The parquet file the iterations are streamed to (None: held)."""
        return None if self._stream is None else self._stream.path

    @property
    def streamed(self) -> IterationStream | None:
        """What streaming kept of the iterations written (None: held)."""
        return self._stream

    def record_iteration(
        self,
        replica: int,
        start: float,
        duration: float,
        batch: Batch,
        emitted: int,
        kv_used: int,
        waiting: int,
        delivered: list[float] | None = None,
        transfers: int = 0,
    ) -> None:
        if self.num_replicas > 1:
            self._replica.append(replica)
        if self.disaggregated:
            self._transfers.append(transfers)
        self._start.append(start)
        self._duration.append(duration)
        self._batch.append(len(batch))
        self._prefill.append(batch.prefill_tokens)
        self._decode.append(batch.decode_tokens)
        self._emitted.append(emitted)
        self._kv_used.append(kv_used)
        self._waiting.append(waiting)
        self._gap_tokens.append(batch.gap_tokens)
        if delivered is not None:
            self._delivered.extend(delivered)
        if self.speculative:
            self._record_speculation(batch)
        if self._stream is not None and len(self._start) >= STREAM_ROWS:
            self._flush()

    def _record_speculation(self, batch: Batch) -> None:
        totals = batch.spec_totals
        if totals is None:  # not verified (the batch of a prefill-only step)
            totals = (0, 0, 0, 0, 0, 0)
        verified, drafted, accepted, k_min, k_max, decoding = totals
        self._verify.append(verified)
        self._drafted.append(drafted)
        self._accepted.append(accepted)
        self._k_sum.append(drafted)  # Σ k over the decoding entries: every draft is theirs
        self._k_min.append(k_min)
        self._k_max.append(k_max)
        self._draft_s.append(batch.draft_s)
        self._decoding.append(decoding)

    @property
    def rows(self) -> int:
        """Iterations recorded so far (the row the next one gets)."""
        return self._offset + len(self._start)

    def record_decode_run(
        self,
        replica: int,
        run: DecodeRun,
        waiting: int,
        delivered: list[float] | None = None,
        transfers: int = 0,
    ) -> None:
        """Record the iterations of a decode run (each its own row, as if stepped one by one)."""
        n = run.iterations
        if self.num_replicas > 1:
            self._replica.extend([replica] * n)
        if self.disaggregated:
            self._transfers.extend([transfers] * n)
        rows = run.rows
        if rows is None:  # planned in Python
            self._start.extend(run.starts)
            self._duration.extend(run.durations)
            self._batch.extend(run.batch_sizes)
            self._decode.extend(run.batch_sizes)
            self._emitted.extend(run.batch_sizes)
        else:  # the kernel's float64 and int64 rows, copied as machine words
            batch = rows.batch_sizes.tobytes()
            self._start.frombytes(rows.starts.tobytes())
            self._duration.frombytes(rows.durations.tobytes())
            self._batch.frombytes(batch)
            plain = rows.decode_tokens
            self._decode.frombytes(batch if plain is None else plain.tobytes())
            self._emitted.frombytes(batch if rows.emitted is None else rows.emitted.tobytes())
        self._prefill.frombytes(bytes(8 * n))
        spec = run.speculation
        if spec is not None:
            self._verify.frombytes(spec.verify.tobytes())
            drafted = spec.drafted.tobytes()
            self._drafted.frombytes(drafted)
            self._accepted.frombytes(spec.accepted.tobytes())
            self._k_sum.frombytes(drafted)  # every request decodes: Σ k over them is Σ drafted
            self._k_min.frombytes(spec.k_min.tobytes())
            self._k_max.frombytes(spec.k_max.tobytes())
            self._draft_s.frombytes(spec.draft_s.tobytes())
            self._decoding.extend(run.batch_sizes)
        self._kv_used.extend(run.kv_used)
        self._waiting.extend([waiting] * n)
        self._gap_tokens.extend(run.batch_sizes)
        self._gap_tokens[len(self._gap_tokens) - n] -= run.paused_at_start
        if delivered is not None:
            self._delivered.extend(delivered)
        if self._stream is not None and len(self._start) >= STREAM_ROWS:
            self._flush()

    def _take(self, name: str, dtype: type) -> np.ndarray:
        """A recorded column as a numpy view (no copy); the recorder lets go of it."""
        values = getattr(self, name)
        setattr(self, name, array(values.typecode))
        column: np.ndarray = np.frombuffer(values, dtype=dtype)
        return column

    def _held(self, name: str, dtype: type) -> np.ndarray:
        """A copy of the rows still held of a column that keeps every row (``_replica``,
        ``_delivered``): a view would stop the column from growing."""
        column: np.ndarray = np.frombuffer(getattr(self, name), dtype=dtype)[self._offset :]
        return column.copy()

    def _flush(self) -> None:
        """Streaming: write the rows held as one row group, add them into the stream's sums and
        let them go (all but what :meth:`finish` needs of every row)."""
        assert self._stream is not None
        n = len(self._start)
        starts = self._take("_start", np.float64)
        durations = self._take("_duration", np.float64)
        if len(self._delivered):
            delivered = self._held("_delivered", np.float64)
        else:
            delivered = starts + durations
            self._ends.frombytes(delivered.tobytes())
        several = self.num_replicas > 1
        replica = self._held("_replica", np.int64) if several else np.zeros(n, dtype=np.int64)
        columns = self._iteration_columns(n, replica, starts, durations, delivered)
        del replica, starts, durations, delivered
        if several:
            _in_canonical_order(columns, self.speculative, self.kv_totals is not None)
        self._stream.write(columns)
        self._offset += n

    def finish(self, requests: RequestTable, end_s: float, replicas: Sequence[Any]) -> None:
        """Build the requests and iterations DataFrames and the inter-token latency. The recorded
        columns become the iterations' columns as they are (not copies): nothing is recorded
        after this. Streaming, the last rows are written and ``iterations`` is an empty frame."""
        self.end_s = end_s
        self.preemptions = sum(r.scheduler.preemptions for r in replicas)
        if self._stream is not None:
            self._finish_stream(requests, replicas)
            return
        n = len(self._start)
        take = self._take
        several = self.num_replicas > 1
        streamed = len(self._delivered) > 0
        starts = take("_start", np.float64)
        durations = take("_duration", np.float64)
        delivered = take("_delivered", np.float64) if streamed else starts + durations
        replica = take("_replica", np.int64) if several else np.zeros(n, dtype=np.int64)
        self._offset = n
        self._finish_requests(requests, replicas, delivered, replica if several else None, streamed)
        columns = self._iteration_columns(n, replica, starts, durations, delivered)
        if n:
            self.end_s = max(self.end_s, _max_end(starts, durations))
        if several:  # canonical order: by start time, then replica
            del replica, starts, durations, delivered  # each original freed as it is reordered
            _in_canonical_order(columns, self.speculative, self.kv_totals is not None)
        self.iteration_columns = ColumnTable(columns, n)

    def _finish_stream(self, requests: RequestTable, replicas: Sequence[Any]) -> None:
        """:meth:`finish` when streaming: the last row group, then the ITL and requests from the
        delivery times, replicas and gapped tokens kept of every row."""
        assert self._stream is not None
        if len(self._start):
            self._flush()
        empty = self._iteration_columns(
            0, np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0)
        )
        self._stream.close(empty)
        several = self.num_replicas > 1
        streamed = len(self._delivered) > 0
        delivered = self._take("_delivered" if streamed else "_ends", np.float64)
        replica = self._take("_replica", np.int64) if several else None
        self._finish_requests(requests, replicas, delivered, replica, streamed)
        self.iteration_columns = ColumnTable(empty, 0)
        if self._stream.sums.max_end_s is not None:
            self.end_s = max(self.end_s, self._stream.sums.max_end_s)

    def _finish_requests(
        self,
        requests: RequestTable,
        replicas: Sequence[Any],
        delivered: np.ndarray,
        replica: np.ndarray | None,
        client_times: bool,
    ) -> None:
        """The inter-token latency (which consumes the schedulers' gap logs) and the requests
        frame, from every row's delivery time (``replica``: every row's, None with one replica;
        ``client_times``: the delivery times are the front end's, which the requests' client
        times are read from)."""
        logs = [r.scheduler.gap_pairs for r in replicas]
        for r in replicas:  # consumed (and freed) by the ITL
            r.scheduler.gap_pairs = array(r.scheduler.gap_pairs.typecode)
        self.itl = token_and_chunk_latency(  # ITL per token and per chunk (cbsim.outputs.itl_chunk)
            delivered,
            replica,
            self._take("_gap_tokens", np.int32),
            logs,
            sum(r.scheduler.zero_gaps for r in replicas),
        )
        self.request_columns = requests.columns(delivered if client_times else None)

    def _iteration_columns(
        self,
        n: int,
        replica: np.ndarray,
        starts: np.ndarray,
        durations: np.ndarray,
        delivered: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """The iterations frame's columns for the ``n`` rows held, in recording order, taken
        from the recorder (``replica``, ``starts``, ``durations``, ``delivered``: those rows')."""
        take = self._take

        def spec_column(name: str, dtype: type) -> np.ndarray:
            if not self.speculative:  # zeros the system backs with memory only when written
                return np.zeros(n, dtype=dtype)
            return take(name, dtype)

        if self.speculative:
            decoding = take("_decoding", np.int64)
            k_sum = take("_k_sum", np.int64)
            with np.errstate(invalid="ignore", divide="ignore"):
                mean_k = np.where(decoding > 0, k_sum / np.maximum(decoding, 1), 0.0)
            del decoding, k_sum
        else:  # no decoding requests counted: 0.0 throughout
            mean_k = np.zeros(n)
        transfers = {"kv_transfers": take("_transfers", np.int64)} if self.disaggregated else {}
        return {
            "replica": replica,
            "start_s": starts,
            "duration_s": durations,
            "batch_size": take("_batch", np.int64),
            "prefill_tokens": take("_prefill", np.int64),
            "decode_tokens": take("_decode", np.int64),
            "verify_tokens": spec_column("_verify", np.int64),
            "drafted_tokens": spec_column("_drafted", np.int64),
            "accepted_tokens": spec_column("_accepted", np.int64),
            "emitted_tokens": take("_emitted", np.int64),
            "kv_blocks_used": take("_kv_used", np.int64),
            "kv_blocks_total": (
                np.full(n, self.kv_blocks_total, dtype=np.int64)
                if self.kv_totals is None
                else self.kv_totals[replica]
            ),
            "waiting": take("_waiting", np.int64),
            "mean_k": mean_k,
            "k_min": spec_column("_k_min", np.int64),
            "k_max": spec_column("_k_max", np.int64),
            "draft_s": spec_column("_draft_s", np.float64),
            "delivered_s": delivered,
            **transfers,
        }


def _in_canonical_order(
    columns: dict[str, np.ndarray], speculative: bool, kv_totals_vary: bool = False
) -> None:
    """Reorder iteration columns by start time, then replica, in place: one column at a time,
    so that each original can be freed as it goes (when nothing else holds it)."""
    order = np.lexsort((columns["replica"], columns["start_s"]))
    unordered: tuple[str, ...] = (
        ("kv_blocks_total",) if speculative else _CONSTANT_UNLESS_SPECULATIVE
    )
    if kv_totals_vary:
        unordered = tuple(name for name in unordered if name != "kv_blocks_total")
    for name, column in columns.items():
        if name not in unordered:
            columns[name] = column[order]


def requests_frame(
    requests: Sequence[Request], delivered: np.ndarray | None = None
) -> pd.DataFrame:
    """One row per request, in the order given, with derived latencies (see
    :meth:`RequestTable.frame <cbsim.workload.request_table.RequestTable.frame>`).

    ``delivered``: per iteration row, when the front end streamed its tokens; None when tokens
    reach the client as the step that made them ends."""
    return RequestTable.from_requests(requests).frame(delivered)


def _max_end(starts: np.ndarray, durations: np.ndarray) -> float:
    """The latest ``start + duration`` (a chunk at a time)."""
    return max(
        float((starts[i : i + CHUNK_ROWS] + durations[i : i + CHUNK_ROWS]).max())
        for i in range(0, len(starts), CHUNK_ROWS)
    )
