"""seqmodels.bytebpe: byte-level BPE against a naive oracle written here and HuggingFace tokenizers.

The conventions checked are those of the module docstring: ids 0-255 are the bytes, merge ``k``
makes id ``256 + k``, pairs are counted within pre-tokens (:func:`seqmodels.data.pretokenize`)
weighted by their counts, ties go to the smaller pair ``(left, right)``, and encoding applies the
merges in the order learned.
"""

import json
from collections import Counter
from functools import lru_cache

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, trainers

from seqmodels import bytebpe
from seqmodels.bpe import train_bpe
from seqmodels.bytebpe import Tokenizer, checked_merges, train
from seqmodels.data import kjv_text, pretokenize, web_text

# ---- oracles -------------------------------------------------------------------------------------


def _merge(ids, pair, new):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def naive_train(text, num_merges):
    """Byte-level BPE the slow, obvious way: recount every pair of every pre-token each round."""
    words = [(list(piece.encode()), n) for piece, n in Counter(pretokenize(text)).items()]
    merges = []
    while len(merges) < num_merges:
        pairs = Counter()
        for ids, n in words:
            for pair in zip(ids, ids[1:], strict=False):
                pairs[pair] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        words = [(_merge(ids, best, 256 + len(merges)), n) for ids, n in words]
        merges.append(best)
    return merges


def naive_encode_piece(piece, merges):
    """One pre-token's ids: its bytes, then each merge in learned order, applied everywhere."""
    ids = list(piece.encode())
    for k, pair in enumerate(merges):
        ids = _merge(ids, pair, 256 + k)
    return ids


@lru_cache(maxsize=1)
def bytes_to_unicode():
    """GPT-2's table: printable Latin-1 bytes stand for themselves, the other bytes (controls,
    space, NBSP, soft hyphen...) for the characters from U+0100 on, in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    kept += range(ord("®"), ord("ÿ") + 1)
    table, n = {b: chr(b) for b in kept}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def to_chars(data: bytes) -> str:
    table = bytes_to_unicode()
    return "".join(table[b] for b in data)


def to_bytes(chars: str) -> bytes:
    inverse = {c: b for b, c in bytes_to_unicode().items()}
    return bytes(inverse[c] for c in chars)


def hf_train(text, num_merges):
    """HF's BpeTrainer on `text`'s pre-tokens (as GPT-2 characters, one word each), its 256 initial
    ids pinned to byte order by listing the byte characters, in byte order, as special tokens."""
    alphabet = [to_chars(bytes([b])) for b in range(256)]
    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=256 + num_merges,
        min_frequency=0,
        special_tokens=alphabet,
        initial_alphabet=alphabet,
        show_progress=False,
    )

    def lines():
        for piece, n in Counter(pretokenize(text)).items():
            word = to_chars(piece.encode())
            for start in range(0, n, 1000):
                yield " ".join([word] * min(1000, n - start))

    tokenizer.train_from_iterator(lines(), trainer)
    merges = [tuple(m) for m in json.loads(tokenizer.to_str())["model"]["merges"]]
    return tokenizer, merges


@pytest.fixture(scope="module")
def kjv_merges():
    return train(kjv_text("train"), 500)


@pytest.fixture(scope="module")
def hf_kjv():
    return hf_train(kjv_text("train"), 500)


# ---- 1. the naive oracle -------------------------------------------------------------------------

SMALL = [
    ("ab ba", 5),  # (32, 98), (97, 98), (98, 97) all count 1: the smallest pair goes first
    ("aaaa aaa aaaaa", 10),  # overlapping runs: merged left to right without overlaps
    ("Cæsar's Cæsar, Cæsarea", 12),  # "æ" is two bytes
    ("😀😀 😀! 🙂🙂", 20),  # four-byte characters that share their first three bytes
    ("hello world", 0),
    ("", 5),
    ("a", 5),
    ("  \t\n\n12 345 _x_ a-b", 30),
]


@pytest.mark.parametrize("text, num_merges", SMALL)
def test_train_equals_naive_oracle_on_small_texts(text, num_merges):
    """`train` gives the naive recount-everything BPE's merges on texts with ties, overlapping
    runs, multi-byte UTF-8, no merges asked for, and nothing (or too little) to merge."""
    assert train(text, num_merges) == naive_train(text, num_merges)


def test_small_merges_by_hand():
    """Hand-worked: in 'ab ba' (pre-tokens 'ab', ' ba') the pairs (97,98), (32,98), (98,97) all
    count 1 and (32,98) has the smallest ids; in 'aaaa' (97,97) is merged twice over, left to right,
    making 256 256, then (256,256); training stops when no pair is left."""
    assert train("ab ba", 1) == [(32, 98)]
    assert train("ab ba", 5) == [(32, 98), (97, 98), (256, 97)]
    assert train("aaaa", 5) == [(97, 97), (256, 256)]
    assert train("aaa", 5) == [(97, 97), (256, 97)]
    assert train("", 5) == [] and train("xyz", 0) == []


def test_train_equals_naive_oracle_on_kjv_prefix():
    """300 merges on the first 200,000 characters of the KJV training text equal the oracle's."""
    text = kjv_text("train")[:200_000]
    ours = train(text, 300)
    assert len(ours) == 300
    assert ours == naive_train(text, 300)


