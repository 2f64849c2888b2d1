"""The console script's entry point (``cbsim_launcher``): the garbage collector left out of the
import's long-lived objects and of the interpreter's exit, and left as the caller had it; a run
after it importing neither numba's registries nor ``scipy.linalg``; the process ended without
the interpreter's teardown, its output flushed, its exit handlers run and its exit status kept."""

from __future__ import annotations

import subprocess
import sys

import cbsim_launcher

PROBE = """
import gc, sys
import cbsim_launcher
{before}
try:
    cbsim_launcher.main(["--version"])
except SystemExit as end:
    print(end.code, gc.isenabled(), gc.get_freeze_count(), "cbsim.cli.commands" in sys.modules)
"""


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` in a fresh interpreter, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )


def _probe(before: str = "") -> list[str]:
    done = _python(PROBE.format(before=before))
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-4:]


def test_the_imported_objects_are_frozen_and_collection_goes_on() -> None:
    code, enabled, frozen, imported = _probe()
    assert code == "0" and imported == "True"
    assert enabled == "True"
    assert int(frozen) > 50_000  # pandas, numba, pydantic and cbsim's own modules


def test_a_caller_that_paused_collection_finds_it_paused() -> None:
    _, enabled, _, _ = _probe("gc.disable()")
    assert enabled == "False"


BLAS_PROBE = """
import sys
import cbsim_launcher
try:
    cbsim_launcher.main(["--version"])
except SystemExit:
    pass
import yaml
from cbsim.run.simulate import simulate
with open({scenario!r}) as file:
    data = yaml.safe_load(file)
data["workload"]["num_requests"] = 20
done = simulate(data)
print(len(done.requests), "scipy.linalg" in sys.modules, "numba.np.arraymath" in sys.modules)
"""


def test_a_run_after_the_launcher_imports_neither_numbas_registries_nor_scipy_linalg() -> None:
    done = _python(BLAS_PROBE.format(scenario="scenarios/chat-llama3-8b-h100.yaml"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:] == ["20", "False", "False"]


JSON_SEARCH = """
import sys
import cbsim_launcher
try:
    cbsim_launcher.main([
        "capacity", "scenarios/chat-llama3-8b-h100.yaml", "--slo", "ttft_p99_s=2",
        "--target-rps", "4", "--window-s", "20", "--seeds", "1", "--json", "--workers", "1",
    ])
except SystemExit as end:
    print(end.code, any(name.split(".")[0] == "rich" for name in sys.modules), file=sys.stderr)
"""


def test_a_command_that_prints_no_table_does_not_import_rich() -> None:
    """rich (some 30 ms of a process's start) is imported where a table or bar is printed."""
    done = _python(JSON_SEARCH)
    assert done.stderr.split()[-2:] == ["0", "False"], done.stderr[-2000:]
    assert '"max_rate_rps"' in done.stdout


CONSOLE = """
import atexit, sys
import cbsim_launcher
atexit.register(lambda: print("exit handlers ran", file=sys.stderr))
cbsim_launcher.console()
"""


def _console(*args: str) -> subprocess.CompletedProcess[str]:
    return _python(CONSOLE, *args)


def test_the_console_script_flushes_its_output_and_runs_the_exit_handlers() -> None:
    done = _console("--version")
    assert done.returncode == 0
    assert "cbsim" in done.stdout
    assert "exit handlers ran" in done.stderr


def test_the_console_script_keeps_the_command_s_exit_status() -> None:
    done = _console("run", "no-such-scenario.yaml")
    assert done.returncode == 2
    assert "error" in done.stderr and "exit handlers ran" in done.stderr


def test_exit_statuses_are_the_interpreter_s() -> None:
    assert cbsim_launcher._exit_status(None) == 0
    assert cbsim_launcher._exit_status(3) == 3
    assert cbsim_launcher._exit_status(256 + 2) == 2
    assert cbsim_launcher._exit_status("bye") == 1


def test_a_thread_still_running_gets_the_interpreter_s_own_exit() -> None:
    code = (
        "import threading, time, cbsim_launcher\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), print('thread done'))).start()\n"
        "cbsim_launcher.console()\n"
    )
    done = _python(code, "--version")
    assert done.returncode == 0 and "thread done" in done.stdout
