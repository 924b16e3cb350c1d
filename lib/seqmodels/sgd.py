r"""Stochastic gradient descent, $\theta^{s+1} = \theta^s - \eta\,\nabla_\theta L$, for torch models (Chapter 2).

Each step draws a mini-batch, computes the mean cross-entropy $L$ on it (nats per token), its
gradient by one backward pass, and moves every parameter a step of size $\eta$ (the learning rate)
against it. :func:`seqmodels.autodiff.sgd_step` is the same update for the course's own engine.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from .device import get_device
from .train import History, evaluate_nll


@torch.no_grad()
def sgd_update_(parameters: Iterable[torch.Tensor], lr: float) -> None:
    r"""$\theta \leftarrow \theta - \eta\,\partial L/\partial\theta$ in place for each parameter with a ``grad``.

    The ``grad`` is cleared afterwards (set to ``None``), ready for the next backward pass.
    """
    for p in parameters:
        if p.grad is None:
            continue
        p -= lr * p.grad
        p.grad = None


def batch_indices(
    n_examples: int, batch_size: int, steps: int, generator: torch.Generator
) -> torch.Tensor:
    """`(steps, batch_size)` example indices drawn uniformly with replacement, one row per step."""
    if n_examples < 1 or batch_size < 1 or steps < 0:
        raise ValueError(
            f"expected n_examples >= 1, batch_size >= 1, steps >= 0, got {n_examples}, {batch_size}, {steps}"
        )
    return torch.randint(n_examples, (steps, batch_size), generator=generator)


def sgd_losses(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    batches: Iterable[torch.Tensor],
    lr: float,
) -> list[float]:
    """One SGD step on mean cross-entropy per index tensor in `batches`; the loss of each step (before its update).

    `inputs: (N, ...)`, `targets: (N,)` on the CPU; the batches move to the model's device.
    """
    device = next(model.parameters()).device
    model.train()
    losses = []
    for idx in batches:
        loss = F.cross_entropy(model(inputs[idx].to(device)), targets[idx].to(device))
        loss.backward()
        sgd_update_(model.parameters(), lr)
        losses.append(loss.item())
    return losses


def train_sgd(
    model: nn.Module,
    train: tuple[torch.Tensor, torch.Tensor],
    valid: tuple[torch.Tensor, torch.Tensor],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    generator: torch.Generator,
    eval_every: int | None = None,
    device: torch.device | None = None,
) -> History:
    """Minimise mean cross-entropy with plain SGD (:func:`sgd_update_`) on random mini-batches.

    `train` and `valid` are ``(inputs: (N, ...), targets: (N,))`` pairs on the CPU. Held-out loss
    (nats per token) is measured every `eval_every` steps (default: only at the end) and at the end.
    A run whose training loss stops being finite ends there.
    """
    if steps < 1:
        raise ValueError(f"expected steps >= 1, got {steps}")
    if lr <= 0:
        raise ValueError(f"expected a positive learning rate, got {lr}")
    model.to(device or get_device())
    inputs, targets = train
    batches = batch_indices(len(targets), batch_size, steps, generator)
    every = eval_every or steps
    history = History()
    start = time.perf_counter()
    for first in range(0, steps, every):
        chunk = batches[first : first + every]
        losses = sgd_losses(model, inputs, targets, chunk, lr)
        history.step_loss += losses
        history.tokens_seen += batch_size * len(losses)
        total, n = evaluate_nll(model, *valid)
        history.eval_steps.append(len(history.step_loss))
        history.eval_loss.append(total / n)
        if not all(map(math.isfinite, losses)):
            break
    history.seconds = time.perf_counter() - start
    return history
