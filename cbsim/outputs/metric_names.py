"""Summary metrics named for people: ``ttft_p99_s`` is ``TTFT p99``, its 0.1 is ``100 ms``.

The capacity and plan outputs name their SLO metrics by these names (the JSON keeps the keys):
latencies in ms below a second and in s above, ratios as plain numbers (:func:`metric_value`), one
SLO as ``TTFT p99 ≤ 2 s, TPOT p99 ≤ 100 ms`` (:func:`slo_text`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cbsim.common.numbers import figure, finite

__all__ = ["metric_name", "metric_value", "slo_text"]

_STEMS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL",
    "itl_chunk": "ITL per chunk",
    "e2e": "E2E",
    "queue": "queueing",
    "kv_wait": "KV wait",
    "kv_transfer": "KV transfer",
}
_WHOLE = {
    "slo_attainment": "SLO attainment",
    "goodput_ratio": "goodput ratio",
    "goodput_rps": "goodput (req/s)",
    "throughput_rps": "throughput (req/s)",
    "output_tokens_per_s": "output tokens/s",
}
_STATISTICS = ("p50", "p90", "p95", "p99", "p999", "mean", "max", "min")


def _is_latency(key: str) -> bool:
    return key.endswith("_s") and not key.endswith("_per_s")


def metric_name(key: str) -> str:
    """``ttft_p99_s`` → ``TTFT p99``, ``itl_chunk_p50_s`` → ``ITL per chunk p50``,
    ``slo_attainment`` → ``SLO attainment``; any other key with its underscores as spaces."""
    if key in _WHOLE:
        return _WHOLE[key]
    stem = key.removesuffix("_s") if _is_latency(key) else key
    head, _, statistic = stem.rpartition("_")
    if head and statistic in _STATISTICS:
        return f"{_STEMS.get(head, head.replace('_', ' '))} {statistic}"
    return _STEMS.get(stem, stem.replace("_", " "))


def metric_value(key: str, value: Any) -> str:
    """A metric's value with its unit: a latency in ms below a second, else in s; others as
    numbers (``—`` when missing)."""
    number = finite(value)
    if number is None:
        return "—"
    if _is_latency(key):
        if abs(number) < 1.0:
            return f"{figure(number * 1e3)} ms"
        return f"{figure(number)} s"
    return figure(number)


def slo_text(slo: Mapping[str, Any], directions: Mapping[str, Any] | None = None) -> str:
    """``TTFT p99 ≤ 2 s, TPOT p99 ≤ 100 ms``: every target with its direction and unit."""
    signs = directions or {}
    return ", ".join(
        f"{metric_name(key)} {signs.get(key, '≤')} {metric_value(key, value)}"
        for key, value in slo.items()
    )
