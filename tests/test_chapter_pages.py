"""A chapter is a landing page and its subpages (`book/_ext/chapters.py`, from _toc.yml): each page
is read in one sitting, runs alone, and the chapter stays one numbered unit with one notebook.

The tiny build checks the machinery on a two-page chapter: the landing page's reading time and
running time cover both pages, glue pasted from the other page is written for people, figure
numbers run on across the pages, the downloaded notebook is both pages in order with the pasted
values filled in, and a page over the word limit fails the build.
"""

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

from tiny_book import HEADER, build_tiny_book

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from chapters import all_pages, chapter_of, chapter_pages  # noqa: E402
from claims import MAX_PAGE_WORDS, chapter_runtime, prose_words, reading_minutes  # noqa: E402
from notebooks import demote_headings  # noqa: E402

CHAPTERS = chapter_pages(ROOT)


def test_the_toc_names_nine_chapters_and_every_page_exists():
    assert [Path(c).name[:4] for c in CHAPTERS] == [f"ch{n:02d}" for n in range(1, 10)]
    for page in all_pages(ROOT):
        assert (ROOT / f"{page}.md").is_file(), f"{page}.md is listed in _toc.yml but missing"
        assert chapter_of(ROOT, page) == page.split("/")[0] + "/" + page.split("/")[1]


@pytest.mark.parametrize("chapter", list(CHAPTERS), ids=lambda c: Path(c).name)
def test_a_chapter_is_a_landing_page_and_two_to_four_subpages(chapter):
    pages = CHAPTERS[chapter]
    assert 3 <= len(pages) <= 5, f"{chapter}: {len(pages) - 1} subpages"
    for page in pages[1:]:
        assert page.startswith(f"{chapter}/"), f"{page} is not in {chapter}/"
    on_disk = {f"{chapter}/{p.stem}" for p in (ROOT / chapter).glob("*.md")}
    assert on_disk == set(pages[1:]), f"pages of {chapter} not in _toc.yml: {on_disk - set(pages)}"


@pytest.mark.parametrize("page", all_pages(ROOT), ids=lambda p: p.removeprefix("book/"))
def test_every_page_is_read_in_one_sitting(page):
    words = prose_words((ROOT / f"{page}.md").read_text(encoding="utf-8"))
    assert words <= MAX_PAGE_WORDS, f"{page}: {words} prose words"


@pytest.mark.parametrize("chapter", list(CHAPTERS), ids=lambda c: Path(c).name)
def test_every_subpage_runs_alone_and_records_its_runtime(chapter):
    """Each subpage executes in its own kernel: its first code cell is the hidden setup (it imports
    and re-creates what the page uses) and its last glues the page's runtime for the landing page."""
    import jupytext

    key = f"ch{int(Path(chapter).name[2:4])}_runtime"
    for page in CHAPTERS[chapter]:
        cells = [c for c in jupytext.read(ROOT / f"{page}.md").cells if c.cell_type == "code"]
        assert cells, f"{page} has no code"
        if page != chapter:
            first = cells[0]
            assert "remove-cell" in first.metadata.get("tags", []), f"{page}: setup not hidden"
            assert "_start = time.perf_counter()" in first.source, f"{page}: setup starts no clock"
        assert f'glue("{key}"' in cells[-1].source, f"{page}: its last cell does not glue {key}"


def test_reading_time_and_runtime_sum_a_chapters_pages(tmp_path):
    page = "word " * 700
    assert reading_minutes(page) == 5 and reading_minutes(page, page) == 10
    for name, seconds in {"book/ch04_x": 1.5, "book/ch04_x/a": 20.25, "book/ch04_x/b": 3}.items():
        (tmp_path / f"{name}.glue.json").parent.mkdir(parents=True, exist_ok=True)
        record = {"ch4_runtime": {"data": {"text/plain": repr(seconds)}}}
        (tmp_path / f"{name}.glue.json").write_text(json.dumps(record))
    pages = ["book/ch04_x", "book/ch04_x/a", "book/ch04_x/b"]
    assert chapter_runtime(tmp_path, "book/ch04_x", pages) == 24.75
    assert chapter_runtime(tmp_path, "book/ch04_x", [*pages, "book/ch04_x/c"]) is None


