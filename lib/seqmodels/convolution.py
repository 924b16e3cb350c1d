r"""A causal dilated convolutional language model (Chapter 8), in the style of WaveNet (van den
Oord et al. 2016) and the temporal convolutional network (Bai, Kolter and Koltun 2018).

Layer $\ell = 1, \dots, n_{\text{conv}}$ reads its input at the current position and at
$k_{\text{conv}} - 1$ earlier positions spaced by the dilation $2^{\ell - 1}$, with zeros before the
first position (left padding only, so no position reads a later one), and adds the result to its
input:

$$\mathbf h^{(\ell)}_t = \mathbf h^{(\ell-1)}_t + \mathrm{ReLU}\Bigl(\mathbf b^{(\ell)}
+ \sum_{i=0}^{k_{\text{conv}}-1} W^{(\ell)}_i\, \mathbf h^{(\ell-1)}_{t - i\,2^{\ell-1}}\Bigr).$$

The output at position $t$ therefore depends on exactly the $R$ tokens $t - R + 1, \dots, t$, the
receptive field $R = 1 + \sum_\ell (k_{\text{conv}} - 1)\, 2^{\ell - 1}$.
"""

from __future__ import annotations

import math
from time import perf_counter

import torch
import torch.nn.functional as F
from torch import nn


def receptive_field(kernel_size: int, dilations: list[int] | tuple[int, ...]) -> int:
    r"""$R = 1 + \sum_\ell (k_{\text{conv}} - 1)\,\mathrm{dilation}_\ell$: how many tokens one output
    reads."""
    _check_positive(kernel_size=kernel_size)
    for dilation in dilations:
        _check_positive(dilation=dilation)
    return 1 + sum((kernel_size - 1) * dilation for dilation in dilations)


class ConvLM(nn.Module):
    r"""Embedding → `n_layers` causal dilated convolutions with residual connections and ReLU →
    linear: $p(x_{t+1} \mid x_{t-R+1}, \dots, x_t) = \mathrm{softmax}(W \mathbf h^{(n)}_t + b)$.

    ``forward(tokens: (batch, T))`` → ``(logits: (batch, T, V), None)``: the call of Chapter 3's
    ``RNNLM`` and Chapter 8's ``TransformerLM``, so ``seqmodels.rnn.train_sentence_lm``,
    ``sentence_nll`` and ``distributions_at`` train and evaluate it unchanged. There is no state to
    carry (`h0` must be None). `lengths` is accepted and not needed: a causal convolution never reads
    the padding after a real position. Layer ``l`` (from 0) has dilation ``2 ** l``.
    Attributes: ``embedding`` ``(V, channels)``, ``convs`` (``nn.Conv1d``, weight
    ``(channels, channels, kernel_size)``), ``output``.
    """

    def __init__(
        self, vocab_size: int, channels: int = 16, n_layers: int = 4, kernel_size: int = 2
    ):
        super().__init__()
        _check_positive(
            vocab_size=vocab_size, channels=channels, n_layers=n_layers, kernel_size=kernel_size
        )
        self.vocab_size, self.kernel_size = vocab_size, kernel_size
        self.dilations = tuple(2**layer for layer in range(n_layers))
        self.embedding = nn.Embedding(vocab_size, channels)
        self.convs = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, dilation=dilation)
            for dilation in self.dilations
        )
        self.output = nn.Linear(channels, vocab_size)

    @property
    def receptive_field(self) -> int:
        """$R$: the number of tokens, the current one included, that one output depends on."""
        return receptive_field(self.kernel_size, self.dilations)

    def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:
        """Eq. (eq-ch8-conv): the last layer's states ``(batch, T, channels)`` of ``(batch, T)``."""
        self._check_input(tokens)
        h = self.embedding(tokens).transpose(1, 2)  # h^(0): (batch, channels, T)
        for conv, dilation in zip(self.convs, self.dilations, strict=True):
            left = (self.kernel_size - 1) * dilation  # zeros before position 0, none after T - 1
            h = h + torch.relu(conv(F.pad(h, (left, 0))))  # W_i reads h_{t - i * dilation}
        return h.transpose(1, 2)

    def forward(
        self, tokens: torch.Tensor, h0: None = None, lengths: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, None]:
        """Next-token ``(logits: (batch, T, V), None)``: $W \\mathbf h_t + b$ for ``(batch, T)``."""
        if h0 is not None:
            raise ValueError("a ConvLM carries no state between calls: pass the whole prefix")
        return self.output(self.hidden_states(tokens)), None

    def _check_input(self, tokens: torch.Tensor) -> None:
        """Refuse tokens that are not a (batch, T) tensor of ids of the vocabulary."""
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2:
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens)
            raise ValueError(f"expected tokens of shape (batch, time), got {shape}")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"expected integer tokens, got dtype {tokens.dtype}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise IndexError(f"expected token ids in 0 .. {self.vocab_size - 1}")

    def parameter_count(self) -> int:
        """The number of trainable scalars."""
        return sum(p.numel() for p in self.parameters())


@torch.no_grad()
def reread_seconds(
    model: nn.Module, lengths: list[int], window: int | None = None, repeats: int = 3
) -> list[float]:
    """Best-of-`repeats` seconds for the next-token distribution after a prefix of each length in
    `lengths`, re-reading its last `window` tokens (None: the whole prefix), as a language model
    without a carried state must at every generated token (``model(tokens) -> (logits, _)``)."""
    _check_positive(repeats=repeats, **({} if window is None else {"window": window}))
    for n in lengths:
        _check_positive(length=n)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    seconds = []
    for n in lengths:
        prefix = torch.zeros(1, n if window is None else min(n, window), dtype=torch.int64)
        prefix = prefix.to(device)
        best = math.inf
        for _ in range(repeats):
            start = perf_counter()
            model(prefix)
            best = min(best, perf_counter() - start)
        seconds.append(best)
    model.train(was_training)
    return seconds


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"expected {name} to be a positive integer, got {value!r}")
