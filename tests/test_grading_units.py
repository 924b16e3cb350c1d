"""Units of the grading machinery: capture, comparison policy, hidden-test stripping, library-use flags."""

import math

import pytest
import torch

from seqmodels.grading.capture import _encode, flatten
from seqmodels.grading.compare import compare_tensor, decode, judge
from seqmodels.grading.preprocessors import strip_hidden_tests
from seqmodels.grading.static_reading import _forbidden_names

FORBIDDEN = ["seqmodels.ngram", "seqmodels.metrics"]


def test_flatten_turns_nested_results_into_named_tensors():
    out = flatten({"probs": torch.ones(2), "stats": (3, 2.5, True)})
    assert sorted(out) == ["probs", "stats/0", "stats/1", "stats/2"]
    assert out["stats/0"].dtype == torch.int64 and out["stats/1"].dtype == torch.float64
    assert decode(_encode(out)).keys() == out.keys()
    assert list(flatten(torch.zeros(3))) == [""]


class Liar:
    def __eq__(self, other):
        return True


class SneakyTensor(torch.Tensor):
    pass


@pytest.mark.parametrize(
    "value", [Liar(), "text", torch.zeros(2).as_subclass(SneakyTensor), {1: 2}]
)
def test_flatten_refuses_anything_but_plain_tensors_numbers_and_containers(value):
    with pytest.raises(TypeError, match="expected|keys"):
        flatten(value)


def test_integers_must_match_exactly_and_keep_their_dtype():
    expected = torch.tensor([[1, 2], [3, 4]])
    assert compare_tensor("", expected.clone(), expected) is None
    wrong = compare_tensor("", torch.tensor([[1, 2], [3, 5]]), expected)
    assert "1 of 4 entries differ" in wrong.detail and "(1, 1)" in wrong.detail
    assert "exact match" in wrong.summary and "(1, 1)" not in wrong.summary
    assert "wrong dtype" in compare_tensor("", expected.double(), expected).summary
    assert "int32" in compare_tensor("", expected.int(), expected).summary


def test_floats_follow_the_reference_dtypes_tolerance_and_feedback_hides_values():
    expected = torch.tensor([1.0, 123.456789, -2.0], dtype=torch.float64)
    assert compare_tensor("", expected + 1e-9, expected) is None
    wrong = expected.clone()
    wrong[1] += 0.5
    mismatch = compare_tensor("p", wrong, expected)
    assert "largest absolute error 0.5" in mismatch.detail and "index (1,)" in mismatch.detail
    for text in (mismatch.summary, mismatch.detail):
        assert "123.45" not in text and "123.95" not in text
    assert "0.5" not in mismatch.summary and "(1,)" not in mismatch.summary
    assert "expected shape (3,)" in compare_tensor("", torch.zeros(4), expected).summary


def test_another_dtype_fails_and_never_widens_the_tolerance():
    """A wrong formula in float16 passed under float16's tolerance before; now the dtype fails."""
    expected = torch.tensor([0.25, 0.5], dtype=torch.float64)
    for dtype in (torch.float16, torch.float32, torch.bfloat16):
        mismatch = compare_tensor("", expected.to(dtype), expected)
        assert mismatch is not None and "wrong dtype" in mismatch.summary, dtype
    assert "float64" in compare_tensor("", expected.half(), expected).summary


@pytest.mark.parametrize(
    ("actual", "passes"),
    [
        ([math.inf, -math.inf, math.nan, 1.0], True),
        ([1e308, -math.inf, math.nan, 1.0], False),  # finite where the reference is +inf
        ([math.inf, math.inf, math.nan, 1.0], False),  # wrong sign of inf
        ([math.inf, -math.inf, 0.0, 1.0], False),  # a number where the reference has NaN
        ([math.inf, -math.inf, math.nan, math.nan], False),  # NaN where it has a number
        ([math.inf, -math.inf, math.nan, math.inf], False),
    ],
)
def test_inf_and_nan_compare_exactly_by_position(actual, passes):
    expected = torch.tensor([math.inf, -math.inf, math.nan, 1.0], dtype=torch.float64)
    result = compare_tensor("", torch.tensor(actual, dtype=torch.float64), expected)
    assert (result is None) == passes


def test_judge_reports_cases_that_never_ran_raised_or_have_the_wrong_structure():
    reference = {"": torch.tensor(1.0)}
    assert "not run" in judge("c", None, reference).message
    assert judge("c", {"error": "KeyError: 'x'"}, reference).message == "your code raised KeyError"
    two = {"data": _encode({"0": torch.tensor(1.0), "leaked-input-4-8-15": torch.tensor(2.0)})}
    assert "structure" in judge("c", two, reference).message
    assert "leaked" not in judge("c", two, reference).message
    assert judge("c", {"data": _encode({"": torch.tensor(1.0)})}, reference).passed


