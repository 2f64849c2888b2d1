"""The console script's entry point (``cbsim_launcher``): the garbage collector left out of the
import's long-lived objects and of the interpreter's exit, and left as the caller had it."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import gc, sys
import cbsim_launcher
{before}
try:
    cbsim_launcher.main(["--version"])
except SystemExit as end:
    print(end.code, gc.isenabled(), gc.get_freeze_count(), "cbsim.cli" in sys.modules)
"""


def _probe(before: str = "") -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(before=before)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.split()[-4:]


def test_the_imported_objects_are_frozen_and_collection_goes_on() -> None:
    code, enabled, frozen, imported = _probe()
    assert code == "0" and imported == "True"
    assert enabled == "True"
    assert int(frozen) > 50_000  # pandas, numba, pydantic and cbsim's own modules


def test_a_caller_that_paused_collection_finds_it_paused() -> None:
    _, enabled, _, _ = _probe("gc.disable()")
    assert enabled == "False"
