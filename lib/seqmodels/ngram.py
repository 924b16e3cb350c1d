r"""Count-based n-gram language models over integer token ids (Chapter 1).

`NGramLM` estimates $p(w \mid h)$ from counts of the previous ``order - 1`` tokens $h$ followed
by $w$: by maximum likelihood (``"mle"``), add-$k$ (``"add-k"``, Laplace for $k = 1$) or
interpolated Kneser–Ney (``"kneser-ney"``). Each sentence is padded with ``order - 1`` copies of
``<s>`` and ends with ``</s>``, predicted like a word; ``<s>`` never is, so it gets probability 0.
"""

from __future__ import annotations

import gc
import math
import numbers
import operator
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import torch

from .metrics import perplexity
from .vocab import Vocabulary

SMOOTHINGS = ("mle", "add-k", "kneser-ney")
BOS = Vocabulary.bos
EOS = Vocabulary.eos

Context = tuple[int, ...]


class _Level(NamedTuple):
    r"""The distinct m-grams $h w$ ($|h| = m - 1$) of one level, sorted, so grouped by context $h$.

    Context $h$ has the number ``r = row[h]``, the count $c(h) = \sum_w c(h w)$ = ``total[r]`` and
    $N_{1+}(h\,\bullet)$ = ``n_types[r]`` distinct followers. Those followers $w$ (in increasing
    order) and their counts $c(h w)$ are ``tokens[i]``, ``counts[i]`` for
    ``bounds[r] <= i < bounds[r + 1]``: lists for single look-ups, arrays for whole distributions.
    """

    row: dict[Context, int]
    total: list[int]
    n_types: list[int]
    bounds: list[int]
    tokens: list[int]
    counts: list[int]
    token_array: np.ndarray
    count_array: np.ndarray

    def count(self, r: int, w: int) -> int:
        """$c(h w)$ for the context number `r`, by binary search among its followers."""
        lo, hi = self.bounds[r], self.bounds[r + 1]
        i = bisect_left(self.tokens, w, lo, hi)
        return self.counts[i] if i < hi and self.tokens[i] == w else 0

    def followers(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """The followers $w$ of context number `r` and their counts $c(h w)$, as arrays."""
        lo, hi = self.bounds[r], self.bounds[r + 1]
        return self.token_array[lo:hi], self.count_array[lo:hi]


def _make_level(grams: np.ndarray, counts: np.ndarray) -> _Level:
    """Tables for the distinct m-grams `grams` (one per row, sorted) occurring `counts` times."""
    contexts, tokens = grams[:, :-1], grams[:, -1]
    first_of_context = np.ones(len(grams), dtype=bool)
    first_of_context[1:] = (contexts[1:] != contexts[:-1]).any(axis=1)
    starts = np.flatnonzero(first_of_context)
    bounds = np.append(starts, len(grams))
    return _Level(
        row=dict(zip(map(tuple, contexts[starts].tolist()), range(len(starts)), strict=True)),
        total=np.add.reduceat(counts, starts).tolist(),
        n_types=np.diff(bounds).tolist(),
        bounds=bounds.tolist(),
        tokens=tokens.tolist(),
        counts=counts.tolist(),
        token_array=tokens.copy(),
        count_array=counts,
    )


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while `fit` builds its tables.

    Building millions of small (acyclic) tuples and lists makes it rescan the heap again and again,
    which doubles the time to fit.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _ngram_ids(corpus: np.ndarray, n: int) -> list[np.ndarray]:
    """``ids[j - 1][t]``: a number for the j-gram ending at position ``t`` (j = 1 .. n, t >= j - 1).

    Equal j-grams get equal numbers, and the numbers sort like the j-grams (lexicographically).
    """
    base = int(corpus.max()) + 1
    ids = [corpus]
    for _ in range(1, n):
        previous = np.concatenate(([0], ids[-1][:-1]))  # the (j-1)-gram ending one position earlier
        _, rank = np.unique(previous * base + corpus, return_inverse=True)
        ids.append(rank.reshape(-1))
    return ids


def _distinct(ids: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct value of ``ids[ends]`` (sorted): one of its positions, and its count."""
    _, first, counts = np.unique(ids[ends], return_index=True, return_counts=True)
    return ends[first], counts


def _grams(corpus: np.ndarray, ends: np.ndarray, m: int) -> np.ndarray:
    """The m-grams ending at positions `ends`, one per row."""
    return corpus[ends[:, None] + np.arange(1 - m, 1)]


class NGramLM:
    r"""An n-gram language model $p(w_t \mid w_{t-n+1}^{t-1})$ estimated from counts.

    Smoothing (``c`` counts, $V$ = `vocab_size`, $V - 1$ predictable tokens, since ``<s>`` is not):

    - ``"mle"``: $p(w \mid h) = c(h w) / c(h)$; undefined for a context never seen in training.
    - ``"add-k"``: $p(w \mid h) = \dfrac{c(h w) + k}{c(h) + k (V - 1)}$, at the model's order only.
    - ``"kneser-ney"``: interpolated Kneser–Ney with one absolute discount $D$ (see `prob`).
    """

    def __init__(
        self,
        order: int,
        vocab_size: int,
        smoothing: str = "kneser-ney",
        k: float = 1.0,
        discount: float = 0.75,
    ):
        if not isinstance(order, numbers.Integral) or isinstance(order, bool) or order < 1:
            raise ValueError(f"expected order to be an integer >= 1, got {order!r}")
        if not isinstance(vocab_size, numbers.Integral) or vocab_size < 3:
            raise ValueError(
                f"expected vocab_size to be an integer >= 3 (ids 0, 1, 2 are <s>, </s>, <unk>), "
                f"got {vocab_size!r}"
            )
        if smoothing not in SMOOTHINGS:
            raise ValueError(f"expected smoothing to be one of {SMOOTHINGS}, got {smoothing!r}")
        if not (isinstance(k, numbers.Real) and 0 < k < math.inf):
            raise ValueError(f"expected k to be a positive finite number, got {k!r}")
        if not (isinstance(discount, numbers.Real) and 0 < discount < 1):
            raise ValueError(f"expected discount to be strictly between 0 and 1, got {discount!r}")
        self.order = int(order)
        self.vocab_size = int(vocab_size)
        self.smoothing = smoothing
        self.k = float(k)
        self.discount = float(discount)
        # _levels[m - 1] holds the m-grams. The top level (m = order) has raw counts; Kneser-Ney
        # also keeps levels 1 .. order - 1, with continuation counts. MLE, add-k keep the top only.
        self._levels: list[_Level] | None = None

    def __repr__(self) -> str:
        fitted = "fitted" if self._levels is not None else "not fitted"
        return (
            f"NGramLM(order={self.order}, vocab_size={self.vocab_size}, "
            f"smoothing={self.smoothing!r}, {fitted})"
        )

    # ------------------------------------------------------------------ training

    def fit(self, sentences: Iterable[Sequence[int]]) -> NGramLM:
        r"""Count the n-grams of `sentences` (lists of ids, no ``<s>``/``</s>``); return ``self``.

        The top level counts $c(h w)$ directly. Kneser–Ney's lower levels count continuations,
        $c_m(h w) = N_{1+}(\bullet\, h w) = |\{v : c_{m+1}(v h w) > 0\}|$. Raises ``ValueError``
        for no sentences, ``IndexError`` for an id outside ``1 .. vocab_size - 1``.
        """
        corpus = self._padded_corpus(sentences)
        targets = np.flatnonzero(corpus != BOS)  # the positions of predicted tokens
        with _gc_paused():
            # Number the j-grams (j <= order) ending at every position, equal j-grams alike: the
            # distinct n-grams are then the distinct numbers at the positions of predicted tokens.
            ids = _ngram_ids(corpus, self.order)
            ends, counts = _distinct(ids[-1], targets)
            levels = [_make_level(_grams(corpus, ends, self.order), counts)]
            if self.smoothing == "kneser-ney":
                for m in range(self.order - 1, 0, -1):
                    # each distinct (m+1)-gram v h w, ending at one of `ends`, adds 1 to h w
                    ends, counts = _distinct(ids[m - 1], ends)
                    levels.insert(0, _make_level(_grams(corpus, ends, m), counts))
        self._levels = levels
        return self

    def _padded_corpus(self, sentences: Iterable[Sequence[int]]) -> np.ndarray:
        """All sentences, each as ``order - 1`` × ``<s>``, its ids, ``</s>``, in one int64 array."""
        pad = [BOS] * (self.order - 1)
        flat: list[int] = []
        n_sentences = 0
        for index, sentence in enumerate(sentences):
            flat += pad
            flat += self._check_sentence(sentence, index)
            flat.append(EOS)
            n_sentences += 1
        if n_sentences == 0:
            raise ValueError("cannot fit on an empty corpus: got no sentences")
        return np.array(flat, dtype=np.int64)

    # ------------------------------------------------------------------ probabilities

    def prob(self, context: Sequence[int], token: int) -> float:
        r"""$p(\text{token} \mid \text{context})$, using the last ``order - 1`` ids of `context`.

        A shorter context is left-padded with ``<s>``. For Kneser–Ney, with $c_n$ the raw counts at
        the model's order $n$ and $c_m$ the continuation counts $N_{1+}(\bullet\, h w)$ below it,

        $$p_m(w \mid h) = \frac{\max(c_m(h w) - D, 0)}{c_m(h)}
            + \frac{D\, N_{1+}(h\,\bullet)}{c_m(h)}\, p_{m-1}(w \mid h_{2:}),
          \qquad p_0(w) = \frac{1}{V - 1},$$

        and $p_m(w \mid h) = p_{m-1}(w \mid h_{2:})$ when $c_m(h) = 0$. An MLE model returns 0.0 for
        a context it never saw.
        """
        self._check_fitted()
        return self._prob(self._context(context), self._check_token(token))

    def distribution(self, context: Sequence[int]) -> torch.Tensor:
        r"""$p(\cdot \mid \text{context})$ as a ``(vocab_size,)`` float64 vector; entry 0 is 0.

        The same recursion as `prob`, on whole vectors. Raises ``ValueError`` for an MLE model and a
        context never seen in training (the estimate $0 / 0$ is undefined there).
        """
        self._check_fitted()
        h = self._context(context)
        if self.smoothing == "kneser-ney":
            p = self._kn_vector(h)
        elif self.smoothing == "add-k":
            p = self._add_k_vector(h)
        else:
            p = self._mle_vector(h)
        return torch.from_numpy(p)

    def _prob(self, h: Context, w: int) -> float:
        """`prob` for a checked context of exactly ``order - 1`` ids and a checked token."""
        if w == BOS:
            return 0.0
        if self.smoothing == "kneser-ney":
            return self._kn_prob(h, w)
        top = self._levels[-1]
        r = top.row.get(h)
        count, total = (0, 0) if r is None else (top.count(r, w), top.total[r])
        if self.smoothing == "add-k":
            return (count + self.k) / (total + self.k * (self.vocab_size - 1))
        return count / total if total else 0.0

    def _kn_prob(self, h: Context, w: int) -> float:
        r"""Eq. (eq-kn): $p_{\text{KN}}(w \mid h)$ for a context `h` of up to ``n - 1`` ids, from
        the base upwards.

        Level m holds the counts after contexts of m - 1 tokens: raw counts at the top, continuation
        counts (eq-kn-continuation) below; `_suffixes` pairs each level with the start of its
        context in `h`, the empty context first, and an unseen context passes p on (eq-kn-base).
        """
        d, p = self.discount, 1.0 / (self.vocab_size - 1)
        for level, start in self._suffixes(h):
            r = level.row.get(h[start:])
            if r is None:  # context unseen at this level: all mass to the level below
                continue
            total = level.total[r]
            p = max(level.count(r, w) - d, 0.0) / total + d * level.n_types[r] / total * p
        return p

    def _kn_vector(self, h: Context) -> np.ndarray:
        r"""The vector $p_m(\cdot \mid h)$, $m = |h| + 1$: `_kn_prob` for every token at once."""
        d = self.discount
        p = np.full(self.vocab_size, 1.0 / (self.vocab_size - 1))
        p[BOS] = 0.0
        for level, start in self._suffixes(h):
            r = level.row.get(h[start:])
            if r is None:
                continue
            total, (tokens, counts) = level.total[r], level.followers(r)
            p = d * level.n_types[r] / total * p
            p[tokens] += np.maximum(counts - d, 0.0) / total
        return p

    def _suffixes(self, h: Context) -> Iterator[tuple[_Level, int]]:
        """``(level m, s)`` for m = 1 .. |h| + 1, where ``h[s:]`` is the context at level m."""
        return zip(self._levels[: len(h) + 1], range(len(h), -1, -1), strict=True)

    def _add_k_vector(self, h: Context) -> np.ndarray:
        r"""$\left(c(h w) + k\right) / \left(c(h) + k (V - 1)\right)$ for every $w \ne$ ``<s>``."""
        top = self._levels[-1]
        counts = np.zeros(self.vocab_size)
        total = 0
        r = top.row.get(h)
        if r is not None:
            tokens, token_counts = top.followers(r)
            counts[tokens] = token_counts
            total = top.total[r]
        p = (counts + self.k) / (total + self.k * (self.vocab_size - 1))
        p[BOS] = 0.0
        return p

    def _mle_vector(self, h: Context) -> np.ndarray:
        r"""$c(h w) / c(h)$ for every $w$; ``ValueError`` if $c(h) = 0$."""
        top = self._levels[-1]
        r = top.row.get(h)
        if r is None:
            raise ValueError(
                f"context {list(h)} was never seen in training, so its MLE distribution is "
                f"undefined (0/0); use smoothing='add-k' or 'kneser-ney'"
            )
        tokens, counts = top.followers(r)
        p = np.zeros(self.vocab_size)
        p[tokens] = counts / top.total[r]
        return p

    # ------------------------------------------------------------------ evaluation

    def nll(self, sentences: Iterable[Sequence[int]]) -> tuple[float, int]:
        r"""$\bigl(-\sum_t \log p(x_t \mid x_{t-n+1}^{t-1}),\ N\bigr)$: nats and predicted tokens.

        The predicted tokens are each sentence's words and its final ``</s>``; the total is ``inf``
        when some token has probability 0.
        """
        total, n = 0.0, 0
        for p in self._token_probs(sentences):
            total = total - math.log(p) if p > 0 else math.inf
            n += 1
        return total, n

    def sentence_nlls(self, sentences: Iterable[Sequence[int]]) -> torch.Tensor:
        r"""$-\log p(x)$ of each sentence (its words and its ``</s>``), in nats, as an ``(S,)`` float64
        vector: the per-sentence terms of `nll`'s total (``inf`` where some token has p = 0)."""
        return torch.tensor(
            [self.nll([sentence])[0] for sentence in sentences], dtype=torch.float64
        )

    def perplexity(self, sentences: Iterable[Sequence[int]]) -> float:
        r"""Perplexity $\exp\bigl(-\frac{1}{N}\sum_t \log p(x_t \mid x_{t-n+1}^{t-1})\bigr)$.

        Computed from `nll` by `seqmodels.metrics.perplexity`; ``inf`` if some token has p = 0.
        """
        return perplexity(*self.nll(sentences))

    def zero_probability_rate(self, sentences: Iterable[Sequence[int]]) -> float:
        """The fraction of predicted tokens (words and ``</s>``) that get probability 0."""
        zeros, n = 0, 0
        for p in self._token_probs(sentences):
            zeros += p == 0.0
            n += 1
        if n == 0:
            raise ValueError("expected at least one sentence to evaluate, got none")
        return zeros / n

    def token_probs(self, sentences: Iterable[Sequence[int]]) -> torch.Tensor:
        r"""$p(x_t \mid x_{t-n+1}^{t-1})$ of every predicted token, in order, as an ``(N,)`` float64 vector."""
        return torch.tensor(list(self._token_probs(sentences)), dtype=torch.float64)

    def _token_probs(self, sentences: Iterable[Sequence[int]]) -> Iterator[float]:
        r"""$p(x_t \mid x_{t-n+1}^{t-1})$ for every predicted token of every sentence, in order."""
        self._check_fitted()
        n = self.order - 1
        pad = [BOS] * n
        for index, sentence in enumerate(sentences):
            padded = pad + self._check_sentence(sentence, index) + [EOS]
            for t in range(n, len(padded)):
                yield self._prob(tuple(padded[t - n : t]), padded[t])

    # ------------------------------------------------------------------ generation

    def n_stored(self) -> int:
        """How many distinct n-grams (of every level the model keeps) it stores counts for."""
        self._check_fitted()
        return sum(len(level.tokens) for level in self._levels)

    def sample(self, generator: torch.Generator, max_len: int = 50) -> list[int]:
        """Draw tokens from `distribution` until ``</s>`` (not returned) or `max_len` tokens."""
        self._check_fitted()
        if not isinstance(max_len, int) or max_len < 0:
            raise ValueError(f"expected max_len to be a non-negative integer, got {max_len!r}")
        history = deque([BOS] * (self.order - 1), maxlen=self.order - 1)  # keeps the last n - 1
        out: list[int] = []
        while len(out) < max_len:
            p = self.distribution(history)
            token = int(torch.multinomial(p, 1, generator=generator).item())
            if token == EOS:
                break
            out.append(token)
            history.append(token)
        return out

    # ------------------------------------------------------------------ input checks

    def _check_fitted(self) -> None:
        """Raise unless `fit` has been called."""
        if self._levels is None:
            raise RuntimeError("this NGramLM has no counts yet: call fit() first")

    def _check_sentence(self, sentence: Sequence[int], index: int) -> list[int]:
        """The sentence as a list of ints; raise unless every id is a word or ``</s>``."""
        ids = _as_ids(sentence, f"sentence {index}")
        if ids and (min(ids) < 1 or max(ids) >= self.vocab_size):
            bad = next(i for i in ids if not 1 <= i < self.vocab_size)
            if bad == BOS:
                raise IndexError(
                    f"sentence {index} contains <s> (id {BOS}): give sentences without <s>/</s>, "
                    f"the model adds the padding itself"
                )
            raise IndexError(
                f"token id {bad} in sentence {index} is outside the vocabulary "
                f"(1 .. {self.vocab_size - 1})"
            )
        return ids

    def _check_token(self, token: int) -> int:
        """`token` as an int; raise unless it is an id of this vocabulary."""
        try:
            token = operator.index(token)
        except TypeError:
            raise TypeError(f"expected an integer token id, got {token!r}") from None
        if not 0 <= token < self.vocab_size:
            raise IndexError(
                f"token id {token} is outside the vocabulary (0 .. {self.vocab_size - 1})"
            )
        return token

    def _context(self, context: Sequence[int]) -> Context:
        """The last ``order - 1`` ids of `context`, left-padded with ``<s>`` if it is shorter."""
        ids = _as_ids(context, "context")
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise IndexError(
                f"token id {bad[0]} in the context is outside the vocabulary "
                f"(0 .. {self.vocab_size - 1})"
            )
        n = self.order - 1
        if n == 0:
            return ()
        return tuple([BOS] * (n - len(ids)) + ids[-n:])


def _as_ids(sequence: Sequence[int], what: str) -> list[int]:
    """A list, tensor or array of ids → a list of Python ints (``TypeError`` for anything else)."""
    if hasattr(sequence, "tolist"):  # torch.Tensor, np.ndarray
        sequence = sequence.tolist()
    try:
        return list(map(operator.index, sequence))
    except TypeError:
        raise TypeError(f"expected {what} to be a sequence of integer token ids") from None
