"""Prefix caching: reusing the KV cache of prompt prefixes that earlier requests computed.

Serving engines keep the KV blocks of finished requests instead of discarding them (vLLM's
automatic prefix caching, SGLang's radix cache, TensorRT-LLM's KV block reuse). A block is
identified by a hash chained over its content and everything before it, so a new request whose
prompt starts with the same tokens finds those blocks and skips computing them: only the rest of
its prompt is prefilled (attention still reads the cached keys and values). Blocks nobody uses
stay cached, counted as free, until an allocation needs the memory, and are then evicted least
recently used first.

Here a request's prompt is a sequence of *segments* of known content (a replayed trace's prefix
blocks, 512 tokens each in the Mooncake traces; a session's system prompt, messages and answers),
each identified by a key chained over the segments before it
(:class:`cbsim.workload.prefix_segments.PrefixInterner`). The cache
is a radix tree, as SGLang's is: a :class:`Node` holds a run of consecutive segments (the KV blocks
of each, those of ``block_size`` tokens whose last token lies in it) that every request using one
of them uses all of, so one reference count and one place in the least-recently-used order serve
the whole run; a node splits where a request's prompt leaves it or stops using it. A request
releases its nodes deepest first, so a node's children always come before it in that order and
the least recently used node is a leaf. Eviction takes blocks from it, its deepest first (as
vLLM frees a request's blocks in reverse order, and evicts block by block): a segment may keep
its first blocks, reusable up to there, and the request that computes the rest of it again makes
it whole. The tree evicts exactly what one entry per segment would (``tests/test_prefix_tree.py``
holds it to such a model), with work per run of segments rather than per segment.

At admission a request reuses the longest run of its leading segments that are cached (at most
all its prompt blocks but the one holding its last prompt token, whose logits must be computed:
vLLM's rule); entries nobody referenced come back into use. When its prefill completes, the
segments it computed join the cache (a prefix still being prefilled is not yet reusable; where
another request registered some of them meanwhile, it uses those and frees its own copies, as
SGLang's radix cache does). Its own blocks are then shared: they stay cached when it finishes or
is preempted, and a preempted request readmitted later finds its prompt again.

With a CPU tier (``cluster.kv_offload``, as LMCache, vLLM's offloading connector or SGLang's
HiCache) eviction takes whole segments, as those tiers move chunks of tokens, and a segment
evicted from GPU memory is kept in host memory (least recently used ones dropped when it is
full). A request's cached run may continue there after its GPU part: those
blocks are allocated in GPU memory and loaded over PCIe, taking ``blocks · bytes per block /
bandwidth`` (per GPU, all GPUs of a replica loading their shards at once); the step that
prefills the request waits for the load only where it is longer than its compute (the load
overlaps the step layer by layer, LMCache's layer-wise mode and HiCache's behaviour). The
loaded segments join the GPU cache again when the request's prefill completes; their CPU copies
stay.

Accounting (one replica): ``kv.used_blocks`` = the running requests' private blocks + the blocks
of entries with references; ``kv.cached_blocks`` = the blocks of entries without (free for
allocation, evicted when an allocation needs them). A request's ``blocks`` counts every block its
tokens occupy, ``shared_blocks`` those that belong to cache entries.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass

from cbsim.cost.engine_profile import load_engine_profile
from cbsim.memory.kvcache import KVCache
from cbsim.schema.scenario import Scenario
from cbsim.workload.prefix_segments import Node
from cbsim.workload.request import Request

__all__ = ["Hit", "PrefixCache", "prefix_caching_on"]


def prefix_caching_on(scenario: Scenario) -> bool:
    """``cluster.prefix_caching``, or, unset, what the scenario's engine does by default."""
    cluster = scenario.cluster
    if cluster.prefix_caching is not None:
        return cluster.prefix_caching
    return bool(load_engine_profile(cluster.engine).defaults_for(cluster.gpu).prefix_caching)


@dataclass(slots=True, frozen=True)
class Hit:
    """What a request would reuse: its first ``segments`` segments from GPU memory, ``blocks`` of
    its KV blocks, of which ``revived`` blocks belong to entries nobody references now; then
    ``cpu_segments`` more from the CPU tier, ``cpu_blocks`` blocks to load. ``path`` holds the
    nodes of the GPU part, of whose last one it takes the first ``take`` segments."""

    segments: int
    blocks: int
    revived: int
    cpu_segments: int = 0
    cpu_blocks: int = 0
    path: tuple[Node, ...] = ()
    take: int = 0

    def tokens(self, block_size: int) -> int:
        """Prompt tokens reused, from either tier."""
        return (self.blocks + self.cpu_blocks) * block_size


