"""Metrics: what a run records and how it is summarised.

The :class:`Recorder` appends one row per iteration into typed column arrays (cheap enough to do on
every iteration) and, at the end, turns the requests (from a
:class:`~cbsim.request_table.RequestTable`) and iterations into DataFrames. Definitions
follow common serving benchmarks (vLLM, Vidur):

* TTFT = first token time − arrival; TPOT = (finish − first token) / (output tokens − 1), the mean
  time per output token after the first (NaN for one-token outputs); E2E = finish − arrival;
  queue = first admission − the engine's receipt. These are what a *client* measures: arrival is
  when the client sent the request, first token and finish when the front end delivered them
  (:class:`~cbsim.cost.engine_profile.Frontend`). The engine's own view is kept beside them as
  ``server_arrival_s``, ``server_first_token_s``, ``server_finish_s`` and ``server_ttft_s``,
  ``server_tpot_s``, ``server_e2e_s``; with no front-end terms (``engine: none``) both agree.
* Inter-token latency (``itl_p50_s``, ...) is every output token's gap to the previous token of its
  request as the client receives it, computed exactly from the iterations: tokens of consecutive
  steps are one step apart, a token after a pause (preemption, a budget that left the request out)
  has the whole pause, and drafts accepted together in one speculative step arrive with gap 0.
* Throughput counts completed requests over the makespan (first arrival to last finish); goodput
  counts only those meeting every SLO target given. Requests their client gave up on
  (``workload.client.timeout_s``) count as ``timed_out``, neither completed nor unfinished; they
  have no finish, so the latency percentiles are the completed requests' alone. A staged load's
  summary adds each stage's figures (:func:`stage_summary`).
* Timeseries use fixed windows; an iteration belongs to the window its start falls in. ``waiting``
  and ``kv_utilization`` are time averages over the window (cluster-wide sum of waiting requests;
  mean KV utilisation over replicas), ``batch_size`` the mean batch size of the iterations run.
  ``span_s`` is the time a window covers: its width, except the last window, which ends with the
  run; rates (``output_tokens_per_s``) and time averages are over that span, so the last window
  reads what happened in it, not a false drop from dividing part of a window by all of it.
  ``prefix_hit_rate`` is the prompt tokens reused from the prefix cache over the prompt tokens of
  the requests first admitted in the window (NaN when none was); the summary's is the same over
  the whole run, :func:`prefix_hit_rates` per replica. Disaggregated runs add ``kv_transfers``
  (prompts whose KV reached a decode instance in the window), ``kv_transfer_s`` (their mean
  transfer time) and ``kv_wait_s`` (their mean wait from prefill end to transfer start).

Streaming (:meth:`Recorder.stream`, ``simulate(..., stream_to=PATH)``): instead of holding every
iteration row until the end, the recorder writes its iteration columns to a parquet file, one row
group each time it holds :data:`STREAM_ROWS` rows (after a whole decode run, so a group may be a
little larger), and keeps of every row only what the end needs: its delivery time (the iteration's
end, or the front end's delivery), its count of tokens one step after their previous one, and with
several replicas its replica (12 or 20 bytes a row), from which the inter-token latency and the
requests' client times are computed exactly as for a held run. The timeseries' per-window sums
(:class:`WindowSums`) and the summary's iteration figures (:class:`IterationTotals`) are added up a
row group at a time. So the requests frame and every summary figure equal the held run's, except
``draft_time_s``, ``target_time_s`` and ``busy_fraction``: sums of per-row seconds, added group by
group, they may differ by float rounding. With one replica the timeseries is equal bit for bit
(the same additions in the same order) and the file holds exactly the held ``iterations`` frame.
With several, the held frame is sorted by (start, replica) as a whole, a streamed file only within
each row group (sorting the file by ``start_s``, then ``replica``, stably, gives the held frame),
and the timeseries, whose sums follow the row order, may differ by float rounding.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from cbsim.errors import CbsimError
from cbsim.kvcache import KVCache
from cbsim.limits import WINDOWS
from cbsim.request import Request
from cbsim.request_table import RequestTable
from cbsim.scenario import Scenario

if TYPE_CHECKING:
    from cbsim.decode_plan import DecodeRun
    from cbsim.scheduler.base import Batch

REQUEST_COLUMNS = [
    "request_id", "replica", "client", "arrival_s", "first_token_s", "finish_s", "prompt_tokens",
    "cached_tokens", "cached_tokens_cpu", "kv_load_s", "prefill_replica", "kv_wait_s", "kv_transfer_s", "kv_arrived_s", "output_tokens", "ttft_s", "tpot_s", "e2e_s",
    "queue_s", "preemptions", "spec_steps",
    "drafted_tokens", "accepted_tokens", "mean_k", "status", "server_arrival_s",
    "server_first_token_s", "server_finish_s", "server_ttft_s", "server_tpot_s", "server_e2e_s",
]  # fmt: skip

ITERATION_COLUMNS = [
    "replica", "start_s", "duration_s", "batch_size", "prefill_tokens", "decode_tokens",
    "verify_tokens", "drafted_tokens", "accepted_tokens", "emitted_tokens", "kv_blocks_used",
    "kv_blocks_total", "waiting", "mean_k",
]  # fmt: skip

TIMESERIES_COLUMNS = [
    "t_s", "output_tokens_per_s", "requests_completed", "arrivals", "waiting", "kv_utilization",
    "batch_size", "mean_k", "acceptance_rate", "prefix_hit_rate", "span_s",
]  # fmt: skip

PERCENTILES = (50, 90, 99)
CHUNK_ROWS = 1 << 18  # rows a column-wise step takes at a time, to keep temporaries small

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
        self.requests = pd.DataFrame(columns=REQUEST_COLUMNS)
        self.iterations = pd.DataFrame(columns=ITERATION_COLUMNS)
        self.end_s = 0.0
        self.preemptions = 0
        # rows before _offset are no longer in the columns above (streamed, or handed to the
        # iterations frame); ``_replica``, ``_gap_tokens`` and ``_delivered`` keep every row
        self._offset = 0
        self._stream: IterationStream | None = None
        self._ends = array("d")  # streamed rows' ends, when the front end does not stream

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
        self._batch.append(len(batch.requests))
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
        ks = batch.ks or []
        accepted = batch.accepted or []
        decoding = [ks[i] for i in batch.decoding]
        self._verify.append(sum(k + 1 for k in ks if k > 0))
        self._drafted.append(sum(ks))
        self._accepted.append(sum(accepted))
        self._k_sum.append(sum(decoding))
        self._k_min.append(min(decoding, default=0))
        self._k_max.append(max(decoding, default=0))
        self._draft_s.append(batch.draft_s)
        self._decoding.append(len(decoding))

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
        self._start.extend(run.starts)
        self._duration.extend(run.durations)
        self._batch.extend(run.batch_sizes)
        self._prefill.extend([0] * n)
        self._decode.extend(run.batch_sizes if run.decode_tokens is None else run.decode_tokens)
        self._emitted.extend(run.batch_sizes if run.emitted is None else run.emitted)
        spec = run.speculation
        if spec is not None:
            self._verify.extend(spec.verify)
            self._drafted.extend(spec.drafted)
            self._accepted.extend(spec.accepted)
            self._k_sum.extend(spec.drafted)  # every request decodes: Σ k over them is Σ drafted
            self._k_min.extend(spec.k_min)
            self._k_max.extend(spec.k_max)
            self._draft_s.extend(spec.draft_s)
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
        self.iterations = pd.DataFrame(columns, copy=False)

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
        self.iterations = pd.DataFrame(empty, copy=False)
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
        self.itl = inter_token_latency(
            delivered,
            replica,
            self._take("_gap_tokens", np.int32),
            logs,
            sum(r.scheduler.zero_gaps for r in replicas),
        )
        self.requests = requests.frame(delivered if client_times else None)

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


@dataclass
class IterationTotals:
    """The summary's figures over every iteration row, added up a chunk of rows at a time."""

    rows: int = 0
    busy_s: float = 0.0  # Σ duration
    end_s: float = 0.0  # the last iteration's end (0: no rows)
    draft_s: float = 0.0
    batch_sum: int = 0
    max_batch: int = 0
    kv_blocks_total: int = 0  # the first row's (0: no rows)

    @classmethod
    def of(cls, iterations: pd.DataFrame) -> IterationTotals:
        """The totals of a whole iterations frame."""
        totals = cls()
        names = ("start_s", "duration_s", "draft_s", "batch_size", "kv_blocks_total")
        totals.add({name: iterations[name].to_numpy() for name in names})
        return totals

    def add(self, columns: Mapping[str, np.ndarray]) -> None:
        """Add iteration rows (at least ``start_s``, ``duration_s``, ``draft_s``, ``batch_size``
        and ``kv_blocks_total``)."""
        n = len(columns["duration_s"])
        if n == 0:
            return
        if self.rows == 0:
            self.kv_blocks_total = int(columns["kv_blocks_total"][0])
        self.rows += n
        self.busy_s += float(columns["duration_s"].sum())
        self.end_s = max(self.end_s, float((columns["start_s"] + columns["duration_s"]).max()))
        self.draft_s += float(columns["draft_s"].sum())
        batch = columns["batch_size"]
        self.batch_sum += int(batch.sum())
        self.max_batch = max(self.max_batch, int(batch.max()))

    @property
    def mean_batch_size(self) -> float:
        return self.batch_sum / self.rows if self.rows else 0.0


