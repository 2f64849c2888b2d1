"""Scenario-field introspection for the capacity search: the dotted keys a scenario has (found by
walking the :class:`~cbsim.schema.scenario.Scenario` model), the keys the search sets itself, and setting
keys so that changing a section's ``kind`` drops the old kind's fields.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from cbsim.common.errors import CbsimError
from cbsim.run.loading import apply_overrides
from cbsim.schema.scenario import Scenario

#: Scenario keys the search sets itself: not allowed in ``vary`` or ``--set``.
CONTROLLED_KEYS = frozenset(
    {
        "seed",
        "horizon_s",
        "cluster.replicas",
        "workload.arrival.rate",
        "workload.trace.rate_scale",
        "workload.trace.time_scale",
        "workload.duration_s",
        "workload.num_requests",
        "output.timeseries_window_s",
    }
)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation can hold (through Annotated, Optional and unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        found: list[type[BaseModel]] = []
        for arg in get_args(annotation):
            found.extend(m for m in _models_in(arg) if m not in found)
        return found
    return []


def _kind_of(model: type[BaseModel]) -> str | None:
    info = model.model_fields.get("kind")
    if info is None or get_origin(info.annotation) is not Literal:
        return None
    args = get_args(info.annotation)
    return str(args[0]) if args else None


def _walk(
    model: type[BaseModel], prefix: str, paths: dict[str, bool], variants: dict[str, dict[str, Any]]
) -> None:
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        subs = _models_in(info.annotation)
        paths[path] = not subs
        if len(subs) > 1:
            variants[path] = {
                kind: set(sub.model_fields) for sub in subs if (kind := _kind_of(sub)) is not None
            }
        for sub in subs:
            _walk(sub, f"{path}.", paths, variants)


@functools.cache
def _field_tree() -> tuple[dict[str, bool], dict[str, dict[str, Any]]]:
    paths: dict[str, bool] = {}
    variants: dict[str, dict[str, Any]] = {}
    _walk(Scenario, "", paths, variants)
    return paths, variants


def scenario_field_paths(*, leaves_only: bool = True) -> list[str]:
    """Every dotted field path of a scenario (union sections: the fields of all their kinds),
    found by walking the :class:`~cbsim.schema.scenario.Scenario` model: ``cluster.gpu``, ``cluster.tp``,
    ``scheduler.kind``, ``speculative.enabled``, ``speculative.policy.kind``, ...
    """
    paths, _ = _field_tree()
    return sorted(p for p, leaf in paths.items() if leaf or not leaves_only)


def _check_key(key: str, option: str) -> None:
    paths, _ = _field_tree()
    if key in CONTROLLED_KEYS:
        raise CbsimError(
            f"{key!r} is set by the capacity search itself (load, window, replicas, seeds); "
            "it cannot be given here",
            field=option,
        )
    if key not in paths:
        valid = [p for p in sorted(paths) if paths[p] and p not in CONTROLLED_KEYS]
        raise CbsimError(
            f"unknown scenario key {key!r}; valid keys: {', '.join(valid)}", field=option
        )


def _set_keys(data: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``apply_overrides``, except that changing a section's ``kind`` drops the sibling keys the
    new kind does not have (so ``speculative.policy.kind=goodput`` works over a ``fixed`` policy
    with ``k`` set)."""
    _, variants = _field_tree()
    result = apply_overrides(data, overrides)
    for dotted, value in overrides.items():
        parent, _, leaf = dotted.rpartition(".")
        if leaf != "kind" or parent not in variants or value not in variants[parent]:
            continue
        node: Any = result
        for part in parent.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            allowed = variants[parent][value]
            explicit = {k.rpartition(".")[2] for k in overrides if k.rpartition(".")[0] == parent}
            for key in list(node):
                if key not in allowed and key not in explicit:
                    del node[key]
    return result
