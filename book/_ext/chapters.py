"""The book's chapters and their pages, read from ``_toc.yml``: a chapter is a landing page
``book/chNN_name`` and the subpages listed under it (``book/chNN_name/<slug>``), in reading order.

The build's extensions (`notebooks`, `claims`, `execution_cache`) and the tests ask this module, never
a glob of ``book/``, which pages a chapter has. It imports nothing from Sphinx.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml

LANDING = re.compile(r"^book/ch\d\d_[a-z0-9_]+$")


@cache
def _chapter_pages(toc_file: Path, mtime_ns: int) -> dict[str, tuple[str, ...]]:
    toc = yaml.safe_load(toc_file.read_text(encoding="utf-8")) or {}
    found: dict[str, tuple[str, ...]] = {}

    def below(entry) -> list[str]:
        pages = []
        for section in entry.get("sections") or []:
            if "file" in section:
                pages.append(section["file"])
            pages += below(section)
        return pages

    def walk(entries) -> None:
        for entry in entries or []:
            name = entry.get("file", "")
            if LANDING.match(name):
                found[name] = (name, *below(entry))
            else:
                walk(entry.get("sections"))

    for part in toc.get("parts") or []:
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return found


def chapter_pages(root: Path) -> dict[str, tuple[str, ...]]:
    """``{landing docname: (landing, subpage, …)}`` for every chapter in ``root/_toc.yml``, in the
    book's order; docnames have no suffix (``book/ch04_gradients/clipping``)."""
    toc_file = Path(root) / "_toc.yml"
    return _chapter_pages(toc_file.resolve(), toc_file.stat().st_mtime_ns)


def chapter_of(root: Path, docname: str) -> str | None:
    """The landing docname of the chapter that `docname` belongs to, or None."""
    for landing, pages in chapter_pages(root).items():
        if docname in pages:
            return landing
    return None


def all_pages(root: Path) -> list[str]:
    """Every chapter page's docname, chapter by chapter in reading order."""
    return [page for pages in chapter_pages(root).values() for page in pages]


def page_files(root: Path) -> list[Path]:
    """Every chapter page's MyST source file, in reading order."""
    return [Path(root) / f"{page}.md" for page in all_pages(root)]


def chapter_number(landing: str) -> int:
    """A chapter's number as its file name gives it (``book/ch04_gradients`` -> 4)."""
    return int(Path(landing).name[2:4])
