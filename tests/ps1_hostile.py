"""Hostile and broken PS1 submissions: each must be graded right and must not stop the run.

Every builder takes the release notebook, the correct answers ({answer grade_id: code}) and the
`Targets` an attacker would aim at (the course folder, a file outside it, the library's source),
and returns the file's bytes (a notebook, or not), so tests can also submit files that are not
JSON. `HOSTILE` maps a student id to (builder, expected score out of `FULL`, PS1's autograded
points, text the feedback must contain). The expected score is what the answer cells earn
honestly: every attack either fails inside the sandbox or gains nothing. Part A's tasks are worth
0.5, 0.5, 1.5, 3.5, 1.5, 0.5 points (Tasks 1 to 6, `ps1_submissions.POINTS`), Part B's trajectory 2
(its training task is not run in the smoke profile); a kernel that dies keeps what the cells before
it earned.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

import ps1_attacks as attacks
from grading_helpers import forged_grader_output
from ps1_submissions import POINTS, SMOKE, fill

FULL = SMOKE  # the round trip grades in the smoke profile
TASK_1, TASK_2 = POINTS["bigram_counts"], POINTS["add_k_probs"]
#: Tasks 1-3: what a kernel that dies at Task 4's answer cell keeps
BEFORE_TASK_4 = TASK_1 + TASK_2 + POINTS["kn_discounts"]
#: Tasks 1-5
BEFORE_TASK_6 = BEFORE_TASK_4 + POINTS["kneser_ney_probs"] + POINTS["perplexity_and_bpc"]


@dataclass(frozen=True)
class Targets:
    """What an attacking kernel aims at, outside its sandbox."""

    course: Path  # the course directory: solutions, references, gradebook, other students
    canary: Path  # a file outside the course that must never appear
    library: Path  # the seqmodels package's source folder


Builder = Callable[[nbformat.NotebookNode, dict[str, str], Targets], bytes]


def _dump(nb: nbformat.NotebookNode) -> bytes:
    return nbformat.writes(nb).encode()


def _fmt(code: str, targets: Targets) -> str:
    return code.format(course=targets.course, canary=targets.canary, library=targets.library)


def _with(cell_id: str, extra: str, before: bool = False) -> Builder:
    """Correct answers, with `extra` code (formatted with the `Targets`) added to one answer cell."""

    def build(release, answers, targets):
        changed = dict(answers)
        code = _fmt(extra, targets)
        changed[cell_id] = (
            f"{code}\n{answers[cell_id]}" if before else f"{answers[cell_id]}\n{code}"
        )
        return _dump(fill(release, changed))

    return build


def _replace(cell_id: str, code: str) -> Builder:
    def build(release, answers, targets):
        return _dump(fill(release, {**answers, cell_id: _fmt(code, targets)}))

    return build


def _last_cell(code: str) -> Builder:
    """Correct answers, and one more student cell at the end of the notebook running `code`."""

    def build(release, answers, targets):
        nb = fill(release, answers)
        nb.cells.append(nbformat.v4.new_code_cell(_fmt(code, targets)))
        return _dump(nb)

    return build


def _edit_tests(edit: Callable[[nbformat.NotebookNode], list]) -> Builder:
    """Correct answers, then `edit` maps each test cell to the cells that replace it."""

    def build(release, answers, targets):
        nb = fill(release, answers)
        cells = []
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            cells += edit(cell) if meta.get("grade") and cell.cell_type == "code" else [cell]
        nb.cells = cells
        return _dump(nb)

    return build


def _retag(cell):
    cell.metadata["tags"] = ["skip-execution"]
    return [cell]


def _edit_source(cell):
    cell.source = "print('all tests passed!')"
    return [cell]


def _duplicate(cell):
    twin = copy.deepcopy(cell)
    twin["id"] = cell["id"] + "-copy"
    return [cell, twin]


def _change_metadata(cell):
    cell.metadata["nbgrader"]["points"] = 100
    cell.metadata["editable"] = True
    return [cell]


def _kernelspec(release, answers, targets):
    nb = fill(release, answers)
    nb.metadata["kernelspec"] = {"name": "evil", "display_name": "Evil", "language": "python"}
    return _dump(nb)


def _not_json(release, answers, targets):
    return _dump(fill(release, answers))[:-200] + b"\n<<<<<<< merge conflict"


def _forged_checker(release, answers, targets):
    """A student cell that emits fake captures for every case, after the real answers."""
    nb = fill(release, answers)
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "from seqmodels.grading import Checker\nChecker('bigram_counts').case('x', lambda: 0)"
        )
    )
    return _dump(nb)


LIAR = """
class Liar:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
"""


def _daemon(release, answers, targets):
    vandal = _fmt(attacks.VANDAL, targets)
    code = attacks.DAEMON.format(
        course=targets.course,
        canary=targets.canary,
        library=targets.library,
        vandal_source=vandal,
    )
    return _last_raw(code)(release, answers)


def _last_raw(code: str):
    def build(release, answers):
        nb = fill(release, answers)
        nb.cells.append(nbformat.v4.new_code_cell(code))
        return _dump(nb)

    return build


def _duplicated_answer(release, answers, targets):
    """An honest student duplicated an answer cell and finished the second copy."""
    nb = fill(release, answers)
    cells = []
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "add_k_probs":
            unfinished = copy.deepcopy(cell)
            unfinished.source = "def add_k_probs(counts, k):\n    raise NotImplementedError()"
            unfinished["id"] = cell["id"] + "-first"
            cells.append(unfinished)
        cells.append(cell)
    nb.cells = cells
    return _dump(nb)


def _helper_cell_with_words(release, answers, targets):
    """A helper cell that mentions the grading module and defines a class named *Checker."""
    nb = fill(release, {**answers, "bigram_counts": "bigram_counts = _count_pairs"})
    index = next(
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") == "bigram_counts"
    )
    nb.cells.insert(index, nbformat.v4.new_code_cell(attacks.HELPER_WITH_WORDS))
    return _dump(nb)


def _forges_grader_output(release, answers, targets):
    """The blank release and a hook that poses as the grader: it must earn nothing."""
    return _dump(forged_grader_output(release))


MARKUP = "<scr" + "ipt>alert(3)</scr" + "ipt><img src=x onerror=alert(4)>"


def _markup_cells(release, answers, targets):
    """Right answers, and cells of the student's own whose markup would run in whoever opens the
    graded notebook or the feedback: markdown with a script, a raw cell marked as HTML, an SVG
    attachment with a script, and a cell whose metadata carries markup."""
    nb = fill(release, answers)
    svg = base64.b64encode(f"<svg xmlns='http://www.w3.org/2000/svg'>{MARKUP}</svg>".encode())
    markdown = nbformat.v4.new_markdown_cell(f"Notes {MARKUP} ![x](attachment:x.svg) $\\alpha$")
    markdown["attachments"] = {"x.svg": {"image/svg+xml": svg.decode()}}
    raw = nbformat.v4.new_raw_cell(MARKUP)
    raw.metadata = {"format": "text/html", "raw_mimetype": "text/html"}
    code = nbformat.v4.new_code_cell("x = 1")
    code.metadata = {"tags": ['"><script>alert(5)</script>'], "jupyter": {"source_hidden": True}}
    nb.cells[1:1] = [markdown, raw, code]
    return _dump(nb)


def _oversize(release, answers, targets):
    """Right answers and a 21 MB attachment: over the 20 MB limit, set aside before grading."""
    nb = fill(release, answers)
    cell = nbformat.v4.new_markdown_cell("![big](attachment:big.png)")
    cell["attachments"] = {"big.png": {"image/png": "A" * (21 * 2**20)}}
    nb.cells.append(cell)
    return _dump(nb)


def _hooks(release, answers, targets):
    """A hook prints every cell's source (the hidden tests too) and replays it in a later cell."""
    nb = fill(release, answers)
    nb.cells.insert(1, nbformat.v4.new_code_cell(attacks.HOOKS))
    nb.cells.append(nbformat.v4.new_code_cell(_fmt(attacks.HOOKS_REPLAY, targets)))
    return _dump(nb)