class IterationStream:
    """Where a streaming recorder's iterations go: a parquet file at ``path``, a row group per
    :meth:`write`, and what the summary and the timeseries need of the rows written
    (:attr:`totals`, :attr:`sums`)."""

    def __init__(self, path: Path, window_s: float) -> None:
        self.path = path
        self.totals = IterationTotals()
        self.sums = WindowSums(window_s)
        self._writer: pq.ParquetWriter | None = None

    def write(self, columns: dict[str, np.ndarray]) -> None:
        """Write iteration rows (the iterations frame's columns) as one row group."""
        self.totals.add(columns)
        self.sums.add(columns)
        table = _arrow_table(columns)
        try:
            if self._writer is None:
                self._writer = self._open(table.schema)
            self._writer.write_table(table, row_group_size=max(table.num_rows, 1))
        except OSError as err:
            raise self._failure(err) from None

    def _failure(self, err: OSError) -> CbsimError:
        """A failed write (a full disk, a read-only folder) as a user error naming the file."""
        return CbsimError(
            f"cannot write the streamed iterations: {err.strerror or err}", source=str(self.path)
        )

    def _open(self, schema: pa.Schema) -> pq.ParquetWriter:
        """The parquet writer. Columns are dictionary-encoded but for the times, nearly all
        distinct (a dictionary only to give it up: about 3x the time to write them)."""
        dictionary = [name for name in schema.names if name not in _DISTINCT_COLUMNS]
        return pq.ParquetWriter(self.path, schema, use_dictionary=dictionary)

    def close(self, empty: dict[str, np.ndarray]) -> None:
        """Finish the file; ``empty``: the columns with no rows (the schema, if none came)."""
        try:
            if self._writer is None:
                self._writer = self._open(_arrow_table(empty).schema)
            self._writer.close()
        except OSError as err:
            raise self._failure(err) from None
        finally:
            self._writer = None
        pa.default_memory_pool().release_unused()  # the writer's buffers, before the ITL's


