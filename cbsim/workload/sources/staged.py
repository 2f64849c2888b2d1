"""Rate stages: open-loop sends at one rate after another, each stage after the last drained.

The stages themselves are a load generator's (:class:`cbsim.engine.load_generator.LoadGenerator`, which
also times clients out; :class:`StageSender` is what this source needs of it): its process sends
each stage's requests and waits for the stage to drain before the next starts. This source starts
that process and reads its state.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol

import numpy as np

from cbsim.workload.drawn import StagedWorkload
from cbsim.workload.sources.base import RequestSource, Sender

__all__ = ["StageSender", "Stages"]


class StageSender(Protocol):
    """What sends a staged workload: the process that sends it stage after stage, whether it is
    still sending, and when its next send is due."""

    @property
    def sending(self) -> bool: ...

    @property
    def next_send_s(self) -> float: ...

    def stages(self) -> Generator[Any, Any, None]: ...


class Stages(RequestSource):
    """A staged workload's sends, made by the simulation's load generator."""

    def __init__(self, sim: Sender, staged: StagedWorkload, load: StageSender) -> None:
        self.sim = sim
        self.staged = staged
        self.load = load

    def start(self) -> None:
        self.sim.env.process(self.load.stages())

    def next_send_s(self) -> float:
        return self.load.next_send_s

    def all_sent(self) -> bool:
        return not self.load.sending and self.sim.idle()

    def prompt_lengths(self) -> np.ndarray:
        lengths = self.staged.lengths  # request i was sent with the i-th lengths
        return np.fromiter((lengths[i][0] for i in range(self.sim.sent)), dtype=np.int64)
