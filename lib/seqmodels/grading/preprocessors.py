"""nbgrader preprocessors that make ``nbgrader autograde`` judge outside the student's kernel.

The design: **the kernel's output is data, never control.** Everything the kernel emits is read as
untrusted data (`seqmodels.grading.records`); the grader keeps its own notes, verdicts and scores in
its own memory (nbconvert's ``resources``, under `STATE`), never in the notebook where a kernel
could forge them, and it alone writes the graded notebook's outputs and the gradebook's scores.

Configured in the course's ``nbgrader_config.py``:

- `SanitizeSubmission` (before nbgrader's `OverwriteCells`, which restores test cells from the
  gradebook and re-adds deleted ones): nbgrader metadata naming no cell of the assignment is
  dropped, a duplicated answer cell is graded from its last copy (the one the student finished),
  duplicated test cells are removed, and tags that change execution (``skip-execution``,
  ``raises-exception``) are cleared. No student cell is removed for what it says.
- `GuardedExecute` (in place of nbgrader's `Execute`): each kernel in a bubblewrap sandbox
  (`seqmodels.grading.sandbox`), a per-cell timeout, a whole-notebook budget, caps on every kind
  of output per cell and per notebook, and a kernel that dies ends the run cleanly: the cells
  before keep their results, the rest are marked "not run" (notes kept by the grader, per cell).
- `JudgeCaptures` (right after execution): reads each test cell's valid capture records, compares
  them with the stored (hash-checked) references in this process, checks each traced graded call
  against the task's rules (`seqmodels.grading.rules`), then replaces **every** code cell's outputs
  by the grader's own: its notes, the names of built-in exceptions raised, and for test cells the
  verdicts. A task whose rule may be broken is held for the instructor's review, with the evidence
  in an output only instructors see (`FeedbackForStudents` removes it).
- `SaveVerdicts` (in place of nbgrader's `SaveAutoGrades`): writes each test cell's score into the
  gradebook from the grader's verdicts (``Grade.auto_score``), never from the notebook's outputs;
  a task held for review gets 0 and nbgrader's ``needs_manual_grade``, so formgrader lists it.
- `StudentTextAsText` (last): markdown and raw cells the student wrote are shown as plain text, and
  attachments dropped, so no student HTML, script or SVG is rendered for whoever opens the graded
  notebook or the feedback; a written answer (a Markdown answer cell) is sanitized HTML whose math
  MathJax typesets in safe mode (`seqmodels.grading.math_pages`).
- `FeedbackForStudents` (in ``generate_feedback``): drops the instructors' evidence; its pages
  come from `FeedbackExporter` (nbconvert's HTML exporter, templates compiled once per process).
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from bs4 import BeautifulSoup
from jinja2 import BytecodeCache
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_output
from nbgrader.api import Gradebook
from nbgrader.preprocessors import Execute, NbGraderPreprocessor, OverwriteCells, SaveAutoGrades
from nbgrader.utils import is_grade, is_locked, is_solution
from traitlets import Bool, Enum, Float, Integer, List, Unicode

from ..execution_client import SlicedWaits
from . import references, trace_window
from .math_pages import student_answer_html
from .rules import RULES, Rule
from .sandbox import CappedKernelManager, Sandbox, SandboxedKernelManager
from .static_reading import evidence

if TYPE_CHECKING:
    from .compare import Verdict

# `compare` and `records` (and torch with them) are imported where captures are judged: the
# grading driver loads this module with the course's nbgrader configuration, and never judges

EXECUTION_TAGS = {"skip-execution", "raises-exception", "skip", "remove-cell"}
HIDDEN = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
STATE = "seqmodels"  # the grader's own state in nbconvert's resources (never in the notebook)
AUDIENCE = "seqmodels_audience"  # output metadata the grader sets: "instructor" = evidence


def state(resources: dict) -> dict:
    """The grader's notes, scores and reviews for the notebook being graded (in `resources`)."""
    return resources.setdefault(STATE, {"notes": {}, "scores": {}})


def note(resources: dict, index: int, text: str) -> None:
    """Remember a grader's note on code cell `index`; `JudgeCaptures` writes it into the cell."""
    state(resources)["notes"].setdefault(index, []).append(text)


def grader_output(text: str, audience: str = "everyone") -> NotebookNode:
    """An output written by the grader: `text` escaped into HTML, and as plain text."""
    return new_output(
        "display_data",
        data={"text/html": f"<pre>{html.escape(text)}</pre>", "text/plain": text},
        metadata={AUDIENCE: audience},
    )


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


