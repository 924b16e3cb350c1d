"""Problem Set 2's solutions against oracles, its hidden cases' promises, and its wrong answers.

The solutions are the references, so they are checked here against oracles nobody here wrote:
`torch.autograd` on the same computation built from tensors (the engine's backward pass and its
broadcasting ops), `torch.nn.RNN` with copied weights (the one-bias RNN LM: its second bias zero)
followed by `F.log_softmax`, autograd and central differences (BPTT by hand), and a truncated-BPTT
trainer made of `nn.RNN`, `F.cross_entropy`, `clip_grad_norm_` and `torch.optim.SGD` (the
trajectory). Then each plausible wrong answer of tests/ps2_submissions.py, graded in this process
against the stored references, loses points on its own task only and fails the check it is said to
fail (the round trip through the sandbox, tests/test_grading_ps2.py, grades them end to end).
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
from ps2_submissions import CASCADES, KILLED_BY, WRONG
from test_grading_ps2 import TASK_OF  # test cell → the task its Checker reports

PS = "ps2"
ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / PS / f"{PS}.ipynb"
KEYS = ("E", "W_xh", "W_hh", "b", "W_hy", "b_y")
NOT_RUN_HERE = {"test_rnn_training", "d_experiment"}  # training (35 s) and part D: their own tests


def _cell(grade_id: str) -> str:
    source = nbformat.read(SOURCE, as_version=4)
    return next(
        c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


@pytest.fixture(scope="module")
def ns():
    """The setup cell's names (the engine's `Var` and ops) and the solution's answers."""
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


# ------------------------------------------------------------------ Task 1: the backward pass


