"""Schematic diagrams of the book's models, drawn by code from the models' own configuration.

Each function returns a `Diagram`: a matplotlib figure (its `.figure`) `FIGURE_WIDTH` wide that
displays, and is glued, as SVG; its text is at least `plots.MIN_TEXT_PX` high on a 400-px phone and
in a 1,400-px window (`plots.smallest_text_px`), and it is labelled with the symbols of the equation
it illustrates. What a diagram counts — time steps, gates, heads, positions — is read from
its argument (a model, or a size), so a diagram cannot show a model the library does not build:

- `stacked_rnn_figure`: a recurrent module's layers and directions (Chapter 3's eq-stacked-rnn);
- `unrolled_rnn_figure`: the Elman RNN unrolled over T steps (Chapter 3's eq-rnn), with the
  gradient of backpropagation through time and, with ``truncate=k``, where truncated BPTT stops it;
- `gated_cell_figure`: one step of a GRU or an LSTM (Chapter 5's eq-gru, eq-lstm), one box per gate
  of the module's weights, and the additive path that carries the state;
- `causal_mask_figure`: which keys each query may read in a decoder (Chapter 8's causal mask);
- `multi_head_figure`: a `MultiHeadAttention`'s heads, each attending with its own projections;
- `encoder_decoder_figure`: a `Seq2Seq`'s encoder and decoder with the routes of its ``context``
  (Chapter 6's eq-ch6-init, eq-ch6-input, eq-ch6-output), or its attention (Chapter 7);
- `teacher_forcing_figure`: the decoder fed the reference prefix beside it fed its own outputs;
- `beam_tree_figure`: the candidates a beam search ranked at each step, kept, finished or pruned
  (Chapter 9), from the search's own trace;
- `attention_figure`: one query's soft look-up with the weights an attention computed (Chapter 7);
- `scaled_dot_attention_figure`: scaled dot-product attention in matrix form, QKᵀ/√d, the
  key mask, the row softmax and AV, with the shapes of its queries, keys and values (Chapter 7);
- `taxonomy_figure`: four families of sequence model by what one prediction conditions on
  (Chapter 1's eq-chain-rule and eq-markov);
- `block_figure`: Transformer blocks side by side, the norm after each residual sum (post-LN) or
  before each sublayer (pre-LN), read from each block's ``norm_first``.
"""

from __future__ import annotations

import io

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from .plots import BOOK_STYLE, FIGURE_WIDTH, OTHER_COLOR, SOURCE_COLOR, TARGET_COLOR

INK = "#222222"
FORWARD = "#1d3557"  # values, left to right and bottom to top
BACKWARD = "#d55e00"  # gradients (the book's backward colour)
GATE = "#e69f00"  # a sigmoid gate
CANDIDATE = "#009e73"  # a tanh candidate
STATE = SOURCE_COLOR
FONT = 10.5  # points: 9.3 CSS px on a 400-px phone at FIGURE_WIDTH


class Diagram:
    """A drawn diagram that shows itself as SVG: in a notebook, and when a chapter glues it
    (``glue("key", unrolled_rnn_figure(4), display=False)`` then ``{glue:figure}``), its display is
    ``image/svg+xml`` — vector, sharp on any screen, scaled to the column by its ``viewBox``. The
    matplotlib figure is `figure` (closed in pyplot, so a notebook shows it once, as SVG); any other
    attribute is the figure's (``diagram.axes``, ``diagram.savefig(...)``)."""

    def __init__(self, figure: Figure) -> None:
        self.figure = figure
        plt.close(figure)

    def svg(self) -> str:
        """The figure as an SVG document: text drawn as paths, stable ids, no date, cropped to what
        is drawn (``bbox_inches="tight"``, as the book's other figures)."""
        out = io.StringIO()
        style = {k: BOOK_STYLE[k] for k in ("svg.fonttype", "svg.hashsalt")}
        with plt.rc_context(style):
            self.figure.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
        return out.getvalue()

    def _repr_svg_(self) -> str:
        return self.svg()

    def __getattr__(self, name: str):
        if name == "figure":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.figure, name)

    def __repr__(self) -> str:
        w, h = self.figure.get_size_inches()
        return f"<Diagram {w:.2f} x {h:.2f} in>"


def _box(ax, x, y, text, w=0.9, h=0.55, face="white", size=FONT, color=INK, lw=1.0) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            fc=face,
            ec=color,
            lw=lw,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=size, color=INK)


def _arrow(ax, a, b, color=FORWARD, rad=0.0, style="-|>", ls="-", lw=1.2, shrink=2) -> None:
    ax.add_patch(
        FancyArrowPatch(
            a,
            b,
            connectionstyle=f"arc3,rad={rad}",
            arrowstyle=style,
            mutation_scale=10,
            color=color,
            lw=lw,
            linestyle=ls,
            shrinkA=shrink,
            shrinkB=shrink,
        )
    )


