"""A similarity report across the submissions of one problem set (instructor only).

``python -m seqmodels.grading.similarity ps3`` reads ``grading/submitted/<student>/ps3/ps3.ipynb``
for every student and writes ``grading/similarity/ps3.csv`` and ``ps3.html``: the pairs of
students whose answers to the same task are alike, ranked, with the passages they share.

- **Written parts** (the Markdown answer cells, graded by hand) and **code** (every cell the
  student writes, part B's training code included): each answer becomes a set of shingles, runs of
  `SHINGLE` words (code: tokens, comments dropped), and a pair's similarity for a task is the
  Jaccard index of their two sets. Shingles of the released notebook (the prompt, the stubs, the
  tests every student has) are removed first, so what the course gave everyone is never evidence.
  A pair is flagged at ``WRITTEN_THRESHOLD`` (text) or ``CODE_THRESHOLD`` (code).
- **Stored outputs** (Problem Set 6's ``capstone.safetensors``): two files with the same SHA-256,
  or with the same tensors (names, dtypes, shapes and bytes; metadata aside), are flagged.
- Submissions are hostile data: nothing in them is executed or unpickled, each file is read only
  up to its cap (a larger one, a link or a malformed notebook is reported, not compared), the HTML
  escapes every student text and the CSV quotes what a spreadsheet would read as a formula.

A flagged pair is a reason to read two submissions side by side, not a finding of misconduct.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import html
import io
import json
import re
import struct
import time
import tokenize
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import numpy as np

#: words (code: tokens) per shingle
SHINGLE = 5
#: Jaccard index of two written answers' shingles at and above which a pair is flagged: on KJV
#: stretches (tests/test_course_running.py) independent pairs reach 0.072, copies with one word in
#: ten replaced 0.227 and more
WRITTEN_THRESHOLD = 0.15
#: the same for code cells (independent code to one specification shares more)
CODE_THRESHOLD = 0.5
#: an answer with fewer shingles than this (after the release's are removed) is not compared
MIN_SHINGLES = 8
#: the largest notebook read (the grader's own default cap on a submission, 20 MiB)
NOTEBOOK_BYTES = 20 * 2**20
#: the largest checkpoint read (the grader's cap on Problem Set 6's checkpoint, 16 MiB)
CHECKPOINT_BYTES = 16 * 2**20
CHECKPOINTS = ("capstone.safetensors",)
WORD = re.compile(r"\w+")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


@dataclass
class Submission:
    student: str
    answers: dict[str, str] = field(default_factory=dict)  # grade_id -> text
    outputs: dict[str, tuple[str, str]] = field(default_factory=dict)  # file -> (sha256, tensors)
    problems: list[str] = field(default_factory=list)


def bounded_read(path: Path, cap: int) -> bytes | str:
    """The bytes of a regular file of at most `cap` bytes, or why it was not read."""
    if path.is_symlink() or not path.is_file():
        return "not a regular file"
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        return f"larger than {cap // 2**20} MiB, not read"
    return data


def cell_text(cell: dict) -> str:
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        return "".join(source)
    return source if isinstance(source, str) else ""


def tasks_of(release: dict) -> dict[str, str]:
    """The cells students write in, ``grade_id -> "written" | "code"``."""
    kinds = {}
    for cell in release.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id"):
            kinds[meta["grade_id"]] = "written" if cell.get("cell_type") == "markdown" else "code"
    return kinds


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


def code_tokens(text: str) -> list[str]:
    """The code's tokens without comments; falls back to words if it does not tokenise."""
    try:
        kept = [
            t.string
            for t in tokenize.generate_tokens(io.StringIO(text).readline)
            if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE)
            and t.type not in (tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return words(text)
    return [t for t in kept if t.strip()]


def units(text: str, kind: str) -> list[str]:
    return code_tokens(text) if kind == "code" else words(text)


def shingles(seq: list[str]) -> set[tuple[str, ...]]:
    return {tuple(seq[i : i + SHINGLE]) for i in range(len(seq) - SHINGLE + 1)}


def tensors_digest(data: bytes) -> str:
    """SHA-256 of a safetensors file's tensors (sorted names, dtypes, shapes, bytes), without
    loading it into a framework; "" when the file is not a well-formed safetensors file."""
    if len(data) < 8:
        return ""
    (size,) = struct.unpack("<Q", data[:8])
    if size > len(data) - 8:
        return ""
    try:
        header = json.loads(data[8 : 8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError):
        return ""
    if not isinstance(header, dict):
        return ""
    body = data[8 + size :]
    digest = hashlib.sha256()
    for name in sorted(k for k in header if k != "__metadata__"):
        entry = header[name]
        try:
            start, end = (int(x) for x in entry["data_offsets"])
            shape = [int(x) for x in entry["shape"]]
            dtype = str(entry["dtype"])
        except (KeyError, TypeError, ValueError):
            return ""
        if not 0 <= start <= end <= len(body):
            return ""
        digest.update(json.dumps([name, dtype, shape]).encode())
        digest.update(body[start:end])
    return digest.hexdigest()


def read_submission(folder: Path, ps: str, kinds: dict[str, str]) -> Submission:
    """One student's answers by task, and the digests of their stored outputs."""
    sub = Submission(folder.parent.name)
    data = bounded_read(folder / f"{ps}.ipynb", NOTEBOOK_BYTES)
    if isinstance(data, str):
        sub.problems.append(f"{ps}.ipynb: {data}")
    else:
        try:
            nb = json.loads(data)
            cells = nb["cells"]
            if not isinstance(cells, list):
                raise TypeError("cells is not a list")
        except (ValueError, KeyError, TypeError) as error:
            sub.problems.append(f"{ps}.ipynb: not a notebook ({type(error).__name__})")
            cells = []
        for cell in cells:
            if not isinstance(cell, dict) or not isinstance(cell.get("metadata"), dict):
                continue
            meta = cell["metadata"].get("nbgrader")
            grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
            if isinstance(grade_id, str) and grade_id in kinds and grade_id not in sub.answers:
                sub.answers[grade_id] = cell_text(cell)
    for name in CHECKPOINTS:
        path = folder / name
        if not (path.exists() or path.is_symlink()):
            continue
        blob = bounded_read(path, CHECKPOINT_BYTES)
        if isinstance(blob, str):
            sub.problems.append(f"{name}: {blob}")
        else:
            sub.outputs[name] = (hashlib.sha256(blob).hexdigest(), tensors_digest(blob))
    return sub


def pair_scores(sets: list[set]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Jaccard index of every pair of `sets` sharing a shingle: ``(i, j, jaccard)`` arrays."""
    holders: dict = {}
    for i, s in enumerate(sets):
        for sh in s:
            holders.setdefault(sh, []).append(i)
    shared = [h for h in holders.values() if len(h) > 1]
    n = len(sets)
    if not shared:
        return np.zeros(0, int), np.zeros(0, int), np.zeros(0)
    matrix = np.zeros((n, len(shared)), dtype=np.float32)
    for column, rows in enumerate(shared):
        matrix[rows, column] = 1.0
    inter = matrix @ matrix.T
    sizes = np.array([len(s) for s in sets], dtype=np.float32)
    i, j = np.nonzero(np.triu(inter, k=1))
    jaccard = inter[i, j] / (sizes[i] + sizes[j] - inter[i, j])
    return i, j, jaccard


def shared_passages(a: list[str], b_shingles: set, limit: int = 3) -> list[str]:
    """The longest runs of `a` covered by shingles that `b` also has."""
    covered = [False] * len(a)
    for k in range(len(a) - SHINGLE + 1):
        if tuple(a[k : k + SHINGLE]) in b_shingles:
            covered[k : k + SHINGLE] = [True] * SHINGLE
    runs, start = [], None
    for k, flag in enumerate([*covered, False]):
        if flag and start is None:
            start = k
        elif not flag and start is not None:
            runs.append(a[start:k])
            start = None
    runs.sort(key=len, reverse=True)
    return [" ".join(r) for r in runs[:limit]]


def compare(release: dict, submissions: list[Submission]) -> list[dict]:
    """The flagged pairs, most similar first: one row per pair and task (or stored output)."""
    kinds = tasks_of(release)
    given = {kind: set() for kind in ("written", "code")}
    for cell in release.get("cells", []):
        for kind in given:
            given[kind] |= shingles(units(cell_text(cell), kind))
    rows = []
    for task, kind in kinds.items():
        threshold = WRITTEN_THRESHOLD if kind == "written" else CODE_THRESHOLD
        people, sets, seqs = [], [], []
        for sub in submissions:
            seq = units(sub.answers.get(task, ""), kind)
            own = shingles(seq) - given[kind]
            if len(own) >= MIN_SHINGLES:
                people.append(sub.student)
                sets.append(own)
                seqs.append(seq)
        i, j, jaccard = pair_scores(sets)
        for a, b, score in zip(i, j, jaccard, strict=True):
            if score >= threshold:
                rows.append(
                    {
                        "student_a": people[a],
                        "student_b": people[b],
                        "part": task,
                        "kind": kind,
                        "similarity": round(float(score), 3),
                        "evidence": " … ".join(shared_passages(seqs[a], sets[b])),
                    }
                )
    for name in CHECKPOINTS:
        held = [(s.student, s.outputs[name]) for s in submissions if name in s.outputs]
        for (a, (sha_a, ten_a)), (b, (sha_b, ten_b)) in combinations(held, 2):
            if sha_a == sha_b or (ten_a and ten_a == ten_b):
                same = "identical file (SHA-256)" if sha_a == sha_b else "identical tensors"
                rows.append(
                    {
                        "student_a": a,
                        "student_b": b,
                        "part": name,
                        "kind": "stored output",
                        "similarity": 1.0,
                        "evidence": f"{same} {sha_a[:16]}",
                    }
                )
    rows.sort(key=lambda r: (-r["similarity"], r["part"], r["student_a"], r["student_b"]))
    return rows


def safe_cell(value: str) -> str:
    """A CSV cell that a spreadsheet opens as text, never as a formula."""
    return "'" + value if value.startswith(FORMULA_START) else value


def write_report(rows: list[dict], problems: dict[str, list[str]], csv_path: Path, ps: str):
    """The CSV (one row per flagged pair and part) and the HTML page beside it."""
    fields = ["student_a", "student_b", "part", "kind", "similarity", "evidence"]
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: safe_cell(str(row[k])) for k in fields})
    e = html.escape
    lines = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Similarity report, {e(ps)}</title></head><body>",
        f"<h1>Similarity report, {e(ps)}</h1>",
        f"<p>{len(rows)} flagged pairs. Written answers are flagged at a Jaccard index of "
        f"{WRITTEN_THRESHOLD} of their {SHINGLE}-word shingles, code at {CODE_THRESHOLD}; "
        "the release's own text is removed first. A flag is a reason to read both "
        "submissions, not a finding.</p>",
        "<table border='1'><tr><th>students</th><th>part</th><th>similarity</th>"
        "<th>shared passages</th></tr>",
    ]
    for row in rows:
        lines.append(
            f"<tr><td>{e(row['student_a'])}<br>{e(row['student_b'])}</td>"
            f"<td>{e(row['part'])} ({e(row['kind'])})</td><td>{row['similarity']:.3f}</td>"
            f"<td><pre style='white-space:pre-wrap'>{e(row['evidence'])}</pre></td></tr>"
        )
    lines.append("</table><h2>Not compared</h2><ul>")
    for student, said in sorted(problems.items()):
        for problem in said:
            lines.append(f"<li>{e(student)}: {e(problem)}</li>")
    lines.append("</ul></body></html>")
    csv_path.with_suffix(".html").write_text("\n".join(lines), encoding="utf-8")


def report(root: Path, ps: str) -> tuple[list[dict], dict[str, list[str]]]:
    """Read the release and every submission of `ps` under `root`, compare, write the report."""
    release = json.loads((root / "assignments" / ps / f"{ps}.ipynb").read_text("utf-8"))
    kinds = tasks_of(release)
    folders = sorted(p for p in (root / "grading" / "submitted").glob(f"*/{ps}") if p.is_dir())
    submissions = [read_submission(folder, ps, kinds) for folder in folders]
    rows = compare(release, submissions)
    problems = {s.student: s.problems for s in submissions if s.problems}
    write_report(rows, problems, root / "grading" / "similarity" / f"{ps}.csv", ps)
    return rows, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("assignment", help="the problem set, e.g. ps3")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the course folder")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"ps[0-9]+", args.assignment):
        parser.error("expected a problem set such as ps3")
    start = time.perf_counter()
    rows, problems = report(args.root, args.assignment)
    out = args.root / "grading" / "similarity" / f"{args.assignment}.csv"
    print(
        f"{len(rows)} flagged pairs, {len(problems)} submissions not fully read, in "
        f"{time.perf_counter() - start:.1f} s: {out} and {out.with_suffix('.html')}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
