r"""Transformers (Chapter 8): multi-head attention, positions, encoder and decoder blocks, and the
two models built from them, a decoder-only language model and an encoder–decoder.

Multi-head attention (Vaswani et al. 2017) runs $H$ scaled dot-product attentions
(:func:`seqmodels.attention.scaled_dot_attention`) on learned projections of its inputs, each of
size $d_k = d_{\text{model}} / H$, and mixes their concatenated outputs:

$$h_i = \mathrm{Attention}(X_q W^Q_i, X_{kv} W^K_i, X_{kv} W^V_i), \qquad
\mathrm{MultiHead}(X_q, X_{kv}) = \mathrm{Concat}(h_1, \dots, h_H)\, W^O .$$

Masks follow Chapter 7: bool, **True where a query may read a key** (``key_mask: (batch, Tk)``,
True at real tokens); ``causal=True`` also hides every key after the query's own position.
(PyTorch's ``key_padding_mask`` and boolean ``attn_mask`` mean the opposite: True = ignore.)

The blocks have PyTorch's parameter names (``self_attn``, ``multihead_attn``, ``linear1``,
``linear2``, ``norm1``..``norm3``), and ``copy_from`` takes the weights of an
``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``, so the tests can hold each block
to PyTorch's. Both layer-norm placements are here: ``norm_first=False`` is the paper's post-LN,
$x \leftarrow \mathrm{LN}(x + \mathrm{Sublayer}(x))$; ``norm_first=True`` is GPT-2's pre-LN,
$x \leftarrow x + \mathrm{Sublayer}(\mathrm{LN}(x))$, with a final LayerNorm before the output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from time import perf_counter

import torch
from torch import nn

from .attention import scaled_dot_attention
from .rnn import masked_sequence_nll

POSITIONS = ("sinusoidal", "learned", "none")


def _check_positive(**sizes: object) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"expected {name} to be a positive integer, got {value!r}")


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    r"""Eq. (eq-ch8-causal): ``(T, T)`` bool, True at $j \le i$: query $i$ reads keys $0..i$."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def sinusoidal_positions(
    T: int, d: int, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None
) -> torch.Tensor:
    r"""Eq. (eq-ch8-sinusoidal): Vaswani et al.'s encodings ``(T, d)`` of positions $0..T-1$.

    $PE_{p, 2i} = \sin(p / 10000^{2i/d})$, $PE_{p, 2i+1} = \cos(p / 10000^{2i/d})$ (odd $d$: the
    last column is a sine)."""
    _check_sizes(T, d)
    position = torch.arange(T, dtype=torch.float64, device=device)[:, None]
    rates = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=device) / d)
    angles = position * rates  # (T, ceil(d / 2))
    pe = torch.empty(T, d, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d // 2])
    return pe.to(dtype)


def _check_sizes(T: int, d: int) -> None:
    """Refuse a negative or non-integer length `T` or a width `d` below one."""
    if not isinstance(T, int) or T < 0:
        raise ValueError(f"expected T to be a non-negative integer, got {T!r}")
    _check_positive(d=d)


class SinusoidalPositions(nn.Module):
    """The fixed encodings of :func:`sinusoidal_positions`, defined for any length: ``forward(T)``
    → ``(T, d)``. No parameters."""

    def __init__(self, d_model: int):
        super().__init__()
        _check_positive(d_model=d_model)
        self.d_model = d_model

    def forward(self, T: int, like: torch.Tensor) -> torch.Tensor:
        return sinusoidal_positions(T, self.d_model, like.dtype, like.device)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}"


