"""Numbers in prose are claims: the static check of stray numbers, `claim`, and both in a build."""

import os
import re
import sys
import warnings
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from tiny_book import HEADER, build_tiny_book

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

from chapters import chapter_pages, page_files  # noqa: E402
from claims import (  # noqa: E402
    WORDS_PER_MINUTE,
    claim_cells,
    claims_report,
    glue_keys_used,
    reading_minutes,
    stray_numbers,
)
from editions import instructor_pages  # noqa: E402

from seqmodels.glue import BUILD_FLAG, ClaimFailed, claim, in_book_build  # noqa: E402

# every page of every chapter (landing pages and subpages), and the instructor's edition's pages
PAGES = page_files(ROOT) + [p for d in instructor_pages(ROOT) if (p := ROOT / f"{d}.md").is_file()]
CHAPTERS = chapter_pages(ROOT)


def page_id(path: Path) -> str:
    return path.relative_to(ROOT / "book").with_suffix("").as_posix()


def tokens(markdown: str) -> list[str]:
    return [s.token for s in stray_numbers(HEADER + markdown)]


def test_numbers_in_prose_tables_captions_and_alt_text_are_stray():
    text = """\
# Results after 400 steps

The model reaches 12.5 nats, about 3× the bound.

| model | perplexity |
|---|---|
| RNN | 41.2 |

```{figure} fig.png
:alt: A line falling from 1e-12 to 2.
:width: 400px
:name: fig-x

Caption with 7 points.
```
"""
    assert tokens(text) == ["400", "12.5", "3×", "41.2", "1e-12", "2.", "7"]


def test_glued_declared_math_code_names_and_structure_are_not():
    text = """\
1. We train for {glue:text}`steps:,` steps, as {cite:t}`x2013` did in {const}`2013`.
2. Math $W_{11} + 2$ and $$x = 3$$ and inline `n = 5` code are exempt, so is $a +
   1$ across lines.

In float64, G2P and T5 names, Chapter 4's table, Table 4.1, Chapters 2 and 3, Problem Set 2,
Fig. 2.5 and [a link](https://example.com/v2/3) pass.

(label-1)=

$$
y = 42
$$ (eq-1)

```{code-cell} ipython3
x = 99
```

```python
print(77)
```
<!-- a comment with 5 -->

:::{solution} ch04-ex1
:label: ch04-ex1-solution
:::

```{solution-start} ch04-ex2
:label: ch04-ex2-solution
```
"""
    assert tokens(text) == []


def test_lines_are_those_of_the_source():
    (stray,) = stray_numbers(HEADER + "Line one.\n\nLine three has 3.\n")
    assert stray.line == HEADER.count("\n") + 3 and stray.token == "3."


def test_claim_cells_and_glue_keys_are_found():
    source = (
        "```{code-cell} ipython3\n:tags: [remove-cell, claim]\n\nclaim('a', True, 'A.')\n```\n"
        "```{code-cell} ipython3\n:tags: [remove-cell]\n\nx = 1\n```\n"
        "Text {glue:text}`k1:.2f` and {glue:}`k2` and {glue:md}`nb::k3`.\n"
        "```{glue:figure} k4\n:alt: {glue:text}`k5:.0f` points\n```\n"
    )
    assert claim_cells(source) == 1
    assert glue_keys_used(source) == {"k1", "k2", "k3", "k4", "k5"}


