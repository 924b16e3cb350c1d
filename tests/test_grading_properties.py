"""Cases judged by a property the grader computes from the captured values
(`seqmodels.grading.properties`): right answers pass, wrong ones fail with a message safe for
feedback, and hostile captures (not distributions, too large, another dtype, a table with a prefix
missing, values a property cannot read) fail the case without raising in the grader."""

from __future__ import annotations

import math

import torch

from seqmodels.grading import properties
from seqmodels.grading.capture import _encode
from seqmodels.grading.records import _VALIDATOR


def _captured(values: dict) -> dict:
    return {"data": _encode(values)}


def _judge(values: dict, name: str, settings: dict, reference: dict | None = None):
    reference = values if reference is None else reference
    return properties.judge(
        "case", _captured(values), reference, {"name": name, "settings": settings}
    )


ROWS = torch.log(torch.tensor([[0.5, 0.25, 0.25, 0.0], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64))


def test_top_p_keeps_the_smallest_most_probable_set_with_ties():
    right = torch.tensor([[True, False, False, False], [False, False, True, True]])
    assert _judge({"log_probs": ROWS, "kept": right}, "top_p_mask", {"p": 0.45}).passed
    ties = torch.tensor([[True, True, True, False], [False, False, True, True]])
    assert _judge({"log_probs": ROWS, "kept": ties}, "top_p_mask", {"p": 0.6}).passed
    one_more = torch.tensor([[True, True, False, False], [False, False, True, True]])
    verdict = _judge({"log_probs": ROWS, "kept": one_more}, "top_p_mask", {"p": 0.45})
    assert not verdict.passed and "smallest set" in verdict.message


def test_a_token_at_the_boundary_within_rounding_may_go_either_way():
    """p exceeds the mass before the second token by 1e-12: it may be kept or not (a cumulative
    sum in another order rounds either way); the third, far past p, may not."""
    rows = torch.log(torch.tensor([[0.4, 0.35, 0.25]], dtype=torch.float64))
    p = {"p": 0.4 + 1e-12}
    for kept, passes in (([1, 1, 0], True), ([1, 0, 0], True), ([1, 1, 1], False)):
        values = {"log_probs": rows, "kept": torch.tensor([kept], dtype=torch.bool)}
        assert _judge(values, "top_p_mask", p).passed == passes, kept


def test_temperature_rows_are_the_formulas():
    scaled = torch.log_softmax(
        torch.log(torch.tensor([[0.1, 0.2, 0.7]], dtype=torch.float64)) / 2, -1
    )
    base = torch.log(torch.tensor([[0.1, 0.2, 0.7]], dtype=torch.float64))
    assert _judge({"log_probs": base, "scaled": scaled}, "temperature", {"t": 2.0}).passed
    verdict = _judge({"log_probs": base, "scaled": base * 2}, "temperature", {"t": 2.0})
    assert not verdict.passed and "tolerance" in verdict.message


def _table(max_len=3, V=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    level, prefixes = [[0]], []
    for _ in range(max_len):
        prefixes += level
        level = [[*y, t] for y in level for t in range(V) if t != 1]
    table = torch.log_softmax(
        2 * torch.randn(len(prefixes), V, generator=g, dtype=torch.float64), -1
    )
    padded = torch.tensor([y + [-1] * (max_len - len(y)) for y in prefixes])
    return prefixes, padded, table


def _best(prefixes, table, alpha, max_len=3):
    rows = {tuple(y): i for i, y in enumerate(prefixes)}
    found = []
    for y in prefixes:
        total = sum(float(table[rows[tuple(y[: k + 1])], t]) for k, t in enumerate([*y[1:], 1]))
        found.append((total / len(y) ** alpha, y[1:]))
    return max(found, key=lambda f: f[0])


def test_the_best_sequence_is_checked_against_exhaustive_search():
    prefixes, padded, table = _table()
    settings = {"max_len": 3, "alpha": 1.0, "bos": 0, "eos": 1}
    score, tokens = _best(prefixes, table, 1.0)
    values = {"prefixes": padded, "table": table, "tokens": torch.tensor(tokens, dtype=torch.int64)}
    values["score"] = torch.tensor(score, dtype=torch.float64)
    assert _judge(values, "best_sequence", settings).passed
    worse = _best(prefixes, table, 0.0)  # the best without length normalisation
    if worse[1] != tokens:
        wrong = {**values, "tokens": torch.tensor(worse[1], dtype=torch.int64)}
        assert "not a best sequence" in _judge(wrong, "best_sequence", settings).message
    off = {**values, "score": torch.tensor(score + 0.1, dtype=torch.float64)}
    assert "score" in _judge(off, "best_sequence", settings).message
    missing = {**values, "prefixes": padded[:-1], "table": table[:-1]}
    assert "misses a prefix" in _judge(missing, "best_sequence", settings).message


def test_hostile_captures_fail_the_case_and_never_raise():
    right = torch.tensor([[True, False, False, False], [False, False, True, True]])
    reference = {"log_probs": ROWS, "kept": right}
    cases = [
        ({"log_probs": ROWS + 1.0, "kept": right}, "not a log-probability distribution"),
        ({"log_probs": ROWS.float(), "kept": right}, "wrong dtype"),
        ({"log_probs": ROWS, "kept": right, "extra": right.clone()}, "wrong structure"),
        ({"log_probs": torch.full((2, 4), math.nan, dtype=torch.float64), "kept": right}, "NaN"),
        ({"log_probs": torch.zeros(1001, 1000, dtype=torch.float64), "kept": right}, "larger"),
        ({"log_probs": ROWS[0], "kept": right}, "matrix"),
        ({"log_probs": ROWS, "kept": right[:, :2].contiguous()}, "shape"),
    ]
    for values, said in cases:
        verdict = _judge(values, "top_p_mask", {"p": 0.5}, reference)
        assert not verdict.passed and said in verdict.message, (said, verdict.message)
    assert (
        "could not be read"
        in properties.judge("c", {"data": "!!"}, reference, {"name": "top_p_mask"}).message
    )
    raised = properties.judge("c", {"error": "RuntimeError: x"}, reference, {"name": "top_p_mask"})
    assert raised.message == "your code raised RuntimeError"
    assert "not run" in properties.judge("c", None, reference, {"name": "top_p_mask"}).message


def test_a_capture_record_may_name_a_property_and_nothing_else_unbounded():
    record = {
        "task": "t",
        "kind": "case",
        "case": "c",
        "check": {"name": "top_p_mask", "settings": {"p": 0.5}},
    }
    assert _VALIDATOR.is_valid(record)
    assert not _VALIDATOR.is_valid({**record, "check": {"name": "x", "settings": {}, "more": 1}})
    many = {str(i): i for i in range(21)}
    assert not _VALIDATOR.is_valid({**record, "check": {"name": "x", "settings": many}})


def test_a_kernel_naming_its_own_easier_check_is_judged_by_the_manifests():
    """A hostile capture keeps every token and says, in its own record, that the property is top-p
    at p = 1 (where keeping everything is right). The grader judges the case by the property and
    settings the manifest stored from the solution's run (p = 0.5), so the case fails."""
    everything = torch.ones(2, 4, dtype=torch.bool)
    record = _captured({"log_probs": ROWS, "kept": everything})
    record["check"] = {"name": "top_p_mask", "settings": {"p": 1.0}}
    right = torch.tensor([[True, False, False, False], [False, False, True, True]])
    stored = {"name": "top_p_mask", "settings": {"p": 0.5}}
    verdict = properties.judge("c", record, {"log_probs": ROWS, "kept": right}, stored)
    assert not verdict.passed
