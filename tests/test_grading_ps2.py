"""Problem Set 2's grading round trip: the same machinery as PS1's (tests/test_grading.py), which
also runs the hostile-submission suite once for every problem set; here only what is PS2's own.

The solution earns 10, the blank release 0, each plausible wrong answer (tests/ps2_submissions.py)
loses points on its own task only, with feedback naming the task and the failing cases; a by-hand
task answered with autograd, or with the course library's hidden `seqmodels.rnn`, earns nothing.
"""

from __future__ import annotations

import pytest

import grading_helpers as helpers
from grading_helpers import current_manifest
from ps2_submissions import HONEST, RULE_BREAKERS, TESTS, WRONG

PS = "ps2"
pytestmark = pytest.mark.grading


# test cell → the task name its Checker reports
TASK_OF = {
    "test_softmax_cross_entropy": "softmax_cross_entropy",
    "test_tanh_layer_backward": "tanh_layer_backward",
    "test_gradient_check": "gradient_check",
    "test_rnn_forward": "rnn_forward",
    "test_rnn_backward": "rnn_backward",
}


class TestRoundTrip(helpers.RoundTrip):
    """The shared round trip (tests/grading_helpers.py) on this problem set's submissions."""

    PS = PS
    TASK_OF = TASK_OF
    TESTS, WRONG, RULE_BREAKERS, HONEST = TESTS, WRONG, RULE_BREAKERS, HONEST
    HIDDEN = ("seqmodels.autodiff", "seqmodels.rnn", "seqmodels.softmax")


def test_stored_references_belong_to_the_current_solution():
    manifest = current_manifest(PS)
    by_hand = ("softmax_cross_entropy", "tanh_layer_backward", "gradient_check", "rnn_backward")
    for task in by_hand:
        assert manifest["tasks"][task]["forbidden"] == ["autograd"]
    assert manifest["tasks"]["rnn_forward"]["forbidden"] == ["torch_rnn"]
