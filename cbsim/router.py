"""Routers: which replica of a cluster an arriving request goes to.

``round_robin`` cycles through replicas; ``least_loaded`` picks the replica with the fewest
outstanding tokens (prefill still to do plus outputs still to sample, over waiting and running
requests; ties to the lowest index); ``random`` draws uniformly from the scenario's "router" stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from cbsim.errors import unknown_name


class Loaded(Protocol):
    def outstanding_tokens(self) -> int: ...


class Router(Protocol):
    def route(self, replicas: Sequence[Loaded]) -> int: ...


class RoundRobinRouter:
    def __init__(self, rng: np.random.Generator) -> None:
        self._next = 0

    def route(self, replicas: Sequence[Loaded]) -> int:
        index = self._next % len(replicas)
        self._next += 1
        return index


class LeastLoadedRouter:
    def __init__(self, rng: np.random.Generator) -> None:
        pass

    def route(self, replicas: Sequence[Loaded]) -> int:
        loads = [r.outstanding_tokens() for r in replicas]
        return loads.index(min(loads))


class RandomRouter:
    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def route(self, replicas: Sequence[Loaded]) -> int:
        return int(self._rng.integers(len(replicas)))


ROUTERS: dict[str, Callable[[np.random.Generator], Router]] = {
    "round_robin": RoundRobinRouter,
    "least_loaded": LeastLoadedRouter,
    "random": RandomRouter,
}


def make_router(kind: str, rng: np.random.Generator) -> Router:
    factory = ROUTERS.get(kind)
    if factory is None:
        raise unknown_name("router", kind, list(ROUTERS))
    return factory(rng)
