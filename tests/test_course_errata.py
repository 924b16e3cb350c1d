"""Running a course: correcting a problem set mid-term (`seqmodels.grading.errata`).

`compare` on Problem Set 1's own release, then a round trip on a one-task assignment in a course of
its own, graded by stock nbgrader (a kernel per grading, no sandbox: what is tested is nbgrader's
handling of cells, which the course's pipeline keeps): a submission made from the first release
is graded again after a permitted correction and earns what the corrected hidden test says; a
refused change (a renamed cell) is the one nbgrader itself would refuse.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
from traitlets.config import Config

from seqmodels.grading import errata

ROOT = Path(__file__).resolve().parents[1]
PS1 = json.loads((ROOT / "assignments/ps1/ps1.ipynb").read_text(encoding="utf-8"))


def cell_of(nb: dict, grade_id: str) -> dict:
    return next(
        c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id
    )


def test_what_a_correction_may_and_may_not_change():
    assert errata.compare(PS1, PS1) == ([], [])
    fixed = copy.deepcopy(PS1)
    cell_of(fixed, "t1_instructions")["source"] += "\n\n**Erratum:** the counts are float64."
    cell_of(fixed, "test_bigram_counts")["metadata"]["nbgrader"]["points"] = 1
    refused, permitted = errata.compare(PS1, fixed)
    assert refused == []
    assert [p.split(":")[0] for p in permitted] == ["t1_instructions", "test_bigram_counts"]

    for change in ("rename", "remove", "add", "stub", "flags", "type"):
        bad = copy.deepcopy(PS1)
        if change == "rename":
            cell_of(bad, "bigram_counts")["metadata"]["nbgrader"]["grade_id"] = "counts"
        elif change == "remove":
            bad["cells"].remove(cell_of(bad, "test_add_k_probs"))
        elif change == "add":
            extra = copy.deepcopy(cell_of(bad, "test_add_k_probs"))
            extra["metadata"]["nbgrader"]["grade_id"] = "test_add_k_probs_more"
            bad["cells"].append(extra)
        elif change == "stub":
            cell_of(bad, "bigram_counts")["source"] = "def bigram_counts(s, v):\n    pass\n"
        elif change == "flags":
            cell_of(bad, "c1_mle_derivation")["metadata"]["nbgrader"]["grade"] = False
        else:
            cell_of(bad, "t1_instructions")["cell_type"] = "code"
        refused, _ = errata.compare(PS1, bad)
        assert len(refused) >= 1, change


# ---------------------------------------------------------------- a round trip through nbgrader
def source_notebook(hidden: str, points: float, note: str = "") -> nbformat.NotebookNode:
    def meta(grade_id, **flags):
        base = {"grade_id": grade_id, "locked": False, "solution": False, "grade": False}
        return {"nbgrader": {**base, **flags, "schema_version": 3}}

    nb = new_notebook(
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        }
    )
    nb.cells = [
        new_markdown_cell(
            "Write `double(x)`, which returns twice `x`." + note,
            metadata=meta("intro", locked=True),
        ),
        new_code_cell(
            "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
            metadata=meta("double", solution=True),
        ),
        new_code_cell(
            "assert double(2) == 4\n### BEGIN HIDDEN TESTS\n" + hidden + "\n### END HIDDEN TESTS",
            metadata=meta("test_double", grade=True, locked=True, points=points),
        ),
    ]
    return nb


def course(tmp_path: Path):
    from nbgrader.apps import NbGraderAPI

    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    config.CourseDirectory.db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    config.CourseDirectory.course_id = "errata-test"
    return NbGraderAPI(config=config)


def write_source(tmp_path: Path, nb) -> None:
    folder = tmp_path / "source/ps1"
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "ps1.ipynb")


def released(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "release/ps1/ps1.ipynb").read_text(encoding="utf-8"))


def score(api, student: str) -> tuple[float, float]:
    from nbgrader.api import Gradebook

    with Gradebook(api.coursedir.db_url) as gb:
        sub = gb.find_submission("ps1", student)
        return sub.score, sub.max_score


@pytest.fixture
def nbgrader_path(monkeypatch):
    # nbgrader calls `alembic` by name for a new gradebook: the environment's bin on PATH
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def test_a_submission_from_the_old_release_is_graded_after_a_permitted_correction(
    tmp_path, nbgrader_path
):
    api = course(tmp_path)
    write_source(tmp_path, source_notebook("assert double(3) == 6", points=1))
    assert api.generate_assignment("ps1", force=True)["success"]
    first = released(tmp_path)

    # ada works from the first release: right for 2 and 3, wrong for negative numbers
    answer = copy.deepcopy(first)
    cell_of(answer, "double")["source"] = "def double(x):\n    return abs(x) * 2\n"
    folder = tmp_path / "submitted/ada/ps1"
    folder.mkdir(parents=True)
    (folder / "ps1.ipynb").write_text(json.dumps(answer), encoding="utf-8")
    assert api.autograde("ps1", "ada", force=True, create=True)["success"]
    assert score(api, "ada") == (1.0, 1.0)

    # the correction: the hidden test now checks a negative number, an erratum in the
    # instructions, and the task is worth 2 points
    write_source(
        tmp_path,
        source_notebook("assert double(-3) == -6", points=2, note=" (Erratum: any integer.)"),
    )
    assert api.generate_assignment("ps1", force=True)["success"]
    refused, permitted = errata.compare(first, released(tmp_path))
    assert refused == [] and len(permitted) == 2
    result = api.autograde("ps1", "ada", force=True, create=True)
    assert result["success"], result["log"]
    assert score(api, "ada") == (0.0, 2.0)  # graded, by the corrected test
    graded = json.loads((tmp_path / "autograded/ada/ps1/ps1.ipynb").read_text())
    assert "Erratum" in "".join(cell_of(graded, "intro")["source"])

    # a refused change: renaming the student's cell; nbgrader itself will not take it
    renamed = source_notebook("assert double(-3) == -6", points=2)
    renamed.cells[1].metadata.nbgrader["grade_id"] = "double_fn"
    write_source(tmp_path, renamed)
    new_release = copy.deepcopy(first)
    cell_of(new_release, "double")["metadata"]["nbgrader"]["grade_id"] = "double_fn"
    refused, _ = errata.compare(first, new_release)
    assert refused and "removed or renamed" in refused[0]
    result = api.generate_assignment("ps1", force=True)
    assert not result["success"]
    assert "because there are submissions" in result["log"]
