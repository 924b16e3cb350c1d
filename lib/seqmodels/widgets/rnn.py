r"""Chapter 3's explorer: what an RNN language model's state holds as it reads a sentence you type.

`rnn_state_explorer` has a text box for a sentence and a slider for how many next words to list. It
reads ``<s>`` and the sentence's tokens into the model's recurrent core and shows the hidden-state
trajectory $\mathbf h_1, \mathbf h_2, \dots$ as a heatmap (one column per token read, one row per
hidden unit), and beside it the most probable next words,
$p(\cdot \mid w_{\le T}) = \mathrm{softmax}(W_{hy}\mathbf h_T + \mathbf b_y)$, after the last token.
Typing a shorter prefix moves along the trajectory; a word outside the vocabulary is read as
``<unk>``, as the model sees it.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from ..data import tokenize
from ..plots import FIGURE_WIDTH, TOKEN_NAMES, model_color, token_label
from ..rnn import RNNLM
from ..vocab import Vocabulary
from .explorer import Explorer


def _short(token: str) -> str:
    """A token as a heatmap column label: punctuation in quotes (the columns are narrow)."""
    return f"“{token}”" if token in TOKEN_NAMES and token != "</s>" else token


#: the heatmap shows at most this many of the last tokens read (their labels stay legible)
SHOWN_TOKENS = 12


def rnn_state_explorer(
    model: RNNLM, vocab: Vocabulary, sentence: str = "and god said unto", top: int = 8
) -> Explorer:
    r"""A text box for a sentence: the RNN LM's hidden states as it reads it, and its next words.

    `model` is a trained `RNNLM` over `vocab` (any core whose module returns every state, as
    ``nn.RNN`` and the library's ``ElmanRNN`` do). The view tokenizes the sentence as the corpus was
    (`seqmodels.data.tokenize`), reads ``<s>`` and its ids, and draws $\mathbf h_t$ for the last
    :data:`SHOWN_TOKENS` tokens read, and the `top` most probable next words after the last one.

    ``explorer.result`` has ``words`` (the typed tokens), ``tokens`` (what the model read, ``<s>``
    first, unknown words as ``<unk>``), ``ids``, ``unknown`` (the typed words outside `vocab`),
    ``states`` ``(len(tokens), d_h)`` (row $t$: the state after reading token $t$),
    ``probs`` ``(V,)`` (the next-word distribution after the last token), ``top_words`` and
    ``top_probs``, ``word_probs`` ($p(w_t \mid \texttt{<s>}\, w_{<t})$ of each typed word, teacher
    forced) and ``nll`` (their summed $-\log p$, nats).
    """
    import ipywidgets as widgets

    if not isinstance(model, RNNLM):
        raise TypeError(f"expected an RNNLM, got {type(model).__name__}")
    if model.vocab_size != len(vocab):
        raise ValueError(
            f"expected a vocabulary of the model's {model.vocab_size} tokens, got {len(vocab)}"
        )
    if model.is_lstm:
        raise ValueError("expected a core whose state is one vector h (not an LSTM's (h, c))")
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"expected top to be a positive integer, got {top!r}")
    device = next(model.parameters()).device

    @torch.no_grad()
    def read(words: list[str]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        """Ids read (``<s>`` first), every state ``(time, d_h)`` and next-word probabilities."""
        ids = [vocab.bos, *vocab.encode(words)]
        tokens = torch.tensor([ids], device=device)
        was_training = model.training
        model.eval()
        try:
            hidden = model.rnn(model.embedding(tokens))[0]  # (1, time, d_h): h_1 .. h_time
            probs = model.output(hidden).softmax(-1)  # (1, time, V)
        finally:
            model.train(was_training)
        return ids, hidden[0].double().cpu(), probs[0].double().cpu()

    def view(sentence: str, top: int) -> tuple[Figure, dict]:
        words = tokenize(sentence)
        ids, states, probs = read(words)
        tokens = vocab.decode(ids)
        word_probs = probs[torch.arange(len(words)), ids[1:]]  # p(w_t | <s> w_<t)
        k = max(1, min(int(top), len(vocab)))
        top_probs, top_ids = probs[-1].topk(k)
        top_words = vocab.decode(top_ids.tolist())

        fig, (heat_ax, bar_ax) = plt.subplots(
            1, 2, figsize=(FIGURE_WIDTH, 4.0), width_ratios=[1.2, 1.0], layout="constrained"
        )
        shown = slice(max(0, len(ids) - SHOWN_TOKENS), len(ids))
        order = states[-1].argsort(descending=True)  # units sorted by the last state
        image = heat_ax.imshow(
            states[shown][:, order].T.numpy(),
            aspect="auto",
            cmap="RdBu_r",
            vmin=-1,
            vmax=1,
            interpolation="nearest",
        )
        heat_ax.set_xticks(range(len(ids[shown])), [_short(t) for t in tokens[shown]], rotation=90)
        heat_ax.set_xlabel("token read")
        heat_ax.set_ylabel(f"hidden unit, by last value (of {states.shape[1]})")
        heat_ax.set_yticks([])
        heat_ax.grid(False)
        heat_ax.set_title("state $h_t$" + (" (last tokens)" if shown.start > 0 else ""))
        colorbar = fig.colorbar(image, ax=heat_ax, ticks=[-1, 0, 1], pad=0.02, fraction=0.08)
        colorbar.set_label("$h_{t,i}$ (tanh, no unit)")

        rows = range(k)[::-1]
        bar_ax.barh(rows, top_probs.tolist(), color=model_color("rnn"), edgecolor="#333333", lw=0.5)
        bar_ax.set_yticks(rows, [token_label(w) for w in top_words])
        bar_ax.grid(axis="y", visible=False)
        bar_ax.set_xlabel("probability")
        bar_ax.set_title(f"next after “{_short(tokens[-1])}”")
        result = {
            "words": words,
            "tokens": tokens,
            "ids": ids,
            "unknown": [w for w, i in zip(words, ids[1:], strict=True) if i == vocab.unk],
            "states": states,
            "probs": probs[-1],
            "top_words": top_words,
            "top_probs": top_probs.tolist(),
            "word_probs": word_probs.tolist(),
            "nll": -word_probs.log().sum().item(),
        }
        return fig, result

    controls = {
        "sentence": widgets.Text(value=sentence, description="sentence", continuous_update=False),
        "top": widgets.IntSlider(
            value=top, min=1, max=max(15, top), description="next words", continuous_update=False
        ),
    }
    return Explorer(controls, view, title="An RNN language model reads a sentence")
