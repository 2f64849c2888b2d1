"""Static (request-level) batching: the baseline continuous batching improves on.

When the replica is idle it takes up to ``max_batch_size`` waiting requests (FCFS, within
``max_batched_tokens`` of prompt and with their full length reservable in the KV cache), prefills
them together in one iteration and then decodes them together until *all* have finished. Requests
that finish early leave the batch but nobody joins until it is empty, so short requests wait for the
longest one and arrivals wait for the whole batch.
"""

from __future__ import annotations

from cbsim.engine.scheduler.base import Batch, SchedulerPolicy, register
from cbsim.memory.kvcache import blocks_for_tokens


@register("static")
class StaticScheduler(SchedulerPolicy):
    reserves_full_length = True

    def decode_run_mode(self) -> bool | None:
        # a running batch decodes until all its requests finish; nobody is admitted meanwhile
        if not self.running or any(r.kv_tokens < r.prefill_target for r in self.running):
            return None
        return False

    def next_batch(self, now: float) -> Batch:
        batch = Batch()
        if self.running:
            for req in self.running:
                self._add(batch, req, 1)
            return batch
        cfg = self.config
        budget = cfg.max_batched_tokens
        while self.waiting and len(self.running) < cfg.max_batch_size:
            req = self.waiting[0]
            hit = self._lookup(req)
            tokens = req.prefill_target - hit.tokens(self.kv.block_size)
            if tokens > budget and batch.requests:
                break
            if not self._reserve(
                req, blocks_for_tokens(req.max_kv_tokens, self.kv.block_size), hit
            ):
                break
            self.waiting.popleft()
            self._admit(req, now)
            self._add(batch, req, tokens)
            budget -= tokens
        return batch
