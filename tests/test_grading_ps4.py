"""Problem Set 4's grading round trip: the same machinery as the other sets' (the hostile-submission
suite runs once, in tests/test_grading.py); here only what is PS4's own.

The round trip grades in the smoke profile (`SEQMODELS_GRADING_PROFILE=smoke`): the training task's
test cell (part B's held-out tiers, 4 points) is not run and earns nothing, so the solution's
autograded total there is part A's 8 points and the trajectory task's 2. The blank release earns 0;
each plausible wrong answer (tests/ps4_submissions.py) loses points on its own task only, with
feedback naming the task and the failing case; a task answered with what it forbids (torch's fused
attention, autograd in the backward pass, torch's cross-entropy in the loss) or with the course
library's hidden `seqmodels.attention` earns nothing for it (and costs the tasks that call it and
forbid the same tool). A paste of the library's source (tests/paste_submissions.py) is graded in the
same run. The solutions against oracles, every wrong answer against its named check, the rewrites
and the mutants are in tests/test_grading_ps4_oracles.py; the training task in the full profile in
tests/test_grading_training.py (`ps4_full`).
"""

from __future__ import annotations

import re
from html import unescape

import pytest

import grading_helpers as helpers
from paste_submissions import (
    feedback_points,
)
from ps4_submissions import HONEST, RULE_ALSO_COSTS, RULE_BREAKERS, TESTS, WRONG
from test_grading_ps4_oracles import TASK_OF

PS = "ps4"
pytestmark = pytest.mark.grading
POINTS = {
    "masked_attention": 0.5,
    "masked_attention_backward": 3.5,
    "masked_token_nll": 1.0,
    "g2p_log_probs": 2.0,
    "g2p_greedy_decode": 1.0,
    "train_step": 2.0,
}
SMOKE_TOTAL = sum(POINTS.values())  # 10: the training task (4) is not run in the smoke profile


def _points(graded, student: str) -> dict[str, tuple[float, float]]:
    return feedback_points(helpers.feedback(graded["course"], student, PS))


class TestRoundTrip(helpers.RoundTrip):
    """The shared round trip (tests/grading_helpers.py) on this problem set's submissions."""

    PS = PS
    TASK_OF = TASK_OF
    TESTS, WRONG, RULE_BREAKERS, HONEST = TESTS, WRONG, RULE_BREAKERS, HONEST
    HIDDEN = ("seqmodels.attention", "seqmodels.seq2seq", "seqmodels.metrics", "seqmodels.decoding")
    PROFILE = "smoke"

    PASTE = True
    POINTS = POINTS
    FULL = SMOKE_TOTAL
    # nothing in the library differentiates attention by hand; its loss and its training step call
    # F.cross_entropy, held for review
    PASTE_NOTHING = ("masked_attention_backward", "masked_token_nll", "train_step")
    PASTE_REVIEW = "test_masked_token_nll test_train_step"

    def test_the_solution_earns_full_marks_and_the_blank_release_none(self, graded):
        assert graded["scores"]["solution"] == SMOKE_TOTAL
        assert graded["scores"]["blank"] == 0
        points = _points(graded, "solution")
        assert {t: points[t] for t in POINTS} == {t: (p, p) for t, p in POINTS.items()}

    def test_a_plausible_wrong_answer_loses_points_on_its_own_task_only(self, graded, wrong):
        task = self.TASK_OF[self.WRONG[wrong][2]]
        assert 0 <= graded["scores"][f"wrong-{wrong}"] < SMOKE_TOTAL
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
        also = RULE_ALSO_COSTS[rule]
        assert all(points[t][0] < POINTS[t] for t in also), points
        assert all(points[t][0] == POINTS[t] for t in POINTS if t not in (task, *also)), points
        plain = unescape(re.sub(r"<[^>]+>", "", html))
        if text.startswith("this cell raised"):
            assert text in plain
            return
        assert "Held for your instructor's review" in plain and "For the instructor" not in plain
        assert test_cell in graded["rows"][student]["review"].split()
        assert text in helpers.autograded(graded["course"], student, PS)

    def test_honest_code_that_names_or_checks_against_a_tool_is_not_flagged(self, graded, honest):
        student = f"honest-{honest}"
        assert graded["scores"][student] == SMOKE_TOTAL, student
        assert graded["rows"][student]["review"] == ""

    def test_the_paste_earns_what_the_library_holds(self, graded):
        """Task 1 earns all its 0.5 (the library's attention); Tasks 4 and 5 only the cases where
        input feeding does not matter (the rest of the paste's checks are the shared round
        trip's)."""
        points = _points(graded, "paste")
        assert points["masked_attention"] == (0.5, 0.5), points
        assert 0 < points["g2p_log_probs"][0] < points["g2p_log_probs"][1], points
        assert 0 < points["g2p_greedy_decode"][0] < points["g2p_greedy_decode"][1], points


def test_stored_references_belong_to_the_current_solution():
    manifest = helpers.current_manifest(PS, points=14)
    tasks = manifest["tasks"]
    assert {t: tasks[t]["points"] for t in POINTS} == POINTS
    assert tasks["masked_attention"]["forbidden"] == ["torch_attention"]
    assert sorted(tasks["masked_attention_backward"]["forbidden"]) == [
        "autograd",
        "torch_attention",
    ]
    assert tasks["masked_token_nll"]["forbidden"] == ["torch_losses"]
    assert tasks["train_step"]["forbidden"] == ["torch_losses"]
    training = tasks["g2p_training"]["training"]
    assert training["requires"] == ["train_step"]
    assert training["heldout"] == "g2p_test_words"
    assert training["data"]["kind"] == "G2PPairs"
    assert "heldout_seed" in training
    reference = tasks["g2p_training"]["reference"]
    assert reference["per"] < reference["bar"] == training["tiers"]["bar_value"]
    assert reference["probe"] == 0
