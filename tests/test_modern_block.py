"""seqmodels.norms, .rotary and .modern_block against oracles nobody here wrote.

``torch.nn.LayerNorm`` and ``torch.nn.RMSNorm`` (values and gradients); Llama's
``LlamaRotaryEmbedding``, ``apply_rotary_pos_emb`` and ``LlamaMLP`` from the pinned HuggingFace
``transformers``; the paper's interleaved rotation written as complex multiplication; and, for the
block and the language model, causality, the shift invariance rotary positions promise, and a
short training run with the library's training loop.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from seqmodels.modern_block import ModernBlock, ModernLM, RotaryAttention, SwiGLU
from seqmodels.norms import LayerNorm, RMSNorm
from seqmodels.rnn import sentence_nll, train_sentence_lm
from seqmodels.rotary import apply_rotary, rotary_tables
from seqmodels.transformer import TransformerLM

llama = pytest.importorskip("transformers.models.llama.modeling_llama")
LlamaConfig = pytest.importorskip("transformers").LlamaConfig

TOL = dict(rtol=1e-12, atol=1e-12)
F64 = torch.float64


def _randn(g, *shape):
    return torch.randn(shape, generator=g, dtype=F64)


def _llama_config(d_head=8, n_heads=2, d_ff=24, theta=10000.0):
    return LlamaConfig(
        hidden_size=d_head * n_heads, num_attention_heads=n_heads, num_key_value_heads=n_heads,
        intermediate_size=d_ff, max_position_embeddings=256, hidden_act="silu", mlp_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
    )  # fmt: skip


def _values_and_grads(module, x, upstream):
    x = x.clone().requires_grad_(True)
    y = module(x)
    y.backward(upstream)
    return y.detach(), x.grad, [p.grad for p in module.parameters()]


@pytest.mark.parametrize("shape", [(3, 5, 7), (4, 1), (2, 3, 4, 6)])
def test_layer_norm_equals_torch_values_and_gradients(shape):
    g = torch.Generator().manual_seed(0)
    d = shape[-1]
    ours, theirs = LayerNorm(d, eps=1e-4).to(F64), nn.LayerNorm(d, eps=1e-4).to(F64)
    with torch.no_grad():
        ours.weight.copy_(_randn(g, d))
        ours.bias.copy_(_randn(g, d))
    theirs.load_state_dict(ours.state_dict())
    x, upstream = 3 * _randn(g, *shape) + 2, _randn(g, *shape)
    for a, b in zip(
        _values_and_grads(ours, x, upstream), _values_and_grads(theirs, x, upstream), strict=True
    ):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("shape", [(3, 5, 7), (4, 1), (2, 3, 4, 6)])
def test_rms_norm_equals_torch_values_and_gradients(shape):
    g = torch.Generator().manual_seed(1)
    d = shape[-1]
    ours, theirs = RMSNorm(d, eps=1e-5).to(F64), nn.RMSNorm(d, eps=1e-5).to(F64)
    with torch.no_grad():
        ours.weight.copy_(_randn(g, d))
    theirs.load_state_dict(ours.state_dict())
    x, upstream = 3 * _randn(g, *shape) + 2, _randn(g, *shape)
    for a, b in zip(
        _values_and_grads(ours, x, upstream), _values_and_grads(theirs, x, upstream), strict=True
    ):
        torch.testing.assert_close(a, b, **TOL)


def test_rms_norm_has_no_mean_and_no_shift():
    """Unlike LayerNorm, RMSNorm does not remove a constant: x and x + c normalise differently."""
    x = torch.tensor([[1.0, 2.0, 3.0]], dtype=F64)
    assert not torch.allclose(RMSNorm(3).to(F64)(x), RMSNorm(3).to(F64)(x + 5))
    torch.testing.assert_close(LayerNorm(3).to(F64)(x), LayerNorm(3).to(F64)(x + 5), **TOL)
    assert [name for name, _ in RMSNorm(3).named_parameters()] == ["weight"]


def test_norms_refuse_the_wrong_size():
    with pytest.raises(ValueError, match=r"expected x of shape \(\.\.\., 4\), got \(2, 3\)"):
        LayerNorm(4)(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="expected eps > 0"):
        RMSNorm(4, eps=0.0)


@pytest.mark.parametrize(("offset", "theta"), [(0, 10000.0), (37, 10000.0), (5, 500.0)])
def test_rotary_tables_equal_llama_rotary_embedding(offset, theta):
    """HF computes its angles in float32 whatever the input's dtype; ours are float64, so float32
    tables agree to float32 rounding and float64 ones to the rounding of HF's float32 angles."""
    d_head, T = 8, 12
    hf = llama.LlamaRotaryEmbedding(_llama_config(d_head=d_head, theta=theta))
    positions = torch.arange(offset, offset + T)[None]
    for dtype, tol in ((torch.float32, 1e-6), (F64, 1e-6)):
        cos_hf, sin_hf = hf(torch.zeros(1, dtype=dtype), positions)
        cos, sin = rotary_tables(T, d_head, theta, offset, dtype=dtype)
        assert cos.dtype == dtype
        torch.testing.assert_close(cos, cos_hf[0], rtol=0, atol=tol)
        torch.testing.assert_close(sin, sin_hf[0], rtol=0, atol=tol)


