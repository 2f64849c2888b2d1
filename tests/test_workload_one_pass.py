"""Workload generation stays one pass (issue 40): :mod:`cbsim.workload.build` reads the scenario
once and hands each module below it only its own part, so none of them imports it back, takes the
:class:`~cbsim.schema.scenario.Scenario`, or reaches another generation module through it.

Read from the sources (ast): imports anywhere in a module (function-local ones included), and
every function's parameters, by annotation and by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKLOAD = Path(__file__).resolve().parents[1] / "cbsim" / "workload"
ENTRY = WORKLOAD / "build.py"
# the generation modules below the entry: each takes its own spec, a seed or a stream
BELOW = sorted(p for p in WORKLOAD.glob("*.py") if p != ENTRY)
# the request sources send what was drawn; they never build it
SOURCES = sorted((WORKLOAD / "sources").glob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _imported(tree: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _scenario_parameters(tree: ast.Module) -> list[str]:
    """Functions with a parameter named ``scenario`` or annotated as a Scenario."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        arguments = node.args
        for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            if arg.arg == "scenario" or "Scenario" in annotation:
                found.append(f"{getattr(node, 'name', 'lambda')}({arg.arg})")
    return found


@pytest.mark.parametrize("path", BELOW + SOURCES, ids=lambda p: p.relative_to(WORKLOAD).as_posix())
def test_nothing_below_the_entry_imports_it(path: Path) -> None:
    assert "cbsim.workload.build" not in _imported(_tree(path))


@pytest.mark.parametrize("path", BELOW, ids=lambda p: p.relative_to(WORKLOAD).as_posix())
def test_only_the_entry_reads_the_scenario(path: Path) -> None:
    tree = _tree(path)
    assert "cbsim.schema.scenario" not in _imported(tree)
    assert _scenario_parameters(tree) == []


def test_the_entry_is_where_the_scenario_is_read() -> None:
    """The check above would pass vacuously if nothing took the scenario: the entry does."""
    assert "read_workload(scenario)" in _scenario_parameters(_tree(ENTRY))
    assert "build_workload(scenario)" in _scenario_parameters(_tree(ENTRY))


@pytest.mark.parametrize("module", ["sessions", "prompt_pool", "lengths"])
def test_drawing_parts_never_draws_arrivals(module: str) -> None:
    """Sessions and a prompt pool draw their parts' lengths; their start times are handed in."""
    assert "cbsim.workload.arrivals" not in _imported(_tree(WORKLOAD / f"{module}.py"))
