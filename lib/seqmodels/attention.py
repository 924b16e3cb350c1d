r"""Attention: queries read a weighted average of values, weighted by how well their keys match.

For queries $q_i$, keys $k_j$ and values $v_j$ (Chapter 7),

$$\alpha_{ij} = \frac{\exp s(q_i, k_j)}{\sum_{j'} \exp s(q_i, k_{j'})}, \qquad
c_i = \sum_j \alpha_{ij} v_j,$$

with one of four score functions $s$:

- ``"dot"``: $q^\top k$;
- ``"bilinear"``: $q^\top W k$ (Luong et al. 2015's "general");
- ``"additive"``: $w^\top \tanh(W[q; k]) = w^\top\tanh(W_q q + W_k k)$ (Bahdanau et al. 2015);
- ``"scaled_dot"``: $q^\top k / \sqrt{d}$ (Vaswani et al. 2017).

Everything is batched: ``q: (batch, Tq, d_q)``, ``k: (batch, Tk, d_k)``, ``v: (batch, Tk, d_v)``,
and ``key_mask: (batch, Tk)`` bool, True at real keys. Padded keys get a score of $-\infty$ *before*
the softmax, so their weight is exactly zero and the real keys' weights still sum to one. A query
whose keys are all padding gets all-zero weights (and a zero context) instead of NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from time import perf_counter

import torch
from torch import nn

SCORES = ("dot", "bilinear", "additive", "scaled_dot")


def _check_qk(q: torch.Tensor, k: torch.Tensor, same_size: bool) -> None:
    if q.ndim != 3 or k.ndim != 3 or q.shape[0] != k.shape[0]:
        raise ValueError(
            "expected q: (batch, Tq, d_q) and k: (batch, Tk, d_k) with the same batch, "
            f"got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if same_size and q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"expected queries and keys of one size d, got d_q = {q.shape[-1]}, d_k = {k.shape[-1]}"
        )


def dot_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    r"""$s_{ij} = q_i^\top k_j$: ``(batch, Tq, Tk)``."""
    _check_qk(q, k, same_size=True)
    return q @ k.transpose(-2, -1)


def scaled_dot_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    r"""$s_{ij} = q_i^\top k_j / \sqrt{d}$: ``(batch, Tq, Tk)``."""
    return dot_scores(q, k) / math.sqrt(q.shape[-1])


def bilinear_scores(q: torch.Tensor, k: torch.Tensor, W: torch.Tensor) -> torch.Tensor:  # noqa: N803
    r"""$s_{ij} = q_i^\top W k_j$ for ``W: (d_q, d_k)``: ``(batch, Tq, Tk)``."""
    _check_qk(q, k, same_size=False)
    if W.shape != (q.shape[-1], k.shape[-1]):
        raise ValueError(
            f"expected W of shape ({q.shape[-1]}, {k.shape[-1]}), got {tuple(W.shape)}"
        )
    return q @ W @ k.transpose(-2, -1)


def additive_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    W_q: torch.Tensor,  # noqa: N803
    W_k: torch.Tensor,  # noqa: N803
    w: torch.Tensor,
) -> torch.Tensor:
    r"""Eq. (eq-scores), additive: $w^\top \tanh(W_q q_i + W_k k_j)$, ``(batch, Tq, Tk)``.

    That is $w^\top\tanh(W[q_i; k_j])$ with $W = [W_q\; W_k]$; ``W_q: (a, d_q)``,
    ``W_k: (a, d_k)``, ``w: (a,)``.
    Memory grows as ``batch × Tq × Tk × a``: every pair gets its own hidden vector."""
    _check_additive(q, k, W_q, W_k, w)
    hidden = torch.tanh((q @ W_q.T)[:, :, None, :] + (k @ W_k.T)[:, None, :, :])
    return hidden @ w


def _check_additive(q, k, W_q, W_k, w) -> None:  # noqa: N803
    """Refuse additive-score parameters whose shapes do not fit `q` and `k`."""
    _check_qk(q, k, same_size=False)
    a = w.shape[0]
    if W_q.shape != (a, q.shape[-1]) or W_k.shape != (a, k.shape[-1]) or w.ndim != 1:
        raise ValueError(
            f"expected W_q: ({a}, {q.shape[-1]}), W_k: ({a}, {k.shape[-1]}), w: ({a},), got "
            f"{tuple(W_q.shape)}, {tuple(W_k.shape)}, {tuple(w.shape)}"
        )


def masked_softmax(scores: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
    r"""Eq. (eq-masked-softmax): weights ``(batch, Tq, Tk)``, masked keys $-\infty$ before
    softmax.

    `key_mask` is bool, True where a query may read a key: ``(batch, Tk)`` (the same keys for
    every query: padding) or ``(batch, Tq, Tk)`` (per query, e.g. padding and a causal mask
    together). A row with no key allowed is all zeros.
    """
    if key_mask is None:
        return torch.softmax(scores, dim=-1)
    _check_key_mask(scores, key_mask)
    allowed = key_mask[:, None, :] if key_mask.ndim == 2 else key_mask
    masked = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(masked, dim=-1)
    return weights.nan_to_num(0.0)  # rows with every key masked: 0 / 0 → 0


def _check_key_mask(scores: torch.Tensor, key_mask: torch.Tensor) -> None:
    """Refuse a key mask that is not bool of shape ``(batch, Tk)`` or ``(batch, Tq, Tk)``."""
    batch, queries, keys = scores.shape
    if key_mask.dtype != torch.bool or key_mask.shape not in (
        (batch, keys),
        (batch, queries, keys),
    ):
        raise ValueError(
            f"expected a bool key_mask of shape ({batch}, {keys}) or ({batch}, {queries}, {keys}), "
            f"got {key_mask.dtype} {tuple(key_mask.shape)}"
        )


def attend(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    r"""The context $c_i = \sum_j \alpha_{ij} v_j$: weights ``(batch, Tq, Tk)``, ``v: (batch, Tk, d_v)``
    → ``(batch, Tq, d_v)``."""
    if weights.ndim != 3 or v.ndim != 3 or weights.shape[::2] != v.shape[:2]:
        raise ValueError(
            f"expected weights (batch, Tq, Tk) and v (batch, Tk, d_v), "
            f"got {tuple(weights.shape)} and {tuple(v.shape)}"
        )
    return weights @ v


def scaled_dot_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Eq. (eq-attention), scaled dot score, masked: ``(context (batch, Tq, d_v), weights)``.

    That is $\mathrm{softmax}(QK^\top/\sqrt{d})V$ with padded keys masked. Equal to
    ``torch.nn.functional.scaled_dot_product_attention`` with ``attn_mask=key_mask[:, None]``
    (where some key is real), which also returns no weights."""
    weights = masked_softmax(scaled_dot_scores(q, k), key_mask)
    return attend(weights, v), weights


