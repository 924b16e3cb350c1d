"""The teaching guide's generated parts (book/_ext/teaching_guide.py) follow their sources.

The rubrics come from the mark schemes of ``solutions/<ps>/<ps>.ipynb``, the wrong submissions
from ``tests/<ps>_submissions.py`` and the test cells' cases, the hours from each set's first
cell. Unit tests read the real sources; the build tests run Sphinx (with myst-nb, as the book)
on a small project that holds copies of them, so an edit to a copy shows in the page, and a
missing mark scheme fails a ``-W`` build, naming the set and the answer cell.
"""

from __future__ import annotations

import html as html_module
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import teaching_guide as guide  # noqa: E402

SETS = [ps for ps, _ in guide.source_notebooks(ROOT)]


def _notebook(ps: str) -> dict:
    return json.loads((ROOT / "solutions" / ps / f"{ps}.ipynb").read_text(encoding="utf-8"))


def _manual_cells(notebook: dict) -> list[dict]:
    return [
        c["metadata"]["nbgrader"]
        for c in notebook["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade")
        and c["metadata"]["nbgrader"].get("solution")
    ]


def test_there_are_six_problem_sets():
    assert SETS == [f"ps{n}" for n in range(1, 7)]


@pytest.mark.parametrize("ps", SETS)
def test_every_manual_part_has_its_question_rubric_and_points(ps):
    notebook = _notebook(ps)
    found = guide.manual_parts(notebook, ps)
    assert found.problems == []
    cells = _manual_cells(notebook)
    assert [p.grade_id for p in found.parts] == [c["grade_id"] for c in cells]
    assert [p.points for p in found.parts] == [float(c["points"]) for c in cells]
    for part in found.parts:
        assert part.rubric.startswith("**Rubric") and part.rubric_lines >= 3, part.grade_id
        assert part.model_answer.startswith("**Model answer"), part.grade_id
        assert part.question and "MARK SCHEME" not in part.question + part.rubric
        assert part.title[0] in "CD", part.title  # the part's heading, not its Part's
        assert part.answer_words > 0


def test_the_ta_estimate_is_its_formula():
    part = guide.manual_parts(_notebook("ps1"), "ps1").parts[-1]  # Part D: "In 150–300 words"
    assert part.answer_words == 300 and "150–300 words" in part.answer_words_source
    minutes = guide.ta_minutes(part, words_per_minute=150, seconds_per_line=20)
    assert minutes == pytest.approx(300 / 150 + part.rubric_lines * 20 / 60)


def _without_mark_scheme(notebook: dict, grade_id: str) -> dict:
    """The notebook with the mark scheme of the question above answer `grade_id` removed."""
    cells = notebook["cells"]
    index = next(
        i for i, c in enumerate(cells) if c["metadata"]["nbgrader"].get("grade_id") == grade_id
    )
    question = cells[index - 1]
    source = "".join(question["source"])
    question["source"] = re.sub(
        r"=== BEGIN MARK SCHEME ===.*?=== END MARK SCHEME ===", "", source, flags=re.S
    )
    return notebook


def test_an_answer_without_a_mark_scheme_is_reported():
    notebook = _without_mark_scheme(_notebook("ps2"), "c2_vanishing_bound")
    found = guide.manual_parts(notebook, "ps2")
    assert [p.grade_id for p in found.parts] == [
        "c1_bptt_truncation",
        "c3_softmax_gradient",
        "d_context_analysis",
    ]
    assert len(found.problems) == 1 and "ps2 c2_vanishing_bound" in found.problems[0]
    assert "no mark scheme" in found.problems[0]


def test_a_set_without_manual_parts_and_a_scheme_without_rubric_are_reported():
    assert "no manually graded part" in guide.manual_parts({"cells": []}, "ps9").problems[0]
    notebook = _notebook("ps1")
    for cell in notebook["cells"]:
        cell["source"] = "".join(cell["source"]).replace("**Rubric (C1", "**Marks (C1")
    problems = guide.manual_parts(notebook, "ps1").problems
    assert problems == [
        "ps1 c1_mle_derivation (cell 26): its mark scheme has no rubric (a line starting **Rubric)"
    ]


