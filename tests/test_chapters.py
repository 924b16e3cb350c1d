"""Static checks of the chapter sources: what a reader would trip over before anything runs.

A chapter is a landing page and its subpages (`book/_ext/chapters.py`, from _toc.yml); the checks
run on every page."""

import re
import sys
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
from chapters import chapter_pages, page_files  # noqa: E402

LANDINGS = [ROOT / f"{c}.md" for c in chapter_pages(ROOT)]
PAGES = page_files(ROOT)
WIDTH = 79  # the site's code column shows about 80 characters before it scrolls


def page_id(path: Path) -> str:
    return path.relative_to(ROOT / "book").with_suffix("").as_posix()


def test_every_chapter_is_in_the_table_of_contents_and_every_listed_page_exists():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = {c["file"] for part in toc["parts"] for c in part["chapters"]}
    chapters = {f for f in listed if Path(f).name.startswith("ch")}
    assert chapters == {f"book/{c.stem}" for c in (ROOT / "book").glob("ch*.md")}
    assert all(p.is_file() for p in PAGES), "a page in _toc.yml is missing"
    assert all((ROOT / f"{f}.md").is_file() for f in listed), "a page in _toc.yml is missing"


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_chapter_code_fits_the_page_and_has_no_outputs(path):
    """Code the page shows fits its column (removed cells, such as claims, are not shown)."""
    notebook = jupytext.read(path)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code, "a chapter without code cannot check its formulas"
    shown = [c for c in code if "remove-cell" not in c.metadata.get("tags", [])]
    too_wide = [line for cell in shown for line in cell.source.splitlines() if len(line) > WIDTH]
    assert too_wide == [], f"code lines wider than {WIDTH} characters scroll on the site"
    assert all(not c.get("outputs") for c in code)


@pytest.mark.parametrize("path", LANDINGS, ids=page_id)
def test_chapter_offers_its_notebook_and_states_its_times(path):
    """The landing page's opening box: the chapter's notebook, its reading time and the time its
    pages took to execute, all of them together (`claims`: ``{reading-time}`chapter```,
    ``{chapter-runtime}``)."""
    text = path.read_text()
    assert f"<_generated/{path.stem}.ipynb>" in text
    assert "{reading-time}`chapter`" in text
    assert re.search(r"executed in\s+\*\*\{chapter-runtime\}`", text)


LABELS = [
    re.search(r"^\((ch-[a-z-]+)\)=$", p.read_text(encoding="utf-8"), re.M)[1] for p in LANDINGS
]


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_a_chapter_names_other_chapters_as_chapters(path):
    """A bare ``{ref}`ch-rnn``` shows the chapter's title, which reads as a noun ("Recurrent neural
    networks showed …"): a chapter is named "Chapter 3", with its own number."""
    text = path.read_text(encoding="utf-8")
    for title, label in re.findall(r"\{ref\}`(?:([^`<]*?)\s*<)?(ch-[a-z-]+)>?`", text):
        assert title, (
            f"{path.name}: {{ref}}`{label}` shows a title; write {{ref}}`Chapter N <{label}>`"
        )
        assert title == f"Chapter {LABELS.index(label) + 1}", f"{path.name}: {title} <{label}>"


KEY_IDEA = re.compile(r"^:{3,}\{admonition\} Key idea\s*\n:class: key-idea\s*\n", re.M)
UNSECTIONED = {"Summary", "Self-check", "Exercises", "References"}


def sections(text: str) -> list[tuple[str, str]]:
    """``(title, body)`` of each ``##`` section of a page (its ``###`` subsections included); a
    subpage that is one section (its ``#`` title and no taught ``##``) is that section."""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    found = list(zip(parts[1::2], parts[2::2], strict=True))
    title = re.search(r"^# (.+)$", parts[0], re.M)
    if title and not [t for t, _ in found if t.strip() not in UNSECTIONED]:
        found.insert(0, (title[1], parts[0][title.end() :]))
    return found


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_each_section_ends_with_a_two_line_key_idea(path):
    """Each taught section closes with a key idea (an admonition of class ``key-idea``, one or two
    sentences, 8-24 words: two lines of the desktop column, which the site test measures);
    Summary, Self-check, Exercises and References do not."""
    if path in LANDINGS:
        return  # the chapter's opening: its sections are on the subpages
    for title, body in sections(path.read_text(encoding="utf-8")):
        if title.strip() in UNSECTIONED:
            continue
        ideas = list(KEY_IDEA.finditer(body))
        assert ideas, f"{path.name}: section {title!r} has no key idea"
        last = ideas[-1]
        idea = body[last.end() :].split("\n:::", 1)[0]
        after = body[last.end() + len(idea) :].strip().lstrip(":").strip()
        hidden = r"^```\{code-cell\}[^\n]*\n:tags: \[remove-cell\]\n.*?^```\s*$"  # not read
        after = re.sub(hidden, "", after, flags=re.M | re.S)
        assert not re.sub(r"^\([\w-]+\)=\s*$", "", after, flags=re.M).strip(), (
            f"{path.name}: section {title!r} goes on after its key idea"
        )
        words = len(re.sub(r"\$[^$]+\$", "math", idea).split())  # a formula reads as one word
        assert 8 <= words <= 24, f"{path.name}: {title!r}'s key idea has {words} words"


@pytest.mark.parametrize("path", PAGES, ids=page_id)
def test_the_provenance_of_stored_runs_is_in_dropdowns(path):
    """Which script made a stored run, how long it took and with which seeds is told in a
    dropdown (``:::{dropdown}``), not in the prose a reader reads through: every line naming a
    ``benchmarks/`` script is inside one."""
    depth, outside = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"^\s*(:{3,})(\{[\w:-]+\})?", line)
        if fence and fence[2]:
            depth.append(fence[2])
        elif fence and depth:
            depth.pop()
        elif "benchmarks/" in line and "{dropdown}" not in depth:
            outside.append(f"{number}: {line.strip()[:80]}")
    assert not outside, f"{path.name}: provenance outside a dropdown:\n" + "\n".join(outside)


@pytest.mark.parametrize("path", [p for p in PAGES if p not in LANDINGS], ids=page_id)
def test_a_subpage_opens_with_what_it_does(path):
    """A reader who arrives at a subpage from the sidebar or a search reads, under its title and
    before its first section, what the page does and what it builds on (one to three sentences)."""
    text = path.read_text(encoding="utf-8")
    after_title = text.split("\n# ", 1)[1].split("\n", 1)[1]
    lead = re.split(r"^## ", after_title, maxsplit=1, flags=re.M)[0]
    lead = re.sub(r"^```\{code-cell\}.*?^```\s*$", "", lead, flags=re.M | re.S)  # the setup cell
    words = len(re.sub(r"^\([\w-]+\)=\s*$", "", lead, flags=re.M).split())
    assert words >= 15, f"{page_id(path)}: {words} words before its first section"
