"""Tests for cbsim.engine.scheduler: the four batching policies driven directly, without the engine."""

from __future__ import annotations

import math

import pytest

from cbsim.common.errors import CbsimError
from cbsim.engine.scheduler import make_scheduler, scheduler_kinds
from cbsim.engine.scheduler.base import SchedulerPolicy
from cbsim.memory.kvcache import KVCache, blocks_for_tokens
from cbsim.run.loading import Scheduler
from cbsim.workload.request import Request, Status
from tests.conftest import batch_entries, drive


def make(
    kind: str, *, total_blocks: int = 10_000, block_size: int = 16, watermark: int = 0, **config
) -> SchedulerPolicy:
    cfg = Scheduler(kind=kind, block_size=block_size, **config)
    return make_scheduler(cfg, KVCache(total_blocks, block_size, watermark_blocks=watermark))


def requests(*shapes: tuple[int, int], start_id: int = 0) -> list[Request]:
    """Requests (prompt, output) arriving at t=0 with consecutive ids."""
    return [Request(start_id + i, 0.0, p, o) for i, (p, o) in enumerate(shapes)]


def enqueue(sched: SchedulerPolicy, reqs: list[Request]) -> list[Request]:
    for r in reqs:
        sched.enqueue(r)
    return reqs


def test_registry():
    assert scheduler_kinds() == ["orca", "prefill_first", "sarathi", "static"]
    cfg = Scheduler.model_construct(kind="fifo")
    with pytest.raises(CbsimError, match="fifo"):
        make_scheduler(cfg, KVCache(10, 16))


def test_empty_scheduler_forms_empty_batches():
    for kind in scheduler_kinds():
        sched = make(kind)
        assert not sched.has_work
        assert len(sched.next_batch(0.0)) == 0


# --------------------------------------------------------------------------- shared mechanics


@pytest.mark.parametrize("kind", ["static", "orca", "prefill_first", "sarathi"])
def test_every_policy_drains_and_generates_exact_outputs(kind: str):
    sched = make(kind, max_batch_size=3, max_batched_tokens=100 if kind == "sarathi" else 300)
    reqs = enqueue(sched, requests((250, 4), (40, 9), (120, 1), (10, 30), (300, 2)))
    run = drive(sched)
    assert sorted(r.request_id for r in run.finished) == [0, 1, 2, 3, 4]
    for r in reqs:
        assert r.status == Status.FINISHED
        assert r.generated == r.output_tokens
        assert r.blocks == 0
        assert r.first_token_s <= r.finish_s
        assert r.first_scheduled_s < r.first_token_s
    assert sched.kv.used_blocks == 0
    assert not sched.running and not sched.waiting
    assert all(len(b) <= 3 for b in run.batches)
    # every output token is emitted exactly once (no preemption here: the cache is large)
    assert sum(run.emitted) == sum(r.output_tokens for r in reqs)
    assert sum(b.prefill_tokens for b in run.batches) == sum(r.prompt_tokens for r in reqs)


def test_complete_reports_emitted_tokens_and_first_token_time():
    sched = make("prefill_first")
    (a, b) = enqueue(sched, requests((20, 3), (30, 1)))
    done: list[Request] = []
    first = sched.next_batch(0.0)
    assert batch_entries(first) == [(0, 20), (1, 30)]
    assert first.prefill_tokens == 50 and first.decode_tokens == 0
    assert first.stats.sampled_tokens == 2
    assert sched.complete(first, 0.5, done.append) == 2
    assert a.first_token_s == 0.5 and b.first_token_s == 0.5
    assert done == [b]  # one output token: finished by its prefill
    assert b.finish_s == 0.5 and math.isnan(a.finish_s)
    assert a.kv_tokens == 20 and a.generated == 1
    second = sched.next_batch(0.5)
    assert batch_entries(second) == [(0, 1)]
    assert second.decode_tokens == 1
    assert sched.complete(second, 0.6, done.append) == 1
    assert a.kv_tokens == 21 and a.generated == 2
    assert a.first_token_s == 0.5  # unchanged by later tokens


# --------------------------------------------------------------------------- vllm


def test_vllm_prefill_respects_token_budget_fcfs():
    sched = make("prefill_first", max_batched_tokens=100)
    enqueue(sched, requests((60, 5), (60, 5), (10, 5)))
    batch = sched.next_batch(0.0)
    # the third request would fit the budget but must not jump the queue
    assert batch_entries(batch) == [(0, 60)]
    assert [r.request_id for r in sched.waiting] == [1, 2]


