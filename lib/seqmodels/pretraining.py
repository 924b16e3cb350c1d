r"""Pre-training objectives as data transformations (Chapter 8): what GPT, BERT and T5 turn a
sentence into before any model sees it.

* **Causal language modelling** (GPT; Radford et al. 2018): inputs ``<s> w_1 .. w_n``, targets
  ``w_1 .. w_n </s>`` — the target at position $t$ is the input at $t + 1$, and the loss is
  $-\sum_t \log p(w_{t+1} \mid w_{\le t})$.
* **Masked language modelling** (BERT; Devlin et al. 2019): each ordinary token is *selected*
  with probability 0.15 (HuggingFace's collator's rule; ``exact=True`` selects exactly
  $\max(1, \mathrm{round}(0.15\, n))$ of the $n$ tokens, the rule of BERT's released
  ``create_pretraining_data.py``); a selected token becomes ``[MASK]`` with probability 0.8, a random
  ordinary token with probability 0.1, and stays as it is with probability 0.1. Labels are the
  original tokens at the selected positions and :data:`IGNORE` elsewhere, so the loss
  $-\sum_{t \in S} \log p(w_t \mid \tilde w)$ counts the selected positions only. Special tokens
  are never selected.
* **Span corruption** (T5; Raffel et al. 2020): $\mathrm{round}(0.15\, n)$ of the $n$ tokens are
  noise, in $\mathrm{round}(\text{noise} / 3)$ spans (mean span length 3), placed by a random
  segmentation as in T5's ``random_spans_noise_mask``; each noise span is replaced in the input by
  one sentinel, and the target is every sentinel followed by the span it replaced, then one final
  sentinel: ``Thank you <X> me to your party <Y> week .`` → ``<X> for inviting <Y> last <Z>``.
  :func:`uncorrupt` puts the spans back, exactly.

Every random choice is drawn from the ``torch.Generator`` passed in, so a seed fixes the output.
Sequences are 1-D: a list of ids or a ``(time,)`` integer tensor; results are ``(time,)`` int64
tensors.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import torch

#: The label of a position that the masked-LM loss ignores (``ignore_index`` of ``cross_entropy``).
IGNORE = -100


def _as_ids(tokens: Sequence[int] | torch.Tensor, name: str = "tokens") -> torch.Tensor:
    ids = torch.as_tensor(tokens, dtype=torch.int64) if not torch.is_tensor(tokens) else tokens
    if ids.ndim != 1:
        raise ValueError(f"expected {name} of shape (time,), got {tuple(ids.shape)}")
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise TypeError(f"expected integer {name}, got dtype {ids.dtype}")
    if ids.numel() and ids.min() < 0:
        raise ValueError(f"expected non-negative ids in {name}")
    return ids.to(torch.int64)


def causal_lm_example(
    tokens: Sequence[int] | torch.Tensor, bos: int = 0, eos: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""GPT's objective: ``(inputs, targets)``, both ``(n + 1,)``: ``<s> w_1 .. w_n`` and
    ``w_1 .. w_n </s>`` — targets are the inputs shifted left by one (what
    ``seqmodels.rnn.sentence_batch`` builds for every language model in the book)."""
    ids = _as_ids(tokens)
    inputs = torch.cat([torch.tensor([bos]), ids])
    targets = torch.cat([ids, torch.tensor([eos])])
    return inputs, targets


@dataclass(frozen=True)
class MaskedExample:
    """One masked-LM example: ``inputs (time,)`` with some tokens replaced, ``labels (time,)``:
    the original token at each selected position, :data:`IGNORE` elsewhere; ``action (time,)``:
    0 not selected, 1 → ``[MASK]``, 2 → random token, 3 selected but unchanged."""

    inputs: torch.Tensor
    labels: torch.Tensor
    action: torch.Tensor

    @property
    def selected(self) -> torch.Tensor:
        """``(time,)`` bool: the positions the loss counts."""
        return self.labels != IGNORE