class LearnedPositions(nn.Module):
    """One learned vector per position $0..$ ``max_len`` − 1 (GPT's): ``forward(T)`` → ``(T, d)``.
    A position never seen in training keeps its random initial vector; beyond ``max_len`` there is
    none, and asking is an error."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        _check_positive(max_len=max_len, d_model=d_model)
        self.embedding = nn.Embedding(max_len, d_model)

    def forward(self, T: int, like: torch.Tensor) -> torch.Tensor:
        max_len = self.embedding.num_embeddings
        if T > max_len:
            raise ValueError(f"learned positions exist for lengths up to {max_len}, got T = {T}")
        return self.embedding.weight[:T].to(like.dtype)


def _make_positions(kind: str, max_len: int, d_model: int) -> nn.Module | None:
    if kind not in POSITIONS:
        raise ValueError(f"expected positions to be one of {POSITIONS}, got {kind!r}")
    if kind == "sinusoidal":
        return SinusoidalPositions(d_model)
    return LearnedPositions(max_len, d_model) if kind == "learned" else None


def allowed_keys(
    batch: int,
    T_q: int,
    T_k: int,
    key_mask: torch.Tensor | None,
    causal: bool,
    device: torch.device | str | None = None,
) -> torch.Tensor | None:
    """The bool mask ``(batch, Tq, Tk)`` of keys each query may read (padding and/or causal), or
    None when every key is allowed."""
    if key_mask is not None and (key_mask.dtype != torch.bool or key_mask.shape != (batch, T_k)):
        raise ValueError(
            f"expected a bool key_mask of shape ({batch}, {T_k}), "
            f"got {key_mask.dtype} {tuple(key_mask.shape)}"
        )
    if not causal:
        return None if key_mask is None else key_mask[:, None, :].expand(batch, T_q, T_k)
    if T_q != T_k:
        raise ValueError(f"a causal mask needs as many queries as keys, got {T_q} and {T_k}")
    allowed = causal_mask(T_q, device)[None].expand(batch, T_q, T_k)
    return allowed if key_mask is None else allowed & key_mask[:, None, :]


def _copy_linear(proj: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Copy `weight` and `bias` into `proj`, which must have a bias exactly when `bias` is given."""
    proj.weight.copy_(weight)
    if (proj.bias is None) != (bias is None):
        raise ValueError("expected both modules to have biases, or neither")
    if bias is not None:
        proj.bias.copy_(bias)


