"""Saturation as it happens: what an overloaded engine holds and serves, and where the knee is.

A capacity plan is decided at the knee, the highest load a deployment holds before its queue
grows. Past it, what a replay must get right is what the engine does while saturated: how many
tokens its KV cache holds in flight (which sets how many requests run at once, hence how fast
each decodes and how fast the queue drains) and how many output tokens a second it serves.
Both are read the same way off a measured run and off its replay, from each request's send,
first-token and finish times and its lengths:

* **tokens in flight** (:func:`tokens_in_flight`): the time average, over the saturated stretch
  of the run (from a quarter of the way through the sends to the last send), of the prompt and
  output tokens so far of every request that has its first token and is not finished — what its
  KV cache holds (prefix sharing aside), per replica;
* **throughput** (:func:`output_throughput`): output tokens a second over the same stretch, each
  request's tokens spread evenly between its first token and its end.

:func:`knee` is the highest load (QPS) of a deployment's runs whose TTFT p90 stays under
:data:`KNEE_TTFT_P90_S`, measured or replayed, and :func:`knee_table` compares the two per
deployment, in steps of the deployment's QPS grid.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

KNEE_TTFT_P90_S = 2.0
SATURATED_FROM = 0.25  # of the send span: the saturated stretch starts after the ramp-up


def _window(send: np.ndarray) -> tuple[float, float]:
    first, last = float(send.min()), float(send.max())
    return first + SATURATED_FROM * (last - first), last


def _spans(compared: pd.DataFrame, predicted: bool) -> tuple[np.ndarray, np.ndarray]:
    suffix = "_pred" if predicted else ""
    send = compared["send_s"].to_numpy(dtype=float)
    first = send + compared[f"ttft_s{suffix}"].to_numpy(dtype=float)
    finish = send + compared[f"e2e_s{suffix}"].to_numpy(dtype=float)
    return first, finish


def tokens_in_flight(compared: pd.DataFrame, replicas: int, predicted: bool = False) -> float:
    """Time-averaged KV tokens in flight per replica over the saturated stretch (see the module
    docstring), measured or (``predicted``) replayed."""
    send = compared["send_s"].to_numpy(dtype=float)
    start, end = _window(send)
    if end <= start:
        return float("nan")
    first, finish = _spans(compared, predicted)
    prompts = compared["prompt_tokens"].to_numpy(dtype=float)
    outputs = compared["output_tokens"].to_numpy(dtype=float)
    times = np.linspace(start, end, 512)
    held = np.zeros_like(times)
    for p, o, f, e in zip(prompts, outputs, first, finish, strict=True):
        if not (np.isfinite(f) and np.isfinite(e)) or e <= start or f >= end:
            continue
        live = (times >= f) & (times < e)
        held[live] += p + o * (times[live] - f) / max(e - f, 1e-9)
    return float(held.mean()) / replicas


def output_throughput(compared: pd.DataFrame, predicted: bool = False) -> float:
    """Output tokens a second over the saturated stretch, measured or replayed."""
    send = compared["send_s"].to_numpy(dtype=float)
    start, end = _window(send)
    if end <= start:
        return float("nan")
    first, finish = _spans(compared, predicted)
    outputs = compared["output_tokens"].to_numpy(dtype=float)
    length = np.maximum(finish - first, 1e-9)
    overlap = np.clip(np.minimum(finish, end) - np.maximum(first, start), 0.0, None)
    tokens = np.where(np.isfinite(overlap), outputs * overlap / length, 0.0)
    return float(tokens.sum() / (end - start))


def overload_errors(compared: pd.DataFrame, replicas: int) -> dict[str, float]:
    """Signed % errors (positive: cbsim larger) of tokens in flight and throughput."""
    rows: dict[str, float] = {}
    for predicted, label in ((False, "measured"), (True, "predicted")):
        rows[f"in_flight_{label}"] = tokens_in_flight(compared, replicas, predicted)
        rows[f"throughput_{label}"] = output_throughput(compared, predicted)
    for name in ("in_flight", "throughput"):
        rows[f"{name}_err"] = 100.0 * (rows[f"{name}_predicted"] / rows[f"{name}_measured"] - 1.0)
    return rows


def knee(qps: Iterable[float], ttft_p90_s: Iterable[float]) -> float:
    """The highest QPS whose TTFT p90 is at most :data:`KNEE_TTFT_P90_S` below the first one
    above it (NaN if even the lightest load queues)."""
    points = sorted(zip(qps, ttft_p90_s, strict=True))
    held = float("nan")
    for rate, p90 in points:
        if not p90 <= KNEE_TTFT_P90_S:
            break
        held = rate
    return held


def knee_table(errors: pd.DataFrame) -> pd.DataFrame:
    """Per deployment (``group`` column of ``errors``: one row per run with ``qps``,
    ``ttft_p90_s`` measured and ``ttft_p90_pred_s`` replayed): the measured and replayed knees
    and how many steps of the deployment's QPS grid apart they are."""
    rows: list[dict[str, Any]] = []
    for group, runs in errors.groupby("group", sort=False):
        grid = sorted(runs["qps"].unique())
        measured = knee(runs["qps"], runs["ttft_p90_s"])
        predicted = knee(runs["qps"], runs["ttft_p90_pred_s"])
        steps = (
            abs(grid.index(measured) - grid.index(predicted))
            if measured in grid and predicted in grid
            else float("nan")
        )
        rows.append(
            {
                "deployment": group,
                "qps_grid": f"{grid[0]:g}-{grid[-1]:g} ({len(grid)} runs)",
                "knee_measured": measured,
                "knee_cbsim": predicted,
                "steps_apart": steps,
            }
        )
    return pd.DataFrame(rows)
