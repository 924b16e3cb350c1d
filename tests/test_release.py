"""The student release (`make release`: `seqmodels.grading.release`, `leaks`, `after_deadline`) and
the course's round trip.

- The student repository is built from the allow-list of one commit: one commit, no path outside
  the allow-list, the library with the test cells' `Checker` and without the grader's modules.
- The search finds nothing in it, and it can fail: a solution line, a hidden-test line, a marker,
  a reference file and an instructor's file planted in a copy of the repository, the archive and a
  site are each found.
- After `make book` (marker `built`): the whole release with the built site (its `_sources/`,
  `searchindex.js`, downloads and generated chapter notebooks) holds no secret.
- Submission: an LMS download named as the README says goes through `nbgrader zip_collect` into
  grading/submitted/<student>/<ps>/; feedback after `make grade` goes through nbgrader's exchange
  (`release_feedback`, then the student's `fetch_feedback`); the solution after the deadline holds
  the autograded answers and no other secret.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from seqmodels.grading import after_deadline, leaks, release

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("SEQMODELS_SITE", ROOT / "_build" / "html"))
BIN = Path(sys.executable).parent
COURSE_ID = "sequence-models-nlp"


@pytest.fixture(scope="module")
def secrets():
    return release.course_secrets()


@pytest.fixture(scope="module")
def student_release(tmp_path_factory):
    """The repository and archive of HEAD (no site: the pytest phase runs before `make book`)."""
    out = tmp_path_factory.mktemp("release")
    report = release.build_release(out, site=None, chapters=False)
    return out, report


def problem_sets() -> list[str]:
    return sorted(
        p.parent.name for p in ROOT.glob("solutions/*/*.ipynb") if p.stem == p.parent.name
    )


def test_the_allow_list_keeps_only_what_students_need():
    shipped = [
        "assignments/README.md",
        "assignments/ps1/ps1.ipynb",
        "lib/seqmodels/grading/capture.py",
        "lib/seqmodels/grading/compare.py",
        "lib/seqmodels/grading/rules.py",
        "lib/seqmodels/ngram.py",
        "lib/seqmodels/results/gpt_kjv.safetensors",
        "pyproject.toml",
        "requirements.txt",
    ]
    kept_back = [
        "solutions/ps1/ps1.ipynb",
        "solutions/ps1/references/ps1.safetensors",
        "solutions/README.md",
        "tests/ps1_submissions.py",
        "tests/test_student_install.py",
        "nbgrader_config.py",
        "README.md",
        "Makefile",
        "benchmarks/grading_throughput.py",
        "book/ch01_language_models.md",
        ".ci/run",
        "lib/seqmodels/grading/sandbox.py",
        "lib/seqmodels/grading/preprocessors.py",
        "lib/seqmodels/grading/references.py",
        "lib/seqmodels/grading/release.py",
        "lib/seqmodels/grading/heldout.py",
        "lib/seqmodels/bytebpe.py",  # Problem Set 6's answer, the grader's encoder
        "solutions/ps6/references/submission/capstone.safetensors",
        "lib/seqmodels/notes.txt",
    ]
    assert [p for p in shipped if not release.allowed(p)] == []
    assert [p for p in kept_back if release.allowed(p)] == []


def test_every_problem_set_has_secrets_to_search_for(secrets):
    for ps in problem_sets():
        kinds = {kind for kind, where in secrets.lines.values() if where.startswith(f"{ps} ")}
        assert {"solution", "hidden test"} <= kinds, (ps, kinds)
    references = [p for p in ROOT.glob("solutions/*/references/**/*") if p.is_file()]
    assert len(secrets.blobs) == len(references) > 0


def test_every_model_answer_and_rubric_line_is_a_secret(secrets):
    """Each line of a mark-scheme region (a written answer's model answer and rubric) long enough
    to search for is searched for: none is dropped as a line students have anyway."""
    rubric = []
    for ps in problem_sets():
        source = json.loads((ROOT / "solutions" / ps / f"{ps}.ipynb").read_text())
        rubric += [
            leaks._normal(line)
            for cell in source["cells"]
            for line, kind in leaks.cell_lines(cell)
            if kind == "mark scheme" and len(leaks._normal(line)) >= leaks.MIN_LINE
        ]
    assert len(rubric) >= 20  # PS1's part C
    assert [line for line in rubric if secrets.lines.get(line, ("",))[0] != "mark scheme"] == []


def test_worked_solutions_are_read_from_every_solution_directive():
    page = """# Chapter 4: worked solutions

:::{solution} ch04-ex1
:label: ch04-ex1-solution

The bound follows from submultiplicativity, one factor per step.

::::{dropdown} Check
a nested directive's body is the solution's too
::::
:::

```{solution-start} ch04-ex2
:label: ch04-ex2-solution
```

Prose between the gated directives.

```{code-cell} ipython3
decay = spectral_norms(rnn)
```

```{solution-end}
```

A sentence after the solutions is not one of them.
"""
    lines = leaks.worked_solution_lines(page)
    assert "The bound follows from submultiplicativity, one factor per step." in lines
    assert "a nested directive's body is the solution's too" in lines
    assert "Prose between the gated directives." in lines
    assert "decay = spectral_norms(rnn)" in lines
    assert "A sentence after the solutions is not one of them." not in lines
    assert "# Chapter 4: worked solutions" not in lines


def test_every_worked_solution_line_is_a_secret(secrets):
    """The instructor's edition: each long line of every `{solution}` body is searched for in the
    release and the student site (unless a chapter or the library holds it too)."""
    pages = sorted(ROOT.glob("book/instructor/solutions/*.md"))
    assert len(pages) == 9
    for page in pages:
        lines = [
            leaks._normal(line)
            for line in leaks.worked_solution_lines(page.read_text(encoding="utf-8"))
            if len(leaks._normal(line)) >= leaks.MIN_LINE
        ]
        ours = [line for line in lines if secrets.lines.get(line, ("",))[0] == "worked solution"]
        assert len(ours) >= 10, (page.name, len(ours), len(lines))


def test_the_student_repository(student_release):
    out, report = student_release
    repository = out / release.NAME
    assert report["findings"] == []
    assert report["commits"] == 1
    files = subprocess.run(
        ["git", "ls-files"], cwd=repository, capture_output=True, text=True, check=True
    ).stdout.split()
    assert {f.split("/")[0] for f in files} == {
        ".gitignore",
        "README.md",
        "assignments",
        "lib",
        "pyproject.toml",
        "requirements.txt",
    }
    assert [
        f for f in files if f.startswith(("lib/", "assignments/")) and not release.allowed(f)
    ] == []
    for ps in problem_sets():
        assert f"assignments/{ps}/{ps}.ipynb" in files
    # the archive holds the same files under one folder
    with tarfile.open(out / f"{release.NAME}.tar.gz") as archive:
        names = {m.name for m in archive if m.isfile()}
    assert names == {f"{release.NAME}/{f}" for f in files}


def _imports(source: str, package: str) -> set[str]:
    """The seqmodels names that `source` (a module of `package`) imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            names = [f"{name}.{a.name}" for a in node.names] + [name]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n.split(".")[0] == "seqmodels")
    return found