def mask_tokens(
    tokens: Sequence[int] | torch.Tensor,
    *,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator,
    special_ids: Collection[int] = (0, 1, 2),
    select: float = 0.15,
    to_mask: float = 0.8,
    to_random: float = 0.1,
    exact: bool = False,
) -> MaskedExample:
    r"""BERT's masked-LM corruption of one sequence.

    Each token not in `special_ids` is selected independently with probability `select` (as
    HuggingFace's ``DataCollatorForLanguageModeling`` does); with ``exact=True``, exactly
    $\max(1, \mathrm{round}(\text{select} \cdot n))$ of the $n$ ordinary tokens are selected,
    uniformly at random, as BERT's released ``create_pretraining_data.py`` does (its $n$ also counts
    ``[CLS]`` and ``[SEP]``; none if $n = 0$). Of the selected, a share `to_mask` becomes
    `mask_id`, `to_random` a token drawn uniformly from the ordinary ids (``0 .. vocab_size - 1``
    minus `special_ids`; it may happen to equal the original), and the rest stay unchanged.
    Returns a :class:`MaskedExample`."""
    ids = _as_ids(tokens)
    if not 0.0 <= select <= 1.0 or min(to_mask, to_random) < 0 or to_mask + to_random > 1:
        raise ValueError(
            "expected 0 <= select <= 1 and to_mask, to_random >= 0 with to_mask + to_random <= 1, "
            f"got {select}, {to_mask}, {to_random}"
        )
    if ids.numel() and ids.max() >= vocab_size:
        raise ValueError(f"expected ids below vocab_size = {vocab_size}, got {int(ids.max())}")
    special = torch.tensor(sorted(set(special_ids)), dtype=torch.int64)
    is_ordinary = torch.ones(vocab_size, dtype=torch.bool)
    is_ordinary[special[(special >= 0) & (special < vocab_size)]] = False
    ordinary = is_ordinary.nonzero().flatten()
    if not len(ordinary):
        raise ValueError("expected at least one ordinary (non-special) id")
    can_select = ~torch.isin(ids, special)
    if exact:
        chosen = _exact_selection(can_select, select, generator)
    else:
        chosen = (torch.rand(ids.shape, generator=generator) < select) & can_select
    u = torch.rand(ids.shape, generator=generator)
    action = torch.zeros_like(ids)
    action[chosen & (u < to_mask)] = 1
    action[chosen & (u >= to_mask) & (u < to_mask + to_random)] = 2
    action[chosen & (u >= to_mask + to_random)] = 3
    random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]
    inputs = torch.where(action == 1, torch.tensor(mask_id), ids)
    inputs = torch.where(action == 2, random_ids, inputs)
    labels = torch.where(chosen, ids, torch.tensor(IGNORE))
    return MaskedExample(inputs, labels, action)


def _exact_selection(
    can_select: torch.Tensor, select: float, generator: torch.Generator
) -> torch.Tensor:
    r"""``(time,)`` bool: $\max(1, \mathrm{round}(\text{select} \cdot n))$ of the $n$ positions
    where `can_select` holds, chosen uniformly (none if $n = 0$)."""
    candidates = can_select.nonzero().flatten()
    n = len(candidates)
    count = min(max(1, round(select * n)), n)
    chosen = torch.zeros_like(can_select)
    chosen[candidates[torch.randperm(n, generator=generator)[:count]]] = True
    return chosen


def _random_segmentation(total: int, parts: int, generator: torch.Generator) -> torch.Tensor:
    """`total` split into `parts` positive integers, uniformly over such splits (T5's
    ``_random_segmentation``): ``(parts,)``."""
    if not 1 <= parts <= total:
        raise ValueError(f"expected 1 <= parts <= total, got {parts} parts of {total}")
    # choose parts - 1 cut points among the total - 1 gaps
    cuts = torch.randperm(total - 1, generator=generator)[: parts - 1].sort().values + 1
    edges = torch.cat([torch.tensor([0]), cuts, torch.tensor([total])])
    return edges.diff()


def random_spans_noise_mask(
    length: int,
    generator: torch.Generator,
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
) -> torch.Tensor:
    r"""T5's noise mask ``(length,)`` bool: $\mathrm{round}(\text{density} \cdot n)$ noise tokens
    (at least 1, at most $n - 1$) in $\max(1, \mathrm{round}(\text{noise} / \text{mean span}))$
    spans; noise and non-noise span lengths are random segmentations, interleaved starting with a
    non-noise span."""
    if not isinstance(length, int) or length < 2:
        raise ValueError(f"expected a length of at least 2, got {length!r}")
    if not 0.0 < noise_density < 1.0 or mean_span_length < 1:
        raise ValueError(
            "expected 0 < noise_density < 1 and mean_span_length >= 1, "
            f"got {noise_density} and {mean_span_length}"
        )
    n_noise = min(max(round(length * noise_density), 1), length - 1)
    n_spans = max(min(round(n_noise / mean_span_length), n_noise, length - n_noise), 1)
    noise = _random_segmentation(n_noise, n_spans, generator)
    keep = _random_segmentation(length - n_noise, n_spans, generator)
    mask = torch.zeros(length, dtype=torch.bool)
    start = 0
    for k, n in zip(keep.tolist(), noise.tolist(), strict=True):
        start += k
        mask[start : start + n] = True
        start += n
    return mask


