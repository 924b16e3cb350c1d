"""Problem Set 4's grading round trip and its solutions' oracles.

The round trip is the same machinery as PS1's to PS3's (the hostile-submission suite runs once, in
tests/test_grading.py); here only what is PS4's own: the solution earns 10, the blank release 0,
each plausible wrong answer (tests/ps4_submissions.py) loses points on its own task only, with
feedback naming the task and the failing cases; a task answered with what it forbids (torch's
fused attention, RapidFuzz) or with the course library's hidden `seqmodels.attention` /
`seqmodels.seq2seq` earns nothing for it.

The solutions are the references, so they are checked here against oracles nobody here wrote:
`torch.nn.functional.scaled_dot_product_attention` with a boolean mask, the additive score as an
explicit double loop over queries and keys, `torch.nn.utils.rnn.pad_sequence` and
`torch.nn.functional.cross_entropy` with `ignore_index`, greedy decoding of each sequence on its own
(a batch of one, stopped at its `</s>`), and RapidFuzz's Levenshtein distance.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from rapidfuzz.distance import Levenshtein
from torch.nn.utils.rnn import pad_sequence

import grading_helpers as helpers
from grading_helpers import current_manifest
from ps4_submissions import HONEST, RULE_BREAKERS, SOURCE, TESTS, WRONG

PS = "ps4"
pytestmark = pytest.mark.grading


# test cell → the task name its Checker reports
TASK_OF = {
    "test_scaled_dot_attention": "scaled_dot_attention",
    "test_additive_scores": "additive_scores",
    "test_teacher_forcing": "teacher_forcing",
    "test_greedy_decode": "greedy_decode",
    "test_phoneme_error_rate": "phoneme_error_rate",
}


# ------------------------------------------------------------------ the solutions against oracles


@pytest.fixture(scope="module")
def solution():
    return helpers.solution_functions(SOURCE)


def _randn(generator, *shape, scale=1.0):
    return torch.randn(shape, generator=generator, dtype=torch.float64) * scale


@pytest.mark.parametrize(
    "lengths, T_q, d, d_v, scale",
    [
        ([5, 3, 1], 4, 8, 3, 1.0),  # padding; a row with one real key
        ([6, 6], 6, 16, 16, 1.0),  # none
        ([1], 1, 4, 2, 1.0),  # one query, one key
        ([4, 2], 7, 1, 5, 10.0),  # d = 1, large scores
    ],
)
def test_attention_equals_torchs_scaled_dot_product_attention(
    solution, lengths, T_q, d, d_v, scale
):
    g = torch.Generator().manual_seed(len(lengths) + T_q)
    B, T_k = len(lengths), max(lengths)
    q, k, v = (
        _randn(g, B, T_q, d, scale=scale),
        _randn(g, B, T_k, d, scale=scale),
        _randn(g, B, T_k, d_v),
    )
    key_mask = torch.arange(T_k)[None, :] < torch.tensor(lengths)[:, None]
    context, weights = solution["scaled_dot_attention"](q, k, v, key_mask)
    mask = key_mask[:, None, :]  # True = take part, broadcast over the queries
    eye = torch.eye(T_k, dtype=torch.float64).expand(B, T_k, T_k)
    torch.testing.assert_close(
        context, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=1e-12, atol=1e-12
    )
    torch.testing.assert_close(
        weights, F.scaled_dot_product_attention(q, k, eye, attn_mask=mask), rtol=1e-12, atol=1e-12
    )
    assert bool((weights.masked_select(~mask.expand_as(weights)) == 0).all())  # exactly 0


@pytest.mark.parametrize("B, T_q, T_k, d_q, d_k, d_a", [(3, 4, 6, 5, 3, 7), (1, 1, 1, 2, 2, 1)])
def test_additive_scores_equal_a_double_loop(solution, B, T_q, T_k, d_q, d_k, d_a):
    g = torch.Generator().manual_seed(B * T_k)
    q, k = _randn(g, B, T_q, d_q), _randn(g, B, T_k, d_k)
    W_q, W_k, w = _randn(g, d_a, d_q), _randn(g, d_a, d_k), _randn(g, d_a)
    mine = solution["additive_scores"](q, k, W_q, W_k, w)
    oracle = torch.empty(B, T_q, T_k, dtype=torch.float64)
    for b in range(B):
        for i in range(T_q):
            for j in range(T_k):
                oracle[b, i, j] = w @ torch.tanh(W_q @ q[b, i] + W_k @ k[b, j])
    torch.testing.assert_close(mine, oracle, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("targets", [[[5, 6, 7], [8]], [[4, 0, 9], [], [3]], [[], []], [[2]]])
def test_the_teacher_forced_batch_equals_pad_sequence(solution, targets):
    bos, eos, pad = 11, 12, 13
    inputs, outputs, mask = solution["teacher_forcing_batch"](targets, bos, eos, pad, "cpu")

    def padded(rows, value):
        return pad_sequence([torch.tensor(r, dtype=torch.int64) for r in rows], True, value)

    assert torch.equal(inputs, padded([[bos, *y] for y in targets], pad))
    assert torch.equal(outputs, padded([[*y, eos] for y in targets], pad))
    assert torch.equal(mask, padded([[1] * (len(y) + 1) for y in targets], 0).bool())


@pytest.mark.parametrize("lengths, T", [([5, 2, 1], 5), ([4, 4], 4), ([1, 0, 0], 3)])
def test_the_masked_loss_equals_cross_entropy_with_ignore_index(solution, lengths, T):
    g = torch.Generator().manual_seed(T)
    B, V = len(lengths), 9
    logits, targets = _randn(g, B, T, V, scale=3.0), torch.randint(0, V, (B, T), generator=g)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    oracle = F.cross_entropy(
        logits.reshape(-1, V), targets.masked_fill(~mask, -100).reshape(-1), ignore_index=-100
    )
    mine = solution["masked_token_nll"](logits, targets, mask)
    assert mine.shape == () and mine.dtype == torch.float64
    torch.testing.assert_close(mine, oracle, rtol=1e-12, atol=1e-12)


def _rnn_decoder(seed, B, V, H):
    g = torch.Generator().manual_seed(seed)
    E, U, W = _randn(g, V, H), _randn(g, H, H, scale=H**-0.5), _randn(g, H, V, scale=2.0)
    calls = []

    def step(prev, h):
        calls.append(len(prev))
        h = torch.tanh(E[prev] + h @ U)
        return h @ W, h

    return step, _randn(g, B, H), calls


@pytest.mark.parametrize("seed", [2412, 1, 2, 3])
def test_greedy_decoding_equals_decoding_each_sequence_alone(solution, seed):
    B, V, bos, eos, max_len = 6, 8, 0, 1, 12
    step, h0, calls = _rnn_decoder(seed, B, V, 5)
    mine = solution["greedy_decode"](step, h0, bos, eos, max_len)
    batched_calls = len(calls)
    alone = []
    for b in range(B):  # one sequence: feed the argmax back until </s> or max_len
        prev, h, out = torch.tensor([bos]), h0[b : b + 1], []
        for _ in range(max_len):
            logits, h = step(prev, h)
            prev = logits.argmax(-1)
            if int(prev) == eos:
                break
            out.append(int(prev))
        alone.append((out, len(out) < max_len))
    assert mine == [out for out, _ in alone]
    # the batch stops after the longest sequence's </s>, or at max_len
    ended = [len(out) + 1 if done else max_len for out, done in alone]
    assert batched_calls == max(ended)


def test_the_edit_distance_and_per_equal_rapidfuzz(solution):
    g = torch.Generator().manual_seed(0)
    phonemes = "AA AE AH B D EH K P S T".split()
    pairs = [([], []), ([], ["K"]), (["K", "AE"], []), (["P"], ["B"])]
    for _ in range(40):
        n, m = torch.randint(0, 15, (2,), generator=g).tolist()
        pairs.append(
            tuple(
                [phonemes[i] for i in torch.randint(0, 10, (size,), generator=g)] for size in (n, m)
            )
        )
    for hyp, ref in pairs:
        assert solution["edit_distance"](hyp, ref) == Levenshtein.distance(hyp, ref), (hyp, ref)
    hyps, refs = [h for h, _ in pairs[1:]], [r for _, r in pairs[1:]]
    oracle = sum(map(Levenshtein.distance, hyps, refs)) / sum(map(len, refs))
    assert solution["phoneme_error_rate"](hyps, refs) == pytest.approx(oracle, rel=1e-15)


# ------------------------------------------------------------------ the grading round trip


class TestRoundTrip(helpers.RoundTrip):
    """The shared round trip (tests/grading_helpers.py) on this problem set's submissions."""

    PS = PS
    TASK_OF = TASK_OF
    TESTS, WRONG, RULE_BREAKERS, HONEST = TESTS, WRONG, RULE_BREAKERS, HONEST
    HIDDEN = ("seqmodels.attention", "seqmodels.seq2seq", "seqmodels.metrics")


def test_stored_references_belong_to_the_current_solution():
    manifest = current_manifest(PS)
    tasks = manifest["tasks"]
    assert tasks["scaled_dot_attention"]["forbidden"] == ["torch_attention"]
    assert tasks["teacher_forcing"]["forbidden"] == ["torch_losses"]
    assert tasks["phoneme_error_rate"]["forbidden"] == ["edit_distance_libraries"]
    assert tasks["teacher_forcing"]["functions"] == ["masked_token_nll", "teacher_forcing_batch"]
    assert tasks["phoneme_error_rate"]["functions"] == ["edit_distance", "phoneme_error_rate"]
