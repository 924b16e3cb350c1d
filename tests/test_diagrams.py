"""The schematic diagrams (seqmodels.diagrams): legible on a phone, and what they count — steps,
gates, heads, positions, norms — read from the model or size they are drawn from."""

import math
from xml.etree import ElementTree

import matplotlib
import pytest
from IPython.core.formatters import format_display_data
from matplotlib.colors import same_color
from matplotlib.text import Text
from torch import nn

from seqmodels import diagrams
from seqmodels.gated import GRU, LSTM
from seqmodels.plots import (
    DESKTOP_WIDTH_PX,
    MIN_TEXT_PX,
    PHONE_WIDTH_PX,
    TARGET_COLOR,
    shown_width_in,
    smallest_text_px,
    use_book_style,
)
from seqmodels.seq2seq import Seq2Seq
from seqmodels.transformer import EncoderBlock, MultiHeadAttention

matplotlib.use("Agg")
use_book_style(svg=False)


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def count(fig, text: str) -> int:
    return sum(t == text for t in texts(fig))


@pytest.fixture(autouse=True)
def _close():
    yield
    matplotlib.pyplot.close("all")


DRAWN = {
    "unrolled RNN": lambda: diagrams.unrolled_rnn_figure(4),
    "truncated BPTT": lambda: diagrams.unrolled_rnn_figure(6, truncate=3),
    "GRU cell": lambda: diagrams.gated_cell_figure(GRU(4, 8)),
    "LSTM cell": lambda: diagrams.gated_cell_figure(LSTM(4, 8)),
    "causal mask": lambda: diagrams.causal_mask_figure(6),
    "multi-head": lambda: diagrams.multi_head_figure(MultiHeadAttention(64, 4)),
    "encoder-decoder": lambda: diagrams.encoder_decoder_figure(Seq2Seq(9, 7, context=("init",))),
    "teacher forcing": lambda: diagrams.teacher_forcing_figure(4),
    "stacked": lambda: diagrams.stacked_rnn_figure(nn.RNN(3, 4, num_layers=2)),
    "bidirectional": lambda: diagrams.stacked_rnn_figure(nn.GRU(3, 4, bidirectional=True)),
    "attention": lambda: diagrams.attention_figure([0.1, 0.6, 0.3], ["a", "b", "c"]),
    "beam tree": lambda: _toy_beam_tree(),
    "taxonomy": lambda: diagrams.taxonomy_figure(5, t=4, n=3),
    "scaled dot attention": lambda: diagrams.scaled_dot_attention_figure(3, 4, 8),
    "scaled dot attention, small cells": lambda: diagrams.scaled_dot_attention_figure(
        4, 6, 8, key_mask=[1, 1, 1, 1, 0, 0]
    ),
    "blocks": lambda: diagrams.block_figure(
        EncoderBlock(16, 2, 32, norm_first=False), EncoderBlock(16, 2, 32, norm_first=True)
    ),
}


@pytest.mark.parametrize("name", DRAWN)
def test_every_diagram_is_legible_on_a_phone_and_on_a_desktop(name):
    fig = DRAWN[name]()
    for column in (PHONE_WIDTH_PX, DESKTOP_WIDTH_PX):  # a 400-px phone, a 1,400-px window
        px = smallest_text_px(fig, column)
        assert px >= MIN_TEXT_PX, f"{name}: smallest text {px:.2f} px in a {column}-px column"
    assert fig.get_size_inches()[0] <= diagrams.FIGURE_WIDTH


def test_every_diagram_function_is_drawn_above(monkeypatch):
    drawn: set[str] = set()
    public = [n for n in dir(diagrams) if n.endswith("_figure") and not n.startswith("_")]
    for name in public:
        draw = getattr(diagrams, name)
        monkeypatch.setattr(
            diagrams, name, lambda *a, _d=draw, _n=name, **k: drawn.add(_n) or _d(*a, **k)
        )
    for make in DRAWN.values():
        make()
    assert drawn == set(public)


def _svg_root(svg: str) -> ElementTree.Element:
    root = ElementTree.fromstring(svg)
    assert root.tag.endswith("svg")
    return root


@pytest.mark.parametrize("name", DRAWN)
def test_every_diagram_displays_as_svg_that_scales_to_the_column(name):
    diagram = DRAWN[name]()
    bundle, _ = format_display_data(diagram)  # what glue(..., display=False) records
    assert "image/svg+xml" in bundle and "image/png" not in bundle
    root = _svg_root(bundle["image/svg+xml"])
    x0, y0, w, h = map(float, root.get("viewBox").split())  # the browser scales it to fit
    assert (x0, y0) == (0, 0) and w > 0 and h > 0
    width_pt, height_pt = (float(root.get(a).removesuffix("pt")) for a in ("width", "height"))
    assert width_pt / height_pt == pytest.approx(w / h)
    # its own width never overflows the desktop column, and is at most the width legibility was
    # measured at (a wider image would be shrunk more on a phone)
    assert width_pt * 96 / 72 <= DESKTOP_WIDTH_PX
    assert width_pt / 72 <= shown_width_in(diagram.figure) + 0.01
    assert not matplotlib.pyplot.get_fignums()  # closed: a notebook shows it once, as SVG


