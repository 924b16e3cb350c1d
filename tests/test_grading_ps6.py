"""Problem Set 6's grading (the capstone), end to end: the shared round trip in the smoke profile,
then the capstone's own task in the full profile, where the grader loads each student's checkpoint.

The round trip (smoke: the capstone's test cell is not run and earns nothing) grades the solution,
the blank release, each plausible wrong answer of tests/ps6_submissions.py (it loses points on its
own task only, with feedback naming the failing case) and the submissions that import the course's
hidden tokenizers (an ImportError in the sandbox). Every submission comes with the solution's
checkpoint beside it, as students submit theirs.

The full profile grades the capstone's tiers on the checkpoint a submission brings: the solution's
earns every tier, the blank none; a model that reads the token it is asked to predict fails the
causality probe; a training step that does not learn fails Task 4, which holds the metric tiers;
and the files the grader checks before it asks — no checkpoint, a checkpoint that is a symbolic
link, one over the 16 MiB cap, weights kept beside it (over 1 MiB) — earn nothing, each with its reason in the
feedback. The capstone's judgement on answers made in this process is in
tests/test_grading_capstone.py.
"""

from __future__ import annotations

import json
import os
import re
from html import unescape
from pathlib import Path

import nbformat
import pytest

import grading_helpers as helpers
from paste_submissions import feedback_points
from ps6_submissions import HONEST, RULE_BREAKERS, TESTS, WRONG, ps6_cheat

PS = "ps6"
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.grading
POINTS = {
    "train_byte_bpe": 2.5,
    "encode_decode": 1.5,
    "gpt_log_probs": 2.5,
    "train_step": 1.5,
}
SMOKE_TOTAL = sum(POINTS.values())  # 8: the capstone's tiers (4) are not run in the smoke profile
CAPSTONE = 4.0
TASK_OF = {
    "test_train_byte_bpe": "train_byte_bpe",
    "test_encode_decode": "encode_decode",
    "test_gpt_log_probs": "gpt_log_probs",
    "test_train_step": "train_step",
}


def _points(graded, student: str) -> dict[str, tuple[float, float]]:
    return feedback_points(helpers.feedback(graded["course"], student, PS))


class TestRoundTrip(helpers.RoundTrip):
    """The shared round trip (tests/grading_helpers.py) on this problem set's submissions."""

    PS = PS
    TASK_OF = TASK_OF
    TESTS, WRONG, RULE_BREAKERS, HONEST = TESTS, WRONG, RULE_BREAKERS, HONEST
    HIDDEN = ("seqmodels.bpe", "seqmodels.bytebpe", "seqmodels.transformer")
    PROFILE = "smoke"
    POINTS = POINTS
    FULL = SMOKE_TOTAL

    def test_the_solution_earns_full_marks_and_the_blank_release_none(self, graded):
        assert graded["scores"]["solution"] == SMOKE_TOTAL
        assert graded["scores"]["blank"] == 0
        points = _points(graded, "solution")
        assert {t: points[t] for t in POINTS} == {t: (p, p) for t, p in POINTS.items()}

    def test_a_plausible_wrong_answer_loses_points_on_its_own_task_only(self, graded, wrong):
        task = self.TASK_OF[self.WRONG[wrong][2]]
        points = _points(graded, f"wrong-{wrong}")
        assert points[task][0] < POINTS[task], points
        assert all(points[t][0] == p for t, p in POINTS.items() if t != task), points
        html = helpers.feedback(graded["course"], f"wrong-{wrong}", PS)
        section = html.split(f"{task}: ", 1)[1].split(" points", 2)[1]
        assert re.search(r"<td>[^<]+</td>\s*<td>FAIL</td>", section), section[:3000]


# ---- the capstone's task in the full profile: the checkpoint each submission brings ---------------


def _capstone_section(graded, student: str) -> str:
    """The capstone's verdict table, as text: from its "capstone: p of 4 points" head."""
    html = helpers.feedback(graded["course"], student, PS)
    head = re.search(rf"capstone: [\d.]+ of {CAPSTONE:g} points", html)
    assert head, html[-3000:]
    table = html[head.start() + len("capstone: ") :].split("</table>", 1)[0]
    return unescape(re.sub(r"<[^>]+>", " ", table))


