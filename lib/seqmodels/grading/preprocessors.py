"""nbgrader preprocessors that make ``nbgrader autograde`` judge outside the student's kernel.

Configured in the course's ``nbgrader_config.py``:

- `SanitizeSubmission` (before nbgrader's `OverwriteCells`, which restores test cells from the
  gradebook and re-adds deleted ones): nbgrader metadata naming no cell of the assignment is
  dropped, a duplicated answer cell is graded from its last copy (the one the student finished),
  duplicated test cells are removed, and tags that change execution (``skip-execution``,
  ``raises-exception``) are cleared. No student cell is removed for what it says.
- `GuardedExecute` (in place of nbgrader's `Execute`): each kernel in a bubblewrap sandbox
  (`seqmodels.grading.sandbox`), a per-cell timeout, a whole-notebook budget, caps on every kind
  of output per cell and per notebook, and a kernel that dies ends the run cleanly: the cells
  before keep their results, the rest are marked "not run".
- `JudgeCaptures` (right after execution): compares every captured case with the stored (and
  hash-checked) references in this process, flags graded functions taken from the course library
  (or using what their task forbids, e.g. autograd where a gradient is to be derived by hand),
  writes the verdicts into the test cell's output (with the points as nbgrader's partial credit),
  removes the hidden tests' source, and leaves in the notebook no output the student's code
  produced: feedback shows the grader's words only.
"""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbformat.v4 import new_output
from nbgrader.api import Gradebook
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution
from traitlets import Bool, Enum, Float, Integer, List, Unicode

from . import references
from .compare import Verdict, exception_name, judge
from .sandbox import CappedKernelClient, CappedKernelManager, Sandbox, SandboxedKernelManager

EXECUTION_TAGS = {"skip-execution", "raises-exception", "skip", "remove-cell"}
HIDDEN = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
GRADER = "seqmodels_grader"  # output metadata key marking what the grader wrote
#: Ways to reach a forbidden function by a name built at run time (``importlib.import_module("rapid"
#: + "fuzz")``, ``F.__dict__["scaled_dot_" + ...]``): forbidden with it in every task that forbids
#: anything, whatever its own list says, since no static reading of the code can follow them.
DYNAMIC_LOOKUPS = (
    "getattr",
    "eval",
    "exec",
    "__import__",
    "globals",
    "vars",
    "importlib",
    "__dict__",
    "__getattribute__",
    "__builtins__",
    "sys.modules",
    "attrgetter",
    "methodcaller",
    "inspect",
    "runpy",
    "pkgutil",
    "__spec__",
    "__loader__",
    "__subclasses__",
    "__bases__",
    "__mro__",
    "gc",
    "torch._*",
)
#: ``torch._*`` in a forbidden list stands for torch's private API: any name reached through torch
#: with a part that starts with one underscore (``torch._C``, ``torch._VF``,
#: ``torch._scaled_dot_product_attention_math``, which returns attention's context *and* weights,
#: ``torch.nn.functional._canonical_mask``). No task needs it, and it holds the kernels behind
#: every public function a task forbids.
PRIVATE_SUFFIX = "._*"


def grader_note(text: str) -> NotebookNode:
    """An output written by the grader (kept in feedback, unlike the student's outputs)."""
    return new_output("display_data", data={"text/plain": text}, metadata={GRADER: True})


