"""Chapter 4's `gradient_explorer`: its radius, nonlinearity and clipping controls against autograd,
the library's Jacobians and PyTorch's own RNN, clipping and SGD."""

import copy
import math

import pytest
import torch
from torch import nn

from seqmodels.gradients import decay_per_step, scaled_orthogonal, spectral_norms, state_jacobians
from seqmodels.plots import use_book_style
from seqmodels.rnn import ElmanRNN
from seqmodels.seeding import make_generator
from seqmodels.widgets.gradients import RADIUS_RANGE, gradient_explorer
from widget_helpers import assert_legible

H, D_IN, T = 16, 4, 20


@pytest.fixture(scope="module")
def data():
    """An Elman RNN with W_hh = 2Q (Q orthogonal) and small input weights, and one input sequence."""
    use_book_style(svg=False)
    rnn = ElmanRNN(D_IN, H).double()
    with torch.no_grad():
        q = scaled_orthogonal(H, 1.0, make_generator(1), torch.float64)
        rnn.weight_hh_l0.copy_(2.0 * q)
        rnn.weight_ih_l0.normal_(0, 0.3, generator=make_generator(2))
        rnn.bias_ih_l0.uniform_(-0.1, 0.1, generator=make_generator(3))
    x = torch.randn(T, D_IN, generator=make_generator(0), dtype=torch.float64)
    return rnn, q, x


@pytest.fixture
def explorer(data):
    rnn, _, x = data
    return gradient_explorer(rnn, x, radius=1.0, tau=1.0, lr=0.05)


def with_radius(data, radius):
    """The data's RNN with W_hh = radius · Q."""
    rnn, q, _ = data
    copied = copy.deepcopy(rnn)
    with torch.no_grad():
        copied.weight_hh_l0.copy_(radius * q)
    return copied


def torch_step(data, radius, tau, lr):
    """PyTorch's own answer: nn.RNN with the same weights, L = ½‖h_T‖², clip_grad_norm_, one SGD
    step. Returns the norm before clipping, the norm after, and the loss before and after."""
    _, _, x = data
    reference = nn.RNN(D_IN, H, batch_first=True).double()
    with torch.no_grad():
        for name, p in with_radius(data, radius).named_parameters():
            getattr(reference, name).copy_(p)

    def loss():
        return 0.5 * reference(x[None])[1].pow(2).sum()

    before = loss()
    before.backward()
    norm = nn.utils.clip_grad_norm_(reference.parameters(), tau).item()
    after_clip = math.sqrt(sum(p.grad.pow(2).sum().item() for p in reference.parameters()))
    torch.optim.SGD(reference.parameters(), lr=lr).step()
    with torch.no_grad():
        return norm, after_clip, before.item(), loss().item()


def test_the_norms_are_autograd_s_jacobians_by_distance(data, explorer):
    rnn, _, x = data
    r = explorer.result
    assert (r["radius"], r["nonlinearity"], r["tau"]) == (1.0, "tanh", 1.0)
    expected = spectral_norms(state_jacobians(with_radius(data, 1.0), x)).flip(0)
    assert r["distances"] == list(range(T + 1))
    assert r["norms"] == pytest.approx(expected.tolist(), rel=1e-9)
    assert r["decay"] == pytest.approx(decay_per_step(expected[1:], range(1, T + 1)), rel=1e-9)
    assert r["bound"] == pytest.approx([1.0] * (T + 1))  # sigma_max(Q) = 1
    assert all(n <= b * (1 + 1e-9) for n, b in zip(r["norms"], r["bound"], strict=True))
    assert torch.equal(rnn.weight_hh_l0, 2.0 * data[1])  # the chapter's RNN is not changed


def test_moving_the_radius_and_the_nonlinearity(data, explorer):
    _, _, x = data
    low = explorer.result
    high = explorer.set(radius=1.8)
    expected = spectral_norms(state_jacobians(with_radius(data, 1.8), x)).flip(0)
    assert high["norms"] == pytest.approx(expected.tolist(), rel=1e-9)
    assert high["decay"] > low["decay"] and high["grad_norm"] > low["grad_norm"]
    assert high["bound"] == pytest.approx([1.8**k for k in range(T + 1)], rel=1e-9)
    # the linear RNN: dh_T/dh_t = (rho Q)^(T-t), whose norm is exactly rho^(T-t)
    linear = explorer.set(nonlinearity="linear", radius=0.7)
    assert linear["norms"] == pytest.approx([0.7**k for k in range(T + 1)], rel=1e-9)
    assert linear["decay"] == pytest.approx(0.7, rel=1e-9)
    tanh = explorer.set(nonlinearity="tanh")
    assert all(t < n for t, n in zip(tanh["norms"][1:], linear["norms"][1:], strict=True))


