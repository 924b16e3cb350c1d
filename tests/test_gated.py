"""The gated cells against oracles nobody here wrote: torch.nn.GRU / nn.LSTM with copied weights
(float64, with h0, with padding), autograd's gradients through torch's modules and autograd's
Jacobian of the gated update; the lecture's GRU against a direct transcription of its equations."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from seqmodels.gated import (
    GRU,
    LSTM,
    GatedRNN,
    ResidualRNN,
    forward_backward_seconds,
    lecture_gru_step,
    lecture_weights,
    set_forget_bias,
)
from seqmodels.gradients import input_gradient_norms, state_jacobians
from seqmodels.rnn import RNNLM, train_truncated_bptt

sizes = st.tuples(
    st.integers(1, 4), st.integers(0, 6), st.integers(1, 5), st.integers(1, 5)
)  # batch, time, d_in, d_h


def _torch(kind, d_in, d_h, seed):
    torch.manual_seed(seed)
    module = kind(d_in, d_h, batch_first=True).double()
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(-0.8, 0.8)  # larger than the default: gates far from 0.5, tanh saturating
    return module


def _ours(kind, ref):
    return GRU.from_torch(ref) if kind is nn.GRU else LSTM.from_torch(ref)


def _state(kind, batch, d_h, seed):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, d_h, generator=g, dtype=torch.float64)
    if kind is nn.LSTM:
        return (h, torch.randn(batch, d_h, generator=g, dtype=torch.float64))
    return h


def _to_torch_state(s):
    return tuple(t[None].contiguous() for t in s) if isinstance(s, tuple) else s[None]


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM])
@settings(max_examples=20, deadline=None)
@given(sizes, st.booleans(), st.integers(0, 2**16))
def test_equal_to_torch_with_copied_weights(kind, size, with_h0, seed):
    batch, time, d_in, d_h = size
    ref = _torch(kind, d_in, d_h, seed)
    ours = _ours(kind, ref)
    x = torch.randn(batch, time, d_in, dtype=torch.float64)
    s0 = _state(kind, batch, d_h, seed) if with_h0 else None
    out, last = ours(x, s0)
    assert out.shape == (batch, time, d_h)
    if time == 0:  # torch refuses empty sequences; the state is unchanged
        return
    ref_out, ref_last = ref(x, None if s0 is None else _to_torch_state(s0))
    torch.testing.assert_close(out, ref_out)
    if kind is nn.LSTM:
        torch.testing.assert_close(last[0], ref_last[0][0])
        torch.testing.assert_close(last[1], ref_last[1][0])  # the cell state too
    else:
        torch.testing.assert_close(last, ref_last[0])


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM])
@pytest.mark.parametrize("how", ["lengths", "mask"])
def test_padding_equals_running_each_sequence_alone(kind, how):
    ref = _torch(kind, 3, 4, seed=5)
    ours = _ours(kind, ref)
    lengths = torch.tensor([5, 1, 3, 0])
    x = torch.randn(4, 5, 3, dtype=torch.float64)
    s0 = _state(kind, 4, 4, seed=6)
    mask = torch.arange(5) < lengths[:, None]
    kwargs = {"lengths": lengths} if how == "lengths" else {"mask": mask}
    out, last = ours(x, s0, **kwargs)
    assert (out[~mask] == 0).all()  # padded outputs are 0, as pad_packed_sequence gives
    for b, n in enumerate(lengths.tolist()):
        one = tuple(s[b : b + 1] for s in s0) if kind is nn.LSTM else s0[b : b + 1]
        last_b = tuple(s[b] for s in last) if kind is nn.LSTM else last[b]
        if n == 0:  # nothing read: the state is h0 (and c0)
            torch.testing.assert_close(
                last_b, tuple(s[0] for s in one) if kind is nn.LSTM else one[0]
            )
            continue
        ref_out, ref_last = ref(x[b : b + 1, :n], _to_torch_state(one))
        torch.testing.assert_close(out[b, :n], ref_out[0])
        if kind is nn.LSTM:
            torch.testing.assert_close(last_b, (ref_last[0][0, 0], ref_last[1][0, 0]))
        else:
            torch.testing.assert_close(last_b, ref_last[0, 0])


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM])
def test_gradients_match_autograd_through_torchs_module(kind):
    ref = _torch(kind, 3, 5, seed=11)
    ours = _ours(kind, ref)
    x = torch.randn(2, 6, 3, dtype=torch.float64)
    w = torch.randn(2, 6, 5, dtype=torch.float64)  # a loss that weighs every output differently
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    (ours(x1)[0] * w).sum().backward()
    (ref(x2)[0] * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, getattr(ref, name).grad, msg=name)


def test_torchs_update_gate_is_one_minus_the_lectures():
    """nn.GRU keeps z' of the old state; the lecture keeps 1 - z. With torch's z rows pushed to a
    huge bias, torch (and our copy) keep the old state exactly: the lecture's z is 0 there."""
    ref = _torch(nn.GRU, 2, 3, seed=3)
    with torch.no_grad():
        ref.bias_ih_l0[3:6] = 40.0  # torch's z' = 1: keep everything
    ours = GRU.from_torch(ref)
    x = torch.randn(1, 4, 2, dtype=torch.float64)
    h0 = torch.randn(1, 3, dtype=torch.float64)
    torch.testing.assert_close(ref(x, h0[None])[1][0], h0)
    torch.testing.assert_close(ours(x, h0)[1], h0)
    W, U, b = lecture_weights(ours)
    assert (b["z"] < -39).all()  # the lecture's update gate is sigma(-40) ~ 0


