r"""Chapter 4's explorer: the spectral radius and the nonlinearity against the gradient's reach, and
what clipping does to one exploding step.

`gradient_explorer` sets an Elman RNN's recurrent matrix to a chosen spectral radius $\rho$
($W_{hh} \leftarrow \rho\, W_{hh} / \rho(W_{hh})$), runs it as a tanh RNN or as its linear twin
$\mathbf h_t = W_{hh}\mathbf h_{t-1} + W_{xh}\mathbf x_t + \mathbf b$ over a fixed input sequence,
and shows two panels:

- $\lVert \partial \mathbf h_T / \partial \mathbf h_t \rVert_2$ against the distance $T - t$
  (`seqmodels.gradients.jacobian_chain` for tanh, the powers $W_{hh}^{T-t}$ for the linear RNN),
  beside the bound $\sigma_{\max}(W_{hh})^{T-t}$ that Chapter 4 derives;
- one gradient step on the loss $L = \tfrac12 \lVert \mathbf h_T \rVert^2$: the loss along the
  gradient's direction against the step's length, with the plain SGD step $\eta \lVert g \rVert$
  and the step clipped by global norm at $\kappa$ (`seqmodels.gradients.clip_grad_norm`),
  $\eta \min(\lVert g \rVert, \kappa)$, marked where they land.

Once $\rho$ is large enough to beat tanh's saturation, the gradient explodes: the plain step lands
far out on a rough, high loss, and the clipped one stays where the gradient still describes it.
"""

from __future__ import annotations

import copy
import math

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from torch.func import functional_call

from ..gradients import (
    clip_grad_norm,
    decay_per_step,
    jacobian_chain,
    spectral_norms,
    spectral_radius,
)
from ..plots import FIGURE_WIDTH, SERIES_COLORS
from ..rnn import ElmanRNN
from .explorer import Explorer

NONLINEARITIES = ("tanh", "linear")
#: the range of the radius slider
RADIUS_RANGE = (0.5, 2.0)
#: points of the loss along the gradient's direction (log-spaced step lengths)
SLICE_POINTS = 48
#: a loss above this counts as overflowed (drawn as "overflow"; a log axis has no room beyond it)
OVERFLOW = 1e100


