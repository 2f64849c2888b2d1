"""Orca: iteration-level scheduling with the full KV reserved at admission.

Every iteration all running requests decode one token, and waiting requests are admitted FCFS
(whole prompt in this iteration, beside the decodes) while the token budget ``max_batched_tokens``
and ``max_batch_size`` allow and the KV cache can hold their *whole* length, prompt plus output, at
once. Reserving the maximum up front means no request is ever preempted, at the price of memory
held idle — the waste paged attention removed.
"""

from __future__ import annotations

from cbsim.kvcache import blocks_for_tokens
from cbsim.scheduler.base import Batch, SchedulerPolicy, register


@register("orca")
class OrcaScheduler(SchedulerPolicy):
    reserves_full_length = True

    def _head_admissible(self) -> bool:
        req = self.waiting[0]
        if len(self.running) >= self.config.max_batch_size:
            return False
        hit = self._lookup(req)
        tokens = req.prefill_target - hit.tokens(self.kv.block_size)
        if tokens > self.config.max_batched_tokens - len(self.running) and self.running:
            return False
        return self._can_reserve(blocks_for_tokens(req.max_kv_tokens, self.kv.block_size), hit)

    def next_batch(self, now: float) -> Batch:
        cfg = self.config
        batch = Batch()
        budget = cfg.max_batched_tokens
        for req in self.running:
            self._add(batch, req, 1)
            budget -= 1
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
