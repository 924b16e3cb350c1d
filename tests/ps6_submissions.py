"""Plausible submissions for Problem Set 6 (the capstone: a byte-level BPE tokenizer and a small GPT
on the KJV, trained before grading and submitted as a checkpoint): wrong answers, rule-breakers, a
cheat.

A helper for tests of the grading pipeline (not a test module itself), built as
tests/ps5_submissions.py is: each wrong answer is the solution's answer cell with one typical bug
put in. `WRONG` cost points on their own task only; `KILLED_BY` names, for each, a case of its task
that fails. `CASCADES` are bugs of `gpt_log_probs`, which the training step calls: they cost Task 4
too, by design. `RULE_BREAKERS` import the course library's hidden tokenizers; they earn nothing for
that task. `ps6_cheat` is a model that reads the token it is asked to predict.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from grading_helpers import wrong_answers

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "ps6" / "ps6.ipynb"

# grade_id of each answer cell → grade_id of its test cell (None: not graded automatically)
TESTS = {
    "train_byte_bpe": "test_train_byte_bpe",
    "encode_decode": "test_encode_decode",
    "gpt_log_probs": "test_gpt_log_probs",
    "train_step": "test_train_step",
    "capstone_run": None,  # the student's own run, graded through its checkpoint and part D
    "d_experiment": None,  # part D's experiment, graded by hand
}

_PICK = "best = min(pairs, key=lambda p: (-pairs[p], p))"
_RANK = "k = min(rank.get(pair, len(merges)) for pair in zip(part, part[1:]))"
_LEFTMOST = "k = next((rank[p] for p in zip(part, part[1:]) if p in rank), len(merges))"
_SDPA = "heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)"
_CLIP = "    torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)\n"
_LOSS = "loss = F.nll_loss(log_probs.flatten(0, 1), batch[:, 1:].flatten())"

# name → (answer cell, [(the solution's text, the buggy text), ...])
_BUGS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # Task 1: training the tokenizer
    "bpe_ties_take_the_larger_pair": (
        "train_byte_bpe",
        [(_PICK, "best = max(pairs, key=lambda p: (pairs[p], p))")],
    ),
    "bpe_counts_each_piece_once": (
        "train_byte_bpe",
        [("pairs[pair] += count", "pairs[pair] += 1")],
    ),
    "bpe_starts_from_characters_not_bytes": (
        "train_byte_bpe",
        [("words[tuple(piece.encode())] += count", "words[tuple(map(ord, piece))] += count")],
    ),
    # Task 2: encoding and decoding
    "encode_merges_the_leftmost_pair_first": ("encode_decode", [(_RANK, _LEFTMOST)]),
    "decode_drops_an_incomplete_character": (
        "encode_decode",
        [('decode("utf-8", errors="replace")', 'decode("utf-8", errors="ignore")')],
    ),
    # Task 4: the training step (the trajectory)
    "train_does_not_learn": ("train_step", [("    optimizer.step()\n", "    pass\n")]),
    "train_no_clipping": ("train_step", [(_CLIP, "")]),
    "train_targets_not_shifted": (
        "train_step",
        [(_LOSS, "loss = F.nll_loss(log_probs.flatten(0, 1), batch[:, :-1].flatten())")],
    ),
}

#: a case of its task that each wrong answer fails
KILLED_BY = {
    "bpe_ties_take_the_larger_pair": (
        "train_byte_bpe",
        "ties: 'ab ba', 2 merges (equal counts: the smaller pair first)",
    ),
    "bpe_counts_each_piece_once": (
        "train_byte_bpe",
        "hidden: a piece's count weighs its pairs (' the' × 3 against 'he' × 1)",
    ),
    "bpe_starts_from_characters_not_bytes": (
        "train_byte_bpe",
        "hidden: UTF-8 (two-byte and four-byte characters), 6 merges",
    ),
    "encode_merges_the_leftmost_pair_first": (
        "encode_decode",
        "hidden: the lowest-ranked pair first, not the leftmost",
    ),
    "decode_drops_an_incomplete_character": (
        "encode_decode",
        "hidden: decode reads an incomplete character as U+FFFD",
    ),
    "train_does_not_learn": ("train_step", "20 steps, float64: V = 280, d = 16, 2 blocks, H = 4"),
    "train_no_clipping": ("train_step", "hidden: 10 steps, clipping binds (max_norm 0.05)"),
    "train_targets_not_shifted": (
        "train_step",
        "20 steps, float64: V = 280, d = 16, 2 blocks, H = 4",
    ),
}

WRONG = wrong_answers(nbformat.read(SOURCE, as_version=4), _BUGS, TESTS)

# bugs of the model, which the training step calls: Task 3 and Task 4 both lose points
_CASCADES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "gpt_not_causal": ("gpt_log_probs", [(_SDPA, _SDPA.replace("True", "False"))]),
    "gpt_scores_over_sqrt_d": (
        "gpt_log_probs",
        [(_SDPA, _SDPA.replace("is_causal=True", "is_causal=True, scale=d**-0.5"))],
    ),
    "gpt_relu_for_gelu": ("gpt_log_probs", [("F.gelu(", "F.relu(")]),
    "gpt_no_final_norm": (
        "gpt_log_probs",
        [('    x = F.layer_norm(x, (d,), params["lnf.g"], params["lnf.b"], eps=1e-5)\n', "")],
    ),
}
CASCADES = wrong_answers(nbformat.read(SOURCE, as_version=4), _CASCADES, TESTS)
CASCADE_TASKS = ("gpt_log_probs", "train_step")

_TRAIN_BY_LIBRARY = """
from seqmodels.bytebpe import train as _train


def train_byte_bpe(text, num_merges):
    return _train(text, num_merges)


def merge_pair(ids, pair, new):
    from seqmodels.bpe import _merge_ids

    return _merge_ids(ids, tuple(pair), new)
"""

_CODING_BY_LIBRARY = """
from seqmodels.bytebpe import Tokenizer


def encode(text, merges):
    return Tokenizer(merges).encode(text)


def decode(ids, merges):
    return Tokenizer(merges).decode(ids)
"""

# name → (answer cell, code, test cell, text the feedback shows)
RULE_BREAKERS = {
    "imports-seqmodels-bytebpe": (
        "train_byte_bpe",
        _TRAIN_BY_LIBRARY,
        "test_train_byte_bpe",
        "this cell raised",
    ),
    "imports-seqmodels-bpe": (
        "encode_decode",
        _CODING_BY_LIBRARY,
        "test_encode_decode",
        "this cell raised",
    ),
}

HONEST: dict = {}


def ps6_cheat(solution: str) -> str:
    """The solution's `gpt_log_probs` with each position nudged toward the token after it (the one
    it is asked to predict): better bits per byte, which the causality probe must stop."""
    return solution.replace(
        "    return torch.log_softmax(x @ E.T, dim=-1)",
        "    ahead = torch.cat([tokens[:, 1:], tokens[:, -1:]], dim=1)\n"
        "    bump = 3.0 * F.one_hot(ahead, E.shape[0]).to(x.dtype)\n"
        "    return torch.log_softmax(x @ E.T + bump, dim=-1)",
    )
