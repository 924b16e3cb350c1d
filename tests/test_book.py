"""The book build's contract: a chapter that raises, or a Sphinx warning, fails the build and is named.

These tests build a two-page copy of the book (the real _config.yml and extension, a tiny chapter) in
a temporary folder, so they check the configuration without re-executing the real chapters.
"""

import re
import subprocess
from pathlib import Path

import pytest

from tiny_book import build_tiny_book

CHAPTER = """\
---
jupytext:
  text_representation: {{extension: .md, format_name: myst}}
kernelspec: {{display_name: Python 3, language: python, name: python3}}
---
# A tiny chapter

```{{code-cell}} ipython3
from seqmodels.metrics import perplexity
print(perplexity(0.0, 3))
{extra_code}
```
{extra_text}
"""


def build(
    tmp_path: Path, extra_code: str = "", extra_text: str = ""
) -> subprocess.CompletedProcess:
    chapter = CHAPTER.format(extra_code=extra_code, extra_text=extra_text)
    return build_tiny_book(tmp_path, {"ch99_tiny": chapter})


@pytest.mark.book
def test_a_working_chapter_builds_and_is_offered_as_a_notebook(tmp_path):
    # as every chapter's opening box does
    offer = "{download}`Download this chapter as a notebook <_generated/ch99_tiny.ipynb>`"
    result = build(tmp_path, extra_text=offer)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    html = (tmp_path / "_build" / "html" / "book" / "ch99_tiny.html").read_text()
    assert "1.0" in html  # the executed output
    notebook = tmp_path / "book" / "_generated" / "ch99_tiny.ipynb"
    assert notebook.is_file() and '"cell_type": "code"' in notebook.read_text()
    # the header's download menu offers that notebook first, and not the raw MyST source
    menu = html[html.index('aria-label="Download this page"') :].split("</ul>")[0]
    links = re.findall(r'href="([^"]+)"', menu)
    assert links and links[0].startswith("../_downloads/") and links[0].endswith("/ch99_tiny.ipynb")
    assert (tmp_path / "_build" / "html" / links[0].removeprefix("../")).is_file()
    assert "_sources/" not in menu and "window.print()" in menu
    assert (
        tmp_path / "_build" / "html" / "_static" / "mathjax" / "es5" / "tex-mml-chtml.js"
    ).is_file()


@pytest.mark.book
def test_a_chapter_that_raises_fails_the_build_and_is_named(tmp_path):
    result = build(tmp_path, extra_code="raise RuntimeError('deliberately broken')")
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert "ch99_tiny" in log and "deliberately broken" in log


@pytest.mark.book
def test_a_sphinx_warning_fails_the_build(tmp_path):
    result = build(tmp_path, extra_text="See {eq}`no-such-equation`.\n")
    assert result.returncode != 0
    assert "no-such-equation" in result.stdout + result.stderr
