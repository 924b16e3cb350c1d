"""seqmodels.transformer against PyTorch's modules with copied weights, autograd and the formulas.

Oracles nobody here wrote: ``nn.MultiheadAttention`` (key padding, causal and cross-attention),
``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` (post-LN and pre-LN), autograd for
the causal mask, ``math.sin``/``math.cos`` for the positions.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from seqmodels.attention import masked_softmax
from seqmodels.rnn import sentence_nll, train_sentence_lm
from seqmodels.seq2seq import pair_batch, pair_nll, train_seq2seq, translate
from seqmodels.transformer import (
    DecoderBlock,
    EncoderBlock,
    LearnedPositions,
    MultiHeadAttention,
    TransformerLM,
    TransformerSeq2Seq,
    allowed_keys,
    causal_mask,
    sinusoidal_positions,
)

TOL = dict(rtol=1e-10, atol=1e-10)


def _padding(lengths, T):
    return torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # True = real


def _randn(g, *shape):
    return torch.randn(shape, generator=g, dtype=torch.float64)


def test_the_causal_mask_is_lower_triangular():
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]]).bool())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("causal, lengths", [(False, None), (False, [5, 2, 1]), (True, None),
                                             (True, [5, 3, 4])])  # fmt: skip
def test_self_attention_equals_torch_multihead_attention(bias, causal, lengths):
    torch.manual_seed(0)
    B, T, d, H = 3, 5, 12, 3
    torch_mha = nn.MultiheadAttention(d, H, bias=bias, batch_first=True).double()
    mine = MultiHeadAttention(d, H, bias=bias).double().copy_from(torch_mha)
    x = _randn(torch.Generator().manual_seed(1), B, T, d)
    key_mask = None if lengths is None else _padding(lengths, T)
    out, weights = mine(x, key_mask=key_mask, causal=causal)
    ref, ref_weights = torch_mha(
        x, x, x,
        key_padding_mask=None if key_mask is None else ~key_mask,
        attn_mask=~causal_mask(T) if causal else None,
        average_attn_weights=False,
    )  # fmt: skip
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)
    if causal:
        assert bool((weights.triu(1) == 0).all())  # exactly zero above the diagonal


def test_cross_attention_equals_torch_with_different_lengths_and_padding():
    torch.manual_seed(2)
    B, T_q, S, d, H = 2, 4, 7, 8, 2
    torch_mha = nn.MultiheadAttention(d, H, batch_first=True).double()
    mine = MultiHeadAttention(d, H).double().copy_from(torch_mha)
    g = torch.Generator().manual_seed(3)
    q, mem = _randn(g, B, T_q, d), _randn(g, B, S, d)
    mask = _padding([7, 3], S)
    out, weights = mine(q, mem, key_mask=mask)
    ref, ref_weights = torch_mha(q, mem, mem, key_padding_mask=~mask, average_attn_weights=False)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(weights, ref_weights, **TOL)
    assert weights.shape == (B, H, T_q, S)


def test_self_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(4)
    mha = MultiHeadAttention(8, 2).double()
    x = _randn(torch.Generator().manual_seed(5), 1, 6, 8)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    out, _ = mha(x)
    out_perm, _ = mha(x[:, perm])
    torch.testing.assert_close(out_perm, out[:, perm], **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_encoder_block_equals_torch_transformer_encoder_layer(norm_first):
    torch.manual_seed(6)
    B, T, d, H, d_ff = 3, 6, 16, 4, 24
    layer = nn.TransformerEncoderLayer(
        d, H, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    ).double()
    block = EncoderBlock(d, H, d_ff, norm_first=norm_first).double().copy_from(layer)
    x = _randn(torch.Generator().manual_seed(7), B, T, d)
    mask = _padding([6, 4, 1], T)
    torch.testing.assert_close(block(x, key_mask=mask), layer(x, src_key_padding_mask=~mask), **TOL)
    causal = layer(x, src_mask=~causal_mask(T), is_causal=True)
    torch.testing.assert_close(block(x, causal=True), causal, **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_decoder_block_equals_torch_transformer_decoder_layer(norm_first):
    torch.manual_seed(8)
    B, T, S, d, H, d_ff = 2, 5, 7, 12, 3, 20
    layer = nn.TransformerDecoderLayer(
        d, H, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    ).double()
    block = DecoderBlock(d, H, d_ff, norm_first=norm_first).double().copy_from(layer)
    g = torch.Generator().manual_seed(9)
    x, memory = _randn(g, B, T, d), _randn(g, B, S, d)
    src_mask, tgt_mask = _padding([7, 2], S), _padding([5, 3], T)
    ref = layer(
        x, memory,
        tgt_mask=~causal_mask(T), tgt_is_causal=True,
        tgt_key_padding_mask=~tgt_mask, memory_key_padding_mask=~src_mask,
    )  # fmt: skip
    mine = block(x, memory, memory_mask=src_mask, key_mask=tgt_mask)
    torch.testing.assert_close(mine, ref, **TOL)


def test_copying_refuses_a_layer_with_the_other_norm_placement():
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=True)
    with pytest.raises(ValueError, match="norm_first=False"):
        EncoderBlock(8, 2, 16, norm_first=False).copy_from(layer)


def test_the_causal_mask_makes_the_gradient_after_t_exactly_zero():
    torch.manual_seed(10)
    model = TransformerLM(20, d_model=16, n_heads=2, n_layers=2, d_ff=32).double()
    T = 7
    x = model.embed(torch.randint(0, 20, (1, T))).detach().requires_grad_(True)
    h = x
    for block in model.blocks:
        h = block(h, causal=True)
    for t in range(T):
        (grad,) = torch.autograd.grad(h[0, t].sum(), x, retain_graph=True)
        assert bool((grad[0, t + 1 :] == 0).all())  # exactly, not approximately
        assert bool((grad[0, : t + 1].abs().sum(-1) > 0).all())


@pytest.mark.parametrize("T, d", [(1, 2), (50, 16), (7, 5)])
def test_sinusoidal_positions_equal_the_formula(T, d):
    pe = sinusoidal_positions(T, d, torch.float64)
    for p in range(T):
        for j in range(d):
            angle = p / 10000 ** (2 * (j // 2) / d)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert pe[p, j].item() == pytest.approx(expected, abs=1e-12)


def test_learned_positions_stop_at_max_len():
    pos = LearnedPositions(4, 8)
    assert pos(4, torch.zeros(1)).shape == (4, 8)
    with pytest.raises(ValueError, match="lengths up to 4"):
        pos(5, torch.zeros(1))


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_the_lm_never_reads_the_future_or_the_padding(positions):
    torch.manual_seed(11)
    model = TransformerLM(30, d_model=16, n_heads=4, n_layers=2, d_ff=32, max_len=16,
                          positions=positions).double().eval()  # fmt: skip
    tokens = torch.randint(0, 30, (2, 9))
    logits, state = model(tokens)
    assert state is None and logits.shape == (2, 9, 30)
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 30  # a different future
    torch.testing.assert_close(model(changed)[0][:, :5], logits[:, :5], rtol=0, atol=0)
    with pytest.raises(ValueError, match="no state"):
        model(tokens, h0=torch.zeros(2, 16))


def test_the_lm_trains_with_the_rnn_training_loop():
    torch.manual_seed(12)
    sentences = [[3, 4, 5, 6], [3, 4, 5], [7, 8]] * 20
    model = TransformerLM(10, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    before = sentence_nll(model, sentences)[0]
    history = train_sentence_lm(model, sentences, sentences[:6], steps=60, batch_size=8,
                                lr=1e-2, generator=torch.Generator().manual_seed(0))  # fmt: skip
    after, n = sentence_nll(model, sentences)
    assert n == sum(len(s) + 1 for s in sentences)
    assert after < 0.5 * before and len(history.eval_loss) == 1


def test_the_tied_lm_shares_one_matrix():
    model = TransformerLM(50, d_model=8, n_heads=2, n_layers=1, d_ff=16, tie_weights=True)
    assert model.output.weight is model.embed.embedding.weight
    untied = TransformerLM(50, d_model=8, n_heads=2, n_layers=1, d_ff=16)
    assert untied.parameter_count() - model.parameter_count() == 50 * 8


def test_the_encoder_decoder_steps_equal_one_pass_and_translate():
    torch.manual_seed(13)
    model = TransformerSeq2Seq(12, 9, d_model=16, n_heads=2, n_layers=2, d_ff=32).double().eval()
    pairs = [([3, 4, 5, 6, 7], [2, 3, 4]), ([8, 9], [5]), ([4], [6, 7, 8, 2])]
    batch = pair_batch(pairs)
    logits, weights = model(batch)
    assert weights.shape == (3, batch.tgt_in.shape[1], batch.src.shape[1])
    assert bool((weights[1, :, 2:] == 0).all())  # padded source positions get no weight
    prefix, memory = model.start(batch.src, batch.src_lengths, batch.src_mask)
    steps = []
    for t in range(batch.tgt_in.shape[1]):
        step_logits, prefix, _ = model.decode_steps(batch.tgt_in[:, t : t + 1], prefix, memory)
        steps.append(step_logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), logits, **TOL)
    decoded = translate(model, [s for s, _ in pairs], max_len=6)
    assert len(decoded.outputs) == 3 and all(len(o) <= 6 for o in decoded.outputs)
    for out, w, (src, _) in zip(decoded.outputs, decoded.weights, pairs, strict=True):
        assert w.shape == (min(len(out) + 1, 6), len(src))  # no </s> row at max_len
        torch.testing.assert_close(w.sum(-1), torch.ones(len(w), dtype=w.dtype))


def test_the_encoder_decoder_learns_to_copy_with_the_seq2seq_loop():
    torch.manual_seed(14)
    g = torch.Generator().manual_seed(0)
    pairs = [(s, s) for s in (torch.randint(3, 9, (int(n),), generator=g).tolist()
                              for n in torch.randint(1, 6, (300,), generator=g))]  # fmt: skip
    model = TransformerSeq2Seq(9, 9, d_model=32, n_heads=4, n_layers=1, d_ff=64)
    train_seq2seq(model, pairs, pairs[:50], steps=250, batch_size=32, lr=3e-3,
                  generator=torch.Generator().manual_seed(1))  # fmt: skip
    total, n = pair_nll(model, pairs[:50])
    assert total / n < 0.2
    decoded = translate(model, [s for s, _ in pairs[:50]], max_len=8)
    assert sum(o == s for o, (s, _) in zip(decoded.outputs, pairs[:50], strict=True)) >= 40


def test_masks_have_to_match_the_inputs():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"key_mask of shape \(2, 3\)"):
        mha(x, key_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="as many queries as keys"):
        allowed_keys(1, 2, 3, None, True)
    with pytest.raises(ValueError, match="n_heads to divide d_model"):
        MultiHeadAttention(8, 3)
    with pytest.raises(ValueError, match=r"query of shape \(batch, time, 8\)"):
        mha(torch.randn(3, 8))


def test_masked_softmax_takes_a_per_query_mask():
    scores = torch.randn(2, 3, 3, dtype=torch.float64)
    mask = causal_mask(3)[None].expand(2, 3, 3)
    weights = masked_softmax(scores, mask)
    expected = torch.softmax(scores.masked_fill(~mask, -math.inf), -1)
    torch.testing.assert_close(weights, expected, rtol=0, atol=0)


def test_train_step_seconds_times_a_transformer_and_an_lstm():
    from seqmodels.rnn import RNNLM
    from seqmodels.transformer import train_step_seconds

    for model in (TransformerLM(20, d_model=8, n_heads=2, n_layers=1, d_ff=8),
                  RNNLM(20, 8, 8, core="lstm")):  # fmt: skip
        seconds = train_step_seconds(model, 12, batch_size=2, repeats=2)
        assert 0 < seconds < 5
        assert all(p.grad is not None for p in model.parameters())
