"""Chapter 7's `attention_explorer`: its source and divisor controls against the library's own
decoding (`translate`) with the trained score and with `Attention("scaled_dot")`."""

import copy
import math

import pytest
import torch

from seqmodels.attention import Attention, masked_softmax, weight_entropy
from seqmodels.plots import use_book_style
from seqmodels.seeding import seed_everything
from seqmodels.seq2seq import Seq2Seq, train_seq2seq, translate
from seqmodels.synthetic import ReversalTask
from seqmodels.vocab import Vocabulary
from seqmodels.widgets.attention import MAX_SOURCE, attention_explorer, divided_scores
from widget_helpers import assert_legible

HIDDEN = 16


@pytest.fixture(scope="module")
def data():
    use_book_style(svg=False)
    task = ReversalTask(n_symbols=5, noise=0.3)
    g = seed_everything(0)
    train = task.sample(400, 1, 6, g)
    seed_everything(1)
    model = Seq2Seq(len(task.vocab), len(task.vocab), 8, HIDDEN, attention="dot")
    train_seq2seq(model, train, train[:50], steps=40, batch_size=32, lr=1e-2, generator=g)
    return model, task


@pytest.fixture
def explorer(data):
    model, task = data
    return attention_explorer(model, task.vocab, task.vocab, source="a # b c d")


def decoded(model, ids):
    d = translate(model, [ids], max_len=30)
    return d.outputs[0], d.weights[0].double()


def scaled_dot_copy(model):
    """The same trained weights, read with the library's scaled-dot score."""
    twin = copy.deepcopy(model)
    twin.attention = Attention("scaled_dot", HIDDEN, HIDDEN)
    return twin


def test_the_default_view_is_the_trained_score_beside_the_scaled_dot_score(data, explorer):
    model, task = data
    r = explorer.result
    assert r["tokens"] == ["a", "#", "b", "c", "d"] and r["unknown"] == []
    assert r["ids"] == task.vocab.encode(r["tokens"]) and not r["truncated"]
    assert r["divisor"] == pytest.approx(math.sqrt(HIDDEN)) and r["hidden"] == HIDDEN
    outputs, weights = decoded(model, r["ids"])
    assert r["trained"]["outputs"] == task.vocab.decode(outputs)
    torch.testing.assert_close(r["trained"]["weights"], weights)
    outputs, weights = decoded(scaled_dot_copy(model), r["ids"])
    assert r["divided"]["outputs"] == task.vocab.decode(outputs)
    torch.testing.assert_close(r["divided"]["weights"], weights)
    for panel in ("trained", "divided"):
        w = r[panel]["weights"]
        assert w.shape == (len(r[panel]["outputs"]) + 1, len(r["ids"]))
        torch.testing.assert_close(w.sum(-1), torch.ones(len(w), dtype=w.dtype))
        assert r[panel]["entropy"] == pytest.approx(weight_entropy(w[None]).mean().item())
        assert r[panel]["largest"] == pytest.approx(w.max(-1).values.mean().item())
        assert r[panel]["peaks"] == w.argmax(-1).tolist()


def test_the_divisor_slider_divides_the_scores(data, explorer):
    model, task = data
    r = explorer.set(divisor=1.0)  # the trained score itself
    assert r["divided"]["outputs"] == r["trained"]["outputs"]
    torch.testing.assert_close(r["divided"]["weights"], r["trained"]["weights"])
    # a larger divisor flattens the first row, whose query (the state after <s>) is the same
    rows = []
    for tau in (0.5, 2.0, 8.0, 32.0):
        explorer.controls["divisor"].value = tau
        rows.append(explorer.result["divided"]["weights"][0])
    entropies = [weight_entropy(row[None, None]).item() for row in rows]
    assert entropies == sorted(entropies) and entropies[-1] > entropies[0]
    assert entropies[-1] < math.log(len(r["ids"])) + 1e-9


