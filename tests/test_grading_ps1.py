"""Problem Set 1's solutions against oracles, its hidden cases' promises, and its wrong answers.

The solutions are the references, so they are checked here against oracles nobody here wrote or
computations made independently of them: the course library's `NGramLM` (add-k, and single-discount
Kneser–Ney, which Task 4 with three equal discounts must equal; its perplexity, and its per-token
probabilities in bits over the characters of a file the text is written to, for Task 5's two
numbers), `collections.Counter` for the counts
and the count-of-counts, exact fractions for the discounts, a scalar loop over dictionaries for the
three-discount Kneser–Ney, and `FeedForwardLM` with its output matrix set to ``E @ P`` followed by
`torch.nn.functional.log_softmax` for the tied feed-forward LM (values and gradients).

Then what the instructions promise beyond values (inputs unchanged, the ValueError, gradients only
when asked, stability on huge logits), and each plausible wrong answer of tests/ps1_submissions.py
graded in this process against the stored references: it loses points on its own task only (the
round trip through the sandbox, tests/test_grading.py, grades the same submissions end to end).
Last, Part D's experiment: it runs in the time the set promises, and the model answer quotes the
numbers it prints.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

import grading_helpers as helpers
from ps1_submissions import (
    AUTOGRADED,
    EXPERIMENTS,
    POINTS,
    REWRITES,
    WRONG,
    solution_answers,
)
from seqmodels.data import kjv_sentences
from seqmodels.feedforward import FeedForwardLM
from seqmodels.ngram import NGramLM
from seqmodels.seeding import make_generator
from seqmodels.synthetic import AgreementLanguage
from seqmodels.vocab import Vocabulary

PS = "ps1"
ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / PS / f"{PS}.ipynb"
KEYS = ("E", "W_xh", "b_h", "P", "b_y")


@pytest.fixture(scope="module")
def solution():
    return helpers.solution_functions(SOURCE)


def agreement_corpus(distance: int, n: int, seed: int) -> tuple[list[list[int]], int]:
    lang = AgreementLanguage(distance=distance)
    return lang.sample(n, make_generator(seed)), len(lang.vocab)


def kjv_corpus(n: int) -> tuple[list[list[int]], int]:
    """The first `n` training verses as ids of a small vocabulary (many `<unk>`s, some words of the
    vocabulary never seen in these verses, so contexts never seen)."""
    train = kjv_sentences("train")
    vocab = Vocabulary.build(train, min_count=200)
    return [vocab.encode(s) for s in train[:n]], len(vocab)


CORPORA = {
    "agreement d=2": lambda: agreement_corpus(2, 300, 11),
    "agreement d=4": lambda: agreement_corpus(4, 80, 12),
    "kjv 400 verses": lambda: kjv_corpus(400),
}


def pairs(sentences: list[list[int]]) -> Counter:
    return Counter((h, w) for s in sentences for h, w in zip([0, *s], [*s, 1], strict=True))


# ------------------------------------------------------------------ Tasks 1, 2, 5: counts and add-k


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_bigram_counts_equal_a_counter_of_pairs(solution, corpus):
    sentences, V = CORPORA[corpus]()
    copy = [list(s) for s in sentences]
    counts = solution["bigram_counts"](sentences, V)
    assert sentences == copy  # unchanged
    expected = torch.zeros(V, V, dtype=torch.int64)
    for (h, w), n in pairs(sentences).items():
        expected[h, w] = n
    assert counts.dtype == torch.int64 and torch.equal(counts, expected)


@pytest.mark.parametrize("k", [1e-3, 0.5, 1.0, 7.0])
def test_add_k_equals_the_librarys_add_k_bigram(solution, k):
    sentences, V = kjv_corpus(300)
    counts = solution["bigram_counts"](sentences, V)
    seen = counts.clone()
    probs = solution["add_k_probs"](counts, k)
    assert torch.equal(counts, seen)
    lm = NGramLM(2, V, "add-k", k=k).fit(sentences)
    oracle = torch.stack([lm.distribution([h]) for h in range(V)])
    torch.testing.assert_close(probs, oracle, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("smoothing", ["add-k", "kneser-ney"])
def test_perplexity_and_bits_per_character_equal_the_library_and_a_file(
    solution, smoothing, tmp_path
):
    """Task 5's perplexity against `NGramLM.perplexity`; its bits per character against the
    library's per-token probabilities in bits (`token_probs`, then `log2`), divided by the
    number of characters of a file the held-out text is written to, one sentence per line."""
    train = kjv_sentences("train")
    vocab = Vocabulary.build(train[:2000], min_count=5)
    ids = [vocab.encode(s) for s in train[:2000]]
    lm = NGramLM(2, len(vocab), smoothing, k=0.1).fit(ids)
    probs = torch.stack([lm.distribution([h]) for h in range(len(vocab))])
    held_out = [list(s) for s in kjv_sentences("validation")[:300]] + [[]]  # words, OOVs, empty
    assert any(w not in vocab.stoi for s in held_out for w in s)  # unknown words' letters count
    seen = probs.clone()
    ppl, bpc = solution["perplexity_and_bpc"](probs, held_out, vocab.stoi)
    assert torch.equal(probs, seen) and isinstance(ppl, float) and isinstance(bpc, float)
    encoded = [vocab.encode(s) for s in held_out]
    assert ppl == pytest.approx(lm.perplexity(encoded), rel=1e-10)
    text = tmp_path / "held_out.txt"
    with text.open("w", encoding="utf-8", newline="\n") as f:
        for sentence in held_out:
            print(*sentence, file=f)  # words separated by one space, then a newline
    characters = len(text.read_text(encoding="utf-8"))
    bits = -lm.token_probs(encoded).double().log2().sum().item()
    assert bpc == pytest.approx(bits / characters, rel=1e-10)


# ------------------------------------------------------------------ Task 3: the discounts


def discounts_by_hand(sentences: list[list[int]]) -> list[Fraction]:
    """Chen & Goodman's discounts from a Counter of the bigram counts, in exact fractions."""
    n = Counter(pairs(sentences).values())
    n1, n2, n3, n4 = (n[r] for r in (1, 2, 3, 4))
    y = Fraction(n1, n1 + 2 * n2)
    return [1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3]


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_the_discounts_equal_exact_fractions_from_a_counter(solution, corpus):
    sentences, V = CORPORA[corpus]()
    counts = solution["bigram_counts"](sentences, V)
    seen = counts.clone()
    mine = solution["kn_discounts"](counts)
    assert torch.equal(counts, seen)
    assert mine.shape == (3,) and mine.dtype == torch.float64
    expected = [float(d) for d in discounts_by_hand(sentences)]
    assert mine.tolist() == pytest.approx(expected, rel=1e-14, abs=1e-15)


