"""Problem Set 3's solutions against oracles, its wrong answers, rewrites and mutants, in process.

The solutions are the references, so they are checked here against oracles nobody here wrote:
`torch.nn.LSTMCell` with the forget gate tied to $1 - \\mathbf i$ through its weights
($\\sigma(-a) = 1 - \\sigma(a)$: forget rows $-W_i$, $-U_i$, $-\\mathbf b_i$) for the step where the
peepholes are zero (torch's cell has none), and where they are not, a plain loop over rows and units
in Python floats (`math.exp`, `math.tanh`); autograd and central differences for the backward pass
(peepholes included); `torch.nn.LSTM` with the same tie and `F.log_softmax` for the language model
without peepholes and the plain loop with them, per-sentence `torch.autograd.grad` through that
`nn.LSTM` for the gradient norms, and `torch.optim.Adam` after `clip_grad_norm_` and
`F.cross_entropy` of the plain loop's logits (differentiated by autograd) for the trajectory.
Then each plausible wrong answer of tests/ps3_submissions.py, graded in this process against the
stored references, loses points on its own task only and fails the check it is said to fail; the
rewrites of `adam_step` keep every case, and the set's own mutants are killed at the stated rate
(the round trip through the sandbox, tests/test_grading_ps3.py, grades the submissions end to end).
Last, part D's experiment runs in the time the set promises and its model answer quotes it.
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import grading_helpers as helpers
from ps1_submissions import solution_answers
from ps3_submissions import (
    CASCADE_TASKS,
    CASCADES,
    EQUIVALENT_STEPS,
    KILLED_BY,
    MUTANTS,
    PART_B,
    WRONG,
)

PS = "ps3"
ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / PS / f"{PS}.ipynb"
NOT_RUN_HERE = {"test_cifg_training", "d_experiment"}  # training and part D: their own test
TASK_OF = {
    "test_cifg_step": "cifg_step",
    "test_cifg_step_backward": "cifg_step_backward",
    "test_cifg_lm_log_probs": "cifg_lm_log_probs",
    "test_verb_gradient_norms": "verb_gradient_norms",
    "test_adam_step": "adam_step",
}
#: the least share of the set's own mutants its cases must kill (issue 29)
KILL_RATE = 0.95


def _cell(grade_id: str) -> str:
    source = nbformat.read(SOURCE, as_version=4)
    return next(
        c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


@pytest.fixture(scope="module")
def ns():
    """The setup cell's names and the solution's answers (but part D's experiment)."""
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(_cell("setup"), "setup", "exec"), namespace)  # noqa: S102 - our own solution
    for name, code in solution_answers(nbformat.read(SOURCE, as_version=4)).items():
        if name not in NOT_RUN_HERE:
            exec(compile(code, name, "exec"), namespace)  # noqa: S102
    namespace["device"] = torch.device("cpu")
    return namespace


def randn(g, *shape, scale=1.0):
    return torch.randn(shape, generator=g, dtype=torch.float64) * scale


def cell_params(seed, m, H, scale=1.0, peep=0.0):
    g = torch.Generator().manual_seed(seed)
    p = {
        "W": randn(g, 3 * H, m, scale=scale),
        "U": randn(g, 3 * H, H, scale=scale),
        "b": randn(g, 3 * H),
    }
    p["p_i"], p["p_o"] = randn(g, H, scale=peep), randn(g, H, scale=peep)
    return p


def _sigmoid(a):
    return 1 / (1 + math.exp(-a))