@pytest.mark.parametrize("ps", SETS)
def test_every_wrong_submission_is_read_and_each_killing_case_exists(ps):
    """Every wrong submission the grading tests hold is listed, with its answer cell's test cell;
    where the tests record the case that kills it, that case is in the test cell."""
    notebook = _notebook(ps)
    wrong = guide.wrong_submissions(ROOT / "tests" / f"{ps}_submissions.py")
    sys.path.insert(0, str(ROOT / "tests"))
    module = __import__(f"{ps}_submissions")
    held = {n for n, (cell, *_) in module.WRONG.items() if cell != "d_experiment"}
    assert {w.name for w in wrong} == held
    tests, cases = guide._answer_to_test(notebook), guide.cases_of(notebook)
    for w in wrong:
        assert w.answer_cell in tests, w.name
        if w.killed_by:
            assert any(c.names(w.killed_by) for c in cases[tests[w.answer_cell]]), w.name
    if ps != "ps1":  # PS1's file records the test cell only
        assert all(w.killed_by and w.edits for w in wrong)
        assert any(c.hidden for c in cases[tests[wrong[0].answer_cell]])


def test_hidden_cases_are_those_inside_the_hidden_block():
    cell = {
        "cell_type": "code",
        "metadata": {"nbgrader": {"grade": True, "grade_id": "test_x"}},
        "source": 'check.case("public one", f)\n### BEGIN HIDDEN TESTS\ncheck.case(\n    "hidden: two", g)\n'
        '### END HIDDEN TESTS\ncheck.case(f"after {n}", h)\n',
    }
    cases = guide.cases_of({"cells": [cell]})["test_x"]
    assert cases == [
        guide.Case("public one", False),
        guide.Case("hidden: two", True),
        guide.Case("after {n}", False),
    ]
    assert cases[2].names("after 3") and not cases[0].names("public two")


@pytest.mark.parametrize("ps", SETS)
def test_each_set_states_its_expected_time(ps):
    stated = guide.expected_time(_notebook(ps))
    assert re.fullmatch(r"about \d+ hours", stated), stated


# ------------------------------------------------------------------------------ Sphinx builds
CONF = f"""\
import sys
sys.path[:0] = [{str(ROOT / "book" / "_ext")!r}, {str(ROOT / "lib")!r}]
extensions = ["myst_nb", "sphinx_design", "teaching_guide"]
myst_enable_extensions = ["amsmath", "dollarmath", "colon_fence"]
nb_execution_mode = "off"
exclude_patterns = ["_build", "solutions", "tests"]
"""

PAGE = """\
# Guide

## Rubrics

```{rubrics}
:words-per-minute: 150
:seconds-per-line: 20
:summary:
```

```{rubrics}
:words-per-minute: 150
:seconds-per-line: 20
```

```{rubrics}
:sets: ps3
:words-per-minute: 150
:seconds-per-line: 20
:students: 300
```

## Wrong submissions

```{wrong-submissions} ps2
```

## Hours

```{problem-set-hours}
```

The capstone takes {ps-hours}`ps6`.

## Timings

```{section-timings}
```

```{toctree}
:hidden:
book/ch09_tiny
book/ch09_tiny/part
```
"""

TOC = """\
format: jb-book
root: index
chapters:
  - file: book/ch09_tiny
    sections:
      - file: book/ch09_tiny/part
"""


