"""The "Problem sets" page offers the student release, and never what students must not see.

`check_release` is the guard the book's extension runs on every ``assignments/<ps>/`` before it is
offered for download; the build tests check the page end to end on a tiny book.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

from problem_sets import check_release  # noqa: E402
from sphinx.errors import ExtensionError  # noqa: E402

from tiny_book import build_tiny_book  # noqa: E402


def notebook(*sources: str) -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Problem Set 9 — a test"}]
    cells += [
        {"cell_type": "code", "metadata": {}, "source": s, "outputs": [], "execution_count": None}
        for s in sources
    ]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_the_real_releases_are_clean():
    for folder in sorted((ROOT / "assignments").iterdir()):
        if folder.is_dir():
            assert [p.suffix for p in check_release(folder)] == [".ipynb"]


@pytest.mark.parametrize(
    "name, content, reason",
    [
        ("ps9.ipynb", notebook("### BEGIN SOLUTION\nx = 1\n### END SOLUTION"), "solution code"),
        ("ps9.ipynb", notebook("### BEGIN HIDDEN TESTS\nassert x\n### END HIDDEN TESTS"), "hidden"),
        ("references/ps9.json", "{}", "references/ folder"),
        ("ps9.safetensors", "binary", "reference outputs"),
    ],
)
def test_a_release_that_would_leak_answers_is_refused(tmp_path, name, content, reason):
    (tmp_path / "ps9.ipynb").write_text(notebook("raise NotImplementedError()"))
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text(content)
    with pytest.raises(ExtensionError, match=reason) as error:
        check_release(tmp_path)
    assert name in str(error.value)


def build_with_problem_set(tmp_path: Path, answer_cell: str) -> subprocess.CompletedProcess:
    (tmp_path / "assignments" / "ps9").mkdir(parents=True)
    (tmp_path / "assignments" / "ps9" / "ps9.ipynb").write_text(notebook(answer_cell))
    page = (ROOT / "book" / "problem_sets.md").read_text()
    # the tiny book has one chapter: its front matter lists ps9 only, whatever the real page lists
    page = re.sub(r"(?m)^problem_sets:\n(  .*\n)+", "problem_sets:\n  ps9: [ch09_tiny]\n", page)
    assert "ps9: [ch09_tiny]" in page
    return build_tiny_book(
        tmp_path, {"ch09_tiny": "# A tiny chapter\n\nNo code.\n", "problem_sets": page}
    )


@pytest.mark.book
def test_the_page_lists_each_problem_set_with_its_chapters_and_a_download(tmp_path):
    result = build_with_problem_set(tmp_path, "def f():\n    raise NotImplementedError()")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    html = (tmp_path / "_build" / "html" / "book" / "problem_sets.html").read_text()
    assert "Problem Set 9 — a test" in html
    assert 'href="ch09_tiny.html"' in html  # the chapter it covers, linked
    text = re.sub(r"<[^>]+>", "", html)  # code is highlighted token by token
    assert "pip install torch==2.13.0" in text and "[student]" in text
    downloads = list((tmp_path / "_build" / "html" / "_downloads").rglob("ps9.ipynb"))
    assert len(downloads) == 1
    assert downloads[0].read_text() == (tmp_path / "assignments" / "ps9" / "ps9.ipynb").read_text()


@pytest.mark.book
def test_a_download_with_solution_code_fails_the_build(tmp_path):
    result = build_with_problem_set(tmp_path, "### BEGIN SOLUTION\nx = 1\n### END SOLUTION")
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert "ps9.ipynb: solution code" in log
    assert not list((tmp_path / "_build").rglob("ps9.ipynb"))


def test_references_to_the_book_are_links_to_the_sites_equations():
    """A released set cites the book by links a student can follow: to a chapter's page on the
    site (the GitHub Pages address of `repository.url` in _config.yml), at an equation label the
    chapter defines; no bare internal label such as "(eq-add-k)" is left."""
    config = (ROOT / "_config.yml").read_text()
    owner, name = re.search(r"url: https://github\.com/([\w.-]+)/([\w.-]+)", config).groups()
    site = f"https://{owner}.github.io/{name}/"
    links = []
    for path in sorted((ROOT / "assignments").glob("ps*/ps*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        assert not re.search(r"\((eq|tbl|fig|sec)-[\w-]+\)", text), path.name
        links += re.findall(r"\]\((https?://[^)\s]+)\)", text)
    assert len(links) >= 5  # PS1: add-k, perplexity (twice), the MLE, Bengio et al.'s model
    for link in links:
        assert link.startswith(site), link
        page, _, anchor = link.removeprefix(site).partition("#")
        chapter = ROOT / page.replace(".html", ".md")
        assert page.endswith(".html") and chapter.is_file(), link
        label = anchor.removeprefix("equation-")
        assert anchor.startswith("equation-") and f"$$ ({label})" in chapter.read_text(), link
        built = ROOT / "_build" / "html" / page
        if built.is_file():  # the built site has the anchor
            assert f'id="{anchor}"' in built.read_text(), link