def test_the_discounts_are_not_clipped(solution):
    # n_1 .. n_4 = 6, 2, 3, 4: D_2 = -0.7 and D_3+ = -0.2, returned as the formulas give them
    counts = torch.tensor(
        [[0, 1, 1, 1, 2], [0, 0, 0, 0, 0], [0, 3, 3, 3, 1], [0, 4, 4, 4, 4], [0, 2, 9, 1, 1]]
    )
    assert solution["kn_discounts"](counts).tolist() == pytest.approx([0.6, -0.7, -0.2])


@pytest.mark.parametrize("missing", [1, 2, 3, 4])
def test_a_zero_count_of_counts_raises_a_value_error_naming_it(solution, missing):
    values = [r for r in (1, 2, 3, 4, 5, 6) if r != missing]
    counts = torch.zeros(len(values) + 1, len(values) + 1, dtype=torch.int64)
    counts[0, 1:] = torch.tensor(values)
    with pytest.raises(ValueError, match=f"n_{missing} = 0"):
        solution["kn_discounts"](counts)


# ------------------------------------------------------------------ Task 4: Kneser–Ney


@pytest.mark.parametrize("corpus", sorted(CORPORA))
@pytest.mark.parametrize("D", [0.1, 0.5, 0.75, 0.95])
def test_three_equal_discounts_are_the_librarys_kneser_ney(solution, corpus, D):
    sentences, V = CORPORA[corpus]()
    counts = solution["bigram_counts"](sentences, V)
    probs = solution["kneser_ney_probs"](counts, torch.full((3,), D, dtype=torch.float64))
    lm = NGramLM(2, V, "kneser-ney", discount=D).fit(sentences)
    oracle = torch.stack([lm.distribution([h]) for h in range(V)])
    assert probs.dtype == torch.float64
    torch.testing.assert_close(probs, oracle, rtol=1e-12, atol=1e-15)


