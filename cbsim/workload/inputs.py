"""What generating a workload reads from a scenario, read once.

A scenario's workload section (:class:`cbsim.schema.workload.Workload`: its arrivals, lengths,
trace, sessions, prompt pool) and the few fields from elsewhere that shape its requests: the seed
its named random streams derive from, a speculative acceptance trace that supplies the lengths,
the horizon and the timeseries window its size is checked against. :func:`cbsim.workload.build.read_workload`
reads them; everything below it takes its own part of them, never the scenario.
"""

from __future__ import annotations

from dataclasses import dataclass

from cbsim.schema.workload import Workload


@dataclass(frozen=True, slots=True)
class WorkloadInputs:
    """A scenario's workload section and the other fields its generation needs."""

    workload: Workload
    seed: int
    acceptance_trace: str | None  # a speculative acceptance trace's path: it supplies the lengths
    missing_lengths: tuple[str, ...]  # length fields the workload lacks and nothing supplies
    horizon_s: float | None
    window_s: float  # the timeseries window
    source: str | None  # the scenario's file, for messages
