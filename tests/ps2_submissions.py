"""Plausible submissions for Problem Set 2: typical wrong answers and ones that break its rules.

A helper for tests of the grading pipeline (not a test module itself). Each wrong answer is the
solution's answer cell with one typical bug put in (the solution's text replaced by the buggy
text), so it costs points on its own task only. `RULE_BREAKERS` use autograd in a by-hand task or
import the course library's hidden implementation; they earn nothing for that task.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from grading_helpers import wrong_answers
from ps1_submissions import solution_answers

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "ps2" / "ps2.ipynb"
_ANSWERS = solution_answers(nbformat.read(SOURCE, as_version=4))

# grade_id of each answer cell → grade_id of its test cell
TESTS = {
    "softmax_cross_entropy": "test_softmax_cross_entropy",
    "tanh_layer_backward": "test_tanh_layer_backward",
    "numerical_gradient": "test_gradient_check",
    "rnn_forward": "test_rnn_forward",
    "rnn_backward": "test_rnn_backward",
}

# name → (answer cell, [(the solution's text, the buggy text), ...])
_BUGS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # Task 1: softmax and cross-entropy
    "ce_grad_not_divided_by_batch": (
        "softmax_cross_entropy",
        [("return loss, (log_p.exp() - one_hot) / n", "return loss, log_p.exp() - one_hot")],
    ),
    "ce_forgets_one_hot": (
        "softmax_cross_entropy",
        [("return loss, (log_p.exp() - one_hot) / n", "return loss, log_p.exp() / n")],
    ),
    "ce_naive_softmax_overflows": (
        "softmax_cross_entropy",
        [("shifted = logits - logits.max(dim=1, keepdim=True).values", "shifted = logits")],
    ),
    # Task 2: the tanh layer's backward pass
    "tanh_dW_transposed": ("tanh_layer_backward", [("dz.T @ x", "x.T @ dz")]),
    "tanh_derivative_of_pre_activation": (
        "tanh_layer_backward",
        [
            (
                "y = torch.tanh(x @ W.T + b)\n    dz = grad_y * (1 - y * y)",
                "z = x @ W.T + b\n    dz = grad_y * (1 - z * z)",
            )
        ],
    ),
    "tanh_db_mean_not_sum": ("tanh_layer_backward", [("dz.sum(dim=0)", "dz.mean(dim=0)")]),
    # Task 3: the gradient checker
    "numgrad_one_sided": (
        "numerical_gradient",
        [("(f_plus - f_minus) / (2 * eps)", "(f_plus - float(f(base))) / eps")],
    ),
    # Task 4: the RNN over a padded batch
    "rnn_updates_through_padding": ("rnn_forward", [("h = torch.where(real, new, h)", "h = new")]),
    "rnn_only_one_bias": (
        "rnn_forward",
        [("x[:, t] @ W_ih.T + b_ih + h @ W_hh.T + b_hh", "x[:, t] @ W_ih.T + b_ih + h @ W_hh.T")],
    ),
    "rnn_final_state_at_last_padded_step": (
        "rnn_forward",
        [
            (
                "return torch.stack(outputs, dim=1), h",
                "outputs = torch.stack(outputs, dim=1)\n    return outputs, outputs[:, -1]",
            )
        ],
    ),
    # Task 5: BPTT
    "bptt_no_gradient_through_time": (
        "rnn_backward",
        [
            (
                "dh = dh + torch.where(real, grad_outputs[:, t], torch.zeros_like(dh))",
                "dh = torch.where(real, grad_outputs[:, t], torch.zeros_like(dh))",
            )
        ],
    ),
    "bptt_missing_tanh_derivative": (
        "rnn_backward",
        [("da = torch.where(real, dh * (1 - h * h), torch.zeros_like(dh))", "da = dh")],
    ),
    "bptt_counts_padded_positions": (
        "rnn_backward",
        [
            (
                "dh = dh + torch.where(real, grad_outputs[:, t], torch.zeros_like(dh))",
                "dh = dh + grad_outputs[:, t]",
            )
        ],
    ),
}

_BACKWARD = '''
def tanh_layer_backward(x, W, b, grad_y):
    """(dx, dW, db) by autograd: against the rules of the task."""
    x, W, b = (t.clone().requires_grad_() for t in (x, W, b))
    (torch.tanh(x @ W.T + b) * grad_y).sum().backward()
    return x.grad, W.grad, b.grad
'''

_ESCAPES_INFERENCE_MODE = '''
import torch.nn.functional as F


def softmax_cross_entropy(logits, targets):
    """Leaves inference mode and asks autograd (works at run time; the grader reads the code)."""
    with torch.inference_mode(False), torch.enable_grad():
        z = logits.clone().requires_grad_()
        loss = F.cross_entropy(z, targets.clone())
        (dz,) = torch.autograd.grad(loss, z)
    return loss.detach(), dz
'''

_IMPORTS_LIBRARY_RNN = '''
from seqmodels.rnn import ElmanRNN


def rnn_forward(x, lengths, h0, W_ih, W_hh, b_ih, b_hh):
    """The course library's RNN: hidden from the kernel while grading."""
    rnn = ElmanRNN(W_ih.shape[1], W_hh.shape[0]).to(device=x.device, dtype=x.dtype)
    return rnn(x, lengths, h0)