def test_a_glued_diagram_reaches_the_downloaded_notebook_as_svg():
    """The book records each glued output's bundle; `notebooks.py` puts its first image, PNG before
    SVG, into the downloaded notebook: a diagram's is its SVG."""
    diagram = diagrams.unrolled_rnn_figure(3)
    bundle, _ = format_display_data(diagram)
    first = next(m for m in ("image/png", "image/svg+xml", "image/jpeg") if m in bundle)
    assert first == "image/svg+xml"
    assert diagram.svg() == bundle[first]  # deterministic: the same diagram, the same file
    assert diagram.axes == diagram.figure.axes  # the figure's attributes, for tests and slides


@pytest.mark.parametrize("steps", [1, 3, 5])
def test_the_unrolled_rnn_shows_each_step_with_the_equations_symbols(steps):
    fig = diagrams.unrolled_rnn_figure(steps)
    for t in range(1, steps + 1):
        for symbol in (rf"$\mathbf{{x}}_{t}$", rf"$\mathbf{{h}}_{t}$", f"$L_{t}$"):
            assert count(fig, symbol) == 1, symbol
    assert count(fig, r"$\mathbf{h}_0$") == 1 and count(fig, rf"$\mathbf{{h}}_{steps + 1}$") == 0
    assert {"$W_{xh}$", "$W_{hh}$", "$W_{hy}$"} <= set(texts(fig))


def test_truncated_bptt_draws_one_window_per_k_steps():
    fig = diagrams.unrolled_rnn_figure(7, truncate=3)
    windows = [p for p in fig.axes[0].patches if type(p).__name__ == "Rectangle"]
    assert len(windows) == math.ceil(7 / 3)
    assert any("every 3 steps" in t for t in texts(fig))
    with pytest.raises(ValueError, match="truncate"):
        diagrams.unrolled_rnn_figure(3, truncate=3)


@pytest.mark.parametrize(
    ("cell", "gates", "symbols"),
    [
        (GRU(3, 5), 3, [r"$\mathbf{z}_t$", r"$\mathbf{r}_t$", r"$\tilde{\mathbf{h}}_t$"]),
        (nn.GRU(3, 5), 3, [r"$\mathbf{z}_t$", r"$\mathbf{r}_t$"]),
        (
            LSTM(3, 5),
            4,
            [r"$\mathbf{i}_t$", r"$\mathbf{f}_t$", r"$\mathbf{g}_t$", r"$\mathbf{o}_t$"],
        ),
        (nn.LSTM(3, 5), 4, [r"$\mathbf{c}_{t-1}$", r"$\mathbf{c}_t$"]),
    ],
)
def test_a_gated_cell_shows_one_box_per_gate_block_of_its_weights(cell, gates, symbols):
    fig = diagrams.gated_cell_figure(cell)
    boxes = [t for t in texts(fig) if t.startswith(("σ\n", "tanh\n"))]
    assert len(boxes) == gates == cell.weight_ih_l0.shape[0] // cell.hidden_size
    assert sum(b.startswith("tanh") for b in boxes) == 1  # one candidate, the rest gates
    for symbol in symbols:
        assert any(symbol in t for t in texts(fig)), symbol
    with pytest.raises(TypeError, match="GRU or an LSTM"):
        diagrams.gated_cell_figure(nn.RNN(3, 5))


@pytest.mark.parametrize("T", [2, 5, 8])
def test_the_causal_mask_blocks_exactly_the_future(T):
    fig = diagrams.causal_mask_figure(T)
    assert count(fig, r"$-\infty$") == T * (T - 1) // 2


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
def test_multi_head_attention_shows_the_modules_heads_and_sizes(heads):
    attention = MultiHeadAttention(32, heads)
    fig = diagrams.multi_head_figure(attention)
    shown = [t for t in texts(fig) if t.startswith("Attention\n")]
    assert len(shown) == min(heads, 3 if heads > 4 else heads)
    assert any(f"h_{{{heads}}}" in t for t in texts(fig))  # the last head is always named
    assert any(f"{heads} head" in t and f"d_k = d/H = {32 // heads}" in t for t in texts(fig))


