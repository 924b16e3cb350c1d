"""The grader's half: compare captured outputs with stored references, in the grader's own process.

Tolerance policy (one table for CPU and CUDA runs; references are computed on the CPU). The
reference's dtype is the task's specification: a result of another dtype fails, saying so, and the
tolerance is always the reference dtype's, never widened by the student's dtype.

| dtype of the reference | comparison                                                    |
|------------------------|---------------------------------------------------------------|
| bool, integer          | same dtype, every entry equal                                 |
| float64                | same dtype, ``|a - e| <= 1e-6 + 1e-6 |e|``                     |
| float32                | same dtype, ``|a - e| <= 1e-4 + 1e-4 |e|`` (CUDA, TF32 off, is well inside) |
| float16, bfloat16      | same dtype, ``|a - e| <= 1e-2 + 1e-2 |e|``                     |

NaN and ±inf in a reference must appear at exactly the same positions, with the same sign.

Every mismatch has two descriptions: `Mismatch.summary`, safe for the feedback of a hidden case
(expected shape and dtype, what kind of difference — never a value, an index or anything the
student's code chose), and `Mismatch.detail`, with the largest error and where it is, which the
student sees in the notebook for public cases only (whose expected values are in the notebook).
"""

from __future__ import annotations

import base64
import builtins
from dataclasses import dataclass

import torch
from safetensors.torch import load

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-6, 1e-6),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}
DEVICE_TYPES = {"cpu", "cuda", "mps", "xpu"}
# exception names that feedback may show; any other name is student-chosen text
SAFE_EXCEPTIONS = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
} | {"OutOfMemoryError", "KernelDied", "CellTimeoutError", "DeadKernelError"}


@dataclass(frozen=True)
class Verdict:
    """The result of one case: passed or not, and a message safe to show the student."""

    case: str
    passed: bool
    message: str


@dataclass(frozen=True)
class Mismatch:
    """How a result differs from its reference: `summary` for feedback, `detail` for public checks."""

    summary: str
    detail: str


def exception_name(error: str) -> str:
    """The exception's type name from ``"TypeError: ..."`` if it is a built-in one, else a phrase."""
    name = error.split(":", 1)[0].strip().rsplit(".", 1)[-1]
    return name if name in SAFE_EXCEPTIONS else "an exception of its own type"


def decode(data: str) -> dict[str, torch.Tensor]:
    """Captured base64 safetensors → ``{path: tensor}`` (``"."`` is a bare value, path ``""``)."""
    tensors = load(base64.b64decode(data, validate=True))
    return {("" if k == "." else k): v for k, v in tensors.items()}


def _describe(path: str) -> str:
    return "the value" if path == "" else f"element {path!r}"


def _where(index: int, shape: torch.Size) -> str:
    if len(shape) == 0:
        return ""
    coords = []
    for size in reversed(shape):
        coords.append(index % size)
        index //= size
    return f" at index {tuple(reversed(coords))}"


def compare_tensor(path: str, actual: torch.Tensor, expected: torch.Tensor) -> Mismatch | None:
    """``None`` if `actual` matches `expected` under the policy; else how it differs."""
    what = _describe(path)
    spec = f"expected shape {tuple(expected.shape)}, dtype {str(expected.dtype).removeprefix('torch.')}"
    if actual.shape != expected.shape:
        return Mismatch(
            f"{what}: wrong shape ({spec})",
            f"{what}: expected shape {tuple(expected.shape)}, got {tuple(actual.shape)}",
        )
    if actual.dtype != expected.dtype:
        text = f"{what}: wrong dtype ({spec}, got {str(actual.dtype).removeprefix('torch.')})"
        return Mismatch(text, text)
    if not expected.is_floating_point():
        wrong = actual != expected
        if not wrong.any():
            return None
        n, first = int(wrong.sum()), int(wrong.flatten().nonzero()[0])
        return Mismatch(
            f"{what}: wrong values, exact match required ({spec})",
            f"{what}: {n} of {wrong.numel()} entries differ (exact match required), "
            f"first{_where(first, expected.shape)}",
        )
    a, e = actual.double(), expected.double()
    special = e.isnan() | e.isinf()
    same_special = (a.isnan() & e.isnan()) | (a.isinf() & e.isinf() & (a == e))
    if bool((special != same_special).any() | (~special & ~a.isfinite()).any()):
        return Mismatch(
            f"{what}: NaN or ±inf where the reference has none, or the reverse ({spec})",
            f"{what}: NaN or ±inf in different positions than the reference",
        )
    atol, rtol = TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
    err = torch.where(special, torch.zeros_like(a), (a - e).abs())
    bound = atol + rtol * torch.where(special, torch.zeros_like(e), e.abs())
    if bool((err <= bound).all()):
        return None
    i = int((err - bound).flatten().argmax())
    rel = err.flatten()[i] / e.flatten()[i].abs() if e.flatten()[i] != 0 else float("inf")
    return Mismatch(
        f"{what}: values outside the tolerance {atol:g} + {rtol:g}·|expected| ({spec})",
        f"{what}: {int((err > bound).sum())} of {err.numel()} entries outside the tolerance "
        f"{atol:g} + {rtol:g}·|expected|; largest absolute error {float(err.flatten()[i]):.3g} "
        f"(relative {float(rel):.3g}){_where(i, expected.shape)}",
    )


def judge(
    case: str, captured: dict[str, object] | None, reference: dict[str, torch.Tensor]
) -> Verdict:
    """The verdict on one case from its capture record (or ``None`` if it never ran).

    The message never holds a value, an index or text the student's code produced.
    """
    if captured is None:
        return Verdict(case, False, "not run (the cell stopped before this case)")
    if "error" in captured:
        return Verdict(case, False, f"your code raised {exception_name(str(captured['error']))}")
    try:
        actual = decode(str(captured["data"]))
    except Exception:  # noqa: BLE001 - any malformed capture is a failed case
        return Verdict(case, False, "the captured output could not be read")
    if actual.keys() != reference.keys():
        expect = sorted(reference) if reference.keys() != {""} else "a single tensor or number"
        return Verdict(case, False, f"wrong structure: expected {expect}")
    problems = [p for k in sorted(reference) if (p := compare_tensor(k, actual[k], reference[k]))]
    device = captured.get("device")
    devices = captured.get("devices")
    if (
        device in DEVICE_TYPES
        and isinstance(devices, dict)
        and {str(d) for d in devices.values()} - {device}
    ):
        problems.append(Mismatch(f"the result is not on the inputs' device ({device})", ""))
    if problems:
        return Verdict(case, False, "; ".join(p.summary for p in problems))
    return Verdict(case, True, "matches the reference")
