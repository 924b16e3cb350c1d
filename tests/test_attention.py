"""seqmodels.attention against oracles nobody here wrote: torch's scaled_dot_product_attention,
explicit loops over every (query, key) pair, and autograd's gradcheck."""

import math

import pytest
import torch
import torch.nn.functional as F

from seqmodels.attention import (
    SCORES,
    Attention,
    additive_scores,
    attend,
    bilinear_scores,
    dot_scores,
    masked_softmax,
    scaled_dot_attention,
    scaled_dot_scores,
    weight_entropy,
)


def _qkv(batch=3, tq=4, tk=5, d=6, dv=7, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    draw = lambda *s: torch.randn(s, generator=g, dtype=dtype)  # noqa: E731
    return draw(batch, tq, d), draw(batch, tk, d), draw(batch, tk, dv)


def _mask(lengths, tk):
    return torch.arange(tk)[None] < torch.tensor(lengths)[:, None]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scaled_dot_equals_torch(dtype):
    q, k, v = _qkv(dtype=dtype)
    mask = _mask([5, 2, 1], 5)
    context, weights = scaled_dot_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, :])
    torch.testing.assert_close(context, expected)
    assert weights.shape == (3, 4, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, dtype=dtype))


def test_padded_keys_get_exactly_zero_weight_and_are_never_read():
    q, k, v = _qkv()
    mask = _mask([5, 3, 1], 5)
    context, weights = scaled_dot_attention(q, k, v, mask)
    assert (weights[~mask[:, None, :].expand_as(weights)] == 0).all()
    k2, v2 = k.clone(), v.clone()
    k2[~mask], v2[~mask] = 1e6, float("nan")  # garbage at padding
    context2, weights2 = scaled_dot_attention(q, k2, v2.nan_to_num(1e9), mask)
    torch.testing.assert_close(context2, context)
    torch.testing.assert_close(weights2, weights)


def test_a_row_with_no_real_key_reads_nothing():
    q, k, v = _qkv(batch=2)
    mask = _mask([0, 5], 5)
    context, weights = scaled_dot_attention(q, k, v, mask)
    assert (weights[0] == 0).all() and (context[0] == 0).all()
    assert torch.isfinite(context).all()


def test_score_functions_equal_explicit_loops():
    q, k, _ = _qkv(d=4)
    g = torch.Generator().manual_seed(1)
    W = torch.randn(4, 4, generator=g, dtype=torch.float64)
    W_q = torch.randn(3, 4, generator=g, dtype=torch.float64)
    W_k = torch.randn(3, 4, generator=g, dtype=torch.float64)
    w = torch.randn(3, generator=g, dtype=torch.float64)
    loops = {name: torch.zeros(3, 4, 5, dtype=torch.float64) for name in SCORES}
    for b in range(3):
        for i in range(4):
            for j in range(5):
                qi, kj = q[b, i], k[b, j]
                loops["dot"][b, i, j] = qi @ kj
                loops["scaled_dot"][b, i, j] = qi @ kj / math.sqrt(4)
                loops["bilinear"][b, i, j] = qi @ W @ kj
                stacked = torch.cat([W_q, W_k], dim=1)  # W[q; k]
                loops["additive"][b, i, j] = w @ torch.tanh(stacked @ torch.cat([qi, kj]))
    torch.testing.assert_close(dot_scores(q, k), loops["dot"])
    torch.testing.assert_close(scaled_dot_scores(q, k), loops["scaled_dot"])
    torch.testing.assert_close(bilinear_scores(q, k, W), loops["bilinear"])
    torch.testing.assert_close(additive_scores(q, k, W_q, W_k, w), loops["additive"])


@pytest.mark.parametrize("score", SCORES)
def test_attention_module_gradients_pass_gradcheck(score):
    torch.manual_seed(0)
    module = Attention(score, 4, 4, hidden=3).double()
    q, k, v = _qkv(batch=2, tq=2, tk=3, d=4, dv=2)
    mask = _mask([3, 2], 3)
    inputs = tuple(x.requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(lambda q, k, v: module(q, k, v, mask)[0], inputs)


def test_masked_softmax_equals_softmax_over_real_keys():
    scores = torch.randn(2, 3, 4, dtype=torch.float64)
    mask = _mask([2, 4], 4)
    weights = masked_softmax(scores, mask)
    torch.testing.assert_close(weights[0, :, :2], torch.softmax(scores[0, :, :2], -1))
    torch.testing.assert_close(weights[1], torch.softmax(scores[1], -1))


def test_weight_entropy_bounds():
    uniform = torch.full((1, 1, 8), 1 / 8)
    one_hot = torch.zeros(1, 1, 8)
    one_hot[..., 3] = 1
    torch.testing.assert_close(weight_entropy(uniform), torch.tensor([[math.log(8)]]))
    torch.testing.assert_close(weight_entropy(one_hot), torch.tensor([[0.0]]))


def test_bad_shapes_say_what_was_expected():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=r"expected q: \(batch, Tq, d_q\)"):
        dot_scores(q[0], k)
    with pytest.raises(ValueError, match="one size d"):
        dot_scores(q, k[..., :3])
    with pytest.raises(ValueError, match=r"bool key_mask of shape \(3, 5\)"):
        masked_softmax(dot_scores(q, k), torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="expected W of shape"):
        bilinear_scores(q, k, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="weights"):
        attend(torch.zeros(3, 4, 6), v)
    with pytest.raises(ValueError, match="score to be one of"):
        Attention("cosine", 4, 4)