@pytest.mark.parametrize("radius, tau", [(1.0, 1.0), (1.8, 0.5), (0.6, 100.0)])
def test_the_step_is_pytorch_s_clipped_sgd_step(data, explorer, radius, tau):
    r = explorer.set(radius=radius, tau=tau)
    norm, clipped, before, after = torch_step(data, radius, tau, lr=0.05)
    assert r["grad_norm"] == pytest.approx(norm, rel=1e-9)
    assert r["clipped_norm"] == pytest.approx(clipped, rel=1e-5)  # torch divides by norm + 1e-6
    assert r["clipped_norm"] == pytest.approx(min(norm, tau), rel=1e-5)
    assert r["loss"] == pytest.approx(before, rel=1e-12)
    assert r["loss_clipped"] == pytest.approx(after, rel=1e-5)
    assert r["clipped_step"] == pytest.approx(0.05 * min(norm, tau), rel=1e-5)
    _, _, _, unclipped = torch_step(data, radius, math.inf, lr=0.05)
    assert r["loss_step"] == pytest.approx(unclipped, rel=1e-9)
    if tau >= norm:  # clipping does nothing to a small gradient
        assert (r["step"], r["loss_step"]) == (r["clipped_step"], r["loss_clipped"])


def test_the_slice_is_the_loss_along_the_gradient(data, explorer):
    r = explorer.set(radius=1.5, tau=0.2)
    steps, losses = r["slice_steps"], r["slice_losses"]
    assert steps == sorted(steps) and steps[0] < r["clipped_step"] < r["step"] < steps[-1]
    # the loss of the shortest step is the loss before, to first order: L - s ‖g‖
    assert losses[0] == pytest.approx(r["loss"] - steps[0] * r["grad_norm"], rel=1e-3)


def test_values_beyond_the_sliders_and_overflow_do_not_crash(data, explorer):
    rnn, _, x = data
    explorer.controls["radius"].value = 100.0  # clamped to the slider's maximum
    assert explorer.result["radius"] == RADIUS_RANGE[1]
    explorer.controls["tau"].value = 0.0  # clamped to the slider's minimum, 10^-2
    assert explorer.result["tau"] == pytest.approx(0.01)
    # a linear RNN with rho = 2 over 1,100 steps: everything overflows, the view still draws
    long_x = torch.randn(1100, D_IN, generator=make_generator(5), dtype=torch.float64)
    overflowing = gradient_explorer(rnn, long_x, radius=2.0, nonlinearity="linear")
    r = overflowing.result
    assert r["decay"] is None and math.isinf(r["loss"]) and math.isinf(r["loss_step"])
    overflowing.figure.canvas.draw()
    # the tanh RNN's long product stays finite, and its plain step overflows nothing
    r = overflowing.set(nonlinearity="tanh")
    assert math.isfinite(r["loss"]) and r["grad_norm"] > 1e10 and r["decay"] > 1
    overflowing.figure.canvas.draw()
    # a zero gradient (no input, no bias): no step, nothing to clip
    still = ElmanRNN(D_IN, H).double()
    with torch.no_grad():
        still.bias_ih_l0.zero_()
        still.bias_hh_l0.zero_()
    r = gradient_explorer(still, torch.zeros(5, D_IN, dtype=torch.float64)).result
    assert (r["loss"], r["grad_norm"], r["step"]) == (0.0, 0.0, 0.0)


def test_it_checks_its_arguments(data):
    rnn, _, x = data
    with pytest.raises(TypeError, match="ElmanRNN"):
        gradient_explorer(nn.RNN(D_IN, H), x)
    with pytest.raises(ValueError, match="shape"):
        gradient_explorer(rnn, x[:, :2])
    with pytest.raises(ValueError, match="nonlinearity"):
        gradient_explorer(rnn, x, nonlinearity="relu")
    with pytest.raises(ValueError, match="radius"):
        gradient_explorer(rnn, x, radius=0.0)
    zero = ElmanRNN(D_IN, H)
    with torch.no_grad():
        zero.weight_hh_l0.zero_()
    with pytest.raises(ValueError, match="spectral radius"):
        gradient_explorer(zero, x)


def test_the_figure_is_legible_on_a_phone_and_a_desktop(explorer):
    assert_legible(explorer.figure)
