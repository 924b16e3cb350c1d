"""Chapter 9's `sampling_explorer`: its context, temperature, top-k, top-p and seed controls against
`seqmodels.decoding` itself."""

import pytest
import torch

from seqmodels.decoding import (
    conditioned,
    filter_logits,
    lm_next_log_probs,
    sample_sequences,
    temperature,
    top_k_filter,
    top_p_filter,
)
from seqmodels.plots import use_book_style
from seqmodels.rnn import RNNLM
from seqmodels.seeding import make_generator, seed_everything
from seqmodels.transformer import TransformerLM
from seqmodels.vocab import Vocabulary
from seqmodels.widgets.decoding import sampling_explorer
from widget_helpers import BIBLE_LIKE, assert_legible, encoded

TEXT = BIBLE_LIKE[:6]
SAMPLES, MAX_LEN = 3, 6


@pytest.fixture(scope="module")
def data():
    use_book_style(svg=False)
    vocab, _ = encoded(TEXT)
    seed_everything(0)
    model = TransformerLM(len(vocab), d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=24)
    with torch.no_grad():  # sharper than an untrained model's near-uniform distributions
        model.output.weight.mul_(8.0)
    return model.eval(), vocab


@pytest.fixture
def explorer(data):
    model, vocab = data
    return sampling_explorer(
        model, vocab, context="the king said", seed=3, samples=SAMPLES, max_len=MAX_LEN
    )


def expected(data, ids, tau=1.0, k=None, p=None, seed=3):
    """What the library says for this context and these settings: logits, kept ids, samples."""
    model, vocab = data
    f = conditioned(lm_next_log_probs(model), ids)
    z = f(torch.tensor([[vocab.bos]]))[0].double()
    kept = torch.isfinite(filter_logits(z, tau, k, p)).nonzero()[:, 0].tolist()
    samples = sample_sequences(f, SAMPLES, MAX_LEN, make_generator(seed), tau, k, p)
    return z, set(kept), samples


def test_the_default_view_is_the_library_s_nucleus_and_samples(data, explorer):
    model, vocab = data
    r = explorer.result
    assert r["ids"] == vocab.encode(["the", "king", "said"]) and r["unknown"] == []
    assert (r["temperature"], r["top_k"], r["top_p"], r["seed"]) == (1.0, None, 0.9, 3)
    z, kept, samples = expected(data, r["ids"], p=0.9)
    assert torch.allclose(r["probs"], z.exp(), atol=0, rtol=1e-12)
    # the kept set is top_p_filter's, most probable first, and its mass reaches p (one fewer does not)
    assert (
        set(r["kept"]) == kept == set(torch.isfinite(top_p_filter(z, 0.9)).nonzero()[:, 0].tolist())
    )
    assert r["kept"] == sorted(kept, key=lambda i: -r["probs"][i])
    assert r["kept_words"] == vocab.decode(r["kept"]) and r["n_kept"] == len(kept)
    mass = float(torch.softmax(z, -1)[r["kept"]].sum())
    assert r["kept_mass"] == pytest.approx(mass, rel=1e-12) and r["kept_mass"] >= 0.9
    assert float(torch.softmax(z, -1)[r["kept"][:-1]].sum()) < 0.9
    assert r["model_mass"] == pytest.approx(float(z.exp()[r["kept"]].sum()), rel=1e-12)
    # p~ is the kept tokens' renormalised probabilities, zero elsewhere
    p_tilde = r["sampling_probs"]
    assert (
        float(p_tilde.sum()) == pytest.approx(1.0) and set(p_tilde.nonzero()[:, 0].tolist()) == kept
    )
    assert torch.allclose(p_tilde[r["kept"]], z.exp()[r["kept"]] / r["model_mass"], rtol=1e-9)
    assert r["samples"] == samples and r["sample_words"] == [vocab.decode(s) for s in samples]
    assert r["finished"] == [len(s) < MAX_LEN for s in samples]
    assert all(vocab.eos not in s for s in samples)
    assert r["shown"] == z.argsort(descending=True, stable=True)[:10].tolist()


def test_top_k_keeps_the_k_most_probable_tokens(data, explorer):
    first = explorer.result
    explorer.set(top_k=4, top_p=1.0)
    r = explorer.result
    assert (r["top_k"], r["top_p"]) == (4, None)  # p = 1 switches top-p off
    z, kept, samples = expected(data, r["ids"], k=4)
    assert r["n_kept"] == 4 and r["kept"] == z.topk(4).indices.tolist()
    assert set(r["kept"]) == set(torch.isfinite(top_k_filter(z, 4)).nonzero()[:, 0].tolist())
    assert r["kept_mass"] == pytest.approx(float(z.softmax(-1).topk(4).values.sum()), rel=1e-12)
    assert r["samples"] == samples
    assert all(t in r["kept"] for t in (s[0] for s in r["samples"] if s))  # first tokens kept
    # top-k off and top-p off: every token is kept, with all the mass
    r = explorer.set(top_k=0)
    assert r["top_k"] is None and r["n_kept"] == len(data[1]) and r["kept_mass"] == pytest.approx(1)
    assert r["probs"].equal(first["probs"])  # the settings never change the model's p


