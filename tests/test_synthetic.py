"""Tests for the agreement language: exact probabilities, entropy, sampling and the n-gram floor."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import pytest
import torch

from seqmodels.synthetic import FILLERS, NOUNS, VERBS, AgreementLanguage
from seqmodels.vocab import Vocabulary

TINY = {"n_nouns": 2, "n_verbs": 2, "n_fillers": 3}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def possible_sentences(lang: AgreementLanguage) -> list[tuple[tuple[int, ...], float]]:
    """Every sentence with non-zero probability, with that probability (brute force)."""
    fillers = [lang.filler_ids] * lang.distance
    out = []
    for s in itertools.product(lang.noun_ids(), *fillers, lang.verb_ids()):
        lp = lang.log_prob(s)
        if lp > -math.inf:
            out.append((s, math.exp(lp)))
    return out


def plug_in_entropy(counts: torch.Tensor) -> float:
    p = counts.double() / counts.sum()
    return float(-(p * p.log()).sum())


def empirical_ngram_entropy(sentences: list[list[int]], order: int, vocab_size: int) -> float:
    """Plug-in H(next token | previous order-1 tokens, <s>-padded) over all tokens of a sample."""
    x = torch.tensor(sentences, dtype=torch.long)
    n, k = x.shape[0], order - 1
    bos = torch.full((n, k), Vocabulary.bos, dtype=torch.long)
    eos = torch.full((n, 1), Vocabulary.eos, dtype=torch.long)
    windows = torch.cat([bos, x, eos], dim=1).unfold(1, k + 1, 1)  # (n, d + 3, k + 1)
    codes = (windows * vocab_size ** torch.arange(k, -1, -1)).sum(-1).flatten()
    _, joint = torch.unique(codes, return_counts=True)
    _, context = torch.unique(codes // vocab_size, return_counts=True)
    return plug_in_entropy(joint) - plug_in_entropy(context)


# ------------------------------------------------------------------------------------ vocabulary


def test_vocabulary_layout():
    lang = AgreementLanguage(distance=3)
    v = lang.vocab
    assert v.itos[:3] == ["<s>", "</s>", "<unk>"]
    assert len(v) == 3 + 2 * 4 + 2 * 4 + 8
    blocks = [*lang.noun_ids(False), *lang.noun_ids(True), *lang.verb_ids(False)]
    blocks += [*lang.verb_ids(True), *lang.filler_ids]
    assert blocks == list(range(3, len(v)))
    assert v.decode(lang.noun_ids(False))[0] == "dog" and v.decode(lang.noun_ids(True))[0] == "dogs"
    assert v.decode(lang.verb_ids(False))[0] == "runs" and v.decode(lang.verb_ids(True))[0] == "run"
    assert lang.vocab is lang.vocab  # cached
    assert lang.verb_position == 4 and lang.sentence_length == 5 and lang.tokens_per_sentence == 6
    assert lang.is_plural(v.stoi["dogs"]) and not lang.is_plural(v.stoi["dog"])
    assert lang.is_plural(v.stoi["run"]) and not lang.is_plural(v.stoi["runs"])


def test_largest_vocabulary_has_no_duplicates():
    assert len(NOUNS) >= 8 and len(VERBS) >= 8 and len(FILLERS) >= 16
    lang = AgreementLanguage(1, n_nouns=len(NOUNS), n_verbs=len(VERBS), n_fillers=len(FILLERS))
    assert len(lang.vocab) == 3 + 2 * len(NOUNS) + 2 * len(VERBS) + len(FILLERS)


# --------------------------------------------------------------------------------------- entropy


@pytest.mark.parametrize(
    "distance, zipf_s, p_plural", [(0, 1.0, 0.5), (1, 0.0, 0.8), (2, 1.3, 0.3)]
)
def test_entropy_equals_enumeration_over_all_id_sequences(distance, zipf_s, p_plural):
    lang = AgreementLanguage(distance, zipf_s=zipf_s, p_plural=p_plural, **TINY)
    probs = []
    for s in itertools.product(range(len(lang.vocab)), repeat=lang.sentence_length):
        lp = lang.log_prob(s)
        if lp > -math.inf:
            probs.append(math.exp(lp))
    assert len(probs) == 2 * 2 * 3**distance * 2  # numbers x nouns x fillers x verbs
    assert math.fsum(probs) == pytest.approx(1.0, abs=1e-12)
    h = -math.fsum(p * math.log(p) for p in probs)
    assert lang.entropy_per_sentence() == pytest.approx(h, abs=1e-12)
    assert lang.entropy_rate() == pytest.approx(h / (distance + 3), abs=1e-12)
    assert lang.perplexity_bound() == pytest.approx(math.exp(h / (distance + 3)))


def test_entropy_closed_form_default():
    lang = AgreementLanguage(4)
    p = torch.arange(1, 9, dtype=torch.float64).reciprocal()
    p /= p.sum()
    h_filler = float(-(p * p.log()).sum())
    expected = math.log(2) + math.log(4) + 4 * h_filler + math.log(4)
    assert lang.entropy_per_sentence() == pytest.approx(expected, abs=1e-12)
    # d = 0: number (1 bit), noun given number (2 bits), verb given number (2 bits) over 3 tokens
    assert AgreementLanguage(0).entropy_rate() == pytest.approx(5 * math.log(2) / 3, abs=1e-12)


@pytest.mark.parametrize("distance", [0, 3, 8])
def test_monte_carlo_nll_matches_entropy_rate(distance):
    lang = AgreementLanguage(distance)
    sentences = lang.sample(20_000, gen(distance))
    nll = torch.tensor([-lang.log_prob(s) for s in sentences], dtype=torch.float64)
    nll /= lang.tokens_per_sentence
    se = float(nll.std()) / math.sqrt(len(nll))
    # (d = 0 has uniform sentences: every -log p equals the entropy and se = 0)
    assert abs(float(nll.mean()) - lang.entropy_rate()) <= 4 * se + 1e-12


# --------------------------------------------------------------------------- exact probabilities


@pytest.mark.parametrize("distance", [0, 1, 4])
def test_chain_rule(distance):
    lang = AgreementLanguage(distance, zipf_s=0.7, p_plural=0.35, n_nouns=3, n_verbs=5)
    for s in lang.sample(50, gen(1)):
        total = 0.0
        for t, token in enumerate([*s, Vocabulary.eos]):
            dist = lang.next_token_distribution(s[:t])
            assert dist.dtype == torch.float64 and dist.shape == (len(lang.vocab),)
            assert float(dist.sum()) == pytest.approx(1.0, abs=1e-12)
            assert dist[Vocabulary.bos] == 0 and dist[Vocabulary.unk] == 0
            total += math.log(dist[token])
        assert total == pytest.approx(lang.log_prob(s), abs=1e-10)


def test_next_token_distribution_by_position():
    lang = AgreementLanguage(2, p_plural=0.25)
    v = lang.vocab
    s = v.encode(["dogs", "old", "very", "run"])
    noun = lang.next_token_distribution([])
    assert float(noun[list(lang.noun_ids(True))].sum()) == pytest.approx(0.25)
    filler = lang.next_token_distribution(s[:1])
    assert torch.equal(filler[list(lang.filler_ids)], lang.filler_probs)
    verb = lang.next_token_distribution(s[:3])
    assert float(verb[list(lang.verb_ids(True))].sum()) == pytest.approx(1.0)
    end = lang.next_token_distribution(s)
    assert end[Vocabulary.eos] == 1.0 and float(end.sum()) == 1.0
    end[0] = 5.0  # a copy: the cached distributions are not affected
    assert lang.next_token_distribution(s)[0] == 0.0


def test_next_token_distribution_rejects_impossible_or_complete_prefix():
    lang = AgreementLanguage(2)
    v = lang.vocab
    with pytest.raises(ValueError, match="impossible prefix"):
        lang.next_token_distribution(v.encode(["old"]))
    with pytest.raises(ValueError, match="impossible prefix"):
        lang.next_token_distribution([Vocabulary.bos, *v.encode(["dog"])])
    with pytest.raises(ValueError, match="impossible prefix"):
        lang.next_token_distribution(v.encode(["dog", "old", "very", "run"]))
    with pytest.raises(ValueError, match="nothing is left to predict"):
        lang.next_token_distribution([*v.encode(["dog", "old", "very", "runs"]), Vocabulary.eos])
    with pytest.raises(IndexError, match="outside the vocabulary"):
        lang.next_token_distribution([len(v)])


def test_impossible_sentences_get_minus_infinity():
    lang = AgreementLanguage(2)
    v = lang.vocab
    good = v.encode(["dog", "old", "very", "runs"])
    assert lang.log_prob(good) > -math.inf
    bad = [
        ["dog", "old", "very", "run"],  # singular noun, plural verb
        ["dogs", "old", "very", "runs"],  # plural noun, singular verb
        ["old", "dog", "very", "runs"],  # filler in noun position
        ["dog", "cat", "very", "runs"],  # noun in filler position
        ["dog", "old", "runs", "runs"],  # verb in filler position
        ["dog", "old", "very", "old"],  # filler in verb position
        ["dog", "old", "runs"],  # too short
        ["dog", "old", "very", "big", "runs"],  # too long
        ["<s>", "old", "very", "runs"],
        ["dog", "old", "<unk>", "runs"],
        ["dog", "old", "very", "runs", "</s>"],  # sentences exclude </s>
        [],
    ]
    for words in bad:
        assert lang.log_prob(v.encode(words)) == -math.inf, words


def test_bad_ids_raise():
    lang = AgreementLanguage(1)
    with pytest.raises(IndexError, match="outside the vocabulary"):
        lang.log_prob([3, len(lang.vocab), 11])
    with pytest.raises(IndexError, match="outside the vocabulary"):
        lang.log_prob([-1, 19, 11])
    with pytest.raises(IndexError, match="outside the vocabulary"):
        lang.is_plural(1000)
    with pytest.raises(ValueError, match="neither a noun nor a verb"):
        lang.is_plural(lang.filler_ids[0])
    with pytest.raises(ValueError, match="neither a noun nor a verb"):
        lang.is_plural(Vocabulary.eos)


# -------------------------------------------------------------------------------------- sampling


def test_sampling_shape_agreement_and_reproducibility():
    lang = AgreementLanguage(5)
    a, b, c = lang.sample(500, gen(7)), lang.sample(500, gen(7)), lang.sample(500, gen(8))
    assert a == b and a != c
    assert lang.sample(0, gen(0)) == []
    fillers, nouns = set(lang.filler_ids), set(lang.noun_ids())
    for s in a:
        assert len(s) == 7 and all(isinstance(i, int) for i in s)
        assert s[0] in nouns and set(s[1:-1]) <= fillers
        assert lang.is_plural(s[0]) == lang.is_plural(s[lang.verb_position])
        assert lang.log_prob(s) > -math.inf


def test_sampling_frequencies():
    lang = AgreementLanguage(3, p_plural=0.3, zipf_s=1.5)
    x = torch.tensor(lang.sample(20_000, gen(3)))
    plural = (x[:, 0] >= lang.noun_ids(True).start).double()
    se = math.sqrt(0.3 * 0.7 / len(plural))
    assert abs(float(plural.mean()) - 0.3) < 4 * se
    fillers = x[:, 1:-1].flatten() - lang.filler_ids.start
    freq = torch.bincount(fillers, minlength=lang.n_fillers).double() / fillers.numel()
    se = (lang.filler_probs * (1 - lang.filler_probs) / fillers.numel()).sqrt()
    assert ((freq - lang.filler_probs).abs() < 4 * se).all()
    nouns = torch.bincount(x[:, 0] - 3, minlength=2 * lang.n_nouns).double() / len(x)
    expected = torch.tensor([0.7 / 4] * 4 + [0.3 / 4] * 4, dtype=torch.float64)
    assert ((nouns - expected).abs() < 4 * (expected * (1 - expected) / len(x)).sqrt()).all()


def test_sample_argument_checks():
    lang = AgreementLanguage(1)
    with pytest.raises(ValueError, match="n_sentences >= 0"):
        lang.sample(-1, gen(0))
    with pytest.raises(TypeError, match="torch.Generator"):
        lang.sample(3, 0)


# ---------------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"distance": -1}, ValueError, "distance >= 0"),
        ({"distance": 2.0}, TypeError, "distance to be an int"),
        ({"distance": 1, "n_nouns": 0}, ValueError, r"n_nouns between 1 and 12"),
        ({"distance": 1, "n_nouns": 13}, ValueError, r"n_nouns between 1 and 12"),
        ({"distance": 1, "n_verbs": 99}, ValueError, r"n_verbs between 1 and 12"),
        ({"distance": 1, "n_fillers": 0}, ValueError, r"n_fillers between 1 and 20"),
        ({"distance": 1, "p_plural": 0.0}, ValueError, r"0 < p_plural < 1"),
        ({"distance": 1, "p_plural": 1}, ValueError, r"0 < p_plural < 1"),
        ({"distance": 1, "p_plural": "half"}, TypeError, "p_plural to be a real number"),
        ({"distance": 1, "zipf_s": -0.5}, ValueError, r"zipf_s >= 0"),
        ({"distance": 1, "zipf_s": math.nan}, ValueError, "zipf_s to be finite"),
    ],
)
def test_bad_parameters(kwargs, error, message):
    with pytest.raises(error, match=message):
        AgreementLanguage(**kwargs)


def test_bad_order():
    with pytest.raises(ValueError, match="order >= 1"):
        AgreementLanguage(2).ngram_floor(0)


# ------------------------------------------------------------------------------------ n-gram floor


@pytest.mark.parametrize(
    "distance, kwargs",
    [
        (0, {**TINY, "p_plural": 0.3}),
        (1, {**TINY, "zipf_s": 0.0}),
        (3, {**TINY, "zipf_s": 1.3, "p_plural": 0.3}),
        (4, {"n_nouns": 2, "n_verbs": 3, "n_fillers": 2, "zipf_s": 0.5, "p_plural": 0.6}),
    ],
)
def test_ngram_floor_equals_brute_force(distance, kwargs):
    """H(next | <s>-padded window of order-1 tokens), positions pooled, by full enumeration."""
    lang = AgreementLanguage(distance, **kwargs)
    sentences = possible_sentences(lang)
    n_tokens = lang.tokens_per_sentence
    for order in range(1, distance + 5):
        k = order - 1
        joint: dict[tuple[int, ...], float] = defaultdict(float)
        for s, p in sentences:
            padded = (Vocabulary.bos,) * k + s + (Vocabulary.eos,)
            for t in range(n_tokens):
                joint[padded[t : t + k + 1]] += p / n_tokens
        context: dict[tuple[int, ...], float] = defaultdict(float)
        for key, p in joint.items():
            context[key[:-1]] += p
        h = -math.fsum(p * math.log(p / context[key[:-1]]) for key, p in joint.items())
        assert lang.ngram_floor(order) == pytest.approx(h, abs=1e-12), order


@pytest.mark.parametrize("distance", [0, 1, 2, 4, 8])
def test_ngram_floor_shape(distance):
    lang = AgreementLanguage(distance)
    floors = [lang.ngram_floor(order) for order in range(1, distance + 5)]
    for order, floor in enumerate(floors, start=1):
        if order - 1 >= distance + 1:
            assert floor == pytest.approx(lang.entropy_rate(), abs=1e-12)
        else:
            assert floor > lang.entropy_rate() + 1e-3
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(floors))


@pytest.mark.parametrize("distance, orders", [(2, [1, 2, 3, 4]), (4, [1, 2, 3, 4])])
def test_ngram_floor_matches_large_sample(distance, orders):
    lang = AgreementLanguage(distance)
    sentences = lang.sample(200_000, gen(11))
    for order in orders:
        estimate = empirical_ngram_entropy(sentences, order, len(lang.vocab))
        assert estimate == pytest.approx(lang.ngram_floor(order), abs=0.01), order


def test_agreement_scores_the_true_model_as_perfect_and_a_number_blind_one_as_chance():
    lang = AgreementLanguage(distance=2, p_plural=0.5)
    sentences = lang.sample(200, torch.Generator().manual_seed(0))
    verb = lang.verb_position
    true = torch.stack([lang.next_token_distribution(s[:verb]) for s in sentences])
    assert lang.agreement(true, sentences) == (1.0, 1.0)
    blind = true.clone()
    for i in range(len(sentences)):  # spread each verb mass evenly over both numbers
        mass = blind[i, lang.verb_ids()].sum()
        blind[i, lang.verb_ids()] = mass / len(lang.verb_ids())
    share, accuracy = lang.agreement(blind, sentences)
    assert share == pytest.approx(0.5) and accuracy == 0.0  # ties are not "more"
    wrong = true[:, list(lang.verb_ids(True)) + list(lang.verb_ids(False))]
    swapped = true.clone()
    swapped[:, list(lang.verb_ids())] = wrong
    assert lang.agreement(swapped, sentences) == (0.0, 0.0)
    with pytest.raises(ValueError, match="verb_probs"):
        lang.agreement(true[:, :5], sentences)


def test_stream_puts_each_sentence_then_eos_and_verbs_where_the_docstring_says():
    lang = AgreementLanguage(distance=3)
    sentences = lang.sample(4, torch.Generator().manual_seed(1))
    stream = lang.stream(sentences)
    assert stream.shape == (4 * lang.tokens_per_sentence,)
    assert stream.tolist() == [t for s in sentences for t in (*s, Vocabulary.eos)]
    for i, s in enumerate(sentences):
        assert stream[i * lang.tokens_per_sentence + lang.verb_position] == s[-1]
    with pytest.raises(ValueError, match="at least one"):
        lang.stream([])


def test_reversal_targets_are_the_reversed_symbols_without_noise():
    from seqmodels.synthetic import ReversalTask

    task = ReversalTask(n_symbols=5, noise=0.5)
    g = torch.Generator().manual_seed(0)
    pairs = task.sample(500, 2, 7, g)
    noise = task.noise_id
    assert task.vocab.decode([noise]) == ["#"]
    for source, target in pairs:
        symbols = [t for t in source if t != noise]
        assert target == symbols[::-1] and 2 <= len(target) <= 7
        assert all(3 <= t < 3 + 5 for t in symbols)
        assert all(source[i + 1] != noise for i, t in enumerate(source) if t == noise)
    share = sum(t == noise for s, _ in pairs for t in s) / sum(len(t) for _, t in pairs)
    assert 0.45 < share < 0.55  # one noise token before each symbol with probability 1/2
    again = task.sample(500, 2, 7, torch.Generator().manual_seed(0))
    assert again == pairs
    with pytest.raises(ValueError, match="min_length"):
        task.sample(3, 0, 4, g)
    with pytest.raises(ValueError, match="noise"):
        ReversalTask(noise=1.0)


def test_periodic_sentences_put_the_marker_every_period():
    from seqmodels.synthetic import PERIODIC_MARKER as MARKER
    from seqmodels.synthetic import periodic_sentences

    sentences = periodic_sentences(50, 3, 20, torch.Generator().manual_seed(0), period=4)
    assert {len(s) for s in sentences} <= set(range(3, 21)) and len(sentences) == 50
    for s in sentences:
        for p, token in enumerate(s):
            assert (token == MARKER) == (p % 4 == 3)
            assert MARKER <= token < MARKER + 9
