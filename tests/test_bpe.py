"""seqmodels.bpe: byte-pair encoding against HuggingFace tokenizers' BpeTrainer and BPE model."""

import json
from collections import Counter

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from seqmodels.bpe import BPE, EOW, UNK, train_bpe
from seqmodels.data import kjv_sentences

TOY = {"low": 5, "lower": 2, "newest": 6, "widest": 3}


def hf_merges(bpe: BPE, sentences) -> list[tuple[str, str]]:
    """HF's BpeTrainer on the same words, its symbol ids pinned to ours (module docstring)."""
    tokenizer = Tokenizer(models.BPE(end_of_word_suffix=EOW))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=len(bpe.symbols),
        min_frequency=0,
        special_tokens=list(bpe.symbols[: bpe.n_initial]),
        end_of_word_suffix=EOW,
        show_progress=False,
    )
    tokenizer.train_from_iterator((" ".join(s) for s in sentences), trainer)
    return [tuple(m) for m in json.loads(tokenizer.to_str())["model"]["merges"]]


def hf_encoder(bpe: BPE) -> Tokenizer:
    """An HF BPE model holding our symbols and merges, with whitespace pre-tokenization."""
    vocab = {s: i for i, s in enumerate(bpe.symbols)}
    tokenizer = Tokenizer(models.BPE(vocab, list(bpe.merges), end_of_word_suffix=EOW))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


@pytest.fixture(scope="module")
def kjv_subset():
    sentences = kjv_sentences("train")[:2000]
    return sentences, train_bpe(Counter(w for s in sentences for w in s), 500)


def test_toy_merges_by_hand():
    """(e, s) and (s, t</w>) tie at 9: the smaller ids, (e, s), go first; then est</w> (9), lo (7)."""
    bpe = train_bpe(TOY, 4)
    assert bpe.merges == (("e", "s"), ("es", "t</w>"), ("l", "o"), ("e", "w"))
    assert bpe.encode("newest") == ("n", "ew", "est</w>")
    assert hf_merges(bpe, [[w] * n for w, n in TOY.items()]) == list(bpe.merges)


def test_first_500_merges_equal_hf_on_kjv_subset(kjv_subset):
    sentences, bpe = kjv_subset
    assert len(bpe.merges) == 500
    assert hf_merges(bpe, sentences)[:500] == list(bpe.merges)


def test_encoding_equals_hf_on_test_words(kjv_subset):
    _, bpe = kjv_subset
    words = sorted({w for s in kjv_sentences("test")[:300] for w in s if set(w) <= bpe.alphabet})
    ours = bpe.encode_words(words)
    assert hf_encoder(bpe).encode(" ".join(words)).tokens == ours


def test_round_trip(kjv_subset):
    _, bpe = kjv_subset
    for sentence in kjv_sentences("test")[:200]:
        words = [w for w in sentence if set(w) <= bpe.alphabet]
        assert bpe.decode(bpe.encode_words(words)) == words


def test_unknown_characters_become_unk():
    bpe = train_bpe(TOY, 10)
    assert bpe.encode("lowz") == ("lo", "w", UNK + EOW)
    assert bpe.encode("zlow") == (UNK, "low</w>")
    assert bpe.decode(bpe.encode_words(["lowz", "low"])) == ["low" + UNK, "low"]
    assert UNK in bpe.vocabulary and "z" not in bpe.alphabet


def test_no_merges_is_characters():
    bpe = train_bpe(TOY, 0)
    assert bpe.merges == () and bpe.encode("low") == ("l", "o", "w</w>")


def test_stops_when_no_pair_is_left():
    bpe = train_bpe({"ab": 1}, 50)
    assert bpe.merges == (("a", "b</w>"),)


@pytest.mark.parametrize(
    "counts, merges, match",
    [
        ({}, 3, "non-empty mapping"),
        ([("low", 1)], 3, "non-empty mapping"),
        ({"low": 0}, 3, "positive integer count"),
        ({"low": 1.5}, 3, "positive integer count"),
        ({"lo w": 1}, 3, "without spaces"),
        ({"": 1}, 3, "non-empty word"),
        ({"low</w>": 1}, 3, "without spaces"),
        ({"low": 1}, -1, "num_merges"),
        ({"low": 1}, 2.0, "num_merges"),
    ],
)
def test_bad_training_input(counts, merges, match):
    with pytest.raises(ValueError, match=match):
        train_bpe(counts, merges)


def test_bad_encode_and_decode_input():
    bpe = train_bpe(TOY, 5)
    with pytest.raises(TypeError, match="expected a word as a str"):
        bpe.encode(3)
    with pytest.raises(ValueError, match="non-empty word"):
        bpe.encode("")
    with pytest.raises(ValueError, match="end with '</w>'"):
        bpe.decode(["lo"])
    with pytest.raises(ValueError, match="non-empty symbol"):
        bpe.decode(["", "w</w>"])
