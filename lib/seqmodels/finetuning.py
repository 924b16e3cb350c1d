r"""Pre-training and fine-tuning a small masked-LM encoder (Chapter 8), and T5's text-to-text
framing.

* :class:`MaskedEncoder` is BERT's shape at toy size: token embeddings plus sinusoidal positions,
  `n_layers` bidirectional pre-LN :class:`seqmodels.transformer.EncoderBlock`\ s (padding hidden
  by a key mask), a final LayerNorm, a masked-LM head whose weight is the embedding matrix
  (Devlin et al. 2019 tie them too) and a classification head over the **mean of the final states
  of the real tokens** (BERT reads a ``[CLS]`` token's state instead; with no sentence-level
  pre-training objective the mean is the better summary for a model this small).
* :func:`pretrain_mlm` trains it on BERT's objective, the corruption of
  :func:`seqmodels.pretraining.mask_tokens`; :func:`finetune` trains it (all weights) with the
  classification head, keeping the weights with the best validation accuracy.
* The task: a verse's *book group* (:data:`GROUPS`: Law, History, Poetry, Prophets, Gospels with
  Acts, Letters with Revelation), read from the verse id (``book × 10⁶ + chapter × 10³ + verse``)
  by :func:`book_group`; :func:`labelled_verses` gives every verse of one of the book's splits
  (``seqmodels.data``: by chapter, 80 / 10 / 10 %) with its group.
* :func:`text_to_text` writes a task as T5 does (Raffel et al. 2020): a task prefix and the input as
  one string, and the answer as a target string.

Token ids are Chapter 1's vocabulary (``load_kjv(min_count=2)``), with ``[MASK]`` as one more id;
padding uses id 0 and is hidden by ``key_mask`` (bool, True at real tokens).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from time import perf_counter

import torch
from torch import nn
from torch.nn import functional as F

from .data import SPLITS, _chapter_indices, split_of_chapter, tokenize
from .pretraining import IGNORE, mask_tokens
from .transformer import EncoderBlock, _check_positive, _check_tokens, _Embed

#: The six book groups and the first book (1 = Genesis .. 66 = Revelation) of each, in order.
GROUPS = ("Law", "History", "Poetry", "Prophets", "Gospels", "Letters")
_FIRST_BOOK = (1, 6, 18, 23, 40, 45)  # Genesis, Joshua, Job, Isaiah, Matthew, Romans

#: The stored pre-trained encoder (``benchmarks/ch08_finetuning.py``).
ENCODER_CHECKPOINT = "ch08_finetuning"


def book_group(verse_id: int) -> int:
    """The index in :data:`GROUPS` of the book a verse id (``book × 10⁶ + …``) belongs to."""
    book = verse_id // 1_000_000
    if not 1 <= book <= 66:
        raise ValueError(f"expected a verse id of books 1 .. 66, got {verse_id}")
    return sum(book >= first for first in _FIRST_BOOK) - 1


def labelled_verses(split: str) -> list[tuple[int, tuple[str, ...], int]]:
    """``(verse id, tokens, group)`` for every KJV verse of `split`, in canonical order."""
    if split not in SPLITS:
        raise ValueError(f"expected split to be one of {SPLITS}, got {split!r}")
    return [
        (verse_id, tuple(tokenize(text)), book_group(verse_id))
        for verse_id, chapter_index, text in _chapter_indices()
        if split_of_chapter(chapter_index) == split
    ]


def pad_batch(sentences: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens, key_mask)``, both ``(batch, T)``: the sentences padded with id 0 to the longest,
    and True at the real tokens."""
    if not sentences or min(len(s) for s in sentences) == 0:
        raise ValueError("expected a non-empty list of non-empty sentences")
    T = max(len(s) for s in sentences)
    tokens = torch.zeros(len(sentences), T, dtype=torch.int64)
    key_mask = torch.zeros(len(sentences), T, dtype=torch.bool)
    for i, s in enumerate(sentences):
        tokens[i, : len(s)] = torch.as_tensor(s, dtype=torch.int64)
        key_mask[i, : len(s)] = True
    return tokens, key_mask


