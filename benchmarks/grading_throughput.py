"""Grading throughput: submissions per minute, with and without the sandbox, against plain nbgrader.

    .venv/bin/python benchmarks/grading_throughput.py --students 12 [--ps ps5]

Builds a temporary copy of the course with `--students` copies of a problem set's solution as
submissions, then times `python -m seqmodels.grading.run` sandboxed and with `--unsafe-no-sandbox`,
with 1 job and with all cores, sandboxed on all cores with cold kernels (each started from
scratch instead of forked from the kernel zygote), and plain `nbgrader autograde` (stock
preprocessors, serial) on the same submissions. Beside them, the limit any grader can approach
on this machine: the same answer and test code (the solution notebook, hidden tests included) run
once per student in one warm interpreter with torch already imported — no kernel, no sandbox, no
nbgrader — on every core.
Prints a table, the sandbox's overhead and the parallel runs against stock and against the limit.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from grading_helpers import release_and_answers  # noqa: E402
from ps1_submissions import fill, solution_answers  # noqa: E402

BIN = Path(sys.executable).parent
# nbgrader calls `alembic` by name: the virtual environment's bin must be on PATH
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
STOCK_CONFIG = """c = get_config()
c.CourseDirectory.root = {root!r}
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "assignments"
c.CourseDirectory.submitted_directory = "grading/submitted"
c.CourseDirectory.autograded_directory = "grading/autograded"
c.CourseDirectory.feedback_directory = "grading/feedback"
c.CourseDirectory.ignore = ["references"]
c.CourseDirectory.db_url = "sqlite:///{root}/grading/gradebook.db"
"""


def make_course(students: int, stock: bool, ps: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix="grading-bench-"))
    shutil.copytree(ROOT / "solutions", root / "solutions")
    if stock:
        (root / "grading").mkdir()
        (root / "nbgrader_config.py").write_text(STOCK_CONFIG.format(root=str(root)))
    else:
        shutil.copy(ROOT / "nbgrader_config.py", root)
    subprocess.run(
        [BIN / "nbgrader", "generate_assignment", ps, "--force", "--log-level=ERROR"],
        cwd=root,
        check=True,
        env=ENV,
    )
    release, _ = release_and_answers(root, ps)
    # the whole solution, part D's experiment included (the grading tests leave it out)
    source = nbformat.read(root / "solutions" / ps / f"{ps}.ipynb", as_version=4)
    submission = nbformat.writes(fill(release, solution_answers(source, experiments=True)))
    for i in range(students):
        folder = root / "grading" / "submitted" / f"student{i:03d}" / ps
        folder.mkdir(parents=True)
        (folder / f"{ps}.ipynb").write_text(submission)
    return root


WARM = """
import contextlib, io, sys, time
import nbformat, torch  # noqa: F401 - imported once, before the clock starts
cells = [c.source for c in nbformat.read(sys.argv[1], as_version=4).cells if c.cell_type == "code"]
code = [compile(c, f"cell{i}", "exec") for i, c in enumerate(cells)]
start = time.perf_counter()
for _ in range(int(sys.argv[2])):
    namespace = {"__name__": "__main__"}
    with contextlib.redirect_stdout(io.StringIO()):
        for c in code:
            exec(c, namespace)
