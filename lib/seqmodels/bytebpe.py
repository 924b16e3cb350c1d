"""Byte-level byte-pair encoding (GPT-2's tokenizer family): BPE over the UTF-8 bytes of a text.

Where :mod:`seqmodels.bpe` starts from the characters of words and marks their ends, byte-level BPE
starts from the 256 byte values, so every text encodes and nothing is ever unknown. The text is first
cut by :func:`seqmodels.data.pretokenize` (a word with the space before it, a number, a run of
punctuation or of whitespace); merges never cross a cut.

Conventions (Problem Set 6's, stated there for students):

- ids 0-255 are the bytes; merge ``k`` (0 = first learned) makes the new id ``256 + k``, so a
  model's vocabulary is ``256 + len(merges)`` ids, and the merges alone define the tokenizer;
- training counts each adjacent pair once per occurrence in each pre-token, weighted by the
  pre-token's count, merges the most frequent pair, and on equal counts the pair of smaller ids
  ``(left, right)``, left id first (the rule of :func:`seqmodels.bpe.learn_merges`, which both
  share); it stops early when no pair is left;
- encoding applies the merges in the order they were learned, each to every occurrence, left to
  right (the same as merging the lowest-ranked pair present until none is a merge: a merge only
  makes pairs that hold its new id, whose own merges come later);
- decoding joins the ids' bytes and reads them as UTF-8, an incomplete character as U+FFFD.

The grader uses this module to encode held-out text with a student's merges
(:mod:`seqmodels.grading.heldout`); the sandbox of a graded notebook does not hold it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import pairwise

from .bpe import Pair, _merge_ids, learn_merges
from .data import pretokenize

N_BYTES = 256


def train(text: str, num_merges: int) -> list[Pair]:
    """Up to `num_merges` merges learned from `text` (fewer when no pair is left)."""
    if isinstance(num_merges, bool) or not isinstance(num_merges, int) or num_merges < 0:
        raise ValueError(f"expected num_merges to be an integer >= 0, got {num_merges!r}")
    counts = Counter(pretokenize(text))
    words = [list(piece.encode()) for piece in counts]
    made: list[Pair] = []

    def name(pair: Pair) -> int:
        made.append(pair)
        return N_BYTES + len(made) - 1

    return learn_merges(words, list(counts.values()), num_merges, name)


def checked_merges(merges: Iterable[Sequence[int]]) -> list[Pair]:
    """`merges` as a list of pairs of ints, each id made before its merge (``< 256 + k`` for merge
    ``k``); anything else raises `ValueError` saying what was expected."""
    out: list[Pair] = []
    for k, pair in enumerate(merges):
        try:
            a, b = (int(x) for x in pair)
        except (TypeError, ValueError):
            raise ValueError(f"expected merge {k} to be a pair of ids, got {pair!r}") from None
        if not (0 <= a < N_BYTES + k and 0 <= b < N_BYTES + k):
            raise ValueError(
                f"expected merge {k} to join ids made before it (0 to {N_BYTES + k - 1}), "
                f"got ({a}, {b})"
            )
        out.append((a, b))
    return out


class Tokenizer:
    """Encoding and decoding with a list of merges (see the module's conventions)."""

    def __init__(self, merges: Iterable[Sequence[int]]):
        self.merges = checked_merges(merges)
        self.pieces = [bytes([i]) for i in range(N_BYTES)]
        for a, b in self.merges:
            self.pieces.append(self.pieces[a] + self.pieces[b])
        self.ranks = {pair: k for k, pair in enumerate(self.merges)}
        self._encode_piece = lru_cache(maxsize=1 << 16)(self._merge)

    @property
    def vocab_size(self) -> int:
        return N_BYTES + len(self.merges)

    def _merge(self, piece: str) -> tuple[int, ...]:
        ids = list(piece.encode())
        while len(ids) > 1:  # the lowest-ranked pair present, until none is a merge
            rank = min(self.ranks.get(p, len(self.ranks)) for p in pairwise(ids))
            if rank == len(self.ranks):
                break
            ids = _merge_ids(ids, self.merges[rank], N_BYTES + rank)
        return tuple(ids)

    def encode(self, text: str) -> list[int]:
        """The ids of `text`: each pre-token's bytes, the merges applied in the order learned."""
        return [i for piece in pretokenize(text) for i in self._encode_piece(piece)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids` (an incomplete UTF-8 character as U+FFFD)."""
        return self.to_bytes(ids).decode("utf-8", errors="replace")

    def to_bytes(self, ids: Iterable[int]) -> bytes:
        try:
            return b"".join(self.pieces[i] for i in ids)
        except (IndexError, TypeError):
            raise ValueError(f"expected ids between 0 and {self.vocab_size - 1}") from None


def encode(text: str, merges: Sequence[Pair]) -> list[int]:
    """`Tokenizer(merges).encode(text)`."""
    return Tokenizer(merges).encode(text)


def decode(ids: Iterable[int], merges: Sequence[Pair]) -> str:
    """`Tokenizer(merges).decode(ids)`."""
    return Tokenizer(merges).decode(ids)
