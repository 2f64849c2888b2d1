"""A prompt's content as the prefix cache sees it: the prompt as *segments* of known content,
and the radix-tree *nodes* that cache runs of them (:mod:`cbsim.prefix_cache` describes the
cache). A request (:mod:`cbsim.request`) carries its segments and the deepest node of its path in
the tree; the cache works on both.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Node", "Segments", "blocks_ending_in"]


@dataclass(slots=True, frozen=True)
class Segments:
    """A prompt's content as segments: ``keys[s]`` identifies segment s and everything before it,
    ``blocks[s]`` is how many KV blocks of ``block_size`` tokens end inside it, ``tokens[s]`` the
    tokens up to its end. A replica whose blocks differ in size (a mixed fleet's pools) counts
    them with :meth:`at_block_size` (0: the size is not known, every replica counts its own)."""

    keys: tuple[int, ...]
    blocks: tuple[int, ...]
    tokens: tuple[int, ...]
    block_size: int = 0
    _sized: dict[int, Segments] | None = field(default=None, compare=False, repr=False)

    def at_block_size(self, block_size: int) -> Segments:
        """These segments with ``blocks`` counted in blocks of ``block_size`` tokens."""
        if block_size == self.block_size:
            return self
        sized = self._sized
        if sized is None:
            sized = {}
            object.__setattr__(self, "_sized", sized)  # a cache: the value stays the same
        other = sized.get(block_size)
        if other is None:
            other = sized[block_size] = Segments(
                self.keys, blocks_ending_in(self.tokens, block_size), self.tokens, block_size
            )
        return other


def blocks_ending_in(ends: Sequence[int], block_size: int) -> tuple[int, ...]:
    """How many KV blocks of ``block_size`` tokens end inside each segment ending at ``ends``."""
    starts = (0, *ends[:-1])
    return tuple(
        end // block_size - start // block_size for start, end in zip(starts, ends, strict=True)
    )


@dataclass(slots=True, eq=False)
class Node:
    """A run of cached segments, consecutive in a prompt, that every request using one of them
    uses all of (a radix-tree node): ``blocks[j]`` KV blocks of segment ``keys[j]``, ``ends[j]``
    the blocks of its first j + 1 segments, ``refs`` the running requests using it, ``children``
    the runs that continue it, by their first key."""

    keys: tuple[int, ...]
    blocks: list[int]
    ends: list[int]
    parent: Node | None
    refs: int = 0
    children: dict[int, Node] = field(default_factory=dict)

    @classmethod
    def of(cls, keys: tuple[int, ...], blocks: list[int], parent: Node | None,
           refs: int) -> Node:  # fmt: skip
        return cls(keys, blocks, list(itertools.accumulate(blocks)), parent, refs)

    @property
    def total(self) -> int:
        """Its KV blocks."""
        return self.ends[-1]
