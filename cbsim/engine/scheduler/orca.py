"""Orca: iteration-level scheduling with the full KV reserved at admission.

Every iteration all running requests decode one token, and waiting requests are admitted FCFS
(whole prompt in this iteration, beside the decodes) while the token budget ``max_batched_tokens``
and ``max_batch_size`` allow and the KV cache can hold their *whole* length, prompt plus output, at
once. Reserving the maximum up front means no request is ever preempted, at the price of memory
held idle — the waste paged attention removed.

With ``chunked_prefill`` (TensorRT-LLM's chunked context, ``enable_chunked_prefill``; on by
default in its LLM API since NVIDIA/TensorRT-LLM#9499, off in the 1.0-1.2 ``trtllm-serve``) a
prompt that does not fit in what the decodes leave of the budget is not held back: it is admitted
(its whole length still reserved) and prefilled in chunks, each what the budget leaves after the
decodes, rounded down to whole KV blocks as TensorRT-LLM cuts them, its last chunk what remains.
"""

from __future__ import annotations

from cbsim.engine.scheduler.base import Batch, SchedulerPolicy, register
from cbsim.memory.kvcache import blocks_for_tokens


@register("orca")
class OrcaScheduler(SchedulerPolicy):
    reserves_full_length = True

    def step_budget(self) -> int | None:
        return self.config.max_batched_tokens

    def _chunk(self, tokens: int, budget: int, alone: bool) -> int:
        """The prefill tokens a prompt with ``tokens`` left to compute gets from ``budget``
        (``alone``: nothing else is in the batch). All of them if they fit; else none, or with
        chunked prefill the whole blocks the budget holds (what is left when that is none and
        the prompt is alone, so it always moves). Without chunked prefill a prompt alone is
        admitted whole, over the budget (see :mod:`cbsim.engine.scheduler.prefill_first`)."""
        if tokens <= budget:
            return tokens
        if not self.config.chunked_prefill:
            return tokens if alone else 0
        chunk = budget - budget % self.kv.block_size
        return chunk if chunk > 0 or not alone else budget

    def _head_admissible(self) -> bool:
        req = self.waiting[0]
        if len(self.running) >= self.config.max_batch_size:
            return False
        hit = self._lookup(req)
        tokens = req.prefill_target - hit.tokens(self.kv.block_size)
        budget = self.config.max_batched_tokens - len(self.running)
        if self._chunk(tokens, budget, not self.running) <= 0:
            return False
        return self._can_reserve(blocks_for_tokens(req.max_kv_tokens, self.kv.block_size), hit)

    def next_batch(self, now: float) -> Batch:
        cfg = self.config
        batch = Batch()
        budget = cfg.max_batched_tokens
        chunked = cfg.chunked_prefill
        prefilling = []
        for req in self.running:
            if chunked and req.kv_tokens < req.prefill_target:
                prefilling.append(req)  # a prompt part-way: its next chunk after the decodes
                continue
            self._add(batch, req, 1)
            budget -= 1
        for req in prefilling:
            chunk = self._chunk(req.prefill_target - req.kv_tokens, budget, not batch.requests)
            if chunk > 0:
                self._add(batch, req, chunk)
                budget -= chunk
        while self.waiting and len(self.running) < cfg.max_batch_size:
            req = self.waiting[0]
            hit = self._lookup(req)
            tokens = req.prefill_target - hit.tokens(self.kv.block_size)
            chunk = self._chunk(tokens, budget, not batch.requests)
            if chunk <= 0:
                break
            if not self._reserve(
                req, blocks_for_tokens(req.max_kv_tokens, self.kv.block_size), hit
            ):
                break
            self.waiting.popleft()
            self._admit(req, now)
            self._add(batch, req, chunk)
            budget -= chunk
        return batch
