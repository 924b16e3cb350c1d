"""The in-kernel half of grading: test cells capture the student's outputs on fixed inputs.

A test cell creates a `Checker` for its task and calls `Checker.case` once per input. Each case
is emitted at once as a display output of MIME type `MIME`, holding the value as safetensors
bytes, so the cases captured before a crash or a hang survive. Nothing here decides a grade:
the grader compares captures with stored references in its own process (`seqmodels.grading.compare`),
so whatever student code does to ``torch``, ``builtins`` or this module changes no verdict.

For students, a case given ``expected=`` is also checked on the spot, and `Checker.done` says
"public checks passed — hidden checks run at grading" (or which public checks failed).
"""

from __future__ import annotations

import base64
import numbers
import traceback
from collections.abc import Callable, Mapping, Sequence

import torch
from IPython.display import display
from safetensors.torch import save

from .compare import compare_tensor

MIME = "application/vnd.seqmodels.capture+json"
PUBLIC_PASSED = "public checks passed — hidden checks run at grading"


def flatten(value: object, prefix: str = "") -> dict[str, torch.Tensor]:
    """A value as ``{path: tensor}``: tensors, numbers, and lists, tuples or dicts of them.

    ``(a, b)`` becomes ``{"0": a, "1": b}``, ``{"k": a}`` becomes ``{"k": a}``, a bare tensor
    ``{"": t}``. Anything else raises `TypeError` naming what was found.
    """
    where = prefix or "the value"
    if type(value) is torch.Tensor or isinstance(value, torch.nn.Parameter):
        return {prefix: torch.Tensor(value.detach().to("cpu", copy=True)).contiguous().clone()}
    if isinstance(value, bool | numbers.Integral) and not isinstance(value, torch.Tensor):
        return {prefix: torch.tensor(int(value), dtype=torch.int64)}
    if isinstance(value, numbers.Real) and not isinstance(value, torch.Tensor):
        return {prefix: torch.tensor(float(value), dtype=torch.float64)}
    if isinstance(value, Mapping):
        out = {}
        for key in value:
            if not isinstance(key, str) or "/" in key:
                raise TypeError(f"{where}: dict keys must be strings without '/', got {key!r}")
            out.update(flatten(value[key], f"{prefix}/{key}" if prefix else key))
        return out
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}/{i}" if prefix else str(i)))
        if not out:
            out[prefix] = torch.zeros(0)
        return out
    raise TypeError(
        f"{where}: expected a tensor, a number, or a list/tuple/dict of them, "
        f"got {type(value).__module__}.{type(value).__qualname__}"
    )


def _encode(tensors: dict[str, torch.Tensor]) -> str:
    # safetensors wants non-empty names; "" (a bare value) is stored as "."
    return base64.b64encode(save({k or ".": v for k, v in sorted(tensors.items())})).decode()


def _close(actual: dict[str, torch.Tensor], expected: object) -> bool:
    """Whether a public case matches its expected value under the grader's own policy."""
    try:
        want = flatten(expected)
    except TypeError:
        return False
    return actual.keys() == want.keys() and all(
        compare_tensor(key, actual[key], want[key]) is None for key in want
    )


class Checker:
    """Captures the outputs of one graded task; `case` once per input, then `done`.

    `functions` names the student's graded functions, so the grader can tell whether they were
    written in the notebook or taken from the course library.
    """

    def __init__(self, task: str, functions: Sequence[str] = ()):
        if not task.isidentifier():
            raise ValueError(f"expected the task name to be an identifier, got {task!r}")
        self.task, self.functions = task, list(functions)
        self.failed_public: list[str] = []
        self.n_public = 0
        display({MIME: {"task": task, "kind": "start", "origins": self._origins()}}, raw=True)

    def _origins(self) -> dict[str, str]:
        import __main__

        origins = {}
        for name in self.functions:
            fn = getattr(__main__, name, None)
            code = getattr(fn, "__code__", None)
            module = getattr(fn, "__module__", None)
            origins[name] = f"{module}:{code.co_filename if code else '?'}" if fn else "undefined"
        return origins

    def case(self, name: str, compute: Callable[[], object], expected: object = None) -> None:
        """Run ``compute()`` and capture its value as case `name`; an exception is captured too.

        With `expected`, the case is public: the student sees at once whether it matches.
        """
        record: dict[str, object] = {"task": self.task, "kind": "case", "case": name}
        try:
            value = compute()
            record["data"] = _encode(flatten(value))
        except Exception as error:  # noqa: BLE001 - the student's exception is the result
            record["error"] = f"{type(error).__name__}: {error}"
            value = None
            traceback.print_exc(limit=-3)
        display({MIME: record}, raw=True)
        if expected is not None:
            self.n_public += 1
            ok = "error" not in record and _close(flatten(value), expected)
            if not ok:
                self.failed_public.append(name)
                print(f"✗ public check failed: {name}")

    def done(self) -> None:
        """Tell the student how the public checks went (hidden ones are judged at grading)."""
        display({MIME: {"task": self.task, "kind": "done"}}, raw=True)
        if self.failed_public:
            raise AssertionError(
                f"{len(self.failed_public)} of {self.n_public} public checks failed: "
                + ", ".join(self.failed_public)
            )
        print(f"✓ {self.task}: {PUBLIC_PASSED}")
