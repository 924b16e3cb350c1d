"""Plausible submissions for Problem Set 3: typical wrong answers and ones that break its rules.

A helper for tests of the grading pipeline (not a test module itself), built as
tests/ps2_submissions.py is: each wrong answer is the solution's answer cell with one typical bug
put in (the solution's text replaced by the buggy text), so it costs points on its own task only.
`RULE_BREAKERS` use what a task forbids (autograd in the by-hand Jacobian, torch's clipping or LSTM)
or import the course library's hidden implementation; they earn nothing for that task.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from grading_helpers import wrong_answers
from ps1_submissions import solution_answers

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "ps3" / "ps3.ipynb"
_ANSWERS = solution_answers(nbformat.read(SOURCE, as_version=4))

# grade_id of each answer cell → grade_id of its test cell
TESTS = {
    "clip_by_global_norm": "test_clip_by_global_norm",
    "state_jacobians": "test_state_jacobians",
    "gru_step": "test_gru_step",
    "lstm_forward": "test_lstm_forward",
    "input_gradient_norms": "test_input_gradient_norms",
}

_SCALE_ALL = "scale = max_norm / norm\n        return [g * scale for g in grads], norm"
_STEP = "step = (1 - states[t + 1] ** 2)[:, None] * W_hh"
_JACOBIAN_ROWS = """rows = []
    for i in range(h.shape[0]):  # one backward pass per component of h_T: a row of the Jacobian
        (grad,) = torch.autograd.grad(h[i], inputs, retain_graph=True, allow_unused=True)
        rows.append(torch.zeros_like(inputs) if grad is None else grad)
    jacobian = torch.stack(rows)"""

# name → (answer cell, [(the solution's text, the buggy text), ...])
_BUGS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # Task 1: clipping by global norm
    "clip_per_tensor": (
        "clip_by_global_norm",
        [
            (
                _SCALE_ALL,
                "return [g * torch.clamp(max_norm / g.norm(), max=1.0) for g in grads], norm",
            )
        ],
    ),
    "clip_always_rescales": ("clip_by_global_norm", [("if norm > max_norm:", "if norm > 0:")]),
    "clip_in_place": (
        "clip_by_global_norm",
        [
            (
                _SCALE_ALL,
                "scale = max_norm / norm\n        return [g.mul_(scale) for g in grads], norm",
            )
        ],
    ),
    # Task 2: dh_T/dh_t by hand
    "jacobian_product_in_wrong_order": (
        "state_jacobians",
        [("product = product @ step", "product = step @ product")],
    ),
    "jacobian_W_hh_transposed": ("state_jacobians", [(_STEP, _STEP + ".T")]),
    "jacobian_tanh_derivative_of_pre_activation": (
        "state_jacobians",
        [
            (
                "(1 - states[t + 1] ** 2)",
                "(1 - (W_xh @ x[t] + W_hh @ states[t] + b) ** 2)",
            )
        ],
    ),
    # Task 3: the GRU cell
    "gru_z_roles_swapped": (
        "gru_step",
        [("return (1 - z) * h + z * candidate", "return z * h + (1 - z) * candidate")],
    ),
    "gru_reset_after_recurrent_product": (
        "gru_step",
        [("(r * h) @ U_h.T", "r * (h @ U_h.T)")],
    ),
    # Task 4: the LSTM over a padded batch
    "lstm_gate_order_ifog": (
        "lstm_forward",
        [
            ("g = torch.tanh(a[:, 2 * H : 3 * H])", "g = torch.tanh(a[:, 3 * H :])"),
            ("o = torch.sigmoid(a[:, 3 * H :])", "o = torch.sigmoid(a[:, 2 * H : 3 * H])"),
        ],
    ),
    "lstm_only_one_bias": (
        "lstm_forward",
        [("h @ weight_hh.T + bias_hh", "h @ weight_hh.T")],
    ),
    "lstm_final_state_at_last_padded_step": (
        "lstm_forward",
        [
            (
                "return torch.stack(outputs, dim=1), (h, c)",
                "outputs = torch.stack(outputs, dim=1)\n    return outputs, (outputs[:, -1], c)",
            )
        ],
    ),
    # Task 5: gradient norms by distance
    "grad_norms_by_position_not_distance": (
        "input_gradient_norms",
        [("return norms.flip(0).detach()", "return norms.detach()")],
    ),
    "grad_norms_of_the_summed_state": (
        "input_gradient_norms",
        [
            (
                _JACOBIAN_ROWS,
                "(grad,) = torch.autograd.grad(h.sum(), inputs)\n    jacobian = grad[None]",
            )
        ],
    ),
}

_JACOBIAN_BY_AUTOGRAD = '''
def state_jacobians(x, h0, W_xh, W_hh, b):
    """dh_T/dh_t by autograd: against the rules of the task."""
    T = x.shape[0]
    states = [h0]
    for t in range(T):
        states.append(torch.tanh(W_xh @ x[t] + W_hh @ states[-1] + b))

    def run_from(t):
        def last(h):
            for s in range(t, T):
                h = torch.tanh(W_xh @ x[s] + W_hh @ h + b)
            return h

        return last

    with torch.inference_mode(False), torch.enable_grad():
        out = [torch.autograd.functional.jacobian(run_from(t), states[t].clone()) for t in range(T)]
    return torch.stack([*out, torch.eye(len(h0), dtype=x.dtype, device=x.device)])
'''

_TORCH_CLIPPING = '''
import torch.nn.utils as U


def clip_by_global_norm(grads, max_norm):
    """torch's clip_grad_norm_ on copies: against the rules of the task."""
    params = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    norm = U.clip_grad_norm_(params, max_norm)
    return [p.grad for p in params], norm.to(grads[0].dtype)
