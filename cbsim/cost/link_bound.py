"""Warn when a layout is link-bound: when communication is most of a step.

4 × L40S serving a 70B fp8 model spends 769 of 893 ms of a prefill in all-reduce over PCIe-class
links. That is right per the data, but a user sizing a fleet should hear it: the same GPUs with
a smaller tensor-parallel group (more replicas), or GPUs with NVLink, would spend that time
computing. Each pool's cost model prices two representative steps — a prefill of the run's
median prompt (at most the scheduler's token budget) and a decode step of
:data:`DECODE_BATCH` requests at that context — and the run warns when the collective operations
(all-reduce, all-to-all, all-gather, pipeline sends) take more than :data:`LINK_BOUND_SHARE`
of either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = [
    "COMM_OPS",
    "DECODE_BATCH",
    "LINK_BOUND_SHARE",
    "comm_share",
    "link_bound_warning",
    "pool_warnings",
]

LINK_BOUND_SHARE = 0.5
"""Share of a step in communication above which a layout is called link-bound."""
DECODE_BATCH = 32
"""Requests in the representative decode step."""
COMM_OPS = ("allreduce", "alltoall", "allgather", "all_reduce", "all_to_all", "pp_", "p2p")
"""Substrings of the cost model's breakdown keys that are communication."""


class _Priced(Protocol):
    def breakdown(self, batch: Sequence[tuple[int, int]]) -> Mapping[str, float]: ...


def comm_share(breakdown: Mapping[str, float]) -> tuple[float, float]:
    """(seconds in communication, seconds of the whole step) of a step's breakdown."""
    total = float(sum(breakdown.values()))
    comm = float(sum(v for k, v in breakdown.items() if any(op in k for op in COMM_OPS)))
    return comm, total


def _step_text(comm: float, total: float, what: str) -> str:
    return f"{comm * 1e3:,.0f} of {total * 1e3:,.0f} ms ({comm / total:.0%}) of {what}"


def link_bound_warning(
    cost: _Priced, prompt_tokens: int, layout: str, token_budget: int | None = None
) -> str | None:
    """The warning for one pool's layout (``layout`` names it: ``l40s TP 4``), or None when
    communication is at most :data:`LINK_BOUND_SHARE` of both representative steps."""
    prompt = max(1, int(prompt_tokens))
    if token_budget:
        prompt = min(prompt, int(token_budget))
    steps = {
        f"a {prompt:,}-token prefill step": [(prompt, 0)],
        f"a {DECODE_BATCH}-request decode step": [(1, prompt)] * DECODE_BATCH,
    }
    bound: list[str] = []
    for what, batch in steps.items():
        comm, total = comm_share(cost.breakdown(batch))
        if total > 0 and comm > LINK_BOUND_SHARE * total:
            bound.append(_step_text(comm, total, what))
    if not bound:
        return None
    return (
        f"link-bound layout ({layout}): communication takes {' and '.join(bound)}, so the GPUs "
        "mostly wait on their links (a smaller TP with more replicas, or GPUs with faster "
        "links such as NVLink would spend that time computing)"
    )


def pool_warnings(pools: Sequence[Any], prompt_lengths: np.ndarray) -> list[str]:
    """:func:`link_bound_warning` for each pool of a simulation (``pool.cost``,
    ``pool.scenario``) with more than one GPU per replica."""
    median = int(np.median(prompt_lengths)) if len(prompt_lengths) else 1024
    warnings = []
    for pool in pools:
        cluster, scheduler = pool.scenario.cluster, pool.scenario.scheduler
        if getattr(cluster, "gpus_per_replica", cluster.tp) <= 1:
            continue
        budget = scheduler.chunk_size if scheduler.kind == "sarathi" else None
        budget = budget or getattr(scheduler, "max_batched_tokens", None)
        layout = f"{cluster.gpu} TP {cluster.tp}"
        if len(pools) > 1:
            layout = f"{pool.plan.name} pool: {layout}"
        warning = link_bound_warning(pool.cost, median, layout, budget)
        if warning:
            warnings.append(warning)
    return warnings
