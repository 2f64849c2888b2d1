"""The prefix cache's radix tree against a per-segment model of the same rules.

:class:`SegmentCache` keeps one entry per segment (its blocks, its reference count, its place in
a least-recently-used order; a request's entries released deepest first, eviction taking blocks
from the front of that order, or whole segments, offloaded, with a CPU tier): the
simplest statement of what :class:`cbsim.memory.prefix_cache.PrefixCache` does with runs of segments.
Random admissions, prefills, finishes (with session answers), preemptions and memory pressure
drive both, and after every step they agree on every hit, every block count, the eviction order
and both tiers' contents. Also: chained trace ids keyed directly give the same keys' structure as
chaining them."""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import cast

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cbsim.memory.kvcache import KVCache
from cbsim.memory.prefix_cache import PrefixCache
from cbsim.workload.prefix_segments import PrefixInterner, ids_are_chained
from cbsim.workload.request import Request

BLOCK = 16


@dataclass
class _Owned:
    keys: list[int] = field(default_factory=list)
    shared: int = 0
    load: int = 0


class SegmentCache:
    """One entry per segment (see the module docstring); per-request state kept here."""

    def __init__(self, kv: KVCache, cpu_blocks: int) -> None:
        self.kv = kv
        self.blocks: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.cpu: OrderedDict[int, int] = OrderedDict()
        self.cpu_capacity = cpu_blocks
        self.cpu_used = 0
        self.evicted = 0
        self.owned: dict[int, _Owned] = {}
        kv.evict = self.evict

    def lookup(self, req: Request) -> tuple[int, int, int, int, int]:
        seg = req.segments
        assert seg is not None
        cap = (req.prefill_target - 1) // BLOCK
        count = blocks = revived = 0
        whole = True
        for key, size in zip(seg.keys, seg.blocks, strict=True):
            if blocks >= cap or key not in self.blocks:
                break
            count += 1
            if self.refs[key] == 0:
                revived += self.blocks[key]
            if self.blocks[key] < size:
                blocks += self.blocks[key]
                whole = False
                break
            blocks += size
        if blocks >= cap or not whole:
            return count, min(blocks, cap), revived, 0, 0
        cpu_count = loaded = 0
        for key, size in zip(seg.keys[count:], seg.blocks[count:], strict=True):
            if blocks + loaded >= cap or key not in self.cpu:
                break
            cpu_count += 1
            if self.cpu[key] < size:
                loaded += self.cpu[key]
                break
            loaded += size
        return count, blocks, revived, cpu_count, min(loaded, cap - blocks)

    def _use(self, key: int) -> None:
        if self.refs[key] == 0:
            del self.lru[key]
            self.kv.cached_blocks -= self.blocks[key]
            self.kv.used_blocks += self.blocks[key]
        self.refs[key] += 1

    def acquire(self, req: Request, hit: tuple[int, int, int, int, int]) -> None:
        seg = req.segments
        assert seg is not None
        count, blocks, _, cpu_count, _ = hit
        for key in seg.keys[:count]:
            self._use(key)
        for key in seg.keys[count : count + cpu_count]:
            self.cpu.move_to_end(key)
        self.owned[req.request_id] = _Owned(list(seg.keys[:count]), blocks)

    def register(self, req: Request) -> None:
        seg = req.segments
        assert seg is not None
        own = self.owned.setdefault(req.request_id, _Owned())
        first = len(own.keys)
        if first and seg.tokens[first - 1] <= req.prompt_tokens:
            key, full = seg.keys[first - 1], seg.blocks[first - 1]
            if self.blocks[key] < full:
                own.shared += full - self.blocks[key]
                self.blocks[key] = full
        for s in range(first, bisect.bisect_right(seg.tokens, req.prompt_tokens)):
            key, size = seg.keys[s], seg.blocks[s]
            if key in self.blocks:  # computed meanwhile: use theirs, free our copy
                self._use(key)
                self.kv.free(self.blocks[key])
                self.blocks[key] = size  # completed, where they held only its first blocks
            else:
                self.blocks[key], self.refs[key] = size, 1
            own.keys.append(key)
            own.shared += size

    def finish(self, req: Request) -> None:
        seg = req.segments
        assert seg is not None
        own = self.owned.get(req.request_id, _Owned())
        kept = 0
        if seg.tokens[-1] > req.prompt_tokens:
            start = req.prompt_tokens
            kept = (start + req.output_tokens - 1) // BLOCK - start // BLOCK
            key = seg.keys[-1]
            if kept > 0 and len(own.keys) == len(seg.keys) - 1 and key not in self.blocks:
                self.blocks[key], self.refs[key] = kept, 0
                self.lru[key] = None
                self.kv.used_blocks -= kept
                self.kv.cached_blocks += kept
            else:
                kept = 0
        self.kv.free(req.blocks - kept - own.shared)
        self.release(req)

    def release(self, req: Request) -> None:
        own = self.owned.pop(req.request_id, _Owned())
        for key in reversed(own.keys):
            self.refs[key] -= 1
            if self.refs[key] == 0:
                self.kv.used_blocks -= self.blocks[key]
                self.kv.cached_blocks += self.blocks[key]
                self.lru[key] = None

    def shared(self, req: Request) -> int:
        return self.owned[req.request_id].shared if req.request_id in self.owned else 0

    def evict(self, need: int) -> None:
        kv = self.kv
        while need > 0:
            key = next(iter(self.lru))
            size = self.blocks[key]
            if not self.cpu_capacity and size > need:  # block by block: it keeps its first ones
                self.blocks[key] = size - need
                kv.cached_blocks -= need
                self.evicted += need
                return
            del self.lru[key], self.blocks[key], self.refs[key]
            kv.cached_blocks -= size
            self.evicted += size
            need -= size
            if self.cpu_capacity and size <= self.cpu_capacity:
                if key in self.cpu:
                    self.cpu.move_to_end(key)
                    continue
                while self.cpu_used + size > self.cpu_capacity:
                    self.cpu_used -= self.cpu.popitem(last=False)[1]
                self.cpu[key] = size
                self.cpu_used += size


