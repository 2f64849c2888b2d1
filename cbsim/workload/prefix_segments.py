"""A prompt's content as the prefix cache sees it: the prompt as *segments* of known content,
each named by a key chained over the segments before it (:class:`PrefixInterner`, one per
simulation, used by the request sources as they build prompts), and the radix-tree *nodes* that
cache runs of them (:mod:`cbsim.memory.prefix_cache` describes the cache). A request (:mod:`cbsim.workload.request`) carries its segments and the deepest node of its path in
the tree; the cache works on both.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["Node", "PrefixInterner", "Segments", "blocks_ending_in", "ids_are_chained"]


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


@dataclass(slots=True)
class PrefixInterner:
    """Chained segment keys: the key of a segment is a small integer standing for (the key of the
    segment before it, its own content id, and its length when the prompt cuts it short), so equal
    keys mean equal prefixes, exactly (no hash collisions). One interner per simulation, shared by
    every replica.

    Where a trace's ids are chained already (:func:`ids_are_chained`: each id always follows the
    same id, as Mooncake's hash ids do), ``chained_ids`` is set and a whole segment's key is its
    id; only a segment the prompt cuts short gets an interned (negative) key."""

    _keys: dict[tuple[int, ...], int] = field(default_factory=dict)
    chained_ids: bool = False

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
        return Segments(tuple(keys), blocks_ending_in(ends, block_size), tuple(ends), block_size)

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

    def _chained(self, content: tuple[int, ...], count: int, cut: int | None) -> tuple[int, ...]:
        """:meth:`_chain` of ids that are chained already: the ids themselves, but for a last
        segment cut short to ``cut`` tokens."""
        if cut is None:
            return content[:count]
        ident = (content[count - 2] if count > 1 else -1, content[count - 1], cut)
        key = self._keys.get(ident)
        if key is None:
            key = self._keys[ident] = -1 - len(self._keys)
        return (*content[: count - 1], key)

    def uniform_segments(self, content: tuple[int, ...], size: int, prompt_tokens: int,
                         block_size: int) -> Segments:  # fmt: skip
        """:meth:`segments` of ids that all stand for ``size`` tokens (a replayed trace's prefix
        blocks), computed without summing sizes."""
        count = min(len(content), -(-prompt_tokens // size))
        end = min(count * size, prompt_tokens)
        start = (count - 1) * size
        cut = end - start if end - start < size else None
        keys = self._chained(content, count, cut) if self.chained_ids else self._chain(
            content, count, cut
        )  # fmt: skip
        ends = (*range(size, start + 1, size), end)
        if size % block_size == 0:
            blocks = (size // block_size,) * (count - 1) + (
                end // block_size - start // block_size,
            )
        else:
            blocks = blocks_ending_in(ends, block_size)
        return Segments(tuple(keys), blocks, ends, block_size)


def ids_are_chained(prefix_ids: Sequence[tuple[int, ...]] | npt.NDArray[np.object_]) -> bool:
    """Whether every id of these prompts (non-negative) always follows the same id, or always
    comes first: then, by induction along a prompt, equal ids mean equal prefixes and an id can
    serve as its segment's chained key."""
    if not len(prefix_ids):
        return True
    lengths = np.fromiter(map(len, prefix_ids), dtype=np.int64, count=len(prefix_ids))
    if not lengths.any():
        return True
    ids = np.concatenate([np.asarray(row, dtype=np.int64) for row in prefix_ids if row])
    if ids.min() < 0:
        return False
    before = np.empty_like(ids)
    before[1:] = ids[:-1]
    before[np.cumsum(lengths[lengths > 0]) - lengths[lengths > 0]] = -1
    order = np.lexsort((before, ids))
    ids, before = ids[order], before[order]
    same_id = ids[1:] == ids[:-1]
    return not bool(np.any(same_id & (before[1:] != before[:-1])))
