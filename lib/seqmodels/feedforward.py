r"""The feedforward neural language model of Bengio et al. (2003).

The previous $n-1$ tokens are looked up in a shared embedding table $C$ and concatenated,
$x = [C(w_{t-n+1}); \dots; C(w_{t-1})]$, and the next-token logits are

$$y = b + W x + U \tanh(d + H x), \qquad p(w_t \mid w_{t-n+1}^{t-1}) = \mathrm{softmax}(y)_{w_t}.$$

$W$ (the direct connections) is optional, as in the paper. The attributes keep the paper's names;
the book writes them in its own notation (Chapter 1, Eq. eq-bengio), where $H$ is only ever a
cross-entropy and $d$ a distance: ``C`` = $E$ (``(V, m)``), ``H`` = $W_{xh}$ (``(q, (n-1) m)``),
``d`` = $\mathbf{b}_h$ (``(q,)``), ``U`` = $W_{hy}$ (``(V, q)``), ``b`` = $\mathbf{b}_y$ (``(V,)``).
"""

from __future__ import annotations

import math

import torch
from torch import nn


class FeedForwardLM(nn.Module):
    """Bengio et al.'s n-gram neural LM: embeddings of n−1 tokens → tanh hidden layer → softmax."""

    def __init__(
        self,
        vocab_size: int,
        context_size: int,
        embed_dim: int = 64,
        hidden_dim: int = 128,
        direct: bool = False,
    ):
        super().__init__()
        for name, value in [
            ("vocab_size", vocab_size),
            ("context_size", context_size),
            ("embed_dim", embed_dim),
            ("hidden_dim", hidden_dim),
        ]:
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"expected {name} to be a positive integer, got {value!r}")
        self.vocab_size, self.context_size = vocab_size, context_size
        in_dim = context_size * embed_dim
        self.C = nn.Parameter(torch.randn(vocab_size, embed_dim) * 0.1)
        self.H = nn.Parameter(torch.randn(hidden_dim, in_dim) / math.sqrt(in_dim))
        self.d = nn.Parameter(torch.zeros(hidden_dim))
        self.U = nn.Parameter(torch.randn(vocab_size, hidden_dim) / math.sqrt(hidden_dim))
        self.b = nn.Parameter(torch.zeros(vocab_size))
        self.W = nn.Parameter(torch.zeros(vocab_size, in_dim)) if direct else None

    def forward(self, contexts: torch.Tensor) -> torch.Tensor:
        """Eq. (eq-bengio): logits ``y: (batch, V)`` for ``contexts: (batch, n - 1)`` token ids."""
        self._check_contexts(contexts)
        x = self.C[contexts].flatten(1)  # (batch, (n - 1) m): the embeddings, oldest first
        y = self.b + torch.tanh(self.d + x @ self.H.T) @ self.U.T
        if self.W is not None:  # Bengio et al.'s optional direct connections
            y = y + x @ self.W.T
        return y

    def _check_contexts(self, contexts: torch.Tensor) -> None:
        """Refuse contexts of the wrong shape or type, or with ids outside the vocabulary."""
        if contexts.ndim != 2 or contexts.shape[1] != self.context_size:
            raise ValueError(
                f"expected contexts of shape (batch, {self.context_size}), got {tuple(contexts.shape)}"
            )
        if contexts.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"expected integer token ids, got dtype {contexts.dtype}")
        if contexts.numel() and (contexts.min() < 0 or contexts.max() >= self.vocab_size):
            bad = contexts[(contexts < 0) | (contexts >= self.vocab_size)][0].item()
            raise IndexError(
                f"token id {bad} is outside the vocabulary (0 .. {self.vocab_size - 1})"
            )

    def n_parameters(self) -> int:
        """The number of trainable scalars."""
        return sum(p.numel() for p in self.parameters())