print(time.perf_counter() - start)
"""


def warm_limit(students: int, ps: str, cores: int) -> float:
    """Seconds for `students` runs of the solution notebook's code in warm interpreters, all cores."""
    notebook = ROOT / "solutions" / ps / f"{ps}.ipynb"
    shares = [students // cores + (i < students % cores) for i in range(cores)]
    start = time.perf_counter()
    runs = [
        subprocess.Popen(
            [BIN / "python", "-c", WARM, notebook, str(n)],
            cwd=notebook.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,  # the trace's profiler logs each start and stop there
            text=True,
            env={**ENV, "OMP_NUM_THREADS": "1"},
        )
        for n in shares
        if n
    ]
    for run in runs:
        _, errors = run.communicate()
        if run.returncode:
            raise RuntimeError(
                f"the warm run failed (exit code {run.returncode}):\n{errors[-3000:]}"
            )
    return time.perf_counter() - start


def timed(cmd: list, root: Path, **env: str) -> tuple[float, str]:
    start = time.perf_counter()
    result = subprocess.run(
        cmd, cwd=root, check=True, capture_output=True, text=True, env={**ENV, **env}
    )
    return time.perf_counter() - start, result.stdout


def autograde_phase(stdout: str) -> float:
    """The driver's own report of its autograde phase: '... in 12.3 s with 2 jobs ...'."""
    return float(re.search(r" in ([0-9.]+) s with", stdout).group(1))


def make_grade(n: int, ps: str, jobs: int, sandboxed: bool = True, **env: str):
    """(autograde phase, whole command) seconds of ``make grade`` on a fresh copy of the course."""
    root = make_course(n, stock=False, ps=ps)
    cmd = [BIN / "python", "-m", "seqmodels.grading.run", ps, "--jobs", str(jobs)]
    seconds, stdout = timed(cmd if sandboxed else [*cmd, "--unsafe-no-sandbox"], root, **env)
    shutil.rmtree(root)
    return autograde_phase(stdout), seconds


def stock_autograde(n: int, ps: str) -> tuple[float, float]:
    root = make_course(n, stock=True, ps=ps)
    seconds, _ = timed([BIN / "nbgrader", "autograde", ps], root)
    shutil.rmtree(root)
    return seconds, seconds


def row_order(cores: int) -> list[str]:
    """The table's rows, in order."""
    many = f"{cores} job{'s' * (cores > 1)}"
    return [
        "make grade, 1 job, sandboxed",
        "make grade, 1 job, no sandbox",
        f"make grade, {many}, sandboxed",
        f"make grade, {many}, no sandbox",
        f"make grade, {many}, sandboxed, cold kernels",
        "plain nbgrader autograde (serial)",
        f"limit: warm interpreters, {cores} processes",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=8)
    parser.add_argument("--ps", default="ps1", help="the problem set whose solution is submitted")
    parser.add_argument(
        "--project", type=int, default=5000, help="notebooks to project the grading time of"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the rows the goals compare (parallel sandboxed, stock, limit) this many times, "
        "in turn, and report each one's median (this machine's speed drifts between runs)",
    )
    parser.add_argument(
        "--cost-only",
        action="store_true",
        help="time only the sandboxed run on every core, and project what grading costs (for sets "
        "whose training makes every other row minutes long)",
    )
    args = parser.parse_args()
    n, cores, ps = args.students, os.cpu_count() or 1, args.ps
    if args.cost_only:
        parallel, whole = make_grade(n, ps, cores)
        print(
            f"# {n} copies of the {ps.upper()} solution, {cores} cores, {time.strftime('%Y-%m-%d')}"
        )
        print(
            f"make grade, {cores} jobs, sandboxed: autograde {parallel:.1f} s, whole {whole:.1f} s"
        )
        project(parallel * cores / n, whole - parallel, cores, args.project)
        return
    rows = {}  # label -> (autograde seconds, whole command seconds)
    for jobs in (1, cores):
        for sandboxed in (True, False):
            if jobs == cores and sandboxed:
                continue  # a compared row: below
            label = f"make grade, {jobs} job{'s' * (jobs > 1)}, " + (
                "sandboxed" if sandboxed else "no sandbox"
            )
            rows[label] = make_grade(n, ps, jobs, sandboxed=sandboxed)
    # the same, each kernel started cold instead of forked from the zygote
    cold = f"make grade, {cores} job{'s' * (cores > 1)}, sandboxed, cold kernels"
    rows[cold] = make_grade(n, ps, cores, SEQMODELS_WARM_KERNELS="0")
    parallel_label = f"make grade, {cores} job{'s' * (cores > 1)}, sandboxed"
    stock_label = "plain nbgrader autograde (serial)"
    limit_label = f"limit: warm interpreters, {cores} processes"
    runs: dict[str, list[tuple[float, float]]] = {
        parallel_label: [],
        stock_label: [],
        limit_label: [],
    }
    for _ in range(args.repeat):
        runs[parallel_label].append(make_grade(n, ps, cores))
        runs[stock_label].append(stock_autograde(n, ps))
        limit = warm_limit(n, ps, cores)
        runs[limit_label].append((limit, limit))
    for label, measured in runs.items():
        rows[label] = (
            statistics.median(a for a, _ in measured),
            statistics.median(w for _, w in measured),
        )
    rows = {label: rows[label] for label in row_order(cores) if label in rows}
    limit = rows[limit_label][0]
    print(
        f"# {n} copies of the {ps.upper()} solution, {cores} cores, {time.strftime('%Y-%m-%d')}"
        + (f"; compared rows: median of {args.repeat} runs" if args.repeat > 1 else "")
    )
    print(f"{'':54} {'autograde s':>11} {'per min':>8} {'whole command s':>16}")
    for label, (autograde, whole) in rows.items():
        print(f"{label:54} {autograde:11.1f} {60 * n / autograde:8.1f} {whole:16.1f}")
    print("(whole command: the driver also syncs the release, writes feedback and exports the CSV)")
    for jobs in (1, cores):
        plural = "s" * (jobs > 1)
        safe = rows[f"make grade, {jobs} job{plural}, sandboxed"][0]
        unsafe = rows[f"make grade, {jobs} job{plural}, no sandbox"][0]
        print(f"sandbox overhead, {jobs} job{plural}: {100 * (safe / unsafe - 1):+.1f} %")
    stock = rows["plain nbgrader autograde (serial)"][0]
    parallel = rows[f"make grade, {cores} job{'s' * (cores > 1)}, sandboxed"][0]
    print(f"sandboxed {cores}-job run vs stock nbgrader: {stock / parallel:.2f}x the throughput")
    whole = rows[f"make grade, {cores} job{'s' * (cores > 1)}, sandboxed"][1]
    print(f"whole make grade command vs stock nbgrader's: {stock / whole:.2f}x")
    print(f"sandboxed {cores}-job autograde vs the warm limit: {100 * limit / parallel:.0f} %")
    if args.repeat > 1:
        for label, measured in runs.items():
            shown = ", ".join(f"{a:.1f}/{w:.1f}" for a, w in measured)
            print(f"runs (autograde/whole s), {label}: {shown}")
        paired = [
            (s / p, s / w, lim / p) for (p, w), (s, _), (lim, _) in zip(*runs.values(), strict=True)
        ]
        print(
            "each round's own ratios (autograde vs stock, whole vs stock, % of limit): "
            + "; ".join(f"{a:.2f}x, {b:.2f}x, {100 * c:.0f} %" for a, b, c in paired)
        )
    # the projection: each submission costs `per` worker-seconds (measured with every core busy);
    # W workers grade W at a time; the driver's fixed cost (release sync, cluster start, export)
    project(parallel * cores / n, whole - parallel, cores, args.project)


def project(per: float, fixed: float, cores: int, notebooks: int) -> None:
    """Each submission costs `per` worker-seconds (measured with every core busy); W workers grade
    W at a time; the command's fixed cost (release sync, cluster start, export) is `fixed`."""
    print(
        f"per submission: {per:.1f} worker-seconds with {cores} workers on {cores} cores; fixed "
        f"cost of the command {fixed:.1f} s"
    )
    for workers in (cores, 16, 64, 256):
        minutes = (notebooks * per / workers + fixed) / 60
        print(f"projection: {notebooks} notebooks on {workers:3d} workers: {minutes:6.1f} min")


if __name__ == "__main__":
    main()
