"""Named random streams.

Every random draw in cbsim comes from a :class:`numpy.random.Generator` derived from the scenario
seed and a stable stream name ("arrivals", "prompt_tokens", "acceptance", ...). Adding a new stream
never changes the numbers another stream produces, and the same seed gives the same numbers in any
process: the name is hashed with a fixed function, not Python's salted ``hash``.
"""

from __future__ import annotations

import hashlib

import numpy as np


def stream(seed: int, name: str, *extra: int) -> np.random.Generator:
    """The generator for stream ``name`` (optionally sub-keyed, e.g. by replica) under ``seed``."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    name_key = int.from_bytes(digest[:8], "little")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, name_key, *extra])))
