r"""A synthetic language with an exactly known entropy rate: number agreement across $d$ fillers.

Every sentence has the same shape,

$$\underbrace{\text{noun}}_{\text{position } 0}\;
\underbrace{f_1 \dots f_d}_{d \text{ fillers}}\;
\underbrace{\text{verb}}_{\text{position } d+1}\; \texttt{</s>},$$

e.g. ``dogs old very quiet run </s>`` for $d = 3$. The subject is plural with probability $\pi$
(``p_plural``) and then uniform among that number's nouns; the fillers are i.i.d. from a Zipf law
$p(f_i) \propto i^{-s}$; the verb is uniform among the verbs of the *same* number as the noun, so
predicting it well needs a dependency that spans $d + 1$ tokens. A sentence is $d + 2$ word ids and
$d + 3$ predicted tokens (the final ``</s>`` is certain, as every sentence has the same length).

Because the generating process is known, so is the best any model can do: the entropy rate

$$H = \frac{h(\pi) + \log N + d\,H(f) + \log V}{d + 3} \quad\text{nats per token}$$

($N$ nouns and $V$ verbs per number, $h$ the binary entropy), and no model has an expected
perplexity below $e^{H}$. :meth:`AgreementLanguage.ngram_floor` gives the best an $n$-gram model can
do.

Vocabulary ids: ``0, 1, 2`` are ``<s>, </s>, <unk>`` (never part of a sentence), then the singular
nouns, the plural nouns, the singular verbs, the plural verbs and the fillers, each a contiguous
block (see :meth:`AgreementLanguage.noun_ids`, :meth:`~AgreementLanguage.verb_ids`,
:attr:`~AgreementLanguage.filler_ids`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

from .vocab import Vocabulary

#: (singular, plural) noun pairs; the first ``n_nouns`` are used.
NOUNS: tuple[tuple[str, str], ...] = (
    ("dog", "dogs"),
    ("cat", "cats"),
    ("child", "children"),
    ("teacher", "teachers"),
    ("horse", "horses"),
    ("woman", "women"),
    ("farmer", "farmers"),
    ("mouse", "mice"),
    ("king", "kings"),
    ("bird", "birds"),
    ("man", "men"),
    ("sailor", "sailors"),
)
#: (singular, plural) verb pairs; the first ``n_verbs`` are used.
VERBS: tuple[tuple[str, str], ...] = (
    ("runs", "run"),
    ("sleeps", "sleep"),
    ("sings", "sing"),
    ("waits", "wait"),
    ("laughs", "laugh"),
    ("eats", "eat"),
    ("swims", "swim"),
    ("is", "are"),
    ("was", "were"),
    ("smiles", "smile"),
    ("falls", "fall"),
    ("works", "work"),
)
#: Fillers, most frequent first under the Zipf law; the first ``n_fillers`` are used.
FILLERS: tuple[str, ...] = (
    "old",
    "very",
    "big",
    "quiet",
    "small",
    "really",
    "happy",
    "young",
    "rather",
    "brown",
    "tiny",
    "lazy",
    "clever",
    "still",
    "tall",
    "strange",
    "green",
    "gentle",
    "quite",
    "proud",
)


def _binary_entropy(p: float) -> float:
    r"""$h(p) = -p \log p - (1 - p) \log (1 - p)$ in nats, with $0 \log 0 = 0$."""
    return -sum(q * math.log(q) for q in (p, 1.0 - p) if q > 0)


def _xlogx(x: float) -> float:
    r"""$x \log x$ with $0 \log 0 = 0$."""
    return x * math.log(x) if x > 0 else 0.0


def _check_int(name: str, value: object, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected {name} to be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"expected {name} {bounds}, got {value}")


@dataclass(frozen=True)
class AgreementLanguage:
    """Noun, `distance` fillers, then a verb that agrees in number with the noun, then ``</s>``.

    >>> lang = AgreementLanguage(distance=2)
    >>> s = lang.sample(1, torch.Generator().manual_seed(0))[0]
    >>> len(s) == lang.sentence_length == 4 and lang.is_plural(s[0]) == lang.is_plural(s[-1])
    True
    """

    distance: int
    """$d \\ge 0$: the number of filler tokens between the subject noun and its verb."""
    n_nouns: int = 4
    """Nouns per grammatical number (singular/plural pairs such as dog/dogs)."""
    n_verbs: int = 4
    """Verbs per number (pairs such as runs/run)."""
    n_fillers: int = 8
    """Filler words ("old", "very", ...)."""
    zipf_s: float = 1.0
    r"""Zipf exponent $s$ of the fillers: $p(f_i) \propto i^{-s}$, $i = 1 \dots$ ``n_fillers``."""
    p_plural: float = 0.5
    """Probability $\\pi$ that a sentence's subject (and so its verb) is plural."""

    def __post_init__(self) -> None:
        _check_int("distance", self.distance, 0)
        _check_int("n_nouns", self.n_nouns, 1, len(NOUNS))
        _check_int("n_verbs", self.n_verbs, 1, len(VERBS))
        _check_int("n_fillers", self.n_fillers, 1, len(FILLERS))
        for name in ("zipf_s", "p_plural"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"expected {name} to be a real number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"expected {name} to be finite, got {value}")
        if self.zipf_s < 0:
            raise ValueError(f"expected zipf_s >= 0 (0 = uniform fillers), got {self.zipf_s}")
        if not 0 < self.p_plural < 1:
            raise ValueError(f"expected 0 < p_plural < 1, got {self.p_plural}")

    # ----------------------------------------------------------------------------------- vocabulary

    @cached_property
    def vocab(self) -> Vocabulary:
        """``<s> </s> <unk>``, singular nouns, plural nouns, singular verbs, plural verbs, fillers.

        Only the first `n_nouns` / `n_verbs` / `n_fillers` words of the lists are included.
        """
        nouns, verbs = NOUNS[: self.n_nouns], VERBS[: self.n_verbs]
        return Vocabulary(
            [sg for sg, _ in nouns]
            + [pl for _, pl in nouns]
            + [sg for sg, _ in verbs]
            + [pl for _, pl in verbs]
            + list(FILLERS[: self.n_fillers])
        )

    @property
    def _noun_start(self) -> int:
        return 3

    @property
    def _verb_start(self) -> int:
        return 3 + 2 * self.n_nouns

    @property
    def _filler_start(self) -> int:
        return 3 + 2 * self.n_nouns + 2 * self.n_verbs

    def noun_ids(self, plural: bool | None = None) -> range:
        """Ids of the plural (``True``), singular (``False``) or all (``None``) nouns."""
        start = self._noun_start + (self.n_nouns if plural else 0)
        return range(start, start + (2 * self.n_nouns if plural is None else self.n_nouns))

    def verb_ids(self, plural: bool | None = None) -> range:
        """Ids of the plural (``True``), singular (``False``) or all (``None``) verbs."""
        start = self._verb_start + (self.n_verbs if plural else 0)
        return range(start, start + (2 * self.n_verbs if plural is None else self.n_verbs))

    @property
    def filler_ids(self) -> range:
        """Ids of the fillers, most frequent first."""
        return range(self._filler_start, self._filler_start + self.n_fillers)

    def is_plural(self, token_id: int) -> bool:
        """Whether a noun or verb id is plural; ``ValueError`` for any other token."""
        self.vocab.check_ids([token_id])
        token_id = int(token_id)
        if token_id in self.noun_ids() or token_id in self.verb_ids():
            return token_id in self.noun_ids(True) or token_id in self.verb_ids(True)
        raise ValueError(
            f"token id {token_id} ({self.vocab.itos[token_id]!r}) is neither a noun nor a verb"
        )

    def agreement(
        self, verb_probs: torch.Tensor, sentences: Sequence[Sequence[int]]
    ) -> tuple[float, float]:
        r"""How well a model's predictions at the verb agree with the subject, over `sentences`.

        `verb_probs: (N, V)` holds a model's $p(\cdot \mid x_{<d+1})$ at each sentence's verb
        position. Returns the mean share of the verb mass on verbs of the subject's number,
        $p(\text{right verbs}) / p(\text{all verbs})$ (1 for the true model, 0.5 for one blind to
        number when $\pi = 0.5$), and the *agreement accuracy*: the fraction of sentences where the
        right number gets more mass than the wrong one.
        """
        if verb_probs.ndim != 2 or verb_probs.shape != (len(sentences), len(self.vocab)):
            raise ValueError(
                f"expected verb_probs of shape ({len(sentences)}, {len(self.vocab)}), "
                f"got {tuple(verb_probs.shape)}"
            )
        plural = torch.tensor([self.is_plural(s[0]) for s in sentences])
        singular_mass = verb_probs[:, self.verb_ids(False)].double().sum(1)
        plural_mass = verb_probs[:, self.verb_ids(True)].double().sum(1)
        right = torch.where(plural, plural_mass, singular_mass)
        wrong = torch.where(plural, singular_mass, plural_mass)
        share = right / (right + wrong)
        return share.mean().item(), (right > wrong).double().mean().item()

    def stream(self, sentences: Sequence[Sequence[int]]) -> torch.Tensor:
        """The sentences as one stream of ids, each followed by ``</s>`` (id 1): ``(n × (d + 3),)``,
        for training with truncated BPTT. Sentence ``i``'s verb is at ``i × (d + 3) + d + 1``."""
        if not sentences:
            raise ValueError("expected at least one sentence, got none")
        return torch.tensor([t for s in sentences for t in (*s, Vocabulary.eos)])

    @property
    def verb_position(self) -> int:
        """Index of the verb in a sentence: $d + 1$."""
        return self.distance + 1

    @property
    def sentence_length(self) -> int:
        """Word ids per sentence: $d + 2$ (``</s>`` not included)."""
        return self.distance + 2

    @property
    def tokens_per_sentence(self) -> int:
        """Predicted tokens per sentence: $d + 3$ (the words and ``</s>``)."""
        return self.distance + 3

    # -------------------------------------------------------------------------------- distributions

    @property
    def filler_probs(self) -> torch.Tensor:
        r"""Zipf law of the fillers, $p(f_i) = i^{-s} / \sum_j j^{-s}$ (float64, n_fillers)."""
        return self._filler_probs.clone()

    @cached_property
    def _filler_probs(self) -> torch.Tensor:
        ranks = torch.arange(1, self.n_fillers + 1, dtype=torch.float64)
        weights = ranks.pow(-float(self.zipf_s))
        return weights / weights.sum()

    @cached_property
    def _dists(self) -> dict[str, torch.Tensor]:
        """Next-token distributions over the vocabulary by kind of position (float64)."""
        noun, filler, verb_sg, verb_pl, eos = torch.zeros(5, len(self.vocab), dtype=torch.float64)
        noun[self.noun_ids(False)] = (1 - self.p_plural) / self.n_nouns
        noun[self.noun_ids(True)] = self.p_plural / self.n_nouns
        filler[self.filler_ids] = self.filler_probs
        verb_sg[self.verb_ids(False)] = 1 / self.n_verbs
        verb_pl[self.verb_ids(True)] = 1 / self.n_verbs
        eos[Vocabulary.eos] = 1.0
        return {"noun": noun, "filler": filler, "verb_sg": verb_sg, "verb_pl": verb_pl, "eos": eos}

    @cached_property
    def _log_tables(self) -> tuple[list[float], list[float], list[int]]:
        """Per id: log p as the noun, log p as a filler, and number (0 sg, 1 pl, -1 neither)."""
        d = self._dists
        noun_logp, filler_logp = d["noun"].log().tolist(), d["filler"].log().tolist()
        number = [-1] * len(self.vocab)
        for plural in (False, True):
            for i in (*self.noun_ids(plural), *self.verb_ids(plural)):
                number[i] = int(plural)
        return noun_logp, filler_logp, number

    def _prefix_log_prob(self, ids: Sequence[int]) -> float:
        """log p of the first ``len(ids) <= d + 2`` words (no ``</s>``); -inf if impossible."""
        noun_logp, filler_logp, number = self._log_tables
        total = 0.0
        for t, i in enumerate(ids):
            if t == 0:
                total += noun_logp[i]
            elif t <= self.distance:
                total += filler_logp[i]
            elif i not in self.verb_ids() or number[i] != number[ids[0]]:
                return -math.inf
            else:
                total -= math.log(self.n_verbs)
            if total == -math.inf:
                return total
        return total

    def log_prob(self, sentence: Sequence[int]) -> float:
        r"""Exact $\log p(x_1 \dots x_{d+2}\,\texttt{</s>})$ in nats of a sentence of word ids.

        $\log p = \log p(\text{noun}) + \sum_{i=1}^{d} \log p(f_i) - \log V$ for a well-formed
        sentence (``</s>`` costs nothing); ``-inf`` for an impossible one (wrong length, wrong
        agreement, a word in the wrong position, a special token). `sentence` excludes ``<s>`` and
        ``</s>``, as everywhere in the course. ``IndexError`` for an id outside the vocabulary.
        """
        ids = [int(i) for i in sentence]
        self.vocab.check_ids(ids)
        if len(ids) != self.sentence_length:
            return -math.inf
        return self._prefix_log_prob(ids)

    def next_token_distribution(self, prefix: Sequence[int]) -> torch.Tensor:
        r"""Exact $p(x_t \mid x_{<t})$ over the vocabulary: float64, shape ``(len(vocab),)``.

        `prefix` is the word ids so far (no ``<s>``), ``t = len(prefix)``: nouns at $t = 0$, Zipf
        fillers for $1 \le t \le d$, the verbs agreeing with the noun at $t = d + 1$, and all mass
        on ``</s>`` at $t = d + 2$. ``ValueError`` if the prefix is impossible or already complete.
        """
        ids = [int(i) for i in prefix]
        self.vocab.check_ids(ids)
        t = len(ids)
        if t > self.sentence_length:
            raise ValueError(
                f"prefix has {t} tokens but a sentence has {self.sentence_length} words then </s>: "
                "nothing is left to predict"
            )
        if self._prefix_log_prob(ids) == -math.inf:
            words = " ".join(self.vocab.decode(ids))
            raise ValueError(f"impossible prefix {words!r} (word ids only, no <s>, agreeing verb)")
        if t == 0:
            kind = "noun"
        elif t <= self.distance:
            kind = "filler"
        elif t == self.verb_position:
            kind = "verb_pl" if self.is_plural(ids[0]) else "verb_sg"
        else:
            kind = "eos"
        return self._dists[kind].clone()

    # -------------------------------------------------------------------------------------- entropy

    def entropy_per_sentence(self) -> float:
        r"""$H(\text{sentence}) = h(\pi) + \log N + d\,H(f) + \log V$ nats.

        Number, noun given number, the $d$ i.i.d. fillers, verb given number; ``</s>`` adds 0.
        """
        # imported here, not at the top: the grading sandbox, which hides `metrics` (a graded
        # implementation), still lets problem sets draw sentences from this language
        from .metrics import entropy

        return (
            _binary_entropy(self.p_plural)
            + math.log(self.n_nouns)
            + self.distance * entropy(self.filler_probs)
            + math.log(self.n_verbs)
        )

    def entropy_rate(self) -> float:
        r"""$H = H(\text{sentence}) / (d + 3)$ nats per predicted token (``</s>`` included)."""
        return self.entropy_per_sentence() / self.tokens_per_sentence

    def perplexity_bound(self) -> float:
        r"""$e^{H}$: no model has a lower expected perplexity on this language."""
        return math.exp(self.entropy_rate())

    def ngram_floor(self, order: int) -> float:
        r"""Cross-entropy (nats/token) of the best possible $n$-gram model, $n$ = `order`.

        The best $n$-gram model predicts $x_t$ from the window $w_t$ of the $k = n - 1$ previous
        tokens (padded with $k$ ``<s>``), pooling all positions where a window occurs, so its
        cross-entropy is the conditional entropy $H(X_T \mid W_T)$ with $T$ uniform over the $d + 3$
        positions. A window holding ``<s>``, the noun or the verb fixes the position, and shows
        the noun whenever the verb is due, so it costs nothing. A window of $k$ fillers only occurs
        at the $m = d + 1 - k$ positions $k+1 \dots d+1$, equally likely at each, so given it the
        next token is the verb with probability $1/m$ (else a filler), and the verb's number is
        unknown. For $n \ge 2$ this adds $h(\pi) + m\,h(1/m)$ nats per sentence:

        $$\text{floor} = \frac{H(\text{sentence}) + [m \ge 1]\,\big(h(\pi) + m \log m
        - (m - 1)\log(m - 1)\big)}{d + 3},$$

        which is the entropy rate once $n - 1 \ge d + 1$. For $n = 1$ (unigram) every position is
        pooled: $\frac{1}{d+3}\big(H(\text{noun}) + d\,H(f) + h(\pi) + \log V\big)$ plus the
        entropy of the kind of token, noun/filler/verb/``</s>`` with weights $(1, d, 1, 1)/(d+3)$.
        """
        from .metrics import entropy  # see entropy_per_sentence

        _check_int("order", order, 1)
        d, h_pi = self.distance, _binary_entropy(self.p_plural)
        if order == 1:
            weights = torch.tensor([1.0, d, 1.0, 1.0], dtype=torch.float64) / (d + 3)
            within = (
                h_pi
                + math.log(self.n_nouns)
                + d * entropy(self.filler_probs)
                + h_pi
                + math.log(self.n_verbs)
            )
            return entropy(weights) + within / (d + 3)
        m = d + 1 - (order - 1)
        extra = h_pi + _xlogx(m) - _xlogx(m - 1) if m >= 1 else 0.0
        return (self.entropy_per_sentence() + extra) / self.tokens_per_sentence

    # ------------------------------------------------------------------------------------- sampling

    def sample(self, n_sentences: int, generator: torch.Generator) -> list[list[int]]:
        """Draw `n_sentences` i.i.d. sentences of $d + 2$ word ids, all randomness from `generator`.

        Vectorised: the numbers, nouns, verbs and fillers are drawn as whole tensors (fillers by
        inverse-CDF lookup of uniforms), so the same seed gives the same sentences.
        """
        _check_int("n_sentences", n_sentences, 0)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"expected a torch.Generator, got {type(generator).__name__}")
        n, d = n_sentences, self.distance
        plural = (torch.rand(n, generator=generator, dtype=torch.float64) < self.p_plural).long()
        noun = torch.randint(self.n_nouns, (n,), generator=generator)
        verb = torch.randint(self.n_verbs, (n,), generator=generator)
        cdf = self.filler_probs.cumsum(0)
        cdf[-1] = 1.0  # guard against rounding: every uniform in [0, 1) maps to a filler
        u = torch.rand(n, d, generator=generator, dtype=torch.float64)
        filler = torch.searchsorted(cdf, u, right=True).clamp_(max=self.n_fillers - 1)
        out = torch.empty(n, d + 2, dtype=torch.long)
        out[:, 0] = self._noun_start + plural * self.n_nouns + noun
        out[:, 1 : d + 1] = self._filler_start + filler
        out[:, d + 1] = self._verb_start + plural * self.n_verbs + verb
        return out.tolist()


