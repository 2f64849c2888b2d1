"""Request sources (see :mod:`cbsim.workload.sources.base`): the one a workload calls for, and what a
workload tells the run before it starts (its prompt pool, the rows its requests will take)."""

from __future__ import annotations

import numpy as np

from cbsim.workload.drawn import ClosedLoopWorkload, RequestSpecs, StagedWorkload
from cbsim.workload.prompt_pool import PoolPrompts
from cbsim.workload.sessions import SessionWorkload
from cbsim.workload.sources.base import RequestSource, Sender
from cbsim.workload.sources.closed_loop import ClosedLoop
from cbsim.workload.sources.open_loop import OpenLoop
from cbsim.workload.sources.sessions import Sessions
from cbsim.workload.sources.staged import Stages, StageSender
from cbsim.workload.sources.trace_replay import TraceReplay

__all__ = [
    "INITIAL_TABLE_ROWS",
    "ClosedLoop",
    "OpenLoop",
    "RequestSource",
    "Sender",
    "Sessions",
    "StageSender",
    "Stages",
    "TraceReplay",
    "Workload",
    "prompt_pool",
    "source_for",
    "table_rows",
]

Workload = RequestSpecs | ClosedLoopWorkload | SessionWorkload | StagedWorkload


def source_for(sim: Sender, workload: Workload, load: StageSender | None) -> RequestSource:
    """The source that sends ``workload``'s requests into ``sim`` (a staged workload's sends are
    its load generator's)."""
    if isinstance(workload, ClosedLoopWorkload):
        return ClosedLoop(sim, workload)
    if isinstance(workload, SessionWorkload):
        return Sessions(sim, workload)
    if isinstance(workload, StagedWorkload):
        assert load is not None
        return Stages(sim, workload, load)
    if workload.prefix_ids is not None:
        return TraceReplay(sim, workload)
    return OpenLoop(sim, workload)


def prompt_pool(workload: Workload) -> PoolPrompts | None:
    """The workload's prompt pool (workload.prompt_pool), if it has one."""
    if isinstance(workload, RequestSpecs):
        return workload.pool
    if isinstance(workload, ClosedLoopWorkload | StagedWorkload):
        return workload.lengths.pool
    return None


INITIAL_TABLE_ROWS = 4096
"""Rows a request table starts with when a horizon cuts a run whose sends are not known ahead."""


def table_rows(workload: Workload, horizon_s: float | None) -> int:
    """Rows to allocate the request table up front: the requests the run will send, where known
    (an open-loop workload's arrivals before the horizon; every request of a workload without a
    horizon); a run a horizon cuts whose sends come out of the run starts with at most
    :data:`INITIAL_TABLE_ROWS` and the table grows as rows arrive. (Allocating every request of
    a long workload cut to a short horizon took gigabytes for a few rows.)"""
    if isinstance(workload, RequestSpecs) and horizon_s is not None:
        return int(np.searchsorted(workload.arrival_s, horizon_s, side="left"))
    rows = len(workload)
    return rows if horizon_s is None else min(rows, INITIAL_TABLE_ROWS)