def plain_step(p, x, h, c):
    """The CIFG with peepholes, one row and one unit at a time, in Python floats: the oracle where
    torch's LSTM cell (no peepholes) cannot serve."""
    H = len(h[0])
    W, U, b, p_i, p_o = (p[k].tolist() for k in ("W", "U", "b", "p_i", "p_o"))

    def pre(row, n, k):
        return (
            sum(W[row][j] * x[n][j] for j in range(len(x[n])))
            + sum(U[row][j] * h[n][j] for j in range(H))
            + b[row]
        )

    h_new, c_new = [], []
    for n in range(len(h)):
        hs, cs = [], []
        for k in range(H):
            i = _sigmoid(pre(k, n, k) + p_i[k] * c[n][k])
            g = math.tanh(pre(2 * H + k, n, k))
            cell = (1 - i) * c[n][k] + i * g
            o = _sigmoid(pre(H + k, n, k) + p_o[k] * cell)
            hs.append(o * math.tanh(cell))
            cs.append(cell)
        h_new.append(hs)
        c_new.append(cs)
    return h_new, c_new


def plain_logits(p, embedded):
    """The plain oracle over time, vectorised over rows and units with torch (so autograd can
    differentiate it), written from the task's equations without the solution's code."""
    H = p["U"].shape[1]
    Wi, Wo, Wg = p["W"].split(H)
    Ui, Uo, Ug = p["U"].split(H)
    bi, bo, bg = p["b"].split(H)
    h = c = embedded.new_zeros(embedded.shape[0], H)
    out = []
    for t in range(embedded.shape[1]):
        x = embedded[:, t]
        i = torch.sigmoid(x @ Wi.T + h @ Ui.T + p["p_i"] * c + bi)
        g = torch.tanh(x @ Wg.T + h @ Ug.T + bg)
        c = c * (1 - i) + g * i
        o = torch.sigmoid(x @ Wo.T + h @ Uo.T + p["p_o"] * c + bo)
        h = torch.tanh(c) * o
        out.append(h)
    return torch.stack(out, dim=1) @ p["W_y"].T + p["b_y"]


def tied_lstm_weights(p):
    """(weight_ih, weight_hh, bias_ih) of an nn.LSTM/LSTMCell (rows i, f, g, o) computing the CIFG
    without peepholes: the forget rows are minus the input rows, so f = sigma(-a_i) = 1 - i."""
    assert not p["p_i"].any() and not p["p_o"].any()  # torch's LSTM has no peepholes
    H = p["U"].shape[1]
    (Wi, Wo, Wg), (Ui, Uo, Ug), (bi, bo, bg) = (p[k].split(H) for k in ("W", "U", "b"))
    return torch.cat([Wi, -Wi, Wg, Wo]), torch.cat([Ui, -Ui, Ug, Uo]), torch.cat([bi, -bi, bg, bo])


# ------------------------------------------------------------------ Tasks 1 and 2: the step


@pytest.mark.parametrize(("B", "m", "H", "scale"), [(1, 1, 1, 1.0), (5, 4, 6, 1.0), (3, 3, 4, 8.0)])
def test_the_step_equals_nn_lstm_cell_with_the_forget_gate_tied(ns, B, m, H, scale):
    p = cell_params(B + m + H, m, H, scale)
    g = torch.Generator().manual_seed(1)
    x, h, c = randn(g, B, m), randn(g, B, H), randn(g, B, H)
    cell = nn.LSTMCell(m, H).double()
    w_ih, w_hh, b_ih = tied_lstm_weights(p)
    with torch.no_grad():
        cell.weight_ih.copy_(w_ih)
        cell.weight_hh.copy_(w_hh)
        cell.bias_ih.copy_(b_ih)
        cell.bias_hh.zero_()
        expected = cell(x, (h, c))
    for mine, oracle in zip(ns["cifg_step"](p, x, h, c), expected, strict=True):
        torch.testing.assert_close(mine, oracle, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("B", "m", "H", "peep", "c_scale"),
    [(1, 1, 1, 1.0, 1.0), (4, 3, 5, 1.0, 1.0), (3, 2, 4, 2.0, 5.0)],
)
def test_the_step_with_peepholes_equals_a_plain_loop(ns, B, m, H, peep, c_scale):
    p = cell_params(30 + B, m, H, peep=peep)
    g = torch.Generator().manual_seed(4)
    x, h, c = randn(g, B, m), randn(g, B, H), randn(g, B, H, scale=c_scale)
    expected = plain_step(p, x.tolist(), h.tolist(), c.tolist())
    without = plain_step(
        {**p, "p_i": 0 * p["p_i"], "p_o": 0 * p["p_o"]}, x.tolist(), h.tolist(), c.tolist()
    )
    for mine, oracle, other in zip(ns["cifg_step"](p, x, h, c), expected, without, strict=True):
        torch.testing.assert_close(
            mine, torch.tensor(oracle, dtype=torch.float64), rtol=1e-12, atol=1e-12
        )
        assert (mine - torch.tensor(other, dtype=torch.float64)).abs().max() > 1e-3  # they matter


