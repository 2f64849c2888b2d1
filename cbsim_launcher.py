"""The ``cbsim`` command's entry point: outside the ``cbsim`` package, and importing nothing.

Importing the package and its command line (:mod:`cbsim.cli`) takes seconds (pandas, numba,
pyarrow, rich). A Ctrl-C in those seconds used to end in a traceback and death by SIGINT (the
console script imported ``cbsim.cli`` before any handler existed); here the import runs inside
the same handling as the command itself: ``interrupted`` on stderr, exit status 130.

The import also creates about 180,000 objects that live as long as the process. Python's cyclic
garbage collector would walk them again and again: while they are being created (a tenth of a
second of collections that free nothing), in every full collection of a run, and once more at
exit, when the interpreter's final collections took half a second after a capacity search. So
the collector is paused while importing and the imported objects are then frozen (``gc.freeze``:
kept out of every later collection), and what is alive when the command ends is frozen too (the
process is ending: its memory goes back with it). The command's own garbage is collected as
usual in between.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from typing import NoReturn

EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Import the command line and run it (:func:`cbsim.cli.main`); Ctrl-C while importing it
    exits as Ctrl-C while it runs does."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        from cbsim.cli import main as cli_main
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    try:
        cli_main(argv)
    finally:
        gc.freeze()