class MultiHeadAttention(nn.Module):
    r"""$\mathrm{Concat}(h_1..h_H) W^O$ with $h_i = \mathrm{Attention}(X_q W^Q_i, X_{kv} W^K_i,
    X_{kv} W^V_i)$; ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` are ``nn.Linear(d, d)`` whose
    rows ``i d_k .. (i+1) d_k`` belong to head $i$.

    ``forward(query: (batch, Tq, d), key=None, value=None, key_mask=None, causal=False)`` →
    ``(output: (batch, Tq, d), weights: (batch, H, Tq, Tk))``; `key` and `value` default to `query`
    (self-attention)."""

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        _check_positive(d_model=d_model, n_heads=n_heads)
        if d_model % n_heads:
            raise ValueError(f"expected n_heads to divide d_model, got {n_heads} and {d_model}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(d_model, d_model, bias=bias) for _ in range(4)
        )
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if bias:
                nn.init.zeros_(proj.bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, T, d)`` → ``(batch * H, T, d_k)``, head-major within each sequence."""
        batch, T, _ = x.shape
        x = x.view(batch, T, self.n_heads, self.d_k).transpose(1, 2)
        return x.reshape(batch * self.n_heads, T, self.d_k)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. (eq-ch8-multihead): ``(output: (batch, Tq, d), weights: (batch, H, Tq, Tk))``."""
        key, value = self._check_inputs(query, key, value)
        (batch, T_q, _), T_k = query.shape, key.shape[1]
        allowed = allowed_keys(batch, T_q, T_k, key_mask, causal, query.device)
        if allowed is not None:  # the same mask for each of the H heads
            allowed = allowed.repeat_interleave(self.n_heads, dim=0)
        q, k, v = (
            self._heads(self.q_proj(query)),  # X_q W^Q_i for every head i: (batch * H, Tq, d_k)
            self._heads(self.k_proj(key)),
            self._heads(self.v_proj(value)),
        )
        context, weights = scaled_dot_attention(q, k, v, allowed)  # h_i: (batch * H, Tq, d_k)
        context = context.view(batch, self.n_heads, T_q, self.d_k).transpose(1, 2)
        output = self.out_proj(context.reshape(batch, T_q, self.d_model))  # Concat(h_i) W^O
        return output, weights.view(batch, self.n_heads, T_q, T_k)

    def _check_inputs(
        self, query: torch.Tensor, key: torch.Tensor | None, value: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(key, value)``, each defaulting to `query` (self-attention), after checking shapes."""
        key = query if key is None else key
        value = key if value is None else value
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.ndim != 3 or x.shape[-1] != self.d_model:
                raise ValueError(
                    f"expected {name} of shape (batch, time, {self.d_model}), got {tuple(x.shape)}"
                )
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ValueError(
                f"expected key and value of shape ({query.shape[0]}, Tk, d), got "
                f"{tuple(key.shape)} and {tuple(value.shape)}"
            )
        return key, value

    def forward_cached(
        self,
        x: torch.Tensor,
        past_keys: torch.Tensor,
        past_values: torch.Tensor,
        allowed: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention of ``x: (B, T, d)`` after ``past_keys/values: (B, H, S, d_k)``, `allowed`
        ``(B, T, S + T)``: ``(output (B, T, d), keys, values (B, H, S + T, d_k))``."""
        (batch, T, _), H = x.shape, self.n_heads
        q, k, v = (self._heads(p(x)).unflatten(0, (batch, H)) for p in self._projections())
        keys, values = torch.cat((past_keys, k), dim=2), torch.cat((past_values, v), dim=2)
        context, _ = scaled_dot_attention(
            q.flatten(0, 1), keys.flatten(0, 1), values.flatten(0, 1),
            allowed.repeat_interleave(H, dim=0),
        )  # fmt: skip
        context = context.view(batch, H, T, self.d_k).transpose(1, 2).reshape(batch, T, -1)
        return self.out_proj(context), keys, values

    def _projections(self) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
        return self.q_proj, self.k_proj, self.v_proj

    @torch.no_grad()
    def copy_from(self, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Take the weights of ``nn.MultiheadAttention(d, H)`` (its ``in_proj_weight`` stacks
        $W^Q$, $W^K$, $W^V$). Returns self."""
        self._check_torch_module(mha)
        weights = mha.in_proj_weight.chunk(3)
        biases = mha.in_proj_bias.chunk(3) if mha.in_proj_bias is not None else (None,) * 3
        for proj, w, b in zip(
            (self.q_proj, self.k_proj, self.v_proj), weights, biases, strict=True
        ):
            _copy_linear(proj, w, b)
        self.out_proj.load_state_dict(mha.out_proj.state_dict())
        return self

    def _check_torch_module(self, mha: nn.MultiheadAttention) -> None:
        """Refuse an ``nn.MultiheadAttention`` of another size, head count or key/value size."""
        if mha.embed_dim != self.d_model or mha.num_heads != self.n_heads:
            raise ValueError(
                f"expected nn.MultiheadAttention({self.d_model}, {self.n_heads}), got "
                f"({mha.embed_dim}, {mha.num_heads})"
            )
        if not mha._qkv_same_embed_dim:
            raise ValueError("expected nn.MultiheadAttention with kdim = vdim = embed_dim")

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}"


class _Block(nn.Module):
    """What the encoder and decoder blocks share: the feed-forward sublayer and the norm placement."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, norm_first: bool, dropout: float):
        super().__init__()
        _check_positive(d_model=d_model, n_heads=n_heads, d_ff=d_ff)
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None  # the last self-attention's, detached

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        r"""$\mathrm{FFN}(x) = W_2\,\mathrm{ReLU}(W_1 x + b_1) + b_2$, position by position."""
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))

    def _sublayer(self, x: torch.Tensor, norm: nn.LayerNorm, fn) -> torch.Tensor:
        r"""Eq. (eq-ch8-ln): pre-LN $x + f(\mathrm{LN}(x))$ or post-LN $\mathrm{LN}(x + f(x))$."""
        if self.norm_first:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))

    def _self_attention(self, x, key_mask, causal):
        out, weights = self.self_attn(x, key_mask=key_mask, causal=causal)
        self.attention_weights = weights.detach()
        return out

    def _copy_common(self, layer: nn.Module, norms: Sequence[str]) -> None:
        if layer.norm_first != self.norm_first:
            raise ValueError(
                f"expected a layer with norm_first={self.norm_first}, got {layer.norm_first}"
            )
        if layer.activation is not torch.nn.functional.relu:
            raise ValueError("expected a layer with the ReLU activation")
        self.self_attn.copy_from(layer.self_attn)
        for name in ("linear1", "linear2", *norms):
            getattr(self, name).load_state_dict(getattr(layer, name).state_dict())


