"""nbgrader preprocessors that make ``nbgrader autograde`` judge outside the student's kernel.

Configured in the course's ``nbgrader_config.py``:

- `SanitizeSubmission` (before nbgrader's `OverwriteCells`, which restores test cells from the
  gradebook and re-adds deleted ones): drops duplicated nbgrader cells, foreign nbgrader metadata
  and student cells that use the grading module, and clears tags that change execution
  (``skip-execution``, ``raises-exception``).
- `GuardedExecute` (in place of nbgrader's `Execute`): a per-cell timeout, a whole-notebook
  budget, a memory limit on the kernel, a cap on printed output, and a kernel that dies ends the run
  cleanly: the cells before keep their results, the rest are marked "not run".
- `JudgeCaptures` (right after execution): compares every captured case with the stored
  references in this process, flags graded functions taken from the course library, writes the
  verdicts into the test cell's output (with the points as nbgrader's partial credit), and removes
  the hidden tests' source so feedback never shows it.
"""

from __future__ import annotations

import ast
import resource
import time
from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbformat.v4 import new_output
from nbgrader.api import Gradebook
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution
from traitlets import Integer, List, Unicode

from . import references
from .capture import MIME
from .compare import Verdict, judge

EXECUTION_TAGS = {"skip-execution", "raises-exception", "skip", "remove-cell"}
HIDDEN = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


def _note(cell: NotebookNode, text: str, name: str = "stdout") -> None:
    cell.setdefault("outputs", []).append(new_output("stream", name=name, text=text))


def _markdown_cell(text: str) -> str:
    """`text` safe inside a Markdown table cell (no HTML, no column breaks)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\n", " ")


def _uses_grading(source: str) -> bool:
    return "seqmodels.grading" in source or "Checker(" in source or MIME in source


class SanitizeSubmission(NbGraderPreprocessor):
    """Make the submission's structure the assignment's, whatever the student did to it.

    Runs before nbgrader's `DeduplicateIds` and `OverwriteCells`: nbgrader metadata naming no cell
    of the assignment is dropped (the cell becomes an ordinary student cell), a duplicated
    nbgrader cell is removed (the first copy stays, and `OverwriteCells` restores its source),
    student cells that use the grading machinery are removed, and tags that change execution are
    cleared.
    """

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gradebook:
            notebook = gradebook.find_notebook(info["notebook"], info["assignment"])
            known = {cell.name for cell in notebook.source_cells}
        seen: set[str] = set()
        kept = []
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if "nbgrader" in cell.metadata and grade_id not in known:
                del cell.metadata["nbgrader"]  # not a cell of this assignment
                grade_id = None
            if grade_id in seen:
                continue  # a duplicated nbgrader cell
            if grade_id:
                seen.add(grade_id)
            elif cell.cell_type == "code" and _uses_grading(cell.source):
                continue  # students' cells have no business with the grading machinery
            tags = cell.metadata.get("tags")
            if tags:
                cell.metadata["tags"] = [t for t in tags if t not in EXECUTION_TAGS]
            cell.metadata.pop("execution", None)
            kept.append(cell)
        nb.cells = kept
        return nb, resources


class GuardedExecute(Execute):
    """nbgrader's `Execute` with a notebook budget, a memory limit and survival of a dead kernel."""

    timeout = Integer(30, help="seconds one cell may run").tag(config=True)
    notebook_budget = Integer(180, help="seconds the whole notebook may run").tag(config=True)
    memory_limit_mb = Integer(4096, help="address-space limit of the kernel, MiB").tag(config=True)
    max_output_bytes = Integer(200_000, help="printed bytes kept per cell").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict, km=None):
        self._deadline = time.monotonic() + self.notebook_budget
        self._stopped: str | None = None
        self._printed: dict[int, int] = {}
        try:
            return super().preprocess(nb, resources, km)
        except DeadKernelError:  # the kernel died outside a cell (e.g. at shutdown)
            return nb, resources

    async def async_start_new_kernel(self, **kwargs):
        limit = self.memory_limit_mb * 2**20

        def limit_memory() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        kwargs.setdefault("preexec_fn", limit_memory)
        return await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)  # nbclient binds the sync twin by value

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int):
        if cell.cell_type != "code":
            return cell, resources
        if self._stopped is None and time.monotonic() >= self._deadline:
            self._stopped = f"the notebook's time budget ({self.notebook_budget} s) ran out"
        if self._stopped:
            cell.outputs = []
            _note(cell, f"[not run: {self._stopped}]\n")
            return cell, resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._stopped = "the kernel died in an earlier cell"
            cell.outputs.append(
                new_output(
                    "error",
                    ename="KernelDied",
                    evalue="the kernel died while running this cell",
                    traceback=[
                        "KernelDied: the kernel died while running this cell (os._exit, a "
                        "crash, or running out of memory); later cells were not run"
                    ],
                )
            )
        except CellTimeoutError:
            self._stopped = "a cell ran past its time limit and the kernel did not recover"
            cell.outputs.append(
                new_output(
                    "error",
                    ename="CellTimeoutError",
                    evalue=f"no reply within {self.timeout} s",
                    traceback=[f"CellTimeoutError: this cell ran longer than {self.timeout} s"],
                )
            )
        return cell, resources

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] == "stream":
            used = self._printed.get(cell_index, 0)
            text = msg["content"].get("text", "")
            self._printed[cell_index] = used + len(text)
            if used >= self.max_output_bytes:
                return None
            if used + len(text) > self.max_output_bytes:
                msg["content"]["text"] = (
                    text[: self.max_output_bytes - used]
                    + "\n[output truncated: too much printed]\n"
                )
        return super().output(outs, msg, display_id, cell_index)