def _canvas(height: float, xlim: tuple[float, float], ylim: tuple[float, float]):
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH, height))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def unrolled_rnn_figure(steps: int = 4, truncate: int | None = None) -> Diagram:
    r"""The Elman RNN unrolled over `steps` steps: inputs $\mathbf x_t$, states $\mathbf h_t$ (from
    $\mathbf h_0$), predictions $\hat{\mathbf y}_t$ and losses $L_t$; forward arrows carry values,
    backward arrows $\partial L/\partial \mathbf h_t$. With ``truncate=k`` the steps are cut into
    windows of k: the state crosses a cut, the gradient does not (truncated BPTT)."""
    if steps < 1:
        raise ValueError(f"expected at least one step, got {steps}")
    if truncate is not None and not 1 <= truncate < steps:
        raise ValueError(f"expected 1 <= truncate < steps ({steps}), got {truncate}")
    dx = 1.6
    xlim, ylim = (-0.55, dx * steps + 0.55), (-0.5, 3.35)
    aspect = (ylim[1] - ylim[0]) / (xlim[1] - xlim[0])
    fig, ax = _canvas(FIGURE_WIDTH * aspect + (1.0 if truncate else 0.75), xlim, ylim)
    y_in, y_h, y_out, y_loss = 0.0, 1.2, 2.4, 3.1
    _box(ax, 0, y_h, r"$\mathbf{h}_0$", face=OTHER_COLOR)
    cuts = set(range(truncate, steps, truncate)) if truncate else set()
    for t in range(1, steps + 1):
        x = dx * t
        _box(ax, x, y_in, rf"$\mathbf{{x}}_{t}$", face=OTHER_COLOR)
        _box(ax, x, y_h, rf"$\mathbf{{h}}_{t}$", face=STATE)
        _box(ax, x, y_out, rf"$\hat{{\mathbf{{y}}}}_{t}$", face="white")
        ax.text(x, y_loss, f"$L_{t}$", ha="center", va="center", fontsize=FONT)
        _arrow(ax, (x, y_in + 0.28), (x, y_h - 0.28))
        _arrow(ax, (x, y_h + 0.28), (x, y_out - 0.28))
        _arrow(ax, (x, y_out + 0.28), (x, y_loss - 0.2), lw=0.9)
        _arrow(ax, (x - dx + 0.45, y_h + 0.07), (x - 0.45, y_h + 0.07))
        # the gradient flows back along the chain, except across a truncation cut
        if t - 1 not in cuts and t > 1:
            _arrow(ax, (x - 0.45, y_h - 0.12), (x - dx + 0.45, y_h - 0.12), color=BACKWARD, ls="--")
        elif t - 1 in cuts:
            mid = x - dx / 2
            ax.plot([mid, mid], [y_h - 0.55, y_h + 0.55], color=BACKWARD, lw=1.4)
    x1 = dx
    ax.text(x1 - dx / 2, y_h + 0.22, "$W_{hh}$", ha="center", va="bottom", fontsize=FONT)
    ax.text(x1 + 0.1, (y_in + y_h) / 2, "$W_{xh}$", ha="left", va="center", fontsize=FONT)
    ax.text(x1 + 0.1, (y_h + y_out) / 2, "$W_{hy}$", ha="left", va="center", fontsize=FONT)
    legend = [(FORWARD, "-", "forward: values")]
    legend.append((BACKWARD, "--", r"backward: $\partial L/\partial \mathbf{h}_t$"))
    if truncate:
        for k, start in enumerate(range(1, steps + 1, truncate)):
            end = min(start + truncate - 1, steps)
            ax.add_patch(
                Rectangle(
                    (dx * start - 0.62, y_in - 0.45),
                    dx * (end - start) + 1.24,
                    y_out - y_in + 0.9,
                    fc=TARGET_COLOR if k % 2 else SOURCE_COLOR,
                    alpha=0.12,
                    ec="none",
                    zorder=0,
                )
            )
        legend.append((BACKWARD, "-", f"cut every {truncate} steps: no gradient crosses"))
    for color, ls, label in legend:
        ax.plot([], [], color=color, ls=ls, label=label)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.02), ncols=1, frameon=False, fontsize=FONT)
    fig.tight_layout(pad=0.1)
    return Diagram(fig)


def _gates_of(cell) -> tuple[str, int]:
    """``("gru" | "lstm", gate blocks)`` of a GRU or LSTM module, read from its weights' rows."""
    name = type(cell).__name__.lower()
    kind = "lstm" if "lstm" in name else "gru" if "gru" in name else None
    if kind is None:
        raise TypeError(f"expected a GRU or an LSTM module, got {type(cell).__name__}")
    weight = next(w for n, w in cell.named_parameters() if n.startswith("weight_ih"))
    return kind, weight.shape[0] // cell.hidden_size


