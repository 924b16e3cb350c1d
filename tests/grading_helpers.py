"""Helpers shared by the grading round trips (tests/test_grading.py for PS1, test_grading_psN.py).

Each works on a copy of the course in a temporary folder, for the problem set `ps` it is given:
generate its release, submit notebooks, run `make grade`'s driver, read the CSV and the feedback.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from html import unescape
from pathlib import Path

import nbformat
import pytest
import torch

from ps1_submissions import solution_answers

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

LIMITS = {
    "SEQMODELS_CELL_TIMEOUT": "10",
    "SEQMODELS_NOTEBOOK_BUDGET": "120",
    "SEQMODELS_MEMORY_LIMIT_MB": "3072",
}


def run(
    root: Path, *args: str, env: dict | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        args,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=1800,
        # nbgrader calls `alembic` by name: the virtual environment's bin must be on PATH
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **(env or {})},
    )
    if check:
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result


def fingerprint(*roots: Path) -> dict[str, str]:
    """SHA-256 of every file under `roots` (what no kernel may change)."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots
        for p in ([root] if root.is_file() else sorted(root.rglob("*")))
        if p.is_file() and "__pycache__" not in p.parts
    }


def sandbox_processes(wait: float = 5.0) -> list[str]:
    """Processes of the sandbox's uid, or bubblewrap processes, still there after up to `wait`
    seconds (a sandbox's processes are killed together; reaping them takes a moment)."""
    deadline = time.monotonic() + wait
    while True:
        out = subprocess.run(
            ["ps", "-eo", "uid=,pid=,stat=,comm="], capture_output=True, text=True
        ).stdout
        left = [
            line
            for line in out.splitlines()
            if line.split()[0] == "65534" or line.split()[-1] == "bwrap"
        ]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def new_course(root: Path, ps: str) -> Path:
    """A copy of the course (config and sources) in `root`, with the release of `ps` generated."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "solutions", root / "solutions")
    run(root, str(BIN / "nbgrader"), "generate_assignment", ps, "--force", "--log-level=WARN")
    return root


def submit(course: Path, files: dict[str, bytes], ps: str) -> None:
    """Each student's notebook, with the files a set's solution submits beside it (Problem Set 6's
    checkpoint, `seqmodels.grading.references.SUBMISSION_FILES`), as students submit them."""
    beside = ROOT / "solutions" / ps / "references" / "submission"
    for student, data in files.items():
        folder = course / "grading" / "submitted" / student / ps
        folder.mkdir(parents=True)
        (folder / f"{ps}.ipynb").write_bytes(data)
        for path in sorted(beside.glob("*")) if beside.is_dir() else []:
            shutil.copyfile(path, folder / path.name)


def release_and_answers(course: Path, ps: str):
    source = nbformat.read(course / "solutions" / ps / f"{ps}.ipynb", as_version=4)
    release = nbformat.read(course / "assignments" / ps / f"{ps}.ipynb", as_version=4)
    return release, solution_answers(source)


def read_csv(course: Path, ps: str) -> dict[str, dict]:
    with open(course / "grading" / "grades.csv") as f:
        return {row["student_id"]: row for row in csv.DictReader(f) if row["assignment"] == ps}


def feedback(course: Path, student: str, ps: str) -> str:
    return (course / "grading" / "feedback" / student / ps / f"{ps}.html").read_text()


def assert_release_in_sync(course: Path, ps: str) -> None:
    """assignments/<ps> equals the release `course` generated, and holds no solutions, hidden tests,
    mark schemes (model answers and rubrics of written answers) or reference outputs."""
    shipped = ROOT / "assignments" / ps
    generated = course / "assignments" / ps
    assert sorted(p.name for p in shipped.iterdir()) == sorted(p.name for p in generated.iterdir())
    assert (shipped / f"{ps}.ipynb").read_bytes() == (generated / f"{ps}.ipynb").read_bytes(), (
        f"assignments/{ps} is out of date: run `make assignments`"
    )
    text = (shipped / f"{ps}.ipynb").read_text()
    for secret in ("BEGIN SOLUTION", "HIDDEN TESTS", "MARK SCHEME", "references"):
        assert secret not in text
    assert not any(p.suffix in {".safetensors", ".json"} for p in shipped.rglob("*"))


def solution_functions(source_path: Path) -> dict:
    """The solution's graded functions, defined from the source notebook's answer cells."""
    import math

    namespace = {"torch": torch, "math": math}
    for code in solution_answers(nbformat.read(source_path, as_version=4)).values():
        exec(compile(code, str(source_path), "exec"), namespace)  # noqa: S102 - our own solution
    return namespace


def current_manifest(ps: str, points: float = 10) -> dict:
    """The stored references' manifest of `ps`, checked to belong to the current solution and to
    hold `points` autograded points."""
    from seqmodels.grading import references

    source = nbformat.read(ROOT / "solutions" / ps / f"{ps}.ipynb", as_version=4)
    _, manifest = references.load(ROOT / "solutions" / ps / "references", ps)
    assert manifest["solution_sha256"] == references.source_hash(source), (
        "the solution changed since its references were stored: run `make assignments`"
    )
    assert sum(t["points"] for t in manifest["tasks"].values()) == points
    return manifest


# ------------------------------------------------ one round trip of a problem set's submissions


#: what a kernel can emit to pose as the grader: a hook runs before every cell (test cells too) and
#: emits a "full marks" execute_result, a verdict-like HTML table with a script, and the test
#: cell's source, all carrying the metadata the grader once marked its own outputs with
FORGED_GRADER_OUTPUT = r"""
from IPython import get_ipython
from IPython.display import HTML, display