def test_vllm_prefill_fills_the_budget_in_order():
    sched = make("prefill_first", max_batched_tokens=100)
    enqueue(sched, requests((30, 5), (30, 5), (40, 5), (1, 5)))
    batch = sched.next_batch(0.0)
    assert batch_entries(batch) == [(0, 30), (1, 30), (2, 40)]
    assert batch.prefill_tokens == 100


def test_vllm_prefill_respects_max_batch_size():
    sched = make("prefill_first", max_batch_size=3)
    enqueue(sched, requests(*[(10, 5)] * 5))
    first = sched.next_batch(0.0)
    assert [r.request_id for r in first.requests] == [0, 1, 2]
    sched.complete(first, 1.0, lambda r: None)
    # the running set is full: the next iteration decodes all running requests
    second = sched.next_batch(1.0)
    assert batch_entries(second) == [(0, 1), (1, 1), (2, 1)]
    assert len(sched.waiting) == 2


def test_vllm_lone_long_prompt_is_admitted_alone():
    sched = make("prefill_first", max_batched_tokens=64)
    enqueue(sched, requests((200, 2), (10, 2)))
    assert batch_entries(sched.next_batch(0.0)) == [(0, 200)]


def test_vllm_prefills_first_then_decodes_all_running():
    sched = make("prefill_first")
    enqueue(sched, requests((20, 10), (20, 10)))
    sched.complete(sched.next_batch(0.0), 1.0, lambda r: None)
    enqueue(sched, requests((50, 10), start_id=2))
    # a waiting request that can be admitted gets a prefill-only iteration
    batch = sched.next_batch(1.0)
    assert batch_entries(batch) == [(2, 50)]
    sched.complete(batch, 2.0, lambda r: None)
    decode = sched.next_batch(2.0)
    assert batch_entries(decode) == [(0, 1), (1, 1), (2, 1)]
    assert decode.prefill_tokens == 0 and decode.decode_tokens == 3


def test_vllm_admission_keeps_the_watermark_while_running():
    # 20 blocks, watermark 5: with one request running, another may only take 20 - 5 - used
    sched = make("prefill_first", total_blocks=20, block_size=4, watermark=5)
    enqueue(sched, requests((40, 50)))  # 10 blocks
    sched.complete(sched.next_batch(0.0), 1.0, lambda r: None)
    enqueue(sched, requests((24, 5), start_id=1))  # 6 blocks: 10 + 6 > 20 - 5
    batch = sched.next_batch(1.0)
    assert batch_entries(batch) == [(0, 1)]
    assert [r.request_id for r in sched.waiting] == [1]


def test_vllm_preempts_the_most_recently_admitted_and_recomputes():
    # block_size 4, 5 blocks. A: prompt 8 (2 blocks, its next token needs a 3rd);
    # B: prompt 10 (3 blocks, its next token fits). After both prefill the cache is full.
    sched = make("prefill_first", total_blocks=5, block_size=4)
    a, b = enqueue(sched, requests((8, 20), (10, 20)))
    prefill = sched.next_batch(0.0)
    assert batch_entries(prefill) == [(0, 8), (1, 10)]
    sched.complete(prefill, 1.0, lambda r: None)
    assert sched.kv.used_blocks == 5
    decode = sched.next_batch(1.0)
    # A needs a block: B, admitted after A, is preempted (recompute) and sent to the queue front
    assert batch_entries(decode) == [(0, 1)]
    assert b.status == Status.WAITING
    assert b.preemptions == 1 and sched.preemptions == 1
    assert b.kv_tokens == 0 and b.blocks == 0
    assert b.prefill_target == b.prompt_tokens + b.generated == 11
    assert sched.waiting[0] is b
    assert sched.running == [a]
    assert a.blocks == 3 and sched.kv.used_blocks == 3


def test_vllm_preempted_request_goes_before_later_arrivals_and_recomputes():
    sched = make("prefill_first", total_blocks=5, block_size=4)
    _, b = enqueue(sched, requests((8, 6), (10, 3)))
    sched.complete(sched.next_batch(0.0), 1.0, lambda r: None)
    sched.complete(sched.next_batch(1.0), 2.0, lambda r: None)  # preempts b
    (c,) = enqueue(sched, requests((4, 2), start_id=2))
    assert list(sched.waiting) == [b, c]
    run = drive(sched, start=2.0)
    assert {r.request_id for r in run.finished} == {0, 1, 2}
    # b re-prefills prompt + the token it had generated, which samples its next token
    recompute = [
        q
        for batch in run.batches
        for r, q in zip(batch.requests, batch.new_tokens, strict=True)
        if r is b and q > 1
    ]
    assert recompute == [11]
    assert b.generated == b.output_tokens == 3
    assert b.first_token_s == 1.0  # the first token came from the original prefill
    assert sched.kv.used_blocks == 0