def gated_cell_figure(cell) -> Diagram:
    r"""One step of `cell` (`seqmodels.gated.GRU`/`LSTM` or ``nn.GRU``/``nn.LSTM``): a box per gate
    block of its input weights (σ gates in orange, the tanh candidate in green), the inputs
    $\mathbf x_t$ and $\mathbf h_{t-1}$ below, and the additive path of the state along the top:
    $\mathbf c_t = \mathbf f_t \odot \mathbf c_{t-1} + \mathbf i_t \odot \mathbf g_t$ (LSTM) or
    $\mathbf h_t = (1 - \mathbf z_t) \odot \mathbf h_{t-1} + \mathbf z_t \odot \tilde{\mathbf h}_t$ (GRU)."""
    kind, blocks = _gates_of(cell)
    gates = (
        [(r"$\mathbf{f}_t$", "σ"), (r"$\mathbf{i}_t$", "σ"), (r"$\mathbf{g}_t$", "tanh"),
         (r"$\mathbf{o}_t$", "σ")]
        if kind == "lstm"
        else [(r"$\mathbf{z}_t$", "σ"), (r"$\mathbf{r}_t$", "σ"), (r"$\tilde{\mathbf{h}}_t$", "tanh")]
    )  # fmt: skip
    if len(gates) != blocks:
        raise ValueError(f"a {kind.upper()} has {len(gates)} gate blocks, this one {blocks}")
    fig, ax = _canvas(3.4, (-0.4, 9.6), (-0.75, 4.35))
    top, mid = 3.7, 1.75
    state_in, state_out = (
        (r"$\mathbf{c}_{t-1}$", r"$\mathbf{c}_t$") if kind == "lstm"
        else (r"$\mathbf{h}_{t-1}$", r"$\mathbf{h}_t$")
    )  # fmt: skip
    # the state's path along the top: one multiply and one add
    _box(ax, 0.45, top, state_in, w=0.95, face=STATE)
    _box(ax, 8.75, top, state_out, w=0.95, face=STATE)
    times, plus = (3.0, top), (5.7, top)
    for (x, y), sign in ((times, "×"), (plus, "+")):
        ax.add_patch(plt.Circle((x, y), 0.26, fc="white", ec=INK, lw=1.0))
        ax.text(x, y, sign, ha="center", va="center", fontsize=FONT + 1)
    _arrow(ax, (0.93, top), (times[0] - 0.26, top), color=INK, lw=1.6, shrink=0)
    _arrow(ax, (times[0] + 0.26, top), (plus[0] - 0.26, top), color=INK, lw=1.6, shrink=0)
    _arrow(ax, (plus[0] + 0.26, top), (8.27, top), color=INK, lw=1.6, shrink=0)
    keep = r"$\mathbf{f}_t$" if kind == "lstm" else r"$1-\mathbf{z}_t$"
    ax.text(times[0], top + 0.38, f"keep: {keep}", ha="center", va="bottom", fontsize=FONT)
    write = (
        r"$\mathbf{i}_t \odot \mathbf{g}_t$"
        if kind == "lstm"
        else (r"$\mathbf{z}_t \odot \tilde{\mathbf{h}}_t$")
    )
    ax.text(plus[0], top + 0.38, f"write: {write}", ha="center", va="bottom", fontsize=FONT)
    # the gates, each a function of x_t and h_{t-1}
    xs = [1.4 + 1.75 * i for i in range(len(gates))]
    for x, (symbol, fn) in zip(xs, gates, strict=True):
        face = GATE if fn == "σ" else CANDIDATE
        _box(ax, x, mid, f"{fn}\n{symbol}", w=1.15, h=0.85, face=face)
    _box(ax, 2.3, -0.35, r"$\mathbf{x}_t$", face=OTHER_COLOR)
    _box(ax, 5.3, -0.35, r"$\mathbf{h}_{t-1}$", w=1.0, face=OTHER_COLOR)
    for x in xs:
        _arrow(ax, (2.3, -0.07), (x, mid - 0.43), lw=0.8)
        _arrow(ax, (5.3, -0.07), (x, mid - 0.43), lw=0.8)
    # where each gate acts
    _arrow(ax, (xs[0], mid + 0.43), (times[0] - 0.1, times[1] - 0.26), lw=1.0)  # f_t or 1 - z_t
    if kind == "lstm":  # i_t ⊙ g_t is written; h_t = o_t ⊙ tanh(c_t)
        both = ((xs[1] + xs[2]) / 2, mid + 1.05)
        ax.add_patch(plt.Circle(both, 0.22, fc="white", ec=INK, lw=1.0))
        ax.text(*both, "×", ha="center", va="center", fontsize=FONT)
        _arrow(ax, (xs[1], mid + 0.43), (both[0] - 0.15, both[1] - 0.17), lw=1.0)
        _arrow(ax, (xs[2], mid + 0.43), (both[0] + 0.15, both[1] - 0.17), lw=1.0)
        _arrow(ax, (both[0] + 0.16, both[1] + 0.16), (plus[0] - 0.12, plus[1] - 0.24), lw=1.0)
        _box(ax, 8.75, mid, r"$\mathbf{h}_t$", face=STATE)
        ax.text(8.75, (top + mid) / 2, r"$\mathbf{o}_t \odot \tanh$", ha="center", va="center",
                fontsize=FONT, bbox={"fc": "white", "ec": "none", "pad": 1})  # fmt: skip
        _arrow(ax, (8.75, top - 0.28), (8.75, mid + 0.28), color=INK, lw=1.0)
        _arrow(ax, (xs[3] + 0.58, mid), (8.27, mid), lw=1.0)
    else:  # z_t ⊙ h~_t is written; the reset gate acts on h_{t-1} inside the candidate
        _arrow(ax, (xs[2], mid + 0.43), (plus[0] - 0.12, plus[1] - 0.24), lw=1.0)
        _arrow(ax, (xs[1] + 0.58, mid), (xs[2] - 0.58, mid), lw=1.0)
        ax.text((xs[1] + xs[2]) / 2, mid + 0.62, r"$\mathbf{r}_t \odot \mathbf{h}_{t-1}$",
                ha="center", va="center", fontsize=FONT)  # fmt: skip
    title = "LSTM cell" if kind == "lstm" else "GRU cell"
    ax.set_title(f"{title}: {len(gates)} gate blocks of the weights", fontsize=FONT, loc="left")
    fig.tight_layout(pad=0.1)
    return Diagram(fig)


