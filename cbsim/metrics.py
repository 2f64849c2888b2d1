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
  counts only those meeting every SLO target given.
* Timeseries use fixed windows; an iteration belongs to the window its start falls in. ``waiting``
  and ``kv_utilization`` are time averages over the window (cluster-wide sum of waiting requests;
  mean KV utilisation over replicas), ``batch_size`` the mean batch size of the iterations run.
  ``span_s`` is the time a window covers: its width, except the last window, which ends with the
  run; rates (``output_tokens_per_s``) and time averages are over that span, so the last window
  reads what happened in it, not a false drop from dividing part of a window by all of it.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cbsim.kvcache import KVCache
from cbsim.request import Request
from cbsim.request_table import RequestTable
from cbsim.scenario import Scenario

if TYPE_CHECKING:
    from cbsim.decode_run import DecodeRun
    from cbsim.scheduler.base import Batch

REQUEST_COLUMNS = [
    "request_id", "replica", "client", "arrival_s", "first_token_s", "finish_s", "prompt_tokens",
    "output_tokens", "ttft_s", "tpot_s", "e2e_s", "queue_s", "preemptions", "spec_steps",
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
    "batch_size", "mean_k", "acceptance_rate", "span_s",
]  # fmt: skip

PERCENTILES = (50, 90, 99)
CHUNK_ROWS = 1 << 18  # rows a column-wise step takes at a time, to keep temporaries small

# iteration columns that are the same for every row, unless the run speculates
_CONSTANT_UNLESS_SPECULATIVE = (
    "verify_tokens", "drafted_tokens", "accepted_tokens", "kv_blocks_total", "mean_k", "k_min",
    "k_max", "draft_s",
)  # fmt: skip


class Recorder:
    """Collects iterations as they run and requests at the end."""

    def __init__(self, scenario: Scenario, replicas: int, kv: KVCache) -> None:
        self.scenario = scenario
        self.num_replicas = replicas
        self.kv_blocks_total = kv.total_blocks
        self._replica = array("q")  # only with several replicas (one: all rows are replica 0)
        self._start = array("d")
        self._duration = array("d")
        self._batch = array("q")
        self._prefill = array("q")
        self._decode = array("q")
        self._emitted = array("q")
        self._kv_used = array("q")
        self._waiting = array("q")
        self._gap_tokens = array("q")
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
    ) -> None:
        if self.num_replicas > 1:
            self._replica.append(replica)
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
        return len(self._start)

    def record_decode_run(
        self, replica: int, run: DecodeRun, waiting: int, delivered: list[float] | None = None
    ) -> None:
        """Record the iterations of a decode run (each its own row, as if stepped one by one)."""
        n = run.iterations
        if self.num_replicas > 1:
            self._replica.extend([replica] * n)
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

    def _take(self, name: str, dtype: type) -> np.ndarray:
        """A recorded column as a numpy view (no copy); the recorder lets go of it."""
        values = getattr(self, name)
        setattr(self, name, array(values.typecode))
        column: np.ndarray = np.frombuffer(values, dtype=dtype)
        return column

    def finish(self, requests: RequestTable, end_s: float, replicas: Sequence[Any]) -> None:
        """Build the requests and iterations DataFrames and the inter-token latency. The recorded
        columns become the iterations' columns as they are (not copies): nothing is recorded
        after this."""
        self.end_s = end_s
        self.preemptions = sum(r.scheduler.preemptions for r in replicas)
        n = len(self._start)
        take = self._take
        several = self.num_replicas > 1
        streamed = len(self._delivered) > 0
        starts = take("_start", np.float64)
        durations = take("_duration", np.float64)
        delivered = take("_delivered", np.float64) if streamed else starts + durations
        replica = take("_replica", np.int64) if several else np.zeros(n, dtype=np.int64)
        logs = [r.scheduler.gap_pairs for r in replicas]
        for r in replicas:  # consumed (and freed) by the ITL
            r.scheduler.gap_pairs = array("q")
        self.itl = inter_token_latency(
            delivered,
            replica if several else None,
            take("_gap_tokens", np.int64),
            logs,
            sum(r.scheduler.zero_gaps for r in replicas),
        )
        self.requests = requests.frame(delivered if streamed else None)

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
        columns = {
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
            "kv_blocks_total": np.full(n, self.kv_blocks_total, dtype=np.int64),
            "waiting": take("_waiting", np.int64),
            "mean_k": mean_k,
            "k_min": spec_column("_k_min", np.int64),
            "k_max": spec_column("_k_max", np.int64),
            "draft_s": spec_column("_draft_s", np.float64),
            "delivered_s": delivered,
        }
        if n:
            self.end_s = max(self.end_s, _max_end(starts, durations))
        if several:  # canonical order: by start time, then replica
            order = np.lexsort((replica, starts))
            del replica, starts, durations, delivered, mean_k
            unordered = ("kv_blocks_total",) if self.speculative else _CONSTANT_UNLESS_SPECULATIVE
            for name, column in columns.items():  # one at a time: each original freed as it goes
                if name not in unordered:
                    columns[name] = column[order]
        self.iterations = pd.DataFrame(columns, copy=False)


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
            pairs = np.frombuffer(log, dtype=np.int64, offset=8 * cut).reshape(-1, 2)
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


