"""Settings a scenario gives that change nothing in its run, said before they mislead a user.

A key the user set is read, or it is an error (unknown keys are); but some valid keys mean
nothing in the company of others, and a run that silently ignores one looks as if it had used
it: prefix caching or a CPU tier on a disaggregated cluster's decode pool (its instances receive
their prompts' KV computed and cache none of them), ``prefix_block_tokens`` for a replayed trace
whose requests carry no prefix block ids, a multi-token-prediction proposer for a model that
ships no MTP module, a proposer, acceptance, k policy or drafter state set while speculation is
off. Each gives one warning naming the key; the command line prints them and the
run's summary carries them (``warnings``), as :mod:`cbsim.engine.scheduler.warnings` does for
scheduler settings.
"""

from __future__ import annotations

from collections.abc import Sequence

from cbsim.catalog.models import get_model
from cbsim.schema.cluster import Pool
from cbsim.schema.scenario import Scenario
from cbsim.schema.scheduler import Scheduler
from cbsim.schema.slo_syntax import SloTarget
from cbsim.schema.speculative import Speculative
from cbsim.schema.workload import TraceReplay

DECODE = "cluster.disaggregation.decode"


def ignored_settings(scenario: Scenario, trace_ids: bool) -> list[str]:
    """Warnings for the keys of ``scenario`` its run ignores; ``trace_ids``: the run replays a
    trace's prefix block ids."""
    return [
        *_decode_pool_caching(scenario),
        *_prefix_block_tokens(scenario, trace_ids),
        *_mtp_without_module(scenario),
        *_speculation_off(scenario),
    ]


def _decode_pool_caching(scenario: Scenario) -> list[str]:
    """A decode pool that turns on prefix caching or a CPU tier the cluster does not."""
    split = scenario.cluster.disaggregation
    if split is None:
        return []
    decode, cluster = split.decode, scenario.cluster
    given = decode.model_fields_set
    warnings = []
    if "prefix_caching" in given and decode.prefix_caching and not cluster.prefix_caching:
        warnings.append(
            f"{DECODE}.prefix_caching is ignored: a decode instance receives its prompts' KV "
            "computed and caches none of them (the prefill pool's prefix_caching is what reuses "
            "prompts)"
        )
    if "kv_offload" in given and decode.kv_offload is not None and cluster.kv_offload is None:
        warnings.append(
            f"{DECODE}.kv_offload is ignored: a CPU tier holds what a prefix cache evicts, and a "
            "decode instance caches no prompts (give it to the prefill pool)"
        )
    return warnings


def _prefix_block_tokens(scenario: Scenario, trace_ids: bool) -> list[str]:
    """``prefix_block_tokens`` (other than its default) for a replay without prefix block ids."""
    trace = scenario.workload.trace
    if trace is None or trace_ids:
        return []
    default = TraceReplay.model_fields["prefix_block_tokens"].default
    if trace.prefix_block_tokens == default:  # (a written scenario gives every key)
        return []
    return [
        f"workload.trace.prefix_block_tokens ({trace.prefix_block_tokens}) is ignored: the "
        "requests replayed carry no prefix block ids (a prefix_hash_ids or hash_ids column of "
        "an open-loop replay), so no prompt content is known to cache"
    ]


def _mtp_without_module(scenario: Scenario) -> list[str]:
    """An ``mtp`` proposer for a model whose config names no MTP layers."""
    spec = scenario.speculative
    if not spec.enabled or spec.proposer.kind != "mtp":
        return []
    model = get_model(scenario.cluster.model)
    if model.mtp_layers:
        return []
    return [
        f"speculative.proposer.kind: mtp, but {model.name} ships no multi-token-prediction "
        "module (no num_nextn_predict_layers in its config): the run prices one made of its "
        "own layers, and its acceptance is whatever speculative.acceptance says; an eagle or "
        "draft_model proposer is one that exists"
    ]


SPECULATION_KEYS = (
    "proposer", "acceptance", "policy", "drafter_state_at_k0", "stale_acceptance_scale",
)  # fmt: skip
"""What a speculating run reads of the ``speculative`` section besides ``enabled``."""