_DISTINCT_COLUMNS = ("start_s", "duration_s", "delivered_s")


def _arrow_table(columns: dict[str, np.ndarray]) -> pa.Table:
    """Iteration columns as an arrow table, as ``DataFrame.to_parquet`` writes the frame."""
    return pa.Table.from_pandas(pd.DataFrame(columns, copy=False), preserve_index=False)


def requests_frame(
    requests: Sequence[Request], delivered: np.ndarray | None = None
) -> pd.DataFrame:
    """One row per request, in the order given, with derived latencies (see
    :meth:`RequestTable.frame <cbsim.request_table.RequestTable.frame>`).

    ``delivered``: per iteration row, when the front end streamed its tokens; None when tokens
    reach the client as the step that made them ends."""
    return RequestTable.from_requests(requests).frame(delivered)


def _max_end(starts: np.ndarray, durations: np.ndarray) -> float:
    """The latest ``start + duration`` (a chunk at a time)."""
    return max(
        float((starts[i : i + CHUNK_ROWS] + durations[i : i + CHUNK_ROWS]).max())
        for i in range(0, len(starts), CHUNK_ROWS)
    )


def weighted_percentile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(values, counts), q)`` (linear interpolation) without repeating."""
    keep = counts > 0
    values, counts = values[keep], counts[keep]
    order = np.argsort(values, kind="stable")
    return _sorted_percentile(values[order], np.cumsum(counts[order]), q)


def _sorted_percentile(values: np.ndarray, cumulative: np.ndarray, q: float) -> float:
    """:func:`weighted_percentile` of ``values`` sorted ascending, given the running sum of their
    counts (values with count zero may be among them: they are never picked)."""
    total = int(cumulative[-1]) if len(cumulative) else 0
    if total == 0:
        return math.nan
    position = q / 100.0 * (total - 1)
    low = math.floor(position)
    high = min(low + 1, total - 1)
    value_low = float(values[np.searchsorted(cumulative, low, side="right")])
    value_high = float(values[np.searchsorted(cumulative, high, side="right")])
    return value_low + (value_high - value_low) * (position - low)


def _merged_percentiles(
    values: np.ndarray, counts: np.ndarray, pauses: np.ndarray, total: int
) -> dict[str, float]:
    """The ITL percentiles over two sorted groups of gaps: ``values`` with ``counts`` tokens each,
    and ``pauses`` with one token each (``total`` tokens in all). The gap at a rank is the same
    whatever the order of equal gaps, so the groups need no merging."""
    cumulative = np.cumsum(counts, dtype=np.int64)

    def tokens_up_to(gap: float) -> int:
        """Tokens with a gap of at most ``gap``."""
        i = int(np.searchsorted(values, gap, side="right"))
        in_pauses = int(np.searchsorted(pauses, gap, side="right"))
        return (int(cumulative[i - 1]) if i else 0) + in_pauses

    def gap_of(rank: int) -> float:
        """The ``rank``-th smallest gap over every token (from 0)."""
        best = math.inf
        for group in (values, pauses):  # each group's first gap with more tokens up to it
            lo, hi = 0, len(group)
            while lo < hi:
                mid = (lo + hi) // 2
                if tokens_up_to(float(group[mid])) > rank:
                    hi = mid
                else:
                    lo = mid + 1
            if lo < len(group):
                best = min(best, float(group[lo]))
        return best

    out: dict[str, float] = {}
    for p in PERCENTILES:  # as weighted_percentile does it
        if total == 0:
            out[f"itl_p{p}_s"] = math.nan
            continue
        position = p / 100.0 * (total - 1)
        low = math.floor(position)
        value_low, value_high = gap_of(low), gap_of(min(low + 1, total - 1))
        out[f"itl_p{p}_s"] = value_low + (value_high - value_low) * (position - low)
    return out


def _row_entries(
    replica: np.ndarray | None, gap_tokens: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Chunks of (rows with tokens one step after their previous token, the row before each on
    its replica); ``replica`` None: every row on one replica."""
    if replica is None:
        for start in range(1, len(gap_tokens), CHUNK_ROWS):
            rows = start + np.flatnonzero(gap_tokens[start : start + CHUNK_ROWS] > 0)
            yield rows, rows - 1
        return
    for index in np.flatnonzero(np.bincount(replica)):
        on_replica = np.flatnonzero(replica == index)
        for start in range(1, len(on_replica), CHUNK_ROWS):
            rows = on_replica[start : start + CHUNK_ROWS]
            keep = gap_tokens[rows] > 0
            yield rows[keep], on_replica[start - 1 : start - 1 + len(rows)][keep]


