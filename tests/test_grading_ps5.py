"""Problem Set 5's grading round trip: the same machinery as the other sets' (the hostile-submission
suite runs once, in tests/test_grading.py); here only what is PS5's own.

The round trip grades in the smoke profile (`SEQMODELS_GRADING_PROFILE=smoke`): the training task's
test cell (part B's held-out tiers, 3 points) is not run and earns nothing, so the solution's
autograded total there is part A's 8 points, the trajectory's 1.5 and the decoders' 1.5 (their
cases on the student's own model then run on the model as Task 5 initialises it). Its tasks carry
3, 2, 3, 1.5 and 1.5 points, so the assertions read each task's "p of P points". The blank release
earns 0; each plausible wrong answer (tests/ps5_submissions.py) loses points on its own task only,
with feedback naming the task and the failing case; a task answered with what it forbids (torch's
fused attention, torch's loss) or with the course library's hidden `seqmodels.transformer` earns
nothing for it. A paste of the library's source (tests/paste_submissions.py) is graded in the same
run. The solutions against oracles, every wrong answer against its named check, the rewrites and
the mutants are in tests/test_grading_ps5_oracles.py; the training task in the full profile in
tests/test_grading_training.py.
"""

from __future__ import annotations

import re
from html import unescape

import pytest

import grading_helpers as helpers
from paste_submissions import (
    feedback_points,
)
from ps5_submissions import HONEST, RULE_BREAKERS, TESTS, WRONG
from test_grading_ps5_oracles import TASK_OF

PS = "ps5"
pytestmark = pytest.mark.grading
POINTS = {
    "gqa_attention": 3.0,
    "kv_cache": 2.0,
    "lm_log_probs": 3.0,
    "train_step": 1.5,
    "decoders": 1.5,
}
SMOKE_TOTAL = sum(POINTS.values())  # 11: the training task (3) is not run in the smoke profile
#: the tasks that call `gqa_attention` and forbid torch's attention, as Task 1 does
CALLS_ATTENTION = ("gqa_attention", "kv_cache", "lm_log_probs", "train_step")


def _points(graded, student: str) -> dict[str, tuple[float, float]]:
    return feedback_points(helpers.feedback(graded["course"], student, PS))


class TestRoundTrip(helpers.RoundTrip):
    """The shared round trip (tests/grading_helpers.py) on this problem set's submissions."""

    PS = PS
    TASK_OF = TASK_OF
    TESTS, WRONG, RULE_BREAKERS, HONEST = TESTS, WRONG, RULE_BREAKERS, HONEST
    HIDDEN = ("seqmodels.attention", "seqmodels.transformer", "seqmodels.decoding")
    PROFILE = "smoke"

    PASTE = True
    POINTS = POINTS
    FULL = SMOKE_TOTAL
    # no cache and no model returning caches in the library; its training step calls torch's loss
    PASTE_NOTHING = ("kv_cache", "lm_log_probs", "train_step")
    PASTE_REVIEW = "test_train_step"

    def test_the_solution_earns_full_marks_and_the_blank_release_none(self, graded):
        assert graded["scores"]["solution"] == SMOKE_TOTAL
        assert graded["scores"]["blank"] == 0
        points = _points(graded, "solution")
        assert {t: points[t] for t in POINTS} == {t: (p, p) for t, p in POINTS.items()}

    def test_a_plausible_wrong_answer_loses_points_on_its_own_task_only(self, graded, wrong):
        task = self.TASK_OF[self.WRONG[wrong][2]]
        assert 0 < graded["scores"][f"wrong-{wrong}"] < SMOKE_TOTAL
        points = _points(graded, f"wrong-{wrong}")
        assert points[task][0] < POINTS[task], points
        assert all(points[t][0] == p for t, p in POINTS.items() if t != task), points
        html = helpers.feedback(graded["course"], f"wrong-{wrong}", PS)
        section = html.split(f"{task}: ", 1)[1].split(" points", 2)[1]
        assert re.search(r"<td>[^<]+</td>\s*<td>FAIL</td>", section), section[:3000]

    def test_a_forbidden_tool_or_the_library_in_a_task_earns_nothing_for_it(self, graded, rule):
        _, _, test_cell, text = self.RULE_BREAKERS[rule]
        task = self.TASK_OF[test_cell]
        student = f"rule-{rule}"
        html = helpers.feedback(graded["course"], student, PS)
        points = _points(graded, student)
        assert points[task][0] == 0, points
        if task == "train_step":  # nothing calls the training step: every other task is whole
            assert all(points[t][0] == p for t, p in POINTS.items() if t != task), points
        plain = unescape(re.sub(r"<[^>]+>", "", html))
        if text.startswith("this cell raised"):
            assert text in plain
            return
        assert "Held for your instructor's review" in plain and "For the instructor" not in plain
        # attention by torch's kernel is held in every task that calls it and forbids it
        held = graded["rows"][student]["review"].split()
        assert test_cell in held
        if task == "gqa_attention":
            assert all(points[t][0] == 0 for t in CALLS_ATTENTION), points
        assert text in helpers.autograded(graded["course"], student, PS)

    def test_honest_code_that_names_or_checks_against_a_tool_is_not_flagged(self, graded, honest):
        student = f"honest-{honest}"
        assert graded["scores"][student] == SMOKE_TOTAL, student
        assert graded["rows"][student]["review"] == ""

    def test_the_paste_earns_what_the_library_holds(self, graded):
        """Task 1 earns only its cases with as many key-value heads as heads (the library has no
        grouped-query attention), the decoders their cases on the grader's own distributions (the
        cases on the student's model call Task 3's function, which raises for G < H); the rest of
        the paste's checks are the shared round trip's."""
        points = _points(graded, "paste")
        assert 0 < points["gqa_attention"][0] < points["gqa_attention"][1], points
        assert 0 < points["decoders"][0] < points["decoders"][1], points


def test_stored_references_belong_to_the_current_solution():
    manifest = helpers.current_manifest(PS, points=14)
    tasks = manifest["tasks"]
    assert {t: tasks[t]["points"] for t in POINTS} == POINTS
    for task in CALLS_ATTENTION:
        assert "torch_attention" in tasks[task]["forbidden"]
    assert sorted(tasks["train_step"]["forbidden"]) == ["torch_attention", "torch_losses"]
    assert {c["name"] for c in tasks["decoders"]["checks"].values()} == {
        "top_p_mask",
        "temperature",
        "best_sequence",
    }
    training = tasks["lm_training"]["training"]
    assert training["requires"] == ["train_step"]
    assert training["heldout"] == "web_test_sequences"
    assert training["data"]["kind"] == "KJVStream"
    reference = tasks["lm_training"]["reference"]
    assert reference["perplexity"] < reference["bar"]
