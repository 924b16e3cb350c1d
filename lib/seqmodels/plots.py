"""The book's figures and their one style: each a function that returns a matplotlib Figure or Axes.

Every chapter calls `use_book_style` once. It fixes the fonts (large enough to read when a figure
is shrunk to a phone's width, see `smallest_text_px`), the figure width, and SVG output for the
notebook (crisp at any pixel density), and `MODEL_COLORS` gives each kind of model the colour it
keeps from chapter to chapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch
from matplotlib.text import Text

#: One colour per kind of model, the same in every chapter (Okabe–Ito and Tol's colour-blind-safe
#: palettes). n-gram orders run from light to dark blue; "kneser-ney" is the best n-gram model.
MODEL_COLORS: dict[str, str] = {
    "unigram": "#9ecae1",
    "bigram": "#6baed6",
    "trigram": "#2171b5",
    "4-gram": "#08306b",
    "kneser-ney": "#08306b",
    "add-k": "#7f7f7f",
    "feedforward": "#d55e00",
    "mixture": "#cc79a7",
    "rnn": "#009e73",
    "gru": "#e69f00",
    "lstm": "#882255",
    "transformer": "#000000",
    "truth": "#555555",
}
#: Colours for series that are not model kinds (e.g. one curve per distance d).
SERIES_COLORS: tuple[str, ...] = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9")
#: Highlight colours of diagrams: the predicted position, and the positions it conditions on.
TARGET_COLOR, SOURCE_COLOR, OTHER_COLOR = "#e69f00", "#56b4e9", "#eeeeee"

FIGURE_WIDTH = 5.5  # inches: 528 CSS px at 100 %, the width of the book's text column or less
PHONE_WIDTH_PX = 352  # a 400-px-wide phone shows figures 352 px wide (measured in Chromium)
DESKTOP_WIDTH_PX = 784  # the text column of a 1,400-px-wide window
MIN_TEXT_PX = 9.0  # no text in a figure is smaller than this on either (CSS px)

#: The book's matplotlib settings (`use_book_style` applies them).
BOOK_STYLE: dict[str, object] = {
    "figure.figsize": (FIGURE_WIDTH, 3.4),
    "figure.dpi": 100,
    "savefig.dpi": 200,  # a PNG, if one is ever made, has 2x pixels
    "font.size": 11,
    "axes.titlesize": 11,
    "axes.labelsize": 11,
    "xtick.labelsize": 10.5,
    "ytick.labelsize": 10.5,
    "legend.fontsize": 10.5,
    "legend.title_fontsize": 10.5,
    "legend.framealpha": 0.9,
    "figure.titlesize": 11,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": mpl.cycler(color=list(SERIES_COLORS)),
    "lines.linewidth": 1.8,
    "svg.fonttype": "path",  # text drawn as outlines: the same on every machine
    "svg.hashsalt": "seqmodels",  # stable ids, so an unchanged figure gives an unchanged file
}


def use_book_style(svg: bool = True) -> None:
    """Apply `BOOK_STYLE`; in a notebook, also show figures as SVG (vector, sharp on any screen)."""
    plt.rcParams.update(BOOK_STYLE)
    if not svg:
        return
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return
    if get_ipython() is None:
        return
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    set_matplotlib_formats("svg", bbox_inches="tight", metadata={"Date": None})


def model_color(kind: str) -> str:
    """The colour of a model kind (``"bigram"``, ``"lstm"``, …) or of an n-gram order (``"3-gram"``)."""
    key = kind.lower()
    key = {"1-gram": "unigram", "2-gram": "bigram", "3-gram": "trigram"}.get(key, key)
    if key not in MODEL_COLORS:
        raise KeyError(f"no colour for model kind {kind!r}; expected one of {sorted(MODEL_COLORS)}")
    return MODEL_COLORS[key]


def shown_width_in(fig: Figure) -> float:
    """The width in inches of `fig` as the book exports it: the larger of its own width and its tight
    bounding box (``bbox_inches="tight"``, padded by ``savefig.pad_inches`` each side), since text
    that sticks out of the figure (a legend or label placed outside the axes) widens the image."""
    fig.draw_without_rendering()  # tick labels get their text, constrained layouts their place
    tight = fig.get_tightbbox()
    pad = float(plt.rcParams["savefig.pad_inches"])
    return max(float(fig.get_size_inches()[0]), float(tight.width) + 2 * pad)


def smallest_text_px(
    fig: Figure, shown_width_px: float = PHONE_WIDTH_PX, *, texts: bool = False
) -> float | list[tuple[float, str]]:
    """The height in CSS px of the figure's smallest visible text when the page shows it at most
    `shown_width_px` wide (`PHONE_WIDTH_PX` on a 400-px phone, `DESKTOP_WIDTH_PX` at 1,400 px).

    A figure is shown at min(its native width, the column): text of ``s`` points in an image ``w``
    inches wide (`shown_width_in`) is ``s / 72 * min(shown_width_px / w, 96)`` px high, 96 CSS px per
    inch at its native size. Every visible, non-blank `Text` of the figure counts: titles, axis and
    tick labels, annotations, legends, colour-bar labels. A figure-like object that wraps a figure
    (a diagram's `.figure`) is measured through it. With ``texts=True``, every text's
    ``(px, text)``, smallest first, instead of the minimum.
    """
    fig = getattr(fig, "figure", fig) if not isinstance(fig, Figure) else fig
    scale = min(shown_width_px / shown_width_in(fig), 96.0)
    sizes = sorted(
        (t.get_fontsize() / 72 * scale, t.get_text())
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip()
    )
    if not sizes:
        raise ValueError("the figure has no visible text to measure")
    return sizes if texts else sizes[0][0]


def perplexity_vs_order(
    curves: Mapping[str, Sequence[float]],
    orders: Sequence[int],
    bounds: Mapping[str, float] | None = None,
    floors: Mapping[str, Sequence[float]] | None = None,
    ax: Axes | None = None,
    ylabel: str = "held-out perplexity",
) -> Axes:
    """Perplexity against n-gram order: one solid line per curve, its bound dashed, its floor dotted.

    `bounds` maps a curve's label to a horizontal line (the best any model can do); `floors` maps it
    to one value per order (the best a model of that order can do).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.6))
    for color, (label, values) in zip(SERIES_COLORS, curves.items(), strict=False):
        if len(values) != len(orders):
            raise ValueError(f"curve {label!r} has {len(values)} points for {len(orders)} orders")
        ax.plot(orders, values, "o-", color=color, label=label)
        if bounds and label in bounds:
            ax.axhline(bounds[label], color=color, ls="--", lw=1.2)
        if floors and label in floors:
            ax.plot(orders, floors[label], ":", color=color, lw=2)
    styles = [("-", "model (held-out)")]
    styles += [("--", "bound, any model")] if bounds else []
    styles += [(":", "best model of order n")] if floors else []
    if len(styles) > 1:
        for ls, text in styles:
            ax.plot([], [], ls, color="gray", label=text)
    ax.set_xlabel("n-gram order n")
    ax.set_ylabel(ylabel)
    ax.set_xticks(list(orders))
    ax.legend(ncols=2)
    return ax


