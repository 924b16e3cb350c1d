"""The "Download this chapter as a notebook" file, as a student meets it: copied into an empty folder,
it runs top to bottom in a fresh kernel, and its text is plain Markdown that JupyterLab renders (no
MyST roles or directives left, glued numbers filled in, a first cell that says what to install).

Reads the book that `make book` built (the `make test` order builds it first; `pytest -m built`
alone fails with a clear message if there is none), then runs each notebook again from scratch.
"""

import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "book").glob("ch*.md"))
MYST_LEFTOVERS = [
    "{glue",
    "{cite",
    "{eq}",
    "{numref}",
    "{ref}",
    "{doc}",
    "{download}",
    ":::{",
    "```{",
]
pytestmark = pytest.mark.built


@pytest.fixture(scope="module")
def built_book() -> Path:
    """The repository, whose book `make book` built (chapters executed, notebooks generated)."""
    missing = [
        path
        for chapter in CHAPTERS
        for path in (
            ROOT / "_build" / "html" / "book" / f"{chapter}.html",
            ROOT / "book" / "_generated" / f"{chapter}.ipynb",
        )
        if not path.exists()
    ]
    if missing:
        pytest.fail(f"run `make book` first: {missing[0].relative_to(ROOT)} is missing")
    return ROOT


def markdown_of(notebook) -> str:
    return "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_downloaded_notebook_reads_as_plain_markdown(built_book, chapter):
    path = built_book / "book" / "_generated" / f"{chapter}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    text = markdown_of(notebook)
    for leftover in MYST_LEFTOVERS:
        assert leftover not in text, f"{leftover!r} left in the Markdown of {path.name}"
    assert not re.search(r"^\s*\([\w-]+\)=\s*$", text, re.M), "a MyST label (name)= is left"
    assert not re.search(r"\$\$\s*\([\w-]+\)", text), "an equation label is left after $$"
    first = notebook.cells[0]
    assert first.cell_type == "markdown"
    assert "pip install torch==2.13.0" in first.source and "[student]" in first.source
    assert "CPU" in first.source
    # every glued number of the page is in the notebook's text, as the page shows it
    html = (built_book / "_build" / "html" / "book" / f"{chapter}.html").read_text()
    pasted = re.findall(r'<span class="pasted-text">([^<]+)</span>', html)
    assert pasted, "the chapter glues no numbers?"
    for value in pasted:
        assert value in text, f"glued value {value!r} of the page is not in the notebook"
    # numbered equations carry the page's numbers
    numbers = re.findall(r'<span class="eqno">\((\d+\.\d+)\)', html)
    for number in numbers:
        assert f"\\tag{{{number}}}" in text


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_downloaded_notebook_runs_in_an_empty_folder(built_book, chapter, tmp_path):
    source = built_book / "book" / "_generated" / f"{chapter}.ipynb"
    target = tmp_path / f"{chapter}.ipynb"
    shutil.copy(source, target)
    # No chapter cell takes more than about a minute; a cell silent for 240 s is a lost kernel
    # message (seen once in CI: the kernel idle, the client still waiting), so run it once more.
    for attempt in (1, 2):
        notebook = nbformat.read(target, as_version=4)
        client = NotebookClient(
            notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
        )
        try:
            client.execute()  # raises CellExecutionError naming the cell on any exception
            break
        except CellTimeoutError:
            if attempt == 2:
                raise
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert outputs, "the notebook ran but printed nothing"