def causal_mask_figure(T: int = 6, tokens: list[str] | None = None) -> Diagram:
    r"""The causal mask of a decoder over `T` positions: query $i$ (a row) may read key $j$ (a
    column) only for $j \le i$ (filled); the rest is $-\infty$ before the softmax."""
    if T < 2:
        raise ValueError(f"expected at least two positions, got {T}")
    if tokens is not None and len(tokens) != T:
        raise ValueError(f"expected {T} tokens, got {len(tokens)}")
    labels = tokens or [f"{t}" for t in range(1, T + 1)]
    fig, ax = plt.subplots(figsize=(min(FIGURE_WIDTH, 0.55 * T + 2.2), 0.55 * T + 1.3))
    for i in range(T):
        for j in range(T):
            allowed = j <= i
            ax.add_patch(
                Rectangle(
                    (j, T - 1 - i),
                    1,
                    1,
                    fc=SOURCE_COLOR if allowed else "white",
                    ec="#999999",
                    lw=0.8,
                )
            )
            if not allowed:
                ax.text(j + 0.5, T - 0.5 - i, r"$-\infty$", ha="center", va="center",
                        fontsize=FONT, color="#777777")  # fmt: skip
    ax.set_xlim(0, T)
    ax.set_ylim(0, T)
    ax.set_aspect("equal")
    ax.set_xticks([j + 0.5 for j in range(T)], labels)
    ax.set_yticks([T - 0.5 - i for i in range(T)], labels)
    ax.tick_params(length=0, labelsize=FONT)
    ax.xaxis.tick_top()
    ax.set_xlabel("key position $j$ (read)", fontsize=FONT)
    ax.xaxis.set_label_position("top")
    ax.set_ylabel("query position $i$", fontsize=FONT)
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.tight_layout(pad=0.2)
    return Diagram(fig)


def multi_head_figure(attention) -> Diagram:
    r"""A `seqmodels.transformer.MultiHeadAttention`: each of its ``n_heads`` heads projects $X$ with
    its own $W^Q_i, W^K_i, W^V_i$ ($d \to d_k$) and attends; the heads are concatenated and mixed by
    $W^O$ (eq-ch8-multihead)."""
    H, d, d_k = attention.n_heads, attention.d_model, attention.d_k
    shown = list(range(H)) if H <= 4 else [0, 1, None, H - 1]
    fig, ax = _canvas(3.4, (-0.3, 9.8), (-0.6, 4.5))
    _box(ax, 4.75, -0.2, rf"$X$  ($T \times {d}$)", w=2.4, face=OTHER_COLOR)
    xs = [1.3 + 2.4 * k for k in range(len(shown))]
    for x, head in zip(xs, shown, strict=True):
        if head is None:
            ax.text(x, 1.8, "…", ha="center", va="center", fontsize=FONT + 4)
            continue
        i = head + 1
        _box(ax, x, 1.0, rf"$W^Q_{{{i}}}, W^K_{{{i}}}, W^V_{{{i}}}$", w=2.1, h=0.6, face=GATE)
        _box(ax, x, 2.35, f"Attention\n$h_{{{i}}}$: $T \\times {d_k}$", w=2.1, h=0.8, face=STATE)
        _arrow(ax, (4.75, 0.08), (x, 0.7), lw=0.8)
        _arrow(ax, (x, 1.3), (x, 1.95), lw=1.0)
        _arrow(ax, (x, 2.75), (4.75, 3.45), lw=0.8)
    _box(ax, 4.75, 3.75, rf"Concat$(h_1, \dots, h_{{{H}}})\,W^O$", w=3.6, face="white")
    ax.text(9.75, 4.35, f"{H} heads, $d = {d}$, $d_k = d/H = {d_k}$", ha="right", va="center",
            fontsize=FONT)  # fmt: skip
    fig.tight_layout(pad=0.1)
    return Diagram(fig)


def _block_panel(ax, pre: bool) -> None:
    x, y, prev = 1.0, 0.0, 0.0
    _box(ax, x, y, r"$\mathbf{x}$", face=OTHER_COLOR)
    steps = []
    for sublayer in ("self-attention", "feed-forward"):
        steps += (
            [("LN", "white"), (sublayer, STATE), ("+", None)]
            if pre
            else [(sublayer, STATE), ("+", None), ("LN", "white")]
        )
    branch = 0.0  # where the current sublayer's residual leaves the main path
    for label, face in steps:
        y += 0.9
        if label == "+":
            ax.add_patch(plt.Circle((x, y), 0.24, fc="white", ec=INK, lw=1.0))
            ax.text(x, y, "+", ha="center", va="center", fontsize=FONT + 1)
            _arrow(ax, (x, prev + 0.28), (x, y - 0.24), lw=1.0)
            side = x - 1.55
            ax.plot([x, side, side], [branch + 0.45, branch + 0.45, y], color=INK, lw=1.0)
            _arrow(ax, (side, y), (x - 0.24, y), color=INK, lw=1.0, shrink=0)
        else:
            starts_sublayer = (label == "LN") if pre else label != "LN"
            if starts_sublayer:
                branch = prev
            _box(ax, x, y, label, w=2.0 if label != "LN" else 0.8, h=0.5, face=face)
            _arrow(ax, (x, prev + 0.27), (x, y - 0.25), lw=1.0)
        prev = y
    _arrow(ax, (x, prev + 0.27), (x, prev + 0.7), lw=1.0)
    ax.set_title("pre-LN" if pre else "post-LN (the original)", fontsize=FONT)


def block_figure(*blocks) -> Diagram:
    r"""Transformer blocks (`seqmodels.transformer.EncoderBlock`/`DecoderBlock`) side by side, from
    the bottom up: without ``norm_first`` (post-LN, the original) the norm follows each residual
    sum; with it (pre-LN) each sublayer reads $\mathrm{LN}(\mathbf x)$ and the residual path from
    $\mathbf x$ to the output passes through no norm. One panel per block, read from the block."""
    if not blocks:
        raise ValueError("expected at least one block")
    fig, axes = plt.subplots(1, len(blocks), figsize=(FIGURE_WIDTH, 4.0), squeeze=False)
    for ax, block in zip(axes[0], blocks, strict=True):
        ax.set_xlim(-0.9, 2.4)
        ax.set_ylim(-0.45, 6.2)
        ax.set_aspect("equal")
        ax.axis("off")
        _block_panel(ax, bool(block.norm_first))
    fig.tight_layout(pad=0.2)
    return Diagram(fig)


