"""The course's late policy and its export for a learning-management system, as nbgrader plugins
(instructor only).

- **Late policy** (`PercentPerDay`, nbgrader's ``LateSubmissionPlugin`` extension point): a
  submission loses ``percent_per_day`` % of its score for each day or part of a day it came after
  the due date (after ``grace_minutes``), at most ``max_percent`` %. Lateness is nbgrader's own:
  the submission's timestamp against the assignment's due date plus any extension, both in the
  gradebook. ``nbgrader_config.py`` sets the policy (``c.AssignLatePenalties.plugin_class`` and
  ``c.PercentPerDay.*``); ``nbgrader autograde`` applies it per notebook. ``make grade`` grades in
  a scratch gradebook without due dates, so after it, ``python -m seqmodels.grading.policies late
  ps1`` applies the policy in the course's gradebook (``--extend ada=48`` first grants hours) and
  writes ``grading/grades.csv`` again.
- **LMS export** (`LmsExportPlugin`, nbgrader's ``ExportPlugin``): one row per student, the
  columns of a Canvas gradebook import (``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``,
  ``Section``, then one column per assignment holding the score after the late penalty), with a
  ``Points Possible`` row first; Moodle's CSV grade import maps ``SIS User ID`` to its ID number
  and each assignment column to a grade item (``--LmsExportPlugin.points_row=False`` leaves the
  row out). ``nbgrader export --exporter=seqmodels.grading.policies.LmsExportPlugin --to
  grading/lms.csv``.
"""

from __future__ import annotations

import argparse
import csv
import math
from datetime import timedelta
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin, LateSubmissionPlugin
from traitlets import Bool, Float

DAY = 86400.0
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def days_late(seconds_late: float, grace_minutes: float = 0.0) -> int:
    """Days or parts of a day after the due date and the grace period (0 when on time)."""
    return max(0, math.ceil((seconds_late - 60 * grace_minutes) / DAY))


class PercentPerDay(LateSubmissionPlugin):
    """A stated percentage of the score per day late (a part of a day counts whole), capped."""

    percent_per_day = Float(10.0, help="% of the score lost per day late").tag(config=True)
    max_percent = Float(50.0, help="the most a late submission loses, % of its score").tag(
        config=True
    )
    grace_minutes = Float(0.0, help="minutes after the due date that are not late").tag(config=True)

    def late_submission_penalty(
        self, student_id: str, score: float, total_seconds_late: float
    ) -> float | None:
        days = days_late(total_seconds_late, self.grace_minutes)
        if days == 0:
            return None
        percent = min(self.max_percent, self.percent_per_day * days)
        return round(score * percent / 100, 4)


def apply_late_policy(
    gradebook: Gradebook, assignment: str, plugin: LateSubmissionPlugin, student: str | None = None
) -> list[dict]:
    """Set every notebook's late penalty of `assignment` (one `student`'s, or everyone's) from
    `plugin`, as nbgrader's ``AssignLatePenalties`` does; the rows changed, for a summary."""
    rows = []
    for submission in gradebook.find_assignment(assignment).submissions:
        if student is not None and submission.student.id != student:
            continue
        late, total = submission.total_seconds_late, 0.0
        for notebook in submission.notebooks:
            penalty = None
            if late > 0:
                penalty = plugin.late_submission_penalty(
                    submission.student.id, notebook.score, late
                )
                if penalty is not None:  # as nbgrader clamps it
                    penalty = min(max(penalty, 0.0), notebook.score)
            notebook.late_submission_penalty = penalty
            total += penalty or 0.0
        if late > 0:
            rows.append(
                {
                    "student": submission.student.id,
                    "hours_late": round(late / 3600, 2),
                    "penalty": total,
                    "score": max(0.0, submission.score - total),
                }
            )
    gradebook.db.commit()
    return rows


def safe_cell(value: str) -> str:
    """A CSV cell a spreadsheet opens as text; numbers (``-1.5``) stay numbers."""
    try:
        float(value)
        return value
    except ValueError:
        return "'" + value if value.startswith(FORMULA_START) else value


class LmsExportPlugin(ExportPlugin):
    """One row per student, a column per assignment: the layout LMS gradebook imports read."""

    points_row = Bool(True, help="a 'Points Possible' row first (Canvas)").tag(config=True)

    def export(self, gradebook: Gradebook) -> None:
        assignments = [
            a for a in gradebook.assignments if not self.assignment or a.name in self.assignment
        ]
        students = sorted(
            (s for s in gradebook.students if not self.student or s.id in self.student),
            key=lambda s: s.id,
        )
        fields = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
        fields += [a.name for a in assignments]
        rows = []
        if self.points_row:
            row = dict.fromkeys(fields, "")
            row["Student"] = "Points Possible"
            row.update({a.name: f"{a.max_score:g}" for a in assignments})
            rows.append(row)
        for student in students:
            name = ", ".join(x for x in (student.last_name, student.first_name) if x)
            row = {
                "Student": name or student.id,
                "ID": "",
                "SIS User ID": student.id,
                "SIS Login ID": student.email or "",
                "Section": "",
            }
            for a in assignments:
                try:
                    sub = gradebook.find_submission(a.name, student.id)
                except MissingEntry:
                    row[a.name] = "0"  # nothing submitted (nbgrader's own CSV says 0.0)
                    continue
                row[a.name] = f"{max(0.0, sub.score - sub.late_submission_penalty):g}"
            rows.append(row)
        with open(self.to or "lms.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows({k: safe_cell(v) for k, v in row.items()} for row in rows)


def course_plugin(root: Path) -> LateSubmissionPlugin:
    """The late-policy plugin that the course's ``nbgrader_config.py`` sets, configured by it."""
    from traitlets.config.loader import PyFileConfigLoader
    from traitlets.utils.importstring import import_item

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    cls = config.AssignLatePenalties.get("plugin_class", LateSubmissionPlugin)
    cls = import_item(cls) if isinstance(cls, str) else cls
    return cls(config=config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Apply the late policy after `make grade`.")
    parser.add_argument("command", choices=["late"])
    parser.add_argument("assignment")
    parser.add_argument(
        "--extend",
        action="append",
        default=[],
        metavar="STUDENT=HOURS",
        help="grant a student an extension of so many hours first (repeatable)",
    )
    args = parser.parse_args(argv)
    from . import run

    plugin = course_plugin(run.ROOT)
    with run.course_gradebook() as gradebook:
        for item in args.extend:
            student, _, hours = item.partition("=")
            submission = gradebook.find_submission(args.assignment, student)
            submission.extension = timedelta(hours=float(hours))
        rows = apply_late_policy(gradebook, args.assignment, plugin)
    for row in rows:
        print(
            f"{row['student']}: {row['hours_late']} h late, -{row['penalty']:g} → {row['score']:g}"
        )
    print(f"{len(rows)} late submissions of {args.assignment} ({type(plugin).__name__})")
    csv_path = run.ROOT / "grading" / "grades.csv"
    run.export_csv(csv_path)
    print(f"grades in {csv_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
