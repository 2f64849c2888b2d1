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

#: (a block's path, a kind) -> the keys beside the block that a block of that kind excludes:
#: rate stages say how many requests are sent, so the workload's count and duration go
EXCLUDED_BESIDE: dict[tuple[tuple[str, ...], str], tuple[str, ...]] = {
    (("workload", "arrival"), "stages"): ("num_requests", "duration_s"),
}


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
        _note_excluded_beside(data, overrides, parts[:-1], value, changes)
    return changes


def _note_excluded_beside(
    data: Mapping[str, Any],
    overrides: Mapping[str, Any],
    path: tuple[str, ...],
    kind: Any,
    changes: KindChanges,
) -> None:
    """Record, as file keys of the parent block, the keys beside ``path`` that its new ``kind``
    excludes (:data:`EXCLUDED_BESIDE`) and that the file gave and no override sets."""
    excluded = EXCLUDED_BESIDE.get((path, str(kind)), ())
    parent = _lookup(data, path[:-1])
    if not excluded or not isinstance(parent, Mapping):
        return
    prefix = ".".join(path[:-1])
    given = {k for k in excluded if k in parent and f"{prefix}.{k}" not in overrides}
    changes.setdefault(path[:-1], set()).update(given)


def drop_excluded_beside(data: dict[str, Any], changes: KindChanges) -> None:
    """Leave out the file keys beside a re-kinded block that its new kind excludes."""
    for (path, kind), excluded in EXCLUDED_BESIDE.items():
        block, parent = _lookup(data, path), _lookup(data, path[:-1])
        if path not in changes or not isinstance(block, Mapping) or block.get("kind") != kind:
            continue
        for key in set(excluded) & changes.get(path[:-1], set()):
            if isinstance(parent, dict):
                parent.pop(key, None)


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
    drop_excluded_beside(data, changes)
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
        for path, file_keys in changes.items():
            key = _refused_key(problem["loc"], path)
            block = _lookup(data, path)
            if key in file_keys and isinstance(block, dict) and block.pop(key, None) is not None:
                dropped = True
    return dropped


def _refused_key(loc: tuple[int | str, ...], path: tuple[str, ...]) -> str | None:
    """The key of the block at ``path`` that a problem at ``loc`` is about, or None when it is
    about something else. Pydantic's location of a tagged union's key holds the tag between the
    block and the key (``workload.arrival.stages.rate`` for an arrival of kind ``stages``): the
    tag may equal a key of the block, so the location is matched against the path rather than
    walked through the data."""
    n = len(path)
    if tuple(str(part) for part in loc[:n]) != path or len(loc) - n not in (1, 2):
        return None
    if len(loc) - n == 2 and not isinstance(loc[n], str):
        return None
    return str(loc[-1])


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
