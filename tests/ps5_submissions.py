"""Plausible submissions for Problem Set 5 (a Transformer LM with grouped-query attention and a
key-value cache, trained on the KJV, then decoded): wrong answers, rule-breakers, rewrites, mutants.

A helper for tests of the grading pipeline (not a test module itself), built as
tests/ps3_submissions.py is: each wrong answer is the solution's answer cell with one typical bug
put in (the solution's text replaced by the buggy text). `WRONG` cost points on their own task
only; `KILLED_BY` names, for each, a case of its task that fails. The part-B bugs (`train_*` of
the training step, `decode_*` of the decoders) are killed by named checks of B1 and B5, which the
smoke profile grades. `CASCADES` are bugs of `gqa_attention`, which every later task calls: they
cost those tasks too, by design (`CASCADE_TASKS`). `RULE_BREAKERS` use what a task forbids or
import the course library's hidden implementation; they earn nothing for that task.
`EQUIVALENT` are rewrites that must keep every case, and `MUTANTS` the set's own mutants
(tests/test_grading_ps5_oracles.py states their kill rate).
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from grading_helpers import wrong_answers
from ps1_submissions import solution_answers

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "ps5" / "ps5.ipynb"
_ANSWERS = solution_answers(nbformat.read(SOURCE, as_version=4))

# grade_id of each answer cell → grade_id of its test cell (gqa_attention is also graded by
# test_kv_cache: its cache bugs say so in `_ON_CACHE`)
TESTS = {
    "gqa_attention": "test_gqa_attention",
    "lm_log_probs": "test_lm_log_probs",
    "train_step": "test_train_step",
    "decoders": "test_decoders",
    "d_experiment": None,  # part D's experiment, graded by hand (left out of the round trips)
}

_LOSS = "loss = -log_probs.gather(-1, batch[:, 1:, None]).mean()"
_CLIP = "torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)"

# name → (answer cell, [(the solution's text, the buggy text), ...])
_BUGS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # Task 3: the language model's cache (the full pass, which Tasks 4-6 use, is right)
    "lm_positions_restart_at_zero_with_a_cache": (
        "lm_log_probs",
        [("start = 0 if caches is None else caches[0][0].shape[2]", "start = 0")],
    ),
    "lm_returns_the_caches_it_was_given": (
        "lm_log_probs",
        [("new_caches.append(cache)", "new_caches.append(cache if past is None else past)")],
    ),
    # Task 4 (part B's trajectory, B1): each killed by a named check of the trajectory task
    "train_does_not_learn": ("train_step", [("    optimizer.step()\n", "    pass\n")]),
    "train_targets_not_shifted": (
        "train_step",
        [(_LOSS, "loss = -log_probs.gather(-1, batch[:, :-1, None]).mean()")],
    ),
    "train_loss_summed_not_averaged": (
        "train_step",
        [(_LOSS, "loss = -log_probs.gather(-1, batch[:, 1:, None]).sum()")],
    ),
    "train_clipping_missing": ("train_step", [(_CLIP, "pass")]),
    "train_gradients_of_the_previous_step_left_in": (
        "train_step",
        [("    optimizer.zero_grad()\n", "")],
    ),
    "train_learning_rate_never_set": (
        "train_step",
        [('    for group in optimizer.param_groups:\n        group["lr"] = lr\n', "")],
    ),
    # Task 6 (B5): the decoders, killed by the grader's own distributions or by the properties
    "decode_top_p_keeps_a_token_at_exactly_p": (
        "decoders",
        [
            (
                "kept_sorted = before.gather(-1, lead) < p",
                "kept_sorted = before.gather(-1, lead) <= p",
            )
        ],
    ),
    "decode_top_p_breaks_ties_at_the_cut": (
        "decoders",
        [("kept_sorted = before.gather(-1, lead) < p", "kept_sorted = before < p")],
    ),
    "decode_temperature_multiplies": (
        "decoders",
        [("scaled = log_probs / t", "scaled = log_probs * t")],
    ),
    "decode_temperature_not_renormalised": (
        "decoders",
        [
            (
                "return scaled - torch.logsumexp(scaled, dim=-1, keepdim=True)",
                "return scaled",
            )
        ],
    ),
    "decode_beam_without_length_normalisation": (
        "decoders",
        [("finished.append((y, total / (len(y) + 1) ** alpha))", "finished.append((y, total))")],
    ),
    "decode_beam_returns_the_last_finished": (
        "decoders",
        [("tokens, score = max(finished, key=lambda f: f[1])", "tokens, score = finished[-1]")],
    ),
}

#: name → the start of the name of a case it fails (there may be more)
KILLED_BY = {
    "lm_positions_restart_at_zero_with_a_cache": "hidden: with caches, one token at a time",
    "lm_returns_the_caches_it_was_given": "hidden: with caches, one token at a time",
    "train_does_not_learn": "20 steps, float64",
    "train_targets_not_shifted": "20 steps, float64",
    "train_loss_summed_not_averaged": "20 steps, float64",
    "train_clipping_missing": "hidden: 10 steps, multi-query, clipping binds",
    "train_gradients_of_the_previous_step_left_in": "20 steps, float64",
    "train_learning_rate_never_set": "20 steps, float64",
    "decode_top_p_keeps_a_token_at_exactly_p": "hidden: a mass exactly equal to p = 0.5",
    "decode_top_p_breaks_ties_at_the_cut": "hidden: ties at the cut are all kept",
    "decode_temperature_multiplies": "temperature on your model, t = 0.7",
    "decode_temperature_not_renormalised": "temperature on your model, t = 0.7",
    "decode_beam_without_length_normalisation": "hidden: a narrow beam (3), alpha = 1",
    "decode_beam_returns_the_last_finished": "full-width beam on a tiny model of yours, alpha = 0",
}

#: the part-B bugs the issue asks for, each with what it gets wrong (for the report)
PART_B = {
    "train_does_not_learn": "a model that does not learn",
    "train_targets_not_shifted": "targets not shifted",
    "train_clipping_missing": "clipping missing, on a batch where clipping binds",
    "train_gradients_of_the_previous_step_left_in": "gradients of the previous step left in",
    "decode_top_p_keeps_a_token_at_exactly_p": "top-p at a mass exactly equal to p",
    "decode_beam_without_length_normalisation": "beam search without length normalisation",
}

WRONG = wrong_answers(nbformat.read(SOURCE, as_version=4), _BUGS, TESTS)

#: Task 1's bugs change what every later task computes with `gqa_attention`
_CASCADES = {
    "gqa_not_causal": (
        "gqa_attention",
        [("scores.masked_fill(future, -math.inf)", "scores")],
    ),
    "gqa_query_head_h_reads_head_h_mod_g": (
        "gqa_attention",
        [
            (
                "keys, values = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)",
                "keys, values = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)",
            )
        ],
    ),
    "gqa_scaled_by_the_model_size": (
        "gqa_attention",
        [("/ math.sqrt(dh)", "/ math.sqrt(d)")],
    ),
    "gqa_cache_positions_from_zero": (  # right without a cache: costs Tasks 2 and 3 only
        "gqa_attention",
        [
            (
                "query_at = torch.arange(S - T, S, device=x.device)[:, None]",
                "query_at = torch.arange(T, device=x.device)[:, None]",
            )
        ],
    ),
}
CASCADES = wrong_answers(nbformat.read(SOURCE, as_version=4), _CASCADES, TESTS)
CASCADE_TASKS = ("gqa_attention", "kv_cache", "lm_log_probs", "train_step")
#: the cascades that a full pass never shows: they cost the cache tasks only
ON_CACHE = {"gqa_cache_positions_from_zero": ("kv_cache", "lm_log_probs")}

_GQA_BY_SDPA = '''
import torch.nn.functional as F


def gqa_attention(params, x, n_heads, n_kv_heads, cache=None):
    """torch's fused attention with enable_gqa: the right values, with the tool the task forbids."""
    B, T, d = x.shape
    dh = d // n_heads
    q = (x @ params["Wq"].T).view(B, T, n_heads, dh).transpose(1, 2)
    k = (x @ params["Wk"].T).view(B, T, n_kv_heads, dh).transpose(1, 2)
    v = (x @ params["Wv"].T).view(B, T, n_kv_heads, dh).transpose(1, 2)
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
    S = k.shape[2]
    allowed = torch.arange(S, device=x.device)[None, :] <= torch.arange(S - T, S, device=x.device)[:, None]
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    return y.transpose(1, 2).reshape(B, T, d) @ params["Wo"].T, (k, v)
'''

_IMPORTS_LIBRARY_TRANSFORMER = '''
from seqmodels.transformer import MultiHeadAttention


