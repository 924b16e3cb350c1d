"""Seeding: the one place the course makes runs repeatable."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and PyTorch (all devices); return a CPU generator seeded with `seed`.

    Prefer passing the returned generator explicitly (`torch.randn(..., generator=g)`) over relying on
    the global state: explicit generators keep one experiment's draws independent of another's.
    """
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"expected a non-negative integer seed, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 (seeding the legacy global state is the point)
    torch.manual_seed(seed)
    return make_generator(seed)


def make_generator(seed: int) -> torch.Generator:
    """A fresh CPU `torch.Generator` seeded with `seed`."""
    return torch.Generator(device="cpu").manual_seed(seed)
