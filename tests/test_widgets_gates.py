"""Chapter 5's `gate_explorer`: its model, sample and sentence controls against torch's GRU and LSTM
(the gates rebuild their states) and the agreement language itself (`sample`, `agreement`)."""

import math

import pytest
import torch

from seqmodels.plots import use_book_style
from seqmodels.rnn import RNNLM, distributions_at, train_sentence_lm
from seqmodels.seeding import make_generator, seed_everything
from seqmodels.synthetic import AgreementLanguage
from seqmodels.widgets.gates import SHOWN_TOKENS, gate_explorer, read_gates
from widget_helpers import assert_legible

LANG = AgreementLanguage(distance=3)


@pytest.fixture(scope="module")
def models():
    use_book_style(svg=False)
    g = seed_everything(0)
    train = LANG.sample(500, g)
    out = {}
    for name, core in (("GRU", "gru"), ("LSTM", "lstm")):
        seed_everything(1)
        out[name] = RNNLM(len(LANG.vocab), embed_dim=8, hidden_dim=6, core=core)
        train_sentence_lm(
            out[name], train, train[:50], steps=20, batch_size=32, lr=1e-2, generator=g
        )
    return out


@pytest.fixture
def explorer(models):
    return gate_explorer(models, LANG, seed=4)


def embedded(model, ids):
    with torch.no_grad():
        return model.embedding(torch.tensor([[LANG.vocab.bos, *ids]]))[0].double()


def gru_oracle(model, ids):
    """nn.GRU's own gates from its weight rows (r, z', n), z = 1 - z', checked by rebuilding h."""
    rnn = model.rnn
    x = embedded(model, ids)
    w_ih, w_hh = rnn.weight_ih_l0.double(), rnn.weight_hh_l0.double()
    b_ih, b_hh = rnn.bias_ih_l0.double(), rnn.bias_hh_l0.double()
    with torch.no_grad():
        states = rnn(x[None].float())[0][0].double()
        h = torch.zeros(rnn.hidden_size, dtype=torch.float64)
        gates = {"z": [], "r": []}
        for t in range(len(x)):
            a_r, a_z, a_n = (w_ih @ x[t] + b_ih).chunk(3)
            u_r, u_z, u_n = (w_hh @ h + b_hh).chunk(3)
            r, z_torch = torch.sigmoid(a_r + u_r), torch.sigmoid(a_z + u_z)
            n = torch.tanh(a_n + r * u_n)
            z = 1 - z_torch  # the lecture's update gate
            h = (1 - z) * h + z * n
            torch.testing.assert_close(h, states[t], atol=1e-5, rtol=1e-5)
            gates["z"].append(z)
            gates["r"].append(r)
    return {k: torch.stack(v) for k, v in gates.items()}


def lstm_oracle(model, ids):
    """nn.LSTM's gates from its rows i, f, g, o, checked by rebuilding its h and c."""
    rnn = model.rnn
    x = embedded(model, ids)
    w_ih, w_hh = rnn.weight_ih_l0.double(), rnn.weight_hh_l0.double()
    b = rnn.bias_ih_l0.double() + rnn.bias_hh_l0.double()
    with torch.no_grad():
        states, (_, c_last) = rnn(x[None].float())
        h = c = torch.zeros(rnn.hidden_size, dtype=torch.float64)
        gates = {"i": [], "f": [], "o": []}
        for t in range(len(x)):
            i, f, g, o = (w_ih @ x[t] + w_hh @ h + b).chunk(4)
            i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
            c = f * c + i * g
            h = o * torch.tanh(c)
            torch.testing.assert_close(h, states[0, t].double(), atol=1e-5, rtol=1e-5)
            for name, value in zip("ifo", (i, f, o), strict=True):
                gates[name].append(value)
        torch.testing.assert_close(c, c_last[0, 0].double(), atol=1e-5, rtol=1e-5)
    return {k: torch.stack(v) for k, v in gates.items()}


def expected_share(model, ids):
    return LANG.agreement(distributions_at(model, [ids], LANG.verb_position), [ids])[0]


def close(gates, oracle):
    assert gates.keys() == oracle.keys()
    for name in oracle:
        torch.testing.assert_close(gates[name], oracle[name], atol=1e-5, rtol=1e-5)


def test_the_default_view_is_the_gru_s_gates_on_the_seed_s_sample(models, explorer):
    r = explorer.result
    ids = LANG.sample(1, make_generator(4))[0]
    assert r["source"] == "sample" and r["seed"] == 4 and r["ids"] == ids
    assert r["words"] == LANG.vocab.decode(ids) and r["tokens"] == ["<s>", *r["words"]]
    assert r["model"] == "GRU" and r["kind"] == "gru"
    close(r["gates"], gru_oracle(models["GRU"], ids))
    assert r["means"]["z"] == pytest.approx(r["gates"]["z"].mean(1).tolist())
    assert r["log_prob"] == pytest.approx(LANG.log_prob(ids))
    assert r["subject"] == LANG.is_plural(ids[0]) == r["verb"]
    assert r["share"] == pytest.approx(expected_share(models["GRU"], ids))
    assert len(explorer.figure.axes) == 3  # z, r and the colour bar


def test_choosing_the_lstm_shows_its_input_forget_and_output_gates(models, explorer):
    r = explorer.set(model="LSTM")
    assert r["kind"] == "lstm" and list(r["gates"]) == ["i", "f", "o"]
    close(r["gates"], lstm_oracle(models["LSTM"], r["ids"]))
    assert r["share"] == pytest.approx(expected_share(models["LSTM"], r["ids"]))
    assert len(explorer.figure.axes) == 4


