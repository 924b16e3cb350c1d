"""Problem Set 4's solutions against oracles, its wrong answers, rewrites and mutants, in process.

The solutions are the references, so they are checked here against oracles nobody here wrote:
`F.scaled_dot_product_attention` with a boolean mask (and a double loop of `math.exp` for the
weights), autograd through it and central differences for the backward pass, `F.cross_entropy`
with `ignore_index` for the loss, a model assembled from `nn.GRUCell`, `F.scaled_dot_product_attention`
and `F.log_softmax` that reads each word **unpadded** for the encoder–decoder, that model decoding
one word at a time (argmax of its teacher-forced log-probabilities on its own prefix) for greedy
decoding, `torch.optim.Adam` after `clip_grad_norm_` on that model with `F.cross_entropy` for the
trajectory, and RapidFuzz's `Levenshtein.distance` for the grader's phoneme error rate. Then each
plausible wrong answer of tests/ps4_submissions.py, graded in this process against the stored
references, fails the check it is said to fail; the cascades cost the tasks that call them; the
rewrites of `train_step` keep every case, and the set's own mutants are killed at the stated rate
(the round trip through the sandbox, tests/test_grading_ps4.py, grades the submissions end to end
and checks that each wrong answer costs its own task only).
"""

from __future__ import annotations

import contextlib
import io
import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import grading_helpers as helpers
from ps1_submissions import solution_answers
from ps4_submissions import (
    CASCADE_TASKS,
    CASCADES,
    EQUIVALENT_STEPS,
    KILLED_BY,
    MUTANTS,
    PART_B,
    WRONG,
)

PS = "ps4"
ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / PS / f"{PS}.ipynb"
NOT_RUN_HERE = {"test_g2p_training", "d_experiment"}  # training and part D: their own tests
TASK_OF = {
    "test_masked_attention": "masked_attention",
    "test_masked_attention_backward": "masked_attention_backward",
    "test_masked_token_nll": "masked_token_nll",
    "test_g2p_log_probs": "g2p_log_probs",
    "test_g2p_greedy_decode": "g2p_greedy_decode",
    "test_train_step": "train_step",
}
#: the least share of the set's own mutants its cases must kill (issue 29)
KILL_RATE = 0.95
ANSWERS = solution_answers(nbformat.read(SOURCE, as_version=4))


def _cell(grade_id: str) -> str:
    source = nbformat.read(SOURCE, as_version=4)
    return next(
        c.source for c in source.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


@pytest.fixture(scope="module")
def ns():
    """The setup cell's names and the solution's answers (but part D's experiment)."""
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(_cell("setup"), "setup", "exec"), namespace)  # noqa: S102 - our own solution
    for name, code in ANSWERS.items():
        if name not in NOT_RUN_HERE:
            exec(compile(code, name, "exec"), namespace)  # noqa: S102
    namespace["device"] = torch.device("cpu")
    return namespace


def _qkv(seed, B, Tq, Tk, d, dv, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Tq, d, generator=g, dtype=torch.float64) * scale
    k = torch.randn(B, Tk, d, generator=g, dtype=torch.float64)
    v = torch.randn(B, Tk, dv, generator=g, dtype=torch.float64)
    return q, k, v


def _lengths_mask(lengths, Tk):
    return torch.arange(Tk)[None, :] < torch.tensor(lengths)[:, None]


# ------------------------------------------------------------------ attention


def test_masked_attention_matches_torch_sdpa_and_a_loop_of_math_exp(ns):
    q, k, v = _qkv(1, 3, 4, 6, 5, 3, scale=3.0)
    mask = _lengths_mask([6, 2, 1], 6)
    context, weights = ns["masked_attention"](q, k, v, mask)
    oracle = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, :])
    torch.testing.assert_close(context, oracle)
    for b in range(3):
        for i in range(4):
            s = [
                sum(q[b, i, c].item() * k[b, j, c].item() for c in range(5)) / math.sqrt(5)
                for j in range(6)
            ]
            real = [j for j in range(6) if mask[b, j]]
            top = max(s[j] for j in real)
            z = sum(math.exp(s[j] - top) for j in real)
            expected = [math.exp(s[j] - top) / z if j in real else 0.0 for j in range(6)]
            assert weights[b, i].tolist() == pytest.approx(expected, abs=1e-12)
    empty = _lengths_mask([3, 0, 1], 6)
    context, weights = ns["masked_attention"](q, k, v, empty)
    assert not weights[1].any() and not context[1].any()


