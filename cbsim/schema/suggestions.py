"""Spelling suggestions for scenario keys and summary metrics.

A typo used to get "unknown key (check the spelling ...)" with no hint, and ``--slo ttft_p99=2``
listed sixty summary fields (``seed`` among them). Here:

* :func:`key_hint` — the keys the scenario section at an unknown key's path accepts, the close
  ones suggested (``workload.num_request`` -> ``num_requests``), found by walking the pydantic
  models along the error's raw path (union tags pick the variant: ``arrival.poisson.rat``);
* :func:`unknown_metric` — an unknown SLO metric with its close summary metrics suggested and
  only the latency, rate and share metrics listed.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from cbsim.common.errors import CbsimError, close_names, did_you_mean

__all__ = ["key_hint", "known_keys", "metric_names", "unknown_metric"]

#: Summary fields that are counts or labels, never SLO metrics.
NOT_METRICS = frozenset(
    {"seed", "requests", "completed", "rejected", "unfinished", "timed_out", "iterations",
     "kv_blocks_total", "max_batch_size", "output_tokens", "preemptions", "backlog"}
)  # fmt: skip


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (through Optional, unions, Annotated, lists)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, dict, Sequence, Mapping):
        found: list[type[BaseModel]] = []
        for arg in typing.get_args(annotation):
            found += [m for m in _models(arg) if m not in found]
        return found
    return []


def _tagged(models: list[type[BaseModel]], tag: str) -> list[type[BaseModel]]:
    """The union members whose ``kind`` literal is ``tag``."""
    chosen = []
    for model in models:
        field = model.model_fields.get("kind")
        if field is not None and tag in typing.get_args(field.annotation):
            chosen.append(model)
    return chosen


def known_keys(root: type[BaseModel], path: Sequence[int | str]) -> list[str]:
    """The keys the section at ``path`` (pydantic's raw location, without the unknown key) of
    ``root`` accepts; empty when the path leads nowhere known."""
    current = [root]
    for part in path:
        if isinstance(part, int):
            continue  # an item of a list: same models
        nested = [
            m for model in current if part in model.model_fields
            for m in _models(model.model_fields[part].annotation)
        ]  # fmt: skip
        tagged = _tagged(current, part) if len(current) > 1 else []
        if tagged:  # a union's tag (``stages`` is also a key of the arrival that kind names)
            current = tagged
        elif nested:
            current = nested
        elif any(part in model.model_fields for model in current):
            return []  # a field that holds no section (a dict of free keys)
        # else: a validator wrapper's name; stay where we are
    names: dict[str, None] = {}
    for model in current:
        names.update(dict.fromkeys(model.model_fields))
    return list(names)


def _root_model(title: str) -> type[BaseModel] | None:
    """The scenario model class named ``title`` (a validation error's title)."""
    from cbsim.schema.base import StrictModel

    pending: list[type[BaseModel]] = [StrictModel]
    while pending:
        model = pending.pop()
        if model.__name__ == title:
            return model
        pending += model.__subclasses__()
    return None


def key_hint(title: str, loc: Sequence[int | str]) -> str:
    """``; did you mean 'num_requests'? (known here: ...)`` for an unknown key at ``loc`` of the
    model named ``title``; empty when the keys there are unknown."""
    root = _root_model(title)
    if root is None or not loc or not isinstance(loc[-1], str):
        return ""
    known = known_keys(root, loc[:-1])
    if not known:
        return ""
    return f"{did_you_mean(loc[-1], known)} (known here: {', '.join(known)})"


def metric_names(summary: Mapping[str, Any], aliases: Iterable[str] = ()) -> list[str]:
    """The summary's numeric fields that can be an SLO metric, sorted, with ``aliases``."""
    numeric = [
        k
        for k, v in summary.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k not in NOT_METRICS
    ]
    return sorted({*numeric, *aliases})


def unknown_metric(
    metric: str, summary: Mapping[str, Any], aliases: Iterable[str] = (), field: str = "--slo"
) -> CbsimError:
    """An unknown SLO metric: the close names first, then the metrics of a summary."""
    names = metric_names(summary, aliases)
    close = close_names(metric, names, limit=2)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return CbsimError(
        f"unknown SLO metric {metric!r}; {hint}known: {', '.join(names)}", field=field
    )
