"""Problem Set 5's solutions against oracles, its wrong answers, rewrites and mutants, in process.

The solutions are the references, so they are checked here against oracles nobody here wrote:
`F.scaled_dot_product_attention` with ``enable_gqa=True`` and with the key-value heads repeated by
hand, and `nn.MultiheadAttention` with copied weights where ``G = H``, for grouped-query attention;
the uncached full-sequence pass for the cache (one token at a time and in pieces); a stack of
`nn.TransformerEncoderLayer` (``norm_first=True``, a causal mask) with `F.layer_norm` and
`F.log_softmax` for the language model, its key-value heads repeated into plain multi-head
attention; `F.cross_entropy`, `clip_grad_norm_` and `torch.optim.Adam` on that oracle for the
trajectory; and enumeration for the decoders (every most-probable set for top-p, every sequence for
beam search). Then each plausible wrong answer of tests/ps5_submissions.py, graded in this process
against the stored references (and the properties of `seqmodels.grading.properties`), loses points
on its own task only and fails the check it is said to fail; the rewrites keep every case, and the
set's own mutants are killed at the stated rate (the round trip through the sandbox,
tests/test_grading_ps5.py, grades the submissions end to end). Last, part D's experiment runs in
the time the set promises and its model answer quotes it.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import re
import time
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import grading_helpers as helpers
from ps1_submissions import solution_answers
from ps5_submissions import (
    CASCADE_TASKS,
    CASCADES,
    EQUIVALENT,
    KILLED_BY,
    MUTANTS,
    ON_CACHE,
    PART_B,
    WRONG,
)

PS = "ps5"
ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / PS / f"{PS}.ipynb"
NOT_RUN_HERE = {"test_lm_training", "d_experiment"}  # training and part D: their own test
TASK_OF = {
    "test_gqa_attention": "gqa_attention",
    "test_kv_cache": "kv_cache",
    "test_lm_log_probs": "lm_log_probs",
    "test_train_step": "train_step",
    "test_decoders": "decoders",
}
#: the least share of the set's own mutants its cases must kill (issue 29)
KILL_RATE = 0.95


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
    for name, code in solution_answers(nbformat.read(SOURCE, as_version=4)).items():
        if name not in NOT_RUN_HERE:
            exec(compile(code, name, "exec"), namespace)  # noqa: S102
    namespace["device"] = torch.device("cpu")
    return namespace


def attn_params(seed, d, H, G, scale=1.0):
    g, dh = torch.Generator().manual_seed(seed), d // H
    shapes = {"Wq": (d, d), "Wk": (G * dh, d), "Wv": (G * dh, d), "Wo": (d, d)}
    return {
        k: torch.randn(*s, generator=g, dtype=torch.float64) * scale / math.sqrt(d)
        for k, s in shapes.items()
    }


def heads(x, n, dh):
    B, T, _ = x.shape
    return x.view(B, T, n, dh).transpose(1, 2)


# ------------------------------------------------------------------ Tasks 1 and 2: attention


@pytest.mark.parametrize(
    ("d", "H", "G", "B", "T"), [(8, 4, 2, 2, 5), (8, 4, 1, 3, 6), (8, 4, 4, 2, 7), (12, 6, 3, 1, 1)]
)
def test_gqa_equals_torchs_fused_attention_with_enable_gqa_and_with_repeated_heads(
    ns, d, H, G, B, T
):
    p = attn_params(d + H + G, d, H, G)
    x = torch.randn(B, T, d, generator=torch.Generator().manual_seed(T), dtype=torch.float64)
    y, (K, V) = ns["gqa_attention"](p, x, H, G)
    dh = d // H
    q, k, v = heads(x @ p["Wq"].T, H, dh), heads(x @ p["Wk"].T, G, dh), heads(x @ p["Wv"].T, G, dh)
    fused = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    repeated = F.scaled_dot_product_attention(
        q, k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1), is_causal=True
    )
    for oracle in (fused, repeated):
        torch.testing.assert_close(y, oracle.transpose(1, 2).reshape(B, T, d) @ p["Wo"].T)
    torch.testing.assert_close(K, k)
    torch.testing.assert_close(V, v)


def test_gqa_with_as_many_kv_heads_as_heads_equals_nn_multihead_attention(ns):
    d, H, T = 8, 4, 6
    p = attn_params(3, d, H, H)
    x = torch.randn(2, T, d, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    mha = nn.MultiheadAttention(d, H, bias=False, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([p["Wq"], p["Wk"], p["Wv"]]))
        mha.out_proj.weight.copy_(p["Wo"])
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    expected, _ = mha(x, x, x, attn_mask=causal, need_weights=False)
    torch.testing.assert_close(ns["gqa_attention"](p, x, H, H)[0], expected)


@pytest.mark.parametrize("sizes", [[1] * 9, [5, 3, 1], [2, 7], [9]])
def test_the_cache_fed_in_pieces_equals_the_uncached_full_pass(ns, sizes):
    d, H, G = 8, 4, 2
    p = attn_params(5, d, H, G, scale=3.0)
    x = torch.randn(
        2, sum(sizes), d, generator=torch.Generator().manual_seed(6), dtype=torch.float64
    )
    full, (K, V) = ns["gqa_attention"](p, x, H, G)
    cache, outs, at = None, [], 0
    for n in sizes:
        out, cache = ns["gqa_attention"](p, x[:, at : at + n], H, G, cache)
        outs.append(out)
        at += n
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(cache[0], K)
    torch.testing.assert_close(cache[1], V)


# ------------------------------------------------------------------ Task 3: the language model


def lm_params(seed, V=11, d=8, layers=2, H=4, G=2, d_ff=16, max_len=16):
    g = torch.Generator().manual_seed(seed)
    dh = d // H
    p = {
        "E": torch.randn(V, d, generator=g, dtype=torch.float64),
        "P": torch.randn(max_len, d, generator=g, dtype=torch.float64),
    }
    shapes = {
        "Wq": (d, d), "Wk": (G * dh, d), "Wv": (G * dh, d), "Wo": (d, d), "ln1.g": (d,),
        "ln1.b": (d,), "ln2.g": (d,), "ln2.b": (d,), "W1": (d_ff, d), "b1": (d_ff,),
        "W2": (d, d_ff), "b2": (d,),
    }  # fmt: skip
    for layer in range(layers):
        for k, s in shapes.items():
            p[f"L{layer}.{k}"] = torch.randn(*s, generator=g, dtype=torch.float64) / math.sqrt(
                s[-1]
            ) + (1.0 if k.endswith(".g") else 0.0)
    p["lnf.g"] = 1 + 0.3 * torch.randn(d, generator=g, dtype=torch.float64)
    p["lnf.b"] = 0.3 * torch.randn(d, generator=g, dtype=torch.float64)
    p["W_out"] = torch.randn(V, d, generator=g, dtype=torch.float64) / math.sqrt(d)
    p["b_out"] = torch.randn(V, generator=g, dtype=torch.float64)
    return p


def encoder_layers_oracle(p, tokens, H, G, layers):
    """nn.TransformerEncoderLayer(norm_first=True) run on the task's tensors (functional_call, so
    gradients reach them), its key-value heads repeated into plain multi-head attention;
    F.layer_norm and F.log_softmax."""
    d = p["E"].shape[1]
    dh, T = d // H, tokens.shape[1]
    x = p["E"][tokens] + p["P"][:T]
    for layer in range(layers):
        L = f"L{layer}"
        block = nn.TransformerEncoderLayer(
            d, H, p[f"{L}.W1"].shape[0], dropout=0.0, norm_first=True, batch_first=True
        ).double()
        rep = {w: p[f"{L}.{w}"].view(G, dh, d).repeat_interleave(H // G, 0).reshape(d, d)
               for w in ("Wk", "Wv")}  # fmt: skip
        zeros = torch.zeros(d, dtype=torch.float64)
        tensors = {
            "self_attn.in_proj_weight": torch.cat([p[f"{L}.Wq"], rep["Wk"], rep["Wv"]]),
            "self_attn.in_proj_bias": torch.cat([zeros, zeros, zeros]),
            "self_attn.out_proj.weight": p[f"{L}.Wo"],
            "self_attn.out_proj.bias": zeros,
            "linear1.weight": p[f"{L}.W1"], "linear1.bias": p[f"{L}.b1"],
            "linear2.weight": p[f"{L}.W2"], "linear2.bias": p[f"{L}.b2"],
            "norm1.weight": p[f"{L}.ln1.g"], "norm1.bias": p[f"{L}.ln1.b"],
            "norm2.weight": p[f"{L}.ln2.g"], "norm2.bias": p[f"{L}.ln2.b"],
        }  # fmt: skip
        mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
        x = torch.func.functional_call(block, tensors, (x,), {"src_mask": mask, "is_causal": True})
    x = F.layer_norm(x, (d,), p["lnf.g"], p["lnf.b"], eps=1e-5)
    return F.log_softmax(x @ p["W_out"].T + p["b_out"], dim=-1)


@pytest.mark.parametrize(("layers", "H", "G", "T"), [(2, 4, 2, 6), (1, 4, 1, 1), (3, 2, 2, 16)])
def test_the_lm_equals_a_stack_of_torch_encoder_layers(ns, layers, H, G, T):
    p = lm_params(layers * 10 + G, layers=layers, H=H, G=G)
    tokens = torch.randint(11, (3, T), generator=torch.Generator().manual_seed(T))
    got, caches = ns["lm_log_probs"](p, tokens, H, G)
    with torch.no_grad():
        expected = encoder_layers_oracle(p, tokens, H, G, layers)
    torch.testing.assert_close(got, expected)
    assert len(caches) == layers and caches[0][0].shape == (3, G, T, 8 // H)


def test_the_lm_with_caches_equals_its_full_pass(ns):
    p = lm_params(7)
    tokens = torch.randint(11, (2, 12), generator=torch.Generator().manual_seed(8))
    full, _ = ns["lm_log_probs"](p, tokens, 4, 2)
    caches, outs, at = None, [], 0
    for n in (4, 1, 1, 3, 3):
        out, caches = ns["lm_log_probs"](p, tokens[:, at : at + n], 4, 2, caches)
        outs.append(out)
        at += n
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ Task 4: the trajectory


def test_the_trajectory_equals_cross_entropy_adam_and_clipping_on_the_oracle_model(ns):
    steps, V, H, G, peak = 12, 13, 4, 2, 0.01
    start = ns["init_lm_params"](V, 8, 2, H, G, 16, 6, ns["make_generator"](70), torch.float64)
    rows = torch.randint(V, (steps * 4, 7), generator=ns["make_generator"](71))
    mine = {k: v.clone().requires_grad_() for k, v in start.items()}
    theirs = {k: v.clone().requires_grad_() for k, v in start.items()}
    opt_mine = ns["Adam"](mine.values(), lr=peak)  # the setup cell's, against torch's below
    opt_theirs = torch.optim.Adam(list(theirs.values()), lr=peak)
    for k in range(steps):
        batch, rate = rows[k * 4 : (k + 1) * 4], ns["learning_rate"](k, steps, peak, 5)
        got = ns["train_step"](mine, opt_mine, batch, rate, 0.05, H, G)
        for group in opt_theirs.param_groups:
            group["lr"] = rate
        logits = encoder_layers_oracle(theirs, batch[:, :-1], H, G, 2)
        loss = F.cross_entropy(logits.reshape(-1, V), batch[:, 1:].reshape(-1))
        opt_theirs.zero_grad()
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(list(theirs.values()), 0.05))
        opt_theirs.step()
        assert abs(got - loss.item()) < 1e-9 * (1 + abs(got))
        assert norm > 0.05  # clipping binds at every step of this case
    for key in start:
        torch.testing.assert_close(mine[key], theirs[key])


# ------------------------------------------------------------------ Task 6: the decoders


def top_p_by_enumeration(probs: list[float], p: float) -> list[bool]:
    """Of the sets {tokens at least as probable as the k-th most probable}, the first whose mass
    reaches p."""
    for threshold in sorted(set(probs), reverse=True):
        kept = [q >= threshold for q in probs]
        if sum(q for q, k in zip(probs, kept, strict=True) if k) >= p:
            return kept
    return [True] * len(probs)


def test_top_p_equals_enumeration_on_ties_and_exact_boundaries(ns):
    g = torch.Generator().manual_seed(9)
    rows = [[0.5, 0.25, 0.25, 0.0], [0.25] * 4, [0.125, 0.5, 0.125, 0.25]]
    rows += (torch.randint(1, 5, (40, 6), generator=g).double() / 8).tolist()  # many ties
    for row in rows:
        probs = torch.tensor(row, dtype=torch.float64)
        probs = probs / probs.sum()
        for p in (1e-9, 0.25, 0.5, 0.6, 0.75, 0.9, 0.999):
            got = ns["top_p_mask"](probs.log()[None], p)[0].tolist()
            assert got == top_p_by_enumeration(probs.tolist(), p), (row, p)


def test_a_full_width_beam_equals_enumeration_of_every_sequence(ns):
    for seed, alpha in itertools.product(range(6), (0.0, 0.6, 1.0)):
        table = torch.log_softmax(
            2 * torch.randn(6, 6, 6, generator=torch.Generator().manual_seed(seed)), -1
        ).double()

        def next_log_probs(prefixes, table=table):
            return table[prefixes[:, -1], prefixes.shape[1] % 6]

        best = -math.inf
        for length in range(4):
            for ys in itertools.product([0, 2, 3, 4, 5], repeat=length):
                seq, total = [0, *ys], 0.0
                for k, y in enumerate([*ys, 1]):
                    total += float(next_log_probs(torch.tensor([seq[: k + 1]]))[0, y])
                best = max(best, total / (length + 1) ** alpha)
        tokens, score = ns["beam_search"](next_log_probs, 6**4, 4, 0, 1, alpha)
        assert abs(score - best) < 1e-12, (seed, alpha)


# ------------------------------------------------------------------ graded in process


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One thread, as a grading sandbox has one core (and many threads on these tiny tensors are
    ten times slower on a loaded machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


_GRADED: dict[tuple, tuple] = {}


def graded_in_process(answers: dict[str, str]):
    """`helpers.graded_in_process` of `answers`, once per distinct submission in this module (the
    mutants hold the wrong answers and the cascades)."""
    key = tuple(sorted(answers.items()))
    if key not in _GRADED:
        _GRADED[key] = helpers.graded_in_process(PS, answers, skip=NOT_RUN_HERE)
    return _GRADED[key]


@pytest.fixture(scope="module")
def answers():
    return solution_answers(nbformat.read(SOURCE, as_version=4))


def test_the_solution_passes_every_case_in_process(answers):
    scores, _ = graded_in_process(answers)
    assert all(passed == n for passed, n in scores.values()), scores
    assert sorted(scores) == sorted(TASK_OF.values())


@pytest.mark.parametrize("name", sorted(WRONG))
def test_a_wrong_answer_loses_points_on_its_own_task_only_and_fails_its_named_check(answers, name):
    cell, code, test_cell = WRONG[name]
    scores, verdicts = graded_in_process({**answers, cell: code})
    task = TASK_OF[test_cell]
    passed, n = scores[task]
    assert passed < n, (name, scores[task])
    assert all(p == m for t, (p, m) in scores.items() if t != task), (name, scores)
    killed = [c for (t, c), v in verdicts.items() if t == task and c.startswith(KILLED_BY[name])]
    assert killed and not any(verdicts[task, c].passed for c in killed), (name, KILLED_BY[name])


def test_the_part_b_bugs_the_issue_asks_for_are_all_there():
    assert len(WRONG) >= 10 and len(PART_B) >= 4
    assert set(PART_B) <= set(WRONG)
    assert all(WRONG[b][2] in ("test_train_step", "test_decoders") for b in PART_B)


@pytest.mark.parametrize("name", sorted(CASCADES))
def test_a_wrong_attention_costs_the_tasks_that_call_it_and_nothing_else(answers, name):
    cell, code, _ = CASCADES[name]
    scores, _ = graded_in_process({**answers, cell: code})
    tasks = ON_CACHE.get(name, CASCADE_TASKS)
    for task in tasks:
        assert scores[task][0] < scores[task][1], (name, task, scores)
    others = {t: s for t, s in scores.items() if t not in (*tasks, "decoders")}
    assert all(p == m for p, m in others.values()), (name, scores)


@pytest.mark.parametrize("name", sorted(EQUIVALENT))
def test_an_equivalent_rewrite_keeps_every_case(answers, name):
    cell, code = EQUIVALENT[name]
    scores, verdicts = graded_in_process({**answers, cell: code})
    failed = [(t, c, v.message) for (t, c), v in verdicts.items() if not v.passed]
    assert not failed, (name, failed)


def test_the_sets_own_mutants_are_killed_at_the_stated_rate(answers):
    """Every mutant of tests/ps5_submissions.py (its wrong answers, the cascades, and small edits
    that break a promise or a boundary) fails at least one case; the rate is at least 95 %."""
    survivors = []
    for name, (cell, code, _) in sorted(MUTANTS.items()):
        scores, _ = graded_in_process({**answers, cell: code})
        if all(p == n for p, n in scores.values()):
            survivors.append(name)
    rate = 1 - len(survivors) / len(MUTANTS)
    print(
        f"mutants killed: {len(MUTANTS) - len(survivors)} of {len(MUTANTS)} ({rate:.0%}); "
        f"survivors {survivors}"
    )
    assert rate >= KILL_RATE, survivors


# ------------------------------------------------------------------ part B's training and part D


def test_training_and_part_d_run_within_their_time_and_the_model_answer_quotes_the_numbers(ns):
    """The training cell and part D's experiment on one thread (a grading sandbox has one core):
    training under 40 s of CPU time (about 20 s on an idle core), part D under 60 s, and every
    number part D's model answer states is one the cell prints."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from seqmodels.grading import training

    class Quiet(training.Training):
        def __init__(self, task, data, **kwargs):
            self.task, self.data = task, data

        def curve(self, losses):
            pass

        def model(self, log_probs, device="cpu"):
            pass

        def done(self):
            pass

    namespace = dict(ns)
    source = re.sub(
        r"^from seqmodels\.grading\.training import .*$", "", _cell("test_lm_training"), flags=re.M
    )
    namespace.update(Training=Quiet, KJVStream=training.KJVStream)
    experiment = solution_answers(nbformat.read(SOURCE, as_version=4), experiments=True)[
        "d_experiment"
    ]
    assert experiment.startswith("%matplotlib inline\n")  # a grading sandbox's backend is Agg
    experiment = experiment.removeprefix("%matplotlib inline\n")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            started = time.process_time()
            exec(compile(source, "test_lm_training", "exec"), namespace)  # noqa: S102
            trained = time.process_time() - started
            started = time.process_time()
            exec(compile(experiment, "d_experiment", "exec"), namespace)  # noqa: S102
            seconds = time.process_time() - started
    finally:
        plt.close("all")
    print(f"training {trained:.1f} s, part D {seconds:.1f} s of CPU time")
    assert trained < 40 and seconds < 60  # about 20 s on an idle core; a loaded machine is slower
    printed = out.getvalue()
    model_answer = _cell("d_question").split("=== BEGIN MARK SCHEME ===")[1].split("**Rubric")[0]
    helpers.assert_model_answer_quotes(model_answer, printed)
