"""Problem Set 5's grading round trip and its solutions' oracles.

The round trip is the same machinery as PS1's to PS4's (the hostile-submission suite runs once, in
tests/test_grading.py); here only what is PS5's own: the solution earns 10, the blank release 0,
each plausible wrong answer (tests/ps5_submissions.py) loses points on its own task only, with
feedback naming the task and the failing cases; a task answered with what it forbids (torch's fused
attention, `nn.MultiheadAttention`) or with the course library's hidden `seqmodels.transformer` /
`seqmodels.decoding` earns nothing for it.

The solutions are the references, so they are checked here against oracles nobody here wrote:
`F.scaled_dot_product_attention` (`is_causal=True`, or a boolean mask), `nn.MultiheadAttention`
with copied weights, a double loop of `math.sin` and `math.cos`, the top-k and top-p sets
enumerated from their definitions, sampled frequencies against exact probabilities (and the
inverse CDF redone by `torch.searchsorted`), and every sequence of a tiny model enumerated (beam
search with a beam as wide as that) or decoded greedily (a beam of 1).
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F

import grading_helpers as helpers
from grading_helpers import current_manifest
from ps5_submissions import HONEST, RULE_BREAKERS, SOURCE, TESTS, WRONG

PS = "ps5"
pytestmark = pytest.mark.grading


# test cell → the task name its Checker reports
TASK_OF = {
    "test_causal_attention": "causal_attention",
    "test_multi_head_attention": "multi_head_attention",
    "test_sinusoidal_positions": "sinusoidal_positions",
    "test_sampling": "sampling",
    "test_beam_search": "beam_search",
}


class Hypothesis(NamedTuple):
    """The notebook's first code cell defines this for Task 5."""

    tokens: list[int]
    log_prob: float
    score: float


# ------------------------------------------------------------------ the solutions against oracles


@pytest.fixture(scope="module")
def solution():
    namespace = helpers.solution_functions(SOURCE)
    namespace["Hypothesis"] = Hypothesis
    return namespace


def _randn(generator, *shape, scale=1.0):
    return torch.randn(shape, generator=generator, dtype=torch.float64) * scale


def _key_mask(T, lengths, left=False):
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    return mask.flip(1) if left else mask


@pytest.mark.parametrize(
    "lengths, T, d_k, d_v, left, scale",
    [
        (None, 5, 8, 3, False, 1.0),  # no key mask: is_causal=True
        ([6, 3, 1], 6, 4, 4, False, 1.0),  # right padding
        ([3, 1], 5, 6, 2, True, 1.0),  # left padding: the first queries see no real key
        ([4, 0], 4, 3, 5, False, 1.0),  # a row that is all padding
        ([1], 1, 4, 3, False, 1.0),  # T = 1
        ([7, 5], 7, 2, 6, False, 10.0),  # large scores
    ],
)
def test_causal_attention_equals_torchs_scaled_dot_product_attention(
    solution, lengths, T, d_k, d_v, left, scale
):
    g = torch.Generator().manual_seed(T * d_k)
    B = 2 if lengths is None else len(lengths)
    q, k = _randn(g, B, T, d_k, scale=scale), _randn(g, B, T, d_k, scale=scale)
    v = _randn(g, B, T, d_v)
    eye = torch.eye(T, dtype=torch.float64).expand(B, T, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    if lengths is None:
        context, weights = solution["causal_attention"](q, k, v)
        oracle_c = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        oracle_w = F.scaled_dot_product_attention(q, k, eye, is_causal=True)
        allowed = causal.expand(B, T, T)
    else:
        key_mask = _key_mask(T, lengths, left)
        context, weights = solution["causal_attention"](q, k, v, key_mask)
        allowed = causal[None] & key_mask[:, None, :]  # True = take part
        # a query that sees no real key: 0 by the problem set's rule (NaN in some torch versions)
        oracle_c = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed).nan_to_num(0.0)
        oracle_w = F.scaled_dot_product_attention(q, k, eye, attn_mask=allowed).nan_to_num(0.0)
        oracle_c = oracle_c.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
        oracle_w = oracle_w.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
    torch.testing.assert_close(context, oracle_c, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, oracle_w, rtol=1e-12, atol=1e-12)
    assert bool((weights.masked_select(~allowed) == 0).all())  # exactly 0


