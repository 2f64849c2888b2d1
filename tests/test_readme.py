"""Every ``cbsim ...`` command in the README's code blocks runs, as written, in a fresh folder.

Commands are read from README.md's code blocks (continuation lines joined, comments dropped, one
command per ``&&`` part) and run in-process with click's runner in a temporary folder holding a
copy of ``scenarios/``, as they would in a fresh clone: shell globs are expanded, ``> FILE`` is
written, a ``$ cbsim ...`` transcript must print what the README shows. What a command needs that
a user brings (their benchmark files, their scenario, the README's ``bad.yaml``) is made by
:func:`fresh_folder`. How each command runs is in :data:`PLANS`: slow ones are marked ``slow``;
fast runs are shortened (``--set workload.num_requests=...``) only where that leaves their meaning
alone, and a command reading an earlier one's output runs after it. A test checks that every README
command has a plan, so a new one cannot go untested.
"""

from __future__ import annotations

import glob
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cbsim.cli import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BENCHMARKS = ROOT / "tests" / "data" / "benchmarks"
#: vLLM ``bench serve --save-result`` files: a glob over them gives several (one not closed-loop)
BENCHMARK_FILES = ("vllm_closed_loop.json", "vllm_open_loop_detailed.json")
SHORT = ("--set", "workload.num_requests=100")


@dataclass(frozen=True)
class Command:
    """One ``cbsim`` command of the README: its code block, its text, what it must print."""

    block: int
    text: str
    expected: str | None = None  # a transcript's output (``$ cbsim ...`` followed by lines)


@dataclass(frozen=True)
class Plan:
    """How the README commands starting with ``prefix`` run here."""

    prefix: str
    slow: bool = False
    shorten: tuple[str, ...] = ()  # arguments added that shorten the run, not its meaning
    after: tuple[str, ...] = ()  # prefixes of earlier commands of its block whose output it reads


PLANS = (
    Plan("cbsim run scenarios/chat-llama3-8b-h100.yaml", shorten=SHORT),
    Plan("cbsim run scenarios/high-load-sarathi.yaml", shorten=SHORT),
    Plan("cbsim run bad.yaml"),
    Plan("cbsim run scenario.yaml", after=("cbsim calibrate e2e",), shorten=SHORT),
    Plan("cbsim validate "),
    Plan("cbsim catalog"),
    Plan("cbsim cost "),
    Plan("cbsim calibrate e2e "),
    Plan("cbsim calibrate report --e2e", slow=True),  # ~ a thousand benchmark simulations
    Plan("cbsim sweep ", slow=True),  # the 70B grid
    Plan("cbsim capacity ", slow=True),  # capacity searches: minutes each
    Plan("cbsim report ", slow=True, after=("cbsim capacity ",)),  # reads the plan
)


# --------------------------------------------------------------------------- reading the README


SHELL_BLOCKS = ("", "bash", "sh", "shell", "console")


def code_blocks(text: str) -> list[list[str]]:
    """The lines of every fenced code block that holds shell commands (not YAML or Python)."""
    blocks: list[list[str]] = []
    language: str | None = None  # None: outside a block
    lines: list[str] = []
    for line in text.splitlines():
        fence = re.match(r"^\s*```(\w*)", line)
        if fence is None:
            if language is not None:
                lines.append(line)
        elif language is None:
            language, lines = fence.group(1), []
        else:
            if language in SHELL_BLOCKS:
                blocks.append(lines)
            language = None
    return blocks


def block_commands(index: int, lines: list[str]) -> list[Command]:
    """The ``cbsim`` commands of one block, with a transcript's expected output."""
    joined: list[str] = []
    for line in lines:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line)
    commands: list[Command] = []
    for i, line in enumerate(joined):
        transcript = line.startswith("$ ")
        if transcript:
            line = line[2:]
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if not words or words[0] != "cbsim":
                continue
            expected = None
            if transcript:
                output = []
                for follow in joined[i + 1 :]:
                    if follow.startswith("$ "):
                        break
                    output.append(follow)
                expected = "\n".join(output).strip()
            commands.append(Command(index, shlex.join(words), expected))
    return commands


def readme_commands() -> list[Command]:
    blocks = code_blocks(README.read_text(encoding="utf-8"))
    return [c for i, lines in enumerate(blocks) for c in block_commands(i, lines)]


COMMANDS = readme_commands()


def plan_of(command: Command) -> Plan:
    """The command's plan; one without a plan runs as it is (and fails the check below)."""
    return next((p for p in PLANS if command.text.startswith(p.prefix)), Plan(command.text))


def _id(command: Command) -> str:
    return f"block{command.block}:{command.text[:70]}"


def _params() -> list[object]:
    return [
        pytest.param(c, marks=[pytest.mark.slow] if plan_of(c).slow else [], id=_id(c))
        for c in COMMANDS
    ]


# --------------------------------------------------------------------------- running one


