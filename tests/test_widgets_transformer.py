"""Chapter 8's `transformer_explorer`: its sentence, positions, layer and head controls against the
library's own pieces (the blocks' `MultiHeadAttention`, `sinusoidal_positions`, `distributions_at`)."""

import pytest
import torch

from seqmodels.data import tokenize
from seqmodels.plots import use_book_style
from seqmodels.rnn import distributions_at
from seqmodels.seeding import seed_everything
from seqmodels.transformer import TransformerLM, causal_mask, sinusoidal_positions
from seqmodels.vocab import Vocabulary
from seqmodels.widgets.transformer import MAX_TOKENS, transformer_explorer
from widget_helpers import assert_legible, briefly_trained, encoded

TEXT = [
    "the dog runs",
    "the dogs run",
    "the old dog sleeps",
    "the old dogs sleep",
    "a cat sings",
    "the cats sing",
]
D, HEADS, LAYERS = 16, 2, 2


@pytest.fixture(scope="module")
def data():
    use_book_style(svg=False)
    vocab, train = encoded(TEXT)
    models = {}
    for kind in ("sinusoidal", "learned"):
        seed_everything(0)
        models[kind] = TransformerLM(
            len(vocab), d_model=D, n_heads=HEADS, n_layers=LAYERS, d_ff=32, max_len=32,
            positions=kind,
        )  # fmt: skip
        briefly_trained(models[kind], train, steps=20)
    return models, vocab


@pytest.fixture
def explorer(data):
    models, vocab = data
    return transformer_explorer(models, vocab, sentence="The old dogs", trained_length=5)


def expected_weights(model, ids):
    """Each block's (heads, T, T) weights, by running the blocks' parts one by one (pre-LN)."""
    with torch.no_grad():
        x = model.embed(torch.tensor([ids]))
        out = []
        for block in model.blocks:
            _, w = block.self_attn(block.norm1(x), causal=True)
            out.append(w[0])
            x = block(x, causal=True)
    return torch.stack(out).double()


def test_the_default_view_is_the_model_s_own_attention_and_positions(data, explorer):
    models, vocab = data
    r = explorer.result
    assert r["positions"] == "sinusoidal" and r["layer"] == 0 and r["head"] == 0
    assert r["words"] == ["the", "old", "dogs"] and r["tokens"] == ["<s>", "the", "old", "dogs"]
    assert r["ids"] == [vocab.bos, *vocab.encode(r["words"])] and r["unknown"] == []
    model = models["sinusoidal"]
    expected = expected_weights(model, r["ids"])
    torch.testing.assert_close(r["all_weights"], expected)
    torch.testing.assert_close(r["weights"], expected[0, 0])
    # causal: nothing above the diagonal, every row a distribution
    assert (r["all_weights"][..., ~causal_mask(4)] == 0).all()
    torch.testing.assert_close(r["all_weights"].sum(-1), torch.ones(LAYERS, HEADS, 4).double())
    # the sinusoids of eq-ch8-sinusoidal, and their cosines
    torch.testing.assert_close(r["position_vectors"], sinusoidal_positions(4, D, torch.float64))
    unit = r["position_vectors"] / r["position_vectors"].norm(dim=-1, keepdim=True)
    torch.testing.assert_close(r["similarity"], unit @ unit.T)
    probs = distributions_at(model, [r["ids"][1:]], 3)[0].double()
    torch.testing.assert_close(r["probs"], probs)
    assert r["next_token"] == vocab.itos[int(probs.argmax())]
    assert r["next_prob"] == pytest.approx(probs.max().item())


def test_sinusoidal_similarity_depends_only_on_the_offset(explorer):
    r = explorer.set(sentence="the old dogs sleep the old dogs run the dog")
    sim = r["similarity"]
    T = len(r["tokens"])
    assert T == 11
    for k in range(-T + 1, T):
        diagonal = torch.diagonal(sim, offset=k)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal))


def test_the_positions_layer_and_head_controls_pick_the_model_and_the_head(data, explorer):
    models, vocab = data
    sinusoidal = explorer.result
    r = explorer.set(positions="learned", layer=1, head=1)
    assert (r["positions"], r["layer"], r["head"]) == ("learned", 1, 1)
    model = models["learned"]
    expected = expected_weights(model, r["ids"])
    torch.testing.assert_close(r["weights"], expected[1, 1])
    table = model.embed.positions.embedding.weight[:4].double()
    torch.testing.assert_close(r["position_vectors"], table.detach())
    assert not torch.allclose(r["similarity"], sinusoidal["similarity"])
    explorer.controls["head"].value = 0
    torch.testing.assert_close(explorer.result["weights"], expected[1, 0])
    explorer.controls["layer"].value = 0
    torch.testing.assert_close(explorer.result["weights"], expected[0, 0])


def test_odd_sentences_and_models_do_not_crash(data, explorer):
    models, vocab = data
    r = explorer.set(sentence="")
    assert r["tokens"] == ["<s>"] and r["weights"].shape == (1, 1) and r["weights"].item() == 1
    explorer.figure.canvas.draw()
    r = explorer.set(sentence="The zebras, singing!")
    assert r["unknown"] == ["zebras", ",", "singing", "!"]
    explorer.figure.canvas.draw()
    long = " ".join(TEXT)
    r = explorer.set(sentence=long, positions="learned")
    assert r["truncated"] and len(r["tokens"]) == MAX_TOKENS
    assert r["tokens"][1:] == tokenize(long)[: MAX_TOKENS - 1]
    explorer.figure.canvas.draw()
    explorer.controls["head"].value = 99  # clamped to the slider's range
    assert explorer.result["head"] == HEADS - 1
    # a model with fewer layers than the slider offers, and none of positions
    seed_everything(2)
    small = TransformerLM(len(vocab), d_model=D, n_heads=HEADS, n_layers=1, positions="none",
                          max_len=4)  # fmt: skip
    both = transformer_explorer({"none": small, **models}, vocab, sentence=long, layer=1)
    r = both.result
    assert r["positions"] == "none" and r["layer"] == 0 and r["similarity"] is None
    assert len(r["tokens"]) == 4  # the model's max_len
    both.figure.canvas.draw()


def test_a_single_model_is_named_by_its_positions_and_keeps_its_mode(data):
    models, vocab = data
    model = models["learned"]
    model.train()
    explorer = transformer_explorer(model, vocab, sentence="a cat")
    assert list(explorer.controls["positions"].options) == ["learned"]
    assert model.training


def test_it_checks_its_arguments(data):
    models, vocab = data
    with pytest.raises(ValueError, match="vocabulary"):
        transformer_explorer(models, Vocabulary(["a"]))
    with pytest.raises(ValueError, match="positions"):
        transformer_explorer(models, vocab, positions="rotary")
    with pytest.raises(TypeError, match="TransformerLM"):
        transformer_explorer({"x": torch.nn.Linear(2, 2)}, vocab)
    with pytest.raises(ValueError, match="trained_length"):
        transformer_explorer(models, vocab, trained_length=0)


def test_the_figure_is_legible_on_a_phone_and_a_desktop(explorer):
    assert_legible(explorer.figure)
    explorer.set(sentence=" ".join(TEXT))  # the longest view, with the dotted lines
    assert_legible(explorer.figure)
