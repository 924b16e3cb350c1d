"""The grading round trip, as an instructor runs it: generate the release, collect submissions (the
solution, the blank release, plausible wrong answers, hostile and broken files), `make grade`'s
driver (nbgrader autograde in sandboxes, in parallel, feedback, CSV export), then check every score
and feedback, and that nothing outside the kernels' scratch changed and no kernel process survived.

Runs in a copy of the course in a temporary folder, so the repository's grading/ is untouched.
The hostile-submission suite (tests/ps1_hostile.py, tests/ps1_attacks.py) runs once here, for the
machinery every problem set shares; a smaller round trip runs as an ordinary (non-root) user.
"""

from __future__ import annotations

import os
import pwd
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from functools import partial
from html import unescape
from pathlib import Path

import nbformat
import pytest
import torch

import grading_helpers as helpers
import seqmodels
from grading_helpers import (
    BIN,
    ROOT,
    assert_release_in_sync,
    current_manifest,
    fingerprint,
    run,
    sandbox_processes,
)
from paste_submissions import (
    paste_answers,
)
from ps1_hostile import HOSTILE, Targets, build_all
from ps1_submissions import AUTOGRADED, MAX_SCORE, POINTS, SMOKE, WRONG, fill
from seqmodels.grading import leaks, references
from seqmodels.grading.capture import _encode
from seqmodels.grading.cluster import ALLOWED_FAILURES
from seqmodels.grading.compare import judge

PS = "ps1"
pytestmark = pytest.mark.grading
# every round trip here grades in the smoke profile: Part B's training task is not run (it earns 0,
# so the solution earns `SMOKE`); tests/test_grading_training.py grades it in the full profile
LIMITS = {**helpers.LIMITS, "SEQMODELS_GRADING_PROFILE": "smoke"}

LIBRARY = Path(seqmodels.__file__).resolve().parent
# the shared helpers (tests/grading_helpers.py), for PS1
new_course = partial(helpers.new_course, ps=PS)
submit = partial(helpers.submit, ps=PS)
release_and_answers = partial(helpers.release_and_answers, ps=PS)
read_csv = partial(helpers.read_csv, ps=PS)
feedback = partial(helpers.feedback, ps=PS)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    return new_course(tmp_path_factory.mktemp("course"))


@pytest.fixture(scope="module")
def graded(course: Path, tmp_path_factory):
    release, answers = release_and_answers(course)
    canary = tmp_path_factory.mktemp("outside") / "canary"
    targets = Targets(course=course, canary=canary, library=LIBRARY)
    files = {
        "solution": nbformat.writes(write_answers(fill(release, answers))).encode(),
        "blank": nbformat.writes(release).encode(),
        "paste": nbformat.writes(fill(release, paste_answers(PS))).encode(),
        **{
            f"wrong-{name}": nbformat.writes(fill(release, {**answers, cell: code})).encode()
            for name, (cell, code, _) in WRONG.items()
        },
        **build_all(release, answers, targets),
    }
    submit(course, files)
    protected = [course / "solutions", course / "nbgrader_config.py", course / "grading/submitted"]
    before = fingerprint(*protected, LIBRARY)
    before.pop(str(course / "grading/submitted/hostile-not-json/ps1/ps1.ipynb"))  # repaired
    before.pop(str(course / "grading/submitted/hostile-oversize/ps1/ps1.ipynb"))  # set aside
    peak_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = run(
        course, str(BIN / "python"), "-m", "seqmodels.grading.run", PS, "--jobs", "2", env=LIMITS
    )
    survivors = sandbox_processes()
    after = fingerprint(*protected, LIBRARY)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    rows = read_csv(course)
    scores = {student: float(row["score"]) for student, row in rows.items()}
    changed = sorted(k for k in before if after.get(k) != before[k])
    return {
        "course": course,
        "scores": scores,
        "rows": rows,
        "stdout": result.stdout,
        "students": sorted(files),
        "changed": changed,
        "canary": canary,
        "survivors": survivors,
        "peak_rss_mb": max(peak, peak_before) / 1024,
    }