class MaskedEncoder(nn.Module):
    r"""A bidirectional Transformer encoder with a masked-LM head (tied to the embedding) and a
    classification head over the mean of the real tokens' final states.

    `vocab_size` counts every id the inputs may hold (the words and ``[MASK]``); `n_classes` is the
    size of the classification head (0: none)."""

    def __init__(
        self,
        vocab_size: int,
        n_classes: int = 0,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int = 256,
        max_len: int = 256,
        dropout: float = 0.1,
    ):
        super().__init__()
        _check_positive(vocab_size=vocab_size, n_layers=n_layers, max_len=max_len)
        if n_classes < 0:
            raise ValueError(f"expected n_classes >= 0, got {n_classes}")
        self.vocab_size, self.max_len = vocab_size, max_len
        self.config = dict(
            vocab_size=vocab_size, n_classes=n_classes, d_model=d_model, n_heads=n_heads,
            n_layers=n_layers, d_ff=d_ff, max_len=max_len, dropout=dropout,
        )  # fmt: skip
        self.embed = _Embed(vocab_size, d_model, "sinusoidal", max_len)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, norm_first=True, dropout=dropout)
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab_size))
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(d_model, n_classes) if n_classes else None

    def hidden_states(self, tokens: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """The final states ``(batch, T, d)`` of ``tokens: (batch, T)``, every position reading
        every real token (``key_mask: (batch, T)``, True at real tokens)."""
        self._check_input(tokens, key_mask)
        x = self.embed(tokens)  # token embeddings times sqrt(d), plus positions
        for block in self.blocks:
            x = block(x, key_mask=key_mask)
        return self.norm(x)

    def mlm_loss(
        self, inputs: torch.Tensor, labels: torch.Tensor, key_mask: torch.Tensor
    ) -> torch.Tensor:
        r"""BERT's loss $-\frac{1}{|S|}\sum_{t \in S} \log p(w_t \mid \tilde w)$ over the positions
        whose label is not ``IGNORE``; the logits $E h_t + b$ use the embedding matrix $E$."""
        selected = labels != IGNORE
        if labels.shape != inputs.shape or not bool(selected.any()):
            raise ValueError("expected labels shaped like the inputs, with a selected position")
        h = self.hidden_states(inputs, key_mask)
        logits = h[selected] @ self.embed.embedding.weight.T + self.mlm_bias
        return F.cross_entropy(logits, labels[selected])

    def mlm_logits(self, tokens: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """The masked-LM logits ``(batch, T, vocab_size)`` at every position."""
        return self.hidden_states(tokens, key_mask) @ self.embed.embedding.weight.T + self.mlm_bias

    def classify(self, tokens: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        r"""Eq. (eq-ch8-classify): class logits ``(batch, classes)`` from the mean final state."""
        if self.head is None:
            raise ValueError("this encoder has no classification head (n_classes = 0)")
        h = self.hidden_states(tokens, key_mask)  # (batch, T, d)
        real = key_mask.unsqueeze(-1).to(h.dtype)  # (batch, T, 1): 1 at real tokens
        pooled = (h * real).sum(1) / real.sum(1)  # mean over the real tokens: (batch, d)
        return self.head(self.dropout(pooled))

    def _check_input(self, tokens: torch.Tensor, key_mask: torch.Tensor) -> None:
        """Refuse ids outside the vocabulary, sequences over `max_len` and a mismatched mask."""
        _check_tokens(tokens, self.vocab_size)
        if tokens.shape[1] > self.max_len:
            raise ValueError(
                f"expected at most max_len = {self.max_len} tokens, got {tokens.shape[1]}"
            )
        if key_mask.dtype != torch.bool or key_mask.shape != tokens.shape:
            raise ValueError(
                f"expected a bool key_mask of shape {tuple(tokens.shape)}, "
                f"got {key_mask.dtype} {tuple(key_mask.shape)}"
            )
        if not bool(key_mask.any(1).all()):
            raise ValueError("expected at least one real token in every sequence")

    def load_encoder(self, state: dict[str, torch.Tensor]) -> MaskedEncoder:
        """Load a pre-trained encoder's weights (everything but the classification head, which
        keeps its initial values); refuse a state with missing or unexpected weights."""
        result = self.load_state_dict(state, strict=False)
        missing = [k for k in result.missing_keys if not k.startswith("head.")]
        if missing or result.unexpected_keys:
            raise ValueError(
                f"expected an encoder's weights, missing {missing}, "
                f"unexpected {result.unexpected_keys}"
            )
        return self

    def parameter_count(self) -> int:
        """The number of trainable scalars (the tied masked-LM matrix counted once)."""
        return sum(p.numel() for p in self.parameters())


def mlm_batch(
    sentences: Sequence[Sequence[int]],
    *,
    mask_id: int,
    generator: torch.Generator,
    exact: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(inputs, labels, key_mask)``, each ``(batch, T)``: every sentence corrupted by
    :func:`seqmodels.pretraining.mask_tokens` (random words drawn from ids below `mask_id`), then
    padded (labels with ``IGNORE``)."""
    corrupted = [
        mask_tokens(s, mask_id=mask_id, vocab_size=mask_id, generator=generator, exact=exact)
        for s in sentences
    ]
    inputs, key_mask = pad_batch([c.inputs for c in corrupted])
    labels = torch.full_like(inputs, IGNORE)
    for i, c in enumerate(corrupted):
        labels[i, : len(c.labels)] = c.labels
    return inputs, labels, key_mask


@dataclass
class History:
    """What a training run recorded: the loss of each step, and for fine-tuning the validation
    accuracy after each epoch."""

    losses: list[float] = field(default_factory=list)
    validation: list[float] = field(default_factory=list)
    seconds: float = 0.0


def _length_buckets(
    sentences: Sequence[Sequence[int]], batch_size: int, generator: torch.Generator
) -> list[list[int]]:
    """One epoch of batches of sentence indices: a random order, cut into pools of eight batches,
    each pool sorted by length (less padding), the batches in random order; a last partial batch is
    dropped."""
    order = torch.randperm(len(sentences), generator=generator).tolist()
    pool, batches = 8 * batch_size, []
    for i in range(0, len(order) - batch_size + 1, pool):
        chunk = sorted(order[i : i + pool], key=lambda j: len(sentences[j]))
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    batches = [b for b in batches if len(b) == batch_size]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def pretrain_mlm(
    model: MaskedEncoder,
    sentences: Sequence[Sequence[int]],
    *,
    mask_id: int,
    steps: int,
    generator: torch.Generator,
    batch_size: int = 64,
    lr: float = 3e-3,
    warmup: int = 100,
    progress: bool = False,
) -> History:
    """Masked-LM pre-training: `steps` Adam steps on batches of `batch_size` sentences drawn without
    replacement (each epoch reshuffled, and grouped by similar length in pools of eight batches), the
    rate warmed up linearly over `warmup` steps, gradients
    clipped at norm 1."""
    _check_positive(steps=steps, batch_size=batch_size)
    sentences = [s for s in sentences if len(s)]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: min(1.0, (i + 1) / warmup))
    history, batches, start = History(), [], perf_counter()
    model.train()
    for step in range(steps):
        if not batches:
            batches = _length_buckets(sentences, batch_size, generator)
        inputs, labels, key_mask = mlm_batch(
            [sentences[i] for i in batches.pop()], mask_id=mask_id, generator=generator
        )
        loss = model.mlm_loss(inputs, labels, key_mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        history.losses.append(loss.item())
        if progress and (step + 1) % 50 == 0:
            recent = sum(history.losses[-50:]) / 50
            print(
                f"step {step + 1}: loss {recent:.3f} ({perf_counter() - start:.0f} s)", flush=True
            )
    history.seconds = perf_counter() - start
    return history


@torch.no_grad()
def accuracy(model: MaskedEncoder, examples: Sequence[tuple[Sequence[int], int]]) -> float:
    """The share of ``(ids, label)`` examples whose highest class logit is the label (eval mode)."""
    if not examples:
        raise ValueError("expected at least one example")
    was_training = model.training
    model.eval()
    right = 0
    for i in range(0, len(examples), 256):
        chunk = examples[i : i + 256]
        tokens, key_mask = pad_batch([ids for ids, _ in chunk])
        predicted = model.classify(tokens, key_mask).argmax(-1)
        right += int((predicted == torch.tensor([y for _, y in chunk])).sum())
    model.train(was_training)
    return right / len(examples)


def finetune(
    model: MaskedEncoder,
    train: Sequence[tuple[Sequence[int], int]],
    validation: Sequence[tuple[Sequence[int], int]],
    *,
    epochs: int,
    generator: torch.Generator,
    batch_size: int = 16,
    lr: float = 1e-3,
) -> History:
    """Train every weight on the cross-entropy of :meth:`MaskedEncoder.classify` for `epochs`
    passes over the ``(ids, label)`` examples (Adam, gradients clipped at norm 1), and leave the
    model with the weights of the epoch of best `validation` accuracy (the first on a tie)."""
    _check_positive(epochs=epochs, batch_size=batch_size)
    if not train or not validation:
        raise ValueError("expected labelled training and validation examples")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history, best, start = History(), None, perf_counter()
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(train), generator=generator).split(batch_size):
            tokens, key_mask = pad_batch([train[i][0] for i in batch])
            labels = torch.tensor([train[i][1] for i in batch])
            loss = F.cross_entropy(model.classify(tokens, key_mask), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            history.losses.append(loss.item())
        history.validation.append(accuracy(model, validation))
        if best is None or history.validation[-1] > max(history.validation[:-1]):
            best = copy.deepcopy(model.state_dict())
    model.load_state_dict(best)
    history.seconds = perf_counter() - start
    return history


def pretrained_kjv_encoder(n_classes: int = 0) -> MaskedEncoder:
    """The masked-LM encoder pre-trained by ``benchmarks/ch08_finetuning.py`` on the KJV's training
    split (Chapter 1's vocabulary plus ``[MASK]`` as its last id), in eval mode on the CPU, with a
    fresh classification head of `n_classes` (0: none)."""
    from safetensors.torch import load_file

    folder = resources.files("seqmodels.results")
    config = json.loads((folder / f"{ENCODER_CHECKPOINT}.json").read_text())["model"]
    model = MaskedEncoder(**{**config, "n_classes": n_classes})
    with resources.as_file(folder / f"{ENCODER_CHECKPOINT}.safetensors") as path:
        state = {k: v.float() for k, v in load_file(path).items()}
    return model.load_encoder(state).eval()  # the classification head stays fresh


def text_to_text(
    task: str, source: Sequence[str] | str, target: Sequence[str] | str
) -> tuple[str, str]:
    """T5's framing of one example: ``("<task>: <source>", "<target>")``, tokens joined by spaces."""
    if not task or ":" in task:
        raise ValueError(f"expected a non-empty task prefix without ':', got {task!r}")
    join = lambda x: x if isinstance(x, str) else " ".join(x)  # noqa: E731
    return f"{task}: {join(source)}", join(target)
