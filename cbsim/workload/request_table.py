"""The requests of a run as columns: one row per request, written when the request is done with.

A :class:`~cbsim.workload.request.Request` is a Python object of about 400 bytes with its fields; keeping
every one alive until the run ends makes memory grow by that much per request. The engine instead
hands each request to a :class:`RequestTable` as soon as nothing can change it any more (it
finished, was rejected, or the run ended with it still in flight) and forgets it, so only the
requests in flight are objects. The table keeps the fields the requests DataFrame needs in typed
numpy columns (about 115 bytes a request, 160 when speculating), row ``request_id`` for request
``request_id``.

The columns are preallocated when the number of requests is known (an open-loop workload) and
double when a row lands past their end (a closed loop). Requests are copied into them in batches
of :data:`FLUSH_EVERY` (a column at a time, far cheaper than element by element), so the table
briefly holds on to that many request objects. Columns only a speculative run (or one with a
prefix cache) writes stay at their
untouched zeros otherwise (pages the operating system has not had to back with memory).

:meth:`RequestTable.frame` builds the requests DataFrame (columns in :mod:`cbsim.engine.recorder`) from
views of the columns, copying only what the frame derives.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from cbsim.common.columns import Coded, ColumnTable
from cbsim.workload.request import Request, Status

if TYPE_CHECKING:
    import pandas as pd

FLUSH_EVERY = 4096
MIN_CAPACITY = 1024

# (field, dtype) copied from every request
_FIELDS: tuple[tuple[str, type], ...] = (
    ("request_id", np.int64),
    ("replica", np.int64),
    ("client", np.int64),
    ("sent_s", np.float64),
    ("arrival_s", np.float64),
    ("first_scheduled_s", np.float64),
    ("first_token_s", np.float64),
    ("finish_s", np.float64),
    ("first_row", np.int64),
    ("last_row", np.int64),
    ("prompt_tokens", np.int64),
    ("output_tokens", np.int64),
    ("generated", np.int64),
    ("preemptions", np.int64),
)
# fields only runs with a prefix cache change from zero
_PREFIX_FIELDS: tuple[tuple[str, type], ...] = (
    ("cached_tokens", np.int64),
    ("cached_tokens_cpu", np.int64),
    ("kv_load_s", np.float64),
)
# fields only disaggregated runs write
_TRANSFER_FIELDS: tuple[tuple[str, type], ...] = (
    ("prefill_replica", np.int64),
    ("kv_wait_s", np.float64),
    ("kv_transfer_s", np.float64),
    ("kv_arrived_s", np.float64),
)
# fields only staged loads write
_STAGE_FIELDS: tuple[tuple[str, type], ...] = (("stage", np.int64),)
# fields only speculative runs change from zero
_SPEC_COUNTS = ("spec_steps", "drafted_tokens", "accepted_tokens", "decode_steps")
# columns of the request's speculative decoder: its rejected steps and acceptance EMA (NaN without)
_SPEC_FIELDS: tuple[tuple[str, type], ...] = (
    *((name, np.int64) for name in _SPEC_COUNTS),
    ("rejected_steps", np.int64),
    ("ema_acceptance", np.float64),
)
_STATUSES = list(Status)
_STATUS_CODE = {status: code for code, status in enumerate(_STATUSES)}
STATUS_NAMES = tuple(status.name.lower() for status in _STATUSES)
"""The requests' ``status`` values, by code."""


@functools.cache
def status_dtype() -> pd.CategoricalDtype:
    """The requests frame's ``status`` column: every status a category, whichever the rows hold."""
    import pandas as pd

    return pd.CategoricalDtype(list(STATUS_NAMES))


@functools.cache
def reason_dtype() -> Any:
    """The requests frame's ``rejected_reason`` column (``""`` when not rejected): what pandas
    makes of text (``str`` from pandas 3 on, ``object`` before), also when the frame has no rows
    (where an empty list would make it float64)."""
    import pandas as pd

    return pd.Series([""]).dtype


def __getattr__(name: str) -> Any:
    """``STATUS_DTYPE`` and ``REASON_DTYPE``, made when first read (they need pandas)."""
    if name == "STATUS_DTYPE":
        return status_dtype()
    if name == "REASON_DTYPE":
        return reason_dtype()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _status_column(coded: Coded) -> Any:
    import pandas as pd

    return pd.Categorical.from_codes(coded.codes, dtype=status_dtype())


def _reason_column(coded: Coded) -> Any:
    import pandas as pd

    return pd.Series(coded.decoded(), dtype=reason_dtype())


