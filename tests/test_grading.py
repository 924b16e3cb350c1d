"""The grading round trip, as an instructor runs it: generate the release, collect submissions (the
solution, the blank release, plausible wrong answers, hostile and broken files), `make grade`'s
driver (nbgrader autograde in parallel, feedback, CSV export), then check every score and feedback.

Runs in a copy of the course in a temporary folder, so the repository's grading/ is untouched.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from ps1_hostile import HOSTILE, build_all
from ps1_submissions import WRONG, fill, solution_answers
from seqmodels.grading import references
from seqmodels.grading.capture import _encode
from seqmodels.grading.compare import judge

ROOT = Path(__file__).resolve().parents[1]
PS = "ps1"
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.grading


def run(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        args,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=1200,
        # nbgrader calls `alembic` by name: the virtual environment's bin must be on PATH
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env or {})},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "solutions", root / "solutions")
    run(root, str(BIN / "nbgrader"), "generate_assignment", PS, "--force", "--log-level=WARN")
    return root


@pytest.fixture(scope="module")
def graded(course: Path):
    source = nbformat.read(course / "solutions" / PS / f"{PS}.ipynb", as_version=4)
    release = nbformat.read(course / "assignments" / PS / f"{PS}.ipynb", as_version=4)
    answers = solution_answers(source)
    files = {
        "solution": nbformat.writes(fill(release, answers)).encode(),
        "blank": nbformat.writes(release).encode(),
        **{
            f"wrong-{name}": nbformat.writes(fill(release, {**answers, cell: code})).encode()
            for name, (cell, code, _) in WRONG.items()
        },
        **build_all(release, answers),
    }
    for student, data in files.items():
        folder = course / "grading" / "submitted" / student / PS
        folder.mkdir(parents=True)
        (folder / f"{PS}.ipynb").write_bytes(data)
    env = {
        "SEQMODELS_CELL_TIMEOUT": "10",
        "SEQMODELS_NOTEBOOK_BUDGET": "120",
        "SEQMODELS_MEMORY_LIMIT_MB": "3072",
    }
    result = run(
        course, str(BIN / "python"), "-m", "seqmodels.grading.run", PS, "--jobs", "2", env=env
    )
    with open(course / "grading" / "grades.csv") as f:
        scores = {
            row["student_id"]: float(row["score"])
            for row in csv.DictReader(f)
            if row["assignment"] == PS
        }
    return course, scores, result.stdout


def feedback(course: Path, student: str) -> str:
    return (course / "grading" / "feedback" / student / PS / f"{PS}.html").read_text()


def test_the_solution_earns_full_marks_and_the_blank_release_none(graded):
    _, scores, _ = graded
    assert scores["solution"] == 10
    assert scores["blank"] == 0


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_plausible_wrong_answer_earns_partial_credit_with_pointed_feedback(graded, name):
    course, scores, _ = graded
    _, _, test_cell = WRONG[name]
    assert 0 < scores[f"wrong-{name}"] < 10
    html = feedback(course, f"wrong-{name}")
    assert "FAIL" in html and (
        "largest absolute error" in html
        or "entries differ" in html
        or "expected shape" in html
        or "raised" in html
    )


@pytest.mark.parametrize("student", sorted(HOSTILE))
def test_a_hostile_or_broken_submission_is_graded_right_and_the_run_goes_on(graded, student):
    course, scores, _ = graded
    _, expected, text = HOSTILE[student]
    assert scores[student] == pytest.approx(expected, abs=1e-3), student
    assert text in feedback(course, student)


def test_feedback_never_shows_hidden_tests_or_reference_values(graded):
    course, _, _ = graded
    source = nbformat.read(course / "solutions" / PS / f"{PS}.ipynb", as_version=4)
    hidden = []
    for cell in source.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            block = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            hidden += [line.strip() for line in block.splitlines() if len(line.strip()) > 12]
    assert hidden
    for html_file in (course / "grading" / "feedback").rglob("*.html"):
        html = html_file.read_text()
        assert "BEGIN HIDDEN TESTS" not in html and "BEGIN SOLUTION" not in html
        leaked = [line for line in hidden if line in html]
        assert leaked == [], (html_file, leaked)


def test_a_second_run_resumes_without_regrading(graded):
    course, _, _ = graded
    result = run(course, str(BIN / "python"), "-m", "seqmodels.grading.run", PS)
    assert "0 graded," in result.stdout and "already graded" in result.stdout


def test_the_release_is_in_sync_and_holds_no_solutions_hidden_tests_or_references(course):
    shipped = ROOT / "assignments" / PS
    generated = course / "assignments" / PS
    assert sorted(p.name for p in shipped.iterdir()) == sorted(p.name for p in generated.iterdir())
    assert (shipped / f"{PS}.ipynb").read_bytes() == (generated / f"{PS}.ipynb").read_bytes(), (
        "assignments/ps1 is out of date: run `make assignments`"
    )
    text = (shipped / f"{PS}.ipynb").read_text()
    for secret in ("BEGIN SOLUTION", "HIDDEN TESTS", "references"):
        assert secret not in text
    assert not any(p.suffix in {".safetensors", ".json"} for p in shipped.rglob("*"))


def test_stored_references_belong_to_the_current_solution():
    source = nbformat.read(ROOT / "solutions" / PS / f"{PS}.ipynb", as_version=4)
    _, manifest = references.load(ROOT / "solutions" / PS / "references", PS)
    assert manifest["solution_sha256"] == references.source_hash(source), (
        "the solution changed since its references were stored: run `make assignments`"
    )
    assert sum(t["points"] for t in manifest["tasks"].values()) == 10


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_the_solution_matches_the_cpu_references_on_every_device(device):
    """References are computed on the CPU; a CUDA run of the solution must pass the same policy."""
    tensors, manifest = references.build(ROOT / "solutions" / PS / f"{PS}.ipynb", device=device)
    refs, _ = references.load(ROOT / "solutions" / PS / "references", PS)
    for task, entry in manifest["tasks"].items():
        for index, case in enumerate(entry["cases"]):
            prefix = f"{task}{references.SEP}{index}{references.SEP}"
            actual = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            record = {"data": _encode(actual)}
            verdict = judge(case, record, refs[task][case])
            assert verdict.passed, (device, task, verdict.message)
