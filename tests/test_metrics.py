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