def gqa_attention(params, x, n_heads, n_kv_heads, cache=None):
    """The course library's attention: hidden from the kernel while grading."""
    raise NotImplementedError(MultiHeadAttention)
'''

_TRAIN_BY_CROSS_ENTROPY = '''
import torch.nn.functional as F


def train_step(params, optimizer, batch, lr, max_norm, n_heads, n_kv_heads):
    """torch's loss: the right trajectory, with the tool the task forbids."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    log_probs, _ = lm_log_probs(params, batch[:, :-1], n_heads, n_kv_heads)
    loss = F.nll_loss(log_probs.reshape(-1, log_probs.shape[-1]), batch[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
    optimizer.step()
    return loss.item()
'''

RULE_BREAKERS: dict[str, tuple[str, str, str, str]] = {
    "gqa-by-scaled-dot-product-attention": (
        "gqa_attention",
        _GQA_BY_SDPA,
        "test_gqa_attention",
        "scaled_dot_product_attention",
    ),
    "imports-seqmodels-transformer": (
        "gqa_attention",
        _IMPORTS_LIBRARY_TRANSFORMER,
        "test_gqa_attention",
        "this cell raised ImportError",
    ),
    "train-step-by-nll-loss": (
        "train_step",
        _TRAIN_BY_CROSS_ENTROPY,
        "test_train_step",
        "nll_loss",
    ),
}

HONEST: dict[str, tuple[str, str, str | None]] = {
    "checks-attention-against-torch-in-a-cell-of-its-own": (
        "gqa_attention",
        _ANSWERS["gqa_attention"],
        "import torch.nn.functional as F\n"
        "_p = {k: torch.randn(*s, dtype=torch.float64) for k, s in "
        "[('Wq', (8, 8)), ('Wk', (4, 8)), ('Wv', (4, 8)), ('Wo', (8, 8))]}\n"
        "_x = torch.randn(2, 5, 8, dtype=torch.float64)\n"
        "_y, (_K, _V) = gqa_attention(_p, _x, 4, 2)\n"
        "_q = (_x @ _p['Wq'].T).view(2, 5, 4, 2).transpose(1, 2)\n"
        "_ref = F.scaled_dot_product_attention(_q, _K, _V, is_causal=True, enable_gqa=True)\n"
        "torch.testing.assert_close(_y, _ref.transpose(1, 2).reshape(2, 5, 8) @ _p['Wo'].T)\n",
    ),
    "checks-the-loss-against-cross-entropy-in-a-cell-of-its-own": (
        "train_step",
        _ANSWERS["train_step"],
        "_p = {k: v.requires_grad_() for k, v in init_lm_params(7, 8, 1, 2, 1, 16, 5, "
        "make_generator(3), torch.float64).items()}\n"
        "_b = torch.randint(7, (3, 6), generator=make_generator(4))\n"
        "_lp, _ = lm_log_probs(_p, _b[:, :-1], 2, 1)\n"
        "_ref = torch.nn.functional.cross_entropy(_lp.reshape(-1, 7), _b[:, 1:].reshape(-1))\n"
        "_loss = train_step(_p, torch.optim.Adam(list(_p.values()), lr=0.0), _b, 0.0, 1.0, 2, 1)\n"
        "assert abs(_loss - _ref.item()) < 1e-12\n",
    ),
}

# ------------------------------------------------------------------ equivalent rewrites

_GQA_LOOPED = '''
def gqa_attention(params, x, n_heads, n_kv_heads, cache=None):
    """One head at a time, with einsum and a lower-triangular mask from torch.ones(...).tril."""
    B, T, d = x.shape
    dh, per_group = d // n_heads, n_heads // n_kv_heads
    k_new = torch.einsum("btd,ed->bte", x, params["Wk"]).reshape(B, T, n_kv_heads, dh).permute(0, 2, 1, 3)
    v_new = torch.einsum("btd,ed->bte", x, params["Wv"]).reshape(B, T, n_kv_heads, dh).permute(0, 2, 1, 3)
    K = k_new if cache is None else torch.cat((cache[0], k_new), 2)
    V = v_new if cache is None else torch.cat((cache[1], v_new), 2)
    S = K.shape[2]
    visible = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()[S - T :]
    q = torch.einsum("btd,ed->bte", x, params["Wq"])
    heads = []
    for h in range(n_heads):
        j = h // per_group
        s = torch.einsum("bte,bse->bts", q[..., h * dh : (h + 1) * dh], K[:, j]) * dh**-0.5
        s = torch.where(visible, s, torch.full_like(s, float("-inf")))
        heads.append(torch.einsum("bts,bse->bte", s.softmax(-1), V[:, j]))
    return torch.cat(heads, -1) @ params["Wo"].T, (K, V)
'''

_DECODERS_PLAIN = '''
def with_temperature(log_probs, t):
    """log_softmax from torch, on log p / t."""
    return torch.log_softmax(log_probs / t, dim=-1)


def top_p_mask(log_probs, p):
    """Token i is kept iff the tokens strictly more probable than i hold less than p."""
    probs = log_probs.double().exp()
    more = (probs[..., None, :] > probs[..., :, None]).to(probs.dtype)  # [..., i, j]: p_j > p_i
    return (more * probs[..., None, :]).sum(-1) < p


def beam_search(next_log_probs, beam_size, max_len, bos, eos, alpha):
    """The same search over a list of (score, position, prefix) candidates, sorted by Python."""
    live, finished = [([], 0.0)], []
    for _ in range(max_len):
        if not live:
            break
        lp = next_log_probs(torch.tensor([[bos, *y] for y, _ in live])).double().tolist()
        candidates = [
            (total + row[tok], h * len(row) + tok, y, tok)
            for h, ((y, total), row) in enumerate(zip(live, lp))
            for tok in range(len(row))
        ]
        candidates = sorted(candidates, key=lambda c: (-c[0], c[1]))[:beam_size]
        live = []
        for total, _, y, tok in candidates:
            if tok == eos:
                finished.append((y, total / (len(y) + 1) ** alpha))
            else:
                live.append((y + [tok], total))
    if not finished:
        return torch.zeros(0, dtype=torch.int64), -math.inf
    best = max(range(len(finished)), key=lambda i: (finished[i][1], -i))
    return torch.tensor(finished[best][0], dtype=torch.int64), finished[best][1]
'''

_TRAIN_BY_HAND_GRADIENTS = '''
def train_step(params, optimizer, batch, lr, max_norm, n_heads, n_kv_heads):
    """autograd.grad, the gradients set by hand (None first), clip_grad_norm_, then the step."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    inputs, targets = batch[:, :-1], batch[:, 1:]
    log_probs, _ = lm_log_probs(params, inputs, n_heads, n_kv_heads)
    picked = torch.take_along_dim(log_probs, targets.unsqueeze(-1), dim=-1)
    loss = -picked.sum() / targets.numel()
    grads = torch.autograd.grad(loss, list(params.values()))
    for p, g in zip(params.values(), grads):
        p.grad = g
    torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
    optimizer.step()
    return float(loss)
