"""Every ``cbsim ...`` command in the README's and the user guide's code blocks runs, as written,
in a fresh folder; every relative link in them leads somewhere; the outputs reference names what a
run writes.

Commands are read from the code blocks of README.md and of every page of ``docs/`` (continuation
lines joined, comments dropped, one command per ``&&`` part) and run in-process with click's runner
in a temporary folder holding a copy of ``scenarios/``, as they would in a fresh clone: shell globs
are expanded, ``> FILE`` is written, a ``$ cbsim ...`` transcript must print what the page shows.
What a command needs that a user brings (their benchmark files, their scenario, the ``bad.yaml``
of the error example) is made by :func:`fresh_folder`. How each command runs is in :data:`PLANS`:
slow ones are marked ``slow``; fast runs are shortened (``--set workload.num_requests=...``) only
where that leaves their meaning alone, and a command reading an earlier one's output runs after it.
A test checks that every command has a plan, so a new one cannot go untested. A command that
appears on several pages (the README's cheat sheet repeats the guide's) runs once.
"""

from __future__ import annotations

import glob
import json
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cbsim.cli.commands import cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDE = tuple(sorted((ROOT / "docs").glob("*.md")))
DOCUMENTS = (README, *GUIDE)
SPECULATION_PAGE = ROOT / "docs" / "speculative-decoding.md"
OUTPUTS_PAGE = ROOT / "docs" / "outputs.md"
BENCHMARKS = ROOT / "tests" / "data" / "benchmarks"
#: vLLM ``bench serve --save-result`` files: a glob over them gives several (one not closed-loop)
BENCHMARK_FILES = ("vllm_closed_loop.json", "vllm_open_loop_detailed.json")
SHORT = ("--set", "workload.num_requests=100")


@dataclass(frozen=True)
class Command:
    """One ``cbsim`` command of a page: where it is, its text, what it must print."""

    document: str  # the page, relative to the repository root
    block: int  # its code block's index on the page
    text: str
    expected: str | None = None  # a transcript's output (``$ cbsim ...`` followed by lines)


@dataclass(frozen=True)
class Plan:
    """How the commands starting with ``prefix`` run here."""

    prefix: str
    slow: bool = False
    shorten: tuple[str, ...] = ()  # arguments added that shorten the run, not its meaning
    after: tuple[str, ...] = ()  # prefixes of earlier commands of its block whose output it reads


PLANS = (
    Plan("cbsim run scenarios/chat-llama3-8b-h100.yaml", shorten=SHORT),
    Plan("cbsim run scenarios/high-load-sarathi.yaml", shorten=SHORT),
    Plan("cbsim run scenarios/spec-eagle-goodput.yaml", slow=True),  # and again without speculation
    Plan("cbsim run bad.yaml"),
    Plan("cbsim run scenario.yaml", after=("cbsim calibrate e2e",), shorten=SHORT),
    Plan("cbsim validate "),
    Plan("cbsim catalog"),
    Plan("cbsim cost "),
    Plan("cbsim calibrate e2e "),
    Plan("cbsim bench "),
    Plan("cbsim calibrate report --e2e", slow=True),  # ~ a thousand benchmark simulations
    Plan("cbsim sweep ", slow=True),  # the 70B grid
    Plan("cbsim capacity ", slow=True),  # capacity searches: minutes each
    Plan("cbsim plan ", slow=True),  # every layout searched: tens of seconds
    Plan("cbsim report ", slow=True, after=("cbsim capacity ",)),  # reads the plan
)


# --------------------------------------------------------------------------- reading the pages


SHELL_BLOCKS = ("", "bash", "sh", "shell", "console")
FENCE = re.compile(r"^\s*```(\w*)")


def code_blocks(text: str) -> list[list[str]]:
    """The lines of every fenced code block that holds shell commands (not YAML or Python)."""
    blocks: list[list[str]] = []
    language: str | None = None  # None: outside a block
    lines: list[str] = []
    for line in text.splitlines():
        fence = FENCE.match(line)
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


def block_commands(document: str, index: int, lines: list[str]) -> list[Command]:
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
            commands.append(Command(document, index, shlex.join(words), expected))
    return commands


def page_commands(page: Path) -> list[Command]:
    name = page.relative_to(ROOT).as_posix()
    blocks = code_blocks(page.read_text(encoding="utf-8"))
    return [c for i, lines in enumerate(blocks) for c in block_commands(name, i, lines)]


COMMANDS = [c for page in DOCUMENTS for c in page_commands(page)]


def plan_of(command: Command) -> Plan:
    """The command's plan; one without a plan runs as it is (and fails the check below)."""
    return next((p for p in PLANS if command.text.startswith(p.prefix)), Plan(command.text))


