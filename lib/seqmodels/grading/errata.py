"""Correcting a problem set mid-term so that the submissions already in stay gradable
(instructor only).

nbgrader identifies each cell by its ``grade_id``. When it grades a submission it replaces every
locked cell (instructions, tests) with the gradebook's current text, keeps the student's own cells,
and compares a written answer with its released stub's checksum to tell an untouched answer from a
written one. ``generate_assignment`` refuses to add or remove a cell of a notebook that has
submissions. So a correction may change:

- the text of locked cells (instructions, public tests): old submissions are graded with the
  corrected text;
- anything that is not in the release: hidden tests, reference outputs, mark schemes and model
  answers (``solutions/``), and points;

and must not change, in the release students already have:

- the set of cells: no ``grade_id`` added, removed or renamed;
- a cell's kind: its type (code or Markdown) and its nbgrader flags (solution, grade, locked, task);
- the cells students write in (their released stubs).

``python -m seqmodels.grading.errata ps1`` compares ``assignments/ps1/`` as ``make assignments``
regenerated it from the corrected source with the release students have (``--against``, a git
revision, by default ``HEAD``), lists what changed and exits with status 1 if a change would
strand a submission.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

FLAGS = ("solution", "grade", "locked", "task")


def cells(notebook: dict) -> dict[str, dict]:
    """The release's nbgrader cells by ``grade_id``: type, flags, points and source."""
    out = {}
    for cell in notebook.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader")
        if not meta or "grade_id" not in meta:
            continue
        source = cell.get("source", "")
        out[meta["grade_id"]] = {
            "cell_type": cell.get("cell_type"),
            "flags": tuple(bool(meta.get(f, False)) for f in FLAGS),
            "points": float(meta.get("points", 0) or 0),
            "source": "".join(source) if isinstance(source, list) else source,
        }
    return out


def compare(old: dict, new: dict) -> tuple[list[str], list[str]]:
    """``(refused, permitted)``: the changes from the `old` release notebook to the `new` one that
    would strand a submission made from `old`, and those that are safe (each a sentence)."""
    before, after = cells(old), cells(new)
    refused, permitted = [], []
    for grade_id in sorted(before.keys() - after.keys()):
        refused.append(f"{grade_id}: removed or renamed (submissions hold this cell)")
    for grade_id in sorted(after.keys() - before.keys()):
        refused.append(f"{grade_id}: added (submissions made before lack it)")
    for grade_id in [g for g in before if g in after]:
        a, b = before[grade_id], after[grade_id]
        if a["cell_type"] != b["cell_type"] or a["flags"] != b["flags"]:
            refused.append(f"{grade_id}: its type or nbgrader flags changed")
            continue
        solution, locked = a["flags"][0], a["flags"][2]
        if a["source"] != b["source"]:
            if solution or not locked:
                refused.append(f"{grade_id}: a cell students write in changed its released text")
            else:
                permitted.append(f"{grade_id}: text corrected (old submissions get the new text)")
        if a["points"] != b["points"]:
            permitted.append(f"{grade_id}: points {a['points']:g} → {b['points']:g}")
    return refused, permitted


def released_at(revision: str, path: str, root: Path) -> dict | None:
    """The release notebook `path` as committed at `revision`, or None if it was not there."""
    shown = subprocess.run(
        ["git", "show", f"{revision}:{path}"], cwd=root, capture_output=True, check=False
    )
    return json.loads(shown.stdout) if shown.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Check a corrected release against the one students have."
    )
    parser.add_argument("assignment", help="the problem set, e.g. ps1")
    parser.add_argument(
        "--against", default="HEAD", help="the git revision students' release came from"
    )
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the course folder")
    args = parser.parse_args(argv)
    folder = args.root / "assignments" / args.assignment
    notebooks = sorted(folder.glob("*.ipynb"))
    if not notebooks:
        parser.error(f"no release notebook in {folder}: run `make assignments` first")
    stranded = 0
    for path in notebooks:
        name = path.relative_to(args.root).as_posix()
        old = released_at(args.against, name, args.root)
        if old is None:
            print(f"{name}: not in {args.against}; nothing to compare")
            continue
        refused, permitted = compare(old, json.loads(path.read_text(encoding="utf-8")))
        for line in refused:
            print(f"{name}: REFUSED {line}")
        for line in permitted:
            print(f"{name}: ok {line}")
        stranded += len(refused)
    if stranded:
        print(
            f"{stranded} change(s) would strand submissions made from {args.against}'s release; "
            "correct the hidden tests, references or mark schemes instead, or add an erratum "
            "to a locked instructions cell",
            file=sys.stderr,
        )
        return 1
    print(
        f"the corrected {args.assignment} keeps every submission gradable; regrade everyone "
        f"with `make grade PS={args.assignment} FLAGS=--force`"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