def kneser_ney_by_hand(sentences, V, d1, d2, d3):
    """Task 4's definition, one probability at a time, from dictionaries of counts."""
    bigrams = pairs(sentences)

    def D(c):
        return 0 if c == 0 else d1 if c == 1 else d2 if c == 2 else d3

    continuation = Counter(w for (_, w) in bigrams)  # N1+(. w): one per distinct bigram type
    total = sum(continuation.values())
    gamma0 = sum(D(c) for c in continuation.values()) / total

    def p_cont(w):
        if w == 0:
            return 0.0
        return max(continuation[w] - D(continuation[w]), 0) / total + gamma0 / (V - 1)

    rows = []
    for h in range(V):
        row = {w: c for (u, w), c in bigrams.items() if u == h}
        c_h = sum(row.values())
        if c_h == 0:
            rows.append([p_cont(w) for w in range(V)])
            continue
        gamma = sum(D(c) for c in row.values()) / c_h
        rows.append(
            [max(row.get(w, 0) - D(row.get(w, 0)), 0) / c_h + gamma * p_cont(w) for w in range(V)]
        )
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_three_discounts_equal_a_scalar_loop_and_rows_sum_to_one(solution, corpus):
    sentences, V = CORPORA[corpus]()
    counts = solution["bigram_counts"](sentences, V)
    discounts = solution["kn_discounts"](counts)
    d = discounts.tolist()
    seen = (counts.clone(), discounts.clone())
    probs = solution["kneser_ney_probs"](counts, discounts)
    assert torch.equal(counts, seen[0]) and torch.equal(discounts, seen[1])  # unchanged
    torch.testing.assert_close(probs, kneser_ney_by_hand(sentences, V, *d), rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(V, dtype=torch.float64))
    assert (probs[:, 0] == 0).all() and (probs[:, 1:] > 0).all()


def test_task_4s_public_example_is_what_its_instructions_say(solution):
    counts = solution["bigram_counts"]([[3, 4], [4]], 5)
    probs = solution["kneser_ney_probs"](counts, torch.tensor([0.5, 1.0, 1.5], dtype=torch.float64))
    cont = [0, 1 / 4, 1 / 8, 1 / 4, 3 / 8]
    assert probs.tolist() == [
        [0, 1 / 8, 1 / 16, 3 / 8, 7 / 16],
        cont,
        cont,
        [0, 1 / 8, 1 / 16, 1 / 8, 11 / 16],
        [0, 5 / 8, 1 / 16, 1 / 8, 3 / 16],
    ]


# ------------------------------------------------------------------ Task 6: the tied feed-forward LM


def tied_params(seed, V, m, ctx, q, dtype=torch.float64):
    g = make_generator(seed)
    return {
        "E": torch.randn(V, m, generator=g, dtype=dtype),
        "W_xh": torch.randn(q, ctx * m, generator=g, dtype=dtype) / math.sqrt(ctx * m),
        "b_h": torch.randn(q, generator=g, dtype=dtype),
        "P": torch.randn(m, q, generator=g, dtype=dtype) / math.sqrt(q),
        "b_y": torch.randn(V, generator=g, dtype=dtype),
    }