class EncoderBlock(_Block):
    r"""Self-attention then the feed-forward network, each with a residual connection and a
    LayerNorm (post-LN or pre-LN, `norm_first`); equal to ``nn.TransformerEncoderLayer(d_model,
    n_heads, d_ff, dropout, batch_first=True, norm_first=...)`` with copied weights.

    ``forward(x: (batch, T, d), key_mask=None, causal=False)`` → ``(batch, T, d)``; a decoder-only
    language model is a stack of these with ``causal=True``."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        norm_first: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__(d_model, n_heads, d_ff, norm_first, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(
        self, x: torch.Tensor, key_mask: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        """Eq. (eq-ch8-ln): self-attention then the feed-forward network, ``(batch, T, d)``."""
        x = self._sublayer(x, self.norm1, lambda y: self._self_attention(y, key_mask, causal))
        return self._sublayer(x, self.norm2, self.feed_forward)

    def forward_cached(
        self,
        x: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor],
        allowed: torch.Tensor,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The block on ``x: (B, T, d)`` read after the keys and values `past` ``(B, H, S, d_k)``:
        ``(output (B, T, d), (keys, values) (B, H, S + T, d_k))``; `allowed`: ``(B, T, S + T)``."""
        grown: list[torch.Tensor] = []

        def attend(y: torch.Tensor) -> torch.Tensor:
            out, keys, values = self.self_attn.forward_cached(y, *past, allowed)
            grown.extend((keys, values))
            return out

        x = self._sublayer(x, self.norm1, attend)
        return self._sublayer(x, self.norm2, self.feed_forward), (grown[0], grown[1])

    @torch.no_grad()
    def copy_from(self, layer: nn.TransformerEncoderLayer) -> EncoderBlock:
        """Take the weights of an ``nn.TransformerEncoderLayer`` (ReLU, same norm placement)."""
        self._copy_common(layer, ("norm1", "norm2"))
        return self


class DecoderBlock(_Block):
    r"""Masked self-attention, cross-attention over the encoder's states, then the feed-forward
    network, each with a residual connection and a LayerNorm; equal to
    ``nn.TransformerDecoderLayer(..., batch_first=True)`` with copied weights.

    ``forward(x: (batch, T, d), memory: (batch, S, d), memory_mask=None, key_mask=None,
    causal=True)`` → ``(batch, T, d)``; `memory_mask: (batch, S)` is True at real source tokens,
    `key_mask: (batch, T)` at real target tokens."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        norm_first: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__(d_model, n_heads, d_ff, norm_first, dropout)
        self.multihead_attn = MultiHeadAttention(d_model, n_heads)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.cross_weights: torch.Tensor | None = None  # the last cross-attention's, detached

    def _cross_attention(self, x, memory, memory_mask):
        out, weights = self.multihead_attn(x, memory, memory, key_mask=memory_mask)
        self.cross_weights = weights.detach()
        return out

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        causal: bool = True,
    ) -> torch.Tensor:
        x = self._sublayer(x, self.norm1, lambda y: self._self_attention(y, key_mask, causal))
        x = self._sublayer(x, self.norm2, lambda y: self._cross_attention(y, memory, memory_mask))
        return self._sublayer(x, self.norm3, self.feed_forward)

    @torch.no_grad()
    def copy_from(self, layer: nn.TransformerDecoderLayer) -> DecoderBlock:
        """Take the weights of an ``nn.TransformerDecoderLayer`` (ReLU, same norm placement)."""
        self._copy_common(layer, ("norm1", "norm2", "norm3"))
        self.multihead_attn.copy_from(layer.multihead_attn)
        return self


class _Embed(nn.Module):
    r"""Token embeddings scaled by $\sqrt{d}$ (Vaswani et al., section 3.4) plus positions."""

    def __init__(self, vocab_size: int, d_model: int, positions: str, max_len: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)
        self.positions = _make_positions(positions, max_len, d_model)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens) * self.scale
        if self.positions is not None:
            x = x + self.positions(tokens.shape[1], x)
        return x

    def at(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Embeddings of ``tokens: (B, T)`` at the given ``positions: (B, T)`` (each row its own)."""
        x = self.embedding(tokens) * self.scale
        if self.positions is not None:
            x = x + self.positions(int(positions.max()) + 1, x)[positions]
        return x


