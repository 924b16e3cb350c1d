"""``make grade PS=ps1``: grade every submission with nbgrader, on Dask workers, resumably, in sandboxes.

    python -m seqmodels.grading.run ps1 [--jobs N | --scheduler tcp://host:8786] [--force]
                                        [--unsafe-no-sandbox]

This process is the **driver**; the grading itself runs on Dask workers (`seqmodels.grading.cluster`:
a LocalCluster of ``--jobs`` processes here, or the workers of a running scheduler).

1. Refuses to start without the sandbox (bubblewrap; see `seqmodels.grading.sandbox`), saying
   what is missing, unless ``--unsafe-no-sandbox`` is given: then the log and every row of the
   grades CSV say that the kernels ran with the grader's own rights. Refuses references whose
   tensors do not match their manifest's SHA-256.
2. Syncs the assignment into the gradebook (``nbgrader generate_assignment``: the release does not
   change when the source has not). Each submitted notebook that cannot be read (not JSON, not a
   notebook) is kept as ``<name>.ipynb.unreadable`` and replaced by the blank release with a note.
3. Sends one task per student to the workers (`seqmodels.grading.worker.grade_submission`: the
   submission's files, a gradebook holding only the assignment): each grades in a scratch course
   of its own and returns the autograded notebook, the feedback page and nbgrader's scores.
   A task whose worker dies is given to another worker; one that keeps killing its workers, or
   that runs past ``--student-timeout``, or that the run-level deadline (``--max-minutes``) leaves
   unstarted, is recorded as not graded with a note saying why, and the run goes on.
4. The driver alone writes, as each result arrives and once per student (`Recorder`): the
   gradebook (nbgrader's tables; an instructor's manual scores are kept), the autograded notebook,
   the feedback page, and ``grading/status/<ps>/<student>.json`` with a SHA-256 of the submission.
   A second run grades only students not graded yet or whose submission changed since
   (``--force``: everyone).
5. Makes any feedback a worker could not (``nbgrader generate_feedback --student``), writes a page
   with the note for students who could not be graded, and exports ``grading/grades.csv`` with
   more columns: ``autograded`` and ``manual`` (the parts of the score), ``manual_status``
   (``not graded yet`` until every written answer has a manual score), ``review``, ``sandbox``
   (how the kernel was confined) and ``note``.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import logging
import math
import os
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import nbformat
from nbformat.v4 import new_markdown_cell

from .cluster import close_client, grade_everywhere, open_client
from .kernel_forks import share_zygote
from .references import ReferencesMismatch
from .references import verify as verify_references
from .sandbox import Sandbox, SandboxUnavailable
from .worker import course_config, digest_folder, references_digest

ROOT = Path.cwd()
UNSAFE = "NONE (unsafe: --unsafe-no-sandbox)"
#: the student ids `make grade` accepts: a letter, digit or underscore, then up to 99 of these and
#: ``. @ + -``. Nothing a spreadsheet reads as a formula, nothing hidden, no path.
STUDENT_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,99}")
STUDENT_ID_RULE = (
    "a letter, digit or underscore, then at most 99 letters, digits or the characters _ . @ + -"
)
#: what a spreadsheet program may read as a formula at the start of a cell (OWASP's CSV injection)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def safe_cell(value: str) -> str:
    """`value` for a CSV cell a spreadsheet opens as text: a quote before a text that starts like a
    formula (``=``, ``+``, ``-``, ``@``, tab, carriage return); numbers (``-1.5``) stay numbers."""
    if not value.startswith(FORMULA_START) or NUMBER.fullmatch(value):
        return value
    return "'" + value


def collect_students(submitted: Path, assignment: str) -> tuple[list[str], list[str]]:
    """The student folders under `submitted` holding `assignment`: ``(accepted, rejected)``, where a
    rejected id does not match `STUDENT_ID` (its folder is left as it is, ungraded)."""
    names = sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())
    accepted = [n for n in names if STUDENT_ID.fullmatch(n)]
    return accepted, [n for n in names if not STUDENT_ID.fullmatch(n)]


def nbgrader(command: str, assignment: str, **kwargs) -> None:
    """An nbgrader command (an `NbGraderAPI` method: ``generate_assignment``,
    ``generate_feedback``), in this process on the course's configuration; raise with its log if
    it fails. ``config`` in `kwargs`: ``CourseDirectory`` settings for this call."""
    from nbgrader.apps import NbGraderAPI

    # a new gradebook asks `alembic` (by name) for its schema version: the environment's bin
    bin_folder = str(Path(sys.executable).parent)
    if bin_folder not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{bin_folder}{os.pathsep}{os.environ.get('PATH', '')}"
    api = NbGraderAPI(config=course_config(str(ROOT), **kwargs.pop("config", {})))
    result = getattr(api, command)(assignment, **kwargs)
    if not result["success"]:
        said = result.get("log") or result.get("error") or repr(result)  # the log, or its error
        raise RuntimeError(f"nbgrader {command} {assignment} failed:\n{said[-3000:]}")


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


def write_status(
    assignment: str, student: str, status: str, sandbox: str, note: str, digest: str = ""
) -> None:
    """`digest`: of the submission as graded (`worker.digest_folder`), so a changed one is redone."""
    path = status_file(assignment, student)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "status": status,
        "sandbox": sandbox,
        "note": note,
        "digest": digest,
        "at": time.strftime("%FT%T"),
    }
    path.write_text(json.dumps(record) + "\n")


# ---------------------------------------------------------------------------- the driver's writes
class Recorder:
    """The driver's side of each outcome: it alone writes the autograded notebooks, the feedback,
    the gradebook (one open connection, one transaction per student) and the status files."""

    def __init__(self, assignment: str, gradebook, notes: dict, sandbox: str, digests: dict):
        self.assignment, self.gradebook, self.notes = assignment, gradebook, notes
        self.sandbox, self.digests = sandbox, digests
        self.written: set[str] = set()
        self.log = ROOT / "grading" / "autograde.log"
        from .policies import course_plugin

        self.late_policy = course_plugin(ROOT)  # nbgrader_config.py's late policy

    def __call__(self, outcome: dict) -> None:
        student, status = outcome["student"], outcome["status"]
        if student in self.written:
            raise RuntimeError(f"{student}'s grade would be written twice")
        self.written.add(student)
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"== {self.assignment} {student}: {status} ({outcome['seconds']:.1f} s)\n")
            log.write(outcome["log"])
        graded = ROOT / "grading" / "autograded" / student / self.assignment
        pages = ROOT / "grading" / "feedback" / student / self.assignment
        for folder in (graded, pages):
            shutil.rmtree(folder, ignore_errors=True)
        if status == "graded":
            try:
                self._write_gradebook(student, outcome["gradebook"])
            except Exception as error:  # noqa: BLE001 - recorded for that student
                self.gradebook.db.rollback()
                status = f"failed: the gradebook could not take the scores ({type(error).__name__})"
                print(f"{student}: {error!r}", file=sys.stderr)
        if status == "graded":
            for folder, files in ((graded, outcome["notebooks"]), (pages, outcome["feedback"])):
                folder.mkdir(parents=True, exist_ok=True)
                for name, text in files.items():
                    (folder / Path(name).name).write_text(text, encoding="utf-8")
        else:
            forget_submission(self.gradebook, self.assignment, student)
        said = [] if status == "graded" else [status.removeprefix("failed: ")]
        note = "; ".join(said + self.notes.get(student, []))
        write_status(
            self.assignment,
            student,
            status.split(":")[0],
            self.sandbox,
            note,
            self.digests.get(student, ""),
        )

    def _write_gradebook(self, student: str, rows: dict) -> None:
        """Scores as the worker's nbgrader computed them; an instructor's manual score is kept and
        its grade stays marked for review, as nbgrader's own autograde does."""
        from datetime import datetime

        gradebook, assignment = self.gradebook, self.assignment
        gradebook.update_or_create_student(student)
        stamp = rows.get("timestamp")
        extra = {"timestamp": datetime.fromisoformat(stamp)} if stamp else {}
        gradebook.update_or_create_submission(assignment, student, **extra)
        for notebook, values in rows["notebooks"].items():
            submitted = gradebook.find_submission_notebook(notebook, assignment, student)
            submitted.late_submission_penalty = values["late_submission_penalty"]
            submitted.flagged = values["flagged"]
            for name, grade_row in values["grades"].items():
                grade = gradebook.find_grade(name, notebook, assignment, student)
                grade.auto_score = grade_row["auto_score"]
                grade.needs_manual_grade = bool(
                    grade_row["needs_manual_grade"] or grade.manual_score is not None
                )
            for name, text in values["comments"].items():
                gradebook.find_comment(name, notebook, assignment, student).auto_comment = text
        gradebook.db.commit()
        # the worker's scratch gradebook knows no due date: the course's late policy is applied
        # here, on the course gradebook, which does (and `policies late` re-applies it later)
        from .policies import apply_late_policy

        apply_late_policy(gradebook, assignment, self.late_policy, student=student)