def test_vllm_latest_request_preempts_itself():
    # A and B both need a new block at the same step: A takes the last one, B (the latest)
    # cannot grow and preempts itself.
    sched = make("prefill_first", total_blocks=5, block_size=4)
    a, b = enqueue(sched, requests((8, 20), (8, 20)))
    sched.complete(sched.next_batch(0.0), 1.0, lambda r: None)
    assert sched.kv.used_blocks == 4
    decode = sched.next_batch(1.0)
    assert batch_entries(decode) == [(0, 1)]
    assert b.status == Status.WAITING and b.preemptions == 1
    assert a.blocks == 3


def test_vllm_never_exceeds_the_cache_under_pressure():
    sched = make("prefill_first", total_blocks=30, block_size=4, max_batch_size=8)
    reqs = enqueue(sched, requests(*[(10 + 7 * i, 15 + 5 * i) for i in range(8)]))
    run = drive(sched)
    assert len(run.finished) == 8
    assert sched.preemptions > 0
    assert sum(r.preemptions for r in reqs) == sched.preemptions
    # recompute re-emits nothing: each output token is emitted once
    assert sum(run.emitted) == sum(r.output_tokens for r in reqs)
    for batch in run.batches:
        assert batch.prefill_tokens == 0 or batch.decode_tokens == 0  # prefill-only or decode


# --------------------------------------------------------------------------- sarathi


def test_sarathi_decodes_first_then_chunks():
    sched = make("sarathi", chunk_size=64)
    enqueue(sched, requests((30, 10)))
    sched.complete(sched.next_batch(0.0), 1.0, lambda r: None)
    enqueue(sched, requests((200, 5), start_id=1))
    batch = sched.next_batch(1.0)
    assert batch_entries(batch) == [(0, 1), (1, 63)]
    assert batch.decode_tokens == 1 and batch.prefill_tokens == 63


def test_sarathi_splits_a_long_prompt_into_chunks():
    prompt, chunk = 300, 64
    sched = make("sarathi", chunk_size=chunk)
    (req,) = enqueue(sched, requests((prompt, 3)))
    run = drive(sched)
    chunks = [q for b in run.batches for q in b.new_tokens if b.prefill_tokens]
    assert chunks == [64, 64, 64, 64, 44]
    assert len(chunks) == math.ceil(prompt / chunk)
    # the first token comes when the last chunk completes (iteration 5 ends at t = 5)
    assert req.first_token_s == 5.0
    assert req.finish_s == 7.0
    assert run.finished == [req]


def test_sarathi_no_token_before_the_last_chunk():
    sched = make("sarathi", chunk_size=100)
    (req,) = enqueue(sched, requests((250, 2)))
    done: list[Request] = []
    for t in (1.0, 2.0):
        emitted = sched.complete(sched.next_batch(t - 1.0), t, done.append)
        assert emitted == 0 and req.generated == 0 and math.isnan(req.first_token_s)
    assert sched.complete(sched.next_batch(2.0), 3.0, done.append) == 1
    assert req.first_token_s == 3.0


def test_sarathi_chunk_size_beside_a_budget_caps_one_prompts_chunk():
    """vLLM's --long-prefill-token-threshold: each prompt takes at most chunk_size tokens a step,
    so two long prompts share a 256-token budget 64 + 64 instead of 256 + 0."""
    sched = make("sarathi", max_batched_tokens=256, chunk_size=64)
    enqueue(sched, requests((300, 2), (300, 2)))
    assert batch_entries(sched.next_batch(0.0)) == [(0, 64), (1, 64)]


def test_sarathi_budget_per_iteration():
    sched = make("sarathi", chunk_size=128, max_batch_size=16)
    enqueue(sched, requests(*[(90 + 13 * i, 5 + i) for i in range(12)]))
    run = drive(sched)
    assert len(run.finished) == 12
    for batch in run.batches:
        assert batch.prefill_tokens + batch.decode_tokens <= 128
        assert sum(batch.new_tokens) == batch.prefill_tokens + batch.decode_tokens


def test_sarathi_mixes_several_prefills_in_one_budget():
    sched = make("sarathi", chunk_size=100)
    enqueue(sched, requests((30, 2), (30, 2), (90, 2)))
    assert batch_entries(sched.next_batch(0.0)) == [(0, 30), (1, 30), (2, 40)]


