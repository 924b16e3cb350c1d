r"""Chapter 5's explorer: what a trained GRU's or LSTM's gates do, step by step, on one sentence.

`gate_explorer` takes language models of the agreement language (`seqmodels.synthetic`) with a
gated core, and shows, for one sentence, every gate's value at every step as a heatmap (one column
per token read, ``<s>`` first; one row per unit; 0 closed, 1 open), with the subject and the verb
marked: the GRU's update gate $\mathbf z_t$ (the lecture's, so $\mathbf z_t \to 0$ keeps the state)
and reset gate $\mathbf r_t$; the LSTM's input, forget and output gates
$\mathbf i_t, \mathbf f_t, \mathbf o_t$. Its title gives the share of the model's
verb probability on verbs of the subject's number, the language's `AgreementLanguage.agreement`
for this one sentence. The sentence is drawn by `AgreementLanguage.sample` from a seed you choose,
or typed: flip the subject's number, or move the verb, and watch which gates respond.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from ..gated import gate_kind, gate_values
from ..plots import FIGURE_WIDTH
from ..rnn import RNNLM, distributions_at
from ..seeding import make_generator
from ..synthetic import AgreementLanguage
from .explorer import Explorer, choose_model

#: the gates drawn for each kind of core, in order, with what a value of 1 does
GATE_NAMES: dict[str, dict[str, str]] = {
    "gru": {"z": "update z (1: take the new candidate)", "r": "reset r (1: read h)"},
    "lstm": {
        "i": "input i (1: write to c)",
        "f": "forget f (1: keep c)",
        "o": "output o (1: show c)",
    },
}
#: the most sample seeds the slider offers
SEEDS = 100
#: the subject's and the verb's marks
MARK_COLOR = "#d55e00"
#: the heatmaps show at most this many tokens read, from ``<s>`` on (their labels stay legible)
SHOWN_TOKENS = 20


def read_gates(model: RNNLM, ids: list[int]) -> dict[str, torch.Tensor]:
    """`seqmodels.gated.gate_values` of `model`'s core reading the embeddings of `ids`."""
    device = model.embedding.weight.device
    with torch.no_grad():
        return gate_values(model.rnn, model.embedding(torch.tensor(ids, device=device)))


def gate_explorer(
    models: Mapping[str, RNNLM],
    lang: AgreementLanguage,
    model: str | None = None,
    seed: int = 0,
    sentence: str = "",
) -> Explorer:
    r"""A sentence of the agreement language and a gated model: each gate's value per step.

    `models` maps a name to a trained `RNNLM` over ``lang.vocab`` whose core is a GRU or an LSTM
    (``nn.GRU``/``nn.LSTM`` or the library's); `model` picks the one shown first (default: the
    first). The sentence is ``lang.sample(1, make_generator(seed))``, or, when `sentence` is not
    empty, the words typed (lower-cased, split at spaces; a word outside the vocabulary is read as
    ``<unk>``). The view reads ``<s>`` and the sentence with `read_gates` and draws one heatmap
    per gate; the subject's and the verb's columns are marked.

    ``explorer.result`` has ``model``, ``kind`` (``"gru"``/``"lstm"``), ``source`` (``"sample"``
    or ``"typed"``), ``seed``, ``words``, ``ids`` (the sentence's word ids), ``tokens`` (what the
    model read: ``<s>`` then the words), ``unknown`` (typed words outside the vocabulary),
    ``gates`` (name → ``(len(tokens), d_h)`` float64: `seqmodels.gated.gate_values`), ``means`` (name → the mean
    over units at each step), ``log_prob`` (the language's exact $\log p$ of the sentence:
    ``-inf`` if it is not one the language makes), ``subject`` and ``verb`` (the plural flag of
    the word at position 0 and at ``lang.verb_position``, None where that word is not a noun or a
    verb) and ``share`` (the model's verb probability on the subject's number after reading up to
    the verb, as `AgreementLanguage.agreement` computes it; None unless position 0 holds a noun
    and the sentence reaches the verb position).
    """
    import ipywidgets as widgets

    model = choose_model(models, model, RNNLM)
    for name, m in models.items():
        gate_kind(m.rnn)
        if m.vocab_size != len(lang.vocab):
            raise ValueError(
                f"expected models[{name!r}] over the language's {len(lang.vocab)} tokens, "
                f"got {m.vocab_size}"
            )
    names = list(models)
    if not isinstance(seed, int) or not 0 <= seed < SEEDS:
        raise ValueError(f"expected seed in 0 .. {SEEDS - 1}, got {seed!r}")
    vocab = lang.vocab

    def plural(word_id: int) -> bool | None:
        try:
            return lang.is_plural(word_id)
        except ValueError:
            return None

    def view(model: str, seed: int, sentence: str) -> tuple[Figure, dict]:
        lm = models[model]
        kind = gate_kind(lm.rnn)
        words = sentence.lower().split()
        if words:
            source, ids = "typed", vocab.encode(words)
        else:
            source = "sample"
            ids = lang.sample(1, make_generator(int(seed)))[0]
            words = vocab.decode(ids)
        tokens = ["<s>", *words]
        was_training = lm.training
        try:
            gates = read_gates(lm, [vocab.bos, *ids])
            verb = lang.verb_position
            subject = plural(ids[0]) if ids else None
            share = None
            if subject is not None and len(ids) >= verb:
                share, _ = lang.agreement(distributions_at(lm, [ids], verb), [ids])
        finally:
            lm.train(was_training)
        verb_number = plural(ids[verb]) if len(ids) > verb else None
        result = {
            "model": model,
            "kind": kind,
            "source": source,
            "seed": int(seed),
            "words": words,
            "ids": ids,
            "tokens": tokens,
            "unknown": [w for w, i in zip(words, ids, strict=True) if i == vocab.unk],
            "gates": gates,
            "means": {k: v.mean(1).tolist() for k, v in gates.items()},
            "log_prob": lang.log_prob(ids),
            "subject": subject,
            "verb": verb_number,
            "share": share,
        }
        return _figure(result, lm.rnn.hidden_size, verb), result

    controls = {
        "model": widgets.Dropdown(options=names, value=model, description="model"),
        "seed": widgets.IntSlider(
            value=seed, min=0, max=SEEDS - 1, description="sample", continuous_update=False
        ),
        "sentence": widgets.Text(
            value=sentence,
            description="or type",
            placeholder="e.g. dogs old very run (empty: the sample)",
            continuous_update=False,
        ),
    }
    return Explorer(controls, view, title="A gated model's gates, step by step")


