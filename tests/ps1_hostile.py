"""Hostile and broken PS1 submissions: each must be graded right and must not stop the run.

Every builder takes the release notebook and the correct answers ({answer grade_id: code}) and
returns the file's bytes (a notebook, or not), so tests can also submit files that are not JSON.
`HOSTILE` maps a student id to (builder, expected score out of 10, text the feedback must contain).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import nbformat

from ps1_submissions import fill

Builder = Callable[[nbformat.NotebookNode, dict[str, str]], bytes]


def _dump(nb: nbformat.NotebookNode) -> bytes:
    return nbformat.writes(nb).encode()


def _with(cell_id: str, extra: str, before: bool = False) -> Builder:
    """Correct answers, with `extra` code added to one answer cell."""

    def build(release, answers):
        changed = dict(answers)
        changed[cell_id] = (
            f"{extra}\n{answers[cell_id]}" if before else f"{answers[cell_id]}\n{extra}"
        )
        return _dump(fill(release, changed))

    return build


def _replace(cell_id: str, code: str) -> Builder:
    def build(release, answers):
        return _dump(fill(release, {**answers, cell_id: code}))

    return build


def _edit_tests(edit: Callable[[nbformat.NotebookNode], list]) -> Builder:
    """Correct answers, then `edit` maps each test cell to the cells that replace it."""

    def build(release, answers):
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


def _kernelspec(release, answers):
    nb = fill(release, answers)
    nb.metadata["kernelspec"] = {"name": "evil", "display_name": "Evil", "language": "python"}
    return _dump(nb)


def _not_json(release, answers):
    return _dump(fill(release, answers))[:-200] + b"\n<<<<<<< merge conflict"


def _forged_checker(release, answers):
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

HOSTILE: dict[str, tuple[Builder, float, str]] = {
    "hostile-infinite-loop": (
        _replace(
            "sample_sentence",
            "def sample_sentence(probs, generator, max_len=20):\n    while True:\n        pass",
        ),
        8,
        "not run",
    ),
    "hostile-os-exit": (_with("sample_sentence", "import os\nos._exit(1)"), 6, "KernelDied"),
    "hostile-segfault": (
        _with("ffn_logits", "import ctypes\nctypes.string_at(0)"),
        8,
        "KernelDied",
    ),
    "hostile-memory": (  # 4 GiB: fine on the machine, over the kernel's limit in the tests (3 GiB)
        _with("add_k_probs", "import torch\n_hog = torch.ones(2**32, dtype=torch.uint8)"),
        10,
        "allocate memory",
    ),
    "hostile-not-json": (_not_json, 0, "could not be read as a notebook"),
    "hostile-tests-deleted": (_edit_tests(lambda cell: []), 10, "pass"),
    "hostile-tests-edited": (_edit_tests(_edit_source), 10, "pass"),
    "hostile-tests-duplicated": (_edit_tests(_duplicate), 10, "pass"),
    "hostile-tests-skip-execution": (_edit_tests(_retag), 10, "pass"),
    "hostile-metadata-changed": (_edit_tests(_change_metadata), 10, "pass"),
    "hostile-kernelspec": (_kernelspec, 10, "pass"),
    "hostile-100mb-output": (
        _with("bigram_counts", "import sys\nsys.stdout.write('x' * 100_000_000)"),
        10,
        "output truncated",
    ),
    "hostile-stderr-warnings": (
        _with(
            "bigram_counts",
            "import warnings\n_orig = bigram_counts\n"
            "def bigram_counts(*args):\n    warnings.warn('a harmless warning')\n"
            "    import sys; print('to stderr', file=sys.stderr)\n    return _orig(*args)",
        ),
        10,
        "pass",
    ),
    "hostile-patched-comparisons": (
        lambda release, answers: _dump(
            fill(
                release,
                {
                    **answers,
                    "bigram_counts": "import torch\ntorch.allclose = lambda *a, **k: True\n"
                    "torch.equal = lambda *a, **k: True\n"
                    "torch.Tensor.__eq__ = lambda *a, **k: torch.tensor(True)\n"
                    "def bigram_counts(sentences, vocab_size):\n"
                    "    return torch.zeros(vocab_size, vocab_size, dtype=torch.int64)",
                },
            )
        ),
        8 + 2 / 6,  # zeros are right for one of task 1's six cases: "no sentences at all"
        "FAIL",
    ),
    "hostile-eq-always-true": (
        _replace("add_k_probs", LIAR + "\ndef add_k_probs(counts, k):\n    return Liar()"),
        8,
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
        8,
        "course library",
    ),
    "hostile-forged-captures": (_forged_checker, 10, "pass"),
}


def build_all(release: nbformat.NotebookNode, answers: dict[str, str]) -> dict[str, bytes]:
    """Every hostile submission's file bytes, by student id."""
    return {student: builder(release, answers) for student, (builder, _, _) in HOSTILE.items()}
