"""Ctrl-C at any point of a command: one ``interrupted`` line on stderr, exit status 130, no
traceback. The interrupt is delivered at a chosen point (a real SIGINT sent by an import hook, or
the error a compiled kernel returns when one lands inside it), never by racing a timer."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "chat-llama3-8b-h100.yaml"

# A real SIGINT sent to the process itself when a module is imported.
SIGINT_ON_IMPORT = """
import importlib.abc, os, signal, sys
class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupt())
import cbsim_launcher
cbsim_launcher.console()
"""

# numba's compiled wrapper, interrupted while the kernel runs, returns with the KeyboardInterrupt
# set; Python then raises SystemError("... returned a result with an exception set") caused by it.
INTERRUPTED_KERNEL = """
import sys
from pathlib import Path
import cbsim_launcher
from cbsim.cost.kernel_call import KernelCall
REACHED = Path(sys.argv[-1])

def interrupted(self, *args):
    REACHED.write_text("kernel reached")
    error = SystemError("<built-in method decode_run_kernel> returned a result with an exception set")
    raise error from KeyboardInterrupt()

KernelCall.__call__ = interrupted
sys.argv = sys.argv[:-1]
cbsim_launcher.console()
"""


def _default_sigint() -> None:
    """In the child: Ctrl-C as at a terminal (a child inherits an ignored SIGINT, and a test
    process may hold one: capacity and sweep workers ignore it while they start)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_default_sigint,
    )


def _assert_interrupted(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n"


def test_ctrl_c_while_the_command_line_is_imported_exits_130() -> None:
    _assert_interrupted(_python(SIGINT_ON_IMPORT.format(module="cbsim.cli.commands"), "--version"))


def test_ctrl_c_inside_a_compiled_decode_run_exits_130(tmp_path: Path) -> None:
    reached = tmp_path / "reached"
    args = ("run", str(SCENARIO), "--quiet", "--out", str(tmp_path / "out"), str(reached))
    done = _python(INTERRUPTED_KERNEL, *args)
    assert reached.exists()  # the interrupt came from the kernel, not before it
    _assert_interrupted(done)
    assert not (tmp_path / "out").exists()
