"""Chapter 6's `pronunciation_explorer`: its word and model controls against the library's G2P
model and data (`translate`, the decoder run one step at a time, `errors_by_position`, the CMU
dictionary's own entries)."""

import math

import pytest
import torch

from seqmodels.data import cmudict_pairs, load_g2p, split_of_word
from seqmodels.metrics import edit_distance
from seqmodels.plots import use_book_style
from seqmodels.seeding import seed_everything
from seqmodels.seq2seq import Seq2Seq, errors_by_position, pair_nll, train_seq2seq, translate
from seqmodels.widgets.seq2seq import SHOWN_POSITIONS, pronunciation_explorer
from widget_helpers import assert_legible

MAX_LEN = 12


@pytest.fixture(scope="module")
def setup():
    use_book_style(svg=False)
    g2p = load_g2p()
    train = g2p.pairs("train", max_letters=8)[::20]
    models = {}
    for name, context in (("init", ("init",)), ("input", ("input",))):
        seed_everything(0)
        models[name] = Seq2Seq(len(g2p.letters), len(g2p.phonemes), 8, 24, context=context)
        train_seq2seq(
            models[name],
            train,
            train[:50],
            steps=40,
            batch_size=32,
            lr=1e-2,
            generator=seed_everything(1),
            eval_every=40,
        )
    return g2p, models


@pytest.fixture
def explorer(setup):
    g2p, models = setup
    return pronunciation_explorer(models, g2p, word="verified", max_len=MAX_LEN)


def entry(word):
    """The dictionary's pronunciations of a word (empty if it is not a headword)."""
    return [list(p) for p in dict(cmudict_pairs(split_of_word(word))).get(word, ())]


def stepwise(model, src, prefix):
    """p(. | prefix_<t, x) by the decoder run one token at a time (Seq2Seq.decode_steps)."""
    with torch.no_grad():
        src_t = torch.tensor([src])
        h, memory = model.start(src_t, torch.tensor([len(src)]), torch.ones_like(src_t).bool())
        rows = []
        for token in [0, *prefix]:
            logits, h, _ = model.decode_steps(torch.tensor([[token]]), h, memory)
            rows.append(logits[0, 0].double().softmax(-1))
    return torch.stack(rows)


def check_against_library(result, model, g2p):
    """Everything the view shows for a dictionary word, recomputed with the library."""
    src = g2p.letters.encode(list(result["word"]))
    greedy = translate(model, [src], max_len=MAX_LEN).outputs[0]
    assert result["greedy_ids"] == greedy
    assert result["greedy"] == g2p.phonemes.decode(greedy)
    prons = entry(result["word"])
    assert result["pronunciations"] == prons and result["in_dictionary"]
    assert result["split"] == split_of_word(result["word"])
    distances = [edit_distance(result["greedy"], p) for p in prons]
    assert result["reference"] == prons[distances.index(min(distances))]
    assert result["distance"] == min(distances)
    assert result["correct"] == (min(distances) == 0)
    ref = g2p.phonemes.encode(result["reference"])
    target = [*ref, 1]
    forced = stepwise(model, src, ref)  # fed the reference
    assert result["forced"] == g2p.phonemes.decode(forced.argmax(-1).tolist())
    assert result["p_forced"] == pytest.approx([forced[t, y].item() for t, y in enumerate(target)])
    # the teacher-forced probabilities are the model's loss on the pair
    total, n = pair_nll(model, [(src, ref)])
    assert -sum(math.log(p) for p in result["p_forced"]) == pytest.approx(total, rel=1e-5)
    assert n == len(target)
    own = stepwise(model, src, greedy)  # fed its own output
    reach = min(len(target), len(greedy) + 1)
    assert result["p_free"] == pytest.approx(
        [own[t, y].item() for t, y in enumerate(target[:reach])]
    )
    chosen = [*greedy, 1] if result["ended"] else greedy
    assert result["greedy_probs"] == pytest.approx(
        [own[t].max().item() for t in range(len(chosen))]
    )
    expected = {}
    for key, prediction in (("forced_errors", forced.argmax(-1).tolist()), ("free_errors", chosen)):
        rates, _ = errors_by_position([prediction], [target])
        expected[key] = [t + 1 for t in range(len(target)) if rates[t] > 0]
        assert result[key] == expected[key]