_shell = get_ipython()
_mark = "FORGED" + "-OUTPUT"  # built here, so only an output can hold these texts
_script = "<scr" + "ipt>alert(1)</scr" + "ipt>"
_img = "<im" + "g src=x onerror=alert(2)>"


def _forge(info):
    marks = {"seqmodels_grader": True, "seqmodels_audience": "everyone"}
    _shell.display_pub.publish(
        {"text/plain": _mark + " 10.0", "text/html": "<b>" + _mark + "</b>" + _script},
        metadata=marks,
    )
    kernel = _shell.kernel  # an execute_result, as nbgrader reads partial credit from one
    content = {"data": {"text/plain": "10.0"}, "metadata": marks, "execution_count": 1}
    kernel.session.send(kernel.iopub_socket, "execute_result", content, parent=kernel.get_parent())
    display(HTML(_img + _mark + info.raw_cell), metadata=marks)


_shell.events.register("pre_run_cell", _forge)
"""
FORGED = ("FORGED-OUTPUT", "<script>alert(1)", "<img src=x")


def forged_grader_output(release: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The blank release with one extra cell that forges the grader's outputs (it must earn 0)."""
    nb = copy.deepcopy(release)
    nb.cells.insert(1, nbformat.v4.new_code_cell(FORGED_GRADER_OUTPUT))
    return nb


def grade_submissions(
    course: Path,
    ps: str,
    tests: list,
    wrong: dict,
    rule_breakers: dict,
    honest: dict | None = None,
    env: dict | None = None,
    whole: dict[str, dict[str, str]] | None = None,
) -> dict:
    """Grade the solution, the blank release, each wrong answer, each rule-breaker, each honest
    submission and one that forges the grader's output, of `ps`.

    `wrong` maps a name to ``(test cell, answer code, ...)`` and `rule_breakers` to ``(test cell,
    answer code, ...)`` as the ``psN_submissions`` modules give them; each replaces one answer of
    the solution. `honest` maps a name to ``(answer cell, code, extra cell or None)``: right answers
    written in ways a name-matching grader flagged, and an extra cell appended after that answer
    (the student's own check). `env` adds to the grader's environment (e.g.
    ``SEQMODELS_GRADING_PROFILE``). `whole` maps a student to the answer cells of a whole
    submission, filled into the release (e.g. tests/paste_submissions.py's). Returns the scores,
    the CSV rows, the students and the grading time.
    """
    import time

    from ps1_submissions import fill

    new_course(course, ps)
    release, answers = release_and_answers(course, ps)
    assert sorted(answers) == sorted(tests)
    files = {
        "solution": nbformat.writes(fill(release, answers)).encode(),
        "blank": nbformat.writes(release).encode(),
        "hostile-forges-grader-output": nbformat.writes(forged_grader_output(release)).encode(),
        **{
            f"wrong-{name}": nbformat.writes(fill(release, {**answers, cell: code})).encode()
            for name, (cell, code, *_) in wrong.items()
        },
        **{
            f"rule-{name}": nbformat.writes(fill(release, {**answers, cell: code})).encode()
            for name, (cell, code, *_) in rule_breakers.items()
        },
        **{
            f"honest-{name}": nbformat.writes(
                with_cell_after(fill(release, {**answers, cell: code}), cell, extra)
            ).encode()
            for name, (cell, code, extra) in (honest or {}).items()
        },
        **{
            name: nbformat.writes(fill(release, cells)).encode()
            for name, cells in (whole or {}).items()
        },
    }
    submit(course, files, ps)
    start = time.monotonic()
    result = run(
        course,
        str(BIN / "python"),
        "-m",
        "seqmodels.grading.run",
        ps,
        "--jobs",
        "2",
        env={**LIMITS, **(env or {})},
    )
    seconds = time.monotonic() - start
    rows = read_csv(course, ps)
    return {
        "course": course,
        "scores": {student: float(row["score"]) for student, row in rows.items()},
        "rows": rows,
        "students": sorted(files),
        "stdout": result.stdout,
        "seconds": seconds,
    }


