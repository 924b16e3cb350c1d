r"""A small reverse-mode automatic differentiation engine over tensors (Chapter 2).

In the spirit of karpathy/micrograd, but each node holds a tensor. A forward pass builds a graph of
:class:`Node` s; :meth:`Node.backward` visits it in reverse topological order and applies, at each
node, the vector–Jacobian product (VJP) of the op that made it: given $\bar y = \partial L/\partial y$
it adds $\bar x = \bar y\,\partial y/\partial x$ to each parent's ``grad`` without ever forming the
Jacobian $\partial y/\partial x$. Every VJP below is written from the op's Jacobian; none calls
``torch.autograd``. The ops are the ones the feedforward LM of Chapter 1 needs::

    x = concat([embedding(C, ids[:, i]) for i in range(n - 1)])      # (batch, (n-1) m)
    loss = nll(log_softmax(tanh(x @ H.T + d) @ U.T + b), targets)     # scalar, nats

:func:`numerical_gradient` and :func:`relative_error` check any gradient against central differences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

TINY = 1e-300
"""The floor of :func:`relative_error`'s denominator: gradients that are all zero compare equal."""


class Node:
    """A tensor `value` in a computation graph, with ``grad`` $= \\partial L/\\partial$ `value` (same shape).

    Leaves (parameters, inputs) are made by the user and hold a copy of `value`; every op returns a
    new node that remembers its parents and the VJP that sends its ``grad`` back to them.
    Values are float64 unless `dtype` says.
    """

    def __init__(
        self,
        value: torch.Tensor | Sequence | float,
        parents: tuple[Node, ...] = (),
        op: str = "leaf",
        dtype: torch.dtype | None = torch.float64,
    ):
        value = torch.as_tensor(value).detach()
        value = value.to(dtype) if dtype is not None else value
        self.value = value if parents else value.clone()  # a leaf never aliases the caller's tensor
        if not self.value.is_floating_point():
            raise TypeError(f"expected a floating-point value, got dtype {self.value.dtype}")
        self.grad = torch.zeros_like(self.value)
        self.parents, self.op = parents, op
        self._backward: Callable[[], None] = lambda: None

    @property
    def shape(self) -> torch.Size:
        """The shape of `value` (and of ``grad``)."""
        return self.value.shape

    def __repr__(self) -> str:
        return f"Node(op={self.op!r}, shape={tuple(self.shape)}, dtype={self.value.dtype})"

    def _child(self, value: torch.Tensor, parents: tuple[Node, ...], op: str) -> Node:
        return Node(value, parents, op, dtype=None)

    # ---- ops -------------------------------------------------------------------------------
    def __add__(self, other: Node) -> Node:
        r"""$y = a + b$ with broadcasting (a bias `b: (d,)` added to `a: (batch, d)`); $\bar a = \bar y$
        summed over the axes that were broadcast."""
        out = self._child(self.value + other.value, (self, other), "add")

        def backward() -> None:
            self.grad += _unbroadcast(out.grad, self.shape)
            other.grad += _unbroadcast(out.grad, other.shape)

        out._backward = backward
        return out

    def __matmul__(self, other: Node) -> Node:
        r"""$Y = A B$ for `A: (batch, k)`, `B: (k, m)`; $\bar A = \bar Y B^\top$, $\bar B = A^\top \bar Y$."""
        a, b = self.value, other.value
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise ValueError(
                f"expected (batch, k) @ (k, m), got {tuple(a.shape)} @ {tuple(b.shape)}"
            )
        out = self._child(a @ b, (self, other), "matmul")

        def backward() -> None:
            self.grad += out.grad @ b.T
            other.grad += a.T @ out.grad

        out._backward = backward
        return out

    @property
    def T(self) -> Node:  # noqa: N802 (as torch spells it)
        r"""The transpose of a matrix, $Y = A^\top$; $\bar A = \bar Y^\top$."""
        if self.value.ndim != 2:
            raise ValueError(f"expected a matrix to transpose, got shape {tuple(self.shape)}")
        out = self._child(self.value.T, (self,), "T")

        def backward() -> None:
            self.grad += out.grad.T

        out._backward = backward
        return out

    def tanh(self) -> Node:
        r"""Eq. (eq-vjp) for $y = \tanh(x)$, any shape: the Jacobian is diagonal, $\bar x = \bar y
        \odot (1 - y^2)$.
        """
        out = self._child(torch.tanh(self.value), (self,), "tanh")

        def backward() -> None:
            self.grad += out.grad * (1 - out.value**2)

        out._backward = backward
        return out

    def log_softmax(self) -> Node:
        r"""$y = z - \log\sum_j e^{z_j}$ along the last axis (computed as log-sum-exp, so no overflow).

        Its Jacobian is $I - \mathbf 1\,\mathrm{softmax}(z)^\top$, so $\bar z = \bar y - \mathrm{softmax}(z)
        \sum_j \bar y_j$.
        """
        out = self._child(torch.log_softmax(self.value, dim=-1), (self,), "log_softmax")

        def backward() -> None:
            self.grad += out.grad - out.value.exp() * out.grad.sum(-1, keepdim=True)

        out._backward = backward
        return out

    def sum(self) -> Node:
        r"""$y = \sum_i x_i$ (a scalar); $\bar x = \bar y\,\mathbf 1$."""
        out = self._child(self.value.sum(), (self,), "sum")

        def backward() -> None:
            self.grad += out.grad.expand(self.shape)

        out._backward = backward
        return out

    def mean(self) -> Node:
        r"""$y = \frac1N \sum_i x_i$ (a scalar); $\bar x = \bar y\,\mathbf 1 / N$."""
        out = self._child(self.value.mean(), (self,), "mean")

        def backward() -> None:
            self.grad += out.grad.expand(self.shape) / self.value.numel()

        out._backward = backward
        return out

    # ---- the backward pass -----------------------------------------------------------------
    def topological_order(self) -> list[Node]:
        """Every node this one depends on, each after all of its parents (iterative DFS, no
        recursion).

        Walked in reverse, it visits a node only after every node that uses it.
        """
        order: list[Node] = []
        seen: set[int] = set()
        stack: list[tuple[Node, bool]] = [(self, False)]
        while stack:
            node, parents_done = stack.pop()
            if parents_done:
                order.append(node)
            elif id(node) not in seen:
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((p, False) for p in node.parents if id(p) not in seen)
        return order

    def backward(self, grad: torch.Tensor | None = None) -> None:
        r"""Eq. (eq-vjp) from the loss back: add $\partial L/\partial v$ into ``v.grad``
        (``v.shape``) for every leaf.

        $L$ is this node; `grad` is $\partial L/\partial\,$self (default 1 for a scalar). Leaves'
        gradients add up across calls, as in torch: zero them (:func:`zero_grad`) between steps. The
        nodes in between hold this call's gradient only: they are zeroed first.
        """
        grad = self._seed_grad(grad)
        order = self.topological_order()
        for node in order:
            if node.parents:
                node.grad = torch.zeros_like(node.value)
        self.grad += grad.to(self.value.dtype)
        for node in reversed(order):  # every user of a node before the node
            node._backward()

    def _seed_grad(self, grad: torch.Tensor | None) -> torch.Tensor:
        """`grad` checked against this node's shape, or 1 for a scalar node when it is None."""
        if grad is None:
            if self.value.numel() != 1:
                raise ValueError(
                    f"backward() without grad needs a scalar, got shape {tuple(self.shape)}"
                )
            grad = torch.ones_like(self.value)
        if grad.shape != self.shape:
            raise ValueError(f"expected grad of shape {tuple(self.shape)}, got {tuple(grad.shape)}")
        return grad


