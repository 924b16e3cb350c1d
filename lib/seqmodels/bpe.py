"""Byte-pair encoding (Sennrich, Haddow and Birch 2016): subword units learned from word counts.

Training starts from every word spelled as characters and repeatedly merges the most frequent pair
of adjacent symbols into one new symbol, counting a pair once per occurrence in each word, weighted
by the word's count (``eq-ch6-bpe-merge`` of Chapter 6). The ordered list of merges *is* the model:
:meth:`BPE.encode` applies them to a new word in the order they were learned
(``eq-ch6-bpe-encode``).

Conventions (those of HuggingFace ``tokenizers``' ``BpeTrainer`` with
``end_of_word_suffix="</w>"``, so that the two can be compared merge by merge):

- the last character of a word carries the end-of-word suffix ``</w>`` (``"the"`` starts as
  ``t h e</w>``), so ``e</w>`` (a word's last letter) and ``e`` (a letter inside a word) are
  different symbols, and :meth:`BPE.decode` knows where each word ends;
- symbol ids: the characters in code-point order, then the suffixed characters in code-point
  order, then each merged symbol when it is first made;
- **tie-break**: among pairs of equal count the pair of smaller ids ``(left, right)``, compared
  left id first, is merged first (HF's ``Merge`` ordering: ``other.pair.cmp(&self.pair)``);
- a character never seen in training encodes as ``<unk>`` (``<unk></w>`` at the end of a word).

HF numbers the suffixed characters in the order its hash map visits the words, not in code-point
order, so the two can disagree only on a tie between pairs that hold suffixed characters.
Pair counts are updated incrementally: a merge recounts only the words that contain its pair.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

EOW = "</w>"
UNK = "<unk>"
Pair = tuple[int, int]


@dataclass(frozen=True)
class BPE:
    """A trained BPE model: the initial symbols (``symbols[:n_initial]``) and the ordered merges.

    ``symbols`` lists every symbol by id; ``merges[r]`` is the pair of symbol strings merged at rank
    ``r`` (0 = first learned)."""

    symbols: tuple[str, ...]
    n_initial: int
    merges: tuple[tuple[str, str], ...]
    _ranks: dict[tuple[str, str], int] = field(init=False, repr=False, compare=False)
    _cache: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_ranks", {pair: r for r, pair in enumerate(self.merges)})
        object.__setattr__(self, "_cache", {})

    @property
    def alphabet(self) -> frozenset[str]:
        """The characters seen in training (without the end-of-word suffix)."""
        return frozenset(s for s in self.symbols[: self.n_initial] if not s.endswith(EOW))

    @property
    def vocabulary(self) -> tuple[str, ...]:
        """Every symbol an encoding can hold: initial symbols, merged symbols and the two ``<unk>``s."""
        return self.symbols + (UNK, UNK + EOW)

    def encode(self, word: str) -> tuple[str, ...]:
        """The subword symbols of `word`: its characters, then the merges applied in rank order."""
        if word not in self._cache:
            self._cache[word] = self.apply_merges(_initial(_checked_word(word), self.alphabet))
        return self._cache[word]

    def apply_merges(self, parts: list[str]) -> tuple[str, ...]:
        """Encoding (eq-ch6-bpe-encode): merge the lowest-ranked pair until none is a merge."""
        while len(parts) > 1:
            ranked = [(self._ranks.get(p, len(self._ranks)), p) for p in pairwise(parts)]
            rank, pair = min(ranked)
            if rank == len(self._ranks):
                break
            parts = _merge_strings(parts, pair)
        return tuple(parts)

    def encode_words(self, words: Iterable[str]) -> list[str]:
        """The symbols of a sequence of words, concatenated."""
        return [s for word in words for s in self.encode(word)]

    @staticmethod
    def decode(symbols: Sequence[str]) -> list[str]:
        """Symbols back to words: a word ends at each symbol that ends with ``</w>``."""
        words, current = [], ""
        for s in symbols:
            if not isinstance(s, str) or not s:
                raise ValueError(f"expected non-empty symbol strings, got {s!r}")
            current += s
            if current.endswith(EOW):
                words.append(current[: -len(EOW)])
                current = ""
        if current:
            raise ValueError(f"expected the last symbol to end with {EOW!r}, got {symbols[-1]!r}")
        return words


def train_bpe(word_counts: Mapping[str, int], num_merges: int) -> BPE:
    """BPE training (eq-ch6-bpe-merge): up to `num_merges` merges from ``{word: count}``."""
    symbols, words, counts = _start(word_counts, num_merges)
    ids = {s: i for i, s in enumerate(symbols)}

    def name(pair: Pair) -> int:  # a string made before keeps its id
        new = symbols[pair[0]] + symbols[pair[1]]
        if new not in ids:
            ids[new] = len(symbols)
            symbols.append(new)
        return ids[new]

    merges = learn_merges(words, counts, num_merges, name)
    pair_strings = tuple((symbols[a], symbols[b]) for a, b in merges)
    return BPE(tuple(symbols), _n_initial(word_counts), pair_strings)


def learn_merges(
    words: list[list[int]],
    counts: list[int],
    num_merges: int,
    name: Callable[[Pair], int],
) -> list[Pair]:
    """The merge loop (eq-ch6-bpe-merge): up to `num_merges` times, the most
    frequent pair of ids (ties: the smaller pair) becomes id ``name(pair)`` in
    every word that holds it. `words` (lists of ids) are merged in place."""
    pairs: Counter[Pair] = Counter()
    where: defaultdict[Pair, set[int]] = defaultdict(set)
    for w in range(len(words)):
        _count_pairs(words[w], counts[w], w, pairs, where)
    heap = [(-n, pair) for pair, n in pairs.items()]  # most frequent first
    heapq.heapify(heap)
    merges: list[Pair] = []
    while heap and len(merges) < num_merges:
        neg_count, pair = heapq.heappop(heap)
        if -neg_count != pairs[pair]:  # stale: push the current count back
            if pairs[pair] > 0:
                heapq.heappush(heap, (-pairs[pair], pair))
            continue
        new = name(pair)
        merges.append(pair)
        for w in where.pop(pair):  # recount only the words that hold the pair
            _count_pairs(words[w], -counts[w], w, pairs, where)
            words[w] = _merge_ids(words[w], pair, new)
            for p in _count_pairs(words[w], counts[w], w, pairs, where):
                heapq.heappush(heap, (-pairs[p], p))
    return merges


def _start(
    word_counts: Mapping[str, int], num_merges: int
) -> tuple[list[str], list[list[int]], list[int]]:
    """Initial symbols (ids as in the module docstring), each word as ids, and the word counts."""
    if isinstance(num_merges, bool) or not isinstance(num_merges, int) or num_merges < 0:
        raise ValueError(f"expected num_merges to be an integer >= 0, got {num_merges!r}")
    if not isinstance(word_counts, Mapping) or not word_counts:
        raise ValueError("expected a non-empty mapping {word: count}")
    for word, count in word_counts.items():
        _checked_word(word)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"expected a positive integer count for {word!r}, got {count!r}")
    chars = sorted({c for word in word_counts for c in word})
    finals = sorted({word[-1] for word in word_counts})
    symbols = chars + [c + EOW for c in finals]
    ids = {s: i for i, s in enumerate(symbols)}
    words = [[ids[s] for s in _initial(word, set(chars))] for word in word_counts]
    return symbols, words, list(word_counts.values())


def _n_initial(word_counts: Mapping[str, int]) -> int:
    """How many initial symbols: distinct characters plus distinct last characters."""
    return len({c for w in word_counts for c in w}) + len({w[-1] for w in word_counts})


def _checked_word(word: object) -> str:
    """`word` itself if it is a non-empty string without whitespace or ``</w>``; else raise."""
    if not isinstance(word, str):
        raise TypeError(f"expected a word as a str, got {type(word).__name__}")
    if not word or any(c.isspace() for c in word) or EOW in word:
        raise ValueError(f"expected a non-empty word without spaces or {EOW!r}, got {word!r}")
    return word


def _initial(word: str, alphabet: Iterable[str]) -> list[str]:
    """`word` as characters (unseen ones as ``<unk>``), the last one suffixed with ``</w>``."""
    parts = [c if c in alphabet else UNK for c in word]
    parts[-1] += EOW
    return parts


def _count_pairs(
    word: list[int], count: int, w: int, pairs: Counter, where: defaultdict
) -> list[Pair]:
    """Add `count` to each adjacent pair of `word` (index `w`); return the pairs touched."""
    touched = list(pairwise(word))
    for pair in touched:
        pairs[pair] += count
        if count > 0:
            where[pair].add(w)
    return touched


def _merge_ids(word: list[int], pair: Pair, new: int) -> list[int]:
    """`word` with every occurrence of `pair` (left to right, no overlaps) replaced by `new`."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out


def _merge_strings(parts: list[str], pair: tuple[str, str]) -> list[str]:
    """`parts` with every occurrence of `pair` (left to right, no overlaps) joined into one."""
    out, i = [], 0
    while i < len(parts):
        if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
            out.append(parts[i] + parts[i + 1])
            i += 2
        else:
            out.append(parts[i])
            i += 1
    return out