def library_logits(params, contexts):
    """`FeedForwardLM`'s forward pass with its parameters replaced by E, W_xh, b_h, E P, b_y (a
    functional call, so gradients reach E through both of its uses)."""
    V, m = params["E"].shape
    q = params["b_h"].shape[0]
    model = FeedForwardLM(V, contexts.shape[1], embed_dim=m, hidden_dim=q)
    tensors = {
        "C": params["E"],
        "H": params["W_xh"],
        "d": params["b_h"],
        "U": params["E"] @ params["P"],
        "b": params["b_y"],
    }
    return torch.func.functional_call(model, tensors, (contexts,))


def library_log_probs(params, contexts):
    return F.log_softmax(library_logits(params, contexts), dim=1)


@pytest.mark.parametrize(
    "V, m, ctx, q, batch", [(20, 4, 3, 8, 16), (7, 3, 1, 3, 1), (30, 5, 4, 6, 9)]
)
def test_the_tied_ffn_equals_the_librarys_model_with_U_set_to_E_P(solution, V, m, ctx, q, batch):
    params = tied_params(V + ctx, V, m, ctx, q)
    contexts = torch.randint(V, (batch, ctx), generator=make_generator(q))
    mine = solution["ffn_log_probs"](params, contexts)
    oracle = library_log_probs(params, contexts)
    assert mine.shape == (batch, V) and mine.dtype == torch.float64 and not mine.requires_grad
    torch.testing.assert_close(mine, oracle, rtol=1e-12, atol=1e-12)


def test_the_tied_ffns_gradients_equal_the_librarys(solution):
    params = {k: v.requires_grad_(True) for k, v in tied_params(5, 18, 4, 3, 5).items()}
    contexts = torch.randint(18, (16, 3), generator=make_generator(6))
    targets = torch.randint(18, (16,), generator=make_generator(7))
    before = {k: v.detach().clone() for k, v in params.items()}
    mine = torch.autograd.grad(
        -solution["ffn_log_probs"](params, contexts)[torch.arange(16), targets].mean(),
        [params[k] for k in KEYS],
    )
    oracle = torch.autograd.grad(
        F.nll_loss(library_log_probs(params, contexts), targets), [params[k] for k in KEYS]
    )
    for key, a, e in zip(KEYS, mine, oracle, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12, msg=key)
        assert torch.equal(params[key].detach(), before[key])
    # E gets gradient from both uses: the input look-up alone would leave unused rows at zero
    unused = sorted(set(range(18)) - set(contexts.flatten().tolist()))
    assert unused and mine[0][unused].abs().sum() > 0


@pytest.mark.parametrize(
    "dtype, shift, scale", [(torch.float32, 120.0, 1.0), (torch.float64, 0.0, 1e3)]
)
def test_huge_logits_give_finite_log_probabilities(solution, dtype, shift, scale):
    params = tied_params(8, 25, 6, 2, 6, dtype)
    params["E"] = params["E"] * scale
    params["b_y"] = params["b_y"] + shift
    contexts = torch.randint(25, (16, 2), generator=make_generator(9))
    logits = library_logits(params, contexts)
    naive = torch.log(logits.exp() / logits.exp().sum(dim=1, keepdim=True))
    assert not naive.isfinite().all()  # exp overflows: the case needs the shift
    mine = solution["ffn_log_probs"](params, contexts)
    assert mine.dtype == dtype and mine.isfinite().all()
    oracle = library_log_probs({k: v.double() for k, v in params.items()}, contexts)
    tolerance = {torch.float32: 1e-4, torch.float64: 1e-9}[dtype]
    torch.testing.assert_close(mine.double(), oracle, rtol=tolerance, atol=tolerance)


# ------------------------------------------------------------------ wrong answers, in this process


