r"""Normalisation layers (Chapter 8): LayerNorm and RMSNorm, written from their equations.

Both act on the last dimension of ``x: (..., d)``, each position on its own. LayerNorm (Ba et
al. 2016) centres and scales by the mean and the biased variance, then applies a learned gain
$\gamma$ and shift $\beta$:

$$\mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta, \qquad
\mu = \frac1d \sum_i x_i, \quad \sigma^2 = \frac1d \sum_i (x_i - \mu)^2 .$$

RMSNorm (Zhang and Sennrich 2019), used by Llama's blocks, drops the centring and the shift and
divides by the root mean square:

$$\mathrm{RMSNorm}(x) = \gamma \odot \frac{x}{\sqrt{\frac1d \sum_i x_i^2 + \varepsilon}} .$$

The parameters have PyTorch's names (``weight`` is $\gamma$, ``bias`` is $\beta$), so
``load_state_dict`` takes the weights of ``torch.nn.LayerNorm`` / ``torch.nn.RMSNorm``, which
the tests hold these to.
"""

from __future__ import annotations

import torch
from torch import nn


def _check_last_dim(x: torch.Tensor, d: int) -> None:
    """Refuse an input whose last dimension is not the layer's size `d`."""
    if x.ndim < 1 or x.shape[-1] != d:
        raise ValueError(f"expected x of shape (..., {d}), got {tuple(x.shape)}")


def _check_size(d: int, eps: float) -> None:
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise ValueError(f"expected d to be a positive integer, got {d!r}")
    if not eps > 0:
        raise ValueError(f"expected eps > 0, got {eps!r}")


class LayerNorm(nn.Module):
    r"""$\gamma \odot (x - \mu) / \sqrt{\sigma^2 + \varepsilon} + \beta$ over the last
    dimension; equal to ``torch.nn.LayerNorm(d, eps)`` with the same ``weight`` ($\gamma$) and
    ``bias`` ($\beta$)."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        _check_size(d, eps)
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(d))  # gamma
        self.bias = nn.Parameter(torch.zeros(d))  # beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r"""Eq. (eq-ch8-layernorm) over the last dimension: ``(..., d)`` → ``(..., d)``."""
        _check_last_dim(x, self.d)
        mean = x.mean(dim=-1, keepdim=True)  # mu
        variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # sigma^2, biased (1/d)
        x_hat = (x - mean) / torch.sqrt(variance + self.eps)
        return self.weight * x_hat + self.bias

    def extra_repr(self) -> str:
        return f"d={self.d}, eps={self.eps}"


class RMSNorm(nn.Module):
    r"""$\gamma \odot x / \sqrt{\mathrm{mean}(x^2) + \varepsilon}$ over the last dimension: no
    mean, no $\beta$; equal to ``torch.nn.RMSNorm(d, eps)`` with the same ``weight``
    ($\gamma$)."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        _check_size(d, eps)
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(d))  # gamma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r"""Eq. (eq-ch8-rmsnorm) over the last dimension: ``(..., d)`` → ``(..., d)``."""
        _check_last_dim(x, self.d)
        rms = torch.sqrt((x**2).mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * (x / rms)

    def extra_repr(self) -> str:
        return f"d={self.d}, eps={self.eps}"