def _capstone_points(graded, student: str) -> float:
    section = _capstone_section(graded, student)
    return float(re.match(rf"\s*([\d.]+) of {CAPSTONE:g} points", section).group(1))


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The solution, the blank release, a cheat, a training step that does not learn, and four
    submissions whose files the grader refuses, graded in one run in the full profile."""
    from grading_helpers import BIN, LIMITS, new_course, read_csv, release_and_answers, run, submit
    from ps1_submissions import fill

    course = new_course(tmp_path_factory.mktemp("course"), PS)
    release, answers = release_and_answers(course, PS)
    never_trained = "def train_capstone(checkpoint, log):\n    raise RuntimeError('not run yet')\n"
    cells = {
        "solution": {},
        "peeks-at-the-next-token": {"gpt_log_probs": ps6_cheat(answers["gpt_log_probs"])},
        "does-not-learn": {"train_step": WRONG["train_does_not_learn"][1]},
        "no-checkpoint": {"capstone_run": never_trained},
        "linked-checkpoint": {"capstone_run": never_trained},
        "over-the-cap": {},
        "weights-beside": {},
    }
    files = {name: fill(release, {**answers, **edit}) for name, edit in cells.items()}
    files["blank"] = release
    submit(course, {k: nbformat.writes(v).encode() for k, v in files.items()}, PS)
    submitted = course / "grading" / "submitted"
    (submitted / "no-checkpoint" / PS / "capstone.safetensors").unlink()
    linked = submitted / "linked-checkpoint" / PS / "capstone.safetensors"
    linked.unlink()
    linked.symlink_to(ROOT / "solutions" / PS / "references" / "submission" / linked.name)
    with open(submitted / "over-the-cap" / PS / "capstone.safetensors", "r+b") as f:
        f.truncate(17 * 2**20)  # the real checkpoint, then zeros: still loads, but over the cap
    with open(submitted / "weights-beside" / PS / "more_weights.bin", "wb") as f:
        f.truncate(2 * 2**20)  # under the driver's 20 MB for a whole submission
    env = {**LIMITS, "SEQMODELS_GRADING_PROFILE": "full"}
    run(course, str(BIN / "python"), "-m", "seqmodels.grading.run", PS, "--jobs", "2", env=env)
    return {"course": course, "rows": read_csv(course, PS)}


def test_the_solutions_checkpoint_earns_every_tier_and_the_blank_none(full):
    assert _capstone_points(full, "solution") == CAPSTONE, _capstone_section(full, "solution")
    assert float(full["rows"]["solution"]["autograded"]) == SMOKE_TOTAL + CAPSTONE
    assert "loaded its checkpoint, and answered the grader" in _capstone_section(full, "solution")
    assert _capstone_points(full, "blank") == 0
    assert "NotImplementedError" in _capstone_section(full, "blank")


def test_a_model_that_reads_the_next_token_earns_only_the_runs_tier(full):
    section = _capstone_section(full, "peeks-at-the-next-token")
    assert _capstone_points(full, "peeks-at-the-next-token") == 0.5, section
    assert "FAIL" in section.split("its own context only", 1)[1][:60], section


def test_a_training_step_that_does_not_learn_holds_the_metric_tiers(full):
    section = _capstone_section(full, "does-not-learn")
    assert _capstone_points(full, "does-not-learn") == 0.5, section
    assert "FAIL" in section.split("the trajectory", 1)[1][:80], section


@pytest.mark.parametrize(
    ("student", "why"),
    [
        ("no-checkpoint", "no checkpoint `capstone.safetensors`"),
        ("linked-checkpoint", "capstone.safetensors"),
        ("over-the-cap", "17.0 MiB, over the cap of 16 MiB"),
        ("weights-beside", "other files hold 2.0 MiB, over their cap of 1 MiB"),
    ],
)
def test_files_the_grader_refuses_earn_nothing_and_the_feedback_says_why(full, student, why):
    section = _capstone_section(full, student)
    assert _capstone_points(full, student) == 0, section
    assert why in section, section
    # the other tasks are graded as usual
    assert float(full["rows"][student]["autograded"]) == SMOKE_TOTAL


def test_no_kernel_read_a_file_outside_the_submission_through_the_link(full):
    """The symbolic link pointed into the course's own solutions: the grader refused it without
    following it (`os.lstat`), and nbgrader's copy of the submission did not turn it into the file
    it named."""
    autograded = full["course"] / "grading" / "autograded" / "linked-checkpoint" / PS
    copied = autograded / "capstone.safetensors"
    assert not copied.exists() or copied.is_symlink() or os.path.getsize(copied) == 0


def test_stored_references_belong_to_the_current_solution():
    manifest = helpers.current_manifest(PS, points=12)
    tasks = manifest["tasks"]
    assert {t: tasks[t]["points"] for t in POINTS} == POINTS
    training = tasks["capstone"]["training"]
    assert training["heldout"] == "web_test_bytes"
    assert training["requires"] == ["train_step", "gpt_log_probs"]
    reference = tasks["capstone"]["reference"]
    assert reference["bits_per_byte"] < reference["bar"]
    # the figures the notebook states are the stored reference's and its log's
    source = nbformat.read(ROOT / "solutions" / PS / f"{PS}.ipynb", as_version=4)
    text = "\n".join(c.source for c in source.cells if c.cell_type == "markdown")
    log = (ROOT / "solutions" / PS / "references" / "submission" / "capstone_log.json").read_text()
    last = json.loads(log)["validation"][-1]["bits_per_byte"]
    assert f"reference's ({reference['bits_per_byte']:.2f})" in text
    assert f"reference's tokens ({reference['bar']:.2f})" in text
    assert f"reaches {reference['bits_per_byte']:.2f} on the grader's stretches" in text
    assert f"at {last:.2f} bits per byte on the KJV's validation" in text
    assert set(manifest["submission_files"]) == {"capstone.safetensors", "capstone_log.json"}