def inter_token_latency(
    delivered: np.ndarray,
    replica: np.ndarray | None,
    gap_tokens: np.ndarray,
    gap_pairs: list[array[int]],
    zero_gaps: int,
) -> dict[str, float]:
    """Percentiles and mean of every output token's gap to its request's previous token.

    ``delivered``, ``replica`` and ``gap_tokens`` are per iteration row (in recording order;
    ``replica`` None: every row on one replica): ``gap_tokens`` tokens of a row came one step
    after their previous token, so their gap is the time between this row's delivery and the
    previous row of the same replica. ``gap_pairs`` are the schedulers' logs of flat (row, row of
    the previous token) pairs, one pair per token after a pause; they are emptied as they are
    read, so that they can be freed. ``zero_gaps`` tokens arrived together with the one before
    them.

    Every gap is a (gap, tokens) entry; the mean sums gap × tokens over the entries sorted by gap,
    then tokens, which makes it independent of the logging order. There are about as many
    entries as rows and pauses together, so they are kept in two sorted groups: the rows' (and
    the zero gaps'), lexsorted, and the pauses' (one token each), sorted in place at the end of
    the array that the merged products are then written into, front to back."""
    head = sum(len(rows) for rows, _ in _row_entries(replica, gap_tokens)) + 1
    pause_count = sum(len(log) for log in gap_pairs) // 2
    merged = np.empty(head + pause_count)
    # the pauses' gaps at the end of ``merged``, each log freed from its end as it is read
    at = len(merged)
    while gap_pairs:
        log = gap_pairs.pop()
        while len(log):
            cut = max(0, len(log) - 2 * CHUNK_ROWS)
            pairs = np.frombuffer(log, dtype=log.typecode, offset=log.itemsize * cut)
            pairs = pairs.reshape(-1, 2)
            np.subtract(
                delivered[pairs[:, 0]], delivered[pairs[:, 1]], out=merged[at - len(pairs) : at]
            )
            at -= len(pairs)
            del pairs
            del log[cut:]
    pauses = merged[head:]
    pauses.sort()
    # the rows' entries and the zero gaps', sorted by gap, then tokens
    top = max(int(gap_tokens.max()) if len(gap_tokens) else 0, zero_gaps)
    values = np.empty(head)
    counts: np.ndarray = np.empty(head, dtype=np.int16 if top < 2**15 else np.int64)
    at = 0
    for rows, previous in _row_entries(replica, gap_tokens):
        end = at + len(rows)
        np.subtract(delivered[rows], delivered[previous], out=values[at:end])
        counts[at:end] = gap_tokens[rows]
        at = end
    values[at] = 0.0
    counts[at] = zero_gaps
    order = np.lexsort((counts, values))
    counts = counts[order]
    in_order = order.view(np.float64)  # the sorted gaps, into the order's own memory
    for start in range(0, head, CHUNK_ROWS):
        chunk = slice(start, start + CHUNK_ROWS)
        in_order[chunk] = values[order[chunk]]  # this chunk's indices are read first
    values = in_order
    del order, in_order
    total = int(counts.sum(dtype=np.int64)) + pause_count
    out = _merged_percentiles(values, counts, pauses, total)
    # merge front to back: a pause's (gap, 1) goes before the rows' entries of the same gap, which
    # have a token or more (a tie with one token is the same product; the zero gaps' entry may
    # have none, but a gap of 0 makes 0 whatever the tokens). An entry lands at or before the
    # place of the first pause still unmerged, which is never overwritten before it is read.
    placed = 0  # pauses merged so far
    for start in range(0, head, CHUNK_ROWS):
        gaps = values[start : start + CHUNK_ROWS]
        before = placed + np.searchsorted(pauses[placed:], gaps, side="right")
        upto = int(before[-1])
        for first in range(placed, upto, CHUNK_ROWS):
            moving = pauses[first : min(first + CHUNK_ROWS, upto)].copy()
            rank = np.arange(first, first + len(moving))
            merged[rank + np.searchsorted(values, moving, side="left")] = moving * 1
        placed = upto
        rank = np.arange(start, start + len(gaps))
        merged[rank + before] = gaps * counts[start : start + len(gaps)]
    # the pauses after every entry are in their place already
    out["itl_mean_s"] = float(merged.sum() / total) if total else math.nan
    return out


