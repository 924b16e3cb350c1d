"""Chapter 7's measuring helpers (seqmodels.attention) and its heatmap figure (seqmodels.plots)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from seqmodels import plots  # noqa: E402
from seqmodels.attention import (  # noqa: E402
    Attention,
    decoder_step_seconds,
    saved_tensor_bytes,
)
from seqmodels.seq2seq import Seq2Seq  # noqa: E402


def test_saved_bytes_count_what_backward_needs_once_per_storage():
    x = torch.randn(10, 20, requires_grad=True)
    # exp saves its output (800 bytes); sum saves nothing
    assert saved_tensor_bytes(lambda: x.exp().sum()) == 10 * 20 * 4
    # x * x saves x twice: one storage, counted once
    assert saved_tensor_bytes(lambda: (x * x).sum()) == 10 * 20 * 4
    with torch.no_grad():  # nothing is saved without a graph
        assert saved_tensor_bytes(lambda: x.exp()) == 0


def test_additive_attention_saves_a_hidden_vector_per_pair():
    batch, m, n, d, a = 2, 5, 7, 6, 4
    q = torch.randn(batch, m, d, requires_grad=True)
    k = torch.randn(batch, n, d)
    dot, additive = Attention("dot", d, d), Attention("additive", d, d, hidden=a)
    dot_bytes = saved_tensor_bytes(lambda: dot(q, k, k))
    additive_bytes = saved_tensor_bytes(lambda: additive(q, k, k))
    hidden = batch * m * n * a * 4  # the tanh layer's output, float32
    assert additive_bytes >= hidden
    assert additive_bytes - dot_bytes >= hidden - batch * m * n * 4


@pytest.mark.parametrize("attention", [None, "dot"])
def test_decoder_step_seconds_times_one_step_and_restores_the_mode(attention):
    model = Seq2Seq(12, 9, 8, 16, attention=attention)
    model.train()
    g = torch.Generator().manual_seed(0)
    seconds = decoder_step_seconds(model, 30, batch_size=4, repeats=3, generator=g)
    assert 0 < seconds < 1
    assert model.training
    with pytest.raises(ValueError, match="source_length"):
        decoder_step_seconds(model, 0)


def test_attention_heatmaps_have_a_colour_bar_and_are_legible():
    with plt.rc_context():
        plots.use_book_style(svg=False)
        weights = torch.softmax(torch.randn(4, 6), -1)
        fig = plots.attention_heatmaps(
            [
                ("a", weights, list("abcdef"), ["x", "y", "z", "</s>"]),
                ("b", weights[:3, :5], list("abcde"), ["p", "q", "</s>"]),
            ]
        )
        assert len(fig.axes) == 3  # two panels and the colour bar
        assert fig.axes[-1].get_ylabel() == "attention weight α"
        assert fig.get_size_inches()[0] <= plots.FIGURE_WIDTH + 1e-9
        assert plots.smallest_text_px(fig) >= plots.MIN_TEXT_PX
        with pytest.raises(ValueError, match="expected weights of shape"):
            plots.attention_heatmaps([("c", weights, list("abc"), ["x"])])
        plt.close("all")
