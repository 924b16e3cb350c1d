"""Plausible submissions for Problem Set 2: typical wrong answers and ones that break its rules.

A helper for tests of the grading pipeline (not a test module itself). Each wrong answer is the
solution's answer cell with one typical bug put in (the solution's text replaced by the buggy
text), so it costs points on its own task only; `KILLED_BY` names, for each, a hidden or public case
of its task that fails. The part-B bugs (`tbptt_*`) are killed by named checks of the trajectory
task (B1), which the smoke profile grades. `RULE_BREAKERS` use autograd in a by-hand task or import
the course library's hidden implementation; they earn nothing for that task.
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
    "gradients": "test_gradients",
    "broadcast_ops": "test_broadcast_ops",
    "rnn_lm_log_probs": "test_rnn_lm_log_probs",
    "lm_bptt": "test_lm_bptt",
    "tbptt_step": "test_tbptt_step",
    "d_experiment": None,  # part D's experiment, graded by hand (left out of the round trips)
}

# name → (answer cell, [(the solution's text, the buggy text), ...])
_BUGS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # Task 1: the backward pass
    "gradients_accumulate_in_place": (
        "gradients",
        [("else grads[key] + g  # never in place", "else grads[key].add_(g)")],
    ),
    "gradients_last_write_wins": (
        "gradients",
        [
            (
                "grads[key] = g if key not in grads else grads[key] + g  # never in place",
                "grads[key] = g",
            )
        ],
    ),
    "gradients_returns_the_callers_tensor": (
        "gradients",
        [("[grads[id(x)].clone() if id(x) in grads", "[grads[id(x)] if id(x) in grads")],
    ),
    # Task 2: broadcasting ops
    "sum_to_drops_the_kept_axes": (
        "broadcast_ops",
        [("out = out.sum(dim=stretched, keepdim=True)", "out = out.sum(dim=stretched)")],
    ),
    "mul_gradients_swapped": (
        "broadcast_ops",
        [
            (
                "(sum_to(g * B, A.shape), sum_to(g * A, B.shape))",
                "(sum_to(g * A, A.shape), sum_to(g * B, B.shape))",
            )
        ],
    ),
    "sigmoid_derivative_at_the_input": (
        "broadcast_ops",
        [("(g * y * (1 - y),)", "(g * a.value * (1 - a.value),)")],
    ),
    # Task 3: the RNN LM
    "rnn_lm_state_requires_grad": (
        "rnn_lm_log_probs",
        [('params["W_hh"], h0, []', 'params["W_hh"], h0.clone().requires_grad_(), []')],
    ),
    "rnn_lm_naive_log_softmax": (
        "rnn_lm_log_probs",
        [("shifted = y - y.max(dim=-1, keepdim=True).values", "shifted = y")],
    ),
    # Task 4: BPTT by hand
    "bptt_no_gradient_through_time": (
        "lm_bptt",
        [("da = (dh + from_output[:, t]) * ", "da = from_output[:, t] * ")],
    ),
    "bptt_sum_not_mean": ("lm_bptt", [("/ (B * T)  # (B, T, V)", "# (B, T, V)")]),
    "bptt_embedding_rows_overwritten": (
        "lm_bptt",
        [
            (
                "torch.zeros_like(E).index_add_(0, inputs.reshape(-1), demb.reshape(B * T, -1))",
                "torch.zeros_like(E).index_put_((inputs.reshape(-1),), demb.reshape(B * T, -1))",
            )
        ],
    ),
    # Task 5 (part B's trajectory): each killed by a named check of the trajectory task
    "tbptt_does_not_learn": ("tbptt_step", [("p -= lr * scale * g", "p.add_(0 * g)")]),
    "tbptt_gradients_not_zeroed": (
        "tbptt_step",
        [
            (
                "grads = torch.autograd.grad(loss, list(params.values()))",
                "loss.backward()\n    grads = [p.grad for p in params.values()]",
            )
        ],
    ),
    "tbptt_clipping_missing": (
        "tbptt_step",
        [("scale = min(1.0, max_norm / (float(norm) + 1e-6))", "scale = 1.0")],
    ),
    "tbptt_targets_not_shifted": (
        "tbptt_step",
        [("batch[:, :-1], batch[:, 1:]", "batch[:, :-1], batch[:, :-1]")],
    ),
    "tbptt_state_reset_each_chunk": (
        "tbptt_step",
        [
            (
                "rnn_lm_log_probs(params, inputs, h)",
                "rnn_lm_log_probs(params, inputs, torch.zeros_like(h))",
            )
        ],
    ),
    "tbptt_state_not_detached": (
        "tbptt_step",
        [("return loss.item(), h_last.detach()", "return loss.item(), h_last")],
    ),
}

#: name → the start of the name of a case it fails (there may be more)
KILLED_BY = {
    "gradients_accumulate_in_place": "hidden: shared gradient tensors",
    "gradients_last_write_wins": "total(x + x)",
    "gradients_returns_the_callers_tensor": "hidden: an input the output does not use",
    "sum_to_drops_the_kept_axes": "sum_to: (2, 3) to (3,) and to (2, 1)",
    "mul_gradients_swapped": "mul: (2,) times (1,)",
    "sigmoid_derivative_at_the_input": "sigmoid at 0",
    "rnn_lm_state_requires_grad": "hidden: float32, inputs left unchanged, no gradient",
    "rnn_lm_naive_log_softmax": "hidden: float32, logits in the hundreds",
    "bptt_no_gradient_through_time": "hidden: float64, V = 13",
    "bptt_sum_not_mean": "all-zero parameters",
    "bptt_embedding_rows_overwritten": "hidden: float64, every input the same token",
    "tbptt_does_not_learn": "hidden: the first 20 losses, float64, lr 0.5, the state carried",
    "tbptt_gradients_not_zeroed": "hidden: the first 20 losses, float64, lr 0.5, the state carried",
    "tbptt_clipping_missing": "hidden: the first 20 losses, float64, lr 0.5, clipping binds",
    "tbptt_targets_not_shifted": "hidden: the first 20 losses, float64, lr 0.5, the state carried",
    "tbptt_state_reset_each_chunk": "hidden: the first 10 losses from a given nonzero state",
    "tbptt_state_not_detached": "hidden: updates in place, keeps leaves",
}

_LM_BPTT_BY_AUTOGRAD = '''
def lm_bptt(params, inputs, targets, h0):
    """Leaves inference mode and asks autograd: against the rules of the task."""
    with torch.inference_mode(False), torch.enable_grad():
        leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
        leaves["h0"] = h0.clone().requires_grad_()
        h, states = leaves["h0"], []
        x = leaves["E"][inputs.clone()] @ leaves["W_xh"].T + leaves["b"]
        for t in range(inputs.shape[1]):
            h = torch.tanh(x[:, t] + h @ leaves["W_hh"].T)
            states.append(h)
        y = torch.stack(states, 1) @ leaves["W_hy"].T + leaves["b_y"]
        loss = -torch.log_softmax(y, -1).gather(-1, targets.clone()[..., None]).mean()
        loss.backward()
    return loss.detach(), {k: v.grad for k, v in leaves.items()}
'''

_IMPORTS_LIBRARY_AUTODIFF = '''
from seqmodels.autodiff import Node


def gradients(output, inputs, grad=None):
    """The course library's engine: hidden from the kernel while grading."""
    raise NotImplementedError(Node)