# ---- string reversal with noise tokens --------------------------------------------------------


@dataclass(frozen=True)
class ReversalTask:
    """Reverse a string of symbols, ignoring the noise tokens mixed into it.

    A source is ``length`` symbols drawn uniformly from ``n_symbols`` letters (``a``, ``b``, ...),
    and before each of them, with probability ``noise``, one noise token ``#``; the target is the
    symbols alone, in reverse order: ``a # b c`` → ``c b a``. Source and target share one vocabulary:
    ids ``0, 1, 2`` are ``<s>, </s>, <unk>``, then the letters, then ``#``.
    """

    n_symbols: int = 10
    noise: float = 0.3

    def __post_init__(self):
        if not 1 <= self.n_symbols <= 26:
            raise ValueError(f"expected 1 <= n_symbols <= 26, got {self.n_symbols}")
        if not 0.0 <= self.noise < 1.0:
            raise ValueError(f"expected 0 <= noise < 1, got {self.noise}")

    @cached_property
    def vocab(self) -> Vocabulary:
        """``<s> </s> <unk>``, the letters, ``#``."""
        return Vocabulary([chr(ord("a") + i) for i in range(self.n_symbols)] + ["#"])

    @property
    def noise_id(self) -> int:
        """The id of the noise token ``#``."""
        return len(self.vocab) - 1

    def target_of(self, source: Sequence[int]) -> list[int]:
        """The target of a source: its symbols without the noise, reversed."""
        return [t for t in reversed(source) if t != self.noise_id]

    def sample(
        self, n: int, min_length: int, max_length: int, generator: torch.Generator
    ) -> list[tuple[list[int], list[int]]]:
        """`n` pairs ``(source ids, target ids)``; lengths (symbols, not counting noise) uniform in
        ``min_length .. max_length``, all draws from `generator`."""
        if not 1 <= min_length <= max_length:
            raise ValueError(
                f"expected 1 <= min_length <= max_length, got {min_length} and {max_length}"
            )
        lengths = torch.randint(min_length, max_length + 1, (n,), generator=generator)
        first = len(Vocabulary([]))
        pairs = []
        for length in lengths.tolist():
            symbols = torch.randint(first, first + self.n_symbols, (length,), generator=generator)
            noisy = torch.rand(length, generator=generator) < self.noise
            source: list[int] = []
            for symbol, has_noise in zip(symbols.tolist(), noisy.tolist(), strict=True):
                source += [self.noise_id, symbol] if has_noise else [symbol]
            pairs.append((source, self.target_of(source)))
        return pairs


