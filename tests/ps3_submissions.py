"""Plausible submissions for Problem Set 3 (the gated race): wrong answers, rule-breakers, rewrites.

A helper for tests of the grading pipeline (not a test module itself), built as
tests/ps2_submissions.py is: each wrong answer is the solution's answer cell with one typical bug
put in (the solution's text replaced by the buggy text). `WRONG` cost points on their own task
only; `KILLED_BY` names, for each, a case of its task that fails. The part-B bugs (`adam_*`) are
killed by named checks of the trajectory task (B1), which the smoke profile grades. `CASCADES`
are bugs of Task 1's `cifg_step`, which Tasks 3–5 and the training call: they cost those tasks
too, by design. `RULE_BREAKERS` use what a task forbids or import the course library's hidden
implementation; they earn nothing for that task. `EQUIVALENT_STEPS` are rewrites of `adam_step`
that must keep every trajectory case (they set B1's tolerance), and `MUTANTS` the set's own
mutants (tests/test_grading_ps3_oracles.py states their kill rate).
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
    "cifg_step": "test_cifg_step",
    "cifg_step_backward": "test_cifg_step_backward",
    "cifg_lm_log_probs": "test_cifg_lm_log_probs",
    "verb_gradient_norms": "test_verb_gradient_norms",
    "adam_step": "test_adam_step",
    "d_experiment": None,  # part D's experiment, graded by hand (left out of the round trips)
}

_UPDATE = "p -= lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + 1e-8)"
_GRADS = "grads = torch.autograd.grad(loss, list(params.values()))"

# name → (answer cell, [(the solution's text, the buggy text), ...])
_BUGS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # Task 2: the backward pass by hand
    "backward_misses_the_path_through_h": (
        "cifg_step_backward",
        [("dc_new + dh_new * o * (1 - tanh_c**2)", "dc_new")],
    ),
    "backward_input_gate_without_sigmoid_derivative": (
        "cifg_step_backward",
        [("dz_i = dc_total * (g - c) * i * (1 - i)", "dz_i = dc_total * (g - c)")],
    ),
    "backward_cell_passes_whole_as_in_an_lstm_with_f_1": (
        "cifg_step_backward",
        [('"c": dc_total * (1 - i) + dz_i * p_i,', '"c": dc_total + dz_i * p_i,')],
    ),
    "backward_bias_averaged_over_rows": (
        "cifg_step_backward",
        [('"b": dz.sum(dim=0),', '"b": dz.mean(dim=0),')],
    ),
    "backward_input_gate_sees_only_g": (
        "cifg_step_backward",
        [("dz_i = dc_total * (g - c) * i * (1 - i)", "dz_i = dc_total * g * i * (1 - i)")],
    ),
    "backward_misses_the_output_gates_peephole_into_c": (
        "cifg_step_backward",
        [
            (
                "dc_new + dh_new * o * (1 - tanh_c**2) + dz_o * p_o",
                "dc_new + dh_new * o * (1 - tanh_c**2)",
            )
        ],
    ),
    "backward_misses_the_input_gates_peephole_into_c_prev": (
        "cifg_step_backward",
        [('"c": dc_total * (1 - i) + dz_i * p_i,', '"c": dc_total * (1 - i),')],
    ),
    "backward_output_peephole_gradient_with_the_old_cell": (
        "cifg_step_backward",
        [('"p_o": (dz_o * c_new).sum(dim=0),', '"p_o": (dz_o * c).sum(dim=0),')],
    ),
    # Task 3: the language model (hidden aspects the trajectory does not see)
    "lm_naive_log_softmax": (
        "cifg_lm_log_probs",
        [("shifted = y - y.max(dim=-1, keepdim=True).values", "shifted = y")],
    ),
    "lm_state_requires_grad": (
        "cifg_lm_log_probs",
        [
            (
                "h = c = torch.zeros(B, H, dtype=x.dtype, device=x.device)",
                "h = c = torch.zeros(B, H, dtype=x.dtype, device=x.device, requires_grad=True)",
            )
        ],
    ),
    # Task 4: the gradient of the agreement margin by position
    "norms_of_the_verbs_log_probability": (
        "verb_gradient_norms",
        [
            (
                "margin = torch.where(plural, plural_mass - singular, singular - plural_mass)",
                "margin = log_p.gather(-1, verbs[:, None])[:, 0]",
            )
        ],
    ),
    "norms_summed_over_sentences": (
        "verb_gradient_norms",
        [("return grad.norm(dim=-1).mean(dim=0)", "return grad.norm(dim=-1).sum(dim=0)")],
    ),
    "norms_store_gradients_in_the_parameters": (
        "verb_gradient_norms",
        [
            ("p = {k: v.detach() for k, v in params.items()}", "p = params"),
            (
                "(grad,) = torch.autograd.grad(margin.sum(), x)",
                "x.retain_grad()\n        margin.sum().backward()\n        grad = x.grad",
            ),
        ],
    ),
    # Task 5 (part B's trajectory): each killed by a named check of the trajectory task
    "adam_does_not_learn": ("adam_step", [(_UPDATE, "p.add_(0 * m)")]),
    "adam_without_bias_correction": (
        "adam_step",
        [(_UPDATE, "p -= lr * m / (v.sqrt() + 1e-8)")],
    ),
    "adam_clipping_missing": (
        "adam_step",
        [("scale = min(1.0, max_norm / (float(norm) + 1e-6))", "scale = 1.0")],
    ),
    "adam_targets_not_shifted": (
        "adam_step",
        [("log_probs.gather(-1, batch[:, 1:, None])", "log_probs.gather(-1, batch[:, :-1, None])")],
    ),
    "adam_gradients_of_the_previous_step_left_in": (
        "adam_step",
        [(_GRADS, "loss.backward()\n    grads = [p.grad for p in params.values()]")],
    ),
    "adam_state_started_afresh_each_step": ("adam_step", [("if not state:", "if True:")]),
    "adam_epsilon_inside_the_square_root": (
        "adam_step",
        [(_UPDATE, "p -= lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t) + 1e-8).sqrt())")],
    ),
}

#: name → the start of the name of a case it fails (there may be more)
KILLED_BY = {
    "backward_misses_the_path_through_h": "hidden: float64, only h_t's gradient",
    "backward_input_gate_without_sigmoid_derivative": "hidden: float64, B = 5",
    "backward_cell_passes_whole_as_in_an_lstm_with_f_1": "all-zero weights and c = 0",
    "backward_bias_averaged_over_rows": "hidden: float64, H = m = 1, B = 3",
    "backward_misses_the_output_gates_peephole_into_c": "hidden: float64, a large cell (c ~ 5)",
    "backward_misses_the_input_gates_peephole_into_c_prev": "hidden: float64, a large cell (c ~ 5)",
    "backward_output_peephole_gradient_with_the_old_cell": "hidden: float64, B = 5",
    "backward_input_gate_sees_only_g": "hidden: float64, only c_t's gradient",
    "lm_naive_log_softmax": "hidden: float32, logits in the thousands",
    "lm_state_requires_grad": "hidden: float32, inputs left unchanged, no gradient",
    "norms_of_the_verbs_log_probability": "hidden: float64, d = 3",
    "norms_summed_over_sentences": "hidden: float64, d = 3",
    "norms_store_gradients_in_the_parameters": "hidden: float64, parameters that require grad",
    "adam_does_not_learn": "hidden: the first 20 losses, float64, lr 0.01, clipping never binds",
    "adam_without_bias_correction": "hidden: one step from t = 0",
    "adam_clipping_missing": "hidden: the first 20 losses, float64, lr 0.01, clipping binds",
    "adam_targets_not_shifted": "hidden: the first 20 losses, float64, lr 0.01, clipping never",
    "adam_gradients_of_the_previous_step_left_in": "hidden: updates in place, keeps leaves",
    "adam_state_started_afresh_each_step": "hidden: after 5 steps",
    "adam_epsilon_inside_the_square_root": "hidden: the first 20 losses, float64, lr 0.01, clipping never",
}

#: the part-B bugs the issue names, each with the check of B1 that kills it (for the report)
PART_B = {
    "adam_does_not_learn": "a model that does not learn",
    "adam_without_bias_correction": "Adam without bias correction",
    "adam_clipping_missing": "clipping missing, on a batch where clipping binds",
    "adam_targets_not_shifted": "targets shifted by one",
    "adam_gradients_of_the_previous_step_left_in": "gradients of the previous step left in",
}

WRONG = wrong_answers(nbformat.read(SOURCE, as_version=4), _BUGS, TESTS)

#: Task 1 bugs change the values every later task computes with `cifg_step`: they cost Task 1 and
#: Tasks 3, 4 and 5 (not Task 2, which recomputes the step itself)
_CASCADES = {
    "cifg_forget_gate_not_coupled": ("cifg_step", [("(1 - i) * c + i * g", "c + i * g")]),
    "cifg_gates_in_nn_lstm_order": (
        "cifg_step",
        [
            ("o = torch.sigmoid(z[:, H : 2 * H]", "o = torch.sigmoid(z[:, 2 * H :]"),
            ("g = torch.tanh(z[:, 2 * H :])", "g = torch.tanh(z[:, H : 2 * H])"),
        ],
    ),
    "cifg_output_gate_peeks_at_the_old_cell": (
        "cifg_step",
        [('params["p_o"] * c_new)', 'params["p_o"] * c)')],
    ),
    "cifg_output_without_tanh": (
        "cifg_step",
        [("return o * torch.tanh(c_new), c_new", "return o * c_new, c_new")],
    ),
}
CASCADES = wrong_answers(nbformat.read(SOURCE, as_version=4), _CASCADES, TESTS)
CASCADE_TASKS = ("cifg_step", "cifg_lm_log_probs", "verb_gradient_norms", "adam_step")

_BACKWARD_BY_AUTOGRAD = '''
def cifg_step_backward(params, x_t, h, c, dh_new, dc_new):
    """Leaves inference mode and asks autograd: against the rules of the task."""
    with torch.inference_mode(False), torch.enable_grad():
        leaves = {k: params[k].clone().requires_grad_() for k in ("W", "U", "b", "p_i", "p_o")}
        x, hh, cc = (t.clone().requires_grad_() for t in (x_t, h, c))
        h_new, c_new = cifg_step(leaves, x, hh, cc)
        grads = torch.autograd.grad((h_new * dh_new.clone()).sum() + (c_new * dc_new.clone()).sum(),
                                    [*leaves.values(), x, hh, cc])
    return dict(zip(["W", "U", "b", "p_i", "p_o", "x_t", "h", "c"], (g.detach().clone() for g in grads)))
'''

_IMPORTS_LIBRARY_GATED = '''
from seqmodels.gated import LSTM


def cifg_step(params, x_t, h, c):
    """The course library's LSTM: hidden from the kernel while grading."""
    raise NotImplementedError(LSTM)