def test_the_backward_pass_matches_autograd_through_torch_sdpa_and_central_differences(ns):
    q, k, v = _qkv(2, 2, 3, 5, 4, 2, scale=2.0)
    mask = _lengths_mask([5, 3], 5)
    d_context = torch.randn(
        2, 3, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64
    )
    with torch.inference_mode():
        mine = ns["masked_attention_backward"](q, k, v, mask, d_context)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, attn_mask=mask[:, None, :])
    auto = torch.autograd.grad((out * d_context).sum(), leaves)
    for a, b in zip(mine, auto, strict=True):
        torch.testing.assert_close(a, b)

    def loss(qq, kk, vv):
        return float(
            (
                F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask[:, None, :]) * d_context
            ).sum()
        )

    eps = 1e-6
    for which, index in [(0, (1, 2, 3)), (1, (0, 4, 1)), (1, (1, 4, 0)), (2, (0, 0, 1))]:
        plus, minus = [t.clone() for t in (q, k, v)], [t.clone() for t in (q, k, v)]
        plus[which][index] += eps
        minus[which][index] -= eps
        numeric = (loss(*plus) - loss(*minus)) / (2 * eps)
        assert mine[which][index].item() == pytest.approx(numeric, abs=1e-6)
    assert float(mine[1][1, 3:].abs().max()) == 0.0  # padded keys get no gradient