def test_reading_time_counts_prose_words_only():
    words = 3 * 5 * WORDS_PER_MINUTE  # exactly 15 minutes of prose
    prose = "\n".join(["word " * 10] * (words // 10)) + "\n"
    code = "```{code-cell} ipython3\n" + "x = 1\n" * 5000 + "```\n"
    math = "$$\n" + "a + b\n" * 5000 + "$$\n"
    assert reading_minutes(HEADER + prose) == 15
    assert reading_minutes(HEADER + prose + code + math) == 15  # code and math are not read here
    assert reading_minutes(HEADER + prose + "one more word\n") == 20  # rounded up to 5 minutes
    assert reading_minutes(HEADER + "Short.\n") == 5
    # a role counts as its text: {ref}`the table <tab-x>` is two words, not a label
    assert reading_minutes(HEADER + "{ref}`the table <tab-x>`\n" * (5 * WORDS_PER_MINUTE)) == 10


def test_the_report_lists_each_chapter_and_its_claims():
    report = claims_report({"ch01": {"b": "B holds.", "a": "A holds."}, "ch02": {}})
    assert "2 in all" in report and "## ch01 (2)" in report and "## ch02 (0)" in report
    assert report.index("`a`: A holds.") < report.index("`b`: B holds.")


def test_a_true_claim_is_recorded_and_a_false_one_fails(monkeypatch):
    pytest.importorskip("myst_nb")
    monkeypatch.setenv(BUILD_FLAG, "1")  # the book's build sets it (book/_ext/notebooks.py)
    import myst_nb.ext.glue as myst_glue

    published = []
    monkeypatch.setattr(
        myst_glue, "ipy_display", lambda data, raw, metadata: published.append(metadata)
    )
    claim("ch0-small", torch.tensor(2.0) < 3, "Two is less than three.")
    assert published[0]["scrapbook"]["name"] == "claim-ch0-small"
    with pytest.raises(ClaimFailed, match="ch0-big.*Two is more"):
        claim("ch0-big", 2 > 3, "Two is more than three.")


def test_claims_are_checked_for_name_and_truth_value():
    with pytest.raises(ValueError, match="claim name"):
        claim("has space", True, "x")
    with pytest.raises(TypeError, match="truth value"):
        claim("ch0-tensor", torch.ones(3) > 0, "x")


@pytest.mark.parametrize("myst_nb_installed", [True, False])
def test_outside_the_books_build_a_false_claim_only_warns(monkeypatch, myst_nb_installed):
    """A student running a downloaded chapter with "Restart Kernel and Run All" in the course's own
    environment (where myst-nb is installed) on a busy machine: the page's sentence may not hold,
    and the notebook goes on. Whether myst-nb imports decides nothing; the build's flag does."""
    monkeypatch.delenv(BUILD_FLAG, raising=False)
    if not myst_nb_installed:
        monkeypatch.setitem(sys.modules, "myst_nb", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        claim("ch0-big", False, "Two is more than three.")
    assert "does not hold" in str(caught[0].message)


def test_the_books_build_sets_the_flag_its_kernels_inherit(monkeypatch):
    from notebooks import setup

    monkeypatch.delenv(BUILD_FLAG, raising=False)

    class App:  # what `setup` calls on Sphinx's application
        def setup_extension(self, name):
            pass

        def connect(self, event, handler, priority=500):
            pass

    setup(App())
    assert os.environ[BUILD_FLAG] == "1" and in_book_build()


def test_no_claim_asserts_an_absolute_time():
    """A timing claim is a ratio measured in one run or a median of repeats against a generous
    bound (the README's rule): a single measured duration compared with a constant stops a busy
    machine's build, and said nothing a reader could rely on."""
    single = re.compile(r"claim\([^)]*?\b(?:redraw_seconds|\w+\.seconds)\s*<\s*[\d.]+", re.S)
    for page in PAGES:
        source = page.read_text(encoding="utf-8")
        assert not single.search(source), f"{page_id(page)}: {single.search(source).group(0)}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_number_in_a_chapters_prose_is_glued_or_declared(page):
    strays = stray_numbers(page.read_text(encoding="utf-8"))
    assert not strays, "\n".join(f"{page_id(page)}:{s.line}: {s.token!r}  {s.text}" for s in strays)


@pytest.mark.parametrize("chapter", list(CHAPTERS), ids=lambda c: Path(c).name)
def test_every_chapter_asserts_its_claims(chapter):
    sources = [(ROOT / f"{page}.md").read_text(encoding="utf-8") for page in CHAPTERS[chapter]]
    cells = sum(claim_cells(source) for source in sources)
    assert cells >= 3, f"{chapter}: expected claim cells beside its comparisons"
    for source in sources:
        for cell in re.findall(r":tags: \[[^\]]*\bclaim\b[^\]]*\]\n(.*?)\n```", source, re.S):
            assert "claim(" in cell, f"{chapter}: a cell tagged 'claim' asserts nothing:\n{cell}"


TINY = """\
# A chapter with claims

```{{code-cell}} ipython3
from seqmodels.glue import claim, glue
glue("n_points", 7, display=False)
glue("tiny_gap", 1.1e-13, display=False)
glue("tiny_ppl", float("inf"), display=False)
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([1, 2])
glue("fig_line", fig, display=False)
```

There are {{glue:text}}`n_points` points, since {{const}}`2013`. {extra}

```{{glue:figure}} fig_line
:alt: A line through {{glue:text}}`n_points` points.

A line.
```

```{{code-cell}} ipython3
:tags: [remove-cell, claim]

claim("tiny-few", {holds}, "There are few points.")
```
"""


@pytest.mark.book
def test_claims_in_a_build(tmp_path):
    good = tmp_path / "good"
    good.mkdir()
    extra = "They differ by {glue:text}`tiny_gap:.1e`; unsmoothed, {glue:text}`tiny_ppl:,.1f`."
    result = build_tiny_book(good, {"ch99_tiny": HEADER + TINY.format(extra=extra, holds="7 < 10")})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    html = (good / "_build" / "html" / "book" / "ch99_tiny.html").read_text()
    assert 'alt="A line through 7 points."' in html and "since 2013." in html
    # glued numbers are written for people: no e-notation, no raw inf
    assert "They differ by 1.1 × 10⁻¹³; unsmoothed, ∞." in re.sub(r"<[^>]+>", "", html)
    assert "`tiny-few`: There are few points." in (good / "_build" / "claims.md").read_text()

    bad = tmp_path / "bad"
    bad.mkdir()
    result = build_tiny_book(
        bad, {"ch99_tiny": HEADER + TINY.format(extra="Then 12 more.", holds="7 > 10")}
    )
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert "'12'" in log and "neither glued nor a {const}" in log
    assert "claim 'tiny-few' is false" in log


def built_in(page: Path) -> Path:
    """The build that holds `page`: the student site's, or the instructor's edition's."""
    if "instructor" in page.relative_to(ROOT).parts:
        return ROOT / "_build" / "instructor" / "_build"
    return ROOT / "_build"


@pytest.mark.built
def test_the_built_book_recorded_every_chapters_claims():
    for page in PAGES:
        report = built_in(page) / "claims.md"
        if not report.is_file():
            pytest.fail(f"{report} is missing: run `make book` and `make book-instructor` first")
        text = report.read_text(encoding="utf-8")
        cells = claim_cells(page.read_text(encoding="utf-8"))
        match = re.search(rf"^## {re.escape(page_id(page))} \((\d+)\)$", text, re.M)
        assert match, f"{page_id(page)} is missing from {report}"
        assert int(match[1]) >= cells, f"{page_id(page)}: {cells} claim cells, {match[1]} claims"


class _ReadersText(HTMLParser):
    """The text a reader meets on a built page: prose, tables, captions and alt text, without code
    (``pre``, ``code``: the cells' source and printed output), math, scripts and styles."""

    SKIP = {"pre", "code", "script", "style", "math"}

    def __init__(self):
        super().__init__()
        self.depth, self.parts = 0, []

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.depth += 1
        elif tag == "img":
            self.parts.append(dict(attrs).get("alt") or "")

    def handle_endtag(self, tag):
        if tag in self.SKIP and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if not self.depth:
            self.parts.append(re.sub(r"\\\(.*?\\\)|\\\[.*?\\\]", " ", data, flags=re.S))


PYTHON_NUMBERS = re.compile(r"(?<![\w.])(?:\d+(?:\.\d+)?e[+-]?\d+|inf|nan)(?![\w.])")


@pytest.mark.built
@pytest.mark.parametrize("chapter", PAGES, ids=page_id)
def test_the_built_page_writes_numbers_for_people(chapter):
    """Issue 30: a reader sees "1.1 × 10⁻¹³" and "∞", never Python's "1.1e-13" or a raw "inf", in
    prose, tables, captions or alt text (code and its printed output are code)."""
    page = built_in(chapter) / "html" / "book" / f"{page_id(chapter)}.html"
    if not page.is_file():
        pytest.fail(f"{page} is missing: run `make book` and `make book-instructor` first")
    reader = _ReadersText()
    reader.feed(page.read_text(encoding="utf-8"))
    text = " ".join(" ".join(reader.parts).split())
    found = [text[max(0, m.start() - 40) : m.end() + 20] for m in PYTHON_NUMBERS.finditer(text)]
    assert not found, f"{page_id(chapter)}: " + " | ".join(found)


def test_the_intro_states_the_reading_rate_the_build_uses():
    intro = (ROOT / "book" / "intro.md").read_text()
    assert f"{{const}}`{WORDS_PER_MINUTE}` words a minute" in intro


def test_a_folded_hint_is_not_read_in_the_sitting_but_its_numbers_are_checked():
    from claims import prose_words

    page = """An exercise asks you to derive the bound.

::::{exercise}
:label: ch99-ex1

Derive it.

:::{dropdown} Hint
Multiply the norms of the 12 factors, one per step.
:::
::::
"""
    assert prose_words(page) == prose_words(page.split(":::{dropdown}")[0] + ":::\n::::\n")
    assert [s.token for s in stray_numbers(page)] == ["12"]
