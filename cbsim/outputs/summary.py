"""Summary statistics: a run's key figures as one flat dict, and a staged load's per-stage table.

Definitions follow common serving benchmarks (vLLM, Vidur): TTFT = first token time − arrival;
TPOT = (finish − first token) / (output tokens − 1), the mean time per output token after the first
(NaN for one-token outputs); E2E = finish − arrival; queue = first admission − the engine's receipt.
These are what a *client* measures; the engine's own view is kept beside them as ``server_*``
figures. Throughput counts completed requests over the makespan (first arrival to last finish);
goodput counts only those meeting every SLO target given. Requests their client gave up on
(``workload.client.timeout_s``) count as ``timed_out``, neither completed nor unfinished; they have
no finish, so the latency percentiles are the completed requests' alone. A staged load's summary
adds each stage's figures (:func:`stage_summary`). The figures over the iterations are added up a
chunk of rows at a time (:class:`IterationTotals`), so that a streamed run, whose iterations are
not held, gets them too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from cbsim.common.columns import equals, frame_of
from cbsim.outputs.metric_columns import PERCENTILES
from cbsim.schema.scenario import Scenario

if TYPE_CHECKING:
    import pandas as pd

    from cbsim.common.columns import Table


class FleetFigures(Protocol):
    """What the summary takes of a fleet's log (:class:`cbsim.engine.autoscale.FleetLog`): its figures."""

    def summary(self) -> dict[str, Any]: ...


@dataclass
class IterationTotals:
    """The summary's figures over every iteration row, added up a chunk of rows at a time."""

    rows: int = 0
    busy_s: float = 0.0  # Σ duration
    end_s: float = 0.0  # the last iteration's end (0: no rows)
    draft_s: float = 0.0
    batch_sum: int = 0
    max_batch: int = 0
    kv_blocks_total: int = 0  # the first row's (0: no rows)

    @classmethod
    def of(cls, iterations: Table) -> IterationTotals:
        """The totals of a whole iterations frame (or its columns)."""
        totals = cls()
        names = ("start_s", "duration_s", "draft_s", "batch_size", "kv_blocks_total")
        totals.add({name: np.asarray(iterations[name]) for name in names})
        return totals

    def add(self, columns: Mapping[str, np.ndarray]) -> None:
        """Add iteration rows (at least ``start_s``, ``duration_s``, ``draft_s``, ``batch_size``
        and ``kv_blocks_total``)."""
        n = len(columns["duration_s"])
        if n == 0:
            return
        if self.rows == 0:
            self.kv_blocks_total = int(columns["kv_blocks_total"][0])
        self.rows += n
        self.busy_s += float(columns["duration_s"].sum())
        self.end_s = max(self.end_s, float((columns["start_s"] + columns["duration_s"]).max()))
        self.draft_s += float(columns["draft_s"].sum())
        batch = columns["batch_size"]
        self.batch_sum += int(batch.sum())
        self.max_batch = max(self.max_batch, int(batch.max()))

    @property
    def mean_batch_size(self) -> float:
        return self.batch_sum / self.rows if self.rows else 0.0


def _percentiles(values: np.ndarray, prefix: str, out: dict[str, float]) -> None:
    values = values[~np.isnan(values)]
    # one call for every percentile: one partition of the column, the same order statistics and
    # interpolation per percentile as a call each
    points = np.percentile(values, PERCENTILES).tolist() if len(values) else []
    for i, p in enumerate(PERCENTILES):
        out[f"{prefix}_p{p}_s"] = float(points[i]) if points else math.nan
    out[f"{prefix}_mean_s"] = float(values.mean()) if len(values) else math.nan


def prefix_hit_rates(table: Table) -> pd.Series:
    """Prefix-cache hit rate per replica: its requests' reused prompt tokens over their prompt
    tokens (rejected requests left out)."""
    requests = frame_of(table)
    admitted = requests[requests["status"] != "rejected"]
    sums = admitted.groupby("replica")[["cached_tokens", "prompt_tokens"]].sum()
    rates: pd.Series = sums["cached_tokens"] / sums["prompt_tokens"]
    return rates.rename("prefix_hit_rate")


def meets_slo(requests: Table, scenario: Scenario) -> np.ndarray:
    """Boolean per request: finished and within every SLO target the scenario gives."""
    ok = equals(requests, "status", "finished").copy()
    slo = scenario.slo
    if slo.ttft_s is not None:
        ok &= np.asarray(requests["ttft_s"]) <= slo.ttft_s
    if slo.tpot_s is not None:
        tpot = np.asarray(requests["tpot_s"])
        ok &= np.isnan(tpot) | (tpot <= slo.tpot_s)
    if slo.e2e_s is not None:
        ok &= np.asarray(requests["e2e_s"]) <= slo.e2e_s
    return ok


def _busy_fraction(
    requests: Table, scenario: Scenario, totals: IterationTotals, makespan: float
) -> float:
    """The replicas' busy time over their time from the first arrival to the end of the run:
    the last finish, or the last iteration's end where iterations ran on after it (a horizon
    cut the run with requests still running). NaN without a finished request."""
    if not makespan > 0:
        return math.nan
    first = float(np.asarray(requests["arrival_s"]).min())
    span = max(makespan, totals.end_s - first)
    return totals.busy_s / (span * scenario.cluster.replica_count)


