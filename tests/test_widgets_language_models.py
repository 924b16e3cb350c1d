"""Chapter 1's `ngram_explorer`: its order, k and seed controls against `NGramLM` itself."""

import math

import pytest

from seqmodels.ngram import NGramLM
from seqmodels.plots import use_book_style
from seqmodels.seeding import make_generator
from seqmodels.widgets.language_models import K_GRID, ngram_explorer
from widget_helpers import BIBLE_LIKE, assert_legible, encoded

TEXT = BIBLE_LIKE
HELD_OUT = ["the king went out", "and the lord said unto the king", "moses spake unto them"]


@pytest.fixture(scope="module")
def data():
    use_book_style(svg=False)
    vocab, train = encoded(TEXT)
    held_out = [vocab.encode(line.split()) for line in HELD_OUT]
    models = {n: NGramLM(n, len(vocab), smoothing="add-k").fit(train) for n in (1, 2, 3)}
    return vocab, train, held_out, models


@pytest.fixture
def explorer(data):
    vocab, _, held_out, models = data
    return ngram_explorer(models, held_out, vocab, order=2, k=1.0, seed=3)


def reference(data, order, k):
    """A model fitted afresh with this k: what the explorer's numbers must be."""
    vocab, train, _, _ = data
    return NGramLM(order, len(vocab), smoothing="add-k", k=k).fit(train)


def test_the_default_view_is_the_library_s_perplexity_curves_and_sample(data, explorer):
    vocab, _, held_out, _ = data
    r = explorer.result
    assert (r["order"], r["k"], r["seed"]) == (2, 1.0, 3)
    assert r["perplexity"] == pytest.approx(reference(data, 2, 1.0).perplexity(held_out), rel=1e-12)
    assert r["grid"] == sorted(K_GRID)
    for n in (1, 2, 3):
        expected = [reference(data, n, k).perplexity(held_out) for k in r["grid"]]
        assert r["curves"][n] == pytest.approx(expected, rel=1e-12)
    best = min(range(len(r["grid"])), key=r["curves"][2].__getitem__)
    assert (r["best_k"], r["best_perplexity"]) == (r["grid"][best], r["curves"][2][best])
    sample = reference(data, 2, 1.0).sample(make_generator(3), max_len=18)
    assert r["sample"] == sample and r["words"] == vocab.decode(sample)


def test_moving_k_changes_perplexity_and_sample_as_the_library_says(data, explorer):
    vocab, _, held_out, models = data
    first = explorer.result
    explorer.controls["k"].value = 0.01
    r = explorer.result
    assert r["k"] == pytest.approx(0.01)
    expected = reference(data, 2, r["k"])
    assert r["perplexity"] == pytest.approx(expected.perplexity(held_out), rel=1e-12)
    assert r["perplexity"] < first["perplexity"]  # on this text a small k fits better than Laplace
    assert r["sample"] == expected.sample(make_generator(3), max_len=18)
    assert r["curves"] == first["curves"]  # the curves do not depend on the chosen point
    assert all(model.k == 1.0 for model in models.values())  # the chapter's models keep their k


def test_an_off_grid_k_and_another_order_and_seed(data, explorer):
    _, _, held_out, _ = data
    r = explorer.set(order=3, k=10**-1.5, seed=7)
    assert (r["order"], r["seed"]) == (3, 7)
    expected = reference(data, 3, r["k"])
    assert r["perplexity"] == pytest.approx(expected.perplexity(held_out), rel=1e-12)
    assert r["sample"] == expected.sample(make_generator(7), max_len=18)
    assert r["best_perplexity"] == min(r["curves"][3])
    # a unigram model has one context: k hardly changes it, and its curve is flat within 1 %
    flat = explorer.set(order=1)["curves"][1]
    assert max(flat) / min(flat) < 1.01


def test_values_outside_the_sliders_are_clamped_not_crashing(data, explorer):
    _, _, held_out, _ = data
    explorer.controls["k"].value = 1e-9  # below the slider: the widget clamps it to 1e-4
    assert explorer.result["k"] == pytest.approx(1e-4)
    assert math.isfinite(explorer.result["perplexity"])
    explorer.controls["seed"].value = 10**6  # clamped to the slider's maximum
    assert explorer.result["seed"] == explorer.controls["seed"].max


def test_it_checks_its_models_and_arguments(data):
    vocab, train, held_out, models = data
    kneser_ney = {2: NGramLM(2, len(vocab)).fit(train)}
    with pytest.raises(ValueError, match="add-k NGramLM of order 2"):
        ngram_explorer(kneser_ney, held_out, vocab)
    with pytest.raises(ValueError, match="one of"):
        ngram_explorer(models, held_out, vocab, order=5)
    with pytest.raises(ValueError, match="held-out"):
        ngram_explorer(models, [], vocab)
    with pytest.raises(ValueError, match="k > 0"):
        ngram_explorer(models, held_out, vocab, k=0.0)


def test_the_figure_is_legible_on_a_phone_and_a_desktop(explorer):
    assert_legible(explorer.figure)