def test_the_sample_slider_draws_the_language_s_sentences(models, explorer):
    seen = set()
    for seed in (0, 1, 2, 3):
        explorer.controls["seed"].value = seed
        r = explorer.result
        assert r["ids"] == LANG.sample(1, make_generator(seed))[0]
        assert r["log_prob"] == pytest.approx(LANG.log_prob(r["ids"]))
        assert r["log_prob"] > -math.inf
        assert r["share"] == pytest.approx(expected_share(models["GRU"], r["ids"]))
        close(r["gates"], gru_oracle(models["GRU"], r["ids"]))
        seen.add(tuple(r["ids"]))
    assert len(seen) > 1


def test_a_typed_sentence_replaces_the_sample_until_cleared(models, explorer):
    sample = explorer.result["ids"]
    r = explorer.set(sentence="Dogs old very big RUN")
    ids = LANG.vocab.encode(["dogs", "old", "very", "big", "run"])
    assert r["source"] == "typed" and r["ids"] == ids and r["unknown"] == []
    assert r["subject"] is True and r["verb"] is True
    assert r["log_prob"] == pytest.approx(LANG.log_prob(ids))
    assert r["log_prob"] > -math.inf
    close(r["gates"], gru_oracle(models["GRU"], ids))
    # the wrong verb: not a sentence of the language, but the prediction at the verb is the same
    wrong = explorer.set(sentence="dogs old very big runs")
    assert wrong["log_prob"] == -math.inf and wrong["verb"] is False
    assert wrong["share"] == pytest.approx(r["share"])
    torch.testing.assert_close(wrong["gates"]["z"][:-1], r["gates"]["z"][:-1])
    # words outside the vocabulary are read as <unk>
    r = explorer.set(sentence="dogs purple old big run")
    assert r["unknown"] == ["purple"] and r["ids"][1] == LANG.vocab.unk
    close(r["gates"], gru_oracle(models["GRU"], r["ids"]))
    assert explorer.set(sentence="   ")["ids"] == sample  # empty again: the sample


def test_odd_sentences_do_not_crash(models, explorer):
    r = explorer.set(sentence="dogs")  # never reaches the verb
    assert r["share"] is None and r["subject"] is True and r["verb"] is None
    assert r["gates"]["z"].shape == (2, 6)
    explorer.figure.canvas.draw()
    r = explorer.set(sentence="old dogs very big run", model="LSTM")  # no subject first
    assert r["subject"] is None and r["share"] is None and r["log_prob"] == -math.inf
    close(r["gates"], lstm_oracle(models["LSTM"], r["ids"]))
    explorer.figure.canvas.draw()
    r = explorer.set(sentence=" ".join(["cat"] + ["old"] * 40 + ["runs"]))
    assert r["gates"]["f"].shape == (43, 6) and r["share"] is not None
    assert explorer.figure.axes[0].images[0].get_array().shape == (6, SHOWN_TOKENS)
    explorer.figure.canvas.draw()
    r = explorer.set(sentence="<s> </s> <unk>")
    assert r["ids"] == [0, 1, 2] and r["subject"] is None
    explorer.figure.canvas.draw()


def test_hand_written_cores_have_the_same_gates(models):
    ids = LANG.sample(1, make_generator(9))[0]
    for name, hand in (("GRU", "gru-hand"), ("LSTM", "lstm-hand")):
        twin = RNNLM(len(LANG.vocab), embed_dim=8, hidden_dim=6, core=hand)
        twin.load_state_dict(models[name].state_dict())
        close(read_gates(twin, [0, *ids]), read_gates(models[name], [0, *ids]))
    # the lecture's GRU: the same gates from the same state, h_0 = 0; then its states differ
    lecture = RNNLM(len(LANG.vocab), embed_dim=8, hidden_dim=6, core="gru-lecture")
    lecture.load_state_dict(models["GRU"].state_dict())
    first = {k: v[:1] for k, v in read_gates(models["GRU"], [0, *ids]).items()}
    close({k: v[:1] for k, v in read_gates(lecture, [0, *ids]).items()}, first)


def test_the_models_keep_their_mode(models):
    for m in models.values():
        m.train()
    explorer = gate_explorer(models, LANG)
    explorer.set(model="LSTM")
    assert all(m.training for m in models.values())
    for m in models.values():
        m.eval()
    explorer.set(seed=7)
    assert not any(m.training for m in models.values())


def test_it_checks_its_arguments(models):
    with pytest.raises(ValueError, match="gated core"):
        gate_explorer({"RNN": RNNLM(len(LANG.vocab), 4, 4, core="torch")}, LANG)
    with pytest.raises(ValueError, match="tokens"):
        gate_explorer(models, AgreementLanguage(distance=3, n_nouns=2))
    with pytest.raises(ValueError, match="one of"):
        gate_explorer(models, LANG, model="RNN")
    with pytest.raises(ValueError, match="seed"):
        gate_explorer(models, LANG, seed=-1)
    with pytest.raises(ValueError, match="at least one"):
        gate_explorer({}, LANG)


def test_the_figure_is_legible_on_a_phone_and_a_desktop(explorer):
    assert_legible(explorer.figure)
    explorer.set(model="LSTM", sentence=" ".join(["cat"] + ["old"] * 40))
    assert_legible(explorer.figure)
