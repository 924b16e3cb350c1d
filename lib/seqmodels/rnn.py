r"""The Elman RNN and the RNN language model (Chapter 3), with hand-written and truncated BPTT.

The Elman RNN reads $x_1, \dots, x_T$ and keeps a hidden state

$$h_t = \tanh(W_{xh} x_t + b_{xh} + W_{hh} h_{t-1} + b_{hh}), \qquad h_0 \text{ given (zeros by default)}.$$

The lecture writes one bias $b$; it is $b_{xh} + b_{hh}$. We keep ``torch.nn.RNN``'s two biases, and
its parameter names, so its weights copy one-to-one: ``weight_ih_l0`` = $W_{xh}$ ``(d_h, d_in)``,
``weight_hh_l0`` = $W_{hh}$ ``(d_h, d_h)``, ``bias_ih_l0`` = $b_{xh}$, ``bias_hh_l0`` = $b_{hh}$
``(d_h,)``. The same weights are used at every step (parameter tying across time).

The RNN language model predicts each next token from the state, $p(\cdot \mid x_{\le t}) =
\mathrm{softmax}(W_{hy} h_t + b_y)$, where $h_t$ has read the embeddings of $x_1..x_t$.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .gated import GRU, LSTM
from .padding import lengths_to_mask as _lengths_to_mask
from .train import History


class ElmanRNN(nn.Module):
    r"""$h_t = \tanh(W_{xh} x_t + b_{xh} + W_{hh} h_{t-1} + b_{hh})$, one step at a time, batch first.

    Parameters are named as in ``nn.RNN`` (see the module docstring) and initialised as it does,
    uniform in $\pm 1/\sqrt{d_h}$.
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        for name, value in [("input_size", input_size), ("hidden_size", hidden_size)]:
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"expected {name} to be a positive integer, got {value!r}")
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih_l0 = nn.Parameter(torch.empty(hidden_size, input_size))
        self.weight_hh_l0 = nn.Parameter(torch.empty(hidden_size, hidden_size))
        self.bias_ih_l0 = nn.Parameter(torch.empty(hidden_size))
        self.bias_hh_l0 = nn.Parameter(torch.empty(hidden_size))
        bound = 1 / math.sqrt(hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(
        self,
        x: torch.Tensor,
        h0: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r"""Eq. (eq-elman): every ``h_t: (batch, time, d_h)`` and the last for ``x: (batch, time,
        d_in)``.

        From `h0: (batch, d_h)` (zeros if None). With `lengths: (batch,)` or a bool `mask` (True =
        real token), a padded step keeps the state and outputs 0 (as ``pad_packed_sequence``), so
        ``h_last`` is each sequence's state after its own last real token.
        """
        h = self._initial_state(x, h0)
        mask = _lengths_to_mask(lengths, mask, *x.shape[:2])
        xw = x @ self.weight_ih_l0.T + self.bias_ih_l0  # W_xh x_t + b_xh, all t in one matmul
        outputs = []
        for t in range(x.shape[1]):
            h_new = torch.tanh(xw[:, t] + h @ self.weight_hh_l0.T + self.bias_hh_l0)
            if mask is None:
                h = h_new
                outputs.append(h)
            else:  # a padded step keeps h_{t-1} and outputs 0
                m = mask[:, t, None]
                h = torch.where(m, h_new, h)
                outputs.append(torch.where(m, h_new, torch.zeros_like(h_new)))
        return self._stack(outputs, x), h

    def _initial_state(self, x: torch.Tensor, h0: torch.Tensor | None) -> torch.Tensor:
        """Check `x: (batch, time, d_in)` and `h0`; return `h0`, or zeros ``(batch, d_h)`` if None."""
        if x.ndim != 3 or x.shape[2] != self.input_size:
            raise ValueError(
                f"expected x of shape (batch, time, {self.input_size}), got {tuple(x.shape)}"
            )
        batch = x.shape[0]
        if h0 is None:
            return x.new_zeros(batch, self.hidden_size)
        if h0.shape != (batch, self.hidden_size):
            raise ValueError(
                f"expected h0 of shape ({batch}, {self.hidden_size}), got {tuple(h0.shape)}"
            )
        return h0

    def _stack(self, outputs: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The states ``(batch, time, d_h)`` stacked over time (empty for a sequence of length 0)."""
        if not outputs:
            return x.new_zeros(x.shape[0], 0, self.hidden_size)
        return torch.stack(outputs, 1)

    @torch.no_grad()
    def copy_from(self, rnn: nn.RNN) -> ElmanRNN:
        """Copy the weights of a one-layer, unidirectional, tanh ``nn.RNN`` with biases; return self."""
        expected = (self.input_size, self.hidden_size, 1, "tanh", True, False)
        got = (
            rnn.input_size,
            rnn.hidden_size,
            rnn.num_layers,
            rnn.nonlinearity,
            rnn.bias,
            rnn.bidirectional,
        )
        if got != expected or rnn.proj_size:
            raise ValueError(
                "expected nn.RNN(input_size, hidden_size, num_layers, nonlinearity, bias, bidirectional)"
                f" = {expected}, got {got}"
            )
        for name, p in self.named_parameters():
            p.copy_(getattr(rnn, name))
        return self

    @classmethod
    def from_torch(cls, rnn: nn.RNN) -> ElmanRNN:
        """A new ``ElmanRNN`` with `rnn`'s sizes, weights, dtype and device."""
        p = rnn.weight_ih_l0
        return cls(rnn.input_size, rnn.hidden_size).to(p.device, p.dtype).copy_from(rnn)


#: The recurrent cores an :class:`RNNLM` can use: name → (module class, keyword arguments).
#: Fused PyTorch modules (``nn.RNN``/``nn.GRU``/``nn.LSTM``) and the hand-written ones of
#: :mod:`seqmodels.rnn` and :mod:`seqmodels.gated`; each pair has the same parameter names.
CORES: dict[str, tuple[type, dict]] = {
    "elman": (ElmanRNN, {}),
    "torch": (nn.RNN, {"batch_first": True}),
    "gru": (nn.GRU, {"batch_first": True}),
    "lstm": (nn.LSTM, {"batch_first": True}),
    "gru-hand": (GRU, {"reset": "after"}),
    "gru-lecture": (GRU, {"reset": "before"}),
    "lstm-hand": (LSTM, {}),
}


class RNNLM(nn.Module):
    r"""Embedding → recurrent core → linear: $p(x_{t+1} \mid x_{\le t}) = \mathrm{softmax}(W_{hy} h_t + b_y)$.

    `core` picks the recurrence (see :data:`CORES`): ``"elman"`` the hand-written :class:`ElmanRNN`,
    ``"torch"`` ``nn.RNN`` (batch first, tanh), ``"gru"`` ``nn.GRU``, ``"lstm"`` ``nn.LSTM``, and the
    hand-written gated cells ``"gru-hand"`` (equal to ``nn.GRU``), ``"gru-lecture"`` (the reset gate
    before the recurrent product) and ``"lstm-hand"``. A hand-written core and its fused twin have
    the same parameter names, so a ``state_dict`` loads into either. The LSTM's state is the pair
    ``(h, c)``, each ``(batch, d_h)``; every other core's is ``h``.
    Attributes: ``embedding`` $E$ ``(V, d_e)``, ``rnn``, ``output`` ($W_{hy}$ ``(V, d_h)``, $b_y$ ``(V,)``).
    """

    def __init__(
        self, vocab_size: int, embed_dim: int = 64, hidden_dim: int = 128, core: str = "elman"
    ):
        super().__init__()
        if core not in CORES:
            raise ValueError(f"expected core to be one of {sorted(CORES)}, got {core!r}")
        sizes = [("vocab_size", vocab_size), ("embed_dim", embed_dim), ("hidden_dim", hidden_dim)]
        for name, value in sizes:
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"expected {name} to be a positive integer, got {value!r}")
        self.vocab_size, self.core = vocab_size, core
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        kind, kwargs = CORES[core]
        self.rnn: nn.Module = kind(embed_dim, hidden_dim, **kwargs)
        self.output = nn.Linear(hidden_dim, vocab_size)

    @property
    def fused(self) -> bool:
        """Whether the core is one of PyTorch's fused modules (``nn.RNN``/``nn.GRU``/``nn.LSTM``)."""
        return isinstance(self.rnn, nn.RNNBase)

    @property
    def is_lstm(self) -> bool:
        """Whether the state is the pair ``(h, c)``."""
        return isinstance(self.rnn, nn.LSTM | LSTM)

    def initial_state(
        self, batch: int, device: torch.device | str | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The zero state for `batch` sequences: ``(batch, d_h)``, or ``(h, c)`` for an LSTM, in the
        parameters' dtype (on their device unless `device` is given)."""
        p = self.output.weight
        h = torch.zeros(batch, self.rnn.hidden_size, dtype=p.dtype, device=device or p.device)
        return (h, torch.zeros_like(h)) if self.is_lstm else h

    def _check_state(self, h0, batch: int) -> None:
        hidden = self.rnn.hidden_size
        parts = h0 if self.is_lstm and isinstance(h0, tuple | list) else (h0,)
        if self.is_lstm and len(parts) != 2:
            raise ValueError(f"expected the LSTM state h0 = (h, c), got a sequence of {len(parts)}")
        for part in parts:
            if not isinstance(part, torch.Tensor) or part.shape != (batch, hidden):
                shape = tuple(part.shape) if isinstance(part, torch.Tensor) else type(part).__name__
                raise ValueError(f"expected h0 of shape ({batch}, {hidden}), got {shape}")

    def forward(
        self,
        tokens: torch.Tensor,
        h0: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
        """Eq. (eq-rnnlm): logits ``(batch, time, V)`` and the last state for ``tokens: (batch,
        time)``.

        `h0: (batch, d_h)` (an LSTM: ``(h, c)``) continues from a state (truncated BPTT,
        generation); `lengths: (batch,)` marks padding, after which the state is frozen (a fused
        core packs the batch; it needs lengths ≥ 1).
        """
        self._check_tokens(tokens)
        x = self.embedding(tokens)  # x_t = e_{w_t}: (batch, time, d_e)
        if h0 is not None:
            self._check_state(h0, len(tokens))
        if self.fused:  # nn.RNN, nn.GRU or nn.LSTM: packed, PyTorch's state layout
            out, h = self._run_fused(x, h0, lengths)
        else:
            out, h = self.rnn(x, h0, lengths=lengths)
        return self.output(out), h  # W_hy h_t + b_y at every step

    def _check_tokens(self, tokens: torch.Tensor) -> None:
        """Refuse tokens of the wrong shape or type, or with ids outside the vocabulary."""
        if tokens.ndim != 2:
            raise ValueError(f"expected tokens of shape (batch, time), got {tuple(tokens.shape)}")
        if tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"expected integer token ids, got dtype {tokens.dtype}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab_size):
            raise IndexError(f"token ids must lie in 0 .. {self.vocab_size - 1}")

    def _run_fused(self, x: torch.Tensor, h0, lengths: torch.Tensor | None):
        """Run a fused core over `x: (batch, time, d_e)`, packed by `lengths`; states ``(batch, d_h)``."""
        if h0 is None:
            h0_torch = None
        elif self.is_lstm:
            h0_torch = tuple(s[None].contiguous() for s in h0)
        else:
            h0_torch = h0[None].contiguous()
        if lengths is None:
            out, h = self.rnn(x, h0_torch)
        else:
            lengths = torch.as_tensor(lengths).cpu()
            _lengths_to_mask(lengths, None, *x.shape[:2])  # validates
            if lengths.numel() and lengths.min() < 1:
                raise ValueError("a fused core packs the batch and needs every length >= 1")
            packed = nn.utils.rnn.pack_padded_sequence(
                x, lengths, batch_first=True, enforce_sorted=False
            )
            out, h = self.rnn(packed, h0_torch)
            out, _ = nn.utils.rnn.pad_packed_sequence(
                out, batch_first=True, total_length=x.shape[1]
            )
        return out, ((h[0][0], h[1][0]) if self.is_lstm else h[0])

    def parameter_count(self) -> int:
        """The number of trainable scalars: $V d_e + k(d_h d_e + d_h^2 + 2 d_h) + V d_h + V$, with
        $k$ = 1 (Elman), 3 (GRU) or 4 (LSTM) blocks of recurrent weights."""
        return sum(p.numel() for p in self.parameters())


def masked_sequence_nll(
    logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    r"""Eq. (eq-masked-nll): the mean NLL in nats over the real tokens of ``logits: (batch,
    time, V)``.

    `targets: (batch, time)` ids, `mask: (batch, time)` bool (True = real). Each real token
    counts once, whatever the padding; padded positions are never read (their logits may be
    anything, even NaN, their targets any integer) and get zero gradient.
    """
    _check_masked(logits, targets, mask)
    return F.cross_entropy(logits[mask], targets[mask])


def _check_masked(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> None:
    """Refuse logits, targets and a mask whose shapes or types do not match, or an empty mask."""
    if logits.ndim != 3:
        raise ValueError(f"expected logits of shape (batch, time, V), got {tuple(logits.shape)}")
    if targets.shape != logits.shape[:2] or mask.shape != logits.shape[:2]:
        raise ValueError(
            f"expected targets and mask of shape {tuple(logits.shape[:2])}, "
            f"got {tuple(targets.shape)} and {tuple(mask.shape)}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(f"expected a bool mask, got dtype {mask.dtype}")
    if not mask.any():
        raise ValueError("expected at least one real token (the mask is all False)")


# ---- backpropagation through time -----------------------------------------------------------


@dataclass
class BPTTGradients:
    """Gradients of a loss with respect to an Elman RNN's parameters, its initial state and its inputs."""

    weight_ih_l0: torch.Tensor  # dL/dW_xh: (d_h, d_in)
    weight_hh_l0: torch.Tensor  # dL/dW_hh: (d_h, d_h)
    bias_ih_l0: torch.Tensor  # dL/db_xh: (d_h,)
    bias_hh_l0: torch.Tensor  # dL/db_hh: (d_h,)
    h0: torch.Tensor  # dL/dh_0: (batch, d_h)
    x: torch.Tensor  # dL/dx: (batch, time, d_in)


def hidden_jacobian(rnn: ElmanRNN, h_t: torch.Tensor) -> torch.Tensor:
    r"""The step Jacobian $\partial h_t/\partial h_{t-1} = \mathrm{diag}(1 - h_t^2)\,W_{hh}$.

    `h_t: (batch, d_h)` → ``(batch, d_h, d_h)``. Products of these over time decide whether a
    gradient vanishes or explodes (Chapter 4).
    """
    return (1 - h_t**2)[:, :, None] * rnn.weight_hh_l0.detach()[None]


@torch.no_grad()
def bptt(
    rnn: ElmanRNN, x: torch.Tensor, grad_outputs: torch.Tensor, h0: torch.Tensor | None = None
) -> BPTTGradients:
    r"""Eq. (eq-bptt): gradients for ``x: (batch, time, d_in)`` from ``grad_outputs: (batch,
    time, d_h)``.

    `grad_outputs` holds $\partial L/\partial h_t$ for every t (e.g. from the output layer),
    `h0: (batch, d_h)` (zeros if None). Forward, storing every $h_t$; then back from $t = T$,
    the gradient reaching $h_t$ is its own plus what flows back from $h_{t+1}$ through $\partial
    h_{t+1}/\partial h_t$ (:func:`hidden_jacobian`, never formed). The weights get a sum over
    time because they are shared across steps.
    """
    states = _bptt_states(rnn, x, grad_outputs, h0)  # h_0 .. h_T: (batch, time + 1, d_h)
    grads = {name: torch.zeros_like(p) for name, p in rnn.named_parameters()}
    dx = torch.zeros_like(x)
    g = torch.zeros_like(states[:, 0])  # dL/dh_t from the future
    for t in reversed(range(x.shape[1])):
        g = g + grad_outputs[:, t]
        da = g * (1 - states[:, t + 1] ** 2)  # through tanh: (batch, d_h)
        grads["weight_ih_l0"] += da.T @ x[:, t]
        grads["weight_hh_l0"] += da.T @ states[:, t]
        grads["bias_ih_l0"] += da.sum(0)
        grads["bias_hh_l0"] += da.sum(0)
        dx[:, t] = da @ rnn.weight_ih_l0
        g = da @ rnn.weight_hh_l0  # dL/dh_{t-1}
    return BPTTGradients(**grads, h0=g, x=dx)


def _bptt_states(
    rnn: ElmanRNN, x: torch.Tensor, grad_outputs: torch.Tensor, h0: torch.Tensor | None
) -> torch.Tensor:
    """Run `rnn` forward and return ``h_0 .. h_T: (batch, time + 1, d_h)``; check `grad_outputs`."""
    outputs, _ = rnn(x, h0)
    if grad_outputs.shape != outputs.shape:
        raise ValueError(
            f"expected grad_outputs of shape {tuple(outputs.shape)}, got {tuple(grad_outputs.shape)}"
        )
    h0 = x.new_zeros(x.shape[0], rnn.hidden_size) if h0 is None else h0
    return torch.cat([h0[:, None], outputs], 1)


# ---- truncated BPTT on a long stream ----------------------------------------------------------


def truncated_bptt_batches(
    stream: torch.Tensor, batch_size: int, window: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Cut a long `stream: (N,)` of ids into `batch_size` contiguous rows and yield windows of them.

    Yields ``(inputs, targets)``, each ``(batch_size, ≤ window)``, targets shifted by one. Row b of
    window k+1 continues row b of window k, so the hidden state at the end of one window is the right
    state to start the next from. The last ``(N - 1) mod batch_size`` tokens are dropped.
    """
    if stream.ndim != 1 or stream.is_floating_point():
        raise ValueError(
            f"expected a 1-D stream of integer ids, got {stream.dtype} {tuple(stream.shape)}"
        )
    if batch_size < 1 or window < 1:
        raise ValueError(f"expected batch_size >= 1 and window >= 1, got {batch_size} and {window}")
    per_row = (len(stream) - 1) // batch_size
    if per_row < 1:
        raise ValueError(f"a stream of {len(stream)} tokens is too short for {batch_size} rows")
    inputs = stream[: per_row * batch_size].view(batch_size, per_row)
    targets = stream[1 : per_row * batch_size + 1].view(batch_size, per_row)
    for start in range(0, per_row, window):
        yield inputs[:, start : start + window], targets[:, start : start + window]


def truncated_bptt_step(
    model: RNNLM,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    h: torch.Tensor | None,
    optimizer: torch.optim.Optimizer,
    clip: float | None = None,
) -> tuple[float, torch.Tensor]:
    """One training step on a window: start from the carried state `h`, backprop within the window only.

    Returns the window's mean loss (nats per token) and the final state *detached*: the next window
    starts from its value, but no gradient flows back into this window. What is lost: the loss at a
    step never sends gradient to tokens more than `window` steps before it in the stream, so the
    model is not trained to keep information longer than that (it may still happen to).
    """
    logits, h_last = model(inputs, h0=h)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    if clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    if isinstance(h_last, tuple):
        return loss.item(), tuple(s.detach() for s in h_last)
    return loss.item(), h_last.detach()


def train_truncated_bptt(
    model: RNNLM,
    stream: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    batch_size: int = 32,
    window: int = 35,
    clip: float | None = 1.0,
) -> list[float]:
    """One pass over `stream: (N,)` with truncated BPTT, the state carried across windows; each window's loss."""
    device = next(model.parameters()).device
    model.train()
    h, losses = None, []
    for inputs, targets in truncated_bptt_batches(stream, batch_size, window):
        loss, h = truncated_bptt_step(
            model, inputs.to(device), targets.to(device), h, optimizer, clip
        )
        losses.append(loss)
    return losses


# ---- language modelling on sentences: batches, training, evaluation, generation ----------------


@dataclass
class SentenceBatch:
    """Sentences padded to one length for teacher forcing (ids 0 = ``<s>``, 1 = ``</s>``).

    ``inputs`` ``(batch, time)`` is ``<s> w_1 .. w_T`` and ``targets`` is ``w_1 .. w_T </s>``, each
    padded with ``pad`` after its real tokens; ``mask`` ``(batch, time)`` is True at the ``T + 1``
    real positions of each sentence, and ``lengths`` ``(batch,)`` counts them.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor


def sentence_batch(
    sentences: list[list[int]] | tuple, bos: int = 0, eos: int = 1, pad: int = 1
) -> SentenceBatch:
    """Teacher-forcing inputs and targets for `sentences` (lists of ids without ``<s>``/``</s>``)."""
    if len(sentences) == 0:
        raise ValueError("expected at least one sentence, got none")
    lengths = torch.tensor([len(s) + 1 for s in sentences])
    time = int(lengths.max())
    mask = torch.arange(time)[None] < lengths[:, None]
    inputs = torch.full((len(sentences), time), pad, dtype=torch.int64)
    targets = torch.full((len(sentences), time), pad, dtype=torch.int64)
    # row by row, the real positions in order: <s> w_1 .. w_T in, w_1 .. w_T </s> out
    inputs[mask] = torch.as_tensor([t for s in sentences for t in (bos, *s)], dtype=torch.int64)
    targets[mask] = torch.as_tensor([t for s in sentences for t in (*s, eos)], dtype=torch.int64)
    return SentenceBatch(inputs, targets, mask, lengths)


@torch.no_grad()
def sentence_nll(
    model: RNNLM, sentences: list[list[int]], batch_size: int = 256
) -> tuple[float, int]:
    """Total NLL (nats) of `sentences` under `model`, each read from ``<s>``, and the number of
    predicted tokens (words plus one ``</s>`` each): the N of the n-gram models' perplexity."""
    device = next(model.parameters()).device
    model.eval()
    total, count = 0.0, 0
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))  # little padding
    for start in range(0, len(order), batch_size):
        batch = sentence_batch([sentences[i] for i in order[start : start + batch_size]])
        logits, _ = model(batch.inputs.to(device), lengths=batch.lengths)
        mask = batch.mask.to(device)
        n = int(mask.sum())
        total += masked_sequence_nll(logits, batch.targets.to(device), mask).item() * n
        count += n
    return total, count


def train_sentence_lm(
    model: RNNLM,
    sentences: list[list[int]],
    valid: list[list[int]] | None,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    generator: torch.Generator,
    eval_every: int = 100,
    clip: float | None = 1.0,
    progress: bool = False,
    optimizer: str = "adam",
) -> History:
    """Teacher forcing on random mini-batches of whole sentences, loss :func:`masked_sequence_nll`,
    with Adam or plain SGD (`optimizer` = ``"adam"`` or ``"sgd"``, learning rate `lr`), gradients
    clipped to global norm `clip` (None: never); held-out loss on `valid` every `eval_every` steps
    and at the end (`valid` None: never, and the time is the training's alone). Returns a
    :class:`seqmodels.train.History` (nats per token, and each step's gradient norm before
    clipping)."""
    if steps < 1 or batch_size < 1:
        raise ValueError(f"expected steps >= 1 and batch_size >= 1, got {steps} and {batch_size}")
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"expected optimizer 'adam' or 'sgd', got {optimizer!r}")
    device = next(model.parameters()).device
    make = torch.optim.Adam if optimizer == "adam" else torch.optim.SGD
    opt = make(model.parameters(), lr=lr)
    history = History()
    start = perf_counter()
    for step in tqdm(range(1, steps + 1), disable=not progress, desc="training", unit="step"):
        model.train()
        idx = torch.randint(len(sentences), (batch_size,), generator=generator).tolist()
        batch = sentence_batch([sentences[i] for i in idx])
        logits, _ = model(batch.inputs.to(device), lengths=batch.lengths)
        loss = masked_sequence_nll(logits, batch.targets.to(device), batch.mask.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), math.inf if clip is None else clip)
        opt.step()
        history.step_loss.append(loss.item())
        history.grad_norms.append(norm.item())
        history.tokens_seen += int(batch.mask.sum())
        if valid is not None and (step % eval_every == 0 or step == steps):
            total, n = sentence_nll(model, valid)
            history.eval_steps.append(step)
            history.eval_loss.append(total / n)
    history.seconds = perf_counter() - start
    return history


@torch.no_grad()
def generate(
    model: RNNLM,
    generator: torch.Generator,
    prefix: list[int] | None = None,
    max_len: int = 30,
    bos: int = 0,
    eos: int = 1,
) -> list[int]:
    r"""Sample a continuation one token at a time, $w_{t+1} \sim \mathrm{softmax}(W_{hy} h_t + b_y)$,
    carrying only the state $h_t$ (constant memory per step). Returns the ids after `prefix`, without
    ``</s>``; stops at ``</s>`` or after `max_len` tokens. `generator` is a CPU generator."""
    device = next(model.parameters()).device
    model.eval()
    tokens = torch.tensor([[bos, *(prefix or [])]], device=device)
    logits, h = model(tokens)  # read the prefix once
    out: list[int] = []
    for _ in range(max_len):
        probs = torch.softmax(logits[0, -1].double().cpu(), -1)
        token = int(torch.multinomial(probs, 1, generator=generator))
        if token == eos:
            break
        out.append(token)
        logits, h = model(torch.tensor([[token]], device=device), h0=h)
    return out


@torch.no_grad()
def distributions_at(model: RNNLM, sentences: list[list[int]], position: int) -> torch.Tensor:
    r"""$p(\cdot \mid \texttt{<s>}\, w_0 \dots w_{k-1})$ for word position $k$ = `position` of every
    sentence (each read from ``<s>``): ``(len(sentences), V)``; $k$ = ``len(sentence)`` is ``</s>``."""
    if any(not 0 <= position <= len(s) for s in sentences):
        raise ValueError(
            f"expected position in 0 .. len(sentence) for every sentence, got {position}"
        )
    device = next(model.parameters()).device
    model.eval()
    batch = sentence_batch(sentences)
    logits, _ = model(batch.inputs.to(device), lengths=batch.lengths)
    return logits[:, position].softmax(-1)


@torch.no_grad()
def time_per_token(
    model: RNNLM, positions: list[int], reread: bool, repeats: int = 3
) -> list[float]:
    """Seconds to produce the next-token distribution at each position of `positions` (best of
    `repeats`): from the carried state (one step, ``reread=False``) or by re-reading the whole prefix
    from ``<s>`` (``reread=True``, what a model without a state must do)."""
    device = next(model.parameters()).device
    model.eval()
    seconds = []
    for n in positions:
        prefix = torch.zeros(1, n, dtype=torch.int64, device=device)
        h = model.initial_state(1, device)
        best = math.inf
        for _ in range(repeats):
            start = perf_counter()
            if reread:
                model(prefix)
            else:
                model(prefix[:, :1], h0=h)
            best = min(best, perf_counter() - start)
        seconds.append(best)
    return seconds