def test_feedback_never_repeats_text_the_students_code_chose():
    reference = {"": torch.tensor(1.0)}
    leak = type("HiddenInputIs_4_8_15", (Exception,), {})
    record = {"error": f"{leak.__name__}: the hidden input was [4, 8, 15]"}
    message = judge("c", record, reference).message
    assert "4" not in message and "exception of its own type" in message
    on_cpu = {"data": _encode({"": torch.tensor(1.0)}), "device": "cuda", "devices": {"": "cpu"}}
    assert "device (cuda)" in judge("c", on_cpu, reference).message
    forged = {"data": _encode({"": torch.tensor(1.0)}), "device": "leak!", "devices": {"": "x"}}
    assert judge("c", forged, reference).passed  # an unknown device type is not echoed


def test_hidden_tests_are_stripped_from_what_students_see():
    source = "a = 1\n### BEGIN HIDDEN TESTS\nsecret = 42\n### END HIDDEN TESTS\ncheck.done()"
    assert strip_hidden_tests(source) == "a = 1\n# (hidden tests ran here)\ncheck.done()"


@pytest.mark.parametrize(
    "source",
    [
        "from seqmodels.ngram import NGramLM",
        "import seqmodels.metrics as m",
        "from seqmodels import ngram",
    ],
)
def test_imports_of_the_course_library_are_found(source):
    assert _forbidden_names(source, FORBIDDEN)


@pytest.mark.parametrize(
    "source",
    [
        "from seqmodels.vocab import Vocabulary\nimport torch",
        "# like seqmodels.ngram does\nclass SpellChecker:\n    pass",
        'def f():\n    """Unlike seqmodels.metrics.perplexity, average over tokens."""',
    ],
)
def test_words_in_comments_strings_or_names_are_not_flagged(source):
    assert _forbidden_names(source, FORBIDDEN) == []


def test_the_students_public_check_uses_the_graders_own_tolerance():
    from seqmodels.grading.capture import public_problems

    expected = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert public_problems(flatten(expected + 5e-7), expected) == []
    problems = public_problems(flatten(expected + 5e-5), expected)  # float64: 1e-6 + 1e-6·|e|
    assert problems and "largest absolute error" in problems[0]  # details: the values are public
    assert public_problems(flatten(torch.tensor([1, 2])), expected)  # the grader fails them too


def test_references_that_do_not_match_their_manifest_are_refused(tmp_path):
    import shutil
    from pathlib import Path

    from seqmodels.grading import references

    stored = Path(__file__).resolve().parents[1] / "solutions" / "ps1" / "references"
    shutil.copytree(stored, tmp_path / "references")
    refs, manifest = references.load(tmp_path / "references", "ps1")
    assert manifest["references_sha256"] and refs
    tensors = tmp_path / "references" / "ps1.safetensors"
    data = bytearray(tensors.read_bytes())
    data[-1] ^= 1  # one bit of one reference value
    tensors.write_bytes(bytes(data))
    with pytest.raises(references.ReferencesMismatch, match="does not match its manifest"):
        references.load(tmp_path / "references", "ps1")


def test_only_schema_valid_capture_records_of_the_cells_task_are_read():
    """A kernel's forged or malformed records are ignored, never trusted."""
    from seqmodels.grading.capture import MIME
    from seqmodels.grading.records import capture_records

    def out(data, kind="display_data"):
        return {"output_type": kind, "data": data, "metadata": {}}

    good = {"task": "t", "kind": "case", "case": "c", "data": ""}
    outputs = [
        out({MIME: good}),
        out({MIME: good, "text/html": "<script>"}),  # a second MIME type
        out({MIME: {**good, "extra": 1}}),  # a field no Checker writes
        out({MIME: {**good, "case": "x" * 10_000}}),  # over the size bound
        out({MIME: {**good, "task": "other"}}),  # another task's record
        out({MIME: good}, kind="execute_result"),
    ]
    assert list(capture_records(outputs, "t")) == [good]


def test_a_case_captured_twice_fails_whatever_either_capture_holds():
    """The test cell captures each case once: a second record (a hook's forgery) voids both."""
    from seqmodels.grading.capture import MIME, _encode
    from seqmodels.grading.preprocessors import JudgeCaptures

    value = torch.ones(2)
    record = {"task": "t", "kind": "case", "case": "c", "data": _encode({"": value})}
    outputs = [{"output_type": "display_data", "data": {MIME: record}, "metadata": {}}] * 2
    task = {"cases": ["c"], "points": 2, "functions": ["f"]}
    grader = {"notes": {}, "scores": {}}
    JudgeCaptures()._judge("g", "t", task, {"c": {"": value}}, outputs, [], grader)
    assert grader["scores"]["g"] == (0.0, False)
    JudgeCaptures()._judge("g", "t", task, {"c": {"": value}}, outputs[:1], [], grader)
    assert grader["scores"]["g"] == (2.0, False)