HOSTILE: dict[str, tuple[Builder, float, str]] = {
    "hostile-infinite-loop": (
        _replace(
            "kneser_ney_probs",
            "def kneser_ney_probs(counts, discounts):\n    while True:\n        pass",
        ),
        FULL - POINTS["kneser_ney_probs"],  # Task 4's cell times out; the cells after it run
        "not run",
    ),
    "hostile-os-exit": (
        _with("kneser_ney_probs", "import os\nos._exit(1)"),
        BEFORE_TASK_4,
        "kernel died",
    ),
    "hostile-segfault": (
        _with("ffn_log_probs", "import ctypes\nctypes.string_at(0)"),
        BEFORE_TASK_6,
        "kernel died",
    ),
    "hostile-memory": (  # 4 GiB: fine on the machine, over the kernel's limit in the tests (3 GiB)
        _with("add_k_probs", "import torch\n_hog = torch.ones(2**32, dtype=torch.uint8)"),
        FULL,
        "raised RuntimeError",
    ),
    "hostile-not-json": (_not_json, 0, "could not be read as a notebook"),
    "hostile-tests-deleted": (_edit_tests(lambda cell: []), FULL, "pass"),
    "hostile-tests-edited": (_edit_tests(_edit_source), FULL, "pass"),
    "hostile-tests-duplicated": (_edit_tests(_duplicate), FULL, "pass"),
    "hostile-tests-skip-execution": (_edit_tests(_retag), FULL, "pass"),
    "hostile-metadata-changed": (_edit_tests(_change_metadata), FULL, "pass"),
    "hostile-kernelspec": (_kernelspec, FULL, "pass"),
    "hostile-100mb-printed": (
        _with("bigram_counts", "import sys\nsys.stdout.write('x' * 100_000_000)"),
        FULL,
        "output truncated",
    ),
    "hostile-huge-outputs-of-every-type": (_last_cell(attacks.HUGE_OUTPUTS), FULL, "truncated"),
    "hostile-huge-error": (_last_cell(attacks.HUGE_ERROR), FULL, "discarded unread"),
    "hostile-stderr-warnings": (
        _with(
            "bigram_counts",
            "import warnings\n_orig = bigram_counts\n"
            "def bigram_counts(*args):\n    warnings.warn('a harmless warning')\n"
            "    import sys; print('to stderr', file=sys.stderr)\n    return _orig(*args)",
        ),
        FULL,
        "pass",
    ),
    "hostile-patched-comparisons": (
        _replace(
            "bigram_counts",
            "import torch\ntorch.allclose = lambda *a, **k: True\n"
            "torch.equal = lambda *a, **k: True\n"
            "torch.Tensor.__eq__ = lambda *a, **k: torch.tensor(True)\n"
            "def bigram_counts(sentences, vocab_size):\n"
            "    return torch.zeros(vocab_size, vocab_size, dtype=torch.int64)",
        ),
        FULL - TASK_1 * 7 / 8,  # zeros are right for one of Task 1's 8 cases: "no sentences at all"
        "FAIL",
    ),
    "hostile-eq-always-true": (
        _replace("add_k_probs", LIAR + "\ndef add_k_probs(counts, k):\n    return Liar()"),
        FULL - TASK_2,
        "TypeError",
    ),
    "hostile-uses-library": (
        _replace(
            "add_k_probs",
            "from seqmodels.ngram import NGramLM\n\n"
            "def add_k_probs(counts, k):\n    NGramLM  # the library, not their own code\n"
            "    V = counts.shape[0]\n"
            "    p = (counts.double() + k) / (counts.sum(1, keepdim=True).double() + k * (V - 1))\n"
            "    p[:, 0] = 0\n    return p",
        ),
        FULL - TASK_2,
        "raised ImportError",  # the library's implementations do not exist in the sandbox
    ),
    "hostile-imports-library-dynamically": (
        _replace(
            "add_k_probs",
            "import importlib\n"
            "_ngram = importlib.import_module('seqmodels.' + 'ngram')\n"
            "def add_k_probs(counts, k):\n    return _ngram.NGramLM",
        ),
        FULL - TASK_2,
        "raised ImportError",
    ),
    "hostile-forged-captures": (_forged_checker, FULL, "pass"),
    "hostile-reads-references": (
        _replace("bigram_counts", attacks.READ_REFERENCES),
        FULL - TASK_1,
        "FAIL",
    ),
    "hostile-reads-solution": (
        _replace("bigram_counts", attacks.READ_SOLUTION),
        FULL - TASK_1,
        "FAIL",
    ),
    "hostile-reads-peers": (_replace("bigram_counts", attacks.READ_PEERS), FULL - TASK_1, "FAIL"),
    "hostile-writes-grades-and-grader-files": (_last_cell(attacks.WRITE_GRADES), FULL, "pass"),
    "hostile-daemon-outlives-the-kernel": (_daemon, FULL, "pass"),
    "hostile-stops-the-grader": (_with("bigram_counts", attacks.STOP_EVERYONE), FULL, "pass"),
    "hostile-reaches-out": (_last_cell(attacks.REACH_OUT), FULL, "pass"),
    "hostile-plant-files": (_last_cell(attacks.PLANT), FULL, "pass"),
    "hostile-leaks-through-hooks": (_hooks, FULL, "exception of its own type"),
    "hostile-memory-in-children": (_last_cell(attacks.MEMORY_IN_CHILDREN), FULL, "pass"),
    "hostile-fork-bomb": (_last_cell(attacks.FORK_BOMB), FULL, "pass"),
    "hostile-one-4gb-message": (
        _with("bigram_counts", attacks.HUGE_MESSAGE),
        FULL,
        "discarded unread",
    ),
    "hostile-replaces-its-sockets": (
        _last_cell(attacks.REPLACE_SOCKETS),
        FULL,
        "replaced its socket files",
    ),
    "hostile-fills-the-file-table": (_last_cell(attacks.FILL_FILE_TABLE), FULL, "pass"),
    "hostile-forges-grader-output": (_forges_grader_output, 0, "FAIL"),
    "hostile-markup-in-its-own-cells": (_markup_cells, FULL, "pass"),
    "hostile-oversize": (_oversize, 0, "over the 20 MB limit"),
    "honest-duplicated-answer-last-copy-finished": (_duplicated_answer, FULL, "pass"),
    "honest-helper-cell-mentions-checker": (_helper_cell_with_words, FULL, "pass"),
    "wrong-add-k-in-float16": (
        _replace("add_k_probs", attacks.FLOAT16_WRONG_ADD_K),
        FULL - TASK_2,
        "wrong dtype",
    ),
}


def build_all(
    release: nbformat.NotebookNode, answers: dict[str, str], targets: Targets
) -> dict[str, bytes]:
    """Every hostile submission's file bytes, by student id."""
    return {
        student: builder(release, answers, targets) for student, (builder, _, _) in HOSTILE.items()
    }
