"""Request sources: each workload is sent by its own source, behind one small interface."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy

from cbsim.engine.loop import Simulation
from cbsim.run.loading import load_scenario
from cbsim.workload.request import Request
from cbsim.workload.sources import (
    ClosedLoop,
    OpenLoop,
    RequestSource,
    Sender,
    Sessions,
    Stages,
    TraceReplay,
)
from tests.conftest import small_scenario


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("scenarios/static-baseline.yaml", OpenLoop),
        ("scenarios/mooncake-prefix-cache.yaml", TraceReplay),
        ("scenarios/closed-loop-trtllm-qwen3.yaml", ClosedLoop),
        ("scenarios/chat-sessions.yaml", Sessions),
        ("scenarios/staged-load-llama3-8b-h100.yaml", Stages),
    ],
)
def test_each_workload_is_sent_by_its_source(path: str, kind: type[RequestSource]) -> None:
    source = Simulation(load_scenario(path)).source
    assert type(source) is kind
    assert source.closes_loop == (kind in (ClosedLoop, Sessions))


class TwoRequests(RequestSource):
    """A source written against the interface alone: one request now, one a second later."""

    def __init__(self, sim: Sender) -> None:
        self.sim = sim

    def start(self) -> None:
        self.sim.env.process(self._sends())

    def _sends(self) -> Generator[simpy.Event, Any, None]:
        self.sim.send_now(Request(0, 0.0, 300, 20, sent_s=0.0))
        yield self.sim.env.timeout(1.0)
        self.sim.send_now(Request(1, 1.0, 300, 20, sent_s=1.0))

    def all_sent(self) -> bool:
        return self.sim.sent == 2

    def prompt_lengths(self) -> np.ndarray:
        return np.array([300, 300])


def test_a_new_source_needs_no_change_to_the_engine() -> None:
    sim = Simulation(load_scenario(small_scenario()))
    sim.source = TwoRequests(sim)
    frame = sim.run().requests
    assert frame["request_id"].tolist() == [0, 1]
    assert frame["status"].astype(str).tolist() == ["finished", "finished"]
    assert frame["arrival_s"].tolist() == [0.0, 1.0]
