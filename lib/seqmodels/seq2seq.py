r"""Encoder–decoder models (Chapter 6) and their attention variant (Chapter 7).

Conditional generation: a model of $p_\theta(y_1 \dots y_T \mid x) = \prod_t p_\theta(y_t \mid y_{<t}, x)$
trained by teacher forcing, $\min_\theta \sum_{(x, y)} \sum_t -\log p_\theta(y_t \mid y_{<t}, x)$,
where the decoder reads the *reference* prefix $y_{<t}$ (``<s> y_1 .. y_{T}``) and predicts
``y_1 .. y_T </s>``.

The encoder is a GRU (:class:`seqmodels.rnn_tasks.RecurrentEncoder` with ``cell="gru"``); its last
state $c = h^{enc}_n$ summarises the source. :class:`Seq2Seq` uses $c$ in any of the three ways of
the lectures (``context=``):

- ``"init"``: the decoder's initial state, $h_0 = c$;
- ``"input"``: in every recurrent update, $h_t = \mathrm{GRU}([x_t; c], h_{t-1})$;
- ``"output"``: in the output layer, $p(y_t \mid \cdot) = \mathrm{softmax}(W[h_t; c] + b)$.

With ``attention=`` one of :data:`seqmodels.attention.SCORES` it is instead an attention decoder
(RNNsearch in the form of Luong et al. 2015): $h_0 = h^{enc}_n$, and at each step the decoder state
$h_t$ queries every encoder state, $c_t = \sum_j \alpha_{tj} h^{enc}_j$, and the output is
$\mathrm{softmax}(W_y \tilde h_t + b)$ with $\tilde h_t = \tanh(W_{out}[c_t; h_t])$.

Token ids: ``0 = <s>``, ``1 = </s>`` in both vocabularies (:class:`seqmodels.vocab.Vocabulary`);
padding is ``</s>`` under a mask, never read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from .attention import SCORES, Attention
from .rnn import masked_sequence_nll
from .rnn_tasks import RecurrentEncoder
from .train import History

CONTEXT_USES = ("init", "input", "output")
Pair = tuple[Sequence[int], Sequence[int]]


@dataclass
class PairBatch:
    """Source–target pairs padded for teacher forcing.

    ``src`` ``(batch, S)`` and ``src_mask``, ``src_lengths`` ``(batch,)``; ``tgt_in`` ``(batch, T)``
    is ``<s> y_1 .. y_n``, ``tgt_out`` is ``y_1 .. y_n </s>``, ``tgt_mask`` True at their real
    positions (``n + 1`` per pair)."""

    src: torch.Tensor
    src_lengths: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_mask: torch.Tensor

    def to(self, device: torch.device | str) -> PairBatch:
        """The batch on `device` (``src_lengths`` stay on the CPU, where packing needs them)."""
        return PairBatch(
            self.src.to(device),
            self.src_lengths,
            self.src_mask.to(device),
            self.tgt_in.to(device),
            self.tgt_out.to(device),
            self.tgt_mask.to(device),
        )


def source_batch(sources: Sequence[Sequence[int]], pad: int = 1) -> tuple[torch.Tensor, ...]:
    """Sources padded to one length: ``(src: (batch, S), lengths: (batch,), mask: (batch, S))``."""
    if len(sources) == 0:
        raise ValueError("expected at least one source sequence, got none")
    rows = [list(s) for s in sources]
    lengths = torch.tensor([len(row) for row in rows])
    if lengths.min() < 1:
        raise ValueError("expected every source to have at least one token")
    width = int(lengths.max())
    src = torch.tensor([row + [pad] * (width - len(row)) for row in rows], dtype=torch.int64)
    return src, lengths, torch.arange(width)[None] < lengths[:, None]


def pair_batch(pairs: Sequence[Pair], bos: int = 0, eos: int = 1, pad: int = 1) -> PairBatch:
    """Pad `pairs` of ``(source ids, target ids)`` (targets without ``<s>``/``</s>``)."""
    src, lengths, mask = source_batch([s for s, _ in pairs], pad)
    targets = [list(t) for _, t in pairs]
    tgt_lengths = torch.tensor([len(t) + 1 for t in targets])  # y_1 .. y_n and </s>
    width = int(tgt_lengths.max())
    tgt_in = [[bos, *t] + [pad] * (width - len(t) - 1) for t in targets]
    tgt_out = [[*t, eos] + [pad] * (width - len(t) - 1) for t in targets]
    tgt_mask = torch.arange(width)[None] < tgt_lengths[:, None]
    return PairBatch(
        src,
        lengths,
        mask,
        torch.tensor(tgt_in, dtype=torch.int64),
        torch.tensor(tgt_out, dtype=torch.int64),
        tgt_mask,
    )


class Seq2Seq(nn.Module):
    """A GRU encoder–decoder; see the module docstring for `context` and `attention`.

    ``forward(batch)`` → ``(logits: (batch, T, V_tgt), weights)``, with the attention weights
    ``(batch, T, S)`` of an attention model (None otherwise)."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_dim: int = 64,
        hidden_dim: int = 128,
        context: Sequence[str] = ("init",),
        attention: str | None = None,
    ):
        super().__init__()
        context = tuple(context)
        if attention is not None:
            if attention not in SCORES:
                raise ValueError(
                    f"expected attention to be one of {SCORES} or None, got {attention!r}"
                )
            context = ()
        elif not context or any(c not in CONTEXT_USES for c in context):
            raise ValueError(
                f"expected context to be a non-empty subset of {CONTEXT_USES}, got {context!r}"
            )
        self.context, self.attention_score = context, attention
        self.tgt_vocab_size = tgt_vocab_size
        self.encoder = RecurrentEncoder(src_vocab_size, embed_dim, hidden_dim, cell="gru")
        self.embedding = nn.Embedding(tgt_vocab_size, embed_dim)
        extra = hidden_dim if "input" in context else 0
        self.rnn = nn.GRU(embed_dim + extra, hidden_dim, batch_first=True)
        if attention is not None:
            self.attention = Attention(attention, hidden_dim, hidden_dim)
            self.combine = nn.Linear(2 * hidden_dim, hidden_dim, bias=False)  # W_out[c_t; h_t]
        width = 2 * hidden_dim if "output" in context else hidden_dim
        self.out = nn.Linear(width, tgt_vocab_size)

    def encode(self, src: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. (eq-ch6-encoder): states ``(batch, S, H)``, zero at padding, and ``c: (batch, H)``.

        The encoder reads left to right, so its states at real positions never depend on the
        padding after them: it runs on the padded batch as it is (a quarter faster than packing
        it, for these small models) and $c$ is the state at each source's last real token."""
        lengths = _checked_lengths(src, lengths)
        states, _ = self.encoder.rnn(self.encoder.embedding(src))
        lengths = lengths.to(states.device)
        c = states[torch.arange(len(src), device=states.device), lengths - 1]  # last real state
        real = torch.arange(src.shape[1], device=states.device)[None] < lengths[:, None]
        return states * real[..., None], c

    def decode_steps(
        self,
        tokens: torch.Tensor,
        h: torch.Tensor,
        memory: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Eqs. (eq-ch6-decoder), (eq-ch6-input), (eq-ch6-output): logits ``(batch, T, V)``.

        Runs the decoder over `tokens: (batch, T)` from state `h: (batch, H)`; `memory` is
        ``(encoder states, c, src_mask)``.
        Returns ``(logits, last state, weights)``, the attention weights ``(batch, T, S)`` of an
        attention model (Chapter 7) and None otherwise."""
        states, c, src_mask = memory
        x = self.embedding(tokens)
        if "input" in self.context:
            x = torch.cat([x, c[:, None, :].expand(-1, x.shape[1], -1)], dim=-1)
        out, h_n = self.rnn(x, h[None].contiguous())
        weights = None
        if self.attention_score is not None:
            context, weights = self.attention(out, states, states, src_mask)
            out = torch.tanh(self.combine(torch.cat([context, out], dim=-1)))
        elif "output" in self.context:
            out = torch.cat([out, c[:, None, :].expand(-1, out.shape[1], -1)], dim=-1)
        return self.out(out), h_n[0], weights

    def start(
        self, src: torch.Tensor, lengths: torch.Tensor, src_mask: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Eq. (eq-ch6-init): ``h_0: (batch, H)``, c or zeros, and the decoder's memory."""
        states, c = self.encode(src, lengths)
        use_c = "init" in self.context or self.attention_score is not None
        return (c if use_c else torch.zeros_like(c)), (states, c, src_mask)

    def forward(self, batch: PairBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        h0, memory = self.start(batch.src, batch.src_lengths, batch.src_mask)
        logits, _, weights = self.decode_steps(batch.tgt_in, h0, memory)
        return logits, weights

    def loss(self, batch: PairBatch) -> torch.Tensor:
        """Eq. (eq-ch6-objective) per token: the teacher-forced mean NLL, in nats."""
        logits, _ = self(batch)
        return masked_sequence_nll(logits, batch.tgt_out, batch.tgt_mask)


def _checked_lengths(src: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`lengths` as a tensor, refused unless it gives each row of `src: (batch, S)` 1 .. S tokens."""
    lengths = torch.as_tensor(lengths)
    if src.ndim != 2 or lengths.shape != src.shape[:1]:
        raise ValueError(
            f"expected src (batch, S) and lengths (batch,), got {tuple(src.shape)} and "
            f"{tuple(lengths.shape)}"
        )
    if lengths.numel() and (lengths.min() < 1 or lengths.max() > src.shape[1]):
        raise ValueError(f"expected lengths in 1 .. {src.shape[1]}, got {lengths.tolist()}")
    return lengths


Step = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]


def greedy_decode(
    step: Step, state: Any, batch_size: int, bos: int = 0, eos: int = 1, max_len: int = 50
) -> list[list[int]]:
    r"""Eq. (eq-ch6-greedy) for a batch: ``batch_size`` lists of output ids, ``</s>`` left out.

    ``step(prev: (batch,) int64, state) -> (logits: (batch, V), state)``; the first `prev` is
    ``<s>``. Each sequence stops at its own ``</s>``; decoding stops when all have or after
    `max_len` tokens. Ties go to the lowest id (``torch.argmax``)."""
    _check_decode_sizes(batch_size, max_len)
    outputs: list[list[int]] = [[] for _ in range(batch_size)]
    done = [False] * batch_size
    prev = torch.full((batch_size,), bos, dtype=torch.int64)
    for _ in range(max_len):
        logits, state = step(prev, state)
        prev = logits.argmax(-1).to(torch.int64)
        for i, token in enumerate(prev.tolist()):
            if not done[i]:
                done[i] = token == eos
                if not done[i]:
                    outputs[i].append(token)
        if all(done):
            break
    return outputs


def _check_decode_sizes(batch_size: int, max_len: int) -> None:
    """Refuse an empty batch or a negative length limit."""
    if batch_size < 1 or max_len < 0:
        raise ValueError(f"expected batch_size >= 1 and max_len >= 0, got {batch_size}, {max_len}")


@dataclass
class Decoded:
    """Greedy outputs (ids without ``</s>``) and, for an attention model, each output's attention
    weights over its source: ``(len(output) + 1, len(source))`` (the last row chose ``</s>``)."""

    outputs: list[list[int]]
    weights: list[torch.Tensor] | None


@torch.no_grad()
def translate(
    model: Seq2Seq,
    sources: Sequence[Sequence[int]],
    max_len: int = 50,
    batch_size: int = 256,
) -> Decoded:
    """Greedy-decode every source with `model`, `batch_size` at a time, in the sources' order."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs: list[list[int]] = [[] for _ in sources]
    weights: list[torch.Tensor] | None = [] if model.attention_score else None
    for start in range(0, len(sources), batch_size):
        chunk = sources[start : start + batch_size]
        src, lengths, mask = source_batch(chunk)
        h, memory = model.start(src.to(device), lengths, mask.to(device))
        steps: list[torch.Tensor] = []  # each step's weights (chunk, S)

        def step(prev: torch.Tensor, h: torch.Tensor, memory=memory, steps=steps):
            logits, h, w = model.decode_steps(prev[:, None].to(device), h, memory)
            if w is not None:
                steps.append(w[:, 0])
            return logits[:, 0].cpu(), h

        decoded = greedy_decode(step, h, len(chunk), max_len=max_len)
        outputs[start : start + len(chunk)] = decoded
        if weights is not None:
            stacked = torch.stack(steps, dim=1).cpu()  # (chunk, steps, S)
            for row, (source, out) in enumerate(zip(chunk, decoded, strict=True)):
                weights.append(stacked[row, : len(out) + 1, : len(source)])
    model.train(was_training)
    return Decoded(outputs, weights)


@torch.no_grad()
def pair_nll(model: Seq2Seq, pairs: Sequence[Pair], batch_size: int = 256) -> tuple[float, int]:
    """Teacher-forced total NLL (nats) of the targets of `pairs` and the number of target tokens
    (words plus one ``</s>`` each)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(pairs), batch_size):
        batch = pair_batch(pairs[start : start + batch_size]).to(device)
        n = int(batch.tgt_mask.sum())
        total += model.loss(batch).item() * n
        count += n
    model.train(was_training)
    return total, count


def train_seq2seq(
    model: Seq2Seq,
    pairs: Sequence[Pair],
    valid: Sequence[Pair],
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    generator: torch.Generator,
    eval_every: int = 100,
    clip: float | None = 1.0,
    progress: bool = False,
) -> History:
    """Teacher forcing with Adam on random mini-batches of `pairs` drawn by `generator`, gradients
    clipped to global norm `clip`; teacher-forced held-out loss on `valid` every `eval_every` steps
    and at the end. Returns a :class:`seqmodels.train.History` (nats per target token)."""
    if steps < 1 or batch_size < 1:
        raise ValueError(f"expected steps >= 1 and batch_size >= 1, got {steps} and {batch_size}")
    if len(pairs) == 0 or len(valid) == 0:
        raise ValueError("expected training and validation pairs, got an empty set")
    device = next(model.parameters()).device
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = History()
    start = perf_counter()
    for step in tqdm(range(1, steps + 1), disable=not progress, desc="training", unit="step"):
        model.train()
        idx = torch.randint(len(pairs), (batch_size,), generator=generator).tolist()
        batch = pair_batch([pairs[i] for i in idx]).to(device)
        loss = model.loss(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), math.inf if clip is None else clip)
        opt.step()
        history.step_loss.append(loss.item())
        history.grad_norms.append(norm.item())
        history.tokens_seen += int(batch.tgt_mask.sum())
        if step % eval_every == 0 or step == steps:
            total, n = pair_nll(model, valid)
            history.eval_steps.append(step)
            history.eval_loss.append(total / n)
    history.seconds = perf_counter() - start
    return history


def errors_by_position(
    predictions: Sequence[Sequence[int]], references: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token error rate at each output position $t$: the share of references with a token at $t$
    that the prediction gets wrong there (a prediction too short is wrong). Returns
    ``(rates: (L,), counts: (L,))`` for ``L`` = the longest reference."""
    if len(predictions) != len(references):
        raise ValueError(
            f"expected as many predictions as references, got {len(predictions)} and {len(references)}"
        )
    longest = max((len(r) for r in references), default=0)
    wrong, counts = torch.zeros(longest), torch.zeros(longest)
    for pred, ref in zip(predictions, references, strict=True):
        for t, token in enumerate(ref):
            counts[t] += 1
            wrong[t] += t >= len(pred) or pred[t] != token
    return wrong / counts.clamp(min=1), counts
