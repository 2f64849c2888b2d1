"""The ``cbsim`` command's entry point: outside the ``cbsim`` package, and importing nothing.

Importing the package and its command line (:mod:`cbsim.cli`) takes seconds (pandas, numba,
pyarrow, rich). A Ctrl-C in those seconds used to end in a traceback and death by SIGINT (the
console script imported ``cbsim.cli`` before any handler existed); here the import runs inside
the same handling as the command itself: ``interrupted`` on stderr, exit status 130.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Import the command line and run it (:func:`cbsim.cli.main`); Ctrl-C while importing it
    exits as Ctrl-C while it runs does."""
    try:
        from cbsim.cli import main as cli_main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    cli_main(argv)
