r"""Softmax, log-sum-exp and log-softmax, written naively and stably, and the softmax Jacobian (Chapter 2).

The softmax of logits $z \in \mathbb{R}^K$ is $\hat y_i = e^{z_i} / \sum_j e^{z_j}$. Written that
way it overflows as soon as one $z_i$ exceeds $\ln(\text{largest float})$ (about 88.7 in float32,
11.1 in float16): $e^{z_i} = \infty$ and $\infty/\infty$ is ``nan``. Since softmax does not change
when a constant is subtracted from every logit, the stable form subtracts $m = \max_j z_j$ first,

$$\log \sum_j e^{z_j} = m + \log \sum_j e^{z_j - m}, \qquad
  \log \hat y_i = z_i - \log \sum_j e^{z_j},$$

so the largest exponent is $e^0 = 1$ and nothing overflows. The naive log-softmax,
$\log(\mathrm{softmax}(z))$, has a second failure: a probability below the smallest float becomes 0
and its log $-\infty$, although $z_i - \log\sum_j e^{z_j}$ is an ordinary number. Every function
works along the last axis of `z: (..., K)`; the naive ones exist to be shown failing.
"""

from __future__ import annotations

import math

import torch


def _check_logits(z: torch.Tensor) -> None:
    if not isinstance(z, torch.Tensor) or not z.is_floating_point():
        raise TypeError(
            f"expected a floating-point tensor of logits, got {type(z).__name__}"
            + (f" of dtype {z.dtype}" if isinstance(z, torch.Tensor) else "")
        )
    if z.ndim == 0 or z.shape[-1] == 0:
        raise ValueError(f"expected logits of shape (..., K) with K >= 1, got {tuple(z.shape)}")


def naive_softmax(z: torch.Tensor) -> torch.Tensor:
    r"""$e^{z_i} / \sum_j e^{z_j}$ exactly as written: overflows to ``nan`` for large logits. `z: (..., K)`."""
    _check_logits(z)
    e = z.exp()
    return e / e.sum(-1, keepdim=True)


def logsumexp(z: torch.Tensor) -> torch.Tensor:
    r"""Eq. (eq-logsumexp): $\log\sum_j e^{z_j}$ shifted by $m = \max_j z_j$, ``z: (..., K)`` →
    ``(...)``.

    A row of all $-\infty$ gives $-\infty$ (the log of an empty sum), not ``nan``.
    """
    _check_logits(z)
    m = z.max(-1, keepdim=True).values
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # all -inf (or +inf): shift by 0
    return (m + (z - m).exp().sum(-1, keepdim=True).log()).squeeze(-1)


def naive_logsumexp(z: torch.Tensor) -> torch.Tensor:
    r"""$\log\sum_j e^{z_j}$ as written: ``inf`` once some $e^{z_j}$ overflows. `z: (..., K)` → `(...)`."""
    _check_logits(z)
    return z.exp().sum(-1).log()


def softmax(z: torch.Tensor) -> torch.Tensor:
    r"""$e^{z_i - m} / \sum_j e^{z_j - m}$ with $m = \max_j z_j$: the same values, no overflow. `z: (..., K)`."""
    return log_softmax(z).exp()


def log_softmax(z: torch.Tensor) -> torch.Tensor:
    r"""$\log \hat y_i = z_i - \log\sum_j e^{z_j}$ (log-sum-exp): finite for any finite logits. `z: (..., K)`."""
    return z - logsumexp(z).unsqueeze(-1)


def naive_log_softmax(z: torch.Tensor) -> torch.Tensor:
    r"""$\log(\mathrm{softmax}(z))$ as written: $-\infty$ where a probability underflows to 0. `z: (..., K)`."""
    return naive_softmax(z).log()


def softmax_jacobian(probs: torch.Tensor) -> torch.Tensor:
    r"""The softmax Jacobian $\partial \hat y / \partial z = \mathrm{diag}(\hat y) - \hat y\,\hat y^\top$.

    `probs` $= \hat y$: `(..., K)` → `(..., K, K)`.

    Entry $(i, j)$ is $\partial \hat y_i / \partial z_j = \hat y_i(\delta_{ij} - \hat y_j)$; the matrix is
    symmetric and its rows sum to 0 (the probabilities always sum to 1).
    """
    _check_logits(probs)
    return torch.diag_embed(probs) - probs.unsqueeze(-1) * probs.unsqueeze(-2)


def exp_limits(dtype: torch.dtype) -> tuple[float, float]:
    r"""The logits where $e^z$ leaves `dtype`'s range: $(\ln(s/2), \ln(\text{largest}))$, $s$ the smallest positive.

    Above the second, $e^z$ rounds to $\infty$ (overflow); below the first, to 0 (underflow: $s$ is
    the smallest subnormal number, and anything under half of it rounds to 0).
    """
    info = torch.finfo(dtype)
    smallest = info.smallest_normal * info.eps  # the smallest subnormal, 2^-149 in float32
    return math.log(smallest) - math.log(2), math.log(info.max)
