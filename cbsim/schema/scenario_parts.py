"""What the modules below the whole scenario read of one: its cluster, scheduler and speculative
sections, and a copy with some of them replaced.

The pools a cluster is split into (:mod:`cbsim.schema.pools`), the engine's defaults
(:mod:`cbsim.schema.engine_defaults`) and a replica's memory (:mod:`cbsim.cost.engine_memory`) work on
a scenario, and the scenario (:class:`cbsim.schema.scenario.Scenario`) writes its pools out with
them; they name it by these protocols, so that it can sit above them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, Self, TypeVar

from cbsim.schema.cluster import Cluster
from cbsim.schema.scheduler import Scheduler
from cbsim.schema.speculative import Speculative


class SectionCopy(Protocol):
    """A validated section (a pydantic model): the keys the user set, and a copy with updates."""

    __pydantic_fields_set__: set[str]

    @property
    def model_fields_set(self) -> set[str]: ...

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> Self: ...


class ScenarioParts(SectionCopy, Protocol):
    """A scenario's sections that decide how a replica runs."""

    @property
    def cluster(self) -> Cluster: ...

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def speculative(self) -> Speculative: ...


ScenarioT = TypeVar("ScenarioT", bound=ScenarioParts)

__all__ = ["ScenarioParts", "ScenarioT", "SectionCopy"]
