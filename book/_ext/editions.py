"""Two editions from one source: the student site and the instructor's edition.

``SEQMODELS_EDITION`` picks the edition (``student`` when unset):

- **student** (``make book``, into ``_build/html``): ``book/instructor/`` is excluded, so no worked
  solution, teaching-guide page or rubric is read, executed, indexed or copied into ``_sources``.
  Each exercise on a chapter page shows its hint only.
- **instructor** (``make book-instructor``, into ``_build/instructor/_build/html``): the table of
  contents is ``_toc.yml`` with the parts of ``book/instructor/_toc.yml`` appended (written to
  ``instructor_toc.yml`` beside the output, never into the source tree), every page carries a
  banner, each exercise ends with a link to its worked solution, and the build refuses to write
  into the student site's folder. Both editions share the execution cache
  (``_build/.jupyter_cache``), so a chapter executed for one is not re-run for the other.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from sphinx.errors import ConfigError

ENV = "SEQMODELS_EDITION"
EDITIONS = ("student", "instructor")
INSTRUCTOR_DIR = "book/instructor"
INSTRUCTOR_TOC = f"{INSTRUCTOR_DIR}/_toc.yml"
STUDENT_SITE = Path("_build") / "html"
BANNER = "Instructor's edition, with solutions and rubrics: not for students' eyes."


def edition() -> str:
    """The edition this build makes; a clear error for anything but the two names."""
    name = os.environ.get(ENV, "student") or "student"
    if name not in EDITIONS:
        raise ConfigError(f"{ENV}={name!r}: expected one of {', '.join(EDITIONS)}")
    return name


def instructor_pages(root: Path) -> list[str]:
    """The docnames the instructor's edition adds, in its table of contents' order."""
    found: list[str] = []

    def walk(entries) -> None:
        for entry in entries or []:
            if "file" in entry:
                found.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    walk(_instructor_parts(root))
    return found


def _instructor_parts(root: Path) -> list[dict]:
    path = Path(root) / INSTRUCTOR_TOC
    parts = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise ConfigError(f"{INSTRUCTOR_TOC}: expected a list of parts (caption, chapters)")
    return parts


def instructor_toc(root: Path) -> dict:
    """``_toc.yml`` with the instructor's parts appended."""
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8"))
    toc["parts"] = [*toc["parts"], *_instructor_parts(root)]
    return toc


def _configure(app, config) -> None:
    root = Path(app.srcdir)
    if edition() == "student":
        config.exclude_patterns = [
            *config.exclude_patterns,
            INSTRUCTOR_DIR,
            f"{INSTRUCTOR_DIR}/**",
        ]
        return
    outdir = Path(app.outdir).resolve()
    student = (root / STUDENT_SITE).resolve()
    if outdir == student or student in outdir.parents:
        raise ConfigError(
            f"the instructor's edition would write into the student site ({STUDENT_SITE}); "
            "build it with `make book-instructor` (into _build/instructor)"
        )
    toc_file = outdir.parent / "instructor_toc.yml"
    toc_file.parent.mkdir(parents=True, exist_ok=True)
    toc_file.write_text(yaml.safe_dump(instructor_toc(root), sort_keys=False), encoding="utf-8")
    config.external_toc_path = str(toc_file)
    config.html_theme_options = {**config.html_theme_options, "announcement": BANNER}
    config.html_title = f"{config.html_title or config.project} (instructor's edition)"


def _link_solutions(app, doctree, docname) -> None:
    """In the instructor's edition, end each exercise with a link to its worked solution (the
    solution already links back to its exercise: sphinx-exercise's title)."""
    if edition() != "instructor":
        return
    from docutils import nodes
    from sphinx_exercise.nodes import exercise_enumerable_node, exercise_node

    registry = getattr(app.env, "sphinx_exercise_registry", {})
    solution_of = {
        entry["node"].get("target_label"): (label, entry["docname"])
        for label, entry in registry.items()
        if entry["type"] in ("solution", "solution-start")  # the gated form too
    }
    for kind in (exercise_enumerable_node, exercise_node):
        for exercise in list(doctree.findall(kind)):  # appending below
            if exercise.get("label") not in solution_of:
                continue
            label, page = solution_of[exercise["label"]]
            uri = f"{app.builder.get_relative_uri(docname, page)}#{label}"
            link = nodes.reference("", "Worked solution", refuri=uri, internal=True)
            exercise += nodes.paragraph("", "", link, classes=["seqmodels-solution-link"])


def setup(app) -> dict:
    # before sphinx-external-toc reads the table of contents (its handler has priority 900)
    app.connect("config-inited", _configure, priority=800)
    app.connect("doctree-resolved", _link_solutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
