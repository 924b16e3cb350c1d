r"""Chapter 6's explorer: a G2P encoder–decoder pronounces a word you type, fed its own output or the
dictionary's.

`pronunciation_explorer` has a text box for a word and a menu of trained spelling-to-sound models
(`seqmodels.seq2seq.Seq2Seq` over the CMU dictionary's letters and phonemes, `seqmodels.data.G2P`).
It shows the model's greedy pronunciation (`seqmodels.seq2seq.translate`) and, when the word is in
the CMU dictionary, the dictionary's pronunciation (the one closest to the greedy output, as the
phoneme error rate picks it) and the model's argmax at each position when it is fed that reference
prefix instead (teacher forcing). Each output is compared with the reference position by position,
as `seqmodels.seq2seq.errors_by_position` does, wrong positions marked; below, the probability the
model gives the reference phoneme at each position, fed the reference prefix or its own. One early
mistake in the free-running output shifts or derails everything after it, while the teacher-forced
one recovers at the next position: exposure bias, one word at a time. The title says which split
of the dictionary the word is in, so a word seen in training can be told from a held-out one.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..data import G2P, cmudict_pairs, split_of_word
from ..metrics import edit_distance
from ..plots import FIGURE_WIDTH, SERIES_COLORS
from ..seq2seq import Seq2Seq, errors_by_position, pair_batch, translate
from .explorer import Explorer, choose_model

#: the grid shows at most this many output positions (their labels stay legible on a phone)
SHOWN_POSITIONS = 16
#: the end marker's label in the grid
END = "end"
RIGHT_COLOR, WRONG_COLOR, REFERENCE_COLOR = "#cfe8d8", "#f6c4a3", "#eeeeee"
#: a longer title goes on two lines (about the characters of one line at 10.5 pt)
TITLE_CHARS = 62
ROWS = ("dictionary", "fed reference", "fed own output")


def pronunciation_explorer(
    models: Mapping[str, Seq2Seq] | Seq2Seq,
    g2p: G2P,
    word: str = "photograph",
    model: str | None = None,
    max_len: int = 30,
) -> Explorer:
    r"""A text box for a word: a G2P model's greedy pronunciation against the CMU dictionary's,
    fed its own output and fed the reference.

    `models` maps a name to a trained `Seq2Seq` from ``g2p.letters`` to ``g2p.phonemes`` (or is
    one model); `model` picks the one shown first (default: the first). The word is lower-cased
    and keeps its letters a–z (anything else is dropped and listed). The view decodes it greedily
    with ``translate(model, [letters], max_len)``; if it is a headword of the CMU dictionary
    (`seqmodels.data.cmudict_pairs` of its split, `seqmodels.data.split_of_word`), it takes the
    pronunciation closest to the greedy output by `seqmodels.metrics.edit_distance` (the first of
    equals) as the reference $y$, runs the model once teacher-forced on $y$ and once on its own
    greedy output, and compares both with $y$ position by position.

    ``explorer.result`` has ``word`` (the letters kept), ``dropped`` (the characters removed),
    ``model``, ``split``, ``in_dictionary``, ``pronunciations`` (the dictionary's, as lists of
    phonemes; empty if the word is not in it), ``greedy`` (phonemes) and ``greedy_ids``,
    ``ended`` (whether greedy decoding chose ``</s>`` within `max_len`), ``greedy_probs``
    ($p(\hat y_t \mid \hat y_{<t}, x)$ of each greedy choice and of its ``</s>``), and, for a word
    in the dictionary, ``reference``, ``distance`` (edit distance from the greedy output),
    ``correct`` (the greedy output is one of the pronunciations), ``forced`` (the argmax at each
    of the reference's positions and at its end, fed the reference prefix; ``</s>`` as
    ``"</s>"``), ``forced_errors`` and ``free_errors`` (1-based positions, the end included,
    where the teacher-forced and the greedy output differ from the reference:
    `errors_by_position` on the sequences with ``</s>`` appended), and ``p_forced`` and
    ``p_free`` ($p(y_t \mid y_{<t}, x)$ and $p(y_t \mid \hat y_{<t}, x)$ for the reference's
    phonemes and its ``</s>``; ``p_free`` stops where the greedy output ended).
    """
    import ipywidgets as widgets

    if isinstance(models, Seq2Seq):
        models = {"model": models}
    model = choose_model(models, model, Seq2Seq)
    for name, m in models.items():
        sizes = (m.encoder.embedding.num_embeddings, m.tgt_vocab_size)
        if sizes != (len(g2p.letters), len(g2p.phonemes)):
            raise ValueError(
                f"expected models[{name!r}] from {len(g2p.letters)} letters to "
                f"{len(g2p.phonemes)} phonemes, got {sizes[0]} to {sizes[1]}"
            )
    names = list(models)
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"expected max_len to be a positive integer, got {max_len!r}")
    letters, phonemes = g2p.letters, g2p.phonemes
    eos = phonemes.eos
    dictionaries: dict[str, dict[str, tuple]] = {}  # split → headword → pronunciations

    def pronunciations(word: str) -> tuple[str, list[list[str]]]:
        split = split_of_word(word)
        if split not in dictionaries:
            dictionaries[split] = dict(cmudict_pairs(split))
        return split, [list(p) for p in dictionaries[split].get(word, ())]

    @torch.no_grad()
    def probabilities(s2s: Seq2Seq, src: list[int], target: list[int]) -> torch.Tensor:
        """Teacher-forced on `target`: the next-phoneme distribution after each of its prefixes,
        ``(len(target) + 1, V)``."""
        device = next(s2s.parameters()).device
        logits = s2s(pair_batch([(src, target)]).to(device))[0][0]
        return logits.double().softmax(-1).cpu()

    def view(word: str, model: str) -> tuple[Figure, dict]:
        s2s = models[model]
        typed = word.strip().lower()
        kept = [c for c in typed if "a" <= c <= "z"]
        word = "".join(kept)
        result: dict = {
            "word": word,
            "dropped": [c for c in typed if not "a" <= c <= "z" and not c.isspace()],
            "model": model,
        }
        if not word:
            result.update(split=None, in_dictionary=False, pronunciations=[], greedy=[])
            result.update(greedy_ids=[], ended=False, greedy_probs=[])
            return _figure(result), result
        src = letters.encode(kept)
        split, prons = pronunciations(word)
        reference = None
        was_training = s2s.training
        s2s.eval()
        try:
            greedy_ids = translate(s2s, [src], max_len=max_len).outputs[0]
            own = probabilities(s2s, src, greedy_ids)
            greedy = phonemes.decode(greedy_ids)
            if prons:
                reference = min(prons, key=lambda p: edit_distance(greedy, p))
                forced_probs = probabilities(s2s, src, phonemes.encode(reference))
        finally:
            s2s.train(was_training)
        ended = len(greedy_ids) < max_len  # translate stops at </s> or after max_len tokens
        chosen = [*greedy_ids, eos] if ended else greedy_ids
        result.update(split=split, in_dictionary=bool(prons), pronunciations=prons)
        result.update(greedy=greedy, greedy_ids=greedy_ids, ended=ended)
        result["greedy_probs"] = [own[t, i].item() for t, i in enumerate(chosen)]
        if reference is not None:
            target = [*phonemes.encode(reference), eos]
            forced_ids = forced_probs.argmax(-1).tolist()
            forced_rates, _ = errors_by_position([forced_ids], [target])
            free_rates, _ = errors_by_position([chosen], [target])
            reach = min(len(target), len(greedy_ids) + 1)  # positions the greedy prefix reaches
            result.update(
                reference=reference,
                distance=edit_distance(greedy, reference),
                correct=greedy in prons,
                forced=phonemes.decode(forced_ids),
                forced_errors=[t + 1 for t, r in enumerate(forced_rates.tolist()) if r > 0],
                free_errors=[t + 1 for t, r in enumerate(free_rates.tolist()) if r > 0],
                p_forced=[forced_probs[t, i].item() for t, i in enumerate(target)],
                p_free=[own[t, i].item() for t, i in enumerate(target[:reach])],
            )
        return _figure(result), result

    controls = {
        "word": widgets.Text(value=word, description="word", continuous_update=False),
        "model": widgets.Dropdown(options=names, value=model, description="model"),
    }
    return Explorer(controls, view, title="A G2P model pronounces a word")


def _labels(tokens: list[str]) -> list[str]:
    return [END if t == "</s>" else t for t in tokens]


def _figure(result: dict) -> Figure:
    """Top: the outputs as a grid of phonemes, wrong positions marked; bottom: p(reference)."""
    word = result["word"]
    if not word:
        fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, 1.4))
        ax.axis("off")
        ax.text(0.5, 0.5, "Type a word of the letters a–z.", ha="center", va="center")
        return fig
    greedy_row = result["greedy"] + ([END] if result["ended"] else [])
    if not result["in_dictionary"]:
        rows = {ROWS[2]: (greedy_row, [])}
        title = f"“{word}”: not in the CMU dictionary"
    else:
        reference = [*result["reference"], END]
        rows = {
            ROWS[0]: (reference, []),
            ROWS[1]: (_labels(result["forced"]), result["forced_errors"]),
            ROWS[2]: (greedy_row, result["free_errors"]),
        }
        verdict = "right" if result["correct"] else f"{result['distance']} edits off"
        title = f"“{word}” ({result['split']} split): greedy output {verdict}"
    width = min(max(len(r) for r, _ in rows.values()), SHOWN_POSITIONS)
    fig, (grid, curve) = plt.subplots(
        2,
        1,
        figsize=(FIGURE_WIDTH, 1.9 + 0.42 * len(rows)),
        height_ratios=[0.42 * len(rows), 1.7],
        sharex=True,
        layout="constrained",
    )
    reference_tokens = rows.get(ROWS[0], ([], []))[0]
    for y, (name, (tokens, errors)) in enumerate(rows.items()):
        for t, token in enumerate(tokens[:width], start=1):
            if name == ROWS[0]:
                color = REFERENCE_COLOR
            elif not reference_tokens:
                color = "white"
            else:
                # past the reference's end nothing can be right
                wrong = t in errors or t > len(reference_tokens)
                color = WRONG_COLOR if wrong else RIGHT_COLOR
            grid.add_patch(
                Rectangle((t - 0.5, y - 0.45), 1, 0.9, facecolor=color, edgecolor="white")
            )
            grid.text(t, y, token, ha="center", va="center", fontsize=10.5)
    grid.set_ylim(len(rows) - 0.5, -0.5)
    grid.set_yticks(range(len(rows)), list(rows))
    grid.tick_params(axis="both", length=0)
    grid.grid(False)
    for side in ("left", "bottom"):
        grid.spines[side].set_visible(False)
    truncated = max(len(r) for r, _ in rows.values()) > width
    title += f" (first {width} positions)" if truncated else ""
    if len(title) > TITLE_CHARS:  # two lines, at the colon
        title = title.replace(": ", ":\n", 1)
    fig.suptitle(title, x=0.01, ha="left")

    if result["in_dictionary"]:
        series = {
            "fed the reference": result["p_forced"],
            "fed its own output": result["p_free"],
        }
        curve.set_ylabel("p(reference)")
    else:
        series = {"its own choice": result["greedy_probs"]}
        curve.set_ylabel("p(choice)")
    for color, (label, values) in zip(SERIES_COLORS, series.items(), strict=False):
        shown = values[:width]
        curve.plot(range(1, len(shown) + 1), shown, marker="o", ms=4, color=color, label=label)
    curve.set_ylim(-0.05, 1.05)
    curve.set_yticks([0, 0.5, 1])
    curve.set_xlim(0.5, width + 0.5)
    curve.set_xticks(range(1, width + 1))
    curve.set_xlabel("output position t (phonemes, then the end)")
    curve.legend(
        loc="lower left", bbox_to_anchor=(0, 1), ncols=len(series), frameon=False, borderaxespad=0.1
    )
    return fig