# ---- 2. HuggingFace tokenizers as a second oracle ------------------------------------------------


def test_gpt2_byte_table_is_hf_byte_level_alphabet():
    """Our bytes-to-unicode table covers 256 distinct non-space characters: HF's ByteLevel ones."""
    chars = list(bytes_to_unicode().values())
    assert len(set(chars)) == 256 and not any(c.isspace() for c in chars)
    assert set(chars) == set(pre_tokenizers.ByteLevel.alphabet())


def test_tie_break_equals_hf_with_ids_in_byte_order():
    """On 'ab a' the pairs (97,98) and (32,97) tie; both pick (32,97) first once HF's initial ids
    follow byte order (with `initial_alphabet` alone HF would number the GPT-2 characters by code
    point, space = 'Ġ' U+0120 after 'a', and pick (97,98))."""
    _, merges = hf_train("ab a", 2)
    ours = Tokenizer(train("ab a", 2)).pieces[256:]
    assert ours == [b" a", b"ab"]
    assert [to_bytes(a + b) for a, b in merges] == ours


def test_first_500_merges_equal_hf_on_kjv(kjv_merges, hf_kjv):
    """The byte strings of our first 500 merges on the whole KJV training text are HF's, in order.

    HF gives one id to equal merged strings (ours gives each merge its own id); this does not
    arise here, since the 500 strings are distinct and HF made exactly 500 merges."""
    _, merges = hf_kjv
    ours = Tokenizer(kjv_merges).pieces[256:]
    assert len(ours) == len(set(ours)) == len(merges) == 500
    assert [to_bytes(a + b) for a, b in merges] == ours


def test_encoding_equals_hf_on_web_test_pretokens(kjv_merges, hf_kjv):
    """Every distinct pre-token of the WEB test text encodes to the same byte pieces as HF's BPE
    model (trained as above) tokenizes it into."""
    tokenizer, _ = hf_kjv
    ours = Tokenizer(kjv_merges)
    pieces = sorted(set(pretokenize(web_text("test"))))
    assert len(pieces) > 1000
    for piece in pieces:
        hf = [to_bytes(t.value) for t in tokenizer.model.tokenize(to_chars(piece.encode()))]
        assert [ours.pieces[i] for i in ours.encode(piece)] == hf, piece


# ---- 3. properties -------------------------------------------------------------------------------


def test_encoding_equals_naive_encoding(kjv_merges):
    """Tokenizer.encode (lowest-ranked pair first) equals applying the 500 merges one after another
    to every pre-token of the WEB test text."""
    ours = Tokenizer(kjv_merges)
    for piece in set(pretokenize(web_text("test"))):
        assert list(ours.encode(piece)) == naive_encode_piece(piece, kjv_merges), piece


UNSEEN = "Ἐν ἀρχῇ ἦν ὁ λόγος — 😀🙂 naïve\t\r\n  x\x00y  "


def test_decode_inverts_encode(kjv_merges):
    """decode(encode(t)) == t on the KJV validation text and on characters never seen in training
    (Greek, emoji, controls, whitespace runs); the module functions agree with Tokenizer."""
    tok = Tokenizer(kjv_merges)
    validation = kjv_text("validation")
    ids = tok.encode(validation)
    assert tok.decode(ids) == validation and len(ids) < len(validation.encode()) / 2
    assert tok.to_bytes(ids) == validation.encode()
    assert tok.decode(tok.encode(UNSEEN)) == UNSEEN
    assert bytebpe.encode(UNSEEN, kjv_merges) == tok.encode(UNSEEN)
    assert bytebpe.decode(tok.encode(UNSEEN), kjv_merges) == UNSEEN
    assert all(0 <= i < tok.vocab_size == 756 for i in ids)


def test_encode_never_crosses_a_pretoken_boundary(kjv_merges):
    """The encoding of a text is the concatenation of its pre-tokens' encodings, and each id's bytes
    lie within one pre-token."""
    tok = Tokenizer(kjv_merges)
    text = web_text("test")[:20_000] + UNSEEN
    pieces = pretokenize(text)
    ids = tok.encode(text)
    assert ids == [i for piece in pieces for i in tok.encode(piece)]
    cuts = {0}
    for piece in pieces:
        cuts.add(max(cuts) + len(piece.encode()))
    position = 0
    for i in ids:
        end = position + len(tok.pieces[i])
        assert not any(position < c < end for c in cuts)
        position = end


