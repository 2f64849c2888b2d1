"""The layouts a plan searches, and why some of them cannot run at all.

A *layout* is everything a deployment fixes before traffic arrives: the GPU kind, how one model
instance is spread over GPUs (tensor, pipeline, expert and attention-data parallelism: ``tp``,
``pp``, ``ep``, ``dp``), the engine's batch cap (``max_num_seqs``) and token budget
(``max_num_batched_tokens``), and whether prefill and decode share the instance (aggregated) or
run on separate pools of instances (disaggregated, ``xPyD``: ``x`` prefill instances feeding one
decode instance).

:func:`parallel_layouts` lists the aggregated candidates: for each GPU kind, every ``tp`` ×
``pp`` (× ``dp`` and ``ep`` for mixture-of-experts models) within the GPU budget (a node, or
``--total-gpus``), at the engine's default batching; :func:`single_instances` the instances a
disaggregated pool may use (the planner feeds each decode instance, as an ``xP1D`` unit, from the
prefill instance that serves the most prompts per GPU); :func:`batching_variants` a layout at
every batch cap × token budget.
:func:`infeasible_reason` prunes one before any simulation, with the same checks ``cbsim run``
applies (:func:`cbsim.load_scenario`: attention heads shared evenly over ``tp``, experts over
``ep``, weights fitting the GPUs' memory) plus one of its own: the KV cache left beside the
weights must hold at least one whole request. :func:`layout_data` is the scenario of a layout.
:func:`unbuildable` says which option leaves no layout at all (every ``--pp`` beyond the model's
layers or the GPU budget, ...): that is bad input, unlike layouts that exist and fail the SLO.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cbsim.catalog.hardware import get_gpu
from cbsim.catalog.models import get_model
from cbsim.common.errors import CbsimError
from cbsim.cost.engine_profile import load_engine_profile
from cbsim.run.loading import load_scenario
from cbsim.schema.engine_defaults import apply_engine_defaults
from cbsim.schema.replica_memory import replica_memory
from cbsim.schema.scenario import Scenario

Mode = Literal["aggregated", "disaggregated"]


@dataclass(frozen=True, slots=True)
class Instance:
    """One model instance: ``tp`` × ``pp`` × ``dp`` GPUs of kind ``gpu``; the routed experts of a
    mixture-of-experts model spread over ``ep`` of them."""

    gpu: str
    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def label(self) -> str:
        """``TP4``, ``TP2·PP2``, ``TP1·DP8·EP8``."""
        parts = [f"TP{self.tp}"]
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.dp > 1:
            parts.append(f"DP{self.dp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        return "·".join(parts)

    def cluster_keys(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "tp": self.tp, "pp": self.pp, "ep": self.ep, "dp": self.dp}

    def to_dict(self) -> dict[str, Any]:
        return {**self.cluster_keys(), "gpus": self.gpus}


@dataclass(frozen=True, slots=True)
class Batching:
    """The engine's batch cap and token budget; None: the engine's default for the GPU."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None

    @property
    def is_default(self) -> bool:
        return self.max_num_seqs is None and self.max_num_batched_tokens is None

    def scheduler_keys(self) -> dict[str, int]:
        keys: dict[str, int] = {}
        if self.max_num_seqs is not None:
            keys["max_batch_size"] = self.max_num_seqs
        if self.max_num_batched_tokens is not None:
            keys["max_batched_tokens"] = self.max_num_batched_tokens
        return keys


@dataclass(frozen=True, slots=True)
class Layout:
    """A deployment to search: an aggregated replica (``instance``), or, with ``prefill``, a
    disaggregated unit of prefill instances feeding one decode instance (``instance``), whose
    ``batching`` applies to the decode instance (the prefill instances keep the engine's)."""

    instance: Instance
    batching: Batching = field(default_factory=Batching)
    prefill: Instance | None = None

    @property
    def mode(self) -> Mode:
        return "aggregated" if self.prefill is None else "disaggregated"

    @property
    def gpu(self) -> str:
        return self.instance.gpu

    def name(self, prefill_instances: int | None = None) -> str:
        """``h100-sxm TP4`` or ``h100-sxm 3P(TP2)+1D(TP4)`` (``xP`` before the search sizes it)."""
        if self.prefill is None:
            return f"{self.gpu} {self.instance.label()}"
        x = "x" if prefill_instances is None else str(prefill_instances)
        return f"{self.gpu} {x}P({self.prefill.label()})+1D({self.instance.label()})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "gpu": self.gpu,
            **{k: v for k, v in self.instance.to_dict().items() if k != "gpu"},
            "max_num_seqs": self.batching.max_num_seqs,
            "max_num_batched_tokens": self.batching.max_num_batched_tokens,
            "prefill": None if self.prefill is None else self.prefill.to_dict(),
        }


