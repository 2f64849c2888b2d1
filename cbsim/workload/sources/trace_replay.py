"""Trace replay: a trace's requests sent at its timestamps, with the content its ids give.

A replayed trace is open-loop (:mod:`cbsim.workload.sources.open_loop`); what it adds is content. A
trace such as Mooncake's names each prompt's blocks by hash ids, a fixed number of tokens each
(``prefix_block_tokens``): equal ids, equal tokens. With prefix caching those ids become the
prompt's cache segments (:meth:`cbsim.memory.prefix_cache.PrefixInterner.uniform_segments`), and where
every id already names its whole prefix (a chained trace) they are used as they are.
"""

from __future__ import annotations

import numpy as np

from cbsim.workload.drawn import RequestSpecs
from cbsim.workload.prefix_segments import Segments, ids_are_chained
from cbsim.workload.sources.base import Sender
from cbsim.workload.sources.open_loop import OpenLoop

__all__ = ["TraceReplay"]


class TraceReplay(OpenLoop):
    """A trace with prefix block ids, replayed open-loop."""

    def __init__(self, sim: Sender, specs: RequestSpecs) -> None:
        super().__init__(sim, specs)
        assert specs.prefix_ids is not None
        if sim.interner is not None:
            sim.interner.chained_ids = ids_are_chained(specs.prefix_ids)

    def _content(self, chunk: int, end: int) -> np.ndarray | None:
        if self.sim.interner is None or self.specs.prefix_ids is None:
            return None
        return self.specs.prefix_ids[chunk:end]

    def _content_segments(self, ids: tuple[int, ...] | None, prompt_tokens: int) -> Segments | None:
        """A replayed request's prompt as cache segments: its trace prefix block ids."""
        if not ids:
            return None
        interner = self.sim.interner
        assert interner is not None
        size = self.specs.prefix_block_tokens
        return interner.uniform_segments(ids, size, prompt_tokens, self.sim.block_size)