NO_HIT = Hit(0, 0, 0)


def _common_length(run: tuple[int, ...], keys: tuple[int, ...], start: int) -> int:
    """How many leading keys of ``run`` equal ``keys[start:]``. Keys are chained (equal keys mean
    equal prefixes), so the equal ones form a prefix of ``run`` and a binary search finds it."""
    size = min(len(run), len(keys) - start)
    if keys[start : start + size] == run[:size]:
        return size
    low, high = 1, size - 1  # run[0] matched (it is how the node was found); run[size-1] not
    while low < high:
        mid = (low + high + 1) // 2
        if run[mid - 1] == keys[start + mid - 1]:
            low = mid
        else:
            high = mid - 1
    return low


class PrefixCache:
    """The cached segments of one replica (see the module docstring)."""

    def __init__(self, kv: KVCache, cpu_blocks: int = 0, load_s_per_block: float = 0.0) -> None:
        self.kv = kv
        self.root = Node((), [], [0], None, refs=1)
        # unreferenced nodes, least recently used first (a node before its parent)
        self.lru: OrderedDict[Node, None] = OrderedDict()
        self.evicted_blocks = 0
        # the CPU tier: segments evicted from GPU memory, least recently used first
        self.cpu: OrderedDict[int, int] = OrderedDict()  # key -> blocks
        self.cpu_capacity = cpu_blocks
        self.cpu_used = 0
        self.cpu_evicted_blocks = 0
        self.load_s_per_block = load_s_per_block
        kv.evict = self.evict_blocks

    def holds_entries(self) -> bool:
        """Whether any segment is cached in GPU memory."""
        return bool(self.root.children)

    def cached_keys(self) -> set[int]:
        """The keys of the segments cached in GPU memory."""
        keys: set[int] = set()
        stack = [self.root]
        while stack:
            node = stack.pop()
            keys.update(node.keys)
            stack.extend(node.children.values())
        return keys

    def eviction_order(self) -> list[int]:
        """The keys of the unreferenced segments, in the order they would be evicted."""
        return [key for node in self.lru for key in reversed(node.keys)]

    def lookup(self, req: Request) -> Hit:
        """The longest cached run of ``req``'s leading segments, capped so that the block of its
        last prompt token is computed."""
        if req.segments is None or not req.segments.keys:
            return NO_HIT
        segments = req.segments.at_block_size(self.kv.block_size)
        keys = segments.keys
        child = self.root.children.get(keys[0])
        cap = (req.prefill_target - 1) // self.kv.block_size
        if (child is None and not self.cpu) or cap <= 0:
            return NO_HIT
        count = len(keys)
        pos = blocks = revived = take = 0
        whole = True
        path: list[Node] = []
        while child is not None:
            run = child.keys
            size = len(run)
            ends = child.ends
            if blocks + ends[-1] < cap and keys[pos : pos + size] == run:
                take = size  # all of it, and below the cap
            else:
                matched = _common_length(run, keys, pos)
                # the segments that start before the cap (each one's rule, for all at once)
                take = 1 + bisect.bisect_left(ends, cap - blocks, 0, matched - 1)
            got = ends[take - 1]
            path.append(child)
            pos += take
            if not child.refs:
                revived += got
            blocks += got
            if child.blocks[take - 1] < segments.blocks[pos - 1]:
                whole = False  # cached without its last blocks (an answer; partly evicted)
                break
            if take < size or pos >= count or blocks >= cap:
                break
            child = child.children.get(keys[pos])
        if blocks >= cap or not whole or not self.cpu:
            return Hit(pos, min(blocks, cap), revived, 0, 0, tuple(path), take)
        cpu = self.cpu
        cpu_count = loaded = 0
        for key, size in zip(keys[pos:], segments.blocks[pos:], strict=True):
            if blocks + loaded >= cap:
                break
            held = cpu.get(key)
            if held is None:
                break
            cpu_count += 1
            if held < size:
                loaded += held
                break
            loaded += size
        return Hit(pos, blocks, revived, cpu_count, min(loaded, cap - blocks), tuple(path), take)

    def acquire(self, req: Request, hit: Hit) -> None:
        """``req`` uses the entries of ``hit`` (looked up just now)."""
        segments = req.segments
        assert segments is not None
        deepest = None
        if hit.segments:
            *above, last = hit.path
            if hit.take < len(last.keys):
                last = self._split(last, hit.take)
            for node in above:
                self._use(node)
            self._use(last)
            deepest = last
        req.prefix_node = deepest
        req.owned_segments = hit.segments
        req.shared_blocks = hit.blocks
        if hit.cpu_segments:
            cpu = self.cpu
            for key in segments.keys[hit.segments : hit.segments + hit.cpu_segments]:
                cpu.move_to_end(key)  # most recently used
            # loaded into blocks of its own: they join the GPU cache when its prefill completes
            req.load_s = hit.cpu_blocks * self.load_s_per_block

    def _use(self, node: Node) -> None:
        """One more request uses ``node``: if nobody did, its blocks come back into use."""
        if node.refs == 0:
            self.lru.pop(node, None)  # a node just split off holds no place in it
            self.kv.cached_blocks -= node.total
            self.kv.used_blocks += node.total
        node.refs += 1

    def _split(self, node: Node, at: int) -> Node:
        """Split ``node`` after its first ``at`` segments; returns the new node holding them (the
        parent of ``node``, which keeps the rest, its children and its place in the LRU order)."""
        parent = node.parent
        assert parent is not None
        head = Node.of(node.keys[:at], node.blocks[:at], parent, node.refs)
        parent.children[node.keys[0]] = head
        node.keys = node.keys[at:]
        node.blocks = node.blocks[at:]
        offset = node.ends[at - 1]
        node.ends = [end - offset for end in node.ends[at:]]
        node.parent = head
        head.children[node.keys[0]] = node
        return head

    def register(self, req: Request) -> None:
        """``req`` has prefilled its prompt: its segments not cached yet join the cache, their
        blocks now shared, in use by ``req``."""
        if req.segments is None:
            return
        segments = req.segments.at_block_size(self.kv.block_size)
        first = req.owned_segments  # the segments it reused (registering is once per admission)
        node = req.prefix_node if req.prefix_node is not None else self.root
        shared = req.shared_blocks
        keys = segments.keys
        if first and segments.tokens[first - 1] <= req.prompt_tokens:
            # its last reused segment was cached without its last blocks (a turn's answer,
            # whose last block was never in the KV, or a segment partly evicted); this prefill
            # computed them: the entry is whole now
            full = segments.blocks[first - 1]
            if node.blocks[-1] < full:
                shared += full - node.blocks[-1]
                node.ends[-1] += full - node.blocks[-1]
                node.blocks[-1] = full
        last = bisect.bisect_right(segments.tokens, req.prompt_tokens)  # a turn's answer: later
        pos = first
        while pos < last:
            child = node.children.get(keys[pos])
            if child is None:
                child = Node.of(keys[pos:last], list(segments.blocks[pos:last]), node, 1)
                node.children[keys[pos]] = child
                shared += child.total
                node, pos = child, last
                break
            # computed meanwhile by another request (or cached before, and not reused: beyond
            # the cap, or partly evicted): it uses theirs and frees its own copy, as SGLang's
            # radix cache does; a last segment they hold only the first blocks of, it completes
            matched = _common_length(child.keys, keys[:last], pos)
            if matched < len(child.keys):
                child = self._split(child, matched)
            self._use(child)
            self.kv.free(child.total)
            missing = segments.blocks[pos + matched - 1] - child.blocks[-1]
            if missing > 0:
                child.blocks[-1] += missing
                child.ends[-1] += missing
            shared += child.total
            node, pos = child, pos + matched
        req.prefix_node = node if node is not self.root else None
        req.owned_segments = pos
        req.shared_blocks = shared

    def finish(self, req: Request) -> None:
        """``req`` finished holding ``req.blocks`` blocks (in use): a session turn's answer joins
        the cache (unreferenced, so evicted before the prompt it follows), its other private
        blocks are freed and its entries released."""
        kv = self.kv
        segments = req.segments
        kept = 0
        if segments is not None and segments.tokens[-1] > req.prompt_tokens:
            key = segments.keys[-1]
            block_size = kv.block_size
            start = req.prompt_tokens
            # the KV holds every token but the last one sampled
            kept = (start + req.output_tokens - 1) // block_size - start // block_size
            parent = req.prefix_node if req.prefix_node is not None else self.root
            if kept > 0 and req.owned_segments == len(segments.keys) - 1 and (
                key not in parent.children
            ):  # fmt: skip
                answer = Node((key,), [kept], [kept], parent)
                parent.children[key] = answer
                self.lru[answer] = None
                kv.used_blocks -= kept
                kv.cached_blocks += kept
            else:
                kept = 0
        kv.free(req.blocks - kept - req.shared_blocks)
        if req.prefix_node is not None:
            self.release(req)
        req.blocks = 0

    def release(self, req: Request) -> None:
        """``req`` finished or was preempted: its entries lose a reference, and those nobody uses
        any more become evictable, deepest first. Its private blocks are the caller's to free."""
        kv = self.kv
        lru = self.lru
        node = req.prefix_node
        root = self.root
        while node is not None and node is not root:
            node.refs -= 1
            if node.refs == 0:
                kv.used_blocks -= node.total
                kv.cached_blocks += node.total
                lru[node] = None
            node = node.parent
        req.prefix_node = None
        req.owned_segments = 0
        req.shared_blocks = 0

    def evict_blocks(self, blocks: int) -> None:
        """Evict least recently used blocks, the deepest of a node first, until at least
        ``blocks`` blocks are evicted: exactly that many, block by block as vLLM does (a segment
        may keep its first blocks, reusable up to there), or, with a CPU tier, whole segments,
        which go to that tier."""
        lru = self.lru
        by_segment = bool(self.cpu_capacity)
        evicted = 0
        while evicted < blocks:
            node = next(iter(lru))  # a leaf: its children, unreferenced, went before it
            ends = node.ends
            rest = ends[-1] - (blocks - evicted)  # what stays of it, if anything
            if not by_segment and rest > (ends[-2] if len(ends) > 1 else 0):
                node.blocks[-1] -= ends[-1] - rest  # only its last segment's last blocks go
                ends[-1] = rest
                evicted = blocks
                break
            if rest < 0 or (rest == 0 and ends[0]):
                keep = part = kept = 0  # all of it goes
            else:
                keep = bisect.bisect_right(ends, rest)
                kept = ends[keep - 1] if keep else 0
                part = 0 if by_segment or keep == len(ends) else rest - kept
            evicted += ends[-1] - kept - part
            if by_segment:
                for j in range(len(node.keys) - 1, keep - 1, -1):
                    self._offload(node.keys[j], node.blocks[j])
            if part:  # segment ``keep`` keeps its first ``part`` blocks
                node.keys = node.keys[: keep + 1]
                del node.blocks[keep + 1 :]
                del ends[keep + 1 :]
                node.blocks[keep] = part
                ends[keep] = kept + part
            elif keep:
                node.keys = node.keys[:keep]
                del node.blocks[keep:]
                del ends[keep:]
            else:
                del lru[node]
                parent = node.parent
                assert parent is not None
                del parent.children[node.keys[0]]
        self.kv.cached_blocks -= evicted
        self.evicted_blocks += evicted

    def _offload(self, key: int, blocks: int) -> None:
        """A segment evicted from GPU memory goes to the CPU tier (its least recently used
        entries evicted for it), unless larger than the whole tier."""
        cpu = self.cpu
        if key in cpu:
            cpu.move_to_end(key)
            return
        if blocks > self.cpu_capacity:
            return
        while self.cpu_used + blocks > self.cpu_capacity:
            dropped = cpu.popitem(last=False)[1]
            self.cpu_used -= dropped
            self.cpu_evicted_blocks += dropped
        cpu[key] = blocks
        self.cpu_used += blocks

    def fit(self, peak_used: int) -> None:
        """Evict what allocations reaching ``peak_used`` blocks in use needed (in a run of
        iterations computed without the cache, which only ever allocate what is free, and
        release nothing before they end)."""
        excess = peak_used + self.kv.cached_blocks - self.kv.total_blocks
        if excess > 0:
            self.evict_blocks(excess)