def encoder_decoder_figure(model, source: int = 3, target: int = 3) -> Diagram:
    r"""A `seqmodels.seq2seq.Seq2Seq` over `source` input and `target` output steps: the encoder's
    states $\mathbf h^{\text{enc}}_j$ (left), the context $\mathbf c = \mathbf h^{\text{enc}}_n$,
    and the decoder's states $\mathbf h_t$ (right). The routes drawn are the model's ``context``:
    ``"init"`` ($\mathbf h_0 = \mathbf c$), ``"input"`` ($\mathbf c$ in every update) and
    ``"output"`` ($\mathbf c$ in every output layer); an attention model starts from
    $\mathbf h_0 = \mathbf c$ and reads every encoder state at every step."""
    routes, attention = tuple(model.context), model.attention_score is not None
    if source < 1 or target < 1:
        raise ValueError(f"expected at least one step each side, got {source} and {target}")
    dx = 1.25
    x_dec0 = dx * (source + 1) + 0.6
    xlim = (-0.55, x_dec0 + dx * target + 0.55)
    ylim = (-0.55, 3.6)
    fig, ax = _canvas(FIGURE_WIDTH * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0]) + 0.35, xlim, ylim)
    y_in, y_h, y_out = 0.0, 1.3, 2.6
    for j in range(1, source + 1):
        x = dx * j
        _box(ax, x, y_in, f"$x_{j}$", w=0.7, face=OTHER_COLOR)
        _box(ax, x, y_h, rf"$\mathbf{{h}}^{{e}}_{j}$", w=0.75, face=STATE)
        _arrow(ax, (x, y_in + 0.28), (x, y_h - 0.28))
        if j > 1:
            _arrow(ax, (x - dx + 0.38, y_h), (x - 0.38, y_h))
    c = (dx * source, y_h)
    ax.text(c[0], y_h + 0.45, r"$\mathbf{c}$", ha="center", va="bottom", fontsize=FONT)
    _box(ax, x_dec0, y_h, r"$\mathbf{h}_0$", w=0.75, face=OTHER_COLOR)
    if "init" in routes or attention:  # an attention model starts from c too
        _arrow(ax, (c[0] + 0.38, y_h), (x_dec0 - 0.38, y_h), color=TARGET_COLOR, lw=1.6)
    for t in range(1, target + 1):
        x = x_dec0 + dx * t
        _box(ax, x, y_in, f"$y_{t - 1}$", w=0.7, face=OTHER_COLOR)
        _box(ax, x, y_h, rf"$\mathbf{{h}}_{t}$", w=0.75, face=STATE)
        _box(ax, x, y_out, f"$p(y_{t})$", w=0.9, face="white")
        _arrow(ax, (x, y_in + 0.28), (x, y_h - 0.28))
        _arrow(ax, (x, y_h + 0.28), (x, y_out - 0.28))
        _arrow(ax, (x - dx + 0.38, y_h), (x - 0.38, y_h))
        if "input" in routes:
            _arrow(ax, (c[0], y_h - 0.28), (x - 0.2, y_h - 0.28), color=TARGET_COLOR, rad=0.25)
        if "output" in routes:
            _arrow(ax, (c[0], y_h + 0.28), (x - 0.45, y_out - 0.05), color=TARGET_COLOR, rad=-0.25)
        if attention:
            for j in range(1, source + 1):
                _arrow(ax, (dx * j, y_h + 0.28), (x - 0.2, y_h + 0.28), color=TARGET_COLOR,
                       rad=-0.3, lw=0.7)  # fmt: skip
    what = (
        f"attention ({model.attention_score}): every " + r"$\mathbf{h}^{e}_j$" + " at every step"
        if attention
        else "context " + r"$\mathbf{c}$" + ": " + ", ".join(f'"{r}"' for r in routes)
    )
    ax.set_title(f"encoder (left), decoder (right); {what}", fontsize=FONT, loc="left")
    fig.tight_layout(pad=0.1)
    return Diagram(fig)


def teacher_forcing_figure(steps: int = 4) -> Diagram:
    r"""The decoder over `steps` steps, twice: trained with **teacher forcing** (each step fed the
    reference token $y_{t-1}$) and tested **free running** (each step fed its own
    $\hat y_{t-1}$, so an early mistake is read by every later step)."""
    if steps < 2:
        raise ValueError(f"expected at least two steps, got {steps}")
    dx = 1.3
    xlim, ylim = (-1.7, dx * steps + 0.5), (-0.45, 4.35)
    fig, ax = _canvas(FIGURE_WIDTH * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0]), xlim, ylim)
    for row, (name, y0) in enumerate((("teacher\nforcing", 2.4), ("free\nrunning", 0.0))):
        ax.text(-1.6, y0 + 0.9, name, ha="left", va="center", fontsize=FONT)
        for t in range(1, steps + 1):
            x = dx * t
            fed = "<s>" if t == 1 else (f"$y_{t - 1}$" if row == 0 else rf"$\hat y_{t - 1}$")
            face = OTHER_COLOR if row == 0 or t == 1 else TARGET_COLOR
            _box(ax, x, y0, fed, w=0.8, face=face)
            _box(ax, x, y0 + 0.9, rf"$\mathbf{{h}}_{t}$", w=0.75, face=STATE)
            ax.text(x, y0 + 1.6, rf"$\hat y_{t}$", ha="center", va="center", fontsize=FONT)
            _arrow(ax, (x, y0 + 0.28), (x, y0 + 0.62))
            _arrow(ax, (x, y0 + 1.18), (x, y0 + 1.42))
            if t > 1:
                _arrow(ax, (x - dx + 0.38, y0 + 0.9), (x - 0.38, y0 + 0.9))
            if row == 1 and t < steps:  # the output fed back as the next input
                _arrow(ax, (x + 0.15, y0 + 1.45), (x + dx - 0.3, y0 + 0.28), color=TARGET_COLOR,
                       rad=-0.2, lw=1.0)  # fmt: skip
    fig.tight_layout(pad=0.1)
    return Diagram(fig)


