"""Documents: reading the YAML and JSON files users hand to cbsim, safely.

Scenarios, sweeps, model configs and engine or calibration profiles are small documents, and a
broken one must end in one clear error, never a traceback or an exhausted memory. So every file is
read as UTF-8 text (an error names the first bad byte's line and column), and parsed with bounds:

- YAML: a duplicated key is an error (YAML says keys are unique; PyYAML silently keeps the last),
  with the line of both; nesting deeper than :data:`~cbsim.common.limits.MAX_NESTING` levels is an error
  before the parser recurses; aliases are fine, but a document whose aliases expand to more than
  :data:`~cbsim.common.limits.MAX_YAML_NODES` values (a "billion laughs" bomb) or refer to themselves is
  an error before anything walks the expanded data. Only YAML's plain types are built (the safe
  loader); an impossible date such as ``2023-13-45`` is an error, not a traceback.
- JSON: nesting is bounded the same way.

Errors are :class:`~cbsim.common.errors.CbsimError` with the file as their source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from cbsim.common.errors import CbsimError
from cbsim.common.limits import MAX_NESTING, MAX_YAML_NODES

__all__ = ["parse_json", "parse_yaml", "read_text_file"]

MERGE_TAG = "tag:yaml.org,2002:merge"


def read_text_file(path: Path, *, what: str = "file") -> str:
    """The file's text, decoded as UTF-8; errors say what is wrong (missing, a directory,
    unreadable, not UTF-8 and where)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CbsimError(f"{what} not found", source=str(path)) from None
    except IsADirectoryError:
        raise CbsimError(f"{what} is a directory, not a file", source=str(path)) from None
    except OSError as err:
        raise CbsimError(f"cannot read {what}: {err.strerror or err}", source=str(path)) from None
    return decode_utf8(data, str(path))


def decode_utf8(data: bytes, source: str | None) -> str:
    """``data`` as UTF-8 text, or an error naming the first bad byte and its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[: err.start]
        line = before.count(b"\n") + 1
        column = err.start - (before.rfind(b"\n") + 1) + 1
        byte = data[err.start : err.start + 1].hex()
        raise CbsimError(
            f"not UTF-8 text: byte 0x{byte} at line {line}, column {column} "
            "(save the file as UTF-8)",
            source=source,
        ) from None


# --------------------------------------------------------------------------- JSON


def parse_json(text: str, source: str | None, *, invalid: str = "invalid JSON") -> Any:
    """The JSON value in ``text``; invalid (``invalid`` starts the message) or too deeply nested
    JSON is a located error."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise CbsimError(
            f"{invalid} at line {err.lineno} column {err.colno}: {err.msg}", source=source
        ) from None
    except RecursionError:
        raise CbsimError(_too_deep(), source=source) from None
    if _json_depth(value) > MAX_NESTING:
        raise CbsimError(_too_deep(), source=source)
    return value


def _json_depth(value: Any) -> int:
    """Containers nested in a parsed JSON value (a scalar is 0, ``[[]]`` is 2), without
    recursion; stops counting past the limit."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack and deepest <= MAX_NESTING:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, _CONTAINERS))
    return deepest


_CONTAINERS = (dict, list)


def _too_deep() -> str:
    return f"nested more than {MAX_NESTING} levels deep"


# --------------------------------------------------------------------------- YAML


class DocumentError(yaml.MarkedYAMLError):
    """A YAML document beyond cbsim's bounds (duplicate key, too deep, too large)."""


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with duplicate keys refused and depth and alias expansion bounded."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise DocumentError(problem=_too_deep(), problem_mark=event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Node) -> Any:
        _check_expansion(node)
        return super().construct_document(node)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        _check_unique_keys(self, node)
        return super().construct_mapping(node, deep=deep)


def _check_unique_keys(loader: BoundedLoader, node: MappingNode) -> None:
    """Refuse a mapping that states a key twice (merged ``<<`` keys may be overridden)."""
    seen: dict[Any, Node] = {}
    for key_node, _ in node.value:
        if key_node.tag == MERGE_TAG or not isinstance(key_node, ScalarNode):
            continue
        key = loader.construct_object(key_node)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:
            continue  # unhashable: the safe loader reports it
        if first is not key_node:
            raise DocumentError(
                problem=f"duplicate key {key!r} (first at line {first.start_mark.line + 1}); "
                "a key may appear only once",
                problem_mark=key_node.start_mark,
            )


def _check_expansion(root: Node) -> None:
    """Refuse a document whose aliases add more than MAX_YAML_NODES values to those written in
    it, or that contains itself through an alias. A large document without aliases (a rate
    curve of 100,000 points) is as large as its text; only expansion through aliases is bounded.
    Counts each shared node once per use, in time linear in the distinct nodes (sizes are
    memoised), so a bomb is measured without being expanded."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            sizes[key] = size
            if size - len(sizes) > MAX_YAML_NODES:  # len(sizes): the distinct nodes so far
                raise DocumentError(
                    problem=f"expands to more than {MAX_YAML_NODES:,} values through its "
                    "aliases, beyond those written in it (an alias bomb?)",
                    problem_mark=node.start_mark,
                )
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise DocumentError(
                problem="an alias refers to a value that contains it (a recursive document)",
                problem_mark=node.start_mark,
            )
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def parse_yaml(text: str, source: str | None) -> Any:
    """The YAML value in ``text`` (None for an empty document), or a located error naming the
    line and column."""
    try:
        return yaml.load(text, Loader=BoundedLoader)  # a SafeLoader: plain types only
    except DocumentError as err:
        raise CbsimError(f"{_where(err)}{err.problem}", source=source) from None
    except yaml.YAMLError as err:
        raise CbsimError(_yaml_problem(err), source=source) from None
    except ValueError as err:  # e.g. a timestamp with month 13, a huge exponent in a date
        raise CbsimError(f"invalid YAML: {err}", source=source) from None
    except RecursionError:
        raise CbsimError(_too_deep(), source=source) from None


def _where(err: yaml.YAMLError) -> str:
    """``line L, column C: `` of the problem, or nothing when PyYAML gives no position."""
    mark = getattr(err, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""


def _yaml_problem(err: yaml.YAMLError) -> str:
    if isinstance(err, yaml.reader.ReaderError):
        return (
            f"invalid YAML: character {err.character!r} at position {err.position} is not "
            "allowed in YAML text"
        )
    problem = getattr(err, "problem", None) or "not valid YAML"
    where = _where(err).removesuffix(": ")
    return f"invalid YAML{' at ' + where if where else ''}: {problem}"