def test_the_solution_earns_full_marks_and_the_blank_release_none(graded):
    assert graded["scores"]["solution"] == SMOKE
    assert graded["scores"]["blank"] == 0


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_plausible_wrong_answer_earns_partial_credit_with_pointed_feedback(graded, name):
    assert 0 < graded["scores"][f"wrong-{name}"] < SMOKE
    html = feedback(graded["course"], f"wrong-{name}")
    assert "FAIL" in html and any(
        kind in html
        for kind in ("outside the tolerance", "exact match required", "wrong shape", "raised")
    )


@pytest.mark.parametrize("student", sorted(HOSTILE))
def test_a_hostile_or_broken_submission_is_graded_right_and_the_run_goes_on(graded, student):
    _, expected, text = HOSTILE[student]
    assert graded["scores"][student] == pytest.approx(expected, abs=1e-3), student
    assert text in feedback(graded["course"], student)


def test_the_paste_submission_runs_whole(graded):
    """The shared check (grading_helpers.assert_paste_runs_whole); the library has nothing for Tasks 3
    and 5, and its training step calls torch's loss (held for review). Measured: 1.87 of 14 in
    the smoke profile, 2.37 (17 %) in the full one (paste_submissions.MEASURED)."""
    helpers.assert_paste_runs_whole(
        graded,
        PS,
        {t: m for t, m in POINTS.items() if t != "ffn_training"},
        nothing=("kn_discounts", "perplexity_and_bpc", "sgd_step"),
        review="test_sgd_step",
    )


def test_a_paste_of_the_library_earns_at_most_a_fifth_of_parts_a_and_b(graded):
    helpers.assert_paste_within_share(graded, PS)


def test_every_student_has_a_csv_row_and_feedback_and_the_sandbox_is_named(graded):
    assert sorted(graded["rows"]) == graded["students"]
    # the paste's training step calls torch's loss, as the library's does: held for review
    reviews = {"paste": "test_sgd_step"}
    for student, row in graded["rows"].items():
        assert row["sandbox"] == "bubblewrap", student
        assert row["review"] == reviews.get(student, ""), (student, row["review"])
        notes = {
            "hostile-oversize": "over the 20 MB limit",
            "hostile-not-json": "could not be read as a notebook (NotJSONError)",
        }
        if student in notes:
            assert notes[student] in row["note"], row["note"]
            continue
        assert row["note"] == "", (student, row["note"])
        folder = graded["course"] / "grading" / "feedback" / student / PS
        assert sorted(p.name for p in folder.iterdir()) == [f"{PS}.html"], student
    assert "sandbox: bubblewrap" in graded["stdout"]


def test_nothing_outside_the_kernels_scratch_changed(graded):
    assert graded["changed"] == []
    assert not graded["canary"].exists()
    assert not (graded["course"] / "grading" / "PWNED").exists()


def test_no_process_of_any_kernel_survives_the_run(graded):
    assert graded["survivors"] == []


def test_huge_outputs_do_not_swell_the_grader(graded):
    """Every process of the run (workers, nbgrader, kernels) stayed far below the 100 MB outputs x N."""
    assert graded["peak_rss_mb"] < 2000, graded["peak_rss_mb"]


def test_feedback_shows_no_output_of_the_students_code(graded):
    html = feedback(graded["course"], "hostile-100mb-printed")
    assert "xxxxxxxxxx" not in html
    html = feedback(graded["course"], "hostile-reaches-out")
    assert "reached: [" not in html  # what it printed (its source, shown, has no bracket there)


def test_feedback_never_shows_hidden_tests_or_reference_values(graded):
    course = graded["course"]
    source = nbformat.read(course / "solutions" / PS / f"{PS}.ipynb", as_version=4)
    hidden = []
    for cell in source.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            block = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            hidden += [line.strip() for line in block.splitlines() if len(line.strip()) > 12]
    assert hidden
    for html_file in (course / "grading" / "feedback").rglob("*.html"):
        html = html_file.read_text()
        assert "BEGIN HIDDEN TESTS" not in html and "BEGIN SOLUTION" not in html
        leaked = [line for line in hidden if line in html]
        assert leaked == [], (html_file, leaked)


