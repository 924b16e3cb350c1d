"""Device selection and deterministic numerics: the one place the course decides where tensors live."""

from __future__ import annotations

import os

import torch


def get_device(prefer: str | None = None) -> torch.device:
    """The device to compute on: `prefer` if given, else CUDA when present, else CPU.

    The environment variable ``SEQMODELS_DEVICE`` (e.g. ``cpu``) overrides the automatic choice.
    """
    choice = prefer or os.environ.get("SEQMODELS_DEVICE")
    if choice:
        device = torch.device(choice)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {choice!r} was requested but CUDA is not available")
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def set_deterministic(enabled: bool = True) -> None:
    """Turn off TF32 and ask PyTorch for deterministic kernels, so CPU and CUDA runs agree closely."""
    torch.backends.cuda.matmul.allow_tf32 = not enabled
    torch.backends.cudnn.allow_tf32 = not enabled
    torch.backends.cudnn.benchmark = not enabled
    torch.backends.cudnn.deterministic = enabled
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled, warn_only=True)
