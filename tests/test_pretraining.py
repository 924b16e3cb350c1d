"""seqmodels.pretraining: the three objectives' data transformations against their definitions.

Oracles: the binomial distribution (proportions over many tokens within 4.5 standard deviations),
exact reconstruction of the original sentence, and the paper's rules (no special token masked,
labels only at selected positions, T5's noise count and span count).
"""

from __future__ import annotations

import math

import pytest
import torch

from seqmodels.pretraining import (
    IGNORE,
    causal_lm_example,
    mask_tokens,
    random_spans_noise_mask,
    show,
    span_corruption,
    uncorrupt,
)
from seqmodels.rnn import sentence_batch

V, MASK = 1000, 1000  # ids 0, 1, 2 special; [MASK] is a new id


def _within(count: int, n: int, p: float, sds: float = 4.5) -> bool:
    return abs(count - n * p) <= sds * math.sqrt(n * p * (1 - p))


def _tokens(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, V, (n,), generator=torch.Generator().manual_seed(seed))


def test_the_causal_lm_targets_are_the_inputs_shifted_by_one():
    inputs, targets = causal_lm_example([5, 6, 7])
    assert inputs.tolist() == [0, 5, 6, 7] and targets.tolist() == [5, 6, 7, 1]
    assert torch.equal(inputs[1:], targets[:-1])
    batch = sentence_batch([[5, 6, 7]])  # what every LM in the book trains on
    assert torch.equal(batch.inputs[0], inputs) and torch.equal(batch.targets[0], targets)


def test_masking_proportions_follow_bert_within_binomial_tolerance():
    n = 200_000
    tokens = _tokens(n)
    ex = mask_tokens(tokens, mask_id=MASK, vocab_size=V, generator=torch.Generator().manual_seed(1))
    selected = ex.selected
    k = int(selected.sum())
    assert _within(k, n, 0.15)
    n_mask = int((ex.inputs[selected] == MASK).sum())
    n_same = int((ex.inputs[selected] == tokens[selected]).sum())
    n_random = k - n_mask - n_same
    # a random replacement equals the original with probability 1 / (V - 3)
    p_same = 0.1 + 0.1 / (V - 3)
    assert _within(n_mask, k, 0.8) and _within(n_same, k, p_same)
    assert _within(n_random, k, 0.1 - 0.1 / (V - 3))
    assert torch.equal(ex.action == 1, ex.inputs == MASK)


def test_labels_only_at_selected_positions_and_unselected_inputs_unchanged():
    tokens = _tokens(5_000)
    ex = mask_tokens(tokens, mask_id=MASK, vocab_size=V, generator=torch.Generator().manual_seed(2))
    assert torch.equal(ex.labels[ex.selected], tokens[ex.selected])
    assert (ex.labels[~ex.selected] == IGNORE).all()
    assert torch.equal(ex.inputs[~ex.selected], tokens[~ex.selected])
    assert torch.equal(ex.selected, ex.action > 0)
    # random replacements are ordinary tokens
    assert (ex.inputs[ex.action == 2] >= 3).all() and (ex.inputs[ex.action == 2] < V).all()


def test_no_special_token_is_ever_selected():
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 6, (20_000,), generator=g)  # half of them special
    ex = mask_tokens(tokens, mask_id=6, vocab_size=6, generator=g, select=0.9)
    special = tokens < 3
    assert not ex.selected[special].any() and torch.equal(ex.inputs[special], tokens[special])
    assert ex.selected[~special].float().mean() > 0.85


def test_a_seed_fixes_the_corruption():
    tokens = _tokens(300)
    a = mask_tokens(tokens, mask_id=MASK, vocab_size=V, generator=torch.Generator().manual_seed(4))
    b = mask_tokens(tokens, mask_id=MASK, vocab_size=V, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.labels, b.labels)
    c = span_corruption(tokens, first_sentinel=V, generator=torch.Generator().manual_seed(4))
    d = span_corruption(tokens, first_sentinel=V, generator=torch.Generator().manual_seed(4))
    assert torch.equal(c.inputs, d.inputs) and torch.equal(c.targets, d.targets)


@pytest.mark.parametrize("length", [2, 3, 7, 20, 33, 100, 501])
def test_span_corruption_reconstructs_the_original_exactly(length):
    g = torch.Generator().manual_seed(length)
    for _ in range(20):
        tokens = _tokens(length, seed=int(torch.randint(1000, (1,), generator=g)))
        ex = span_corruption(tokens, first_sentinel=V, generator=g)
        assert torch.equal(uncorrupt(ex.inputs, ex.targets, V), tokens)
        # the noise tokens are exactly those in the targets, in order
        assert torch.equal(ex.targets[ex.targets < V], tokens[ex.noise])
        assert torch.equal(ex.inputs[ex.inputs < V], tokens[~ex.noise])


def test_span_corruption_has_t5s_noise_count_spans_and_sentinels():
    g = torch.Generator().manual_seed(5)
    tokens = _tokens(200)
    ex = span_corruption(tokens, first_sentinel=V, generator=g)
    assert int(ex.noise.sum()) == 30  # round(0.15 * 200)
    n_spans = int((ex.inputs >= V).sum())
    assert n_spans == 10  # round(30 / 3)
    assert ex.inputs[ex.inputs >= V].tolist() == list(range(V, V + n_spans))
    assert ex.targets[ex.targets >= V].tolist() == list(range(V, V + n_spans + 1))
    assert ex.targets[0] == V and ex.targets[-1] == V + n_spans  # opens and closes on a sentinel
    assert not ex.noise[0]  # T5 starts with kept tokens


def test_mean_span_length_and_noise_density_over_many_sequences():
    g = torch.Generator().manual_seed(6)
    noise, spans, total = 0, 0, 0
    for _ in range(400):
        mask = random_spans_noise_mask(100, g)
        noise += int(mask.sum())
        spans += int((mask & ~torch.cat([torch.tensor([False]), mask[:-1]])).sum())
        total += 100
    assert noise / total == 0.15 and noise / spans == 3.0  # 15 noise tokens in 5 spans each time
    # the spans move: not always in the same place
    masks = {tuple(random_spans_noise_mask(100, g).tolist()) for _ in range(20)}
    assert len(masks) > 15


def test_bad_inputs_are_refused():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=r"shape \(time,\)"):
        mask_tokens(torch.zeros(2, 3, dtype=torch.int64), mask_id=9, vocab_size=9, generator=g)
    with pytest.raises(ValueError, match="below first_sentinel"):
        span_corruption([3, 4, 12], first_sentinel=10, generator=g)
    with pytest.raises(ValueError, match="at least 2"):
        random_spans_noise_mask(1, g)
    with pytest.raises(ValueError, match="below vocab_size"):
        mask_tokens([3, 40], mask_id=9, vocab_size=9, generator=g)


def test_show_names_the_extra_ids():
    words = ["<s>", "</s>", "<unk>", "in", "the", "beginning"]
    assert show([3, 6, 5, IGNORE], words, {6: "[MASK]"}) == "in [MASK] beginning _"
