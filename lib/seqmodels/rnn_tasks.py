"""Sequence classification (seq2vec) and sequence labelling with a recurrent encoder.

Both models read token ids through an embedding and ``torch.nn.RNN`` (tanh: Chapter 3's Elman cell,
equal to :class:`seqmodels.rnn.ElmanRNN`), ``layers`` deep and optionally bidirectional, over packed
padded batches, so padding never reaches a state. A classifier reads the encoder's summary, the last
state of each direction of the top layer (forward: after the last real token; backward: after the
first); a labeller reads the top layer's output at every position.

An *example* is a pair ``(ids, label)`` for a classifier and ``(ids, labels)`` with one label per id
for a labeller; ids are lists of token ids, labels integers in ``0 .. n_labels - 1``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter

import torch
import torch.nn.functional as F
from torch import nn

from .rnn import masked_sequence_nll
from .train import History

Example = tuple[Sequence[int], int | Sequence[int]]


@dataclass
class LabelledBatch:
    """Examples padded to one length: ``tokens`` and ``mask`` ``(batch, time)``, ``lengths``
    ``(batch,)``, and ``labels`` ``(batch,)`` (one per sequence) or ``(batch, time)`` (one per token,
    padded with 0 where ``mask`` is False)."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor

    def to(self, device: torch.device | str) -> LabelledBatch:
        """The batch on `device` (``lengths`` stay on the CPU, where packing needs them)."""
        return LabelledBatch(
            self.tokens.to(device), self.lengths, self.mask.to(device), self.labels.to(device)
        )


def labelled_batch(examples: Sequence[Example], pad: int = 1) -> LabelledBatch:
    """Pad `examples` (see the module docstring) into a :class:`LabelledBatch`."""
    if len(examples) == 0:
        raise ValueError("expected at least one example, got none")
    lengths = torch.tensor([len(ids) for ids, _ in examples])
    if lengths.min() < 1:
        raise ValueError("expected every example to have at least one token")
    time = int(lengths.max())
    per_token = not isinstance(examples[0][1], int)
    for i, (ids, label) in enumerate(examples):
        if per_token and (isinstance(label, int) or len(label) != len(ids)):
            raise ValueError(f"example {i}: expected one label per token ({len(ids)})")
        if not per_token and not isinstance(label, int):
            raise ValueError(f"example {i}: expected one integer label, like example 0")
    mask = torch.arange(time)[None] < lengths[:, None]
    tokens = torch.full((len(examples), time), pad, dtype=torch.int64)
    tokens[mask] = torch.as_tensor([t for ids, _ in examples for t in ids], dtype=torch.int64)
    if per_token:  # row by row, the real positions in order: the concatenated labels
        labels = torch.zeros((len(examples), time), dtype=torch.int64)
        labels[mask] = torch.as_tensor([y for _, ys in examples for y in ys], dtype=torch.int64)
    else:
        labels = torch.as_tensor([label for _, label in examples], dtype=torch.int64)
    return LabelledBatch(tokens, lengths, mask, labels)


class RecurrentEncoder(nn.Module):
    """Embedding → ``nn.RNN`` (tanh, batch first; or ``nn.GRU`` with ``cell="gru"``), `layers` deep,
    optionally bidirectional.

    ``forward(tokens, lengths)`` returns the top layer's outputs ``(batch, time, width)`` (zero at
    padding) and its summary ``(batch, width)``, where ``width = hidden_dim × directions``.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        layers: int = 1,
        bidirectional: bool = False,
        cell: str = "rnn",
    ):
        super().__init__()
        cells = {"rnn": nn.RNN, "gru": nn.GRU}
        if cell not in cells:
            raise ValueError(f"expected cell to be one of {tuple(cells)}, got {cell!r}")
        sizes = [
            ("vocab_size", vocab_size),
            ("embed_dim", embed_dim),
            ("hidden_dim", hidden_dim),
            ("layers", layers),
        ]
        for name, value in sizes:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"expected {name} to be a positive integer, got {value!r}")
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.rnn = cells[cell](
            embed_dim, hidden_dim, num_layers=layers, batch_first=True, bidirectional=bidirectional
        )
        self.width = hidden_dim * (2 if bidirectional else 1)

    def forward(
        self, tokens: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if tokens.ndim != 2:
            raise ValueError(f"expected tokens of shape (batch, time), got {tuple(tokens.shape)}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise IndexError(f"token ids must lie in 0 .. {self.vocab_size - 1}")
        lengths = torch.as_tensor(lengths).cpu()
        if (
            lengths.shape != tokens.shape[:1]
            or lengths.min() < 1
            or lengths.max() > tokens.shape[1]
        ):
            raise ValueError(
                f"expected {len(tokens)} lengths in 1 .. {tokens.shape[1]}, got {lengths.tolist()}"
            )
        packed = nn.utils.rnn.pack_padded_sequence(
            self.embedding(tokens), lengths, batch_first=True, enforce_sorted=False
        )
        out, h_n = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(
            out, batch_first=True, total_length=tokens.shape[1]
        )
        directions = 2 if self.rnn.bidirectional else 1
        summary = h_n[-directions:].transpose(0, 1).reshape(len(tokens), self.width)
        return out, summary


class SequenceClassifier(nn.Module):
    """seq2vec: one label per sequence, ``softmax(W s + b)`` of a vector ``s`` for the sequence.

    `pooling` = ``"last"``: ``s`` is the encoder's summary (its last states); ``"mean"``: ``s`` is
    the mean of the top layer's outputs over the real positions.
    """

    def __init__(self, n_labels: int, pooling: str = "last", **encoder_options):
        super().__init__()
        if pooling not in ("last", "mean"):
            raise ValueError(f"expected pooling 'last' or 'mean', got {pooling!r}")
        self.pooling = pooling
        self.encoder = RecurrentEncoder(**encoder_options)
        self.output = nn.Linear(self.encoder.width, n_labels)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, n_labels)`` of the last state or the mean state for ``tokens: (batch,
        time)``.
        """
        outputs, summary = self.encoder(tokens, lengths)  # h_1 .. h_T, and h_T of each direction
        if self.pooling == "mean":  # padded outputs are zero: sum, then divide by the lengths
            lengths = torch.as_tensor(lengths, device=outputs.device, dtype=outputs.dtype)
            summary = outputs.sum(1) / lengths[:, None]
        return self.output(summary)