@pytest.mark.parametrize(
    "B, T_q, T_k, d, H, lengths, causal",
    [
        (3, 5, 5, 8, 2, None, False),  # self-attention, no mask
        (2, 6, 6, 12, 3, [6, 4], True),  # causal with right padding
        (3, 4, 7, 16, 4, [7, 3, 1], False),  # cross-attention with key padding
        (2, 3, 3, 4, 4, None, True),  # heads of size 1
        (2, 4, 4, 6, 1, [4, 2], False),  # one head
        (1, 1, 1, 8, 2, None, True),  # T = 1
    ],
)
def test_multi_head_attention_equals_nn_multiheadattention(
    solution, B, T_q, T_k, d, H, lengths, causal
):
    g = torch.Generator().manual_seed(d * H + T_k)
    x_q = _randn(g, B, T_q, d)
    x_kv = x_q if T_q == T_k else _randn(g, B, T_k, d)
    W_q, W_k, W_v, W_o = (_randn(g, d, d, scale=d**-0.5) for _ in range(4))
    key_mask = None if lengths is None else _key_mask(T_k, lengths)
    out, weights = solution["multi_head_attention"](
        x_q, x_kv, W_q, W_k, W_v, W_o, H, key_mask=key_mask, causal=causal
    )
    mha = torch.nn.MultiheadAttention(d, H, bias=False, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([W_q, W_k, W_v]))
        mha.out_proj.weight.copy_(W_o)
        # torch's masks mean True = ignore, the opposite of ours
        oracle_out, oracle_w = mha(
            x_q,
            x_kv,
            x_kv,
            key_padding_mask=None if key_mask is None else ~key_mask,
            attn_mask=torch.ones(T_q, T_k, dtype=torch.bool).triu(1) if causal else None,
            average_attn_weights=False,
        )
    torch.testing.assert_close(out, oracle_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights, oracle_w, rtol=1e-12, atol=1e-12)


def test_a_query_with_no_real_key_gets_zero_weights_and_a_zero_output(solution):
    g = torch.Generator().manual_seed(0)
    x = _randn(g, 2, 5, 6)
    W = [_randn(g, 6, 6) for _ in range(4)]
    key_mask = _key_mask(5, [5, 2], left=True)  # row 1: positions 0-2 are padding
    out, weights = solution["multi_head_attention"](x, x, *W, 2, key_mask=key_mask, causal=True)
    assert bool((weights[1, :, :3] == 0).all()) and bool((out[1, :3] == 0).all())
    torch.testing.assert_close(weights[1, :, 3:].sum(-1), torch.ones(2, 2, dtype=torch.float64))