def test_the_default_view_is_the_model_on_a_dictionary_word(setup, explorer):
    g2p, models = setup
    r = explorer.result
    assert r["word"] == "verified" and r["model"] == "init" and r["dropped"] == []
    check_against_library(r, models["init"], g2p)
    # up to the first mistake both are fed the same prefix, so they err first at the same place
    if r["forced_errors"] or r["free_errors"]:
        assert min(r["forced_errors"], default=99) == min(r["free_errors"], default=99)


def test_typing_words_redraws_with_the_dictionary_s_pronunciations(setup, explorer):
    g2p, models = setup
    for word in ("sequence", "read", "a", "photograph"):
        explorer.controls["word"].value = word
        r = explorer.result
        assert r["word"] == word
        check_against_library(r, models["init"], g2p)
    assert len(explorer.result["pronunciations"]) == 1
    r = explorer.set(word="read")
    assert len(r["pronunciations"]) == 2  # R IY D and R EH D: the closer one is the reference


def test_the_model_menu_switches_models(setup, explorer):
    g2p, models = setup
    first = explorer.result
    r = explorer.set(model="input")
    assert r["model"] == "input"
    check_against_library(r, models["input"], g2p)
    assert r["p_forced"] != pytest.approx(first["p_forced"])


def test_a_word_outside_the_dictionary_shows_the_greedy_output_alone(setup, explorer):
    g2p, models = setup
    r = explorer.set(word="Xqzzyv")
    assert r["word"] == "xqzzyv" and not r["in_dictionary"] and r["pronunciations"] == []
    assert "reference" not in r and "forced_errors" not in r
    src = g2p.letters.encode(list("xqzzyv"))
    greedy = translate(models["init"], [src], max_len=MAX_LEN).outputs[0]
    assert r["greedy_ids"] == greedy
    own = stepwise(models["init"], src, greedy)
    assert r["greedy_probs"] == pytest.approx(
        [own[t].max().item() for t in range(len(r["greedy_probs"]))]
    )
    explorer.figure.canvas.draw()


def test_odd_words_do_not_crash(setup, explorer):
    r = explorer.set(word="")
    assert r["word"] == "" and r["greedy"] == [] and not r["in_dictionary"]
    explorer.figure.canvas.draw()
    r = explorer.set(word=" Don't! 42 ")
    assert r["word"] == "dont" and r["dropped"] == ["'", "!", "4", "2"]
    explorer.figure.canvas.draw()
    r = explorer.set(word="?!")
    assert r["word"] == "" and r["dropped"] == ["?", "!"]
    r = explorer.set(word="internationalization")  # longer than the grid shows
    assert r["in_dictionary"] and len(r["reference"]) + 1 > SHOWN_POSITIONS
    check_against_library(r, setup[1]["init"], setup[0])
    explorer.figure.canvas.draw()
    r = explorer.set(word="é")
    assert r["word"] == "" and r["dropped"] == ["é"]


def test_a_greedy_output_cut_at_max_len_has_no_end(setup):
    g2p, models = setup
    explorer = pronunciation_explorer(models["init"], g2p, word="verified", max_len=2)
    r = explorer.result
    assert not r["ended"] and len(r["greedy"]) == 2 and len(r["greedy_probs"]) == 2
    assert len(r["p_free"]) == 3 and r["model"] == "model"
    explorer.figure.canvas.draw()


def test_the_models_keep_their_mode(setup):
    g2p, models = setup
    models["init"].train()
    pronunciation_explorer(models, g2p, word="cat")
    assert models["init"].training
    models["init"].eval()
    pronunciation_explorer(models, g2p, word="cat")
    assert not models["init"].training


def test_it_checks_its_arguments(setup):
    g2p, models = setup
    with pytest.raises(ValueError, match="phonemes"):
        pronunciation_explorer(Seq2Seq(len(g2p.letters), 10, 4, 4), g2p)
    with pytest.raises(ValueError, match="one of"):
        pronunciation_explorer(models, g2p, model="output")
    with pytest.raises(ValueError, match="max_len"):
        pronunciation_explorer(models, g2p, max_len=0)
    with pytest.raises(TypeError, match="Seq2Seq"):
        pronunciation_explorer({"lm": torch.nn.Linear(2, 2)}, g2p)


def test_the_figure_is_legible_on_a_phone_and_a_desktop(explorer):
    for word in ("verified", "internationalization", "xqzzyv", ""):
        explorer.set(word=word)
        assert_legible(explorer.figure)
