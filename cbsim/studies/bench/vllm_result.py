"""A simulated run as ``vllm bench serve`` reports it: its metrics and its ``--save-result`` JSON.

vLLM's benchmark client records, per request it sent, the prompt length, whether it succeeded,
the time to the first streamed token, the gap before every later streamed chunk (its ITL list)
and the whole latency; ``calculate_metrics`` turns those into its result. This module rebuilds
the same per-request records from a cbsim run and computes every figure exactly as vLLM does:

* **success**: a request that finished (``status == finished``); rejected, timed-out and
  unfinished ones are vLLM's failed requests (``errors`` says why), with zero TTFT and latency,
  no gaps and output length 0, as vLLM records a failure.
* **TTFT, E2EL**: cbsim's client-side ``ttft_s`` and ``e2e_s`` (sent to first token / last token
  delivered); **TPOT** per request ``(latency - ttft) / (output_len - 1)`` over requests of two
  tokens or more.
* **ITL**: every gap between a request's consecutive streamed chunks. cbsim keeps no per-request
  token list; it keeps every iteration's delivery time (``iterations.delivered_s``), and a request
  gets one chunk from every step of its replica that decodes, from its first token to its last:
  so its gaps are the differences of the delivery times of its replica's decoding steps
  (``decode_tokens + verify_tokens > 0``) in ``(first_token_s, finish_s]``, prefixed by
  ``first_token_s``. That is exact whenever the request was in every decoding step of that span;
  it is checked (a request without speculation must get ``output_tokens - 1`` gaps; a
  speculative one, whose step may stream several tokens as one chunk, as vLLM's client then
  sees them, at most that many and no preemption) and a request that fails the check (preempted,
  or left out of a step by the token budget) gets ``output_tokens - 1`` equal gaps of its TPOT
  instead, which keeps its sum exact; :attr:`RequestRecords.approximated` counts them. Without
  speculation the flattened gaps are exactly the every-token gaps of cbsim's summary
  (``itl_mean_s``, ``itl_p50_s``, ...); with it they are per chunk, as vLLM measures them.
* **duration**: from the benchmark's start (time 0, before the first send) to the last request's
  end, as vLLM's clock runs. ``start_times`` are send times from that start; ``queue_times`` the
  time a prompt waited for a ``--max-concurrency`` slot (its send time: vLLM creates every prompt
  at the start), 0 in an open loop.
* **peak figures**: ``max_output_tokens_per_s`` buckets every chunk time (first token, then each
  gap) into whole seconds from the first send; ``max_concurrent_requests`` is the most requests
  in flight at once, both as vLLM computes them. ``rtfx`` (speech benchmarks) is 0.

:func:`benchmark_result` returns vLLM's result dict (``duration``, ``completed``, ...,
``mean_ttft_ms``, ``p99_itl_ms``, ...) and :func:`result_json` adds the set-up keys vLLM's
``main`` puts in front (``date``, ``backend``, ``model_id``, ``num_prompts``, ``request_rate``,
...), ``--metadata`` keys among them, and drops the per-request lists unless ``detailed``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from cbsim.run.results import Results
from cbsim.studies.bench.load import LoadPoint

__all__ = [
    "DETAILED_KEYS",
    "METRICS",
    "RequestRecords",
    "benchmark_result",
    "request_records",
    "result_json",
]

METRICS: dict[str, tuple[str, str]] = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
    "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
    "e2el_including_client_queue": (
        "E2EL incl. Client Queue",
        "Queue-inclusive End-to-end Latency",
    ),
}
"""vLLM's ``--percentile-metrics`` names: (short name, section header) as it prints them."""

DETAILED_KEYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
)
"""Per-request lists: saved only with ``--save-detailed``, as in vLLM's result files."""

_BACKENDS = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "tensorrt-llm"}
"""cbsim engine → the ``--backend`` of vLLM's benchmark that talks to it (others: openai)."""