@pytest.mark.parametrize(
    ("B", "m", "H", "gate_bias", "peep"),
    [(1, 2, 3, None, 1.0), (4, 3, 5, None, 1.0), (3, 2, 4, -6.0, 1.0), (3, 2, 4, None, 0.0)],
)
def test_the_backward_pass_by_hand_equals_autograd(ns, B, m, H, gate_bias, peep):
    p = cell_params(10 + B, m, H, peep=peep)
    if gate_bias is not None:
        p["b"][:H] = gate_bias
    g = torch.Generator().manual_seed(2)
    x, h, c, dh, dc = (randn(g, B, n) for n in (m, H, H, H, H))
    c = 3 * c  # a large cell: the peepholes' terms count
    with torch.inference_mode():
        mine = ns["cifg_step_backward"](p, x, h, c, dh, dc)
    leaves = {k: v.clone().requires_grad_() for k, v in p.items()}
    inputs = [t.clone().requires_grad_() for t in (x, h, c)]
    h_new, c_new = ns["cifg_step"](leaves, *inputs)
    oracle = torch.autograd.grad(
        (h_new * dh).sum() + (c_new * dc).sum(), [*leaves.values(), *inputs]
    )
    keys = ["W", "U", "b", "p_i", "p_o", "x_t", "h", "c"]
    assert sorted(mine) == sorted(keys)
    for key, expected in zip(keys, oracle, strict=True):
        torch.testing.assert_close(mine[key], expected, rtol=1e-12, atol=1e-14)


def test_the_backward_pass_agrees_with_central_differences(ns):
    p = cell_params(20, 2, 3, peep=1.5)
    g = torch.Generator().manual_seed(3)
    x, h, c, dh, dc = (randn(g, 2, n) for n in (2, 3, 3, 3, 3))
    grads = ns["cifg_step_backward"](p, x, h, c, dh, dc)

    def loss(q, xx, hh, cc):
        h_new, c_new = ns["cifg_step"](q, xx, hh, cc)
        return float((h_new * dh).sum() + (c_new * dc).sum())

    eps = 1e-6
    keys = [
        ("W", (0, 1)),
        ("U", (4, 2)),
        ("b", (7,)),
        ("p_i", (1,)),
        ("p_o", (2,)),
        ("c", (1, 0)),
        ("h", (0, 2)),
    ]
    for key, index in keys:
        up, down = ({k: v.clone() for k, v in p.items()} for _ in range(2))
        args_up, args_down = [x.clone(), h.clone(), c.clone()], [x.clone(), h.clone(), c.clone()]
        if key in p:
            up[key][index] += eps
            down[key][index] -= eps
        else:
            position = {"h": 1, "c": 2}[key]
            args_up[position][index] += eps
            args_down[position][index] -= eps
        numeric = (loss(up, *args_up) - loss(down, *args_down)) / (2 * eps)
        assert grads[key][index].item() == pytest.approx(numeric, rel=1e-6, abs=1e-9), key


# ------------------------------------------------------------------ Tasks 3 and 4: the LM


