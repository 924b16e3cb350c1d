r"""Chapter 8's explorer: a trained Transformer language model's positions and one head's attention.

`transformer_explorer` has a text box for a sentence, a choice of model by its kind of positions
(sinusoidal or learned, the same architecture trained the same way), and sliders for a layer and a
head. It reads ``<s>`` and the sentence's tokens and draws two heatmaps:

- left, the position vectors $\mathbf p_t$ that the model adds to the tokens at positions
  $0 .. T-1$, as the cosine similarity of every pair, $\cos(\mathbf p_t, \mathbf p_s)$: sinusoids
  give a band that depends on $t - s$ only (a rotation takes $\mathbf p_t$ to
  $\mathbf p_{t+k}$), a learned table whatever training made of it, and its random initial
  vectors at positions that no training sentence reached;
- right, the causal self-attention weights $\alpha_{ts}$ of the chosen layer and head: row $t$ is
  what position $t$ reads, with the model's most probable next token after the last one in the
  title.

A dotted line marks the end of the longest training input, when it is given: a sentence typed
longer than that shows what each kind of position does beyond it.
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from ..data import tokenize
from ..plots import FIGURE_WIDTH, token_label
from ..transformer import LearnedPositions, TransformerLM
from ..vocab import Vocabulary
from .explorer import Explorer

#: the view reads at most this many tokens, ``<s>`` included (the heatmaps' labels stay legible)
MAX_TOKENS = 16


def _label(token: str) -> str:
    return token if token in ("<s>", "</s>") else token_label(token)


def transformer_explorer(
    models: TransformerLM | Mapping[str, TransformerLM],
    vocab: Vocabulary,
    sentence: str = "",
    positions: str | None = None,
    layer: int = 0,
    head: int = 0,
    trained_length: int | None = None,
) -> Explorer:
    r"""A sentence box, a choice of positions and layer/head sliders over trained `TransformerLM`\ s.

    `models` maps a name (the kind of positions: ``"sinusoidal"``, ``"learned"``) to a trained
    `TransformerLM` over `vocab`; a single model is named by its ``config["positions"]``.
    `positions` picks the model shown first (default: the first). The sentence is tokenized as the
    corpus was (`seqmodels.data.tokenize`; unknown words are read as ``<unk>``); the model reads
    ``<s>`` and at most :data:`MAX_TOKENS` − 1 tokens (fewer if its ``max_len`` is shorter). The
    weights are those the model's own blocks record (``EncoderBlock.attention_weights``) in one
    forward pass; the position vectors are its own ``embed.positions(T)``. `trained_length` is the
    number of positions of the longest training input (``<s>`` and the words), marked by a dotted
    line.

    ``explorer.result`` has ``positions`` (the model's name), ``words`` (the typed tokens),
    ``tokens`` (what the model read, ``<s>`` first), ``ids``, ``unknown``, ``truncated``, ``layer``
    and ``head`` (clamped to the model's), ``weights`` ``(T, T)`` (that head's), ``all_weights``
    ``(layers, heads, T, T)``, ``position_vectors`` ``(T, d)`` and ``similarity`` ``(T, T)`` (None
    for a model without positions), ``probs`` ``(V,)`` (the next token's distribution after the
    last token read), ``next_token`` and ``next_prob`` (its most probable token), all float64.
    """
    import ipywidgets as widgets

    if isinstance(models, TransformerLM):
        models = {models.config["positions"]: models}
    models = dict(models)
    if not models:
        raise ValueError("expected at least one TransformerLM")
    for name, model in models.items():
        if not isinstance(model, TransformerLM):
            raise TypeError(f"expected {name!r} to be a TransformerLM, got {type(model).__name__}")
        if model.vocab_size != len(vocab):
            raise ValueError(
                f"expected a vocabulary of model {name!r}'s {model.vocab_size} tokens, "
                f"got {len(vocab)}"
            )
    if positions is None:
        positions = next(iter(models))
    if positions not in models:
        raise ValueError(f"expected positions to be one of {list(models)}, got {positions!r}")
    if trained_length is not None and (not isinstance(trained_length, int) or trained_length < 1):
        raise ValueError(
            f"expected trained_length to be a positive integer, got {trained_length!r}"
        )
    n_layers = max(len(m.blocks) for m in models.values())
    n_heads = max(m.blocks[0].self_attn.n_heads for m in models.values())

    @torch.no_grad()
    def read(model: TransformerLM, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Every block's weights ``(layers, heads, T, T)`` and the next token's probabilities."""
        tokens = torch.tensor([ids], device=next(model.parameters()).device)
        was_training = model.training
        model.eval()
        try:
            logits, _ = model(tokens)
        finally:
            model.train(was_training)
        weights = torch.stack([block.attention_weights[0] for block in model.blocks])
        return weights.double().cpu(), logits[0, -1].double().softmax(-1).cpu()

    def view(sentence: str, positions: str, layer: int, head: int) -> tuple[Figure, dict]:
        model = models[positions]
        words = tokenize(sentence)
        room = min(MAX_TOKENS, model.max_len) - 1
        ids = [vocab.bos, *vocab.encode(words[:room])]
        tokens = vocab.decode(ids)
        T = len(ids)
        all_weights, probs = read(model, ids)
        layer = min(max(int(layer), 0), all_weights.shape[0] - 1)
        head = min(max(int(head), 0), all_weights.shape[1] - 1)
        weights = all_weights[layer, head]
        table = model.embed.positions
        if table is None:
            vectors = similarity = None
        else:
            like = model.embed.embedding.weight
            with torch.no_grad():
                vectors = table(T, like).double().cpu()
            unit = torch.nn.functional.normalize(vectors, dim=-1)
            similarity = unit @ unit.T
        best = int(probs.argmax())

        fig, (pos_ax, att_ax) = plt.subplots(
            1, 2, figsize=(FIGURE_WIDTH, 3.2), layout="constrained"
        )
        if similarity is None:
            pos_ax.axis("off")
            pos_ax.text(0.5, 0.5, "no position vectors", ha="center", va="center")
        else:
            image = pos_ax.imshow(
                similarity.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
            )
            step = max(1, T // 6)
            pos_ax.set_xticks(range(0, T, step))
            pos_ax.set_yticks(range(0, T, step))
            pos_ax.set_xlabel("position s")
            pos_ax.set_ylabel("position t")
            kind = "learned" if isinstance(table, LearnedPositions) else "sinusoidal"
            pos_ax.set_title(f"{kind} positions")
            bar = fig.colorbar(image, ax=pos_ax, ticks=[-1, 0, 1], fraction=0.05, pad=0.03)
            bar.set_label("cosine similarity")
        image = att_ax.imshow(
            weights.numpy(), cmap="viridis", vmin=0, vmax=1, interpolation="nearest"
        )
        labels = [_label(t) for t in tokens]
        att_ax.set_xticks(range(T), labels, rotation=90)
        att_ax.set_yticks(range(T), labels)
        att_ax.set_xlabel("key (token read)")
        att_ax.set_title(f"layer {layer}, head {head}")
        bar = fig.colorbar(image, ax=att_ax, ticks=[0, 0.5, 1], fraction=0.05, pad=0.03)
        bar.set_label("attention weight α")
        fig.suptitle(
            f"{positions}: next after “{_label(tokens[-1])}”: “{_label(vocab.itos[best])}” "
            f"(p = {probs[best]:.2f})"
        )
        for ax in (pos_ax, att_ax):
            ax.grid(False)
            if trained_length is not None and T > trained_length and ax.images:
                ax.axvline(trained_length - 0.5, color="#333333", ls=":", lw=1.5)
                ax.axhline(trained_length - 0.5, color="#333333", ls=":", lw=1.5)
        result = {
            "positions": positions,
            "words": words,
            "tokens": tokens,
            "ids": ids,
            "unknown": [w for w, i in zip(words[:room], ids[1:], strict=True) if i == vocab.unk],
            "truncated": len(words) > room,
            "layer": layer,
            "head": head,
            "weights": weights,
            "all_weights": all_weights,
            "position_vectors": vectors,
            "similarity": similarity,
            "probs": probs,
            "next_token": vocab.itos[best],
            "next_prob": probs[best].item(),
        }
        return fig, result

    controls = {
        "sentence": widgets.Text(value=sentence, description="sentence", continuous_update=False),
        "positions": widgets.ToggleButtons(
            options=list(models), value=positions, description="positions"
        ),
        "layer": widgets.IntSlider(
            value=layer, min=0, max=n_layers - 1, description="layer", continuous_update=False
        ),
        "head": widgets.IntSlider(
            value=head, min=0, max=n_heads - 1, description="head", continuous_update=False
        ),
    }
    return Explorer(controls, view, title="Positions and attention in a trained Transformer")