def test_what_notebooks_and_the_library_import_is_released(student_release):
    """Every seqmodels module a released notebook or a released module imports (the test cells'
    `Checker` with what it imports) is in the release: names that are not modules are attributes."""
    out, _ = student_release
    lib = out / release.NAME / "lib"
    modules = {
        ".".join(p.relative_to(lib).with_suffix("").parts).removesuffix(".__init__")
        for p in lib.rglob("*.py")
    }
    sources = [
        (p, p.relative_to(lib).with_suffix("").as_posix().replace("/", "."))
        for p in lib.rglob("*.py")
    ]
    wanted: dict[str, str] = {}
    for path, module in sources:
        package = (
            module.removesuffix(".__init__")
            if path.name == "__init__.py"
            else module.rsplit(".", 1)[0]
        )
        for name in _imports(path.read_text(), package):
            wanted.setdefault(name, str(path.relative_to(out)))
    for notebook in (out / release.NAME / "assignments").glob("*/*.ipynb"):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "code":
                code = "\n".join(
                    line
                    for line in "".join(cell["source"]).splitlines()
                    if not line.startswith(("%", "!"))
                )
                for name in _imports(code, "__main__"):
                    wanted.setdefault(name, notebook.name)
    assert "seqmodels.grading.Checker" in wanted
    instructor = set(release.INSTRUCTOR_ONLY)
    missing = {
        name: by
        for name, by in wanted.items()
        if name not in modules and name.rsplit(".", 1)[0] not in modules
    }
    assert missing == {}, missing
    assert not [n for n in wanted if n in instructor], [n for n in wanted if n in instructor]


