"""The parts of a run report that depend on the cluster's pools.

* :func:`cluster_fact` — the cluster as it ran: one line per pool for a disaggregated cluster
  (``prefill 2 × h100-sxm TP 2; decode 1 × h100-sxm TP 4; 8 GPUs``) or a mixed fleet, where the
  flat cluster keys alone would say ``tp=1, 1 replica``;
* :func:`pools_section` — per pool: its GPUs, layout and the requests it served, and the KV
  transfer from prefill to decode (transfer and wait percentiles in ms).

The run's verdict (stability and SLO) is :mod:`cbsim.studies.report.verdict`.

All work on the scenario as a mapping (a result directory's ``scenario.yaml``, which need not
validate any more).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from cbsim.studies.report.document import Section, Table
from cbsim.studies.report.formatting import format_value

__all__ = ["cluster_fact", "ms", "pool_rows", "pools_section"]


def ms(value: Any) -> str:
    """A latency in seconds shown in milliseconds (``15.69``); ``—`` when missing."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "—"
    return f"{value * 1e3:,.4g}" if abs(value) * 1e3 < 1000 else f"{value * 1e3:,.0f}"


def _pools(cluster: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, pool keys) of a pooled cluster; empty for a single pool."""
    split = cluster.get("disaggregation")
    if isinstance(split, Mapping):
        return [(role, split.get(role) or {}) for role in ("prefill", "decode")]
    pools = cluster.get("pools")
    if isinstance(pools, list):
        return [(f"pool {i}", p if isinstance(p, Mapping) else {}) for i, p in enumerate(pools)]
    return []


def pool_rows(cluster: Mapping[str, Any]) -> list[tuple[str, str, int, int, int]]:
    """(name, gpu, tp, replicas, GPUs) per pool; a pool's unset keys are the cluster's."""
    rows = []
    for name, pool in _pools(cluster):
        gpu = str(pool.get("gpu") or cluster.get("gpu"))
        tp = int(pool.get("tp") or cluster.get("tp") or 1)
        pp = int(pool.get("pp") or cluster.get("pp") or 1)
        dp = int(pool.get("dp") or cluster.get("dp") or 1)
        replicas = int(pool.get("replicas") or 1)
        rows.append((name, gpu, tp, replicas, replicas * tp * pp * dp))
    return rows


def cluster_fact(cluster: Mapping[str, Any]) -> str | None:
    """The cluster line of a pooled cluster (None when it has one pool)."""
    rows = pool_rows(cluster)
    if not rows:
        return None
    parts = [f"{name} {replicas} × {gpu} TP {tp}" for name, gpu, tp, replicas, _ in rows]
    gpus = sum(row[4] for row in rows)
    return (
        f"{cluster.get('model')}, {cluster.get('dtype', 'bf16')}: {'; '.join(parts)} ({gpus} GPUs)"
    )


def _served(requests: pd.DataFrame, column: str) -> int:
    if column not in requests or not len(requests):
        return 0
    return int(pd.to_numeric(requests[column], errors="coerce").notna().sum())


def _kv_rows(requests: pd.DataFrame) -> list[list[str]]:
    if "kv_arrived_s" not in requests:
        return []
    crossed = requests[pd.to_numeric(requests["kv_arrived_s"], errors="coerce").notna()]
    rows = []
    for column, label in (("kv_transfer_s", "KV transfer"), ("kv_wait_s", "wait for decode")):
        if column not in crossed or not len(crossed):
            continue
        values = pd.to_numeric(crossed[column], errors="coerce").dropna()
        cells = [values.quantile(q) for q in (0.5, 0.9, 0.99)] + [values.mean()]
        rows.append([label, *(ms(float(v)) for v in cells)])
    return rows


def pools_section(cluster: Mapping[str, Any], requests: pd.DataFrame) -> Section | None:
    """Per pool (GPUs, layout, requests served) and the prefill → decode KV transfer; None for
    a cluster of one pool."""
    rows = pool_rows(cluster)
    if not rows:
        return None
    disaggregated = isinstance(cluster.get("disaggregation"), Mapping)
    blocks: list[Any] = []
    table_rows = []
    for name, gpu, tp, replicas, gpus in rows:
        served = ""
        if disaggregated:
            column = "prefill_replica" if name == "prefill" else "kv_arrived_s"
            served = format_value(_served(requests, column))
        table_rows.append([name, gpu, str(tp), str(replicas), str(gpus), served])
    blocks.append(
        Table(
            ["pool", "GPU", "TP", "replicas", "GPUs", "requests served"],
            table_rows,
            caption="Each pool as it ran (a pool's unset keys are the cluster's).",
        )
    )
    kv = _kv_rows(requests)
    if kv:
        blocks.append(
            Table(
                ["KV handoff (ms)", "p50", "p90", "p99", "mean"],
                kv,
                caption="Prefill → decode: the KV cache's transfer, and the wait for the decode "
                "instance to take the request, per request that crossed.",
            )
        )
    title = "Pools and KV transfer" if disaggregated else "Pools"
    return Section(title, blocks)
