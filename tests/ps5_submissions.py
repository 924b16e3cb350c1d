"""Plausible submissions for Problem Set 5: typical wrong answers and ones that break its rules.

A helper for tests of the grading pipeline (not a test module itself), built as
tests/ps4_submissions.py is: each wrong answer is the solution's answer cell with one typical bug
put in (the solution's text replaced by the buggy text), so it costs points on its own task only.
`RULE_BREAKERS` use what a task forbids (torch's fused attention, `nn.MultiheadAttention`, a
function taken from a module's `__dict__`) or import the course library's hidden implementation
(`seqmodels.transformer`, `seqmodels.decoding`); they earn nothing for that task.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from grading_helpers import wrong_answers
from ps1_submissions import solution_answers

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "ps5" / "ps5.ipynb"
_ANSWERS = solution_answers(nbformat.read(SOURCE, as_version=4))

# grade_id of each answer cell → grade_id of its test cell
TESTS = {
    "causal_attention": "test_causal_attention",
    "multi_head_attention": "test_multi_head_attention",
    "sinusoidal_positions": "test_sinusoidal_positions",
    "sampling": "test_sampling",
    "beam_search": "test_beam_search",
}

_MASK_SOFTMAX_NAN = (
    'scores = scores.masked_fill(~allowed, float("-inf"))\n'
    "    weights = torch.softmax(scores, dim=-1)\n"
    "    weights = weights.nan_to_num(0.0)  # a query that sees no key: 0 / 0"
)
_POSITIONS = (
    "pos = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)\n"
    "    columns = torch.arange(d)\n"
    "    two_i = (columns // 2 * 2).to(torch.float64)  # 2i of column c: 2 floor(c / 2)\n"
    "    angles = pos / 10000.0 ** (two_i / d)  # (T, d)\n"
    "    return torch.where(columns % 2 == 0, torch.sin(angles), torch.cos(angles))"
)
# the usual slicing: for odd d there is one frequency more than there are cosine columns
_POSITIONS_BY_SLICES = (
    "pe = torch.zeros(T, d, dtype=torch.float64)\n"
    "    pos = torch.arange(T, dtype=torch.float64)[:, None]\n"
    "    div = 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)\n"
    "    pe[:, 0::2] = torch.sin(pos / div)\n"
    "    pe[:, 1::2] = torch.cos(pos / div)\n"
    "    return pe"
)
_TOP_K = (
    "kth = torch.topk(logits, min(k, logits.shape[-1]), dim=-1).values[..., -1:]\n"
    '    return logits.masked_fill(logits < kth, float("-inf"))'
)
_TOP_K_INDICES = (
    "top = torch.topk(logits, min(k, logits.shape[-1]), dim=-1).indices\n"
    "    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, top, True)\n"
    '    return logits.masked_fill(~keep, float("-inf"))'
)
_INVERSE_CDF = (
    "cdf = torch.softmax(z, dim=-1).cumsum(dim=-1)\n"
    "    u = torch.rand(z.shape[0], generator=generator, dtype=torch.float64)\n"
    "    tokens = (cdf <= u[:, None]).sum(dim=-1).clamp(max=z.shape[-1] - 1)"
)
_MULTINOMIAL = (
    "probs = torch.softmax(z, dim=-1)\n"
    "    tokens = torch.multinomial(probs, 1, generator=generator)[:, 0]"
)
_FINISHED_OR_LIVE = "            else:\n                kept.append((tokens + [token], total))"

# name → (answer cell, [(the solution's text, the buggy text), ...])
_BUGS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    # Task 1: causal self-attention
    "causal_mask_transposed": ("causal_attention", [(".tril()", ".triu()")]),
    "attention_mask_after_softmax": (
        "causal_attention",
        [(_MASK_SOFTMAX_NAN, "weights = torch.softmax(scores, dim=-1) * allowed")],
    ),
    "attention_nan_for_a_query_with_no_key": (
        "causal_attention",
        [("\n    weights = weights.nan_to_num(0.0)  # a query that sees no key: 0 / 0", "")],
    ),
    # Task 2: multi-head attention
    "mha_scaled_by_sqrt_d_model": (
        "multi_head_attention",
        [("/ math.sqrt(d_k)", "/ math.sqrt(d)")],
    ),
    "mha_heads_split_without_transpose": (
        "multi_head_attention",
        [
            (
                ".reshape(B, x.shape[1], n_heads, d_k).transpose(1, 2)",
                ".reshape(B, n_heads, x.shape[1], d_k)",
            )
        ],
    ),
    "mha_heads_concatenated_without_transpose": (
        "multi_head_attention",
        [("context.transpose(1, 2).reshape(B, T_q, d)", "context.reshape(B, T_q, d)")],
    ),
    "mha_projections_not_transposed": ("multi_head_attention", [("(x @ W.T)", "(x @ W)")]),
    # Task 3: sinusoidal positions
    "positions_sin_and_cos_swapped": (
        "sinusoidal_positions",
        [("torch.sin(angles), torch.cos(angles)", "torch.cos(angles), torch.sin(angles)")],
    ),
    "positions_exponent_c_over_d": (
        "sinusoidal_positions",
        [("two_i = (columns // 2 * 2).to(torch.float64)", "two_i = columns.to(torch.float64)")],
    ),
    "positions_fail_for_odd_d": ("sinusoidal_positions", [(_POSITIONS, _POSITIONS_BY_SLICES)]),
    # Task 4: top-k, top-p and sampling
    "top_k_drops_ties": ("sampling", [(_TOP_K, _TOP_K_INDICES)]),
    "top_p_excludes_the_crossing_token": ("sampling", [("mass >= p", "mass + probs >= p")]),
    "temperature_after_filtering": (
        "sampling",
        [
            (
                'z = logits.to("cpu", torch.float64) / temperature  # (n, V)',
                'z = logits.to("cpu", torch.float64)  # (n, V)',
            ),
            ("cdf = torch.softmax(z, dim=-1)", "cdf = torch.softmax(z / temperature, dim=-1)"),
        ],
    ),
    "sampling_with_multinomial": ("sampling", [(_INVERSE_CDF, _MULTINOMIAL)]),
    # Task 5: beam search
    "beam_keeps_finished_hypotheses_live": (
        "beam_search",
        [(_FINISHED_OR_LIVE, "            kept.append((tokens + [token], total))")],
    ),
    "length_normalisation_without_eos": (
        "beam_search",
        [("(len(tokens) + 1) ** alpha", "len(tokens) ** alpha")],
    ),
    "beam_ranked_by_the_last_token": (
        "beam_search",
        [("torch.sort(totals,", "torch.sort(log_probs.flatten(),")],
    ),
    "finished_sorted_by_log_prob": (
        "beam_search",
        [("key=lambda hyp: -hyp.score", "key=lambda hyp: -hyp.log_prob")],
    ),
}

_FUSED_ATTENTION = '''
import torch.nn.functional as F


def causal_attention(q, k, v, key_mask=None):
    """torch's fused attention, the weights from identity values: against the rules."""
    T = q.shape[1]
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()[None]
    if key_mask is not None:
        mask = mask & key_mask[:, None, :]
    eye = torch.eye(T, dtype=q.dtype, device=q.device).expand(q.shape[0], -1, -1)
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return context, F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)
'''

_TORCH_MHA = '''
def multi_head_attention(x_q, x_kv, W_q, W_k, W_v, W_o, n_heads, key_mask=None, causal=False):
    """torch.nn.MultiheadAttention with the weights copied in: against the rules."""
    d = x_q.shape[-1]
    mha = torch.nn.MultiheadAttention(d, n_heads, bias=False, batch_first=True)
    mha = mha.to(device=x_q.device, dtype=x_q.dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([W_q, W_k, W_v]))
        mha.out_proj.weight.copy_(W_o)
    T_q, T_k = x_q.shape[1], x_kv.shape[1]
    attn_mask = None
    if causal:
        attn_mask = torch.ones(T_q, T_k, dtype=torch.bool, device=x_q.device).triu(1)
    padding = None if key_mask is None else ~key_mask
    with torch.no_grad():
        out, weights = mha(
            x_q, x_kv, x_kv, key_padding_mask=padding, attn_mask=attn_mask,
            average_attn_weights=False,
        )
    return out.nan_to_num(0.0), weights.nan_to_num(0.0)
