"""Sarathi-Serve: chunked prefill under a per-iteration token budget, decodes first.

Every iteration has a budget of ``max_batched_tokens`` tokens (vLLM's
``--max-num-batched-tokens``; ``chunk_size``, Sarathi-Serve's name for it, holds the same number
unless both are set: then ``chunk_size`` is the most of one prompt an iteration takes, vLLM's
``--long-prefill-token-threshold``).
Running decodes come first (one token each, preempting the most recently admitted request when KV
runs out), then requests part-way through their prefill continue with the next chunk, then
waiting requests are admitted FCFS (with KV blocks for their whole prompt reserved, as vLLM does)
and start theirs, each chunk as large as the remaining budget allows. Prefills and decodes share
the iteration, so decodes never stall behind a long prompt: that is the point of stall-free batching.
"""

from __future__ import annotations

from cbsim.engine.scheduler.base import Batch, SchedulerPolicy, register
from cbsim.memory.kvcache import blocks_for_tokens
from cbsim.workload.request import Request


@register("sarathi")
class SarathiScheduler(SchedulerPolicy):
    forms_cohorts = True
    mixes_decodes = True

    def step_budget(self) -> int | None:
        return self.config.max_batched_tokens

    def decode_run_mode(self) -> bool | None:
        if len(self.running) > self.config.max_batched_tokens:
            return None  # the budget leaves some decodes out
        return super().decode_run_mode()

    def _head_admissible(self) -> bool:
        budget = self.config.max_batched_tokens - len(self.running)
        if budget <= 0 or len(self.running) >= self.config.max_batch_size:
            return False
        req = self.waiting[0]
        need = blocks_for_tokens(req.prefill_target, self.kv.block_size)
        return self._can_reserve(need, self._lookup(req), keep_watermark=bool(self.running))

    def next_batch(self, now: float) -> Batch:
        cfg = self.config
        batch = Batch()
        budget = cfg.max_batched_tokens
        prefilling: list[Request] = []
        budget = self._add_decodes(batch, budget, prefilling)
        for req in prefilling:
            if budget <= 0:
                break
            if req.status != req.status.RUNNING:
                continue
            chunk = min(req.remaining_prefill, budget, cfg.chunk_size)
            if self._grow_or_preempt(req, chunk, batch):
                self._add(batch, req, chunk)
                budget -= chunk
        while budget > 0 and self.waiting and len(self.running) < cfg.max_batch_size:
            req = self.waiting[0]
            # like vLLM, admission reserves blocks for the whole prompt, not just the first chunk:
            # a prompt admitted chunk by chunk into a nearly full cache would preempt itself
            need = blocks_for_tokens(req.prefill_target, self.kv.block_size)
            if not self._reserve(req, need, self._lookup(req), keep_watermark=bool(self.running)):
                break
            chunk = min(req.prefill_target - req.kv_tokens, budget, cfg.chunk_size)
            self.waiting.popleft()
            self._admit(req, now)
            self._add(batch, req, chunk)
            budget -= chunk
        return batch