def lm_params(seed, V=27, m=4, H=5, peep=0.0):
    g = torch.Generator().manual_seed(seed)
    return {
        "E": randn(g, V, m, scale=0.5),
        "W": randn(g, 3 * H, m, scale=m**-0.5),
        "U": randn(g, 3 * H, H, scale=H**-0.5),
        "b": randn(g, 3 * H, scale=0.3),
        "p_i": randn(g, H, scale=peep),
        "p_o": randn(g, H, scale=peep),
        "W_y": randn(g, V, H, scale=H**-0.5),
        "b_y": randn(g, V, scale=0.3),
    }


def torch_lstm_logits(p, embedded):
    """The oracle: nn.LSTM with the tied weights (run functionally, so gradients reach `p` and the
    embedded inputs), then the output layer."""
    m, H = embedded.shape[-1], p["U"].shape[1]
    lstm = nn.LSTM(m, H, batch_first=True).double()
    w_ih, w_hh, b_ih = tied_lstm_weights(p)
    weights = {
        "weight_ih_l0": w_ih,
        "weight_hh_l0": w_hh,
        "bias_ih_l0": b_ih,
        "bias_hh_l0": torch.zeros_like(b_ih),
    }
    out, _ = torch.func.functional_call(lstm, weights, (embedded,))
    return out @ p["W_y"].T + p["b_y"]


