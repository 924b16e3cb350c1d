"""One submission graded by a worker, anywhere: the task every Dask worker runs (`grade_submission`).

A worker never touches the course's gradebook, feedback or grades file; the driver
(`seqmodels.grading.run`) alone writes those. The task gets everything it needs in its `job` (the
student's files, the sandbox mode; beside it, a gradebook holding only the assignment) and grades in a scratch
course of its own, created for this one submission and removed after it:

    <tmp>/submitted/<student>/<ps>/   the submitted files, as the driver sent them
    <tmp>/gradebook.db                a copy of the driver's one-assignment template
    <tmp>/autograded/, <tmp>/feedback/

It runs nbgrader's own ``autograde`` (the course's preprocessors: the kernel in the bubblewrap
sandbox, judged outside it) and ``generate_feedback`` there, then returns an `Outcome`: the
autograded notebooks, the feedback pages, and the scores and comments nbgrader wrote into the
scratch gradebook. The course's configuration and reference outputs come from the worker's own copy
of the course (``job["course"]``): the task checks that its references are the driver's
(``job["references"]``, a digest), so a worker with another version of the course refuses to grade.

If grading takes longer than ``job["seconds"]``, the task stops this submission's kernels and
returns a failed outcome; a submission whose grading kills the worker process itself is given to
another worker by Dask, and after the scheduler's ``allowed-failures`` it is reported to the driver
as one that killed its workers.
"""

from __future__ import annotations

import copy
import hashlib
import io
import logging
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

LOG_KEEP = 64 * 2**10  # characters of a submission's grading log sent back to the driver
_CONFIG: dict[str, object] = {}  # the course's nbgrader configuration, loaded once per worker


#: what a grading worker imports before its first submission (`dask_setup`; a local cluster's
#: workers are forked from a process that imported them)
WORKER_IMPORTS = [
    "seqmodels.grading.preprocessors",
    "seqmodels.grading.compare",  # the judging, with torch (`preprocessors` imports it lazily)
    "seqmodels.grading.records",
    "nbgrader.apps",
    "nbgrader.converters",
]


def dask_setup(worker=None) -> None:
    """Dask's preload hook (``dask worker --preload seqmodels.grading.worker``): import nbgrader and
    the course's preprocessors, and start the kernel zygote (`kernel_forks`), while the worker
    starts, not when its first submission arrives."""
    import importlib
    import os

    for name in WORKER_IMPORTS:
        importlib.import_module(name)
    from .kernel_forks import zygote_for
    from .sandbox import Sandbox

    if os.environ.get("SEQMODELS_SANDBOX", "bubblewrap") == "bubblewrap":
        zygote_for(Sandbox().kernel_env())  # started now: its imports overlap the worker's start


def digest_folder(folder: Path, names: list[str] | None = None) -> str:
    """SHA-256 over the relative paths and bytes of the regular files under `folder` (or `names`)."""
    digest = hashlib.sha256()
    paths = (
        sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
        if names is None
        else [folder / n for n in sorted(names)]
    )
    for path in paths:
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


def references_digest(course: Path, assignment: str) -> str:
    """What a worker must share with the driver to grade `assignment` the same way: the source
    notebook (hidden tests) and the reference outputs with their manifest."""
    source = course / "solutions" / assignment
    names = [
        str(p.relative_to(source))
        for p in source.rglob("*")
        if p.is_file() and (p.suffix == ".ipynb" or "references" in p.parts)
    ]
    return digest_folder(source, names)


def course_config(course: str, **settings: str):
    """A copy of the course's ``nbgrader_config.py`` (read once per process), with `settings`
    overriding ``CourseDirectory`` traits."""
    if course not in _CONFIG:
        from traitlets.config.loader import PyFileConfigLoader

        _CONFIG[course] = PyFileConfigLoader("nbgrader_config.py", path=course).load_config()
    config = copy.deepcopy(_CONFIG[course])
    for name, value in settings.items():
        setattr(config.CourseDirectory, name, value)
    return config


def _scratch_config(course: str, scratch: Path, sandbox: str):
    config = course_config(
        course,
        root=str(scratch),
        submitted_directory="submitted",
        autograded_directory="autograded",
        feedback_directory="feedback",
        db_url=f"sqlite:///{scratch / 'gradebook.db'}",
    )
    config.GuardedExecute.sandbox = sandbox
    return config


def _read_scratch_gradebook(path: Path, assignment: str, student: str) -> dict:
    """The rows nbgrader wrote for this one submission, as plain data for the driver."""
    from nbgrader.api import Gradebook, MissingEntry

    rows: dict = {"timestamp": None, "notebooks": {}}
    with Gradebook(f"sqlite:///{path}") as gradebook:
        try:
            submission = gradebook.find_submission(assignment, student)
        except MissingEntry:
            return rows
        rows["timestamp"] = submission.timestamp.isoformat() if submission.timestamp else None
        for notebook in submission.notebooks:
            rows["notebooks"][notebook.name] = {
                "late_submission_penalty": notebook.late_submission_penalty,
                "flagged": bool(notebook.flagged),
                "grades": {
                    g.name: {"auto_score": g.auto_score, "needs_manual_grade": g.needs_manual_grade}
                    for g in notebook.grades
                },
                "comments": {c.name: c.auto_comment for c in notebook.comments},
            }
    return rows