def test_temperature_sharpens_and_the_nucleus_follows(data, explorer):
    sizes = {}
    for tau in (0.5, 1.0, 2.0):
        explorer.controls["temperature"].value = tau
        r = explorer.result
        z, kept, samples = expected(data, r["ids"], tau=tau, p=0.9)
        assert torch.allclose(r["tempered"], torch.softmax(temperature(z, tau), -1), rtol=1e-12)
        assert set(r["kept"]) == kept and r["samples"] == samples
        assert r["kept_mass"] == pytest.approx(float(r["tempered"][r["kept"]].sum()), rel=1e-12)
        assert r["kept_mass"] >= 0.9
        sizes[tau] = r["n_kept"]
    # a colder distribution puts more mass on its head, so the nucleus can only shrink
    assert sizes[0.5] <= sizes[1.0] <= sizes[2.0] and sizes[0.5] < sizes[2.0]


def test_the_transforms_compose_in_the_library_s_order(data, explorer):
    r = explorer.set(temperature=2.0, top_k=3, top_p=0.5)
    z, kept, samples = expected(data, r["ids"], tau=2.0, k=3, p=0.5)
    by_hand = top_p_filter(top_k_filter(temperature(z, 2.0), 3), 0.5)
    assert set(r["kept"]) == kept == set(torch.isfinite(by_hand).nonzero()[:, 0].tolist())
    assert 1 <= r["n_kept"] <= 3
    assert torch.allclose(r["sampling_probs"], torch.softmax(by_hand, -1), rtol=1e-12)
    assert r["samples"] == samples


def test_the_seed_control_reproduces_the_library_s_samples(data, explorer):
    first = explorer.result["samples"]
    explorer.controls["seed"].value = 11
    r = explorer.result
    assert r["seed"] == 11 and r["samples"] == expected(data, r["ids"], p=0.9, seed=11)[2]
    assert r["samples"] != first
    explorer.controls["seed"].value = 3
    assert explorer.result["samples"] == first  # the same seed, the same continuations


def test_typing_a_context_changes_the_distribution(data, explorer):
    model, vocab = data
    first = explorer.result
    explorer.controls["context"].value = "And Moses went, quickly"  # case, punctuation, unknown
    r = explorer.result
    assert r["words"] == ["and", "moses", "went", ",", "quickly"]
    assert r["unknown"] == [",", "quickly"]
    assert r["ids"] == vocab.encode(r["words"]) and r["ids"][-2:] == [vocab.unk] * 2
    z, kept, samples = expected(data, r["ids"], p=0.9)
    assert torch.allclose(r["probs"], z.exp(), rtol=1e-12) and not r["probs"].equal(first["probs"])
    assert set(r["kept"]) == kept and r["samples"] == samples
    # an empty context: the distribution of the first word, after <s> alone
    r = explorer.set(context="   ")
    assert r["ids"] == [] and set(r["kept"]) == expected(data, [], p=0.9)[1]
    # a context longer than the model's positions keeps its last tokens
    r = explorer.set(context=" ".join(["the king went up"] * 10))
    longest = model.max_len - 1 - MAX_LEN
    assert r["ids"] == vocab.encode(("the king went up " * 10).split())[-longest:]
    assert r["samples"] == expected(data, r["ids"], p=0.9)[2]


def test_values_outside_the_sliders_are_clamped_not_crashing(data, explorer):
    explorer.controls["temperature"].value = 0.0  # clamped to the slider's minimum, 0.1
    assert explorer.result["temperature"] == pytest.approx(0.1)
    explorer.controls["top_k"].value = -5  # clamped to 0: off
    assert explorer.result["top_k"] is None
    explorer.controls["top_p"].value = 0.0  # clamped to 0.05: the most probable token alone
    r = explorer.result
    assert r["top_p"] == pytest.approx(0.05) and r["n_kept"] == 1
    assert r["kept"] == [int(r["probs"].argmax())]
    explorer.controls["seed"].value = 10**6
    assert explorer.result["seed"] == explorer.controls["seed"].max


def test_it_works_with_a_recurrent_language_model(data):
    _, vocab = data
    seed_everything(1)
    rnn = RNNLM(len(vocab), embed_dim=8, hidden_dim=12, core="gru")
    explorer = sampling_explorer(rnn, vocab, context="the lord", top_k=2, top_p=1.0)
    r = explorer.result
    assert r["n_kept"] == 2
    f = conditioned(lm_next_log_probs(rnn), r["ids"])
    assert r["samples"] == sample_sequences(f, 3, 12, make_generator(0), 1.0, 2, None)


def test_it_checks_its_arguments(data):
    model, vocab = data
    other = Vocabulary(["a", "b"])
    with pytest.raises(ValueError, match="model's"):
        sampling_explorer(model, other)
    with pytest.raises(ValueError, match="temperature"):
        sampling_explorer(model, vocab, temperature=0.0)
    with pytest.raises(ValueError, match="top_k"):
        sampling_explorer(model, vocab, top_k=-1)
    with pytest.raises(ValueError, match="top_p"):
        sampling_explorer(model, vocab, top_p=1.5)
    with pytest.raises(ValueError, match="samples"):
        sampling_explorer(model, vocab, samples=0)


def test_the_figure_is_legible_on_a_phone_and_a_desktop(explorer):
    assert_legible(explorer.figure)
    explorer.set(temperature=3.0, top_p=1.0)  # a flat distribution: long sample lines
    assert_legible(explorer.figure)
    assert explorer.figure.get_size_inches()[0] <= 5.5
