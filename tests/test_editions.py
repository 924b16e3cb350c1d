"""Two editions from one source (book/_ext/editions.py): the student site and the instructor's.

- Sources: every end-of-chapter exercise is a `{exercise}` with a label and a hint, and has exactly
  one worked solution in the instructor's pages (`book/instructor/solutions/`), and no chapter page
  holds a solution.
- The switch: the student edition excludes `book/instructor/`; the instructor's appends its parts
  to the table of contents, writes it beside its output, never into the student site's folder.
- After both builds (marker `built`): the student site has no instructor page, no solution and no
  instructor docname in its search index; the instructor's site has every solution, the banner,
  and the chapter pages.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import editions  # noqa: E402
from chapters import all_pages  # noqa: E402
from sphinx.errors import ConfigError  # noqa: E402

STUDENT_SITE = ROOT / "_build" / "html"
INSTRUCTOR_SITE = ROOT / "_build" / "instructor" / "_build" / "html"
EXERCISE = re.compile(r"^(?P<fence>:{3,})\{exercise\}\s*$")
LABEL = re.compile(r"^:label:\s*(?P<label>\S+)\s*$")
SOLUTION = re.compile(r"^(?:`{3,}|:{3,})\{solution(?:-start)?\}\s+(?P<label>\S+)\s*$")


def exercises() -> dict[str, dict]:
    """``{label: {"page": docname, "hint": bool}}`` of every exercise on the chapter pages."""
    found = {}
    for docname in all_pages(ROOT):
        lines = (ROOT / f"{docname}.md").read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            opening = EXERCISE.match(line)
            if not opening:
                continue
            label = LABEL.match(lines[i + 1])
            assert label, f"{docname}.md:{i + 2}: an exercise without a :label:"
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == opening["fence"])
            body = "\n".join(lines[i:end])
            found[label["label"]] = {"page": docname, "hint": "{dropdown} Hint" in body}
    return found


def solutions() -> dict[str, list[str]]:
    """``{exercise label: [solution pages]}`` from the instructor's solution pages."""
    found: dict[str, list[str]] = {}
    for page in sorted((ROOT / "book" / "instructor" / "solutions").glob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            if m := SOLUTION.match(line):
                found.setdefault(m["label"], []).append(page.stem)
    return found


def test_every_exercise_has_a_label_a_hint_and_one_solution():
    found = exercises()
    assert len(found) >= 45, len(found)
    for label, exercise in found.items():
        chapter = re.fullmatch(r"ch(\d\d)-ex\d+", label)
        assert chapter, f"{label}: exercise labels are chNN-exK"
        assert exercise["page"].startswith(f"book/ch{chapter[1]}_"), (label, exercise["page"])
        assert exercise["hint"], f"{label} has no hint"
    solved = solutions()
    assert sorted(solved) == sorted(found), (
        f"exercises without a solution: {sorted(set(found) - set(solved))}; "
        f"solutions of no exercise: {sorted(set(solved) - set(found))}"
    )
    for label, pages in solved.items():
        assert pages == [label[:4]], f"{label} is solved on {pages}"


def test_no_chapter_page_holds_a_solution():
    for docname in all_pages(ROOT):
        source = (ROOT / f"{docname}.md").read_text(encoding="utf-8")
        assert "{solution" not in source, docname


def test_the_edition_is_one_of_two(monkeypatch):
    monkeypatch.delenv(editions.ENV, raising=False)
    assert editions.edition() == "student"
    monkeypatch.setenv(editions.ENV, "instructor")
    assert editions.edition() == "instructor"
    monkeypatch.setenv(editions.ENV, "teacher")
    with pytest.raises(ConfigError, match="expected one of student, instructor"):
        editions.edition()


def _app(outdir: Path) -> tuple[SimpleNamespace, SimpleNamespace]:
    app = SimpleNamespace(srcdir=str(ROOT), outdir=str(outdir))
    config = SimpleNamespace(
        exclude_patterns=["_build"],
        external_toc_path=str(ROOT / "_toc.yml"),
        html_theme_options={},
        html_title="Sequence Models for NLP",
        project="Sequence Models for NLP",
    )
    return app, config


def test_the_student_edition_excludes_the_instructor_pages(monkeypatch, tmp_path):
    monkeypatch.setenv(editions.ENV, "student")
    app, config = _app(tmp_path / "html")
    editions._configure(app, config)
    assert "book/instructor/**" in config.exclude_patterns
    assert config.external_toc_path == str(ROOT / "_toc.yml")
    assert "announcement" not in config.html_theme_options


def test_the_instructor_edition_appends_its_parts_beside_its_output(monkeypatch, tmp_path):
    monkeypatch.setenv(editions.ENV, "instructor")
    app, config = _app(tmp_path / "_build" / "html")
    editions._configure(app, config)
    toc = yaml.safe_load(Path(config.external_toc_path).read_text(encoding="utf-8"))
    assert Path(config.external_toc_path).parent == tmp_path / "_build"
    student = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    assert toc["parts"][: len(student["parts"])] == student["parts"]
    assert toc["parts"][-1]["caption"] == "Instructor's edition"
    for docname in editions.instructor_pages(ROOT):
        assert (ROOT / f"{docname}.md").is_file(), f"{docname}.md is in the toc but missing"
    assert "instructor" in config.html_theme_options["announcement"].lower()
    assert "book/instructor/**" not in config.exclude_patterns


def test_the_instructor_edition_refuses_the_student_site_folder(monkeypatch):
    monkeypatch.setenv(editions.ENV, "instructor")
    for outdir in (STUDENT_SITE, STUDENT_SITE / "sub"):
        app, config = _app(outdir)
        with pytest.raises(ConfigError, match="would write into the student site"):
            editions._configure(app, config)


# ---------------------------------------------------------------------------- after both builds
def _html_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@pytest.mark.built
def test_the_student_site_has_hints_and_no_solution():
    if not (STUDENT_SITE / "index.html").is_file():
        pytest.fail("no student site: run `make book` first")
    assert not (STUDENT_SITE / "book" / "instructor").exists()
    assert not (STUDENT_SITE / "_sources" / "book" / "instructor").exists()
    index = _html_text(STUDENT_SITE / "searchindex.js")
    assert "book/instructor" not in index
    for page in STUDENT_SITE.rglob("*.html"):
        text = _html_text(page)
        assert "Solution to" not in text, page
        assert "Instructor's edition" not in text, page
    pages = {e["page"] for e in exercises().values()}
    for docname in pages:
        text = _html_text(STUDENT_SITE / f"{docname}.html")
        assert 'class="exercise' in text and "Hint" in text, docname


@pytest.mark.built
def test_the_instructor_site_has_every_solution_and_its_banner():
    if not (INSTRUCTOR_SITE / "index.html").is_file():
        pytest.fail("no instructor's edition: run `make book-instructor` first")
    for docname in editions.instructor_pages(ROOT):
        text = _html_text(INSTRUCTOR_SITE / f"{docname}.html")
        assert "Instructor's edition" in text, docname
    found = exercises()
    solved = 0
    for page in sorted((INSTRUCTOR_SITE / "book" / "instructor" / "solutions").glob("ch*.html")):
        text = _html_text(page)
        solved += text.count('class="solution')
    assert solved >= len(found), (solved, len(found))
    for docname in all_pages(ROOT):  # the chapters are there too, from the shared cache
        assert (INSTRUCTOR_SITE / f"{docname}.html").is_file(), docname
    for label, exercise in found.items():  # each exercise links to its worked solution
        text = _html_text(INSTRUCTOR_SITE / f"{exercise['page']}.html")
        assert f"solutions/{label[:4]}.html#{label}-solution" in text, label
