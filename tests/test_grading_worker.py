"""The worker's side of grading, without a kernel: what it checks before grading anything."""

import shutil
import tempfile
from pathlib import Path

from seqmodels.grading.cluster import failed, killed_worker_note
from seqmodels.grading.worker import digest_folder, grade_submission, references_digest

ROOT = Path(__file__).resolve().parents[1]


def test_a_submission_digest_follows_its_files(tmp_path):
    (tmp_path / "ps1.ipynb").write_text("{}")
    first = digest_folder(tmp_path)
    assert digest_folder(tmp_path) == first
    (tmp_path / "ps1.ipynb").write_text("{ }")
    assert digest_folder(tmp_path) != first
    (tmp_path / "ps1.ipynb").write_text("{}")
    (tmp_path / "data.txt").write_text("")
    assert digest_folder(tmp_path) != first  # an added file counts too


def test_references_digest_covers_hidden_tests_and_references(tmp_path):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "solutions" / "ps1", course / "solutions" / "ps1")
    before = references_digest(course, "ps1")
    assert before == references_digest(ROOT, "ps1")
    (course / "solutions" / "ps1" / "README.md").write_text("notes")  # not graded: no change
    assert references_digest(course, "ps1") == before
    manifest = next((course / "solutions" / "ps1" / "references").iterdir())
    manifest.write_bytes(manifest.read_bytes() + b" ")
    assert references_digest(course, "ps1") != before


def test_a_worker_with_other_references_refuses_to_grade():
    job = {
        "assignment": "ps1",
        "student": "s1",
        "files": {"ps1.ipynb": b"{}"},
        "notebooks": ["ps1.ipynb"],
        "course": str(ROOT),
        "references": "0" * 64,  # not this course's
        "sandbox": "bubblewrap",
        "seconds": 60,
    }
    left = set(Path(tempfile.gettempdir()).glob("seqmodels-grade-*"))
    outcome = grade_submission(job, b"")
    assert outcome["status"].startswith("failed: this worker's copy of the course")
    assert outcome["notebooks"] == {} and outcome["gradebook"]["notebooks"] == {}
    assert set(Path(tempfile.gettempdir()).glob("seqmodels-grade-*")) == left  # no scratch made


def test_an_outcome_for_a_task_that_returned_none_says_why():
    job = {"assignment": "ps1", "student": "s1"}
    outcome = failed(job, killed_worker_note(3))
    assert outcome["student"] == "s1" and outcome["notebooks"] == {}
    assert "stopped its grading worker each time" in outcome["status"]


def test_the_driver_blames_only_the_submission_a_dead_worker_was_grading():
    """Two worker processes; one submission kills its worker every time it is tried. It is given
    up after exactly `ALLOWED_FAILURES + 1` tries, and every other submission, including those
    queued while workers died, is graded once."""
    from seqmodels.grading.cluster import (
        ALLOWED_FAILURES,
        close_client,
        grade_everywhere,
        open_client,
    )

    def task(job, template):
        import os
        import time

        if job["student"] == "killer":
            os._exit(1)  # takes its worker process down
        time.sleep(0.3)
        return {"student": job["student"], "status": "graded", "template": len(template)}

    jobs = [{"assignment": "ps1", "student": s} for s in ("a", "killer", "b", "c", "d", "e")]
    recorded = []
    client = open_client(None, 2)
    try:
        results = grade_everywhere(client, jobs, b"x" * 1000, recorded.append, 120, task=task)
    finally:
        close_client(client)
    assert sorted(o["student"] for o in recorded) == sorted(j["student"] for j in jobs)
    assert {s: r for s, r in results.items() if s != "killer"} == dict.fromkeys("abcde", "graded")
    assert results["killer"] == killed_worker_note(ALLOWED_FAILURES + 1)
    assert all(o.get("template") == 1000 for o in recorded if o["student"] != "killer")
