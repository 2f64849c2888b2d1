"""The metric tables' shapes: the columns of the requests, iterations and timeseries frames a run
produces, the percentiles its summary reports of each latency, and the chunk of rows that
column-wise steps over a long run take at a time (to keep their temporaries small)."""

from __future__ import annotations

REQUEST_COLUMNS = [
    "request_id", "replica", "client", "arrival_s", "first_token_s", "finish_s", "prompt_tokens",
    "cached_tokens", "cached_tokens_cpu", "kv_load_s", "prefill_replica", "kv_wait_s", "kv_transfer_s", "kv_arrived_s", "output_tokens", "ttft_s", "tpot_s", "e2e_s",
    "queue_s", "preemptions", "spec_steps",
    "drafted_tokens", "accepted_tokens", "mean_k", "status", "server_arrival_s",
    "server_first_token_s", "server_finish_s", "server_ttft_s", "server_tpot_s", "server_e2e_s",
]  # fmt: skip

ITERATION_COLUMNS = [
    "replica", "start_s", "duration_s", "batch_size", "prefill_tokens", "decode_tokens",
    "verify_tokens", "drafted_tokens", "accepted_tokens", "emitted_tokens", "kv_blocks_used",
    "kv_blocks_total", "waiting", "mean_k",
]  # fmt: skip

TIMESERIES_COLUMNS = [
    "t_s", "output_tokens_per_s", "requests_completed", "arrivals", "waiting", "kv_utilization",
    "batch_size", "mean_k", "acceptance_rate", "prefix_hit_rate", "span_s", "replicas",
]  # fmt: skip

PERCENTILES = (50, 90, 99)
CHUNK_ROWS = 1 << 18  # rows a column-wise step takes at a time, to keep temporaries small