@pytest.mark.parametrize("T, d", [(1, 2), (3, 4), (2, 3), (4, 1), (50, 16), (33, 127), (2048, 64)])
def test_sinusoidal_positions_equal_a_double_loop(solution, T, d):
    mine = solution["sinusoidal_positions"](T, d)
    oracle = torch.empty(T, d, dtype=torch.float64)
    for pos in range(T):
        for c in range(d):
            angle = pos / math.pow(10000.0, 2 * (c // 2) / d)
            oracle[pos, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    assert mine.dtype == torch.float64 and mine.device.type == "cpu"
    torch.testing.assert_close(mine, oracle, rtol=1e-12, atol=1e-10)


def _rows(seed, n, V, ties):
    g = torch.Generator().manual_seed(seed)
    if ties:
        return torch.randint(0, 4, (n, V), generator=g).double()
    return _randn(g, n, V, scale=2.0)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("k", [1, 2, 3, 8, 11])
def test_top_k_keeps_the_tokens_with_fewer_than_k_larger_logits(solution, ties, k):
    logits = _rows(k, 6, 8, ties)
    mine = solution["top_k_filter"](logits, k)
    for row, out in zip(logits.tolist(), mine.tolist(), strict=True):
        for i, x in enumerate(row):
            keep = sum(y > x for y in row) < k
            assert out[i] == (x if keep else -math.inf)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("p", [0.01, 0.3, 0.5, 0.9, 1.0])
def test_top_p_keeps_the_smallest_set_reaching_p(solution, ties, p):
    logits = _rows(int(100 * p), 6, 8, ties)
    mine = solution["top_p_filter"](logits, p)
    for row, out in zip(logits.tolist(), mine.tolist(), strict=True):
        z = sum(math.exp(y) for y in row)
        probs = [math.exp(y) / z for y in row]
        kept = set()
        for i, pi in enumerate(probs):
            if sum(pj for pj in probs if pj > pi) < p:
                kept.add(i)
        assert {i for i, x in enumerate(out) if x != -math.inf} == kept
        assert all(out[i] == row[i] for i in kept)
        # the smallest set of most probable tokens whose mass reaches p, ties included
        assert sum(probs[i] for i in kept) >= p - 1e-12
        largest_removed = max((probs[i] for i in range(len(row)) if i not in kept), default=0)
        assert all(probs[i] > largest_removed for i in kept)


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(1.0, None, None), (0.5, 3, None), (2.0, None, 0.7), (1.5, 5, 0.8)],
)
def test_sampled_tokens_follow_the_filtered_probabilities(solution, temperature, top_k, top_p):
    logits = _randn(torch.Generator().manual_seed(7), 1, 8)
    n = 200_000
    tokens = solution["sample_token"](
        logits.expand(n, 8), torch.Generator().manual_seed(1), temperature, top_k, top_p
    )
    # exactly the inverse CDF of one torch.rand(n) from the same seed
    z = logits[0] / temperature
    if top_k is not None:
        z = z.masked_fill(z < z.sort(descending=True).values[top_k - 1], -math.inf)
    probs = torch.softmax(z, -1)
    if top_p is not None:
        above = torch.stack([probs[probs > pi].sum() for pi in probs])
        probs = torch.softmax(z.masked_fill(above >= top_p, -math.inf), -1)
    u = torch.rand(n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    expected = torch.searchsorted(probs.cumsum(0), u, right=True).clamp(max=7)
    assert tokens.dtype == torch.int64 and torch.equal(tokens, expected)
    # and the frequencies are the probabilities, within 5 standard errors
    freq = torch.bincount(tokens, minlength=8).double() / n
    assert bool(((freq - probs).abs() <= 5 * (probs * (1 - probs) / n).sqrt() + 1e-12).all())


def test_sampling_raises_for_a_temperature_that_is_not_positive(solution):
    with pytest.raises(ValueError):
        solution["sample_token"](torch.zeros(1, 3), torch.Generator(), temperature=0.0)


def _tiny_model(seed, V, H=4):
    """A model reading its whole prefix, float64 on the CPU."""
    g = torch.Generator().manual_seed(seed)
    E, U, W = _randn(g, V, H), _randn(g, H, H, scale=H**-0.5), _randn(g, H, V, scale=2.0)

    def next_log_probs(prefixes):
        h = torch.zeros(prefixes.shape[0], H, dtype=torch.float64)
        for t in range(prefixes.shape[1]):
            h = torch.tanh(E[prefixes[:, t]] + h @ U)
        return torch.log_softmax(h @ W, dim=-1)

    return next_log_probs


@pytest.mark.parametrize(
    "seed, V, max_len, alpha", [(1, 3, 3, 0.0), (2, 4, 3, 1.0), (3, 3, 4, 0.6)]
)
def test_a_beam_as_wide_as_every_sequence_is_exhaustive_search(solution, seed, V, max_len, alpha):
    bos, eos = 0, 1
    model = _tiny_model(seed, V)
    hyps = solution["beam_search"](model, V**max_len, max_len, bos, eos, alpha)
    oracle = []
    for n in range(max_len):  # n tokens, then </s>
        for tokens in itertools.product([t for t in range(V) if t != eos], repeat=n):
            seq = [bos, *tokens, eos]
            log_prob = sum(
                float(model(torch.tensor([seq[:i]]))[0, seq[i]]) for i in range(1, len(seq))
            )
            oracle.append((list(tokens), log_prob, log_prob / (n + 1) ** alpha))
    oracle.sort(key=lambda h: -h[2])
    assert [h.tokens for h in hyps] == [h[0] for h in oracle]
    assert [h.log_prob for h in hyps] == pytest.approx([h[1] for h in oracle], abs=1e-12)
    assert [h.score for h in hyps] == pytest.approx([h[2] for h in oracle], abs=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_beam_of_one_is_greedy_decoding(solution, seed):
    bos, eos, max_len = 0, 1, 8
    model = _tiny_model(seed, 6)
    hyps = solution["beam_search"](model, 1, max_len, bos, eos, 0.0)
    seq, log_prob = [bos], 0.0
    for _ in range(max_len):
        log_probs = model(torch.tensor([seq]))[0]
        token = int(log_probs.argmax())
        log_prob += float(log_probs[token])
        seq.append(token)
        if token == eos:
            break
    if seq[-1] == eos:
        assert [(h.tokens, h.log_prob) for h in hyps] == [(seq[1:-1], pytest.approx(log_prob))]
    else:
        assert hyps == []  # greedy ran to max_len without </s>: nothing finished


# ------------------------------------------------------------------ the grading round trip


class TestRoundTrip(helpers.RoundTrip):
    """The shared round trip (tests/grading_helpers.py) on this problem set's submissions."""

    PS = PS
    TASK_OF = TASK_OF
    TESTS, WRONG, RULE_BREAKERS, HONEST = TESTS, WRONG, RULE_BREAKERS, HONEST
    HIDDEN = ("seqmodels.transformer", "seqmodels.decoding", "seqmodels.pretraining")


def test_stored_references_belong_to_the_current_solution():
    manifest = current_manifest(PS)
    tasks = manifest["tasks"]
    for task in ("causal_attention", "multi_head_attention"):
        assert tasks[task]["forbidden"] == ["torch_attention"]
    for task in ("sinusoidal_positions", "sampling", "beam_search"):
        assert "forbidden" not in tasks[task]  # nothing beyond the course library
    assert tasks["sampling"]["functions"] == ["sample_token", "top_k_filter", "top_p_filter"]