@dataclass
class RequestRecords:
    """vLLM's per-request outputs of a run, in send order (one entry per prompt)."""

    success: np.ndarray  # bool
    input_lens: np.ndarray  # int
    output_lens: np.ndarray  # int, 0 for a failure
    ttfts: np.ndarray  # s, 0 for a failure
    latencies: np.ndarray  # s, 0 for a failure
    start_times: np.ndarray  # s from the benchmark's start
    queue_times: np.ndarray  # s waited for a concurrency slot
    itls: list[np.ndarray]  # s, the gaps of each request's streamed chunks
    errors: list[str]
    approximated: int  # requests whose gaps are equal shares (see the module docstring)

    @property
    def end_times(self) -> np.ndarray:
        """When each request ended (sent + latency; a failure: when it was sent)."""
        return np.asarray(self.start_times + self.latencies)


# --------------------------------------------------------------------------- per request


def _decoding_deliveries(iterations: pd.DataFrame) -> dict[int, np.ndarray]:
    """Per replica, the sorted delivery times of its steps that decode (stream a chunk to every
    request decoding in them)."""
    decoding = (iterations["decode_tokens"] + iterations["verify_tokens"]) > 0
    replicas = iterations["replica"].to_numpy(dtype=np.int64)[decoding.to_numpy()]
    delivered = iterations["delivered_s"].to_numpy(dtype=float)[decoding.to_numpy()]
    return {int(r): np.sort(delivered[replicas == r]) for r in np.unique(replicas)}


def _gaps_of(
    deliveries: np.ndarray | None, first: float, finish: float, tokens: int, speculative: bool
) -> np.ndarray | None:
    """The gaps of one request's chunks from its replica's decoding deliveries, or None when the
    request was not in every one of them (see the module docstring)."""
    if tokens <= 1:
        return np.empty(0)
    if deliveries is None:
        return None
    lo = int(np.searchsorted(deliveries, first, side="right"))
    hi = int(np.searchsorted(deliveries, finish, side="right"))
    count = hi - lo
    exact = 1 <= count <= tokens - 1 if speculative else count == tokens - 1
    if not exact or not math.isclose(deliveries[hi - 1], finish, rel_tol=0, abs_tol=1e-9):
        return None
    return np.diff(np.concatenate(([first], deliveries[lo:hi])))


def _failure_texts(requests: pd.DataFrame) -> list[str]:
    """vLLM's ``errors`` entry per request: empty for a success, else its status and reason."""
    status = requests["status"].astype(str).to_numpy()
    if "rejected_reason" in requests:
        reasons = requests["rejected_reason"].fillna("").astype(str).to_numpy()
    else:
        reasons = np.full(len(requests), "")
    return [
        "" if s == "finished" else f"{s}: {r}" if r else s
        for s, r in zip(status, reasons, strict=True)
    ]


def _request_gaps(
    requests: pd.DataFrame, deliveries: dict[int, np.ndarray], success: np.ndarray
) -> tuple[list[np.ndarray], int]:
    """Each request's chunk gaps (empty for a failure) and how many are equal shares."""
    replica = requests["replica"].to_numpy(dtype=np.int64)
    first = requests["first_token_s"].to_numpy(dtype=float)
    finish = requests["finish_s"].to_numpy(dtype=float)
    tokens = requests["output_tokens"].to_numpy(dtype=np.int64)
    speculative = (requests["spec_steps"].to_numpy(dtype=np.int64) > 0) & (
        requests["preemptions"].to_numpy(dtype=np.int64) == 0
    )
    itls: list[np.ndarray] = []
    approximated = 0
    for i, ok in enumerate(success):
        if not ok:
            itls.append(np.empty(0))
            continue
        n = int(tokens[i])
        gaps = _gaps_of(
            deliveries.get(int(replica[i])), first[i], finish[i], n, bool(speculative[i])
        )
        if gaps is None:
            approximated += 1
            gaps = np.full(n - 1, (finish[i] - first[i]) / (n - 1))
        itls.append(gaps)
    return itls, approximated