def template_for(assignment: str) -> bytes:
    """A gradebook holding only `assignment` (its cells, points and checksums), for the workers:
    nbgrader's ``generate_assignment`` into a scratch database and release folder."""
    import tempfile

    from nbgrader import api as nbgrader_api
    from sqlalchemy import text

    from .worker import template_gradebook

    # a new gradebook records its schema version, which nbgrader asks of `alembic` in a new
    # Python process; the course's gradebook, made by the same nbgrader, already holds it
    with course_gradebook() as gradebook:
        version = gradebook.db.execute(text("SELECT version_num FROM alembic_version")).scalar()
    with (
        tempfile.TemporaryDirectory(prefix="seqmodels-template-") as tmp,
        mock.patch.object(nbgrader_api, "get_alembic_version", lambda: version),
    ):
        db = Path(tmp) / "template.db"
        config = {"db_url": f"sqlite:///{db}", "release_directory": str(Path(tmp) / "release")}
        nbgrader("generate_assignment", assignment, force=True, config=config)
        return template_gradebook(db)


def submission_files(folder: Path) -> dict[str, bytes]:
    """The regular files of a submission (links were dropped), by path relative to it."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


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
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=course_config(str(ROOT)))
    return Gradebook(coursedir.db_url, coursedir.course_id)


ROSTER_FIELDS = ("first_name", "last_name", "email")


def import_roster(gradebook, roster: Path) -> list[str]:
    """Names from the course roster, a CSV with nbgrader's own columns (``id``, and any of
    ``first_name``, ``last_name``, ``email``), into the gradebook, so that formgrader and the CSV
    show them. Returns what was wrong with it, one line per problem; nothing is imported from a
    file without an ``id`` column, nor a row whose id is not a safe id (`STUDENT_ID`)."""
    try:
        with open(roster, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
            header = rows[0].keys() if rows else []
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        return [f"{roster} could not be read: {error}"]
    if "id" not in header:
        return [f"{roster} has no 'id' column (expected: id,first_name,last_name,email)"]
    problems = []
    for line, row in enumerate(rows, start=2):
        student = (row.get("id") or "").strip()
        if not STUDENT_ID.fullmatch(student):
            problems.append(
                f"{roster}, line {line}: {student!r} is not a student id ({STUDENT_ID_RULE})"
            )
            continue
        names = {k: (row.get(k) or "").strip() or None for k in ROSTER_FIELDS if k in row}
        gradebook.update_or_create_student(student, **names)
    return problems


def forget_submission(gradebook, assignment: str, student: str) -> None:
    """Make sure `student` is in the gradebook with no (partial) submission of `assignment`."""
    from nbgrader.api import MissingEntry

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
    ``needs_manual_grade``): a task whose rules may have been broken, until a manual score is given.
    Written answers, which always wait for one, are in ``manual_status`` instead."""
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
            if grade.cell.cell_type != "code":
                continue  # a written answer (manual_status says whether it is graded)
            key = (grade.assignment.name, grade.student.id)
            held.setdefault(key, []).append(grade.name)
    return {key: sorted(names) for key, names in held.items()}


