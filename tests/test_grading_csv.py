"""grades.csv is safe to open in a spreadsheet: unsafe student ids are refused at collection, and
every text cell that a spreadsheet would read as a formula is neutralised (OWASP's rule)."""

import csv
import shutil
import sys

import pytest
from nbgrader.api import Gradebook

from seqmodels.grading import run

ROOT = run.Path(__file__).resolve().parents[1]
HOSTILE_IDS = ["=2+5", "@SUM(2+5)", "+cmd", "-1+1", "\tx", "\r=1", ".hidden", "a b"]


def test_student_ids_outside_the_safe_pattern_are_refused_at_collection(
    tmp_path, monkeypatch, capsys
):
    submitted = tmp_path / "grading" / "submitted"
    for name in [*HOSTILE_IDS, "alice", "bob.smith@uni.edu", "s_42"]:
        (submitted / name / "ps1").mkdir(parents=True)
    accepted, rejected = run.collect_students(submitted, "ps1")
    assert accepted == ["alice", "bob.smith@uni.edu", "s_42"]
    assert sorted(rejected) == sorted(HOSTILE_IDS)
    # the driver says why, names the folder, and leaves it where it was
    for name in ["alice", "bob.smith@uni.edu", "s_42"]:
        shutil.rmtree(submitted / name)
    monkeypatch.setattr(run, "ROOT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["run", "ps1"])
    assert run.main() == 1  # nobody left to grade
    out = capsys.readouterr().out
    for name in HOSTILE_IDS:
        assert f"the student id {name!r}" in out
        assert (submitted / name / "ps1").is_dir()
    assert run.STUDENT_ID_RULE in out


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("=2+5", "'=2+5"),
        ("@SUM(2+5)", "'@SUM(2+5)"),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("-1.5", "-1.5"),  # numbers stay numbers
        ("+3", "+3"),
        ("-2e3", "-2e3"),
        ("10", "10"),
        ("alice", "alice"),
        ("", ""),
    ],
)
def test_a_cell_that_starts_like_a_formula_is_written_as_text(value, written):
    assert run.safe_cell(value) == written


def test_grades_csv_neutralises_formulas_already_in_the_gradebook(tmp_path, monkeypatch):
    """Ids and names put in the gradebook by other means (nbgrader db student add) are exported
    safely too; scores stay numbers."""
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    monkeypatch.setattr(run, "ROOT", tmp_path)
    monkeypatch.delenv("SEQMODELS_GRADEBOOK_URL", raising=False)
    (tmp_path / "grading").mkdir(exist_ok=True)
    with Gradebook(f"sqlite:///{tmp_path / 'grading' / 'gradebook.db'}") as gradebook:
        gradebook.add_assignment("ps1")
        gradebook.add_student("=2+5", first_name="@SUM(1+1)", last_name="-cmd")
        gradebook.add_student("alice", first_name="Alice", last_name="Liddell")
    status = tmp_path / "grading" / "status" / "ps1"
    status.mkdir(parents=True)
    (status / "=2+5.json").write_text('{"sandbox": "bubblewrap", "note": "=HYPERLINK(1)"}')
    run.export_csv(tmp_path / "grades.csv")
    with open(tmp_path / "grades.csv", newline="") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"'=2+5", "alice"}
    hostile = rows["'=2+5"]
    assert hostile["first_name"] == "'@SUM(1+1)" and hostile["last_name"] == "'-cmd"
    assert hostile["note"] == "'=HYPERLINK(1)"
    for row in rows.values():
        assert float(row["score"]) == 0.0
        for value in row.values():
            assert not value.startswith(run.FORMULA_START) or run.NUMBER.fullmatch(value)


def test_grades_csv_shows_the_autograded_part_the_manual_part_and_whether_it_is_graded(
    tmp_path, monkeypatch
):
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path)
    monkeypatch.setattr(run, "ROOT", tmp_path)
    monkeypatch.delenv("SEQMODELS_GRADEBOOK_URL", raising=False)
    (tmp_path / "grading").mkdir(exist_ok=True)
    url = f"sqlite:///{tmp_path / 'grading' / 'gradebook.db'}"
    with Gradebook(url) as gradebook:
        gradebook.add_assignment("ps1")
        gradebook.add_notebook("ps1", "ps1")
        gradebook.add_grade_cell("tests", "ps1", "ps1", max_score=6, cell_type="code")
        gradebook.add_grade_cell("derive", "ps1", "ps1", max_score=4, cell_type="markdown")
        for student in ("waiting", "marked", "left-blank", "absent"):
            gradebook.add_student(student)
        for student, manual in (("waiting", None), ("marked", 3.5), ("left-blank", None)):
            gradebook.add_submission("ps1", student)
            tests = gradebook.find_grade("tests", "ps1", "ps1", student)
            tests.auto_score, tests.needs_manual_grade = 5.0, False
            derive = gradebook.find_grade("derive", "ps1", "ps1", student)
            derive.manual_score, derive.needs_manual_grade = manual, manual is None
        # an answer left as released: nbgrader's SaveAutoGrades gives it 0 and no one reads it
        blank = gradebook.find_grade("derive", "ps1", "ps1", "left-blank")
        blank.auto_score, blank.needs_manual_grade = 0.0, False
        gradebook.db.commit()
    run.export_csv(tmp_path / "grades.csv")
    with open(tmp_path / "grades.csv", newline="") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    waiting, marked = rows["waiting"], rows["marked"]
    assert (waiting["autograded"], waiting["manual"], waiting["manual_status"]) == (
        "5",
        "0",
        "not graded yet",
    )
    assert (marked["autograded"], marked["manual"], marked["manual_status"]) == (
        "5",
        "3.5",
        "graded",
    )
    assert float(marked["score"]) == 8.5
    assert rows["left-blank"]["manual_status"] == "graded"
    # the review column names held test cells; a written answer waits in manual_status only
    assert waiting["review"] == marked["review"] == ""
    assert rows["absent"]["manual_status"] == ""  # no submission


def test_a_roster_gives_formgrader_and_the_csv_the_students_names(tmp_path, monkeypatch):
    """nbgrader's own roster columns; an unsafe id is refused with its line, names are kept as text."""
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "id,first_name,last_name,email\n"
        "alice,Alice,Liddell,alice@uni.edu\n"
        "=2+5,Eve,Il,\n"
        "bob,=SUM(1),,\n"
    )
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        problems = run.import_roster(gradebook, roster)
        alice, bob = gradebook.find_student("alice"), gradebook.find_student("bob")
        assert (alice.first_name, alice.last_name, alice.email) == (
            "Alice",
            "Liddell",
            "alice@uni.edu",
        )
        assert bob.first_name == "=SUM(1)" and bob.last_name is None  # the CSV neutralises it
        assert sorted(s.id for s in gradebook.students) == ["alice", "bob"]
    assert len(problems) == 1 and "line 3" in problems[0] and "'=2+5'" in problems[0]
    (tmp_path / "bad.csv").write_text("student,name\nalice,A\n")
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        assert "no 'id' column" in run.import_roster(gradebook, tmp_path / "bad.csv")[0]