def summarize(
    requests: Table,
    iterations: Table,
    scenario: Scenario,
    preemptions: int,
    itl: dict[str, float] | None = None,
    warnings: Sequence[str] = (),
    totals: IterationTotals | None = None,
    fleet: FleetFigures | None = None,
) -> dict[str, Any]:
    """The run's key figures (JSON-serialisable, deterministic for a scenario and seed).

    ``warnings`` (joined into one string, empty when none) says where the run's settings or load
    make its figures doubtful: a token budget that can never batch a prompt beside running
    decodes, batches far outside the range the engine's overhead was fitted on. ``totals``: the
    iterations' figures when they are not held (streaming), or already added up. ``fleet``:
    what the replicas did, for ``gpu_hours``, ``cost_usd``, ``replicas_mean``, ``replicas_max``,
    ``scale_ups`` and ``scale_downs`` (:class:`cbsim.engine.autoscale.FleetLog`; left out without it)."""
    if totals is None:
        totals = IterationTotals.of(iterations)
    finished = equals(requests, "status", "finished")
    rejected = equals(requests, "status", "rejected")

    def done(name: str) -> np.ndarray:
        """A column of the finished requests (one column copied at a time, not the frame)."""
        column: np.ndarray = np.asarray(requests[name])[finished]
        return column

    completed = int(finished.sum())
    if completed:
        makespan = float(done("finish_s").max() - np.asarray(requests["arrival_s"]).min())
    else:
        makespan = math.nan
    output_tokens = int(done("output_tokens").sum())
    good = int(meets_slo(requests, scenario).sum())
    busy = totals.busy_s
    summary: dict[str, Any] = {
        "name": scenario.name,
        "seed": scenario.seed,
        "requests": len(requests),
        "completed": completed,
        "rejected": int(rejected.sum()),
        "unfinished": int(
            (equals(requests, "status", "waiting") | equals(requests, "status", "running")).sum()
        ),
        "timed_out": int(equals(requests, "status", "timed_out").sum()),
        "makespan_s": makespan,
        "throughput_rps": completed / makespan if completed and makespan > 0 else 0.0,
        "output_tokens": output_tokens,
        "output_tokens_per_s": output_tokens / makespan if completed and makespan > 0 else 0.0,
        "goodput_rps": good / makespan if completed and makespan > 0 else 0.0,
        "slo_attainment": good / len(requests) if len(requests) else math.nan,
    }
    summary.update(rejection_counts(requests))
    admitted = ~rejected

    def admitted_sum(name: str) -> int:
        return int(np.asarray(requests[name])[admitted].sum()) if name in requests else 0

    prompt_total = admitted_sum("prompt_tokens")
    cached_total = admitted_sum("cached_tokens")
    cpu_total = admitted_sum("cached_tokens_cpu")
    for metric in ("ttft", "tpot", "e2e", "queue"):
        _percentiles(done(f"{metric}_s").astype(float, copy=False), metric, summary)
    if itl:
        summary.update(itl)
    for metric in ("ttft", "tpot", "e2e"):
        if f"server_{metric}_s" in requests:
            _percentiles(
                done(f"server_{metric}_s").astype(float, copy=False), f"server_{metric}", summary
            )
    drafted = int(np.asarray(requests["drafted_tokens"]).sum())
    accepted = int(np.asarray(requests["accepted_tokens"]).sum())
    spec_steps = int(np.asarray(requests["spec_steps"]).sum())
    decode_steps = int(np.asarray(requests["decode_steps"]).sum())
    rejections = int(np.asarray(requests["rejected_steps"]).sum())
    draft_s = totals.draft_s
    summary.update(
        {
            # marginal: accepted / drafted (vLLM's draft_acceptance_rate)
            "acceptance_rate": accepted / drafted if drafted else math.nan,
            # conditional α: P(accept | every earlier draft accepted), maximum likelihood
            "conditional_acceptance": accepted / (accepted + rejections)
            if accepted + rejections
            else math.nan,
            "mean_acceptance_length": (accepted + spec_steps) / spec_steps
            if spec_steps
            else math.nan,
            "mean_k": drafted / decode_steps if decode_steps else 0.0,
            "spec_step_fraction": spec_steps / decode_steps if decode_steps else 0.0,
            "draft_time_s": draft_s,
            "target_time_s": busy - draft_s,
            "preemptions": preemptions,
            "iterations": totals.rows,
            "mean_batch_size": totals.mean_batch_size,
            "busy_fraction": _busy_fraction(requests, scenario, totals, makespan),
            "kv_blocks_total": totals.kv_blocks_total,
            "max_batch_size": totals.max_batch,
            # prefix caching: prompt tokens reused at admission / prompt tokens of admitted requests
            "prefix_hit_rate": cached_total / prompt_total if prompt_total else 0.0,
            # of which loaded from the CPU tier
            "prefix_hit_rate_cpu": cpu_total / prompt_total if prompt_total else 0.0,
            "warnings": "; ".join(warnings),
        }
    )
    crossed = (
        ~np.isnan(np.asarray(requests["kv_arrived_s"], float))
        if "kv_arrived_s" in requests
        else np.zeros(0, dtype=bool)
    )
    if crossed.any():
        for name in ("kv_transfer_s", "kv_wait_s"):
            values = np.asarray(requests[name], float)[crossed]
            stem = name.removesuffix("_s")
            for q, value in zip((50, 99), np.percentile(values, (50, 99)).tolist(), strict=True):
                summary[f"{stem}_p{q}_s"] = float(value)
    if fleet is not None:
        summary.update(fleet.summary())
    if "stage" in requests:
        summary.update(_stage_figures(stage_summary(requests, scenario)))
    return summary


