"""Helpers shared by the grading round trips (tests/test_grading.py for PS1, test_grading_ps2.py).

Each works on a copy of the course in a temporary folder, for the problem set `ps` it is given:
generate its release, submit notebooks, run `make grade`'s driver, read the CSV and the feedback.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from ps1_submissions import solution_answers

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

LIMITS = {
    "SEQMODELS_CELL_TIMEOUT": "10",
    "SEQMODELS_NOTEBOOK_BUDGET": "120",
    "SEQMODELS_MEMORY_LIMIT_MB": "3072",
}


def run(
    root: Path, *args: str, env: dict | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        args,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=1800,
        # nbgrader calls `alembic` by name: the virtual environment's bin must be on PATH
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env or {})},
    )
    if check:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def fingerprint(*roots: Path) -> dict[str, str]:
    """SHA-256 of every file under `roots` (what no kernel may change)."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots
        for p in ([root] if root.is_file() else sorted(root.rglob("*")))
        if p.is_file() and "__pycache__" not in p.parts
    }


def sandbox_processes() -> list[str]:
    """Processes of the sandbox's uid, or bubblewrap processes, still alive."""
    out = subprocess.run(["ps", "-eo", "uid=,pid=,comm="], capture_output=True, text=True).stdout
    return [
        line
        for line in out.splitlines()
        if line.split()[0] == "65534" or line.split()[-1] == "bwrap"
    ]


def new_course(root: Path, ps: str) -> Path:
    """A copy of the course (config and sources) in `root`, with the release of `ps` generated."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "solutions", root / "solutions")
    run(root, str(BIN / "nbgrader"), "generate_assignment", ps, "--force", "--log-level=WARN")
    return root


def submit(course: Path, files: dict[str, bytes], ps: str) -> None:
    for student, data in files.items():
        folder = course / "grading" / "submitted" / student / ps
        folder.mkdir(parents=True)
        (folder / f"{ps}.ipynb").write_bytes(data)


def release_and_answers(course: Path, ps: str):
    source = nbformat.read(course / "solutions" / ps / f"{ps}.ipynb", as_version=4)
    release = nbformat.read(course / "assignments" / ps / f"{ps}.ipynb", as_version=4)
    return release, solution_answers(source)


def read_csv(course: Path, ps: str) -> dict[str, dict]:
    with open(course / "grading" / "grades.csv") as f:
        return {row["student_id"]: row for row in csv.DictReader(f) if row["assignment"] == ps}


def feedback(course: Path, student: str, ps: str) -> str:
    return (course / "grading" / "feedback" / student / ps / f"{ps}.html").read_text()


def assert_release_in_sync(course: Path, ps: str) -> None:
    """assignments/<ps> equals the release `course` generated, and holds no solutions, hidden tests
    or reference outputs."""
    shipped = ROOT / "assignments" / ps
    generated = course / "assignments" / ps
    assert sorted(p.name for p in shipped.iterdir()) == sorted(p.name for p in generated.iterdir())
    assert (shipped / f"{ps}.ipynb").read_bytes() == (generated / f"{ps}.ipynb").read_bytes(), (
        f"assignments/{ps} is out of date: run `make assignments`"
    )
    text = (shipped / f"{ps}.ipynb").read_text()
    for secret in ("BEGIN SOLUTION", "HIDDEN TESTS", "references"):
        assert secret not in text
    assert not any(p.suffix in {".safetensors", ".json"} for p in shipped.rglob("*"))


def current_manifest(ps: str) -> dict:
    """The stored references' manifest of `ps`, checked to belong to the current solution."""
    from seqmodels.grading import references

    source = nbformat.read(ROOT / "solutions" / ps / f"{ps}.ipynb", as_version=4)
    _, manifest = references.load(ROOT / "solutions" / ps / "references", ps)
    assert manifest["solution_sha256"] == references.source_hash(source), (
        "the solution changed since its references were stored: run `make assignments`"
    )
    assert sum(t["points"] for t in manifest["tasks"].values()) == 10
    return manifest
