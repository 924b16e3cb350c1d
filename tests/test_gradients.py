"""Chapter 4's measurements: dh_T/dh_t by autograd equals the product of the step Jacobians,
torch.nn.RNN and the hand-written RNN agree, scaled orthogonal matrices have the radius asked for,
the decay fit recovers a known rate, and clipping equals torch.nn.utils.clip_grad_norm_."""

import math

import pytest
import torch
from torch import nn

from seqmodels.gradients import (
    clip_grad_norm,
    decay_per_step,
    global_norm,
    input_gradient_norms,
    jacobian_chain,
    scaled_orthogonal,
    spectral_norms,
    state_jacobians,
    states,
)
from seqmodels.rnn import ElmanRNN


def _rnn(seed, d_in=3, d_h=5):
    torch.manual_seed(seed)
    rnn = nn.RNN(d_in, d_h, batch_first=True).double()
    with torch.no_grad():
        for p in rnn.parameters():
            p.uniform_(-0.9, 0.9)
    return rnn


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_autograd_jacobians_equal_the_product_of_step_jacobians(seed):
    torch_rnn = _rnn(seed)
    rnn = ElmanRNN.from_torch(torch_rnn)
    x = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    h0 = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 9))
    by_autograd = state_jacobians(rnn, x, h0)
    assert by_autograd.shape == (8, 5, 5)
    torch.testing.assert_close(by_autograd, jacobian_chain(rnn, x, h0))
    torch.testing.assert_close(by_autograd, state_jacobians(torch_rnn, x, h0))
    torch.testing.assert_close(by_autograd[-1], torch.eye(5, dtype=torch.float64))
    torch.testing.assert_close(states(rnn, x, h0), states(torch_rnn, x, h0))


def test_state_jacobians_agree_with_finite_differences():
    rnn = ElmanRNN.from_torch(_rnn(3))
    x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    h = states(rnn, x)
    jac = state_jacobians(rnn, x)[1]  # dh_4/dh_1
    eps = 1e-6
    for j in range(5):
        e = torch.zeros(5, dtype=torch.float64)
        e[j] = eps
        plus = rnn(x[None, 1:], (h[1] + e)[None])[1][0]
        minus = rnn(x[None, 1:], (h[1] - e)[None])[1][0]
        torch.testing.assert_close(jac[:, j], (plus - minus) / (2 * eps), atol=1e-8, rtol=1e-6)


def test_a_linear_rnn_with_a_scaled_orthogonal_matrix_decays_exactly_as_rho_to_the_k():
    g = torch.Generator().manual_seed(0)
    for radius in (0.8, 1.0, 1.2):
        w = scaled_orthogonal(6, radius, g, dtype=torch.float64)
        assert torch.linalg.eigvals(w).abs().sub(radius).abs().max() < 1e-10
        torch.testing.assert_close(
            torch.linalg.svdvals(w), torch.full((6,), radius, dtype=torch.float64)
        )
        powers = torch.stack([torch.linalg.matrix_power(w, k) for k in range(10)])
        norms = spectral_norms(powers)
        torch.testing.assert_close(norms, radius ** torch.arange(10, dtype=torch.float64))
        assert decay_per_step(norms) == pytest.approx(radius, rel=1e-10)


def test_scaled_orthogonal_refuses_bad_arguments():
    g = torch.Generator()
    with pytest.raises(ValueError, match="radius"):
        scaled_orthogonal(3, 0.0, g)
    with pytest.raises(ValueError, match="positive integer"):
        scaled_orthogonal(0, 1.0, g)


def test_decay_fit_takes_distances_and_refuses_zeros():
    assert decay_per_step(torch.tensor([8.0, 2.0, 0.5]), [0, 2, 4]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="positive finite"):
        decay_per_step(torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="at least two"):
        decay_per_step(torch.tensor([1.0]))