#: part C's written answers, as the "solution" student writes them (graded by hand, so not scored)
WRITTEN = {
    "c1_mle_derivation": "With the Lagrangian $\\mathcal{L} = \\sum_w C_w \\ln p_w - \\lambda(\\sum_w p_w - 1)$, "
    "$C_w / p_w = \\lambda$, and summing gives $\\lambda = c(h)$. Concave, so a maximum.",
    "c2_perplexity_bounds": "Each term is $-\\ln V$, so the perplexity is $V$. Add-k never gives 0; "
    "maximum likelihood gives an unseen bigram 0, and $\\ln 0 = -\\infty$.",
    "c3_kn_normalisation": "Seen tokens keep $c - D(c) \\ge 0$, so the kept mass is "
    "$1 - \\gamma(h)$ and the row sums to $1 - \\gamma + \\gamma = 1$. Hosts follows few contexts.",
    "d_discount_analysis": "One discount D = 0.6 is best (42.22); add-k needs a tiny k because "
    "its k(V - 1) pseudo-counts swamp rare contexts.",
}
WRITTEN_POINTS = {
    "c1_mle_derivation": 1,
    "c2_perplexity_bounds": 1,
    "c3_kn_normalisation": 1,
    "d_discount_analysis": 3,
}


def write_answers(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """`nb` with part C's written answers (`WRITTEN`) in its Markdown answer cells."""
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "markdown" and grade_id in WRITTEN:
            cell.source = WRITTEN[grade_id]
    return nb


def mark_scheme(cell: dict) -> list[str]:
    """The plain-text runs (no math, no Markdown marks) of the lines of a cell's mark-scheme region
    (model answer and rubric), of at least 20 characters: what would show of them on a page,
    however it was rendered."""
    runs = []
    for line, kind in leaks.cell_lines(cell):
        if kind == "mark scheme":
            text = re.sub(r"\$[^$]*\$", "\n", line).replace("*", "").replace("—", "\n")
            runs += [r.strip(" -.,;:()") for r in text.splitlines() if len(r.strip()) >= 20]
    return runs


def page_text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]*>", " ", html)).split())


def test_part_c_reaches_formgrader_with_its_model_answers_and_rubric(graded):
    """The written answers are manually graded cells of the gradebook, waiting for a grader; the
    autograded notebook (what formgrader shows) holds each answer under its question, and the
    question with its model answer and rubric (nbgrader restores the mark-scheme region)."""
    from nbgrader.api import Gradebook

    course = graded["course"]
    source = nbformat.read(course / "solutions" / PS / f"{PS}.ipynb", as_version=4)
    questions = {
        c.metadata.nbgrader["grade_id"]: c for c in source.cells if "MARK SCHEME" in c.source
    }
    assert sorted(questions) == ["c1_question", "c2_question", "c3_question", "d_question"]
    for student in ("solution", "blank"):
        path = course / "grading" / "autograded" / student / PS / f"{PS}.ipynb"
        cells = {
            c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nbformat.read(path, 4).cells
        }
        for grade_id, question in questions.items():
            shown = " ".join(cells[grade_id].source.replace("*", "").split())
            assert "=== BEGIN MARK SCHEME ===" in shown, (student, grade_id)
            runs = mark_scheme(question)
            assert len(runs) >= 8 and all(" ".join(r.split()) in shown for r in runs)
        for grade_id in WRITTEN:
            meta = cells[grade_id].metadata.nbgrader
            assert meta["solution"] and meta["grade"] and meta["points"] == WRITTEN_POINTS[grade_id]
    answer = " ".join(cells_of(course, "solution")["c1_mle_derivation"].source.split())
    assert "summing gives" in answer
    with Gradebook(f"sqlite:///{course / 'grading' / 'gradebook.db'}") as gradebook:
        assert gradebook.find_assignment(PS).max_score == MAX_SCORE
        manual = {
            c.name: c.max_score
            for c in gradebook.find_notebook(PS, PS).grade_cells
            if c.cell_type == "markdown"
        }
        assert manual == WRITTEN_POINTS
        for grade_id in WRITTEN:
            written = gradebook.find_grade(grade_id, PS, PS, "solution")
            assert written.needs_manual_grade and written.auto_score is None
            left = gradebook.find_grade(grade_id, PS, PS, "blank")  # nbgrader: unchanged is 0
            assert not left.needs_manual_grade and left.auto_score == 0
    rows = graded["rows"]
    assert (rows["solution"]["autograded"], rows["solution"]["manual"]) == (str(SMOKE), "0")
    assert rows["solution"]["manual_status"] == "not graded yet"
    assert rows["solution"]["review"] == ""  # the review column is for held test cells
    assert rows["blank"]["manual_status"] == "graded"  # nothing written: 0, nobody to read it


