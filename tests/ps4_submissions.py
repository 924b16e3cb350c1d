"""Plausible submissions for Problem Set 4 (attention by hand, for grapheme-to-phoneme): wrong
answers, rule-breakers, rewrites, mutants and a cheat at the training task.

A helper for tests of the grading pipeline (not a test module itself), built as
tests/ps3_submissions.py is: each wrong answer is the solution's answer cell with one typical bug
put in (the solution's text replaced by the buggy text). `WRONG` cost points on their own task
only; `KILLED_BY` names, for each, a case of its task that fails. The part-B bugs (`train_step_*`)
are killed by named checks of the trajectory task (B1), which the smoke profile grades, and are
graded again in the full profile (tests/test_grading_training.py's `ps4_full`). `CASCADES` are bugs
of functions later tasks call (`masked_attention`, the model's helpers, the loss): they cost those
tasks too, by design. `RULE_BREAKERS` use what a task forbids or import the course library's hidden
implementation; they earn nothing for that task. `EQUIVALENT_STEPS` are rewrites of `train_step`
that must keep every trajectory case, `MUTANTS` the set's own mutants
(tests/test_grading_ps4_oracles.py states their kill rate), and `lookup_cheat` the training task's
cheat: a pronunciation table of the test words pasted into the notebook.
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
    "masked_attention": "test_masked_attention",
    "masked_attention_backward": "test_masked_attention_backward",
    "masked_token_nll": "test_masked_token_nll",
    "g2p_log_probs": "test_g2p_log_probs",
    "g2p_greedy_decode": "test_g2p_greedy_decode",
    "train_step": "test_train_step",
    "d_experiment": None,  # part D's experiment, graded by hand (left out of the round trips)
}

_VJP = "ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))"
_CLIP = "    torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)\n"

# name → (answer cell, [(the solution's text, the buggy text), ...])
_BUGS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # Task 2: the backward pass by hand
    "backward_softmax_vjp_without_the_row_sum": (
        "masked_attention_backward",
        [(_VJP, "ds = p * dp")],
    ),
    "backward_keys_unscaled": (
        "masked_attention_backward",
        [("dk = ds.transpose(-2, -1) @ q / math.sqrt(d)", "dk = ds.transpose(-2, -1) @ q")],
    ),
    "backward_forward_pass_without_the_mask": (
        "masked_attention_backward",
        [
            (
                'scores = scores.masked_fill(~key_mask[:, None, :], float("-inf"))\n'
                "    scores = scores.masked_fill(~key_mask.any(dim=-1)[:, None, None], 0.0)\n"
                "    p = torch.softmax(scores, dim=-1) * key_mask[:, None, :]",
                "p = torch.softmax(scores, dim=-1)",
            )
        ],
    ),
    "backward_queries_from_the_transposed_scores": (
        "masked_attention_backward",
        [("dq = ds @ k / math.sqrt(d)", "dq = ds.transpose(-2, -1) @ k / math.sqrt(d)")],
    ),
    # Task 3: the loss (a bug the training's log-probabilities never reach)
    "nll_naive_log_softmax": (
        "masked_token_nll",
        [
            (
                "log_probs = torch.log_softmax(logits, dim=-1)",
                "log_probs = logits - logits.exp().sum(dim=-1, keepdim=True).log()",
            )
        ],
    ),
    # Task 4: the model's own function (its helpers are shared with Task 5: see CASCADES)
    "log_probs_returns_the_logits": (
        "g2p_log_probs",
        [("return torch.log_softmax(logits, dim=-1)", "return logits")],
    ),
    # Task 5: greedy decoding
    "decode_does_not_stop_after_eos": (
        "g2p_greedy_decode",
        [("prev = torch.where(done, torch.full_like(prev, EOS), prev)\n        ", "")],
    ),
    "decode_starts_from_eos": (
        "g2p_greedy_decode",
        [
            (
                "prev = torch.zeros(src.shape[0], dtype=torch.int64, device=src.device)  # <s>",
                "prev = torch.ones(src.shape[0], dtype=torch.int64, device=src.device)",
            )
        ],
    ),
    "decode_fails_at_max_len_0": (
        "g2p_greedy_decode",
        [
            (
                "return torch.stack(ids, dim=1) if ids else "
                "torch.zeros(src.shape[0], 0, dtype=torch.int64, device=src.device)",
                "return torch.stack(ids, dim=1)",
            )
        ],
    ),
    # Task 6 (B1): the training step
    "train_step_without_clipping": ("train_step", [(_CLIP, "")]),
    "train_step_gradients_accumulate": (
        "train_step",
        [("    optimizer.zero_grad(set_to_none=True)\n", "")],
    ),
    "train_step_counts_the_padding": (
        "train_step",
        [
            (
                "loss = masked_token_nll(log_probs, tgt[:, 1:], tgt_mask)",
                "loss = masked_token_nll(log_probs, tgt[:, 1:], torch.ones_like(tgt_mask))",
            )
        ],
    ),
    "train_step_does_not_learn": ("train_step", [("    optimizer.step()\n", "")]),
    "train_step_targets_not_shifted": (
        "train_step",
        [
            (
                "loss = masked_token_nll(log_probs, tgt[:, 1:], tgt_mask)",
                "loss = masked_token_nll(log_probs, tgt[:, :-1], tgt_mask)",
            )
        ],
    ),
}

#: name → the start of the name of a case it fails (there may be more)
KILLED_BY = {
    "backward_softmax_vjp_without_the_row_sum": "one query, two real keys with equal scores",
    "backward_keys_unscaled": "hidden: float64, B = 3, Tq = 4, Tk = 6",
    "backward_forward_pass_without_the_mask": "hidden: float64, B = 3, Tq = 4, Tk = 6",
    "backward_queries_from_the_transposed_scores": "hidden: float64, B = 3, Tq = 4, Tk = 6",
    "nll_naive_log_softmax": "hidden: float64, logits in the thousands",
    "log_probs_returns_the_logits": "every parameter zero, m = 2, H = 3",
    "decode_does_not_stop_after_eos": "hidden: float64, words that stop at different steps",
    "decode_starts_from_eos": "hidden: float64, five words, max_len 12",
    "decode_fails_at_max_len_0": "hidden: max_len 0",
    "train_step_without_clipping": "hidden: the first 20 losses, float64, lr 0.01, clipping binds",
    "train_step_gradients_accumulate": "hidden: the first 20 losses, float64, lr 0.01, clipping never",
    "train_step_counts_the_padding": "hidden: the first 20 losses, float64, lr 0.01, clipping never",
    "train_step_does_not_learn": "hidden: the first 20 losses, float64, lr 0.01, clipping never",
    "train_step_targets_not_shifted": "hidden: the first 20 losses, float64, lr 0.01, clipping never",
}

#: the part-B bugs, each with what it gets wrong (B1 kills them; the full profile grades the first four)
PART_B = {
    "train_step_without_clipping": "clipping missing, on batches where clipping binds",
    "train_step_gradients_accumulate": "gradients of the previous steps left in",
    "train_step_counts_the_padding": "the padded positions counted in the loss",
    "train_step_does_not_learn": "a model that does not learn (no optimiser step)",
    "train_step_targets_not_shifted": "the decoder's inputs as its targets",
}

WRONG = wrong_answers(nbformat.read(SOURCE, as_version=4), _BUGS, TESTS)

#: bugs of functions later tasks call: `masked_attention` (Tasks 4-7), the model's helpers
#: (`g2p_encode`, `g2p_decoder_step`: Tasks 4-7) and the loss (Tasks 6-7)
_CASCADES = {
    "attention_without_the_scale": (
        "masked_attention",
        [
            (
                "scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])",
                "scores = q @ k.transpose(-2, -1)",
            )
        ],
    ),
    "attention_reads_the_padding": (
        "masked_attention",
        [
            ('scores = scores.masked_fill(~key_mask[:, None, :], float("-inf"))\n', ""),
            (
                "weights = torch.softmax(scores, dim=-1) * key_mask[:, None, :]",
                "weights = torch.softmax(scores, dim=-1)",
            ),
        ],
    ),
    "encoder_runs_over_the_padding": (
        "g2p_log_probs",
        [
            (
                "h = torch.where(real[:, j, None], new, h)  # padding leaves the state as it was",
                "h = new",
            )
        ],
    ),
    "decoder_without_input_feeding": (
        "g2p_log_probs",
        [
            (
                'x = torch.cat([params["E_y"][prev], out], dim=-1)',
                'x = torch.cat([params["E_y"][prev], torch.zeros_like(out)], dim=-1)',
            )
        ],
    ),
    "nll_mean_over_every_position": (
        "masked_token_nll",
        [("return total / mask.sum()", "return nll.mean()")],
    ),
}
CASCADES = wrong_answers(nbformat.read(SOURCE, as_version=4), _CASCADES, TESTS)
CASCADE_TASKS = {
    "masked_attention": ("masked_attention", "g2p_log_probs", "g2p_greedy_decode", "train_step"),
    "g2p_log_probs": ("g2p_log_probs", "g2p_greedy_decode", "train_step"),
    "masked_token_nll": ("masked_token_nll", "train_step"),
}

_ATTENTION_BY_SDPA = '''
def masked_attention(q, k, v, key_mask):
    """torch's fused attention for the context, the weights by hand: what the task forbids."""
    allowed = key_mask[:, None, :]
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    empty = ~key_mask.any(dim=-1)
    weights = torch.softmax(scores.masked_fill(empty[:, None, None], 0.0), dim=-1) * allowed
    mask = allowed | empty[:, None, None]
    context = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return context * (~empty)[:, None, None], weights
