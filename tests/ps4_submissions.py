"""Plausible submissions for Problem Set 4: typical wrong answers and ones that break its rules.

A helper for tests of the grading pipeline (not a test module itself), built as
tests/ps3_submissions.py is: each wrong answer is the solution's answer cell with one typical bug
put in (the solution's text replaced by the buggy text), so it costs points on its own task only.
`RULE_BREAKERS` use what a task forbids (torch's fused attention, an edit-distance library) or
import the course library's hidden implementation (`seqmodels.attention`, `seqmodels.seq2seq`);
they earn nothing for that task.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from grading_helpers import wrong_answers
from ps1_submissions import solution_answers

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "ps4" / "ps4.ipynb"
_ANSWERS = solution_answers(nbformat.read(SOURCE, as_version=4))

# grade_id of each answer cell → grade_id of its test cell
TESTS = {
    "scaled_dot_attention": "test_scaled_dot_attention",
    "additive_scores": "test_additive_scores",
    "teacher_forcing": "test_teacher_forcing",
    "greedy_decode": "test_greedy_decode",
    "phoneme_error_rate": "test_phoneme_error_rate",
}

_MASK_THEN_SOFTMAX = (
    'scores = scores.masked_fill(~key_mask[:, None, :], float("-inf"))\n'
    "    weights = torch.softmax(scores, dim=-1)"
)
_SKIP_FINISHED = (
    "            if finished[b]:\n"
    "                continue  # later steps of a finished sequence are ignored\n"
)
_EOS_ENDS = (
    "if token == eos:\n"
    "                finished[b] = True\n"
    "            else:\n"
    "                outputs[b].append(token)"
)
_CORPUS_RATE = (
    "errors = sum(map(edit_distance, hyps, refs))\n"
    "    return errors / sum(len(ref) for ref in refs)"
)

# name → (answer cell, [(the solution's text, the buggy text), ...])
_BUGS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # Task 1: scaled dot-product attention over padded keys
    "attention_softmax_over_queries": (
        "scaled_dot_attention",
        [("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=1)")],
    ),
    "attention_mask_after_softmax": (
        "scaled_dot_attention",
        [(_MASK_THEN_SOFTMAX, "weights = torch.softmax(scores, dim=-1) * key_mask[:, None, :]")],
    ),
    "attention_without_sqrt_d": ("scaled_dot_attention", [(" / math.sqrt(d)", "")]),
    "attention_masked_with_zero": ("scaled_dot_attention", [('float("-inf")', "0.0")]),
    # Task 2: additive scores
    "additive_W_q_and_W_k_swapped": (
        "additive_scores",
        [("queries = q @ W_q.T", "queries = q @ W_k.T"), ("keys = k @ W_k.T", "keys = k @ W_q.T")],
    ),
    "additive_without_tanh": (
        "additive_scores",
        [
            (
                "torch.tanh(queries[:, :, None, :] + keys[:, None, :, :])",
                "queries[:, :, None, :] + keys[:, None, :, :]",
            )
        ],
    ),
    # Task 3: teacher forcing and the masked loss
    "decoder_inputs_not_shifted": ("teacher_forcing", [("[bos, *y]", "[*y, eos]")]),
    "targets_without_eos": (
        "teacher_forcing",
        [
            (
                "outputs[b, : n + 1] = torch.tensor([*y, eos], dtype=torch.int64)",
                "outputs[b, :n] = torch.tensor(y, dtype=torch.int64)",
            ),
            ("mask[b, : n + 1] = True", "mask[b, :n] = True"),
        ],
    ),
    "loss_averaged_over_padding_too": (
        "teacher_forcing",
        [("return total / mask.sum()", "return total / mask.numel()")],
    ),
    # Task 4: greedy decoding
    "greedy_keeps_tokens_after_eos": ("greedy_decode", [(_SKIP_FINISHED, "")]),
    "greedy_output_includes_eos": (
        "greedy_decode",
        [
            (
                _EOS_ENDS,
                "outputs[b].append(token)\n"
                "            if token == eos:\n"
                "                finished[b] = True",
            )
        ],
    ),
    # Task 5: edit distance and the phoneme error rate
    "substitution_costs_two": (
        "phoneme_error_rate",
        [("previous[j - 1] + (h != r)", "previous[j - 1] + 2 * (h != r)")],
    ),
    "per_over_hypothesis_length": (
        "phoneme_error_rate",
        [("sum(len(ref) for ref in refs)", "sum(len(hyp) for hyp in hyps)")],
    ),
    "per_mean_of_word_rates": (
        "phoneme_error_rate",
        [
            (
                _CORPUS_RATE,
                "rates = [\n"
                "        edit_distance(h, r) / len(r) for h, r in zip(hyps, refs)\n"
                "    ]\n"
                "    return sum(rates) / len(rates)",
            )
        ],
    ),
}

_FUSED_ATTENTION = '''
import torch.nn.functional as F


def scaled_dot_attention(q, k, v, key_mask):
    """torch's fused attention, the weights from identity values: against the rules."""
    mask = key_mask[:, None, :]
    eye = torch.eye(k.shape[1], dtype=q.dtype, device=q.device).expand(q.shape[0], -1, -1)
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return context, F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)
'''

_RAPIDFUZZ = '''
from rapidfuzz.distance import Levenshtein


