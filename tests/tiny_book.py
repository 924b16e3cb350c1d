"""A tiny copy of the book (the real _config.yml, extension and bibliography) for build tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).with_name("jupyter-book")
HEADER = """\
---
jupytext:
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
"""  # the MyST notebook header every tiny chapter starts with


def build_tiny_book(root: Path, pages: dict[str, str]) -> subprocess.CompletedProcess:
    """Build a book in `root` whose pages are `pages` ({name: Markdown}, in order) after an intro.
    A name with a slash (``ch99_tiny/second``) is a subpage of the chapter before it."""
    (root / "book").mkdir(exist_ok=True)
    shutil.copy(ROOT / "_config.yml", root)
    shutil.copytree(ROOT / "book" / "_ext", root / "book" / "_ext", dirs_exist_ok=True)
    for name in ("references.bib", "favicon.svg"):
        shutil.copy(ROOT / "book" / name, root / "book")
    (root / "book" / "intro.md").write_text("# Intro\n\nA test book.\n")
    chapters, in_sections = "", False
    for name, text in pages.items():
        (root / "book" / f"{name}.md").parent.mkdir(parents=True, exist_ok=True)
        (root / "book" / f"{name}.md").write_text(text)
        if "/" not in name:
            chapters += f"      - file: book/{name}\n"
        elif not in_sections:
            chapters += "        sections:\n"
        if "/" in name:
            chapters += f"          - file: book/{name}\n"
        in_sections = "/" in name
    (root / "_toc.yml").write_text(
        f"format: jb-book\nroot: book/intro\nparts:\n  - caption: Tiny\n    numbered: true\n"
        f"    chapters:\n{chapters}"
    )
    return subprocess.run(
        [JUPYTER_BOOK, "build", str(root), "--builder", "html", "-W", "-n", "--keep-going"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,  # the execution cache (_build/.jupyter_cache) is relative to the working folder
    )
