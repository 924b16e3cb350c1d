r"""Chapter 2's explorer: the worked example's computation graph, forwards and backwards.

`backprop_explorer` has a slider for each input $x_j$, one that scales the weights $W$, and a choice
of the target class, for the graph $\mathbf z = W\mathbf x$, $\hat{\mathbf y} =
\operatorname{softmax}(\mathbf z)$, $L = -\sum_i y_i \log \hat y_i$. It shows the forward values and,
for each node, the gradient that the backward pass brings it: the chain of vector–Jacobian products
$\bar{\hat{\mathbf y}} = \partial L/\partial \hat{\mathbf y}$, $\bar{\mathbf z} = \bar{\hat{\mathbf
y}}\,\partial \hat{\mathbf y}/\partial \mathbf z$, $\bar W = \bar{\mathbf z}\,\partial \mathbf
z/\partial \operatorname{vec} W$ and $\bar{\mathbf x} = \bar{\mathbf z}\,W$ from the library's
explicit Jacobians (`seqmodels.jacobians.worked_example`), beside what ``torch.autograd`` and the
course's engine (`seqmodels.autodiff`) compute for the same graph.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from ..autodiff import Node, nll, relative_error
from ..jacobians import worked_example
from ..plots import FIGURE_WIDTH, SERIES_COLORS, TARGET_COLOR
from .explorer import Explorer

_BLUE, _DARK = SERIES_COLORS[0], "#222222"


def _autograd(W: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:  # noqa: N803
    r"""$\partial L/\partial(\hat{\mathbf y}, \mathbf z, W, \mathbf x)$ from ``torch.autograd``."""
    W, x = W.clone().requires_grad_(), x.clone().requires_grad_()  # noqa: N806
    z = W @ x
    y_hat = torch.softmax(z, 0)
    z.retain_grad()
    y_hat.retain_grad()
    (-(y * y_hat.log()).sum()).backward()
    return {"y_hat": y_hat.grad, "z": z.grad, "W": W.grad, "x": x.grad}


def _engine(W: torch.Tensor, x: torch.Tensor, target: int) -> dict[str, torch.Tensor]:  # noqa: N803
    r"""$\partial L/\partial(\mathbf z, W, \mathbf x)$ from the course's engine (log-softmax and NLL)."""
    w_node, x_node = Node(W), Node(x[None])
    z = x_node @ w_node.T  # (1, K)
    nll(z.log_softmax(), torch.tensor([target])).backward()
    return {"z": z.grad[0], "W": w_node.grad, "x": x_node.grad[0]}


