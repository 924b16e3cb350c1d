"""After a deadline: feedback through nbgrader's exchange, and the solution students may have.

- `release_feedback` (``python -m seqmodels.grading.release feedback ps1``): ``make grade`` keeps
  only the pages in ``grading/feedback/<student>/<ps>/``; ``nbgrader release_feedback`` also needs
  each submission's ``timestamp.txt`` and ``submission_secret.txt`` (written by the student's
  ``nbgrader submit``, brought by ``nbgrader collect``). They are copied beside the pages, then
  nbgrader releases them; submissions collected by ``zip_collect`` have no secret, and their pages
  are named for the LMS.
- `build_solution` (``python -m seqmodels.grading.release solution ps1``): the autograded answers
  and the public tests, searched for every other secret.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

from .leaks import ROOT, Finding, blobs, cell_lines, find_secrets


def prepare_feedback(assignment: str, root: Path = ROOT) -> tuple[list[str], list[str]]:
    """Put each submission's ``timestamp.txt`` and ``submission_secret.txt`` (written by the
    student's ``nbgrader submit``, brought by ``nbgrader collect``) beside its feedback page, where
    ``nbgrader release_feedback`` reads them. Returns the students ready for the exchange and those
    whose submission has no secret (collected with ``zip_collect``: their page goes back through
    the course's LMS)."""
    grading = root / "grading"
    ready, elsewhere = [], []
    for pages in sorted((grading / "feedback").glob(f"*/{assignment}")):
        student = pages.parent.name
        if not list(pages.glob("*.html")):
            continue
        submitted = grading / "submitted" / student / assignment
        if all((submitted / n).is_file() for n in ("timestamp.txt", "submission_secret.txt")):
            for name in ("timestamp.txt", "submission_secret.txt"):
                shutil.copyfile(submitted / name, pages / name)
            ready.append(student)
        else:
            elsewhere.append(student)
    return ready, elsewhere


WITHHELD = (
    "*The model answer of this written task is not released; your feedback and the discussion in "
    "class cover it.*"
)


def solution_notebook(source: dict) -> dict:
    """A problem set's solution as students may have it after the deadline: the autograded answers
    and the public tests; no hidden test, mark scheme, or model answer of a written task."""
    notebook = copy.deepcopy(source)
    for cell in notebook["cells"]:
        lines = cell_lines(cell)
        kept = [line for line, kind in lines if kind in (None, "solution")]
        if any(kind == "model answer" for _, kind in lines):
            kept.append(WITHHELD)
        cell["source"] = "\n".join(kept)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return notebook


def build_solution(assignment: str, out: Path, ref: str = "HEAD") -> tuple[Path, list[Finding]]:
    """``<out>/<ps>_solution.ipynb`` from commit `ref`, and what a search for every secret but the
    autograded answers finds in it (nothing, or it is refused)."""
    path = f"solutions/{assignment}/{assignment}.ipynb"
    source = json.loads(blobs(ref, [path])[path])
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{assignment}_solution.ipynb"
    target.write_text(json.dumps(solution_notebook(source), indent=1) + "\n", encoding="utf-8")
    from .release import course_secrets

    findings, _ = find_secrets([target], course_secrets(ref).without("solution"))
    return target, findings


def release_feedback(assignment: str, extra: list[str], root: Path = ROOT) -> int:
    """``nbgrader release_feedback`` of every exchange submission graded (see `prepare_feedback`)."""
    ready, elsewhere = prepare_feedback(assignment, root)
    print(f"{assignment}: feedback of {len(ready)} exchange submission(s) to release")
    if elsewhere:
        print(
            f"{len(elsewhere)} submission(s) came without nbgrader's submission secret (zip_collect); "
            "return their pages through the LMS: "
            + ", ".join(f"grading/feedback/{s}/{assignment}/" for s in elsewhere)
        )
    if not ready:
        return 0
    command = ["nbgrader", "release_feedback", assignment, *extra]
    excluded = ",".join(elsewhere)
    if excluded:
        command.append(f"--CourseDirectory.student_id_exclude={excluded}")
    return subprocess.run(command, cwd=root).returncode