def _percentiles(values: np.ndarray, prefix: str, out: dict[str, float]) -> None:
    values = values[~np.isnan(values)]
    for p in PERCENTILES:
        out[f"{prefix}_p{p}_s"] = float(np.percentile(values, p)) if len(values) else math.nan
    out[f"{prefix}_mean_s"] = float(values.mean()) if len(values) else math.nan


def prefix_hit_rates(requests: pd.DataFrame) -> pd.Series:
    """Prefix-cache hit rate per replica: its requests' reused prompt tokens over their prompt
    tokens (rejected requests left out)."""
    admitted = requests[requests["status"] != "rejected"]
    sums = admitted.groupby("replica")[["cached_tokens", "prompt_tokens"]].sum()
    rates: pd.Series = sums["cached_tokens"] / sums["prompt_tokens"]
    return rates.rename("prefix_hit_rate")


def meets_slo(requests: pd.DataFrame, scenario: Scenario) -> np.ndarray:
    """Boolean per request: finished and within every SLO target the scenario gives."""
    ok = (requests["status"] == "finished").to_numpy().copy()
    slo = scenario.slo
    if slo.ttft_s is not None:
        ok &= requests["ttft_s"].to_numpy() <= slo.ttft_s
    if slo.tpot_s is not None:
        tpot = requests["tpot_s"].to_numpy()
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_s)
    if slo.e2e_s is not None:
        ok &= requests["e2e_s"].to_numpy() <= slo.e2e_s
    return ok


