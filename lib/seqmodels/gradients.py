r"""Vanishing and exploding gradients (Chapter 4): how far back a recurrent network's gradient reaches.

Backpropagation through time multiplies one step Jacobian per step,

$$\frac{\partial h_T}{\partial h_t} = \prod_{t'=t+1}^{T} \frac{\partial h_{t'}}{\partial h_{t'-1}}
= \prod_{t'=t+1}^{T} \mathrm{diag}\bigl(\tanh'(a_{t'})\bigr)\, W_{hh}$$

for the Elman RNN ($a_{t'}$ its pre-activation, $\tanh' = 1 - h_{t'}^2$), so its norm behaves like a
power of $W_{hh}$: at most $(\gamma\,\sigma_{\max}(W_{hh}))^{T-t}$ with $\gamma \ge |\tanh'|$
(Pascanu et al. 2013). This module measures it — by autograd (:func:`state_jacobians`) and by the
product of the step Jacobians (:func:`jacobian_chain`) — builds recurrent matrices of a chosen
spectral radius (:func:`scaled_orthogonal`), fits the measured decay per step (:func:`decay_per_step`)
and clips gradients by their global norm (:func:`clip_grad_norm`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from .rnn import RNNLM, hidden_jacobian, sentence_batch


def _last_state(output: tuple) -> torch.Tensor:
    """The last hidden state from a recurrent module's output: ``(out, h)`` or ``(out, (h, c))``."""
    last = output[1]
    return last[0] if isinstance(last, tuple) else last


def _check_sequence(x: torch.Tensor, rnn: nn.Module) -> None:
    d_in = getattr(rnn, "input_size", x.shape[-1] if x.ndim == 2 else None)
    if x.ndim != 2 or x.shape[1] != d_in:
        raise ValueError(f"expected one sequence x of shape (time, {d_in}), got {tuple(x.shape)}")


