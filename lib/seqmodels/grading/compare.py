"""The grader's half: compare captured outputs with stored references, in the grader's own process.

Tolerance policy (one table for CPU and CUDA runs; references are computed on the CPU in float64
or float32 as the task's code produces them):

| dtype of the reference | comparison                                   |
|------------------------|----------------------------------------------|
| bool, integer          | exact; the captured dtype must be bool/integer too |
| float64                | ``|a - e| <= 1e-6 + 1e-6 |e|``                |
| float32, float16, bf16 | ``|a - e| <= 1e-4 + 1e-4 |e|`` (a CUDA float32 run with TF32 off is well inside) |

Feedback names the case, the expected and actual shape and dtype, the largest absolute and relative
error and the index where it occurs — never the reference values.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import torch
from safetensors.torch import load

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-6, 1e-6),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
}


@dataclass(frozen=True)
class Verdict:
    """The result of one case: passed or not, and a message safe to show the student."""

    case: str
    passed: bool
    message: str


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


def compare_tensor(path: str, actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    """``None`` if `actual` matches `expected` under the policy; else what differs (no values)."""
    what = _describe(path)
    if actual.shape != expected.shape:
        return (
            f"{what}: expected shape {tuple(expected.shape)}, got {tuple(actual.shape)} "
            f"(dtype {actual.dtype})"
        )
    if not expected.is_floating_point():
        if actual.is_floating_point() or actual.is_complex():
            return f"{what}: expected an integer/bool tensor ({expected.dtype}), got {actual.dtype}"
        wrong = actual.long() != expected.long()
        if wrong.any():
            n, first = int(wrong.sum()), int(wrong.flatten().nonzero()[0])
            return (
                f"{what}: {n} of {wrong.numel()} entries differ (exact match required), "
                f"first{_where(first, expected.shape)}"
            )
        return None
    if not actual.is_floating_point():
        actual = actual.double()
    atol, rtol = TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
    if actual.dtype in TOLERANCES:
        atol, rtol = max(atol, TOLERANCES[actual.dtype][0]), max(rtol, TOLERANCES[actual.dtype][1])
    a, e = actual.double(), expected.double()
    if bool((a.isnan() != e.isnan()).any()):
        return f"{what}: NaN where the reference has a number (or the reverse)"
    both = ~(a.isnan() & e.isnan())
    err = torch.where(both, (a - e).abs(), torch.zeros_like(a))
    err = torch.where(torch.isinf(a) & (a == e), torch.zeros_like(err), err)
    if bool((err <= atol + rtol * e.abs()).all()):
        return None
    i = int(err.flatten().argmax()) if err.numel() else 0
    rel = err.flatten()[i] / e.flatten()[i].abs() if e.flatten()[i] != 0 else float("inf")
    return (
        f"{what}: largest absolute error {float(err.flatten()[i]):.3g} "
        f"(relative {float(rel):.3g}){_where(i, expected.shape)}; shape "
        f"{tuple(expected.shape)}, expected dtype {expected.dtype}, got {actual.dtype}; "
        f"tolerance {atol:g} + {rtol:g}·|expected|"
    )


def judge(
    case: str, captured: dict[str, object] | None, reference: dict[str, torch.Tensor]
) -> Verdict:
    """The verdict on one case from its capture record (or ``None`` if it never ran)."""
    if captured is None:
        return Verdict(case, False, "not run (the cell stopped before this case: see above)")
    if "error" in captured:
        return Verdict(case, False, f"your code raised {captured['error']}")
    try:
        actual = decode(str(captured["data"]))
    except Exception:  # noqa: BLE001 - any malformed capture is a failed case
        return Verdict(case, False, "the captured output could not be read")
    if actual.keys() != reference.keys():
        expect = sorted(reference) if reference.keys() != {""} else "a single tensor or number"
        got = sorted(actual) if actual.keys() != {""} else "a single tensor or number"
        return Verdict(case, False, f"expected the structure {expect}, got {got}")
    problems = [p for k in sorted(reference) if (p := compare_tensor(k, actual[k], reference[k]))]
    if problems:
        return Verdict(case, False, "; ".join(problems))
    return Verdict(case, True, "matches the reference")