def _stop_kernels_under(scratch: Path) -> int:
    """Kill every sandbox of this process whose command line names `scratch` (its kernels)."""
    import psutil

    stopped = 0
    for child in psutil.Process().children(recursive=True):
        try:
            if str(scratch) in " ".join(child.cmdline()):
                child.kill()
                stopped += 1
        except psutil.Error:
            continue
    return stopped


def _capture_logs() -> tuple[logging.Handler, io.StringIO]:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("[%(levelname)s %(name)s] %(message)s"))
    handler.setLevel(logging.INFO)
    return handler, buffer


def grade_submission(job: dict, template: bytes) -> dict:
    """Grade one submission in a scratch course (see the module docstring); never raises for the
    submission's sake: a failure is an outcome with ``status`` "failed: why"."""
    from nbgrader.apps import NbGraderAPI

    assignment, student = job["assignment"], job["student"]
    outcome: dict = {
        "assignment": assignment,
        "student": student,
        "status": "failed: the grader did not finish",
        "notebooks": {},
        "feedback": {},
        "gradebook": {"timestamp": None, "notebooks": {}},
        "log": "",
        "seconds": 0.0,
    }
    start = time.perf_counter()
    course = Path(job["course"])
    mine = references_digest(course, assignment)
    if mine != job["references"]:
        outcome["status"] = (
            "failed: this worker's copy of the course has other reference outputs or hidden "
            f"tests than the driver's ({course}); update it to the driver's version"
        )
        return outcome
    handler, buffer = _capture_logs()
    logging.captureWarnings(True)  # nbgrader's SQLAlchemy warnings go to this log, not stderr
    # on the root logger, which the others propagate to; and on any that does not propagate
    # (a handler on both would record each line twice)
    loggers = [logging.getLogger()] + [
        logger
        for logger in (logging.getLogger("traitlets"), logging.getLogger("py.warnings"))
        if not logger.propagate
    ]
    for logger in loggers:
        logger.addHandler(handler)
    scratch = Path(tempfile.mkdtemp(prefix=f"seqmodels-grade-{assignment}-"))
    try:
        folder = scratch / "submitted" / student / assignment
        folder.mkdir(parents=True)
        for name, data in job["files"].items():
            target = (folder / name).resolve()
            if not target.is_relative_to(folder.resolve()):
                continue  # the driver sends relative names only; never write outside
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        (scratch / "gradebook.db").write_bytes(template)
        api = NbGraderAPI(config=_scratch_config(str(course), scratch, job["sandbox"]))
        result: dict = {}

        def grade() -> None:
            try:
                result["autograde"] = api.autograde(assignment, student, force=True, create=True)
                if result["autograde"]["success"]:
                    result["feedback"] = api.generate_feedback(assignment, student, force=True)
            except Exception as error:  # noqa: BLE001 - reported as this submission's failure
                result["error"] = error

        thread = threading.Thread(target=grade, name=f"grade-{student}", daemon=True)
        thread.start()
        thread.join(job["seconds"])
        if thread.is_alive():
            _stop_kernels_under(scratch)
            thread.join(30)
            outcome["status"] = (
                f"failed: grading did not finish within {job['seconds']:.0f} s; its kernel was "
                "stopped"
            )
            return outcome
        if "error" in result:
            outcome["status"] = f"failed: the grader raised {type(result['error']).__name__}"
            logging.getLogger("traitlets").error("%s: %r", student, result["error"])
            return outcome
        if not result["autograde"]["success"]:
            outcome["status"] = "failed: nbgrader could not grade it"
            logging.getLogger("traitlets").error("%s: %s", student, result["autograde"].get("log"))
            return outcome
        release_names = set(job["notebooks"])
        graded = scratch / "autograded" / student / assignment
        outcome["notebooks"] = {
            p.name: p.read_text(encoding="utf-8")
            for p in graded.glob("*.ipynb")
            if p.name in release_names
        }
        pages = scratch / "feedback" / student / assignment
        outcome["feedback"] = {
            p.name: p.read_text(encoding="utf-8")
            for p in pages.glob("*.html")
            if Path(p.name).with_suffix(".ipynb").name in release_names
        }
        outcome["gradebook"] = _read_scratch_gradebook(
            scratch / "gradebook.db", assignment, student
        )
        outcome["status"] = "graded"
        return outcome
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        log = buffer.getvalue()
        outcome["log"] = log[:LOG_KEEP] + (
            f"\n… ({len(log):,} characters)" if len(log) > LOG_KEEP else ""
        )
        outcome["seconds"] = time.perf_counter() - start
        shutil.rmtree(scratch, ignore_errors=True)


def template_gradebook(db_file: Path) -> bytes:
    """The bytes of an SQLite gradebook, read consistently (SQLite's online backup)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy_path = Path(tmp) / "copy.db"
        source, target = sqlite3.connect(db_file), sqlite3.connect(copy_path)
        with target:
            source.backup(target)
        source.close()
        target.close()
        return copy_path.read_bytes()