STAGE_FIGURES = (
    "rate", "requests", "completed", "timed_out", "start_s", "throughput_rps", "ttft_p50_s",
    "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s",
)  # fmt: skip
"""What :func:`stage_summary` reports of each stage (and the summary as ``stage{i}_{figure}``)."""


def stage_summary(table: Table, scenario: Scenario | None = None) -> pd.DataFrame:
    """One row per stage of a staged load (``workload.arrival.kind: stages``), indexed by
    ``stage``: its offered ``rate`` (NaN without the scenario), the ``requests`` it sent,
    ``completed`` and ``timed_out``, when its first request was sent (``start_s``), its
    throughput (completed over its first send to its last finish) and its completed requests'
    latency percentiles, the figures a load generator reports per rate point."""
    import pandas as pd

    requests = frame_of(table)
    stages = requests["stage"].to_numpy()
    arrival = scenario.workload.arrival if scenario is not None else None
    rates = [stage.rate for stage in getattr(arrival, "stages", [])]
    count = max(len(rates), int(stages.max()) + 1 if len(stages) else 0)
    status = requests["status"].to_numpy()
    rows = []
    for stage in range(count):
        mine = stages == stage
        done = mine & (status == "finished")
        sent = requests["arrival_s"].to_numpy()[mine]
        finishes = requests["finish_s"].to_numpy()[done]
        span = float(finishes.max() - sent.min()) if len(finishes) else math.nan
        row: dict[str, float] = {
            "rate": rates[stage] if stage < len(rates) else math.nan,
            "requests": int(mine.sum()),
            "completed": int(done.sum()),
            "timed_out": int((mine & (status == "timed_out")).sum()),
            "start_s": float(sent.min()) if len(sent) else math.nan,
            "throughput_rps": int(done.sum()) / span if span > 0 else math.nan,
        }
        figures: dict[str, float] = {}
        for metric in ("ttft", "tpot", "e2e"):
            _percentiles(requests[f"{metric}_s"].to_numpy(dtype=float)[done], metric, figures)
        row.update({key: figures[key] for key in STAGE_FIGURES if key in figures})
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(STAGE_FIGURES))
    frame.index.name = "stage"
    return frame


def _stage_figures(stages: pd.DataFrame) -> dict[str, float]:
    """A stage table as flat summary keys: ``stage0_rate``, ``stage0_ttft_p50_s``, ..."""
    out: dict[str, float] = {}
    for stage, row in stages.iterrows():
        for name in STAGE_FIGURES:
            value = row[name]
            keep_int = name in ("requests", "completed", "timed_out")
            out[f"stage{stage}_{name}"] = int(value) if keep_int else float(value)
    return out


REJECTION_REASONS = {
    "context_length": "with prompt + output beyond the {context:,}-token context",
    "kv_capacity": "larger than a replica's whole KV cache",
}
"""Why the router turned a request away (the requests frame's ``rejected_reason``)."""


def rejection_counts(requests: Table) -> dict[str, int]:
    """``rejected_<reason>`` for each reason some request was rejected for (none: no keys)."""
    if "rejected_reason" not in requests or not len(requests):
        return {}
    if "status" in requests and not equals(requests, "status", "rejected").any():
        return {}  # a reason is given only to a request rejected (the column's text is slow)
    reasons = np.asarray(requests["rejected_reason"]).astype(str)
    found, counts = np.unique(reasons[reasons != ""], return_counts=True)
    return {f"rejected_{reason}": int(count) for reason, count in zip(found, counts, strict=True)}


def rejection_warning(summary: dict[str, Any], context: int) -> str:
    """``N of M requests rejected: A with prompt + output beyond ...`` (empty: none rejected)."""
    rejected = int(summary.get("rejected", 0))
    if not rejected:
        return ""
    parts = []
    for reason, text in REJECTION_REASONS.items():
        count = int(summary.get(f"rejected_{reason}", 0))
        if count:
            parts.append(f"{count:,} {text.format(context=context)}")
    detail = f": {'; '.join(parts)}" if parts else ""
    fix = " (raise cluster.max_model_len where the model allows, or shorten the prompts)"
    if not summary.get("rejected_context_length"):
        fix = " (add tensor parallelism or GPU memory, or shorten the prompts)"
    return f"{rejected:,} of {int(summary['requests']):,} requests rejected{detail}{fix}"