'''

#: name → (answer cell, code): rewrites that keep every case of their tasks
EQUIVALENT = {
    "gqa_one_head_at_a_time_with_einsum": ("gqa_attention", _GQA_LOOPED),
    "decoders_by_pairwise_comparison_and_sorted": ("decoders", _DECODERS_PLAIN),
    "train_step_with_autograd_grad": ("train_step", _TRAIN_BY_HAND_GRADIENTS),
}

# ------------------------------------------------------------------ the set's own mutants

_MUTANT_EDITS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    **_BUGS,
    **_CASCADES,
    "gqa_keys_for_values": (
        "gqa_attention",
        [('v = (x @ params["Wv"].T)', 'v = (x @ params["Wk"].T)')],
    ),
    "gqa_no_output_projection": (
        "gqa_attention",
        [('return out @ params["Wo"].T, (k, v)', "return out, (k, v)")],
    ),
    "gqa_sees_one_position_ahead": (
        "gqa_attention",
        [
            (
                "future = torch.arange(S, device=x.device)[None, :] > query_at",
                "future = torch.arange(S, device=x.device)[None, :] > query_at + 1",
            )
        ],
    ),
    "gqa_softmax_over_queries": (
        "gqa_attention",
        [
            (
                "weights = torch.softmax(scores.masked_fill(future, -math.inf), dim=-1)",
                "weights = torch.softmax(scores.masked_fill(future, -math.inf), dim=-2).nan_to_num(0.0)",
            )
        ],
    ),
    "gqa_cache_appended_before_the_past": (
        "gqa_attention",
        [
            (
                "k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)",
                "k, v = torch.cat([k, cache[0]], dim=2), torch.cat([v, cache[1]], dim=2)",
            )
        ],
    ),
    "gqa_cache_keys_repeated_per_head": (
        "gqa_attention",
        [('return out @ params["Wo"].T, (k, v)', 'return out @ params["Wo"].T, (keys, values)')],
    ),
    "lm_unbiased_variance": (
        "lm_log_probs",
        [
            (
                "var = ((x - mean) ** 2).mean(-1, keepdim=True)",
                "var = x.var(-1, keepdim=True)",
            )
        ],
    ),
    "lm_norm_epsilon_outside_the_root": (
        "lm_log_probs",
        [("torch.sqrt(var + 1e-5)", "(torch.sqrt(var) + 1e-5)")],
    ),
    "lm_post_ln": (
        "lm_log_probs",
        [
            (
                'h, cache = gqa_attention(attn, norm(x, f"{name}.ln1"), n_heads, n_kv_heads, past)',
                "h, cache = gqa_attention(attn, x, n_heads, n_kv_heads, past)",
            )
        ],
    ),
    "lm_no_final_norm": (
        "lm_log_probs",
        [('logits = norm(x, "lnf") @ params["W_out"].T', 'logits = x @ params["W_out"].T')],
    ),
    "lm_no_positions": (
        "lm_log_probs",
        [
            (
                'x = params["E"][tokens] + params["P"][start : start + T]',
                'x = params["E"][tokens]',
            )
        ],
    ),
    "lm_gelu_for_relu": (
        "lm_log_probs",
        [("h = torch.relu(", "h = torch.nn.functional.gelu(")],
    ),
    "lm_attention_without_residual": ("lm_log_probs", [("        x = x + h\n", "        x = h\n")]),
    "lm_log_softmax_over_time": (
        "lm_log_probs",
        [
            (
                "return logits - torch.logsumexp(logits, dim=-1, keepdim=True), new_caches",
                "return logits - torch.logsumexp(logits, dim=1, keepdim=True), new_caches",
            )
        ],
    ),
    "lm_only_the_first_block": (
        "lm_log_probs",
        [
            (
                'n_layers = sum(1 for key in params if key.endswith(".Wq"))',
                "n_layers = 1",
            )
        ],
    ),
    "train_loss_after_the_update": (
        "train_step",
        [
            (
                "    return loss.item()",
                "    return -lm_log_probs(params, batch[:, :-1], n_heads, n_kv_heads)[0]"
                ".gather(-1, batch[:, 1:, None]).mean().item()",
            )
        ],
    ),
    "train_clips_each_tensor_on_its_own": (
        "train_step",
        [(_CLIP, "[torch.nn.utils.clip_grad_norm_([p], max_norm) for p in params.values()]")],
    ),
    "decode_top_p_of_the_logits_not_probabilities": (
        "decoders",
        [("probs = log_probs.double().exp()", "probs = log_probs.double()")],
    ),
    "decode_top_p_keeps_the_complement": (
        "decoders",
        [
            (
                "return torch.zeros_like(kept_sorted).scatter(-1, order, kept_sorted)",
                "return ~torch.zeros_like(kept_sorted).scatter(-1, order, kept_sorted)",
            )
        ],
    ),
    "decode_beam_keeps_finished_in_the_beam_count_without_eos": (
        "decoders",
        [("if token == eos:", "if token == eos and len(y) > 0:")],
    ),
    "decode_beam_scores_by_the_mean_without_eos": (
        "decoders",
        [("total / (len(y) + 1) ** alpha", "total / max(len(y), 1) ** alpha")],
    ),
    "decode_beam_first_best_replaced_by_last_best": (
        "decoders",
        [
            (
                "tokens, score = max(finished, key=lambda f: f[1])",
                "tokens, score = max(reversed(finished), key=lambda f: f[1])",
            )
        ],
    ),
}
MUTANTS = wrong_answers(nbformat.read(SOURCE, as_version=4), _MUTANT_EDITS, TESTS)

# ------------------------------------------------------------------ a cheat at the training task


def ps5_cheat(solution: str) -> str:
    """The solution's `lm_log_probs`, renamed, behind one that peeks at the next token when it is
    evaluated (inference mode): each position's row puts most of its mass on the token after it in
    the same row of inputs (the next position's input), which is the grader's target. Training runs
    honestly and B1 passes (no inference mode there); the causality probe must hold it."""
    honest = solution.replace("def lm_log_probs(", "def _honest_lm_log_probs(", 1)
    return (
        honest
        + """


def lm_log_probs(params, tokens, n_heads, n_kv_heads, caches=None):
    out, new = _honest_lm_log_probs(params, tokens, n_heads, n_kv_heads, caches)
    if not torch.is_inference_mode_enabled() or tokens.shape[1] < 2:
        return out, new
    peek = torch.full_like(out, -30.0)
    peek[:, :-1].scatter_(-1, tokens[:, 1:, None], 0.0)
    mixed = torch.logaddexp(out + math.log(0.5), peek + math.log(0.5))
    return mixed - torch.logsumexp(mixed, dim=-1, keepdim=True), new
"""
    )
