"""The scenario as a whole: its sections, latency targets (``slo``), how results are summarised
(``output``), and its resolved form as plain data (what a result folder's ``scenario.yaml``
holds).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from cbsim.common.limits import Seconds, Seed, WindowSeconds
from cbsim.schema.base import StrictModel
from cbsim.schema.cluster import Cluster, Pool
from cbsim.schema.pool_scenarios import pool_plans_of
from cbsim.schema.scheduler import Scheduler
from cbsim.schema.speculative import Speculative, TraceAcceptance
from cbsim.schema.workload import Workload


def _duration_text(value: Any) -> Any:
    """A target written with its unit (``"300ms"``, ``"0.3s"``: :mod:`cbsim.schema.slo_syntax`) as
    seconds; anything else as it is."""
    if not isinstance(value, str):
        return value
    from cbsim.common.errors import CbsimError
    from cbsim.schema.slo_syntax import parse_duration

    try:
        return parse_duration(value, default_unit="s", field="slo")
    except CbsimError as err:
        raise ValueError(err.message) from None


TargetSeconds = Annotated[Seconds, BeforeValidator(_duration_text)]


class Slo(StrictModel):
    """Latency targets a request must meet to count towards goodput: seconds, or a duration with
    its unit (``ttft_s: 300ms``)."""

    ttft_s: TargetSeconds | None = 2.0
    tpot_s: TargetSeconds | None = 0.1
    e2e_s: TargetSeconds | None = None


class Output(StrictModel):
    """How results are summarised: the width of the timeseries windows."""

    timeseries_window_s: WindowSeconds = 10.0


class Scenario(StrictModel):
    """One simulation, fully specified.

    The run drains: it ends when every admitted request has finished, unless ``horizon_s`` stops
    it earlier (requests still in the system are then reported unfinished). ``fast_forward``
    advances runs of pure-decode iterations in one event (identical results, see
    :mod:`cbsim.engine.decode_run`); turn it off to step every iteration.
    """

    name: str = "scenario"
    seed: Seed = 0
    workload: Workload
    cluster: Cluster = Field(default_factory=Cluster)
    scheduler: Scheduler = Field(default_factory=Scheduler)
    speculative: Speculative = Field(default_factory=Speculative)
    slo: Slo = Field(default_factory=Slo)
    output: Output = Field(default_factory=Output)
    horizon_s: Seconds | None = None
    fast_forward: bool = True

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if not name or any(c in name for c in "/\\\0") or name in {".", ".."}:
            raise ValueError("name must be a non-empty string without path separators")
        return name

    def missing_lengths(self) -> list[str]:
        """Length fields the workload lacks (lengths can come from a trace or acceptance trace)."""
        wl = self.workload
        from_acceptance_trace = self.speculative.enabled and isinstance(
            self.speculative.acceptance, TraceAcceptance
        )
        if wl.trace is not None or wl.sessions is not None or from_acceptance_trace:
            return []
        names = ["prompt_tokens", "output_tokens"] if wl.prompt_pool is None else ["output_tokens"]
        return [n for n in names if getattr(wl, n) is None]

    def to_dict(self) -> dict[str, Any]:
        """The resolved scenario as plain data (round-trips through :func:`cbsim.run.loading.load_scenario`).

        A pooled cluster (``disaggregation`` or ``pools``) has no ``replicas`` of its own, and
        each pool is written with every setting its replicas ran with (:func:`_resolved_pools`),
        since the cluster's resolved keys, read back as set, would otherwise reach the pools."""
        data = self.model_dump(mode="json")
        if self.cluster.pooled:
            _resolved_pools(self, data["cluster"])
        return data


def _resolved_pools(scenario: Scenario, cluster: dict[str, Any]) -> None:
    """Write into ``cluster`` (the dumped cluster of a pooled ``scenario``) each pool as its
    replicas run it: every pool key from the pool's resolved cluster, its whole resolved
    scheduler, no cluster-wide ``replicas``."""
    cluster.pop("replicas", None)
    plans = pool_plans_of(scenario)
    pools = [_resolved_pool(plan.scenario) for plan in plans]
    if scenario.cluster.disaggregation is not None:
        cluster["disaggregation"]["prefill"], cluster["disaggregation"]["decode"] = pools
    else:
        cluster["pools"] = pools


def _resolved_pool(pool_scenario: Scenario) -> dict[str, Any]:
    """A pool's keys as its replicas run them (the scenario :func:`cbsim.schema.pools.pool_plans`
    gives them)."""
    resolved = pool_scenario.cluster.model_dump(mode="json")
    keys = {name: resolved[name] for name in Pool.model_fields if name != "scheduler"}
    keys["scheduler"] = pool_scenario.scheduler.model_dump(mode="json")
    return keys