def test_no_merges_is_utf8_bytes():
    """With no merges the ids are the UTF-8 bytes, the vocabulary is 256, and an incomplete
    character decodes as U+FFFD; an id outside the vocabulary raises ValueError."""
    tok = Tokenizer([])
    assert tok.vocab_size == 256 and tok.pieces == [bytes([i]) for i in range(256)]
    assert tok.encode(UNSEEN) == list(UNSEEN.encode())
    assert tok.decode([0xC3]) == "\ufffd" and tok.decode(list("æ".encode())) == "æ"
    with pytest.raises(ValueError, match="between 0 and 255"):
        tok.decode([256])


def test_pieces_are_the_joined_bytes_of_each_merge(kjv_merges):
    """pieces[256 + k] is the bytes of merge k's left id followed by its right id's."""
    tok = Tokenizer(kjv_merges)
    assert len(tok.pieces) == tok.vocab_size == 256 + len(kjv_merges)
    for k, (a, b) in enumerate(kjv_merges):
        assert tok.pieces[256 + k] == tok.pieces[a] + tok.pieces[b]


@pytest.mark.parametrize(
    "merges, match",
    [
        ([(97, 98), (300, 1)], r"merge 1 .*\(300, 1\)"),
        ([(97, 98), (1, 257)], r"merge 1 .*\(1, 257\)"),
        ([(256, 97)], r"merge 0 .*\(256, 97\)"),
        ([(-1, 97)], r"merge 0 .*\(-1, 97\)"),
        ([(97, 98, 99)], r"merge 0 to be a pair"),
        ([(97, 98), 5], r"merge 1 to be a pair"),
        ([(97, "x")], r"merge 0 to be a pair"),
    ],
)
def test_checked_merges_names_the_bad_merge(merges, match):
    """A merge that uses an id not yet made, or is not a pair of ids, raises a ValueError naming
    the merge (both through checked_merges and Tokenizer)."""
    with pytest.raises(ValueError, match=match):
        checked_merges(merges)
    with pytest.raises(ValueError, match=match):
        Tokenizer(merges)


def test_checked_merges_accepts_ids_made_before():
    """(256, 97) is fine as merge 1 (id 256 was made by merge 0); lists become tuples."""
    assert checked_merges([[97, 98], [256, 97]]) == [(97, 98), (256, 97)]


@pytest.mark.parametrize("num_merges", [-1, True, 2.0, "3", None])
def test_train_refuses_bad_num_merges(num_merges):
    """num_merges must be an int >= 0 (not a bool)."""
    with pytest.raises(ValueError, match="num_merges"):
        train("some text", num_merges)


def test_train_bpe_unchanged_by_the_shared_merge_loop():
    """Character-level train_bpe after the learn_merges refactor, worked by hand.

    {"ab": 3, "bc": 2, "abc": 1}: symbols a=0 b=1 c=2 b</w>=3 c</w>=4; words a b</w> (x3),
    b c</w> (x2), a b c</w> (x1). Pair counts: (a, b</w>) = 3, (b, c</w>) = 2 + 1 = 3, (a, b) = 1.
    Tie at 3: the smaller ids (0, 3) < (1, 4), so merge 1 is a + b</w> -> ab</w> (id 5). Then
    (b, c</w>) = 3, (a, b) = 1: merge 2 is b + c</w> -> bc</w> (6). Words: ab</w>, bc</w>,
    a bc</w>: merge 3 is a + bc</w> -> abc</w> (7); no pair is left, so it stops at 3 of 10.

    {"aaaa": 3, "aaa": 2, "aa": 1}: a=0, a</w>=1. a a a a</w> (x3), a a a</w> (x2), a a</w> (x1):
    (a, a) = 3*2 + 2 = 8, (a, a</w>) = 3 + 2 + 1 = 6 -> merge a + a -> aa (2); left to right:
    aa a a</w>, aa a</w>, a a</w>. Now (aa, a) = 3, (a, a</w>) = 3 + 1 = 4, (aa, a</w>) = 2 ->
    merge a + a</w> -> aa</w> (3): aa aa</w>, aa a</w>, aa</w>. (aa, aa</w>) = 3, (aa, a</w>) = 2
    -> aaaa</w> (4), then aa + a</w> -> aaa</w> (5)."""
    bpe = train_bpe({"ab": 3, "bc": 2, "abc": 1}, 10)
    assert bpe.merges == (("a", "b</w>"), ("b", "c</w>"), ("a", "bc</w>"))
    assert bpe.symbols == ("a", "b", "c", "b</w>", "c</w>", "ab</w>", "bc</w>", "abc</w>")
    bpe = train_bpe({"aaaa": 3, "aaa": 2, "aa": 1}, 10)
    assert bpe.merges == (("a", "a"), ("a", "a</w>"), ("aa", "aa</w>"), ("aa", "a</w>"))
    assert bpe.symbols == ("a", "a</w>", "aa", "aa</w>", "aaaa</w>", "aaa</w>")