LANDING = """\
(ch-tiny)=
# A tiny chapter

Reading {reading-time}`chapter` in all ({reading-time}`prose` here); its pages executed in
**{chapter-runtime}`.0f` s**. The second page found {glue:text}`ch99_tiny/second.md::small:.1e`
in {glue:text}`ch99_tiny/second.md::where`.

```{code-cell} ipython3
:tags: [remove-cell]
import time
from seqmodels.glue import glue
_start = time.perf_counter()
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([1, 2])
glue("fig_one", fig, display=False)
```

```{glue:figure} fig_one
:name: fig-one
:alt: A line.

The first figure.
```

```{tableofcontents}
```

```{code-cell} ipython3
:tags: [remove-cell]
glue("ch99_runtime", time.perf_counter() - _start, display=False)
```
"""

SECOND = """\
(sec-tiny-second)=
# The second page

```{code-cell} ipython3
:tags: [remove-cell]
import time
from seqmodels.glue import glue
_start = time.perf_counter()
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([2, 1])
glue("fig_two", fig, display=False)
glue("small", 2.5e-9, display=False)
glue("where", "the sea", display=False)
```

```{glue:figure} fig_two
:name: fig-two
:alt: Another line.

The second figure, after {numref}`fig-one`.
```

```{code-cell} ipython3
:tags: [remove-cell]
glue("ch99_runtime", time.perf_counter() - _start, display=False)
```
"""


@pytest.mark.book
def test_a_chapter_split_into_pages_builds_as_one_chapter(tmp_path):
    long = "(sec-tiny-long)=\n# A long page\n\n" + "word " * (MAX_PAGE_WORDS + 1) + "\n"
    pages = {
        "ch99_tiny": HEADER + LANDING,
        "ch99_tiny/second": HEADER + SECOND,
        "ch99_tiny/long": HEADER + long,
    }
    result = build_tiny_book(tmp_path, pages)
    log = result.stdout + result.stderr
    found = re.search(r"long\.md: WARNING: (\d+) prose words: a page is read in one sitting", log)
    assert result.returncode != 0 and found and int(found[1]) > MAX_PAGE_WORDS, log[-3000:]

    (tmp_path / "book" / "ch99_tiny" / "long.md").unlink()
    del pages["ch99_tiny/long"]
    result = build_tiny_book(tmp_path, pages)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    html = tmp_path / "_build" / "html" / "book"
    landing = re.sub(r"<[^>]+>", "", (html / "ch99_tiny.html").read_text())
    landing = " ".join(landing.split())
    assert "Reading about 5 min in all (about 5 min here)" in landing
    assert re.search(r"its pages executed in \d+ s\.", landing), landing[:2000]
    # pasted from the other page, for people; without a format spec too
    assert "The second page found 2.5 × 10⁻⁹ in the sea." in landing
    second = " ".join(
        re.sub(r"<[^>]+>", "", (html / "ch99_tiny" / "second.html").read_text()).split()
    )
    assert "Fig. 1.1" in landing and "Fig. 1.2 The second figure, after Fig. 1.1" in second
    # the download: one notebook, the landing page then the subpage, pasted values filled in
    notebook = nbformat.read(tmp_path / "book" / "_generated" / "ch99_tiny.ipynb", as_version=4)
    text = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert text.index("# 1. A tiny chapter") < text.index("\n## 1.1 The second page")
    assert (
        "The second page found 2.5 × 10⁻⁹ in the sea." in " ".join(text.split())
        and "{" not in text.split("chapter")[-1]
    )
    code = [c.source for c in notebook.cells if c.cell_type == "code"]
    assert sum('glue("ch99_runtime"' in c for c in code) == 2


def test_a_subpages_headings_move_one_level_down_in_the_notebook_and_code_stays():
    text = "# 1.2 Title\n\nText # not a heading\n\n```python\n# a comment\n```\n\n## 1.2.1 Sub"
    assert demote_headings(text) == (
        "## 1.2 Title\n\nText # not a heading\n\n```python\n# a comment\n```\n\n### 1.2.1 Sub"
    )
