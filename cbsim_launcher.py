"""The ``cbsim`` command's entry point: outside the ``cbsim`` package, and importing nothing.

Importing the package and its command line (:mod:`cbsim.cli.commands`) takes seconds (pandas, numba,
pyarrow, rich). A Ctrl-C in those seconds used to end in a traceback and death by SIGINT (the
console script imported ``cbsim.cli.commands`` before any handler existed); here the import runs inside
the same handling as the command itself: ``interrupted`` on stderr, exit status 130.

The import also creates about 180,000 objects that live as long as the process. Python's cyclic
garbage collector would walk them again and again: while they are being created (a tenth of a
second of collections that free nothing), in every full collection of a run, and once more at
exit, when the interpreter's final collections took half a second after a capacity search. So
the collector is paused while importing and the imported objects are then frozen (``gc.freeze``:
kept out of every later collection), and what is alive when the command ends is frozen too (the
process is ending: its memory goes back with it). The command's own garbage is collected as
usual in between.

cbsim's kernels load from numba's cache without numba's compiler set-up
(:mod:`cbsim.cost.kernel_loading`), so a command whose kernels are cached imports neither numba's
registries of implementations nor ``scipy.linalg``, which one of them (``numba.np.arraymath``)
imports to probe for a BLAS.

When a command found cbsim's kernels missing from numba's cache (a fresh install: it compiled
them, or priced in Python without them), the console script then starts priming the cache for the kernels other runs use, in a detached
background process (:mod:`cbsim.run.kernel_priming`), so that the next run, whatever its scenario,
loads them rather than compiling.

The console script (:func:`console`) ends the process once the command's exit handlers have run
and its output is flushed, without the interpreter's teardown (every module and object freed one
by one: some 70 ms after a capacity search, for memory the process gives back anyway); when a
thread the interpreter would wait for is still alive, it exits the usual way.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Import the command line and run it (:func:`cbsim.cli.commands.main`); Ctrl-C while importing it
    exits as Ctrl-C while it runs does."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        from cbsim.cli.commands import main as cli_main
    except KeyboardInterrupt:
        _interrupted()
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    try:
        cli_main(argv)
    except KeyboardInterrupt:  # outside the command's own handling (between its steps)
        _interrupted()
    finally:
        gc.freeze()


def _interrupted() -> NoReturn:
    print("interrupted", file=sys.stderr)
    sys.exit(EXIT_INTERRUPTED)


def console() -> NoReturn:
    """The ``cbsim`` console script: :func:`main`, then the end of the process without the
    interpreter's teardown (see the module docstring); the exit status is :func:`main`'s."""
    try:
        try:
            main()
        except KeyboardInterrupt:  # after main's handler was left (its last flush, ...)
            _interrupted()
    except SystemExit as end:
        if _other_threads():  # the interpreter's exit waits for them: let it
            raise
        status = _exit_status(end.code)
    if status == 0:
        _prime_after_a_cold_run()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or its reader went away
            status = status or 120  # as the interpreter's own exit reports an unflushed stream
    os._exit(status)


def _prime_after_a_cold_run() -> None:
    """When the command found numba's cache cold (a fresh install: it compiled kernels, or priced
    in Python and left them uncompiled), start priming
    the cache for the kernels other runs use, in the background
    (:mod:`cbsim.run.kernel_priming`); never fails the command."""
    if "cbsim.cli.commands" not in sys.modules:
        return
    try:
        from cbsim.run import kernel_priming

        if kernel_priming.needs_priming():
            kernel_priming.start_in_background()
    except Exception:  # priming is an optimisation: the command's own outcome stands
        return


def _other_threads() -> bool:
    """Whether a thread other than the main one is alive that the interpreter's exit would wait
    for (not a daemon)."""
    main_thread = threading.main_thread()
    return any(t is not main_thread and not t.daemon for t in threading.enumerate())


def _exit_status(code: object) -> int:
    """The process's exit status for ``SystemExit(code)``, as the interpreter makes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1
