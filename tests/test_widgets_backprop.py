"""Chapter 2's `backprop_explorer`: its inputs drive the graph; every VJP matches autograd."""

import math

import pytest
import torch

from seqmodels.plots import use_book_style
from seqmodels.widgets.backprop import backprop_explorer
from widget_helpers import assert_legible

f64 = torch.float64
W = torch.tensor([[0.5, -0.3], [0.2, 0.8], [-0.6, 0.1]], dtype=f64)


@pytest.fixture
def explorer():
    use_book_style(svg=False)
    return backprop_explorer(W, torch.tensor([1.0, 2.0], dtype=f64), target=1)


def oracle(weights, x, target):
    """Forward values and the gradients of every node, from torch.autograd and F.cross_entropy."""
    weights, x = weights.clone().requires_grad_(), x.clone().requires_grad_()
    z = weights @ x
    z.retain_grad()
    loss = torch.nn.functional.cross_entropy(z[None], torch.tensor([target]))
    loss.backward()
    return z.detach(), torch.softmax(z.detach(), 0), loss.item(), z.grad, weights.grad, x.grad


def check(result, weights, x, target):
    z, y_hat, loss, dz, dw, dx = oracle(weights, x, target)
    torch.testing.assert_close(result["z"], z, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(result["y_hat"], y_hat, rtol=1e-12, atol=1e-14)
    assert result["loss"] == pytest.approx(loss, rel=1e-12)
    for grads in (result["vjp"], result["autograd"], result["engine"]):
        torch.testing.assert_close(grads["z"], dz, rtol=1e-10, atol=1e-14)
        torch.testing.assert_close(grads["W"], dw, rtol=1e-10, atol=1e-14)
        torch.testing.assert_close(grads["x"], dx, rtol=1e-10, atol=1e-14)
    y = torch.nn.functional.one_hot(torch.tensor(target), len(z)).to(f64)
    torch.testing.assert_close(result["vjp"]["y_hat"], -y / y_hat, rtol=1e-12, atol=0)  # -y / ŷ
    torch.testing.assert_close(result["vjp"]["z"], y_hat - y, rtol=1e-10, atol=1e-14)  # ŷ - y
    assert result["max_difference"] < 1e-12 and result["engine_difference"] < 1e-12


def test_the_default_view_is_the_worked_example(explorer):
    r = explorer.result
    assert (r["target"], r["scale"]) == (1, 1.0)
    check(r, W, torch.tensor([1.0, 2.0], dtype=f64), 1)


def test_moving_an_input_recomputes_forward_and_backward(explorer):
    before = explorer.result
    explorer.controls["x1"].value = -2.0
    r = explorer.result
    check(r, W, torch.tensor([-2.0, 2.0], dtype=f64), 1)
    assert not torch.equal(r["z"], before["z"])
    # dL/dW is the outer product (ŷ - y) xᵀ: its first column scales with x1
    torch.testing.assert_close(r["vjp"]["W"][:, 0], -2.0 * r["vjp"]["z"])


def test_scale_and_target_together(explorer):
    r = explorer.set(scale=5.0, target=2, x1=3.0, x2=-3.0)
    check(r, 5.0 * W, torch.tensor([3.0, -3.0], dtype=f64), 2)
    # a confident wrong answer: dL/dŷ of the target is huge, dL/dz stays within [-1, 1]
    assert r["y_hat"][2] < 1e-6 and r["vjp"]["y_hat"][2] < -1e6
    assert r["vjp"]["z"].abs().max() <= 1.0


def test_zero_input_or_zero_weights_give_the_gradients_the_formulas_say(explorer):
    r = explorer.set(x1=0.0, x2=0.0)
    assert torch.equal(r["vjp"]["W"], torch.zeros_like(W))  # (ŷ - y) xᵀ with x = 0
    r = explorer.set(scale=0.0, x1=1.0, x2=2.0)
    torch.testing.assert_close(r["y_hat"], torch.full((3,), 1 / 3, dtype=f64))
    assert r["loss"] == pytest.approx(math.log(3))
    assert torch.equal(r["vjp"]["x"], torch.zeros(2, dtype=f64))  # W = 0 passes nothing back


def test_values_outside_the_sliders_are_clamped(explorer):
    explorer.controls["x2"].value = 100.0
    assert explorer.result["x"][1].item() == explorer.controls["x2"].max
    explorer.controls["scale"].value = -1.0
    assert explorer.result["scale"] == 0.0


def test_an_underflowed_probability_does_not_crash_the_view():
    e = backprop_explorer(1000 * W, torch.tensor([1.0, 2.0], dtype=f64), target=2)
    assert e.result["y_hat"][2] == 0.0 and e.figure is not None
    assert not math.isfinite(e.result["max_difference"])


def test_it_checks_shapes_and_target():
    with pytest.raises(ValueError, match="expected W of shape"):
        backprop_explorer(W, torch.ones(3, dtype=f64))
    with pytest.raises(ValueError, match="target"):
        backprop_explorer(W, torch.ones(2, dtype=f64), target=3)


def test_the_figure_is_legible_on_a_phone_and_a_desktop(explorer):
    assert_legible(explorer.figure)
