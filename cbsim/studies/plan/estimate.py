"""A first guess at a layout's capacity, from the cost model alone, to start its rate search near
the answer.

The search itself decides (:func:`cbsim.studies.capacity.search.find_max_rate` brackets and bisects by
simulation); a good start only saves the doublings that would climb from 1 request/s. The guess
is the steady state of continuous batching: with ``C`` requests decoding, each iteration emits
``C`` tokens and takes in ``C × prompt / output`` prompt tokens (every request's prompt is
prefilled once for its ``output`` tokens), so it serves ``C / (output × t(C))`` requests/s, where
``t(C)`` is the cost model's time of that iteration. The largest ``C`` whose iteration stays
within the TPOT target (and the batch cap, and the KV cache) gives the guess. A decode instance
takes no prompt tokens; a prefill instance serves about one prompt per prefill time.
"""

from __future__ import annotations

import math

from cbsim.engine.cost_models import cost_model_for
from cbsim.schema.engine_defaults import apply_engine_defaults
from cbsim.schema.scenario import Scenario

GUESS_FLOOR_RPS = 0.05
"""The lowest guess (the search halves from there when even that fails)."""
TPOT_SHARE = 0.7
"""Iterations are planned at this share of the TPOT target (p99 TPOT runs above the mean)."""
PREFILL_SHARE = 0.6
"""A prefill instance is guessed at this share of its throughput (TTFT grows with the queue)."""


def _batch_sizes(cap: int) -> list[int]:
    sizes = [1]
    while sizes[-1] * 2 <= cap:
        sizes.append(sizes[-1] * 2)
    if sizes[-1] != cap:
        sizes.append(cap)
    return sizes


def decode_guess(
    scenario: Scenario,
    prompt_tokens: float,
    output_tokens: float,
    tpot_s: float | None,
    kv_requests: int,
    *,
    prefills: bool = True,
) -> float:
    """Requests/s one replica (``prefills``) or one decode instance serves within ``tpot_s``."""
    resolved = apply_engine_defaults(scenario)
    cost = cost_model_for(resolved)
    cap = max(1, min(resolved.scheduler.max_batch_size * resolved.cluster.dp, kv_requests))
    output = max(1.0, output_tokens)
    context = int(prompt_tokens + output / 2)
    best = GUESS_FLOOR_RPS
    for size in _batch_sizes(cap):
        batch = [(1, context)] * size
        if prefills:
            batch.append((max(1, math.ceil(size * prompt_tokens / output)), 0))
        step = cost.iteration_time(batch)
        if tpot_s is not None and step > TPOT_SHARE * tpot_s and size > 1:
            break
        best = max(best, size / (output * step))
    return best


def prefill_guess(scenario: Scenario, prompt_tokens: float) -> float:
    """Requests/s one prefill instance serves (prompts one after another, with some queueing)."""
    resolved = apply_engine_defaults(scenario)
    cost = cost_model_for(resolved)
    budget = resolved.scheduler.max_batched_tokens
    prompt = max(1, int(prompt_tokens))
    steps = math.ceil(prompt / budget)
    chunk = min(prompt, budget)
    step = cost.iteration_time([(chunk, 0)])
    return max(GUESS_FLOOR_RPS, PREFILL_SHARE / (steps * step))