class OverwriteCellsInOrder(OverwriteCells):
    """nbgrader's `OverwriteCells`, re-adding a deleted grade cell right after the nearest earlier
    cell of the assignment that the submission still has. nbgrader's own looks one cell back only,
    among answer and test cells, and fails with a `KeyError` (the notebook is not graded) when that
    cell is a read-only one: a test cell under its instructions, a written answer under its
    question."""

    def add_missing_grade_cells(self, nb: NotebookNode, resources: dict):
        source = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source.source_cells]
        solutions = {cell.name for cell in source.solution_cells}
        for grade_cell in source.grade_cells:
            present = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
            if grade_cell.name in present:
                continue
            self.log.warning(
                "Missing grade cell %s encountered, adding to notebook", grade_cell.name
            )
            at = order.index(grade_cell.name)
            cell = self.missing_cell_transform(
                source.source_cells[at], grade_cell.max_score, grade_cell.name in solutions
            )
            earlier = (present.index(name) for name in reversed(order[:at]) if name in present)
            nb.cells.insert(next(earlier, -1) + 1, NotebookNode(cell))
        return nb, resources


def stored_manifest(references_root: str, resources: dict) -> dict:
    """The references' manifest of the notebook being graded ({} if there is none: JudgeCaptures
    then says so)."""
    info = resources.get("nbgrader", {})
    try:
        folder = Path(references_root) / info["assignment"] / "references"
        return references.verify(folder, info["notebook"])
    except (KeyError, OSError, ValueError, RuntimeError):
        return {}


def hidden_packages(manifest: dict) -> list[str]:
    """The third-party modules absent from this notebook's sandbox: those its tasks' rules name,
    and the held-out text of its training tasks (`seqmodels.grading.heldout`)."""
    from .heldout import HIDDEN_PACKAGES

    tasks = manifest.get("tasks", {}).values()
    names = {n for task in tasks for n in task.get("forbidden", [])}
    modules = {m for n in names if n in RULES for m in RULES[n].modules}
    for task in tasks:
        modules.update(HIDDEN_PACKAGES.get(task.get("training", {}).get("heldout"), []))
    return sorted(modules)


def replaced_files(manifest: dict) -> list[tuple[str, str]]:
    """The files of third-party packages this notebook's sandbox sees replaced: those its training
    tasks' held-out sets hide (`seqmodels.grading.heldout.HIDDEN_FILES`), staged once per process
    in a folder of its own (readable by the sandbox's uid)."""
    import tempfile

    from .heldout import HIDDEN_FILES, hidden_files

    tasks = manifest.get("tasks", {}).values()
    sets = [t.get("training", {}).get("heldout") for t in tasks]
    sets = [s for s in sets if s in HIDDEN_FILES]
    if not sets:
        return []
    if "folder" not in _STAGING:
        _STAGING["folder"] = tempfile.mkdtemp(prefix="seqmodels-replaced-")
        os.chmod(_STAGING["folder"], 0o755)
    return hidden_files(sets, _STAGING["folder"])


_STAGING: dict[str, str] = {}


def rule_cells(manifest: dict) -> dict[str, str]:
    """Test cell → task, of the tasks that forbid tools (each runs inside a trace window)."""
    tasks = manifest.get("tasks", {})
    return {t["cell"]: name for name, t in tasks.items() if t.get("forbidden")}


def training_cells(manifest: dict) -> dict[str, str]:
    """Test cell → task, of the training tasks (each followed by the grader's evaluation request)."""
    tasks = manifest.get("tasks", {})
    return {t["cell"]: name for name, t in tasks.items() if t.get("training")}


def _size(content: dict) -> int:
    """Bytes an output message adds to the notebook (text and every MIME bundle entry)."""
    total = len(content.get("text", "")) + len(content.get("evalue", ""))
    total += sum(len(line) for line in content.get("traceback", []))
    for value in (content.get("data") or {}).values():
        total += len(value) if isinstance(value, str) else len(json.dumps(value))
    return total


def traffic_notes(traffic, relay) -> list[str]:
    """The grader's notes on what the relay discarded of one cell's messages (`CellTraffic`)."""
    notes = []
    if traffic.oversize:
        notes.append(
            f"[output truncated: {traffic.oversize} message(s) from the kernel over "
            f"{relay.max_message // 2**20} MB each were discarded unread]"
        )
    if traffic.over_budget:
        notes.append(
            f"[output truncated: this cell's messages reached {relay.max_cell // 2**20} MB; "
            f"{traffic.over_budget} more were discarded unread]"
        )
    if traffic.garbled:
        notes.append("[a connection to the kernel was closed: it did not speak ZMTP 3]")
    if traffic.changed:
        notes.append(
            f"[the kernel replaced its socket files ({', '.join(sorted(traffic.changed))}) "
            "during this cell: the grader kept the sockets it had found, and what the kernel "
            "answered through them before still counts]"
        )
    return notes