def test_a_divisor_gives_the_softmax_of_score_over_tau_for_every_score():
    g = seed_everything(3)
    q, k, v = (torch.randn(2, 3, 4, generator=g) for _ in range(3))
    mask = torch.tensor([[True, True, True], [True, True, False]])
    for score in ("dot", "bilinear", "additive"):
        attention = Attention(score, 4, 4)
        plain = attention(q, k, v, mask)[1]
        torch.testing.assert_close(plain, masked_softmax(attention.scores(q, k), mask))
        attention.divisor = 2.5
        context, weights = attention(q, k, v, mask)
        expected = masked_softmax(attention.scores(q, k) / 2.5, mask)
        torch.testing.assert_close(weights, expected)
        torch.testing.assert_close(context, expected @ v)
        assert "divisor=2.5" in repr(attention) and "divisor" not in attention.state_dict()


def test_divided_scores_restores_the_trained_divisor_even_after_an_error(data):
    model, _ = data
    with pytest.raises(RuntimeError, match="inside"):
        with divided_scores(model, 4.0):
            assert model.attention.divisor == 4.0
            raise RuntimeError("inside")
    assert model.attention.divisor == 1.0
    with pytest.raises(ValueError, match="positive"):
        with divided_scores(model, 0.0):
            pass


def test_typing_a_source_redraws_and_the_model_is_left_as_it_was(data, explorer):
    model, task = data
    trained = model.attention
    model.train()
    r = explorer.set(source="E D c B a")
    assert r["tokens"] == ["e", "d", "c", "b", "a"]
    outputs, weights = decoded(model, r["ids"])
    torch.testing.assert_close(r["trained"]["weights"], weights)
    assert model.attention is trained and model.training and trained.divisor == 1.0


def test_odd_sources_and_slider_values_do_not_crash(data, explorer):
    model, task = data
    r = explorer.set(source="")
    assert r["tokens"] == [] and r["trained"] is None and r["divided"] is None
    explorer.figure.canvas.draw()
    r = explorer.set(source="a z ? b")
    assert r["unknown"] == ["z", "?"] and r["ids"][1] == task.vocab.unk
    explorer.figure.canvas.draw()
    r = explorer.set(source="ab#" * 20)
    assert r["truncated"] and len(r["tokens"]) == MAX_SOURCE
    assert r["trained"]["weights"].shape[1] == MAX_SOURCE
    explorer.figure.canvas.draw()
    explorer.controls["divisor"].value = 0.0  # clamped to the slider's range
    assert explorer.result["divisor"] == explorer.controls["divisor"].value > 0
    explorer.controls["divisor"].value = 1e9
    assert explorer.result["divisor"] == explorer.controls["divisor"].value < 1e9
    explorer.figure.canvas.draw()


def test_a_word_vocabulary_is_split_into_words(data):
    model, task = data
    words = Vocabulary(["alpha", "beta", "gamma", "delta", "eps", "zeta"])
    assert len(words) == len(task.vocab)
    explorer = attention_explorer(model, words, task.vocab, source="Beta gamma omega")
    assert explorer.result["tokens"] == ["Beta", "gamma", "omega"]
    assert explorer.result["unknown"] == ["Beta", "omega"]


def test_it_checks_its_arguments(data):
    model, task = data
    plain = Seq2Seq(len(task.vocab), len(task.vocab), 8, HIDDEN)
    with pytest.raises(TypeError, match="attention"):
        attention_explorer(plain, task.vocab, task.vocab)
    with pytest.raises(ValueError, match="source vocabulary"):
        attention_explorer(model, Vocabulary(["a"]), task.vocab)
    with pytest.raises(ValueError, match="target vocabulary"):
        attention_explorer(model, task.vocab, Vocabulary(["a"]))
    with pytest.raises(ValueError, match="divisor"):
        attention_explorer(model, task.vocab, task.vocab, divisor=0.0)


def test_the_figure_is_legible_on_a_phone_and_a_desktop(explorer):
    assert_legible(explorer.figure)
    assert len(explorer.figure.axes[0].images) == 1 and len(explorer.figure.axes[1].images) == 1
