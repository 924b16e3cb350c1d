"""The book's figure style: legible on a phone, one colour per model kind, vector output."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from seqmodels import plots  # noqa: E402


@pytest.fixture(autouse=True)
def book_style():
    with plt.rc_context():
        plots.use_book_style(svg=False)
        yield
    plt.close("all")


def _book_figures():
    """One of every figure the library draws, on small made-up data."""
    ax = plots.perplexity_vs_order(
        {"d = 1": [9.0, 5.0, 4.0], "d = 3": [9.0, 6.0, 5.5]},
        [1, 2, 3],
        bounds={"d = 1": 4.0, "d = 3": 5.0},
        floors={"d = 1": [8.0, 5.0, 4.0], "d = 3": [8.0, 6.0, 5.0]},
    )
    probs = torch.tensor([0.0, 0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    labels = ["<s>", "</s>", ",", ".", "lord"]
    return {
        "perplexity_vs_order": ax.figure,
        "next_token_bars": plots.next_token_bars({"unigram": probs, "trigram": probs}, labels),
        "training_curve": plots.training_curve(
            [6.0, 5.5, 5.2, 5.0],
            [2, 4],
            [5.4, 5.1],
            references={"Kneser–Ney 4-gram": (4.8, "kneser-ney")},
        ),
    }


def test_every_figure_is_legible_on_a_phone_and_fits_the_column():
    for fig_name, fig in _book_figures().items():
        assert fig.get_size_inches()[0] <= plots.FIGURE_WIDTH + 1e-9, fig_name
        for column in (plots.PHONE_WIDTH_PX, plots.DESKTOP_WIDTH_PX):
            px = plots.smallest_text_px(fig, column)
            assert px >= plots.MIN_TEXT_PX, f"{fig_name}: smallest text {px:.1f} px at {column} px"


def test_smallest_text_is_measured_at_the_width_the_phone_shows():
    fig = plt.figure(figsize=(4, 2))
    fig.text(0.1, 0.5, "big", fontsize=12)
    fig.text(0.1, 0.2, "small", fontsize=6)
    fig.text(0.1, 0.8, "   ")  # blank text does not count
    assert plots.smallest_text_px(fig, shown_width_px=360) == pytest.approx(6 / 72 * 90)
    # a figure narrower than the screen is shown at its own size (96 px per inch), not enlarged
    assert plots.smallest_text_px(fig, shown_width_px=2000) == pytest.approx(6 / 72 * 96)
    # the old style (7-pt legends on a 6-inch figure) fails the book's minimum
    old = plt.figure(figsize=(6, 3))
    old.text(0.5, 0.5, "legend", fontsize=7)
    assert plots.smallest_text_px(old) < plots.MIN_TEXT_PX


def test_smallest_text_counts_what_only_drawing_sets_and_what_sticks_out_of_the_figure():
    # tick labels get their text when the figure is drawn: they are measured all the same
    fig, ax = plt.subplots(figsize=(plots.FIGURE_WIDTH, 3))
    ax.plot([0, 1], [0, 1])
    ax.tick_params(labelsize=6)
    ax.set_title("big", fontsize=14)
    small = plots.smallest_text_px(fig, texts=True)[0]
    assert small[0] == pytest.approx(6 / 72 * plots.PHONE_WIDTH_PX / plots.shown_width_in(fig))
    assert small[1] != "big"
    # a legend outside the axes widens the exported image, so the phone shrinks all of it more
    fig, ax = plt.subplots(figsize=(plots.FIGURE_WIDTH, 3), layout="none")
    ax.plot([0, 1], [0, 1], label="a long legend entry outside the axes")
    inside = plots.smallest_text_px(fig)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    assert plots.shown_width_in(fig) > plots.FIGURE_WIDTH + 1
    assert plots.smallest_text_px(fig) < inside
    # the desktop column (784 px) shows a figure up to 8.2 inches at its own size
    wide = plt.figure(figsize=(10, 2))
    wide.text(0.1, 0.5, "text", fontsize=9)
    assert plots.smallest_text_px(wide, plots.DESKTOP_WIDTH_PX) == pytest.approx(9 / 72 * 78.4)
    with pytest.raises(ValueError, match="no visible text"):
        plots.smallest_text_px(plt.figure())


def test_each_model_kind_has_its_own_colour_in_every_chapter():
    kinds = ["unigram", "bigram", "trigram", "4-gram", "feedforward", "mixture"]
    kinds += ["rnn", "gru", "lstm", "transformer"]
    colours = [mcolors.to_hex(plots.MODEL_COLORS[k]) for k in kinds]
    assert len(set(colours)) == len(kinds)
    assert plots.model_color("kneser-ney") == plots.model_color("4-gram")
    assert (
        plots.model_color("3-gram") == plots.model_color("Trigram") == plots.MODEL_COLORS["trigram"]
    )
    with pytest.raises(KeyError, match="no colour for model kind 'hmm'"):
        plots.model_color("hmm")


def test_figures_use_the_colour_of_their_model_kind():
    figs = _book_figures()
    bars = figs["next_token_bars"]
    for ax, kind in zip(bars.axes, ["unigram", "trigram"], strict=True):
        faces = {mcolors.to_hex(p.get_facecolor()) for p in ax.patches}
        assert faces == {plots.MODEL_COLORS[kind]}
    curve = figs["training_curve"].axes[0]
    line_colours = [mcolors.to_hex(line.get_color()) for line in curve.get_lines()]
    assert line_colours[:2] == [plots.MODEL_COLORS["feedforward"]] * 2
    assert line_colours[2] == plots.MODEL_COLORS["kneser-ney"]


def test_punctuation_labels_can_be_told_apart():
    labels = [plots.token_label(t) for t in [",", ".", ";", ":", "</s>", "lord"]]
    assert len(set(labels)) == len(labels)
    assert all(len(label) > 2 for label in labels[:5]) and labels[-1] == "lord"
    fig = _book_figures()["next_token_bars"]
    ticks = {t.get_text() for t in fig.axes[0].get_yticklabels()}
    assert {"“,” comma", "“.” full stop", "lord"} <= ticks


def test_notebooks_get_vector_figures():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        plots.use_book_style()
        fig, ax = plt.subplots()
        ax.plot([1, 2], [3, 4])
        data, _ = shell.display_formatter.format(fig)
        assert "image/svg+xml" in data and "image/png" not in data
        assert plt.rcParams["font.size"] >= 10 and plt.rcParams["legend.fontsize"] >= 10
    finally:
        InteractiveShell.clear_instance()


def test_chapter_figures_have_a_label_alt_text_and_a_caption():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    import sys

    sys.path.insert(0, str(root / "book" / "_ext"))
    from chapters import page_files

    chapters = page_files(root)  # every page of every chapter
    assert chapters
    for path in chapters:
        text = path.read_text()
        assert "mystnb:\n  figure:" not in text, f"{path.name}: use {{glue:figure}} with :alt:"
        blocks = re.findall(r"```\{glue:figure\} (\S+)\n(.*?)```", text, re.S)
        for key, body in blocks:
            options = dict(re.findall(r"^:(\w+): (.+)$", body, re.M))
            caption = re.sub(r"^:\w+: .+$", "", body, flags=re.M).strip()
            assert options.get("name", "").startswith("fig-"), f"{path.name}: {key} has no label"
            assert len(options.get("alt", "")) > 40, f"{path.name}: {key} needs alt text"
            assert caption, f"{path.name}: {key} has no caption"
            assert re.search(rf'glue\("{key}", ', text), f"{path.name}: {key} is never glued"


def _chapter2_figures():
    """One of every Chapter 2 figure, on small made-up data."""
    widths = [16, 32, 64]
    costs = {
        "explicit Jacobians": {"seconds": [1e-4, 4e-4, 3e-3], "bytes": [6e3, 2.4e4, 9.8e4]},
        "vector–Jacobian products": {"seconds": [1e-4, 2e-4, 4e-4], "bytes": [384, 768, 1536]},
    }
    eps = [1.0, 1e-2, 1e-4, 1e-6]
    return {
        "computation_graph": plots.computation_graph_figure(),
        "jacobian_cost": plots.jacobian_cost_figure(widths, costs),
        "loss_curves": plots.loss_curves(
            {"engine": [9.0, 8.0, 7.5], "torch": [9.0, 8.0, 7.5]},
            styles={"torch": {"ls": "--"}},
            logy=True,
        ),
        "gradient_check": plots.gradient_check_figure(
            eps,
            {"float64": [1e-2, 1e-6, 1e-9, 1e-7], "float32": [1e-2, 1e-3, 0.3, 1.0]},
            guides={"round-off": [1e-12, 1e-10, 1e-8, 1e-6], "other": [1e-5, 1e-3, 0.1, 10]},
            tolerance=1e-6,
            ylim=(1e-11, 3),
        ),
    }


def test_chapter2_figures_are_legible_and_draw_what_they_are_given():
    figs = _chapter2_figures()
    for fig_name, fig in figs.items():
        assert fig.get_size_inches()[0] <= plots.FIGURE_WIDTH + 1e-9, fig_name
        for column in (plots.PHONE_WIDTH_PX, plots.DESKTOP_WIDTH_PX):
            px = plots.smallest_text_px(fig, column)
            assert px >= plots.MIN_TEXT_PX, f"{fig_name}: smallest text {px:.1f} px at {column} px"
    time_ax, memory_ax = figs["jacobian_cost"].axes
    assert time_ax.get_xscale() == time_ax.get_yscale() == "log"
    assert [list(line.get_ydata()) for line in memory_ax.get_lines()] == [
        [6e3, 2.4e4, 9.8e4],
        [384, 768, 1536],
    ]
    curves = figs["loss_curves"].axes[0]
    assert curves.get_yscale() == "log" and curves.get_lines()[1].get_linestyle() == "--"
    check = figs["gradient_check"].axes[0]
    legend = [t.get_text() for t in figs["gradient_check"].legends[0].get_texts()]
    assert legend == ["float64", "float32", "round-off", "tolerance 1e-06"]  # one guide named
    assert check.get_ylim() == pytest.approx((1e-11, 3))


def test_chapter2_figures_refuse_mismatched_data():
    with pytest.raises(ValueError, match="2 seconds for 3 widths"):
        plots.jacobian_cost_figure([1, 2, 3], {"m": {"seconds": [1, 2], "bytes": [1, 2, 3]}})
    with pytest.raises(ValueError, match="1 errors for 2 steps"):
        plots.gradient_check_figure([1.0, 0.1], {"a": [0.1]})
    with pytest.raises(ValueError, match="at least one curve"):
        plots.loss_curves({})


def test_cost_vs_length_draws_each_series_and_refuses_a_mismatch():
    from seqmodels.plots import cost_vs_length

    fig = cost_vs_length([1, 2, 4], {"a": [1.0, 2.0, 4.0], "b": [1.0, 1.0, 1.0]}, "n", "s")
    assert len(fig.axes[0].lines) == 2
    assert plots.smallest_text_px(fig) >= plots.MIN_TEXT_PX
    plt.close(fig)
    with pytest.raises(ValueError, match="3 lengths"):
        cost_vs_length([1, 2, 4], {"a": [1.0]}, "n", "s")


def test_stacked_curves_share_the_x_axis_and_keep_a_series_colour_across_panels():
    panels = [
        ("loss", {"a": [3.0, 2.0, 1.0], "b": [3.0, 2.5, 2.0]}, False),
        ("norm", {"a": [1.0, 10.0, 100.0], "b": [1.0, 1.0, 1.0]}, True),
    ]
    fig = plots.stacked_curves(panels, x=[0, 1, 2], xlabel="step")
    top, bottom = fig.axes
    assert [line.get_color() for line in top.lines] == [line.get_color() for line in bottom.lines]
    assert bottom.get_yscale() == "log" and top.get_yscale() == "linear"
    assert list(bottom.lines[0].get_xdata()) == [0, 1, 2]
    assert plots.smallest_text_px(fig) >= plots.MIN_TEXT_PX
    plt.close(fig)
    with pytest.raises(ValueError, match="2 x positions"):
        plots.stacked_curves([("y", {"a": [1.0, 2.0, 3.0]}, False)], x=[0, 1])
    with pytest.raises(ValueError, match="no series"):
        plots.stacked_curves([("y", {}, False)])
