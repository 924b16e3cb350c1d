r"""Gated recurrent units (Chapter 5): the gated and residual updates, the GRU and the LSTM.

The idea in one line: let the network choose, per unit and per step, how much of the old state to keep,

$$h_t = (1 - z_t) \odot h_{t-1} + z_t \odot \tilde h_t, \qquad z_t = \sigma(W_z x_t + U_z h_{t-1} + b_z),$$

so that where $z_t \to 0$ the step Jacobian $\partial h_t/\partial h_{t-1}$ tends to the identity and a
gradient passes unchanged (:class:`GatedRNN`); the ungated version is the residual update
$h_t = h_{t-1} + \tilde h_t$ (:class:`ResidualRNN`).

**GRU** (Cho et al. 2014), the lecture's equations, with $z_t$ the *update* gate:

$$r_t = \sigma(W_r x_t + U_r h_{t-1} + b_r),\quad z_t = \sigma(W_z x_t + U_z h_{t-1} + b_z),$$
$$\tilde h_t = \tanh(W_h x_t + U_h (r_t \odot h_{t-1}) + b_h),\quad
h_t = (1 - z_t) \odot h_{t-1} + z_t \odot \tilde h_t.$$

``torch.nn.GRU`` differs in two ways. (1) It applies the reset gate *after* the recurrent product,
$n_t = \tanh(W_{in} x_t + b_{in} + r_t \odot (W_{hn} h_{t-1} + b_{hn}))$ (``reset="after"`` here;
the lecture's is ``reset="before"``). (2) It writes $h_t = (1 - z'_t) \odot n_t + z'_t \odot h_{t-1}$:
its gate $z'_t$ is the share of the *old* state kept, i.e. the lecture's $1 - z_t$. We keep torch's
parameters and names, so weights copy one-to-one, and compute the lecture's gate from them:
$z_t = 1 - \sigma(a'_t) = \sigma(-a'_t)$, where $a'_t$ is torch's pre-activation of $z'$. In the
lecture's parameters that is $W_z = -W_{iz}$, $U_z = -W_{hz}$, $b_z = -(b_{iz} + b_{hz})$.
Layout (as ``nn.GRU``): ``weight_ih_l0`` ``(3 d_h, d_in)`` = $[W_{ir}; W_{iz}; W_{in}]$,
``weight_hh_l0`` ``(3 d_h, d_h)``, ``bias_ih_l0`` and ``bias_hh_l0`` ``(3 d_h,)``, rows in the
order r, z, n.

**LSTM** (Hochreiter & Schmidhuber 1997; the forget gate of Gers et al. 2000):

$$i_t, f_t, o_t = \sigma(\cdot),\quad g_t = \tanh(W_g x_t + U_g h_{t-1} + b_g),\quad
c_t = f_t \odot c_{t-1} + i_t \odot g_t,\quad h_t = o_t \odot \tanh(c_t),$$

each gate $\sigma(W x_t + U h_{t-1} + b)$ with its own weights. Layout as ``nn.LSTM``:
``weight_ih_l0`` ``(4 d_h, d_in)``, rows in the order **i, f, g, o**, and two biases whose sum is
the lecture's $b$.

Every module is batch first, ``forward(x, h0=None, lengths=None, mask=None)`` as
:class:`seqmodels.rnn.ElmanRNN`: a padded step keeps the state and outputs 0.
"""

from __future__ import annotations

import math
from time import perf_counter

import torch
from torch import nn

from .padding import lengths_to_mask as _lengths_to_mask

GRU_RESETS = ("after", "before")


def _check_size(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"expected {name} to be a positive integer, got {value!r}")


def _check_x(x: torch.Tensor, input_size: int) -> tuple[int, int]:
    if not isinstance(x, torch.Tensor) or x.ndim != 3 or x.shape[2] != input_size:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"expected x of shape (batch, time, {input_size}), got {shape}")
    return x.shape[0], x.shape[1]


def _check_state(name: str, s: torch.Tensor | None, x: torch.Tensor, hidden: int) -> torch.Tensor:
    batch = x.shape[0]
    if s is None:
        return x.new_zeros(batch, hidden)
    if not isinstance(s, torch.Tensor) or s.shape != (batch, hidden):
        shape = tuple(s.shape) if isinstance(s, torch.Tensor) else type(s).__name__
        raise ValueError(f"expected {name} of shape ({batch}, {hidden}), got {shape}")
    return s