# ---- a task where position matters (Chapter 8) ------------------------------------------------

#: The id of the marker in :func:`periodic_sentences` (after ``<s> </s> <unk>``).
PERIODIC_MARKER = 3


def periodic_sentences(
    n: int,
    min_len: int,
    max_len: int,
    generator: torch.Generator,
    period: int = 4,
    n_symbols: int = 8,
) -> list[list[int]]:
    """A task where position matters: `n` sentences of ``min_len .. max_len`` tokens (uniform),
    token $p$ (from 0) the marker :data:`PERIODIC_MARKER` when ``p % period == period - 1`` and otherwise
    one of `n_symbols` symbols (ids ``4 .. 3 + n_symbols``) drawn uniformly. A language model can
    predict the marker exactly only by knowing where it is; the symbols carry
    $\\log$ `n_symbols` nats each whatever it knows. Vocabulary size ``4 + n_symbols``."""
    for name, value in (
        ("n", n),
        ("min_len", min_len),
        ("max_len", max_len),
        ("period", period),
        ("n_symbols", n_symbols),
    ):
        _check_int(name, value, 1)
    if min_len > max_len:
        raise ValueError(f"expected min_len <= max_len, got {min_len} and {max_len}")
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator).tolist()
    sentences = []
    for T in lengths:
        s = torch.randint(
            PERIODIC_MARKER + 1, PERIODIC_MARKER + 1 + n_symbols, (T,), generator=generator
        )
        s[torch.arange(T) % period == period - 1] = PERIODIC_MARKER
        sentences.append(s.tolist())
    return sentences
