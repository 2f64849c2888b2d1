"""Routers: which replica of a cluster an arriving request goes to.

``round_robin`` cycles through replicas; ``least_loaded`` picks the replica with the fewest
outstanding tokens (prefill still to do plus outputs still to sample, over waiting and running
requests, and requests still in its front end; ties to the lowest index); ``random`` draws
uniformly from the scenario's "router" stream.

With prefix caching two more route for cache hits, as fleet routers do (llm-d's precise
prefix-cache scorer, SGLang's cache-aware router, Dynamo's KV router):

``prefix_aware`` looks into every replica's prefix cache (:mod:`cbsim.memory.prefix_cache`, both tiers)
and sends the request where the least work stands before its first token: the replica's
outstanding tokens plus the request's prompt tokens that replica does not have cached (as
Dynamo's KV router weighs the blocks to prefill against the load, and llm-d's prefix-cache
scorer against its load scorers). A cached prefix is worth exactly the prefill it saves; ties go
to the lowest index; with no cache anywhere it is ``least_loaded``.

Replicas of a mixed fleet (``cluster.pools``: groups on different GPUs or layouts) differ in
speed, so load-aware routers weigh each replica's tokens by its ``load_scale``: the time its pool
takes for a reference iteration (one 2,048-token prefill chunk beside 32 decodes at 2,048 tokens
of context) over the fastest pool's. A token waiting on a replica half as fast counts twice. In a
plain cluster every scale is 1.

``session_affinity`` sends every request of a conversation to the replica its first request went
to (chosen ``least_loaded``): the session of a multi-turn workload, or, for a replayed trace
(which has no sessions), the content of the prompt's first 1,024 tokens, as a gateway hashing
the start of the prompt does (a system prompt most requests share, as in the Mooncake traces'
first block, would otherwise send them all to one replica); requests with neither are routed
``least_loaded``.

Routers choose among the replicas they are given: every replica of the entry pool, or, in an
autoscaled cluster, only those serving now (:mod:`cbsim.engine.autoscale`). A router returns a position
in that list; ``session_affinity`` remembers a conversation's replica by its number and chooses
again (``least_loaded``) when that replica no longer serves.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from cbsim.common.errors import unknown_name
from cbsim.workload.request import Request


class Loaded(Protocol):
    index: int
    load_scale: float

    def outstanding_tokens(self) -> int: ...

    def cached_prefix_tokens(self, req: Request) -> int: ...


class Router(Protocol):
    def route(self, replicas: Sequence[Loaded], req: Request) -> int: ...


class RoundRobinRouter:
    def __init__(self, rng: np.random.Generator) -> None:
        self._next = 0

    def route(self, replicas: Sequence[Loaded], req: Request) -> int:
        index = self._next % len(replicas)
        self._next += 1
        return index


def least_loaded(replicas: Sequence[Loaded]) -> int:
    """The replica with the fewest outstanding tokens, each weighted by its ``load_scale`` (the
    lowest index on ties); the only one without weighing it (a replica's load is only read)."""
    if len(replicas) == 1:
        return 0
    loads = [r.outstanding_tokens() * r.load_scale for r in replicas]
    return loads.index(min(loads))


class LeastLoadedRouter:
    def __init__(self, rng: np.random.Generator) -> None:
        pass

    def route(self, replicas: Sequence[Loaded], req: Request) -> int:
        return least_loaded(replicas)


class RandomRouter:
    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def route(self, replicas: Sequence[Loaded], req: Request) -> int:
        return int(self._rng.integers(len(replicas)))


class PrefixAwareRouter:
    """The replica with the least work ahead of the request's first token (see the module
    docstring)."""

    def __init__(self, rng: np.random.Generator) -> None:
        pass

    def route(self, replicas: Sequence[Loaded], req: Request) -> int:
        prompt = req.prompt_tokens
        loads = [replica.outstanding_tokens() * replica.load_scale for replica in replicas]
        if req.segments is None:
            return loads.index(min(loads))
        # least loaded first: a cache never holds a whole prompt (its last token is computed),
        # so a replica's cost exceeds its load, and once the loads reach the best cost so far no
        # later replica can beat it (nor tie it: ties go to the lowest index)
        best, best_cost = 0, -1.0
        for index in sorted(range(len(loads)), key=loads.__getitem__):
            load = loads[index]
            if best_cost >= 0 and load >= best_cost:
                break
            replica = replicas[index]
            cost = load + (prompt - replica.cached_prefix_tokens(req)) * replica.load_scale
            if best_cost < 0 or cost < best_cost or (cost == best_cost and index < best):
                best, best_cost = index, cost
        return best


class SessionAffinityRouter:
    """A conversation's requests to one replica (see the module docstring)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._home: dict[tuple[str, int], int] = {}  # key -> the replica's number

    def route(self, replicas: Sequence[Loaded], req: Request) -> int:
        if req.session >= 0:
            key = ("session", req.session)
        elif req.segments is not None and req.segments.keys:
            key = ("prefix", _affinity_key(req))
        else:
            return least_loaded(replicas)
        home = self._home.get(key)
        if home is not None:
            # a fixed fleet's replica n is at position n; an autoscaled one's may have moved
            if home < len(replicas) and replicas[home].index == home:
                return home
            for position, replica in enumerate(replicas):
                if replica.index == home:
                    return position
        position = least_loaded(replicas)
        self._home[key] = replicas[position].index
        return position


AFFINITY_PREFIX_TOKENS = 1024


def _affinity_key(req: Request) -> int:
    """The key of the prompt's first :data:`AFFINITY_PREFIX_TOKENS` tokens (its whole prompt when
    shorter): the segment holding token 1,024 stands for everything up to it."""
    segments = req.segments
    assert segments is not None
    index = bisect.bisect_left(segments.tokens, AFFINITY_PREFIX_TOKENS)
    return segments.keys[min(index, len(segments.keys) - 1)]


ROUTERS: dict[str, Callable[[np.random.Generator], Router]] = {
    "round_robin": RoundRobinRouter,
    "least_loaded": LeastLoadedRouter,
    "random": RandomRouter,
    "prefix_aware": PrefixAwareRouter,
    "session_affinity": SessionAffinityRouter,
}


def make_router(kind: str, rng: np.random.Generator) -> Router:
    factory = ROUTERS.get(kind)
    if factory is None:
        raise unknown_name("router", kind, list(ROUTERS))
    return factory(rng)