def _project(
    root: Path, notebooks: dict[str, dict] | None = None, ps2_submissions: str | None = None
) -> Path:
    """A Sphinx project at `root` with the guide page, copies of the problem-set sources (or
    `notebooks`), the wrong submissions of PS2, and one tiny chapter whose pages ran."""
    (root / "conf.py").write_text(CONF)
    (root / "index.md").write_text(PAGE)
    (root / "_toc.yml").write_text(TOC)
    for ps in SETS:
        notebook = (notebooks or {}).get(ps) or _notebook(ps)
        (root / "solutions" / ps).mkdir(parents=True)
        (root / "solutions" / ps / f"{ps}.ipynb").write_text(json.dumps(notebook))
    (root / "tests").mkdir()
    submissions = (ROOT / "tests" / "ps2_submissions.py").read_text(encoding="utf-8")
    (root / "tests" / "ps2_submissions.py").write_text(ps2_submissions or submissions)
    (root / "book" / "ch09_tiny").mkdir(parents=True)
    (root / "book" / "ch09_tiny.md").write_text("# Tiny\n\nA landing page of ten words or so.\n")
    (root / "book" / "ch09_tiny" / "part.md").write_text("# Part\n\nThe one section.\n")
    ran = root / "_build" / "jupyter_execute" / "book"
    for page, seconds in (("ch09_tiny", 1.25), ("ch09_tiny/part", 3.5)):
        (ran / page).parent.mkdir(parents=True, exist_ok=True)
        glue = {"ch9_runtime": {"data": {"text/plain": str(seconds)}}}
        (ran / f"{page}.glue.json").write_text(json.dumps(glue))
    return root