def stacked_rnn_figure(rnn, steps: int = 4) -> Diagram:
    r"""A recurrent module's layers (``num_layers``) and directions (``bidirectional``) over `steps`
    steps: layer $\ell$ reads the states of layer $\ell - 1$ (eq-stacked-rnn,
    $\mathbf h^{(0)}_t = \mathbf x_t$); a bidirectional layer runs a second chain from the end to the
    start (orange), and the next layer reads the two states of a step side by side."""
    layers, both = int(rnn.num_layers), bool(rnn.bidirectional)
    if steps < 2:
        raise ValueError(f"expected at least two steps, got {steps}")
    dx, dy = 1.8 if both else 1.5, 1.3
    xlim = (0.75, dx * steps + 0.8)
    ylim = (-0.45, dy * layers + 0.75)
    height = FIGURE_WIDTH * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0]) + (0.7 if both else 0.3)
    fig, ax = _canvas(height, xlim, ylim)
    for t in range(1, steps + 1):
        _box(ax, dx * t, 0, rf"$\mathbf{{x}}_{t}$", w=0.75, face=OTHER_COLOR)
    for layer in range(1, layers + 1):
        y = dy * layer
        for t in range(1, steps + 1):
            x = dx * t
            label = rf"$\mathbf{{h}}^{{({layer})}}_{t}$"
            _arrow(ax, (x, y - dy + 0.3), (x, y - 0.3), lw=0.9)
            if not both:
                _box(ax, x, y, label, w=0.8, face=STATE)
                if t > 1:
                    _arrow(ax, (x - dx + 0.4, y), (x - 0.4, y))
                continue
            _box(ax, x - 0.36, y, label, w=0.68, h=0.58, face=STATE)
            _box(ax, x + 0.36, y, label, w=0.68, h=0.58, face=TARGET_COLOR)
            if t > 1:  # left to right above the boxes, right to left below them
                _arrow(ax, (x - dx - 0.36, y + 0.3), (x - 0.36, y + 0.3), rad=-0.25)
                _arrow(ax, (x + 0.36, y - 0.3), (x - dx + 0.36, y - 0.3), color=BACKWARD,
                       rad=-0.25)  # fmt: skip
    if both:
        ax.plot([], [], color=FORWARD, label="left to right (blue states)")
        ax.plot([], [], color=BACKWARD, label="right to left (orange states)")
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.0), ncols=2, frameon=False,
                  fontsize=FONT, handlelength=1.2, columnspacing=1.0)  # fmt: skip
    kind = type(rnn).__name__
    count = f"{layers} layer{'s' if layers > 1 else ''}"
    ax.set_title(f"{kind}: {count}, {'both directions' if both else 'left to right'}",
                 fontsize=FONT, loc="left")  # fmt: skip
    fig.tight_layout(pad=0.1)
    return Diagram(fig)


def beam_tree_figure(
    trace: list, words: dict[int, str], eos: int = 1, beam: int | None = None
) -> Diagram:
    r"""The tree a beam search explored, from its `trace` (`seqmodels.decoding.beam_search` with
    ``trace=[]``): one column per step, one node per ranked candidate — kept in the beam (blue),
    kept and ended by ``</s>`` (orange, finished), or pruned (grey) — joined to the prefix it
    extends and labelled with its word and the cumulative probability $p(y_{\le t})$."""
    import math

    if not trace:
        raise ValueError("expected the trace of at least one step")
    name = {**words, eos: "</s>"}
    rows = max(len(step) for step in trace)
    dx, dy = 1.9, 0.78
    xlim = (-0.55, dx * len(trace) + 0.75)
    ylim = (-dy * (rows - 1) - 0.45, 0.5)
    height = FIGURE_WIDTH * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0]) + 0.55
    fig, ax = _canvas(height, xlim, ylim)
    _box(ax, 0, 0, "<s>", w=0.7, h=0.42, face=OTHER_COLOR)
    where = {(): (0.0, 0.0)}  # a kept prefix → its node's centre
    for t, step in enumerate(trace, start=1):
        x = dx * t
        for r, c in enumerate(step):
            y = -dy * r
            face = TARGET_COLOR if c["finished"] else STATE if c["kept"] else "white"
            p = math.exp(c["log_prob"])
            _box(ax, x, y, f"{name.get(c['token'], c['token'])}  {p:.2f}", w=1.25, h=0.42,
                 face=face, color=INK if c["kept"] else "#aaaaaa")  # fmt: skip
            parent = where.get(tuple(c["prefix"]))
            if parent is not None:
                start = (parent[0] + (0.35 if parent[0] == 0 else 0.63), parent[1])
                _arrow(ax, start, (x - 0.63, y), lw=1.0 if c["kept"] else 0.7,
                       color=FORWARD if c["kept"] else "#aaaaaa",
                       ls="-" if c["kept"] else "--")  # fmt: skip
            if c["kept"] and not c["finished"]:
                where[(*c["prefix"], c["token"])] = (x, y)
    size = beam if beam is not None else max(sum(c["kept"] for c in step) for step in trace)
    ax.set_title(f"beam of {size}: kept (blue), finished (orange), pruned (grey)", fontsize=FONT,
                 loc="left")  # fmt: skip
    fig.tight_layout(pad=0.1)
    return Diagram(fig)


