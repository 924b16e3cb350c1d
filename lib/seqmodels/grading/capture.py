"""The in-kernel half of grading: test cells capture the student's outputs on fixed inputs.

A test cell creates a `Checker` for its task and calls `Checker.case` once per input. Each case
is emitted at once as a display output of MIME type `MIME`, holding the value as safetensors
bytes, so the cases captured before a crash or a hang survive. Nothing here decides a grade:
the grader compares captures with stored references in its own process (`seqmodels.grading.compare`),
so whatever student code does to ``torch``, ``builtins`` or this module changes no verdict.

For students, a case given ``expected=`` is also checked on the spot, and `Checker.done` says
"public checks passed — hidden checks run at grading" (or which public checks failed).

A task that forbids tools (``forbidden=``, rule names of `seqmodels.grading.rules`) says so in its
start record; the references' manifest stores the names. What ran is not traced here: the grader
opens a trace window around the whole test cell (`seqmodels.grading.trace_window`), and matches what
the window saw against the rules in its own process.
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
from .rules import rules_named

MIME = "application/vnd.seqmodels.capture+json"
PUBLIC_PASSED = "public checks passed — hidden checks run at grading"


def flatten(value: object, prefix: str = "") -> dict[str, torch.Tensor]:
    """A value as ``{path: tensor}``: tensors, numbers, and lists, tuples or dicts of them.

    ``(a, b)`` becomes ``{"0": a, "1": b}``, ``{"k": a}`` becomes ``{"k": a}``, a bare tensor
    ``{"": t}``. Anything else raises `TypeError` naming what was found.
    """
    where = prefix or "the value"
    if type(value) is torch.Tensor or isinstance(value, torch.nn.Parameter):
        return {prefix: torch.Tensor(value.detach()).to("cpu", copy=True).contiguous()}
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


def tensor_devices(value: object, prefix: str = "") -> dict[str, str]:
    """``{path: device type}`` of the tensors in `value` (numbers have no device)."""
    if isinstance(value, torch.Tensor):
        return {prefix: value.device.type}
    if isinstance(value, Mapping):
        items = [(f"{prefix}/{k}" if prefix else str(k), v) for k, v in value.items()]
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = [(f"{prefix}/{i}" if prefix else str(i), v) for i, v in enumerate(value)]
    else:
        return {}
    return {
        path: device for key, item in items for path, device in tensor_devices(item, key).items()
    }


def public_problems(actual: dict[str, torch.Tensor], expected: object) -> list[str]:
    """What differs between a public case's result and its expected value (the grader's policy)."""
    try:
        want = flatten(expected)
    except TypeError as error:
        return [f"the expected value cannot be compared: {error}"]
    if actual.keys() != want.keys():
        return [f"expected the structure {sorted(want)}, got {sorted(actual)}"]
    return [p.detail for key in sorted(want) if (p := compare_tensor(key, actual[key], want[key]))]


def origins(functions: Sequence[str]) -> dict[str, str]:
    """Where each named function of the notebook comes from (``module:file``, or "undefined"), so
    the grader can tell the student's own code from the course library's."""
    import __main__

    found = {}
    for name in functions:
        fn = getattr(__main__, name, None)
        code = getattr(fn, "__code__", None)
        module = getattr(fn, "__module__", None)
        found[name] = f"{module}:{code.co_filename if code else '?'}" if fn else "undefined"
    return found


class Checker:
    """Captures the outputs of one graded task; `case` once per input, then `done`.

    `functions` names the student's graded functions, so the grader can tell whether they were
    written in the notebook or taken from the course library. `forbidden` names the rules of
    `seqmodels.grading.rules` the task forbids (e.g. ``["autograd"]`` for a gradient to be derived
    by hand): the grader then traces the whole test cell (`seqmodels.grading.trace_window`). Only
    the solution's run counts: the references' manifest stores the names.
    """

    def __init__(self, task: str, functions: Sequence[str] = (), forbidden: Sequence[str] = ()):
        if not task.isidentifier():
            raise ValueError(f"expected the task name to be an identifier, got {task!r}")
        rules_named(list(forbidden))  # an unknown rule is the author's error: say so now
        self.task, self.functions, self.forbidden = task, list(functions), sorted(forbidden)
        self.failed_public: list[str] = []
        self.n_public = 0
        start: dict[str, object] = {
            "task": task,
            "kind": "start",
            "origins": origins(self.functions),
        }
        if forbidden:
            start["forbidden"] = self.forbidden
        display({MIME: start}, raw=True)

    def case(
        self,
        name: str,
        compute: Callable[[], object],
        expected: object = None,
        device: str | torch.device | None = None,
        check: tuple[str, dict] | None = None,
    ) -> None:
        """Run ``compute()`` and capture its value as case `name`; an exception is captured too.

        With `expected`, the case is public: the student sees at once whether it matches, and
        how not. With `device`, every tensor in the result must be on that device (the inputs').
        With `check` (``(name, settings)`` of a property of `seqmodels.grading.properties`), the
        grader judges the case by that property of the captured values, not against the
        reference's; only the solution's run counts (the manifest stores the name and settings).
        """
        record: dict[str, object] = {"task": self.task, "kind": "case", "case": name}
        if device is not None:
            record["device"] = torch.device(device).type
        if check is not None:
            from .properties import PROPERTIES

            if check[0] not in PROPERTIES:  # the author's error: say so now
                raise ValueError(f"unknown property {check[0]!r}; known: {sorted(PROPERTIES)}")
            record["check"] = {"name": check[0], "settings": dict(check[1])}
        try:
            value = compute()
            record["data"] = _encode(flatten(value))
            record["devices"] = tensor_devices(value)
        except Exception as error:  # noqa: BLE001 - the student's exception is the result
            record["error"] = f"{type(error).__name__}: {error}"
            value = None
            traceback.print_exc(limit=-3)
        display({MIME: record}, raw=True)
        if expected is not None:
            self.n_public += 1
            if "error" in record:
                problems = [f"your code raised {record['error']}"]
            else:
                problems = public_problems(flatten(value), expected)
                wrong = set(record["devices"].values()) - {record.get("device", "")}
                if "device" in record and wrong:
                    problems.append(f"the result is on {sorted(wrong)}, not on {record['device']}")
            if problems:
                self.failed_public.append(name)
                print(f"✗ public check failed: {name}: " + "; ".join(problems))

    def done(self) -> None:
        """Tell the student how the public checks went (hidden ones are judged at grading)."""
        display({MIME: {"task": self.task, "kind": "done"}}, raw=True)
        if self.failed_public:
            raise AssertionError(
                f"{len(self.failed_public)} of {self.n_public} public checks failed: "
                + ", ".join(self.failed_public)
            )
        print(f"✓ {self.task}: {PUBLIC_PASSED}")
