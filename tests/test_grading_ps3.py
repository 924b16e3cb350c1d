"""Problem Set 3's grading round trip: the same machinery as PS1's and PS2's (the hostile-submission
suite runs once, in tests/test_grading.py); here only what is PS3's own.

The round trip grades in the smoke profile (`SEQMODELS_GRADING_PROFILE=smoke`): the training task's
test cell (part B's held-out tiers, 4 points) is not run and earns nothing, so the solution's
autograded total there is part A's 8 points and the trajectory task's 2. Its tasks carry 1.5, 3,
1.5, 2 and 2 points, so the shared assertions that count 2-point tasks are replaced here by ones
that read each task's "p of P points". The blank release earns 0; each plausible wrong answer
(tests/ps3_submissions.py) loses points on its own task only, with feedback naming the task and the
failing case; a task answered with what it forbids (autograd in the backward pass, torch's LSTM cell
in the step, torch.optim in Adam) or with the course library's hidden `seqmodels.gated` earns nothing
for it. A paste of the library's source (tests/paste_submissions.py) is graded in the same run. The
solutions against oracles, every wrong answer against its named check, the rewrites and the mutants
are in tests/test_grading_ps3_oracles.py; the training task in the full profile in
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
from ps3_submissions import HONEST, RULE_BREAKERS, TESTS, WRONG
from test_grading_ps3_oracles import TASK_OF

PS = "ps3"
pytestmark = pytest.mark.grading
POINTS = {
    "cifg_step": 1.5,
    "cifg_step_backward": 3.0,
    "cifg_lm_log_probs": 1.5,
    "verb_gradient_norms": 2.0,
    "adam_step": 2.0,
}
SMOKE_TOTAL = sum(POINTS.values())  # 10: the training task (4) is not run in the smoke profile


def _points(graded, student: str) -> dict[str, tuple[float, float]]:
    return feedback_points(helpers.feedback(graded["course"], student, PS))


class TestRoundTrip(helpers.RoundTrip):
    """The shared round trip (tests/grading_helpers.py) on this problem set's submissions."""

    PS = PS
    TASK_OF = TASK_OF
    TESTS, WRONG, RULE_BREAKERS, HONEST = TESTS, WRONG, RULE_BREAKERS, HONEST
    HIDDEN = ("seqmodels.gated", "seqmodels.gradients", "seqmodels.rnn", "seqmodels.softmax")
    PROFILE = "smoke"

    PASTE = True
    POINTS = POINTS
    FULL = SMOKE_TOTAL
    PASTE_NOTHING = ("cifg_step_backward", "verb_gradient_norms", "adam_step")
    PASTE_REVIEW = "test_adam_step"

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
        others = [
            t
            for t in POINTS
            if t != task and t not in ("cifg_lm_log_probs", "verb_gradient_norms", "adam_step")
        ]
        if task != "cifg_step":  # a step that fails costs the tasks that call it
            assert all(points[t][0] == POINTS[t] for t in others), points
        plain = unescape(re.sub(r"<[^>]+>", "", html))
        if text.startswith("this cell raised"):
            assert text in plain
            return
        assert "Held for your instructor's review" in plain and "For the instructor" not in plain
        # a step run with torch's LSTM is held in every task that calls it and forbids it
        assert test_cell in graded["rows"][student]["review"].split()
        assert text in helpers.autograded(graded["course"], student, PS)

    def test_honest_code_that_names_or_checks_against_a_tool_is_not_flagged(self, graded, honest):
        student = f"honest-{honest}"
        assert graded["scores"][student] == SMOKE_TOTAL, student
        assert graded["rows"][student]["review"] == ""

    def test_the_paste_earns_what_the_tie_gives(self, graded):
        """Tasks 1 and 3 earn only their cases without peepholes (the library's LSTM has none),
        through the LSTM with the forget rows tied to minus the input rows: part of their points,
        not all (the rest of the paste's checks are the shared round trip's)."""
        points = _points(graded, "paste")
        assert 0 < points["cifg_step"][0] < points["cifg_step"][1], points
        assert 0 < points["cifg_lm_log_probs"][0] < points["cifg_lm_log_probs"][1], points


def test_stored_references_belong_to_the_current_solution():
    manifest = helpers.current_manifest(PS, points=14)
    tasks = manifest["tasks"]
    assert {t: tasks[t]["points"] for t in POINTS} == POINTS
    assert tasks["cifg_step_backward"]["forbidden"] == ["autograd"]
    assert tasks["cifg_step"]["forbidden"] == ["torch_lstm"]
    assert sorted(tasks["adam_step"]["forbidden"]) == [
        "gradient_clipping",
        "torch_losses",
        "torch_lstm",
        "torch_optimizers",
    ]
    training = tasks["cifg_training"]["training"]
    assert training["requires"] == ["adam_step"]
    assert training["heldout"] == "agreement_test_sentences"
    assert training["data"]["kind"] == "AgreementSentences"
    assert "heldout_seed" in training and training["tiers"]["generalisation"] == 0.1
    reference = tasks["cifg_training"]["reference"]
    assert reference["accuracy"] >= reference["bar"] == training["tiers"]["bar_value"]