@pytest.mark.parametrize("image", ["", '\n\n<img src="data:image/png;base64,iVBORw0KGgo=">'])
def test_the_feedback_exporter_makes_nbconverts_page(image):
    """`FeedbackExporter` skips nbconvert's BeautifulSoup pass on a page without images; the page
    is the same document nbconvert makes (its pass only re-serializes one), and with an image the
    pass still gives it alt text."""
    from pathlib import Path

    import nbgrader.converters
    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
    from traitlets.config import Config

    from seqmodels.grading.preprocessors import FeedbackExporter

    templates = Path(nbgrader.converters.__file__).parent.parent / "server_extensions/formgrader"
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    config.HTMLExporter.extra_template_basedirs = [str(templates / "templates")]
    css = templates / "static/node_modules/bootstrap/dist/css"
    config.HTMLExporter.extra_template_paths = [str(css)]
    notebook = new_notebook(
        cells=[
            new_markdown_cell(f"# Task 1 <b>&amp;</b> $x^2$ `code`{image}"),
            new_code_cell(
                "def f(x):\n    return x < 2 and '<tag>'",
                outputs=[new_output("stream", name="stdout", text="a < b & c\n")],
            ),
        ]
    )
    notebook.metadata["language_info"] = {"name": "python"}
    notebook.cells[1].metadata["nbgrader"] = {
        "grade": True,
        "solution": False,
        "grade_id": "t1",
        "points": 2,
        "score": 1.5,
    }
    facts = {"notebook": "ps1", "score": 1.5, "max_score": 2, "late_penalty": 0}
    ours, _ = FeedbackExporter(config=config).from_notebook_node(notebook, {"nbgrader": facts})
    theirs, _ = HTMLExporter(config=config).from_notebook_node(notebook, {"nbgrader": facts})
    assert str(BeautifulSoup(ours, features="html.parser")) == theirs
    assert ("No description has been provided" in ours) == bool(image)
    assert "&lt;tag&gt;" in ours or "&lt;</span><span" in ours


def test_the_grading_driver_starts_without_importing_torch():
    """The driver checks the references by hash and leaves torch to the workers (a second of its
    start); a test cell's ``from seqmodels.grading import Checker`` still finds the class."""
    import subprocess
    import sys

    probe = (
        "import sys, seqmodels.grading.run; driver = 'torch' in sys.modules; "
        "from seqmodels.grading import Checker; print(driver, Checker.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "seqmodels.grading.capture"]


def _png(width: int, height: int, text: str | None = None) -> str:
    import base64
    import io

    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    if text:
        info.add_text("Comment", text)
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format="PNG", pnginfo=info)
    return base64.b64encode(buffer.getvalue()).decode()


def test_a_students_figure_reaches_formgrader_as_pixels_only():
    """Part D's plots: PNG outputs of a student's cell are re-encoded by the grader (no text chunk
    survives); anything else, a PNG too large to decode safely, and figures over the limit are not
    kept."""
    import base64

    from seqmodels.grading.preprocessors import _figures

    script = "<script>alert(1)</script>"
    outputs = [
        {"output_type": "display_data", "data": {"image/png": _png(64, 48, script)}},
        {"output_type": "display_data", "data": {"image/svg+xml": f"<svg>{script}</svg>"}},
        {
            "output_type": "display_data",
            "data": {"image/png": base64.b64encode(b"GIF89a...").decode()},
        },
        {"output_type": "display_data", "data": {"image/png": _png(5000, 4000)}},
        {"output_type": "display_data", "data": {"image/png": _png(10, 10)}},
        {"output_type": "display_data", "data": {"image/png": _png(12, 12)}},
    ]
    kept = _figures(outputs, limit=2)
    assert [o["data"]["text/plain"].split(",")[1] for o in kept] == [
        " 64 × 48 pixels",
        " 10 × 10 pixels",
    ]
    for output in kept:
        assert b"alert" not in base64.b64decode(output["data"]["image/png"])
        assert set(output["data"]) == {"image/png", "text/plain"}


def test_a_cells_time_limit_follows_nbclients_contract_raised_to_thrice_the_solutions():
    """`GuardedExecute._get_timeout`: nbclient's answer (`timeout`, or `timeout_func`'s for the
    cell), at least `time_factor` (3) × the solution's time for the cell; None (no limit) where
    nbclient's is."""
    from nbformat.v4 import new_code_cell

    from seqmodels.grading.preprocessors import GuardedExecute

    execute = GuardedExecute(timeout=30)
    execute._seconds = {"cells": {"test_training": 40.2}, "total": 60}
    training = new_code_cell("train()", metadata={"nbgrader": {"grade_id": "test_training"}})
    assert execute._get_timeout(training) == 121
    assert execute._get_timeout(new_code_cell("quick()")) == 30
    assert execute._get_timeout(None) == 30
    execute.timeout_func = lambda cell: 150
    assert execute._get_timeout(training) == 150
    execute.timeout_func, execute.timeout = None, -1
    assert execute._get_timeout(training) is None