@settings(max_examples=15, deadline=None)
@given(sizes, st.integers(0, 2**16))
def test_lecture_gru_equals_a_transcription_of_the_equations(size, seed):
    batch, time, d_in, d_h = size
    ref = _torch(nn.GRU, d_in, d_h, seed)
    lecture = GRU.from_torch(ref, reset="before")
    x = torch.randn(batch, time, d_in, dtype=torch.float64)
    h = torch.randn(batch, d_h, dtype=torch.float64)
    out, last = lecture(x, h)
    W, U, b = lecture_weights(ref)
    expected = []
    for t in range(time):
        h = lecture_gru_step(x[:, t], h, W, U, b)
        expected.append(h)
    if time:
        torch.testing.assert_close(out, torch.stack(expected, 1))
    torch.testing.assert_close(last, h)


def test_lecture_gru_differs_from_torchs():
    ref = _torch(nn.GRU, 3, 4, seed=2)
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    before = GRU.from_torch(ref, reset="before")(x)[0]
    after = GRU.from_torch(ref, reset="after")(x)[0]
    torch.testing.assert_close(after, ref(x)[0])
    assert (before - after).abs().max() > 1e-3
    with torch.no_grad():  # with no recurrent bias on the candidate and r = 1 they coincide
        ref.bias_hh_l0[8:] = 0
        ref.bias_ih_l0[:4] = 40.0
    before = GRU.from_torch(ref, reset="before")(x)[0]
    torch.testing.assert_close(before, ref(x)[0])


def test_closed_gate_gives_an_identity_jacobian():
    torch.manual_seed(0)
    cell = GatedRNN(3, 5).double().close_gate(-40.0)
    x = torch.randn(8, 3, dtype=torch.float64)
    jac = state_jacobians(cell, x)  # autograd: dh_T/dh_t for t = 0 .. T
    eye = torch.eye(5, dtype=torch.float64).expand_as(jac)
    torch.testing.assert_close(jac, eye)
    open_cell = GatedRNN(3, 5).double()
    assert (state_jacobians(open_cell, x)[0] - eye[0]).abs().max() > 0.1


def test_residual_jacobian_is_identity_plus_the_elman_step():
    torch.manual_seed(1)
    cell = ResidualRNN(2, 4).double()
    x = torch.randn(1, 2, dtype=torch.float64)
    h0 = torch.randn(4, dtype=torch.float64)
    jac = state_jacobians(cell, x, h0)[0]
    a = x[0] @ cell.weight_ih_l0.T + cell.bias_ih_l0 + h0 @ cell.weight_hh_l0.T + cell.bias_hh_l0
    expected = torch.eye(4, dtype=torch.float64) + (1 - a.tanh() ** 2)[:, None] * cell.weight_hh_l0
    torch.testing.assert_close(jac, expected.detach())


def test_forget_bias_sets_the_sum_of_the_two_biases():
    lstm = nn.LSTM(3, 4, batch_first=True)
    set_forget_bias(lstm, 1.0)
    total = (lstm.bias_ih_l0 + lstm.bias_hh_l0).detach()
    torch.testing.assert_close(total[4:8], torch.ones(4))
    ours = LSTM.from_torch(lstm)
    x = torch.randn(2, 3, 3)
    torch.testing.assert_close(ours(x)[0], lstm(x)[0])
    with pytest.raises(TypeError, match="expected an nn.LSTM"):
        set_forget_bias(nn.GRU(3, 4), 1.0)
    assert set_forget_bias(ours, 2.0) is ours


