"""Every link resolves: within the built site (pages, anchors, images, downloads), and from the
repository's Markdown (README, CHANGELOG, the problem sets' guide) to files that exist. Pages move as
chapters are split; a link left behind fails here. (Links from the released problem sets to the
site's equations are checked by tests/test_problem_sets.py.)"""

import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from book_pages import toc_pages

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
ATTRIBUTE = re.compile(r"""\b(?:href|src)\s*=\s*(["'])(?P<url>[^"']*)\1""")
ID = re.compile(r"""\bid\s*=\s*(["'])(?P<id>[^"']+)\1""")
MARKDOWN_LINK = re.compile(
    r"(?<!!)\[[^\]]*\]\((?P<url>[^)\s]+)\)|!\[[^\]]*\]\((?P<image>[^)\s]+)\)"
)


@cache
def ids_of(path: Path) -> frozenset[str]:
    return frozenset(
        m["id"] for m in ID.finditer(path.read_text(encoding="utf-8", errors="replace"))
    )


def broken_links(page: Path) -> list[str]:
    """The internal links of a built page whose file or anchor does not exist."""
    broken = []
    for m in ATTRIBUTE.finditer(page.read_text(encoding="utf-8", errors="replace")):
        url = m["url"].strip()
        parts = urlsplit(url)
        if parts.scheme or url.startswith(("//", "mailto:", "javascript:", "data:")) or not url:
            continue
        target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(f"{url}: no file {target}")
        elif (
            parts.fragment
            and target.suffix == ".html"
            and unquote(parts.fragment) not in ids_of(target)
        ):
            broken.append(f"{url}: {target.name} has no id {parts.fragment!r}")
    return broken


@pytest.mark.built
def test_the_toc_names_every_built_page():
    pages = toc_pages()
    assert len(pages) == len(set(pages))
    missing = [p for p in pages if not (SITE / p).is_file()]
    if missing and not (SITE / pages[0]).is_file():
        pytest.fail("run `make book` first: the site is not built")
    assert not missing, missing


@pytest.mark.built
@pytest.mark.parametrize("page", toc_pages() + ["index.html", "search.html", "genindex.html"])
def test_every_link_of_a_page_resolves(page):
    path = SITE / page
    if not path.is_file():
        pytest.fail(f"run `make book` first: {path.relative_to(ROOT)} is missing")
    assert not broken_links(path), "\n".join(broken_links(path))


@pytest.mark.parametrize("doc", ["README.md", "CHANGELOG.md", "solutions/README.md"])
def test_every_relative_link_of_the_repositorys_markdown_resolves(doc):
    path = ROOT / doc
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)  # code blocks
    broken = []
    for m in MARKDOWN_LINK.finditer(text):
        url = m["url"] or m["image"]
        parts = urlsplit(url)
        if parts.scheme or url.startswith("#") or "(?P<" in url:
            continue
        if not (path.parent / unquote(parts.path)).exists():
            broken.append(url)
    assert not broken, f"{doc} links to files that do not exist: {broken}"


def test_a_missing_page_or_anchor_is_reported(tmp_path):
    (tmp_path / "a.html").write_text(
        '<p id="here"></p><a href="a.html#here">ok</a>'
        '<a href="#gone">x</a><a href="b.html">y</a>'
        '<img src="https://example.org/x.png">'
    )
    found = broken_links(tmp_path / "a.html")
    assert len(found) == 2 and "'gone'" in found[0] and "b.html" in found[1]
