r"""Explicit Jacobians: the chain rule as matrix products, and what forming them costs (Chapter 2).

**The worked example.** For $z = Wx$, $\hat y = \mathrm{softmax}(z)$, $L = -\sum_i y_i \log \hat y_i$
with $W \in \mathbb{R}^{K\times D}$, the chain rule is a product of three Jacobians,

$$\frac{\partial L}{\partial \operatorname{vec} W}
  = \underbrace{\frac{\partial L}{\partial \hat y}}_{1\times K}\,
    \underbrace{\frac{\partial \hat y}{\partial z}}_{K\times K}\,
    \underbrace{\frac{\partial z}{\partial \operatorname{vec} W}}_{K\times KD},$$

with $\partial L/\partial \hat y = -(y / \hat y)^\top$, the softmax Jacobian
$\mathrm{diag}(\hat y) - \hat y\hat y^\top$, and $\partial z_i/\partial W_{jk} = \delta_{ij} x_k$
($\operatorname{vec}$ reads $W$ row by row). Reshaped to $K\times D$ the product is $(\hat y - y)\,x^\top$.

**The cost.** For a chain of layers $h_k = \tanh(W_k h_{k-1})$, $h_0 = x$, of width $n$ and a loss
$L = v^\top h_L$, the gradient $\partial L/\partial x$ can be had by multiplying the layers'
$n\times n$ Jacobians $J_k = \mathrm{diag}(1 - h_k^2)\,W_k$ (matrix products, $O(n^3)$ time and
$O(n^2)$ memory each), or by passing the row vector $\bar h = \partial L/\partial h$ back through
them, $\bar h_{k-1} = (\bar h_k \odot (1 - h_k^2))\,W_k$, a vector–Jacobian product that never forms
$J_k$ ($O(n^2)$ time, $O(n)$ memory): reverse mode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .softmax import softmax, softmax_jacobian


@dataclass
class WorkedExample:
    r"""Every quantity of the worked example $z = Wx$, $\hat y = \mathrm{softmax}(z)$, $L = -\sum_i y_i\log\hat y_i$.

    Shapes for $W: (K, D)$: ``z``, ``y_hat``: ``(K,)``; ``dL_dyhat``: ``(1, K)``; ``dyhat_dz``:
    ``(K, K)``; ``dz_dW``: ``(K, K*D)``; ``product``: ``(1, K*D)``; ``grad_W`` and ``closed_form``:
    ``(K, D)``.
    """

    z: torch.Tensor
    y_hat: torch.Tensor
    loss: float
    dL_dyhat: torch.Tensor  # noqa: N815 (the maths' names)
    dyhat_dz: torch.Tensor
    dz_dW: torch.Tensor  # noqa: N815
    product: torch.Tensor
    grad_W: torch.Tensor  # noqa: N815
    closed_form: torch.Tensor


def cross_entropy_jacobian(y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r"""$\partial L/\partial \hat y = -(y_1/\hat y_1, \dots, y_K/\hat y_K)$, a row `(1, K)`.

    For $L = -\sum_i y_i \log\hat y_i$ with `y_hat`, `y`: `(K,)`.
    """
    if y_hat.ndim != 1 or y.shape != y_hat.shape:
        raise ValueError(
            f"expected y_hat and y of the same shape (K,), got {tuple(y_hat.shape)} and {tuple(y.shape)}"
        )
    return (-y / y_hat).unsqueeze(0)


def linear_weight_jacobian(x: torch.Tensor, n_out: int) -> torch.Tensor:
    r"""$\partial z/\partial \operatorname{vec} W$ for $z = Wx$: `x: (D,)` → `(n_out, n_out*D)`.

    $W$ is `(n_out, D)`, read row by row by $\operatorname{vec}$.

    $\partial z_i / \partial W_{jk} = \delta_{ij}\,x_k$: block $i$ of row $i$ is $x^\top$, all else 0
    (the Kronecker product $I \otimes x^\top$).
    """
    if x.ndim != 1 or n_out < 1:
        raise ValueError(
            f"expected x of shape (D,) and n_out >= 1, got {tuple(x.shape)} and {n_out}"
        )
    return torch.kron(torch.eye(n_out, dtype=x.dtype), x.unsqueeze(0))


def worked_example(W: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> WorkedExample:  # noqa: N803
    r"""Forward pass, the three explicit Jacobians, their product, and $(\hat y - y)\,x^\top$.

    `W: (K, D)`, `x: (D,)`, `y: (K,)` a target distribution (one-hot for a label).
    """
    if W.ndim != 2 or x.shape != (W.shape[1],) or y.shape != (W.shape[0],):
        raise ValueError(
            f"expected W (K, D), x (D,), y (K,), got {tuple(W.shape)}, {tuple(x.shape)}, {tuple(y.shape)}"
        )
    z = W @ x
    y_hat = softmax(z)
    loss = -(y * y_hat.log()).sum()
    dL_dyhat = cross_entropy_jacobian(y_hat, y)  # noqa: N806
    dyhat_dz = softmax_jacobian(y_hat)
    dz_dW = linear_weight_jacobian(x, W.shape[0])  # noqa: N806
    product = dL_dyhat @ dyhat_dz @ dz_dW
    return WorkedExample(
        z=z,
        y_hat=y_hat,
        loss=loss.item(),
        dL_dyhat=dL_dyhat,
        dyhat_dz=dyhat_dz,
        dz_dW=dz_dW,
        product=product,
        grad_W=product.reshape(W.shape),
        closed_form=torch.outer(y_hat - y, x),
    )


# ---- a chain of tanh layers: explicit Jacobians against vector–Jacobian products ----------------


def random_chain(
    width: int, depth: int, generator: torch.Generator, dtype: torch.dtype = torch.float64
) -> list[torch.Tensor]:
    r"""`depth` matrices `(width, width)` with entries $\mathcal N(0, 1/\text{width})$: tanh stays unsaturated."""
    if width < 1 or depth < 1:
        raise ValueError(f"expected width >= 1 and depth >= 1, got {width} and {depth}")
    return [
        torch.randn(width, width, generator=generator, dtype=dtype) / width**0.5
        for _ in range(depth)
    ]


def chain_forward(weights: Sequence[torch.Tensor], x: torch.Tensor) -> list[torch.Tensor]:
    r"""The activations $h_0 = x, h_1, \dots, h_L$ of $h_k = \tanh(W_k h_{k-1})$; `x: (n,)`, each $W_k$: `(n, n)`."""
    hs = [x]
    for W in weights:  # noqa: N806
        if W.ndim != 2 or W.shape[1] != hs[-1].shape[0]:
            raise ValueError(
                f"expected a weight of shape (n_out, {hs[-1].shape[0]}), got {tuple(W.shape)}"
            )
        hs.append(torch.tanh(W @ hs[-1]))
    return hs


def _nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class GradientCost:
    """A gradient and what computing it took: seconds (best of the repeats) and the peak bytes of the
    derivative tensors (Jacobians or vectors) held at once, counted from those tensors."""

    grad: torch.Tensor
    seconds: float
    peak_bytes: int


def grad_by_jacobian_products(
    weights: Sequence[torch.Tensor], x: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, int]:
    r"""$\partial L/\partial x$ for $L = v^\top h_L$ the explicit way: $v^\top (J_L \cdots J_1)$, forming every $J_k$.

    Each $J_k = \mathrm{diag}(1 - h_k^2) W_k$ is `(n, n)`; the running product $J_k \cdots J_1$
    (the Jacobian $\partial h_k/\partial x$, accumulated from the input side as the forward pass
    goes) is a matrix product, $O(n^3)$. Returns the gradient `(n,)` and the peak bytes of Jacobians
    held at once (the running product, the new $J_k$ and their product).
    """
    hs = chain_forward(weights, x)
    product, peak = None, 0
    for W, h in zip(weights, hs[1:], strict=True):  # noqa: N806
        jac = (1 - h**2).unsqueeze(1) * W  # diag(1 - h^2) W, formed explicitly
        new = jac if product is None else jac @ product
        held = {id(t): t for t in (product, jac, new) if t is not None}  # new is jac at k = 1
        peak = max(peak, _nbytes(*held.values()))
        product = new
    return v @ product, peak


def grad_by_vjps(
    weights: Sequence[torch.Tensor], x: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, int]:
    r"""$\partial L/\partial x$ for $L = v^\top h_L$ by reverse mode, from $\bar h_L = v$ back to $\bar h_0$.

    $\bar h_{k-1} = (\bar h_k \odot (1 - h_k^2))\,W_k$.

    No Jacobian is formed: each step is a vector times a matrix, $O(n^2)$. Returns the gradient
    `(n,)` and the peak bytes of derivative vectors held at once.
    """
    hs = chain_forward(weights, x)
    bar, peak = v, 0
    for W, h in zip(reversed(weights), reversed(hs[1:]), strict=True):  # noqa: N806
        scaled = bar * (1 - h**2)
        new = scaled @ W
        peak = max(peak, _nbytes(bar, scaled, new))
        bar = new
    return bar, peak


def time_gradient(
    method: Callable[..., tuple[torch.Tensor, int]],
    weights: Sequence[torch.Tensor],
    x: torch.Tensor,
    v: torch.Tensor,
    repeats: int = 3,
) -> GradientCost:
    """Run `method(weights, x, v)` `repeats` times; keep the fastest time (the least disturbed by other load)."""
    if repeats < 1:
        raise ValueError(f"expected repeats >= 1, got {repeats}")
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        grad, peak = method(weights, x, v)
        best = min(best, time.perf_counter() - start)
    return GradientCost(grad=grad, seconds=best, peak_bytes=peak)


def jacobian_vs_vjp_costs(
    widths: Sequence[int],
    depth: int,
    generator: torch.Generator,
    repeats: int = 3,
    dtype: torch.dtype = torch.float64,
) -> dict[str, dict[str, list[float]]]:
    r"""Time and peak derivative memory of both ways to get $\partial L/\partial x$, for each width.

    Returns ``{"explicit Jacobians": {"seconds": [...], "bytes": [...]}, "vector–Jacobian products":
    {...}}``, one entry per width, and checks that both give the same gradient.
    """
    out: dict[str, dict[str, list[float]]] = {
        name: {"seconds": [], "bytes": []}
        for name in ("explicit Jacobians", "vector–Jacobian products")
    }
    for n in widths:
        weights = random_chain(n, depth, generator, dtype)
        x = torch.randn(n, generator=generator, dtype=dtype)
        v = torch.randn(n, generator=generator, dtype=dtype)
        costs = [
            time_gradient(grad_by_jacobian_products, weights, x, v, repeats),
            time_gradient(grad_by_vjps, weights, x, v, repeats),
        ]
        torch.testing.assert_close(costs[0].grad, costs[1].grad)
        for name, cost in zip(out, costs, strict=True):
            out[name]["seconds"].append(cost.seconds)
            out[name]["bytes"].append(cost.peak_bytes)
    return out


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    r"""The least-squares slope of $\log y$ against $\log x$: the exponent $p$ of $y \propto x^p$."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(
            f"expected two equally long sequences of >= 2 points, got {len(xs)} and {len(ys)}"
        )
    lx = torch.tensor(xs, dtype=torch.float64).log()
    ly = torch.tensor(ys, dtype=torch.float64).log()
    lx, ly = lx - lx.mean(), ly - ly.mean()
    return ((lx * ly).sum() / (lx * lx).sum()).item()
