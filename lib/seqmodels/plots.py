"""Figures shared by the chapters, each a function that returns a matplotlib Figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch

# (title, which positions condition the prediction of the target, subtitle)
_TAXONOMY = [
    ("Autoregressive (left to right)", [0, 1, 2], r"$p(x_4 \mid x_1, x_2, x_3)$: RNNs, GPT"),
    ("Markov / n-gram (n = 3)", [1, 2], r"$p(x_4 \mid x_2, x_3)$: n-grams, Bengio 2003"),
    ("Independent (unigram)", [], r"$p(x_4)$: bag of words"),
    ("Bidirectional / masked", [0, 1, 2, 4], r"$p(x_4 \mid x_{\neq 4})$: BERT"),
]


def taxonomy_figure(n_tokens: int = 5, target: int = 3) -> Figure:
    """Four families of sequence model, drawn by the tokens that one prediction may see."""
    fig, axes = plt.subplots(len(_TAXONOMY), 1, figsize=(6.4, 6.2))
    for ax, (title, sources, formula) in zip(axes, _TAXONOMY, strict=True):
        ax.set_xlim(-0.6, n_tokens - 0.4)
        ax.set_ylim(-0.55, 0.95)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(f"{title}    {formula}", fontsize=9.5, loc="left")
        for i in range(n_tokens):
            is_target, is_source = i == target, i in sources
            face = "#f4a261" if is_target else ("#8ecae6" if is_source else "#eeeeee")
            ax.add_patch(Circle((i, 0), 0.3, facecolor=face, edgecolor="#333333", lw=1))
            label = "?" if is_target else f"$x_{i + 1}$"
            ax.text(i, 0, label, ha="center", va="center", fontsize=10)
        for s in sources:
            ax.add_patch(
                FancyArrowPatch(
                    (s, 0.3),
                    (target, 0.3),
                    connectionstyle=f"arc3,rad={-0.35 if s < target else 0.35}",
                    arrowstyle="-|>",
                    mutation_scale=10,
                    color="#1d3557",
                    lw=1.1,
                )
            )
    fig.tight_layout()
    return fig


def perplexity_vs_order(
    curves: Mapping[str, Sequence[float]],
    orders: Sequence[int],
    bounds: Mapping[str, float] | None = None,
    floors: Mapping[str, Sequence[float]] | None = None,
    ax: plt.Axes | None = None,
    ylabel: str = "held-out perplexity",
) -> plt.Axes:
    """Perplexity against n-gram order: one solid line per curve, its bound dashed, its floor dotted.

    `bounds` maps a curve's label to a horizontal line (the best any model can do); `floors` maps it
    to one value per order (the best a model of that order can do).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for color, (label, values) in zip(colors, curves.items(), strict=False):
        if len(values) != len(orders):
            raise ValueError(f"curve {label!r} has {len(values)} points for {len(orders)} orders")
        ax.plot(orders, values, "o-", color=color, label=label)
        if bounds and label in bounds:
            ax.axhline(bounds[label], color=color, ls="--", lw=1)
        if floors and label in floors:
            ax.plot(orders, floors[label], ":", color=color, lw=1.5)
    styles = [("-", "model (held-out)")]
    styles += [("--", "bound, any model")] if bounds else []
    styles += [(":", "best model of order n")] if floors else []
    if len(styles) > 1:
        for ls, text in styles:
            ax.plot([], [], ls, color="gray", label=text)
    ax.set_xlabel("n-gram order n")
    ax.set_ylabel(ylabel)
    ax.set_xticks(list(orders))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def next_token_bars(
    distributions: Mapping[str, torch.Tensor],
    labels: Sequence[str],
    top: int = 8,
    title: str = "",
) -> Figure:
    """Small multiples: the `top` most probable next tokens under each named distribution."""
    if not distributions:
        raise ValueError("expected at least one distribution to plot")
    n = len(distributions)
    fig, axes = plt.subplots(1, n, figsize=(2.6 * n, 2.8), squeeze=False)
    for ax, (name, probs) in zip(axes[0], distributions.items(), strict=True):
        if probs.ndim != 1 or len(probs) != len(labels):
            shape = tuple(probs.shape)
            raise ValueError(f"expected {name!r} of shape ({len(labels)},), got {shape}")
        values, ids = probs.double().topk(min(top, len(labels)))
        ax.barh(range(len(ids))[::-1], values.tolist(), color="#457b9d")
        ax.set_yticks(range(len(ids))[::-1], [labels[i] for i in ids.tolist()], fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("probability", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