class RequestTable:
    """Per-request columns, row ``i`` for the request stored at row ``i`` (its ``request_id``).

    ``capacity``: rows to allocate up front (the number of requests, when known); the columns
    grow by doubling past it. ``speculative``: whether requests carry speculative counts (without,
    those columns are left at zero, NaN for the acceptance EMA, and never written); ``cached``
    the same for prefix-cache reuse."""

    def __init__(
        self,
        capacity: int = 0,
        *,
        speculative: bool = True,
        cached: bool = True,
        disaggregated: bool = False,
        staged: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        self.speculative = speculative
        self.cached = cached
        self.disaggregated = disaggregated
        # a staged load's requests get a ``stage`` column; with a client timeout, a timed-out
        # request's first token counts only when it reached the client before the timeout
        self.staged = staged
        self.timeout_s = timeout_s
        self.rows = 0  # one past the highest row stored
        self.stored = 0  # rows stored (equal to ``rows`` once every row is in)
        self._capacity = 0
        self._columns: dict[str, np.ndarray] = {}
        self._status = np.zeros(0, dtype=np.int8)
        self._reason = np.zeros(0, dtype=np.int8)
        self._reasons: list[str] = [""]  # rejection reasons by code
        self._reason_code = {"": 0}
        self._pending: list[Request] = []
        self._pending_rows: list[int] = []
        self._allocate(capacity)

    @classmethod
    def from_requests(cls, requests: Sequence[Request]) -> RequestTable:
        """A table of ``requests`` in their order (row i for the i-th, whatever its id)."""
        table = cls(len(requests))
        for row, req in enumerate(requests):
            table.store(req, row)
        table.flush()
        return table

    @property
    def capacity(self) -> int:
        """Rows the columns have room for before they next grow."""
        return self._capacity

    def __len__(self) -> int:
        return self.rows

    # ------------------------------------------------------------------ writing

    def store(self, req: Request, row: int | None = None) -> None:
        """Take ``req`` (final: nothing changes it any more) into row ``row`` (default: its id).
        It is copied at the next :meth:`flush`, which storing every :data:`FLUSH_EVERY` makes."""
        self._pending.append(req)
        self._pending_rows.append(req.request_id if row is None else row)
        if len(self._pending) >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Copy the requests stored since the last flush into the columns and let them go."""
        pending, rows_list = self._pending, self._pending_rows
        if not pending:
            return
        self._pending, self._pending_rows = [], []
        n = len(pending)
        rows = np.fromiter(rows_list, dtype=np.int64, count=n)
        top = int(rows.max()) + 1
        if top > self._capacity:
            self._allocate(max(top, 2 * self._capacity, MIN_CAPACITY))
        columns = self._columns

        def put(name: str, dtype: type, values: Iterable[Any]) -> None:
            columns[name][rows] = np.fromiter(values, dtype=dtype, count=n)

        for name, dtype in _FIELDS:
            put(name, dtype, map(attrgetter(name), pending))
        if self.cached:
            for name, dtype in _PREFIX_FIELDS:
                put(name, dtype, map(attrgetter(name), pending))
        if self.disaggregated:
            for name, dtype in _TRANSFER_FIELDS:
                put(name, dtype, map(attrgetter(name), pending))
        if self.staged:
            for name, dtype in _STAGE_FIELDS:
                put(name, dtype, map(attrgetter(name), pending))
        if self.speculative:
            for name in _SPEC_COUNTS:
                put(name, np.int64, map(attrgetter(name), pending))
            put("rejected_steps", np.int64, (getattr(r.spec, "rejections", 0) for r in pending))
            put(
                "ema_acceptance",
                np.float64,
                (getattr(r.spec, "ema_acceptance", math.nan) for r in pending),
            )
        status_code = _STATUS_CODE
        self._status[rows] = np.fromiter(
            (status_code[r.status] for r in pending), dtype=np.int8, count=n
        )
        self._reason[rows] = np.fromiter(
            (self._code(r.rejected_reason) for r in pending), dtype=np.int8, count=n
        )
        self.rows = max(self.rows, top)
        self.stored += n

    def _code(self, reason: str) -> int:
        code = self._reason_code.get(reason)
        if code is None:
            code = self._reason_code[reason] = len(self._reasons)
            self._reasons.append(reason)
        return code

    def _allocate(self, capacity: int) -> None:
        """Columns of ``capacity`` rows, keeping the rows so far. They start as zeros (memory the
        system backs only once a row is written)."""
        old = self._capacity

        def grown(column: np.ndarray | None, dtype: type) -> np.ndarray:
            new: np.ndarray = np.zeros(capacity, dtype=dtype)
            if column is not None:
                new[:old] = column[:old]
            return new

        columns = self._columns
        for name, dtype in (
            *_FIELDS, *_PREFIX_FIELDS, *_TRANSFER_FIELDS, *_SPEC_FIELDS, *_STAGE_FIELDS,
        ):  # fmt: skip
            columns[name] = grown(columns.get(name), dtype)
        self._status = grown(self._status, np.int8)
        self._reason = grown(self._reason, np.int8)
        self._capacity = capacity

    # ------------------------------------------------------------------ reading

    def column(self, name: str) -> np.ndarray:
        """A view of the stored rows of one of the copied fields (see ``_FIELDS``)."""
        self.flush()
        return self._columns[name][: self.rows]

    def last_event_s(self) -> float:
        """The latest arrival or finish of the requests stored (0.0 when none)."""
        arrival = self.column("arrival_s")
        finish = self.column("finish_s")
        last = float(arrival.max()) if len(arrival) else 0.0
        later = finish[finish > last]
        return float(later.max()) if len(later) else last

    def frame(self, delivered: np.ndarray | None = None) -> pd.DataFrame:
        """One row per request stored, in row order, with derived latencies (see
        :meth:`columns`)."""
        return self.columns(delivered).frame()

    def columns(self, delivered: np.ndarray | None = None) -> ColumnTable:
        """The requests frame's columns: one row per request stored, in row order, with derived
        latencies.

        ``delivered``: per iteration row, when the front end streamed its tokens; None when tokens
        reach the client as the step that made them ends."""
        self.flush()
        n = self.rows
        if self.stored != n:
            raise ValueError(f"request table: {n - self.stored} of its {n} rows never stored")

        def col(name: str) -> np.ndarray:
            return self._columns[name][:n]

        sent = col("sent_s")
        arrival = col("arrival_s")
        first = col("first_token_s")
        finish = col("finish_s")
        if delivered is not None and n:
            first_row = col("first_row")
            last_row = col("last_row")
            client_first = np.where(first_row >= 0, delivered[np.maximum(first_row, 0)], np.nan)
            done = ~np.isnan(finish)
            client_finish = np.where(done, delivered[np.maximum(last_row, 0)], np.nan)
        else:  # the same values, but columns of their own
            client_first, client_finish = first.copy(), finish.copy()
        if self.timeout_s is not None and n:
            # a timed-out request's first token counts only if it reached the client in time
            timed_out = self._status[:n] == _STATUS_CODE[Status.TIMED_OUT]
            client_first[timed_out & ~(client_first - sent <= self.timeout_s)] = np.nan
        outputs = col("output_tokens")
        drafted = col("drafted_tokens")
        decode_steps = col("decode_steps")
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(outputs > 1, (client_finish - client_first) / (outputs - 1), np.nan)
            server_tpot = np.where(outputs > 1, (finish - first) / (outputs - 1), np.nan)
            if self.speculative:
                mean_k = np.where(decode_steps > 0, drafted / np.maximum(decode_steps, 1), 0.0)
            else:  # no decode steps counted: 0.0 throughout
                mean_k = np.zeros(n)
        ema = col("ema_acceptance") if self.speculative else np.full(n, np.nan)
        prefill_replica = col("prefill_replica") if self.disaggregated else np.full(n, -1)
        kv_arrived = col("kv_arrived_s") if self.disaggregated else np.full(n, np.nan)
        status = Coded(self._status[:n], STATUS_NAMES, _status_column)
        reasons = Coded(self._reason[:n], tuple(self._reasons), _reason_column)
        stage = {"stage": col("stage")} if self.staged else {}
        return ColumnTable(
            {
                "request_id": col("request_id"),
                "replica": col("replica"),
                "client": col("client"),
                "arrival_s": sent,
                "first_token_s": client_first,
                "finish_s": client_finish,
                "prompt_tokens": col("prompt_tokens"),
                "cached_tokens": col("cached_tokens"),
                "cached_tokens_cpu": col("cached_tokens_cpu"),
                "kv_load_s": col("kv_load_s"),
                "prefill_replica": prefill_replica,
                "kv_wait_s": col("kv_wait_s"),
                "kv_transfer_s": col("kv_transfer_s"),
                "kv_arrived_s": kv_arrived,
                "output_tokens": outputs,
                "ttft_s": client_first - sent,
                "tpot_s": tpot,
                "e2e_s": client_finish - sent,
                "queue_s": col("first_scheduled_s") - arrival,
                "preemptions": col("preemptions"),
                "spec_steps": col("spec_steps"),
                "drafted_tokens": drafted,
                "accepted_tokens": col("accepted_tokens"),
                "mean_k": mean_k,
                "decode_steps": decode_steps,
                "rejected_steps": col("rejected_steps"),
                "ema_acceptance": ema,
                "status": status,
                "generated_tokens": col("generated"),
                "rejected_reason": reasons,
                "server_arrival_s": arrival,
                "server_first_token_s": first,
                "server_finish_s": finish,
                "server_ttft_s": first - arrival,
                "server_tpot_s": server_tpot,
                "server_e2e_s": finish - arrival,
                **stage,
            },
            n,
        )
