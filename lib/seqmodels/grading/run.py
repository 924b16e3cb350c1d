"""``make grade PS=ps1``: grade every submission with nbgrader, in parallel, resumably.

    python -m seqmodels.grading.run ps1 [--jobs N] [--force]

1. Syncs the assignment into the gradebook (``nbgrader generate_assignment``: the release does not
   change when the source has not).
2. Checks each submitted notebook can be read. One that cannot (not JSON, not a notebook) is kept
   as ``<name>.ipynb.unreadable`` and replaced by the blank release with a note saying why, so the
   student still gets a grade (0) and feedback.
3. Autogrades each student through nbgrader's own API (the same converter as ``nbgrader
   autograde``, with the course's preprocessors), in `--jobs` worker processes that each load
   nbgrader once, with a progress bar. A student graded before (marker file) is skipped: an
   interrupted run resumes where it stopped.
4. ``nbgrader generate_feedback`` and ``nbgrader export`` (grades CSV), then prints the scores.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat
from nbformat.v4 import new_markdown_cell
from tqdm import tqdm

ROOT = Path.cwd()
DONE = ".seqmodels-graded"


def nbgrader(*args: str, quiet: bool = True) -> subprocess.CompletedProcess:
    """Run an nbgrader command in the course root; raise with its log if it fails."""
    cmd = [str(Path(sys.executable).with_name("nbgrader")), *args]
    if quiet:
        cmd.append("--log-level=WARN")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if result.returncode:
        raise RuntimeError(
            f"{' '.join(args)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return result


def repair_unreadable(submission: Path, release: Path) -> list[str]:
    """Replace unreadable notebooks of one submission by the blank release; keep the originals."""
    notes = []
    for expected in sorted(release.glob("*.ipynb")):
        path = submission / expected.name
        reason = None
        if not path.exists():
            reason = "the notebook was missing from the submission"
        else:
            try:
                nbformat.validate(nbformat.read(path, as_version=4))
            except Exception as error:  # noqa: BLE001 - any unreadable file is handled the same way
                reason = (
                    f"the file could not be read as a notebook ({type(error).__name__}: {error})"
                )
                path.rename(path.with_name(path.name + ".unreadable"))
        if reason:
            blank = nbformat.read(expected, as_version=4)
            blank.cells.insert(
                0,
                new_markdown_cell(
                    f"**Grading note:** {reason[:500]}. Your original file is kept as "
                    f"`{expected.name}.unreadable`; this blank copy of the assignment was graded in "
                    "its place."
                ),
            )
            nbformat.write(blank, path)
            notes.append(f"{expected.name}: {reason[:200]}")
    return notes


_API = None  # one nbgrader API per worker process, so imports and set-up are paid once per worker


def _start_worker(root: str) -> None:
    """Process-pool initializer: load the course's nbgrader_config.py and build nbgrader's API."""
    global _API
    from nbgrader.apps import NbGraderAPI
    from nbgrader.apps.baseapp import NbGrader

    os.chdir(root)
    # nbgrader's log and the kernels' own stderr go to grading/autograde.log, not the progress bar
    log = os.open(Path(root) / "grading" / "autograde.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 2)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    app = NbGrader()
    app.load_config_file()
    _API = NbGraderAPI(config=app.config)


def marker(assignment: str, student: str) -> Path:
    """The file that says this student's autograding finished."""
    return ROOT / "grading" / "autograded" / student / assignment / DONE


def grade_one(assignment: str, student: str) -> tuple[str, str]:
    """Autograde one student in a worker; returns (student, "graded" | "failed: ...")."""
    # force: a student whose earlier run stopped half-way is started again from scratch
    result = _API.autograde(assignment, student, force=True, create=True)
    if not result["success"]:
        return student, f"failed: {(result.get('error') or result.get('log') or '')[-3000:]}"
    marker(assignment, student).write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
    return student, "graded"


def main() -> int:
    parser = argparse.ArgumentParser(description="Grade every submission of one assignment.")
    parser.add_argument("assignment")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--force", action="store_true", help="regrade students graded before")
    args = parser.parse_args()
    submitted = ROOT / "grading" / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{args.assignment}") if p.is_dir())
    if not students:
        print(f"no submissions of {args.assignment} under {submitted}/<student>/{args.assignment}/")
        return 1
    nbgrader("generate_assignment", args.assignment, "--force")
    release = ROOT / "assignments" / args.assignment
    for student in students:
        for note in repair_unreadable(submitted / student / args.assignment, release):
            print(f"{student}: {note}")
    results = {
        s: "skipped" for s in students if marker(args.assignment, s).exists() and not args.force
    }
    todo = [s for s in students if s not in results]
    start = time.perf_counter()
    jobs = max(1, min(args.jobs, len(todo)))
    if todo:
        with ProcessPoolExecutor(jobs, initializer=_start_worker, initargs=(str(ROOT),)) as pool:
            futures = [pool.submit(grade_one, args.assignment, s) for s in todo]
            for future in tqdm(
                as_completed(futures), total=len(futures), desc="autograde", unit="student"
            ):
                student, status = future.result()
                results[student] = status
    seconds = time.perf_counter() - start
    nbgrader("generate_feedback", args.assignment, "--force")
    csv = ROOT / "grading" / "grades.csv"
    nbgrader("export", "--to", str(csv))
    graded = sum(s == "graded" for s in results.values())
    print(
        f"{graded} graded, {sum(s == 'skipped' for s in results.values())} already graded, "
        f"{sum(s.startswith('failed') for s in results.values())} failed, in {seconds:.1f} s "
        f"with {jobs} jobs; grades in {csv.relative_to(ROOT)}, feedback in grading/feedback/, "
        "log in grading/autograde.log"
    )
    for student, status in sorted(results.items()):
        if status.startswith("failed"):
            print(f"  {student}: {status}")
    return 1 if any(s.startswith("failed") for s in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