def prerequisites(command: Command) -> list[Command]:
    """The commands its plan says it reads the output of: for each, the last one of its block
    before it."""
    earlier = COMMANDS[: COMMANDS.index(command)]
    same_block = [c for c in earlier if (c.document, c.block) == (command.document, command.block)]
    found = []
    for needed in plan_of(command).after:
        sources = [c for c in same_block if c.text.startswith(needed)]
        if sources:
            found.append(sources[-1])
    return found


def _distinct(commands: list[Command]) -> list[Command]:
    """Each command once: the same text, expected output and prerequisites run alike wherever
    they are written."""
    seen: set[tuple[object, ...]] = set()
    distinct = []
    for command in commands:
        key = (command.text, command.expected, tuple(p.text for p in prerequisites(command)))
        if key not in seen:
            seen.add(key)
            distinct.append(command)
    return distinct


DISTINCT = _distinct(COMMANDS)


def _id(command: Command) -> str:
    return f"{Path(command.document).name}:block{command.block}:{command.text[:70]}"


def _params() -> list[object]:
    return [
        pytest.param(c, marks=[pytest.mark.slow] if plan_of(c).slow else [], id=_id(c))
        for c in DISTINCT
    ]


# --------------------------------------------------------------------------- running one


def fresh_folder(folder: Path) -> None:
    """A fresh clone's working folder: ``scenarios/``, plus what the pages' commands take
    from the user: benchmark results (``my-bench/*.json``, ``results/*.json``), a scenario of
    theirs (``scenario.yaml``), a per-request log (``my-run.csv``) and the misspelt ``bad.yaml``
    of the error example."""
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
    from cbsim.studies.calibration.per_request import shared_runs

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
    """Run one command in ``folder`` and check it did what its page says."""
    args, redirect = arguments(command, folder)
    result = CliRunner().invoke(cli, args, env={"COLUMNS": "120"})
    if command.expected is not None:
        assert result.stderr.strip() == command.expected, result.output
        return
    if redirect is not None:  # the shell opens it first, and does not create folders
        assert redirect.parent.is_dir(), f"{command.text}: {redirect.parent}: no such directory"
    assert result.exit_code == 0, f"{command.document}: {command.text}\n{result.output}"
    if redirect is not None:
        redirect.write_text(result.stdout, encoding="utf-8")


@pytest.fixture(scope="module")
def fresh_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`fresh_folder` made once; each command runs in a copy of it."""
    template = tmp_path_factory.mktemp("fresh")
    fresh_folder(template)
    return template


@pytest.mark.parametrize("command", _params())
def test_command_runs(
    command: Command, fresh_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(fresh_template, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    for source in prerequisites(command):  # the last command of its block that makes its input
        run(source, tmp_path)
    run(command, tmp_path)


def test_every_command_has_a_plan_and_every_plan_a_command() -> None:
    assert len(COMMANDS) >= 10
    for command in COMMANDS:
        assert any(command.text.startswith(p.prefix) for p in PLANS), (
            f"{command.document}: {command.text}"
        )
        needed = plan_of(command).after
        assert len(prerequisites(command)) == len(needed), (
            f"{command.document}: {command.text} needs an earlier {needed} in its block"
        )
    for plan in PLANS:
        assert any(c.text.startswith(plan.prefix) for c in COMMANDS), plan.prefix
    # the quick start, the error example and the 70B plan are among them
    texts = [c.text for c in COMMANDS]
    assert "cbsim run scenarios/chat-llama3-8b-h100.yaml" in texts
    assert any(c.expected and c.expected.startswith("error: bad.yaml") for c in COMMANDS)
    assert any(t.startswith("cbsim capacity scenarios/capacity-70b-azure.yaml") for t in texts)
    # the guide's pages are read, not only the README
    assert {c.document for c in COMMANDS} >= {"README.md", "docs/scenarios.md"}


def test_fast_commands_are_not_changed_in_meaning() -> None:
    """Shortening only lowers a run's request count; every plan's extra arguments say so."""
    for plan in PLANS:
        assert plan.shorten in ((), SHORT), plan


def test_readme_keeps_its_set_up_commands() -> None:
    """The set-up section shows the project's two set-up commands verbatim (``.ci/run`` runs the
    second)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Set-up", 1)[1].split("\n## ", 1)[0]
    lines = {line.strip() for block in code_blocks(section) for line in block}
    assert "pip install -e . && cbsim run scenarios/chat-llama3-8b-h100.yaml" in lines
    assert 'pip install -e ".[test]" && pytest' in lines