def _plant(tmp_path: Path, student_release, secrets) -> dict[str, Path]:
    """Copies of the release with one secret each, and the untouched copy."""
    out, _ = student_release
    solution = next(line for line, (kind, _) in secrets.lines.items() if kind == "solution")
    hidden = next(line for line, (kind, _) in secrets.lines.items() if kind == "hidden test")
    rubric = next(line for line, (kind, _) in secrets.lines.items() if kind == "mark scheme")
    reference = next(ROOT.glob("solutions/*/references/*.safetensors"))
    cases = {}

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(
            out / release.NAME, target / release.NAME, ignore=shutil.ignore_patterns(".git")
        )
        cases[name] = target
        return target / release.NAME

    copy("untouched")
    with open(copy("solution in the library") / "lib/seqmodels/vocab.py", "a") as f:
        f.write(f"\n# {solution}\n")
    with open(copy("marker in a readme") / "assignments/README.md", "a") as f:
        f.write("\n    ### BEGIN HIDDEN TESTS\n")
    shutil.copy(reference, copy("a reference file") / "lib/seqmodels/results/ps.safetensors")
    (copy("a test file of submissions") / "ps1_submissions.py").write_text("# nothing secret\n")
    with open(copy("rubric in a readme") / "assignments/README.md", "a") as f:
        f.write(f"\n{rubric}\n")
    # a site whose page shows a hidden test as highlighted, escaped HTML
    site = tmp_path / "site in html"
    (site / "_sources").mkdir(parents=True)
    words = hidden.split(" ")
    page = " ".join(
        f'<span class="n">{w.replace("<", "&lt;").replace(chr(34), "&quot;")}</span>' for w in words
    )
    (site / "page.html").write_text(f"<html><pre>{page}\n</pre></html>")
    cases["site in html"] = site
    # a search index that holds a line of a worked solution of the instructor's edition
    worked = next(line for line, (kind, _) in secrets.lines.items() if kind == "worked solution")
    index = tmp_path / "worked solution in a page"
    index.mkdir()
    (index / "searchindex.js").write_text(f"Search.setIndex({json.dumps({'t': worked})})")
    cases["worked solution in a page"] = index
    # an archive whose member holds a solution line in a notebook
    archive = tmp_path / "archive" / "sequence-models-nlp.tar.gz"
    archive.parent.mkdir()
    notebook = json.dumps(
        {"cells": [{"cell_type": "code", "source": ["x = 1\n", f"    {solution}\n"]}]}
    )
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("sequence-models-nlp/assignments/ps1/ps1.ipynb")
        info.size = len(notebook.encode())
        tar.addfile(info, io.BytesIO(notebook.encode()))
    cases["solution in an archive's notebook"] = archive
    return cases


def test_a_secret_line_of_thousands_of_characters_is_searched_for():
    """The search's pattern is a trie of every secret line; a 597-character line of a model answer
    once overflowed Python's recursion building it (one frame a character)."""
    long = "the model answer goes on " * 200  # 5,000 characters
    pattern = re.compile(leaks._trie_regex([long, "the model", "another line"]))
    assert pattern.search("x" + long + "y").group(0) == long
    assert pattern.search("in the model answer").group(0) == "the model"


