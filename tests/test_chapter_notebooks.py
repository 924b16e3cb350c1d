"""The "Download this chapter as a notebook" file, as a student meets it: copied into an empty folder,
it runs top to bottom in a fresh kernel, and its text is plain Markdown that JupyterLab renders (no
MyST roles or directives left, glued numbers filled in, a first cell that says what to install).

Reads the book that `make book` built (the `make test` order builds it first; `pytest -m built`
alone fails with a clear message if there is none). The build itself executed each chapter in an
empty temporary folder, and the downloaded notebook's code must be exactly the code it executed.
"""

import re
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from notebooks import BOOK_CHECK, HIDDEN_TAGS  # noqa: E402

CHAPTERS = sorted(p.stem for p in (ROOT / "book").glob("ch*.md"))
MYST_LEFTOVERS = [
    "{glue",
    "{const}",
    "{cite",
    "{eq}",
    "{numref}",
    "{ref}",
    "{doc}",
    "{download}",
    "{reading-time}",
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
def test_downloaded_notebook_runs_as_the_book_ran_it(built_book, chapter):
    """The build executed every chapter in an empty temporary folder (`run_in_temp`), and the
    downloaded notebook's code is exactly that chapter's code: so the download runs in an empty
    folder without being executed a second time here (each chapter costs about a minute)."""
    config = yaml.safe_load((built_book / "_config.yml").read_text())
    assert config["execute"]["run_in_temp"] is True, "chapters must execute in an empty folder"
    assert config["execute"]["allow_errors"] is False
    downloaded = nbformat.read(
        built_book / "book" / "_generated" / f"{chapter}.ipynb", as_version=4
    )
    source = jupytext.read(built_book / "book" / f"{chapter}.md")
    code = [c.source for c in downloaded.cells if c.cell_type == "code"]
    assert [c.removeprefix(BOOK_CHECK) for c in code] == [
        c.source for c in source.cells if c.cell_type == "code"
    ]
    # the cells the page hides are marked as the book's checks and collapsed; the others are not
    for cell in (c for c in downloaded.cells if c.cell_type == "code"):
        hidden = bool(set(cell.metadata.get("tags", [])) & HIDDEN_TAGS)
        assert cell.source.startswith(BOOK_CHECK) == hidden
        assert cell.metadata.get("jupyter", {}).get("source_hidden", False) == hidden
    assert all(not c.get("outputs") for c in downloaded.cells if c.cell_type == "code")
