"""Inter-token latency per streamed chunk, beside cbsim's ITL per token.

Two definitions of ITL are in use, and they differ only under speculative decoding:

* **per token** (``itl_p50_s``, ``itl_p90_s``, ``itl_p99_s``, ``itl_mean_s``): every output token
  after a request's first has a gap to the token before it; drafts accepted together in one
  verify step arrive with a gap of 0 (:mod:`cbsim.outputs.itl`). With speculation a large share of the
  gaps is 0, so the median can read 0.0 ms.
* **per chunk** (``itl_chunk_p50_s``, ``itl_chunk_p90_s``, ``itl_chunk_p99_s``,
  ``itl_chunk_mean_s``): a *chunk* is what one engine step emits for one request (one token
  without speculation, accepted drafts + 1 with it), and the gap is the time between a request's
  consecutive chunks. That is what ``vllm bench serve`` reports as ITL: its client records one
  gap per streamed chunk (``benchmarks/lib/endpoint_request_func.py`` appends
  ``timestamp - most_recent_timestamp`` to ``output.itl`` for every chunk received).

Both come from the same iteration rows: a row's ``gap_tokens`` already counts one token per
request whose chunk followed its previous one by one step, the schedulers' pause logs one token
per chunk after a pause, and ``zero_gaps`` the extra tokens of multi-token chunks. The per-chunk
figures are therefore :func:`~cbsim.outputs.itl.inter_token_latency` with no zero gaps; without
speculation (no zero gaps) the two are equal and computed once.
"""

from __future__ import annotations

from array import array

import numpy as np

from cbsim.outputs.itl import inter_token_latency


def chunk_keys(token_itl: dict[str, float]) -> dict[str, float]:
    """``itl_*`` keys renamed ``itl_chunk_*``."""
    return {key.replace("itl_", "itl_chunk_", 1): value for key, value in token_itl.items()}


def token_and_chunk_latency(
    delivered: np.ndarray,
    replica: np.ndarray | None,
    gap_tokens: np.ndarray,
    gap_pairs: list[array[int]],
    zero_gaps: int,
) -> dict[str, float]:
    """ITL per token (``itl_*``) and per chunk (``itl_chunk_*``); arguments as
    :func:`~cbsim.outputs.itl.inter_token_latency`, whose logs it consumes the same way."""
    if zero_gaps == 0:
        per_token = inter_token_latency(delivered, replica, gap_tokens, gap_pairs, 0)
        return per_token | chunk_keys(per_token)
    copies = [array(log.typecode, log) for log in gap_pairs]
    per_chunk = inter_token_latency(delivered, replica, gap_tokens, copies, 0)
    per_token = inter_token_latency(delivered, replica, gap_tokens, gap_pairs, zero_gaps)
    return per_token | chunk_keys(per_chunk)


__all__ = ["chunk_keys", "token_and_chunk_latency"]