#: How `token_label` shows tokens that are hard to read on their own.
TOKEN_NAMES = {
    ",": "“,” comma",
    ".": "“.” full stop",
    ";": "“;” semicolon",
    ":": "“:” colon",
    "!": "“!”",
    "?": "“?”",
    "</s>": "</s> (end)",
}


def token_label(token: str) -> str:
    """A token as a legible axis label: punctuation is named (``","`` → ``"“,” comma"``)."""
    return TOKEN_NAMES.get(token, token)


def next_token_bars(
    distributions: Mapping[str, torch.Tensor],
    labels: Sequence[str],
    top: int = 6,
    title: str = "",
) -> Figure:
    """Small multiples: the `top` most probable next tokens under each named distribution.

    Each panel is coloured by its model kind (`model_color` of its name, e.g. ``"bigram"``).
    """
    if not distributions:
        raise ValueError("expected at least one distribution to plot")
    n = len(distributions)
    fig, axes = plt.subplots(
        n, 1, figsize=(FIGURE_WIDTH, 0.35 + 1.45 * n * top / 6), squeeze=False, sharex=True
    )
    for ax, (name, probs) in zip(axes[:, 0], distributions.items(), strict=True):
        if probs.ndim != 1 or len(probs) != len(labels):
            shape = tuple(probs.shape)
            raise ValueError(f"expected {name!r} of shape ({len(labels)},), got {shape}")
        values, ids = probs.double().topk(min(top, len(labels)))
        try:
            color = model_color(name)
        except KeyError:
            color = SERIES_COLORS[0]
        ax.barh(range(len(ids))[::-1], values.tolist(), color=color, edgecolor="#333333", lw=0.5)
        ax.set_yticks(range(len(ids))[::-1], [token_label(labels[i]) for i in ids.tolist()])
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontweight="bold")
        ax.grid(axis="y", visible=False)
    axes[-1, 0].set_xlabel("probability of the next token")
    if title:
        fig.suptitle(title)
    fig.tight_layout(h_pad=0.6)
    return fig


