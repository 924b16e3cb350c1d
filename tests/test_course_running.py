"""Running a course: the similarity report across submissions (`seqmodels.grading.similarity`).

In-process, on copies of Problem Set 1's release and Problem Set 6's file names: nothing is
graded and no kernel starts. The written answers are stretches of the KJV, which repeats its
phrases ("and it came to pass"), so independent answers share some shingles, as real ones do.
"""

from __future__ import annotations

import copy
import json
import random
import struct
import time
from itertools import combinations
from pathlib import Path

import pytest

from seqmodels.data import kjv_sentences
from seqmodels.grading import similarity

ROOT = Path(__file__).resolve().parents[1]
RELEASE = json.loads((ROOT / "assignments/ps1/ps1.ipynb").read_text(encoding="utf-8"))
WRITTEN = [g for g, k in similarity.tasks_of(RELEASE).items() if k == "written"]
CODE = [g for g, k in similarity.tasks_of(RELEASE).items() if k == "code"]
SENTENCES = kjv_sentences("train")


#: disjoint stretches of 12 verses: no two answers quote the same verse
BLOCKS = list(range(0, len(SENTENCES) - 12, 12))


def passage(rng: random.Random, words: int = 200) -> str:
    """About `words` words of consecutive KJV verses, from a stretch no other answer uses."""
    start = BLOCKS.pop(rng.randrange(len(BLOCKS)))
    out: list[str] = []
    for sentence in SENTENCES[start : start + 12]:
        out.extend(sentence)
        if len(out) >= words:
            break
    return " ".join(out)


def light_edit(text: str, rng: random.Random) -> str:
    """A copy disguised lightly: one word in ten replaced, a few words dropped."""
    words = text.split()
    words = [
        rng.choice(["thus", "verily", "so"]) if i % 10 == 3 else w for i, w in enumerate(words)
    ]
    del words[40:46]
    return " ".join(words)


def notebook(answers: dict[str, str]) -> dict:
    """The release with these answers written into its cells."""
    nb = copy.deepcopy(RELEASE)
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = answers[grade_id]
    return nb


def submit(root: Path, student: str, nb: dict | bytes, ps: str = "ps1", **files: bytes):
    folder = root / "grading/submitted" / student / ps
    folder.mkdir(parents=True)
    data = nb if isinstance(nb, bytes) else json.dumps(nb).encode()
    (folder / f"{ps}.ipynb").write_bytes(data)
    for name, blob in files.items():
        (folder / name).write_bytes(blob)


def course(tmp_path: Path) -> Path:
    (tmp_path / "assignments/ps1").mkdir(parents=True)
    (tmp_path / "assignments/ps1/ps1.ipynb").write_text(json.dumps(RELEASE), encoding="utf-8")
    return tmp_path


def independent(rng: random.Random) -> dict[str, str]:
    return {g: passage(rng) for g in WRITTEN}


def pairs(rows: list[dict]) -> set[tuple[str, str, str]]:
    return {(r["student_a"], r["student_b"], r["part"]) for r in rows}


def test_copies_flagged_independent_answers_and_the_prompt_not(tmp_path):
    root, rng = course(tmp_path), random.Random(0)
    original = independent(rng)
    submit(root, "ada", notebook(original))
    submit(root, "bob", notebook({g: light_edit(t, rng) for g, t in original.items()}))
    # carol and dan answer on their own, each quoting the whole question (the released text)
    question = next(
        similarity.cell_text(c)
        for c in RELEASE["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade_id") == "d_question"
    )
    for student in ("carol", "dan"):
        answers = independent(rng)
        answers["d_discount_analysis"] = question + "\n\n" + answers["d_discount_analysis"]
        submit(root, student, notebook(answers))
    rows, problems = similarity.report(root, "ps1")
    assert problems == {}
    assert pairs(rows) == {("ada", "bob", g) for g in WRITTEN}
    assert all(r["similarity"] >= similarity.WRITTEN_THRESHOLD for r in rows)
    assert all(len(r["evidence"].split()) >= 20 for r in rows)  # the shared passages are shown
    # without removing the release's text, the quoted question alone would make them alike
    unstripped = similarity.shingles(similarity.words(question))
    assert len(unstripped) > 2 * similarity.MIN_SHINGLES
    csv_text = (root / "grading/similarity/ps1.csv").read_text(encoding="utf-8")
    assert csv_text.splitlines()[0] == "student_a,student_b,part,kind,similarity,evidence"
    assert len(csv_text.splitlines()) == len(WRITTEN) + 1