class GuardedExecute(SlicedWaits, Execute):
    """nbgrader's `Execute` with a sandboxed kernel, budgets, output caps and survival of a dead kernel."""

    timeout = Integer(
        30, help="seconds one cell may run (at least; a cell gets `time_factor` × the solution's)"
    ).tag(config=True)
    notebook_budget = Integer(
        180, help="seconds the whole notebook may run (at least; `time_factor` × the solution's)"
    ).tag(config=True)
    time_factor = Float(
        3.0,
        help="a cell (and the notebook) may run this many times the solution's time. The "
        "solution is timed by `make assignments` on the instructor's machine; the sandbox gives "
        "a kernel one core, on whatever machine grades: on an AMD EPYC worker PS2's training "
        "cell ran in about twice its reference time, so twice left no margin",
    ).tag(config=True)
    profile = Enum(
        ["full", "smoke"],
        default_value="full",
        help="'full': every test cell; 'smoke' (for testing the grader): training tasks' test cells "
        "are not run, and earn nothing",
    ).tag(config=True)
    sandbox = Enum(
        ["bubblewrap", "none"],
        default_value="bubblewrap",
        help="'bubblewrap': every kernel in a sandbox; 'none' (unsafe): the grader's own rights",
    ).tag(config=True)
    memory_limit_mb = Integer(4096, help="memory of the whole sandbox, MiB").tag(config=True)
    max_processes = Integer(64, help="processes and threads in the sandbox").tag(config=True)
    open_files = Integer(256, help="open files per process in the sandbox").tag(config=True)
    cpu_cores = Float(1.0, help="CPU cores the sandbox may use at once").tag(config=True)
    scratch_mb = Integer(256, help="size of the kernel's scratch home folder, MiB").tag(config=True)
    warm_kernels = Bool(
        True,
        help="fork each sandboxed kernel from a zygote with ipykernel and torch imported "
        "(seqmodels.grading.kernel_forks); False: start each one cold",
    ).tag(config=True)
    hidden_modules = List(
        Sandbox().hidden_modules, help="course modules absent from the kernel (graded functions)"
    ).tag(config=True)
    references_root = Unicode("solutions", help="folder holding <assignment>/references/").tag(
        config=True
    )
    max_cell_output_bytes = Integer(1_000_000, help="output bytes kept per cell").tag(config=True)
    max_notebook_output_bytes = Integer(8_000_000, help="output bytes kept in all").tag(config=True)
    # an output message that never arrived (a sandboxed kernel's replaced socket, an unsandboxed
    # one's message over CappedKernelClient.max_message_bytes) may take the cell's "idle" status
    # with it: the cell is then finished, not stuck
    raise_on_iopub_timeout = Bool(False).tag(config=True)

    def _limits(self) -> Sandbox:
        return Sandbox(
            memory_mb=self.memory_limit_mb,
            max_processes=self.max_processes,
            open_files=self.open_files,
            cpu_cores=self.cpu_cores,
            cpu_seconds=max(self.notebook_budget, self.timeout) * 2,
            scratch_mb=self.scratch_mb,
            hidden_modules=list(self.hidden_modules),
            hidden_packages=list(getattr(self, "_hidden_packages", [])),
            replaced_files=list(getattr(self, "_replaced_files", [])),
        )

    def create_kernel_manager(self):
        self.kernel_manager_class = (
            SandboxedKernelManager if self.sandbox == "bubblewrap" else CappedKernelManager
        )
        km = super().create_kernel_manager()
        km.sandbox = km.limits = self._limits()
        km.warm = self.warm_kernels
        return km

    def preprocess(self, nb: NotebookNode, resources: dict, km=None):
        manifest = stored_manifest(self.references_root, resources)
        self._hidden_packages = hidden_packages(manifest)
        self._replaced_files = replaced_files(manifest)
        self._rule_cells = rule_cells(manifest)
        self._training_cells = training_cells(manifest)
        self._seconds = manifest.get("seconds", {})
        self._windowing = False
        self._windows_opened = 0
        limits = self._limits()
        if self.sandbox == "bubblewrap":
            self.log.info("kernel in a bubblewrap sandbox; %s", limits.describe())
        else:
            self.log.warning("UNSAFE: kernel NOT sandboxed (sandbox = 'none'); rlimits only")
        self._deadline = time.monotonic() + self._budget()
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
            self._stopped = f"the notebook's time budget ({self._budget()} s) ran out"
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if self._stopped:
            cell.outputs = []
            note(resources, index, f"[not run: {self._stopped}]")
            state(resources).setdefault("not_run", set()).add(grade_id)
            return cell, resources
        training = self._training_cells.get(grade_id) if is_grade(cell) else None
        if training and self.profile == "smoke":
            cell.outputs = []
            note(resources, index, "[not run: the grader's smoke profile does not train]")
            return cell, resources
        self._timed_out = False
        relay = getattr(self.km, "relay", None)  # a sandboxed kernel's (`kernel_relay`)
        if relay is not None:
            relay.new_cell()
        try:
            self._trace_window(cell, resources, index, "open")
            super().preprocess_cell(cell, resources, index)
            if training:
                self._evaluation_request(training, resources, index, cell)
            return cell, resources
        except DeadKernelError:
            self._stopped = "the kernel died in an earlier cell"
            note(
                resources,
                index,
                "[the kernel died while running this cell (os._exit, a crash, or running out of "
                "memory); later cells were not run]",
            )
            held = getattr(self.km, "kernel_memory_exceeded", 0)
            if held:
                note(
                    resources,
                    index,
                    f"[the sandbox was stopped: it held {held // 2**20} MB of kernel memory (open "
                    f"files, file mappings, sockets), over its {self.km.kernel_memory_bytes // 2**20} "
                    "MB]",
                )
            resident = getattr(self.km, "resident_memory_exceeded", 0)
            if resident:
                note(
                    resources,
                    index,
                    f"[the sandbox was stopped: its processes held {resident // 2**20} MB of "
                    f"memory, over its {self.memory_limit_mb} MB]",
                )
        except CellTimeoutError:
            self._stopped = "a cell ran past its time limit and the kernel did not recover"
            note(resources, index, f"[this cell ran longer than {self._get_timeout(cell)} s]")
        finally:
            self._trace_window(cell, resources, index, "close")
            if self._timed_out:
                note(resources, index, f"[this cell ran longer than {self._get_timeout(cell)} s]")
            elif index not in self._idle and not self._stopped:
                note(
                    resources,
                    index,
                    "[output truncated: some of this cell's output never reached the grader]",
                )
            if relay is not None:
                for text in traffic_notes(relay.new_cell(), relay):
                    note(resources, index, text)
            if index in self._capped:
                note(
                    resources,
                    index,
                    f"[output truncated: a cell may keep {self.max_cell_output_bytes:,} bytes of "
                    f"output, the notebook {self.max_notebook_output_bytes:,}]",
                )
        return cell, resources

    def _budget(self) -> int:
        """Seconds the notebook may run: `time_factor` × the solution's, and never under
        `notebook_budget`."""
        return max(
            self.notebook_budget, math.ceil(self.time_factor * self._seconds.get("total", 0))
        )

    def _get_timeout(self, cell: NotebookNode | None) -> int | None:
        """Seconds `cell` may run, or None for no limit (nbclient's contract): nbclient's own answer
        (`timeout_func`'s for the cell if one is set, else `timeout`), raised to `time_factor` ×
        the solution's time for the cell."""
        timeout = super()._get_timeout(cell)
        if timeout is None:
            return None
        grade_id = (cell or {}).get("metadata", {}).get("nbgrader", {}).get("grade_id")
        solution = self._seconds.get("cells", {}).get(grade_id, 0) if grade_id else 0
        return max(timeout, math.ceil(self.time_factor * solution))

    def _grader_request(self, source: str, index: int) -> list:
        """Run the grader's own `source` in the kernel, as part of cell `index`; its outputs (kept
        apart from the cell's, each under 16 MB) are returned, [] if the kernel did not answer."""
        request = new_code_cell(source)
        test_cell, self._windowing, timed_out = self.nb.cells[index], True, self._timed_out
        idle = index in self._idle
        try:
            self.execute_cell(request, index, store_history=False)
        except (DeadKernelError, CellTimeoutError):
            pass  # no answer: the judge says so
        finally:
            self.nb.cells[index], self._windowing, self._timed_out = test_cell, False, timed_out
            if not idle:
                self._idle.discard(index)
        return list(request.outputs)

    def _evaluation_request(self, task: str, resources: dict, index: int, cell) -> None:
        """After a training task's test cell: send the held-out contexts, the probe and the last
        batch (`seqmodels.grading.heldout`), and keep the answer for `JudgeCaptures`."""
        from .heldout import HELDOUT, NoRequest, checkpoint_problem, evaluation_request
        from .records import capture_records
        from .training import data_from

        spec = stored_manifest(self.references_root, resources)["tasks"][task]["training"]
        refused = state(resources).setdefault("refused", {})
        if not HELDOUT[spec["heldout"]].trained_here:  # a checkpoint: checked before it is asked
            folder = resources.get("metadata", {}).get("path") or "."
            problem = checkpoint_problem(folder, data_from(spec["data"]))
            if problem:
                refused[task] = problem
                return
        records = list(capture_records(cell.get("outputs", []), task))
        try:
            nonce, source = evaluation_request(task, spec, records)
        except NoRequest as why:
            refused[task] = str(why)
            return
        answer = list(capture_records(self._grader_request(source, index), task))
        state(resources).setdefault("answers", {})[task] = (nonce, answer)

    def _trace_window(self, cell: NotebookNode, resources: dict, index: int, kind: str) -> None:
        """Open ("open") or close ("close") the trace window around a test cell whose task forbids
        tools (`seqmodels.grading.trace_window`): a request of the grader's own, sent to the
        kernel; the closing one's record is kept in the grader's state for `JudgeCaptures`."""
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        task = self._rule_cells.get(grade_id) if is_grade(cell) else None
        if task is None or self._stopped:
            return
        if kind == "open":
            self._nonce = secrets.token_hex(16)
            self._windows_opened += 1
        outputs = self._grader_request(trace_window.request(kind, self._nonce, task), index)
        if kind == "close":
            from .records import window_record

            record = window_record(outputs, task, self._nonce)
            if record is not None and record["opened"] != self._windows_opened:
                why = "the notebook closed the window and opened another itself"
                record = {**record, "intact": False, "disturbed": [why, *record["disturbed"]]}
            state(resources).setdefault("windows", {})[grade_id] = record

    async def _async_handle_timeout(self, timeout: int, cell=None):
        self._timed_out = True  # known here, not from an error name the kernel could send too
        return await super()._async_handle_timeout(timeout, cell)

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
        if self._windowing:  # the grader's own request: its record is kept apart, not in the cell
            return super().output(outs, msg, display_id, cell_index) if size < 2**24 else None
        used = self._bytes.get(cell_index, 0)
        if (
            used + size > self.max_cell_output_bytes
            or self._total + size > self.max_notebook_output_bytes
        ):
            self._capped.add(cell_index)
            return None
        self._bytes[cell_index] = used + size
        self._total += size
        return super().output(outs, msg, display_id, cell_index)


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
    """Judge each test cell's captures and traces in the grader's process; write every output.

    Verdicts and scores go to the grader's state (`state`), which `SaveVerdicts` reads. Every code
    cell's outputs are replaced by the grader's: its notes from execution, the names of built-in
    exceptions the cell raised, and for a test cell the verdict table (hidden tests' source removed).
    """

    references_root = Unicode("solutions", help="folder holding <assignment>/references/").tag(
        config=True
    )
    max_evidence = Integer(12, help="lines of evidence kept per reason for review").tag(config=True)
    max_figures = Integer(
        4, help="PNG figures kept per student code cell (re-encoded by the grader)"
    ).tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        info = resources["nbgrader"]
        directory = Path(self.references_root) / info["assignment"] / "references"
        refs, manifest = references.load(directory, info["notebook"])
        by_cell = {task["cell"]: (name, task) for name, task in manifest["tasks"].items()}
        sources = [c.source for c in nb.cells if c.cell_type == "code" and not is_grade(c)]
        grader = state(resources)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            kernel = list(cell.outputs)
            outputs = [grader_output(text) for text in grader["notes"].get(index, [])]
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if is_grade(cell) and grade_id in by_cell and "training" in by_cell[grade_id][1]:
                name, task = by_cell[grade_id]
                outputs += self._judge_training(grade_id, name, task, kernel, grader)
            elif is_grade(cell) and grade_id in by_cell:
                name, task = by_cell[grade_id]
                outputs += self._judge(grade_id, name, task, refs[name], kernel, sources, grader)
                cell.source = strip_hidden_tests(cell.source)
            elif is_grade(cell):
                grader["scores"][grade_id] = (0.0, True)
                outputs.append(grader_output("[no reference outputs are stored for this cell]"))
            else:
                outputs += _figures(kernel, self.max_figures) + _errors_by_name(kernel)
            cell.outputs = outputs
            count = cell.get("execution_count")
            cell.execution_count = count if type(count) is int else None
        return nb, resources

    def _judge(self, grade_id, name, task, refs, kernel, sources, grader) -> list[NotebookNode]:
        from .compare import Verdict, judge
        from .properties import judge as judge_property
        from .records import capture_records

        records = list(capture_records(kernel, name))
        found: dict[str, list[dict]] = {}
        for record in records:
            if record["kind"] == "case" and "case" in record:
                found.setdefault(record["case"], []).append(record)
        checks = task.get("checks", {})  # cases judged by a property of the captured values
        verdicts = [
            (
                judge_property(
                    case, found[case][0] if case in found else None, refs[case], checks[case]
                )
                if case in checks
                else judge(case, found[case][0] if case in found else None, refs[case])
            )
            if len(found.get(case, [])) < 2
            else Verdict(case, False, "captured more than once, so none of the captures counts")
            for case in task["cases"]
        ]
        window = grader.get("windows", {}).get(grade_id)
        # a test cell the grader never ran (the kernel died, or the time ran out, before it) earns
        # nothing, and has no trace window to hold it for review
        never_ran = grade_id in grader.get("not_run", set())
        reasons = [] if never_ran else self._reasons(task, records, window)
        passed = sum(v.passed for v in verdicts)
        points = 0.0 if reasons else round(task["points"] * passed / len(verdicts), 4)
        grader["scores"][grade_id] = (points, bool(reasons))
        grader.setdefault("all_passed", {})[name] = passed == len(verdicts) and not reasons
        outputs = [_verdict_output(name, verdicts, points, task["points"], bool(reasons))]
        if reasons:
            words = [w for rule in self._rules(task) for w in rule.names]
            support = evidence(task["functions"], sources, words)
            text = "\n".join(
                [
                    f"For the instructor: {name} is held for review. Why:",
                    *(f"- {r}" for r in reasons),
                    "Supporting evidence from reading the code (names alone never flag):",
                    *(f"- {e}" for e in support[: self.max_evidence] or ["none"]),
                    "Clear it in formgrader: give this cell a manual score (the cases above "
                    f"earned {task['points'] * passed / len(verdicts):g} of {task['points']:g}).",
                ]
            )
            outputs.append(grader_output(text, audience="instructor"))
        return outputs

    def _judge_training(self, grade_id, name, task, kernel, grader) -> list[NotebookNode]:
        """A training task: its tiers, paid from the curve its test cell captured and the answer to
        the grader's evaluation request (`seqmodels.grading.heldout`)."""
        from .compare import decode
        from .heldout import judge, pay
        from .records import capture_records

        records = list(capture_records(kernel, name))
        curve = None
        for record in records:
            if record["kind"] == "curve" and "data" in record and curve is None:
                try:
                    curve = decode(str(record["data"])).get("losses")
                except Exception:  # noqa: BLE001 - an unreadable curve is no curve
                    curve = None
        spec = task["training"]
        nonce, answer = grader.get("answers", {}).get(name, ("", []))
        required = all(grader.get("all_passed", {}).get(t, False) for t in spec["requires"])
        refused = grader.get("refused", {}).get(name)
        if refused:  # no request was sent (a checkpoint over the cap, no tokenizer): say why
            outcome = pay(spec, task["reference"], refused, required)
        else:  # the answer's rows, and the test cell's tokenizer (a capstone's merges)
            own = [r for r in records if r["kind"] == "tokenizer"]
            outcome = judge(spec, task["reference"], curve, [*own, *answer], nonce, required)
        reasons = self._reasons(task, records, None)
        points = 0.0 if reasons else round(outcome.points, 4)
        grader["scores"][grade_id] = (points, bool(reasons))
        verdicts = [_Line(text, ok, detail) for text, ok, detail in outcome.lines]
        outputs = [_verdict_output(name, verdicts, points, task["points"], bool(reasons), "check")]
        if reasons:
            text = "\n".join(
                [
                    f"For the instructor: {name} is held for review. Why:",
                    *(f"- {r}" for r in reasons),
                ]
            )
            outputs.append(grader_output(text, audience="instructor"))
        return outputs

    @staticmethod
    def _rules(task: dict) -> list[Rule]:
        return [RULES[n] for n in task.get("forbidden", []) if n in RULES]

    def _reasons(self, task: dict, records: list[dict], window: dict | None) -> list[str]:
        """Why the task may break its rules (empty: it does not, as far as the grader can tell).
        `window` is the record of the trace window around its test cell (None: none came back)."""
        reasons = []
        start = next((r for r in records if r["kind"] == "start"), {})
        for fn, origin in sorted(start.get("origins", {}).items()):
            if fn in task["functions"] and origin.split(":", 1)[0].startswith("seqmodels"):
                module = origin.split(":", 1)[0]
                reasons.append(f"`{fn}` is the course library's `{module}`, not the student's own")
        rules = self._rules(task)
        if rules:
            reasons += trace_window.reasons(window, rules, self.max_evidence)
        return reasons