def training_curve(
    step_loss: Sequence[float],
    eval_steps: Sequence[int],
    eval_loss: Sequence[float],
    model: str = "feedforward",
    references: Mapping[str, tuple[float, str]] | None = None,
    eval_label: str = "held-out",
    ylim: tuple[float, float] | None = None,
) -> Figure:
    """Loss of each training step (light), held-out loss at checkpoints (dots), reference lines.

    `references` maps a label to ``(loss, model kind)``: a dashed line in that kind's colour. Losses
    are cross-entropies in nats per token.
    """
    if len(eval_steps) != len(eval_loss):
        raise ValueError(
            f"expected one held-out loss per checkpoint, got {len(eval_loss)} for {len(eval_steps)}"
        )
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.4))
    color = model_color(model)
    steps = range(1, len(step_loss) + 1)
    ax.plot(steps, step_loss, color=color, alpha=0.35, lw=1, label="training mini-batch")
    ax.plot(eval_steps, eval_loss, "o-", color=color, label=eval_label)
    for label, (loss, kind) in (references or {}).items():
        ax.axhline(loss, ls="--", color=model_color(kind), label=label)
    ax.set(xlabel="training step", ylabel="cross-entropy (nats/token)")
    if ylim:
        ax.set_ylim(*ylim)
    ax.legend()
    fig.tight_layout()
    return fig


# ---- Chapter 2: backpropagation ---------------------------------------------------------------

#: Colours of Chapter 2's two ways to a gradient, and of the forward and backward passes.
FORWARD_COLOR, BACKWARD_COLOR = "#333333", "#d55e00"