def summarize(
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    scenario: Scenario,
    preemptions: int,
    itl: dict[str, float] | None = None,
    warnings: Sequence[str] = (),
) -> dict[str, Any]:
    """The run's key figures (JSON-serialisable, deterministic for a scenario and seed).

    ``warnings`` (joined into one string, empty when none) says where the run's settings or load
    make its figures doubtful: a token budget that can never batch a prompt beside running
    decodes, batches far outside the range the engine's overhead was fitted on."""
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
    busy = float(iterations["duration_s"].sum())
    summary: dict[str, Any] = {
        "name": scenario.name,
        "seed": scenario.seed,
        "requests": len(requests),
        "completed": completed,
        "rejected": int((status == "rejected").sum()),
        "unfinished": int(((status == "waiting") | (status == "running")).sum()),
        "makespan_s": makespan,
        "throughput_rps": completed / makespan if completed and makespan > 0 else 0.0,
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / makespan if completed and makespan > 0 else 0.0,
        "goodput_rps": good / makespan if completed and makespan > 0 else 0.0,
        "slo_attainment": good / len(requests) if len(requests) else math.nan,
    }
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
    draft_s = float(iterations["draft_s"].sum())
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
            "iterations": len(iterations),
            "mean_batch_size": float(iterations["batch_size"].mean()) if len(iterations) else 0.0,
            "busy_fraction": busy / (makespan * scenario.cluster.replicas)
            if completed and makespan > 0
            else math.nan,
            "kv_blocks_total": int(iterations["kv_blocks_total"].iloc[0]) if len(iterations) else 0,
            "max_batch_size": int(iterations["batch_size"].max()) if len(iterations) else 0,
            "warnings": "; ".join(warnings),
        }
    )
    return summary