def _speculation_off(scenario: Scenario) -> list[str]:
    """Speculation settings other than the defaults (a stale drafter, a proposer, a k policy)
    while ``speculative.enabled`` is false: nothing drafts, so none of them is used. By value,
    not by the keys given: a written scenario gives every key."""
    spec = scenario.speculative
    if spec.enabled:
        return []
    default = Speculative()
    changed = [
        f"speculative.{k}" for k in SPECULATION_KEYS if getattr(spec, k) != getattr(default, k)
    ]
    if not changed:
        return []
    verb, them = ("is", "it") if len(changed) == 1 else ("are", "them")
    return [
        f"{', '.join(changed)} {verb} ignored: speculative.enabled is false, so nothing drafts "
        f"(set speculative.enabled: true to speculate, or remove {them})"
    ]


IMPLAUSIBLE_SLO_S = {"ttft": 60.0, "tpot": 5.0}
"""A time-to-first-token target above a minute, or a time per output token above five seconds,
is almost surely milliseconds typed where seconds are read (AI Configurator's `--ttft 300`)."""


def implausible_slo(targets: dict[str, float | None], where: str = "slo.{}_s") -> list[str]:
    """A warning per SLO target (``{"ttft": s, "tpot": s}``) whose magnitude suggests
    milliseconds; ``where`` names the setting (``{}``: ``ttft`` or ``tpot``)."""
    warnings = []
    for name, limit in IMPLAUSIBLE_SLO_S.items():
        value = targets.get(name)
        if value is not None and value > limit:
            warnings.append(
                f"{where.format(name)} = {value:g} s: a {name.upper()} target over {limit:g} s, "
                f"read as seconds: if you meant {value:g} ms, write {value / 1000:g} or "
                f"{value:g}ms"
            )
    return warnings


def deprecated_names(scenario: Scenario) -> list[str]:
    """A warning for each deprecated name the scenario uses: ``scheduler.kind: vllm``, which
    reads as vLLM's scheduler but is vLLM V0's prefill-first one, now ``prefill_first``."""
    kinds = [("scheduler.kind", scenario.scheduler.deprecated_kind)]
    cluster = scenario.cluster
    if cluster.disaggregation is not None:
        for role in ("prefill", "decode"):
            pool = getattr(cluster.disaggregation, role)
            kinds.append((f"cluster.disaggregation.{role}.scheduler.kind", _pool_kind(pool)))
    for i, pool in enumerate(cluster.pools or []):
        kinds.append((f"cluster.pools[{i}].scheduler.kind", _pool_kind(pool)))
    return [
        f"{field}: {kind} is a deprecated name for prefill_first, vLLM V0's prefill-first "
        f"scheduler (also SGLang's), while vLLM V1 (engine vllm) runs sarathi by default: write "
        f"prefill_first to keep this scheduler, or leave scheduler.kind out for the engine's own"
        for field, kind in kinds
        if kind in Scheduler.DEPRECATED_KINDS
    ]


def _pool_kind(pool: Pool) -> str | None:
    kind = (pool.scheduler or {}).get("kind")
    return kind if isinstance(kind, str) else None


def slo_warnings(scenario: Scenario) -> list[str]:
    """:func:`implausible_slo` of the scenario's ``slo`` section."""
    return implausible_slo({"ttft": scenario.slo.ttft_s, "tpot": scenario.slo.tpot_s})


def implausible_targets(
    targets: Sequence[SloTarget], field: str = "--slo", *, per_request: bool = True
) -> list[str]:
    """Warnings for TTFT and TPOT targets written as bare seconds whose size says milliseconds
    (:func:`cbsim.schema.setting_warnings.implausible_slo`); ``per_request``: the per-request ones too
    (False where they become the scenario's ``slo``, which warns of itself)."""
    warnings = []
    for target in targets:
        if target.per_request and not per_request:
            continue
        base = target.metric.split("_")[0] if not target.per_request else target.metric
        if target.bare_seconds and base in ("ttft", "tpot"):
            for warning in implausible_slo({base: target.value}, f"{field} {target.text!r}: {{}}"):
                warnings.append(warning)
    return warnings
