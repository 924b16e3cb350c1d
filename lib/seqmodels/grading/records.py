"""The grader's reading of a test cell's outputs: capture records, validated and bounded.

Everything a student's kernel emits is data from an untrusted program. Of a test cell's outputs the
grader keeps only ``display_data`` outputs holding one capture record (MIME type
`seqmodels.grading.capture.MIME`) that validates against `SCHEMA` (JSON Schema: the fields a
`Checker` writes, each of a bounded size) and that belongs to the cell's task. Every other output —
text, HTML, images, errors, records of another shape — is ignored for grading and never copied into
the graded notebook (`seqmodels.grading.preprocessors.JudgeCaptures` writes those outputs itself).
"""

from __future__ import annotations

from collections.abc import Iterator

from jsonschema import Draft202012Validator

from .capture import MIME
from .trace_window import EVIDENCE, LIMIT, NAME_LENGTH

_NAME = {"type": "string", "maxLength": NAME_LENGTH}
_NAMES = {"type": "array", "items": _NAME, "maxItems": LIMIT}
_EVIDENCE = {"type": "array", "items": {"type": "string", "maxLength": 300}, "maxItems": EVIDENCE}
SCHEMA = {
    "type": "object",
    "required": ["task", "kind"],
    "additionalProperties": False,
    "properties": {
        "task": {"type": "string", "maxLength": 100},
        "kind": {"enum": ["start", "case", "done", "window", "curve", "rows", "tokenizer"]},
        "case": {"type": "string", "maxLength": 500},
        "data": {"type": "string", "maxLength": 8_000_000},
        "error": {"type": "string", "maxLength": 4000},
        "device": {"type": "string", "maxLength": 20},
        "devices": {
            "type": "object",
            "maxProperties": 10_000,
            "additionalProperties": {"type": "string", "maxLength": 20},
        },
        "origins": {
            "type": "object",
            "maxProperties": 20,
            "additionalProperties": {"type": "string", "maxLength": 1000},
        },
        "forbidden": {"type": "array", "items": _NAME, "maxItems": 20},
        # a case judged by a property of its captured values (`seqmodels.grading.properties`):
        # its name and settings, read from the solution's run only
        "check": {
            "type": "object",
            "required": ["name", "settings"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "maxLength": 100},
                "settings": {"type": "object", "maxProperties": 20},
            },
        },
        # a training task (`seqmodels.grading.training`): its specification (read from the
        # solution's run only), and the answer to the grader's evaluation request
        "training": {"type": "object", "maxProperties": 10},
        "call": {"type": "string", "maxLength": 20},
        "chunk": {"type": "integer", "minimum": 0, "maximum": 10_000},
        # a trace window's record (`seqmodels.grading.trace_window`), which the grader requests
        "nonce": {"type": "string", "maxLength": 64},
        "opened": {"type": "integer", "minimum": 0},
        "ops": _NAMES,
        "calls": _NAMES,
        "cut": {"type": "boolean"},
        "intact": {"type": "boolean"},
        "disturbed": _EVIDENCE,
        "processes": _EVIDENCE,
        "started": _EVIDENCE,
        "threads": {"type": "integer", "minimum": 0},
    },
}
_VALIDATOR = Draft202012Validator(SCHEMA)
WINDOW = [
    "nonce",
    "opened",
    "ops",
    "calls",
    "cut",
    "intact",
    "disturbed",
    "processes",
    "started",
    "threads",
]


def window_record(outputs: list, task: str, nonce: str) -> dict | None:
    """The trace window's record among the outputs of the grader's closing request: valid, of
    `task`, with every field, and opened by the grader's own `nonce`; None if there is none."""
    for record in capture_records(outputs, task):
        if record["kind"] == "window" and all(k in record for k in WINDOW):
            return record if record["nonce"] == nonce else None
    return None


def capture_records(outputs: list, task: str | None = None) -> Iterator[dict]:
    """The valid capture records among `outputs`, in order (of `task` only, if given)."""
    for output in outputs:
        if not isinstance(output, dict) or output.get("output_type") != "display_data":
            continue
        data = output.get("data")
        if not isinstance(data, dict) or list(data) != [MIME]:
            continue
        record = data.get(MIME)
        if _VALIDATOR.is_valid(record) and (task is None or record["task"] == task):
            yield record