def test_the_search_finds_every_planted_secret(tmp_path, student_release, secrets):
    cases = _plant(tmp_path, student_release, secrets)
    expected = {
        "untouched": None,
        "solution in the library": "a solution line of",
        "marker in a readme": "hidden-tests marker",
        "a reference file": "the bytes of solutions/",
        "a test file of submissions": "a test file of submissions",
        "rubric in a readme": "a mark scheme line of",
        "site in html": "a hidden test line of",
        "solution in an archive's notebook": "a solution line of",
        "worked solution in a page": "a worked solution line of",
    }
    for name, path in cases.items():
        findings, files = leaks.find_secrets([path], secrets)
        assert files > 0
        if expected[name] is None:
            assert findings == [], (name, findings)
        else:
            assert any(expected[name] in f.what for f in findings), (name, findings)


def test_the_command_refuses_a_release_with_a_secret(tmp_path, student_release, secrets):
    cases = _plant(tmp_path, student_release, secrets)
    command = [sys.executable, "-m", "seqmodels.grading.release", "check"]
    ok = subprocess.run([*command, str(cases["untouched"])], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = subprocess.run(
        [*command, str(cases["solution in the library"])], capture_output=True, text=True
    )
    assert bad.returncode == 1 and "a solution line of" in bad.stdout, bad.stdout + bad.stderr


def test_the_solution_after_the_deadline(tmp_path, secrets):
    """The autograded answers and the public tests; no hidden test, marker or mark scheme."""
    for ps in problem_sets():
        target, findings = after_deadline.build_solution(ps, tmp_path)
        assert findings == [], findings
        text = "\n".join(
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in json.loads(target.read_text())["cells"]
        )
        answers = [
            line
            for line, (kind, where) in secrets.lines.items()
            if kind == "solution" and where.startswith(f"{ps} ")
        ]
        assert answers and all(line in leaks._normal(text) for line in answers), ps


# ---------------------------------------------------------------------------- after `make book`
@pytest.mark.built
def test_the_whole_release_with_the_site(tmp_path, secrets):
    if not (SITE / "index.html").is_file():
        pytest.fail(f"no built site at {SITE}: run `make book` first")
    report = release.build_release(tmp_path, site=SITE, chapters=True)
    assert report["findings"] == [], report["findings"]
    chapters = sorted(p.stem for p in (ROOT / "book").glob("ch*.md"))
    shipped = sorted(p.stem for p in (tmp_path / release.NAME / "chapters").glob("*.ipynb"))
    assert shipped == chapters
    site = tmp_path / "site"
    searched = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    assert "searchindex.js" in searched
    assert any(p.startswith("_sources/") for p in searched)
    downloads = [p for p in searched if p.endswith(".ipynb")]
    for ps in problem_sets():
        assert any(p.endswith(f"/{ps}.ipynb") for p in downloads), ps
    for chapter in chapters:
        assert any(p.endswith(f"/{chapter}.ipynb") for p in downloads), chapter
    assert not (site / "reports").exists()


# ---------------------------------------------------------------------------- the round trip
def nbgrader(*args: str, cwd: Path) -> str:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [str(BIN / "nbgrader"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, (
        f"nbgrader {args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result.stdout + result.stderr


@pytest.fixture
def course(tmp_path) -> Path:
    """A scratch course with this course's nbgrader configuration and PS1's release."""
    course = tmp_path / "course"
    (course / "assignments" / "ps1").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copy(ROOT / "assignments" / "ps1" / "ps1.ipynb", course / "assignments" / "ps1")
    return course


@pytest.mark.grading
def test_zip_collect_takes_the_files_students_upload(course, tmp_path):
    """An LMS download as the README describes: <student>/ps1.ipynb and <student>_ps1.ipynb in
    archives, and the capstone's checkpoint and log named alike; a renamed notebook and any other
    file are skipped (nbgrader's log names the notebook)."""
    notebook = (course / "assignments" / "ps1" / "ps1.ipynb").read_bytes()
    archive = course / "grading" / "downloaded" / "ps1" / "archive"
    archive.mkdir(parents=True)
    with zipfile.ZipFile(archive / "ps1 submissions.zip", "w") as z:
        z.writestr("alice/ps1.ipynb", notebook + b" ")
        z.writestr("bob.smith_ps1.ipynb", notebook + b"  ")
        z.writestr("carol/ps1 (1).ipynb", notebook)
        # Problem Set 6 submits a checkpoint and its log beside the notebook
        z.writestr("alice/capstone.safetensors", b"weights")
        z.writestr("bob.smith_capstone_log.json", b"{}")
        z.writestr("alice/notes.txt", b"not collected")
    with tarfile.open(archive / "late.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("dave_ps1.ipynb")
        info.size = len(notebook)
        tar.addfile(info, io.BytesIO(notebook))
    log = nbgrader("zip_collect", "ps1", cwd=course)
    submitted = course / "grading" / "submitted"
    got = {p.relative_to(submitted).as_posix(): p.read_bytes() for p in submitted.rglob("*.ipynb")}
    assert got == {
        "alice/ps1/ps1.ipynb": notebook + b" ",
        "bob.smith/ps1/ps1.ipynb": notebook + b"  ",
        "dave/ps1/ps1.ipynb": notebook,
    }
    assert "ps1 (1).ipynb" in log and "did not match" in log
    beside = {p.relative_to(submitted).as_posix() for p in submitted.rglob("*") if p.is_file()}
    assert beside - set(got) == {
        "alice/ps1/capstone.safetensors",
        "bob.smith/ps1/capstone_log.json",
    }


@pytest.mark.grading
def test_feedback_reaches_the_student_through_the_exchange(course, tmp_path):
    """JupyterHub's exchange: release, the student's submit, collect, `make grade`'s feedback page
    (pages only), `release feedback` (which gives nbgrader what it needs) and the student's
    fetch_feedback. A submission collected by zip_collect is named for the LMS, not released."""
    exchange = [
        f"--Exchange.root={tmp_path / 'exchange'}",
        f"--Exchange.cache={tmp_path / 'cache'}",
    ]
    student = tmp_path / "alice"
    (student / "ps1").mkdir(parents=True)
    shutil.copy(course / "assignments" / "ps1" / "ps1.ipynb", student / "ps1")
    nbgrader("release_assignment", "ps1", *exchange, cwd=course)
    nbgrader("submit", "ps1", f"--course={COURSE_ID}", "--student=alice", *exchange, cwd=student)
    nbgrader("collect", "ps1", "--CollectApp.check_owner=False", *exchange, cwd=course)
    grading = course / "grading"
    assert (grading / "submitted" / "alice" / "ps1" / "submission_secret.txt").is_file()
    (grading / "submitted" / "bob" / "ps1").mkdir(parents=True)  # as zip_collect leaves it
    shutil.copy(student / "ps1" / "ps1.ipynb", grading / "submitted" / "bob" / "ps1")
    pages = {}
    for name in ("alice", "bob"):  # what `make grade` leaves: the page alone
        (grading / "feedback" / name / "ps1").mkdir(parents=True)
        pages[name] = f"<html><body>feedback of {name}</body></html>"
        (grading / "feedback" / name / "ps1" / "ps1.html").write_text(pages[name])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "seqmodels.grading.release",
            "feedback",
            "ps1",
            "--course",
            str(course),
            *exchange,
        ],
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "grading/feedback/bob/ps1/" in result.stdout
    released = list((tmp_path / "exchange" / COURSE_ID / "feedback").glob("*.html"))
    assert [p.read_text() for p in released] == [pages["alice"]]
    nbgrader(
        "fetch_feedback", "ps1", f"--course={COURSE_ID}", "--student=alice", *exchange, cwd=student
    )
    fetched = list((student / "ps1" / "feedback").glob("*/ps1.html"))
    assert [p.read_text() for p in fetched] == [pages["alice"]]