def cells_of(course: Path, student: str) -> dict:
    path = course / "grading" / "autograded" / student / PS / f"{PS}.ipynb"
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nbformat.read(path, 4).cells}


def test_no_feedback_page_or_release_holds_a_model_answer_or_rubric(graded):
    """FeedbackForStudents removes the mark-scheme regions nbgrader restored; the release never had
    them. The same search finds them on a page rendered without that step (the control)."""
    from nbconvert import HTMLExporter

    from seqmodels.grading.preprocessors import strip_mark_scheme

    course = graded["course"]
    source = nbformat.read(course / "solutions" / PS / f"{PS}.ipynb", as_version=4)
    runs = {" ".join(r.split()) for cell in source.cells for r in mark_scheme(cell)}
    assert len(runs) >= 16

    def leaked(html: str) -> list[str]:
        text = page_text(html)
        return [r for r in runs if r in text] + (["MARK SCHEME"] if "MARK SCHEME" in text else [])

    restored = nbformat.read(
        course / "grading" / "autograded" / "solution" / PS / f"{PS}.ipynb", as_version=4
    )
    control, _ = HTMLExporter(template_name="classic").from_notebook_node(restored)
    assert set(leaked(control)) == runs | {"MARK SCHEME"}  # it sees a rubric on a rendered page
    pages = sorted((course / "grading" / "feedback").rglob("*.html"))
    assert len(pages) >= len(graded["students"]) - 1
    for page in pages:
        assert leaked(page.read_text()) == [], page
    release = (ROOT / "assignments" / PS / f"{PS}.ipynb").read_text()
    assert "MARK SCHEME" not in release and not [r for r in runs if r in " ".join(release.split())]
    assert (
        strip_mark_scheme("a\n=== BEGIN MARK SCHEME ===\nb\n=== END MARK SCHEME ===\nc") == "a\nc"
    )
    assert strip_mark_scheme("a\n=== BEGIN MARK SCHEME ===\nb") == "a"  # unended: all of it


def test_a_kernel_posing_as_the_grader_earns_nothing_and_reaches_no_page(graded):
    helpers.assert_forged_output_earns_nothing(graded, PS)


def test_no_markup_a_student_wrote_is_rendered_in_the_pages_others_open(graded):
    """Markdown, raw-HTML and SVG attachments of the student's own cells, and markup in cell
    metadata, reach the feedback and the graded notebook as text only."""
    student = "hostile-markup-in-its-own-cells"
    autograded = nbformat.read(
        graded["course"] / "grading" / "autograded" / student / PS / f"{PS}.ipynb", as_version=4
    )
    assert all("attachments" not in cell for cell in autograded.cells)
    assert all(set(cell.metadata) <= {"nbgrader"} for cell in autograded.cells)
    html = feedback(graded["course"], student)
    for markup in ("<script>alert(3)", "<img src=x onerror", "<script>alert(5)", "<svg"):
        assert markup not in html, markup
    assert "&lt;script&gt;alert(3)" in html  # shown as text


def test_an_oversize_submission_is_set_aside_whole_and_graded_as_blank(graded):
    kept = graded["course"] / "grading" / "oversize" / PS / "hostile-oversize" / f"{PS}.ipynb"
    assert kept.stat().st_size > 20 * 2**20  # nothing is lost
    assert "over the 20 MB limit" in feedback(graded["course"], "hostile-oversize")