# --------------------------------------------------------------------------- links


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose(text: str) -> str:
    """The page without its fenced code blocks and inline code, where links are not links."""
    kept: list[str] = []
    inside = False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered."""
    found: set[str] = set()
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if inside or heading is None:
            continue
        base = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        anchor, n = base, 0
        while anchor in found:
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


def links(page: Path) -> list[str]:
    return LINK.findall(prose(page.read_text(encoding="utf-8")))


@pytest.mark.parametrize("page", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    """Every relative link (and image) names a file or folder of the repository, and an anchor
    in a page names one of its headings."""
    broken = []
    for target in links(page):
        if SCHEME.match(target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_guide_page_is_linked_from_the_readme() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    missing = [p.relative_to(ROOT).as_posix() for p in GUIDE if p.resolve() not in linked]
    assert not missing, f"README.md links none of {missing}"


# --------------------------------------------------------------------------- the outputs page


def documented(section: str) -> tuple[set[str], set[str]]:
    """The names a section of the outputs page documents: (every name, the names every run
    has). Names are the backquoted words of a table's first column; a row whose meaning starts
    with "only" or says "... only:", and every row of a table after "(only those runs)", is of
    some runs only."""
    text = OUTPUTS_PAGE.read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    every: set[str] = set()
    always: set[str] = set()
    conditional_table = False
    for line in body.splitlines():
        if "(only those runs)" in line:
            conditional_table = True
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or set(cells[0]) <= set("-: "):
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        every.update(names)
        meaning = cells[1]
        if not (conditional_table or meaning.startswith("only") or " only:" in meaning):
            always.update(names)
    return every, always


def _matches(name: str, pattern: str) -> bool:
    regex = re.escape(pattern).replace(r"\{i\}", r"\d+").replace(r"\*", r"[a-z0-9_]+")
    return re.fullmatch(regex, name) is not None


@pytest.fixture(scope="module")
def disaggregated_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small disaggregated run written as ``cbsim run`` writes it: the columns every run has
    and those of disaggregation."""
    from cbsim.run.loading import load_scenario
    from cbsim.run.simulate import simulate

    scenario = load_scenario(
        ROOT / "scenarios" / "disaggregated-70b-h100.yaml", {"workload.num_requests": 8}
    )
    return simulate(scenario).write(tmp_path_factory.mktemp("outputs") / "run")


@pytest.mark.parametrize(
    "section",
    [
        "requests.parquet",
        "iterations.parquet",
        "timeseries.parquet",
        "summary.json",
        "run_info.json",
    ],
)
def test_outputs_reference_names_what_a_run_writes(section: str, disaggregated_run: Path) -> None:
    """Every column and key a run writes is on the outputs page, and every one the page says
    every run has is there."""
    import pandas as pd

    file = disaggregated_run / section
    if file.suffix == ".parquet":
        written = list(pd.read_parquet(file).columns)
    else:
        written = list(json.loads(file.read_text(encoding="utf-8")))
    every, always = documented(section)
    undocumented = [n for n in written if not any(_matches(n, p) for p in every)]
    assert not undocumented, f"docs/outputs.md, {section}: {undocumented} not documented"
    missing = [p for p in always if not any(_matches(n, p) for n in written)]
    assert not missing, f"docs/outputs.md, {section}: {missing} not written by a run"


def test_outputs_reference_lists_every_result_file() -> None:
    from cbsim.common.output_folders import MARKER
    from cbsim.run.results import COMPARISON_FILES, RESULT_FILES

    text = OUTPUTS_PAGE.read_text(encoding="utf-8")
    for name in (*RESULT_FILES, *COMPARISON_FILES, MARKER):
        assert f"| `{name}` |" in text, name


# --------------------------------------------------------------------------- figures


def test_speculation_figure_is_what_the_command_measures() -> None:
    """The guide's --compare-no-spec figures for spec-eagle-goodput, re-measured."""
    from cbsim.run.simulate import compare_no_spec, simulate

    text = " ".join(SPECULATION_PAGE.read_text(encoding="utf-8").split())
    found = re.search(
        r"spec-eagle-goodput\.yaml` measures (\d+\.\d+)× on mean TPOT at 10 req/s "
        r"\((\d+\.\d) ms against (\d+\.\d) ms without speculation\) and (\d+\.\d+)× on output "
        r"throughput",
        text,
    )
    assert found, "docs/speculative-decoding.md no longer states the spec-eagle-goodput figures"
    results = simulate(ROOT / "scenarios" / "spec-eagle-goodput.yaml")
    figures = compare_no_spec(results)
    baseline = results.no_spec_summary
    assert baseline is not None
    assert found.group(1) == f"{figures['speedup_tpot_mean']:.2f}"
    assert found.group(2) == f"{results.summary['tpot_mean_s'] * 1e3:.1f}"
    assert found.group(3) == f"{baseline['tpot_mean_s'] * 1e3:.1f}"
    assert found.group(4) == f"{figures['speedup_output_tokens_per_s']:.2f}"
