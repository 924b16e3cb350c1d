r"""The modern decoder block (Chapter 8): RMSNorm, rotary positions and SwiGLU, as in Llama.

The block is pre-norm, like GPT-2's, with the three changes the Transformers of the 2020s share:

$$h = x + \mathrm{MHA}_{\mathrm{RoPE}}(\mathrm{RMSNorm}(x)), \qquad
y = h + \mathrm{SwiGLU}(\mathrm{RMSNorm}(h)), \qquad
\mathrm{SwiGLU}(x) = W_2\big(\mathrm{SiLU}(W_1 x) \odot W_3 x\big),$$

with $\mathrm{SiLU}(z) = z\,\sigma(z)$ (Shazeer 2020) and no biases anywhere. Positions enter
only as rotations of the queries and keys (:mod:`seqmodels.rotary`), so the model has no
position table: :class:`ModernLM` is :class:`seqmodels.transformer.TransformerLM` with these
blocks, built and called the same way so a page can train both on one budget. SwiGLU has three
matrices where the ReLU network has two: a width ``d_ff`` of about 2/3 of the ReLU one keeps the
parameter count (the default 172 against ``TransformerLM``'s 256 at ``d_model = 64``).

The attention is the library's: :class:`seqmodels.transformer.MultiHeadAttention`'s projections
and head layout, its causal mask, and :func:`seqmodels.attention.scaled_dot_attention`.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import scaled_dot_attention
from .norms import RMSNorm
from .rotary import apply_rotary, rotary_tables
from .transformer import (
    MultiHeadAttention,
    TransformerLM,
    _check_positive,
    _DecoderLM,
    _Embed,
    allowed_keys,
)


class SwiGLU(nn.Module):
    r"""$W_2(\mathrm{SiLU}(W_1 x) \odot W_3 x)$, position by position, no biases: ``w1``,
    ``w3`` are ``nn.Linear(d, d_ff)``, ``w2`` is ``nn.Linear(d_ff, d)``; Llama's ``gate_proj``,
    ``up_proj``, ``down_proj``."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        _check_positive(d_model=d_model, d_ff=d_ff)
        self.w1 = nn.Linear(d_model, d_ff, bias=False)  # the gate, through SiLU
        self.w3 = nn.Linear(d_model, d_ff, bias=False)  # the value it gates
        self.w2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r"""Eq. (eq-ch8-swiglu), position by position: ``(..., d)`` → ``(..., d)``."""
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class RotaryAttention(MultiHeadAttention):
    r"""Causal multi-head self-attention, rotary positions on the queries and keys, no biases:
    :class:`~seqmodels.transformer.MultiHeadAttention` with $q$, $k$ of each head rotated by
    :func:`seqmodels.rotary.apply_rotary` before the scores.

    ``forward(x: (batch, T, d), key_mask=None, start=0)`` → ``(output: (batch, T, d), weights:
    (batch, H, T, T))``; the rows are positions ``start .. start + T - 1``."""

    def __init__(self, d_model: int, n_heads: int, base: float = 10000.0):
        super().__init__(d_model, n_heads, bias=False)
        if self.d_k % 2:
            raise ValueError(f"expected an even head size d_model / n_heads, got {self.d_k}")
        self.base = base

    def forward(
        self, x: torch.Tensor, key_mask: torch.Tensor | None = None, start: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal RoPE attention, ``softmax(R q (R k)^T / sqrt(d_k)) V``: ``(batch, T, d)``."""
        self._check_inputs(x, None, None)
        (batch, T, _), H = x.shape, self.n_heads
        allowed = allowed_keys(batch, T, T, key_mask, True, x.device).repeat_interleave(H, 0)
        cos, sin = rotary_tables(T, self.d_k, self.base, start, x.dtype, x.device)
        q, k = (self._heads(p(x)).unflatten(0, (batch, H)) for p in (self.q_proj, self.k_proj))
        q, k = apply_rotary(q, k, cos, sin)  # (batch, H, T, d_k), position p rotated by p theta
        q, k = q.flatten(0, 1), k.flatten(0, 1)  # (batch * H, T, d_k), as _heads lays them out
        context, weights = scaled_dot_attention(q, k, self._heads(self.v_proj(x)), allowed)
        context = context.view(batch, H, T, self.d_k).transpose(1, 2).reshape(batch, T, -1)
        return self.out_proj(context), weights.view(batch, H, T, T)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, base={self.base}"


class ModernBlock(nn.Module):
    r"""Pre-norm decoder block: $h = x + \mathrm{Attn}(\mathrm{RMSNorm}(x))$, then
    $h + \mathrm{SwiGLU}(\mathrm{RMSNorm}(h))$, the attention causal with rotary positions.

    ``forward(x: (batch, T, d), key_mask=None, start=0)`` → ``(batch, T, d)``."""

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, base: float = 10000.0
    ):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d_model), RMSNorm(d_model)
        self.self_attn = RotaryAttention(d_model, n_heads, base)
        self.feed_forward = SwiGLU(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None  # the last attention's, detached

    def forward(
        self, x: torch.Tensor, key_mask: torch.Tensor | None = None, start: int = 0
    ) -> torch.Tensor:
        """The two pre-norm residual sublayers: ``(batch, T, d)`` → ``(batch, T, d)``."""
        attended, weights = self.self_attn(self.norm1(x), key_mask, start)
        self.attention_weights = weights.detach()
        h = x + self.dropout(attended)
        return h + self.dropout(self.feed_forward(self.norm2(h)))


class ModernLM(_DecoderLM):
    r"""A decoder-only language model of :class:`ModernBlock`\ s: token embeddings (scaled by
    $\sqrt{d}$, as ``TransformerLM``'s; no position table), `n_layers` blocks, a final RMSNorm
    and a linear output layer (tied to the embedding if `tie_weights`).

    ``forward(tokens: (batch, T))`` → ``(logits: (batch, T, V), None)``, the call of
    ``TransformerLM`` (and Chapter 3's ``RNNLM``), so the same training and evaluation functions
    take either; `h0` must be None and `lengths` is not needed (a real position never reads the
    padding after it). `max_len` only bounds the input: rotary positions have no table."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int = 172,
        max_len: int = 512,
        dropout: float = 0.0,
        tie_weights: bool = False,
        base: float = 10000.0,
    ):
        super().__init__(dict(
            vocab_size=vocab_size, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
            d_ff=d_ff, max_len=max_len, dropout=dropout, tie_weights=tie_weights, base=base,
        ))  # fmt: skip
        self.embed = _Embed(vocab_size, d_model, "none", max_len)
        self.blocks = nn.ModuleList(
            ModernBlock(d_model, n_heads, d_ff, dropout, base) for _ in range(n_layers)
        )
        self.norm = RMSNorm(d_model)
        self.output = nn.Linear(d_model, vocab_size)
        if tie_weights:
            self.output.weight = self.embed.embedding.weight

    def hidden_states(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """The states $h_t$ ``(batch, T, d)`` of ``tokens: (batch, T)`` at positions
        ``start ..``: causal blocks, a final RMSNorm."""
        self._check_input(tokens)
        x = self.embed(tokens)  # token embeddings times sqrt(d); positions come as rotations
        for block in self.blocks:
            x = block(x, start=start)
        return self.norm(x)

    # the call of TransformerLM (h0 refused, W h_t + b): one function for both models
    forward = TransformerLM.forward
