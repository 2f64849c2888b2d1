"""User-facing errors.

Anything a user can get wrong (a scenario file, a field, a trace, a name that is not in a catalog)
raises :class:`CbsimError`. The command line turns it into one line on stderr and exit status 2;
the Python API lets it propagate so notebooks show the same message. Internal bugs stay ordinary
exceptions with tracebacks.
"""

from __future__ import annotations

from typing import IO, Any

import click


class CbsimError(Exception):
    """A problem with user input, stated as ``source: field: reason``."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.message = message
        self.source = source
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:
        parts = [p for p in (self.source, self.field) if p]
        return ": ".join([*parts, self.message])

    def located(self, source: str | None = None, field: str | None = None) -> CbsimError:
        """The same error with a source file and/or an outer field path added."""
        new_field = self.field
        if field:
            new_field = f"{field}.{self.field}" if self.field else field
        return CbsimError(self.message, source=self.source or source, field=new_field)


def unknown_name(kind: str, name: str, known: list[str] | tuple[str, ...]) -> CbsimError:
    """Error for a name missing from a catalog or registry, listing the valid names."""
    return CbsimError(f"unknown {kind} {name!r}; known: {', '.join(sorted(known))}")


class UserError(click.ClickException):
    """On the command line: a :class:`CbsimError` (or another problem with user input) as one
    ``error:`` line on stderr, exit status 2. Every command raises this, so each behaves the same
    on its own (as tests call it) and inside the ``cbsim`` group."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        message = " ".join(self.format_message().splitlines())
        click.echo(f"error: {message}", file=file, err=file is None)
