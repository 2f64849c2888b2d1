"""The rich console cbsim prints its tables on.

Rich lays tables out for 80 columns whenever output is not a terminal (a pipe, a file, CI), so a
summary piped to ``less`` or a file came out squeezed, its cells wrapped into slivers. Here a
console that is not a terminal is :data:`PIPE_WIDTH` wide (``COLUMNS`` still wins when set);
tables only take the width their cells need, so nothing is padded.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


__all__ = ["PIPE_WIDTH", "wide_console"]

PIPE_WIDTH = 200
"""Columns a console that is not a terminal lays tables out for."""


def wide_console(*, stderr: bool = False, record: bool = False) -> Console:
    """A console: a terminal's own width, else ``COLUMNS`` or :data:`PIPE_WIDTH`."""
    from rich.console import Console  # rich's import is a command's to pay only when it prints

    console = Console(stderr=stderr, record=record)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=stderr, record=record, width=PIPE_WIDTH)
