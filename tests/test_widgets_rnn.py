"""Chapter 3's `rnn_state_explorer`: its sentence and next-words controls against the RNN LM itself
(the library's `distributions_at`, `sentence_nll`, and `ElmanRNN` with the same weights)."""

import math

import pytest
import torch

from seqmodels.data import tokenize
from seqmodels.plots import use_book_style
from seqmodels.rnn import RNNLM, ElmanRNN, distributions_at, sentence_nll
from seqmodels.seeding import seed_everything
from seqmodels.vocab import Vocabulary
from seqmodels.widgets.rnn import SHOWN_TOKENS, rnn_state_explorer
from widget_helpers import assert_legible, briefly_trained, encoded

TEXT = [
    "and god said unto moses",
    "and the lord said unto them",
    "the king went up unto the city",
    "and moses went up , and the people said amen .",
    "the lord spake unto the king",
]


@pytest.fixture(scope="module")
def data():
    use_book_style(svg=False)
    vocab, train = encoded(TEXT)
    seed_everything(0)
    model = RNNLM(len(vocab), embed_dim=8, hidden_dim=10, core="torch")
    return briefly_trained(model, train, steps=30), vocab


@pytest.fixture
def explorer(data):
    model, vocab = data
    return rnn_state_explorer(model, vocab, sentence="And God said unto", top=4)


def expected_states(model, ids):
    """h_1 .. h_time by the library's hand-written Elman loop with nn.RNN's weights."""
    elman = ElmanRNN.from_torch(model.rnn)
    with torch.no_grad():
        return elman(model.embedding(torch.tensor([ids])))[0][0].double()


def test_the_default_view_is_the_model_s_states_and_next_words(data, explorer):
    model, vocab = data
    r = explorer.result
    assert r["words"] == ["and", "god", "said", "unto"]
    assert r["tokens"] == ["<s>", "and", "god", "said", "unto"] and r["unknown"] == []
    assert r["ids"] == [vocab.bos, *vocab.encode(r["words"])]
    torch.testing.assert_close(r["states"], expected_states(model, r["ids"]))
    ids = r["ids"][1:]
    expected = distributions_at(model, [ids], len(ids))[0].double()
    torch.testing.assert_close(r["probs"], expected)
    top_probs, top_ids = expected.topk(4)
    assert r["top_words"] == vocab.decode(top_ids.tolist())
    assert r["top_probs"] == pytest.approx(top_probs.tolist(), rel=1e-6)
    # p(w_t | <s> w_<t): teacher forcing, each from the library's own distribution
    word_probs = [distributions_at(model, [ids], t)[0, w].item() for t, w in enumerate(ids)]
    assert r["word_probs"] == pytest.approx(word_probs, rel=1e-6)
    # their summed -log p is sentence_nll without the final </s> term
    total, n = sentence_nll(model, [ids])
    end = -math.log(expected[vocab.eos].item())
    assert n == len(ids) + 1 and r["nll"] == pytest.approx(total - end, rel=1e-5)


def test_typing_a_sentence_redraws_its_trajectory(data, explorer):
    model, vocab = data
    first = explorer.result
    explorer.controls["sentence"].value = "And God said unto Pharaoh, go"
    r = explorer.result
    assert r["unknown"] == ["pharaoh", "go"]
    assert r["tokens"] == ["<s>", "and", "god", "said", "unto", "<unk>", ",", "<unk>"]
    assert r["states"].shape == (8, 10)
    torch.testing.assert_close(r["states"], expected_states(model, r["ids"]))
    # reading left to right: the states of the common prefix do not depend on what follows
    torch.testing.assert_close(r["states"][:5], first["states"])
    assert r["word_probs"][:4] == pytest.approx(first["word_probs"])
    expected = distributions_at(model, [r["ids"][1:]], len(r["ids"]) - 1)[0].double()
    torch.testing.assert_close(r["probs"], expected)
    assert not torch.allclose(r["probs"], first["probs"])


def test_the_top_slider_lists_that_many_words(data, explorer):
    r = explorer.set(top=7)
    assert len(r["top_words"]) == 7
    assert r["top_probs"] == pytest.approx(r["probs"].topk(7).values.tolist())
    assert r["top_probs"] == sorted(r["top_probs"], reverse=True)
    explorer.controls["top"].value = 1000  # clamped to the slider's maximum
    assert len(explorer.result["top_words"]) == explorer.controls["top"].max


def test_empty_long_and_odd_sentences_do_not_crash(data, explorer):
    model, vocab = data
    r = explorer.set(sentence="")
    assert r["tokens"] == ["<s>"] and r["word_probs"] == [] and r["nll"] == 0
    torch.testing.assert_close(r["probs"], distributions_at(model, [[]], 0)[0].double())
    explorer.figure.canvas.draw()
    r = explorer.set(sentence="?!  ")
    assert r["words"] == ["?", "!"] and r["unknown"] == ["?", "!"]
    explorer.figure.canvas.draw()
    long = " ".join(TEXT)
    r = explorer.set(sentence=long)
    assert len(r["states"]) == len(tokenize(long)) + 1
    image = explorer.figure.axes[0].images[0].get_array()
    assert image.shape == (10, SHOWN_TOKENS)  # the last tokens read, every unit
    explorer.figure.canvas.draw()


def test_the_model_keeps_its_mode(data):
    model, vocab = data
    model.train()
    rnn_state_explorer(model, vocab, sentence="the king")
    assert model.training


def test_it_checks_its_arguments(data):
    model, vocab = data
    with pytest.raises(ValueError, match="vocabulary"):
        rnn_state_explorer(model, Vocabulary(["a", "b"]))
    with pytest.raises(ValueError, match="LSTM"):
        rnn_state_explorer(RNNLM(len(vocab), 4, 4, core="lstm"), vocab)
    with pytest.raises(ValueError, match="top"):
        rnn_state_explorer(model, vocab, top=0)


def test_the_figure_is_legible_on_a_phone_and_a_desktop(explorer):
    assert_legible(explorer.figure)