def _busy_fraction(
    requests: pd.DataFrame, scenario: Scenario, totals: IterationTotals, makespan: float
) -> float:
    """The replicas' busy time over their time from the first arrival to the end of the run:
    the last finish, or the last iteration's end where iterations ran on after it (a horizon
    cut the run with requests still running). NaN without a finished request."""
    if not makespan > 0:
        return math.nan
    first = float(requests["arrival_s"].min())
    span = max(makespan, totals.end_s - first)
    return totals.busy_s / (span * scenario.cluster.replica_count)


def summarize(
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    scenario: Scenario,
    preemptions: int,
    itl: dict[str, float] | None = None,
    warnings: Sequence[str] = (),
    totals: IterationTotals | None = None,
) -> dict[str, Any]:
    """The run's key figures (JSON-serialisable, deterministic for a scenario and seed).

    ``warnings`` (joined into one string, empty when none) says where the run's settings or load
    make its figures doubtful: a token budget that can never batch a prompt beside running
    decodes, batches far outside the range the engine's overhead was fitted on. ``totals``: the
    iterations' figures when they are not held (streaming), or already added up."""
    if totals is None:
        totals = IterationTotals.of(iterations)
    status = requests["status"]
    finished = (status == "finished").to_numpy()

    def done(name: str) -> pd.Series:
        """A column of the finished requests (one column copied at a time, not the frame)."""
        return requests[name][finished]

    completed = int(finished.sum())
    if completed:
        makespan = float(done("finish_s").max() - requests["arrival_s"].min())
    else:
        makespan = math.nan
    output_tokens = int(done("output_tokens").sum())
    good = int(meets_slo(requests, scenario).sum())
    busy = totals.busy_s
    summary: dict[str, Any] = {
        "name": scenario.name,
        "seed": scenario.seed,
        "requests": len(requests),
        "completed": completed,
        "rejected": int((status == "rejected").sum()),
        "unfinished": int(((status == "waiting") | (status == "running")).sum()),
        "timed_out": int((status == "timed_out").sum()),
        "makespan_s": makespan,
        "throughput_rps": completed / makespan if completed and makespan > 0 else 0.0,
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / makespan if completed and makespan > 0 else 0.0,
        "goodput_rps": good / makespan if completed and makespan > 0 else 0.0,
        "slo_attainment": good / len(requests) if len(requests) else math.nan,
    }
    admitted = (status != "rejected").to_numpy()
    prompt_total = int(requests["prompt_tokens"][admitted].sum())
    cached_total = (
        int(requests["cached_tokens"][admitted].sum()) if "cached_tokens" in requests else 0
    )
    cpu_total = (
        int(requests["cached_tokens_cpu"][admitted].sum()) if "cached_tokens_cpu" in requests else 0
    )
    _percentiles(done("ttft_s").to_numpy(dtype=float), "ttft", summary)
    _percentiles(done("tpot_s").to_numpy(dtype=float), "tpot", summary)
    _percentiles(done("e2e_s").to_numpy(dtype=float), "e2e", summary)
    _percentiles(done("queue_s").to_numpy(dtype=float), "queue", summary)
    if itl:
        summary.update(itl)
    for metric in ("ttft", "tpot", "e2e"):
        if f"server_{metric}_s" in requests:
            _percentiles(
                done(f"server_{metric}_s").to_numpy(dtype=float), f"server_{metric}", summary
            )
    drafted = int(requests["drafted_tokens"].sum())
    accepted = int(requests["accepted_tokens"].sum())
    spec_steps = int(requests["spec_steps"].sum())
    decode_steps = int(requests["decode_steps"].sum())
    rejections = int(requests["rejected_steps"].sum())
    draft_s = totals.draft_s
    summary.update(
        {
            # marginal: accepted / drafted (vLLM's draft_acceptance_rate)
            "acceptance_rate": accepted / drafted if drafted else math.nan,
            # conditional α: P(accept | every earlier draft accepted), maximum likelihood
            "conditional_acceptance": accepted / (accepted + rejections)
            if accepted + rejections
            else math.nan,
            "mean_acceptance_length": (accepted + spec_steps) / spec_steps
            if spec_steps
            else math.nan,
            "mean_k": drafted / decode_steps if decode_steps else 0.0,
            "spec_step_fraction": spec_steps / decode_steps if decode_steps else 0.0,
            "draft_time_s": draft_s,
            "target_time_s": busy - draft_s,
            "preemptions": preemptions,
            "iterations": totals.rows,
            "mean_batch_size": totals.mean_batch_size,
            "busy_fraction": _busy_fraction(requests, scenario, totals, makespan),
            "kv_blocks_total": totals.kv_blocks_total,
            "max_batch_size": totals.max_batch,
            # prefix caching: prompt tokens reused at admission / prompt tokens of admitted requests
            "prefix_hit_rate": cached_total / prompt_total if prompt_total else 0.0,
            # of which loaded from the CPU tier
            "prefix_hit_rate_cpu": cpu_total / prompt_total if prompt_total else 0.0,
            "warnings": "; ".join(warnings),
        }
    )
    if "kv_arrived_s" in requests and bool(requests["kv_arrived_s"].notna().any()):
        crossed = requests["kv_arrived_s"].notna().to_numpy()
        for name in ("kv_transfer_s", "kv_wait_s"):
            values = requests[name].to_numpy(dtype=float)[crossed]
            stem = name.removesuffix("_s")
            for q in (50, 99):
                summary[f"{stem}_p{q}_s"] = float(np.percentile(values, q))
    if "stage" in requests:
        summary.update(_stage_figures(stage_summary(requests, scenario)))
    return summary