# a prompt: segment content ids from a small alphabet (so prompts share prefixes; an id's content
# has its own length), how many tokens of them the prompt holds, and an answer length (a session
# turn's answer is one more segment when ``answer`` is set; ``follow`` continues an earlier
# finished turn's conversation, answer included, as a session's next turn does)
SIZES = (8, 16, 40, 64)
_Prompt = tuple[list[int], int, int, bool, int | None]
_prompt = st.tuples(
    st.lists(st.integers(0, 3), min_size=1, max_size=6),
    st.integers(1, 400),
    st.sampled_from([3, 8, 16, 24, 40]),  # answers ending on a block boundary among them
    st.booleans(),
    st.one_of(st.none(), st.integers(0, 20)),
)
_step = st.one_of(
    st.tuples(st.just("admit"), _prompt),
    st.tuples(st.just("prefill"), st.integers(0, 50)),
    st.tuples(st.just("finish"), st.integers(0, 50)),
    st.tuples(st.just("preempt"), st.integers(0, 50)),
    st.tuples(st.just("squeeze"), st.integers(0, 12)),
)


# paths random steps reach rarely: a turn's answer cached without its last block, then reused
# (and made whole) by the next turn; a prefix computed meanwhile by another request; a CPU hit
_ANSWER_REUSED = [("admit", ([0], 8, 24, True, None)), ("prefill", 0), ("finish", 0),
                  ("admit", ([0], 8, 8, False, 0)), ("prefill", 0), ("finish", 0)]  # fmt: skip
_COMPUTED_MEANWHILE = [("admit", ([1, 2, 3], 400, 8, False, None)),
                       ("admit", ([1, 2, 0, 0], 400, 8, False, None)), ("prefill", 0),
                       ("prefill", 0), ("finish", 1), ("finish", 0)]  # fmt: skip
_FROM_CPU = [("admit", ([3, 2], 400, 8, False, None)), ("prefill", 0), ("finish", 0),
             ("squeeze", 0), ("squeeze", 0), ("admit", ([3, 2, 1], 400, 8, False, None)),
             ("prefill", 0)]  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(steps=_ANSWER_REUSED, total=40, cpu=0)
