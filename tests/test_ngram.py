"""Tests for `seqmodels.ngram`: hand-computed probabilities, normalisation, evaluation, sampling."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqmodels.ngram import NGramLM
from seqmodels.vocab import Vocabulary

BOS, EOS, UNK = Vocabulary.bos, Vocabulary.eos, Vocabulary.unk

# Jurafsky & Martin's toy corpus (SLP3 §3.1). Vocabulary: <s> </s> <unk> + 10 words, so V = 13 and
# V - 1 = 12 tokens can be predicted (everything but <s>).
JM_TEXT = [s.split() for s in ["I am Sam", "Sam I am", "I do not like green eggs and ham"]]
JM_VOCAB = Vocabulary.build(JM_TEXT)
JM = [JM_VOCAB.encode(s) for s in JM_TEXT]
V = len(JM_VOCAB)
SMOOTHINGS = ["mle", "add-k", "kneser-ney"]


def w(token: str) -> int:
    return JM_VOCAB.stoi[token]


def jm(smoothing: str, order: int = 2, **kwargs) -> NGramLM:
    return NGramLM(order, V, smoothing, **kwargs).fit(JM)


def random_corpus(seed: int, vocab_size: int = 12, n: int = 40) -> list[list[int]]:
    """Zipf-ish sentences over ids 3 .. vocab_size - 2: <unk> and the last id never occur."""
    rng = random.Random(seed)
    words = list(range(3, vocab_size - 1))
    weights = [1 / r for r in range(1, len(words) + 1)]
    return [rng.choices(words, weights, k=rng.randint(0, 8)) for _ in range(n)]


def padded(sentence: list[int], order: int) -> list[int]:
    return [BOS] * (order - 1) + sentence + [EOS]


# ---------------------------------------------------------------- hand-computed values (bigrams)


def test_mle_bigram_matches_jurafsky_martin():
    lm = jm("mle")
    # c(<s> I) = 2 of c(<s>) = 3; c(I am) = 2 of c(I) = 3; c(am Sam) = 1 of c(am) = 2; ...
    assert lm.prob([], w("I")) == 2 / 3
    assert lm.prob([BOS], w("Sam")) == 1 / 3
    assert lm.prob([w("I")], w("am")) == 2 / 3
    assert lm.prob([w("I")], w("do")) == 1 / 3
    assert lm.prob([w("am")], w("Sam")) == 1 / 2
    assert lm.prob([w("Sam")], EOS) == 1 / 2
    assert lm.prob([w("ham")], EOS) == 1.0
    assert lm.prob([w("I")], w("ham")) == 0.0  # never seen after "I"
    assert lm.prob([w("I")], BOS) == 0.0  # <s> is never predicted
    # a context never seen in training: prob says 0, distribution refuses
    assert lm.prob([UNK], w("I")) == 0.0
    with pytest.raises(ValueError, match="never seen"):
        lm.distribution([UNK])


def test_mle_trigram_uses_two_tokens_of_context():
    lm = jm("mle", order=3)
    assert lm.prob([], w("I")) == 2 / 3  # c(<s> <s> I) / c(<s> <s>)
    assert lm.prob([w("I")], w("am")) == 1 / 2  # context padded to (<s>, I): c(<s> I am) / c(<s> I)
    assert lm.prob([w("Sam"), w("I")], w("am")) == 1.0
    assert lm.prob([w("do"), w("Sam"), w("I")], w("am")) == 1.0  # only the last two count


def test_add_one_and_add_k_bigram():
    lm = jm("add-k")  # k = 1: (c(h w) + 1) / (c(h) + 12)
    assert lm.prob([], w("I")) == (2 + 1) / (3 + 12)
    assert lm.prob([w("I")], w("am")) == (2 + 1) / (3 + 12)
    assert lm.prob([w("I")], w("ham")) == (0 + 1) / (3 + 12)
    assert lm.prob([w("ham")], EOS) == (1 + 1) / (1 + 12)
    assert lm.prob([w("ham")], UNK) == (0 + 1) / (1 + 12)
    assert lm.prob([UNK], w("I")) == 1 / 12  # unseen context: uniform over the 12
    lm = jm("add-k", k=0.5)
    assert lm.prob([w("I")], w("am")) == pytest.approx((2 + 0.5) / (3 + 0.5 * 12), rel=1e-15)


def test_kneser_ney_bigram_by_hand():
    lm = jm("kneser-ney", discount=0.75)
    d = 0.75
    # Unigram level: continuation counts N1+(• w), the number of distinct left neighbours:
    #   I: {<s>, Sam} = 2, am: {I} = 1, Sam: {<s>, am} = 2, </s>: {Sam, am, ham} = 3,
    #   do, not, like, green, eggs, and, ham: 1 each. Total N1+(• •) = 15 bigram types,
    #   N1+(•) = 11 distinct tokens with a count, and the uniform base is 1/12.
    lam_1 = d * 11 / 15

    def p1(n_left: int) -> float:
        return max(n_left - d, 0) / 15 + lam_1 / 12

    # "I" is followed by am (2) and do (1): c(I) = 3, N1+(I •) = 2.
    assert lm.prob([w("I")], w("am")) == pytest.approx((2 - d) / 3 + d * 2 / 3 * p1(1), rel=1e-12)
    assert lm.prob([w("I")], w("ham")) == pytest.approx(d * 2 / 3 * p1(1), rel=1e-12)
    assert lm.prob([w("I")], UNK) == pytest.approx(d * 2 / 3 * lam_1 / 12, rel=1e-12)
    # <s> is followed by I (2) and Sam (1).
    assert lm.prob([], w("Sam")) == pytest.approx((1 - d) / 3 + d * 2 / 3 * p1(2), rel=1e-12)
    # "ham" is followed only by </s>.
    assert lm.prob([w("ham")], EOS) == pytest.approx((1 - d) / 1 + d * 1 / 1 * p1(3), rel=1e-12)
    # an unseen context falls back entirely on the unigram level
    assert lm.prob([UNK], w("I")) == pytest.approx(p1(2), rel=1e-12)
    assert lm.prob([UNK], UNK) == pytest.approx(lam_1 / 12, rel=1e-12)


def test_kneser_ney_trigram_uses_continuation_counts_below_the_top():
    lm = jm("kneser-ney", order=3, discount=0.75)
    d = 0.75
    lam_1 = d * 11 / 15

    def p1(n_left: int) -> float:  # the unigram level is the same as in the bigram model
        return max(n_left - d, 0) / 15 + lam_1 / 12

    # Bigram level, continuation counts N1+(• h w): (<s> I) and (<s> Sam) each follow only <s>,
    # so the context <s> has total 2 and 2 types (raw counts would give 3).
    p2_i_after_bos = (1 - d) / 2 + d * 2 / 2 * p1(2)
    # Trigram level, raw counts: c(<s> <s> I) = 2, c(<s> <s> Sam) = 1.
    expected = (2 - d) / 3 + d * 2 / 3 * p2_i_after_bos
    assert lm.prob([], w("I")) == pytest.approx(expected, rel=1e-12)
    # N1+(• I am) = |{<s>, Sam}| = 2, N1+(• I do) = |{<s>}| = 1; c(<s> I am) = c(<s> I do) = 1.
    p2_am_after_i = (2 - d) / 3 + d * 2 / 3 * p1(1)
    expected = (1 - d) / 2 + d * 2 / 2 * p2_am_after_i
    assert lm.prob([w("I")], w("am")) == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------- normalisation and consistency


def contexts_for(corpus: list[list[int]], order: int, rng: random.Random) -> tuple[list, list]:
    """Some contexts seen in training and some never seen (using ids absent from the corpus)."""
    seen = [padded(s, order)[:t] for s in corpus for t in range(order - 1, len(s) + order)]
    seen = rng.sample(seen, min(25, len(seen)))
    vocab_size = 12
    unseen = [[vocab_size - 1] * (order - 1), [UNK, 3, vocab_size - 1][: order - 1]]
    unseen += [[rng.randrange(vocab_size) for _ in range(order - 1)] + [UNK] for _ in range(3)]
    return seen, unseen if order > 1 else []


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_distribution_sums_to_one_and_matches_prob(smoothing: str, order: int):
    corpus = random_corpus(order)
    lm = NGramLM(order, 12, smoothing, k=0.3).fit(corpus)
    rng = random.Random(order)
    seen, unseen = contexts_for(corpus, order, rng)
    for context in seen + (unseen if smoothing != "mle" else []):
        p = lm.distribution(context)
        assert p.dtype == torch.float64 and p.shape == (12,)
        one = torch.tensor(1.0, dtype=torch.float64)
        torch.testing.assert_close(p.sum(), one, rtol=0, atol=1e-12)
        assert p[BOS] == 0 and (p >= 0).all()
        if smoothing != "mle":
            assert (p[1:] > 0).all()
        for token in rng.sample(range(12), 6):
            assert p[token].item() == lm.prob(context, token)
    if smoothing == "mle":
        for context in unseen:
            with pytest.raises(ValueError, match="never seen"):
                lm.distribution(context)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_kneser_ney_level_sums_to_one(order: int):
    corpus = random_corpus(10 + order)
    lm = NGramLM(order, 12).fit(corpus)
    rng = random.Random(0)
    seen, unseen = contexts_for(corpus, order, rng)
    for context in seen + unseen:
        for length in range(order):  # the level-(length + 1) distribution p_m(. | h), |h| = length
            h = tuple(context[len(context) - length :]) if length else ()
            p = lm._kn_vector(h)
            assert math.isclose(p.sum(), 1.0, rel_tol=0, abs_tol=1e-12)
            assert p[BOS] == 0 and (p[1:] > 0).all()


def test_context_is_padded_or_truncated_to_order_minus_one():
    lm = jm("kneser-ney", order=3)
    i, am = w("I"), w("am")
    assert lm.prob([], i) == lm.prob([BOS], i) == lm.prob([BOS, BOS], i)
    assert lm.prob([i], am) == lm.prob([BOS, i], am)
    assert lm.prob([w("ham"), w("Sam"), i], am) == lm.prob([w("Sam"), i], am)
    assert lm.prob(torch.tensor([w("Sam"), i]), am) == lm.prob(np.array([w("Sam"), i]), am)
    unigram = jm("kneser-ney", order=1)
    assert unigram.prob([i, am], w("Sam")) == unigram.prob([], w("Sam"))
    torch.testing.assert_close(unigram.distribution([i]), unigram.distribution([]))


def test_mle_unigram_counts_empty_sentences_as_end_of_sentence():
    lm = NGramLM(1, 5, "mle").fit([[], [], [3]])  # predicted: </s>, </s>, 3, </s>
    assert lm.prob([], EOS) == 3 / 4
    assert lm.prob([], 3) == 1 / 4
    assert lm.prob([], 4) == 0.0


@given(
    corpus=st.lists(st.lists(st.integers(1, 6), max_size=6), min_size=1, max_size=8),
    order=st.integers(1, 4),
    discount=st.floats(0.05, 0.95),
    context=st.lists(st.integers(0, 7), max_size=5),
)
@settings(max_examples=60, deadline=None)
def test_kneser_ney_normalised_for_any_corpus_and_context(corpus, order, discount, context):
    lm = NGramLM(order, 8, discount=discount).fit(corpus)
    p = lm.distribution(context)
    assert math.isclose(p.sum().item(), 1.0, rel_tol=0, abs_tol=1e-12)
    assert p[BOS] == 0 and (p[1:] > 0).all()
    assert [lm.prob(context, t) for t in range(8)] == p.tolist()
    expected = reference_kn(corpus, order, 8, discount, context, token=3)
    assert lm.prob(context, 3) == pytest.approx(expected, rel=1e-12)


@given(
    corpus=st.lists(st.lists(st.integers(1, 6), max_size=6), min_size=1, max_size=8),
    order=st.integers(1, 4),
)
@settings(max_examples=40, deadline=None)
def test_mle_is_relative_frequency(corpus, order):
    lm = NGramLM(order, 8, "mle").fit(corpus)
    grams = Counter()
    for sentence in corpus:
        x = padded(sentence, order)
        grams.update(tuple(x[t - order + 1 : t + 1]) for t in range(order - 1, len(x)))
    contexts = Counter()
    for g, c in grams.items():
        contexts[g[:-1]] += c
    for g, c in grams.items():
        assert lm.prob(list(g[:-1]), g[-1]) == pytest.approx(c / contexts[g[:-1]], rel=1e-15)


def reference_kn(corpus, order, vocab_size, d, context, token) -> float:
    """A slow, direct implementation of interpolated Kneser-Ney, to compare against."""
    levels = {order: Counter()}
    for s in corpus:
        x = padded(s, order)
        levels[order].update(tuple(x[t - order + 1 : t + 1]) for t in range(order - 1, len(x)))
    for m in range(order - 1, 0, -1):
        levels[m] = Counter(g[1:] for g in levels[m + 1])  # one per distinct left extension

    def p(h: tuple, m: int) -> float:
        lower = 1 / (vocab_size - 1) if m == 1 else p(h[1:], m - 1)
        followers = {g[-1]: c for g, c in levels[m].items() if g[:-1] == h}
        if not followers:
            return lower
        total = sum(followers.values())
        count = followers.get(token, 0)
        return max(count - d, 0) / total + d * len(followers) / total * lower

    h = tuple([BOS] * (order - 1) + list(context))[len(context) :] if order > 1 else ()
    return p(h, order)


# ---------------------------------------------------------------- evaluation


HELD_OUT = [[11, 3], [3, 11, 4], [], [5, 3, 3, 3, 3, 3, 3]]  # id 11 never occurs in training


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
def test_nll_is_sum_of_minus_log_prob(smoothing: str, order: int):
    corpus = random_corpus(3)
    lm = NGramLM(order, 12, smoothing).fit(corpus)
    for sentences in [corpus[:10], HELD_OUT]:
        probs = [
            lm.prob(x[:t], x[t])  # the whole history: prob keeps the last order - 1 ids itself
            for x in (padded(s, order) for s in sentences)
            for t in range(order - 1, len(x))
        ]
        assert len(probs) == sum(len(s) + 1 for s in sentences)
        total, n = lm.nll(sentences)
        assert n == len(probs)
        if all(p > 0 for p in probs):
            assert total == pytest.approx(-sum(math.log(p) for p in probs), rel=1e-12)
            assert lm.perplexity(sentences) == pytest.approx(math.exp(total / n), rel=1e-12)
        else:
            assert total == math.inf and lm.perplexity(sentences) == math.inf
        zeros = sum(p == 0 for p in probs)
        assert lm.zero_probability_rate(sentences) == zeros / n


@pytest.mark.parametrize("order", [1, 2, 3])
def test_smoothing_removes_zero_probabilities_on_held_out_text(order: int):
    corpus = random_corpus(4)
    mle = NGramLM(order, 12, "mle").fit(corpus)
    assert mle.nll(HELD_OUT)[0] == math.inf
    assert 0 < mle.zero_probability_rate(HELD_OUT) < 1
    assert mle.zero_probability_rate(corpus) == 0  # training text has no zeros
    for smoothing in ["add-k", "kneser-ney"]:
        lm = NGramLM(order, 12, smoothing).fit(corpus)
        for x in (padded(s, order) for s in HELD_OUT):
            assert all(lm.prob(x[:t], x[t]) > 0 for t in range(order - 1, len(x)))
        assert lm.zero_probability_rate(HELD_OUT) == 0
        assert math.isfinite(lm.nll(HELD_OUT)[0])


def test_kneser_ney_beats_add_one_on_held_out_text():
    corpus = random_corpus(5, n=200)
    held_out = random_corpus(6, n=50)
    kn = NGramLM(3, 12).fit(corpus).perplexity(held_out)
    add_one = NGramLM(3, 12, "add-k").fit(corpus).perplexity(held_out)
    assert kn < add_one


def test_fit_returns_self_and_refitting_replaces_the_counts():
    lm = NGramLM(2, 12, "mle")
    assert lm.fit([[3, 4]]) is lm
    assert lm.prob([3], 4) == 1.0
    lm.fit([[3, 5]])
    assert lm.prob([3], 4) == 0.0 and lm.prob([3], 5) == 1.0


# ---------------------------------------------------------------- sampling


def test_sampling_is_reproducible_and_never_emits_bos():
    lm = NGramLM(3, 12).fit(random_corpus(7))
    first = [lm.sample(torch.Generator().manual_seed(0)) for _ in range(3)]
    g1, g2 = torch.Generator().manual_seed(123), torch.Generator().manual_seed(123)
    a = [lm.sample(g1, max_len=10) for _ in range(20)]
    b = [lm.sample(g2, max_len=10) for _ in range(20)]
    assert a == b
    assert first[0] == first[1] == first[2]
    assert all(len(s) <= 10 for s in a)
    assert all(1 < t < 12 for s in a for t in s)  # no <s> (0), no </s> (1)
    assert len({tuple(s) for s in a}) > 1
    assert lm.sample(g1, max_len=0) == []


@pytest.mark.parametrize("order", [2, 3])
def test_mle_on_a_deterministic_corpus_reproduces_it(order: int):
    sentence = [5, 3, 9, 4, 7]
    lm = NGramLM(order, 12, "mle").fit([sentence])
    for seed in range(5):
        assert lm.sample(torch.Generator().manual_seed(seed)) == sentence
    assert lm.sample(torch.Generator().manual_seed(0), max_len=2) == sentence[:2]


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"order": 0}, "order"),
        ({"order": 2.0}, "order"),
        ({"vocab_size": 2}, "vocab_size"),
        ({"smoothing": "laplace"}, "smoothing"),
        ({"k": 0}, "k to be a positive"),
        ({"k": -1.0}, "k to be a positive"),
        ({"discount": 1.0}, "discount"),
        ({"discount": 0}, "discount"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, match):
    args = {"order": 2, "vocab_size": 10} | kwargs
    with pytest.raises(ValueError, match=match):
        NGramLM(**args)


def test_bad_corpora_raise():
    lm = NGramLM(2, 10)
    with pytest.raises(ValueError, match="empty corpus"):
        lm.fit([])
    with pytest.raises(IndexError, match="token id 10 in sentence 1"):
        lm.fit([[3], [4, 10]])
    with pytest.raises(IndexError, match="token id -1"):
        lm.fit([[-1]])
    with pytest.raises(IndexError, match="<s>"):
        lm.fit([[3, BOS, 4]])
    with pytest.raises(TypeError, match="integer token ids"):
        lm.fit([[3, 1.5]])
    lm.fit([[3, 4]])
    with pytest.raises(IndexError, match="<s>"):
        lm.nll([[BOS, 3]])
    with pytest.raises(IndexError, match="token id 12"):
        lm.zero_probability_rate([[12]])
    with pytest.raises(IndexError, match="token id 10"):
        lm.prob([3], 10)
    with pytest.raises(IndexError, match="in the context"):
        lm.distribution([3, 99])


def test_using_an_unfitted_model_raises():
    lm = NGramLM(2, 10)
    for call in [
        lambda: lm.prob([3], 4),
        lambda: lm.distribution([3]),
        lambda: lm.nll([[3]]),
        lambda: lm.perplexity([[3]]),
        lambda: lm.zero_probability_rate([[3]]),
        lambda: lm.sample(torch.Generator()),
    ]:
        with pytest.raises(RuntimeError, match=r"call fit\(\) first"):
            call()


def test_n_stored_counts_the_distinct_ngrams_of_every_level_kept():
    corpus = [[3, 4, 3], [4]]  # padded bigrams: <s>3 34 43 3</s> <s>4 4</s>
    assert NGramLM(2, 5, smoothing="mle").fit(corpus).n_stored() == 6
    # Kneser–Ney also keeps the unigram level: the distinct tokens 3, 4, </s>.
    assert NGramLM(2, 5).fit(corpus).n_stored() == 6 + 3


def test_token_probs_are_the_per_token_factors_of_nll():
    corpus = [[3, 4, 3], [4, 4]]
    model = NGramLM(2, 5).fit(corpus)
    probs = model.token_probs([[3, 4], [4]])
    assert probs.dtype == torch.float64 and probs.shape == (5,)  # 3 words + 2 </s>
    total, n = model.nll([[3, 4], [4]])
    assert n == 5 and -probs.log().sum().item() == pytest.approx(total)
    assert probs[0].item() == model.prob([], 3)


def test_sentence_nlls_are_the_per_sentence_terms_of_nll():
    model = NGramLM(2, 5).fit([[3, 4, 3], [4, 4]])
    sentences = [[3, 4], [4], []]
    nlls = model.sentence_nlls(sentences)
    assert nlls.dtype == torch.float64 and nlls.shape == (3,)
    assert nlls.sum().item() == pytest.approx(model.nll(sentences)[0])
    assert nlls[1].item() == pytest.approx(-math.log(model.prob([], 4) * model.prob([4], 1)))
    unseen = NGramLM(2, 5, smoothing="mle").fit([[3]]).sentence_nlls([[3], [3, 3]])
    assert unseen[0] < math.inf and unseen[1] == math.inf