def test_the_blocks_place_the_norm_as_each_block_does():
    post, pre = EncoderBlock(16, 2, 32, norm_first=False), EncoderBlock(16, 2, 32, norm_first=True)
    fig = diagrams.block_figure(post, pre)
    assert [ax.get_title() for ax in fig.axes] == ["post-LN (the original)", "pre-LN"]
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.texts]
        assert labels.count("LN") == 2 and labels.count("+") == 2
        order = [lbl for lbl in labels if lbl in ("LN", "self-attention", "+")][:3]
        expected = ["self-attention", "+", "LN"] if "post" in ax.get_title() else None
        assert expected is None or order == expected
    assert [t.get_text() for t in fig.axes[1].texts][:3] == [
        r"$\mathbf{x}$",
        "LN",
        "self-attention",
    ]


def _orange_arrows(fig) -> int:
    return sum(
        type(p).__name__ == "FancyArrowPatch" and same_color(p.get_edgecolor(), TARGET_COLOR)
        for p in fig.axes[0].patches
    )


@pytest.mark.parametrize(
    ("context", "attention", "routes"),
    [
        (("init",), None, 1),
        (("input",), None, 3),
        (("output",), None, 3),
        (("init", "input", "output"), None, 7),
        ((), "dot", 1 + 3 * 4),
    ],
)
def test_the_encoder_decoder_draws_the_models_own_routes_for_the_context(
    context, attention, routes
):
    model = Seq2Seq(9, 7, context=context or ("init",), attention=attention)
    fig = diagrams.encoder_decoder_figure(model, source=4, target=3)
    title = fig.axes[0].get_title(loc="left")
    assert _orange_arrows(fig) == routes
    if attention:
        assert "attention (dot)" in title
    else:
        assert all(f'"{c}"' in title for c in context)
    assert count(fig, r"$\mathbf{h}^{e}_4$") == 1 and count(fig, r"$\mathbf{h}_3$") == 1


def test_free_running_feeds_back_its_own_outputs_and_teacher_forcing_the_references():
    fig = diagrams.teacher_forcing_figure(5)
    assert count(fig, "$y_1$") == 1 and count(fig, r"$\hat y_1$") == 2 + 1  # two rows' outputs
    assert _orange_arrows(fig) == 5 - 1


@pytest.mark.parametrize(("layers", "bidirectional"), [(1, False), (3, False), (2, True)])
def test_a_stacked_rnn_shows_the_modules_layers_and_directions(layers, bidirectional):
    rnn = nn.LSTM(3, 4, num_layers=layers, bidirectional=bidirectional)
    fig = diagrams.stacked_rnn_figure(rnn, steps=3)
    for layer in range(1, layers + 1):
        for t in range(1, 4):
            label = rf"$\mathbf{{h}}^{{({layer})}}_{t}$"
            assert count(fig, label) == (2 if bidirectional else 1), label
    assert count(fig, rf"$\mathbf{{h}}^{{({layers + 1})}}_1$") == 0
    title = fig.axes[0].get_title(loc="left")
    assert title.startswith(f"LSTM: {layers} layer") and ("both" in title) == bidirectional


def _toy():
    import torch

    from seqmodels.decoding import from_distribution

    after = {(): (0.0, 0.6, 0.4), (2,): (0.4, 0.3, 0.3), (3,): (0.9, 0.05, 0.05)}

    def distribution(prefix):
        return torch.tensor([0.0, *after.get(tuple(prefix), (1.0, 0.0, 0.0))], dtype=torch.float64)

    return from_distribution(distribution)


def _toy_beam_tree():
    from seqmodels.decoding import beam_search

    trace: list = []
    beam_search(_toy(), 2, 3, trace=trace)
    return diagrams.beam_tree_figure(trace, {2: "a", 3: "b"}, beam=2)


@pytest.mark.parametrize("beam", [1, 2, 3])
def test_the_beam_tree_draws_what_the_search_ranked_and_changes_nothing(beam):
    import torch

    from seqmodels.decoding import beam_search, table_next_log_probs

    g = torch.Generator().manual_seed(beam)
    model = table_next_log_probs(torch.randn(5, 5, 5, 5, 5, generator=g))  # 4 steps, V = 5
    trace: list = []
    assert beam_search(model, beam, 4, trace=trace) == beam_search(model, beam, 4)
    for step in trace:
        assert sum(c["kept"] for c in step) <= beam and len(step) <= 2 * beam
        assert all(c["finished"] == (c["kept"] and c["token"] == 1) for c in step)
        scores = [c["log_prob"] for c in step]
        assert scores == sorted(scores, reverse=True)
    toy: list = []
    beam_search(_toy(), 2, 3, trace=toy)
    fig = diagrams.beam_tree_figure(toy, {2: "a", 3: "b"}, beam=2)
    nodes = [t for t in texts(fig) if "  " in t]
    assert len(nodes) == sum(len(step) for step in toy) == 6
    assert "</s>  0.36" in nodes and "a  0.60" in nodes  # b </s> beats a's best ending
    assert fig.axes[0].get_title(loc="left").startswith("beam of 2")