def _figure(result: dict, hidden: int, verb: int) -> Figure:
    """One heatmap per gate (units × tokens read, 0 to 1) with a shared colour bar."""
    tokens = result["tokens"][:SHOWN_TOKENS]
    gates = {k: v[:SHOWN_TOKENS] for k, v in result["gates"].items()}
    share, heading = result["share"], result["model"]
    if share is not None:
        heading += f": share of verb probability on the subject's number {share:.2f}"
    notes = ["not a sentence of the language"] if result["log_prob"] == -math.inf else []
    if len(result["tokens"]) > SHOWN_TOKENS:
        notes.append(f"the first {SHOWN_TOKENS} tokens shown")
    if notes:
        heading += "\n(" + "; ".join(notes) + ")"
    labels = GATE_NAMES[result["kind"]]
    n = len(gates)
    height = 1.0 + 1.05 * n + (0.2 if notes else 0)
    fig, axes = plt.subplots(
        n, 1, figsize=(FIGURE_WIDTH, height), sharex=True, layout="constrained"
    )
    image = None
    for ax, (name, values) in zip(axes, gates.items(), strict=True):
        image = ax.imshow(
            values.T.numpy(),
            aspect="auto",
            cmap="viridis",
            vmin=0,
            vmax=1,
            interpolation="nearest",
        )
        ax.set_yticks([])
        ax.grid(False)
        ax.set_ylabel(f"{hidden} units", fontsize=10.5)
        ax.set_title(labels[name], loc="left", fontsize=10.5, pad=3)
        for column in (1, verb + 1):  # the subject and the verb, after <s>
            if column < len(tokens):
                ax.axvline(column - 0.5, color=MARK_COLOR, lw=1.2)
                ax.axvline(column + 0.5, color=MARK_COLOR, lw=1.2)
    axes[-1].set_xticks(range(len(tokens)), tokens, rotation=90)
    for column, label in enumerate(axes[-1].get_xticklabels()):
        if column in (1, verb + 1):
            label.set_color(MARK_COLOR)
            label.set_fontweight("bold")
    axes[-1].set_xlabel("token read (subject and verb marked)")
    colorbar = fig.colorbar(image, ax=list(axes), ticks=[0, 0.5, 1], pad=0.02, fraction=0.05)
    colorbar.set_label("gate value (no unit)")
    fig.suptitle(heading, x=0.02, ha="left")
    return fig