def graded_in_process(answers: dict[str, str]) -> dict[str, tuple[int, int]]:
    """{task: (cases passed, cases)} of the source notebook with `answers` in its answer cells, run
    here (`grading_helpers.graded_in_process`), given the setup cell's names (on the CPU) instead of
    running it; a training task's cell is graded in tests/test_grading_training.py."""
    namespace = {"math": math, "torch": torch, "make_generator": make_generator}
    namespace["device"] = torch.device("cpu")
    return helpers.graded_in_process(PS, answers, namespace, skip={"setup"})[0]


@pytest.fixture(scope="module")
def answers():
    return solution_answers(nbformat.read(SOURCE, as_version=4))


def test_the_solution_passes_every_case_in_process(answers):
    scores = graded_in_process(answers)
    assert all(passed == n for passed, n in scores.values()), scores
    manifest = helpers.current_manifest(PS, points=AUTOGRADED)
    assert sorted(scores) == sorted(t for t, e in manifest["tasks"].items() if "training" not in e)
    assert {t: e["points"] for t, e in manifest["tasks"].items()} == POINTS


TASK_OF = {
    "test_bigram_counts": "bigram_counts",
    "test_add_k_probs": "add_k_probs",
    "test_kn_discounts": "kn_discounts",
    "test_kneser_ney_probs": "kneser_ney_probs",
    "test_perplexity_and_bpc": "perplexity_and_bpc",
    "test_ffn_log_probs": "ffn_log_probs",
    "test_sgd_step": "sgd_step",
}


#: Part B trains the student's own Task 6 model: a bug there may cost Part B's trajectory too
DOWNSTREAM = {"ffn_log_probs": {"sgd_step"}}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_answer_loses_points_on_its_own_task_only(answers, name):
    """...and on the Part B task that trains its model, if it is Task 6."""
    cell, code, test_cell = WRONG[name]
    scores = graded_in_process({**answers, cell: code})
    task = TASK_OF[test_cell]
    passed, n = scores[task]
    assert 0 <= passed < n, (name, scores[task])
    spared = {task, *DOWNSTREAM.get(task, ())}
    assert all(p == m for t, (p, m) in scores.items() if t not in spared), (name, scores)


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_an_equivalent_rewrite_keeps_every_case(answers, name):
    cell, code, _ = REWRITES[name]
    scores = graded_in_process({**answers, cell: code})
    assert all(passed == n for passed, n in scores.values()), (name, scores)


# ------------------------------------------------------------------ Part D


def test_part_d_runs_within_its_time_and_its_model_answer_quotes_the_numbers(solution, capsys):
    """The solution's experiment, on one thread (a grading sandbox has one core): under 20 s of
    CPU, and every number the model answer states is one it prints."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    source = nbformat.read(SOURCE, as_version=4)
    (experiment,) = (
        solution_answers(source, experiments=True)[name] for name in sorted(EXPERIMENTS)
    )
    assert experiment.startswith("%matplotlib inline\n")  # a grading sandbox's backend is Agg
    experiment = experiment.removeprefix("%matplotlib inline\n")  # not Python
    namespace = dict(solution)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.process_time()
    try:
        exec(compile(experiment, "d_experiment", "exec"), namespace)  # noqa: S102
    finally:
        torch.set_num_threads(threads)
        plt.close("all")
    seconds = time.process_time() - started
    assert seconds < 20, seconds
    printed = capsys.readouterr().out
    model = next(c.source for c in source.cells if c.get("id") == "d-question")
    model = model.split("=== BEGIN MARK SCHEME ===")[1].split("**Rubric")[0]
    stated = set(re.findall(r"\d+\.\d\d", model))
    assert len(stated) >= 8
    assert stated <= set(re.findall(r"\d+\.\d\d", printed)), stated - set(
        re.findall(r"\d+\.\d\d", printed)
    )
    assert namespace["one_D"].index(min(namespace["one_D"])) == namespace["Ds"].index(0.6)