def test_copied_code_and_checkpoints_are_flagged(tmp_path):
    root, rng = course(tmp_path), random.Random(1)
    code = "\n".join(
        f"def step_{i}(params, lr):\n    total = params['w'] * {i} + lr\n    return total - {i}"
        for i in range(12)
    )
    renamed = "# my own work\n" + code.replace("total", "total")  # comments added only
    tensors = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)

    def checkpoint(meta: str) -> bytes:
        header = {
            "__metadata__": {"by": meta},
            "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
        }
        raw = json.dumps(header).encode()
        return struct.pack("<Q", len(raw)) + raw + tensors

    submit(root, "ada", notebook({"sgd_step": code, **independent(rng)}))
    submit(root, "bob", notebook({"sgd_step": renamed, **independent(rng)}))
    submit(root, "eve", notebook(independent(rng)), **{"capstone.safetensors": checkpoint("eve")})
    submit(root, "fay", notebook(independent(rng)), **{"capstone.safetensors": checkpoint("eve")})
    submit(root, "gus", notebook(independent(rng)), **{"capstone.safetensors": checkpoint("gus")})
    rows, _ = similarity.report(root, "ps1")
    found = {(r["student_a"], r["student_b"], r["part"]): r for r in rows}
    assert ("ada", "bob", "sgd_step") in found
    assert found["eve", "fay", "capstone.safetensors"]["evidence"].startswith("identical file")
    assert found["eve", "gus", "capstone.safetensors"]["evidence"].startswith("identical tensors")
    assert found["fay", "gus", "capstone.safetensors"]["evidence"].startswith("identical tensors")
    assert len(rows) == 4


def test_hostile_submissions_are_reported_not_read(tmp_path, monkeypatch):
    root, rng = course(tmp_path), random.Random(2)
    text = passage(rng)
    submit(root, "ada", notebook({"c1_mle_derivation": text}))
    submit(root, "bob", notebook({"c1_mle_derivation": text}))
    submit(root, "=cmd", notebook({"c1_mle_derivation": text}))  # a formula in a spreadsheet
    submit(root, "<script>x", notebook({"c1_mle_derivation": text}))  # a folder name
    submit(root, "broken", b"{not json")
    submit(root, "nocells", json.dumps({"cells": "x"}).encode())
    cap = len(json.dumps(notebook({"c1_mle_derivation": text}))) + 1000
    submit(root, "huge", b" " * cap + json.dumps(notebook({})).encode())
    (root / "grading/submitted/linked/ps1").mkdir(parents=True)
    (root / "grading/submitted/linked/ps1/ps1.ipynb").symlink_to("/etc/passwd")
    monkeypatch.setattr(similarity, "NOTEBOOK_BYTES", cap)
    rows, problems = similarity.report(root, "ps1")
    assert set(problems) == {"broken", "nocells", "huge", "linked"}
    assert "not a notebook" in problems["broken"][0]
    assert "larger than" in problems["huge"][0]
    assert "not a regular file" in problems["linked"][0]
    flagged = {(r["student_a"], r["student_b"]) for r in rows}
    assert flagged == set(combinations(sorted(["<script>x", "=cmd", "ada", "bob"]), 2))
    page = (root / "grading/similarity/ps1.html").read_text(encoding="utf-8")
    assert "<script>" not in page and "&lt;script&gt;x" in page
    csv_text = (root / "grading/similarity/ps1.csv").read_text(encoding="utf-8")
    assert "'=cmd" in csv_text and "\n=cmd" not in csv_text


@pytest.mark.parametrize("students", [300])
def test_a_class_of_300_in_seconds(tmp_path, students):
    """300 students (44,850 pairs per part): ten pairs of light copies among 280 independent."""
    root, rng = course(tmp_path), random.Random(3)
    for k in range(students - 20):
        submit(root, f"s{k:03d}", notebook(independent(rng)))
    for k in range(10):
        original = independent(rng)
        submit(root, f"c{k:02d}a", notebook(original))
        submit(root, f"c{k:02d}b", notebook({g: light_edit(t, rng) for g, t in original.items()}))
    start = time.perf_counter()
    rows, _ = similarity.report(root, "ps1")
    seconds = time.perf_counter() - start
    copies = {(f"c{k:02d}a", f"c{k:02d}b", g) for k in range(10) for g in WRITTEN}
    assert copies <= pairs(rows)
    # the KJV retells some stories word for word (Achsah's field: Joshua 15 and Judges 1), so
    # two "independent" answers can quote one text; such a pair is flagged, with the passage
    others = [r for r in rows if (r["student_a"], r["student_b"], r["part"]) not in copies]
    assert len(others) <= 2
    assert all(len(r["evidence"].split()) >= 15 for r in others)
    print(f"\n{students} submissions, {len(rows)} flagged rows, report in {seconds:.2f} s")


def test_the_guide_page_names_tests_that_exist_and_keeps_the_books_rules():
    """book/instructor/guide/running.md points each step at its tests: each file and test it
    names exists; its numbers are declared and its prose within the page budget."""
    import re
    import sys

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from claims import MAX_PAGE_WORDS, prose_words, stray_numbers

    source = (ROOT / "book/instructor/guide/running.md").read_text(encoding="utf-8")
    assert stray_numbers(source) == []
    assert prose_words(source) <= MAX_PAGE_WORDS
    named = re.findall(r"tests/(test_[\w*]+\.py)(?:::(\w+))?", source)
    assert len(named) >= 20
    for file, test in named:
        paths = sorted((ROOT / "tests").glob(file))
        assert paths, file
        if test:
            assert any(f"def {test}(" in p.read_text(encoding="utf-8") for p in paths), test
    for command in re.findall(r"python -m (seqmodels\.grading\.\w+)", source):
        assert (ROOT / "lib" / (command.replace(".", "/") + ".py")).is_file(), command


def test_the_running_modules_are_the_instructors_only():
    from seqmodels.grading import release

    for name in ("similarity", "policies", "errata"):
        assert not release.allowed(f"lib/seqmodels/grading/{name}.py"), name