def test_apply_rotary_equals_llama_apply_rotary_pos_emb():
    g = torch.Generator().manual_seed(2)
    q, k = _randn(g, 2, 3, 10, 8), _randn(g, 2, 3, 10, 8)
    cos, sin = rotary_tables(10, 8, offset=21, dtype=F64)
    q_hf, k_hf = llama.apply_rotary_pos_emb(q, k, cos[None], sin[None])  # (1, T, d_h) per batch
    q_ours, k_ours = apply_rotary(q, k, cos, sin)
    torch.testing.assert_close(q_ours, q_hf, rtol=0, atol=0)
    torch.testing.assert_close(k_ours, k_hf, rtol=0, atol=0)


def _interleaved_rope(x, offset, base=10000.0):
    """The paper's RoPE: pairs (x_2i, x_2i+1) as complex numbers times exp(i p theta_i)."""
    T, d = x.shape[-2:]
    theta = base ** (-torch.arange(0, d, 2, dtype=F64) / d)
    angles = torch.outer(torch.arange(offset, offset + T, dtype=F64), theta)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def test_rotate_half_is_the_papers_interleaved_rotation_after_a_permutation():
    g = torch.Generator().manual_seed(3)
    d = 16
    x = _randn(g, 2, 3, 9, d)
    perm = torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))  # evens, then odds
    cos, sin = rotary_tables(9, d, offset=4, dtype=F64)
    rotated, _ = apply_rotary(x[..., perm], x[..., perm], cos, sin)
    torch.testing.assert_close(rotated, _interleaved_rope(x, offset=4)[..., perm], **TOL)
    assert not torch.allclose(apply_rotary(x, x, cos, sin)[0], _interleaved_rope(x, offset=4))


