"""What ``cbsim bench`` prints: vLLM's result block per load point and a sweep table.

The block is line for line what ``vllm bench serve`` prints (a 50-character banner, labels
padded to 40 characters, figures with two decimals, one section per ``--percentile-metrics``
name in ms), so that a simulated and a measured run read alike. A sweep ends with one table row
per load point: the load, completed requests, throughputs, and mean and P99 of TTFT, TPOT, ITL
and E2EL in ms, in plain aligned text that is never cut at the terminal's edge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from cbsim.studies.bench.load import LoadPoint
from cbsim.studies.bench.vllm_result import METRICS, percentile_word

__all__ = ["result_block", "sweep_table", "traffic_lines"]

WIDTH = 50


def _line(label: str, value: Any, spec: str = "") -> str:
    text = format(value, spec) if spec else str(value)
    return f"{label:<40} {text:<10}".rstrip()


def traffic_lines(point: LoadPoint, burstiness: float) -> list[str]:
    """vLLM's lines before a run: the rate (or its ramp), the burstiness and the concurrency
    cap."""
    distribution = "Poisson process" if burstiness == 1.0 else "Gamma distribution"
    ramp = point.ramp_up
    if ramp is None:
        rate = [f"Traffic request rate: {point.request_rate}"]
    else:
        rate = [
            f"Traffic ramp-up strategy: {ramp.strategy}.",
            f"Will increase RPS from {ramp.start_rps:g} to {ramp.end_rps:g} RPS over the "
            "duration of the benchmark.",
        ]
    return [
        *rate,
        f"Burstiness factor: {burstiness} ({distribution})",
        f"Maximum request concurrency: {point.max_concurrency}",
    ]


def _metric_lines(
    result: Mapping[str, Any], metric: str, percentiles: Sequence[float]
) -> list[str]:
    if f"mean_{metric}_ms" not in result:
        return []
    name, header = METRICS[metric]
    lines = [f"{header:-^{WIDTH}}"]
    lines.append(_line(f"Mean {name} (ms):", result[f"mean_{metric}_ms"], ".2f"))
    lines.append(_line(f"Median {name} (ms):", result[f"median_{metric}_ms"], ".2f"))
    for p in percentiles:
        word = percentile_word(p)
        lines.append(_line(f"P{word} {name} (ms):", result[f"p{word}_{metric}_ms"], ".2f"))
    return lines


def result_block(
    result: Mapping[str, Any],
    point: LoadPoint,
    *,
    percentile_metrics: Sequence[str],
    percentiles: Sequence[float],
) -> str:
    """vLLM's ``Serving Benchmark Result`` block for one load point."""
    lines = [f"{' Serving Benchmark Result ':=^{WIDTH}}"]
    lines.append(_line("Successful requests:", result["completed"]))
    lines.append(_line("Failed requests:", result["failed"]))
    if point.max_concurrency is not None:
        lines.append(_line("Maximum request concurrency:", point.max_concurrency))
    if not math.isinf(point.request_rate):
        lines.append(_line("Request rate configured (RPS):", point.request_rate, ".2f"))
    lines.append(_line("Benchmark duration (s):", result["duration"], ".2f"))
    lines.append(_line("Total input tokens:", result["total_input_tokens"]))
    lines.append(_line("Total generated tokens:", result["total_output_tokens"]))
    lines.append(_line("Request throughput (req/s):", result["request_throughput"], ".2f"))
    if result.get("request_goodput") is not None:
        lines.append(_line("Request goodput (req/s):", result["request_goodput"], ".2f"))
    lines.append(_line("Output token throughput (tok/s):", result["output_throughput"], ".2f"))
    lines.append(
        _line("Peak output token throughput (tok/s):", result["max_output_tokens_per_s"], ".2f")
    )
    lines.append(_line("Peak concurrent requests:", result["max_concurrent_requests"], ".2f"))
    lines.append(_line("Total Token throughput (tok/s):", result["total_token_throughput"], ".2f"))
    for metric in percentile_metrics:
        lines.extend(_metric_lines(result, metric, percentiles))
    lines.append("=" * WIDTH)
    return "\n".join(lines)


_SWEEP_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("completed", "completed", "d"),
    ("failed", "failed", "d"),
    ("duration_s", "duration", ".2f"),
    ("req/s", "request_throughput", ".2f"),
    ("out tok/s", "output_throughput", ".1f"),
    ("total tok/s", "total_token_throughput", ".1f"),
)


def _sweep_header(points: Sequence[LoadPoint]) -> str:
    """The axis the sweep varies: the concurrency cap, else the rate."""
    caps = {p.max_concurrency for p in points}
    if len(caps) > 1:
        return "max_concurrency"
    if len({p.request_rate for p in points}) > 1:
        return "request_rate"
    return "request_rate" if None in caps else "max_concurrency"


def _load_text(point: LoadPoint, header: str) -> str:
    if header == "max_concurrency":
        return str(point.max_concurrency)
    return "inf" if math.isinf(point.request_rate) else f"{point.request_rate:g}"


def sweep_table(
    points: Sequence[LoadPoint],
    results: Sequence[Mapping[str, Any]],
    percentile_metrics: Sequence[str],
) -> str:
    """One aligned row per load point: load, counts, throughputs, mean and P99 (ms) of each
    reported latency (P99 when vLLM's ``--metric-percentiles`` kept it)."""
    columns: list[tuple[str, str, str]] = list(_SWEEP_COLUMNS)
    for metric in ("ttft", "tpot", "itl", "e2el"):
        if metric not in percentile_metrics:
            continue
        name = METRICS[metric][0]
        columns.append((f"mean {name} ms", f"mean_{metric}_ms", ".2f"))
        if all(f"p99_{metric}_ms" in r for r in results):
            columns.append((f"P99 {name} ms", f"p99_{metric}_ms", ".2f"))
    axis = _sweep_header(points)
    header = [axis, *(title for title, _, _ in columns)]
    rows = [
        [_load_text(point, axis), *(format(result[key], spec) for _, key, spec in columns)]
        for point, result in zip(points, results, strict=True)
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
             for row in [header, *rows]]  # fmt: skip
    return "\n".join(lines)