def test_input_gradient_norms_match_autograd_for_rnn_gru_and_lstm():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 3, dtype=torch.float64, generator=g)
    for module in (
        nn.RNN(3, 4, batch_first=True),
        nn.GRU(3, 4, batch_first=True),
        nn.LSTM(3, 4, batch_first=True),
    ):
        module = module.double()
        norms = input_gradient_norms(module, x)
        assert norms.shape == (6,)
        for t in range(6):  # row by row with plain backward passes
            rows = []
            for i in range(4):
                xs = x.clone().requires_grad_()
                out = module(xs[None])[1]
                h = out[0] if isinstance(out, tuple) else out
                (grad,) = torch.autograd.grad(h[0, 0, i], xs)
                rows.append(grad[t])
            expected = torch.stack(rows).norm()
            assert norms[t].item() == pytest.approx(expected.item(), rel=1e-10)


def test_clipping_equals_torch_clip_grad_norm():
    g = torch.Generator().manual_seed(5)
    for max_norm in (0.1, 1.0, 1e3):
        a = nn.Linear(4, 3).double()
        b = nn.Linear(4, 3).double()
        b.load_state_dict(a.state_dict())
        x = torch.randn(8, 4, dtype=torch.float64, generator=g)
        for model in (a, b):
            (model(x) ** 2).sum().mul(10).backward()
        ours = clip_grad_norm(a.parameters(), max_norm)
        theirs = nn.utils.clip_grad_norm_(b.parameters(), max_norm)
        torch.testing.assert_close(ours, theirs)
        for p, q in zip(a.parameters(), b.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=0)
        after = global_norm(p.grad for p in a.parameters())
        assert after.item() == pytest.approx(min(max_norm, ours.item()), rel=1e-9)
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm(a.parameters(), -1.0)


def test_clipping_keeps_the_direction():
    p, q = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    p.grad, q.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    assert clip_grad_norm([p, q], 1.0).item() == pytest.approx(5.0)
    torch.testing.assert_close(torch.cat([p.grad, q.grad]), torch.tensor([0.6, 0.0, 0.8]))
    assert math.isclose(global_norm([p.grad, q.grad]).item(), 1.0, rel_tol=1e-6)


def test_loss_gradient_by_position_is_each_input_s_share_of_one_prediction_s_gradient():
    from seqmodels.gradients import loss_gradient_by_position
    from seqmodels.rnn import RNNLM

    torch.manual_seed(0)
    model = RNNLM(12, 5, 7, core="torch").double()
    sentences = [[3, 4, 5, 6], [7, 8, 9, 10]]
    reach = loss_gradient_by_position(model, sentences, 3)
    assert reach.shape == (4,)
    expected = []
    for s in sentences:  # one sentence at a time, by hooking the embedding output
        embedded = model.embedding(torch.tensor([[0, *s[:3]]])).detach().requires_grad_()
        out, _ = model.rnn(embedded)
        loss = nn.functional.cross_entropy(model.output(out[:, -1]), torch.tensor([s[3]]))
        (grad,) = torch.autograd.grad(loss, embedded)
        expected.append(grad[0].norm(dim=-1))
    torch.testing.assert_close(reach, torch.stack(expected).mean(0))
    with pytest.raises(ValueError, match="position"):
        loss_gradient_by_position(model, sentences, 5)


def test_spectral_norms_of_an_overflowed_product_are_infinite_and_the_radius_is_the_eigenvalue():
    from seqmodels.gradients import spectral_norms, spectral_radius

    m = torch.tensor([[[3.0, 0.0], [0.0, 1.0]], [[math.inf, 0.0], [0.0, 1.0]]])
    assert spectral_norms(m).tolist() == [3.0, math.inf]
    rotation = torch.tensor([[0.0, -2.0], [2.0, 0.0]])  # eigenvalues ±2i
    assert abs(spectral_radius(rotation) - 2.0) < 1e-12
    assert spectral_norms(rotation).item() == 2.0