def test_the_look_up_shows_each_keys_weight_as_the_attention_computed_it():
    import torch

    from seqmodels.attention import scaled_dot_attention

    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 8, generator=g), torch.randn(1, 5, 8, generator=g)
    _, weights = scaled_dot_attention(q, k, k)
    fig = diagrams.attention_figure(weights[0, 0])
    shown = [t for t in texts(fig) if t.startswith(r"$\alpha_")]
    assert shown == [
        rf"$\alpha_{{{j + 1}}}$ = {a:.2f}" for j, a in enumerate(weights[0, 0].tolist())
    ]
    with pytest.raises(ValueError, match="summing to 1"):
        diagrams.attention_figure([0.5, 0.6])


def _arrows(ax) -> int:
    return sum(type(p).__name__ == "FancyArrowPatch" for p in ax.patches)


@pytest.mark.parametrize(("tokens", "t", "n"), [(5, 4, 3), (6, 3, 2), (4, 4, 4)])
def test_the_taxonomy_shows_what_each_family_conditions_on(tokens, t, n):
    fig = diagrams.taxonomy_figure(tokens, t=t, n=n)
    rows = {ax.get_title(loc="left").split(" (")[0].split(",")[0]: ax for ax in fig.axes}
    assert list(rows) == ["left to right", "Markov", "independent", "masked"]
    for ax in fig.axes:  # every row draws the whole text, w_1 … w_tokens
        labels = [x.get_text() for x in ax.texts]
        assert [lbl for lbl in labels if lbl.startswith("$w_")] == [
            f"$w_{s}$" for s in range(1, tokens + 1)
        ]
    # one arrow per token the prediction of w_t reads, and the probability of the chapter's
    # equations: the chain rule's prefix, the Markov assumption's last n - 1 tokens
    reads = {"left to right": t - 1, "Markov": n - 1, "independent": 0, "masked": tokens - 1}
    for family, ax in rows.items():
        assert _arrows(ax) == reads[family], family
    prefix = ", ".join(f"w_{s}" for s in range(1, t))
    markov = ", ".join(f"w_{s}" for s in range(t - n + 1, t))
    assert rf"$p(w_{t} \mid {prefix})$" in [x.get_text() for x in rows["left to right"].texts]
    assert rf"$p(w_{t} \mid {markov})$" in [x.get_text() for x in rows["Markov"].texts]
    assert f"$p(w_{t})$" in [x.get_text() for x in rows["independent"].texts]
    assert f"order {n - 1} ({n}-gram)" in rows["Markov"].get_title(loc="left")
    with pytest.raises(ValueError, match="n-gram order"):
        diagrams.taxonomy_figure(5, t=2, n=3)


@pytest.mark.parametrize(
    ("queries", "keys", "d", "mask"),
    [(3, 4, 8, None), (2, 3, 16, [1, 0, 1]), (4, 6, 8, [1, 1, 1, 1, 0, 0])],
)
def test_scaled_dot_attention_shows_its_sizes_mask_and_the_equations_symbols(
    queries, keys, d, mask
):
    fig = diagrams.scaled_dot_attention_figure(queries, keys, d, key_mask=mask)
    padded = 1 if mask is None else mask.count(0)
    shown = texts(fig)
    for symbol in (
        r"$S = QK^\top/\sqrt{d_k}$",  # eq-scores' scaled dot score, all pairs at once
        "mask $m_j$",  # eq-masked-softmax
        r"softmax: $A = (\alpha_{ij})$",
        r"row $i$: $\mathbf{c}_i = \sum_j \alpha_{ij} \mathbf{v}_j$",  # eq-attention
    ):
        assert count(fig, symbol) == 1, symbol
    assert f"$Q$: {queries} × {d}" in shown and f"$K$: {keys} × {d}" in shown
    assert f"$V$: {keys} × {d}" in shown and f"$C = AV$: {queries} × {d}" in shown
    assert count(fig, f"{queries} × {keys}") == 3  # the scores, the masked scores, the weights
    cells = [p for p in fig.axes[0].patches if type(p).__name__ == "Rectangle"]
    assert len(cells) == 3 * queries * keys
    written = count(fig, r"$-\infty$"), count(fig, "0")
    small = keys > 4  # cells too small to write in: the padded columns are grey instead
    assert written == ((0, 0) if small else (queries * padded, queries * padded))
    assert any(t.startswith(f"{padded} padded key") for t in shown)
    with pytest.raises(ValueError, match="at least one True"):
        diagrams.scaled_dot_attention_figure(2, 3, 4, key_mask=[0, 0, 0])
