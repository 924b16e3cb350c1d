"""Problem Set 2's grading round trip: the same machinery as PS1's (tests/test_grading.py), which
also runs the hostile-submission suite once for every problem set; here only what is PS2's own.

The solution earns 10, the blank release 0, each plausible wrong answer (tests/ps2_submissions.py)
loses points on its own task only, with feedback naming the task and the failing cases; a by-hand
task answered with autograd, or with the course library's hidden `seqmodels.rnn`, earns nothing.
"""

from __future__ import annotations

import re
from functools import partial

import nbformat
import pytest
import torch

import grading_helpers as helpers
from grading_helpers import ROOT, assert_release_in_sync, current_manifest
from ps2_submissions import RULE_BREAKERS, TESTS, WRONG
from seqmodels.grading import references
from seqmodels.grading.capture import _encode
from seqmodels.grading.compare import judge

PS = "ps2"
pytestmark = pytest.mark.grading

new_course = partial(helpers.new_course, ps=PS)
submit = partial(helpers.submit, ps=PS)
release_and_answers = partial(helpers.release_and_answers, ps=PS)
read_csv = partial(helpers.read_csv, ps=PS)
feedback = partial(helpers.feedback, ps=PS)

# test cell → the task name its Checker reports
TASK_OF = {
    "test_softmax_cross_entropy": "softmax_cross_entropy",
    "test_tanh_layer_backward": "tanh_layer_backward",
    "test_gradient_check": "gradient_check",
    "test_rnn_forward": "rnn_forward",
    "test_rnn_backward": "rnn_backward",
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    return helpers.grade_submissions(course, PS, TESTS, WRONG, RULE_BREAKERS)


def test_the_solution_earns_full_marks_and_the_blank_release_none(graded):
    helpers.assert_full_marks_and_blank_none(graded, PS, TASK_OF.values())


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_plausible_wrong_answer_loses_points_on_its_own_task_only(graded, name):
    helpers.assert_loses_points_on_its_own_task_only(graded, PS, name, TASK_OF[WRONG[name][2]])


@pytest.mark.parametrize("name", sorted(RULE_BREAKERS))
def test_autograd_or_the_library_in_a_task_earns_nothing_for_it(graded, name):
    _, _, test_cell, text = RULE_BREAKERS[name]
    helpers.assert_earns_nothing_for_its_task(graded, PS, name, TASK_OF[test_cell], text)


def test_the_library_rnn_cannot_even_be_imported_in_the_sandbox(graded):
    html = feedback(graded["course"], "rule-imports-seqmodels-rnn")
    assert "this cell raised ImportError" in html


def test_every_student_has_a_row_and_grading_is_quick(graded):
    """(That no kernel outlives the run is checked once, by PS1's round trip.)"""
    assert sorted(graded["rows"]) == graded["students"]
    assert all(row["sandbox"] == "bubblewrap" for row in graded["rows"].values())
    # two workers: each submission took well under a minute, even on a loaded 2-core machine
    assert graded["seconds"] * 2 / len(graded["students"]) < 60, graded["seconds"]


def test_the_release_is_in_sync_and_holds_no_solutions_hidden_tests_or_references(graded):
    assert_release_in_sync(graded["course"], PS)


def test_stored_references_belong_to_the_current_solution():
    manifest = current_manifest(PS)
    by_hand = ("softmax_cross_entropy", "tanh_layer_backward", "gradient_check", "rnn_backward")
    for task in by_hand:
        forbidden = set(manifest["tasks"][task]["forbidden"])
        assert {"torch.autograd", "backward", "torch.func", "inference_mode"} <= forbidden


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU: the CPU run made the references")
def test_the_solution_on_the_gpu_matches_the_cpu_references():
    tensors, manifest = references.build(ROOT / "solutions" / PS / f"{PS}.ipynb", device="cuda")
    refs, _ = references.load(ROOT / "solutions" / PS / "references", PS)
    for task, entry in manifest["tasks"].items():
        for index, case in enumerate(entry["cases"]):
            prefix = f"{task}{references.SEP}{index}{references.SEP}"
            actual = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            verdict = judge(case, {"data": _encode(actual)}, refs[task][case])
            assert verdict.passed, (task, verdict.message)


def test_no_code_cell_imports_a_hidden_module():
    config = (ROOT / "nbgrader_config.py").read_text()
    hidden = re.findall(r'"(seqmodels\.\w+)"', config.split("GRADED_IMPLEMENTATIONS = [")[1])
    assert {"seqmodels.autodiff", "seqmodels.rnn", "seqmodels.softmax"} <= set(hidden)
    source = nbformat.read(ROOT / "solutions" / PS / f"{PS}.ipynb", as_version=4)
    for cell in source.cells:
        if cell.cell_type == "code":
            assert not any(module in cell.source for module in hidden), cell.metadata