class _Recurrent(nn.Module):
    """Shared parts: ``nn.GRU``/``nn.LSTM``-style parameters with `gates` row blocks, torch's init."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        _check_size("input_size", input_size)
        _check_size("hidden_size", hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        k = self.gates * hidden_size
        self.weight_ih_l0 = nn.Parameter(torch.empty(k, input_size))
        self.weight_hh_l0 = nn.Parameter(torch.empty(k, hidden_size))
        self.bias_ih_l0 = nn.Parameter(torch.empty(k))
        self.bias_hh_l0 = nn.Parameter(torch.empty(k))
        bound = 1 / math.sqrt(hidden_size)  # as nn.RNN, nn.GRU and nn.LSTM initialise
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def _run(self, x, state, lengths, mask, step):
        """Run `step(x_proj_t, state) -> new state tuple` over time, padded steps keeping the state."""
        batch, time = x.shape[0], x.shape[1]
        mask = _lengths_to_mask(lengths, mask, batch, time)
        xw = x @ self.weight_ih_l0.T + self.bias_ih_l0  # (batch, time, gates * d_h), all steps
        outputs = []
        for t in range(time):
            new = step(xw[:, t], state)
            if mask is None:
                state = new
                outputs.append(new[0])
            else:
                m = mask[:, t, None]
                state = tuple(torch.where(m, a, b) for a, b in zip(new, state, strict=True))
                outputs.append(torch.where(m, new[0], torch.zeros_like(new[0])))
        if outputs:
            return torch.stack(outputs, 1), state
        return x.new_zeros(batch, 0, self.hidden_size), state

    @torch.no_grad()
    def _copy(self, module: nn.Module, kind: type, mode: str | None = None) -> None:
        if not isinstance(module, kind):
            raise TypeError(f"expected a torch.nn.{kind.__name__}, got {type(module).__name__}")
        expected = (self.input_size, self.hidden_size, 1, True, False)
        got = (
            module.input_size,
            module.hidden_size,
            module.num_layers,
            module.bias,
            module.bidirectional,
        )
        if got != expected or getattr(module, "proj_size", 0):
            raise ValueError(
                f"expected nn.{kind.__name__}(input_size, hidden_size, num_layers, bias, "
                f"bidirectional) = {expected} without projection, got {got}"
            )
        for name, p in self.named_parameters():
            p.copy_(getattr(module, name))


class _OneState(_Recurrent):
    """A cell whose state is one vector $h$: subclasses give :meth:`step`, this runs it over time."""

    def step(self, xw_t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """$h_t$ from the step's input projection `xw_t: (batch, gates * d_h)` and $h_{t-1}$."""
        raise NotImplementedError

    def forward(
        self,
        x: torch.Tensor,
        h0: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`x: (batch, time, d_in)`, `h0: (batch, d_h)` → ``(outputs (batch, time, d_h), h_last)``.

        With `lengths: (batch,)` or a bool `mask: (batch, time)`, a padded step keeps the state and
        outputs 0, so ``h_last`` is each sequence's state after its own last real token.
        """
        _check_x(x, self.input_size)
        h = _check_state("h0", h0, x, self.hidden_size)
        out, (h,) = self._run(
            x, (h,), lengths, mask, lambda xw_t, state: (self.step(xw_t, *state),)
        )
        return out, h


class GatedRNN(_OneState):
    r"""The gated update $h_t = (1 - z_t) \odot h_{t-1} + z_t \odot \tilde h_t$ with one gate,

    $z_t = \sigma(W_z x_t + b_{xz} + U_z h_{t-1} + b_{hz})$ and the Elman candidate
    $\tilde h_t = \tanh(W_h x_t + b_{xh} + U_h h_{t-1} + b_{hh})$. Rows of ``weight_ih_l0``
    ``(2 d_h, d_in)`` and ``weight_hh_l0`` ``(2 d_h, d_h)``: z, then the candidate. Its step
    Jacobian is $\mathrm{diag}(1 - z_t) + (\text{terms} \propto z_t \text{ or } z_t(1 - z_t))$, the
    identity as $z_t \to 0$ (:meth:`close_gate` sets the gate's bias to make it so).
    """

    gates = 2

    def step(self, xw_t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Eq. (eq-gated-update): ``h_t: (batch, d_h)`` from ``xw_t: (batch, 2 d_h)`` and ``h``."""
        H = self.hidden_size
        hw = h @ self.weight_hh_l0.T + self.bias_hh_l0
        z = torch.sigmoid(xw_t[:, :H] + hw[:, :H])
        candidate = torch.tanh(xw_t[:, H:] + hw[:, H:])
        return (1 - z) * h + z * candidate

    @torch.no_grad()
    def close_gate(self, bias: float = -30.0) -> GatedRNN:
        """Zero the gate's weights and set its bias to `bias`, so $z_t = \\sigma(b)$ at every step; return self."""
        H = self.hidden_size
        self.weight_ih_l0[:H] = 0
        self.weight_hh_l0[:H] = 0
        self.bias_ih_l0[:H] = bias
        self.bias_hh_l0[:H] = 0
        return self


class ResidualRNN(_OneState):
    r"""The residual update $h_t = h_{t-1} + \tanh(W_{xh} x_t + b_{xh} + W_{hh} h_{t-1} + b_{hh})$.

    Its step Jacobian is $I + \mathrm{diag}(1 - \tilde h_t^2)\, W_{hh}$: the identity plus a
    correction, whatever $W_{hh}$ is. Parameters as ``nn.RNN``'s. The state is not bounded.
    """

    def step(self, xw_t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Eq. (eq-residual): ``h_t: (batch, d_h)`` from ``xw_t: (batch, d_h)`` and ``h``."""
        return h + torch.tanh(xw_t + h @ self.weight_hh_l0.T + self.bias_hh_l0)


class GRU(_OneState):
    r"""The GRU, batch first, one step at a time; ``reset="after"`` equals ``torch.nn.GRU``.

    With $a = W_{i\cdot} x_t + b_{i\cdot}$ and $u = W_{h\cdot} h_{t-1} + b_{h\cdot}$ per gate:
    $r_t = \sigma(a_r + u_r)$, the lecture's update gate $z_t = 1 - \sigma(a_z + u_z)$ (torch's gate
    is $1 - z_t$, see the module docstring), and the candidate

    - ``reset="before"`` (the lecture, Cho et al. 2014):
      $\tilde h_t = \tanh(a_n + W_{hn}(r_t \odot h_{t-1}) + b_{hn})$;
    - ``reset="after"`` (``nn.GRU``, cuDNN): $\tilde h_t = \tanh(a_n + r_t \odot (W_{hn} h_{t-1} + b_{hn}))$;

    then $h_t = (1 - z_t) \odot h_{t-1} + z_t \odot \tilde h_t$. Parameters as ``nn.GRU``'s.
    """

    gates = 3

    def __init__(self, input_size: int, hidden_size: int, reset: str = "after"):
        super().__init__(input_size, hidden_size)
        if reset not in GRU_RESETS:
            raise ValueError(
                f"expected reset 'after' (torch's) or 'before' (the lecture's), got {reset!r}"
            )
        self.reset = reset

    def step(self, xw_t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Eq. (eq-gru-torch) with the lecture's z: ``h_t`` from ``xw_t: (batch, 3 d_h)`` and ``h``.

        ``xw_t = x_t @ weight_ih_l0.T + bias_ih_l0``: the input's part of each gate (r, z, n).
        ``reset="before"`` moves the reset gate inside the product, as eq. (eq-gru) writes it.
        """
        H, w_hh, b_hh = self.hidden_size, self.weight_hh_l0, self.bias_hh_l0
        u = h @ w_hh[: 2 * H].T + b_hh[: 2 * H]  # the two gates' recurrent parts
        r = torch.sigmoid(xw_t[:, :H] + u[:, :H])
        z = 1 - torch.sigmoid(xw_t[:, H : 2 * H] + u[:, H:])  # torch's gate is 1 - z
        if self.reset == "after":
            inner = r * (h @ w_hh[2 * H :].T + b_hh[2 * H :])
        else:
            inner = (r * h) @ w_hh[2 * H :].T + b_hh[2 * H :]
        candidate = torch.tanh(xw_t[:, 2 * H :] + inner)
        return (1 - z) * h + z * candidate

    def copy_from(self, gru: nn.GRU) -> GRU:
        """Copy the weights of a one-layer, unidirectional ``nn.GRU`` with biases; return self."""
        self._copy(gru, nn.GRU)
        return self

    @classmethod
    def from_torch(cls, gru: nn.GRU, reset: str = "after") -> GRU:
        """A new ``GRU`` with `gru`'s sizes, weights, dtype and device (and the chosen `reset`)."""
        p = gru.weight_ih_l0
        new = cls(gru.input_size, gru.hidden_size, reset)
        return new.to(p.device, p.dtype).copy_from(gru)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, reset={self.reset!r}"


class LSTM(_Recurrent):
    r"""The LSTM with a forget gate, batch first, one step at a time; equal to ``torch.nn.LSTM``.

    Gate rows in ``nn.LSTM``'s order i, f, g, o: $i_t, f_t, o_t = \sigma(\cdot)$,
    $g_t = \tanh(\cdot)$, each of $W_{i\cdot} x_t + b_{i\cdot} + W_{h\cdot} h_{t-1} + b_{h\cdot}$;
    $c_t = f_t \odot c_{t-1} + i_t \odot g_t$, $h_t = o_t \odot \tanh(c_t)$.
    """

    gates = 4

    def forward(
        self,
        x: torch.Tensor,
        h0: tuple[torch.Tensor, torch.Tensor] | torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """`x: (batch, time, d_in)`, `h0` = ``(h_0, c_0)`` each ``(batch, d_h)`` (zeros if None;
        a lone tensor is $h_0$ with $c_0 = 0$) → ``(outputs (batch, time, d_h), (h_last, c_last))``.

        Padding as in :class:`GRU`: a padded step keeps both $h$ and $c$.
        """
        _check_x(x, self.input_size)
        state = self._initial_state(x, h0)
        out, (h, c) = self._run(x, state, lengths, mask, lambda xw_t, s: self.step(xw_t, *s))
        return out, (h, c)

    def step(
        self, xw_t: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. (eq-lstm): ``(h_t, c_t)`` from ``xw_t: (batch, 4 d_h)`` and ``h, c: (batch, d_h)``.

        ``xw_t = x_t @ weight_ih_l0.T + bias_ih_l0``: the input's part of each block (i, f, g, o).
        """
        H = self.hidden_size
        a = xw_t + h @ self.weight_hh_l0.T + self.bias_hh_l0  # (batch, 4 d_h): i, f, g, o
        i = torch.sigmoid(a[:, :H])
        f = torch.sigmoid(a[:, H : 2 * H])
        g = torch.tanh(a[:, 2 * H : 3 * H])
        o = torch.sigmoid(a[:, 3 * H :])
        c_t = f * c + i * g
        return o * torch.tanh(c_t), c_t

    def _initial_state(
        self, x: torch.Tensor, h0: tuple[torch.Tensor, torch.Tensor] | torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h_0, c_0)`` from what `forward` was given, checked against `x`; zeros where missing."""
        if isinstance(h0, tuple | list):
            if len(h0) != 2:
                raise ValueError(f"expected h0 = (h_0, c_0), got a sequence of {len(h0)}")
            h = _check_state("h_0", h0[0], x, self.hidden_size)
            c = _check_state("c_0", h0[1], x, self.hidden_size)
        else:
            h = _check_state("h0", h0, x, self.hidden_size)
            c = torch.zeros_like(h)
        return h, c

    def copy_from(self, lstm: nn.LSTM) -> LSTM:
        """Copy the weights of a one-layer, unidirectional ``nn.LSTM`` with biases; return self."""
        self._copy(lstm, nn.LSTM)
        return self

    @classmethod
    def from_torch(cls, lstm: nn.LSTM) -> LSTM:
        """A new ``LSTM`` with `lstm`'s sizes, weights, dtype and device."""
        p = lstm.weight_ih_l0
        return cls(lstm.input_size, lstm.hidden_size).to(p.device, p.dtype).copy_from(lstm)


@torch.no_grad()
def set_forget_bias(lstm: nn.Module, value: float) -> nn.Module:
    r"""Set an LSTM's forget-gate bias to `value` (the sum of its two biases, rows ``d_h .. 2 d_h``).

    With $b_f = 1$ the forget gate starts near $\sigma(1) \approx 0.73$ instead of 0.5, so the cell
    keeps more of its past from the first step (Gers et al. 2000; Jozefowicz et al. 2015). Works on
    ``nn.LSTM`` (one layer) and :class:`LSTM`; returns the module.
    """
    if not isinstance(lstm, nn.LSTM | LSTM):
        raise TypeError(f"expected an nn.LSTM or seqmodels.gated.LSTM, got {type(lstm).__name__}")
    H = lstm.hidden_size
    lstm.bias_ih_l0[H : 2 * H] = value
    lstm.bias_hh_l0[H : 2 * H] = 0.0
    return lstm


def lecture_gru_step(
    x_t: torch.Tensor,
    h: torch.Tensor,
    W: dict[str, torch.Tensor],
    U: dict[str, torch.Tensor],
    b: dict[str, torch.Tensor],
) -> torch.Tensor:
    r"""Eq. (eq-gru) as written: ``h_t: (batch, d_h)`` from ``x_t: (batch, d_in)`` and ``h``.

    Weights by gate name (``"z"``, ``"r"``, ``"h"``), as :func:`lecture_weights` returns them:
    ``W[k]: (d_h, d_in)``, ``U[k]: (d_h, d_h)``, ``b[k]: (d_h,)``.
    """
    z = torch.sigmoid(x_t @ W["z"].T + h @ U["z"].T + b["z"])
    r = torch.sigmoid(x_t @ W["r"].T + h @ U["r"].T + b["r"])
    candidate = torch.tanh(x_t @ W["h"].T + (r * h) @ U["h"].T + b["h"])
    return (1 - z) * h + z * candidate


def lecture_weights(gru: GRU | nn.GRU) -> tuple[dict, dict, dict]:
    r"""The lecture's $W_k, U_k, b_k$ (k = z, r, h) of a GRU stored in ``nn.GRU``'s layout.

    The update gate is negated ($W_z = -W_{iz}$, $U_z = -W_{hz}$, $b_z = -(b_{iz} + b_{hz})$)
    because torch's gate is the lecture's $1 - z$ and $1 - \sigma(a) = \sigma(-a)$; $b_h$ is
    $b_{in} + b_{hn}$, which the lecture's candidate adds outside the reset gate.
    """
    H = gru.hidden_size
    w_ih, w_hh = gru.weight_ih_l0, gru.weight_hh_l0
    bias = gru.bias_ih_l0 + gru.bias_hh_l0
    rows = {"r": slice(0, H), "z": slice(H, 2 * H), "h": slice(2 * H, 3 * H)}
    sign = {"r": 1, "z": -1, "h": 1}
    W = {k: sign[k] * w_ih[s] for k, s in rows.items()}
    U = {k: sign[k] * w_hh[s] for k, s in rows.items()}
    b = {k: sign[k] * bias[s] for k, s in rows.items()}
    return W, U, b


def gate_kind(core: nn.Module) -> str:
    """``"gru"`` or ``"lstm"``: which gates `core` has (``ValueError`` for an ungated core)."""
    if isinstance(core, nn.GRU | GRU):
        return "gru"
    if isinstance(core, nn.LSTM | LSTM):
        return "lstm"
    raise ValueError(
        "expected a gated core (nn.GRU, nn.LSTM or seqmodels.gated's GRU or LSTM), got "
        f"{type(core).__name__}"
    )


@torch.no_grad()
def gate_values(core: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    r"""Every gate of a GRU or LSTM `core` at every step of reading `x: (T, d_in)` from the zero
    state: name → ``(T, d_h)``, float64 on the CPU.

    Row $t$ holds the gates computed from $\mathbf x_t$ and $\mathbf h_{t-1}$. A GRU's gates are
    the lecture's, from `lecture_weights`: $\mathbf z_t = \sigma(W_z \mathbf x_t + U_z
    \mathbf h_{t-1} + \mathbf b_z)$ (torch's gate is $1 - \mathbf z_t$) and $\mathbf r_t$ (the
    same for either place of the reset gate); an LSTM's are $\mathbf i_t, \mathbf f_t,
    \mathbf o_t$ from ``nn.LSTM``'s rows i, f, g, o and its two biases.
    """
    kind = gate_kind(core)
    states = core(x[None])[0][0]  # (T, d_h): h_1 .. h_T
    h_prev = torch.cat([torch.zeros_like(states[:1]), states[:-1]])  # h_0 .. h_{T-1}
    if kind == "gru":
        W, U, b = lecture_weights(core)
        gates = {k: torch.sigmoid(x @ W[k].T + h_prev @ U[k].T + b[k]) for k in ("z", "r")}
    else:
        a = x @ core.weight_ih_l0.T + core.bias_ih_l0 + h_prev @ core.weight_hh_l0.T
        i, f, _, o = (a + core.bias_hh_l0).chunk(4, -1)  # nn.LSTM's rows: i, f, g, o
        gates = {"i": torch.sigmoid(i), "f": torch.sigmoid(f), "o": torch.sigmoid(o)}
    return {k: v.double().cpu() for k, v in gates.items()}


def forward_backward_seconds(rnn: nn.Module, x: torch.Tensor, repeats: int = 5) -> float:
    """Best-of-`repeats` seconds for one forward and backward pass of `rnn` over `x: (batch, time, d_in)`
    (the loss is the sum of the outputs): what one training step costs the recurrent part."""
    if repeats < 1:
        raise ValueError(f"expected repeats >= 1, got {repeats}")
    best = math.inf
    for _ in range(repeats):
        rnn.zero_grad(set_to_none=True)
        start = perf_counter()
        out = rnn(x)[0]
        out.sum().backward()
        best = min(best, perf_counter() - start)
    return best