def computation_graph_figure() -> Figure:
    r"""The worked example's graph: $W, \mathbf x \to \mathbf z \to \hat{\mathbf y} \to L \leftarrow \mathbf y$.

    Forward arrows (dark) carry values, labelled with the op; backward arrows (orange) carry
    $\partial L/\partial\cdot$, labelled with the Jacobian each step multiplies by and its shape.
    """
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 2.9))
    ax.set_xlim(-0.2, 10.2)
    ax.set_ylim(-0.2, 4.4)
    ax.axis("off")
    nodes = {
        "W": (0.6, 3.0, "$W$\n3×2"),
        "x": (0.6, 1.0, r"$\mathbf{x}$" + "\n2"),
        "z": (3.6, 2.0, r"$\mathbf{z} = W\mathbf{x}$" + "\n3"),
        "yhat": (6.6, 2.0, r"$\hat{\mathbf{y}}$" + "\n3"),
        "L": (9.4, 2.0, "$L$\n1"),
        "y": (9.4, 3.9, r"$\mathbf{y}$ (target)"),
    }
    for key, (x, y, text) in nodes.items():
        face = OTHER_COLOR if key in ("x", "y") else (SOURCE_COLOR if key == "W" else "white")
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=10.5,
            bbox={"boxstyle": "round,pad=0.35", "fc": face, "ec": "#333333", "lw": 1},
        )

    def arrow(a, b, color, rad=0.0, shrink=(22, 22)):
        ax.add_patch(
            FancyArrowPatch(
                a,
                b,
                connectionstyle=f"arc3,rad={rad}",
                arrowstyle="-|>",
                mutation_scale=11,
                color=color,
                lw=1.3,
                shrinkA=shrink[0],
                shrinkB=shrink[1],
            )
        )

    pos = {k: (x, y) for k, (x, y, _) in nodes.items()}
    for a, b in [("W", "z"), ("x", "z"), ("z", "yhat"), ("yhat", "L")]:
        arrow(pos[a], pos[b], FORWARD_COLOR, shrink=(22, 34 if b == "z" else 22))
    arrow(pos["y"], pos["L"], FORWARD_COLOR, shrink=(10, 20))
    ax.text(5.1, 2.15, "softmax", ha="center", va="bottom", fontsize=10.5)
    ax.text(8.0, 2.15, "cross-entropy", ha="center", va="bottom", fontsize=10.5)
    # the backward pass, below the line (and above it to reach W)
    arrow(pos["L"], pos["yhat"], BACKWARD_COLOR, rad=-0.5)
    arrow(pos["yhat"], pos["z"], BACKWARD_COLOR, rad=-0.5)
    arrow(pos["z"], pos["W"], BACKWARD_COLOR, rad=0.35, shrink=(30, 22))
    ax.text(
        8.0,
        0.75,
        r"$\partial L/\partial\hat{\mathbf{y}}$: 1×3",
        ha="center",
        va="top",
        fontsize=10.5,
        color=BACKWARD_COLOR,
    )
    ax.text(
        5.1,
        0.75,
        r"$\partial\hat{\mathbf{y}}/\partial\mathbf{z}$: 3×3",
        ha="center",
        va="top",
        fontsize=10.5,
        color=BACKWARD_COLOR,
    )
    ax.text(
        2.6,
        3.75,
        r"$\partial\mathbf{z}/\partial W$: 3×6",
        ha="center",
        va="bottom",
        fontsize=10.5,
        color=BACKWARD_COLOR,
    )
    ax.plot([], [], color=FORWARD_COLOR, label="forward: values")
    ax.plot([], [], color=BACKWARD_COLOR, label=r"backward: $\partial L/\partial\,\cdot$")
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, -0.08), ncols=2, frameon=False)
    fig.tight_layout(pad=0.2)
    return fig


