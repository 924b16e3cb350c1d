"""Training and evaluation loops shared by the chapters' neural language models."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .device import get_device


@dataclass
class History:
    """What a training run recorded: the training loss of every step, and held-out loss at checkpoints.

    Losses are mean cross-entropies in nats per token; ``grad_norms`` (where a trainer records them)
    are the global gradient norms of every step, before any clipping.
    """

    step_loss: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    tokens_seen: int = 0

    @property
    def best_eval_perplexity(self) -> float:
        """``exp`` of the lowest held-out loss recorded."""
        return math.exp(min(self.eval_loss)) if self.eval_loss else math.nan


@torch.no_grad()
def target_log_probs(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 4096
) -> torch.Tensor:
    r"""$\log p(y_i \mid x_i)$ for every pair: ``(N,)`` float64 on the CPU, for `inputs: (N, ...)`, `targets: (N,)`."""
    if len(inputs) != len(targets):
        raise ValueError(
            f"expected as many inputs as targets, got {len(inputs)} and {len(targets)}"
        )
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    for i in range(0, len(targets), batch_size):
        logits = model(inputs[i : i + batch_size].to(device))
        log_probs = torch.log_softmax(logits, dim=-1)
        picked = log_probs.gather(1, targets[i : i + batch_size, None].to(device))[:, 0]
        out.append(picked.double().cpu())
    model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


def evaluate_nll(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 4096
) -> tuple[float, int]:
    """Total negative log-likelihood (nats) of `targets: (N,)` given `inputs: (N, ...)`, and N."""
    return -target_log_probs(model, inputs, targets, batch_size).sum().item(), len(targets)


def train_lm(
    model: nn.Module,
    train: tuple[torch.Tensor, torch.Tensor],
    valid: tuple[torch.Tensor, torch.Tensor],
    *,
    steps: int,
    batch_size: int = 256,
    lr: float = 1e-3,
    generator: torch.Generator,
    eval_every: int = 200,
    device: torch.device | None = None,
    progress: bool = True,
) -> History:
    """Minimise mean cross-entropy with Adam on random mini-batches drawn by `generator`.

    `train` and `valid` are ``(inputs: (N, ...), targets: (N,))`` pairs on the CPU. Held-out loss is
    measured every `eval_every` steps and at the end. A tqdm bar shows progress and the latest losses.
    """
    if steps < 1 or batch_size < 1:
        raise ValueError(f"expected steps >= 1 and batch_size >= 1, got {steps} and {batch_size}")
    device = device or get_device()
    model.to(device).train()
    inputs, targets = train
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history = History()
    start = time.perf_counter()
    bar = tqdm(range(1, steps + 1), disable=not progress, desc="training", unit="step")
    for step in bar:
        idx = torch.randint(len(targets), (batch_size,), generator=generator)
        logits = model(inputs[idx].to(device))
        loss = F.cross_entropy(logits, targets[idx].to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history.step_loss.append(loss.item())
        history.tokens_seen += batch_size
        if step % eval_every == 0 or step == steps:
            total, n = evaluate_nll(model, *valid)
            history.eval_steps.append(step)
            history.eval_loss.append(total / n)
            bar.set_postfix(train=f"{loss.item():.3f}", valid=f"{total / n:.3f}")
    history.seconds = time.perf_counter() - start
    return history