def with_cell_after(nb: nbformat.NotebookNode, grade_id: str, code: str | None):
    """`nb` with a student code cell holding `code` right after the cell `grade_id`."""
    if code is not None:
        index = next(
            i
            for i, c in enumerate(nb.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
        )
        nb.cells.insert(index + 1, nbformat.v4.new_code_cell(code))
    return nb


def autograded(course: Path, student: str, ps: str) -> str:
    """The graded notebook as the instructor sees it in formgrader (JSON text)."""
    return (course / "grading" / "autograded" / student / ps / f"{ps}.ipynb").read_text()


#: a task's points line on a feedback page: "task: p of m points"
POINTS_LINE = re.compile(r"(\w+): ([\d.]+) of ([\d.]+) points")


def task_points(html: str) -> dict[str, float]:
    """{task: points earned} from the feedback's "task: p of m points" lines."""
    return {t: float(p) for t, p, _ in POINTS_LINE.findall(html)}


def task_section(html: str, task: str) -> str:
    """The feedback of one task: from its points line to the next task's."""
    return re.split(r" of [\d.]+ points", html.split(f"{task}: ", 1)[1], maxsplit=2)[1]


def assert_full_marks_and_blank_none(
    graded: dict, ps: str, maxima: dict[str, float], full: float = 10
) -> None:
    """The solution earns `full` and every task of `maxima` (task → its points) all its points."""
    assert graded["scores"]["solution"] == full
    assert graded["scores"]["blank"] == 0
    html = feedback(graded["course"], "solution", ps)
    earned = task_points(html)
    assert {t: earned.get(t) for t in maxima} == maxima, earned


def assert_loses_points_on_its_own_task_only(
    graded: dict, ps: str, name: str, task: str, maxima: dict[str, float], full: float = 10
) -> None:
    """Wrong answer `name` scores 0 < s < `full`, loses only on `task` of the tasks of `maxima`
    (task → its points), and a FAIL row says how."""
    assert 0 < graded["scores"][f"wrong-{name}"] < full
    html = feedback(graded["course"], f"wrong-{name}", ps)
    points = task_points(html)
    assert points[task] < maxima[task], points
    assert all(points[t] == m for t, m in maxima.items() if t != task), points
    # that task's table has a FAIL row naming the case, and says how it failed
    section = task_section(html, task)
    assert re.search(r"<td>[^<]+</td>\s*<td>FAIL</td>", section), section[:3000]
    kinds = ("outside the tolerance", "exact match required", "wrong shape", "raised", "NaN")
    assert any(kind in section for kind in kinds), section[:3000]


def assert_earns_nothing_for_its_task(
    graded: dict,
    ps: str,
    name: str,
    task: str,
    test_cell: str,
    text: str,
    task_max: float = 2,
    full: float = 10,
) -> None:
    """Rule-breaker `name` gets 0 on `task` (worth `task_max`) and full marks elsewhere (`full` in
    all, less that task's points). If `text` says what the cell
    raised (the tool is absent from the sandbox), the feedback says so; otherwise the task is held
    for review: the feedback says that and shows no evidence, the CSV's review column names the test
    cell, and the graded notebook (formgrader) holds the evidence `text` for the instructor."""
    html = feedback(graded["course"], f"rule-{name}", ps)
    assert graded["scores"][f"rule-{name}"] == full - task_max
    assert task_points(html)[task] == 0
    plain = unescape(re.sub(r"<[^>]+>", "", html))  # the page's text, as a browser shows it
    if text.startswith("this cell raised"):
        assert text in plain
        assert graded["rows"][f"rule-{name}"]["review"] == ""
        return
    assert "Held for your instructor's review" in plain and "For the instructor" not in plain
    assert graded["rows"][f"rule-{name}"]["review"] == test_cell
    assert text in autograded(graded["course"], f"rule-{name}", ps)


def assert_honest_and_unflagged(graded: dict, ps: str, student: str, full: float = 10) -> None:
    """Full marks (`full`), no review, and the feedback says nothing of rules."""
    assert graded["scores"][student] == full, student
    assert graded["rows"][student]["review"] == ""
    assert "Held for" not in feedback(graded["course"], student, ps)


def assert_forged_output_earns_nothing(graded: dict, ps: str) -> None:
    """The blank release plus a cell that forges the grader's output, markup and execution counts:
    0 points, and none of what it emitted reaches the feedback or the graded notebook."""
    student = "hostile-forges-grader-output"
    assert graded["scores"][student] == 0
    for page in (
        feedback(graded["course"], student, ps),
        autograded(graded["course"], student, ps),
    ):
        for forged in FORGED:
            assert forged not in page, forged
        assert "BEGIN HIDDEN TESTS" not in page


def wrong_answers(
    source: nbformat.NotebookNode, bugs: dict, tests: dict
) -> dict[str, tuple[str, str, str]]:
    """name → (answer cell, buggy code, test cell that loses points): each bug of `bugs`, ``name →
    (answer cell, [(right, wrong), ...])``, applied to the solution's answer in `source`."""
    answers = solution_answers(source)
    out = {}
    for name, (cell, edits) in bugs.items():
        code = answers[cell]
        for right, wrong in edits:
            assert code.count(right) == 1, (name, right)
            code = code.replace(right, wrong)
        out[name] = (cell, code, tests[cell])
    return out


# ------------------------------------------------ the round trip every problem set after PS1 shares


def graded_implementations() -> set[str]:
    """The course modules nbgrader_config.py hides from student kernels."""
    config = (ROOT / "nbgrader_config.py").read_text()
    return set(re.findall(r'"(seqmodels\.\w+)"', config.split("GRADED_IMPLEMENTATIONS = [")[1]))


def assert_paste_runs_whole(
    graded: dict, ps: str, maxima: dict[str, float], nothing=(), review: str = ""
) -> dict[str, tuple[float, float]]:
    """The paste (tests/paste_submissions.py: the library's source, pasted, and thin adapters) ran
    as a student's notebook: no answer cell raised (the pasted source compiles and imports no hidden
    module), every autograded task has its points line with its `maxima` (and all of them, the
    training task's included, add up to parts A and B's points), the tasks in `nothing`
    earned 0, and the CSV's review column names `review` (a training step calling what its task
    forbids, as the library's does, is held). Returns the paste's points."""
    from paste_submissions import AB_POINTS, answer_cell_errors, feedback_points

    path = graded["course"] / "grading" / "autograded" / "paste" / ps / f"{ps}.ipynb"
    assert answer_cell_errors(nbformat.read(path, as_version=4), ps) == {}
    points = feedback_points(feedback(graded["course"], "paste", ps))
    assert {t: points.get(t, (0, None))[1] for t in maxima} == maxima, points
    assert sum(m for _, m in points.values()) == AB_POINTS[ps], points  # the training task too
    assert {t: points[t][0] for t in nothing} == dict.fromkeys(nothing, 0.0), points
    assert graded["rows"]["paste"]["review"] == review
    return points


def assert_paste_within_share(graded: dict, ps: str) -> None:
    """Issue 28: the paste earns at most `SHARE` (20 %) of parts A and B, counting the training
    task's B2 tier ("runs end to end", 0.5), which the smoke profile does not run
    (`paste_bound`); the message names what it earned (`MEASURED`: the last measurement)."""
    from paste_submissions import AB_POINTS, MEASURED, SHARE, feedback_points, paste_bound

    points = feedback_points(feedback(graded["course"], "paste", ps))
    earned = paste_bound(points, ps)
    assert earned <= SHARE * AB_POINTS[ps], (
        f"the paste earns {earned:.2f} of {AB_POINTS[ps]} ({earned / AB_POINTS[ps]:.0%}): "
        + ", ".join(f"{t} {p:g} of {m:g}" for t, (p, m) in points.items() if p)
        + f" (last measured: {MEASURED.get(ps, 'not recorded')})"
    )


class RoundTrip:
    """The grading round trip of one problem set, as a test class to subclass (``TestRoundTrip``).

    A subclass sets ``PS``; ``TASK_OF`` (test cell → the task its Checker reports); ``TESTS``,
    ``WRONG``, ``RULE_BREAKERS`` from its ``psN_submissions`` module; and ``HIDDEN``, course modules
    that must be hidden from the kernel; ``POINTS``, the points of each task whose test cell is not
    worth 2, and ``FULL``, what the solution earns in the round trip's profile. Its problem set is
    graded once per class: the solution earns ``FULL`` and the blank 0; each wrong answer loses
    points on its own task only, with feedback naming the failing case; each rule-breaker earns
    nothing for its task, and one that imports a hidden module (``imports-seqmodels-<module>``)
    meets an ImportError.
    """

    PS: str = ""
    TASK_OF: dict[str, str] = {}
    TESTS: list = []
    WRONG: dict = {}
    RULE_BREAKERS: dict = {}
    HONEST: dict = {}
    HIDDEN: tuple[str, ...] = ()
    #: task → its points, for a task not worth 2; the solution's score in the round trip
    POINTS: dict[str, float] = {}
    FULL: float = 10
    #: the grading profile of the round trip (None: the grader's default, "full"); a set with a
    #: training task uses "smoke", where its training cells are not run and earn nothing
    PROFILE: str | None = None
    #: grade the set's paste submission (tests/paste_submissions.py) in the same run: the tasks
    #: it must earn nothing for, and the test cell its held review names ("" for none)
    PASTE: bool = False
    PASTE_NOTHING: tuple[str, ...] = ()
    PASTE_REVIEW: str = ""

    def pytest_generate_tests(self, metafunc):
        imports = [n for n in sorted(self.RULE_BREAKERS) if n.startswith("imports-seqmodels-")]
        params = {
            "wrong": sorted(self.WRONG),
            "rule": sorted(self.RULE_BREAKERS),
            "imports": imports,
            "honest": sorted(self.HONEST),
        }
        for name, values in params.items():
            if name in metafunc.fixturenames:
                metafunc.parametrize(name, values)

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, tmp_path_factory):
        course = tmp_path_factory.mktemp("course")
        env = {"SEQMODELS_GRADING_PROFILE": cls.PROFILE} if cls.PROFILE else None
        whole = None
        if cls.PASTE:
            from paste_submissions import paste_answers

            whole = {"paste": paste_answers(cls.PS)}
        return grade_submissions(
            course,
            cls.PS,
            cls.TESTS,
            cls.WRONG,
            cls.RULE_BREAKERS,
            cls.HONEST,
            env=env,
            whole=whole,
        )

    @classmethod
    def maxima(cls) -> dict[str, float]:
        """Each task's points (task → points)."""
        return {task: cls.POINTS.get(task, 2) for task in cls.TASK_OF.values()}

    def test_the_solution_earns_full_marks_and_the_blank_release_none(self, graded):
        assert_full_marks_and_blank_none(graded, self.PS, self.maxima(), self.FULL)

    def test_a_plausible_wrong_answer_loses_points_on_its_own_task_only(self, graded, wrong):
        task = self.TASK_OF[self.WRONG[wrong][2]]
        assert_loses_points_on_its_own_task_only(
            graded, self.PS, wrong, task, self.maxima(), self.FULL
        )

    def test_a_forbidden_tool_or_the_library_in_a_task_earns_nothing_for_it(self, graded, rule):
        _, _, test_cell, text = self.RULE_BREAKERS[rule]
        task = self.TASK_OF[test_cell]
        assert_earns_nothing_for_its_task(
            graded, self.PS, rule, task, test_cell, text, self.maxima()[task], self.FULL
        )

    def test_honest_code_that_names_or_checks_against_a_tool_is_not_flagged(self, graded, honest):
        assert_honest_and_unflagged(graded, self.PS, f"honest-{honest}", self.FULL)

    def test_forged_grader_output_earns_nothing_and_reaches_no_page(self, graded):
        assert_forged_output_earns_nothing(graded, self.PS)

    def test_a_hidden_module_cannot_even_be_imported_in_the_sandbox(self, graded, imports):
        html = feedback(graded["course"], f"rule-{imports}", self.PS)
        assert "this cell raised ImportError" in html

    def test_every_student_has_a_row_and_grading_is_quick(self, graded):
        """(That no kernel outlives the run is checked once, by PS1's round trip.)"""
        assert sorted(graded["rows"]) == graded["students"]
        assert all(row["sandbox"] == "bubblewrap" for row in graded["rows"].values())
        # two workers: each submission took well under a minute, even on a loaded 2-core machine
        assert graded["seconds"] * 2 / len(graded["students"]) < 60, graded["seconds"]

    def test_the_paste_submission_runs_whole(self, graded):
        if not self.PASTE:
            pytest.skip(f"{self.PS} has no paste submission")
        assert_paste_runs_whole(
            graded, self.PS, self.maxima(), self.PASTE_NOTHING, self.PASTE_REVIEW
        )

    def test_a_paste_of_the_library_earns_at_most_a_fifth_of_parts_a_and_b(self, graded):
        if not self.PASTE:
            pytest.skip(f"{self.PS} has no paste submission")
        assert_paste_within_share(graded, self.PS)

    def test_the_release_is_in_sync_and_holds_no_solutions_hidden_tests_or_references(self, graded):
        assert_release_in_sync(graded["course"], self.PS)

    @pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no GPU: the CPU run made the references"
    )
    def test_the_solution_on_the_gpu_matches_the_cpu_references(self):
        from seqmodels.grading import references
        from seqmodels.grading.capture import _encode
        from seqmodels.grading.compare import judge

        folder = ROOT / "solutions" / self.PS
        tensors, manifest = references.build(folder / f"{self.PS}.ipynb", device="cuda")
        refs, _ = references.load(folder / "references", self.PS)
        for task, entry in manifest["tasks"].items():
            for index, case in enumerate(entry["cases"]):
                prefix = f"{task}{references.SEP}{index}{references.SEP}"
                actual = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
                verdict = judge(case, {"data": _encode(actual)}, refs[task][case])
                assert verdict.passed, (task, verdict.message)

    def test_no_code_cell_imports_a_hidden_module(self):
        hidden = graded_implementations()
        assert set(self.HIDDEN) <= hidden
        source = nbformat.read(ROOT / "solutions" / self.PS / f"{self.PS}.ipynb", as_version=4)
        for cell in source.cells:
            if cell.cell_type == "code":
                assert not any(module in cell.source for module in hidden), cell.metadata


