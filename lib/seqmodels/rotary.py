r"""Rotary position embeddings (RoPE; Su et al. 2021): positions as rotations of queries, keys.

Each head's ``d_h`` dimensions form ``d_h / 2`` pairs; pair $i$ of the query or key at position
$p$ is rotated by the angle $p\,\theta_i$, with $\theta_i = b^{-2i/d_h}$ (base $b = 10000$):

$$\begin{pmatrix} x'_{i} \\ x'_{i + d_h/2} \end{pmatrix} =
\begin{pmatrix} \cos p\theta_i & -\sin p\theta_i \\
                \sin p\theta_i & \cos p\theta_i \end{pmatrix}
\begin{pmatrix} x_{i} \\ x_{i + d_h/2} \end{pmatrix},
\qquad \text{i.e.} \quad x' = x \odot \cos + \mathrm{rotate\_half}(x) \odot \sin .$$

A rotation keeps lengths, and $(R_m q)^\top (R_n k) = q^\top R_{n-m} k$: the score of a query at
$m$ and a key at $n$ depends on the positions only through $n - m$.

**Pairing convention.** Here, as in Llama in HuggingFace ``transformers`` ("rotate half"), the
pairs are dimension $i$ and dimension $i + d_h/2$: the first and second halves of the head. The
paper (and Meta's original Llama code) pairs neighbours, $(x_{2i}, x_{2i+1})$. The two are
the same rotation after a fixed permutation of the dimensions (evens first, then odds), which
learned projections absorb; weights trained in one convention need that permutation of their
$W^Q$, $W^K$ rows to be used in the other.

Shapes: queries and keys ``(B, H, T, d_h)``; the tables ``cos, sin: (T, d_h)`` for positions
``offset .. offset + T - 1`` (the offset is where new positions start after a cache).
"""

from __future__ import annotations

import torch


def _check_tables(T: int, d_head: int, base: float, offset: int) -> None:
    for name, value, least in (("T", T, 0), ("d_head", d_head, 2), ("offset", offset, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"expected {name} to be an integer ≥ {least}, got {value!r}")
    if d_head % 2:
        raise ValueError(f"expected an even d_head (dimensions come in pairs), got {d_head}")
    if not base > 1:
        raise ValueError(f"expected a base > 1, got {base!r}")


def rotary_tables(
    T: int,
    d_head: int,
    base: float = 10000.0,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""$\cos p\theta_i$ and $\sin p\theta_i$, $\theta_i = b^{-2i/d_h}$, for positions
    $p$ = ``offset .. offset + T - 1``: ``(cos, sin)``, each ``(T, d_h)``, the $d_h/2$ angles
    repeated for the two halves. Computed in float64, returned in `dtype`."""
    _check_tables(T, d_head, base, offset)
    f64 = dict(dtype=torch.float64, device=device)
    theta = base ** (-torch.arange(0, d_head, 2, **f64) / d_head)  # (d_h / 2,)
    positions = torch.arange(offset, offset + T, **f64)
    angles = torch.outer(positions, theta)  # p theta_i: (T, d_h / 2)
    angles = torch.cat((angles, angles), dim=-1)  # pair i is dimensions i and i + d_h/2
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    r"""$(x_1, x_2) \mapsto (-x_2, x_1)$ for the two halves of ``x: (..., d_h)``."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Eq. (eq-ch8-rope) on ``q, k: (B, H, T, d_h)`` with ``cos, sin: (T, d_h)``.

    $x' = x \odot \cos + \mathrm{rotate\_half}(x) \odot \sin$, the tables from
    :func:`rotary_tables`: pair $i$ is dimensions $i$ and $i + d_h/2$."""
    _check_rotary_inputs(q, k, cos, sin)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def _check_rotary_inputs(q, k, cos, sin) -> None:
    """Refuse q, k and tables whose shapes do not fit ``(B, H, T, d_h)`` and ``(T, d_h)``."""
    if q.ndim != 4 or k.ndim != 4 or q.shape[-2:] != k.shape[-2:]:
        raise ValueError(
            "expected q and k of shape (B, H, T, d_h) with the same T and d_h, "
            f"got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if cos.shape != q.shape[-2:] or sin.shape != q.shape[-2:]:
        raise ValueError(
            f"expected cos and sin of shape {tuple(q.shape[-2:])}, "
            f"got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
