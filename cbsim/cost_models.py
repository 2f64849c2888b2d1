"""The cost model a cluster's replicas are priced by, and a cache sharing them between runs.

A cost model is a function of a handful of cluster fields (model, GPU, parallelism, dtypes,
calibration profile and engine), so simulations that agree on those can share one: a capacity
search or a sweep builds each once (:class:`CostModelCache`). A cluster on a GPU without kernel
tables is priced from another GPU's fits, and :func:`transfer_warnings` says so, with the error
that transfer carries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from cbsim.cost import CostModel
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.cost.op_pricing import calibration_profile
from cbsim.cost.profile import DEFAULT_PROFILE, CalibrationProfile, transfer_note
from cbsim.hardware import get_gpu
from cbsim.models import get_model
from cbsim.schema.scenario import Scenario

__all__ = ["CostModelCache", "cost_model_for", "kernel_profile_for", "transfer_warnings"]


def cost_model_for(scenario: Scenario) -> CostModel:
    """The cluster's cost model: the engine's kernels on this GPU (or the named calibration
    profile) and the engine's step overhead."""
    cluster = scenario.cluster
    return CostModel(
        get_model(cluster.model),
        get_gpu(cluster.gpu),
        tp=cluster.tp,
        dtype=cluster.dtype,
        kv_dtype=cluster.effective_kv_dtype,
        calibration=cluster.calibration or DEFAULT_PROFILE,
        engine=load_engine_profile(cluster.engine),
        expert_routing=cluster.expert_routing,
        ep=cluster.ep,
        dp=cluster.dp,
        pp=cluster.pp,
    )


def kernel_profile_for(scenario: Scenario) -> CalibrationProfile | None:
    """The kernel calibration the cluster's cost model reads (None: the raw roofline)."""
    cluster = scenario.cluster
    return calibration_profile(
        cluster.calibration or DEFAULT_PROFILE, cluster.gpu, load_engine_profile(cluster.engine)
    )


def transfer_warnings(scenarios: Iterable[Scenario]) -> list[str]:
    """One warning per GPU among the clusters (a run's pools) whose kernels are priced from
    another GPU's fits, with the held-out error of that transfer."""
    notes = (transfer_note(kernel_profile_for(scenario)) for scenario in scenarios)
    return list(dict.fromkeys(note for note in notes if note))


class CostModelCache:
    """The cost models of several simulations, one per set of the cluster fields
    :func:`cost_model_for` reads, so a search of many simulations builds each once.

    Sharing is safe: a cost model is a function of those fields alone, and the tables it fills
    on demand (:meth:`CostModel.compiled`) hold the same values whichever simulation fills them."""

    _FIELDS: ClassVar[set[str]] = {
        "model", "gpu", "tp", "dtype", "kv_dtype", "calibration", "engine", "expert_routing", "ep",
        "dp", "pp",
    }  # fmt: skip

    def __init__(self) -> None:
        self._models: dict[str, CostModel] = {}

    def get(self, scenario: Scenario) -> CostModel:
        """``cost_model_for(scenario)``, built on first use."""
        key = scenario.cluster.model_dump_json(include=self._FIELDS)
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = cost_model_for(scenario)
        return model
