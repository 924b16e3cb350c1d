"""Chapter 1's explorers: language models' next-word distributions, and n-gram order and add-k.

`next_word_explorer` shows each model's most probable next words after a context you type.
`ngram_explorer` has sliders for the order $n$ and add-$k$'s pseudo-count $k$, and shows the
held-out perplexity of every order against $k$ with the chosen model marked, and a sentence sampled
from that model: small $k$ and a longer context lower perplexity until the counts run out; large $k$
hands the probability to words never seen after the context, and the samples show it.
"""

from __future__ import annotations

import copy
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from IPython.display import display
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

from ..data import tokenize
from ..ngram import NGramLM
from ..plots import FIGURE_WIDTH, SERIES_COLORS, model_color, next_token_bars
from ..seeding import make_generator
from ..vocab import Vocabulary
from .explorer import Explorer


def next_word_explorer(
    models: Mapping[str, Callable[[list[int]], torch.Tensor]],
    vocab: Vocabulary,
    context: str = "and god said",
    top: int = 8,
):
    """A text box for a context; shows each model's most probable next words as you type.

    `models` maps a name to a function from context ids to next-token probabilities ``(len(vocab),)``.
    """
    import ipywidgets as widgets

    box = widgets.Text(value=context, description="context", continuous_update=False)
    out = widgets.Output()

    def redraw(*_):
        ids = vocab.encode(tokenize(box.value))
        with out:
            out.clear_output(wait=True)
            fig = next_token_bars(
                {n: f(ids) for n, f in models.items()},
                vocab.itos,
                top=top,
                title=f"next word after “{box.value}”",
            )
            display(fig)
            plt.close(fig)

    box.observe(redraw, names="value")
    redraw()
    return widgets.VBox([box, out])


#: the add-k pseudo-counts at which `ngram_explorer` draws its curves: decades, 1e-4 … 1
K_GRID: tuple[float, ...] = tuple(10.0**e for e in range(-4, 1))