def jacobian_cost_figure(
    widths: Sequence[int], costs: Mapping[str, Mapping[str, Sequence[float]]]
) -> Figure:
    """Two log-log panels against layer width: seconds, and peak bytes of derivative tensors held.

    `costs` maps a method's name to ``{"seconds": [...], "bytes": [...]}``, one value per width (as
    `seqmodels.jacobians.jacobian_vs_vjp_costs` returns).
    """
    fig, axes = plt.subplots(1, 2, figsize=(FIGURE_WIDTH, 3.3))
    for color, (name, cost) in zip((BACKWARD_COLOR, SERIES_COLORS[0]), costs.items(), strict=False):
        for ax, key in zip(axes, ("seconds", "bytes"), strict=True):
            if len(cost[key]) != len(widths):
                raise ValueError(f"{name!r} has {len(cost[key])} {key} for {len(widths)} widths")
            ax.loglog(widths, cost[key], "o-", color=color, label=name)
    for ax, ylabel in zip(axes, ("time (s)", "derivative memory (bytes)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(widths)[::2], [str(w) for w in list(widths)[::2]])
        ax.set_xlabel("layer width")
        ax.set_ylabel(ylabel)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncols=2, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    return fig


def loss_curves(
    curves: Mapping[str, Sequence[float]],
    styles: Mapping[str, Mapping[str, object]] | None = None,
    xlabel: str = "training step",
    ylabel: str = "cross-entropy (nats/token)",
    logy: bool = False,
    ylim: tuple[float, float] | None = None,
    legend_title: str | None = None,
    legend_loc: str = "best",
    legend_ncols: int = 1,
    legend_anchor: tuple[float, float] | None = None,
) -> Figure:
    """One line per named curve of losses against step (1, 2, …); `styles` adds matplotlib options per name.

    `legend_anchor` places the legend's `legend_loc` point at these axes coordinates.
    """
    if not curves:
        raise ValueError("expected at least one curve to plot")
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.4))
    for name, values in curves.items():
        ax.plot(
            range(1, len(values) + 1),
            list(values),
            label=name,
            **dict((styles or {}).get(name, {})),
        )
    if logy:
        ax.set_yscale("log")
    if ylim:
        ax.set_ylim(*ylim)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.legend(title=legend_title, loc=legend_loc, ncols=legend_ncols, bbox_to_anchor=legend_anchor)
    fig.tight_layout()
    return fig


def gradient_check_figure(
    eps: Sequence[float],
    errors: Mapping[str, Sequence[float]],
    styles: Mapping[str, Mapping[str, object]] | None = None,
    guides: Mapping[str, Sequence[float]] | None = None,
    tolerance: float | None = None,
    ylim: tuple[float, float] | None = None,
) -> Figure:
    r"""Relative error of central differences against the step $\epsilon$, log-log: the V of truncation and round-off.

    `errors` maps a label to one relative error per step; `guides` are thin dotted grey lines (a
    predicted error, say; only the first is named in the legend); `tolerance` is a dashed line.
    """
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 4.4))
    for name, values in errors.items():
        if len(values) != len(eps):
            raise ValueError(f"{name!r} has {len(values)} errors for {len(eps)} steps")
        ax.loglog(eps, values, label=name, **dict((styles or {}).get(name, {"marker": "o"})))
    for i, (name, values) in enumerate((guides or {}).items()):
        if len(values) != len(eps):
            raise ValueError(f"guide {name!r} has {len(values)} values for {len(eps)} steps")
        ax.loglog(eps, values, ":", color="#777777", lw=1.2, label=name if i == 0 else "_" + name)
    if tolerance is not None:
        ax.axhline(tolerance, ls="--", color="#333333", lw=1, label=f"tolerance {tolerance:g}")
    ax.set(xlabel=r"finite-difference step $\epsilon$", ylabel="relative error")
    if ylim:
        ax.set_ylim(*ylim)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, ncols=2, loc="lower center", frameon=False)
    rows = (len(labels) + 1) // 2
    fig.tight_layout(rect=(0, 0.06 * rows + 0.01, 1, 1))
    return fig


def cost_vs_length(
    lengths: Sequence[int],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    colors: Mapping[str, str] | None = None,
) -> Figure:
    """One log-log line per named series of costs (seconds, bytes) against a length (tokens)."""
    if not series:
        raise ValueError("expected at least one series to plot")
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 3.2))
    for i, (name, values) in enumerate(series.items()):
        if len(values) != len(lengths):
            raise ValueError(f"{name!r} has {len(values)} values for {len(lengths)} lengths")
        color = (colors or {}).get(name, SERIES_COLORS[i % len(SERIES_COLORS)])
        ax.loglog(list(lengths), list(values), "o-", color=color, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(lengths), [str(n) for n in lengths])
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.legend(frameon=False)
    fig.tight_layout()
    return fig


