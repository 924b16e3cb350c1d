r"""Cross-entropy and perplexity, the yardsticks of every chapter.

For a held-out text of $N$ predicted tokens, the per-token cross-entropy is

$$H = -\frac{1}{N}\sum_{t=1}^{N} \log p(x_t \mid x_{<t}) \quad\text{(nats per token)},$$

and perplexity is $\mathrm{PPL} = e^{H} = 2^{H / \ln 2}$: the same number whether the log is natural
(nats) or base 2 (bits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

NATS_PER_BIT = math.log(2.0)


def cross_entropy(total_nll: float, n_tokens: int) -> float:
    """Per-token cross-entropy in nats: ``total_nll / n_tokens`` (negative log-likelihood summed in nats)."""
    if n_tokens <= 0:
        raise ValueError(f"expected a positive number of tokens, got {n_tokens}")
    if total_nll < 0 or math.isnan(total_nll):
        raise ValueError(f"expected a non-negative total negative log-likelihood, got {total_nll}")
    return total_nll / n_tokens


def perplexity(total_nll: float, n_tokens: int) -> float:
    """Perplexity ``exp(total_nll / n_tokens)``; ``inf`` when some token had probability zero."""
    return math.exp(cross_entropy(total_nll, n_tokens))


def bits(nats: float) -> float:
    """Convert nats to bits."""
    return nats / NATS_PER_BIT


def entropy(probs: torch.Tensor | Sequence[float]) -> float:
    r"""Entropy $-\sum_i p_i \log p_i$ in nats of a distribution given as probabilities (zeros allowed)."""
    p = torch.as_tensor(probs, dtype=torch.float64)
    if p.ndim != 1 or p.numel() == 0:
        raise ValueError(
            f"expected a 1-D, non-empty vector of probabilities, got shape {tuple(p.shape)}"
        )
    if (p < 0).any():
        raise ValueError("probabilities must be non-negative")
    total = float(p.sum())
    if not math.isclose(total, 1.0, rel_tol=0, abs_tol=1e-9):
        raise ValueError(f"probabilities must sum to 1, got {total:.12g}")
    nz = p[p > 0]
    return float(-(nz * nz.log()).sum())


def perplexity_of_distribution(probs: torch.Tensor | Sequence[float]) -> float:
    """The perplexity of a model that draws every token i.i.d. from `probs` and is scored on its own draws.

    This is ``exp(entropy)``: the size of a uniform choice that would be equally hard (the branching factor).
    """
    return math.exp(entropy(probs))
