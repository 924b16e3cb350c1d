"""Chapter 1's explorers: language models' next-word distributions (and n-gram order and add-k)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import matplotlib.pyplot as plt
import torch
from IPython.display import display

from ..data import tokenize
from ..plots import next_token_bars
from ..vocab import Vocabulary


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