@dataclass(frozen=True)
class SearchSpace:
    """What :func:`enumerate_layouts` combines. ``max_gpus``: the most GPUs one replica (or one
    disaggregated unit's instance) may take; ``dp`` and ``ep`` apply to mixture-of-experts
    models only."""

    gpus: Sequence[str]
    tp: Sequence[int]
    pp: Sequence[int]
    dp: Sequence[int]
    max_num_seqs: Sequence[int]
    max_num_batched_tokens: Sequence[int]
    max_gpus: int | None
    disaggregated: bool


def _instances(space: SearchSpace, gpu: str, moe: bool) -> Iterator[Instance]:
    """Every instance of ``gpu`` within the budget: tp × pp (× dp with ep = tp × dp, and tp
    with ep = tp, for a mixture of experts)."""
    limit = space.max_gpus if space.max_gpus is not None else get_gpu(gpu).gpus_per_node
    for tp in space.tp:
        for pp in space.pp:
            for dp in space.dp if moe else [1]:
                if tp * pp * dp > limit:
                    continue
                if dp > 1:
                    yield Instance(gpu, tp, pp, tp * dp, dp)
                    continue
                yield Instance(gpu, tp, pp)
                if moe and tp > 1:
                    yield Instance(gpu, tp, pp, tp, 1)


def unbuildable(space: SearchSpace, model_name: str) -> tuple[str, str] | None:
    """(the option, why) when ``space`` holds no layout by construction: every value of
    ``--tp``, ``--pp`` or (a mixture of experts) ``--dp`` is one no layout can take, or no
    combination fits the GPU budget; None when some layout exists (whether it fits in memory and
    meets the SLO is the search's to find)."""
    model = get_model(model_name)
    budgets = [space.max_gpus or get_gpu(gpu).gpus_per_node for gpu in space.gpus]
    budget = (
        f"--total-gpus {space.max_gpus}"
        if space.max_gpus is not None
        else f"one {' or '.join(space.gpus)} node ({max(budgets)} GPUs; --total-gpus N allows "
        "layouts of up to N)"
    )
    dps = list(space.dp) if model.is_moe else [1]
    tp_problems = [_tp_problem(model_name, tp) for tp in space.tp]
    if all(tp_problems):
        return "--tp", str(tp_problems[0])
    if min(space.pp) > model.num_layers:
        return "--pp", (
            f"every value ({_listed(space.pp)}) exceeds {model.name}'s {model.num_layers} layers "
            "(each pipeline stage holds at least one)"
        )
    if model.is_moe and min(space.pp) > 1 and min(dps) > 1:
        return "--dp", (
            f"every --dp ({_listed(dps)}) with every --pp ({_listed(space.pp)}): pipeline "
            "stages with attention data parallelism are not modelled; give --dp 1 or --pp 1"
        )
    for option, values in (("--tp", space.tp), ("--pp", space.pp), ("--dp", dps)):
        if min(values) > max(budgets):
            return option, f"every value ({_listed(values)}) takes more GPUs than {budget}"
    valid_tp = [tp for tp, problem in zip(space.tp, tp_problems, strict=True) if not problem]
    least = min(valid_tp) * min(space.pp) * min(dps)
    if least > max(budgets):
        product = "--tp x --pp" + (" x --dp" if model.is_moe else "")
        return "--pp" if min(space.pp) > 1 else "--tp", (
            f"the smallest layout ({product} = {least} GPUs) takes more GPUs than {budget}"
        )
    return None


def _tp_problem(model_name: str, tp: int) -> str | None:
    """Why no layout can split ``model_name`` over ``tp`` GPUs (None: one can)."""
    if tp & (tp - 1) or tp > 64:
        return f"tp must be a power of two up to 64, got {tp}"
    return get_model(model_name).attention_split_problem(tp)


def _listed(values: Sequence[int]) -> str:
    return ",".join(map(str, values))


def parallel_layouts(space: SearchSpace, model_name: str) -> list[Layout]:
    """The aggregated parallel layouts of every GPU kind, at the engine's default batching."""
    moe = get_model(model_name).is_moe
    return [Layout(inst) for gpu in space.gpus for inst in _instances(space, gpu, moe)]


def batching_variants(space: SearchSpace, layout: Layout) -> list[Layout]:
    """``layout`` at every batch cap × token budget of the space (a disaggregated unit: every
    batch cap of its decode instance, whose prompts arrive prefilled)."""
    if layout.prefill is not None:
        return [
            Layout(layout.instance, Batching(seqs, None), layout.prefill)
            for seqs in space.max_num_seqs
        ]
    return [
        Layout(layout.instance, Batching(seqs, tokens))
        for seqs in space.max_num_seqs
        for tokens in space.max_num_batched_tokens
    ]


