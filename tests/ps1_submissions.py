"""Plausible submissions for Problem Set 1: the correct answers and typical wrong ones.

A helper for tests of the grading pipeline (not a test module itself). `solution_answers` reads the
correct answer cells out of the nbgrader source notebook, `fill` writes answers into a copy of a
notebook (the student release, or the source itself), and `WRONG` lists realistic buggy answer
cells, each with one bug that should cost points on its own task only.

PS1's autograded points are parts A and B's, `AUTOGRADED`; the smoke profile, which the round trips
use for most submissions, does not run Part B's training task (4 points), so a submission there
reaches `SMOKE`. With its written parts (C and D, graded by hand) the set has `MAX_SCORE`. Part B's
wrong training steps (`ps1_training_submissions.TRAJECTORY_BUGS`) are in `WRONG` too.
"""

from __future__ import annotations

import copy

import nbformat

from ps1_training_submissions import EQUIVALENT_STEPS, TRAJECTORY_BUGS

_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")

#: each autograded task's points (its test cell's): Part A's six tasks (8), Part B's trajectory
#: (B1, 2) and training task (B2-B4, 4)
POINTS = {
    "bigram_counts": 0.5,
    "add_k_probs": 0.5,
    "kn_discounts": 1.5,
    "kneser_ney_probs": 3.5,
    "perplexity_and_bpc": 1.5,
    "ffn_log_probs": 0.5,
    "sgd_step": 2,
    "ffn_training": 4,
}
AUTOGRADED = 14  # Part A 8, Part B 2 + 4
SMOKE = 10  # without Part B's training task (the smoke profile)
MAX_SCORE = 20  # and Part C (3) and Part D (3), graded by hand

#: answer cells that run an experiment graded by hand (PS1's Part D, about 10 s on one core): the
#: submissions built for the grading round trips leave them as a comment, since they earn no
#: autograded point; tests/test_grading_ps1.py runs the solution's own experiment
EXPERIMENTS = {"d_experiment"}
EXPERIMENT_LEFT_OUT = "# (the experiment of this cell is not run in the grading round trips)"


def _grade_id(cell: nbformat.NotebookNode) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_answer(cell: nbformat.NotebookNode) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def solution_answers(source: nbformat.NotebookNode, experiments: bool = False) -> dict[str, str]:
    """grade_id → answer-cell code of the source notebook, the solution markers removed; the
    answer cells named in `EXPERIMENTS` hold `EXPERIMENT_LEFT_OUT` unless `experiments`."""
    answers = {}
    for cell in source.cells:
        if cell.cell_type == "code" and _is_answer(cell):
            lines = [ln for ln in cell.source.splitlines() if ln.strip() not in _MARKERS]
            answers[_grade_id(cell)] = "\n".join(lines)
            if _grade_id(cell) in EXPERIMENTS and not experiments:
                answers[_grade_id(cell)] = EXPERIMENT_LEFT_OUT
    return answers