def edit_distance(hyp, ref):
    """RapidFuzz's Levenshtein distance: against the rules of the task."""
    return Levenshtein.distance(hyp, ref)


def phoneme_error_rate(hyps, refs):
    errors = sum(map(edit_distance, hyps, refs))
    return errors / sum(len(ref) for ref in refs)
'''

# the same tools reached by a name built at run time, which no static reading of the code can see
_RAPIDFUZZ_BY_IMPORTLIB = '''
import importlib

_lev = importlib.import_module("rapid" + "fuzz.distance").Levenshtein


def edit_distance(hyp, ref):
    """RapidFuzz's Levenshtein distance, imported by a computed name: still against the rules."""
    return _lev.distance(hyp, ref)


def phoneme_error_rate(hyps, refs):
    errors = sum(map(edit_distance, hyps, refs))
    return errors / sum(len(ref) for ref in refs)
'''

_FUSED_ATTENTION_BY_DICT = '''
import torch.nn.functional as F

_fused = F.__dict__["scaled_dot_" + "product_attention"]


def scaled_dot_attention(q, k, v, key_mask):
    """torch's fused attention found in the module's __dict__: still against the rules."""
    mask = key_mask[:, None, :]
    eye = torch.eye(k.shape[1], dtype=q.dtype, device=q.device).expand(q.shape[0], -1, -1)
    return _fused(q, k, v, attn_mask=mask), _fused(q, k, eye, attn_mask=mask)
'''

_IMPORTS_LIBRARY_ATTENTION = '''
from seqmodels.attention import scaled_dot_attention as _library


def scaled_dot_attention(q, k, v, key_mask):
    """The course library's attention: hidden from the kernel while grading."""
    return _library(q, k, v, key_mask)
'''

_IMPORTS_LIBRARY_SEQ2SEQ = '''
from seqmodels.seq2seq import greedy_decode as _library


def greedy_decode(step, h0, bos, eos, max_len):
    """The course library's greedy decoding: hidden from the kernel while grading."""
    return _library(step, h0, bos, eos, max_len)