@dataclass(frozen=True)
class SpanCorruption:
    """One span-corruption example: ``inputs`` (kept tokens, a sentinel per noise span),
    ``targets`` (each sentinel followed by its span, then one closing sentinel), ``noise`` the
    ``(time,)`` bool mask of the original tokens that were removed."""

    inputs: torch.Tensor
    targets: torch.Tensor
    noise: torch.Tensor


def span_corruption(
    tokens: Sequence[int] | torch.Tensor,
    *,
    first_sentinel: int,
    generator: torch.Generator,
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
) -> SpanCorruption:
    """T5's span corruption of one sequence (at least 2 tokens). Sentinel $k$ is id
    ``first_sentinel + k`` (T5's ``<extra_id_k>``), so ids from `first_sentinel` on must not occur
    in `tokens`."""
    ids = _as_ids(tokens)
    if ids.numel() and ids.max() >= first_sentinel:
        raise ValueError(
            f"expected token ids below first_sentinel = {first_sentinel}, got {int(ids.max())}"
        )
    noise = random_spans_noise_mask(len(ids), generator, noise_density, mean_span_length)
    starts = noise & ~torch.cat([torch.tensor([False]), noise[:-1]])  # first token of each span
    span_index = starts.cumsum(0) - 1  # which span each noise token belongs to
    inputs, targets = [], []
    for i, (token, is_noise, is_start) in enumerate(
        zip(ids.tolist(), noise.tolist(), starts.tolist(), strict=True)
    ):
        if is_start:
            sentinel = first_sentinel + int(span_index[i])
            inputs.append(sentinel)
            targets.append(sentinel)
        (targets if is_noise else inputs).append(token)
    targets.append(first_sentinel + int(starts.sum()))  # the closing sentinel
    return SpanCorruption(torch.tensor(inputs), torch.tensor(targets), noise)


def uncorrupt(
    inputs: Sequence[int] | torch.Tensor,
    targets: Sequence[int] | torch.Tensor,
    first_sentinel: int,
) -> torch.Tensor:
    """The original sequence from a span-corruption pair: each sentinel in `inputs` replaced by the
    tokens that follow the same sentinel in `targets`. ``(time,)``."""
    inputs, targets = _as_ids(inputs, "inputs"), _as_ids(targets, "targets")
    spans: dict[int, list[int]] = {}
    current: int | None = None
    for token in targets.tolist():
        if token >= first_sentinel:
            current = token
            spans[current] = []
        elif current is None:
            raise ValueError("expected targets to start with a sentinel")
        else:
            spans[current].append(token)
    out: list[int] = []
    for token in inputs.tolist():
        if token >= first_sentinel:
            if token not in spans:
                raise ValueError(f"sentinel {token} in inputs has no span in targets")
            out += spans[token]
        else:
            out.append(token)
    return torch.tensor(out, dtype=torch.int64)


def show(ids: Sequence[int] | torch.Tensor, words: Sequence[str], extra: Mapping[int, str]) -> str:
    """The ids as text: ``words[i]`` for an ordinary id, ``extra[i]`` (e.g. ``[MASK]``, ``<X0>``)
    for the ids added by an objective, and ``_`` for :data:`IGNORE`."""
    out = []
    for i in _as_ids_any(ids):
        if i == IGNORE:
            out.append("_")
        elif i in extra:
            out.append(extra[i])
        elif 0 <= i < len(words):
            out.append(words[i])
        else:
            raise ValueError(f"id {i} is neither a word nor one of the extra ids")
    return " ".join(out)


def _as_ids_any(ids: Sequence[int] | torch.Tensor) -> list[int]:
    return ids.tolist() if torch.is_tensor(ids) else list(ids)
