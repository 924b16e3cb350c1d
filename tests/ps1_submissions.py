"""Plausible submissions for Problem Set 1: the correct answers and typical wrong ones.

A helper for tests of the grading pipeline (not a test module itself). `solution_answers` reads the
correct answer cells out of the nbgrader source notebook, `fill` writes answers into a copy of a
notebook (the student release, or the source itself), and `WRONG` lists realistic buggy answer
cells, each with one bug that should cost points on its own task only.
"""

from __future__ import annotations

import copy

import nbformat

_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def _grade_id(cell: nbformat.NotebookNode) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_answer(cell: nbformat.NotebookNode) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def solution_answers(source: nbformat.NotebookNode) -> dict[str, str]:
    """grade_id → answer-cell code of the source notebook, the solution markers removed."""
    answers = {}
    for cell in source.cells:
        if cell.cell_type == "code" and _is_answer(cell):
            lines = [ln for ln in cell.source.splitlines() if ln.strip() not in _MARKERS]
            answers[_grade_id(cell)] = "\n".join(lines)
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

_PPL_NO_UNK = '''
def perplexity(probs: torch.Tensor, sentences: list[list[str]], stoi: dict[str, int]) -> float:
    """exp of the mean negative log-likelihood (nats) over every predicted token, </s> included."""
    nll, n = 0.0, 0
    for sentence in sentences:
        ids = [0] + [stoi[word] for word in sentence] + [1]
        for h, w in zip(ids[:-1], ids[1:]):
            nll -= math.log(probs[h, w].item())
            n += 1
    return math.exp(nll / n)
'''

_PPL_MEAN_OVER_SENTENCES = '''
def perplexity(probs: torch.Tensor, sentences: list[list[str]], stoi: dict[str, int]) -> float:
    """exp of the mean negative log-likelihood (nats) over every predicted token, </s> included."""
    per_sentence = []
    for sentence in sentences:
        ids = [0] + [stoi.get(word, 2) for word in sentence] + [1]
        nll = -sum(math.log(probs[h, w].item()) for h, w in zip(ids[:-1], ids[1:]))
        per_sentence.append(nll / (len(ids) - 1))
    return math.exp(sum(per_sentence) / len(per_sentence))
'''

_PPL_LOG2 = '''
def perplexity(probs: torch.Tensor, sentences: list[list[str]], stoi: dict[str, int]) -> float:
    """exp of the mean negative log-likelihood (nats) over every predicted token, </s> included."""
    nll, n = 0.0, 0
    for sentence in sentences:
        ids = [0] + [stoi.get(word, 2) for word in sentence] + [1]
        for h, w in zip(ids[:-1], ids[1:]):
            nll -= math.log2(probs[h, w].item())
            n += 1
    return math.exp(nll / n)
'''

_SAMPLE_ARGMAX = '''
def sample_sentence(
    probs: torch.Tensor, generator: torch.Generator, max_len: int = 20
) -> list[int]:
    """Word ids drawn from the bigram model after <s>, until </s> (not included) or max_len."""
    out: list[int] = []
    prev = 0
    while len(out) < max_len:
        nxt = int(torch.argmax(probs[prev]))
        if nxt == 1:
            break
        out.append(nxt)
        prev = nxt
    return out
'''

_SAMPLE_GLOBAL_RNG = '''
def sample_sentence(
    probs: torch.Tensor, generator: torch.Generator, max_len: int = 20
) -> list[int]:
    """Word ids drawn from the bigram model after <s>, until </s> (not included) or max_len."""
    out: list[int] = []
    prev = 0
    while len(out) < max_len:
        nxt = int(torch.multinomial(probs[prev], 1))
        if nxt == 1:
            break
        out.append(nxt)
        prev = nxt
    return out
'''

_FFN_NO_D = '''
def ffn_logits(
    C: torch.Tensor,
    H: torch.Tensor,
    d: torch.Tensor,
    U: torch.Tensor,
    b: torch.Tensor,
    contexts: torch.Tensor,
) -> torch.Tensor:
    """(batch, V) logits b + tanh(d + x H^T) U^T, x the context embeddings concatenated in order."""
    x = torch.cat([C[contexts[:, i]] for i in range(contexts.shape[1])], dim=1)
    return b + torch.tanh(x @ H.T) @ U.T
'''

_FFN_REVERSED = '''
def ffn_logits(
    C: torch.Tensor,
    H: torch.Tensor,
    d: torch.Tensor,
    U: torch.Tensor,
    b: torch.Tensor,
    contexts: torch.Tensor,
) -> torch.Tensor:
    """(batch, V) logits b + tanh(d + x H^T) U^T, x the context embeddings concatenated in order."""
    n = contexts.shape[1]
    x = torch.cat([C[contexts[:, n - 1 - i]] for i in range(n)], dim=1)
    return b + torch.tanh(d + x @ H.T) @ U.T
'''

_FFN_FLOAT64 = '''
def ffn_logits(
    C: torch.Tensor,
    H: torch.Tensor,
    d: torch.Tensor,
    U: torch.Tensor,
    b: torch.Tensor,
    contexts: torch.Tensor,
) -> torch.Tensor:
    """(batch, V) logits b + tanh(d + x H^T) U^T, x the context embeddings concatenated in order."""
    C, H, d, U, b = (t.double() for t in (C, H, d, U, b))
    x = C[contexts].reshape(contexts.shape[0], -1)
    return b + torch.tanh(d + x @ H.T) @ U.T
'''

#: name → (grade_id of the answer cell, buggy code for it, grade_id of the test cell that loses points)
WRONG: dict[str, tuple[str, str, str]] = {
    name: (answer, code.strip("\n"), test)
    for name, (answer, code, test) in {
        "counts_forget_eos": ("bigram_counts", _COUNTS_NO_EOS, "test_bigram_counts"),
        "counts_transposed": ("bigram_counts", _COUNTS_TRANSPOSED, "test_bigram_counts"),
        "add_k_normalise_columns": ("add_k_probs", _ADD_K_COLUMNS, "test_add_k_probs"),
        "add_k_denominator_V": ("add_k_probs", _ADD_K_V_NOT_V_MINUS_1, "test_add_k_probs"),
        "add_k_keeps_bos_column": ("add_k_probs", _ADD_K_KEEPS_BOS, "test_add_k_probs"),
        "perplexity_no_unk": ("perplexity", _PPL_NO_UNK, "test_perplexity"),
        "perplexity_mean_over_sentences": (
            "perplexity",
            _PPL_MEAN_OVER_SENTENCES,
            "test_perplexity",
        ),
        "perplexity_log2_then_exp": ("perplexity", _PPL_LOG2, "test_perplexity"),
        "sample_argmax": ("sample_sentence", _SAMPLE_ARGMAX, "test_sample_sentence"),
        "sample_global_rng": ("sample_sentence", _SAMPLE_GLOBAL_RNG, "test_sample_sentence"),
        "ffn_forget_d": ("ffn_logits", _FFN_NO_D, "test_ffn_logits"),
        "ffn_reversed_context": ("ffn_logits", _FFN_REVERSED, "test_ffn_logits"),
        "ffn_casts_to_float64": ("ffn_logits", _FFN_FLOAT64, "test_ffn_logits"),
    }.items()
}