def states(rnn: nn.Module, x: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """$h_0, h_1, \\dots, h_T$ of `rnn` (an ``ElmanRNN`` or a batch-first ``nn.RNN``) on one sequence
    `x: (time, d_in)`, as ``(time + 1, d_h)``; $h_0$ = `h0` ``(d_h,)``, zeros if None."""
    _check_sequence(x, rnn)
    hidden = rnn.hidden_size
    h0 = x.new_zeros(hidden) if h0 is None else h0
    out, _ = rnn(x[None], h0[None, None] if isinstance(rnn, nn.RNN) else h0[None])
    return torch.cat([h0[None], out[0]])


def state_jacobians(
    rnn: nn.Module, x: torch.Tensor, h0: torch.Tensor | None = None
) -> torch.Tensor:
    r"""$\partial h_T / \partial h_t$ for $t = 0 \dots T$ by autograd: ``(T + 1, d_h, d_h)``.

    Entry ``t`` is the Jacobian of the map $h_t \mapsto h_T$ that runs `rnn` (an ``ElmanRNN`` or a
    one-layer batch-first ``nn.RNN``) over the inputs $x_{t+1} \dots x_T$ of `x: (time, d_in)`
    from the state $h_t$ it reached from `h0`; entry ``T`` is the identity.
    """
    h = states(rnn, x, h0).detach()
    torch_rnn = isinstance(rnn, nn.RNN)

    def run_from(t: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def final_state(h_t: torch.Tensor) -> torch.Tensor:
            start = h_t[None, None] if torch_rnn else h_t[None]
            return _last_state(rnn(x[None, t:], start))[0].reshape(-1)

        return final_state

    time = len(x)
    eye = torch.eye(rnn.hidden_size, dtype=x.dtype, device=x.device)
    jacobians = [
        torch.autograd.functional.jacobian(run_from(t), h[t], vectorize=True) for t in range(time)
    ]
    return torch.stack([*jacobians, eye])


def jacobian_chain(
    rnn: nn.Module,
    x: torch.Tensor,
    h0: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Eq. (eq-jacobian-product): dh_T/dh_t for t = 0 .. T, ``(T + 1, d_h, d_h)``.

    For one sequence ``x: (T, d_in)``, multiplied out from the step Jacobians of
    :func:`seqmodels.rnn.hidden_jacobian` (no autograd); entry ``T`` is the identity.
    """
    with torch.no_grad():
        h = states(rnn, x, h0)
        steps = hidden_jacobian(rnn, h[1:])  # (T, d_h, d_h): dh_t/dh_{t-1} for t = 1 .. T
        product = torch.eye(rnn.hidden_size, dtype=x.dtype, device=x.device)
        out = [product]
        for t in range(len(x) - 1, -1, -1):
            product = product @ steps[t]  # dh_T/dh_t = dh_T/dh_{t+1} · dh_{t+1}/dh_t
            out.append(product)
    return torch.stack(out[::-1])


def input_gradient_norms(
    rnn: nn.Module, x: torch.Tensor, state: torch.Tensor | tuple | None = None
) -> torch.Tensor:
    r"""$\lVert \partial h_T / \partial x_t \rVert_F$ for $t = 1 \dots T$: ``(T,)``.

    How strongly the last state depends on each input, for any batch-first recurrent module whose
    ``forward(x, state)`` returns ``(outputs, h_T)`` or ``(outputs, (h_T, c_T))`` — Elman, GRU, LSTM
    alike. `x: (time, d_in)` is one sequence; `state` is passed to the module as given.
    """
    if x.ndim != 2:
        raise ValueError(f"expected one sequence x of shape (time, d_in), got {tuple(x.shape)}")

    def final_state(inputs: torch.Tensor) -> torch.Tensor:
        return _last_state(rnn(inputs[None], state))[0].reshape(-1)

    jac = torch.autograd.functional.jacobian(final_state, x.detach(), vectorize=True)
    return jac.pow(2).sum(dim=(0, 2)).sqrt()  # jac: (d_h, time, d_in)


def spectral_norms(matrices: torch.Tensor) -> torch.Tensor:
    """The largest singular value of each matrix of `matrices: (..., n, m)`; ``inf`` for a matrix
    with an entry that is not finite (a product of Jacobians that overflowed)."""
    finite = torch.isfinite(matrices).all(-1).all(-1)
    if bool(finite.all()):
        return torch.linalg.matrix_norm(matrices, ord=2)
    norms = torch.full(matrices.shape[:-2], math.inf, dtype=matrices.dtype)
    norms[finite] = torch.linalg.matrix_norm(matrices[finite], ord=2)
    return norms


def spectral_radius(matrix: torch.Tensor) -> float:
    """The largest modulus of an eigenvalue of a square matrix."""
    return torch.linalg.eigvals(matrix.detach().double()).abs().max().item()


def scaled_orthogonal(
    n: int, radius: float, generator: torch.Generator, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    r"""$\rho Q$, ``(n, n)``, with $Q$ a random orthogonal matrix and $\rho$ = `radius`.

    $Q$ is Haar-distributed; every eigenvalue of $\rho Q$ has modulus $\rho$ and every singular
    value equals it, so $\lVert (\rho Q)^k \rVert_2 = \rho^k$.
    """
    _check_orthogonal(n, radius)
    a = torch.randn(n, n, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    q = q * torch.sign(torch.diagonal(r))  # the sign fix that makes Q Haar-distributed
    return (radius * q).to(dtype)


def _check_orthogonal(n: int, radius: float) -> None:
    """Refuse a size that is not a positive integer or a radius that is not positive and finite."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"expected n to be a positive integer, got {n!r}")
    if not (isinstance(radius, int | float) and radius > 0 and math.isfinite(radius)):
        raise ValueError(f"expected a positive finite radius, got {radius!r}")


def decay_per_step(norms: torch.Tensor, distances: torch.Tensor | None = None) -> float:
    r"""The factor $r$ of the least-squares fit $\log \lVert g_k \rVert \approx \log c + k \log r$:
    how much a gradient norm shrinks (r < 1) or grows (r > 1) per step of distance `k`.

    `norms: (K,)` positive, at `distances` (default ``0 .. K - 1``); zeros and infinities refused.
    """
    norms = torch.as_tensor(norms, dtype=torch.float64)
    if norms.ndim != 1 or len(norms) < 2:
        raise ValueError(f"expected at least two norms in a vector, got shape {tuple(norms.shape)}")
    if not bool(torch.all(torch.isfinite(norms) & (norms > 0))):
        raise ValueError("expected positive finite norms (a log-linear fit needs them)")
    k = torch.arange(len(norms), dtype=torch.float64) if distances is None else distances
    k = torch.as_tensor(k, dtype=torch.float64)
    design = torch.stack([torch.ones_like(k), k], 1)
    solution = torch.linalg.lstsq(design, norms.log()[:, None]).solution
    return math.exp(solution[1, 0].item())


def global_norm(gradients: Iterable[torch.Tensor]) -> torch.Tensor:
    r"""Eq. (eq-clip)'s $\lVert g \rVert$: every gradient tensor as one vector, its norm."""
    norms = [g.detach().pow(2).sum() for g in gradients]
    if not norms:
        return torch.tensor(0.0)
    return torch.stack(norms).sum().sqrt()


def clip_grad_norm(parameters: Iterable[nn.Parameter], max_norm: float) -> torch.Tensor:
    r"""Eq. (eq-clip) in place, $\kappa$ = `max_norm`; returns $\lVert g\rVert$ before clipping.

    Every parameter's gradient is scaled by the same factor, so the whole gradient keeps its
    direction. Returns the norm as ``torch.nn.utils.clip_grad_norm_`` does (which divides by
    $\lVert g \rVert + 10^{-6}$; the two agree to that epsilon).
    """
    _check_max_norm(max_norm)
    grads = [p.grad for p in parameters if p.grad is not None]
    total = global_norm(grads)
    scale = min(1.0, max_norm / total.item()) if total > 0 else 1.0
    if scale < 1.0:
        for g in grads:
            g.mul_(scale)
    return total


def _check_max_norm(max_norm: float) -> None:
    """Refuse a threshold that is not positive and finite."""
    if not (max_norm > 0 and math.isfinite(max_norm)):
        raise ValueError(f"expected a positive finite max_norm, got {max_norm!r}")


def loss_gradient_by_position(
    model: RNNLM, sentences: list[list[int]], position: int
) -> torch.Tensor:
    r"""How much of one prediction's gradient reaches each earlier input, averaged over `sentences`.

    For the loss $L_k = -\log p(w_k \mid \texttt{<s>}\, w_0 \dots w_{k-1})$ at word position
    $k$ = `position` (the same for every sentence), returns ``(k + 1,)``: entry ``j`` is the mean
    over sentences of $\lVert \partial L_k / \partial e_j \rVert$, the gradient reaching the
    embedding $e_j$ of input ``j`` (input 0 is ``<s>``, input ``j`` is word ``j - 1``). For the
    agreement language and $k = d + 1$ (the verb), entry 1 is what reaches the subject. Works for any
    `model` whose ``rnn`` is a batch-first recurrent module (Elman, ``nn.RNN``, ``nn.GRU``,
    ``nn.LSTM``).
    """
    if any(not 0 <= position <= len(s) for s in sentences):
        raise ValueError(
            f"expected position in 0 .. len(sentence) for every sentence, got {position}"
        )
    device = next(model.parameters()).device
    batch = sentence_batch(sentences)
    inputs = batch.inputs[:, : position + 1].to(device)
    targets = batch.targets[:, position].to(device)
    embedded = model.embedding(inputs).detach().requires_grad_()
    out = model.rnn(embedded)[0]
    loss = nn.functional.cross_entropy(model.output(out[:, -1]), targets, reduction="sum")
    (grad,) = torch.autograd.grad(loss, embedded)
    return grad.norm(dim=-1).mean(0)
