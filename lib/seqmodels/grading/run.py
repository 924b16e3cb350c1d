"""``make grade PS=ps1``: grade every submission with nbgrader, in parallel, resumably, in sandboxes.

    python -m seqmodels.grading.run ps1 [--jobs N] [--force] [--unsafe-no-sandbox]

1. Refuses to start without the sandbox (bubblewrap; see `seqmodels.grading.sandbox`), saying
   what is missing, unless ``--unsafe-no-sandbox`` is given: then the log and every row of the
   grades CSV say that the kernels ran with the grader's own rights. Refuses references whose
   tensors do not match their manifest's SHA-256.
2. Syncs the assignment into the gradebook (``nbgrader generate_assignment``: the release does not
   change when the source has not). Each submitted notebook that cannot be read (not JSON, not a
   notebook) is kept as ``<name>.ipynb.unreadable`` and replaced by the blank release with a note.
3. Autogrades each student through nbgrader's own API (the course's preprocessors), in `--jobs`
   worker processes that each load nbgrader once, with a progress bar. A worker that dies, or that
   takes longer than ``--student-timeout`` seconds, is killed and replaced; that student is recorded
   as not graded with a note saying why, and the run goes on. A run-level deadline
   (``--max-minutes``) stops starting new students, which are then recorded likewise.
   Each student's status is kept in ``grading/status/<ps>/<student>.json``: a second run resumes,
   skipping students already graded or recorded as failed (``--force`` grades everyone again).
   The worker that graded a student then writes that student's feedback (keeping only the graded
   notebooks in the autograded folder first), so feedback is made in parallel with grading, not in
   a serial pass after it.
4. Makes any feedback a worker could not (``nbgrader generate_feedback --student``), writes a page
   with the note for students who could not be graded, removes from the feedback folders anything
   but those pages, and exports ``grading/grades.csv`` with more columns: ``review``,
   ``sandbox`` (how the kernel was confined) and ``note``.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import math
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from multiprocessing.connection import wait
from pathlib import Path

import nbformat
from nbformat.v4 import new_markdown_cell
from tqdm import tqdm

from .references import ReferencesMismatch
from .references import load as load_references
from .sandbox import Sandbox, SandboxUnavailable

ROOT = Path.cwd()
UNSAFE = "NONE (unsafe: --unsafe-no-sandbox)"


def nbgrader(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run an nbgrader command in the course root; raise with its log if it fails."""
    cmd = [str(Path(sys.executable).with_name("nbgrader")), *args, "--log-level=WARN"]
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout)
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
                # the type only: the message quotes the student's file
                reason = f"the file could not be read as a notebook ({type(error).__name__})"
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


def set_aside_oversize(submission: Path, release: Path, keep: Path, limit_mb: float) -> list[str]:
    """A submission larger than `limit_mb` is moved, whole, to `keep` (nothing is lost) before
    nbgrader reads it, and graded as the blank release with a note; the others are unaffected."""
    files = [p for p in submission.rglob("*") if p.is_file() and not p.is_symlink()]
    size = sum(p.stat().st_size for p in files)
    if size <= limit_mb * 2**20:
        return []
    if keep.exists():
        shutil.rmtree(keep)
    keep.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(submission), str(keep))
    submission.mkdir()
    reason = (
        f"the submission is {size / 2**20:.1f} MB, over the {limit_mb:g} MB limit, so it was not "
        "graded; it is kept for your instructor"
    )
    for expected in sorted(release.glob("*.ipynb")):
        blank = nbformat.read(expected, as_version=4)
        blank.cells.insert(0, new_markdown_cell(f"**Grading note:** {reason}."))
        nbformat.write(blank, submission / expected.name)
    return [reason]


def drop_links(submission: Path) -> list[str]:
    """Remove symbolic links from a submission before nbgrader copies it (it would follow them,
    copying whatever they point at, e.g. the references, where the kernel can read it)."""
    notes = []
    for path in sorted(submission.rglob("*")):
        if path.is_symlink():
            notes.append(f"removed the symbolic link {path.relative_to(submission)} (not graded)")
            path.unlink()
    return notes


# ---------------------------------------------------------------------------- status files
def status_file(assignment: str, student: str) -> Path:
    return ROOT / "grading" / "status" / assignment / f"{student}.json"


def read_status(assignment: str, student: str) -> dict | None:
    try:
        return json.loads(status_file(assignment, student).read_text())
    except (OSError, ValueError):
        return None


