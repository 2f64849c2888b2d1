"""The notebooks in notebooks/: committed without outputs, and each runs top to bottom.

Each notebook is executed with nbclient in a fresh ``python3`` kernel whose working directory is
notebooks/ (as under Jupyter), with a time limit per cell; any cell raising fails the test. The
executed copy is kept in memory only, so the files on disk keep no outputs. Measured on the 2-core
development machine (kernel start included): 01 to 07 (7 to 10, 10, 16, 21, 22, 68 and 12 s) are
``slow`` (``pytest -m slow``; ``.ci/run`` runs 01 and 02 in its second stage), as :data:`DEFAULT_RUN`
says: the default run keeps to its 5 minutes, and what it checks of the notebooks is that each is
valid and committed without outputs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = {
    "01-quick-start.ipynb",
    "02-speculative-decoding-under-load.ipynb",
    "03-capacity-plan.ipynb",
    "04-prefix-caching.ipynb",
    "05-mixture-of-experts.ipynb",
    "06-disaggregated-prefill-decode.ipynb",
    "07-spec-policy-advice.ipynb",
}
NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
]
#: "all six", "all 7": a count in a sentence that speaks of the notebooks
_ALL_COUNT = re.compile(r"\ball (\d+|" + "|".join(NUMBER_WORDS) + r")\b", re.IGNORECASE)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), NOTEBOOK_DIR / "README.md"]
CELL_TIMEOUT_S = 300
KERNEL = "python3"


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def _python3_kernel_or_skip() -> None:
    pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[test]')")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install -e '.[test]')")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec(KERNEL)
    except NoSuchKernel:
        pytest.skip(
            f"no Jupyter kernel named {KERNEL!r} (python -m ipykernel install --sys-prefix)"
        )


def test_the_notebooks_are_there() -> None:
    assert {p.name for p in NOTEBOOKS} >= EXPECTED


def test_the_docs_count_the_notebooks_right() -> None:
    """A sentence of the docs that speaks of the notebooks and says "all N" says how many
    there are (seven, not "all six")."""
    wrong = []
    for doc in DOCS:
        text = " ".join(doc.read_text(encoding="utf-8").split())
        for sentence in re.split(r"(?<=\.)\s", text):
            if "notebook" not in sentence.lower():
                continue
            for match in _ALL_COUNT.finditer(sentence):
                word = match.group(1).lower()
                count = int(word) if word.isdigit() else NUMBER_WORDS.index(word)
                if count != len(NOTEBOOKS):
                    wrong.append(f"{doc.name}: {match.group(0)!r} in {sentence[:120]!r}")
    assert not wrong, f"there are {len(NOTEBOOKS)} notebooks: {wrong}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_committed_without_outputs(path: Path) -> None:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    assert data["nbformat"] == 4
    assert data["metadata"]["kernelspec"]["name"] == KERNEL
    assert data["metadata"]["kernelspec"]["language"] == "python"
    dirty = [
        index
        for index, cell in enumerate(data["cells"])
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts; clear them"
    kinds = {cell["cell_type"] for cell in data["cells"]}
    assert kinds == {"code", "markdown"}, f"{path.name}: expected code and markdown cells"
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.reads(path.read_text(encoding="utf-8"), as_version=4))


DEFAULT_RUN: tuple[str, ...] = ()
"""The notebooks run by default; the others are ``slow``."""


def _timed(paths: list[Path]) -> list[Any]:
    return [
        path if path.stem in DEFAULT_RUN else pytest.param(path, marks=pytest.mark.slow)
        for path in paths
    ]


@pytest.mark.parametrize("path", _timed(NOTEBOOKS), ids=_ids(NOTEBOOKS))
def test_notebook_runs(path: Path) -> None:
    _python3_kernel_or_skip()
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNEL,
        allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.execute()  # raises CellExecutionError naming the cell and the traceback
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: {errors}"
    # what a reader sees under a cell: no warning (a pandas PerformanceWarning, say)
    warned = [
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("name") == "stderr" and "Warning" in output.get("text", "")
    ]
    assert not warned, f"{path.name}: {warned}"
    ran = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in ran), f"{path.name}: a cell did not run"