'''

_FUSED_ATTENTION_BY_DICT = '''
import torch.nn.functional as F

_fused = F.__dict__["scaled_dot_" + "product_attention"]


def causal_attention(q, k, v, key_mask=None):
    """torch's fused attention found in the module's __dict__: still against the rules."""
    T = q.shape[1]
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()[None]
    if key_mask is not None:
        mask = mask & key_mask[:, None, :]
    eye = torch.eye(T, dtype=q.dtype, device=q.device).expand(q.shape[0], -1, -1)
    return _fused(q, k, v, attn_mask=mask), _fused(q, k, eye, attn_mask=mask)
'''

_IMPORTS_LIBRARY_TRANSFORMER = '''
from seqmodels.transformer import multi_head_attention as _library


def multi_head_attention(x_q, x_kv, W_q, W_k, W_v, W_o, n_heads, key_mask=None, causal=False):
    """The course library's multi-head attention: hidden from the kernel while grading."""
    return _library(x_q, x_kv, W_q, W_k, W_v, W_o, n_heads, key_mask, causal)
'''

_IMPORTS_LIBRARY_DECODING = '''
from seqmodels.decoding import beam_search as _library


def beam_search(next_log_probs, beam_size, max_len, bos=0, eos=1, alpha=0.0):
    """The course library's beam search: hidden from the kernel while grading."""
    return _library(next_log_probs, beam_size, max_len, bos, eos, alpha)