class _Windows:
    """Per-window sums of per-iteration values (:meth:`run`), a chunk of iterations at a time.

    Values are added to their windows with ``np.add.at`` in row order: the same additions, in the
    same order, as one ``np.bincount`` over every row (so the same floats), without temporaries
    the length of the run. An integral splits each iteration's duration across the windows it
    overlaps (most lie within one; the rest, few, are split exactly)."""

    def __init__(self, start: np.ndarray, duration: np.ndarray, window_s: float, windows: int):
        self.start, self.duration = start, duration
        self.window_s, self.windows = window_s, windows
        self.sums: dict[str, np.ndarray] = {}

    def bins(self, times: np.ndarray) -> np.ndarray:
        return np.minimum((times // self.window_s).astype(np.int64), self.windows - 1)

    def run(
        self,
        integrands: dict[str, Callable[[Any], np.ndarray]],
        at_start: dict[str, Callable[[Any], np.ndarray]],
        at_end: dict[str, Callable[[Any], np.ndarray]],
    ) -> None:
        """Integrate each of ``integrands`` (functions of a slice or an array of rows) over time,
        and sum each of ``at_start`` (``at_end``) by the window its iterations start (end) in."""
        sums = self.sums
        for name in (*integrands, *at_start, *at_end):
            sums[name] = np.zeros(self.windows)
        crossing_parts = []
        for begin in range(0, len(self.start), CHUNK_ROWS):
            rows = slice(begin, begin + CHUNK_ROWS)
            start, duration = self.start[rows], self.duration[rows]
            first = self.bins(start)
            last = self.bins(start + duration)
            inside = first == last
            crossing_parts.append(begin + np.flatnonzero(~inside))
            for name, values in integrands.items():
                np.add.at(sums[name], first[inside], values(rows)[inside] * duration[inside])
            for name, values in at_start.items():
                np.add.at(sums[name], first, values(rows))
            for name, values in at_end.items():
                np.add.at(sums[name], last, values(rows))
        crossing = np.concatenate(crossing_parts) if crossing_parts else np.zeros(0, np.int64)
        if len(crossing):
            pieces, cols, secs = self._pieces(crossing)
            for name, values in integrands.items():  # added apart, as before chunking
                sums[name] = sums[name] + np.bincount(
                    cols, weights=values(pieces) * secs, minlength=self.windows
                )

    def _pieces(self, crossing: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(iteration, window, seconds in it) of the iterations spanning several windows."""
        window_s, windows = self.window_s, self.windows
        start = self.start[crossing]
        end = start + self.duration[crossing]
        first, last = self.bins(start), self.bins(end)
        pieces: list[tuple[int, int, float]] = []
        for i, row in enumerate(crossing.tolist()):
            for w in range(int(first[i]), int(last[i]) + 1):
                lo = max(float(start[i]), w * window_s)
                hi = min(float(end[i]), (w + 1) * window_s) if w < windows - 1 else float(end[i])
                if hi > lo:
                    pieces.append((row, w, hi - lo))
        rows = np.array([p[0] for p in pieces], dtype=np.int64)
        cols = np.array([p[1] for p in pieces], dtype=np.int64)
        secs = np.array([p[2] for p in pieces], dtype=np.float64)
        return rows, cols, secs


def timeseries(
    requests: pd.DataFrame, iterations: pd.DataFrame, window_s: float, replicas: int
) -> pd.DataFrame:
    """Fixed-window aggregates over the run (see the module docstring for definitions)."""
    start = iterations["start_s"].to_numpy(dtype=float)
    duration = iterations["duration_s"].to_numpy(dtype=float)
    ends = [0.0]
    if len(iterations):
        ends.append(_max_end(start, duration))
    if len(requests):
        ends.append(float(requests["arrival_s"].max()))
    windows = int(max(ends) // window_s) + 1
    span = _window_spans(max(ends), window_s, windows)

    def bins(times: np.ndarray) -> np.ndarray:
        return np.minimum((times // window_s).astype(np.int64), windows - 1)

    def total(times: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(bins(times), weights=weights, minlength=windows)[:windows]

    def column(name: str) -> Callable[[Any], np.ndarray]:
        """A column's values at some rows, as floats."""
        values = iterations[name].to_numpy()
        return lambda rows: values[rows].astype(float)

    kv_used = iterations["kv_blocks_used"].to_numpy()
    kv_total = iterations["kv_blocks_total"].to_numpy()
    sums = _Windows(start, duration, window_s, windows)
    sums.run(
        integrands={  # Σ value × time spent in each window
            "busy": lambda rows: np.ones(len(start[rows])),
            "batch": column("batch_size"),
            "kv_frac": lambda rows: (
                kv_used[rows].astype(float) / np.maximum(kv_total[rows].astype(float), 1.0)
            ),
            "k_weight": column("mean_k"),
            "waiting": column("waiting"),
        },
        at_start={"drafted": column("drafted_tokens"), "accepted": column("accepted_tokens")},
        at_end={"emitted": column("emitted_tokens")},
    )
    busy, drafted, accepted = sums.sums["busy"], sums.sums["drafted"], sums.sums["accepted"]
    finished = requests["finish_s"].to_numpy(dtype=float)
    finished = finished[~np.isnan(finished)]
    with np.errstate(invalid="ignore", divide="ignore"):
        frame = pd.DataFrame(
            {
                "t_s": np.arange(windows) * window_s,
                "output_tokens_per_s": sums.sums["emitted"] / span,
                "requests_completed": total(finished).astype(np.int64),
                "arrivals": total(requests["arrival_s"].to_numpy(dtype=float)).astype(np.int64),
                "waiting": sums.sums["waiting"] / span,
                "kv_utilization": sums.sums["kv_frac"] / (span * replicas),
                "batch_size": np.where(busy > 0, sums.sums["batch"] / busy, 0.0),
                "mean_k": np.where(busy > 0, sums.sums["k_weight"] / busy, 0.0),
                "acceptance_rate": np.where(drafted > 0, accepted / drafted, np.nan),
                "span_s": span,
            }
        )
    return frame


def _window_spans(end_s: float, window_s: float, windows: int) -> np.ndarray:
    """Seconds of the run each window covers: ``window_s``, but the last window only up to the
    run's end ``end_s`` (a whole window when the run ends on its start, as an empty run does)."""
    span = np.full(windows, window_s)
    last = min(window_s, end_s - (windows - 1) * window_s)
    if last > 0:
        span[-1] = last
    return span