def _check_tokens(tokens: torch.Tensor, vocab_size: int, name: str = "tokens") -> None:
    if tokens.ndim != 2:
        raise ValueError(f"expected {name} of shape (batch, time), got {tuple(tokens.shape)}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"expected integer {name}, got dtype {tokens.dtype}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise IndexError(f"{name} must lie in 0 .. {vocab_size - 1}")


class _DecoderLM(nn.Module):
    """What the decoder-only language models (:class:`TransformerLM`, ``ModernLM``) share: the
    configuration, the input checks and the parameter count."""

    def __init__(self, config: dict):
        super().__init__()
        vocab_size, max_len = config["vocab_size"], config["max_len"]
        _check_positive(vocab_size=vocab_size, n_layers=config["n_layers"], max_len=max_len)
        self.vocab_size, self.max_len, self.config = vocab_size, max_len, config

    def _check_input(self, tokens: torch.Tensor) -> None:
        """Refuse tokens that are not ids of the vocabulary or longer than `max_len`."""
        _check_tokens(tokens, self.vocab_size)
        if tokens.shape[1] > self.max_len:
            raise ValueError(
                f"expected at most max_len = {self.max_len} tokens, got {tokens.shape[1]}"
            )

    def _check_no_state(self, h0: object) -> None:
        """Refuse a carried state: the model re-reads its prefix (Chapter 3's `h0` slot)."""
        if h0 is not None:
            raise ValueError(
                f"a {type(self).__name__} carries no state between calls: pass the whole prefix"
            )

    def parameter_count(self) -> int:
        """The number of trainable scalars (a tied output matrix counted once)."""
        return sum(p.numel() for p in self.parameters())


@dataclass(frozen=True)
class KVCache:
    r"""What a :class:`TransformerLM` has read, for decoding without re-reading it: per block the
    keys and values of every position read, ``(B, H, S, d_k)`` each, and ``key_mask: (B, S)``,
    True at real (not padding) tokens. Never changed in place: reading more returns a new cache.

    It holds $2 \cdot \text{layers} \cdot B \cdot S \cdot d_{\text{model}}$ numbers
    (:meth:`nbytes`); an RNN's carried state is $B \cdot d_{\text{model}}$ per layer whatever $S$."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    key_mask: torch.Tensor

    @property
    def length(self) -> int:
        """$S$, the positions (padding included) read so far."""
        return self.key_mask.shape[1]

    @property
    def batch_size(self) -> int:
        return self.key_mask.shape[0]

    def real_lengths(self) -> torch.Tensor:
        """``(B,)``: the real tokens each row has read, the position its next token takes."""
        return self.key_mask.sum(dim=1)

    def nbytes(self) -> int:
        """Bytes held by the keys and values (the mask not counted)."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def select(self, rows: torch.Tensor | Sequence[int]) -> KVCache:
        """The cache of the given rows (in that order, repeats allowed: forking beams)."""
        index = torch.as_tensor(rows, dtype=torch.int64, device=self.key_mask.device)
        if index.ndim != 1 or (index.numel() and not 0 <= index.min() <= index.max() < len(self)):
            raise IndexError(f"expected row indices in 0 .. {len(self) - 1}, got {rows!r}")
        pick = tuple(t.index_select(0, index) for t in (*self.keys, *self.values))
        n = len(self.keys)
        return KVCache(pick[:n], pick[n:], self.key_mask.index_select(0, index))

    def __len__(self) -> int:
        return self.batch_size


class TransformerLM(_DecoderLM):
    r"""A decoder-only (GPT-style) language model: embeddings plus positions, `n_layers` causal
    :class:`EncoderBlock`\ s, a final LayerNorm (pre-LN), and a linear output layer (tied to the
    embedding if `tie_weights`): $p(x_{t+1} \mid x_{\le t}) = \mathrm{softmax}(W h_t + b)$.

    ``forward(tokens: (batch, T))`` → ``(logits: (batch, T, V), None)``: the call of Chapter 3's
    ``RNNLM``, so ``seqmodels.rnn.train_sentence_lm``, ``sentence_nll`` and ``distributions_at``
    train and evaluate it unchanged. There is no state to carry (`h0` must be None): a Transformer
    re-reads its prefix. `lengths` is accepted and not needed: with the causal mask a real position
    never reads the padding after it.

    For decoding, :meth:`forward_cached` reads new tokens after a :class:`KVCache` of what was read
    before (each block's keys and values), so a generated token costs one position's work, not the
    prefix's; :func:`cached_lm_next_log_probs` puts it behind ``seqmodels.decoding``'s searches."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int = 256,
        max_len: int = 512,
        positions: str = "sinusoidal",
        norm_first: bool = True,
        dropout: float = 0.0,
        tie_weights: bool = False,
    ):
        super().__init__(dict(
            vocab_size=vocab_size, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
            d_ff=d_ff, max_len=max_len, positions=positions, norm_first=norm_first,
            dropout=dropout, tie_weights=tie_weights,
        ))  # fmt: skip
        self.embed = _Embed(vocab_size, d_model, positions, max_len)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, norm_first, dropout) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.output = nn.Linear(d_model, vocab_size)
        if tie_weights:
            self.output.weight = self.embed.embedding.weight

    def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:
        """The states $h_t$ ``(batch, T, d)`` of ``tokens: (batch, T)``: causal blocks, a norm."""
        self._check_input(tokens)
        x = self.embed(tokens)  # token embeddings times sqrt(d), plus positions
        for block in self.blocks:
            x = block(x, causal=True)
        return self.norm(x)

    def forward(
        self,
        tokens: torch.Tensor,
        h0: None = None,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, None]:
        """Next-token ``(logits: (batch, T, V), None)``: $W h_t + b$ for ``tokens: (batch, T)``."""
        self._check_no_state(h0)
        return self.output(self.hidden_states(tokens)), None

    def empty_cache(self, batch_size: int) -> KVCache:
        """A :class:`KVCache` of `batch_size` rows that has read nothing."""
        _check_positive(batch_size=batch_size)
        ref = self.output.weight
        H = self.config["n_heads"]
        empty = ref.new_zeros(batch_size, H, 0, self.config["d_model"] // H)
        mask = torch.zeros(batch_size, 0, dtype=torch.bool, device=ref.device)
        return KVCache((empty,) * len(self.blocks), (empty,) * len(self.blocks), mask)

    def forward_cached(
        self,
        tokens: torch.Tensor,
        cache: KVCache | None = None,
        key_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """Logits ``(B, T, V)`` of ``tokens: (B, T)`` read after `cache`, and the grown cache.

        `key_mask` ``(B, T)`` is True at real tokens (default: all). Batches are **left-padded**:
        a row's positions count its real tokens only, so each row's logits at its real tokens are
        those of :meth:`forward` on that row alone; padding is never read (its logits are junk).
        The cache given is left unchanged (the one returned is new); `cache` None reads from
        nothing."""
        cache, key_mask = self._check_cached_input(tokens, cache, key_mask)
        positions = (cache.real_lengths()[:, None] + key_mask.cumsum(dim=1) - 1).clamp(min=0)
        S, T = cache.length, tokens.shape[1]
        reads = torch.cat((cache.key_mask, key_mask), dim=1)  # (B, S + T)
        causal = torch.ones(T, S + T, dtype=torch.bool, device=tokens.device).tril(S)
        allowed = causal[None] & reads[:, None, :] & key_mask[:, :, None]  # (B, T, S + T)
        x = self.embed.at(tokens, positions)
        keys, values = [], []
        for block, past in zip(
            self.blocks, zip(cache.keys, cache.values, strict=True), strict=True
        ):
            x, (k, v) = block.forward_cached(x, past, allowed)
            keys.append(k)
            values.append(v)
        return self.output(self.norm(x)), KVCache(tuple(keys), tuple(values), reads)

    def _check_cached_input(
        self, tokens: torch.Tensor, cache: KVCache | None, key_mask: torch.Tensor | None
    ) -> tuple[KVCache, torch.Tensor]:
        """The cache (an empty one for None) and the key mask (all True for None), checked."""
        _check_tokens(tokens, self.vocab_size)
        batch, T = tokens.shape
        if T < 1:
            raise ValueError("expected at least one new token, got tokens of shape (batch, 0)")
        cache = self.empty_cache(batch) if cache is None else cache
        if not isinstance(cache, KVCache) or len(cache.keys) != len(self.blocks):
            raise TypeError(f"expected a KVCache of {len(self.blocks)} blocks, got {cache!r:.60}")
        if cache.batch_size != batch:
            raise ValueError(
                f"expected tokens for the cache's {cache.batch_size} rows, got {batch}"
            )
        if key_mask is None:
            key_mask = torch.ones(batch, T, dtype=torch.bool, device=tokens.device)
        if key_mask.dtype != torch.bool or key_mask.shape != tokens.shape:
            raise ValueError(
                f"expected a bool key_mask of shape {tuple(tokens.shape)}, "
                f"got {key_mask.dtype} {tuple(key_mask.shape)}"
            )
        longest = int((cache.real_lengths() + key_mask.sum(dim=1)).max())
        if longest > self.max_len:
            raise ValueError(
                f"expected at most max_len = {self.max_len} tokens in a row, cache included; "
                f"a row would have {longest}"
            )
        return cache, key_mask


def cached_lm_next_log_probs(
    model: TransformerLM,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``seqmodels.decoding.lm_next_log_probs(model)`` through a :class:`KVCache`: the same
    `next_log_probs` (log-softmax of the last logits, eval mode, no gradients, results on the CPU),
    but each call whose prefixes extend the previous call's by one token (rows in any order,
    dropped or repeated, as sampling, greedy and beam search call it) reads only that token; any
    other call re-reads its prefixes and starts a new cache."""
    device = next(model.parameters()).device
    last: dict = {"rows": {}, "cache": None}

    @torch.no_grad()
    def next_log_probs(prefixes: torch.Tensor) -> torch.Tensor:
        if not isinstance(prefixes, torch.Tensor) or prefixes.ndim != 2 or prefixes.shape[1] < 1:
            raise ValueError(f"expected prefixes of shape (n, t) with t >= 1, got {prefixes!r:.60}")
        model.eval()
        rows = [last["rows"].get(tuple(p[:-1])) for p in prefixes.tolist()]
        if last["cache"] is None or None in rows:  # not one token after the last call: re-read
            logits, cache = model.forward_cached(prefixes.to(device))
        else:
            logits, cache = model.forward_cached(
                prefixes[:, -1:].to(device), last["cache"].select(rows)
            )
        last["rows"] = {tuple(p): i for i, p in enumerate(prefixes.tolist())}
        last["cache"] = cache
        return logits[:, -1].float().log_softmax(-1).cpu()

    return next_log_probs


class TransformerSeq2Seq(nn.Module):
    r"""The encoder–decoder Transformer: `n_layers` :class:`EncoderBlock`\ s over the source, and
    `n_layers` :class:`DecoderBlock`\ s (masked self-attention, cross-attention, feed-forward) over
    the target read so far; sinusoidal positions, pre-LN by default.

    It has the interface of :class:`seqmodels.seq2seq.Seq2Seq` that training and decoding use —
    ``forward(batch)`` → ``(logits, cross-attention weights)``, ``loss(batch)``, ``start`` and
    ``decode_steps`` — so ``train_seq2seq``, ``pair_nll`` and ``translate`` work unchanged. Its
    decoding "state" is the target prefix read so far, re-read at every step."""

    attention_score = "scaled_dot"  # translate() collects the cross-attention weights

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int = 256,
        max_len: int = 256,
        norm_first: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        _check_positive(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.src_embed = _Embed(src_vocab_size, d_model, "sinusoidal", max_len)
        self.tgt_embed = _Embed(tgt_vocab_size, d_model, "sinusoidal", max_len)
        self.encoder = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, norm_first, dropout) for _ in range(n_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, norm_first, dropout) for _ in range(n_layers)
        )
        self.enc_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.dec_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.out = nn.Linear(d_model, tgt_vocab_size)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """Encoder states ``(batch, S, d)`` for ``src: (batch, S)``, padding hidden by the mask."""
        _check_tokens(src, self.src_vocab_size, "src")
        x = self.src_embed(src)
        for block in self.encoder:
            x = block(x, key_mask=src_mask)
        return self.enc_norm(x)

    def decode(
        self, tgt_in: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``(batch, T, V)`` for ``tgt_in: (batch, T)``, and weights ``(batch, T, S)``.

        The weights are the last decoder block's cross-attention, averaged over heads."""
        _check_tokens(tgt_in, self.tgt_vocab_size, "tgt_in")
        x = self.tgt_embed(tgt_in)
        for block in self.decoder:
            x = block(x, memory, memory_mask=src_mask)
        return self.out(self.dec_norm(x)), self.decoder[-1].cross_weights.mean(dim=1)

    def forward(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        memory = self.encode(batch.src, batch.src_mask)
        return self.decode(batch.tgt_in, memory, batch.src_mask)

    def loss(self, batch) -> torch.Tensor:
        """Teacher-forced mean NLL over the real target tokens (nats per token)."""
        logits, _ = self(batch)
        return masked_sequence_nll(logits, batch.tgt_out, batch.tgt_mask)

    def start(
        self, src: torch.Tensor, lengths: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Encode the source: the empty target prefix ``(batch, 0)`` and the memory."""
        memory = self.encode(src, src_mask)
        empty = torch.empty(len(src), 0, dtype=torch.int64, device=src.device)
        return empty, (memory, src_mask)

    def decode_steps(
        self, tokens: torch.Tensor, prefix: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Append `tokens: (batch, t)` to `prefix`, re-read it: ``(logits (batch, t, V) for the new
        positions, the longer prefix, their cross-attention weights (batch, t, S))``."""
        prefix = torch.cat([prefix, tokens.to(prefix.device)], dim=1)
        logits, weights = self.decode(prefix, *memory)
        t = tokens.shape[1]
        return logits[:, -t:], prefix, weights[:, -t:]

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


# ---- the stored KJV language model ------------------------------------------------------------

KJV_CHECKPOINT = "gpt_kjv"


def pretrained_kjv_lm() -> TransformerLM:
    """Chapter 8's Transformer language model of the KJV as trained by ``benchmarks/ch08_gpt_kjv.py``
    (Chapter 1's vocabulary, ``load_kjv(min_count=2)``): its stored weights in ``seqmodels.results``,
    in eval mode on the CPU. The run's figures are ``load_result("gpt_kjv")``."""
    from safetensors.torch import load_file

    folder = resources.files("seqmodels.results")
    config = json.loads((folder / f"{KJV_CHECKPOINT}.json").read_text())["model"]
    model = TransformerLM(**config)
    with resources.as_file(folder / f"{KJV_CHECKPOINT}.safetensors") as path:
        state = load_file(path)
    if config["tie_weights"]:
        state["output.weight"] = state["embed.embedding.weight"]
    model.load_state_dict(state)
    return model.eval()


# ---- Chapter 8's measurements -----------------------------------------------------------------


def train_step_seconds(
    model: nn.Module,
    T: int,
    batch_size: int = 16,
    repeats: int = 3,
    generator: torch.Generator | None = None,
) -> float:
    """Best-of-`repeats` seconds for one forward and backward pass of a language model (a
    :class:`TransformerLM` or ``seqmodels.rnn.RNNLM``: ``model(tokens) -> (logits, _)``) over random
    tokens ``(batch_size, T)``, the loss the mean cross-entropy against random targets."""
    _check_positive(T=T, batch_size=batch_size, repeats=repeats)
    device = next(model.parameters()).device
    vocab = model.output.out_features if hasattr(model, "output") else None
    if vocab is None:
        raise ValueError("expected a language model with an `output` layer")
    tokens = torch.randint(3, vocab, (batch_size, T + 1), generator=generator).to(device)
    best = math.inf
    was_training = model.training
    model.train()
    for _ in range(repeats):
        model.zero_grad(set_to_none=True)
        start = perf_counter()
        logits, _ = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        best = min(best, perf_counter() - start)
    model.train(was_training)
    return best


def cached_step_seconds(
    model: TransformerLM, lengths: Sequence[int], repeats: int = 3
) -> list[float]:
    """Best-of-`repeats` seconds for the next-token logits after a prefix of each length in
    `lengths`, reading only its last token through a key–value cache of the others (the cached
    twin of ``seqmodels.convolution.reread_seconds``)."""
    _check_positive(repeats=repeats)
    for n in lengths:
        _check_positive(length=n)
        if n > model.max_len:
            raise ValueError(f"expected lengths of at most max_len = {model.max_len}, got {n}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    seconds = []
    with torch.no_grad():
        for n in lengths:
            tokens = torch.zeros(1, n, dtype=torch.int64, device=device)
            cache = model.forward_cached(tokens[:, :-1])[1] if n > 1 else model.empty_cache(1)
            best = math.inf
            for _ in range(repeats):
                start = perf_counter()
                model.forward_cached(tokens[:, -1:], cache)
                best = min(best, perf_counter() - start)
            seconds.append(best)
    model.train(was_training)
    return seconds
