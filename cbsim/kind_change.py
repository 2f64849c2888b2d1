"""Changing a block's kind from the command line: the block starts afresh as the new kind.

Many scenario sections are tagged unions: ``workload.arrival`` is ``poisson`` with a ``rate`` or a
``closed_loop`` with a ``concurrency``; ``workload.prompt_tokens`` is ``lognormal`` with ``mean``
and ``sigma`` or ``uniform`` with ``low`` and ``high``. A user who types ``--set
workload.arrival.kind=closed_loop --set workload.arrival.concurrency=8`` means "make the arrivals a
closed loop of 8 clients"; the file's ``rate`` belongs to the old kind and means nothing to the
new one. So when an override changes a block's ``kind``, the keys the file gave that block and
that the new kind does not read are left out (a key the user sets with ``--set`` is always kept,
so a key the new kind rejects that the user typed is still an error). A scheduler's keys are
those its kind reads (:attr:`~cbsim.schema.scheduler.Scheduler.USED_KEYS`); any other section's
are found by validating and dropping what the new variant refuses as unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from cbsim.schema.scheduler import Scheduler

T = TypeVar("T")

#: a block's path (``("workload", "arrival")``) -> the keys its file gave it that no override sets
KindChanges = dict[tuple[str, ...], set[str]]


def kind_changes(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> KindChanges:
    """The blocks whose ``kind`` the overrides change, each with the keys that came from the file
    (besides ``kind``) and are not set by an override; ``data`` is the scenario before them."""
    changes: KindChanges = {}
    for dotted, value in overrides.items():
        parts = tuple(dotted.split("."))
        if parts[-1] != "kind" or len(parts) < 2:
            continue
        block = _lookup(data, parts[:-1])
        if not isinstance(block, Mapping) or "kind" not in block or block["kind"] == value:
            continue
        prefix = ".".join(parts[:-1]) + "."
        overridden = {k[len(prefix) :].split(".")[0] for k in overrides if k.startswith(prefix)}
        changes[parts[:-1]] = {str(k) for k in block} - {"kind"} - overridden
    return changes


def drop_unread_scheduler_keys(data: dict[str, Any], changes: KindChanges) -> None:
    """Leave out a re-kinded scheduler's file keys that its new kind does not read."""
    for path, file_keys in changes.items():
        block = _lookup(data, path)
        if path[-1] != "scheduler" or not isinstance(block, dict):
            continue
        for key in Scheduler.unused_keys(str(block.get("kind")), sorted(file_keys)):
            block.pop(key, None)


def validate_after_kind_changes(
    data: dict[str, Any], changes: KindChanges, validate: Callable[[dict[str, Any]], T]
) -> T:
    """``validate(data)``, leaving out each re-kinded block's file keys the new kind refuses as
    unknown (validating again after each round); any other problem is raised as it is."""
    drop_unread_scheduler_keys(data, changes)
    while True:
        try:
            return validate(data)
        except ValidationError as err:
            if not changes or not _drop_refused(data, err, changes):
                raise


def _drop_refused(data: dict[str, Any], err: ValidationError, changes: KindChanges) -> bool:
    """Remove the file keys of re-kinded blocks that ``err`` calls unknown; whether any was."""
    dropped = False
    for problem in err.errors():
        if problem["type"] != "extra_forbidden":
            continue
        path = _data_path(data, problem["loc"])
        if len(path) < 2 or path[-1] not in changes.get(path[:-1], set()):
            continue
        block = _lookup(data, path[:-1])
        if isinstance(block, dict) and block.pop(path[-1], None) is not None:
            dropped = True
    return dropped


def _data_path(data: Mapping[str, Any], loc: tuple[int | str, ...]) -> tuple[str, ...]:
    """The keys of ``loc`` that are keys of ``data`` along the way (pydantic's locations also
    hold union tags and validator names, which are not)."""
    node: Any = data
    path: list[str] = []
    for part in loc:
        if isinstance(node, Mapping) and isinstance(part, str) and part in node:
            node = node[part]
            path.append(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
            path.append(str(part))
    return tuple(path)


def _lookup(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = data
    for part in path:
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
