"""Problem Set 2's grading round trip: the same machinery as PS1's (tests/test_grading.py), which
also runs the hostile-submission suite once for every problem set; here only what is PS2's own.

The round trip grades in the smoke profile (`SEQMODELS_GRADING_PROFILE=smoke`): the training task's
test cell (part B's held-out tiers, 4 points) is not run and earns nothing, so the solution's
autograded total there is part A's 8 points (`POINTS`: Tasks 1 and 3 half a point each, Task 2 3,
Task 4 4) and the trajectory task's 2. The blank release earns 0,
each plausible wrong answer (tests/ps2_submissions.py) loses points on its own task only, with
feedback naming the task and the failing cases; a by-hand task answered with autograd, or with the
course library's hidden `seqmodels.autodiff`, earns nothing. A paste of the library's source
(tests/paste_submissions.py) is graded in the same run. The solutions against oracles, and every
wrong answer against its named check, are in tests/test_grading_ps2_oracles.py.
"""

from __future__ import annotations

import nbformat
import pytest

import grading_helpers as helpers
from grading_helpers import ROOT
from ps2_submissions import HONEST, RULE_BREAKERS, TESTS, WRONG

PS = "ps2"
pytestmark = pytest.mark.grading


#: each autograded task's points (its test cell's): part A 8, part B 2 + 4
POINTS = {
    "gradients": 0.5,
    "broadcast_ops": 3,
    "rnn_lm_log_probs": 0.5,
    "lm_bptt": 4,
    "tbptt_step": 2,
    "rnn_training": 4,
}

# test cell → the task name its Checker reports
TASK_OF = {
    "test_gradients": "gradients",
    "test_broadcast_ops": "broadcast_ops",
    "test_rnn_lm_log_probs": "rnn_lm_log_probs",
    "test_lm_bptt": "lm_bptt",
    "test_tbptt_step": "tbptt_step",
}


class TestRoundTrip(helpers.RoundTrip):
    """The shared round trip (tests/grading_helpers.py) on this problem set's submissions."""

    PS = PS
    TASK_OF = TASK_OF
    TESTS, WRONG, RULE_BREAKERS, HONEST = TESTS, WRONG, RULE_BREAKERS, HONEST
    HIDDEN = ("seqmodels.autodiff", "seqmodels.rnn", "seqmodels.softmax", "seqmodels.gradients")
    PROFILE = "smoke"
    POINTS = POINTS

    PASTE = True
    # Task 4 has no library answer, and the paste's training step calls torch's loss and
    # clipping, as the library's does: held for review. Measured: 1.92 of 14 in the smoke
    # profile, 2.42 (17 %) in the full one (paste_submissions.MEASURED).
    PASTE_NOTHING = ("lm_bptt", "tbptt_step")
    PASTE_REVIEW = "test_tbptt_step"


def test_stored_references_belong_to_the_current_solution():

    from seqmodels.grading import references

    source = nbformat.read(ROOT / "solutions" / PS / f"{PS}.ipynb", as_version=4)
    _, manifest = references.load(ROOT / "solutions" / PS / "references", PS)
    assert manifest["solution_sha256"] == references.source_hash(source), (
        "the solution changed since its references were stored: run `make assignments`"
    )
    tasks = manifest["tasks"]
    # part A 8 and part B 6 autograded points (C and D, 6 more, are graded by hand)
    assert {name: t["points"] for name, t in tasks.items()} == POINTS
    assert sum(t["points"] for t in tasks.values()) == 14
    for task in ("gradients", "broadcast_ops", "lm_bptt"):
        assert tasks[task]["forbidden"] == ["autograd"]
    assert tasks["rnn_lm_log_probs"]["forbidden"] == ["torch_rnn"]
    assert sorted(tasks["tbptt_step"]["forbidden"]) == [
        "gradient_clipping",
        "torch_losses",
        "torch_rnn",
    ]
    training = tasks["rnn_training"]["training"]
    assert training["requires"] == ["tbptt_step"]
    assert training["heldout"] == "web_test_sequences"
    assert training["data"]["kind"] == "KJVStream"
    reference = tasks["rnn_training"]["reference"]
    assert reference["perplexity"] < reference["bar"]