def single_instances(space: SearchSpace, gpu: str) -> list[Instance]:
    """The instances a disaggregated pool may use: tensor parallelism only (pp = dp = 1)."""
    limit = space.max_gpus if space.max_gpus is not None else get_gpu(gpu).gpus_per_node
    return [Instance(gpu, tp) for tp in space.tp if tp <= limit]


# --------------------------------------------------------------------------- scenarios


def _scheduler_with(data: dict[str, Any], keys: Mapping[str, int]) -> None:
    """Set the batch cap and budget in a scenario's scheduler (a sarathi budget given as
    ``chunk_size`` follows ``max_batched_tokens``)."""
    if not keys:
        return
    scheduler = data.setdefault("scheduler", {})
    scheduler.update(keys)
    if "max_batched_tokens" in keys and "chunk_size" in scheduler:
        scheduler["chunk_size"] = keys["max_batched_tokens"]


def layout_data(base: Mapping[str, Any], layout: Layout) -> dict[str, Any]:
    """The scenario of ``layout`` over ``base`` (the workload, SLO, engine, precision and seed):
    one replica, or one prefill and one decode instance (the search sizes the prefill pool)."""
    data = copy.deepcopy(dict(base))
    cluster = data.setdefault("cluster", {})
    for key in ("disaggregation", "pools", "replicas", "tp", "pp", "ep", "dp"):
        cluster.pop(key, None)
    if layout.prefill is None:
        cluster.update(layout.instance.cluster_keys())
        cluster["replicas"] = 1
        _scheduler_with(data, layout.batching.scheduler_keys())
        return data
    cluster["gpu"] = layout.gpu
    decode: dict[str, Any] = {"replicas": 1, **layout.instance.cluster_keys()}
    if not layout.batching.is_default:
        decode["scheduler"] = layout.batching.scheduler_keys()
    cluster["disaggregation"] = {
        "prefill": {"replicas": 1, **layout.prefill.cluster_keys()},
        "decode": decode,
        "kv_transfer": dict(
            base.get("cluster", {}).get("disaggregation", {}).get("kv_transfer", {})
        ),
    }
    return data


def prefill_data(base: Mapping[str, Any], instance: Instance) -> dict[str, Any]:
    """The scenario of one prefill instance alone: an aggregated replica whose every request asks
    for one output token (what a prefill instance computes)."""
    data = layout_data(base, Layout(instance))
    data["workload"]["output_tokens"] = {"kind": "fixed", "value": 1}
    return data


# --------------------------------------------------------------------------- feasibility


def kv_tokens(scenario: Scenario) -> int:
    """Tokens the KV cache of one attention rank holds, as the engine sizes it (a replica's
    ``dp`` ranks hold one request each where one rank holds it)."""
    resolved = apply_engine_defaults(scenario)
    rule = load_engine_profile(resolved.cluster.engine).memory
    return replica_memory(resolved, rule).rank_tokens


def infeasible_reason(data: Mapping[str, Any], request_tokens: int) -> str | None:
    """Why the scenario ``data`` of a layout cannot run (None when it can): what
    :func:`cbsim.load_scenario` refuses (heads, experts, memory, node size, the engine's scheduler
    keys), or a KV cache too small for one request of ``request_tokens`` tokens."""
    try:
        scenario = load_scenario(dict(data))
    except CbsimError as err:
        return err.message if err.field is None else f"{err.field}: {err.message}"
    from cbsim.schema.pools import pool_plans

    for plan in pool_plans(scenario):
        tokens = kv_tokens(plan.scenario)
        if tokens < request_tokens:
            where = "" if plan.name == "all" else f"{plan.name} instance: "
            return (
                f"{where}the KV cache left beside the weights holds {tokens:,} tokens; one "
                f"request needs {request_tokens:,}"
            )
    return None


def gpus_of(layout: Layout, prefill_instances: int = 1) -> int:
    """GPUs of a replica, or of an ``xP1D`` unit with ``prefill_instances`` prefill instances."""
    if layout.prefill is None:
        return layout.instance.gpus
    return prefill_instances * layout.prefill.gpus + layout.instance.gpus


def prefill_instances_for(rate: float, prefill_rate: float, cap: int | None) -> int:
    """Prefill instances an ``xP1D`` unit needs at ``rate``: enough that each takes at most the
    rate one instance sustains within the TTFT target (at most ``cap``)."""
    needed = max(1, math.ceil(rate / prefill_rate * (1 - 1e-12)))
    return needed if cap is None else max(1, min(needed, cap))