class SequenceLabeller(nn.Module):
    """One label per token, ``softmax(W o_t + b)`` of the top layer's output ``o_t`` at each position.

    Bidirectional, ``o_t`` has read the whole sequence, the tokens after ``t`` included.
    """

    def __init__(self, n_labels: int, **encoder_options):
        super().__init__()
        self.encoder = RecurrentEncoder(**encoder_options)
        self.output = nn.Linear(self.encoder.width, n_labels)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, time, n_labels)``."""
        return self.output(self.encoder(tokens, lengths)[0])


def _loss(model: nn.Module, batch: LabelledBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean NLL (nats) over the batch's labels, and the logits that gave it."""
    logits = model(batch.tokens, batch.lengths)
    if logits.ndim == 3:
        return masked_sequence_nll(logits, batch.labels, batch.mask), logits
    return F.cross_entropy(logits, batch.labels), logits


@dataclass
class Scores:
    """Held-out scores: total NLL in nats, the number of labels scored, and how many were right."""

    nll: float
    n: int
    correct: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.n


@torch.no_grad()
def predict(model: nn.Module, examples: Sequence[Example], batch_size: int = 256) -> list:
    """The most probable label of each example (a classifier) or of each of its tokens (a labeller)."""
    return [p for p, _ in _predict_and_score(model, examples, batch_size)]


@torch.no_grad()
def evaluate(model: nn.Module, examples: Sequence[Example], batch_size: int = 256) -> Scores:
    """:class:`Scores` of `model` on `examples`, each label counted once whatever the padding."""
    nll, n, correct = 0.0, 0, 0
    for _, (total, count, right) in _predict_and_score(model, examples, batch_size):
        nll, n, correct = nll + total, n + count, correct + right
    return Scores(nll, n, correct)


def _predict_and_score(model: nn.Module, examples: Sequence[Example], batch_size: int):
    if len(examples) == 0:
        raise ValueError("expected at least one example, got none")
    device = next(model.parameters()).device
    model.eval()
    results: list = [None] * len(examples)
    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]))  # little padding
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = labelled_batch([examples[i] for i in chunk]).to(device)
        logits = model(batch.tokens, batch.lengths)
        log_p = logits.log_softmax(-1)
        best = log_p.argmax(-1)
        picked = log_p.gather(-1, batch.labels[..., None])[..., 0]
        right = (best == batch.labels).tolist() if logits.ndim == 2 else None
        if logits.ndim == 3:  # each row's real positions only
            right = ((best == batch.labels) & batch.mask).sum(1).tolist()
        guesses, lengths = best.tolist(), batch.lengths.tolist()
        for row, i in enumerate(chunk):
            if logits.ndim == 3:
                n = lengths[row]
                score = (-picked[row, :n].sum().item(), n, right[row])
                results[i] = (guesses[row][:n], score)
            else:
                results[i] = (guesses[row], (-picked[row].item(), 1, int(right[row])))
    return results


def train_labelled(
    model: nn.Module,
    examples: Sequence[Example],
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    generator: torch.Generator,
    clip: float | None = 1.0,
) -> History:
    """Adam on random mini-batches of `examples`, the mean NLL of their labels as the loss (each real
    token once, for a labeller); gradients clipped to norm `clip`. Returns a
    :class:`seqmodels.train.History` of the step losses (nats per label)."""
    if steps < 1 or batch_size < 1:
        raise ValueError(f"expected steps >= 1 and batch_size >= 1, got {steps} and {batch_size}")
    if len(examples) == 0:
        raise ValueError("expected at least one training example, got none")
    device = next(model.parameters()).device
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history = History()
    start = perf_counter()
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(examples), (batch_size,), generator=generator).tolist()
        batch = labelled_batch([examples[i] for i in idx]).to(device)
        loss, _ = _loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        history.step_loss.append(loss.item())
        history.tokens_seen += int(batch.mask.sum())
    history.seconds = perf_counter() - start
    return history


class MostFrequentLabel:
    """The baseline labeller: each token gets the label it had most often in training (ties: the
    smaller label); a token never seen gets the most frequent label overall."""

    def fit(self, examples: Sequence[Example]) -> MostFrequentLabel:
        counts: defaultdict[int, Counter] = defaultdict(Counter)
        overall: Counter = Counter()
        for ids, labels in examples:
            if isinstance(labels, int) or len(labels) != len(ids):
                raise ValueError("expected per-token labels, one per token")
            for token, label in zip(ids, labels, strict=True):
                counts[token][label] += 1
                overall[label] += 1
        if not overall:
            raise ValueError("expected at least one labelled token, got none")
        best = lambda c: min(c, key=lambda label: (-c[label], label))  # noqa: E731
        self.default = best(overall)
        self.table = {token: best(c) for token, c in counts.items()}
        return self

    def predict(self, examples: Sequence[Example]) -> list[list[int]]:
        return [[self.table.get(t, self.default) for t in ids] for ids, _ in examples]