class Attention(nn.Module):
    r"""Attention with a chosen score function and its parameters (see :data:`SCORES`).

    ``forward(q, k, v, key_mask)`` → ``(context: (batch, Tq, d_v), weights: (batch, Tq, Tk))``.
    ``"dot"`` and ``"scaled_dot"`` need ``d_q == d_k`` and have no parameters; ``"bilinear"`` learns
    ``W: (d_q, d_k)``; ``"additive"`` learns ``W_q: (a, d_q)``, ``W_k: (a, d_k)``, ``w: (a,)`` with
    ``a = hidden`` (default ``d_k``).

    ``divisor`` (a plain attribute, default 1, not a parameter) divides the scores before the
    softmax, $\mathrm{softmax}_j(s_{ij}/\tau)$: Chapter 7's explorer sets it on a trained model to
    sharpen or flatten its weights without retraining."""

    divisor: float = 1.0

    def __init__(self, score: str, d_q: int, d_k: int, hidden: int | None = None):
        super().__init__()
        if score not in SCORES:
            raise ValueError(f"expected score to be one of {SCORES}, got {score!r}")
        if score in ("dot", "scaled_dot") and d_q != d_k:
            raise ValueError(f"score {score!r} needs d_q == d_k, got {d_q} and {d_k}")
        self.score = score
        if score == "bilinear":
            self.W = nn.Parameter(torch.empty(d_q, d_k))
            nn.init.xavier_uniform_(self.W)
        elif score == "additive":
            a = hidden or d_k
            self.W_q = nn.Parameter(torch.empty(a, d_q))
            self.W_k = nn.Parameter(torch.empty(a, d_k))
            self.w = nn.Parameter(torch.empty(a))
            for p in (self.W_q, self.W_k):
                nn.init.xavier_uniform_(p)
            nn.init.uniform_(self.w, -1 / math.sqrt(a), 1 / math.sqrt(a))

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """The scores ``(batch, Tq, Tk)`` before the softmax."""
        if self.score == "dot":
            return dot_scores(q, k)
        if self.score == "scaled_dot":
            return scaled_dot_scores(q, k)
        if self.score == "bilinear":
            return bilinear_scores(q, k, self.W)
        return additive_scores(q, k, self.W_q, self.W_k, self.w)

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        key_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. (eq-attention): ``(context: (batch, Tq, d_v), weights: (batch, Tq, Tk))``."""
        scores = self.scores(q, k)
        if self.divisor != 1.0:
            scores = scores / self.divisor
        weights = masked_softmax(scores, key_mask)
        return attend(weights, v), weights

    def extra_repr(self) -> str:
        return f"score={self.score!r}" + (f", divisor={self.divisor}" if self.divisor != 1 else "")


def weight_entropy(weights: torch.Tensor) -> torch.Tensor:
    r"""Entropy $-\sum_j \alpha_{ij}\log\alpha_{ij}$ in nats of each query's weights: ``(batch, Tq)``.

    $0$ when a query reads one key; $\log T_k$ when it spreads evenly over $T_k$ real keys."""
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
    return -(weights * logs).sum(-1)


# ---- what attention costs (Chapter 7) -----------------------------------------------------------


def saved_tensor_bytes(fn: Callable[[], object]) -> int:
    r"""Bytes of the tensors autograd keeps for the backward pass while ``fn()`` runs.

    What a training step must hold in memory beyond the parameters: for attention over ``Tk`` keys,
    the weights ``(batch, Tq, Tk)``; for the additive score also its hidden
    vectors ``(batch, Tq, Tk, a)``. Each storage is counted once, however many views of it are
    saved; parameters that autograd saves count too."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