def stacked_curves(
    panels: Sequence[tuple[str, Mapping[str, Sequence[float]], bool]],
    x: Sequence[float] | None = None,
    xlabel: str = "training step",
    styles: Mapping[str, Mapping[str, object]] | None = None,
    legend_title: str | None = None,
) -> Figure:
    """Panels stacked one above the other on a shared x axis, legible at phone width.

    Each panel is ``(ylabel, {name: values}, log_y)``; a name keeps its colour from panel to panel
    (`styles` adds matplotlib options per name); `x` defaults to 1, 2, …. The top panel has the legend.
    """
    if not panels:
        raise ValueError("expected at least one panel to plot")
    height = 0.8 + 2.4 * len(panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(FIGURE_WIDTH, height), sharex=True)
    axes = [axes] if len(panels) == 1 else list(axes)
    colors: dict[str, str] = {}
    for ax, (ylabel, series, log_y) in zip(axes, panels, strict=True):
        if not series:
            raise ValueError(f"panel {ylabel!r} has no series")
        for name, values in series.items():
            xs = list(x) if x is not None else list(range(1, len(values) + 1))
            if len(xs) != len(values):
                raise ValueError(f"{name!r} has {len(values)} values for {len(xs)} x positions")
            color = colors.setdefault(name, SERIES_COLORS[len(colors) % len(SERIES_COLORS)])
            ax.plot(
                xs, list(values), label=name, **{"color": color, **(styles or {}).get(name, {})}
            )
        if log_y:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
    axes[-1].set_xlabel(xlabel)
    axes[0].legend(title=legend_title, ncols=2 if len(colors) > 3 else 1)
    fig.tight_layout()
    return fig


def _short_label(token: str) -> str:
    """`token_label`, but ``</s>`` stays short (a heatmap's rows are narrow)."""
    return token if token == "</s>" else token_label(token)


def attention_heatmaps(
    panels: Sequence[tuple[str, torch.Tensor, Sequence[str], Sequence[str]]],
    xlabel: str = "source position (token)",
    ylabel: str = "output step (token emitted)",
    height: float | None = None,
) -> Figure:
    r"""Attention weights $\alpha_{tj}$ as heatmaps side by side, with one shared colour bar (0–1).

    Each panel is ``(title, weights: (T_out, T_src), source tokens, output tokens)``: row $t$ is
    the distribution over the source that produced output token $t$; columns are labelled with the
    source tokens, rows with the output tokens. `height` (inches) defaults to square cells."""
    if not panels:
        raise ValueError("expected at least one panel to plot")
    widths = [max(w.shape[1], 1) for _, w, _, _ in panels]
    if height is None:  # square cells filling the width left of the colour bar, plus the labels
        cell = 0.7 * FIGURE_WIDTH / sum(widths)
        height = 1.5 + cell * max(w.shape[0] for _, w, _, _ in panels)
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(FIGURE_WIDTH, height),
        gridspec_kw={"width_ratios": widths},
        squeeze=False,
        layout="constrained",  # the colour bar and its label inside the figure's width
    )
    image = None
    for ax, (title, weights, source, output) in zip(axes[0], panels, strict=True):
        if weights.ndim != 2 or tuple(weights.shape) != (len(output), len(source)):
            raise ValueError(
                f"panel {title!r}: expected weights of shape ({len(output)}, {len(source)}), "
                f"got {tuple(weights.shape)}"
            )
        image = ax.imshow(weights.detach().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(len(source)), [_short_label(t) for t in source])
        ax.set_yticks(range(len(output)), [_short_label(t) for t in output])
        ax.tick_params(axis="x", labelrotation=90 if max(map(len, source)) > 1 else 0)
        ax.set_title(title)
        ax.grid(False)
        ax.set_xlabel(xlabel)
    axes[0][0].set_ylabel(ylabel)
    fig.colorbar(image, ax=list(axes[0]), label="attention weight α", fraction=0.05, pad=0.02)
    return fig