VERDICT_STYLE = ".seqmodels-verdicts :is(td, th) { padding: 2px 16px 2px 0; text-align: left }"


class _Line(NamedTuple):
    """One row of a training task's table: a tier or a gate, in `Verdict`'s shape."""

    case: str
    passed: bool
    message: str


def _verdict_output(
    task, verdicts: list[Verdict], points, max_points, review: bool, noun: str = "case"
) -> NotebookNode:
    """The verdict table of one test cell, as escaped HTML and as plain text."""
    passed = sum(v.passed for v in verdicts)
    head = (
        f"{task}: {points:g} of {max_points:g} points ({passed} of {len(verdicts)} {noun}s passed)"
    )
    held = (
        "Held for your instructor's review: a rule of this task (a tool it forbids) may have "
        "been broken. Its points are withheld until your instructor has looked at it."
    )
    rows = [(v.case, "pass" if v.passed else "FAIL", v.message) for v in verdicts]
    page = [f"<p><strong>{html.escape(head)}</strong></p>"]
    if review:
        page.append(f"<p><strong>{html.escape(held)}</strong></p>")
    page.append(
        f"<style>{VERDICT_STYLE}</style><table class='seqmodels-verdicts'><thead><tr><th>{noun}</th>"
        "<th>result</th><th>details</th></tr></thead><tbody>"
    )
    page += ["<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in row) + "</tr>" for row in rows]
    page.append("</tbody></table>")
    text = "\n".join([head, *([held] if review else []), *(" | ".join(row) for row in rows)])
    return new_output(
        "display_data",
        data={"text/html": "\n".join(page), "text/plain": text},
        metadata={AUDIENCE: "everyone"},
    )


FIGURE_PIXELS = 4000 * 4000  # a figure larger than this is not decoded
FIGURE_BYTES = 2_000_000  # nor one whose base64 text is longer


def _figures(outputs: list, limit: int) -> list[NotebookNode]:
    """The PNG figures a student's code cell displayed (part D's plots, which graders read in
    formgrader), each decoded and re-encoded by the grader: only pixels survive (no text chunks, no
    other format), and a figure that is not a PNG, too large, or more than `limit` is dropped."""
    import base64
    import io

    from PIL import Image

    kept = []
    for output in outputs:
        data = output.get("data") if isinstance(output, dict) else None
        png = data.get("image/png") if isinstance(data, dict) else None
        if len(kept) >= limit or not isinstance(png, str) or len(png) > FIGURE_BYTES:
            continue
        try:
            with Image.open(
                io.BytesIO(base64.b64decode(png, validate=True)), formats=["PNG"]
            ) as image:
                if image.width * image.height > FIGURE_PIXELS:
                    continue
                pixels = image.convert("RGBA")
            buffer = io.BytesIO()
            pixels.save(buffer, format="PNG", optimize=True)
        except Exception:  # noqa: BLE001 - anything that is not a readable PNG is dropped
            continue
        text = f"[a figure this cell drew, {pixels.width} × {pixels.height} pixels, re-encoded by the grader]"
        kept.append(
            new_output(
                "display_data",
                data={
                    "image/png": base64.b64encode(buffer.getvalue()).decode(),
                    "text/plain": text,
                },
                metadata={AUDIENCE: "everyone"},
            )
        )
    return kept


def _errors_by_name(outputs: list) -> list[NotebookNode]:
    """A student cell's errors, by built-in name only (whatever the cell printed or displayed could
    carry hidden test inputs; the student sees it by running the notebook)."""
    from .compare import exception_name

    return [
        grader_output(
            f"[this cell raised {exception_name(str(output.get('ename', '')))}; run it in your "
            "notebook to see the message]"
        )
        for output in outputs
        if isinstance(output, dict) and output.get("output_type") == "error"
    ][:1]


class SaveVerdicts(SaveAutoGrades):
    """nbgrader's `SaveAutoGrades`, with each test cell's score from the grader's verdicts.

    A task held for review gets ``auto_score`` 0 and ``needs_manual_grade``: formgrader lists it,
    and the instructor's manual score replaces the 0.
    """

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        self._scores = state(resources)["scores"]
        return super().preprocess(nb, resources)

    def _add_score(self, cell: NotebookNode, resources: dict) -> None:
        if cell.cell_type != "code" or is_solution(cell):
            return super()._add_score(cell, resources)  # written answers: nbgrader's own rules
        grade = self.gradebook.find_grade(
            cell.metadata["nbgrader"]["grade_id"],
            self.notebook_id,
            self.assignment_id,
            self.student_id,
        )
        points, review = self._scores.get(cell.metadata["nbgrader"]["grade_id"], (0.0, True))
        grade.auto_score = points
        grade.needs_manual_grade = review or grade.manual_score is not None
        self.gradebook.db.commit()


class StudentTextAsText(NbGraderPreprocessor):
    """Markdown and raw cells the student wrote become plain text; no cell keeps attachments or
    metadata other than nbgrader's. A written answer (a Markdown answer cell) becomes sanitized
    HTML whose math MathJax typesets in safe mode (`seqmodels.grading.math_pages`). No HTML,
    script or SVG the student wrote is rendered in the graded notebook, formgrader or the feedback."""

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int):
        cell.pop("attachments", None)
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "nbgrader"}
        if cell.cell_type == "markdown" and is_solution(cell) and not is_locked(cell):
            cell.source = student_answer_html(cell.source)
        elif cell.cell_type in {"markdown", "raw"} and not is_locked(cell):
            longest = max((len(run) for run in re.findall(r"`+", cell.source)), default=0)
            fence = "`" * max(3, longest + 1)
            cell.cell_type = "markdown"
            cell.source = f"{fence}text\n{cell.source}\n{fence}"
        return cell, resources


