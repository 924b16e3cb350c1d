"""Padding: which steps of a padded batch are real tokens (shared by every recurrent module)."""

from __future__ import annotations

import torch


def lengths_to_mask(
    lengths: torch.Tensor | None, mask: torch.Tensor | None, batch: int, time: int
) -> torch.Tensor | None:
    """A boolean `(batch, time)` mask (True = a real token) from `lengths: (batch,)` or `mask`."""
    if lengths is not None and mask is not None:
        raise ValueError("expected lengths or mask, not both")
    if lengths is not None:
        lengths = torch.as_tensor(lengths)
        if lengths.shape != (batch,) or lengths.is_floating_point():
            raise ValueError(
                f"expected integer lengths of shape ({batch},), got {lengths.dtype} {tuple(lengths.shape)}"
            )
        if lengths.numel() and (lengths.min() < 0 or lengths.max() > time):
            raise ValueError(f"expected lengths in 0 .. {time}, got {lengths.tolist()}")
        return torch.arange(time, device=lengths.device) < lengths[:, None]
    if mask is not None:
        if mask.shape != (batch, time) or mask.dtype != torch.bool:
            raise ValueError(
                f"expected a bool mask of shape ({batch}, {time}), got {mask.dtype} {tuple(mask.shape)}"
            )
    return mask