@pytest.mark.parametrize(("B", "T"), [(1, 1), (3, 7), (5, 2)])
def test_the_lm_equals_nn_lstm_with_the_forget_gate_tied(ns, B, T):
    p = lm_params(4)
    inputs = torch.randint(27, (B, T), generator=torch.Generator().manual_seed(5))
    expected = F.log_softmax(torch_lstm_logits(p, p["E"][inputs]), dim=-1)
    torch.testing.assert_close(ns["cifg_lm_log_probs"](p, inputs), expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(  # the plain oracle agrees with torch's where both apply
        F.log_softmax(plain_logits(p, p["E"][inputs]), dim=-1), expected, rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize(("B", "T"), [(1, 1), (3, 7)])
def test_the_lm_with_peepholes_equals_the_plain_loop(ns, B, T):
    p = lm_params(8, peep=1.5)
    inputs = torch.randint(27, (B, T), generator=torch.Generator().manual_seed(9))
    expected = F.log_softmax(plain_logits(p, p["E"][inputs]), dim=-1)
    torch.testing.assert_close(ns["cifg_lm_log_probs"](p, inputs), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("distance", [0, 3, 7])
def test_the_gradient_norms_equal_autograd_sentence_by_sentence_through_nn_lstm(ns, distance):
    from seqmodels.synthetic import AgreementLanguage

    lang = AgreementLanguage(distance=distance)
    rows = torch.tensor(
        [[0, *s, 1] for s in lang.sample(12, torch.Generator().manual_seed(6 + distance))]
    )
    p = lm_params(7)
    norms = []
    for row in rows:  # one sentence at a time: no sum over sentences to get wrong
        embedded = p["E"][row[None, : distance + 2]].clone().requires_grad_()
        log_p = F.log_softmax(torch_lstm_logits(p, embedded)[0, -1], dim=-1)
        plural = lang.is_plural(int(row[distance + 2]))
        right = torch.logsumexp(log_p[list(lang.verb_ids(plural))], dim=0)
        wrong = torch.logsumexp(log_p[list(lang.verb_ids(not plural))], dim=0)
        (grad,) = torch.autograd.grad(right - wrong, embedded)
        norms.append(grad[0].norm(dim=-1))
    expected = torch.stack(norms).mean(dim=0)
    mine = ns["verb_gradient_norms"](p, rows, distance)
    assert mine.shape == (distance + 2,) and not mine.requires_grad
    torch.testing.assert_close(mine, expected, rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------------ Task 5: the trajectory


def adam_rows():
    from seqmodels.synthetic import AgreementLanguage

    lang = AgreementLanguage(distance=4)
    sample = lang.sample(400, torch.Generator().manual_seed(2501))
    return torch.tensor([[lang.vocab.bos, *s, lang.vocab.eos] for s in sample])


def oracle_trajectory(params, rows, steps, lr, max_norm, batch=8):
    """torch.optim.Adam after clip_grad_norm_, the loss F.cross_entropy of the plain loop's logits."""
    trained = {k: v.clone().requires_grad_() for k, v in params.items()}
    opt = torch.optim.Adam(list(trained.values()), lr=lr)
    losses, norms = [], []
    for k in range(steps):
        rows_k = rows[k * batch : (k + 1) * batch]
        logits = plain_logits(trained, trained["E"][rows_k[:, :-1]])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows_k[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        norms.append(float(nn.utils.clip_grad_norm_(list(trained.values()), max_norm)))
        opt.step()
        losses.append(loss.item())
    return losses, norms


def hidden_case_params(V, m, H, seed):
    """The test cell's `_lm_params` (the input gate's bias lowered by 1), in float64."""
    from seqmodels.seeding import make_generator

    g = make_generator(seed)
    p = {
        "E": torch.randn(V, m, generator=g, dtype=torch.float64),
        "W": torch.randn(3 * H, m, generator=g, dtype=torch.float64) / m**0.5,
        "U": torch.randn(3 * H, H, generator=g, dtype=torch.float64) / H**0.5,
        "b": torch.randn(3 * H, generator=g, dtype=torch.float64) * 0.1,
        "p_i": torch.randn(H, generator=g, dtype=torch.float64) * 0.5,
        "p_o": torch.randn(H, generator=g, dtype=torch.float64) * 0.5,
        "W_y": torch.randn(V, H, generator=g, dtype=torch.float64) / H**0.5,
        "b_y": torch.zeros(V, dtype=torch.float64),
    }
    p["b"][:H] -= 1.0
    return p


@pytest.mark.parametrize(("seed", "max_norm"), [(2502, 1e3), (2503, 0.05)])
def test_the_trajectory_equals_torch_optim_adam_and_clipping_binds_as_the_cases_say(
    ns, seed, max_norm
):
    """The hidden trajectory cases of the test cell against the oracle; 'never binds' and 'binds
    at every step' are what the oracle's gradient norms say."""
    rows = adam_rows()
    params = hidden_case_params(27, 6, 8, seed)
    expected, norms = oracle_trajectory(params, rows, 20, 0.01, max_norm)
    leaves, state = {k: v.clone().requires_grad_() for k, v in params.items()}, {}
    losses = [
        ns["adam_step"](leaves, state, rows[k * 8 : (k + 1) * 8], 0.01, max_norm) for k in range(20)
    ]
    assert losses == pytest.approx(expected, rel=1e-10)
    assert all(n > max_norm for n in norms) if max_norm < 1 else all(n < max_norm for n in norms)
    assert state["t"] == 20 and losses[-1] < losses[0]


# ------------------------------------------------------------------ graded in this process


def graded_in_process(answers: dict[str, str]):
    return helpers.graded_in_process(PS, answers, skip=NOT_RUN_HERE)


@pytest.fixture(scope="module")
def answers():
    return solution_answers(nbformat.read(SOURCE, as_version=4))


def test_the_solution_passes_every_case_in_process(answers):
    scores, _ = graded_in_process(answers)
    assert all(passed == n for passed, n in scores.values()), scores
    assert sorted(scores) == sorted(TASK_OF.values())


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_answer_loses_points_on_its_own_task_only_and_fails_its_named_check(answers, name):
    cell, code, test_cell = WRONG[name]
    scores, verdicts = graded_in_process({**answers, cell: code})
    task = TASK_OF[test_cell]
    passed, n = scores[task]
    assert passed < n, (name, scores[task])
    assert all(p == m for t, (p, m) in scores.items() if t != task), (name, scores)
    killed = [c for (t, c), v in verdicts.items() if t == task and c.startswith(KILLED_BY[name])]
    assert killed and not any(verdicts[task, c].passed for c in killed), (name, KILLED_BY[name])


def test_the_part_b_bugs_the_issue_names_are_all_there():
    assert len(WRONG) >= 10 and len(PART_B) >= 4
    assert set(PART_B) <= set(WRONG) and all(WRONG[b][2] == "test_adam_step" for b in PART_B)


@pytest.mark.parametrize("name", sorted(CASCADES))
def test_a_wrong_cifg_step_costs_the_tasks_that_call_it_and_nothing_else(answers, name):
    cell, code, _ = CASCADES[name]
    scores, _ = graded_in_process({**answers, cell: code})
    for task in CASCADE_TASKS:
        assert scores[task][0] < scores[task][1], (name, task, scores)
    others = {t: s for t, s in scores.items() if t not in CASCADE_TASKS}
    assert all(p == m for p, m in others.values()), (name, scores)


@pytest.mark.parametrize("name", sorted(EQUIVALENT_STEPS))
def test_an_equivalent_rewrite_of_adam_step_keeps_every_case(answers, name):
    scores, verdicts = graded_in_process({**answers, "adam_step": EQUIVALENT_STEPS[name]})
    failed = [c for (t, c), v in verdicts.items() if not v.passed]
    assert not failed, (
        name,
        [verdicts["adam_step", c].message for c in failed if ("adam_step", c) in verdicts],
    )


def test_the_rewrites_differ_from_the_reference_by_far_less_than_the_tolerance(ns):
    """B1's float64 tolerance is 1e-6 + 1e-6 |expected|: the rewrites' 20 losses of the hidden
    cases differ from the solution's by orders of magnitude less (measured: the largest relative
    difference is printed), and every part-B bug by far more."""
    rows = adam_rows()
    worst = 0.0
    for seed, max_norm in [(2502, 1e3), (2503, 0.05)]:
        params = hidden_case_params(27, 6, 8, seed)

        def trajectory(step, params=params, max_norm=max_norm):
            leaves, state = {k: v.clone().requires_grad_() for k, v in params.items()}, {}
            return [
                step(leaves, state, rows[k * 8 : (k + 1) * 8], 0.01, max_norm) for k in range(20)
            ]

        reference = torch.tensor(trajectory(ns["adam_step"]), dtype=torch.float64)
        for code in EQUIVALENT_STEPS.values():
            namespace = dict(ns)
            exec(compile(code, "rewrite", "exec"), namespace)  # noqa: S102
            got = torch.tensor(trajectory(namespace["adam_step"]), dtype=torch.float64)
            worst = max(worst, float(((got - reference).abs() / reference.abs()).max()))
    print(f"largest relative difference of a rewrite: {worst:.2e}")
    assert worst < 1e-10


def test_the_sets_own_mutants_are_killed_at_the_stated_rate(answers):
    """Every mutant of tests/ps3_submissions.py (its wrong answers, the cascades, and small edits
    that break a promise or a boundary) fails at least one case; the rate is at least 95 %."""
    survivors = []
    for name, (cell, code, _) in sorted(MUTANTS.items()):
        scores, _ = graded_in_process({**answers, cell: code})
        if all(p == n for p, n in scores.values()):
            survivors.append(name)
    rate = 1 - len(survivors) / len(MUTANTS)
    print(
        f"mutants killed: {len(MUTANTS) - len(survivors)} of {len(MUTANTS)} ({rate:.0%}); survivors {survivors}"
    )
    assert rate >= KILL_RATE, survivors


# ------------------------------------------------------------------ part B's training and part D


def test_training_and_part_d_run_within_their_time_and_the_model_answer_quotes_the_numbers(ns):
    """The training cell and part D's experiment on one thread (a grading sandbox has one core):
    part D under 60 s, and every number part D's model answer states is one the cell prints."""
    seconds, printed, model_answer = helpers.training_then_experiment(PS, ns)
    assert seconds < 60
    helpers.assert_model_answer_quotes(model_answer, printed)
