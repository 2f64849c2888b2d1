"""Prefill-first scheduling: paged KV, whole prompts before decodes, recompute preemption.

The default scheduler of vLLM V0 (the engine of vLLM 0.6 and earlier, ``engine: vllm-v0``) and,
with its own budget and page size, SGLang's: a new prefill batch takes priority over decoding.
vLLM V1 (``engine: vllm``) schedules differently, decodes first with chunked prefill: cbsim's
``sarathi``. Its YAML name is ``prefill_first``; ``vllm``, its name before, is a deprecated
alias.

When requests wait and can be admitted, the iteration is a prefill-only batch of whole prompts in
FCFS order, within ``max_batched_tokens`` and ``max_batch_size``, each admitted only while the KV
cache keeps its watermark of free blocks. Otherwise every running request decodes one token; a
request whose next token needs a block that is not free preempts the most recently admitted running
request (recompute), or itself when it is the most recent. A lone prompt longer than the token
budget is admitted on its own rather than never (vLLM would refuse to start with such a budget),
and the watermark is not kept when nothing is running (there is nothing left to protect).
"""

from __future__ import annotations

from cbsim.engine.scheduler.base import Batch, SchedulerPolicy, register
from cbsim.memory.kvcache import blocks_for_tokens


@register("prefill_first")
class PrefillFirstScheduler(SchedulerPolicy):
    forms_cohorts = True

    def next_batch(self, now: float) -> Batch:
        batch = self._schedule_prefills(now)
        if batch.requests:
            return batch
        return self._schedule_decodes()

    def _schedule_prefills(self, now: float) -> Batch:
        batch = Batch()
        cfg = self.config
        budget = cfg.max_batched_tokens
        while self.waiting and len(self.running) < cfg.max_batch_size:
            req = self.waiting[0]
            hit = self._lookup(req)
            tokens = req.prefill_target - hit.tokens(self.kv.block_size)
            if tokens > budget and batch.requests:
                break
            need = blocks_for_tokens(req.prefill_target, self.kv.block_size)
            if not self._reserve(req, need, hit, keep_watermark=bool(self.running)):
                break
            self.waiting.popleft()
            self._admit(req, now)
            self._add(batch, req, tokens)
            budget -= tokens
        return batch

    def _head_admissible(self) -> bool:
        if len(self.running) >= self.config.max_batch_size:
            return False
        req = self.waiting[0]
        need = blocks_for_tokens(req.prefill_target, self.kv.block_size)
        return self._can_reserve(need, self._lookup(req), keep_watermark=bool(self.running))

    def _schedule_decodes(self) -> Batch:
        batch = Batch()
        self._add_decodes(batch, len(self.running))
        return batch