def test_a_second_run_resumes_without_regrading(graded):
    result = run(graded["course"], str(BIN / "python"), "-m", "seqmodels.grading.run", PS)
    assert (
        "0 graded," in result.stdout and f"{len(graded['students'])} already done" in result.stdout
    )


def test_a_changed_submission_is_graded_again_and_a_manual_score_is_kept(graded):
    """The instructor scores a task of `blank` by hand; the student then resubmits the solution:
    the next run grades that student alone, and the manual score stays (the driver's writes keep
    it, as nbgrader's own autograde does)."""
    from nbgrader.api import Gradebook

    course = graded["course"]
    url = f"sqlite:///{course / 'grading' / 'gradebook.db'}"
    with Gradebook(url) as gradebook:
        cell = "test_bigram_counts"
        grade = gradebook.find_grade(cell, PS, PS, "blank")
        grade.manual_score = 0.5
        gradebook.db.commit()
    release, answers = release_and_answers(course)
    path = course / "grading" / "submitted" / "blank" / PS / f"{PS}.ipynb"
    path.write_text(nbformat.writes(fill(release, answers)))
    result = run(course, str(BIN / "python"), "-m", "seqmodels.grading.run", PS)
    assert "1 graded," in result.stdout, result.stdout
    assert f"{len(graded['students']) - 1} already done" in result.stdout
    with Gradebook(url) as gradebook:
        grade = gradebook.find_grade(cell, PS, PS, "blank")
        assert grade.manual_score == 0.5 and grade.auto_score == grade.max_score
        assert grade.needs_manual_grade  # the instructor's score stands until they look again
        assert gradebook.find_submission(PS, "solution").score == SMOKE  # untouched


def test_the_release_is_in_sync_and_holds_no_solutions_hidden_tests_or_references(course):
    assert_release_in_sync(course, PS)


def test_stored_references_belong_to_the_current_solution():
    current_manifest(PS, points=AUTOGRADED)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_the_solution_matches_the_cpu_references_on_every_device(device):
    """References are computed on the CPU; a CUDA run of the solution must pass the same policy."""
    tensors, manifest = references.build(ROOT / "solutions" / PS / f"{PS}.ipynb", device=device)
    refs, _ = references.load(ROOT / "solutions" / PS / "references", PS)
    for task, entry in manifest["tasks"].items():
        for index, case in enumerate(entry["cases"]):
            prefix = f"{task}{references.SEP}{index}{references.SEP}"
            actual = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            record = {"data": _encode(actual)}
            verdict = judge(case, record, refs[task][case])
            assert verdict.passed, (device, task, verdict.message)


# ------------------------------------------------------------------------------ the grader itself
def _slow(release, answers, seconds: int) -> bytes:
    return nbformat.writes(
        fill(
            release,
            {
                **answers,
                "bigram_counts": f"import time\ntime.sleep({seconds})\n" + answers["bigram_counts"],
            },
        )
    ).encode()


