"""Running a course: the late policy and the LMS export (`seqmodels.grading.policies`), on an
nbgrader gradebook of its own with an on-time, a late and a missing submission; the policy is
the one the course's ``nbgrader_config.py`` sets, applied by nbgrader's ``AssignLatePenalties``."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from unittest import mock

import nbformat
import pytest
from nbgrader import api as nbgrader_api
from nbgrader.api import Gradebook
from nbgrader.plugins import CsvExportPlugin
from nbgrader.preprocessors import AssignLatePenalties
from traitlets.config.loader import PyFileConfigLoader

from seqmodels.grading import policies

ROOT = Path(__file__).resolve().parents[1]
DUE = datetime(2026, 10, 9, 17, 0, 0)


@pytest.fixture
def course_config():
    return PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()


@pytest.fixture
def gradebook(tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with mock.patch.object(nbgrader_api, "get_alembic_version", lambda: "0"), Gradebook(url) as gb:
        gb.add_assignment("ps1", duedate=DUE)
        gb.add_notebook("ps1", "ps1")
        gb.add_grade_cell("test_a", "ps1", "ps1", max_score=10, cell_type="code")
        gb.add_student("ada", first_name="Ada", last_name="Lovelace", email="ada@uni.example")
        gb.add_student("bob", first_name="Bob", last_name="=HYPERLINK()", email="bob@uni.example")
        gb.add_student("cy")  # submits nothing
        for student, when in (
            ("ada", DUE - timedelta(hours=1)),
            ("bob", DUE + timedelta(hours=30)),
        ):
            gb.add_submission("ps1", student, timestamp=when)
            gb.find_grade("test_a", "ps1", "ps1", student).auto_score = 8.0
        gb.db.commit()
        yield gb, url


def assign_penalties(config, url: str, student: str) -> None:
    """nbgrader's own preprocessor, as `nbgrader autograde` runs it, with the course's config."""
    resources = {
        "nbgrader": {"notebook": "ps1", "assignment": "ps1", "student": student, "db_url": url}
    }
    AssignLatePenalties(config=config).preprocess(nbformat.v4.new_notebook(), resources)


def test_the_policy_is_a_percentage_per_day_capped():
    plugin = policies.PercentPerDay(percent_per_day=10, max_percent=50, grace_minutes=15)
    assert plugin.late_submission_penalty("s", 8.0, 10 * 60) is None  # within the grace
    assert plugin.late_submission_penalty("s", 8.0, 16 * 60) == pytest.approx(0.8)  # day 1
    assert plugin.late_submission_penalty("s", 8.0, 30 * 3600) == pytest.approx(1.6)  # day 2
    assert plugin.late_submission_penalty("s", 8.0, 10 * 86400) == pytest.approx(4.0)  # the cap


def test_course_config_sets_the_policy(course_config):
    assert course_config.AssignLatePenalties.plugin_class == (
        "seqmodels.grading.policies.PercentPerDay"
    )
    plugin = policies.course_plugin(ROOT)
    assert isinstance(plugin, policies.PercentPerDay)
    assert (plugin.percent_per_day, plugin.max_percent, plugin.grace_minutes) == (10, 50, 15)


def test_late_and_on_time_submissions_in_the_gradebook_and_both_exports(
    gradebook, course_config, tmp_path
):
    gb, url = gradebook
    for student in ("ada", "bob"):
        assign_penalties(course_config, url, student)
    gb.db.expire_all()
    assert gb.find_submission_notebook("ps1", "ps1", "ada").late_submission_penalty is None
    assert gb.find_submission_notebook("ps1", "ps1", "bob").late_submission_penalty == 1.6

    CsvExportPlugin(to=str(tmp_path / "grades.csv")).export(gb)
    with open(tmp_path / "grades.csv", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert (rows["ada"]["late_submission_penalty"], rows["ada"]["score"]) == ("0.0", "8.0")
    assert (rows["bob"]["late_submission_penalty"], rows["bob"]["score"]) == ("1.6", "6.4")

    policies.LmsExportPlugin(to=str(tmp_path / "lms.csv")).export(gb)
    with open(tmp_path / "lms.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps1"]
    assert table[1] == ["Points Possible", "", "", "", "", "10"]
    assert table[2] == ["Lovelace, Ada", "", "ada", "ada@uni.example", "", "8"]
    assert table[3] == ["'=HYPERLINK(), Bob", "", "bob", "bob@uni.example", "", "6.4"]
    assert table[4] == ["cy", "", "cy", "", "", "0"]  # one row per student, submitted or not

    policies.LmsExportPlugin(to=str(tmp_path / "moodle.csv"), points_row=False).export(gb)
    with open(tmp_path / "moodle.csv", newline="") as f:
        assert [r[2] for r in csv.reader(f)] == ["SIS User ID", "ada", "bob", "cy"]


def test_after_make_grade_the_policy_is_applied_and_an_extension_lifts_it(gradebook):
    gb, _ = gradebook  # as `make grade` leaves it: scores in, no penalty assigned
    plugin = policies.course_plugin(ROOT)
    rows = policies.apply_late_policy(gb, "ps1", plugin)
    assert rows == [{"student": "bob", "hours_late": 30.0, "penalty": 1.6, "score": 6.4}]
    gb.find_submission("ps1", "bob").extension = timedelta(hours=48)
    assert policies.apply_late_policy(gb, "ps1", plugin) == []
    gb.db.expire_all()
    assert gb.find_submission("ps1", "bob").late_submission_penalty == 0


def test_the_command_after_make_grade(gradebook, tmp_path):
    """`python -m seqmodels.grading.policies late ps1` in a course folder: the extension first,
    then the policy, then grades.csv written again."""
    _, url = gradebook
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "lib"),
        "SEQMODELS_GRADEBOOK_URL": url,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    command = [sys.executable, "-m", "seqmodels.grading.policies", "late", "ps1"]
    done = subprocess.run(command, cwd=course, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "bob: 30.0 h late, -1.6 → 6.4" in done.stdout
    with open(course / "grading/grades.csv", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert (rows["bob"]["late_submission_penalty"], rows["bob"]["score"]) == ("1.6", "6.4")
    done = subprocess.run(
        [*command, "--extend", "bob=48"], cwd=course, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "0 late submissions of ps1" in done.stdout
    with open(course / "grading/grades.csv", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert (rows["bob"]["late_submission_penalty"], rows["bob"]["score"]) == ("0.0", "8.0")


def test_make_grade_applies_the_policy_as_it_records_each_grade(gradebook, tmp_path):
    """The driver (`run.Recorder`) writes the worker's scores into the course gradebook, which
    holds the due date, and applies the course's late policy there, student by student."""
    from seqmodels.grading.run import Recorder

    gb, _ = gradebook
    recorder = Recorder("ps1", gb, notes={}, sandbox="test", digests={})
    for student, when in (("ada", DUE - timedelta(hours=1)), ("bob", DUE + timedelta(hours=30))):
        row = {"late_submission_penalty": None, "flagged": False, "comments": {}}
        row["grades"] = {"test_a": {"auto_score": 8.0, "needs_manual_grade": False}}
        recorder._write_gradebook(
            student, {"timestamp": when.isoformat(), "notebooks": {"ps1": row}}
        )
    gb.db.expire_all()
    assert gb.find_submission("ps1", "ada").late_submission_penalty == 0
    assert gb.find_submission("ps1", "bob").late_submission_penalty == pytest.approx(1.6)
    bob = gb.find_submission("ps1", "bob")
    assert bob.score - bob.late_submission_penalty == pytest.approx(6.4)