'''


# issue 19's route around name matching: the forbidden call written to a module file and imported
_ATTENTION_FROM_A_WRITTEN_MODULE = """
import importlib
import os
import sys

with open("my_attention.py", "w") as f:
    f.write(
        "import torch\\nimport torch.nn.functional as F\\n\\n"
        "def attend(q, k, v, mask):\\n"
        "    eye = torch.eye(k.shape[1], dtype=q.dtype, device=q.device).expand(q.shape[0], -1, -1)\\n"
        "    return (F.scaled_dot_product_attention(q, k, v, attn_mask=mask),\\n"
        "            F.scaled_dot_product_attention(q, k, eye, attn_mask=mask))\\n"
    )
sys.path.insert(0, os.getcwd())
_attend = importlib.import_module("my_attention").attend


def causal_attention(q, k, v, key_mask=None):
    T = q.shape[1]
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()[None]
    if key_mask is not None:
        mask = mask & key_mask[:, None, :]
    return _attend(q, k, v, mask)
"""

#: name → (answer cell, code, test cell that loses its points, what the evidence shows: a traced
#: op or call, or, where the tool is absent from the sandbox, "this cell raised ...")
_PRIVATE_ATTENTION = _FUSED_ATTENTION.replace(
    "    eye = torch.eye(T, dtype=q.dtype, device=q.device).expand(q.shape[0], -1, -1)\n"
    "    context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n"
    "    return context, F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)\n",
    "    return torch._scaled_dot_product_attention_math(q, k, v, attn_mask=mask)\n",
)  # torch's private kernel returns the context and the weights
_MHA_INSIDE_A_LAYER = _TORCH_MHA.replace(
    "mha = torch.nn.MultiheadAttention(d, n_heads, bias=False, batch_first=True)",
    "layer = torch.nn.TransformerEncoderLayer(d, n_heads, bias=False, batch_first=True)\n"
    "    mha = layer.self_attn",
)
assert _PRIVATE_ATTENTION != _FUSED_ATTENTION and _MHA_INSIDE_A_LAYER != _TORCH_MHA
_MHA_FOUND_BY_CLASS_WALK = _TORCH_MHA.replace(
    "mha = torch.nn.MultiheadAttention(d, n_heads, bias=False, batch_first=True)",
    "mha = _find(torch.nn.Module, 'Multihead' + 'Attention')(\n"
    "        d, n_heads, bias=False, batch_first=True\n"
    "    )",
).replace(
    "def multi_head_attention(",
    "def _find(base, name):\n"
    "    for c in base.__subclasses__():\n"
    "        if c.__name__ == name:\n"
    "            return c\n"
    "        if (found := _find(c, name)) is not None:\n"
    "            return found\n"
    "\n\n"
    "def multi_head_attention(",
)  # a class reached by a name built at run time
assert (
    "__subclasses__" in _MHA_FOUND_BY_CLASS_WALK
    and "MultiheadAttention(d" not in _MHA_FOUND_BY_CLASS_WALK
)

RULE_BREAKERS: dict[str, tuple[str, str, str, str]] = {
    "calls-scaled-dot-product-attention": (
        "causal_attention",
        _FUSED_ATTENTION,
        "test_causal_attention",
        "torch._C._nn.scaled_dot_product_attention",
    ),
    "finds-fused-attention-in-a-module-dict": (
        "causal_attention",
        _FUSED_ATTENTION_BY_DICT,
        "test_causal_attention",
        "torch._C._nn.scaled_dot_product_attention",
    ),
    "calls-torchs-private-attention-kernel": (
        "causal_attention",
        _PRIVATE_ATTENTION,
        "test_causal_attention",
        "torch._scaled_dot_product_attention_math",
    ),
    "takes-multiheadattention-from-a-transformer-layer": (
        "multi_head_attention",
        _MHA_INSIDE_A_LAYER,
        "test_multi_head_attention",
        "torch.nn.functional.multi_head_attention_forward",
    ),
    "finds-multiheadattention-among-subclasses": (
        "multi_head_attention",
        _MHA_FOUND_BY_CLASS_WALK,
        "test_multi_head_attention",
        "torch.nn.functional.multi_head_attention_forward",
    ),
    "calls-nn-multiheadattention": (
        "multi_head_attention",
        _TORCH_MHA,
        "test_multi_head_attention",
        "torch.nn.functional.multi_head_attention_forward",
    ),
    "imports-seqmodels-transformer": (
        "multi_head_attention",
        _IMPORTS_LIBRARY_TRANSFORMER,
        "test_multi_head_attention",
        "this cell raised ImportError",
    ),
    "imports-seqmodels-decoding": (
        "beam_search",
        _IMPORTS_LIBRARY_DECODING,
        "test_beam_search",
        "this cell raised ImportError",
    ),
    "imports-attention-from-a-module-file-it-wrote": (
        "causal_attention",
        _ATTENTION_FROM_A_WRITTEN_MODULE,
        "test_causal_attention",
        "torch._C._nn.scaled_dot_product_attention",
    ),
}


WRONG = wrong_answers(nbformat.read(SOURCE, as_version=4), _BUGS, TESTS)

#: name → (answer cell, code, a cell of the student's own after it or None): honest answers that
#: name a forbidden tool or use it outside the graded call; full marks, never held for review
HONEST: dict[str, tuple[str, str, str | None]] = {
    "a-variable-named-gc": (
        "causal_attention",
        _ANSWERS["causal_attention"] + "\n\ngc = 0  # a counter of its own, not the module\n",
        None,
    ),
}