@torch.no_grad()
def decoder_step_seconds(
    model: nn.Module,
    source_length: int,
    batch_size: int = 32,
    repeats: int = 20,
    generator: torch.Generator | None = None,
    calls: int = 10,
) -> float:
    r"""Best-of-`repeats` seconds (each the mean of `calls` steps) for one decoder step of a
    :class:`seqmodels.seq2seq.Seq2Seq` over a batch of random sources of `source_length` tokens:
    ``decode_steps`` on one token, ``(batch, 1)``, from the encoded sources, without autograd (the
    encoder's time is not counted).

    With attention a step computes ``batch × source_length`` scores and reads every encoder state
    ``(batch, source_length, H)``; without, it does not look at the source at all."""
    if min(source_length, batch_size, repeats, calls) < 1:
        raise ValueError(
            "expected source_length, batch_size, repeats and calls >= 1, "
            f"got {source_length}, {batch_size}, {repeats}, {calls}"
        )
    device = next(model.parameters()).device
    vocab = model.encoder.embedding.num_embeddings
    src = torch.randint(3, vocab, (batch_size, source_length), generator=generator)
    lengths = torch.full((batch_size,), source_length)
    mask = torch.ones(batch_size, source_length, dtype=torch.bool)
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        h, memory = model.start(src.to(device), lengths, mask.to(device))
        prev = torch.zeros(batch_size, 1, dtype=torch.int64, device=device)  # <s>
        best = math.inf
        for _ in range(repeats):  # each repeat times `calls` steps: less timer noise
            start = perf_counter()
            for _ in range(calls):
                model.decode_steps(prev, h, memory)
            best = min(best, (perf_counter() - start) / calls)
    model.train(was_training)
    return best