def _unbroadcast(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Sum `grad` over the axes that broadcasting added or stretched, so it has `shape`."""
    while grad.ndim > len(shape):
        grad = grad.sum(0)
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis, keepdim=True)
    return grad


def embedding(table: Node, ids: torch.Tensor) -> Node:
    r"""Rows of `table: (V, m)` at `ids: (...)` integer ids → `(..., m)`.

    The Jacobian picks rows, so its VJP scatters: $\bar C_v = \sum_{i:\,\mathrm{ids}_i = v} \bar y_i$ (a row
    used twice gets both gradients).
    """
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"expected integer ids, got dtype {ids.dtype}")
    if table.value.ndim != 2:
        raise ValueError(f"expected a table of shape (V, m), got {tuple(table.shape)}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise IndexError(f"ids must lie in 0 .. {table.shape[0] - 1}")
    out = table._child(table.value[ids], (table,), "embedding")

    def backward() -> None:
        table.grad.index_add_(0, ids.reshape(-1), out.grad.reshape(-1, table.shape[1]))

    out._backward = backward
    return out


def concat(nodes: Sequence[Node]) -> Node:
    r"""$y = [x_1; \dots; x_k]$ along the last (feature) axis; $\bar x_i$ is $\bar y$'s slice of $x_i$'s columns."""
    if not nodes:
        raise ValueError("expected at least one node to concatenate")
    sizes = [n.shape[-1] for n in nodes]
    out = nodes[0]._child(torch.cat([n.value for n in nodes], dim=-1), tuple(nodes), "concat")

    def backward() -> None:
        for node, piece in zip(nodes, out.grad.split(sizes, dim=-1), strict=True):
            node.grad += piece

    out._backward = backward
    return out


def nll(log_probs: Node, targets: torch.Tensor) -> Node:
    r"""Mean negative log-likelihood $L = -\frac1N\sum_i \log p_{i, t_i}$ in nats.

    `log_probs: (N, V)`, `targets: (N,)` ids. Its gradient is $-1/N$ at each $(i, t_i)$ and 0 elsewhere.
    """
    n = log_probs.shape[0]
    if log_probs.value.ndim != 2 or targets.shape != (n,):
        raise ValueError(
            f"expected log_probs (N, V) and targets (N,), got {tuple(log_probs.shape)} and {tuple(targets.shape)}"
        )
    rows = torch.arange(n)
    out = log_probs._child(-log_probs.value[rows, targets].mean(), (log_probs,), "nll")

    def backward() -> None:
        log_probs.grad[rows, targets] -= out.grad / n

    out._backward = backward
    return out


def feedforward_nll(params: dict[str, Node], contexts: torch.Tensor, targets: torch.Tensor) -> Node:
    r"""Chapter 1's feedforward LM loss on the engine: $x = [C(w_{t-n+1}); \dots; C(w_{t-1})]$,
    $y = b + U\tanh(d + Hx)$ (plus $Wx$ when `params` has ``"W"``), $L = $ mean NLL of `targets` (nats).

    `params` uses :class:`~seqmodels.feedforward.FeedForwardLM`'s names (see :func:`nodes_from_module`);
    `contexts: (batch, n-1)` ids, `targets: (batch,)` ids.
    """
    x = concat([embedding(params["C"], contexts[:, i]) for i in range(contexts.shape[1])])
    y = (x @ params["H"].T + params["d"]).tanh() @ params["U"].T + params["b"]
    if params.get("W") is not None:
        y = y + x @ params["W"].T
    return nll(y.log_softmax(), targets)


def feedforward_loss_of(
    module: torch.nn.Module,
    name: str,
    contexts: torch.Tensor,
    targets: torch.Tensor,
    dtype: torch.dtype = torch.float64,
) -> Callable[[torch.Tensor], torch.Tensor]:
    r"""$f(\theta) = L$, the engine's feedforward-LM loss as a function of parameter `name` alone, in `dtype`.

    Every other parameter is `module`'s, cast to `dtype`; `f` takes a tensor shaped like that
    parameter and returns the scalar loss (nats per token): what :func:`numerical_partials` needs.
    """
    params = nodes_from_module(module, dtype)
    if name not in params:
        raise KeyError(f"no parameter {name!r}; expected one of {sorted(params)}")

    def f(value: torch.Tensor) -> torch.Tensor:
        return feedforward_nll({**params, name: Node(value, dtype=dtype)}, contexts, targets).value

    return f


def nodes_from_module(
    module: torch.nn.Module, dtype: torch.dtype = torch.float64
) -> dict[str, Node]:
    """A leaf node holding a copy of each of `module`'s parameters, by name (in float64 by default)."""
    return {name: Node(p, dtype=dtype) for name, p in module.named_parameters()}


def zero_grad(params: Iterable[Node]) -> None:
    """Set every node's ``grad`` to zero."""
    for p in params:
        p.grad.zero_()


def sgd_step(params: Iterable[Node], lr: float) -> None:
    r"""The SGD update $\theta^{s+1} = \theta^s - \eta\,\nabla_\theta L$ in place, then zero the gradients."""
    for p in params:
        p.value -= lr * p.grad
        p.grad.zero_()


def sgd_feedforward(
    params: dict[str, Node],
    contexts: torch.Tensor,
    targets: torch.Tensor,
    batches: Iterable[torch.Tensor],
    lr: float,
) -> list[float]:
    r"""Train the feedforward LM on the engine: per batch, :func:`feedforward_nll`, ``backward``, :func:`sgd_step`.

    `contexts: (N, n-1)`, `targets: (N,)` ids; `batches` yields index tensors `(batch,)` into them.
    Returns the loss of each step (nats per token, before its update). `params` are updated in place.
    """
    losses = []
    for idx in batches:
        loss = feedforward_nll(params, contexts[idx], targets[idx])
        loss.backward()
        sgd_step(params.values(), lr)
        losses.append(loss.value.item())
    return losses


def numerical_partials(
    f: Callable[[torch.Tensor], torch.Tensor | float],
    x: torch.Tensor,
    indices: torch.Tensor | Sequence[int],
    eps: float = 1e-6,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    r"""Central differences $(f(x + \epsilon e_i) - f(x - \epsilon e_i)) / 2\epsilon$ for $i$ in `indices`.

    `indices` are positions in ``x.reshape(-1)`` (row-major); `f` maps a tensor shaped like `x` (of
    `dtype`) to a scalar. Returns `(len(indices),)` in `dtype`. Checking a sample of entries is how
    one checks a large parameter: two evaluations of `f` per entry.
    """
    if eps <= 0:
        raise ValueError(f"expected eps > 0, got {eps}")
    x = x.detach().to(dtype).clone()
    flat = x.view(-1)
    indices = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
    if indices.numel() and (indices.min() < 0 or indices.max() >= flat.numel()):
        raise IndexError(f"indices must lie in 0 .. {flat.numel() - 1}")
    out = torch.zeros(indices.numel(), dtype=dtype)
    for j, i in enumerate(indices.tolist()):
        old = flat[i].item()
        flat[i] = old + eps
        up = torch.as_tensor(f(x), dtype=dtype)
        flat[i] = old - eps
        down = torch.as_tensor(f(x), dtype=dtype)
        flat[i] = old
        out[j] = (up - down) / (2 * eps)
    return out


def numerical_gradient(
    f: Callable[[torch.Tensor], torch.Tensor | float],
    x: torch.Tensor,
    eps: float = 1e-6,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    r"""Central differences, $\partial f/\partial x_i \approx (f(x + \epsilon e_i) - f(x - \epsilon e_i)) / 2\epsilon$.

    `f` maps a tensor shaped like `x` to a scalar; `x` is cast to `dtype` first and the result has its
    shape. The truncation error is $O(\epsilon^2)$ and the rounding error about
    $\mathrm{machine\,eps}\cdot|f|/\epsilon$: keep float64 (machine eps $2\cdot 10^{-16}$); in float32
    ($10^{-7}$) no $\epsilon$ makes both small, which is why float32 checks mislead.
    """
    return numerical_partials(f, x, torch.arange(x.numel()), eps, dtype).reshape(x.shape)


def sample_entries(grad: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """Up to `k` flat indices into `grad`, drawn without replacement among its nonzero entries.

    A mini-batch touches few rows of an embedding table; the others have gradient exactly 0 and
    would check nothing.
    """
    nonzero = grad.reshape(-1).nonzero()[:, 0]
    return nonzero[torch.randperm(len(nonzero), generator=generator)[:k]]


def relative_error(analytic: torch.Tensor, numeric: torch.Tensor) -> float:
    r"""$\max_i|a_i - n_i| \,/\, \max(\max_i|a_i|, \max_i|n_i|, \text{tiny})$, computed in float64."""
    if analytic.shape != numeric.shape:
        raise ValueError(
            f"expected gradients of the same shape, got {tuple(analytic.shape)} and {tuple(numeric.shape)}"
        )
    a, n = analytic.double(), numeric.double()
    if a.numel() == 0:
        return 0.0
    scale = max(a.abs().max().item(), n.abs().max().item(), TINY)
    return (a - n).abs().max().item() / scale
