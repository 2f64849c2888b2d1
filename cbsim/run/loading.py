"""Scenarios: the validated description of one simulation.

A scenario says what traffic arrives (``workload``), what serves it (``cluster``: model, GPU, tensor
parallelism, replicas, router), how each replica batches (``scheduler``), whether and how requests
decode speculatively (``speculative``) and what latency counts as good (``slo``). It is written as
YAML, validated by pydantic models that reject unknown keys, and can be overridden field by field
with dotted ``key=value`` pairs. Every error names the file, the dotted field path and the reason.

This module is the loading layer: it reads a scenario file or mapping, applies overrides, validates
it against the schema (:mod:`cbsim.schema`, one module per section) and then makes the checks that
need more than the schema (traces that exist, replicas that fit their GPUs, a workload of bounded
size). It also re-exports the schema's sections, so ``from cbsim.run.loading import Scenario`` keeps
working; modules the loader calls (the workload generator, pools, traces) import the sections from
:mod:`cbsim.schema` directly, never from here.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cbsim.common.documents import parse_yaml, read_text_file
from cbsim.common.errors import CbsimError
from cbsim.common.limits import TOTAL_GPUS
from cbsim.schema.base import StrictModel, default_kind
from cbsim.schema.cluster import (
    Cluster,
    Disaggregation,
    DType,
    KvDType,
    KvOffload,
    KvTransfer,
    Pool,
    RouterKind,
)
from cbsim.schema.engine_defaults import apply_engine_defaults
from cbsim.schema.kind_change import KindChanges, kind_changes, validate_after_kind_changes
from cbsim.schema.pools import pool_plans
from cbsim.schema.problems import TAGGED_SECTIONS, _error_from_validation, validation_problem
from cbsim.schema.scenario import Output, Scenario, Slo
from cbsim.schema.scheduler import Scheduler
from cbsim.schema.speculative import (
    Acceptance,
    BatchTablePolicy,
    DraftLength,
    DraftModelProposer,
    EagleProposer,
    EwmaLookaheadPolicy,
    FixedPolicy,
    GoodputPolicy,
    HeuristicPolicy,
    IidAcceptance,
    KPolicy,
    MtpProposer,
    NgramProposer,
    PerRequestAcceptance,
    PositionalAcceptance,
    Probability,
    Proposer,
    Speculative,
    ThresholdPolicy,
    TokenLevelAcceptance,
    TraceAcceptance,
)
from cbsim.schema.workload import (
    MAX_POOL_PROMPTS,
    MAX_STAGES,
    Arrival,
    ArrivalProcess,
    Client,
    ClosedLoopArrival,
    EmpiricalLength,
    FixedLength,
    GammaArrival,
    Length,
    LognormalLength,
    OfflineArrival,
    PoissonArrival,
    PoolLength,
    PromptPool,
    RateCurveArrival,
    Sessions,
    Stage,
    StagesArrival,
    SystemPrompt,
    TraceArrival,
    TraceReplay,
    UniformLength,
    Workload,
)

# The loader's names and the schema's sections it re-exports (see the docstring).
__all__ = [
    "MAX_POOL_PROMPTS",
    "MAX_STAGES",
    "PATH_FIELDS",
    "TAGGED_SECTIONS",
    "Acceptance",
    "Arrival",
    "ArrivalProcess",
    "BatchTablePolicy",
    "Client",
    "ClosedLoopArrival",
    "Cluster",
    "DType",
    "Disaggregation",
    "DraftLength",
    "DraftModelProposer",
    "EagleProposer",
    "EmpiricalLength",
    "EwmaLookaheadPolicy",
    "FixedLength",
    "FixedPolicy",
    "GammaArrival",
    "GoodputPolicy",
    "HeuristicPolicy",
    "IidAcceptance",
    "KPolicy",
    "KvDType",
    "KvOffload",
    "KvTransfer",
    "Length",
    "LognormalLength",
    "MtpProposer",
    "NgramProposer",
    "OfflineArrival",
    "Output",
    "PerRequestAcceptance",
    "PoissonArrival",
    "Pool",
    "PoolLength",
    "PositionalAcceptance",
    "Probability",
    "PromptPool",
    "Proposer",
    "RateCurveArrival",
    "RouterKind",
    "Scenario",
    "Scheduler",
    "Sessions",
    "Slo",
    "Speculative",
    "Stage",
    "StagesArrival",
    "StrictModel",
    "SystemPrompt",
    "ThresholdPolicy",
    "TokenLevelAcceptance",
    "TraceAcceptance",
    "TraceArrival",
    "TraceReplay",
    "UniformLength",
    "Workload",
    "apply_engine_defaults",
    "apply_overrides",
    "default_kind",
    "load_scenario",
    "parse_override",
    "read_yaml",
    "validation_problem",
]


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``dotted.key=value``; the value is parsed as YAML (numbers, booleans, lists)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise CbsimError(f"override {text!r} is not of the form dotted.key=value", field="--set")
    try:
        value = parse_yaml(raw, None) if raw.strip() else ""
    except CbsimError as err:
        if not err.message.startswith("invalid YAML"):
            raise CbsimError(err.message, field=f"--set {key.strip()}") from None
        value = raw  # not YAML: the text itself
    return key.strip(), value


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` with each dotted key set, creating intermediate mappings as needed."""
    result = copy.deepcopy(data)
    for dotted, value in overrides.items():
        node = result
        parts = dotted.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise CbsimError(
                    f"cannot set {dotted!r}: {'.'.join(parts[: i + 1])} is not a mapping",
                    field=dotted,
                )
            node = child
        node[parts[-1]] = value
    return result


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping at the top of a YAML file, or a located error (see :mod:`cbsim.common.documents`:
    UTF-8 only, no duplicate keys, bounded nesting and alias expansion)."""
    source = str(path)
    data = parse_yaml(read_text_file(path), source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise CbsimError("the top level must be a mapping of keys", source=source)
    return data


def load_scenario(
    path_or_dict: str | Path | Mapping[str, Any],
    overrides: Mapping[str, Any] | Sequence[str] | None = None,
    *,
    seed: int | None = None,
    written: bool = False,
) -> Scenario:
    """Read and validate a scenario from a YAML path or a mapping.

    ``overrides`` are dotted keys (``{"scheduler.kind": "sarathi"}`` or ``["scheduler.kind=sarathi"]``)
    applied before validation; ``seed`` replaces the scenario's seed. ``written``: the scenario a
    result folder holds, possibly written by an older cbsim (see :func:`_migrate_written`).
    """
    source: str | None = None
    if isinstance(path_or_dict, Mapping):
        data = copy.deepcopy(dict(path_or_dict))
    else:
        path = Path(path_or_dict)
        source = str(path)
        data = _resolve_relative_paths(read_yaml(path), path.parent)
    if written:
        data = _migrate_written(data)
    changes: KindChanges = {}
    if overrides:
        pairs: dict[str, Any] = (
            dict(parse_override(o) for o in overrides)
            if not isinstance(overrides, Mapping)
            else dict(overrides)
        )
        changes = kind_changes(data, pairs)
        data = apply_overrides(data, pairs)
    if seed is not None:
        data["seed"] = seed
    try:
        scenario = validate_after_kind_changes(data, changes, Scenario.model_validate)
    except ValidationError as err:
        raise _error_from_validation(err, source) from None
    _check_calibration(scenario.cluster, source)
    try:
        scenario = apply_engine_defaults(scenario)
    except CbsimError as err:
        raise err.located(source=source) from None
    _check_feasible(scenario, source)
    return scenario


def _migrate_written(data: dict[str, Any]) -> dict[str, Any]:
    """A result folder's resolved scenario as this cbsim reads it. Older ones wrote every
    scheduler key, read or not by the kind, and ran ``sarathi`` on ``chunk_size`` alone: the keys
    the kind does not read are dropped and a sarathi ``max_batched_tokens`` gives way to its
    ``chunk_size`` (the budget that run used)."""
    sections = [data.get("scheduler")]
    cluster = data.get("cluster")
    if isinstance(cluster, dict):
        _migrate_written_pools(cluster)
        split = cluster.get("disaggregation")
        if isinstance(split, dict):
            sections += [pool.get("scheduler") for pool in split.values() if isinstance(pool, dict)]
        pools = cluster.get("pools")
        if isinstance(pools, list):
            sections += [pool.get("scheduler") for pool in pools if isinstance(pool, dict)]
    for section in sections:
        if not isinstance(section, dict) or not isinstance(section.get("kind"), str):
            continue
        kind = Scheduler.canonical_kind(section["kind"])
        if kind not in Scheduler.USED_KEYS:
            continue
        # before the writer kept only read keys (async_scheduling among them), both budgets
        if kind == "sarathi" and "chunk_size" in section and "async_scheduling" not in section:
            section.pop("max_batched_tokens", None)
        for key in Scheduler.unused_keys(kind, list(section)):
            section.pop(key)
    return data


def _written_pools(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    """The pool mappings of a written cluster (disaggregated or a mixed fleet)."""
    split = cluster.get("disaggregation")
    pools = [split.get("prefill"), split.get("decode")] if isinstance(split, dict) else []
    if isinstance(cluster.get("pools"), list):
        pools += cluster["pools"]
    return [pool for pool in pools if isinstance(pool, dict)]


def _migrate_written_pools(cluster: dict[str, Any]) -> None:
    """Older cbsims wrote a pooled cluster with ``replicas`` beside its pools (which reads as an
    error) and every pool key it left to the cluster as null: the cluster's ``replicas`` is
    dropped and a null pool key left to the cluster again. (This cbsim writes no ``replicas``
    there, and every pool key resolved: :meth:`Scenario.to_dict`.)"""
    pools = _written_pools(cluster)
    if not pools or "replicas" not in cluster:
        return
    del cluster["replicas"]
    for pool in pools:
        for key in [k for k, v in pool.items() if v is None]:
            del pool[key]


# Fields that may hold a file path; a relative path is taken relative to the scenario file when
# the file exists there (so a scenario and its trace can travel together), else as given.
PATH_FIELDS = (
    ("workload", "trace", "path"),
    ("workload", "arrival", "csv"),
    ("workload", "prompt_tokens", "trace"),
    ("workload", "output_tokens", "trace"),
    ("cluster", "model"),
    ("speculative", "acceptance", "path"),
    ("speculative", "proposer", "model"),
)


def _resolve_relative_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    for keys in PATH_FIELDS:
        node: Any = data
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        value = node.get(keys[-1])
        if isinstance(value, str) and not Path(value).is_absolute():
            candidate = base / value
            if candidate.exists():
                node[keys[-1]] = str(candidate)
    return data


def _check_feasible(scenario: Scenario, source: str | None) -> None:
    """Cross-field checks: the model fits in GPU memory, traces exist and have the columns, etc."""
    from cbsim.workload.traces import trace_table

    workload = scenario.workload
    missing = scenario.missing_lengths()
    if missing:
        raise CbsimError(
            f"workload needs {' and '.join(missing)} (or workload.trace to take lengths from a real log)",
            source=source,
            field=f"workload.{missing[0]}",
        )
    acceptance = scenario.speculative.acceptance
    if scenario.speculative.enabled and isinstance(acceptance, TraceAcceptance):
        from cbsim.workload.acceptance_trace import load_acceptance_trace

        load_acceptance_trace(acceptance.path, source=source)
    _check_proposer(scenario, source)
    if workload.trace is not None:
        trace_table(workload.trace.path, source=source, field="workload.trace.path")
    for name in ("prompt_tokens", "output_tokens"):
        spec = getattr(workload, name)
        if isinstance(spec, EmpiricalLength):
            trace_table(spec.trace, source=source, field=f"workload.{name}.trace")

    if not math.isfinite(scenario.workload.duration_s or 0.0):
        raise CbsimError("must be finite", source=source, field="workload.duration_s")
    _check_pools_fit(scenario, source)
    from cbsim.workload.build import check_workload_size

    check_workload_size(scenario, source)


def _check_proposer(scenario: Scenario, source: str | None) -> None:
    """A speculative proposer the model can have (an MTP module of a local-attention model is
    not modelled; a draft model must share the target's vocabulary)."""
    proposer = scenario.speculative.proposer
    if not scenario.speculative.enabled or proposer.kind not in ("mtp", "draft_model"):
        return
    from cbsim.catalog.models import get_model
    from cbsim.engine.speculative.drafter_state import vocabulary_problem
    from cbsim.engine.speculative.proposers import mtp_problem

    target = get_model(scenario.cluster.model)
    if proposer.kind == "mtp":
        problem = mtp_problem(target)
        if problem:
            raise CbsimError(problem, source=source, field="speculative.proposer.kind")
        return
    problem = vocabulary_problem(str(getattr(proposer, "model", "")), target)
    if problem:
        raise CbsimError(problem, source=source, field="speculative.proposer.model")


def _check_pools_fit(scenario: Scenario, source: str | None) -> None:
    """Every pool's replicas fit their GPUs (a plain cluster is one pool), and the GPUs in all
    are within bounds."""
    try:
        plans = pool_plans(scenario)
    except CbsimError as err:
        raise err.located(source=source) from None
    total_gpus = sum(plan.gpus for plan in plans)
    if not TOTAL_GPUS.contains(total_gpus):
        shapes = ", ".join(
            f"{plan.replicas:,} replicas of {plan.scenario.cluster.gpus_per_replica} GPUs"
            for plan in plans
        )
        raise CbsimError(
            f"{shapes} are {total_gpus:,} GPUs; GPUs in total {TOTAL_GPUS.violation(total_gpus)}",
            source=source,
            field="cluster.replicas" if len(plans) == 1 else "cluster",
        )
    for plan in plans:
        prefix = "cluster" if plan.field == "cluster" else plan.field
        cluster, field = plan.scenario.cluster, _pool_key_field(scenario, prefix)
        if plan.field != "cluster":  # (a plain cluster's: _check_calibration)
            _check_precision_and_profile(cluster, source, field)
        _check_heads_split(cluster, source, field("tp"))
        _check_cluster_fits(plan.scenario, source, prefix)


def _pool_key_field(scenario: Scenario, prefix: str) -> Callable[[str], str]:
    """Where the user set each key of the pool at ``prefix`` (``cluster`` for a plain
    cluster): the pool's own key if it sets it, else the cluster's."""
    cluster = scenario.cluster
    pool: Pool | None = None
    if prefix.startswith("cluster.pools[") and cluster.pools is not None:
        pool = cluster.pools[int(prefix.removeprefix("cluster.pools[").removesuffix("]"))]
    elif prefix.startswith("cluster.disaggregation.") and cluster.disaggregation is not None:
        pool = getattr(cluster.disaggregation, prefix.rsplit(".", 1)[1])

    def field(key: str) -> str:
        if pool is not None and key in pool.model_fields_set:
            return f"{prefix}.{key}"
        return f"cluster.{key}"

    return field


def _check_heads_split(cluster: Cluster, source: str | None, field: str) -> None:
    """``tp`` shares the model's attention heads as the engines shard them
    (:meth:`~cbsim.catalog.models.ModelShape.splits_attention`)."""
    from cbsim.catalog.models import get_model

    problem = get_model(cluster.model).attention_split_problem(cluster.tp)
    if problem:
        raise CbsimError(f"{problem}, or add replicas, pp or dp", source=source, field=field)


def _check_cluster_fits(scenario: Scenario, source: str | None, prefix: str) -> None:
    """One pool's layout (its resolved scenario) fits its GPUs' nodes and memory (``prefix``:
    where its keys are)."""
    from cbsim.catalog.hardware import get_gpu
    from cbsim.catalog.models import get_model
    from cbsim.engine.fleet import pool_memory

    cluster = scenario.cluster
    gpu = get_gpu(cluster.gpu)
    model = get_model(cluster.model)
    node = gpu.gpus_per_node
    if cluster.tp > node and cluster.tp % node:
        raise CbsimError(
            f"tp {cluster.tp} exceeds the {node} GPUs of one {gpu.name} node without filling "
            f"whole nodes (a group across nodes takes a multiple of {node})",
            source=source,
            field=f"{prefix}.tp",
        )
    group = cluster.tp * cluster.dp
    if group > node and group % node:
        raise CbsimError(
            f"tp x dp = {group} exceeds the {node} GPUs of one {gpu.name} node without filling "
            f"whole nodes (a group across nodes takes a multiple of {node})",
            source=source,
            field=f"{prefix}.dp",
        )
    memory = pool_memory(scenario)
    if not memory.fits:
        if memory.kv_bytes > 0:
            short = (
                f"leave {memory.kv_bytes / 2**20:.1f} MiB per GPU for the KV cache, less than "
                f"one block of {memory.block_size} tokens ({memory.block_bytes / 2**20:.1f} MiB)"
            )
        else:
            more = -memory.kv_bytes
            amount = f"{more / 2**30:.1f} GiB" if more >= 2**30 / 10 else f"{more / 2**20:.0f} MiB"
            short = f"need {amount} more per GPU"
        spec = scenario.speculative
        drafter = ""
        if spec.enabled:
            drafter = f" (the {spec.proposer.kind} proposer's weights and KV included)"
        if _memory_share_at_fault(scenario):
            raise CbsimError(
                f"{cluster.gpu_memory_utilization:.3g} leaves the engine too little of each "
                f"{gpu.name}'s memory: the weights and what the engine keeps beside them"
                f"{drafter} {short} ({memory.breakdown_line()}); raise it (engines default to "
                f"{DEFAULT_MEMORY_SHARE}: {model.name} fits there)",
                source=source,
                field=f"{prefix}.gpu_memory_utilization",
            )
        raise CbsimError(
            f"{model.name} ({cluster.dtype}) does not fit in {gpu.name} memory at tp={cluster.tp} "
            f"with {memory.fraction_flag}={memory.fraction:.3g}: the weights and what the engine "
            f"keeps beside them{drafter} {short} ({memory.breakdown_line()}); raise cluster.tp "
            f"or cluster.pp{'' if cluster.dtype in ('fp8', 'fp4', 'mxfp4', 'int8', 'int4') else ', or use fp8'}",
            source=source,
            field=f"{prefix}.tp",
        )


#: the share of GPU memory engines take unless told otherwise (vLLM's gpu_memory_utilization)
DEFAULT_MEMORY_SHARE = 0.9


def _memory_share_at_fault(scenario: Scenario) -> bool:
    """Whether a layout that does not fit would at the default share of GPU memory: the share
    the scenario gives the engine, below it, is what leaves no room."""
    from cbsim.engine.fleet import pool_memory

    cluster = scenario.cluster
    if cluster.gpu_memory_utilization >= DEFAULT_MEMORY_SHARE:
        return False
    roomier = cluster.model_copy(update={"gpu_memory_utilization": DEFAULT_MEMORY_SHARE})
    return pool_memory(scenario.model_copy(update={"cluster": roomier})).fits


def _check_calibration(cluster: Cluster, source: str | None) -> None:
    """The serving engine's profile and the calibration profile exist and parse, and the GPU can
    run the weights' precision."""
    from cbsim.cost.engine_profile import load_engine_profile

    try:
        load_engine_profile(cluster.engine)
    except CbsimError as err:
        raise err.located(source=source, field="cluster.engine") from None
    if not cluster.pooled:  # (each pool's GPU, precision and profile: _check_pools_fit)
        _check_precision_and_profile(cluster, source, "cluster.{}".format)


def _check_precision_and_profile(
    cluster: Cluster, source: str | None, field: Callable[[str], str]
) -> None:
    """One pool's GPU runs its weights' precision and has the calibration profile it names
    (``field``: where each key is set)."""
    from cbsim.catalog.hardware import get_gpu
    from cbsim.cost.engine_profile import load_engine_profile
    from cbsim.cost.profile import DEFAULT_PROFILE, load_profile

    try:
        get_gpu(cluster.gpu).peak_flops(cluster.dtype)
    except CbsimError as err:
        where = field("dtype")
        if where == "cluster.dtype" and field("gpu") != "cluster.gpu":
            where = field("gpu")  # the pool's GPU takes the cluster's precision
        raise CbsimError(err.message, source=source, field=where) from None
    name = cluster.calibration or DEFAULT_PROFILE
    if name == DEFAULT_PROFILE:
        name = load_engine_profile(cluster.engine).kernel_profile(cluster.gpu) or DEFAULT_PROFILE
    try:
        load_profile(cluster.gpu, name)
    except CbsimError as err:
        raise err.located(source=source, field=field("calibration")) from None
