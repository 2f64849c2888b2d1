"""User-facing errors.

Anything a user can get wrong (a scenario file, a field, a trace, a name that is not in a catalog)
raises :class:`CbsimError`. The command line turns it into one line on stderr and exit status 2;
the Python API lets it propagate so notebooks show the same message. Internal bugs stay ordinary
exceptions with tracebacks.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import IO, Any

import click


class CbsimError(Exception):
    """A problem with user input, stated as ``source: field: reason``."""

    def __init__(self, message: str, source: str | None = None, field: str | None = None):
        self.message = message
        self.source = source
        self.field = field
        # args rebuild the same error: SimPy re-raises a process's failure as type(e)(*e.args),
        # and pickling (sweep workers) does the same
        super().__init__(message, source, field)

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.field) if p]
        return ": ".join([*parts, self.message])

    def located(self, source: str | None = None, field: str | None = None) -> CbsimError:
        """The same error with a source file and/or an outer field path added.

        An error in another file that ``source`` refers to (a trace, a profile, a model config)
        keeps that file and its own field inside the message, after the outer file and field:
        ``scenario.yaml: cluster.engine: profile.json: not valid JSON``."""
        if self.source and source and self.source != source:
            return CbsimError(str(self), source=source, field=field)
        new_field = self.field
        if field:
            new_field = f"{field}.{self.field}" if self.field else field
        return CbsimError(self.message, source=self.source or source, field=new_field)


def unknown_name(kind: str, name: str, known: Iterable[str]) -> CbsimError:
    """Error for a name missing from a catalog or registry, listing the valid names and, when one
    is close, suggesting it: ``unknown gpu 'h100'; known: ...; did you mean 'h100-sxm'?``. Of
    several equally close names the ones ``known`` gives first are suggested (a catalog lists
    its most used entry of a family first: ``h100-sxm`` before ``h100-pcie``)."""
    given = list(known)
    names = sorted(given)
    hint = did_you_mean(name, given)
    return CbsimError(f"unknown {kind} {name!r}; known: {', '.join(names)}{hint}")


def canonical_name(name: str, known: Iterable[str]) -> str | None:
    """The catalog spelling of ``name`` compared without case (``H100-SXM`` -> ``h100-sxm``)."""
    folded = name.casefold()
    return next((k for k in known if k.casefold() == folded), None)


def squashed_name(name: str) -> str:
    """A name without case and punctuation: ``Llama3-8B`` and ``llama-3-8b`` both ``llama38b``."""
    return re.sub(r"[^0-9a-z]", "", name.casefold())


def close_names(name: str, known: Iterable[str], limit: int = 3) -> list[str]:
    """Catalog names ``name`` was probably meant to be, best first: those with the same letters
    and digits (``llama3-8b`` for ``llama-3-8b``) or that it begins (``h100`` for ``h100-sxm``),
    else difflib's close matches."""
    names = list(known)
    squashed = squashed_name(name)
    if not squashed:
        return []
    same = [k for k in names if squashed_name(k) == squashed]
    prefixed = [k for k in names if squashed_name(k).startswith(squashed) and k not in same]
    if same or prefixed:
        return [*same, *prefixed][:limit]
    lowered = {k.casefold(): k for k in names}
    return [lowered[k] for k in difflib.get_close_matches(name.casefold(), lowered, n=limit)]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'x'?`` (or ``'x' or 'y'``) for the close names, else an empty string."""
    close = close_names(name, known, limit=2)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


class UserError(click.ClickException):
    """On the command line: a :class:`CbsimError` (or another problem with user input) as one
    ``error:`` line on stderr, exit status 2. Every command raises this, so each behaves the same
    on its own (as tests call it) and inside the ``cbsim`` group."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        message = " ".join(self.format_message().splitlines())
        click.echo(f"error: {message}", file=file, err=file is None)
