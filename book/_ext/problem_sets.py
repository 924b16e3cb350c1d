"""The "Problem sets" page: each released problem set, the chapters it covers, its student notebook as
a download, and the commands that run it.

- Which chapters a problem set covers is stated once, in the front matter of ``book/problem_sets.md``
  (``problem_sets: {ps1: [ch01_language_models]}``); every folder ``assignments/<ps>/`` must be
  listed there, and every chapter named must exist.
- Before Sphinx reads the sources, each ``assignments/<ps>/`` (nbgrader's *student release*, never
  ``solutions/``) is copied to ``book/_generated/problem_sets/<ps>/`` and the page's body is written
  to ``book/_generated/problem_sets.md``, which the page includes.
- The build fails (a Sphinx error) if anything offered for download contains solution code
  (``### BEGIN SOLUTION``), hidden tests (``BEGIN HIDDEN TESTS``) or reference outputs
  (``*.safetensors``, a ``references/`` folder).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

PAGE = "book/problem_sets.md"
FORBIDDEN_TEXT = {
    "### BEGIN SOLUTION": "solution code",
    "BEGIN HIDDEN TESTS": "hidden tests",
}
FORBIDDEN_SUFFIXES = {".safetensors": "reference outputs"}
FORBIDDEN_DIRS = {"references": "reference outputs", "solutions": "solutions"}


def check_release(folder: Path) -> list[Path]:
    """The files of `folder` that may be offered to students; raises if any would leak answers."""
    files = sorted(
        p for p in folder.rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts
    )
    problems = []
    for path in files:
        relative = path.relative_to(folder)
        for part in relative.parts[:-1]:
            if part in FORBIDDEN_DIRS:
                problems.append(f"{relative}: {FORBIDDEN_DIRS[part]} (a {part}/ folder)")
        if path.suffix in FORBIDDEN_SUFFIXES:
            problems.append(f"{relative}: {FORBIDDEN_SUFFIXES[path.suffix]} ({path.suffix})")
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for marker, what in FORBIDDEN_TEXT.items():
            if marker in text:
                problems.append(f"{relative}: {what} ({marker!r})")
    if problems:
        raise ExtensionError(
            f"[problem_sets] {folder} would give students what they must not see:\n  "
            + "\n  ".join(problems)
        )
    if not files:
        raise ExtensionError(f"[problem_sets] {folder} is empty")
    return files


def _front_matter(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    return (yaml.safe_load(m[1]) if m else None) or {}


def _title(notebook: Path) -> str:
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])
            m = re.search(r"^#\s+(.+)$", source, re.M)
            if m:
                return m[1].strip()
    return notebook.stem


def _tasks(notebook: Path) -> str:
    """What the notebook grades, in words: its tests (graded automatically), its written answers
    (graded by hand) and their points."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    graded = [c for c in cells if c["metadata"].get("nbgrader", {}).get("grade")]
    points = sum(float(c["metadata"]["nbgrader"].get("points", 0)) for c in graded)
    tests = sum(c["cell_type"] == "code" for c in graded)
    written = len(graded) - tests
    parts = [f"{tests} autograded task{'s' * (tests != 1)}"]
    if written:
        parts.append(f"{written} written answer{'s' * (written != 1)} graded by hand")
    return f"{' and '.join(parts)}, {points:g} points"


def _write_if_changed(path: Path, text: str) -> None:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _copy_if_changed(source: Path, target: Path) -> None:
    if target.is_file() and target.read_bytes() == source.read_bytes():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _generate(app: Sphinx) -> None:
    from notebooks import repository_folder, student_commands

    srcdir = Path(app.srcdir)
    page = srcdir / PAGE
    if not page.is_file():
        return
    covers = _front_matter(page).get("problem_sets") or {}
    released = sorted(p.name for p in (srcdir / "assignments").glob("*") if p.is_dir())
    unlisted = [ps for ps in released if ps not in covers]
    if unlisted:
        raise ExtensionError(
            f"[problem_sets] {PAGE} does not say which chapters {', '.join(unlisted)} cover(s): "
            "add them to its front matter (problem_sets: {ps: [chapter, ...]})"
        )
    out = srcdir / "book" / "_generated" / "problem_sets"
    sections = []
    for ps in released:
        folder = srcdir / "assignments" / ps
        files = check_release(folder)
        notebooks = [f for f in files if f.suffix == ".ipynb"]
        if len(notebooks) != 1:
            raise ExtensionError(f"[problem_sets] {folder} must hold one notebook, not {notebooks}")
        chapters = []
        for chapter in covers[ps]:
            if not (srcdir / "book" / f"{chapter}.md").is_file():
                raise ExtensionError(
                    f"[problem_sets] {ps} covers {chapter}, which is not a chapter"
                )
            number = int(re.match(r"ch(\d+)", chapter)[1])
            chapters.append(f"Chapter {number}, {{doc}}`{chapter}`")
        if (out / ps).is_dir():
            stale = {p.relative_to(out / ps) for p in (out / ps).rglob("*") if p.is_file()}
            for path in stale - {f.relative_to(folder) for f in files}:
                (out / ps / path).unlink()
        for path in files:
            _copy_if_changed(path, out / ps / path.relative_to(folder))
        notebook = notebooks[0]
        grades = _tasks(notebook)
        text = notebook.read_text(encoding="utf-8")
        training = "Training(" in text  # a part B that trains
        in_repository = f"{repository_folder(app)}/assignments/{ps}/{notebook.name}"
        trains = (
            " Part B's training cell trains your model (under a minute on one core) and says "
            "when it has finished; the grader then measures the model on held-out text."
            if training
            else ""
        )
        if "CapstoneText(" in text:  # the capstone: trained by the student, graded from a file
            trains = (
                " You train your model yourself, once (about ten minutes on two cores), and "
                "submit the checkpoint it saves with the notebook; the grader loads it and "
                "measures the model on held-out text."
            )
        sections.append(
            f"""\
## {_title(notebook)}

- **Covers:** {"; ".join(chapters)}.
- **Notebook:** {{download}}`{notebook.name} <_generated/problem_sets/{ps}/{notebook.name}>` — {grades}.
  The same file is `{in_repository}` in the course repository you cloned.
- **Open it** in the folder you saved it to, with the environment set up above active:

```bash
jupyter lab {notebook.name}
```

Run all cells (*Kernel → Restart Kernel and Run All Cells*). Each test cell prints
`✓ <task>: public checks passed — hidden checks run at grading`, or names the public checks that
failed; until you write a function, its test cell says so with `NotImplementedError`.{trains}
"""
        )
    setup = student_commands(app, "").rstrip()
    first = f"""\
## Set up once

These commands make the one environment that runs every chapter and every problem set:

```bash
{setup}
```
"""
    body = "\n".join([first, *sections]) if sections else "No problem set is released yet.\n"
    _write_if_changed(srcdir / "book" / "_generated" / "problem_sets.md", body)
    logger.info(f"[problem_sets] {len(sections)} problem set(s): {', '.join(released)}")


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", _generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