def test_gradients_equal_autograd_on_a_random_graph(ns):
    """A graph with shared nodes, fan-out and an inner input, built twice: engine and torch."""
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = randn(g, 4, 3), randn(g, 3, 3), randn(g, 3, 2)
    upstream = randn(g, 4, 2)
    Var, add, matmul, tanh = ns["Var"], ns["add"], ns["matmul"], ns["tanh"]
    vx, vw1, vw2 = Var(x), Var(w1), Var(w2)
    h = tanh(matmul(vx, vw1))
    k = add(h, tanh(matmul(h, vw1)))  # h used twice, w1 used twice
    out = tanh(matmul(add(k, h), vw2))
    mine = ns["gradients"](out, [vx, vw1, vw2, h], upstream)
    tx, tw1, tw2 = (t.clone().requires_grad_() for t in (x, w1, w2))
    th = torch.tanh(tx @ tw1)
    th.retain_grad()
    tk = th + torch.tanh(th @ tw1)
    tout = torch.tanh((tk + th) @ tw2)
    oracle = torch.autograd.grad(tout, [tx, tw1, tw2, th], upstream)
    for a, b in zip(mine, oracle, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_gradients_of_a_deep_chain_equal_the_product_of_derivatives(ns):
    Var, tanh = ns["Var"], ns["tanh"]
    x = Var(torch.tensor(0.3, dtype=torch.float64))
    y, value, derivative = x, 0.3, 1.0
    for _ in range(3000):
        y = tanh(y)
        value = math.tanh(value)
        derivative *= 1 - value**2
    (grad,) = ns["gradients"](y, [x])
    assert grad.item() == pytest.approx(derivative, rel=1e-12)


# ------------------------------------------------------------------ Task 2: broadcasting ops

SHAPES = [((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (2, 3)), ((5,), (5,)), ((2, 1, 3), (4, 1))]


@pytest.mark.parametrize(("sa", "sb"), SHAPES)
def test_mul_and_sum_to_equal_autograd_with_broadcasting(ns, sa, sb):
    g = torch.Generator().manual_seed(1)
    a, b = randn(g, *sa), randn(g, *sb)
    upstream = randn(g, *torch.broadcast_shapes(sa, sb))
    node = ns["mul"](ns["Var"](a), ns["Var"](b))
    ta, tb = a.clone().requires_grad_(), b.clone().requires_grad_()
    oracle = torch.autograd.grad(ta * tb, [ta, tb], upstream)
    torch.testing.assert_close(node.value, a * b)
    for mine, expected in zip(node.vjp(upstream), oracle, strict=True):
        assert mine.shape == expected.shape
        torch.testing.assert_close(mine, expected, rtol=1e-12, atol=1e-12)


def test_sigmoid_equals_autograd(ns):
    g = torch.Generator().manual_seed(2)
    a, upstream = randn(g, 4, 5, scale=4.0), randn(g, 4, 5)
    node = ns["sigmoid"](ns["Var"](a))
    ta = a.clone().requires_grad_()
    (oracle,) = torch.autograd.grad(torch.sigmoid(ta), ta, upstream)
    (mine,) = node.vjp(upstream)
    torch.testing.assert_close(mine, oracle, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ Tasks 3 and 4: the RNN LM


def lm_params(seed, V, m, q):
    g = torch.Generator().manual_seed(seed)
    return {
        "E": randn(g, V, m, scale=0.5),
        "W_xh": randn(g, q, m, scale=m**-0.5),
        "W_hh": randn(g, q, q, scale=q**-0.5),
        "b": randn(g, q, scale=0.3),
        "W_hy": randn(g, V, q, scale=q**-0.5),
        "b_y": randn(g, V, scale=0.3),
    }


def torch_rnn_lm(params, inputs, h0):
    """The oracle: nn.RNN with the one bias as bias_ih and a zero bias_hh, then F.log_softmax."""
    q, m = params["W_xh"].shape
    rnn = nn.RNN(m, q, batch_first=True).double()
    with torch.no_grad():
        rnn.bias_hh_l0.zero_()
    # the parameters enter functionally, so that gradients reach `params`
    weights = {
        "weight_ih_l0": params["W_xh"],
        "weight_hh_l0": params["W_hh"],
        "bias_ih_l0": params["b"],
        "bias_hh_l0": torch.zeros_like(params["b"]),
    }
    out, h = torch.func.functional_call(rnn, weights, (params["E"][inputs], h0[None]))
    return F.log_softmax(out @ params["W_hy"].T + params["b_y"], dim=-1), h[0]


@pytest.mark.parametrize(("B", "T"), [(1, 1), (3, 7), (5, 2)])
def test_the_rnn_lm_equals_nn_rnn_with_copied_weights(ns, B, T):
    params = lm_params(3, 11, 4, 6)
    g = torch.Generator().manual_seed(4)
    inputs, h0 = torch.randint(11, (B, T), generator=g), randn(g, B, 6, scale=0.5)
    mine = ns["rnn_lm_log_probs"](params, inputs, h0)
    oracle = torch_rnn_lm(params, inputs, h0)
    for a, b in zip(mine, oracle, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_bptt_by_hand_equals_autograd_through_nn_rnn(ns):
    params = lm_params(5, 9, 3, 5)
    g = torch.Generator().manual_seed(6)
    inputs = torch.randint(9, (3, 6), generator=g)
    inputs[0] = 4  # one row of a single repeated token
    targets, h0 = torch.randint(9, (3, 6), generator=g), randn(g, 3, 5, scale=0.5)
    with torch.inference_mode():
        loss, grads = ns["lm_bptt"](params, inputs, targets, h0)
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    th0 = h0.clone().requires_grad_()
    log_probs, _ = torch_rnn_lm(leaves, inputs, th0)
    oracle_loss = F.nll_loss(log_probs.reshape(-1, 9), targets.reshape(-1))
    oracle = torch.autograd.grad(oracle_loss, [*leaves.values(), th0])
    torch.testing.assert_close(loss, oracle_loss.detach(), rtol=1e-12, atol=1e-12)
    assert sorted(grads) == sorted([*KEYS, "h0"])
    for key, expected in zip([*leaves, "h0"], oracle, strict=True):
        torch.testing.assert_close(grads[key], expected, rtol=1e-10, atol=1e-12)


def test_bptt_by_hand_agrees_with_central_differences(ns):
    params = lm_params(7, 6, 2, 3)
    g = torch.Generator().manual_seed(8)
    inputs, targets = torch.randint(6, (2, 4), generator=g), torch.randint(6, (2, 4), generator=g)
    h0 = randn(g, 2, 3, scale=0.5)
    _, grads = ns["lm_bptt"](params, inputs, targets, h0)
    eps = 1e-6
    for key in ("W_hh", "E"):
        for index in [(0, 0), (1, 1), (2, 0)]:
            up, down = ({k: v.clone() for k, v in params.items()} for _ in range(2))
            up[key][index] += eps
            down[key][index] -= eps
            loss_up = ns["lm_bptt"](up, inputs, targets, h0)[0]
            numeric = (loss_up - ns["lm_bptt"](down, inputs, targets, h0)[0]) / (2 * eps)
            assert grads[key][index].item() == pytest.approx(numeric.item(), rel=1e-6, abs=1e-9)


# ------------------------------------------------------------------ Task 5: the trajectory


def oracle_trajectory(params, rows, steps, bptt, lr, max_norm):
    """Truncated BPTT with nn.RNN, F.cross_entropy, clip_grad_norm_ and torch.optim.SGD."""
    V, m = params["E"].shape
    q = params["W_hh"].shape[0]
    embed, rnn, out = (
        nn.Embedding(V, m).double(),
        nn.RNN(m, q, batch_first=True).double(),
        nn.Linear(q, V).double(),
    )
    with torch.no_grad():
        embed.weight.copy_(params["E"])
        rnn.weight_ih_l0.copy_(params["W_xh"])
        rnn.weight_hh_l0.copy_(params["W_hh"])
        rnn.bias_ih_l0.copy_(params["b"])
        rnn.bias_hh_l0.zero_()
        out.weight.copy_(params["W_hy"])
        out.bias.copy_(params["b_y"])
    rnn.bias_hh_l0.requires_grad_(False)  # the one-bias model has no second bias to train
    trained = [
        embed.weight,
        rnn.weight_ih_l0,
        rnn.weight_hh_l0,
        rnn.bias_ih_l0,
        out.weight,
        out.bias,
    ]
    opt = torch.optim.SGD(trained, lr=lr)
    h, losses, norms = torch.zeros(1, len(rows), q, dtype=torch.float64), [], []
    for k in range(steps):
        batch = rows[:, k * bptt : (k + 1) * bptt + 1]
        states, h = rnn(embed(batch[:, :-1]), h)
        loss = F.cross_entropy(out(states).reshape(-1, V), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        norms.append(float(nn.utils.clip_grad_norm_(trained, max_norm)))
        opt.step()
        h = h.detach()
        losses.append(loss.item())
    return losses, norms


@pytest.mark.parametrize(("seed", "max_norm"), [(1502, 1e3), (1503, 0.05)])
def test_the_trajectory_equals_an_nn_rnn_trainer_and_clipping_binds_as_the_cases_say(
    ns, seed, max_norm
):
    """The hidden trajectory cases of the test cell, against the oracle; 'never binds' and 'binds
    at every step' are what the oracle's gradient norms say."""
    from seqmodels.synthetic import AgreementLanguage

    lang = AgreementLanguage(distance=3)
    stream = torch.tensor(
        [i for s in lang.sample(700, torch.Generator().manual_seed(1501)) for i in [*s, 1]]
    )
    rows = stream[: len(stream) // 8 * 8].view(8, -1)
    V, g = len(lang.vocab), torch.Generator().manual_seed(seed)
    params = {
        "E": randn(g, V, 8, scale=0.3),
        "W_xh": randn(g, 16, 8, scale=8**-0.5),
        "W_hh": randn(g, 16, 16, scale=0.5 / 4),
        "b": randn(g, 16, scale=0.1),
        "W_hy": randn(g, V, 16, scale=0.25),
        "b_y": randn(g, V, scale=0.1),
    }
    expected, norms = oracle_trajectory(params, rows, 20, 6, 0.5, max_norm)
    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    h, losses = torch.zeros(8, 16, dtype=torch.float64), []
    for k in range(20):
        loss, h = ns["tbptt_step"](leaves, rows[:, k * 6 : (k + 1) * 6 + 1], h, 0.5, max_norm)
        losses.append(loss)
    assert losses == pytest.approx(expected, rel=1e-10)
    assert all(n > max_norm for n in norms) if max_norm < 1 else all(n < max_norm for n in norms)
    assert losses[-1] < losses[0]


# ------------------------------------------------------------------ wrong answers, in this process


def graded_in_process(answers: dict[str, str]) -> tuple[dict[str, tuple[int, int]], dict]:
    """({task: (cases passed, cases)}, {(task, case): verdict}) of the source notebook with
    `answers`, run here but for the training cell and part D (`grading_helpers.graded_in_process`,
    on the device the setup cell picks)."""
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


@pytest.mark.parametrize("name", sorted(CASCADES))
def test_a_wrong_rnn_lm_also_costs_the_trajectory_and_nothing_else(answers, name):
    cell, code, _ = CASCADES[name]
    scores, _ = graded_in_process({**answers, cell: code})
    for task in ("rnn_lm_log_probs", "tbptt_step"):
        assert scores[task][0] < scores[task][1], (name, scores)
    others = {t: s for t, s in scores.items() if t not in ("rnn_lm_log_probs", "tbptt_step")}
    assert all(p == m for p, m in others.values()), (name, scores)


# ------------------------------------------------------------------ Part B's training and part D


def test_training_and_part_d_run_within_their_time_and_the_model_answer_quotes_the_numbers(ns):
    """The training cell and part D's experiment on one thread (a grading sandbox has one core):
    part D under 30 s, and every number part D's model answer states is one the cell prints."""
    seconds, printed, model_answer = helpers.training_then_experiment(PS, ns)
    assert seconds < 30
    helpers.assert_model_answer_quotes(model_answer, printed)
