"""Device selection, seeding, figures and the notebook widget."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from seqmodels.device import get_device, set_deterministic  # noqa: E402
from seqmodels.plots import next_token_bars, perplexity_vs_order  # noqa: E402
from seqmodels.seeding import make_generator, seed_everything  # noqa: E402
from seqmodels.vocab import Vocabulary  # noqa: E402


def test_device_follows_the_environment_variable(monkeypatch):
    monkeypatch.setenv("SEQMODELS_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    monkeypatch.delenv("SEQMODELS_DEVICE")
    assert get_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_asking_for_cuda_without_it_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        get_device("cuda")


def test_deterministic_mode_turns_tf32_off_and_back():
    set_deterministic(True)
    assert (
        not torch.backends.cuda.matmul.allow_tf32 and torch.are_deterministic_algorithms_enabled()
    )
    set_deterministic(False)
    assert not torch.are_deterministic_algorithms_enabled()
    set_deterministic(True)


def test_seeding_makes_draws_repeatable_and_refuses_bad_seeds():
    a = torch.rand(3, generator=seed_everything(7))
    b = torch.rand(3, generator=make_generator(7))
    torch.testing.assert_close(a, b)
    seed_everything(7)
    first = torch.rand(2)
    seed_everything(7)
    torch.testing.assert_close(first, torch.rand(2))
    with pytest.raises(ValueError, match="non-negative integer seed"):
        seed_everything(-1)


def test_figures_have_the_promised_panels_and_refuse_mismatched_data():
    ax = perplexity_vs_order({"a": [3.0, 2.0]}, [1, 2], bounds={"a": 1.5}, floors={"a": [2.5, 1.5]})
    assert [line.get_linestyle() for line in ax.get_lines()[:3]] == ["-", "--", ":"]
    with pytest.raises(ValueError, match="2 points for 3 orders"):
        perplexity_vs_order({"a": [3.0, 2.0]}, [1, 2, 3])
    fig = next_token_bars({"m": torch.tensor([0.0, 0.5, 0.5])}, ["<s>", "a", "b"], top=2)
    assert sorted(t.get_text() for t in fig.axes[0].get_yticklabels()) == ["a", "b"]
    assert [bar.get_width() for bar in fig.axes[0].patches] == [0.5, 0.5]
    with pytest.raises(ValueError, match=r"of shape \(3,\)"):
        next_token_bars({"m": torch.ones(2) / 2}, ["<s>", "a", "b"])


def test_next_word_explorer_redraws_when_the_context_changes():
    from seqmodels.widgets import next_word_explorer

    vocab = Vocabulary(["a", "b"])
    seen = []

    def model(ids):
        seen.append(ids)
        return torch.tensor([0.0, 0.2, 0.1, 0.3, 0.4], dtype=torch.float64)

    box = next_word_explorer({"m": model}, vocab, context="a")
    assert seen == [[3]]
    box.children[0].value = "b zebra"
    assert seen[-1] == [4, vocab.unk]