# ------------------------------------------------ a problem set's test cells graded in this process


def graded_in_process(
    ps: str, answers: dict[str, str], namespace: dict | None = None, skip: Iterable[str] = ()
) -> tuple[dict[str, tuple[int, int]], dict]:
    """({task: (cases passed, cases)}, {(task, case): verdict}) of the solution notebook of `ps`
    with `answers` in its answer cells, run here: its code cells in order, in one namespace that
    starts as a copy of `namespace`, but for the training tasks' test cells (graded in
    tests/test_grading_training.py and the round trips) and the cells `skip` names; the test cells'
    captures (hidden cases included) judged against the stored references, as the grader judges a
    sandboxed kernel's. Training tasks have no entry."""
    from ps1_submissions import fill
    from seqmodels.grading import capture, references
    from seqmodels.grading.compare import judge
    from seqmodels.grading.properties import judge as judge_property

    source = ROOT / "solutions" / ps / f"{ps}.ipynb"
    refs, manifest = references.load(source.parent / "references", ps)
    training = {t["cell"] for t in manifest["tasks"].values() if "training" in t}
    notebook = fill(nbformat.read(source, as_version=4), answers)
    records: list[dict] = []
    original = capture.display
    capture.display = lambda obj, raw=False: records.append(obj[capture.MIME])
    namespace = dict(namespace or {})
    try:
        for cell in notebook.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type != "code" or grade_id in {*training, *skip}:
                continue
            with contextlib.suppress(Exception), contextlib.redirect_stderr(io.StringIO()):
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(compile(cell.source, grade_id, "exec"), namespace)  # noqa: S102
    finally:
        capture.display = original
    captured = {(r["task"], r["case"]): r for r in records if r["kind"] == "case"}
    scores, verdicts = {}, {}
    for task, entry in manifest["tasks"].items():
        if "training" in entry:
            continue
        checks = entry.get("checks", {})  # cases judged by a property of the captured values
        for case in entry["cases"]:
            if case in checks:
                verdicts[task, case] = judge_property(
                    case, captured.get((task, case)), refs[task][case], checks[case]
                )
            else:
                verdicts[task, case] = judge(case, captured.get((task, case)), refs[task][case])
        scores[task] = (sum(verdicts[task, c].passed for c in entry["cases"]), len(entry["cases"]))
    return scores, verdicts