@example(steps=_COMPUTED_MEANWHILE, total=60, cpu=0)
@example(steps=_FROM_CPU, total=40, cpu=12)
@given(
    steps=st.lists(_step, min_size=20, max_size=80),
    total=st.integers(20, 90),
    cpu=st.sampled_from([0, 12]),
)
def test_the_tree_behaves_as_one_entry_per_segment(
    steps: list[tuple[str, object]], total: int, cpu: int
) -> None:
    tree_kv, flat_kv = KVCache(total, BLOCK), KVCache(total, BLOCK)
    tree, flat = PrefixCache(tree_kv, cpu), SegmentCache(flat_kv, cpu)
    interner = PrefixInterner()
    admitted: list[tuple[Request, Request]] = []  # (tree's, flat's), admitted, not prefilled
    running: list[tuple[Request, Request]] = []
    squeezed = 0
    content_of: dict[int, tuple[list[int], list[int]]] = {}
    conversations: list[tuple[list[int], list[int]]] = []  # finished turns
    for index, (kind, arg) in enumerate(steps):
        if kind == "admit":
            ids, prompt, output, answer, follow = cast(_Prompt, arg)
            content, lengths = list(ids), [SIZES[i] for i in ids]
            if follow is not None and conversations:
                before = conversations[follow % len(conversations)]
                content, lengths = [*before[0], *content], [*before[1], *lengths]
                answer = True
            prompt = min(prompt, sum(lengths))
            if answer:
                # a session turn: the prompt is its whole content, the answer one more segment
                prompt = sum(lengths)
                content, lengths = [*content, 100 + index], [*lengths, output]
            pair = (Request(index, 0.0, prompt, output), Request(index, 0.0, prompt, output))
            for req in pair:
                req.segments = interner.segments(content, lengths, prompt + output * answer, BLOCK)
            content_of[index] = (content, lengths)
            hit = tree.lookup(pair[0])
            expected = flat.lookup(pair[1])
            assert (hit.segments, hit.blocks, hit.revived, hit.cpu_segments, hit.cpu_blocks) == (
                expected
            )
            need = -(-prompt // BLOCK)
            if not tree_kv.can_allocate(need - hit.blocks + hit.revived):
                continue
            tree.acquire(pair[0], hit)
            flat.acquire(pair[1], expected)
            for req, kv in zip(pair, (tree_kv, flat_kv), strict=True):
                kv.allocate(need - hit.blocks)
                req.blocks = need
            admitted.append(pair)
        elif kind == "prefill" and admitted:
            pair = admitted.pop(int(arg) % len(admitted))  # type: ignore[call-overload]
            tree.register(pair[0])
            flat.register(pair[1])
            running.append(pair)
        elif kind in ("finish", "preempt") and running:
            pair = running.pop(int(arg) % len(running))  # type: ignore[call-overload]
            tree_req, flat_req = pair
            if kind == "finish":
                # the KV grew to hold the answer (all but its last token) before it finished
                grow = -(-(tree_req.prompt_tokens + tree_req.output_tokens - 1) // BLOCK)
                grow -= tree_req.blocks
                if grow > 0 and not tree_kv.can_allocate(grow):
                    running.append(pair)
                    continue
                for req, kv in zip(pair, (tree_kv, flat_kv), strict=True):
                    if grow > 0:
                        kv.allocate(grow)
                        req.blocks += grow
                tree.finish(tree_req)
                flat.finish(flat_req)
                if content_of[tree_req.request_id][0][-1] >= 100:  # a turn: its answer follows
                    conversations.append(content_of[tree_req.request_id])
            else:
                tree_kv.free(tree_req.blocks - tree_req.shared_blocks)
                tree.release(tree_req)
                flat_kv.free(flat_req.blocks - flat.shared(flat_req))
                flat.release(flat_req)
        elif kind == "squeeze":
            # memory pressure: take all but ``arg`` free blocks (evicting cached ones), or give
            # back what was taken
            blocks = max(0, tree_kv.free_blocks - int(arg))  # type: ignore[call-overload]
            if squeezed:
                blocks = -squeezed
            for kv in (tree_kv, flat_kv):
                kv.allocate(blocks) if blocks > 0 else kv.free(-blocks)
            squeezed += blocks
        assert (tree_kv.used_blocks, tree_kv.cached_blocks) == (
            flat_kv.used_blocks,
            flat_kv.cached_blocks,
        )
        assert tree.eviction_order() == list(flat.lru)
        assert tree.cached_keys() == set(flat.blocks)
        assert list(tree.cpu.items()) == list(flat.cpu.items())
        assert tree.evicted_blocks == flat.evicted
        for tree_req, flat_req in running:
            assert tree_req.shared_blocks == flat.shared(flat_req)


def test_chained_trace_ids_key_the_same_prefixes_as_chaining_them() -> None:
    prompts = [(1, 2, 3, 4), (1, 2, 5), (1, 2, 3, 4, 6), (7, 8), (1, 2, 3)]
    assert ids_are_chained(prompts)
    chained, general = PrefixInterner(chained_ids=True), PrefixInterner()
    cuts = [(p, tokens) for p in prompts for tokens in (len(p) * 512, len(p) * 512 - 100, 700)]
    ours = [chained.uniform_segments(p, 512, t, BLOCK) for p, t in cuts]
    theirs = [general.uniform_segments(p, 512, t, BLOCK) for p, t in cuts]
    for a, b in zip(ours, theirs, strict=True):
        assert (a.blocks, a.tokens) == (b.blocks, b.tokens)
    # two segments have equal keys under one keying exactly when they do under the other
    pairs = {
        (x, y)
        for a, b in zip(ours, theirs, strict=True)
        for x, y in zip(a.keys, b.keys, strict=True)
    }
    assert len({x for x, _ in pairs}) == len({y for _, y in pairs}) == len(pairs)
    assert not ids_are_chained([(1, 2), (3, 2)])  # id 2 after two different ids
    assert not ids_are_chained([(2, 1), (1,)])  # id 1 first and after 2
    assert not ids_are_chained([(-1, 2)])  # negative ids are left to chaining
