"""Grading throughput: submissions per minute, with and without the sandbox, against plain nbgrader.

    .venv/bin/python benchmarks/grading_throughput.py --students 12

Builds a temporary copy of the course with `--students` copies of the PS1 solution as submissions,
then times `python -m seqmodels.grading.run` sandboxed and with `--unsafe-no-sandbox`, with 1 job
and with all cores, and plain `nbgrader autograde` (stock preprocessors, serial) on the same
submissions. Prints a table, the sandbox's overhead and the parallel sandboxed run against stock.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from ps1_submissions import fill, solution_answers  # noqa: E402

BIN = Path(sys.executable).parent
# nbgrader calls `alembic` by name: the virtual environment's bin must be on PATH
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
STOCK_CONFIG = """c = get_config()
c.CourseDirectory.root = {root!r}
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "assignments"
c.CourseDirectory.submitted_directory = "grading/submitted"
c.CourseDirectory.autograded_directory = "grading/autograded"
c.CourseDirectory.feedback_directory = "grading/feedback"
c.CourseDirectory.ignore = ["references"]
c.CourseDirectory.db_url = "sqlite:///{root}/grading/gradebook.db"
"""


def make_course(students: int, stock: bool) -> Path:
    root = Path(tempfile.mkdtemp(prefix="grading-bench-"))
    shutil.copytree(ROOT / "solutions", root / "solutions")
    if stock:
        (root / "grading").mkdir()
        (root / "nbgrader_config.py").write_text(STOCK_CONFIG.format(root=str(root)))
    else:
        shutil.copy(ROOT / "nbgrader_config.py", root)
    subprocess.run(
        [BIN / "nbgrader", "generate_assignment", "ps1", "--force", "--log-level=ERROR"],
        cwd=root,
        check=True,
        env=ENV,
    )
    source = nbformat.read(root / "solutions/ps1/ps1.ipynb", as_version=4)
    release = nbformat.read(root / "assignments/ps1/ps1.ipynb", as_version=4)
    submission = nbformat.writes(fill(release, solution_answers(source)))
    for i in range(students):
        folder = root / "grading" / "submitted" / f"student{i:03d}" / "ps1"
        folder.mkdir(parents=True)
        (folder / "ps1.ipynb").write_text(submission)
    return root


def timed(cmd: list, root: Path) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=root, check=True, capture_output=True, text=True, env=ENV)
    return time.perf_counter() - start, result.stdout


def autograde_phase(stdout: str) -> float:
    """The driver's own report of its autograde phase: '... in 12.3 s with 2 jobs ...'."""
    return float(re.search(r" in ([0-9.]+) s with", stdout).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=8)
    args = parser.parse_args()
    n, cores = args.students, os.cpu_count() or 1
    rows = {}  # label -> (autograde seconds, whole command seconds)
    for jobs in (1, cores):
        for sandboxed in (True, False):
            label = f"make grade, {jobs} job{'s' * (jobs > 1)}, " + (
                "sandboxed" if sandboxed else "no sandbox"
            )
            root = make_course(n, stock=False)
            cmd = [BIN / "python", "-m", "seqmodels.grading.run", "ps1", "--jobs", str(jobs)]
            seconds, stdout = timed(cmd if sandboxed else [*cmd, "--unsafe-no-sandbox"], root)
            rows[label] = (autograde_phase(stdout), seconds)
            shutil.rmtree(root)
    root = make_course(n, stock=True)
    seconds, _ = timed([BIN / "nbgrader", "autograde", "ps1"], root)
    rows["plain nbgrader autograde (serial)"] = (seconds, seconds)
    shutil.rmtree(root)
    print(f"# {n} copies of the PS1 solution, {cores} cores")
    print(f"{'':40} {'autograde s':>11} {'per min':>8} {'whole command s':>16}")
    for label, (autograde, whole) in rows.items():
        print(f"{label:40} {autograde:11.1f} {60 * n / autograde:8.1f} {whole:16.1f}")
    print("(whole command: the driver also syncs the release, writes feedback and exports the CSV)")
    for jobs in (1, cores):
        plural = "s" * (jobs > 1)
        safe = rows[f"make grade, {jobs} job{plural}, sandboxed"][0]
        unsafe = rows[f"make grade, {jobs} job{plural}, no sandbox"][0]
        print(f"sandbox overhead, {jobs} job{plural}: {100 * (safe / unsafe - 1):+.1f} %")
    stock = rows["plain nbgrader autograde (serial)"][0]
    parallel = rows[f"make grade, {cores} job{'s' * (cores > 1)}, sandboxed"][0]
    print(f"sandboxed {cores}-job run vs stock nbgrader: {stock / parallel:.2f}x the throughput")


if __name__ == "__main__":
    main()