def _worker_grading(student: str) -> int | None:
    """The pid of the grading worker that is, right now, the parent of a sandbox grading
    `student` (checked on the worker's own children, so a sandbox whose worker already died and
    was reparented is never mistaken for a live worker's)."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "multiprocessing" not in " ".join(proc.info["cmdline"] or []):
                continue  # not a Dask worker process (forked by multiprocessing's forkserver)
            for child in proc.children():
                args = " ".join(child.cmdline())
                if child.name() == "bwrap" and f"/{student}/" in args and child.is_running():
                    return proc.pid
        except psutil.Error:
            continue
    return None


def test_killed_workers_hangs_and_a_worker_killing_submission(tmp_path):
    """On a LocalCluster of two worker processes: kill the worker grading one student once (it is
    graded again elsewhere), kill every worker that grades another (it is given up after the
    cluster's allowed failures, and recorded), and let a third exceed the student timeout. Everyone
    else is graded, and every student's grade is written exactly once."""
    course = new_course(tmp_path / "course")
    release, answers = release_and_answers(course)
    solution = nbformat.writes(fill(release, answers)).encode()
    submit(
        course,
        {
            "a-solution": solution,
            "b-worker-killed": _slow(release, answers, 20),
            "c-worker-hangs": _slow(release, answers, 120),
            "d-solution": solution,
            "e-kills-every-worker": _slow(release, answers, 30),
        },
    )
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        **LIMITS,
        "SEQMODELS_CELL_TIMEOUT": "200",
        "SEQMODELS_NOTEBOOK_BUDGET": "250",
    }
    cmd = [
        str(BIN / "python"),
        "-m",
        "seqmodels.grading.run",
        PS,
        "--jobs",
        "2",
        "--student-timeout",
        "45",
    ]
    process = subprocess.Popen(cmd, cwd=course, env=env, stdout=subprocess.PIPE, text=True)
    killed: dict[str, list[int]] = {"b-worker-killed": [], "e-kills-every-worker": []}
    deadline = time.monotonic() + 400
    while process.poll() is None and time.monotonic() < deadline:
        for student, pids in killed.items():
            if student.startswith("b") and pids:
                continue  # once
            worker = _worker_grading(student)
            if worker is not None and worker not in pids:
                os.kill(worker, signal.SIGKILL)  # mid-grading: its sandbox is running
                pids.append(worker)
        time.sleep(0.3)
    stdout, _ = process.communicate(timeout=600)
    assert process.returncode == 0, stdout
    assert len(killed["b-worker-killed"]) == 1
    # given up after the driver's allowed failures: every death was this loop's kill
    assert len(killed["e-kills-every-worker"]) == ALLOWED_FAILURES + 1
    rows = read_csv(course)
    for student in ("a-solution", "b-worker-killed", "d-solution"):
        assert float(rows[student]["score"]) == SMOKE, (student, rows[student])
    assert "did not finish within 45 s" in rows["c-worker-hangs"]["note"]
    assert "stopped its grading worker each time" in rows["e-kills-every-worker"]["note"]
    for student in ("c-worker-hangs", "e-kills-every-worker"):
        assert float(rows[student]["score"]) == 0
        assert "could not be graded automatically" in feedback(course, student)
    # the driver wrote each student once: one log entry and one gradebook submission each
    log = (course / "grading" / "autograde.log").read_text()
    for student in rows:
        assert log.count(f"== {PS} {student}: ") == 1, student
    for student in ("a-solution", "d-solution"):  # and its worker's log lines once each
        assert log.count(f"Creating/updating student with ID '{student}'") == 1, student
    assert sandbox_processes() == []
    again = run(course, *cmd[:-2])  # a resumed run does not block on them
    assert "0 graded," in again.stdout


def test_grading_refuses_without_the_sandbox_unless_told_it_is_unsafe(tmp_path):
    course = new_course(tmp_path / "course")
    release, answers = release_and_answers(course)
    submit(course, {"solution": nbformat.writes(fill(release, answers)).encode()})
    cmd = [str(BIN / "python"), "-m", "seqmodels.grading.run", PS]
    no_bwrap = {**LIMITS, "SEQMODELS_BWRAP": "/nonexistent/bwrap"}
    refused = run(course, *cmd, env=no_bwrap, check=False)
    assert refused.returncode == 2
    assert (
        "apt-get install bubblewrap" in refused.stdout and "--unsafe-no-sandbox" in refused.stdout
    )
    assert not (course / "grading" / "grades.csv").exists()
    unsafe = run(course, *cmd, "--unsafe-no-sandbox", env=no_bwrap)
    assert "WARNING: grading WITHOUT a sandbox" in unsafe.stdout
    row = read_csv(course)["solution"]
    assert float(row["score"]) == SMOKE and row["sandbox"].startswith("NONE (unsafe")


def test_tampered_references_stop_grading_with_a_clear_error(tmp_path):
    course = new_course(tmp_path / "course")
    release, answers = release_and_answers(course)
    submit(course, {"solution": nbformat.writes(fill(release, answers)).encode()})
    stored = course / "solutions" / PS / "references" / f"{PS}.safetensors"
    data = bytearray(stored.read_bytes())
    data[-1] ^= 1
    stored.write_bytes(bytes(data))
    result = run(course, str(BIN / "python"), "-m", "seqmodels.grading.run", PS, check=False)
    assert result.returncode == 2 and "does not match its manifest" in result.stdout