'''

_STEP_BY_LSTM_CELL = '''
def cifg_step(params, x_t, h, c):
    """torch's LSTM cell with the forget gate tied to 1 - i (sigma(-a) = 1 - sigma(a)): the right
    values where the peepholes are zero (torch's cell has none), with the tool the task forbids."""
    H = h.shape[1]
    W, U, b = params["W"], params["U"], params["b"]
    Wi, Wo, Wg = W[:H], W[H : 2 * H], W[2 * H :]
    Ui, Uo, Ug = U[:H], U[H : 2 * H], U[2 * H :]
    bi, bo, bg = b[:H], b[H : 2 * H], b[2 * H :]
    return torch.lstm_cell(
        x_t, (h, c),
        torch.cat([Wi, -Wi, Wg, Wo]), torch.cat([Ui, -Ui, Ug, Uo]),
        torch.cat([bi, -bi, bg, bo]), torch.zeros_like(b.new_empty(4 * H)),
    )
'''

_ADAM_BY_TORCH_OPTIM = '''
def adam_step(params, state, batch, lr, max_norm):
    """torch.optim.Adam kept in the state: the right trajectory, with the tool the task forbids."""
    if "optimizer" not in state:
        state["optimizer"] = torch.optim.Adam(list(params.values()), lr=lr)
    log_probs = cifg_lm_log_probs(params, batch[:, :-1])
    loss = -log_probs.gather(-1, batch[:, 1:, None]).mean()
    grads = torch.autograd.grad(loss, list(params.values()))
    norm = torch.sqrt(sum((g * g).sum() for g in grads))
    scale = min(1.0, max_norm / (float(norm) + 1e-6))
    for p, g in zip(params.values(), grads):
        p.grad = g * scale
    for group in state["optimizer"].param_groups:
        group["lr"] = lr
    state["optimizer"].step()
    for p in params.values():
        p.grad = None
    return loss.item()
