"""seqmodels.finetuning, and the exact-count option of seqmodels.pretraining.mask_tokens.

Oracles: PyTorch's ``nn.TransformerEncoderLayer`` (pre-LN, ``src_key_padding_mask``) and
``nn.LayerNorm`` with copied weights for the encoder's states; ``F.cross_entropy`` over full logits
for the masked-LM loss; the count rule of BERT's released ``create_pretraining_data.py``
(``max(1, int(round(n * 0.15)))``) for exact masking; the canonical book order for the groups.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from seqmodels.data import kjv_sentences
from seqmodels.finetuning import (
    GROUPS,
    MaskedEncoder,
    accuracy,
    book_group,
    finetune,
    labelled_verses,
    mlm_batch,
    pad_batch,
    pretrain_mlm,
    pretrained_kjv_encoder,
    text_to_text,
)
from seqmodels.pretraining import IGNORE, mask_tokens

V = 50  # ids 0, 1, 2 special; [MASK] is id V


def _encoder(n_classes: int = 3, **kw) -> MaskedEncoder:
    torch.manual_seed(0)
    return MaskedEncoder(V + 1, n_classes=n_classes, d_model=16, n_heads=2, d_ff=32, **kw)


def _sentences(n: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 12, (n,), generator=g)
    return [torch.randint(3, V, (int(k),), generator=g).tolist() for k in lengths]


@pytest.mark.parametrize(
    ("book", "group"),
    [(1, "Law"), (5, "Law"), (6, "History"), (17, "History"), (18, "Poetry"), (22, "Poetry"),
     (23, "Prophets"), (39, "Prophets"), (40, "Gospels"), (44, "Gospels"), (45, "Letters"),
     (66, "Letters")],
)  # fmt: skip
def test_book_groups_follow_the_canonical_order(book, group):
    assert GROUPS[book_group(book * 1_000_000 + 1001)] == group


def test_bad_verse_ids_are_refused():
    for bad in (0, 67_001_001, -5):
        with pytest.raises(ValueError, match="books 1 .. 66"):
            book_group(bad)


def test_labelled_verses_are_the_splits_verses_with_their_groups():
    for split in ("train", "test"):
        verses = labelled_verses(split)
        assert [tokens for _, tokens, _ in verses] == list(kjv_sentences(split))
        assert all(group == book_group(vid) for vid, _, group in verses)
    assert {g for _, _, g in labelled_verses("test")} == set(range(len(GROUPS)))
    with pytest.raises(ValueError, match="split"):
        labelled_verses("dev")


def test_the_encoder_equals_pytorchs_pre_ln_encoder_with_padding():
    model = _encoder().double().eval()
    layers = [
        nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
        for _ in range(2)
    ]
    for block, layer in zip(model.blocks, layers, strict=True):
        block.copy_from(layer.double())
    final = nn.LayerNorm(16).double()
    final.load_state_dict(model.norm.state_dict())
    tokens, key_mask = pad_batch(_sentences(5))
    x = model.embed(tokens)
    for layer in layers:
        x = layer(x, src_key_padding_mask=~key_mask)
    want = final(x)
    got = model.hidden_states(tokens, key_mask)
    assert (got - want)[key_mask].abs().max() < 1e-10


def test_classification_ignores_padding_and_pools_the_mean():
    model = _encoder().double().eval()
    sentences = _sentences(6, seed=1)
    tokens, key_mask = pad_batch(sentences)
    batched = model.classify(tokens, key_mask)
    for i, s in enumerate(sentences):
        alone = model.classify(torch.tensor([s]), torch.ones(1, len(s), dtype=torch.bool))
        assert (alone[0] - batched[i]).abs().max() < 1e-10
    h = model.hidden_states(tokens[:1, : len(sentences[0])], key_mask[:1, : len(sentences[0])])
    assert (model.head(h.mean(1)) - batched[:1]).abs().max() < 1e-10


def test_the_mlm_loss_is_cross_entropy_at_the_selected_positions_with_tied_weights():
    model = _encoder().double().eval()
    inputs, labels, key_mask = mlm_batch(
        _sentences(8), mask_id=V, generator=torch.Generator().manual_seed(2)
    )
    assert (labels != IGNORE).any() and ((labels == IGNORE) | key_mask).all()
    logits = model.mlm_logits(inputs, key_mask)
    want = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
    assert abs(model.mlm_loss(inputs, labels, key_mask) - want) < 1e-10
    # tied: the only (vocabulary, d) matrix is the embedding, and the logits move with it
    shapes = [n for n, p in model.named_parameters() if p.shape == (V + 1, 16)]
    assert shapes == ["embed.embedding.weight"]
    unused = next(w for w in range(3, V) if not (inputs == w).any())
    with torch.no_grad():
        model.embed.embedding.weight[unused] += torch.linspace(-1, 1, 16)  # only its score moves
        moved = model.mlm_logits(inputs, key_mask) - logits
    assert moved[..., unused].abs().min() > 0.01
    assert moved[..., [w for w in range(V + 1) if w != unused]].abs().max() < 1e-12


def test_pretraining_lowers_the_loss_and_finetuning_keeps_the_best_epoch():
    model = _encoder(dropout=0.0)
    # predictable from the neighbours: runs of consecutive ids
    sentences = [[3 + (len(s) * 7 + i) % 47 for i in range(len(s))] for s in _sentences(64, 3)]
    history = pretrain_mlm(
        model, sentences, mask_id=V, steps=60, batch_size=16, warmup=5,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert sum(history.losses[-5:]) < sum(history.losses[:5])
    # a learnable label: does the sentence contain token 3 .. 10?
    data = [(s, int(min(s) <= 10)) for s in _sentences(120, seed=4)]
    history = finetune(
        model, data[:80], data[80:], epochs=4, generator=torch.Generator().manual_seed(0)
    )
    assert len(history.validation) == 4
    assert accuracy(model, data[80:]) == max(history.validation)


def test_exact_masking_selects_berts_count():
    g = torch.Generator().manual_seed(5)
    for n in [1, 2, 3, 4, 6, 7, 10, 13, 20, 33, 47, 100]:
        tokens = torch.randint(3, V, (n,), generator=g)
        ex = mask_tokens(tokens, mask_id=V, vocab_size=V, generator=g, exact=True)
        assert int(ex.selected.sum()) == max(1, int(round(n * 0.15)))  # the released code's rule
    with_special = torch.tensor([0, 5, 6, 1, 7, 2, 8])
    ex = mask_tokens(with_special, mask_id=V, vocab_size=V, generator=g, exact=True)
    assert int(ex.selected.sum()) == 1 and not ex.selected[[0, 3, 5]].any()
    none = mask_tokens(torch.tensor([0, 1, 2]), mask_id=V, vocab_size=V, generator=g, exact=True)
    assert not none.selected.any()


def test_exact_masking_is_uniform_over_positions_and_keeps_the_80_10_10_split():
    g = torch.Generator().manual_seed(6)
    tokens = torch.arange(3, 23)  # 20 ordinary tokens: 3 selected each time
    counts, actions = torch.zeros(20), torch.zeros(4)
    for _ in range(4000):
        ex = mask_tokens(tokens, mask_id=V, vocab_size=V, generator=g, exact=True)
        counts += ex.selected.float()
        actions += torch.bincount(ex.action[ex.selected], minlength=4).float()
    assert (counts - 600).abs().max() < 4.5 * (4000 * 0.15 * 0.85) ** 0.5
    assert abs(actions[1] / actions.sum() - 0.8) < 0.015
    assert abs(actions[2] / actions.sum() - 0.1) < 0.01


def test_the_stored_encoder_loads_small_and_gets_a_fresh_head():
    from importlib import resources

    path = resources.files("seqmodels.results") / "ch08_finetuning.safetensors"
    assert path.stat().st_size <= 2 * 2**20  # at most 2 MB in the repository
    model = pretrained_kjv_encoder(n_classes=len(GROUPS))
    assert not model.training and model.head.out_features == len(GROUPS)
    tokens = torch.tensor([[5, 6, model.vocab_size - 1, 7]])  # the last id is [MASK]
    logits = model.mlm_logits(tokens, torch.ones_like(tokens, dtype=torch.bool))
    assert logits.shape == (1, 4, model.vocab_size) and torch.isfinite(logits).all()


def test_text_to_text_frames_a_task_as_strings():
    assert text_to_text("classify book", ["in", "the", "beginning"], "Law") == (
        "classify book: in the beginning",
        "Law",
    )
    assert text_to_text("translate KJV to WEB", "thou art", "you are")[0].startswith("translate")
    with pytest.raises(ValueError, match="task prefix"):
        text_to_text("", "x", "y")


def test_bad_inputs_are_refused():
    model = _encoder()
    tokens, key_mask = pad_batch([[3, 4], [5]])
    with pytest.raises(ValueError, match="key_mask"):
        model.classify(tokens, key_mask[:, :1])
    with pytest.raises(ValueError, match="real token"):
        model.classify(tokens, torch.zeros_like(key_mask))
    with pytest.raises(IndexError):
        model.classify(tokens + V, key_mask)
    with pytest.raises(ValueError, match="no classification head"):
        _encoder(n_classes=0).classify(tokens, key_mask)
    with pytest.raises(ValueError, match="non-empty"):
        pad_batch([[3], []])
    with pytest.raises(ValueError, match="n_classes"):
        MaskedEncoder(V, n_classes=-1)
    with pytest.raises(ValueError, match="selected position"):
        model.mlm_loss(tokens, torch.full_like(tokens, IGNORE), key_mask)
    with pytest.raises(ValueError, match="at least one example"):
        accuracy(model, [])
    state = _encoder(n_classes=0).state_dict()
    assert _encoder(n_classes=3).load_encoder(state).head is not None  # head kept as it was
    with pytest.raises(ValueError, match="missing"):
        model.load_encoder({k: v for k, v in state.items() if k != "norm.weight"})