def ngram_explorer(
    models: Mapping[int, NGramLM],
    held_out: Sequence[Sequence[int]],
    vocab: Vocabulary,
    order: int | None = None,
    k: float = 1.0,
    seed: int = 0,
    grid: Sequence[float] = K_GRID,
    max_len: int = 18,
) -> Explorer:
    r"""Sliders for the n-gram order and add-$k$'s $k$: held-out perplexity and a sampled sentence.

    `models` maps each order $n$ to an add-$k$ `NGramLM` already fitted (its counts serve every
    $k$: the explorer sets $k$ on a shallow copy, so the chapter's models keep theirs). The top
    panel draws `NGramLM.perplexity` of `held_out` (sentences of ids) against $k$ on `grid`, one
    curve per order, and marks the chosen $(n, k)$; below it, a sentence that `NGramLM.sample`
    draws from that model with a generator seeded by ``seed`` (at most `max_len` words). `order`
    defaults to the second-lowest order of `models`. The curves are computed once, here; a redraw
    computes one perplexity at most (for a $k$ off `grid`) and one sample.

    ``explorer.result`` has ``order``, ``k``, ``perplexity`` (of `held_out` under the chosen
    model, per predicted token), ``grid``, ``curves`` (order → perplexities on `grid`), ``best_k`` and
    ``best_perplexity`` (the chosen order's minimum on `grid`), ``seed``, ``sample`` (ids) and
    ``words``.
    """
    import ipywidgets as widgets

    if not models:
        raise ValueError("expected at least one fitted add-k model, got none")
    for n, model in models.items():
        if not isinstance(model, NGramLM) or model.smoothing != "add-k" or model.order != n:
            raise ValueError(
                f"expected models[{n}] to be an add-k NGramLM of order {n}, got {model!r}"
            )
    held_out = list(held_out)
    if not held_out:
        raise ValueError("expected at least one held-out sentence, got none")
    orders = sorted(models)
    order = orders[min(1, len(orders) - 1)] if order is None else order
    if order not in models:
        raise ValueError(f"expected order to be one of {orders}, got {order!r}")
    grid = sorted(float(g) for g in grid)
    if not grid or grid[0] <= 0:
        raise ValueError(f"expected a grid of positive k values, got {grid}")
    if not k > 0:
        raise ValueError(f"expected k > 0, got {k!r}")
    low, high = math.log10(min(grid[0], k)), math.log10(max(grid[-1], k))

    cache: dict[tuple[int, float], float] = {}

    def with_k(n: int, value: float) -> NGramLM:
        model = copy.copy(models[n])  # shares the counts; k only enters at prediction time
        model.k = value
        return model

    def held_out_perplexity(n: int, value: float) -> float:
        if (n, value) not in cache:
            cache[n, value] = with_k(n, value).perplexity(held_out)
        return cache[n, value]

    curves = {n: [held_out_perplexity(n, g) for g in grid] for n in orders}  # drawn every time

    def view(order: int, k: float, seed: int) -> tuple[Figure, dict]:
        k = float(k)
        ppl = held_out_perplexity(order, k)
        sample = with_k(order, k).sample(make_generator(int(seed)), max_len=max_len)
        words = vocab.decode(sample)
        best = min(range(len(grid)), key=curves[order].__getitem__)

        fig = plt.figure(figsize=(FIGURE_WIDTH, 4.3))
        ax, text_ax = fig.subplots(2, 1, height_ratios=[3, 1.15])
        for n in orders:
            chosen = n == order
            ax.plot(
                grid,
                curves[n],
                marker="o",
                ms=4 if chosen else 2.5,
                lw=2.4 if chosen else 1.2,
                alpha=1.0 if chosen else 0.55,
                color=_order_color(n),
                label=f"n = {n}",
                zorder=3 if chosen else 2,
            )
        ax.plot([k], [ppl], "o", ms=11, mfc="none", mec="#d55e00", mew=2.2, zorder=4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(10**low / 1.6, 10**high * 1.6)
        ax.set_xlabel("add-k pseudo-count k (log scale)")
        ax.set_ylabel("held-out perplexity")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.legend(
            loc="lower center",
            bbox_to_anchor=(0.5, 1.0),
            ncols=len(orders),
            frameon=False,
            handlelength=1.5,
            columnspacing=1.0,
        )
        text_ax.axis("off")
        sentence = " ".join(words) + (" …" if len(sample) == max_len else " </s>")
        lines = textwrap.wrap(sentence, 56)
        heading = f"n = {order}, k = {k:.3g}: perplexity {ppl:,.1f}; a sample (seed {int(seed)}):"
        text_ax.text(
            0,
            1,
            heading + "\n" + "\n".join(lines[:3]),
            va="top",
            ha="left",
            fontsize=10.5,
            transform=text_ax.transAxes,
        )
        fig.tight_layout(h_pad=0.4)
        result = {
            "order": order,
            "k": k,
            "perplexity": ppl,
            "grid": list(grid),
            "curves": {n: list(c) for n, c in curves.items()},
            "best_k": grid[best],
            "best_perplexity": curves[order][best],
            "seed": int(seed),
            "sample": sample,
            "words": words,
        }
        return fig, result

    controls = {
        "order": widgets.SelectionSlider(
            options=orders, value=order, description="order n", continuous_update=False
        ),
        "k": widgets.FloatLogSlider(
            value=k,
            base=10,
            min=low,
            max=high,
            step=0.25,
            description="k",
            readout_format=".3g",
            continuous_update=False,
        ),
        "seed": widgets.IntSlider(
            value=seed, min=0, max=max(99, seed), description="seed", continuous_update=False
        ),
    }
    return Explorer(controls, view, title="n-gram order and add-k against held-out perplexity")


def _order_color(n: int) -> str:
    """The book's colour of an n-gram order (light to dark blue), or a series colour beyond 4."""
    try:
        return model_color(f"{n}-gram")
    except KeyError:
        return SERIES_COLORS[n % len(SERIES_COLORS)]