def _finite(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """The points with a positive y below :data:`OVERFLOW` (what a log axis can draw)."""
    kept = [(x, y) for x, y in zip(xs, ys, strict=True) if 0 < y < OVERFLOW]
    return [x for x, _ in kept], [y for _, y in kept]


def gradient_explorer(
    rnn: ElmanRNN,
    x: torch.Tensor,
    radius: float = 1.0,
    nonlinearity: str = "tanh",
    tau: float = 10.0,
    lr: float = 0.02,
) -> Explorer:
    r"""Sliders for the spectral radius $\rho$ of $W_{hh}$, the nonlinearity and the clipping threshold
    $\kappa$: the gradient norm over distance, and one SGD step with and without clipping.

    `rnn` gives $W_{xh}$, the biases and the *shape* of $W_{hh}$ (rescaled to each $\rho$; a
    $W_{hh} = \rho' Q$ with $Q$ orthogonal becomes $\rho Q$); it is not changed. `x: (T, d_in)` is the
    input sequence, `lr` the SGD learning rate $\eta$. The gradient $g$ is that of
    $L = \frac12 \lVert \mathbf h_T \rVert^2$ with respect to all four parameter tensors.

    ``explorer.result`` has ``radius``, ``nonlinearity``, ``tau``, ``lr``; ``distances``
    ($0 \dots T$), ``norms`` ($\lVert \partial h_T/\partial h_{T-k} \rVert_2$ at each distance $k$),
    ``bound`` ($\sigma_{\max}(W_{hh})^k$), ``decay`` (`decay_per_step` of the norms at
    $k \ge 1$, None where a norm is 0 or not finite); ``loss`` (before the step), ``grad_norm``
    ($\lVert g \rVert$), ``clipped_norm`` (after clipping), ``step`` and ``clipped_step`` (the lengths
    $\eta\lVert g\rVert$ and $\eta \min(\lVert g\rVert, \kappa)$), ``loss_step`` and
    ``loss_clipped`` (the loss after each; ``inf`` where it overflows, above :data:`OVERFLOW`),
    and ``slice_steps``, ``slice_losses`` (the loss along $-g$ that the lower panel draws).
    """
    import ipywidgets as widgets

    if not isinstance(rnn, ElmanRNN):
        raise TypeError(f"expected an ElmanRNN, got {type(rnn).__name__}")
    if x.ndim != 2 or x.shape[1] != rnn.input_size or len(x) < 2:
        raise ValueError(f"expected x of shape (time >= 2, {rnn.input_size}), got {tuple(x.shape)}")
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(
            f"expected nonlinearity to be one of {NONLINEARITIES}, got {nonlinearity!r}"
        )
    for name, value in [("radius", radius), ("tau", tau), ("lr", lr)]:
        if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
            raise ValueError(f"expected a positive finite {name}, got {value!r}")
    base = copy.deepcopy(rnn).double().requires_grad_(False)
    x = x.detach().double()
    own_radius = spectral_radius(base.weight_hh_l0)
    if not 0 < own_radius < math.inf:
        raise ValueError(f"expected W_hh with a positive finite spectral radius, got {own_radius}")
    direction = base.weight_hh_l0 / own_radius  # spectral radius 1
    steps_t = len(x)
    distances = list(range(steps_t + 1))

    def last_state(params: dict[str, torch.Tensor], nonlinearity: str) -> torch.Tensor:
        """$h_T$ of the tanh RNN (the library's `ElmanRNN`) or of its linear twin."""
        if nonlinearity == "tanh":
            return functional_call(base, params, (x[None],))[1][0]
        h = x.new_zeros(base.hidden_size)
        bias = params["bias_ih_l0"] + params["bias_hh_l0"]
        for x_t in x @ params["weight_ih_l0"].T:
            h = params["weight_hh_l0"] @ h + x_t + bias
        return h

    def loss(params: dict[str, torch.Tensor], nonlinearity: str) -> torch.Tensor:
        return 0.5 * last_state(params, nonlinearity).pow(2).sum()

    def view(radius: float, nonlinearity: str, tau: float) -> tuple[Figure, dict]:
        radius, tau = float(radius), float(tau)
        w_hh = radius * direction
        params = {name: p.clone() for name, p in base.named_parameters()}
        params["weight_hh_l0"] = w_hh

        # |dh_T/dh_t| by distance T - t
        if nonlinearity == "tanh":
            rnn_rho = copy.deepcopy(base)
            rnn_rho.weight_hh_l0.copy_(w_hh)
            norms = spectral_norms(jacobian_chain(rnn_rho, x)).flip(0)
        else:
            powers = [torch.eye(len(w_hh), dtype=w_hh.dtype)]
            for _ in range(steps_t):
                powers.append(powers[-1] @ w_hh)
            norms = spectral_norms(torch.stack(powers))
        sigma = spectral_norms(w_hh).item()
        bound = (torch.tensor(sigma, dtype=torch.float64) ** torch.arange(steps_t + 1)).tolist()
        usable = bool(torch.all(torch.isfinite(norms[1:]) & (norms[1:] > 0)))
        decay = decay_per_step(norms[1:], distances[1:]) if usable else None

        # one gradient step, plain and clipped
        leaves = {name: p.clone().requires_grad_() for name, p in params.items()}
        start = loss(leaves, nonlinearity)
        start.backward()
        before = start.item() if start.item() < OVERFLOW else math.inf
        grads = {name: p.grad.clone() for name, p in leaves.items()}
        grad_norm = clip_grad_norm(leaves.values(), tau).item()  # clips the leaves' .grad
        clipped_norm = math.sqrt(sum(p.grad.pow(2).sum().item() for p in leaves.values()))
        if not math.isfinite(grad_norm):  # an overflowed gradient: no step is defined
            grad_norm, clipped_norm = math.inf, math.nan
        step, clipped_step = lr * grad_norm, lr * clipped_norm

        @torch.no_grad()
        def loss_after(length: float) -> float:
            if grad_norm == 0 or not math.isfinite(length * grad_norm):
                return before if length == 0 else math.inf
            moved = {n: p - length * grads[n] / grad_norm for n, p in params.items()}
            value = loss(moved, nonlinearity).item()
            return value if value < OVERFLOW else math.inf

        loss_step, loss_clipped = loss_after(step), loss_after(clipped_step)
        positive = [s for s in (step, clipped_step) if 0 < s < math.inf]
        low = min(positive) / 1e3 if positive else 1e-6
        high = max(positive) * 10 if positive else 1.0
        slice_steps = torch.logspace(
            math.log10(low), math.log10(high), SLICE_POINTS, dtype=torch.float64
        ).tolist()
        slice_losses = [loss_after(s) for s in slice_steps]

        fig, (ax, step_ax) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 5.6), layout="constrained")
        color = SERIES_COLORS[0] if nonlinearity == "tanh" else SERIES_COLORS[4]
        label = f"{nonlinearity} RNN" + ("" if decay is None else f", ×{decay:.3g} per step")
        ax.plot(*_finite(distances, norms.tolist()), color=color, label=label)
        ax.plot(
            *_finite(distances, bound),
            "--",
            color="#555555",
            lw=1.3,
            label="bound $\\sigma_{max}^{T-t}$",
        )
        ax.set_yscale("log")
        ax.set_xlabel("distance T − t (steps)")
        ax.set_ylabel("‖∂h_T/∂h_t‖ (spectral)")
        ax.set_title(f"ρ = {radius:.2f}, {nonlinearity}")
        ax.legend(loc="best")

        xs, ys = _finite(slice_steps, slice_losses)
        if ys:
            step_ax.plot(xs, ys, color="#333333", lw=1.3, label="loss along −g")
        if math.isfinite(before):
            step_ax.axhline(before, color="#999999", ls=":", lw=1.2, label="before the step")
        top = max(ys, default=before if math.isfinite(before) else 1.0)
        for length, value, name, marker_color in [
            (step, loss_step, f"SGD, ‖g‖ = {grad_norm:.3g}", SERIES_COLORS[4]),
            (clipped_step, loss_clipped, f"clipped at κ = {tau:.3g}", SERIES_COLORS[0]),
        ]:
            if not 0 < length < math.inf:
                continue
            shown_value = value if math.isfinite(value) else top
            step_ax.plot(
                [length],
                [shown_value],
                "o",
                ms=9,
                mfc="none",
                mew=2.2,
                color=marker_color,
                label=name + ("" if math.isfinite(value) else " (overflow)"),
            )
        step_ax.set_xscale("log")
        if ys and max(ys) > 100 * min(ys):
            step_ax.set_yscale("log")
        step_ax.set_xlabel(f"step length ‖Δθ‖ (η = {lr:g})")
        step_ax.set_ylabel("loss ½‖h_T‖²")
        if step_ax.get_legend_handles_labels()[0]:
            step_ax.legend(loc="best")
        result = {
            "radius": radius,
            "nonlinearity": nonlinearity,
            "tau": tau,
            "lr": lr,
            "distances": distances,
            "norms": norms.tolist(),
            "bound": bound,
            "decay": decay,
            "loss": before,
            "grad_norm": grad_norm,
            "clipped_norm": clipped_norm,
            "step": step,
            "clipped_step": clipped_step,
            "loss_step": loss_step,
            "loss_clipped": loss_clipped,
            "slice_steps": slice_steps,
            "slice_losses": slice_losses,
        }
        return fig, result

    low, high = RADIUS_RANGE
    controls = {
        "radius": widgets.FloatSlider(
            value=radius,
            min=min(low, radius),
            max=max(high, radius),
            step=0.05,
            description="radius ρ",
            continuous_update=False,
        ),
        "nonlinearity": widgets.ToggleButtons(
            options=list(NONLINEARITIES), value=nonlinearity, description="h_t ="
        ),
        "tau": widgets.FloatLogSlider(
            value=tau,
            base=10,
            min=min(-2.0, math.log10(tau)),
            max=max(3.0, math.log10(tau)),
            step=0.25,
            description="clip κ",
            readout_format=".3g",
            continuous_update=False,
        ),
    }
    return Explorer(controls, view, title="Spectral radius, gradient reach and clipping")