def backprop_explorer(
    W: torch.Tensor,  # noqa: N803
    x: torch.Tensor,
    target: int = 0,
    scale: float = 1.0,
    x_range: float = 3.0,
    max_scale: float = 6.0,
) -> Explorer:
    r"""Sliders for $\mathbf x$ and a scale $s$ of $W$, and the target class, on $L = -\log
    \operatorname{softmax}(sW\mathbf x)_{\text{target}}$: forward values and backward VJPs.

    `W: (K, D)` and `x: (D,)` are the worked example's (float64); `target` is a class index
    ``0 .. K-1``. Each $x_j$ moves in ``[-x_range, x_range]``, $s$ in ``[0, max_scale]``.

    ``explorer.result`` has the forward values ``x``, ``z``, ``y_hat`` and ``loss`` (nats), and
    three dicts of gradients by node name (``"y_hat"``, ``"z"``, ``"W"``, ``"x"``): ``vjp`` (the
    chain of vector–Jacobian products of the explicit Jacobians), ``autograd`` and ``engine``
    (no ``"y_hat"``: the engine fuses softmax and log); ``max_difference``, the largest
    `~seqmodels.autodiff.relative_error` of a node's ``vjp`` against its ``autograd``, and
    ``engine_difference``, the same for ``engine``.
    """
    import ipywidgets as widgets

    W = torch.as_tensor(W, dtype=torch.float64)  # noqa: N806
    x = torch.as_tensor(x, dtype=torch.float64)
    if W.ndim != 2 or x.shape != (W.shape[1],):
        raise ValueError(
            f"expected W of shape (K, D) and x of shape (D,), got {tuple(W.shape)} and "
            f"{tuple(x.shape)}"
        )
    n_out, n_in = W.shape
    if not 0 <= target < n_out:
        raise ValueError(f"expected target in 0 .. {n_out - 1}, got {target!r}")
    if not (x_range > 0 and max_scale > 0):
        raise ValueError(f"expected x_range > 0 and max_scale > 0, got {x_range} and {max_scale}")
    names = [f"x{j + 1}" for j in range(n_in)]

    def view(target: int, scale: float, **inputs: float) -> tuple[Figure, dict]:
        weights = float(scale) * W
        xv = torch.tensor([float(inputs[name]) for name in names], dtype=torch.float64)
        y = torch.zeros(n_out, dtype=torch.float64)
        y[target] = 1.0
        ex = worked_example(weights, xv, y)
        bar_z = ex.dL_dyhat @ ex.dyhat_dz  # (1, K): the VJP through the softmax
        vjp = {
            "y_hat": ex.dL_dyhat[0],  # the first VJP, from L-bar = 1
            "z": bar_z[0],
            "W": (bar_z @ ex.dz_dW).reshape(n_out, n_in),  # through dz/dvec W
            "x": (bar_z @ weights)[0],  # through dz/dx = W
        }
        auto = _autograd(weights, xv, y)
        engine = _engine(weights, xv, target)
        result = {
            "target": target,
            "scale": float(scale),
            "x": xv,
            "z": ex.z,
            "y_hat": ex.y_hat,
            "loss": ex.loss,
            "vjp": vjp,
            "autograd": auto,
            "engine": engine,
            "max_difference": _max_difference(vjp, auto),
            "engine_difference": _max_difference(engine, auto),
        }
        return _figure(result, n_out, n_in), result

    slider = {"min": -x_range, "max": x_range, "step": 0.1, "continuous_update": False}
    controls = {
        name: widgets.FloatSlider(value=float(x[j]), description=f"x{_sub(j + 1)}", **slider)
        for j, name in enumerate(names)
    }
    controls["scale"] = widgets.FloatSlider(
        value=scale, min=0.0, max=max_scale, step=0.1, description="W scale",
        continuous_update=False,
    )  # fmt: skip
    controls["target"] = widgets.Dropdown(
        options=[(f"class {i + 1}", i) for i in range(n_out)], value=target, description="target"
    )
    return Explorer(controls, view, title="backpropagation through z = Wx, softmax, cross-entropy")


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest `relative_error` between the tensors both dicts have (nan if any is nan)."""
    return max(relative_error(a[k], b[k]) for k in a if k in b)


def _sub(i: int) -> str:
    return "".join("₀₁₂₃₄₅₆₇₈₉"[int(d)] for d in str(i))


def _figure(r: dict, n_out: int, n_in: int) -> Figure:
    """Two strips of bars: the forward values, and the backward VJPs with autograd's (dots)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 4.9), height_ratios=[1, 1.25])
    target = r["target"]
    forward = [
        ("x", [f"{j + 1}" for j in range(n_in)], r["x"], None),
        ("z", [f"{i + 1}" for i in range(n_out)], r["z"], target),
        ("ŷ", [f"{i + 1}" for i in range(n_out)], r["y_hat"], target),
        ("L", [""], torch.tensor([r["loss"]]), 0),
    ]
    _strip(top, forward)
    top.set_ylabel("value")
    top.set_title(f"forward: L = {r['loss']:.3g} nats, ŷ of the target {r['y_hat'][target]:.3g}")
    w_labels = [f"{i + 1}{j + 1}" for i in range(n_out) for j in range(n_in)]
    backward = [
        ("∂L/∂ŷ", [f"{i + 1}" for i in range(n_out)], r["vjp"]["y_hat"], target),
        ("∂L/∂z", [f"{i + 1}" for i in range(n_out)], r["vjp"]["z"], target),
        ("∂L/∂W", w_labels, r["vjp"]["W"].reshape(-1), None),
        ("∂L/∂x", [f"{j + 1}" for j in range(n_in)], r["vjp"]["x"], None),
    ]
    xs = _strip(bottom, backward)
    auto = [r["autograd"][k].reshape(-1) for k in ("y_hat", "z", "W", "x")]
    bottom.plot(
        np.concatenate(xs), _finite(torch.cat(auto)), "o", color=_DARK, ms=4, label="autograd"
    )
    bottom.legend(loc="lower right", handletextpad=0.2, borderpad=0.3)
    bottom.set_ylabel("gradient")
    diff = r["max_difference"]
    bottom.set_title(
        f"backward: VJPs (bars); relative error {diff:.0e}"
        if math.isfinite(diff)
        else "backward: ŷ underflowed to 0, ∂L/∂ŷ infinite"
    )
    fig.tight_layout(h_pad=0.8)
    return fig