def _markdown_cell(text: str) -> str:
    """`text` safe inside a Markdown table cell (no HTML, no column breaks)."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\n", " ")


class SanitizeSubmission(NbGraderPreprocessor):
    """Make the submission's structure the assignment's, whatever the student did to it.

    Runs before nbgrader's `DeduplicateIds` and `OverwriteCells`: nbgrader metadata naming no cell
    of the assignment is dropped (the cell becomes an ordinary student cell); of a duplicated
    answer cell the last copy keeps the metadata and is graded, earlier copies stay as ordinary
    cells; a duplicated test or read-only cell keeps its first copy (`OverwriteCells` restores its
    source); tags that change execution are cleared.
    """

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gradebook:
            notebook = gradebook.find_notebook(info["notebook"], info["assignment"])
            known = {cell.name for cell in notebook.source_cells}
        last_answer = {}
        for index, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            if "nbgrader" in cell.metadata and meta.get("grade_id") not in known:
                del cell.metadata["nbgrader"]  # not a cell of this assignment
            elif meta.get("solution"):
                last_answer[meta["grade_id"]] = index
        seen: set[str] = set()
        kept = []
        for index, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            grade_id = meta.get("grade_id")
            if meta.get("solution") and last_answer.get(grade_id) != index:
                del cell.metadata["nbgrader"]  # an earlier copy of an answer: an ordinary cell
            elif grade_id in seen:
                continue  # a duplicated test or read-only cell
            elif grade_id:
                seen.add(grade_id)
            tags = cell.metadata.get("tags")
            if tags:
                cell.metadata["tags"] = [t for t in tags if t not in EXECUTION_TAGS]
            cell.metadata.pop("execution", None)
            kept.append(cell)
        nb.cells = kept
        return nb, resources


def _size(content: dict) -> int:
    """Bytes an output message adds to the notebook (text and every MIME bundle entry)."""
    total = len(content.get("text", "")) + len(content.get("evalue", ""))
    total += sum(len(line) for line in content.get("traceback", []))
    for value in (content.get("data") or {}).values():
        total += len(value) if isinstance(value, str) else len(json.dumps(value))
    return total


class GuardedExecute(Execute):
    """nbgrader's `Execute` with a sandboxed kernel, budgets, output caps and survival of a dead kernel."""

    timeout = Integer(30, help="seconds one cell may run").tag(config=True)
    notebook_budget = Integer(180, help="seconds the whole notebook may run").tag(config=True)
    sandbox = Enum(
        ["bubblewrap", "none"],
        default_value="bubblewrap",
        help="'bubblewrap': every kernel in a sandbox; 'none' (unsafe): the grader's own rights",
    ).tag(config=True)
    memory_limit_mb = Integer(4096, help="memory of the whole sandbox, MiB").tag(config=True)
    max_processes = Integer(256, help="processes and threads in the sandbox").tag(config=True)
    cpu_cores = Float(1.0, help="CPU cores the sandbox may use at once").tag(config=True)
    scratch_mb = Integer(256, help="size of the kernel's scratch home folder, MiB").tag(config=True)
    hidden_modules = List(
        Sandbox().hidden_modules, help="course modules absent from the kernel (graded functions)"
    ).tag(config=True)
    max_cell_output_bytes = Integer(1_000_000, help="output bytes kept per cell").tag(config=True)
    max_notebook_output_bytes = Integer(8_000_000, help="output bytes kept in all").tag(config=True)
    # an output message that ZMQ dropped (over CappedKernelClient.max_message_bytes) takes the
    # cell's "idle" status with it: the cell is then finished, not stuck
    raise_on_iopub_timeout = Bool(False).tag(config=True)

    def _limits(self) -> Sandbox:
        return Sandbox(
            memory_mb=self.memory_limit_mb,
            max_processes=self.max_processes,
            cpu_cores=self.cpu_cores,
            cpu_seconds=max(self.notebook_budget, self.timeout) * 2,
            scratch_mb=self.scratch_mb,
            hidden_modules=list(self.hidden_modules),
        )

    def create_kernel_manager(self):
        self.kernel_manager_class = (
            SandboxedKernelManager if self.sandbox == "bubblewrap" else CappedKernelManager
        )
        km = super().create_kernel_manager()
        km.sandbox = km.limits = self._limits()
        return km

    def preprocess(self, nb: NotebookNode, resources: dict, km=None):
        limits = self._limits()
        if self.sandbox == "bubblewrap":
            self.log.info("kernel in a bubblewrap sandbox; %s", limits.describe())
        else:
            self.log.warning("UNSAFE: kernel NOT sandboxed (sandbox = 'none'); rlimits only")
        self._deadline = time.monotonic() + self.notebook_budget
        self._stopped: str | None = None
        self._bytes: dict[int, int] = {}
        self._total = 0
        self._capped: set[int] = set()
        self._idle: set[int] = set()
        try:
            return super().preprocess(nb, resources, km)
        except DeadKernelError:  # the kernel died outside a cell (e.g. at shutdown)
            return nb, resources

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int):
        if cell.cell_type != "code":
            return cell, resources
        if self._stopped is None and time.monotonic() >= self._deadline:
            self._stopped = f"the notebook's time budget ({self.notebook_budget} s) ran out"
        if self._stopped:
            cell.outputs = [grader_note(f"[not run: {self._stopped}]\n")]
            return cell, resources
        try:
            result = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._stopped = "the kernel died in an earlier cell"
            cell.outputs.append(
                grader_note(
                    "[the kernel died while running this cell (os._exit, a crash, or running "
                    "out of memory); later cells were not run]\n"
                )
            )
        except CellTimeoutError:
            self._stopped = "a cell ran past its time limit and the kernel did not recover"
            cell.outputs.append(grader_note(f"[this cell ran longer than {self.timeout} s]\n"))
        else:
            if any(o.get("ename") == "CellTimeoutError" for o in cell.outputs):
                cell.outputs.append(grader_note(f"[this cell ran longer than {self.timeout} s]\n"))
            elif index not in self._idle:
                cell.outputs.append(
                    grader_note(
                        "[output truncated: some of this cell's output never reached the grader "
                        f"(a message over {CappedKernelClient.max_message_bytes // 2**20} MB is "
                        "dropped)]\n"
                    )
                )
            return result
        return cell, resources

    def process_message(self, msg, cell, cell_index):
        content = msg.get("content", {})
        if msg.get("msg_type") == "status" and content.get("execution_state") == "idle":
            self._idle.add(cell_index)
        return super().process_message(msg, cell, cell_index)

    def handle_comm_msg(self, outs, msg, cell_index) -> None:
        """Widget messages are dropped: nothing is graded from them, and kept state could grow."""

    def _update_display_id(self, display_id, msg) -> None:
        """Display updates are dropped: they could replace a capped output with a larger one."""

    def output(self, outs, msg, display_id, cell_index):
        """Keep an output only while the cell and the notebook are under their caps."""
        size = _size(msg.get("content", {}))
        used = self._bytes.get(cell_index, 0)
        if (
            used + size > self.max_cell_output_bytes
            or self._total + size > self.max_notebook_output_bytes
        ):
            if cell_index not in self._capped:
                self._capped.add(cell_index)
                outs.append(
                    grader_note(
                        f"[output truncated: a cell may keep {self.max_cell_output_bytes:,} "
                        f"bytes of output, the notebook {self.max_notebook_output_bytes:,}]\n"
                    )
                )
            return None
        self._bytes[cell_index] = used + size
        self._total += size
        return super().output(outs, msg, display_id, cell_index)


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain over a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _aliases(source: str) -> dict[str, str]:
    """What the cell's import aliases and plain aliases stand for: ``import torch as T`` gives
    ``{"T": "torch"}``, ``from torch import func`` ``{"func": "torch.func"}``, ``F = torch.func``
    ``{"F": "torch.func"}``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update({a.asname: a.name for a in node.names if a.asname})
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Assign) and (name := _dotted(node.value)) is not None:
            out.update({t.id: name for t in node.targets if isinstance(t, ast.Name)})
    return out


def _canonical(name: str, aliases: dict[str, str]) -> str:
    """`name` with its first part replaced by what that alias stands for, repeatedly."""
    for _ in range(8):
        head, _, rest = name.partition(".")
        if head not in aliases or aliases[head].split(".")[0] == head:
            return aliases.get(head, head) + (f".{rest}" if rest else "")
        name = aliases[head] + (f".{rest}" if rest else "")
    return name


def _forbidden_names(
    source: str, forbidden: list[str], aliases: dict[str, str] | None = None
) -> list[str]:
    """Which of `forbidden` `source` uses: a dotted entry as an import or an attribute path
    (``torch.autograd`` matches ``import torch.autograd``, ``from torch import autograd`` and
    ``torch.autograd.grad``, also through aliases: ``import torch as T; T.autograd``), a plain
    entry as any identifier, attribute or imported name. `aliases` adds those of other cells.
    Words in strings and comments do not count; this detects, it cannot prove absence."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    aliases = {**(aliases or {}), **_aliases(source)}
    dotted: set[str] = set()
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                dotted.add(alias.name)
                words.update(alias.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                dotted.update({node.module, f"{node.module}.{alias.name}"})
                words.update([*node.module.split("."), alias.name])
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
            if (name := _dotted(node)) is not None:
                dotted.update({name, _canonical(name, aliases)})
        elif isinstance(node, ast.Name):
            words.add(node.id)
            dotted.add(_canonical(node.id, aliases))
    found = set()
    for entry in forbidden:
        if entry.endswith(PRIVATE_SUFFIX):
            root = entry.removesuffix(PRIVATE_SUFFIX)
            found.update(
                d
                for d in dotted
                if d.startswith(root + ".")
                and any(p.startswith("_") and not p.startswith("__") for p in d.split(".")[1:])
            )
        elif "." in entry:
            if any(d == entry or d.startswith(entry + ".") for d in dotted):
                found.add(entry)
        elif entry in words:
            found.add(entry)
    return sorted(found)


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names the cell binds at its top level, names it reads but never binds anywhere).

    Top-level bindings are definitions, assignments and ``import ... as``/``from ... import``;
    a plain ``import torch`` is left out, so a scratch cell that imports torch is not taken for a
    helper of every cell that uses torch."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), set()
    top: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            top.add(stmt.name)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            top.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(stmt, ast.Import):
            top.update(a.asname for a in stmt.names if a.asname)
        elif isinstance(stmt, ast.ImportFrom):
            top.update(a.asname or a.name for a in stmt.names)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return top, read - bound