'''


# issue 19's route around name matching: a correct answer, then the name rebound to autograd
_REBINDS_TO_AUTOGRAD = (
    _ANSWERS["softmax_cross_entropy"]
    + """


def _by_autograd(logits, targets):
    with torch.inference_mode(False), torch.enable_grad():
        z = logits.clone().requires_grad_()
        loss = torch.log_softmax(z, dim=1).gather(1, targets[:, None].clone()).neg().mean()
        loss.backward()
    return loss.detach(), z.grad


softmax_cross_entropy = _by_autograd
"""
)

#: name → (answer cell, code, test cell that loses its points, what the evidence shows: a traced
#: op or call, or, where the tool is absent from the sandbox, "this cell raised ...")
RULE_BREAKERS: dict[str, tuple[str, str, str, str]] = {
    "calls-backward": (
        "tanh_layer_backward",
        _BACKWARD,
        "test_tanh_layer_backward",
        "torch._tensor.Tensor.backward",
    ),
    "escapes-inference-mode-for-autograd": (
        "softmax_cross_entropy",
        _ESCAPES_INFERENCE_MODE,
        "test_softmax_cross_entropy",
        "torch._C._EngineBase.run_backward",
    ),
    "imports-seqmodels-rnn": (
        "rnn_forward",
        _IMPORTS_LIBRARY_RNN,
        "test_rnn_forward",
        "this cell raised ImportError",
    ),
    "rebinds-its-answer-to-autograd": (
        "softmax_cross_entropy",
        _REBINDS_TO_AUTOGRAD,
        "test_softmax_cross_entropy",
        "torch._C._EngineBase.run_backward",
    ),
}


WRONG = wrong_answers(nbformat.read(SOURCE, as_version=4), _BUGS, TESTS)

#: name → (answer cell, code, a cell of the student's own after it or None): honest answers that
#: name a forbidden tool or use it outside the graded call; full marks, never held for review
HONEST: dict[str, tuple[str, str, str | None]] = {
    "checks-its-gradient-against-backward-in-a-cell-of-its-own": (
        "tanh_layer_backward",
        _ANSWERS["tanh_layer_backward"],
        "x, W, b = (torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in "
        "((3, 2), (4, 2), (4,)))\n"
        "g = torch.randn(3, 4, dtype=torch.float64)\n"
        "(torch.tanh(x @ W.T + b) * g).sum().backward()\n"
        "with torch.no_grad():\n"
        "    mine = tanh_layer_backward(x, W, b, g)\n"
        "torch.testing.assert_close(mine, (x.grad, W.grad, b.grad))\n",
    ),
}