def fill(release: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of `release` whose answer cells named in `answers` hold the given code."""
    notebook = copy.deepcopy(release)
    missing = set(answers)
    for cell in notebook.cells:
        grade_id = _grade_id(cell)
        if cell.cell_type == "code" and _is_answer(cell) and grade_id in answers:
            cell.source = answers[grade_id]
            missing.discard(grade_id)
    if missing:
        raise KeyError(f"no answer cell with grade_id {sorted(missing)}")
    return notebook


_COUNTS_NO_EOS = '''
def bigram_counts(sentences: list[list[int]], vocab_size: int) -> torch.Tensor:
    """(V, V) int64 counts: C[h, w] = how often w follows h, sentences padded with <s> and </s>."""
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.int64)
    for sentence in sentences:
        padded = [0] + sentence
        for i in range(len(padded) - 1):
            counts[padded[i], padded[i + 1]] += 1
    return counts
'''

_COUNTS_TRANSPOSED = '''
def bigram_counts(sentences: list[list[int]], vocab_size: int) -> torch.Tensor:
    """(V, V) int64 counts: C[h, w] = how often w follows h, sentences padded with <s> and </s>."""
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.int64)
    for sentence in sentences:
        padded = [0] + sentence + [1]
        for prev, word in zip(padded, padded[1:]):
            counts[word, prev] += 1
    return counts
'''

_ADD_K_COLUMNS = '''
def add_k_probs(counts: torch.Tensor, k: float) -> torch.Tensor:
    """(V, V) float64 add-k probabilities P[h, w]; column 0 (<s>) is 0, each row sums to 1."""
    V = counts.shape[0]
    c = counts.double()
    probs = (c + k) / (c.sum(dim=0, keepdim=True) + k * (V - 1))
    probs[:, 0] = 0
    return probs
'''

_ADD_K_V_NOT_V_MINUS_1 = '''
def add_k_probs(counts: torch.Tensor, k: float) -> torch.Tensor:
    """(V, V) float64 add-k probabilities P[h, w]; column 0 (<s>) is 0, each row sums to 1."""
    V = counts.shape[0]
    c = counts.double()
    probs = (c + k) / (c.sum(dim=1, keepdim=True) + k * V)
    probs[:, 0] = 0
    return probs
'''

_ADD_K_KEEPS_BOS = '''
def add_k_probs(counts: torch.Tensor, k: float) -> torch.Tensor:
    """(V, V) float64 add-k probabilities P[h, w]; column 0 (<s>) is 0, each row sums to 1."""
    V = counts.shape[0]
    c = counts.double()
    return (c + k) / (c.sum(dim=1, keepdim=True) + k * (V - 1))
'''

# Task 5: each wrong answer returns (perplexity, bits per character), one of them (or both) wrong
_PPL_HEAD = """
def perplexity_and_bpc(
    probs: torch.Tensor, sentences: list[list[str]], stoi: dict[str, int]
) -> tuple[float, float]:
    \"\"\"(perplexity, bits per character) over every predicted token, </s> included.\"\"\"
"""


def _task5(body: str) -> str:
    """Task 5's function with `body` (the header is the same for every wrong answer)."""
    return _PPL_HEAD + body.lstrip("\n")


_PPL_NO_UNK = _task5("""
    nats, n, chars = 0.0, 0, 0
    for sentence in sentences:
        ids = [0] + [stoi[word] for word in sentence] + [1]
        for h, w in zip(ids[:-1], ids[1:]):
            nats -= math.log(probs[h, w].item())
            n += 1
        chars += len(" ".join(sentence) + "\\n")
    return math.exp(nats / n), nats / math.log(2) / chars
""")

_PPL_MEAN_OVER_SENTENCES = _task5("""
    per_sentence, nats, chars = [], 0.0, 0
    for sentence in sentences:
        ids = [0] + [stoi.get(word, 2) for word in sentence] + [1]
        nll = -sum(math.log(probs[h, w].item()) for h, w in zip(ids[:-1], ids[1:]))
        per_sentence.append(nll / (len(ids) - 1))
        nats += nll
        chars += len(" ".join(sentence) + "\\n")
    return math.exp(sum(per_sentence) / len(per_sentence)), nats / math.log(2) / chars
""")

_PPL_LOG2 = _task5("""
    bits, n, chars = 0.0, 0, 0
    for sentence in sentences:
        ids = [0] + [stoi.get(word, 2) for word in sentence] + [1]
        for h, w in zip(ids[:-1], ids[1:]):
            bits -= math.log2(probs[h, w].item())
            n += 1
        chars += len(" ".join(sentence) + "\\n")
    return math.exp(bits / n), bits / chars
""")

_BPC_NO_NEWLINE = _task5("""
    nats, n, chars = 0.0, 0, 0
    for sentence in sentences:
        ids = [0] + [stoi.get(word, 2) for word in sentence] + [1]
        for h, w in zip(ids[:-1], ids[1:]):
            nats -= math.log(probs[h, w].item())
            n += 1
        chars += len(" ".join(sentence))  # the words and spaces, but not the newline
    return math.exp(nats / n), nats / math.log(2) / chars
""")

_BPC_NATURAL_LOG = _task5("""
    nats, n, chars = 0.0, 0, 0
    for sentence in sentences:
        ids = [0] + [stoi.get(word, 2) for word in sentence] + [1]
        for h, w in zip(ids[:-1], ids[1:]):
            nats -= math.log(probs[h, w].item())
            n += 1
        chars += len(" ".join(sentence) + "\\n")
    return math.exp(nats / n), nats / chars  # nats per character, not bits
""")

_BPC_COUNTS_UNK = _task5("""
    nats, n, chars = 0.0, 0, 0
    for sentence in sentences:
        words = [word if word in stoi else "<unk>" for word in sentence]
        ids = [0] + [stoi[word] for word in words] + [1]
        for h, w in zip(ids[:-1], ids[1:]):
            nats -= math.log(probs[h, w].item())
            n += 1
        chars += len(" ".join(words) + "\\n")  # the text as the model sees it: <unk>'s 5 characters
    return math.exp(nats / n), nats / math.log(2) / chars
""")

_DISCOUNTS_AT_LEAST_R = """
def kn_discounts(counts: torch.Tensor) -> torch.Tensor:
    \"\"\"(3,) float64 [D1, D2, D3+] of modified Kneser-Ney from the count-of-counts n_1 .. n_4.\"\"\"
    n1, n2, n3, n4 = (int((counts >= r).sum()) for r in (1, 2, 3, 4))
    if 0 in (n1, n2, n3, n4):
        raise ValueError("some count-of-count n_r is 0")
    y = n1 / (n1 + 2 * n2)
    d = [1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3]
    return torch.tensor(d, dtype=torch.float64, device=counts.device)
"""

_DISCOUNTS_OFF_BY_ONE = """
def kn_discounts(counts: torch.Tensor) -> torch.Tensor:
    \"\"\"(3,) float64 [D1, D2, D3+] of modified Kneser-Ney from the count-of-counts n_1 .. n_4.\"\"\"
    n = [int((counts == r).sum()) for r in range(4)]
    if 0 in n:
        raise ValueError("some count-of-count n_r is 0")
    n1, n2, n3, n4 = n
    y = n1 / (n1 + 2 * n2)
    d = [1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3]
    return torch.tensor(d, dtype=torch.float64, device=counts.device)
"""

_DISCOUNTS_NO_CHECK = """
def kn_discounts(counts: torch.Tensor) -> torch.Tensor:
    \"\"\"(3,) float64 [D1, D2, D3+] of modified Kneser-Ney from the count-of-counts n_1 .. n_4.\"\"\"
    n1, n2, n3, n4 = (int((counts == r).sum()) for r in (1, 2, 3, 4))
    y = n1 / (n1 + 2 * n2)
    d = [1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3]
    return torch.tensor(d, dtype=torch.float64, device=counts.device)
"""

_DISCOUNTS_CLIPPED = """
def kn_discounts(counts: torch.Tensor) -> torch.Tensor:
    \"\"\"(3,) float64 [D1, D2, D3+] of modified Kneser-Ney from the count-of-counts n_1 .. n_4.\"\"\"
    n1, n2, n3, n4 = (int((counts == r).sum()) for r in (1, 2, 3, 4))
    if 0 in (n1, n2, n3, n4):
        raise ValueError("some count-of-count n_r is 0")
    y = n1 / (n1 + 2 * n2)
    d = [1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3]
    d = [min(max(value, 0.0), r) for value, r in zip(d, (1, 2, 3))]  # a discount in [0, r]
    return torch.tensor(d, dtype=torch.float64, device=counts.device)
"""

# Task 4: one correct implementation, written row by row as a student might, and its bugs
_KN = """
def kneser_ney_probs(counts: torch.Tensor, discounts: torch.Tensor) -> torch.Tensor:
    \"\"\"(V, V) float64 interpolated modified Kneser-Ney bigram probabilities; rows sum to 1.\"\"\"
    V = counts.shape[0]
    C = counts.double()
    d1, d2, d3 = discounts.double()

    def discount(c):
        D = torch.zeros_like(c)
        D[c == 1] = d1
        D[c == 2] = d2
        D[c >= 3] = d3
        return D

    def level(c, lower):
        D = discount(c)
        total = c.sum(dim=1, keepdim=True)
        gamma = D.sum(dim=1, keepdim=True) / total
        out = torch.clamp(c - D, min=0) / total + gamma * lower
        return torch.where(total > 0, out, lower)

    uniform = torch.full((1, V), 1.0 / (V - 1), dtype=torch.float64, device=C.device)
    uniform[0, 0] = 0
    N = (C > 0).sum(dim=0, keepdim=True).double()
    return level(C, level(N, uniform))
"""


def _kn(*edits: tuple[str, str]) -> str:
    """`_KN` with each (right, wrong) edit applied once."""
    code = _KN
    for right, wrong in edits:
        assert code.count(right) == 1, right
        code = code.replace(right, wrong)
    return code


_KN_ONE_DISCOUNT = _kn(("D[c == 2] = d2", "D[c == 2] = d1"), ("D[c >= 3] = d3", "D[c >= 3] = d1"))
_KN_TWOS_GET_D3 = _kn(("D[c >= 3] = d3", "D[c >= 2] = d3"))
_KN_GAMMA_WRONG_AXIS = _kn(
    ("gamma = D.sum(dim=1, keepdim=True) / total", "gamma = D.sum(dim=0, keepdim=True) / total")
)
_KN_CONTINUATION_FROM_UNIGRAMS = _kn(
    ("N = (C > 0).sum(dim=0, keepdim=True).double()", "N = C.sum(dim=0, keepdim=True)")
)
_KN_UNSEEN_CONTEXT_ZEROS = _kn(
    ("return torch.where(total > 0, out, lower)", "return torch.nan_to_num(out)")
)
_KN_UNIFORM_OVER_V = _kn(("    uniform[0, 0] = 0\n", ""))
_KN_CONTINUATION_NOT_SMOOTHED = _kn(
    ("return level(C, level(N, uniform))", "return level(C, N / N.sum())")
)

_FFN = """
def ffn_log_probs(params: dict[str, torch.Tensor], contexts: torch.Tensor) -> torch.Tensor:
    \"\"\"(batch, V) log-probabilities of the feed-forward LM with tied embeddings (W_hy = E P).\"\"\"
    E, W_xh, b_h, P, b_y = (params[k] for k in ("E", "W_xh", "b_h", "P", "b_y"))
    x = torch.cat([E[contexts[:, i]] for i in range(contexts.shape[1])], dim=1)
    h = torch.tanh(x @ W_xh.T + b_h)
    logits = h @ P.T @ E.T + b_y
    m = logits.max(dim=1, keepdim=True).values
    return logits - m - torch.log(torch.exp(logits - m).sum(dim=1, keepdim=True))
"""


def _ffn(*edits: tuple[str, str]) -> str:
    """`_FFN` with each (right, wrong) edit applied once."""
    code = _FFN
    for right, wrong in edits:
        assert code.count(right) == 1, right
        code = code.replace(right, wrong)
    return code


_FFN_NO_MAX_SHIFT = _ffn(
    (
        "return logits - m - torch.log(torch.exp(logits - m).sum(dim=1, keepdim=True))",
        "return torch.log(torch.exp(logits) / torch.exp(logits).sum(dim=1, keepdim=True))",
    )
)
_FFN_REVERSED_CONTEXT = _ffn(
    ("E[contexts[:, i]] for i in range", "E[contexts[:, -1 - i]] for i in range")
)
_FFN_PROBABILITIES = _ffn(
    (
        "return logits - m - torch.log(torch.exp(logits - m).sum(dim=1, keepdim=True))",
        "return torch.exp(logits - m) / torch.exp(logits - m).sum(dim=1, keepdim=True)",
    )
)
_FFN_NO_GRAD = _ffn(
    (
        "    E, W_xh",
        "    return _forward(params, contexts)\n\n\n"
        "@torch.no_grad()\ndef _forward(params, contexts):\n    E, W_xh",
    )
)
_FFN_SHIFTS_B_Y_IN_PLACE = _ffn(
    (
        "    x = torch.cat",
        "    b_y -= b_y.max()  # smaller logits, the same softmax\n    x = torch.cat",
    )
)
_FFN_FLOAT64 = _ffn(
    (
        "E, W_xh, b_h, P, b_y = (params[k] for k in",
        "E, W_xh, b_h, P, b_y = (params[k].double() for k in",
    )
)

#: name → (grade_id of the answer cell, a right answer written otherwise, its test cell): each
#: must keep every case
REWRITES: dict[str, tuple[str, str, str]] = {
    "kn_row_by_row_with_masks": ("kneser_ney_probs", _KN.strip("\n"), "test_kneser_ney_probs"),
    "ffn_concatenated_by_hand": ("ffn_log_probs", _FFN.strip("\n"), "test_ffn_log_probs"),
    **{
        f"sgd_step_{name}": ("sgd_step", code, "test_sgd_step")
        for name, code in EQUIVALENT_STEPS.items()
    },
}

PPL, TEST_PPL = "perplexity_and_bpc", "test_perplexity_and_bpc"  # Task 5's answer and test cells

#: name → (grade_id of the answer cell, buggy code for it, grade_id of the test cell that loses points)
WRONG: dict[str, tuple[str, str, str]] = {
    name: (answer, code.strip("\n"), test)
    for name, (answer, code, test) in {
        "counts_forget_eos": ("bigram_counts", _COUNTS_NO_EOS, "test_bigram_counts"),
        "counts_transposed": ("bigram_counts", _COUNTS_TRANSPOSED, "test_bigram_counts"),
        "add_k_normalise_columns": ("add_k_probs", _ADD_K_COLUMNS, "test_add_k_probs"),
        "add_k_denominator_V": ("add_k_probs", _ADD_K_V_NOT_V_MINUS_1, "test_add_k_probs"),
        "add_k_keeps_bos_column": ("add_k_probs", _ADD_K_KEEPS_BOS, "test_add_k_probs"),
        "perplexity_no_unk": (PPL, _PPL_NO_UNK, TEST_PPL),
        "perplexity_mean_over_sentences": (PPL, _PPL_MEAN_OVER_SENTENCES, TEST_PPL),
        "perplexity_log2_then_exp": (PPL, _PPL_LOG2, TEST_PPL),
        "bpc_characters_without_the_newline": (PPL, _BPC_NO_NEWLINE, TEST_PPL),
        "bpc_natural_log": (PPL, _BPC_NATURAL_LOG, TEST_PPL),
        "bpc_counts_the_characters_of_unk": (PPL, _BPC_COUNTS_UNK, TEST_PPL),
        "discounts_count_at_least_r": ("kn_discounts", _DISCOUNTS_AT_LEAST_R, "test_kn_discounts"),
        "discounts_n_r_off_by_one": ("kn_discounts", _DISCOUNTS_OFF_BY_ONE, "test_kn_discounts"),
        "discounts_never_raise": ("kn_discounts", _DISCOUNTS_NO_CHECK, "test_kn_discounts"),
        "discounts_clipped": ("kn_discounts", _DISCOUNTS_CLIPPED, "test_kn_discounts"),
        "kn_one_discount_for_every_count": (
            "kneser_ney_probs",
            _KN_ONE_DISCOUNT,
            "test_kneser_ney_probs",
        ),
        "kn_twos_get_d3": ("kneser_ney_probs", _KN_TWOS_GET_D3, "test_kneser_ney_probs"),
        "kn_gamma_wrong_axis": ("kneser_ney_probs", _KN_GAMMA_WRONG_AXIS, "test_kneser_ney_probs"),
        "kn_continuation_from_unigram_counts": (
            "kneser_ney_probs",
            _KN_CONTINUATION_FROM_UNIGRAMS,
            "test_kneser_ney_probs",
        ),
        "kn_unseen_context_zeros": (
            "kneser_ney_probs",
            _KN_UNSEEN_CONTEXT_ZEROS,
            "test_kneser_ney_probs",
        ),
        "kn_uniform_includes_bos": (
            "kneser_ney_probs",
            _KN_UNIFORM_OVER_V,
            "test_kneser_ney_probs",
        ),
        "kn_continuation_not_smoothed": (
            "kneser_ney_probs",
            _KN_CONTINUATION_NOT_SMOOTHED,
            "test_kneser_ney_probs",
        ),
        "ffn_no_max_shift": ("ffn_log_probs", _FFN_NO_MAX_SHIFT, "test_ffn_log_probs"),
        "ffn_reversed_context": ("ffn_log_probs", _FFN_REVERSED_CONTEXT, "test_ffn_log_probs"),
        "ffn_returns_probabilities": ("ffn_log_probs", _FFN_PROBABILITIES, "test_ffn_log_probs"),
        "ffn_under_no_grad": ("ffn_log_probs", _FFN_NO_GRAD, "test_ffn_log_probs"),
        "ffn_shifts_b_y_in_place": (
            "ffn_log_probs",
            _FFN_SHIFTS_B_Y_IN_PLACE,
            "test_ffn_log_probs",
        ),
        "ffn_casts_to_float64": ("ffn_log_probs", _FFN_FLOAT64, "test_ffn_log_probs"),
    }.items()
}

WRONG.update(
    {name: (cell, code, test_cell) for name, (cell, code, test_cell, _) in TRAJECTORY_BUGS.items()}
)