'''

_SUM_TO_BY_AUTOGRAD = (
    """
def sum_to(grad, shape):
    \"\"\"Broadcasting's gradient by asking autograd: against the rules of the task.\"\"\"
    with torch.inference_mode(False), torch.enable_grad():
        x = torch.zeros(tuple(shape), dtype=grad.dtype, device=grad.device, requires_grad=True)
        upstream = grad.clone()
        (out,) = torch.autograd.grad(x + torch.zeros(upstream.shape, dtype=grad.dtype, device=grad.device), x, upstream)
    return out
"""
    + _ANSWERS["broadcast_ops"].split("def mul(", 1)[0].split("def sum_to(", 1)[0]
    + "\n\ndef mul("
    + _ANSWERS["broadcast_ops"].split("def mul(", 1)[1]
)

#: name → (answer cell, code, test cell that loses its points, what the evidence shows: a traced
#: op or call, or, where the tool is absent from the sandbox, "this cell raised ...")
RULE_BREAKERS: dict[str, tuple[str, str, str, str]] = {
    "escapes-inference-mode-for-autograd": (
        "lm_bptt",
        _LM_BPTT_BY_AUTOGRAD,
        "test_lm_bptt",
        "torch._C._EngineBase.run_backward",
    ),
    "imports-seqmodels-autodiff": (
        "gradients",
        _IMPORTS_LIBRARY_AUTODIFF,
        "test_gradients",
        "this cell raised ImportError",
    ),
    "sum-to-by-autograd": (
        "broadcast_ops",
        _SUM_TO_BY_AUTOGRAD,
        "test_broadcast_ops",
        "torch._C._EngineBase.run_backward",
    ),
}


WRONG = wrong_answers(nbformat.read(SOURCE, as_version=4), _BUGS, TESTS)

#: Task 3 bugs that change the model's values also change part B's trajectory (Task 5 trains
#: Task 3's model): they lose points on Task 3 *and* on Task 5, by design, and on no other task
_CASCADES = {
    "rnn_lm_ignores_h0": (
        "rnn_lm_log_probs",
        [('params["W_hh"], h0, []', 'params["W_hh"], torch.zeros_like(h0), []')],
    ),
    "rnn_lm_W_hh_not_transposed": (
        "rnn_lm_log_probs",
        [("h = torch.tanh(x[:, t] + h @ W_hh.T)", "h = torch.tanh(x[:, t] + h @ W_hh)")],
    ),
}
CASCADES = wrong_answers(nbformat.read(SOURCE, as_version=4), _CASCADES, TESTS)

#: name → (answer cell, code, a cell of the student's own after it or None): honest answers that
#: name a forbidden tool or use it outside the graded call; full marks, never held for review
HONEST: dict[str, tuple[str, str, str | None]] = {
    "checks-lm-bptt-against-autograd-in-a-cell-of-its-own": (
        "lm_bptt",
        _ANSWERS["lm_bptt"],
        "_p = {k: torch.randn(*s, dtype=torch.float64, requires_grad=True) for k, s in "
        "[('E', (5, 2)), ('W_xh', (3, 2)), ('W_hh', (3, 3)), ('b', (3,)), ('W_hy', (5, 3)), "
        "('b_y', (5,))]}\n"
        "_x, _y = torch.randint(5, (2, 4)), torch.randint(5, (2, 4))\n"
        "_h0 = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)\n"
        "_lp, _ = rnn_lm_log_probs(_p, _x, _h0)\n"
        "_auto = torch.autograd.grad(-_lp.gather(-1, _y[..., None]).mean(), [*_p.values(), _h0])\n"
        "with torch.no_grad():\n"
        "    _loss, _mine = lm_bptt({k: v.detach() for k, v in _p.items()}, _x, _y, _h0.detach())\n"
        "for _a, _k in zip(_auto, [*_p, 'h0']):\n"
        "    torch.testing.assert_close(_mine[_k], _a)\n",
    ),
}
