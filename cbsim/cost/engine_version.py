"""Engine versions: which release of a serving engine a profile describes.

A serving engine changes between releases in ways that move latency and capacity: vLLM 0.8.5
scheduled synchronously and paid no extra serial time per step, 0.11-0.18 pay about 2 ms;
vLLM stopped giving A100s the large-GPU token budget in 0.10.2; CUDA graphs moved inside
the KV-cache budget; SGLang's ``mem_fraction_static`` default changed its rule. A user names the
release they run as ``engine@version`` (``vllm@0.8.5``, ``sglang@0.4.6``,
``tensorrt-llm@1.0``); a bare name is the engine's newest release.

An engine profile holds its newest release's behaviour in its ordinary fields, and a list of
**version ranges** (:class:`~cbsim.cost.engine_profile.EngineVersion`): each says, for the
releases from ``since`` up to (not including) ``until``, which fields differ — as a partial
profile merged over the base, or as another shipped profile that models those releases
(vLLM's V0 engine, ``vllm-v0``). Every range that contains the release named applies, in order,
so each fact keeps its own range and its own source.

This module parses and compares release numbers; :mod:`cbsim.cost.engine_profile` applies the
ranges.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cbsim.common.errors import CbsimError

VERSION_SEPARATOR = "@"
_RELEASE = re.compile(r"^v?(\d+(?:\.\d+){0,3})(?:[.\-+]?(?:post|rc|dev|a|b)\d*)*(?:\+[\w.]+)?$")

Release = tuple[int, int, int, int]


def parse_release(text: str) -> Release:
    """``0.8.5`` / ``v0.8.5.post1`` / ``1.0.0rc4`` / ``0.11`` as a comparable 4-tuple (missing
    parts 0; pre- and post-release suffixes ignored: a release candidate counts as its release)."""
    match = _RELEASE.match(text.strip())
    if match is None:
        raise CbsimError(
            f"{text!r} is not a release number (write it as the engine prints it, e.g. 0.8.5, "
            "0.11, 1.0.0rc4)"
        )
    parts = [int(p) for p in match.group(1).split(".")]
    padded = (*parts, 0, 0, 0)[:4]
    return (padded[0], padded[1], padded[2], padded[3])


def split_engine(engine: str) -> tuple[str, str | None]:
    """``vllm@0.8.5`` as (``vllm``, ``0.8.5``); a name without a release as (name, None)."""
    name, sep, release = engine.rpartition(VERSION_SEPARATOR)
    if not sep or not name:
        return engine, None
    return name, release


def engine_family(engine: str) -> str:
    """The engine's name without its release (``vllm@0.8.5`` is ``vllm``)."""
    return split_engine(engine)[0]


def in_range(release: Release, since: str, until: str | None) -> bool:
    """Whether ``release`` lies in ``[since, until)``."""
    if release < parse_release(since):
        return False
    return until is None or release < parse_release(until)


def deep_merge(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` written over it, mappings merged key by key (a value that is
    not a mapping replaces the one below)."""
    merged = dict(base)
    for key, value in changes.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = deep_merge(below, value)
        else:
            merged[key] = value
    return merged