def write_status(assignment: str, student: str, status: str, sandbox: str, note: str) -> None:
    path = status_file(assignment, student)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"status": status, "sandbox": sandbox, "note": note, "at": time.strftime("%FT%T")}
    path.write_text(json.dumps(record) + "\n")


# ---------------------------------------------------------------------------- workers
_API = None  # one nbgrader API per worker process, so imports and set-up are paid once per worker


def _worker(root: str, conn) -> None:
    """A grading worker: load the course's nbgrader config once, then grade what it is sent."""
    global _API
    os.setpgrp()  # killed as a group if it hangs
    from nbgrader.apps import NbGraderAPI
    from nbgrader.apps.baseapp import NbGrader

    os.chdir(root)
    # nbgrader's log and the kernels' own stderr go to grading/autograde.log, not the progress bar
    log = os.open(Path(root) / "grading" / "autograde.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    app = NbGrader()
    app.load_config_file()
    _API = NbGraderAPI(config=app.config)
    while (job := conn.recv()) is not None:
        assignment, student, notebooks = job
        try:
            # force: a student whose earlier run stopped half-way is started again from scratch
            result = _API.autograde(assignment, student, force=True, create=True)
            status = "graded" if result["success"] else "failed: nbgrader could not grade it"
            if not result["success"]:
                print(f"{student}: {result.get('error') or result.get('log')}", file=sys.stderr)
        except Exception as error:  # noqa: BLE001 - recorded for that student; the worker goes on
            status = f"failed: the grader raised {type(error).__name__}"
            print(f"{student}: {error!r}", file=sys.stderr)
        if status == "graded":  # feedback now, in this worker, not in a serial pass at the end
            try:
                keep_only(Path(root) / "grading" / "autograded" / student / assignment, notebooks)
                feedback = _API.generate_feedback(assignment, student, force=True)
                if not feedback["success"]:
                    print(f"{student}: feedback: {feedback.get('error')}", file=sys.stderr)
            except Exception as error:  # noqa: BLE001 - the driver makes any missing feedback
                print(f"{student}: feedback: {error!r}", file=sys.stderr)
        conn.send((student, status))


class Worker:
    """One worker process and the student it is grading (if any)."""

    def __init__(self, context) -> None:
        self.context = context
        self.student: str | None = None
        self.deadline = math.inf
        self.start()

    def start(self) -> None:
        self.conn, child = self.context.Pipe()
        self.process = self.context.Process(target=_worker, args=(str(ROOT), child), daemon=True)
        self.process.start()
        child.close()

    def give(self, assignment: str, student: str, notebooks: set[str], seconds: float) -> None:
        self.student, self.deadline = student, time.monotonic() + seconds
        self.conn.send((assignment, student, notebooks))

    def kill(self) -> None:
        for kill in (os.killpg, os.kill):
            try:
                kill(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.process.join(10)
        self.conn.close()

    def replace(self) -> None:
        self.kill()
        self.student, self.deadline = None, math.inf
        self.start()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(30)
        if self.process.is_alive():
            self.kill()


def grade_all(
    assignment: str,
    students: list[str],
    notebooks: set[str],
    jobs: int,
    student_seconds: float,
    run_seconds: float,
) -> dict[str, str]:
    """Grade `students` in `jobs` workers, each also writing its students' feedback;
    ``{student: "graded" | "failed: why"}`` for every one."""
    context = multiprocessing.get_context("spawn")
    queue, results = deque(students), {}
    run_deadline = time.monotonic() + run_seconds
    workers = [Worker(context) for _ in range(max(1, min(jobs, len(students))))]
    with tqdm(total=len(students), desc="autograde", unit="student") as bar:
        while queue or any(w.student for w in workers):
            now = time.monotonic()
            for worker in workers:
                if worker.student is None and queue and now < run_deadline:
                    worker.give(assignment, queue.popleft(), notebooks, student_seconds)
            if now >= run_deadline:
                while queue:
                    results[queue.popleft()] = (
                        f"failed: not graded, the run's time limit ({run_seconds / 60:.0f} min) "
                        "ran out first"
                    )
                    bar.update()
            busy = [w for w in workers if w.student]
            wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=1)
            for worker in busy:
                student, status = worker.student, None
                try:
                    if worker.conn.poll():
                        _, status = worker.conn.recv()
                        worker.student, worker.deadline = None, math.inf
                except (EOFError, OSError):
                    pass
                if status is None and not worker.process.is_alive():
                    status = (
                        f"failed: the grading worker died (exit code {worker.process.exitcode}) "
                        "while grading this submission"
                    )
                    worker.replace()
                elif status is None and time.monotonic() > worker.deadline:
                    status = (
                        f"failed: grading did not finish within {student_seconds:.0f} s; the "
                        "grading worker was stopped"
                    )
                    worker.replace()
                if status is not None:
                    results[student] = status
                    bar.update()
    for worker in workers:
        worker.stop()
    return results


# ---------------------------------------------------------------------------- after grading
def keep_only(folder: Path, names: set[str]) -> None:
    """Remove from `folder` everything whose name is not in `names`."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if path.name not in names:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def course_gradebook():
    """The course's gradebook, as nbgrader's configuration names it (a context manager)."""
    from nbgrader.api import Gradebook
    from nbgrader.apps.baseapp import NbGrader
    from nbgrader.coursedir import CourseDirectory

    app = NbGrader()
    app.load_config_file()
    coursedir = CourseDirectory(config=app.config)
    return Gradebook(coursedir.db_url, coursedir.course_id)


def forget_submission(assignment: str, student: str) -> None:
    """Make sure `student` is in the gradebook with no (partial) submission of `assignment`."""
    from nbgrader.api import MissingEntry

    with course_gradebook() as gradebook:
        gradebook.update_or_create_student(student)
        try:
            gradebook.remove_submission(assignment, student)
        except MissingEntry:
            pass


def note_page(assignment: str, student: str, note: str) -> str:
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(assignment)}: not graded</title></head><body>"
        f"<h1>{html.escape(assignment)}: your submission could not be graded automatically</h1>"
        f"<p>{html.escape(note)}.</p><p>Your score is 0 until your instructor has looked at it; "
        "they have the same note in the grades file.</p></body></html>\n"
    )


def held_for_review() -> dict[tuple[str, str], list[str]]:
    """``{(assignment, student): [test cells]}`` whose grade awaits an instructor (nbgrader's
    ``needs_manual_grade``): a task whose rules may have been broken, until a manual score is given."""
    from nbgrader.api import Grade, SubmittedAssignment, SubmittedNotebook

    held: dict[tuple[str, str], list[str]] = {}
    with course_gradebook() as gradebook:
        rows = (
            gradebook.db.query(Grade)
            .join(SubmittedNotebook)
            .join(SubmittedAssignment)
            .filter(Grade.needs_manual_grade)
            .all()
        )
        for grade in rows:
            key = (grade.assignment.name, grade.student.id)
            held.setdefault(key, []).append(grade.name)
    return {key: sorted(names) for key, names in held.items()}


def export_csv(csv_path: Path) -> None:
    """``nbgrader export``, then the `review`, `sandbox` and `note` columns."""
    nbgrader("export", "--to", str(csv_path), timeout=600)
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    fields = list(rows[0].keys()) if rows else ["assignment", "student_id", "score"]
    held = held_for_review()
    for row in rows:
        status = read_status(row["assignment"], row["student_id"]) or {}
        row["review"] = " ".join(held.get((row["assignment"], row["student_id"]), []))
        row["sandbox"] = status.get("sandbox", "")
        row["note"] = status.get("note", "")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*fields, "review", "sandbox", "note"])
        writer.writeheader()
        writer.writerows(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description="Grade every submission of one assignment.")
    parser.add_argument("assignment")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--force", action="store_true", help="grade students graded before")
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run students' kernels without the bubblewrap sandbox, with your own user's rights",
    )
    parser.add_argument("--student-timeout", type=float, default=None, help="seconds per student")
    parser.add_argument("--max-minutes", type=float, default=None, help="the run's time limit")
    parser.add_argument(
        "--max-submission-mb",
        type=float,
        default=float(os.environ.get("SEQMODELS_MAX_SUBMISSION_MB", 20)),
        help="a larger submission is set aside (grading/oversize/) and graded as blank, with a note",
    )
    args = parser.parse_args()
    submitted = ROOT / "grading" / "submitted"
    students = sorted(p.parent.name for p in submitted.glob(f"*/{args.assignment}") if p.is_dir())
    if not students:
        print(f"no submissions of {args.assignment} under {submitted}/<student>/{args.assignment}/")
        return 1
    budget = int(os.environ.get("SEQMODELS_NOTEBOOK_BUDGET", 180))
    student_seconds = args.student_timeout or budget + 120
    memory = int(os.environ.get("SEQMODELS_MEMORY_LIMIT_MB", 4096))
    if args.unsafe_no_sandbox:
        sandbox = UNSAFE
        os.environ["SEQMODELS_SANDBOX"] = "none"
        print(
            "WARNING: grading WITHOUT a sandbox (--unsafe-no-sandbox): students' code runs with "
            "your user's rights and can read the references and change grades. grades.csv says so."
        )
    else:
        try:
            limits = Sandbox(memory_mb=memory).check()
        except SandboxUnavailable as error:
            print(
                f"cannot grade: {error}.\nEvery student's kernel runs in a bubblewrap sandbox, so "
                "that it cannot read the references or other students' work or change grades. "
                "Install bubblewrap, or pass --unsafe-no-sandbox to grade without it (the log and "
                "grades.csv will say so)."
            )
            return 2
        sandbox = "bubblewrap"
        os.environ["SEQMODELS_SANDBOX"] = "bubblewrap"
        print(f"sandbox: bubblewrap; {limits}")
    release = ROOT / "assignments" / args.assignment
    nbgrader("generate_assignment", args.assignment, "--force", timeout=600)
    notebooks = sorted(p.name for p in release.glob("*.ipynb"))
    try:
        for name in notebooks:
            load_references(ROOT / "solutions" / args.assignment / "references", Path(name).stem)
    except (ReferencesMismatch, OSError) as error:
        print(f"cannot grade: the reference outputs are not usable: {error}")
        return 2
    earlier = {s: read_status(args.assignment, s) for s in students}
    todo = [s for s in students if args.force or not earlier[s]]
    notes: dict[str, list[str]] = {}
    for student in todo:
        folder = submitted / student / args.assignment
        keep = ROOT / "grading" / "oversize" / args.assignment / student
        notes[student] = (
            set_aside_oversize(folder, release, keep, args.max_submission_mb)
            + drop_links(folder)
            + repair_unreadable(folder, release)
        )
        for note in notes[student]:
            print(f"{student}: {note}")
    start = time.perf_counter()
    jobs = max(1, min(args.jobs, len(todo) or 1))
    run_seconds = (args.max_minutes or 2 * student_seconds * math.ceil(len(todo) / jobs) / 60) * 60
    results = (
        grade_all(args.assignment, todo, set(notebooks), jobs, student_seconds, run_seconds)
        if todo
        else {}
    )
    seconds = time.perf_counter() - start
    autograded = ROOT / "grading" / "autograded"
    for student, status in results.items():
        said = [] if status == "graded" else [status.removeprefix("failed: ")]
        note = "; ".join(said + notes.get(student, []))
        write_status(args.assignment, student, status.split(":")[0], sandbox, note)
        if status != "graded":
            shutil.rmtree(autograded / student / args.assignment, ignore_errors=True)
            forget_submission(args.assignment, student)
    feedback = ROOT / "grading" / "feedback"
    pages = {Path(n).with_suffix(".html").name for n in notebooks}
    for student in students:  # a graded student whose worker made no feedback gets it here
        folder = feedback / student / args.assignment
        status = read_status(args.assignment, student) or {}
        if status.get("status") == "graded" and not all((folder / p).is_file() for p in pages):
            keep_only(autograded / student / args.assignment, set(notebooks))
            nbgrader("generate_feedback", args.assignment, "--student", student, "--force")
    for student in students:
        folder = ROOT / "grading" / "feedback" / student / args.assignment
        status = read_status(args.assignment, student) or {}
        if status.get("status") == "failed":
            folder.mkdir(parents=True, exist_ok=True)
            for name in notebooks:
                page = note_page(args.assignment, student, status["note"])
                (folder / Path(name).with_suffix(".html")).write_text(page)
        keep_only(folder, pages)
    csv_path = ROOT / "grading" / "grades.csv"
    export_csv(csv_path)
    failed = {s: r for s, r in results.items() if r != "graded"}
    print(
        f"{len(results) - len(failed)} graded, {len(students) - len(todo)} already done, "
        f"{len(failed)} not graded, in {seconds:.1f} s with {jobs} jobs (sandbox: {sandbox}); "
        f"grades in {csv_path.relative_to(ROOT)}, feedback in grading/feedback/, "
        "log in grading/autograde.log"
    )
    for student, status in sorted(failed.items()):
        print(f"  {student}: {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