def test_the_loss_matches_cross_entropy_with_ignore_index(ns):
    g = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 5, 7, generator=g, dtype=torch.float64) * 4
    targets = torch.randint(7, (3, 5), generator=g)
    mask = _lengths_mask([5, 2, 1], 5)
    ignored = torch.where(mask, targets, torch.full_like(targets, -100))
    oracle = F.cross_entropy(logits.reshape(-1, 7), ignored.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(ns["masked_token_nll"](logits, targets, mask), oracle)


# ------------------------------------------------------------------ the model, from torch's modules


class Oracle:
    """The task's model from torch's own parts: `nn.GRUCell`s (run on the task's tensors with
    `functional_call`, so gradients reach them), `F.scaled_dot_product_attention` over one word's
    real letters (each word run alone, unpadded), `F.log_softmax`."""

    def __init__(self, params):
        m, H = params["E_x"].shape[1], params["enc_W_hh"].shape[1]
        self.p = params
        self.cells = {"enc": nn.GRUCell(m, H).double(), "dec": nn.GRUCell(m + H, H).double()}

    def gru(self, side, x, h):
        names = {"weight_ih": "W_ih", "weight_hh": "W_hh", "bias_ih": "b_ih", "bias_hh": "b_hh"}
        tensors = {name: self.p[f"{side}_{short}"] for name, short in names.items()}
        return torch.func.functional_call(self.cells[side], tensors, (x, h))

    def encode(self, word):
        h, states = torch.zeros(1, self.p["enc_W_hh"].shape[1], dtype=torch.float64), []
        for letter in word:
            h = self.gru("enc", self.p["E_x"][[letter]], h)
            states.append(h)
        return torch.cat(states)[None], h

    def word_log_probs(self, word, prefix):
        keys, s = self.encode(word)
        out, rows = torch.zeros_like(s), []
        for y in prefix:
            s = self.gru("dec", torch.cat([self.p["E_y"][[y]], out], dim=-1), s)
            context = F.scaled_dot_product_attention(s[:, None], keys, keys)[:, 0]
            out = torch.tanh(torch.cat([context, s], dim=-1) @ self.p["W_c"].T)
            rows.append(F.log_softmax(out @ self.p["W_y"].T + self.p["b_y"], dim=-1))
        return torch.cat(rows)


def _params(ns, seed, m=4, H=6, scale=2.0):
    p = ns["g2p_params"](m, H, torch.Generator().manual_seed(seed), torch.float64)
    return {k: v * (1.0 if k.startswith("E_") else scale) for k, v in p.items()}


def _words(seed, lengths, V_X=29):
    g = torch.Generator().manual_seed(seed)
    words = [torch.randint(3, V_X, (n,), generator=g).tolist() for n in lengths]
    src = torch.full((len(words), max(lengths)), 1, dtype=torch.int64)
    for i, w in enumerate(words):
        src[i, : len(w)] = torch.tensor(w)
    return words, src


def test_the_model_matches_one_built_from_gru_cells_and_sdpa_reading_each_word_unpadded(ns):
    params = _params(ns, 5)
    words, src = _words(6, [5, 2, 7, 1])
    tgt_in = torch.randint(3, 42, (4, 6), generator=torch.Generator().manual_seed(7))
    tgt_in[:, 0] = 0
    mine = ns["g2p_log_probs"](params, src, tgt_in)
    oracle = Oracle(params)
    with torch.no_grad():
        for i, word in enumerate(words):
            torch.testing.assert_close(mine[i], oracle.word_log_probs(word, tgt_in[i].tolist()))


def test_greedy_decoding_matches_the_oracle_decoding_one_word_at_a_time(ns):
    params = _params(ns, 8)
    params["b_y"][1] += 1.0  # some words stop early
    words, src = _words(9, [3, 6, 2, 4, 5])
    mine = ns["g2p_greedy_decode"](params, src, 10)
    oracle = Oracle(params)
    with torch.no_grad():
        for i, word in enumerate(words):
            prefix, row = [0], []
            while len(row) < 10 and (not row or row[-1] != 1):
                row.append(int(oracle.word_log_probs(word, prefix)[-1].argmax()))
                prefix.append(row[-1])
            row += [1] * (10 - len(row))
            assert mine[i].tolist() == row


def test_the_training_step_matches_adam_after_clipping_with_cross_entropy_on_the_oracle(ns):
    from seqmodels.grading.training import G2PPairs

    start = _params(ns, 10, m=3, H=5, scale=1.0)
    mine = {k: v.clone().requires_grad_() for k, v in start.items()}
    theirs = {k: v.clone().requires_grad_() for k, v in start.items()}
    opt_mine = torch.optim.Adam(list(mine.values()), lr=0.01)
    opt_theirs = torch.optim.Adam(list(theirs.values()), lr=0.01)
    data = G2PPairs(batch=4, steps=4, seed=11)
    for src, tgt in data.batches():
        loss = ns["train_step"](mine, opt_mine, src, tgt, 0.5)
        oracle = Oracle(theirs)
        rows, targets = [], []
        for i in range(len(src)):
            word = [x for x in src[i].tolist() if x != 1]
            phones = tgt[i, 1:].tolist()
            n = phones.index(1) + 1
            rows.append(oracle.word_log_probs(word, tgt[i, :n].tolist()))
            targets += phones[:n]
        expected = F.cross_entropy(
            torch.cat(rows), torch.tensor(targets)
        )  # log-probs: log-softmax again is themselves
        opt_theirs.zero_grad()
        expected.backward()
        torch.nn.utils.clip_grad_norm_(list(theirs.values()), 0.5)
        opt_theirs.step()
        assert loss == pytest.approx(expected.item(), rel=1e-10)
    for k in start:
        torch.testing.assert_close(mine[k], theirs[k])


def test_the_graders_phoneme_error_rate_matches_rapidfuzz_levenshtein():
    from rapidfuzz.distance import Levenshtein

    from seqmodels.grading import heldout

    hyps = [[5, 6, 7], [], [9, 9, 9, 9], [3]]
    refs = [((5, 7),), ((4, 4),), ((9,), (9, 9, 8)), ((3,), (4, 5))]
    errors = sum(
        min((Levenshtein.distance(h, list(r)), len(r)) for r in rs)[0]
        for h, rs in zip(hyps, refs, strict=True)
    )
    length = sum(
        min((Levenshtein.distance(h, list(r)), len(r)) for r in rs)[1]
        for h, rs in zip(hyps, refs, strict=True)
    )
    assert heldout.phoneme_error_rate_of(hyps, refs) == errors / length == 5 / 8


# ------------------------------------------------------------------ wrong answers, rewrites, mutants


def _graded(answers: dict[str, str], tasks) -> tuple[dict, dict]:
    """`graded_in_process` running only the test cells of `tasks`."""
    skip = {test for test, task in TASK_OF.items() if task not in tasks} | {"d_experiment"}
    return helpers.graded_in_process(PS, answers, skip=skip)


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_answer_fails_the_check_it_is_said_to_fail(name):
    cell, code, test = WRONG[name]
    task = TASK_OF[test]
    scores, verdicts = _graded({**ANSWERS, cell: code}, {task})
    passed, cases = scores[task]
    assert passed < cases, name
    failed = [case for (t, case), v in verdicts.items() if t == task and not v.passed]
    assert any(case.startswith(KILLED_BY[name]) for case in failed), failed


def test_at_least_ten_wrong_answers_four_of_them_in_part_b():
    assert len(WRONG) >= 10 and len(PART_B) >= 4
    assert all(WRONG[name][0] == "train_step" for name in PART_B)


@pytest.mark.parametrize("name", sorted(CASCADES))
def test_a_bug_in_a_function_later_tasks_call_costs_those_tasks(name):
    cell, code, _ = CASCADES[name]
    tasks = CASCADE_TASKS[cell]
    scores, _ = _graded({**ANSWERS, cell: code}, set(tasks))
    assert all(scores[t][0] < scores[t][1] for t in tasks if t != cell or t in scores), scores


@pytest.mark.parametrize("name", sorted(EQUIVALENT_STEPS))
def test_an_equivalent_rewrite_of_the_training_step_keeps_every_case(name):
    scores, verdicts = _graded({**ANSWERS, "train_step": EQUIVALENT_STEPS[name]}, {"train_step"})
    assert scores["train_step"][0] == scores["train_step"][1], [
        (case, v.message) for (t, case), v in verdicts.items() if not v.passed
    ]


def test_the_sets_own_mutants_are_killed():
    survivors = []
    for name, (cell, code, test) in MUTANTS.items():
        task = TASK_OF[test]
        scores, _ = _graded({**ANSWERS, cell: code}, {task})
        if scores[task][0] == scores[task][1]:
            survivors.append(name)
    assert 1 - len(survivors) / len(MUTANTS) >= KILL_RATE, survivors