STAGE_FIGURES = (
    "rate", "requests", "completed", "timed_out", "start_s", "throughput_rps", "ttft_p50_s",
    "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s",
)  # fmt: skip
"""What :func:`stage_summary` reports of each stage (and the summary as ``stage{i}_{figure}``)."""


def stage_summary(requests: pd.DataFrame, scenario: Scenario | None = None) -> pd.DataFrame:
    """One row per stage of a staged load (``workload.arrival.kind: stages``), indexed by
    ``stage``: its offered ``rate`` (NaN without the scenario), the ``requests`` it sent,
    ``completed`` and ``timed_out``, when its first request was sent (``start_s``), its
    throughput (completed over its first send to its last finish) and its completed requests'
    latency percentiles, the figures a load generator reports per rate point."""
    stages = requests["stage"].to_numpy()
    arrival = scenario.workload.arrival if scenario is not None else None
    rates = [stage.rate for stage in getattr(arrival, "stages", [])]
    count = max(len(rates), int(stages.max()) + 1 if len(stages) else 0)
    status = requests["status"].to_numpy()
    rows = []
    for stage in range(count):
        mine = stages == stage
        done = mine & (status == "finished")
        sent = requests["arrival_s"].to_numpy()[mine]
        finishes = requests["finish_s"].to_numpy()[done]
        span = float(finishes.max() - sent.min()) if len(finishes) else math.nan
        row: dict[str, float] = {
            "rate": rates[stage] if stage < len(rates) else math.nan,
            "requests": int(mine.sum()),
            "completed": int(done.sum()),
            "timed_out": int((mine & (status == "timed_out")).sum()),
            "start_s": float(sent.min()) if len(sent) else math.nan,
            "throughput_rps": int(done.sum()) / span if span > 0 else math.nan,
        }
        figures: dict[str, float] = {}
        for metric in ("ttft", "tpot", "e2e"):
            _percentiles(requests[f"{metric}_s"].to_numpy(dtype=float)[done], metric, figures)
        row.update({key: figures[key] for key in STAGE_FIGURES if key in figures})
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(STAGE_FIGURES))
    frame.index.name = "stage"
    return frame