PARTS = ("autograded", "manual", "manual_status")  # columns after nbgrader's own


def score_parts(gradebook, assignment: str, student: str) -> dict[str, str]:
    """The submission's autograded part (code cells), manual part (written answers and tasks) and
    whether the manual part is graded: ``graded``, ``not graded yet`` or ``none`` (no such part).
    A written answer left as released is graded: nbgrader gives it 0 and asks no one to read it."""
    from nbgrader.api import MissingEntry

    try:
        submission = gradebook.find_submission(assignment, student)
    except MissingEntry:
        return {"autograded": "", "manual": "", "manual_status": ""}
    manual = [
        grade
        for notebook in submission.notebooks
        for grade in notebook.grades
        if grade.cell.cell_type == "markdown"  # written answers and tasks
    ]
    status = "none"
    if manual:
        waiting = any(
            g.needs_manual_grade or (g.manual_score is None and g.auto_score is None)
            for g in manual
        )
        status = "not graded yet" if waiting else "graded"
    return {
        "autograded": f"{submission.code_score:g}",
        "manual": f"{submission.written_score + submission.task_score:g}",
        "manual_status": status,
    }


def export_csv(csv_path: Path) -> None:
    """nbgrader's CSV export (its `CsvExportPlugin`, in this process, on the course's gradebook),
    then the `autograded`, `manual`, `manual_status`, `review`, `sandbox` and `note` columns."""
    from nbgrader.plugins import CsvExportPlugin

    with course_gradebook() as gradebook:
        CsvExportPlugin(to=str(csv_path)).export(gradebook)
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            row.update(score_parts(gradebook, row["assignment"], row["student_id"]))
    fields = list(rows[0].keys()) if rows else ["assignment", "student_id", "score"]
    fields = [f for f in fields if f not in PARTS] + list(PARTS)
    held = held_for_review()
    for row in rows:
        status = read_status(row["assignment"], row["student_id"]) or {}
        row["review"] = " ".join(held.get((row["assignment"], row["student_id"]), []))
        row["sandbox"] = status.get("sandbox", "")
        row["note"] = status.get("note", "")
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*fields, "review", "sandbox", "note"])
        writer.writeheader()
        writer.writerows({k: safe_cell(v or "") for k, v in row.items()} for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description="Grade every submission of one assignment.")
    parser.add_argument("assignment")
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="worker processes of the local cluster (without --scheduler)",
    )
    parser.add_argument(
        "--scheduler",
        default=os.environ.get("SEQMODELS_SCHEDULER") or None,
        help="a Dask scheduler's address (tcp://host:8786): grade on its workers, not locally",
    )
    parser.add_argument(
        "--worker-course",
        default=None,
        help="where the workers' copy of the course is (default: this folder's path)",
    )
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
    students, rejected = collect_students(submitted, args.assignment)
    for name in rejected:
        print(
            f"not graded: the student id {name!r} (folder {submitted / name}) is not one this "
            f"course accepts ({STUDENT_ID_RULE}); rename the folder to the student's id and run "
            "again"
        )
    if not students:
        print(f"no submissions of {args.assignment} under {submitted}/<student>/{args.assignment}/")
        return 1
    budget = int(os.environ.get("SEQMODELS_NOTEBOOK_BUDGET", 180))
    student_seconds = args.student_timeout or budget + 120
    memory = int(os.environ.get("SEQMODELS_MEMORY_LIMIT_MB", 4096))
    if args.unsafe_no_sandbox:
        sandbox, mode = UNSAFE, "none"
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
        sandbox, mode = "bubblewrap", "bubblewrap"
        print(f"sandbox: bubblewrap; {limits}")
    os.environ["SEQMODELS_SANDBOX"] = mode
    release = ROOT / "assignments" / args.assignment
    # a student is graded again only if never graded or if the submission changed since
    digests = {s: digest_folder(submitted / s / args.assignment) for s in students}
    earlier = {s: read_status(args.assignment, s) for s in students}
    todo = [
        s
        for s in students
        if args.force or not earlier[s] or earlier[s].get("digest") != digests[s]
    ]
    jobs = max(1, min(args.jobs, len(todo) or 1))
    # the cluster starts (its workers import nbgrader and start their kernel zygotes) while the
    # course's gradebook is synced and the workers' one-assignment gradebook is made
    if todo and mode == "bubblewrap" and not args.scheduler:
        # one kernel zygote for this machine's workers, importing torch while everything else
        # starts (each worker would otherwise start its own)
        share_zygote(Sandbox().kernel_env())
    background = ThreadPoolExecutor(1)
    opening = background.submit(open_client, args.scheduler, jobs) if todo else None
    usable = False
    try:
        nbgrader("generate_assignment", args.assignment, force=True)
        notebooks = sorted(p.name for p in release.glob("*.ipynb"))
        for name in notebooks:
            verify_references(ROOT / "solutions" / args.assignment / "references", Path(name).stem)
        usable = True
    except (ReferencesMismatch, OSError) as error:
        print(f"cannot grade: the reference outputs are not usable: {error}")
        return 2
    finally:
        if not usable and opening is not None:  # no grading: stop the cluster started for it
            close_client(opening.result())
    notes: dict[str, list[str]] = {}
    for student in todo:
        folder = submitted / student / args.assignment
        keep = ROOT / "grading" / "oversize" / args.assignment / student
        notes[student] = (
            set_aside_oversize(folder, release, keep, args.max_submission_mb)
            + drop_links(folder)
            + repair_unreadable(folder, release)
        )
        digests[student] = digest_folder(folder)  # as graded, after any repair
        for note in notes[student]:
            print(f"{student}: {note}")
    start = time.perf_counter()
    workers = jobs
    results: dict[str, str] = {}
    if todo:
        course = args.worker_course or str(ROOT)
        digest = references_digest(ROOT, args.assignment)
        work = [
            {
                "assignment": args.assignment,
                "student": student,
                "files": submission_files(submitted / student / args.assignment),
                "notebooks": notebooks,
                "course": course,
                "references": digest,
                "sandbox": mode,
                "seconds": student_seconds,
            }
            for student in todo
        ]
        template = template_for(args.assignment)
        client = opening.result()
        try:
            workers = sum(client.nthreads().values()) or jobs  # one submission per thread
            run_seconds = (
                args.max_minutes or 2 * student_seconds * math.ceil(len(todo) / workers) / 60
            ) * 60
            logging.captureWarnings(True)  # nbgrader's SQLAlchemy warnings: to the log
            warnings_log = logging.FileHandler(ROOT / "grading" / "autograde.log")
            logging.getLogger("py.warnings").addHandler(warnings_log)
            logging.getLogger("py.warnings").propagate = False
            with course_gradebook() as gradebook:
                record = Recorder(args.assignment, gradebook, notes, sandbox, digests)
                results = grade_everywhere(client, work, template, record, run_seconds)
        finally:
            close_client(client)
    seconds = time.perf_counter() - start
    autograded = ROOT / "grading" / "autograded"
    feedback = ROOT / "grading" / "feedback"
    pages = {Path(n).with_suffix(".html").name for n in notebooks}
    for student in students:  # a graded student whose worker made no feedback gets it here
        folder = feedback / student / args.assignment
        status = read_status(args.assignment, student) or {}
        if status.get("status") == "graded" and not all((folder / p).is_file() for p in pages):
            keep_only(autograded / student / args.assignment, set(notebooks))
            nbgrader("generate_feedback", args.assignment, student_id=student, force=True)
    for student in students:
        folder = feedback / student / args.assignment
        status = read_status(args.assignment, student) or {}
        if status.get("status") == "failed":
            folder.mkdir(parents=True, exist_ok=True)
            for name in notebooks:
                page = note_page(args.assignment, student, status["note"])
                (folder / Path(name).with_suffix(".html")).write_text(page)
        keep_only(folder, pages)
    roster = ROOT / "grading" / "roster.csv"
    if roster.is_file():  # the students' names, for formgrader and the CSV
        with course_gradebook() as gradebook:
            for problem in import_roster(gradebook, roster):
                print(f"roster: {problem}")
    csv_path = ROOT / "grading" / "grades.csv"
    export_csv(csv_path)
    failed = {s: r for s, r in results.items() if r != "graded"}
    where = f"on the scheduler {args.scheduler}" if args.scheduler else "on this machine"
    print(
        f"{len(results) - len(failed)} graded, {len(students) - len(todo)} already done, "
        f"{len(failed)} not graded, in {seconds:.1f} s with {workers} workers {where} "
        f"(sandbox: {sandbox}); grades in {csv_path.relative_to(ROOT)}, feedback in "
        "grading/feedback/, log in grading/autograde.log"
    )
    for student, status in sorted(failed.items()):
        print(f"  {student}: {status}")
    if rejected:
        print(
            f"{len(rejected)} submission folder(s) not graded, their ids not accepted: {rejected}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