def _finite(values: torch.Tensor) -> np.ndarray:
    """As a NumPy array, with infinities and nans (an underflowed probability) left out as nan."""
    out = values.detach().double().numpy().copy()
    out[~np.isfinite(out)] = np.nan
    return out


def _strip(ax, groups: list[tuple[str, list[str], torch.Tensor, int | None]]) -> list[np.ndarray]:
    """Bars for each group of entries, side by side, the group's name under its entries' indices.

    The target class's entry is orange. The y axis is linear within ±1 and logarithmic beyond.
    """
    xs, position, ticks, labels = [], 0.0, [], []
    for name, entry_labels, values, highlight in groups:
        x = position + np.arange(len(entry_labels))
        colors = [TARGET_COLOR if i == highlight else _BLUE for i in range(len(entry_labels))]
        ax.bar(
            x, _finite(values.reshape(-1)), width=0.75, color=colors, edgecolor="#333333", lw=0.5
        )
        ticks += list(x)
        labels += entry_labels
        middle = x.mean()
        transform = blended_transform_factory(ax.transData, ax.transAxes)
        ax.text(middle, -0.2, name, ha="center", va="top", transform=transform, fontsize=11)
        xs.append(x)
        position = x[-1] + 1.8
    ax.set_xticks(ticks, labels)
    ax.tick_params(axis="x", length=0)
    ax.set_xlim(-0.8, position - 1.0)
    ax.axhline(0, color="#333333", lw=0.8)
    ax.set_yscale("symlog", linthresh=1.0)
    values = np.concatenate([_finite(v.reshape(-1)) for *_, v, _ in groups])
    _symlog_ticks(ax, np.nan_to_num(values))
    ax.grid(axis="x", visible=False)
    return xs


def _symlog_ticks(ax, values: np.ndarray) -> None:
    """A few y ticks for a symlog axis: 0, ±1 and one or two powers of ten on each side in use."""
    tops = {}  # the power of ten above the largest value of each sign in use
    for sign in (1.0, -1.0):
        largest = max([sign * v for v in values] + [0.0])
        if largest > 0:
            tops[sign] = max(0, math.ceil(math.log10(max(largest, 1.0)) - 1e-9))
    widest = max(tops.values(), default=0)
    ticks = [0.0]
    for sign, top in tops.items():
        if widest < 4:  # few decades: 1 and the top
            powers = {0, top}
        else:  # many: the top, and halfway on the wider side
            powers = {top, widest // 2} if top == widest else {top}
        ticks += [sign * 10.0**p for p in powers]
    ticks = sorted(set(ticks))
    ax.set_yticks(ticks, [_power_label(t) for t in ticks])
    low, high = min(ticks + [values.min()]), max(ticks + [values.max()])
    ax.set_ylim(low * 1.3 if low < 0 else -0.2, high * 1.3 if high > 0 else 0.2)


def _power_label(t: float) -> str:
    if t == 0:
        return "0"
    p = round(math.log10(abs(t)))
    sign = "−" if t < 0 else ""
    return f"{sign}{10**p:g}" if p <= 1 else f"{sign}$10^{{{p}}}$"