NONROOT_CASES = [
    "hostile-reads-references",
    "hostile-writes-grades-and-grader-files",
    "hostile-daemon-outlives-the-kernel",
    "hostile-stops-the-grader",
]


def test_the_round_trip_as_an_ordinary_user(tmp_path_factory):
    """The same grading, started by a non-root user: bwrap then makes a user namespace itself."""
    if os.geteuid() != 0:
        pytest.skip("not root: the round trips above already ran as an ordinary user")
    user = os.environ.get("SEQMODELS_TEST_USER", "seqgrader")
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        if os.environ.get("SEQMODELS_REQUIRE_NONROOT"):
            pytest.fail(f"no user {user!r} to grade as (.ci/run creates it)")
        pytest.skip(f"no user {user!r} (useradd {user}, or set SEQMODELS_TEST_USER)")
    python = str(BIN / "python")
    probe = subprocess.run(["runuser", "-u", user, "--", python, "-c", "import seqmodels"])
    assert probe.returncode == 0, f"{user} cannot run {python}: make its folders traversable"
    base = Path(tempfile.mkdtemp(prefix="seqmodels-nonroot-"))
    course = new_course(base / "course")
    release, answers = release_and_answers(course)
    canary = base / "canary"
    targets = Targets(course=course, canary=canary, library=LIBRARY)
    hostile = build_all(release, answers, targets)
    submit(
        course,
        {
            "solution": nbformat.writes(fill(release, answers)).encode(),
            "blank": nbformat.writes(release).encode(),
            **{name: hostile[name] for name in NONROOT_CASES},
        },
    )
    (base / "home").mkdir()
    subprocess.run(["chown", "-R", f"{account.pw_uid}:{account.pw_gid}", str(base)], check=True)
    before = fingerprint(course / "solutions", course / "nbgrader_config.py", LIBRARY)
    env = {**LIMITS, "HOME": str(base / "home"), "USER": user}
    command = [python, "-m", "seqmodels.grading.run", PS, "--jobs", "2"]
    result = run(course, "runuser", "-u", user, "--", *command, env=env)
    assert "sandbox: bubblewrap" in result.stdout
    rows = read_csv(course)
    expected = {"solution": SMOKE, "blank": 0, **{n: HOSTILE[n][1] for n in NONROOT_CASES}}
    assert {s: float(r["score"]) for s, r in rows.items()} == pytest.approx(expected)
    assert fingerprint(course / "solutions", course / "nbgrader_config.py", LIBRARY) == before
    assert not canary.exists()
    assert sandbox_processes() == []
    shutil.rmtree(base, ignore_errors=True)


def test_a_symbolic_link_in_a_submission_is_not_followed(tmp_path):
    """A submitted link to the references would be copied, dereferenced, next to the notebook."""
    course = new_course(tmp_path / "course")
    release, answers = release_and_answers(course)
    leak = (
        "import os\n\n\ndef bigram_counts(sentences, vocab_size):\n"
        "    if os.path.getsize('leak.safetensors') < 100:\n"
        "        raise RuntimeError('nothing leaked')\n"
        + "\n".join("    " + line for line in answers["bigram_counts"].splitlines()[1:])
    )
    submit(
        course,
        {"symlink": nbformat.writes(fill(release, {**answers, "bigram_counts": leak})).encode()},
    )
    folder = course / "grading" / "submitted" / "symlink" / PS
    (folder / "leak.safetensors").symlink_to(
        course / "solutions" / PS / "references" / f"{PS}.safetensors"
    )
    result = run(course, str(BIN / "python"), "-m", "seqmodels.grading.run", PS, env=LIMITS)
    assert "removed the symbolic link leak.safetensors" in result.stdout
    # task 1 earns nothing
    assert float(read_csv(course)["symlink"]["score"]) == SMOKE - POINTS["bigram_counts"]