def _stage_figures(stages: pd.DataFrame) -> dict[str, float]:
    """A stage table as flat summary keys: ``stage0_rate``, ``stage0_ttft_p50_s``, ..."""
    out: dict[str, float] = {}
    for stage, row in stages.iterrows():
        for name in STAGE_FIGURES:
            value = row[name]
            keep_int = name in ("requests", "completed", "timed_out")
            out[f"stage{stage}_{name}"] = int(value) if keep_int else float(value)
    return out


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
    def of(cls, iterations: pd.DataFrame, window_s: float) -> WindowSums:
        """The sums over a whole iterations frame."""
        sums = cls(window_s)
        sums.add({name: iterations[name].to_numpy() for name in _WINDOW_COLUMNS})
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
        pieces, cols, secs = _pieces(
            crossing["start"], crossing["duration"], self.window_s, windows
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


def _pieces(
    start: np.ndarray, duration: np.ndarray, window_s: float, windows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(iteration, window, seconds in it) of iterations spanning several windows."""
    end = start + duration
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
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    window_s: float,
    replicas: int,
    sums: WindowSums | None = None,
) -> pd.DataFrame:
    """Fixed-window aggregates over the run (see the module docstring for definitions).

    ``sums``: the iterations' :class:`WindowSums` when they are not held (streaming)."""
    if sums is None:
        sums = WindowSums.of(iterations, window_s)
    ends = [0.0]
    if sums.max_end_s is not None:
        ends.append(sums.max_end_s)
    if len(requests):
        ends.append(float(requests["arrival_s"].max()))
    windows = _window_count(max(ends), window_s)
    span = _window_spans(max(ends), window_s, windows)

    def total(times: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        bins = np.minimum((times // window_s).astype(np.int64), windows - 1)
        return np.bincount(bins, weights=weights, minlength=windows)[:windows]

    by_window = sums.result(windows)
    busy, drafted, accepted = by_window["busy"], by_window["drafted"], by_window["accepted"]
    finished = requests["finish_s"].to_numpy(dtype=float)
    finished = finished[~np.isnan(finished)]
    # prefix caching: prompt tokens reused / prompt tokens of the requests first admitted in a
    # window
    reused = prompted = np.zeros(windows)
    if {"server_arrival_s", "queue_s", "cached_tokens"} <= set(requests.columns):
        admitted = (requests["server_arrival_s"] + requests["queue_s"]).to_numpy(dtype=float)
        seen = ~np.isnan(admitted)
        reused = total(admitted[seen], requests["cached_tokens"].to_numpy(dtype=float)[seen])
        prompted = total(admitted[seen], requests["prompt_tokens"].to_numpy(dtype=float)[seen])
    with np.errstate(invalid="ignore", divide="ignore"):
        frame = pd.DataFrame(
            {
                "t_s": np.arange(windows) * window_s,
                "output_tokens_per_s": by_window["emitted"] / span,
                "requests_completed": total(finished).astype(np.int64),
                "arrivals": total(requests["arrival_s"].to_numpy(dtype=float)).astype(np.int64),
                "waiting": by_window["waiting"] / span,
                "kv_utilization": by_window["kv_frac"] / (span * replicas),
                "batch_size": np.where(busy > 0, by_window["batch"] / busy, 0.0),
                "mean_k": np.where(busy > 0, by_window["k_weight"] / busy, 0.0),
                "acceptance_rate": np.where(drafted > 0, accepted / drafted, np.nan),
                "prefix_hit_rate": np.where(prompted > 0, reused / prompted, np.nan),
                "span_s": span,
            }
        )
    arrived = requests["kv_arrived_s"].to_numpy(dtype=float) if "kv_arrived_s" in requests else None
    if arrived is not None and not np.isnan(arrived).all():  # disaggregated
        crossed = ~np.isnan(arrived)
        count = total(arrived[crossed])
        seconds = total(arrived[crossed], requests["kv_transfer_s"].to_numpy(float)[crossed])
        waited = total(arrived[crossed], requests["kv_wait_s"].to_numpy(float)[crossed])
        with np.errstate(invalid="ignore", divide="ignore"):
            frame["kv_transfers"] = count.astype(np.int64)
            frame["kv_transfer_s"] = np.where(count > 0, seconds / count, np.nan)
            frame["kv_wait_s"] = np.where(count > 0, waited / count, np.nan)
    return frame


def _window_spans(end_s: float, window_s: float, windows: int) -> np.ndarray:
    """Seconds of the run each window covers: ``window_s``, but the last window only up to the
    run's end ``end_s`` (a whole window when the run ends on its start, as an empty run does)."""
    span = np.full(windows, window_s)
    last = min(window_s, end_s - (windows - 1) * window_s)
    if last > 0:
        span[-1] = last
    return span