def attention_figure(weights, keys: list[str] | None = None) -> Diagram:
    r"""One query's soft look-up (eq-attention) with the weights an attention computed: the query
    $\mathbf q$ scores every key $\mathbf k_j$, the softmax gives $\alpha_j$ (each arrow's width and
    label), and the context $\mathbf c = \sum_j \alpha_j \mathbf v_j$ averages the values."""
    import torch

    alpha = torch.as_tensor(weights, dtype=torch.float64).flatten()
    if alpha.numel() < 2 or bool((alpha < 0).any()) or abs(float(alpha.sum()) - 1) > 1e-6:
        raise ValueError(
            "expected the weights of one query: two or more, non-negative, summing to 1"
        )
    n = alpha.numel()
    names = [""] * n if keys is None else list(keys)
    if len(names) != n:
        raise ValueError(f"expected {n} key names, got {len(names)}")
    dx = 1.45
    xlim = (-0.2, dx * (n - 1) + 2.4)
    ylim = (-0.5, 3.35)
    fig, ax = _canvas(FIGURE_WIDTH * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0]) + 0.2, xlim, ylim)
    centre = dx * (n - 1) / 2 + 0.5
    _box(ax, centre, 2.95, r"query $\mathbf{q}$", w=1.6, face=STATE)
    _box(ax, centre, -0.2, r"$\mathbf{c} = \sum_j \alpha_j \mathbf{v}_j$", w=2.4, face=TARGET_COLOR)
    for j, (a, name) in enumerate(zip(alpha.tolist(), names, strict=True)):
        x = 0.5 + dx * j
        label = rf"$\mathbf{{k}}_{{{j + 1}}}, \mathbf{{v}}_{{{j + 1}}}$" + (
            f"\n{name}" if name else ""
        )
        _box(ax, x, 1.35, label, w=1.2, h=0.8, face=OTHER_COLOR)
        _arrow(ax, (centre, 2.65), (x, 1.78), lw=0.8, color="#777777")
        _arrow(ax, (x, 0.93), (centre + (x - centre) * 0.25, 0.1), lw=0.6 + 5 * a,
               color=TARGET_COLOR)  # fmt: skip
        ax.text(x + 0.05, 0.72, rf"$\alpha_{{{j + 1}}}$ = {a:.2f}", ha="left", va="center",
                fontsize=FONT)  # fmt: skip
    ax.text(0.0, 2.45, "score, then\nsoftmax", ha="left", va="center", fontsize=FONT)
    fig.tight_layout(pad=0.1)
    return Diagram(fig)


def _taxonomy_families(t: int, n: int) -> list[tuple[str, list[int], str]]:
    """``(name: examples, the positions the prediction of w_t conditions on, its probability)``."""
    before = ", ".join(f"w_{s}" for s in range(t - n + 1, t))
    prefix = ", ".join(f"w_{s}" for s in range(1, t))
    return [
        ("left to right (autoregressive): RNNs, GPT", list(range(1, t)), rf"$p(w_{t} \mid {prefix})$"),
        (f"Markov, order {n - 1} ({n}-gram): n-grams, Bengio", list(range(t - n + 1, t)),
         rf"$p(w_{t} \mid {before})$"),
        ("independent (unigram): bag of words", [], rf"$p(w_{t})$"),
        ("masked (both sides): BERT", None, rf"$p(w_{t} \mid w_{{\neq {t}}})$"),
    ]  # fmt: skip


def taxonomy_figure(tokens: int = 5, t: int = 4, n: int = 3) -> Diagram:
    r"""Four families of sequence model by what the prediction of one token $w_t$ (orange) may
    condition on (blue, with an arrow to $w_t$), over a text $w_1, \dots, w_{tokens}$: the whole
    prefix (left to right, the chain rule eq-chain-rule), the last $n - 1$ tokens (Markov,
    eq-markov), nothing (independent), or both sides (masked). One row per family, each labelled
    with the probability it models."""
    if not 2 <= t <= tokens:
        raise ValueError(f"expected 2 <= t <= tokens ({tokens}), got t = {t}")
    if not 2 <= n <= t:
        raise ValueError(f"expected an n-gram order 2 <= n <= t ({t}), got n = {n}")
    families = _taxonomy_families(t, n)
    dx = 1.0
    xlim, ylim = (0.35, 10.3), (-0.35, 1.0)
    row = FIGURE_WIDTH * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0])
    fig, axes = plt.subplots(len(families), 1, figsize=(FIGURE_WIDTH, len(families) * (row + 0.42)))
    for ax, (name, sources, formula) in zip(axes, families, strict=True):
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ax.set_aspect("equal")
        ax.axis("off")
        sources = [s for s in range(1, tokens + 1) if s != t] if sources is None else sources
        for s in range(1, tokens + 1):
            face = TARGET_COLOR if s == t else STATE if s in sources else OTHER_COLOR
            _box(ax, dx * s, 0, f"$w_{s}$", w=0.75, h=0.55, face=face)
        for s in sources:  # an arc over the boxes, from each token read to the predicted one
            rad = -0.35 if s < t else 0.35
            _arrow(ax, (dx * s, 0.29), (dx * t + (0.12 if s > t else -0.12), 0.29), rad=rad, lw=1.0)
        ax.text(dx * tokens + 0.55, 0, formula, ha="left", va="center", fontsize=FONT)
        ax.set_title(name, fontsize=FONT, loc="left", pad=2)
    fig.tight_layout(pad=0.1, h_pad=1.1)
    return Diagram(fig)