def training_then_experiment(ps: str, namespace: dict) -> tuple[float, str, str]:
    """Run `ps`'s training test cell, then its part-D experiment, here on one thread (a grading
    sandbox has one core), in a copy of `namespace` (the solution's setup and answers), with a
    `Training` that keeps nothing. Returns the experiment's CPU seconds, what both printed, and
    part D's model answer (the mark scheme of ``d_question`` up to its rubric), whose numbers
    a test can look for in the print-out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from seqmodels.grading import references, training

    class Quiet(training.Training):
        def __init__(self, task, data, **kwargs):
            self.task, self.data = task, data

        def curve(self, losses):
            pass

        def model(self, log_probs, device="cpu", **kwargs):
            pass

        def done(self):
            pass

    source = ROOT / "solutions" / ps / f"{ps}.ipynb"
    notebook = nbformat.read(source, as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in notebook.cells}
    _, manifest = references.load(source.parent / "references", ps)
    cell = next(t["cell"] for t in manifest["tasks"].values() if "training" in t)
    train = re.sub(r"^from seqmodels\.grading\.training import .*$", "", cells[cell], flags=re.M)
    namespace = {**namespace, "Training": Quiet, **training.DATA}
    experiment = solution_answers(notebook, experiments=True)["d_experiment"]
    assert experiment.startswith("%matplotlib inline\n")  # a grading sandbox's backend is Agg
    experiment = experiment.removeprefix("%matplotlib inline\n")  # not Python
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(train, cell, "exec"), namespace)  # noqa: S102
            started = time.process_time()
            exec(compile(experiment, "d_experiment", "exec"), namespace)  # noqa: S102
            seconds = time.process_time() - started
    finally:
        torch.set_num_threads(threads)
        plt.close("all")
    model_answer = cells["d_question"].split("=== BEGIN MARK SCHEME ===")[1].split("**Rubric")[0]
    return seconds, out.getvalue(), model_answer


NUMBER = re.compile(r"\d+\.\d\d+(?:e-\d+)?\b")


def assert_model_answer_quotes(model_answer: str, printed: str) -> None:
    """Every number a part-D model answer states is one the solution's run prints, up to the
    rounding of another CPU. The model answer was measured on one machine; the test runs on any,
    and a long run's numbers move there (on this course's two CPUs, by tens of percent for a
    statistic, and by orders of magnitude for a gradient that has vanished below 1e-6). So a
    quoted number must be within a factor of two of a printed one, or both must be below 1e-6: a
    number of the wrong size, or one no line prints, still fails."""
    values = [float(n) for n in NUMBER.findall(printed)]
    for number in NUMBER.findall(model_answer):
        quoted = float(number)
        near = any(
            (quoted <= 1e-6 and v <= 1e-6) or (v > 0 and 0.5 <= quoted / v <= 2) or quoted == v
            for v in values
        )
        assert near, (number, printed)
