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

from .capture import MIME, TRACE_LIMIT

_NAME = {"type": "string", "maxLength": 300}
_NAMES = {"type": "array", "items": _NAME, "maxItems": TRACE_LIMIT}
SCHEMA = {
    "type": "object",
    "required": ["task", "kind"],
    "additionalProperties": False,
    "properties": {
        "task": {"type": "string", "maxLength": 100},
        "kind": {"enum": ["start", "case", "done"]},
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
        "trace": {
            "type": "object",
            "required": ["ops", "calls", "intact"],
            "additionalProperties": False,
            "properties": {"ops": _NAMES, "calls": _NAMES, "intact": {"type": "boolean"}},
        },
    },
}
_VALIDATOR = Draft202012Validator(SCHEMA)


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
