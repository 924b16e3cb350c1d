"""Softmax and log-sum-exp, naive and stable: against torch's own functions, and the failures the
naive forms are there to show."""

import math

import pytest
import torch
from torch.autograd.functional import jacobian

from seqmodels.softmax import (
    exp_limits,
    log_softmax,
    logsumexp,
    naive_log_softmax,
    naive_logsumexp,
    naive_softmax,
    softmax,
    softmax_jacobian,
)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_stable_forms_equal_torchs_and_the_naive_ones_on_moderate_logits(dtype):
    z = torch.randn(4, 6, 9, generator=torch.Generator().manual_seed(0)).to(dtype) * 4
    torch.testing.assert_close(softmax(z), torch.softmax(z, -1))
    torch.testing.assert_close(log_softmax(z), torch.log_softmax(z, -1))
    torch.testing.assert_close(logsumexp(z), torch.logsumexp(z, -1))
    torch.testing.assert_close(naive_softmax(z), torch.softmax(z, -1))
    torch.testing.assert_close(naive_logsumexp(z), torch.logsumexp(z, -1))
    torch.testing.assert_close(softmax(z).sum(-1), torch.ones(4, 6, dtype=dtype))


def test_large_logits_overflow_the_naive_softmax_only():
    z = torch.tensor([1000.0, 999.0, 998.0])
    assert torch.isnan(naive_softmax(z)).all()
    assert naive_logsumexp(z) == math.inf
    e = torch.tensor([1.0, math.exp(-1), math.exp(-2)])
    torch.testing.assert_close(softmax(z), e / e.sum())
    assert logsumexp(z).item() == pytest.approx(1000 + math.log(e.sum().item()), rel=1e-7)
    torch.testing.assert_close(softmax(z), softmax(z - 1000))  # shifting changes nothing


def test_a_tiny_probability_underflows_in_the_naive_log_softmax_only():
    z = torch.tensor([20.0, 0.0, -90.0])  # p of the last: e^-110, below float32's smallest number
    assert naive_log_softmax(z)[2] == -math.inf
    torch.testing.assert_close(log_softmax(z), torch.log_softmax(z, -1))
    assert log_softmax(z)[2].item() == pytest.approx(-110.0, abs=1e-4)
    # and autograd through the naive form gives nan where the stable form gives p - y
    for fn, finite in ((naive_log_softmax, False), (log_softmax, True)):
        leaf = z.clone().requires_grad_()
        (-fn(leaf)[2]).backward()
        assert bool(torch.isfinite(leaf.grad).all()) is finite
    torch.testing.assert_close(leaf.grad, torch.softmax(z, 0) - torch.tensor([0.0, 0.0, 1.0]))


def test_rows_of_minus_infinity_and_bad_input():
    z = torch.tensor([[-math.inf, -math.inf], [0.0, -math.inf]])
    assert logsumexp(z)[0] == -math.inf and logsumexp(z)[1] == 0.0
    torch.testing.assert_close(softmax(z[1:]), torch.tensor([[1.0, 0.0]]))
    with pytest.raises(TypeError, match="floating-point"):
        softmax(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"K >= 1, got \(3, 0\)"):
        logsumexp(torch.zeros(3, 0))


def test_softmax_jacobian_equals_autograds_and_its_rows_sum_to_zero():
    z = torch.randn(2, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    jac = softmax_jacobian(softmax(z))
    assert jac.shape == (2, 5, 5)
    for row in range(2):
        torch.testing.assert_close(jac[row], jacobian(lambda t: torch.softmax(t, 0), z[row]))
    torch.testing.assert_close(jac, jac.transpose(-1, -2))
    torch.testing.assert_close(jac.sum(-1), torch.zeros(2, 5, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_exp_limits_are_where_exp_leaves_the_range(dtype):
    low, high = exp_limits(dtype)
    step = 0.01 if dtype != torch.float16 else 0.05  # float16 has few values near its limits

    def exp(v):
        return torch.tensor(v, dtype=dtype).exp()

    assert torch.isfinite(exp(high - step)) and torch.isinf(exp(high + step))
    assert exp(low + step) > 0 and exp(low - step) == 0
    if dtype == torch.float32:
        assert high == pytest.approx(88.72, abs=0.01) and low == pytest.approx(-103.97, abs=0.01)