'''

#: name → (answer cell, code, test cell that loses its points, what the evidence shows: a traced
#: op or call, or, where the tool is absent from the sandbox, "this cell raised ...")
RULE_BREAKERS: dict[str, tuple[str, str, str, str]] = {
    "escapes-inference-mode-for-autograd": (
        "cifg_step_backward",
        _BACKWARD_BY_AUTOGRAD,
        "test_cifg_step_backward",
        "torch._C._EngineBase.run_backward",
    ),
    "imports-seqmodels-gated": (
        "cifg_step",
        _IMPORTS_LIBRARY_GATED,
        "test_cifg_step",
        "this cell raised ImportError",
    ),
    "cifg-step-by-torch-lstm-cell": (
        "cifg_step",
        _STEP_BY_LSTM_CELL,
        "test_cifg_step",
        "lstm_cell",
    ),
    "adam-by-torch-optim": (
        "adam_step",
        _ADAM_BY_TORCH_OPTIM,
        "test_adam_step",
        "torch.optim",
    ),
}

#: name → (answer cell, code, a cell of the student's own after it or None): honest answers that
#: use a forbidden tool outside the graded call; full marks, never held for review
HONEST: dict[str, tuple[str, str, str | None]] = {
    "checks-the-backward-pass-against-autograd-in-a-cell-of-its-own": (
        "cifg_step_backward",
        _ANSWERS["cifg_step_backward"],
        "_p = {k: torch.randn(*s, dtype=torch.float64, requires_grad=True) for k, s in "
        "[('W', (6, 3)), ('U', (6, 2)), ('b', (6,)), ('p_i', (2,)), ('p_o', (2,))]}\n"
        "_x, _h, _c = (torch.randn(4, n, dtype=torch.float64, requires_grad=True) for n in (3, 2, 2))\n"
        "_dh, _dc = torch.randn(4, 2, dtype=torch.float64), torch.randn(4, 2, dtype=torch.float64)\n"
        "_hn, _cn = cifg_step(_p, _x, _h, _c)\n"
        "_auto = torch.autograd.grad((_hn * _dh).sum() + (_cn * _dc).sum(), [*_p.values(), _x, _h, _c])\n"
        "with torch.no_grad():\n"
        "    _mine = cifg_step_backward({k: v.detach() for k, v in _p.items()}, _x.detach(), "
        "_h.detach(), _c.detach(), _dh, _dc)\n"
        "for _a, _k in zip(_auto, ['W', 'U', 'b', 'p_i', 'p_o', 'x_t', 'h', 'c']):\n"
        "    torch.testing.assert_close(_mine[_k], _a)\n",
    ),
    "checks-adam-against-torch-optim-in-a-cell-of-its-own": (
        "adam_step",
        _ANSWERS["adam_step"],
        "_V = 27\n"
        "_p0 = {k: torch.randn(*s, dtype=torch.float64) * 0.3 for k, s in [('E', (_V, 3)), "
        "('W', (6, 3)), ('U', (6, 2)), ('b', (6,)), ('p_i', (2,)), ('p_o', (2,)), ('W_y', (_V, 2)), ('b_y', (_V,))]}\n"
        "_mine = {k: v.clone().requires_grad_() for k, v in _p0.items()}\n"
        "_ref = {k: v.clone().requires_grad_() for k, v in _p0.items()}\n"
        "_opt, _state = torch.optim.Adam(list(_ref.values()), lr=0.01), {}\n"
        "_rows = torch.randint(3, _V, (4, 6))\n"
        "for _ in range(3):\n"
        "    _loss = adam_step(_mine, _state, _rows, 0.01, 1.0)\n"
        "    _lp = cifg_lm_log_probs(_ref, _rows[:, :-1])\n"
        "    _l = torch.nn.functional.nll_loss(_lp.reshape(-1, _V), _rows[:, 1:].reshape(-1))\n"
        "    _opt.zero_grad(); _l.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(list(_ref.values()), 1.0); _opt.step()\n"
        "for _k in _p0:\n"
        "    torch.testing.assert_close(_mine[_k], _ref[_k])\n",
    ),
}

# ------------------------------------------------------------------ equivalent rewrites of adam_step

_HEAD = "def adam_step(params, state, batch, lr, max_norm):\n"
_LOSS = (
    "    log_probs = cifg_lm_log_probs(params, batch[:, :-1])\n"
    "    loss = -log_probs.gather(-1, batch[:, 1:, None]).mean()\n"
)
_INIT = (
    "    if not state:\n"
    "        state.update(t=0, m={k: torch.zeros_like(p) for k, p in params.items()})\n"
    "        state['v'] = {k: torch.zeros_like(p) for k, p in params.items()}\n"
    "    state['t'] += 1\n"
    "    t = state['t']\n"
)

#: rewrites of the training step that compute the same thing another way: another way to get the
#: gradient, another order of the parameters, another reduction, another form of the update; each
#: must keep every trajectory case (tests/test_grading_ps3_oracles.py measures by how much they differ)
EQUIVALENT_STEPS = {
    "backward-then-zero": _HEAD
    + _LOSS
    + "    loss.backward()\n"
    + "    grads = [p.grad.clone() for p in params.values()]\n"
    + "    for p in params.values():\n        p.grad = None\n"
    + "    norm = torch.sqrt(sum((g * g).sum() for g in grads))\n"
    + "    scale = min(1.0, max_norm / (float(norm) + 1e-6))\n"
    + _INIT
    + "    with torch.no_grad():\n"
    + "        for (k, p), g in zip(params.items(), grads):\n"
    + "            g = g * scale\n"
    + "            state['m'][k] = 0.9 * state['m'][k] + 0.1 * g\n"
    + "            state['v'][k] = 0.999 * state['v'][k] + 0.001 * g * g\n"
    + "            p -= lr * (state['m'][k] / (1 - 0.9**t)) / ((state['v'][k] / (1 - 0.999**t)).sqrt() + 1e-8)\n"
    + "    return loss.item()\n",
    "parameters-in-reverse-order-and-in-place-moments": _HEAD
    + _LOSS
    + "    names = list(params)[::-1]\n"
    + "    grads = dict(zip(names, torch.autograd.grad(loss, [params[k] for k in names])))\n"
    + "    norm = sum(g.pow(2).sum() for g in grads.values()).sqrt()\n"
    + "    scale = min(1.0, max_norm / (norm.item() + 1e-6))\n"
    + _INIT
    + "    with torch.no_grad():\n"
    + "        for k in names:\n"
    + "            g = grads[k] * scale\n"
    + "            state['m'][k].mul_(0.9).add_(g, alpha=0.1)\n"
    + "            state['v'][k].mul_(0.999).addcmul_(g, g, value=0.001)\n"
    + "            denom = (state['v'][k] / (1 - 0.999**t)).sqrt().add_(1e-8)\n"
    + "            params[k].addcdiv_(state['m'][k], denom, value=-lr / (1 - 0.9**t))\n"
    + "    return loss.item()\n",
    "one-hot-loss-and-tensor-scale": _HEAD
    + "    log_probs = cifg_lm_log_probs(params, batch[:, :-1])\n"
    + "    onehot = torch.nn.functional.one_hot(batch[:, 1:], log_probs.shape[-1]).to(log_probs.dtype)\n"
    + "    loss = -(log_probs * onehot).sum() / batch[:, 1:].numel()\n"
    + "    grads = torch.autograd.grad(loss, list(params.values()))\n"
    + "    norm = torch.cat([g.flatten() for g in grads]).norm()\n"
    + "    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)\n"
    + _INIT
    + "    with torch.no_grad():\n"
    + "        for (k, p), g in zip(params.items(), grads):\n"
    + "            g = g * scale\n"
    + "            state['m'][k] = torch.lerp(state['m'][k], g, 0.1)\n"
    + "            state['v'][k] = torch.lerp(state['v'][k], g * g, 0.001)\n"
    + "            m_hat = state['m'][k] / (1 - 0.9**t)\n"
    + "            v_hat = state['v'][k] / (1 - 0.999**t)\n"
    + "            p.sub_(lr * m_hat / (torch.sqrt(v_hat) + 1e-8))\n"
    + "    return float(loss.detach())\n",
    "loop-over-rows": _HEAD
    + "    total = 0.0\n"
    + "    for row in batch:\n"
    + "        lp = cifg_lm_log_probs(params, row[None, :-1])[0]\n"
    + "        total = total - lp[torch.arange(len(row) - 1, device=row.device), row[1:]].sum()\n"
    + "    loss = total / (batch.shape[0] * (batch.shape[1] - 1))\n"
    + "    grads = torch.autograd.grad(loss, list(params.values()))\n"
    + "    norm = torch.sqrt(sum((g * g).sum() for g in grads))\n"
    + "    scale = min(1.0, max_norm / (float(norm) + 1e-6))\n"
    + _INIT
    + "    with torch.no_grad():\n"
    + "        for (k, p), g in zip(params.items(), grads):\n"
    + "            g = g * scale\n"
    + "            state['m'][k] = 0.9 * state['m'][k] + 0.1 * g\n"
    + "            state['v'][k] = 0.999 * state['v'][k] + 0.001 * g**2\n"
    + "            p -= lr * (state['m'][k] / (1 - 0.9**t)) / ((state['v'][k] / (1 - 0.999**t)).sqrt() + 1e-8)\n"
    + "    return loss.item()\n",
    "data-attribute-update-and-dot-norm": _HEAD
    + _LOSS
    + "    grads = torch.autograd.grad(loss, list(params.values()))\n"
    + "    norm = torch.sqrt(sum(torch.dot(g.flatten(), g.flatten()) for g in grads))\n"
    + "    scale = min(1.0, max_norm / (norm.item() + 1e-6))\n"
    + _INIT
    + "    c1, c2 = 1 - 0.9**t, 1 - 0.999**t\n"
    + "    for (k, p), g in zip(params.items(), grads):\n"
    + "        g = (g * scale).detach()\n"
    + "        state['m'][k] = 0.9 * state['m'][k] + (1 - 0.9) * g\n"
    + "        state['v'][k] = 0.999 * state['v'][k] + (1 - 0.999) * g * g\n"
    + "        p.data -= lr * (state['m'][k] / c1) / ((state['v'][k] / c2).sqrt() + 1e-8)\n"
    + "    return loss.item()\n",
}

# ------------------------------------------------------------------ the set's own mutants

#: small edits of the solution's answers (answer cell, [(right, wrong), ...]) that a grader must
#: catch: a wrong answer, a broken promise (an input changed, a result that requires grad), a
#: boundary; `tests/test_grading_ps3_oracles.py` grades each in process and states the kill rate.
#: Left out as equivalent (no case can tell them from the solution): a margin of the wrong sign, or
#: the number read wrongly for every sentence (the norm of the gradient of -mu is that of mu)
_MUTANT_EDITS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    **_BUGS,
    **_CASCADES,
    "step_sigmoid_output_gate_as_tanh": (
        "cifg_step",
        [("o = torch.sigmoid(z[:, H : 2 * H]", "o = torch.tanh(z[:, H : 2 * H]")],
    ),
    "step_candidate_as_sigmoid": (
        "cifg_step",
        [("g = torch.tanh(z[:, 2 * H :])", "g = torch.sigmoid(z[:, 2 * H :])")],
    ),
    "step_no_bias": (
        "cifg_step",
        [('h @ params["U"].T + params["b"]', 'h @ params["U"].T')],
    ),
    "step_c_in_place": (
        "cifg_step",
        [("c_new = (1 - i) * c + i * g", "c_new = c.mul_(1 - i).add_(i * g)")],
    ),
    "step_forget_uses_o": (
        "cifg_step",
        [("(1 - i) * c + i * g", "(1 - torch.sigmoid(z[:, H : 2 * H])) * c + i * g")],
    ),
    "step_input_gate_without_peephole": (
        "cifg_step",
        [('z[:, :H] + params["p_i"] * c)', "z[:, :H])")],
    ),
    "step_output_gate_without_peephole": (
        "cifg_step",
        [('z[:, H : 2 * H] + params["p_o"] * c_new)', "z[:, H : 2 * H])")],
    ),
    "backward_input_peephole_gradient_with_the_new_cell": (
        "cifg_step_backward",
        [('"p_i": (dz_i * c).sum(dim=0),', '"p_i": (dz_i * c_new).sum(dim=0),')],
    ),
    "backward_peephole_gradients_averaged": (
        "cifg_step_backward",
        [('"p_o": (dz_o * c_new).sum(dim=0),', '"p_o": (dz_o * c_new).mean(dim=0),')],
    ),
    "backward_output_gate_without_tanh_c": (
        "cifg_step_backward",
        [("dz_o = dh_new * tanh_c * o * (1 - o)", "dz_o = dh_new * o * (1 - o)")],
    ),
    "backward_candidate_without_tanh_derivative": (
        "cifg_step_backward",
        [("dc_total * i * (1 - g**2)]", "dc_total * i]")],
    ),
    "backward_x_gradient_through_U": ("cifg_step_backward", [('"x_t": dz @ W,', '"x_t": dz @ U,')]),
    "backward_U_gradient_from_c": ("cifg_step_backward", [('"U": dz.T @ h,', '"U": dz.T @ c,')]),
    "backward_gates_in_another_order": (
        "cifg_step_backward",
        [
            ("o = torch.sigmoid(z[:, H : 2 * H]", "o = torch.sigmoid(z[:, 2 * H :]"),
            ("g = torch.tanh(z[:, 2 * H :])", "g = torch.tanh(z[:, H : 2 * H])"),
        ],
    ),
    "backward_returns_dc_new_when_nothing_else": (
        "cifg_step_backward",
        [
            (
                '"c": dc_total * (1 - i) + dz_i * p_i,',
                '"c": dc_new if not dh_new.any() else dc_total * (1 - i) + dz_i * p_i,',
            )
        ],
    ),
    "lm_no_output_bias": (
        "cifg_lm_log_probs",
        [('@ params["W_y"].T + params["b_y"]', '@ params["W_y"].T')],
    ),
    "lm_log_softmax_over_time": (
        "cifg_lm_log_probs",
        [
            (
                "shifted.exp().sum(dim=-1, keepdim=True).log()",
                "shifted.exp().sum(dim=1, keepdim=True).log()",
            )
        ],
    ),
    "lm_softmax_not_log": (
        "cifg_lm_log_probs",
        [
            (
                "return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()",
                "return shifted.exp() / shifted.exp().sum(dim=-1, keepdim=True)",
            )
        ],
    ),
    "lm_reads_the_state_after_the_next_token": (
        "cifg_lm_log_probs",
        [
            (
                "        states.append(h)\n    y =",
                "        states.append(h)\n    states = states[1:] + states[-1:]\n    y =",
            )
        ],
    ),
    "norms_of_the_right_numbers_mass_only": (
        "verb_gradient_norms",
        [
            (
                "margin = torch.where(plural, plural_mass - singular, singular - plural_mass)",
                "margin = torch.where(plural, plural_mass, singular)",
            )
        ],
    ),
    "norms_of_one_position_too_few": (
        "verb_gradient_norms",
        [
            (
                "inputs, verbs = sentences[:, : distance + 2], sentences[:, distance + 2]",
                "inputs, verbs = sentences[:, : distance + 1], sentences[:, distance + 2]",
            ),
            ("for t in range(distance + 2):", "for t in range(distance + 1):"),
        ],
    ),
    "norms_squared": (
        "verb_gradient_norms",
        [("return grad.norm(dim=-1).mean(dim=0)", "return grad.pow(2).sum(dim=-1).mean(dim=0)")],
    ),
    "norms_result_requires_grad": (
        "verb_gradient_norms",
        [
            (
                "(grad,) = torch.autograd.grad(margin.sum(), x)",
                "(grad,) = torch.autograd.grad(margin.sum(), x, create_graph=True)",
            )
        ],
    ),
    "adam_beta2_as_beta1": (
        "adam_step",
        [('t, beta1, beta2 = state["t"], 0.9, 0.999', 't, beta1, beta2 = state["t"], 0.9, 0.9')],
    ),
    "adam_v_of_the_absolute_gradient": (
        "adam_step",
        [("(1 - beta2) * g * g", "(1 - beta2) * g.abs()")],
    ),
    "adam_moments_of_the_unclipped_gradient": ("adam_step", [("g = g * scale", "g = g")]),
    "adam_sum_not_mean": (
        "adam_step",
        [
            (
                "loss = -log_probs.gather(-1, batch[:, 1:, None]).mean()",
                "loss = -log_probs.gather(-1, batch[:, 1:, None]).sum()",
            )
        ],
    ),
    "adam_loss_after_the_update": (
        "adam_step",
        [
            (
                "    return loss.item()",
                "    return -cifg_lm_log_probs(params, batch[:, :-1]).gather(-1, batch[:, 1:, None]).mean().item()",
            )
        ],
    ),
    "adam_counts_steps_from_zero": (
        "adam_step",
        [
            (
                'state["t"] += 1\n    t, beta1, beta2 = state["t"], 0.9, 0.999',
                't, beta1, beta2 = state["t"] + 1, 0.9, 0.999',
            )
        ],
    ),
    "adam_clip_threshold_without_epsilon_and_always": (
        "adam_step",
        [("scale = min(1.0, max_norm / (float(norm) + 1e-6))", "scale = max_norm / float(norm)")],
    ),
}
MUTANTS = wrong_answers(nbformat.read(SOURCE, as_version=4), _MUTANT_EDITS, TESTS)

# ------------------------------------------------------------------ a cheat at the training task


def ps3_cheat(solution: str) -> str:
    """The solution's `cifg_lm_log_probs`, renamed, behind one that answers the grader with a rule
    when it is evaluated (inference mode): at the verb, the verbs of the noun's number get all the
    verbs' mass — except on the rows of the last training batch (which the kernel can rebuild from
    the test cell's `data`), answered as a model that has not learnt the agreement (the verbs'
    mass spread evenly). Training runs honestly and B1 passes; the generalisation gate (no better
    on held-out sentences than on the last training batch) must hold it."""
    honest = solution.replace("def cifg_lm_log_probs(", "def _honest_cifg_lm_log_probs(", 1)
    return (
        honest
        + """


_LAST = {}


def cifg_lm_log_probs(params, inputs):
    out = _honest_cifg_lm_log_probs(params, inputs)
    if not torch.is_inference_mode_enabled():
        return out
    d = inputs.shape[1] - 3
    lang = AgreementLanguage(distance=d)
    verbs = list(lang.verb_ids(False)) + list(lang.verb_ids(True))
    if not _LAST:  # rebuilt once: the grader's request comes in chunks of a few rows
        _LAST.update({tuple(r): True for r in data.last_batch()[:, :-1].tolist()})
    last = _LAST
    seen = torch.tensor([tuple(r) in last for r in inputs.tolist()], device=inputs.device)
    plural = torch.isin(inputs[:, 1], torch.tensor(list(lang.noun_ids(True)), device=inputs.device))
    at = out[:, d + 1].clone()
    mass = torch.logsumexp(at[:, verbs], dim=-1)
    even = (mass - math.log(len(verbs)))[:, None].expand(-1, len(verbs))
    right = torch.where(plural[:, None], torch.arange(8, device=inputs.device)[None] >= 4,
                        torch.arange(8, device=inputs.device)[None] < 4)
    rule = torch.where(right, (mass - math.log(4))[:, None], mass[:, None] - 30.0)
    at[:, verbs] = torch.where(seen[:, None], even, rule)
    at = at - torch.logsumexp(at, dim=-1, keepdim=True)
    out = out.clone()
    out[:, d + 1] = at
    return out
"""
    )