def fresh_folder(folder: Path) -> None:
    """A fresh clone's working folder: ``scenarios/``, plus what the README's commands take
    from the user: benchmark results (``my-bench/*.json``, ``results/*.json``), a scenario of
    theirs (``scenario.yaml``) and the misspelt ``bad.yaml`` of the error example."""
    shutil.copytree(ROOT / "scenarios", folder / "scenarios")
    for name in ("my-bench", "results"):
        (folder / name).mkdir()
        for file in BENCHMARK_FILES:
            shutil.copy(BENCHMARKS / file, folder / name / file)
    shutil.copy(ROOT / "scenarios" / "chat-llama3-8b-h100.yaml", folder / "scenario.yaml")
    _per_request_log(folder / "my-run.csv")
    bad = yaml.safe_load((ROOT / "scenarios" / "chat-llama3-8b-h100.yaml").read_text())
    bad["scheduler"] = {"max_batch_sise": 256}
    (folder / "bad.yaml").write_text(yaml.safe_dump(bad, sort_keys=False), encoding="utf-8")


def _per_request_log(path: Path) -> None:
    """A user's per-request log (``my-run.csv``) in LMBenchmark's columns: a shipped A100 run."""
    from cbsim.calibration.per_request import shared_runs

    run = next(r for r in shared_runs("short-input") if r.qps == 0.5)
    requests = run.requests
    requests.assign(
        launch_time=1.7e9 + requests["send_s"],
        generation_tokens=requests["output_tokens"],
        ttft=requests["ttft_s"],
        generation_time=requests["e2e_s"] - requests["ttft_s"],
    )[["launch_time", "prompt_tokens", "generation_tokens", "ttft", "generation_time"]].to_csv(
        path, index=False
    )


def arguments(command: Command, folder: Path) -> tuple[list[str], Path | None]:
    """The command's arguments as a shell gives them (globs expanded, ``/tmp/...`` moved into
    ``folder``, the plan's shortening added) and the file its ``>`` writes, if any."""
    words = shlex.split(command.text)[1:]
    redirect: Path | None = None
    if ">" in words:
        at = words.index(">")
        redirect = folder / words[at + 1]
        words = words[:at] + words[at + 2 :]
    args: list[str] = []
    for word in words:
        if word.startswith("/tmp/"):
            word = str(folder / word.removeprefix("/tmp/"))
        matches = sorted(glob.glob(word, root_dir=folder)) if "*" in word else []
        args.extend(matches or [word])
    return args + list(plan_of(command).shorten), redirect


def run(command: Command, folder: Path) -> None:
    """Run one README command in ``folder`` and check it did what the README says."""
    args, redirect = arguments(command, folder)
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "120"})
    if command.expected is not None:
        assert result.stderr.strip() == command.expected, result.output
        return
    if redirect is not None:  # the shell opens it first, and does not create folders
        assert redirect.parent.is_dir(), f"{command.text}: {redirect.parent}: no such directory"
    assert result.exit_code == 0, f"{command.text}\n{result.output}"
    if redirect is not None:
        redirect.write_text(result.stdout, encoding="utf-8")


@pytest.mark.parametrize("command", _params())
def test_readme_command_runs(
    command: Command, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    plan = plan_of(command)
    earlier = COMMANDS[: COMMANDS.index(command)]
    for needed in plan.after:  # the last command of its block that makes its input
        source = [c for c in earlier if c.block == command.block and c.text.startswith(needed)]
        assert source, f"{command.text} needs an earlier {needed!r} in its block"
        run(source[-1], tmp_path)
    run(command, tmp_path)


def test_every_readme_command_has_a_plan_and_every_plan_a_command() -> None:
    assert len(COMMANDS) >= 10
    for command in COMMANDS:
        assert any(command.text.startswith(p.prefix) for p in PLANS), command.text
    for plan in PLANS:
        assert any(c.text.startswith(plan.prefix) for c in COMMANDS), plan.prefix
    # the quick start, the error example and the 70B plan are among them
    texts = [c.text for c in COMMANDS]
    assert "cbsim run scenarios/chat-llama3-8b-h100.yaml" in texts
    assert any(c.expected and c.expected.startswith("error: bad.yaml") for c in COMMANDS)
    assert any(t.startswith("cbsim capacity scenarios/capacity-70b-azure.yaml") for t in texts)


def test_fast_commands_are_not_changed_in_meaning() -> None:
    """Shortening only lowers a run's request count; every plan's extra arguments say so."""
    for plan in PLANS:
        assert plan.shorten in ((), SHORT), plan


def test_speculation_figure_is_what_the_command_measures() -> None:
    """The README's --compare-no-spec figures for spec-eagle-goodput, re-measured."""
    from cbsim.simulate import compare_no_spec, simulate

    text = " ".join(README.read_text(encoding="utf-8").split())
    found = re.search(
        r"spec-eagle-goodput\.yaml` measures (\d+\.\d+)× on mean TPOT at 10 req/s "
        r"\((\d+\.\d) ms against (\d+\.\d) ms without speculation\) and (\d+\.\d+)× on output "
        r"throughput",
        text,
    )
    assert found, "the README no longer states the spec-eagle-goodput figures"
    results = simulate(ROOT / "scenarios" / "spec-eagle-goodput.yaml")
    figures = compare_no_spec(results)
    baseline = results.no_spec_summary
    assert baseline is not None
    assert found.group(1) == f"{figures['speedup_tpot_mean']:.2f}"
    assert found.group(2) == f"{results.summary['tpot_mean_s'] * 1e3:.1f}"
    assert found.group(3) == f"{baseline['tpot_mean_s'] * 1e3:.1f}"
    assert found.group(4) == f"{figures['speedup_output_tokens_per_s']:.2f}"
