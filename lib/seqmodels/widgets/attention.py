r"""Chapter 7's explorer: what a trained attention decoder reads in a source you type, scored two ways.

`attention_explorer` has a text box for a source string (a word for spelling-to-sound, symbols for
reversal) and a slider for a divisor $\tau$. It decodes the source greedily with the trained
`seqmodels.seq2seq.Seq2Seq` twice and draws the attention weights $\alpha_{tj}$ of each decoding as
a heatmap (one row per output token, one column per source token):

- left, with the score the model was trained with, $s(\mathbf h_t, \mathbf h^{enc}_j)$;
- right, with the same score divided by $\tau$, $s / \tau$, on the same trained states. For a model
  trained with the dot score, $\tau = \sqrt{d_h}$ gives the scaled dot score
  $\mathbf q^\top \mathbf k / \sqrt{d_k}$ (the slider's default), $\tau = 1$ gives the left panel back,
  and $\tau < 1$ sharpens the weights.

Each decoding reads its own weights, so the right panel's output may differ from the left's: the
scale of the scores is part of what training learned.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..attention import weight_entropy
from ..plots import FIGURE_WIDTH, attention_heatmaps
from ..seq2seq import Seq2Seq, translate
from ..vocab import Vocabulary
from .explorer import Explorer

#: the longest source the view reads (its letters stay legible), and the divisor slider's range
MAX_SOURCE = 24
DIVISOR_RANGE = (0.25, 64.0)
#: the figure's height is kept within these bounds (inches), whatever the source's length
HEIGHT_RANGE = (2.6, 4.4)


@contextmanager
def divided_scores(model: Seq2Seq, divisor: float) -> Iterator[Seq2Seq]:
    """`model` with its attention's scores divided by `divisor` (:attr:`Attention.divisor`) inside
    the block, restored after."""
    if not divisor > 0:
        raise ValueError(f"expected a positive divisor, got {divisor!r}")
    attention = model.attention
    trained = attention.divisor
    attention.divisor = float(divisor)
    try:
        yield model
    finally:
        attention.divisor = trained


def _splitter(vocab: Vocabulary):
    """Characters (spaces dropped, lower case) for a vocabulary of single characters, else words."""
    ordinary = [t for t in vocab.itos if t not in ("<s>", "</s>", "<unk>")]
    if all(len(t) == 1 for t in ordinary):
        return lambda text: [c for c in text.lower() if not c.isspace()]
    return str.split


def attention_explorer(
    model: Seq2Seq,
    source_vocab: Vocabulary,
    target_vocab: Vocabulary,
    source: str = "attention",
    divisor: float | None = None,
    max_len: int = 30,
) -> Explorer:
    r"""A text box for a source and a slider for $\tau$: the trained attention weights beside the
    weights of the same score divided by $\tau$.

    `model` is a trained attention `Seq2Seq` (``attention=`` one of the scores) from
    `source_vocab` to `target_vocab`. The source is split into characters when every token of
    `source_vocab` is one character (letters for G2P; ``a # b c`` for reversal, spaces ignored),
    and into words otherwise; tokens outside the vocabulary are read as ``<unk>``; at most
    :data:`MAX_SOURCE` tokens are read. Both panels are greedy decodings by
    `seqmodels.seq2seq.translate` (at most `max_len` output tokens); the right one runs the model
    with its :attr:`seqmodels.attention.Attention.divisor` set to $\tau$. `divisor` defaults to
    $\sqrt{d_h}$, which makes the right panel the scaled dot score for a model trained with the
    dot score.

    ``explorer.result`` has ``tokens`` (the source tokens read), ``ids``, ``unknown`` (typed tokens
    outside `source_vocab`), ``truncated``, ``divisor``, ``hidden`` ($d_h$), and for each panel,
    keyed ``"trained"`` and ``"divided"``: ``outputs`` (the output tokens, without ``</s>``),
    ``weights`` (``(len(output) + 1, len(tokens))``, the last row the one that chose ``</s>``),
    ``entropy`` (the mean over rows of the weights' entropy, nats), ``largest`` (the mean largest
    weight) and ``peaks`` (each row's most-read source position).
    """
    import ipywidgets as widgets

    if not isinstance(model, Seq2Seq) or model.attention_score is None:
        raise TypeError("expected a Seq2Seq with attention (attention='dot', ...)")
    if model.encoder.embedding.num_embeddings != len(source_vocab):
        raise ValueError(
            f"expected a source vocabulary of the model's {model.encoder.embedding.num_embeddings} "
            f"tokens, got {len(source_vocab)}"
        )
    if model.tgt_vocab_size != len(target_vocab):
        raise ValueError(
            f"expected a target vocabulary of the model's {model.tgt_vocab_size} tokens, "
            f"got {len(target_vocab)}"
        )
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"expected max_len to be a positive integer, got {max_len!r}")
    hidden = model.rnn.hidden_size
    if divisor is None:
        divisor = math.sqrt(hidden)
    if not DIVISOR_RANGE[0] <= divisor <= DIVISOR_RANGE[1]:
        raise ValueError(f"expected divisor in {DIVISOR_RANGE}, got {divisor!r}")
    split = _splitter(source_vocab)
    score = model.attention_score

    def read(ids: list[int], model: Seq2Seq) -> dict:
        decoded = translate(model, [ids], max_len=max_len)
        weights = decoded.weights[0].double()
        return {
            "outputs": target_vocab.decode(decoded.outputs[0]),
            "weights": weights,
            "entropy": weight_entropy(weights[None]).mean().item(),
            "largest": weights.max(-1).values.mean().item(),
            "peaks": weights.argmax(-1).tolist(),
        }

    def panel_title(tau: float) -> str:
        if math.isclose(tau, 1.0):
            return f"{score} ÷ 1 (the same)"
        name = " = scaled dot" if score == "dot" and math.isclose(tau, math.sqrt(hidden)) else ""
        return f"{score} ÷ {tau:.3g}{name}"

    def view(source: str, divisor: float) -> tuple[Figure, dict]:
        typed = split(source)
        tokens = typed[:MAX_SOURCE]
        ids = source_vocab.encode(tokens)
        tau = float(divisor)
        result = {
            "tokens": tokens,
            "ids": ids,
            "unknown": [t for t, i in zip(tokens, ids, strict=True) if i == source_vocab.unk],
            "truncated": len(typed) > MAX_SOURCE,
            "divisor": tau,
            "hidden": hidden,
        }
        if not ids:
            fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 1.2))
            ax.axis("off")
            ax.text(0.5, 0.5, "type a source to decode", ha="center", va="center")
            return fig, {**result, "trained": None, "divided": None}
        result["trained"] = read(ids, model)
        with divided_scores(model, tau) as divided:
            result["divided"] = read(ids, divided)
        panels = [
            (title, r["weights"], [source_vocab.itos[i] for i in ids], [*r["outputs"], "</s>"])
            for title, r in [
                (f"{score}, as trained", result["trained"]),
                (panel_title(tau), result["divided"]),
            ]
        ]
        rows = max(len(r["outputs"]) + 1 for r in (result["trained"], result["divided"]))
        height = 1.5 + 0.7 * FIGURE_WIDTH / (2 * len(ids)) * rows  # the library's square cells
        height = min(max(height, HEIGHT_RANGE[0]), HEIGHT_RANGE[1])
        fig = attention_heatmaps(
            panels, xlabel="source token", ylabel="output token", height=height
        )
        return fig, result

    controls = {
        "source": widgets.Text(value=source, description="source", continuous_update=False),
        "divisor": widgets.FloatLogSlider(
            value=divisor,
            base=2,
            min=math.log2(DIVISOR_RANGE[0]),
            max=math.log2(DIVISOR_RANGE[1]),
            step=0.5,
            description="score ÷ τ",
            readout_format=".3g",
            continuous_update=False,
        ),
    }
    return Explorer(controls, view, title="What the attention decoder reads")
