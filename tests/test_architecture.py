"""The house rules of docs/architecture.md: a top level that maps the simulator, packages in layers
that import only downward, modules small enough to read, and no import circles.

Imports are read from the sources (ast), at module level and inside functions alike (a circle
through a function-local import is still a circle: the two modules cannot be understood or
changed apart), and under ``if TYPE_CHECKING:`` too (a type-only circle is still two concepts
that must name each other: a ``typing.Protocol`` in the lower module breaks it). The package
``cbsim`` itself (its ``__init__`` re-exports the API) is left out of the graph.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cbsim"
MAX_LINES = 900
ENGINE_CORE_MAX_LINES = 500  # the engine package's own modules (the loop and what it drives)
# modules that are data, exempt from MAX_LINES: the model catalog (one entry per published model)
DATA_TABLES: frozenset[str] = frozenset({"cbsim.catalog.model_catalog"})
MAX_TOP_LEVEL_ENTRIES = 12
# the packages of cbsim, lowest first: a package may import its own modules and those of the
# packages before it, never one after it (docs/architecture.md draws them)
LAYERS: tuple[str, ...] = (
    "common",
    "catalog",
    "cost",
    "schema",
    "workload",
    "memory",
    "outputs",
    "engine",
    "run",
    "studies",
    "cli",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imported(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return []


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while stack:
        node = stack.pop()
        found.update(t for t in _imported(node, package) if t in known and t != name)
        stack.extend(ast.iter_child_nodes(node))
    return found - {"cbsim"}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items() if name != "cbsim"}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return components


def test_no_module_is_over_the_line_limit() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if name not in DATA_TABLES
        and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them by concept): {long}"


def test_no_import_circles() -> None:
    circles = _circles(_graph())
    assert not circles, f"modules that import each other, directly or through others: {circles}"


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def _package(module: str) -> str:
    return module.split(".")[1]


def _upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...]) -> list[str]:
    """Every import of a module by a module of a lower package (by ``layers``), as lines."""
    rank = {name: i for i, name in enumerate(layers)}
    return sorted(
        f"{module} ({_package(module)}) imports {target} ({_package(target)})"
        for module, targets in graph.items()
        for target in targets
        if rank[_package(target)] > rank[_package(module)]
    )


def test_the_top_level_is_the_public_api_and_the_packages() -> None:
    entries = sorted(
        p.name for p in PACKAGE.iterdir() if p.name != "__pycache__" and not p.name.startswith(".")
    )
    assert len(entries) <= MAX_TOP_LEVEL_ENTRIES, entries
    modules = [name for name in entries if name.endswith(".py")]
    assert modules == ["__init__.py"], f"modules outside a concept package: {modules}"
    assert sorted(set(entries) - {"__init__.py"}) == sorted(LAYERS)


def test_every_package_has_a_layer_and_says_what_it_may_import() -> None:
    for position, name in enumerate(LAYERS):
        init = PACKAGE / name / "__init__.py"
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert f"Layer {position}" in docstring, (
            f"cbsim.{name}'s docstring names no layer {position}"
        )


def test_no_package_imports_a_higher_one() -> None:
    upward = _upward_imports(_graph(), LAYERS)
    assert not upward, "imports against the layers (move the type down, or name a Protocol):\n" + (
        "\n".join(upward)
    )


def test_the_layer_check_finds_an_upward_import() -> None:
    graph = {"cbsim.a.x": {"cbsim.b.y", "cbsim.a.z"}, "cbsim.b.y": set(), "cbsim.a.z": set()}
    assert _upward_imports(graph, ("b", "a")) == []
    assert _upward_imports(graph, ("a", "b")) == ["cbsim.a.x (a) imports cbsim.b.y (b)"]


def test_the_engine_core_is_small() -> None:
    long = {
        path.name: n
        for path in sorted((PACKAGE / "engine").glob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > ENGINE_CORE_MAX_LINES
    }
    assert not long, f"engine modules over {ENGINE_CORE_MAX_LINES} lines: {long}"


def test_the_public_api_is_where_the_contract_says() -> None:
    import cbsim
    from cbsim.cost import CostModel

    assert callable(cbsim.load_scenario) and callable(cbsim.simulate)
    assert cbsim.Results.__name__ == "Results" and CostModel.__name__ == "CostModel"
