"""Validation problems as one clear line: pydantic's first error with its dotted field path
(union tags and validator wrappers left out) and a message a user can act on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from cbsim.common.errors import CbsimError
from cbsim.schema.suggestions import key_hint


def _format_loc(loc: Sequence[int | str]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif parts:
            parts.append(f".{item}")
        else:
            parts.append(str(item))
    return "".join(parts)


TAGGED_SECTIONS = {
    "arrival", "prompt_tokens", "output_tokens", "proposer", "acceptance", "policy", "system_tokens",
    "question_tokens",
}  # fmt: skip


def _discriminator_tags() -> set[str]:
    return {
        "poisson", "gamma", "offline", "trace", "closed_loop", "stages", "rate_curve", "fixed", "uniform", "lognormal", "empirical",
        "draft_model", "eagle", "ngram", "iid", "positional", "per_request", "token_level",
        "threshold", "ewma_lookahead", "heuristic", "batch_table", "goodput",
    }  # fmt: skip


def validation_problem(err: ValidationError) -> CbsimError:
    """A validation error of part of a scenario (a pool's keys) as one clear line; its field path
    is relative to that part (see :meth:`CbsimError.located`)."""
    return _error_from_validation(err, None)


def _first_problem(err: ValidationError) -> Any:
    """pydantic's first error, or an unknown key in the section where a key is missing."""
    problems = err.errors()
    missing = {tuple(p["loc"][:-1]) for p in problems if p["type"] == "missing"}
    for problem in problems:
        if problem["type"] == "extra_forbidden" and tuple(problem["loc"][:-1]) in missing:
            return problem
    return problems[0]


def _error_from_validation(err: ValidationError, source: str | None) -> CbsimError:
    """The first validation problem as one clear line (field path without union tags); an
    unknown key is told before a missing one of the same section (``timeout_ms`` given for
    ``timeout_s``: the unknown key's hint names the right one)."""
    first = _first_problem(err)
    tags = _discriminator_tags()
    loc: list[int | str] = []
    previous: int | str | None = None
    for part in first["loc"]:
        raw_previous, previous = previous, part
        if isinstance(part, str) and ("function-" in part or "[" in part):
            continue  # pydantic's names for validator wrappers
        if isinstance(part, str) and part in tags and raw_previous in TAGGED_SECTIONS:
            continue  # the union variant's tag, e.g. "poisson" in arrival.poisson.rate
        loc.append(part)
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key (check the spelling; unknown keys are errors)"
        message += key_hint(err.title, first["loc"])
    elif first["type"] == "missing":
        message = "required field is missing"
    message = message.removeprefix("Value error, ")
    ctx = first.get("ctx") or {}
    if first["type"] == "union_tag_invalid":
        message = f"unknown kind {ctx.get('tag')!r}; known: {ctx.get('expected_tags')}"
    elif first["type"] == "union_tag_not_found":
        message = "missing key 'kind' (it picks which variant this is)"
    elif first["type"] == "literal_error" and loc and loc[-1] in ("kind", "router", "dtype"):
        message = f"unknown {loc[-1]} {first.get('input')!r}; known: {ctx.get('expected')}"
    elif first["type"] == "int_parsing_size" or (
        first["type"] == "float_type" and isinstance(first.get("input"), int)
    ):
        message = "number too large to be a physical quantity here"
    more = len(err.errors()) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return CbsimError(message, source=source, field=_format_loc(loc) or None)
