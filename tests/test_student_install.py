"""The student path, for real: a fresh virtual environment with nothing but what the "Problem sets"
page and README tell a student to type —

    git clone https://github.com/seqmodels-course/sequence-models-nlp.git
    pip install torch==2.13.0
    pip install "./sequence-models-nlp[student]"

— where the clone is of the student repository that `make release` builds from this commit
(`seqmodels.grading.release`: no solutions, no grader modules), runs the released Problem Set 1 of
that clone in its own kernel: with the solution's answers filled in every public check passes; the
blank release fails each test cell with its readable message. Takes a minute or two (the torch
wheel is installed from pip's local wheels).
"""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from seqmodels.grading.release import NAME, build_repository

sys.path.insert(0, str(Path(__file__).parent))
from ps1_submissions import EXPERIMENTS, fill, solution_answers  # noqa: E402

pytestmark = pytest.mark.student

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "ps1" / "ps1.ipynb"
URL = "https://github.com/seqmodels-course/sequence-models-nlp.git"  # the student repository
PASSED = "public checks passed — hidden checks run at grading"
# what Part B's training cell says once it has trained (its tiers are paid on the grader's evaluation)
TRAINED = "training finished — the grader evaluates the model after this cell"
KERNEL = "seqmodels-student"


def run(*command, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, **kw)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_the_readme_gives_these_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### For students", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in section.strip().splitlines()]
    assert commands == [
        f"git clone {URL}",
        "python3.11 -m venv ~/seqmodels-env",
        "source ~/seqmodels-env/bin/activate",
        "pip install torch==2.13.0",
        f'pip install "./{NAME}[student]"',
        f"jupyter lab {NAME}/assignments/ps1/ps1.ipynb",
    ]


@pytest.fixture(scope="module")
def student_kernel(tmp_path_factory):
    """A venv with only the student install from a clone of the student repository, and a
    kernelspec for it in a private JUPYTER_PATH. Returns (JUPYTER_PATH, the clone)."""
    base = tmp_path_factory.mktemp("student")
    published = tmp_path_factory.mktemp("published") / NAME  # what the instructor pushes to URL
    build_repository(published)
    clean = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    run("git", "clone", "-q", str(published), env=clean, cwd=base)  # `git clone URL`
    course = base / NAME
    assert not (course / "solutions").exists() and not (course / "tests").exists()
    env = base / "seqmodels-env"
    run(sys.executable, "-m", "venv", str(env), env=clean)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--no-input", "-q"]
    run(*pip, "torch==2.13.0", env=clean, cwd=base, timeout=600)
    run(*pip, "./sequence-models-nlp[student]", env=clean, cwd=base, timeout=600)
    python = str(env / "bin" / "python")
    where = run(python, "-c", "import seqmodels; print(seqmodels.__file__)", env=clean).stdout
    assert str(env) in where, f"seqmodels imported from {where}, not the fresh environment"
    absent = run(
        python,
        "-c",
        "import importlib.util as u; print([m for m in ('myst_nb', 'nbgrader', 'sphinx')"
        " if u.find_spec(m)])",
        env=clean,
    ).stdout.strip()
    assert absent == "[]", f"the student environment has book/grading packages: {absent}"
    jupyter = base / "jupyter"
    run(python, "-m", "ipykernel", "install", "--prefix", str(jupyter), "--name", KERNEL, env=clean)
    return jupyter / "share" / "jupyter", course


def execute(notebook, jupyter_path: Path, folder: Path, monkeypatch, allow_errors: bool):
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    client = NotebookClient(
        notebook,
        kernel_name=KERNEL,
        timeout=300,
        allow_errors=allow_errors,
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()
    return notebook


def graded_cells(notebook):
    return [
        c
        for c in notebook.cells
        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
    ]


def text_of(cell) -> str:
    parts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in {"display_data", "execute_result"}:
            parts.append(output.get("data", {}).get("text/plain", ""))
            parts.append(output.get("data", {}).get("text/markdown", ""))
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
    return "\n".join(parts)


def test_the_solution_passes_every_public_check(student_kernel, tmp_path, monkeypatch):
    jupyter, course = student_kernel
    release = nbformat.read(course / "assignments" / "ps1" / "ps1.ipynb", as_version=4)
    answers = solution_answers(nbformat.read(SOURCE, as_version=4))
    notebook = fill(release, answers)
    execute(notebook, jupyter, tmp_path, monkeypatch, allow_errors=False)
    cells = graded_cells(notebook)
    assert len(cells) >= 4
    for cell in cells:
        assert PASSED in text_of(cell) or TRAINED in text_of(cell), text_of(cell)
    assert sum(TRAINED in text_of(cell) for cell in cells) == 1


def test_the_blank_release_fails_each_test_cell_readably(student_kernel, tmp_path, monkeypatch):
    jupyter, course = student_kernel
    notebook = nbformat.read(course / "assignments" / "ps1" / "ps1.ipynb", as_version=4)
    execute(notebook, jupyter, tmp_path, monkeypatch, allow_errors=True)
    cells = graded_cells(notebook)
    assert len(cells) >= 4
    for cell in cells:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert errors, f"test cell {cell.metadata['nbgrader']['grade_id']} did not fail"
        error = errors[-1]
        assert error.ename in {"AssertionError", "NotImplementedError"}, (error.ename, error.evalue)
        if error.ename == "AssertionError":
            assert "public checks failed" in error.evalue, error.evalue
        assert PASSED not in text_of(cell)
    # answer cells define functions without running them, so only test cells fail, and Part D's
    # experiment, which runs where it stands: NotImplementedError until it is written
    experiments = [
        c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") in EXPERIMENTS
    ]
    assert experiments and all(
        [o.ename for o in c.outputs if o.output_type == "error"] == ["NotImplementedError"]
        for c in experiments
    )
    setup = [
        c
        for c in notebook.cells
        if c.cell_type == "code" and c not in cells and c not in experiments
    ]
    assert not [o for c in setup for o in c.outputs if o.output_type == "error"]
