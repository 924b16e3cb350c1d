"""Units of the grading machinery: capture, comparison policy, hidden-test stripping, library-use flags."""

import math

import pytest
import torch

from seqmodels.grading.capture import _encode, flatten
from seqmodels.grading.compare import compare_tensor, decode, judge
from seqmodels.grading.preprocessors import _forbidden_uses, strip_hidden_tests

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


def test_integers_must_match_exactly_and_keep_an_integer_dtype():
    expected = torch.tensor([[1, 2], [3, 4]])
    assert compare_tensor("", expected.clone(), expected) is None
    message = compare_tensor("", torch.tensor([[1, 2], [3, 5]]), expected)
    assert "1 of 4 entries differ" in message and "(1, 1)" in message
    assert "integer" in compare_tensor("", expected.double(), expected)


def test_floats_follow_the_per_dtype_tolerance_and_feedback_hides_the_values():
    expected = torch.tensor([1.0, 123.456789, -2.0], dtype=torch.float64)
    assert compare_tensor("", expected + 1e-9, expected) is None
    assert (
        compare_tensor("", expected.float(), expected) is None
    )  # float32 answer, float32 tolerance
    wrong = expected.clone()
    wrong[1] += 0.5
    message = compare_tensor("p", wrong, expected)
    assert "largest absolute error 0.5" in message and "index (1,)" in message
    assert "123.45" not in message and "123.95" not in message
    assert "expected shape (3,)" in compare_tensor("", torch.zeros(4), expected)
    assert "NaN" in compare_tensor("", torch.tensor([math.nan, 123.456789, -2.0]), expected)


def test_judge_reports_cases_that_never_ran_raised_or_have_the_wrong_structure():
    reference = {"": torch.tensor(1.0)}
    assert "not run" in judge("c", None, reference).message
    assert "raised KeyError" in judge("c", {"error": "KeyError: 'x'"}, reference).message
    two = {"data": _encode({"0": torch.tensor(1.0), "1": torch.tensor(2.0)})}
    assert "structure" in judge("c", two, reference).message
    assert judge("c", {"data": _encode({"": torch.tensor(1.0)})}, reference).passed


def test_hidden_tests_are_stripped_from_what_students_see():
    source = "a = 1\n### BEGIN HIDDEN TESTS\nsecret = 42\n### END HIDDEN TESTS\ncheck.done()"
    assert strip_hidden_tests(source) == "a = 1\n# (hidden tests ran here)\ncheck.done()"


@pytest.mark.parametrize(
    "source",
    [
        "from seqmodels.ngram import NGramLM",
        "import seqmodels.metrics as m",
        "import importlib\nimportlib.import_module('seqmodels.ngram')",
        "import seqmodels\nseqmodels.metrics.perplexity(1.0, 2)",
    ],
)
def test_uses_of_the_course_library_are_found(source):
    assert _forbidden_uses(source, FORBIDDEN)


def test_allowed_modules_are_not_flagged():
    assert _forbidden_uses("from seqmodels.vocab import Vocabulary\nimport torch", FORBIDDEN) == []


def test_the_students_public_check_uses_the_graders_own_tolerance():
    from seqmodels.grading.capture import _close

    expected = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert _close(flatten(expected + 5e-7), expected)
    assert not _close(flatten(expected + 5e-5), expected)  # float64: 1e-6 + 1e-6·|e|
    exact_ints = torch.tensor([1, 2])  # integers where floats are expected: the grader accepts them
    assert _close(flatten(exact_ints), expected) == (
        compare_tensor("", exact_ints, expected) is None
    )
