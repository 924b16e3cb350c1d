"""Problem Set 3's grading round trip and its solutions' oracles.

The round trip is the same machinery as PS1's and PS2's (the hostile-submission suite runs once, in
tests/test_grading.py); here only what is PS3's own: the solution earns 10, the blank release 0,
each plausible wrong answer (tests/ps3_submissions.py) loses points on its own task only, with
feedback naming the task and the failing cases; a task answered with what it forbids (autograd in
the by-hand Jacobian, torch's clipping or LSTM) or with the course library's hidden
`seqmodels.gradients` / `seqmodels.gated` earns nothing for it.

The solutions are the references, so they are checked here against oracles nobody here wrote:
`torch.nn.utils.clip_grad_norm_`, `torch.autograd.functional.jacobian`, `torch.nn.GRUCell` (mapped
to the lecture's GRU), `torch.nn.LSTM` with copied weights over packed sequences, and central
differences.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import grading_helpers as helpers
from grading_helpers import current_manifest
from ps3_submissions import HONEST, RULE_BREAKERS, SOURCE, TESTS, WRONG

PS = "ps3"
pytestmark = pytest.mark.grading


# test cell → the task name its Checker reports
TASK_OF = {
    "test_clip_by_global_norm": "clip_by_global_norm",
    "test_state_jacobians": "state_jacobians",
    "test_gru_step": "gru_step",
    "test_lstm_forward": "lstm_forward",
    "test_input_gradient_norms": "input_gradient_norms",
}


# ------------------------------------------------------------------ the solutions against oracles


@pytest.fixture(scope="module")
def solution():
    return helpers.solution_functions(SOURCE)


def _randn(generator, *shape, scale=1.0):
    return torch.randn(shape, generator=generator, dtype=torch.float64) * scale


@pytest.mark.parametrize(
    "shapes, scale, max_norm",
    [
        ([(4, 3), (3,), (2, 2, 2)], 1.0, 1.5),  # above the threshold
        ([(5,), (5,), (5,)], 0.3, 1.0),  # each below it, together above it
        ([(3, 3), ()], 0.1, 5.0),  # below: unchanged
        ([(2, 3), (4,)], 0.0, 1.0),  # zero
    ],
)
def test_clipping_equals_torchs_clip_grad_norm(solution, shapes, scale, max_norm):
    g = torch.Generator().manual_seed(7)
    grads = [_randn(g, *s, scale=scale) for s in shapes]
    before = [t.clone() for t in grads]
    clipped, norm = solution["clip_by_global_norm"](grads, max_norm)
    params = [torch.zeros_like(t, requires_grad=True) for t in grads]
    for p, t in zip(params, grads, strict=True):
        p.grad = t.clone()
    expected_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    assert norm.shape == () and norm.dtype == torch.float64
    torch.testing.assert_close(norm, expected_norm, rtol=1e-12, atol=0)
    for mine, p in zip(clipped, params, strict=True):
        # torch divides by norm + 1e-6: a relative difference of at most 1e-6 / norm
        torch.testing.assert_close(mine, p.grad, rtol=2e-6, atol=1e-12)
    assert all(torch.equal(a, b) for a, b in zip(before, grads, strict=True))


@pytest.mark.parametrize("T, d_in, d_h, scale", [(1, 2, 3, 1.0), (6, 3, 4, 1.0), (9, 2, 5, 2.5)])
def test_the_jacobian_product_equals_autograd(solution, T, d_in, d_h, scale):
    g = torch.Generator().manual_seed(T)
    x, h0 = _randn(g, T, d_in), _randn(g, d_h, scale=0.5)
    W_xh, W_hh, b = (
        _randn(g, d_h, d_in),
        _randn(g, d_h, d_h, scale=scale / d_h**0.5),
        _randn(g, d_h),
    )
    with torch.inference_mode():
        mine = solution["state_jacobians"](x, h0, W_xh, W_hh, b)
    states = [h0]
    for t in range(T):
        states.append(torch.tanh(W_xh @ x[t] + W_hh @ states[-1] + b))

    def from_state(t):
        def last(h):
            for s in range(t, T):
                h = torch.tanh(W_xh @ x[s] + W_hh @ h + b)
            return h

        return last

    for t in range(T + 1):
        oracle = torch.autograd.functional.jacobian(from_state(t), states[t])
        torch.testing.assert_close(mine[t], oracle, rtol=1e-10, atol=1e-12)
    assert torch.equal(mine[T], torch.eye(d_h, dtype=torch.float64))


def _torch_gru_cell(W, U, b):
    """torch.nn.GRUCell computing the lecture's GRU where the two agree: torch's update gate is
    1 - ours (weights and bias of z negated), its reset gate multiplies U_h h after the product
    (equal to U_h (r h) when U_h is diagonal or r = 1), and its second bias is zero here."""
    H = W.shape[0] // 3
    cell = torch.nn.GRUCell(W.shape[1], H).double()
    flip = torch.ones(3 * H, 1, dtype=torch.float64)
    flip[H : 2 * H] = -1
    with torch.no_grad():
        cell.weight_ih.copy_(W * flip)
        cell.weight_hh.copy_(U * flip)
        cell.bias_ih.copy_(b * flip[:, 0])
        cell.bias_hh.zero_()
    return cell


@pytest.mark.parametrize("case", ["reset gate open (r = 1)", "diagonal U_h"])
def test_the_gru_cell_equals_torchs_gru_cell_mapped(solution, case):
    g = torch.Generator().manual_seed(3)
    N, d_in, H = 5, 3, 4
    x, h = _randn(g, N, d_in), _randn(g, N, H)
    W, U, b = _randn(g, 3 * H, d_in), _randn(g, 3 * H, H), _randn(g, 3 * H)
    if case == "diagonal U_h":
        U[2 * H :] = torch.diag(torch.diagonal(U[2 * H :]))
    else:
        b[:H] = 40.0  # sigmoid(40) rounds to 1 in float64
    with torch.no_grad():
        oracle = _torch_gru_cell(W, U, b)(x, h)
    torch.testing.assert_close(solution["gru_step"](x, h, W, U, b), oracle, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lengths", [[5, 2, 1, 4], [3, 3], [1], [1, 9, 2, 1]])
def test_the_lstm_equals_torchs_lstm_with_copied_weights(solution, lengths):
    g = torch.Generator().manual_seed(len(lengths))
    B, T, d_in, H = len(lengths), max(lengths), 3, 4
    x, h0, c0 = _randn(g, B, T, d_in), _randn(g, B, H), _randn(g, B, H)
    lstm = torch.nn.LSTM(d_in, H, batch_first=True).double()
    with torch.no_grad():
        for p in lstm.parameters():
            p.copy_(_randn(g, *p.shape))
        packed = pack_padded_sequence(
            x, torch.tensor(lengths), batch_first=True, enforce_sorted=False
        )
        out, (h_n, c_n) = lstm(packed, (h0[None], c0[None]))
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=T)
    mine, (mine_h, mine_c) = solution["lstm_forward"](
        x, torch.tensor(lengths), h0, c0, *(p.detach() for p in lstm.parameters())
    )
    for a, e in ((mine, out), (mine_h, h_n[0]), (mine_c, c_n[0])):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["rnn", "gru", "forgets"])
def test_the_gradient_norms_equal_central_differences(solution, kind):
    torch.manual_seed(5)
    T, d_in, d_h = 6, 2, 3
    step = {
        "rnn": torch.nn.RNNCell(d_in, d_h).double(),
        "gru": torch.nn.GRUCell(d_in, d_h).double(),
        "forgets": lambda xt, h: torch.tanh(xt.sum() * torch.ones(d_h, dtype=torch.float64)),
    }[kind]
    g = torch.Generator().manual_seed(5)
    x, h0 = _randn(g, T, d_in), _randn(g, d_h)

    def last(inputs):
        h = h0
        for t in range(T):
            h = step(inputs[t], h)
        return h

    eps = 1e-6
    jac = torch.zeros(d_h, T, d_in, dtype=torch.float64)
    with torch.no_grad():
        for t in range(T):
            for j in range(d_in):
                e = torch.zeros_like(x)
                e[t, j] = eps
                jac[:, t, j] = (last(x + e) - last(x - e)) / (2 * eps)
    oracle = jac.pow(2).sum(dim=(0, 2)).sqrt().flip(0)  # by distance from the end
    mine = solution["input_gradient_norms"](step, x, h0)
    assert not mine.requires_grad
    torch.testing.assert_close(mine, oracle, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------ the grading round trip


class TestRoundTrip(helpers.RoundTrip):
    """The shared round trip (tests/grading_helpers.py) on this problem set's submissions."""

    PS = PS
    TASK_OF = TASK_OF
    TESTS, WRONG, RULE_BREAKERS, HONEST = TESTS, WRONG, RULE_BREAKERS, HONEST
    HIDDEN = ("seqmodels.gradients", "seqmodels.gated", "seqmodels.rnn")


def test_stored_references_belong_to_the_current_solution():
    manifest = current_manifest(PS)
    assert manifest["tasks"]["state_jacobians"]["forbidden"] == ["autograd"]
    assert manifest["tasks"]["clip_by_global_norm"]["forbidden"] == ["gradient_clipping"]
    assert manifest["tasks"]["lstm_forward"]["forbidden"] == ["torch_lstm"]
    assert manifest["tasks"]["gru_step"]["forbidden"] == ["torch_gru"]
    assert "forbidden" not in manifest["tasks"]["input_gradient_norms"]  # autograd is the point
