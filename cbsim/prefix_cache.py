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
each identified by a key chained over the segments before it (:class:`PrefixInterner`). The cache
holds one entry per segment: the KV blocks of the segment (the blocks of ``block_size`` tokens
whose last token lies in it), a reference count (the running requests using it) and, when
nothing references it, its place in the least-recently-used order. Eviction takes whole entries
from the front of that order; a request releases its entries deepest first, so a prefix is
evicted from its end, as vLLM frees a request's blocks in reverse order.

At admission a request reuses the longest run of its leading segments that are cached (at most
all its prompt blocks but the one holding its last prompt token, whose logits must be computed:
vLLM's rule); entries nobody referenced come back into use. When its prefill completes, the
segments it computed join the cache (a prefix still being prefilled is not yet reusable). Its own
blocks are then shared: they stay cached when it finishes or is preempted, and a preempted
request readmitted later finds its prompt again.

With a CPU tier (``cluster.kv_offload``, as LMCache, vLLM's offloading connector or SGLang's
HiCache) an entry evicted from GPU memory is kept in host memory (least recently used entries
dropped when it is full). A request's cached run may continue there after its GPU part: those
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
import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from cbsim.cost.engine_profile import load_engine_profile
from cbsim.kvcache import KVCache
from cbsim.request import Request
from cbsim.scenario import Scenario

__all__ = [
    "CacheEntry",
    "Hit",
    "PrefixCache",
    "PrefixInterner",
    "Segments",
    "prefix_caching_on",
]


def prefix_caching_on(scenario: Scenario) -> bool:
    """``cluster.prefix_caching``, or, unset, what the scenario's engine does by default."""
    cluster = scenario.cluster
    if cluster.prefix_caching is not None:
        return cluster.prefix_caching
    return bool(load_engine_profile(cluster.engine).defaults_for(cluster.gpu).prefix_caching)


@dataclass(slots=True, frozen=True)
class Segments:
    """A prompt's content as segments: ``keys[s]`` identifies segment s and everything before it,
    ``blocks[s]`` is how many KV blocks end inside it, ``tokens[s]`` the tokens up to its end."""

    keys: tuple[int, ...]
    blocks: tuple[int, ...]
    tokens: tuple[int, ...]


@dataclass(slots=True)
class PrefixInterner:
    """Chained segment keys: the key of a segment is a small integer standing for (the key of the
    segment before it, its own content id, and its length when the prompt cuts it short), so equal
    keys mean equal prefixes, exactly (no hash collisions). One interner per simulation, shared by
    every replica."""

    _keys: dict[tuple[int, ...], int] = field(default_factory=dict)

    def segments(self, content: list[int] | tuple[int, ...], sizes: list[int], prompt_tokens: int,
                 block_size: int) -> Segments:  # fmt: skip
        """The segments of a prompt made of ``content[s]`` ids of ``sizes[s]`` tokens each, cut at
        ``prompt_tokens``: the prompt's own ids, or (a session's turn) with its answer as one more
        segment beyond the prompt, cut at the prompt and that answer's end."""
        ends = list(itertools.accumulate(sizes))
        count = bisect.bisect_left(ends, prompt_tokens) + 1  # segments that start in the prompt
        if count > len(ends):
            count = len(ends)
        ends = ends[:count]
        if ends[-1] > prompt_tokens:
            ends[-1] = prompt_tokens
        length = ends[-1] - (ends[-2] if count > 1 else 0)
        keys = self._chain(content, count, length if length < sizes[count - 1] else None)
        starts = [0, *ends[:-1]]
        blocks = [
            end // block_size - begin // block_size for begin, end in zip(starts, ends, strict=True)
        ]
        return Segments(tuple(keys), tuple(blocks), tuple(ends))

    def _chain(self, content: Sequence[int], count: int, cut: int | None) -> list[int]:
        """The keys of the first ``count`` segments of ``content``: each stands for (the key
        before it, its content id), the last also for its length ``cut`` when the prompt cuts it
        short (only its first tokens are that content)."""
        table = self._keys
        get = table.get
        keys: list[int] = []
        parent = -1
        for index, content_id in enumerate(content[:count]):
            ident: tuple[int, ...] = (parent, content_id)
            if cut is not None and index == count - 1:
                ident = (parent, content_id, cut)
            key = get(ident)
            if key is None:
                key = table[ident] = len(table)
            keys.append(key)
            parent = key
        return keys

    def uniform_segments(self, content: tuple[int, ...], size: int, prompt_tokens: int,
                         block_size: int) -> Segments:  # fmt: skip
        """:meth:`segments` of ids that all stand for ``size`` tokens (a replayed trace's prefix
        blocks), computed without summing sizes."""
        count = min(len(content), -(-prompt_tokens // size))
        end = min(count * size, prompt_tokens)
        start = (count - 1) * size
        keys = self._chain(content, count, end - start if end - start < size else None)
        ends = (*range(size, start + 1, size), end)
        if size % block_size == 0:
            blocks = (size // block_size,) * (count - 1) + (
                end // block_size - start // block_size,
            )
        else:
            blocks = tuple(
                b // block_size - a // block_size
                for a, b in zip((0, *ends[:-1]), ends, strict=True)
            )
        return Segments(tuple(keys), blocks, ends)


@dataclass(slots=True)
class CacheEntry:
    """One cached segment's KV blocks and how many running requests use them."""

    blocks: int
    refs: int = 0


@dataclass(slots=True, frozen=True)
class Hit:
    """What a request would reuse: its first ``segments`` segments from GPU memory, ``blocks`` of
    its KV blocks, of which ``revived`` blocks belong to entries nobody references now; then
    ``cpu_segments`` more from the CPU tier, ``cpu_blocks`` blocks to load."""

    segments: int
    blocks: int
    revived: int
    cpu_segments: int = 0
    cpu_blocks: int = 0

    def tokens(self, block_size: int) -> int:
        """Prompt tokens reused, from either tier."""
        return (self.blocks + self.cpu_blocks) * block_size


NO_HIT = Hit(0, 0, 0)


class PrefixCache:
    """The cached segments of one replica (see the module docstring)."""

    def __init__(self, kv: KVCache, cpu_blocks: int = 0, load_s_per_block: float = 0.0) -> None:
        self.kv = kv
        self.entries: dict[int, CacheEntry] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()  # unreferenced, least recently used first
        self.evicted_blocks = 0
        # the CPU tier: segments evicted from GPU memory, least recently used first
        self.cpu: OrderedDict[int, int] = OrderedDict()  # key -> blocks
        self.cpu_capacity = cpu_blocks
        self.cpu_used = 0
        self.cpu_evicted_blocks = 0
        self.load_s_per_block = load_s_per_block
        kv.evict = self.evict

    def lookup(self, req: Request) -> Hit:
        """The longest cached run of ``req``'s leading segments, capped so that the block of its
        last prompt token is computed."""
        segments = req.segments
        if segments is None or not (self.entries or self.cpu):
            return NO_HIT
        block_size = self.kv.block_size
        cap = (req.prefill_target - 1) // block_size
        entries = self.entries
        count = blocks = revived = 0
        whole = True
        for key, size in zip(segments.keys, segments.blocks, strict=True):
            if blocks >= cap:
                break
            entry = entries.get(key)
            if entry is None:
                break
            count += 1
            if entry.refs == 0:
                revived += entry.blocks
            if entry.blocks < size:  # an answer cached without its last, unfinished block
                blocks += entry.blocks
                whole = False
                break
            blocks += size
        if blocks >= cap or not whole or not self.cpu:
            return Hit(count, min(blocks, cap), revived)
        cpu = self.cpu
        cpu_count = loaded = 0
        for key, size in zip(segments.keys[count:], segments.blocks[count:], strict=True):
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
        return Hit(count, blocks, revived, cpu_count, min(loaded, cap - blocks))

    def acquire(self, req: Request, hit: Hit) -> None:
        """``req`` uses the entries of ``hit`` (looked up just now)."""
        segments = req.segments
        assert segments is not None
        kv = self.kv
        for key in segments.keys[: hit.segments]:
            entry = self.entries[key]
            if entry.refs == 0:
                del self.lru[key]
                kv.cached_blocks -= entry.blocks
                kv.used_blocks += entry.blocks
            entry.refs += 1
        req.owned_keys = segments.keys[: hit.segments]
        req.shared_blocks = hit.blocks
        if hit.cpu_segments:
            cpu = self.cpu
            for key in segments.keys[hit.segments : hit.segments + hit.cpu_segments]:
                cpu.move_to_end(key)  # most recently used
            # loaded into blocks of its own: they join the GPU cache when its prefill completes
            req.load_s = hit.cpu_blocks * self.load_s_per_block

    def register(self, req: Request) -> None:
        """``req`` has prefilled its prompt: its segments not cached yet join the cache, their
        blocks now shared, in use by ``req``."""
        segments = req.segments
        if segments is None:
            return
        entries = self.entries
        first = len(req.owned_keys)  # the segments it reused (registering is once per admission)
        owned = list(req.owned_keys)
        shared = req.shared_blocks
        prompt = req.prompt_tokens
        if first and segments.tokens[first - 1] <= prompt:
            # a reused answer was cached without its last block (never in the KV of the turn
            # that wrote it); this prefill computed that block: the entry is whole now
            last = entries[segments.keys[first - 1]]
            if last.blocks < segments.blocks[first - 1]:
                shared += segments.blocks[first - 1] - last.blocks
                last.blocks = segments.blocks[first - 1]
        for s in range(first, len(segments.keys)):
            if segments.tokens[s] > prompt:
                break  # a session turn's answer: cached when it finishes
            key, size = segments.keys[s], segments.blocks[s]
            if key in entries:
                continue  # computed meanwhile by another request: ours stays a private copy
            entries[key] = CacheEntry(size, 1)
            owned.append(key)
            shared += size
        req.owned_keys = tuple(owned)
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
            if kept > 0 and key not in self.entries:
                self.entries[key] = CacheEntry(kept, 0)
                self.lru[key] = None
                kv.used_blocks -= kept
                kv.cached_blocks += kept
            else:
                kept = 0
        kv.free(req.blocks - kept - req.shared_blocks)
        if req.owned_keys:
            self.release(req)
        req.blocks = 0

    def release(self, req: Request) -> None:
        """``req`` finished or was preempted: its entries lose a reference, and those nobody uses
        any more become evictable, deepest first. Its private blocks are the caller's to free."""
        keys = req.owned_keys
        kv = self.kv
        entries = self.entries
        lru = self.lru
        for key in reversed(keys):
            entry = entries[key]
            entry.refs -= 1
            if entry.refs == 0:
                kv.used_blocks -= entry.blocks
                kv.cached_blocks += entry.blocks
                lru[key] = None
        req.owned_keys = ()
        req.shared_blocks = 0

    def evict(self, blocks: int) -> None:
        """Evict least recently used entries until ``blocks`` more blocks are physically free."""
        kv = self.kv
        while kv.total_blocks - kv.used_blocks - kv.cached_blocks < blocks:
            self._evict_oldest()

    def _evict_oldest(self) -> int:
        """Evict the least recently used entry (to the CPU tier, if any); returns its blocks."""
        key = self.lru.popitem(last=False)[0]
        blocks = self.entries.pop(key).blocks
        self.kv.cached_blocks -= blocks
        self.evicted_blocks += blocks
        if self.cpu_capacity:
            self._offload(key, blocks)
        return blocks

    def _offload(self, key: int, blocks: int) -> None:
        """An entry evicted from GPU memory goes to the CPU tier (its least recently used
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

    def evict_blocks(self, blocks: int) -> None:
        """Evict least recently used entries until at least ``blocks`` blocks are evicted."""
        while blocks > 0:
            blocks -= self._evict_oldest()

    def fit(self, peak_used: int) -> None:
        """Evict what allocations reaching ``peak_used`` blocks in use needed (in a run of
        iterations computed without the cache, which only ever allocate what is free, and
        release nothing before they end)."""
        self.evict_blocks(peak_used + self.kv.cached_blocks - self.kv.total_blocks)
