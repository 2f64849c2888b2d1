"""A request's life inside a replica.

A request arrives with a prompt of P tokens and asks for O output tokens. It waits, is admitted,
prefills its prompt (whole or in chunks) and then decodes. The first output token is sampled when the
prefill completes; every decode step feeds the last sampled token and samples the next one
(a speculative verify step feeds it together with k drafts and samples a + 1). So between steps the
KV cache holds ``P + generated − 1`` tokens. A preempted request loses its KV cache and, when
readmitted, re-prefills its prompt *and* the tokens it had generated (recompute), which samples its
next token. ``prefill_target`` is how many tokens the current prefill must reach.

Times here are the engine's (server-side): ``arrival_s`` is when the engine receives the request,
``first_token_s`` and ``finish_s`` when its first and last tokens leave an engine step. A client
sent it at ``sent_s`` (earlier by the front end's request delay) and sees its tokens when the front
end delivers them: the recorder derives those times from ``first_row`` and ``last_row``, the rows of
the iterations (in the iterations table) that emitted its first and latest token.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cbsim.workload.prefix_segments import Node, Segments


class Status(IntEnum):
    WAITING = 0
    RUNNING = 1
    FINISHED = 2
    REJECTED = 3
    TIMED_OUT = 4  # its client gave up on it (workload.client.timeout_s)


class Request:
    """Mutable per-request state; plain slots for speed (one object per request, no per-token objects)."""

    __slots__ = (
        "abandoned",
        "accepted_tokens",
        "admit_seq",
        "arrival_s",
        "blocks",
        "cached_tokens",
        "cached_tokens_cpu",
        "client",
        "decode_steps",
        "deferred_outputs",
        "drafted_tokens",
        "finish_s",
        "first_row",
        "first_scheduled_s",
        "first_token_s",
        "generated",
        "held_blocks",
        "k_sum",
        "kv_arrived_s",
        "kv_load_s",
        "kv_tokens",
        "kv_transfer_s",
        "kv_wait_s",
        "last_row",
        "load_s",
        "output_tokens",
        "owned_segments",
        "preemptions",
        "prefill_done_s",
        "prefill_replica",
        "prefill_target",
        "prefix_node",
        "prompt_tokens",
        "rejected_reason",
        "replica",
        "request_id",
        "segments",
        "sent_s",
        "session",
        "shared_blocks",
        "spec",
        "spec_steps",
        "stage",
        "status",
    )

    def __init__(
        self,
        request_id: int,
        arrival_s: float,
        prompt_tokens: int,
        output_tokens: int,
        *,
        sent_s: float | None = None,
        client: int = -1,
    ) -> None:
        self.request_id = request_id
        self.arrival_s = arrival_s
        self.sent_s = arrival_s if sent_s is None else sent_s
        self.client = client
        self.first_row = -1
        self.last_row = -1
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.replica = -1
        self.status = Status.WAITING
        self.generated = 0
        self.kv_tokens = 0
        self.prefill_target = prompt_tokens
        self.blocks = 0
        self.admit_seq = -1
        self.first_scheduled_s = math.nan
        self.first_token_s = math.nan
        self.finish_s = math.nan
        self.preemptions = 0
        self.spec_steps = 0
        self.drafted_tokens = 0
        self.accepted_tokens = 0
        self.k_sum = 0
        self.decode_steps = 0
        self.spec: object | None = None  # the request's speculative decoder, when speculating
        self.rejected_reason = ""
        # prefix caching (cbsim.memory.prefix_cache): the prompt's content segments, the cache entries
        # it references (the deepest node of its path in the cache's tree, and how many segments
        # that path holds), how many of its blocks are theirs, prompt tokens reused at admission
        self.segments: Segments | None = None
        self.prefix_node: Node | None = None
        self.owned_segments = 0
        self.shared_blocks = 0
        self.cached_tokens = 0
        self.cached_tokens_cpu = 0  # of those, loaded from the CPU tier
        self.load_s = 0.0  # a CPU-tier load its next step waits for
        self.kv_load_s = 0.0  # seconds its first admission's load took
        self.session = -1  # the conversation of a multi-turn workload (-1: none)
        self.stage = -1  # the rate point of a staged load that sent it (-1: none)
        # its client gave up on it (a timeout): the server drops it at its next step boundary
        self.abandoned = False
        # disaggregated prefill and decode (cbsim.engine.loop): the instance that computed the prompt,
        # the outputs still owed while it does (there it asks for one token), the blocks it holds
        # there until its KV has crossed, when its prefill ended, the seconds from then to its
        # transfer's start (decode admission, a busy link) and the transfer's own seconds
        self.prefill_replica = -1
        self.deferred_outputs = 0
        self.held_blocks = 0
        self.prefill_done_s = math.nan
        self.kv_wait_s = 0.0
        self.kv_transfer_s = 0.0
        self.kv_arrived_s = math.nan  # when its KV reached the decode instance

    @property
    def in_prefill(self) -> bool:
        return self.kv_tokens < self.prefill_target

    @property
    def remaining_prefill(self) -> int:
        return max(0, self.prefill_target - self.kv_tokens)

    @property
    def remaining_output(self) -> int:
        return self.output_tokens - self.generated

    @property
    def outstanding_tokens(self) -> int:
        """Tokens still to process: the rest of the prefill plus the outputs still to sample."""
        return max(0, self.prefill_target - self.kv_tokens) + self.output_tokens - self.generated

    @property
    def max_kv_tokens(self) -> int:
        """KV tokens the request holds at its end (its whole context but the last sampled token)."""
        return self.prompt_tokens + self.output_tokens

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id}, P={self.prompt_tokens}, O={self.output_tokens}, "
            f"gen={self.generated}, kv={self.kv_tokens}, {self.status.name})"
        )
