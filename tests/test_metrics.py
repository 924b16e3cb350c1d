"""Cross-entropy and perplexity: the chapter's seed examples and the unit conversions."""

import math

import pytest
import torch

from seqmodels.metrics import bits, cross_entropy, entropy, perplexity, perplexity_of_distribution


def test_random_digits_have_perplexity_ten():
    assert perplexity_of_distribution(torch.full((10,), 0.1, dtype=torch.float64)) == pytest.approx(
        10, rel=1e-12
    )


def test_switchboard_recogniser_has_perplexity_about_53():
    # "operator", "sales", "tech support" at 1/4 each; 30,000 names at 1/120,000 each (J&M).
    probs = torch.cat(
        [
            torch.full((3,), 1 / 4, dtype=torch.float64),
            torch.full((30_000,), 1 / 120_000, dtype=torch.float64),
        ]
    )
    h = 3 / 4 * math.log(4) + 1 / 4 * math.log(120_000)
    assert entropy(probs) == pytest.approx(h, rel=1e-12)
    assert perplexity_of_distribution(probs) == pytest.approx(52.64, abs=0.01)


def test_perplexity_is_the_same_in_nats_and_bits():
    total_nll, n = 1234.5, 321
    h = cross_entropy(total_nll, n)
    assert perplexity(total_nll, n) == pytest.approx(math.exp(h)) == pytest.approx(2 ** bits(h))


def test_perplexity_of_a_text_is_its_inverse_probability_per_token():
    probs = torch.tensor(
        [0.5, 0.25, 0.125, 0.9], dtype=torch.float64
    )  # p(w_t | w_<t) of four tokens
    expected = probs.prod().item() ** (-1 / len(probs))
    assert perplexity(-probs.log().sum().item(), len(probs)) == pytest.approx(expected, rel=1e-12)


def test_a_zero_probability_token_gives_infinite_perplexity():
    assert perplexity(math.inf, 10) == math.inf


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cross_entropy(1.0, 0), "positive number of tokens"),
        (lambda: cross_entropy(-1.0, 3), "non-negative"),
        (lambda: entropy([0.5, 0.4]), "sum to 1"),
        (lambda: entropy([1.5, -0.5]), "non-negative"),
        (lambda: entropy(torch.ones(2, 2) / 4), "1-D"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- sequence-to-sequence metrics ----------------------------------------------------------------


def _levenshtein(a, b):
    """The textbook dynamic programme, the oracle for RapidFuzz here."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def test_edit_distance_equals_the_dynamic_programme():
    from seqmodels.metrics import edit_distance

    g = torch.Generator().manual_seed(0)
    alphabet = ["AH", "B", "K", "T", "IY"]
    for _ in range(200):
        n, m = torch.randint(0, 7, (2,), generator=g).tolist()
        a = [alphabet[i] for i in torch.randint(0, 5, (n,), generator=g).tolist()]
        b = [alphabet[i] for i in torch.randint(0, 5, (m,), generator=g).tolist()]
        assert edit_distance(a, b) == _levenshtein(a, b)
    assert edit_distance(["AH", "B"], ["AHB"]) == 2  # tokens, not characters


def test_phoneme_error_rate_and_word_accuracy():
    from seqmodels.metrics import phoneme_error_rate, word_accuracy

    refs = [[["R", "IY", "D"], ["R", "EH", "D"]], [["K", "AE", "T"]]]
    hyps = [["R", "EH", "D"], ["K", "AH", "T", "S"]]
    # closest reference for "read" (distance 0), then 1 substitution + 1 insertion over 3
    assert phoneme_error_rate(hyps, refs) == pytest.approx(2 / 6)
    assert word_accuracy(hyps, refs) == 0.5
    assert phoneme_error_rate([[]], [[["K", "AE", "T"]]]) == 1.0
    with pytest.raises(ValueError, match="as many hypotheses"):
        phoneme_error_rate(hyps, refs[:1])


def test_bleu_and_chrf_are_sacrebleus():
    import sacrebleu

    from seqmodels.metrics import bleu, chrf

    refs = [["the", "lord", "is", "my", "shepherd", "."], ["in", "the", "beginning"]]
    hyps = [["the", "lord", "is", "my", "keeper", "."], ["in", "the", "beginning"]]
    assert bleu(refs, refs) == pytest.approx(100.0)
    assert chrf(refs, refs) == pytest.approx(100.0)
    joined = [" ".join(h) for h in hyps], [[" ".join(r) for r in refs]]
    assert bleu(hyps, refs) == pytest.approx(
        sacrebleu.corpus_bleu(*joined, tokenize="none", force=True).score
    )
    assert chrf(hyps, refs) == pytest.approx(sacrebleu.corpus_chrf(*joined).score)
    assert 0 < bleu(hyps, refs) < 100