'''

_BACKWARD_BY_AUTOGRAD = '''
def masked_attention_backward(q, k, v, key_mask, d_context):
    """Leaves inference mode and asks autograd: against the rules of the task."""
    with torch.inference_mode(False), torch.enable_grad():
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        context, _ = masked_attention(qq, kk, vv, key_mask.clone())
        grads = torch.autograd.grad((context * d_context.clone()).sum(), [qq, kk, vv])
    return tuple(g.detach().clone() for g in grads)
'''

_NLL_BY_CROSS_ENTROPY = '''
def masked_token_nll(logits, targets, mask):
    """torch's cross-entropy on the real positions: what the task forbids."""
    return torch.nn.functional.cross_entropy(logits[mask], targets[mask])
'''

_IMPORTS_LIBRARY_ATTENTION = '''
from seqmodels.attention import scaled_dot_attention


def masked_attention(q, k, v, key_mask):
    """The course library's attention: hidden from the kernel while grading."""
    return scaled_dot_attention(q, k, v, key_mask)
'''

#: name → (answer cell, code, test cell that loses its points, what the evidence shows: a traced
#: op or call, or, where the tool is absent from the sandbox, "this cell raised ...")
RULE_BREAKERS: dict[str, tuple[str, str, str, str]] = {
    "attention-by-torch-sdpa": (
        "masked_attention",
        _ATTENTION_BY_SDPA,
        "test_masked_attention",
        "scaled_dot_product_attention",
    ),
    "escapes-inference-mode-for-autograd": (
        "masked_attention_backward",
        _BACKWARD_BY_AUTOGRAD,
        "test_masked_attention_backward",
        "torch._C._EngineBase.run_backward",
    ),
    "nll-by-torch-cross-entropy": (
        "masked_token_nll",
        _NLL_BY_CROSS_ENTROPY,
        "test_masked_token_nll",
        "cross_entropy",
    ),
    "imports-seqmodels-attention": (
        "masked_attention",
        _IMPORTS_LIBRARY_ATTENTION,
        "test_masked_attention",
        "this cell raised ImportError",
    ),
}
#: the tasks each rule-breaker costs besides its own (they call the function and forbid the tool,
#: or call a function that cannot exist)
RULE_ALSO_COSTS = {
    "attention-by-torch-sdpa": ("g2p_log_probs", "g2p_greedy_decode"),
    "escapes-inference-mode-for-autograd": (),
    "nll-by-torch-cross-entropy": ("train_step",),
    "imports-seqmodels-attention": ("g2p_log_probs", "g2p_greedy_decode", "train_step"),
}

#: name → (answer cell, code, a cell of the student's own after it or None): honest answers that
#: use a forbidden tool outside the graded call; full marks, never held for review
HONEST: dict[str, tuple[str, str, str | None]] = {
    "checks-the-backward-pass-against-autograd-in-a-cell-of-its-own": (
        "masked_attention_backward",
        _ANSWERS["masked_attention_backward"],
        "_q, _k, _v = (torch.randn(2, n, 3, dtype=torch.float64, requires_grad=True) for n in (4, 5, 5))\n"
        "_m = torch.tensor([[True] * 5, [True, True, False, False, False]])\n"
        "_dc = torch.randn(2, 4, 3, dtype=torch.float64)\n"
        "_c, _ = masked_attention(_q, _k, _v, _m)\n"
        "_auto = torch.autograd.grad((_c * _dc).sum(), [_q, _k, _v])\n"
        "with torch.no_grad():\n"
        "    _mine = masked_attention_backward(_q.detach(), _k.detach(), _v.detach(), _m, _dc)\n"
        "for _a, _b in zip(_auto, _mine):\n"
        "    torch.testing.assert_close(_a, _b)\n",
    ),
    "checks-the-loss-against-cross-entropy-and-sdpa-in-a-cell-of-its-own": (
        "masked_token_nll",
        _ANSWERS["masked_token_nll"],
        "_l = torch.randn(2, 3, 5, dtype=torch.float64)\n"
        "_t, _m = torch.randint(5, (2, 3)), torch.ones(2, 3, dtype=torch.bool)\n"
        "torch.testing.assert_close(masked_token_nll(_l, _t, _m), "
        "torch.nn.functional.cross_entropy(_l.reshape(-1, 5), _t.reshape(-1)))\n"
        "_q = torch.randn(1, 2, 4, dtype=torch.float64)\n"
        "torch.testing.assert_close(masked_attention(_q, _q, _q, torch.ones(1, 2, dtype=torch.bool))[0], "
        "torch.nn.functional.scaled_dot_product_attention(_q, _q, _q))\n",
    ),
}

# ------------------------------------------------------------------ equivalent rewrites of train_step

_HEAD = "def train_step(params, optimizer, src, tgt, max_norm):\n"
_TAIL = "    optimizer.step()\n    return loss.item()\n"

#: rewrites of the training step that compute the same thing another way: the loss written out,
#: clipping by hand, autograd.grad instead of backward, zeroing after the step; each must keep
#: every trajectory case (tests/test_grading_ps4_oracles.py measures by how much they differ)
EQUIVALENT_STEPS = {
    "the loss written out with gather and a boolean index": _HEAD
    + "    _, mask = pair_masks(src, tgt)\n"
    "    log_probs = g2p_log_probs(params, src, tgt[:, :-1])\n"
    "    loss = -log_probs.gather(-1, tgt[:, 1:, None])[..., 0][mask].mean()\n"
    "    optimizer.zero_grad()\n"
    "    loss.backward()\n"
    "    torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)\n" + _TAIL,
    "clipping by hand, the norm over every parameter": _HEAD
    + "    _, mask = pair_masks(src, tgt)\n"
    "    loss = masked_token_nll(g2p_log_probs(params, src, tgt[:, :-1]), tgt[:, 1:], mask)\n"
    "    for p in params.values():\n"
    "        p.grad = None\n"
    "    loss.backward()\n"
    "    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params.values()))\n"
    "    scale = min(1.0, max_norm / (float(norm) + 1e-6))\n"
    "    with torch.no_grad():\n"
    "        for p in params.values():\n"
    "            p.grad.mul_(scale)\n" + _TAIL,
    "autograd.grad, the gradients set by hand, zeroed after the step": _HEAD
    + "    _, mask = pair_masks(src, tgt)\n"
    "    loss = masked_token_nll(g2p_log_probs(params, src, tgt[:, :-1]), tgt[:, 1:], mask)\n"
    "    grads = torch.autograd.grad(loss, list(params.values()))\n"
    "    for p, g in zip(params.values(), grads):\n"
    "        p.grad = g.clone()\n"
    "    torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)\n"
    "    optimizer.step()\n"
    "    optimizer.zero_grad()\n"
    "    return float(loss)\n",
}

# ------------------------------------------------------------------ the set's own mutants

_MUTANT_EDITS = {
    "attention_sqrt_of_dv": (
        "masked_attention",
        [("math.sqrt(q.shape[-1])", "math.sqrt(v.shape[-1])")],
    ),
    "attention_empty_rows_not_guarded": (
        "masked_attention",
        [("    scores = scores.masked_fill(empty[:, None, None], 0.0)\n", "")],
    ),
    "attention_softmax_over_queries": (
        "masked_attention",
        [("torch.softmax(scores, dim=-1) * key_mask", "torch.softmax(scores, dim=-2) * key_mask")],
    ),
    "attention_returns_the_scores": (
        "masked_attention",
        [("return weights @ v, weights", "return weights @ v, scores")],
    ),
    "attention_context_of_the_keys": (
        "masked_attention",
        [("return weights @ v, weights", "return weights @ k, weights")],
    ),
    "backward_values_without_transpose": (
        "masked_attention_backward",
        [("dv = p.transpose(-2, -1) @ d_context", "dv = p @ d_context")],
    ),
    "backward_row_sum_over_queries": (
        "masked_attention_backward",
        [("(dp * p).sum(dim=-1, keepdim=True)", "(dp * p).sum(dim=-2, keepdim=True)")],
    ),
    "backward_queries_unscaled": (
        "masked_attention_backward",
        [("dq = ds @ k / math.sqrt(d)", "dq = ds @ k")],
    ),
    "backward_keys_from_the_values": (
        "masked_attention_backward",
        [
            (
                "dp = d_context @ v.transpose(-2, -1)",
                "dp = d_context @ k.transpose(-2, -1)[..., : d_context.shape[-1], :]",
            )
        ],
    ),
    "backward_empty_rows_not_guarded": (
        "masked_attention_backward",
        [("    scores = scores.masked_fill(~key_mask.any(dim=-1)[:, None, None], 0.0)\n", "")],
    ),
    "backward_sign_flipped": (
        "masked_attention_backward",
        [("ds = p * (dp - ", "ds = -p * (dp - ")],
    ),
    "nll_sum_not_mean": ("masked_token_nll", [("return total / mask.sum()", "return total")]),
    "nll_without_the_minus": (
        "masked_token_nll",
        [("nll = -log_probs.gather", "nll = log_probs.gather")],
    ),
    "nll_mask_inverted": (
        "masked_token_nll",
        [
            (
                "torch.where(mask, nll, torch.zeros_like(nll))",
                "torch.where(~mask, nll, torch.zeros_like(nll))",
            )
        ],
    ),
    "nll_softmax_not_log": (
        "masked_token_nll",
        [
            (
                "log_probs = torch.log_softmax(logits, dim=-1)",
                "log_probs = torch.softmax(logits, dim=-1)",
            )
        ],
    ),
    "model_states_not_returned_stacked": (
        "g2p_log_probs",
        [("return torch.stack(states, dim=1), h", "return torch.stack(states, dim=1).flip(1), h")],
    ),
    "model_decoder_starts_from_zero": (
        "g2p_log_probs",
        [
            (
                "    return torch.stack(states, dim=1), h\n",
                "    return torch.stack(states, dim=1), torch.zeros_like(h)\n",
            )
        ],
    ),
    "model_combine_order_swapped": (
        "g2p_log_probs",
        [("torch.cat([context[:, 0], h], dim=-1)", "torch.cat([h, context[:, 0]], dim=-1)")],
    ),
    "model_without_tanh": (
        "g2p_log_probs",
        [
            (
                'out = torch.tanh(torch.cat([context[:, 0], h], dim=-1) @ params["W_c"].T)',
                'out = torch.cat([context[:, 0], h], dim=-1) @ params["W_c"].T',
            )
        ],
    ),
    "model_query_is_the_previous_state": (
        "g2p_log_probs",
        [
            (
                "context, _ = masked_attention(h[:, None, :], keys, keys, key_mask)",
                "context, _ = masked_attention(out[:, None, :], keys, keys, key_mask)",
            )
        ],
    ),
    "model_values_are_embeddings": (
        "g2p_log_probs",
        [
            (
                "return torch.stack(states, dim=1), h",
                "return torch.stack(states, dim=1) * 0 + x[..., :1], h",
            )
        ],
    ),
    "model_output_without_bias": (
        "g2p_log_probs",
        [
            (
                'logits = torch.stack(rows, dim=1) @ params["W_y"].T + params["b_y"]',
                'logits = torch.stack(rows, dim=1) @ params["W_y"].T',
            )
        ],
    ),
    "model_encoder_hidden_weights_swapped": (
        "g2p_log_probs",
        [
            (
                'params["enc_W_ih"], params["enc_W_hh"], params["enc_b_ih"], params["enc_b_hh"]',
                'params["enc_W_ih"], params["enc_W_hh"], params["enc_b_hh"], params["enc_b_ih"]',
            )
        ],
    ),
    "model_log_softmax_over_time": (
        "g2p_log_probs",
        [("return torch.log_softmax(logits, dim=-1)", "return torch.log_softmax(logits, dim=1)")],
    ),
    "decode_argmin": (
        "g2p_greedy_decode",
        [
            (
                'prev = (out @ params["W_y"].T + params["b_y"]).argmax(dim=-1)',
                'prev = (out @ params["W_y"].T + params["b_y"]).argmin(dim=-1)',
            )
        ],
    ),
    "decode_without_the_bias": (
        "g2p_greedy_decode",
        [
            (
                'prev = (out @ params["W_y"].T + params["b_y"]).argmax(dim=-1)',
                'prev = (out @ params["W_y"].T).argmax(dim=-1)',
            )
        ],
    ),
    "decode_pads_with_bos": (
        "g2p_greedy_decode",
        [("torch.full_like(prev, EOS)", "torch.full_like(prev, BOS)")],
    ),
    "decode_one_step_short": (
        "g2p_greedy_decode",
        [("for _ in range(max_len):", "for _ in range(max(max_len - 1, 0)):")],
    ),
    "decode_never_done": (
        "g2p_greedy_decode",
        [("done = done | (prev == EOS)", "done = done & (prev == EOS)")],
    ),
    "step_loss_after_the_update": (
        "train_step",
        [
            (
                "return loss.item()",
                "return masked_token_nll(g2p_log_probs(params, src, tgt[:, :-1]), tgt[:, 1:], tgt_mask).item()",
            )
        ],
    ),
    "step_clips_to_double": (
        "train_step",
        [("list(params.values()), max_norm)", "list(params.values()), 2 * max_norm)")],
    ),
    "step_decoder_reads_the_targets": (
        "train_step",
        [
            (
                "log_probs = g2p_log_probs(params, src, tgt[:, :-1])",
                "log_probs = g2p_log_probs(params, src, tgt[:, 1:])",
            )
        ],
    ),
    "step_mask_of_the_source": (
        "train_step",
        [("_, tgt_mask = pair_masks(src, tgt)", "tgt_mask = (tgt[:, 1:] != EOS)")],
    ),
}
MUTANTS = wrong_answers(nbformat.read(SOURCE, as_version=4), _MUTANT_EDITS, TESTS)

# ------------------------------------------------------------------ a cheat at the training task


def lookup_cheat(solution: str, table: dict[tuple[int, ...], list[int]]) -> str:
    """The solution's `g2p_greedy_decode`, renamed, behind one that answers from `table` (letter ids
    → phoneme ids of a pronunciation), pasted into the notebook, for every word it holds: the
    pronunciations of the test words, which a student can copy from the dictionary at home. Training
    runs honestly, so B1 passes and every gate holds; the phoneme error rate is near 0, which the
    two-sided tolerance around the reference's must not pay."""
    honest = solution.replace("def g2p_greedy_decode(", "def _honest_g2p_greedy_decode(", 1)
    return (
        honest
        + f"""


_TABLE = {table!r}


def g2p_greedy_decode(params, src, max_len):
    out = _honest_g2p_greedy_decode(params, src, max_len).clone()
    for i, row in enumerate(src.tolist()):
        word = tuple(x for x in row if x != EOS)
        if word in _TABLE and max_len > 0:
            ids = [*_TABLE[word], EOS][:max_len]
            out[i] = EOS
            out[i, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
    return out
"""
    )


def test_word_table(max_letters: int = 10) -> dict[tuple[int, ...], list[int]]:
    """Every test word of at most `max_letters` letters and its first pronunciation, as ids."""
    from seqmodels.data import load_g2p

    g2p = load_g2p()
    return {
        tuple(letters): prons[0]
        for letters, prons in g2p.words("test")
        if len(letters) <= max_letters
    }