def test_rotary_scores_depend_only_on_the_offset_between_positions():
    g = torch.Generator().manual_seed(4)
    q, k = _randn(g, 1, 2, 7, 8), _randn(g, 1, 2, 7, 8)
    scores = []
    for shift in (0, 5, 100):
        cos, sin = rotary_tables(7, 8, offset=shift, dtype=F64)
        q_r, k_r = apply_rotary(q, k, cos, sin)
        scores.append(q_r @ k_r.transpose(-2, -1))
        torch.testing.assert_close(q_r.norm(dim=-1), q.norm(dim=-1), **TOL)  # rotations
    torch.testing.assert_close(scores[1], scores[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(scores[2], scores[0], rtol=0, atol=1e-12)


def test_rotary_refuses_odd_heads_and_mismatched_tables():
    with pytest.raises(ValueError, match="even d_head"):
        rotary_tables(4, 7)
    cos, sin = rotary_tables(4, 8)
    with pytest.raises(ValueError, match=r"expected cos and sin of shape \(5, 8\)"):
        apply_rotary(torch.zeros(1, 1, 5, 8), torch.zeros(1, 1, 5, 8), cos, sin)


def test_swiglu_equals_llama_mlp_with_copied_weights():
    g = torch.Generator().manual_seed(5)
    mlp = llama.LlamaMLP(_llama_config(d_head=8, n_heads=2, d_ff=24)).to(F64)
    ours = SwiGLU(16, 24).to(F64)
    with torch.no_grad():
        ours.w1.weight.copy_(mlp.gate_proj.weight)
        ours.w3.weight.copy_(mlp.up_proj.weight)
        ours.w2.weight.copy_(mlp.down_proj.weight)
    x, upstream = _randn(g, 3, 5, 16), _randn(g, 3, 5, 16)
    for a, b in zip(
        _values_and_grads(ours, x, upstream), _values_and_grads(mlp, x, upstream), strict=True
    ):
        torch.testing.assert_close(a, b, **TOL)
    assert all(m.bias is None for m in (ours.w1, ours.w2, ours.w3))


def test_rotary_attention_equals_llama_attention_with_copied_weights():
    """Causal ``LlamaAttention`` (torch's SDPA; no mask means causal there) with the same weights:
    equal given our float64 tables, and within HF's float32 angles given its own."""
    g = torch.Generator().manual_seed(9)
    config = _llama_config(d_head=8, n_heads=2)
    config._attn_implementation = "sdpa"
    theirs = llama.LlamaAttention(config, layer_idx=0).to(F64).eval()
    ours = RotaryAttention(16, 2).to(F64)
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj"):
            getattr(ours, name).weight.copy_(getattr(theirs, name).weight)
        ours.out_proj.weight.copy_(theirs.o_proj.weight)
    x = _randn(g, 3, 9, 16)
    for start in (0, 11):
        out = ours(x, start=start)[0]
        cos, sin = rotary_tables(9, 8, offset=start, dtype=F64)
        torch.testing.assert_close(out, theirs(x, (cos[None], sin[None]), None)[0], **TOL)
        tables = llama.LlamaRotaryEmbedding(config)(x, torch.arange(start, start + 9)[None])
        torch.testing.assert_close(out, theirs(x, tables, None)[0], rtol=0, atol=1e-7)


def test_the_block_is_causal_and_keeps_shapes():
    torch.manual_seed(6)
    block = ModernBlock(16, 2, 24).to(F64)
    x = torch.randn(3, 9, 16, dtype=F64)
    y = block(x)
    assert y.shape == x.shape and block.attention_weights.shape == (3, 2, 9, 9)
    assert torch.all(block.attention_weights.triu(1) == 0)
    changed = x.clone()
    changed[:, 4] += 1.0  # a change at t = 4
    torch.testing.assert_close(block(changed)[:, :4], y[:, :4], rtol=0, atol=0)
    assert not torch.allclose(block(changed)[:, 4:], y[:, 4:])


def test_the_blocks_attention_depends_only_on_relative_positions():
    """Shift every position by k: the same weights, the same outputs (no absolute position)."""
    torch.manual_seed(7)
    attention = RotaryAttention(16, 2).to(F64)
    x = torch.randn(2, 8, 16, dtype=F64)
    out, weights = attention(x)
    for start in (3, 250):
        out_k, weights_k = attention(x, start=start)
        torch.testing.assert_close(weights_k, weights, rtol=0, atol=1e-12)
        torch.testing.assert_close(out_k, out, rtol=0, atol=1e-12)
    assert all(p.bias is None for p in (attention.q_proj, attention.k_proj, attention.out_proj))


def test_the_lm_has_the_transformer_lms_call_and_is_causal():
    torch.manual_seed(8)
    model = ModernLM(30, d_model=16, n_heads=2, n_layers=2, d_ff=24, max_len=20).to(F64)
    tokens = torch.randint(0, 30, (2, 12))
    logits, state = model(tokens)
    assert logits.shape == (2, 12, 30) and state is None
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 30  # a different future
    torch.testing.assert_close(model(changed)[0][:, :5], logits[:, :5], rtol=0, atol=0)
    shifted = model.output(model.hidden_states(tokens, start=40))
    torch.testing.assert_close(shifted, logits, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="no state"):
        model(tokens, h0=torch.zeros(2, 16))
    with pytest.raises(ValueError, match="max_len = 20"):
        model(torch.zeros(1, 21, dtype=torch.long))


def test_the_lm_matches_the_transformer_lms_size_and_trains():
    default = dict(vocab_size=100)
    ratio = ModernLM(**default).parameter_count() / TransformerLM(**default).parameter_count()
    assert 0.98 < ratio < 1.02, ratio
    torch.manual_seed(12)
    sentences = [[3, 4, 5, 6], [3, 4, 5], [7, 8]] * 20
    model = ModernLM(10, d_model=16, n_heads=2, n_layers=1, d_ff=24)
    before = sentence_nll(model, sentences)[0]
    train_sentence_lm(model, sentences, None, steps=60, batch_size=8, lr=1e-2,
                      generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert sentence_nll(model, sentences)[0] < 0.5 * before