def test_sarathi_preempts_under_kv_pressure_and_finishes():
    sched = make("sarathi", total_blocks=20, block_size=4, chunk_size=32)
    reqs = enqueue(sched, requests(*[(12 + 3 * i, 20) for i in range(6)]))
    run = drive(sched)
    assert len(run.finished) == 6
    assert sched.preemptions > 0
    assert all(r.generated == r.output_tokens for r in reqs)
    assert sched.kv.used_blocks == 0


# --------------------------------------------------------------------------- orca


def test_orca_reserves_the_full_length_at_admission():
    sched = make("orca", block_size=4)
    a, b = enqueue(sched, requests((10, 30), (7, 2)))
    sched.next_batch(0.0)
    assert a.blocks == blocks_for_tokens(40, 4) == 10
    assert b.blocks == blocks_for_tokens(9, 4) == 3
    assert sched.kv.used_blocks == 13


def test_orca_admits_only_what_fits_fully_and_never_preempts():
    # 12 blocks of 4: A needs 10 for its whole length; B (2 blocks of prompt, 10 in all) waits
    sched = make("orca", total_blocks=12, block_size=4)
    a, b = enqueue(sched, requests((10, 30), (6, 34)))
    first = sched.next_batch(0.0)
    assert batch_entries(first) == [(0, 10)]
    assert list(sched.waiting) == [b]
    sched.complete(first, 1.0, lambda r: None)
    run = drive(sched, start=1.0)
    assert [r.request_id for r in run.finished] == [0, 1]
    assert sched.preemptions == 0 and a.preemptions == 0 and b.preemptions == 0
    # B only starts once A has finished and released its reservation
    assert b.first_scheduled_s >= a.finish_s


def test_orca_admits_beside_running_decodes():
    sched = make("orca", max_batched_tokens=100)
    enqueue(sched, requests((20, 10)))
    sched.complete(sched.next_batch(0.0), 1.0, lambda r: None)
    enqueue(sched, requests((50, 5), (60, 5), start_id=1))
    batch = sched.next_batch(1.0)
    # the decode uses 1 token of the budget; 50 fits the remaining 99, 60 does not fit 49
    assert batch_entries(batch) == [(0, 1), (1, 50)]


# --------------------------------------------------------------------------- static


def test_static_no_admission_while_a_batch_runs():
    sched = make("static", max_batch_size=4)
    a, b = enqueue(sched, requests((20, 3), (20, 6)))
    first = sched.next_batch(0.0)
    assert batch_entries(first) == [(0, 20), (1, 20)]
    sched.complete(first, 1.0, lambda r: None)
    (c,) = enqueue(sched, requests((5, 2), start_id=2))
    seen: list[list[tuple[int, int]]] = []
    now = 1.0
    while a.status != Status.FINISHED or b.status != Status.FINISHED:
        batch = sched.next_batch(now)
        seen.append(batch_entries(batch))
        now += 1.0
        sched.complete(batch, now, lambda r: None)
        assert c.status == Status.WAITING
    # a leaves after its 3rd token; b decodes alone to its 6th, c waits for the whole batch
    assert seen == [[(0, 1), (1, 1)], [(0, 1), (1, 1)], [(1, 1)], [(1, 1)], [(1, 1)]]
    assert batch_entries(sched.next_batch(now)) == [(2, 5)]
    assert c.first_scheduled_s == b.finish_s


def test_static_batch_respects_limits_and_reserves_full_length():
    sched = make("static", max_batch_size=2, block_size=8)
    enqueue(sched, requests((10, 6), (10, 6), (10, 6)))
    batch = sched.next_batch(0.0)
    assert len(batch) == 2
    assert sched.kv.used_blocks == 2 * blocks_for_tokens(16, 8)
    sched2 = make("static", max_batched_tokens=25)
    enqueue(sched2, requests((10, 6), (10, 6), (10, 6)))
    assert len(sched2.next_batch(0.0)) == 2


def test_sarathi_does_not_thrash_on_prompts_that_cannot_fit():
    # 8 requests of 300 + 400 tokens share 100 blocks of 16 (about two finish-sized requests).
    # A prompt that cannot fit next to the running decodes must not be started and preempted
    # over and over (each restart throws its chunks away); prefill_first on the same load preempts 8 times.
    results = {}
    for kind in ("prefill_first", "sarathi"):
        sched = make(kind, total_blocks=100, block_size=16, watermark=1, max_batched_tokens=64)
        reqs = enqueue(sched, requests(*[(300, 400)] * 8))
        run = drive(sched)
        assert len(run.finished) == 8
        results[kind] = (sched.preemptions, max(r.preemptions for r in reqs))
    assert results["prefill_first"][0] <= 16
    preemptions, worst = results["sarathi"]
    assert preemptions <= 16, results
    assert worst <= 3, results