'''


# issue 19's routes around name matching: RapidFuzz bound by a `for` target (absent at grading),
# and a correct answer whose loss is then rebound to torch's cross-entropy
_EDIT_DISTANCE_IN_A_FOR_TARGET = """
from rapidfuzz.distance import Levenshtein

for edit_distance in [Levenshtein.distance]:
    pass


def phoneme_error_rate(hyps, refs):
    errors = sum(map(edit_distance, hyps, refs))
    return errors / sum(len(ref) for ref in refs)
"""
_LOSS_REBOUND_TO_CROSS_ENTROPY = (
    _ANSWERS["teacher_forcing"]
    + """


def _torch_loss(logits, targets, mask):
    return torch.nn.functional.cross_entropy(logits[mask], targets[mask])


masked_token_nll = _torch_loss
"""
)

#: name → (answer cell, code, test cell that loses its points, what the evidence shows: a traced
#: op or call, or, where the tool is absent from the sandbox, "this cell raised ...")
RULE_BREAKERS: dict[str, tuple[str, str, str, str]] = {
    "calls-scaled-dot-product-attention": (
        "scaled_dot_attention",
        _FUSED_ATTENTION,
        "test_scaled_dot_attention",
        "torch._C._nn.scaled_dot_product_attention",
    ),
    "calls-rapidfuzz": (
        "phoneme_error_rate",
        _RAPIDFUZZ,
        "test_phoneme_error_rate",
        "this cell raised ImportError",
    ),
    "imports-rapidfuzz-by-a-computed-name": (
        "phoneme_error_rate",
        _RAPIDFUZZ_BY_IMPORTLIB,
        "test_phoneme_error_rate",
        "this cell raised ImportError",
    ),
    "finds-fused-attention-in-a-module-dict": (
        "scaled_dot_attention",
        _FUSED_ATTENTION_BY_DICT,
        "test_scaled_dot_attention",
        "torch._C._nn.scaled_dot_product_attention",
    ),
    "imports-seqmodels-attention": (
        "scaled_dot_attention",
        _IMPORTS_LIBRARY_ATTENTION,
        "test_scaled_dot_attention",
        "this cell raised ImportError",
    ),
    "imports-seqmodels-seq2seq": (
        "greedy_decode",
        _IMPORTS_LIBRARY_SEQ2SEQ,
        "test_greedy_decode",
        "this cell raised ImportError",
    ),
    "binds-rapidfuzz-in-a-for-target": (
        "phoneme_error_rate",
        _EDIT_DISTANCE_IN_A_FOR_TARGET,
        "test_phoneme_error_rate",
        "this cell raised ImportError",
    ),
    "rebinds-its-loss-to-cross-entropy": (
        "teacher_forcing",
        _LOSS_REBOUND_TO_CROSS_ENTROPY,
        "test_teacher_forcing",
        "torch._C._nn.cross_entropy_loss",
    ),
}


WRONG = wrong_answers(nbformat.read(SOURCE, as_version=4), _BUGS, TESTS)

#: name → (answer cell, code, a cell of the student's own after it or None): honest answers that
#: name a forbidden tool or use it outside the graded call; full marks, never held for review
HONEST: dict[str, tuple[str, str, str | None]] = {
    "a-local-variable-named-cross-entropy": (
        "teacher_forcing",
        _ANSWERS["teacher_forcing"]
        .replace("nll = -log_probs", "cross_entropy = -log_probs")
        .replace("torch.where(mask, nll,", "torch.where(mask, cross_entropy,")
        .replace("torch.zeros_like(nll)", "torch.zeros_like(cross_entropy)"),
        None,
    ),
    "checks-its-attention-against-sdpa-in-a-cell-of-its-own": (
        "scaled_dot_attention",
        _ANSWERS["scaled_dot_attention"],
        "import torch.nn.functional as F\n"
        "_q = torch.randn(2, 3, 4, dtype=torch.float64)\n"
        "_m = torch.tensor([[True, True, False], [True, False, True]])\n"
        "torch.testing.assert_close(\n"
        "    scaled_dot_attention(_q, _q, _q, _m)[0],\n"
        "    F.scaled_dot_product_attention(_q, _q, _q, attn_mask=_m[:, None, :]),\n"
        ")\n",
    ),
}