def request_records(
    results: Results, point: LoadPoint, ready_s: np.ndarray | None = None
) -> RequestRecords:
    """vLLM's per-request outputs rebuilt from a run's requests and iterations. A request's
    queue time is how long it waited for a concurrency slot: from time 0 (vLLM creates every
    prompt at the start when the rate is infinite), or from ``ready_s`` (when each became ready,
    behind a cap on an open loop)."""
    requests = results.requests.sort_values("request_id", kind="stable")
    success = (requests["status"] == "finished").to_numpy()
    sent = requests["arrival_s"].to_numpy(dtype=float)
    itls, approximated = _request_gaps(
        requests, _decoding_deliveries(results.load_iterations()), success
    )
    zero = np.zeros(len(requests))
    queue = zero.copy()
    if point.max_concurrency is not None:
        if ready_s is None:
            queue = sent.copy()
        else:
            ids = requests["request_id"].to_numpy(dtype=np.int64)
            queue = np.maximum(sent - ready_s[ids], 0.0)
    return RequestRecords(
        success=success,
        input_lens=requests["prompt_tokens"].to_numpy(dtype=np.int64),
        output_lens=np.where(success, requests["output_tokens"].to_numpy(dtype=np.int64), 0),
        ttfts=np.where(success, requests["ttft_s"].to_numpy(dtype=float), zero),
        latencies=np.where(success, requests["e2e_s"].to_numpy(dtype=float), zero),
        start_times=sent,
        queue_times=queue,
        itls=itls,
        errors=_failure_texts(requests),
        approximated=approximated,
    )


# --------------------------------------------------------------------------- metrics


def _stats(values_s: Sequence[float] | np.ndarray, percentiles: Sequence[float]) -> dict[str, Any]:
    """mean, median, std and the percentiles in ms, as vLLM computes them (an empty list: 0)."""
    values = np.asarray(values_s, dtype=float)
    if values.size == 0:
        values = np.zeros(1)
    return {
        "mean": float(np.mean(values) * 1000),
        "median": float(np.median(values) * 1000),
        "std": float(np.std(values) * 1000),
        "percentiles": [(p, float(np.percentile(values, p) * 1000)) for p in percentiles],
    }


def percentile_word(p: float) -> str:
    """``99`` for 99.0, ``99.9``: how vLLM names a percentile in its keys and lines."""
    return str(int(p)) if int(p) == p else str(p)


def _metric_values(records: RequestRecords, point: LoadPoint) -> dict[str, np.ndarray | None]:
    """Per metric, the values (s) vLLM takes its statistics over (None: not reported)."""
    ok = records.success
    decoded = ok & (records.output_lens > 1)
    tpots = (records.latencies[decoded] - records.ttfts[decoded]) / (
        records.output_lens[decoded] - 1
    )
    gaps = [g for g, good in zip(records.itls, ok, strict=True) if good]
    capped = point.max_concurrency is not None
    finite = not math.isinf(point.request_rate) or point.ramp_up is not None
    return {
        "ttft": records.ttfts[ok],
        "tpot": tpots,
        "itl": np.concatenate(gaps) if gaps else np.empty(0),
        "e2el": records.latencies[ok],
        "client_queue_time": records.queue_times[ok] if capped else None,
        "e2el_including_client_queue": (
            records.latencies[ok] + records.queue_times[ok] if capped and finite else None
        ),
    }


def _peaks(records: RequestRecords) -> tuple[float, int]:
    """vLLM's peak output tokens in one whole second and its peak of requests in flight."""
    ok = records.success
    if not ok.any():
        return 0.0, 0
    starts = records.start_times[ok]
    ends = records.end_times[ok]
    origin = float(starts.min())
    seconds = int(np.ceil(float(ends.max()) - origin)) + 1
    times = [
        np.cumsum(np.concatenate(([s + t], gaps)))
        for s, t, gaps in zip(
            starts,
            records.ttfts[ok],
            (g for g, good in zip(records.itls, ok, strict=True) if good),
            strict=True,
        )
    ]
    buckets = (np.concatenate(times) - origin).astype(np.int64)
    buckets = buckets[(buckets >= 0) & (buckets < seconds)]
    peak_tokens = float(np.bincount(buckets, minlength=seconds).max())
    events = sorted([(float(s), 1) for s in starts] + [(float(e), -1) for e in ends])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak_tokens, peak


