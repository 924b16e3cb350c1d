"""Vocabularies: the map between tokens and integer ids, with explicit out-of-vocabulary handling."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"


class Vocabulary:
    """A fixed token ↔ id map. Ids ``0, 1, 2`` are always ``<s>``, ``</s>``, ``<unk>``.

    ``<s>`` pads contexts at the start of a sentence and is never predicted; ``</s>`` ends every
    sentence and is predicted like any word; a token outside the vocabulary becomes ``<unk>``.
    """

    def __init__(self, tokens: Iterable[str]):
        self.itos: list[str] = [BOS, EOS, UNK]
        for token in tokens:
            if token not in (BOS, EOS, UNK):
                self.itos.append(token)
        self.stoi: dict[str, int] = {}
        for i, token in enumerate(self.itos):
            if token in self.stoi:
                raise ValueError(f"duplicate token {token!r} in vocabulary")
            self.stoi[token] = i

    bos = 0
    eos = 1
    unk = 2

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_count: int = 1) -> Vocabulary:
        """Every token seen at least `min_count` times, most frequent first (ties alphabetical)."""
        if min_count < 1:
            raise ValueError(f"expected min_count >= 1, got {min_count}")
        counts = Counter(token for sentence in sentences for token in sentence)
        if not counts:
            raise ValueError("cannot build a vocabulary from an empty corpus")
        kept = sorted(
            (t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t)
        )
        return cls(kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Token strings → ids; unknown tokens → the id of ``<unk>``."""
        return [self.stoi.get(t, self.unk) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Ids → token strings; raises on an id outside ``0 .. len(self) - 1``."""
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self.itos):
                raise IndexError(
                    f"token id {i} is outside the vocabulary (0 .. {len(self.itos) - 1})"
                )
            out.append(self.itos[i])
        return out

    def check_ids(self, ids: Iterable[int]) -> None:
        """Raise a clear error if any id is outside the vocabulary."""
        for i in ids:
            if not 0 <= int(i) < len(self.itos):
                raise IndexError(
                    f"token id {int(i)} is outside the vocabulary (0 .. {len(self.itos) - 1})"
                )

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} tokens)"