@pytest.mark.parametrize(
    ("fused", "hand"), [("gru", "gru-hand"), ("lstm", "lstm-hand"), ("torch", "elman")]
)
def test_rnn_lm_cores_are_drop_in_replacements(fused, hand):
    torch.manual_seed(4)
    a = RNNLM(11, embed_dim=5, hidden_dim=6, core=fused).double()
    b = RNNLM(11, embed_dim=5, hidden_dim=6, core=hand).double()
    assert set(a.state_dict()) == set(b.state_dict())
    b.load_state_dict(a.state_dict())
    tokens = torch.randint(11, (4, 7))
    lengths = torch.tensor([7, 1, 4, 6])
    mask = torch.arange(7) < lengths[:, None]
    h0 = a.initial_state(4)
    for kwargs in [{}, {"h0": h0}, {"lengths": lengths}]:
        la, sa = a(tokens, **kwargs)
        lb, sb = b(tokens, **kwargs)
        if "lengths" in kwargs:
            la, lb = la[mask], lb[mask]
        torch.testing.assert_close(la, lb)
        torch.testing.assert_close(sa, sb)
    # carrying the state over two halves equals reading the whole
    whole = a(tokens)[0]
    first, state = a(tokens[:, :3])
    torch.testing.assert_close(torch.cat([first, a(tokens[:, 3:], h0=state)[0]], 1), whole)


def test_parameter_counts_of_gated_lms():
    v, e, h = 50, 8, 16
    for core, k in [("gru", 3), ("gru-hand", 3), ("gru-lecture", 3), ("lstm", 4), ("lstm-hand", 4)]:
        expected = v * e + k * (h * e + h * h + 2 * h) + (v * h + v)
        assert RNNLM(v, e, h, core=core).parameter_count() == expected


def test_truncated_bptt_carries_an_lstm_state():
    torch.manual_seed(0)
    model = RNNLM(9, 4, 6, core="lstm")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = train_truncated_bptt(model, torch.randint(9, (200,)), opt, batch_size=4, window=5)
    assert len(losses) == 10


def test_gradient_helpers_accept_gated_modules():
    torch.manual_seed(0)
    x = torch.randn(6, 3)
    for module in (nn.GRU(3, 4, batch_first=True), LSTM(3, 4), GRU(3, 4, reset="before")):
        assert input_gradient_norms(module, x).shape == (6,)
    assert forward_backward_seconds(GRU(3, 4), torch.randn(2, 5, 3), repeats=1) > 0


def test_errors_say_what_was_expected():
    gru, lstm = GRU(3, 4), LSTM(3, 4)
    with pytest.raises(ValueError, match=r"expected x of shape \(batch, time, 3\), got \(4, 3\)"):
        gru(torch.randn(4, 3))
    with pytest.raises(ValueError, match=r"expected h0 of shape \(2, 4\), got \(4,\)"):
        gru(torch.randn(2, 5, 3), torch.randn(4))
    with pytest.raises(ValueError, match=r"expected c_0 of shape \(2, 4\)"):
        lstm(torch.randn(2, 5, 3), (torch.zeros(2, 4), torch.zeros(2, 5)))
    with pytest.raises(ValueError, match="expected reset 'after'"):
        GRU(3, 4, reset="middle")
    with pytest.raises(ValueError, match="expected hidden_size to be a positive integer"):
        LSTM(3, 0)
    with pytest.raises(TypeError, match="expected a torch.nn.GRU, got LSTM"):
        GRU(3, 4).copy_from(nn.LSTM(3, 4))
    with pytest.raises(ValueError, match="num_layers"):
        GRU(3, 4).copy_from(nn.GRU(3, 4, num_layers=2))
    with pytest.raises(ValueError, match=r"expected integer lengths of shape \(2,\)"):
        gru(torch.randn(2, 5, 3), lengths=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="expected core to be one of"):
        RNNLM(5, 2, 3, core="transformer")
    with pytest.raises(ValueError, match=r"expected the LSTM state h0 = \(h, c\)"):
        RNNLM(5, 2, 3, core="lstm")(torch.zeros(1, 2, dtype=torch.long), h0=(torch.zeros(1, 3),))