MARK_SCHEME = ("BEGIN MARK SCHEME", "END MARK SCHEME")


def strip_mark_scheme(source: str) -> str:
    """`source` without its mark-scheme regions, markers included (an unended one: to the end)."""
    out, inside = [], False
    for line in source.split("\n"):
        if MARK_SCHEME[0] in line:
            inside = True
        elif MARK_SCHEME[1] in line and inside:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


class FeedbackForStudents(NbGraderPreprocessor):
    """In ``generate_feedback``: drop what the grader wrote for instructors only (the evidence
    behind a review) and what nbgrader restored for graders only (the model answers and rubrics
    of written answers: mark-scheme regions, see nbgrader_config.py). The graded notebook holds
    only the grader's outputs, so the mark is its own."""

    def preprocess_cell(self, cell: NotebookNode, resources: dict, index: int):
        cell.source = strip_mark_scheme(cell.source)
        if cell.cell_type == "code":
            cell.outputs = [
                o for o in cell.outputs if o.get("metadata", {}).get(AUDIENCE) != "instructor"
            ]
        return cell, resources


class _CompiledTemplates(BytecodeCache):
    """Jinja's compiled templates, kept in this process (keyed by name and source checksum)."""

    def __init__(self):
        self.compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket) -> None:
        if bucket.key in self.compiled:
            bucket.bytecode_from_string(self.compiled[bucket.key])

    def dump_bytecode(self, bucket) -> None:
        self.compiled[bucket.key] = bucket.bytecode_to_string()


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTML exporter for ``generate_feedback``, with the templates compiled once per
    process rather than once per page (a grading worker writes a page per student), and its
    BeautifulSoup pass only where it changes something."""

    compiled = _CompiledTemplates()

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = self.compiled
        return environment

    def from_notebook_node(self, nb: NotebookNode, resources: dict | None = None, **kw):
        """The page as `HTMLExporter.from_notebook_node` makes it. After rendering, nbconvert
        parses and re-serializes the whole page with BeautifulSoup to give images without alt
        text a placeholder and to make JupyterLab-template cells focusable: a fifth of a worker's
        own time per student. The feedback template is the classic one (no such cells), so the
        pass runs only on a page with an image."""
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name"))
        highlight = self.filters.get(
            "highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)
        )
        resources = self._init_resources(resources)
        data_types = WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources
        )
        self.register_filter("highlight_code", highlight)
        self.register_filter("filter_data_type", data_types)
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        if "<img" not in page and "jp-Notebook" not in page:
            return page, resources
        soup = BeautifulSoup(page, features="html.parser")
        for image in soup.select("img:not([alt])"):
            image.attrs["alt"] = "No description has been provided for this image"
        for element in soup.select(
            ".jp-Notebook div.jp-Cell-inputWrapper, .jp-Notebook div.jp-OutputArea-output"
        ):
            element.attrs["tabindex"] = "0"
        return str(soup), resources