def _good_requests(records: RequestRecords, goodput_ms: Mapping[str, float]) -> int:
    """Completed requests within every ``--goodput`` target (vLLM: a one-token request's TPOT
    is 0)."""
    ok = records.success
    tokens = records.output_lens
    safe = np.maximum(tokens - 1, 1)
    tpot = np.where(tokens > 1, (records.latencies - records.ttfts) / safe, 0.0)
    values = {"ttft": records.ttfts, "tpot": tpot, "e2el": records.latencies}
    good = ok.copy()
    for name, limit_ms in goodput_ms.items():
        good &= values[name] <= limit_ms / 1000.0
    return int(good.sum())


def benchmark_result(
    records: RequestRecords,
    point: LoadPoint,
    *,
    percentile_metrics: Sequence[str],
    percentiles: Sequence[float],
    goodput_ms: Mapping[str, float],
) -> dict[str, Any]:
    """vLLM's ``benchmark()`` result: throughputs, the per-request lists, peaks and, per selected
    metric, ``mean_/median_/std_`` and ``p<P>_<metric>_ms``."""
    ok = records.success
    completed = int(ok.sum())
    duration = float(records.end_times.max()) if len(ok) else 0.0
    total_input = int(records.input_lens[ok].sum())
    total_output = int(records.output_lens.sum())
    peak_tokens, peak_requests = _peaks(records)
    per_second = (lambda n: n / duration) if duration > 0 else (lambda n: 0.0)
    result: dict[str, Any] = {
        "duration": duration,
        "completed": completed,
        "failed": int(len(ok) - completed),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": per_second(completed),
        "request_goodput": (
            per_second(_good_requests(records, goodput_ms)) if goodput_ms else None
        ),
        "output_throughput": per_second(total_output),
        "total_token_throughput": per_second(total_input + total_output),
        "input_lens": [int(n) for n in records.input_lens],
        "output_lens": [int(n) for n in records.output_lens],
        "ttfts": [float(t) for t in records.ttfts],
        "itls": [[float(g) for g in gaps] for gaps in records.itls],
        "latencies": [float(t) for t in records.latencies],
        "start_times": [float(t) for t in records.start_times],
        "queue_times": [float(t) for t in records.queue_times],
        "generated_texts": ["" for _ in records.errors],
        "errors": list(records.errors),
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
        "rtfx": 0.0,
    }
    values = _metric_values(records, point)
    for metric in percentile_metrics:
        chosen = values[metric]
        if chosen is None:
            continue
        stats = _stats(chosen, percentiles)
        for stat in ("mean", "median", "std"):
            result[f"{stat}_{metric}_ms"] = stats[stat]
        for p, value in stats["percentiles"]:
            result[f"p{percentile_word(p)}_{metric}_ms"] = value
    return result


def backend_of(engine: str) -> str:
    """The ``--backend`` vLLM's benchmark would use against ``engine``."""
    return _BACKENDS.get(engine, "openai")


def result_json(
    benchmark: Mapping[str, Any],
    point: LoadPoint,
    *,
    model_id: str,
    num_prompts: int,
    burstiness: float,
    engine: str,
    label: str | None,
    metadata: Mapping[str, Any],
    detailed: bool,
    date: datetime | None = None,
) -> dict[str, Any]:
    """The JSON ``vllm bench serve --save-result`` writes: set-up keys, ``--metadata`` keys,
    traffic keys, then the benchmark result (per-request lists only when ``detailed``)."""
    backend = backend_of(engine)
    head: dict[str, Any] = {
        "date": (date or datetime.now()).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": label,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": num_prompts,
        **metadata,
        "request_rate": "inf" if math.isinf(point.request_rate) else point.request_rate,
        "burstiness": burstiness,
        "max_concurrency": point.max_concurrency,
    }
    if point.ramp_up is not None:  # vLLM's keys, as its ints
        head["ramp_up_strategy"] = point.ramp_up.strategy
        head["ramp_up_start_rps"] = _whole(point.ramp_up.start_rps)
        head["ramp_up_end_rps"] = _whole(point.ramp_up.end_rps)
    body = {k: v for k, v in benchmark.items() if detailed or k not in DETAILED_KEYS}
    return {**head, **body}


def _whole(value: float) -> int | float:
    """``2`` for 2.0 (vLLM's ramp rates are whole numbers)."""
    return int(value) if value == int(value) else value
