"""The cost model a cluster's replicas are priced by, and a cache sharing them between runs.

A cost model is a function of a handful of cluster fields (model, GPU, parallelism, dtypes,
calibration profile and engine), so simulations that agree on those can share one: a capacity
search or a sweep builds each once (:class:`CostModelCache`). A cluster on a GPU without kernel
tables is priced from another GPU's fits, and :func:`transfer_warnings` says so, with the error
that transfer carries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import get_model
from cbsim.catalog.quantization import INTEGER_FORMATS
from cbsim.cost import CostModel
from cbsim.cost.compiled import stepped_seconds
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.cost.kernel_cache import INTERPRETED_CALLS, all_cached
from cbsim.cost.op_pricing import calibration_profile, gemm_fit_for
from cbsim.cost.profile import DEFAULT_PROFILE, CalibrationProfile, transfer_note
from cbsim.engine.decode_run import decode_run_kernel
from cbsim.engine.speculative.proposers import Proposer, ProposerConfig, make_proposer
from cbsim.schema.scenario import Scenario

if TYPE_CHECKING:
    from cbsim.engine.replica import ReplicaPool

__all__ = [
    "PLAIN_KERNELS",
    "CostModelCache",
    "cost_model_for",
    "kernel_profile_for",
    "price_in_python_while_cold",
    "transfer_warnings",
    "weight_format_note",
]


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


PLAIN_KERNELS = (stepped_seconds, decode_run_kernel)
"""The kernels every plain run calls: numba's cache is cold while it lacks them."""


def price_in_python_while_cold(
    pools: Iterable[ReplicaPool], calls: int = INTERPRETED_CALLS
) -> bool:
    """Price the pools' next ``calls`` calls in Python where numba's cache lacks a plain run's
    kernels (a fresh install: see :mod:`cbsim.cost.kernel_cache`); a speculative run's kernels
    compile in any case, so it compiles at once. Returns whether pricing starts interpreted. A
    cost model already pricing in Python (shared with an earlier run) keeps its count."""
    pools = list(pools)
    costs = list({id(pool.cost): pool.cost for pool in pools}.values())
    speculative = any(pool.spec is not None for pool in pools)
    if not speculative and calls > 0 and not all_cached(PLAIN_KERNELS):
        for cost in costs:
            if not cost.cold_start.started:
                cost.cold_start.start(calls)
    return any(cost.cold_start.left > 0 for cost in costs)


def kernel_profile_for(scenario: Scenario) -> CalibrationProfile | None:
    """The kernel calibration the cluster's cost model reads (None: the raw roofline)."""
    cluster = scenario.cluster
    return calibration_profile(
        cluster.calibration or DEFAULT_PROFILE, cluster.gpu, load_engine_profile(cluster.engine)
    )


def transfer_warnings(scenarios: Iterable[Scenario]) -> list[str]:
    """One warning per GPU among the clusters (a run's pools) whose kernels are priced from
    another GPU's fits, with the held-out error of that transfer, and one per integer or fp32
    weight format priced from another precision's fits (:func:`weight_format_note`)."""
    notes = []
    for scenario in scenarios:
        profile = kernel_profile_for(scenario)
        notes += [transfer_note(profile), weight_format_note(scenario, profile)]
    return list(dict.fromkeys(note for note in notes if note))


def weight_format_note(scenario: Scenario, profile: CalibrationProfile | None) -> str | None:
    """A line saying that the cluster's integer weights (``int4``, ``int8``) or fp32 weights are
    priced on the roofline of their own bytes and peak with another precision's measured GEMM
    efficiency (no kernel table measured them), or None."""
    cluster = scenario.cluster
    dtype = cluster.dtype
    if dtype == "fp32" and profile is not None:
        return fp32_note(cluster.gpu, cluster.effective_kv_dtype)
    if dtype not in INTEGER_FORMATS or profile is None:
        return None
    gpu = get_gpu(cluster.gpu)
    _, borrowed = gemm_fit_for(profile.gemm, dtype, gpu)
    if borrowed is None:
        return None
    kernel = "Marlin W4A16" if dtype == "int4" else "int8 W8A8"
    note = (
        f"{dtype} weights on {gpu.name}: no {kernel} GEMM table was measured, so their GEMMs are "
        f"priced on the roofline of their own bytes and {'bf16' if dtype == 'int4' else 'int8'} "
        f"peak with the measured {borrowed} GEMMs' efficiency"
    )
    if get_model(cluster.model).is_moe:
        moe = (
            "the measured int4_wo MoE tables, H100's or B200's"
            if dtype == "int4"
            else "the bf16 fit"
        )
        note += f" (the routed experts from {moe})"
    return note


def fp32_note(gpu_name: str, kv_dtype: str) -> str:
    """A line saying that fp32 weights' GEMMs (and an fp32 KV cache's attention) are priced on
    the roofline of their own bytes and fp32 peak with the measured bf16 kernels' efficiency."""
    gpu = get_gpu(gpu_name)
    attention = " and attention over the fp32 KV cache" if kv_dtype == "fp32" else ""
    return (
        f"fp32 weights on {gpu.name}: no fp32 kernel table was measured, so their GEMMs"
        f"{attention} are priced on the roofline of their own bytes (4 a value) and the fp32 peak "
        f"({gpu.fp32_flops / 1e12:,.1f} TFLOP/s, no TF32) with the measured bf16 kernels' "
        "efficiency"
    )


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
        self._proposers: dict[tuple[int, str], tuple[CostModel, Proposer]] = {}

    def get(
        self, scenario: Scenario, build: Callable[[Scenario], CostModel] | None = None
    ) -> CostModel:
        """``build(scenario)`` (by default :func:`cost_model_for`), built on first use: a study
        pricing with kernels of its own (a calibration profile object, no engine) builds the
        model itself once, and the simulations it then runs on this cache are priced by it."""
        key = scenario.cluster.model_dump_json(include=self._FIELDS)
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = (build or cost_model_for)(scenario)
        return model

    def proposer(self, config: ProposerConfig, target: CostModel) -> Proposer:
        """``make_proposer(config, target)``, built on first use for each target and proposer
        (a proposer is a function of them alone, its cost model's tables as the target's)."""
        key = (id(target), config.model_dump_json())
        held = self._proposers.get(key)
        if held is None:  # the target is held too: its id is not reused while the key stands
            held = self._proposers[key] = (target, make_proposer(config, target))
        return held[1]
