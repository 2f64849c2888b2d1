"""The paged KV cache of one replica.

Attention keys and values of every token a request has processed stay in GPU memory so that later
tokens can attend to them. Paged attention (vLLM) stores them in fixed-size blocks of
``block_size`` tokens, allocated as a request grows and freed when it finishes or is preempted. How
many blocks there are is what the serving engine leaves for them (:mod:`cbsim.cost.engine_memory`:
GPU memory less weights, the profiling run's activations and what the engine keeps beside; per
tensor-parallel shard, each GPU holding 1/tp of the weights and of the KV heads: the bytes each
GPU keeps per token and per weight are :mod:`cbsim.catalog.model_bytes`). This module holds the block
accounting.

A small ``watermark`` of blocks is kept free when admitting new requests so that running ones can
still grow; when a running request cannot grow anyway, the scheduler preempts another (recompute).
The allocator only counts blocks: which physical block holds which token does not affect timing.
With prefix caching (:mod:`cbsim.memory.prefix_cache`) blocks nothing uses may stay cached: they count
as free and are evicted when an allocation needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class MemoryLayout(Protocol):
    """What a cache is built from: an engine's memory plan (:class:`cbsim.cost.engine_memory.MemoryPlan`)."""

    @property
    def blocks(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def dp(self) -> int: ...


def blocks_for_tokens(tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``tokens`` tokens (ceiling division)."""
    return -(-tokens // block_size)


@dataclass(slots=True)
class KVCache:
    """Block accounting for one replica (all its TP shards move in lockstep)."""

    total_blocks: int
    block_size: int
    watermark_blocks: int = 0
    used_blocks: int = 0
    # prefix caching: blocks cached for reuse that nothing uses (free, evicted when an allocation
    # needs them) and the cache's eviction of at least so many (PrefixCache.evict_blocks)
    cached_blocks: int = 0
    evict: Callable[[int], None] | None = None

    @classmethod
    def from_plan(cls, plan: MemoryLayout, watermark: float) -> KVCache:
        """The cache of one replica laid out by its engine (:mod:`cbsim.cost.engine_memory`): every
        attention rank's blocks (with ``dp`` ranks each keeps its own requests' KV, pooled here
        as balanced ranks), ``watermark`` of them kept free at admission."""
        total = plan.dp * plan.blocks
        return cls(
            total_blocks=total, block_size=plan.block_size, watermark_blocks=int(watermark * total)
        )

    @property
    def free_blocks(self) -> int:
        return self.total_blocks - self.used_blocks

    @property
    def utilization(self) -> float:
        return self.used_blocks / self.total_blocks if self.total_blocks else 0.0

    @property
    def capacity_tokens(self) -> int:
        return self.total_blocks * self.block_size

    def can_allocate(self, blocks: int, *, keep_watermark: bool = False) -> bool:
        reserve = self.watermark_blocks if keep_watermark else 0
        return self.free_blocks - blocks >= reserve

    def allocate(self, blocks: int) -> None:
        if blocks > self.free_blocks:
            raise RuntimeError(f"KV cache overflow: {blocks} blocks asked, {self.free_blocks} free")
        if self.cached_blocks:
            short = blocks - (self.total_blocks - self.used_blocks - self.cached_blocks)
            if short > 0:
                assert self.evict is not None
                self.evict(short)
        self.used_blocks += blocks

    def free(self, blocks: int) -> None:
        if blocks > self.used_blocks:
            raise RuntimeError(f"KV cache underflow: freeing {blocks} of {self.used_blocks}")
        self.used_blocks -= blocks

    def check(self, where: str) -> None:
        """Raise an internal error naming ``where`` when the counts left what blocks exist (a
        count set wholesale, after a decode run, is checked here rather than at a later free)."""
        used, cached = self.used_blocks, self.cached_blocks
        if not 0 <= used <= self.total_blocks or not 0 <= cached <= self.total_blocks - used:
            raise RuntimeError(
                f"internal error: KV cache of {self.total_blocks} blocks left with {used} in "
                f"use and {cached} cached after {where}"
            )