def _with_helpers(defining: list[str], sources: list[str]) -> list[str]:
    """`defining` and, transitively, every cell in `sources` that binds a name they read freely
    (a helper function, or an alias such as ``g = torch.func.grad``, defined in another cell)."""
    names = {s: _names(s) for s in [*sources, *defining]}
    found, queue = list(defining), list(defining)
    while queue:
        free = names[queue.pop()][1]
        for source in sources:
            if source not in found and names[source][0] & free:
                found.append(source)
                queue.append(source)
    return found


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
            if cell.cell_type != "code":
                continue
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if not is_grade(cell) or grade_id not in by_cell:
                cell.outputs = _grader_view(cell.outputs)
                continue
            name, task = by_cell[grade_id]
            records = list(references.captures(cell))
            latest = {
                r["case"]: r
                for r in records
                if r.get("task") == name
                and r.get("kind") == "case"
                and isinstance(r.get("case"), str)
            }
            verdicts = [judge(case, latest.get(case), refs[name][case]) for case in task["cases"]]
            origins = next((r.get("origins") for r in records if r.get("kind") == "start"), {})
            origins = (
                {str(k): str(v) for k, v in origins.items()} if isinstance(origins, dict) else {}
            )
            flags = self._flags(
                task["functions"], origins, answers + others, task.get("forbidden", [])
            )
            points = (
                0.0 if flags else task["points"] * sum(v.passed for v in verdicts) / len(verdicts)
            )
            self._write(cell, name, verdicts, flags, round(points, 4), task["points"])
            cell.source = strip_hidden_tests(cell.source)
        return nb, resources

    def _flags(
        self,
        functions: list[str],
        origins: dict[str, str],
        sources: list[str],
        forbidden: list[str] = (),
    ) -> list[str]:
        flags = []
        for fn in functions:
            origin = origins.get(fn, "undefined")
            module = origin.split(":", 1)[0]
            if module.startswith("seqmodels"):
                flags.append(f"`{fn}` is the course library's `{module}` implementation, not yours")
            defining = [s for s in sources if fn in _defined_functions(s)]
            for source in defining:
                for used in _forbidden_names(source, list(self.forbidden_modules)):
                    flags.append(f"`{fn}` uses `{used}` from the course library")
            read = _with_helpers(defining, sources) if forbidden else []
            aliases = {k: v for source in read for k, v in _aliases(source).items()}
            for source in read:
                for used in _forbidden_names(source, [*forbidden, *DYNAMIC_LOOKUPS], aliases):
                    flags.append(f"`{fn}` uses `{used}`, which this task forbids")
        return sorted(set(flags))

    @staticmethod
    def _write(cell, task, verdicts: list[Verdict], flags, points: float, max_points) -> None:
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
        verdict = new_output(
            "display_data",
            data={"text/markdown": text, "text/plain": text},
            metadata={GRADER: True},
        )
        # nbgrader reads partial credit from an execute_result holding a number
        score = new_output(
            "execute_result",
            data={"text/plain": repr(float(points))},
            execution_count=cell.get("execution_count"),
        )
        notes = [o for o in cell.outputs if o.get("metadata", {}).get(GRADER)]
        cell.outputs = [*notes, verdict, score]


def _grader_view(outputs: list) -> list:
    """A student cell's outputs as feedback shows them: the grader's notes, and errors by name.

    Whatever the student's code printed or displayed (which could carry hidden test inputs or
    test source) stays out of the feedback; the student sees it by running the notebook.
    """
    kept = []
    for output in outputs:
        if output.get("metadata", {}).get(GRADER):
            kept.append(output)
        elif output.get("output_type") == "error":
            kept.append(
                grader_note(
                    f"[this cell raised {exception_name(str(output.get('ename', '')))}; run it "
                    "in your notebook to see the message]\n"
                )
            )
    return kept
