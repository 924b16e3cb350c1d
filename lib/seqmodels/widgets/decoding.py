r"""Chapter 9's explorer: temperature, top-$k$ and top-$p$ acting on a language model's next word.

`sampling_explorer` has a text box for a context and sliders for the temperature $\tau$, top-$k$'s
$k$, top-$p$'s $p$ and a seed. It reads ``<s>`` and the context into the model and shows the next
token's distribution twice, for its most probable tokens: the model's own $p$, and the distribution
$\tilde p$ that sampling draws from after the transforms of `seqmodels.decoding.filter_logits`
(temperature, then top-$k$, then top-$p$, renormalised). It names the *kept set* (the tokens whose
filtered logit is finite), its size and its probability mass, and below the bars a few
continuations that `seqmodels.decoding.sample_sequences` draws with those settings from a
generator seeded by the seed control. Top-$p$ keeps few tokens where the model is sure and many
where it is not; typing a different context shows it.
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from ..data import tokenize
from ..decoding import (
    conditioned,
    filter_logits,
    lm_next_log_probs,
    sample_sequences,
)
from ..decoding import (
    temperature as apply_temperature,
)
from ..plots import FIGURE_WIDTH, SERIES_COLORS, token_label
from ..seeding import make_generator
from ..vocab import Vocabulary
from .explorer import Explorer

#: the slider ranges: temperature, top-k (0: off) and top-p (1: off)
TEMPERATURE_RANGE = (0.1, 3.0)
TOP_K_MAX = 100
TOP_P_RANGE = (0.05, 1.0)
#: removed tokens' labels and the model's own bars
REMOVED_COLOR = "#8c8c8c"
#: the figure's text: characters per line (about 10.5 pt across the book's width), inches per line
LINE_CHARS, LINE_INCHES = 66, 0.2
#: the bar chart's height beside its rows: axis labels and ticks (inches)
BARS_INCHES = 0.75


def sampling_explorer(
    model: torch.nn.Module,
    vocab: Vocabulary,
    context: str = "and god said unto",
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 0.9,
    seed: int = 0,
    samples: int = 3,
    max_len: int = 12,
    top: int = 10,
) -> Explorer:
    r"""Sliders for temperature, top-$k$, top-$p$ and a seed over a language model's next token.

    `model` is a trained language model over `vocab`, called as ``model(tokens (n, t)) ->
    (logits (n, t, V), anything)`` (the course's ``RNNLM`` and ``TransformerLM``); it is only
    read, through `seqmodels.decoding.lm_next_log_probs`. The view tokenizes the context as the
    corpus was (`seqmodels.data.tokenize`; unknown words become ``<unk>``), computes the next-token
    logits $z$ (log-probabilities) after ``<s>`` and the context, and from them, with the library's
    functions: the model's distribution $p = \mathrm{softmax}(z)$; the tempered one
    $\mathrm{softmax}(z/\tau)$; the logits after ``filter_logits(z, temperature, top_k, top_p)``,
    whose finite entries are the kept set; and $\tilde p$, their softmax. It draws $p$ and
    $\tilde p$ for the `top` most probable tokens, and lists `samples` continuations of at most
    `max_len` tokens drawn by ``sample_sequences(conditioned(next_log_probs, context ids), ...)``
    with the same settings and ``make_generator(seed)``. ``top_k = 0`` and ``top_p = 1`` switch
    those filters off. A context longer than the model's `max_len` positions allow keeps its last
    tokens.

    ``explorer.result`` has ``context``, ``words`` (the typed tokens), ``ids`` (the context ids
    read after ``<s>``), ``unknown`` (typed words outside `vocab`), ``temperature``, ``top_k`` and
    ``top_p`` (None where off), ``seed``; ``probs`` ``(V,)`` ($p$), ``tempered`` ``(V,)``,
    ``sampling_probs`` ``(V,)`` ($\tilde p$), all float64; ``kept`` (the kept ids, most probable
    first), ``kept_words``, ``n_kept``, ``kept_mass`` (the kept set's share of the tempered
    distribution, the mass that top-$p$ compares with $p$) and ``model_mass`` (its share of $p$);
    ``shown`` (the ids drawn); ``samples`` (lists of ids), ``sample_words`` and ``finished``
    (whether each sample ended with ``</s>``).
    """
    import ipywidgets as widgets

    for name, value, low in (("samples", samples, 1), ("max_len", max_len, 1), ("top", top, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"expected {name} to be an integer >= {low}, got {value!r}")
    if not TEMPERATURE_RANGE[0] <= temperature <= TEMPERATURE_RANGE[1]:
        raise ValueError(f"expected a temperature in {TEMPERATURE_RANGE}, got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"expected top_k to be an integer >= 0 (0: off), got {top_k!r}")
    if not TOP_P_RANGE[0] <= top_p <= TOP_P_RANGE[1]:
        raise ValueError(f"expected top_p in {TOP_P_RANGE} (1: off), got {top_p!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"expected a seed >= 0, got {seed!r}")
    next_log_probs = lm_next_log_probs(model)
    V = next_log_probs(torch.tensor([[vocab.bos]])).shape[-1]
    if V != len(vocab):
        raise ValueError(f"expected a vocabulary of the model's {V} tokens, got {len(vocab)}")
    positions = getattr(model, "max_len", None)  # a Transformer's positions bound the input
    longest = None if positions is None else max(0, positions - 1 - max_len)

    def view(
        context: str, temperature: float, top_k: int, top_p: float, seed: int
    ) -> tuple[Figure, dict]:
        words = tokenize(context)
        ids = vocab.encode(words)
        if longest is not None and len(ids) > longest:
            ids = ids[len(ids) - longest :]
        tau = float(temperature)
        k = int(top_k) or None
        p = float(top_p)
        p_or_none = None if p >= 1.0 else p
        f = conditioned(next_log_probs, ids)
        z = f(torch.tensor([[vocab.bos]]))[0].double()  # log p(next | <s> context)
        probs = z.exp()
        tempered = torch.softmax(apply_temperature(z, tau), dim=-1)
        filtered = filter_logits(z, tau, k, p_or_none)
        sampling_probs = torch.softmax(filtered, dim=-1)
        keep = torch.isfinite(filtered)
        kept = [int(i) for i in torch.argsort(probs, descending=True, stable=True) if keep[i]]
        kept_mass = float(tempered[keep].sum())
        model_mass = float(probs[keep].sum())
        drawn = sample_sequences(
            f,
            samples,
            max_len,
            make_generator(int(seed)),
            tau,
            k,
            p_or_none,
            bos=vocab.bos,
            eos=vocab.eos,
        )
        finished = [len(s) < max_len for s in drawn]  # a sample cut at max_len is unfinished
        shown = torch.argsort(probs, descending=True, stable=True)[:top].tolist()

        more = len(kept) - sum(bool(keep[i]) for i in shown)
        title = (
            f"kept {len(kept):,} of {V:,} tokens"
            + (f" ({more:,} not shown)" if more > 0 else "")
            + ("; grey labels: removed" if any(not keep[i] for i in shown) else "")
            + f"\nkept mass {kept_mass:.3f} at τ = {tau:g}, {model_mass:.3f} under the model's p"
        )
        said = " ".join(vocab.decode(ids[-5:])) if ids else "<s>"
        said = ("… " if len(ids) > 5 else "") + said
        lines = [f"{samples} samples (seed {int(seed)}) after “{said}”:"]
        for s, done in zip(drawn, finished, strict=True):
            text = "→ " + " ".join(vocab.decode(s))
            text = textwrap.shorten(text, LINE_CHARS - 2, placeholder=" …")
            lines.append(text + (" </s>" if done else "" if text.endswith("…") else " …"))

        title_in, text_in = 2 * LINE_INCHES, len(lines) * LINE_INCHES
        height = BARS_INCHES + 0.27 * len(shown) + title_in + text_in
        fig = plt.figure(figsize=(FIGURE_WIDTH, height))
        ax = fig.add_subplot()
        rows = torch.arange(len(shown), dtype=torch.float64)
        ax.barh(
            rows - 0.2,
            probs[shown].tolist(),
            0.4,
            color="#d9d9d9",
            edgecolor=REMOVED_COLOR,
            lw=0.6,
            label="model p",
        )
        ax.barh(
            rows + 0.2,
            sampling_probs[shown].tolist(),
            0.4,
            color=SERIES_COLORS[0],
            label="p̃, sampled from",
        )
        ax.set_yticks(rows.tolist(), [token_label(vocab.itos[i]) for i in shown])
        for label, i in zip(ax.get_yticklabels(), shown, strict=True):
            if not keep[i]:
                label.set_color(REMOVED_COLOR)
                label.set_fontstyle("italic")
        ax.invert_yaxis()
        largest = max(float(sampling_probs[shown].max()), float(probs[shown].max()))
        ax.set_xlim(0, 1.08 * largest)
        ax.set_xlabel("probability of the next token")
        ax.grid(axis="y", visible=False)
        ax.legend(loc="lower right", frameon=True)
        fig.text(0.015, 1 - 0.04 / height, title, va="top", ha="left", fontsize=11)
        fig.text(
            0.015,
            (text_in - 0.02) / height,
            "\n".join(lines),
            va="top",
            ha="left",
            fontsize=10.5,
            linespacing=1.25,
        )
        fig.tight_layout(rect=(0, text_in / height, 1, 1 - title_in / height))
        result = {
            "context": context,
            "words": words,
            "ids": ids,
            "unknown": [w for w in words if w not in vocab],
            "temperature": tau,
            "top_k": k,
            "top_p": p_or_none,
            "seed": int(seed),
            "probs": probs,
            "tempered": tempered,
            "sampling_probs": sampling_probs,
            "kept": kept,
            "kept_words": vocab.decode(kept),
            "n_kept": len(kept),
            "kept_mass": kept_mass,
            "model_mass": model_mass,
            "shown": shown,
            "samples": drawn,
            "sample_words": [vocab.decode(s) for s in drawn],
            "finished": finished,
        }
        return fig, result

    def fraction_slider(value: float, bounds: tuple[float, float], step: float, label: str):
        return widgets.FloatSlider(
            value=value,
            min=bounds[0],
            max=bounds[1],
            step=step,
            description=label,
            style={"description_width": "initial"},
            readout_format=".2f",
            continuous_update=False,
        )

    controls = {
        "context": widgets.Text(value=context, description="context", continuous_update=False),
        "temperature": fraction_slider(temperature, TEMPERATURE_RANGE, 0.05, "τ"),
        "top_k": widgets.IntSlider(
            value=top_k,
            min=0,
            max=max(min(V, TOP_K_MAX), top_k),
            description="top-k (0: off)",
            style={"description_width": "initial"},
            continuous_update=False,
        ),
        "top_p": fraction_slider(top_p, TOP_P_RANGE, 0.01, "top-p (1: off)"),
        "seed": widgets.IntSlider(
            value=seed, min=0, max=max(99, seed), description="seed", continuous_update=False
        ),
    }
    return Explorer(controls, view, title="Temperature, top-k and top-p on the next token")
