"""Ctrl-C: how an interrupted command ends.

A user who presses Ctrl-C gets one line, ``interrupted``, and exit status 130 (128 + SIGINT, as
shells report it), never a traceback: not while Python code runs (a ``KeyboardInterrupt``), and
not while a compiled (numba) kernel runs either, which returns with the interrupt set and so
surfaces as a ``SystemError`` caused by it.
"""

from __future__ import annotations

from typing import IO, Any

import click

__all__ = ["EXIT_INTERRUPTED", "Interrupted", "caused_by_interrupt"]

EXIT_INTERRUPTED = 130


class Interrupted(click.ClickException):
    """Ctrl-C: ``interrupted`` on stderr, exit 130."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self) -> None:
        super().__init__("interrupted")

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo("interrupted", file=file, err=file is None)


def caused_by_interrupt(err: BaseException) -> bool:
    """Whether ``err`` stands for a Ctrl-C: a compiled (numba) kernel interrupted while it runs
    returns with the KeyboardInterrupt set, which Python reports as a ``SystemError`` caused by
    it (as any C extension would)."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False