def _build(root: Path) -> tuple[subprocess.CompletedProcess, str]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "-n",
            "--keep-going",
            "-q",
            "-b",
            "html",
            str(root),
            str(root / "_build" / "html"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    page = root / "_build" / "html" / "index.html"
    text = page.read_text(encoding="utf-8") if page.is_file() else ""
    return result, html_module.unescape(re.sub(r"<[^>]+>", "", text))


def _phrase(rubric: str) -> str:
    """Four words of a rubric's lines that the page shows as they are (no math or markup)."""
    for line in rubric.splitlines()[1:]:
        line = re.sub(r"^\s*[-*+]\s+", "", line)
        for piece in re.split(r"\$[^$]*\$|[*`_(),;:.—–]", line):
            words = piece.split()
            if len(words) >= 4 and all(re.fullmatch(r"[A-Za-z'-]+", w) for w in words[:4]):
                return " ".join(words[:4])
    raise AssertionError(rubric)


@pytest.mark.book
def test_the_guide_renders_every_sets_rubrics_wrong_submissions_and_times(tmp_path):
    result, text = _build(_project(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for ps in SETS:
        for part in guide.manual_parts(_notebook(ps), ps).parts:
            assert f"answer cell {part.grade_id}" in text, part.grade_id
            assert _phrase(part.rubric) in " ".join(text.split()), part.grade_id
    assert "an estimate from countable inputs, not a measurement" in text
    assert "at 150 words a minute, plus 20 s per rubric line" in text
    assert "TA hours per 100 students" in text and "all sets" in text
    assert "solutions/ps3/ps3.ipynb: 4 manually graded parts, 6 points" in text
    assert "per 300 students" in text
    # the wrong submissions of PS2, each with the case that catches it
    assert (
        "17 wrong submissions in tests/ps2_submissions.py; 12 of the 17 whose catching case" in text
    )
    assert "gradients_accumulate_in_place" in text and "shared gradient tensors" in text
    # hours as each set states them, and the timings of the tiny chapter's pages
    assert "about 12 hours" in text and "The capstone takes about 12 hours." in text
    assert "1.2 s" in text and "3.5 s" in text and "about 5 min" in text


@pytest.mark.book
def test_an_edited_mark_scheme_changes_the_page(tmp_path):
    notebook = _notebook("ps3")
    old = "- 0.25 — "
    for cell in notebook["cells"]:
        source = "".join(cell["source"])
        if "BEGIN MARK SCHEME" in source and old in source:
            cell["source"] = source.replace(old, "- 0.25 — (edited: the quokka criterion) ", 1)
            break
    result, text = _build(_project(tmp_path, {"ps3": notebook}))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the quokka criterion" in text


@pytest.mark.book
def test_a_missing_mark_scheme_and_a_stale_case_fail_the_build_naming_them(tmp_path):
    notebook = _without_mark_scheme(_notebook("ps4"), "c2_exposure_bias")
    submissions = (ROOT / "tests" / "ps2_submissions.py").read_text(encoding="utf-8")
    old = '"sigmoid_derivative_at_the_input": "sigmoid at 0",'
    assert old in submissions
    stale = submissions.replace(old, '"sigmoid_derivative_at_the_input": "sigmoid at one",')
    result, text = _build(_project(tmp_path, {"ps4": notebook}, stale))
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert "solutions/ps4/ps4.ipynb: ps4 c2_exposure_bias" in log and "no mark scheme" in log
    assert "ps2 sigmoid_derivative_at_the_input: no case of test_broadcast_ops" in log


# ------------------------------------------------------------------------------ the guide's pages
GUIDE = ROOT / "book" / "instructor" / "guide"
PAGES = ["semester", "demos", "misconceptions", "timings", "rubrics", "running"]


def _doc_target(page: Path, target: str) -> Path:
    target = re.sub(r"^.*<(.+)>$", r"\1", target)
    return (
        ROOT / f"{target.lstrip('/')}.md"
        if target.startswith("/")
        else page.parent / f"{target}.md"
    )


@pytest.mark.parametrize("name", PAGES)
def test_a_guide_page_keeps_the_books_rules_and_its_references_resolve(name):
    """Numbers glued or declared, at most MAX_PAGE_WORDS of prose, and every page, figure and
    glued number it takes from a chapter still there (the build resolves them; this says which
    is missing before a build)."""
    from claims import MAX_PAGE_WORDS, glue_keys_used, prose_words, stray_numbers

    page = GUIDE / f"{name}.md"
    source = page.read_text(encoding="utf-8")
    assert stray_numbers(source) == []
    assert prose_words(source) <= MAX_PAGE_WORDS
    for target in re.findall(r"\{doc\}`([^`]+)`", source):
        assert _doc_target(page, target).is_file(), target
    labels = set()
    for chapter in (ROOT / "book").rglob("*.md"):
        labels |= set(re.findall(r"^:name: (\S+)$", chapter.read_text(encoding="utf-8"), re.M))
    for label in re.findall(r"\{numref\}`([^`]+)`", source):
        assert label in labels, label
    for path, key in re.findall(r"\{glue:text\}`(/[^`:]+)::([\w-]+)", source):
        chapter = ROOT / path.lstrip("/")
        assert chapter.is_file(), path
        text = chapter.read_text(encoding="utf-8")
        assert key in glue_keys_used(text, own=True) or f'glue("{key}"' in text, (path, key)
    for claim_name in re.findall(r"`(ch\d-[\w-]+)`", source):
        found = any(
            f'"{claim_name}"' in p.read_text(encoding="utf-8")
            for p in (ROOT / "book").rglob("ch0*/*.md")
        )
        assert found, claim_name
    for ps in re.findall(r"```\{wrong-submissions\} (\S+)", source):
        assert ps in SETS
    if name == "demos":  # every chapter's explorer, its numbers glued from the chapter
        assert len(re.findall(r"\{numref\}`fig-ch\d-explorer`", source)) == 9
        assert len(re.findall(r"\{glue:text\}`/book/", source)) >= 40


def test_numbers_from_the_sources_are_written_for_people_outside_math_and_code():
    text = "a ratio of 7.00e-11, `max_norm = 1e3` and $10^{-4}$ or $1e-3$"
    assert (
        guide.for_people(text)
        == "a ratio of 7.00 × 10⁻¹¹, `max_norm = 1e3` and $10^{-4}$ or $1e-3$"
    )