def scaled_dot_attention_figure(
    queries: int = 3, keys: int = 4, d: int = 8, d_v: int | None = None, key_mask=None
) -> Diagram:
    r"""Scaled dot-product attention in matrix form, over `queries` queries and `keys` keys of size
    `d` (values of size `d_v`, default `d`): the scores $S = QK^\top/\sqrt{d_k}$ (eq-scores), the key
    mask $m_j$ setting the scores of padded keys to $-\infty$ (eq-masked-softmax), the softmax of
    each row giving the weights $\alpha_{ij}$ (a padded key's is exactly 0), and the contexts
    $\mathbf c_i = \sum_j \alpha_{ij} \mathbf v_j$, the rows of $AV$ (eq-attention). `key_mask`
    (True at real keys) defaults to the last key padded; one grid cell per (query, key) pair."""
    d_v = d if d_v is None else d_v
    if queries < 1 or keys < 2:
        raise ValueError(f"expected at least one query and two keys, got {queries} and {keys}")
    mask = [j < keys - 1 for j in range(keys)] if key_mask is None else [bool(m) for m in key_mask]
    if len(mask) != keys or not any(mask):
        raise ValueError(f"expected a key mask of {keys} entries, at least one True, got {mask}")
    cell = min(0.6, 2.4 / keys, 1.8 / queries)
    gw, gh = cell * keys, cell * queries
    x_s = 2.2  # left edges of the three grids
    x_m, x_a = x_s + gw + 0.6, x_s + 2 * (gw + 0.6)
    y0 = 0.45  # bottom of the grids
    xlim, ylim = (-0.05, max(x_a + gw, x_a + gw / 2 + 1.45) + 0.1), (-0.75, y0 + gh + 2.45)
    fig, ax = _canvas(FIGURE_WIDTH * (ylim[1] - ylim[0]) / (xlim[1] - xlim[0]), xlim, ylim)

    def grid(x0: float, fill) -> None:
        for i in range(queries):
            for j in range(keys):
                face, text = fill(j)
                ax.add_patch(Rectangle((x0 + cell * j, y0 + gh - cell * (i + 1)), cell, cell,
                                       fc=face, ec="#999999", lw=0.8))  # fmt: skip
                if text and cell >= 0.55:  # else the key's column is grey, named below the grid
                    ax.text(x0 + cell * (j + 0.5), y0 + gh - cell * (i + 0.5), text, ha="center",
                            va="center", fontsize=FONT, color="#555555")  # fmt: skip

    grid(x_s, lambda j: (SOURCE_COLOR, ""))
    padded_face = "white" if cell >= 0.55 else "#cccccc"
    grid(x_m, lambda j: (SOURCE_COLOR, "") if mask[j] else (padded_face, r"$-\infty$"))
    grid(x_a, lambda j: (TARGET_COLOR, "") if mask[j] else (padded_face, "0"))
    top = y0 + gh
    ax.text(x_s + gw / 2, top + 0.12, r"$S = QK^\top/\sqrt{d_k}$", ha="center", va="bottom",
            fontsize=FONT)  # fmt: skip
    ax.text(x_m + gw / 2, top + 0.12, "mask $m_j$", ha="center", va="bottom", fontsize=FONT)
    ax.text(x_a + gw / 2, top + 0.12, r"softmax: $A = (\alpha_{ij})$", ha="center", va="bottom",
            fontsize=FONT)  # fmt: skip
    for x0 in (x_s, x_m, x_a):
        ax.text(x0 + gw / 2, y0 - 0.1, f"{queries} × {keys}", ha="center", va="top", fontsize=FONT)
    _arrow(ax, (x_s + gw + 0.05, y0 + gh / 2), (x_m - 0.05, y0 + gh / 2))
    _arrow(ax, (x_m + gw + 0.05, y0 + gh / 2), (x_a - 0.05, y0 + gh / 2))
    # Q and K below the scores, V and the contexts above the weights
    _box(ax, 0.75, y0 + gh * 0.75 + 0.1, rf"$Q$: {queries} × {d}", w=1.45, h=0.5, face=OTHER_COLOR)
    _box(ax, 0.75, y0 + gh * 0.25 - 0.3, rf"$K$: {keys} × {d}", w=1.45, h=0.5, face=OTHER_COLOR)
    for y in (y0 + gh * 0.75 + 0.1, y0 + gh * 0.25 - 0.3):
        _arrow(ax, (1.5, y), (x_s - 0.05, y0 + gh / 2), lw=1.0)
    y_top = top + 1.65
    x_c = x_a + gw / 2
    _box(ax, x_c - 2.55, y_top, rf"$V$: {keys} × {d_v}", w=1.45, h=0.5, face=OTHER_COLOR)
    _box(ax, x_c, y_top, rf"$C = AV$: {queries} × {d_v}", w=2.3, h=0.5, face="white")
    _arrow(ax, (x_c - 1.81, y_top), (x_c - 1.16, y_top))
    _arrow(ax, (x_a + gw / 2, top + 0.5), (x_a + gw / 2, y_top - 0.27))
    ax.text(x_c, y_top + 0.35,
            r"row $i$: $\mathbf{c}_i = \sum_j \alpha_{ij} \mathbf{v}_j$", ha="center", va="bottom",
            fontsize=FONT)  # fmt: skip
    padded = keys - sum(mask)
    what = f"{padded} padded key{'s' if padded != 1 else ''}"
    if cell < 0.55:  # too small to write in: grey is −∞ in the scores, 0 in the weights
        what += r" (grey: $-\infty$, then 0)"
    ax.text(x_m + gw / 2, y0 - 0.5, what, ha="center", va="top", fontsize=FONT)
    fig.tight_layout(pad=0.1)
    return Diagram(fig)