'''

_TORCH_LSTM = '''
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def lstm_forward(x, lengths, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh):
    """torch.nn.LSTM with the weights copied in: against the rules of the task."""
    lstm = torch.nn.LSTM(x.shape[2], h0.shape[1], batch_first=True).to(x.device, x.dtype)
    with torch.no_grad():
        for name, value in zip(lstm._flat_weights_names, (weight_ih, weight_hh, bias_ih, bias_hh)):
            getattr(lstm, name).copy_(value)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, (h, c) = lstm(packed, (h0[None].contiguous(), c0[None].contiguous()))
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return out, (h[0], c[0])
'''

_FUSED_LSTM_THROUGH_TORCH_C = '''
def lstm_forward(x, lengths, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh):
    """PyTorch's fused LSTM kernel reached through torch._C, one sequence at a time."""
    fused = torch._C._VariableFunctions.lstm
    weights = [weight_ih, weight_hh, bias_ih, bias_hh]
    out = torch.zeros(*x.shape[:2], h0.shape[1], dtype=x.dtype, device=x.device)
    hs, cs = [], []
    for b, n in enumerate(lengths.tolist()):
        state = (h0[b : b + 1, None].transpose(0, 1), c0[b : b + 1, None].transpose(0, 1))
        o, h, c = fused(x[b : b + 1, :n], state, weights, True, 1, 0.0, False, False, True)
        out[b, :n] = o[0]
        hs.append(h[0, 0])
        cs.append(c[0, 0])
    return out, (torch.stack(hs), torch.stack(cs))
'''

_IMPORTS_LIBRARY_GRADIENTS = '''
from seqmodels.gradients import global_norm


def clip_by_global_norm(grads, max_norm):
    """The course library's global norm: hidden from the kernel while grading."""
    norm = global_norm(grads)
    scale = min(1.0, max_norm / float(norm)) if norm > 0 else 1.0
    return [g * scale for g in grads], norm
'''

_IMPORTS_LIBRARY_GATED = '''
from seqmodels.gated import lecture_gru_step


def gru_step(x, h, W, U, b):
    """The course library's GRU step: hidden from the kernel while grading."""
    H = h.shape[1]
    gates = {"r": slice(0, H), "z": slice(H, 2 * H), "h": slice(2 * H, 3 * H)}
    return lecture_gru_step(
        x, h, *({k: m[rows] for k, rows in gates.items()} for m in (W, U, b))
    )
'''


# issue 19's route around name matching: an object whose __call__ runs nn.LSTM
_LSTM_BEHIND_A_CALLABLE = (
    _TORCH_LSTM.replace("def lstm_forward(x, lengths", "def _torch_lstm(x, lengths")
    + """


class _L:
    def __call__(self, *args):
        return _torch_lstm(*args)


lstm_forward = _L()
"""
)

#: name → (answer cell, code, test cell that loses its points, what the evidence shows: a traced
#: op or call, or, where the tool is absent from the sandbox, "this cell raised ...")
RULE_BREAKERS: dict[str, tuple[str, str, str, str]] = {
    "jacobian-by-autograd": (
        "state_jacobians",
        _JACOBIAN_BY_AUTOGRAD,
        "test_state_jacobians",
        "torch._C._EngineBase.run_backward",
    ),
    "calls-clip-grad-norm": (
        "clip_by_global_norm",
        _TORCH_CLIPPING,
        "test_clip_by_global_norm",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
    ),
    "calls-nn-lstm": (
        "lstm_forward",
        _TORCH_LSTM,
        "test_lstm_forward",
        "torch.lstm",
    ),
    "fused-lstm-through-torch-internals": (
        "lstm_forward",
        _FUSED_LSTM_THROUGH_TORCH_C,
        "test_lstm_forward",
        "torch.lstm",
    ),
    "imports-seqmodels-gradients": (
        "clip_by_global_norm",
        _IMPORTS_LIBRARY_GRADIENTS,
        "test_clip_by_global_norm",
        "this cell raised ImportError",
    ),
    "imports-seqmodels-gated": (
        "gru_step",
        _IMPORTS_LIBRARY_GATED,
        "test_gru_step",
        "this cell raised ImportError",
    ),
    "lstm-forward-is-an-object-running-nn-lstm": (
        "lstm_forward",
        _LSTM_BEHIND_A_CALLABLE,
        "test_lstm_forward",
        "torch.lstm",
    ),
}


WRONG = wrong_answers(nbformat.read(SOURCE, as_version=4), _BUGS, TESTS)

#: name → (answer cell, code, a cell of the student's own after it or None): honest answers that
#: name a forbidden tool or use it outside the graded call; full marks, never held for review
HONEST: dict[str, tuple[str, str, str | None]] = {
    "checks-its-clipping-against-torch-in-a-cell-of-its-own": (
        "clip_by_global_norm",
        _ANSWERS["clip_by_global_norm"],
        "_p = [torch.nn.Parameter(torch.ones(3))]\n_p[0].grad = torch.full((3,), 4.0)\n"
        "_norm = torch.nn.utils.clip_grad_norm_(_p, 1.0)  # the built-in, as a check\n",
    ),
}