def _forbidden_uses(source: str, forbidden: list[str]) -> list[str]:
    """Names of forbidden course modules that `source` imports or mentions."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        elif isinstance(node, ast.Attribute):
            names = [ast.unparse(node)]
        found.update(m for m in forbidden for n in names if n == m or n.startswith(m + "."))
    return sorted(found)


def _defined_functions(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def strip_hidden_tests(source: str) -> str:
    """The test cell's source without its hidden tests (what the student's release shows)."""
    lines, out, hidden = source.splitlines(), [], False
    for line in lines:
        if line.strip() == HIDDEN[0]:
            hidden = True
            out.append("# (hidden tests ran here)")
        elif line.strip() == HIDDEN[1]:
            hidden = False
        elif not hidden:
            out.append(line)
    return "\n".join(out)


class JudgeCaptures(NbGraderPreprocessor):
    """Judge each test cell's captured cases against the references, in the grader's process."""

    references_root = Unicode("solutions", help="folder holding <assignment>/references/").tag(
        config=True
    )
    forbidden_modules = List(
        ["seqmodels.ngram", "seqmodels.metrics", "seqmodels.feedforward", "seqmodels.train"],
        help="course modules whose code a graded function must not use",
    ).tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        info = resources["nbgrader"]
        directory = Path(self.references_root) / info["assignment"] / "references"
        refs, manifest = references.load(directory, info["notebook"])
        by_cell = {task["cell"]: (name, task) for name, task in manifest["tasks"].items()}
        answers = [c.source for c in nb.cells if c.cell_type == "code" and is_solution(c)]
        others = [
            c.source for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader")
        ]
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if cell.cell_type != "code" or not is_grade(cell) or grade_id not in by_cell:
                continue
            name, task = by_cell[grade_id]
            records = list(references.captures(cell))
            latest = {
                r["case"]: r for r in records if r.get("task") == name and r["kind"] == "case"
            }
            verdicts = [judge(case, latest.get(case), refs[name][case]) for case in task["cases"]]
            origins = next((r.get("origins", {}) for r in records if r["kind"] == "start"), {})
            flags = self._flags(task["functions"], origins, answers + others)
            points = (
                0.0 if flags else task["points"] * sum(v.passed for v in verdicts) / len(verdicts)
            )
            self._write(cell, name, verdicts, flags, round(points, 4), task["points"])
            cell.source = strip_hidden_tests(cell.source)
        return nb, resources

    def _flags(
        self, functions: list[str], origins: dict[str, str], sources: list[str]
    ) -> list[str]:
        flags = []
        for fn in functions:
            origin = origins.get(fn, "undefined")
            module = origin.split(":", 1)[0]
            if module.startswith("seqmodels"):
                flags.append(f"`{fn}` is the course library's `{module}` implementation, not yours")
            defining = [s for s in sources if fn in _defined_functions(s)]
            for source in defining:
                for used in _forbidden_uses(source, list(self.forbidden_modules)):
                    flags.append(f"`{fn}` uses `{used}` from the course library")
        return sorted(set(flags))

    @staticmethod
    def _write(cell, task, verdicts: list[Verdict], flags, points: float, max_points) -> None:
        kept = [
            o
            for o in cell.outputs
            if o.get("output_type") == "stream"
            and o.get("name") == "stdout"
            or o.get("output_type") == "error"
        ]
        lines = [
            f"**{task}: {points:g} of {max_points:g} points** "
            f"({sum(v.passed for v in verdicts)} of {len(verdicts)} cases passed)",
            "",
        ]
        if flags:
            lines += [
                "No points for this task: " + "; ".join(flags) + ". Graded functions "
                "must be your own code.",
                "",
            ]
        lines += ["| case | result | details |", "|---|---|---|"]
        for v in verdicts:
            case, detail = _markdown_cell(v.case), _markdown_cell(v.message)
            lines.append(f"| {case} | {'pass' if v.passed else 'FAIL'} | {detail} |")
        text = "\n".join(lines)
        verdict = new_output("display_data", data={"text/markdown": text, "text/plain": text})
        # nbgrader reads partial credit from an execute_result holding a number
        score = new_output(
            "execute_result",
            data={"text/plain": repr(float(points))},
            execution_count=cell.get("execution_count"),
        )
        errors = [o for o in kept if o.get("output_type") == "error"]
        cell.outputs = [o for o in kept if o not in errors][-3:] + [verdict, score]
