"""Explicit Jacobians: the worked example of Chapter 2 against torch.autograd and central differences,
and the chain of tanh layers computed both ways."""

import pytest
import torch
from torch.autograd.functional import jacobian

from seqmodels.autodiff import numerical_gradient, relative_error
from seqmodels.jacobians import (
    chain_forward,
    cross_entropy_jacobian,
    grad_by_jacobian_products,
    grad_by_vjps,
    jacobian_vs_vjp_costs,
    linear_weight_jacobian,
    loglog_slope,
    random_chain,
    worked_example,
)

f64 = torch.float64


def _example(seed=0, k=3, d=2, target=1):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(k, d, generator=g, dtype=f64)  # noqa: N806
    x = torch.randn(d, generator=g, dtype=f64)
    y = torch.zeros(k, dtype=f64)
    y[target] = 1.0
    return W, x, y


def _loss(W, x, y):  # noqa: N803 (torch's own softmax and log: the oracle)
    return -(y * torch.softmax(W @ x, 0).log()).sum()


@pytest.mark.parametrize("seed", range(5))
def test_the_product_of_the_three_jacobians_is_y_hat_minus_y_times_x(seed):
    W, x, y = _example(seed, target=seed % 3)  # noqa: N806
    ex = worked_example(W, x, y)
    assert ex.dL_dyhat.shape == (1, 3) and ex.dyhat_dz.shape == (3, 3)
    assert ex.dz_dW.shape == (3, 6) and ex.product.shape == (1, 6)
    torch.testing.assert_close(ex.grad_W, ex.closed_form, rtol=1e-12, atol=1e-14)
    leaf = W.clone().requires_grad_()
    loss = _loss(leaf, x, y)
    loss.backward()
    assert ex.loss == pytest.approx(loss.item(), rel=1e-14)
    torch.testing.assert_close(ex.grad_W, leaf.grad, rtol=1e-12, atol=1e-14)
    numeric = numerical_gradient(lambda w: _loss(w, x, y), W)
    assert relative_error(ex.grad_W, numeric) < 1e-8


def test_each_jacobian_equals_autograds():
    W, x, y = _example(7, k=4, d=3)  # noqa: N806
    ex = worked_example(W, x, y)
    torch.testing.assert_close(ex.dyhat_dz, jacobian(lambda z: torch.softmax(z, 0), ex.z))
    ce = jacobian(lambda p: -(y * p.log()).sum(), ex.y_hat)
    torch.testing.assert_close(ex.dL_dyhat, ce.unsqueeze(0))
    dz_dw = jacobian(lambda w: w @ x, W)  # (K, K, D): reads W row by row when flattened
    torch.testing.assert_close(ex.dz_dW, dz_dw.reshape(4, 12))
    torch.testing.assert_close(ex.dz_dW, linear_weight_jacobian(x, 4))


def test_a_soft_target_works_too_and_bad_shapes_are_refused():
    W, x, _ = _example(2)  # noqa: N806
    y = torch.tensor([0.2, 0.5, 0.3], dtype=f64)  # a distribution, not one-hot
    ex = worked_example(W, x, y)
    leaf = W.clone().requires_grad_()
    _loss(leaf, x, y).backward()
    torch.testing.assert_close(ex.grad_W, leaf.grad)
    with pytest.raises(ValueError, match=r"expected W \(K, D\), x \(D,\), y \(K,\)"):
        worked_example(W, x[:1], y)
    with pytest.raises(ValueError, match="same shape"):
        cross_entropy_jacobian(ex.y_hat, y[:2])


@pytest.mark.parametrize("width,depth", [(1, 1), (5, 1), (7, 4)])
def test_both_ways_through_the_tanh_chain_give_autograds_gradient(width, depth):
    g = torch.Generator().manual_seed(width * 10 + depth)
    weights = random_chain(width, depth, g)
    x, v = torch.randn(width, generator=g, dtype=f64), torch.randn(width, generator=g, dtype=f64)
    leaf = x.clone().requires_grad_()
    (chain_forward(weights, leaf)[-1] @ v).backward()
    explicit, explicit_bytes = grad_by_jacobian_products(weights, x, v)
    vjp, vjp_bytes = grad_by_vjps(weights, x, v)
    torch.testing.assert_close(explicit, leaf.grad)
    torch.testing.assert_close(vjp, leaf.grad)
    # what each holds at its peak: three n x n matrices (two after one layer) against three vectors
    assert explicit_bytes == (3 if depth > 1 else 1) * width**2 * 8
    assert vjp_bytes == 3 * width * 8


def test_costs_are_reported_per_width_and_the_slope_of_a_power_law_is_its_exponent():
    costs = jacobian_vs_vjp_costs([4, 8], 2, torch.Generator().manual_seed(0), repeats=1)
    for name in ("explicit Jacobians", "vector–Jacobian products"):
        assert len(costs[name]["seconds"]) == len(costs[name]["bytes"]) == 2
        assert all(s > 0 for s in costs[name]["seconds"])
    assert costs["explicit Jacobians"]["bytes"] == [3 * 16 * 8, 3 * 64 * 8]
    assert loglog_slope([2, 4, 8], [3 * 2**2.5, 3 * 4**2.5, 3 * 8**2.5]) == pytest.approx(2.5)
    with pytest.raises(ValueError, match=">= 2 points"):
        loglog_slope([1], [1])
    with pytest.raises(ValueError, match=r"shape \(n_out, 3\)"):
        chain_forward([torch.zeros(3, 2)], torch.zeros(3))
