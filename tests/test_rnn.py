"""The Elman RNN and RNN LM against torch.nn.RNN with copied weights; padding, the masked loss,
hand-written BPTT against autograd, and truncated BPTT (state carried, gradient cut)."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from seqmodels.rnn import (
    RNNLM,
    ElmanRNN,
    bptt,
    hidden_jacobian,
    masked_sequence_nll,
    train_truncated_bptt,
    truncated_bptt_batches,
    truncated_bptt_step,
)

sizes = st.tuples(
    st.integers(1, 4), st.integers(0, 6), st.integers(1, 5), st.integers(1, 5)
)  # batch, time, d_in, d_h


def _torch_rnn(d_in, d_h, seed):
    torch.manual_seed(seed)
    rnn = nn.RNN(d_in, d_h, batch_first=True, nonlinearity="tanh").double()
    with torch.no_grad():
        for p in rnn.parameters():
            p.uniform_(-0.8, 0.8)  # larger than the default, so tanh saturates somewhat
    return rnn


@settings(max_examples=25, deadline=None)
@given(sizes, st.booleans(), st.integers(0, 2**16))
def test_elman_rnn_equals_torch_rnn_with_copied_weights(size, with_h0, seed):
    batch, time, d_in, d_h = size
    ref = _torch_rnn(d_in, d_h, seed)
    rnn = ElmanRNN.from_torch(ref)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, time, d_in, generator=g, dtype=torch.float64)
    h0 = torch.randn(batch, d_h, generator=g, dtype=torch.float64) if with_h0 else None
    out, h = rnn(x, h0)
    assert out.shape == (batch, time, d_h) and h.shape == (batch, d_h)
    if time == 0:  # nn.RNN refuses empty sequences; the state is h0
        torch.testing.assert_close(h, h0 if with_h0 else torch.zeros(batch, d_h).double())
        return
    ref_out, ref_h = ref(x, None if h0 is None else h0[None])
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(h, ref_h[0])


def test_the_lectures_single_bias_is_the_sum_of_the_two():
    rnn = ElmanRNN.from_torch(_torch_rnn(3, 4, seed=0))
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    out, _ = rnn(x)
    with torch.no_grad():
        rnn.bias_ih_l0 += rnn.bias_hh_l0
        rnn.bias_hh_l0.zero_()
    torch.testing.assert_close(rnn(x)[0], out)
    h, w_x, w_h, b = torch.zeros(2, 4).double(), rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0
    for t in range(5):  # h_t = tanh(W_h h_{t-1} + W_x x_t + b), the lecture's form
        h = torch.tanh(h @ w_h.T + x[:, t] @ w_x.T + b)
        torch.testing.assert_close(out[:, t], h.detach())


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=4),
    st.integers(0, 3),
    st.integers(0, 2**16),
)
def test_padding_does_not_update_the_state(lengths, extra, seed):
    """Each padded row gives what nn.RNN gives on that sequence alone, unpadded."""
    d_in, d_h = 3, 4
    ref = _torch_rnn(d_in, d_h, seed)
    rnn = ElmanRNN.from_torch(ref)
    g = torch.Generator().manual_seed(seed)
    time = max(lengths) + extra
    x = torch.randn(len(lengths), time, d_in, generator=g, dtype=torch.float64) * 5  # pads: garbage
    h0 = torch.randn(len(lengths), d_h, generator=g, dtype=torch.float64)
    lens = torch.tensor(lengths)
    out, h = rnn(x, h0, lengths=lens)
    mask = torch.arange(time) < lens[:, None]
    out_m, h_m = rnn(x, h0, mask=mask)
    torch.testing.assert_close(out_m, out)
    torch.testing.assert_close(h_m, h)
    for b, n in enumerate(lengths):
        assert (out[b, n:] == 0).all()
        if n == 0:
            torch.testing.assert_close(h[b], h0[b])
            continue
        ref_out, ref_h = ref(x[b : b + 1, :n], h0[None, b : b + 1])
        torch.testing.assert_close(out[b, :n], ref_out[0])
        torch.testing.assert_close(h[b], ref_h[0, 0])


def _lm_pair(seed=0, vocab=11):
    torch.manual_seed(seed)
    ours = RNNLM(vocab, embed_dim=5, hidden_dim=6, core="elman").double()
    theirs = RNNLM(vocab, embed_dim=5, hidden_dim=6, core="torch").double()
    assert set(ours.state_dict()) == set(theirs.state_dict())  # the same parameter names
    theirs.load_state_dict(ours.state_dict())
    return ours, theirs


def test_rnn_lm_cores_agree_with_and_without_padding():
    ours, theirs = _lm_pair()
    tokens = torch.randint(11, (4, 7))
    h0 = torch.randn(4, 6, dtype=torch.float64)
    for kwargs in [{}, {"h0": h0}, {"lengths": torch.tensor([7, 1, 4, 6])}]:
        logits, h = ours(tokens, **kwargs)
        ref_logits, ref_h = theirs(tokens, **kwargs)  # packs the padded batch
        assert logits.shape == (4, 7, 11)
        if "lengths" in kwargs:
            mask = torch.arange(7) < kwargs["lengths"][:, None]
            logits, ref_logits = logits[mask], ref_logits[mask]  # padded outputs: W·0 + b vs b
        torch.testing.assert_close(logits, ref_logits)
        torch.testing.assert_close(h, ref_h)


def test_rnn_lm_predicts_from_the_prefix_only():
    ours, _ = _lm_pair(seed=1)
    tokens = torch.randint(11, (2, 6))
    changed = tokens.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 11
    torch.testing.assert_close(ours(changed)[0][:, :4], ours(tokens)[0][:, :4])
    assert not torch.allclose(ours(changed)[0][:, 4], ours(tokens)[0][:, 4])


def test_parameter_count():
    v, e, h = 50, 8, 16
    expected = v * e + (h * e + h * h + 2 * h) + (v * h + v)
    for core in ("elman", "torch"):
        assert RNNLM(v, e, h, core=core).parameter_count() == expected


def test_masked_nll_counts_each_real_token_once():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7, dtype=torch.float64)
    targets = torch.randint(7, (2, 5))
    mask = torch.tensor([[True] * 5, [True] + [False] * 4])  # 6 real tokens
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    expected = (nll[0].sum() + nll[1, 0]) / 6  # not the mean of the two sequences' means
    torch.testing.assert_close(masked_sequence_nll(logits, targets, mask), expected)


@settings(max_examples=20, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=4), st.integers(1, 4), st.integers(0, 2**16)
)
def test_padding_never_changes_the_masked_loss(lengths, extra, seed):
    g = torch.Generator().manual_seed(seed)
    batch, time, vocab = len(lengths), max(lengths), 6
    logits = torch.randn(batch, time, vocab, generator=g, dtype=torch.float64)
    targets = torch.randint(vocab, (batch, time), generator=g)
    mask = torch.arange(time) < torch.tensor(lengths)[:, None]
    logits[~mask] = torch.nan  # positions past a sequence's end already are padding
    targets[~mask] = -100
    padded = torch.cat([logits, torch.full((batch, extra, vocab), 1e30, dtype=torch.float64)], 1)
    padded[:, time:, 0] = torch.inf  # garbage
    padded.requires_grad_()
    padded_targets = torch.cat([targets, torch.full((batch, extra), 12345)], 1)
    padded_mask = torch.cat([mask, torch.zeros(batch, extra, dtype=torch.bool)], 1)
    loss = masked_sequence_nll(logits, targets, mask)
    padded_loss = masked_sequence_nll(padded, padded_targets, padded_mask)
    assert torch.isfinite(loss) and padded_loss.item() == loss.item()
    padded_loss.backward()
    assert (padded.grad[~padded_mask] == 0).all() and torch.isfinite(padded.grad).all()


def test_hand_written_bptt_equals_autograd():
    ref = _torch_rnn(3, 4, seed=3)
    rnn = ElmanRNN.from_torch(ref)
    x = torch.randn(2, 6, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 6, 4, dtype=torch.float64)  # dL/dh_t for every t
    out, _ = ref(x, h0[None])  # the oracle: torch's own RNN and autograd
    (out * upstream).sum().backward()
    grads = bptt(rnn, x.detach(), upstream, h0.detach())
    for name, p in ref.named_parameters():
        torch.testing.assert_close(getattr(grads, name), p.grad, msg=name)
    torch.testing.assert_close(grads.h0, h0.grad)
    torch.testing.assert_close(grads.x, x.grad)


def test_a_loss_on_the_last_state_only_still_reaches_every_step():
    rnn = ElmanRNN.from_torch(_torch_rnn(2, 3, seed=4))
    x = torch.randn(1, 5, 2, dtype=torch.float64)
    upstream = torch.zeros(1, 5, 3, dtype=torch.float64)
    upstream[:, -1] = 1.0
    grads = bptt(rnn, x, upstream)
    assert (grads.x[0].abs().sum(-1) > 0).all()


def test_step_jacobian_equals_autograd():
    rnn = ElmanRNN.from_torch(_torch_rnn(3, 4, seed=5))
    x_t = torch.randn(1, 1, 3, dtype=torch.float64)
    h_prev = torch.randn(1, 4, dtype=torch.float64)

    def step(h):
        return rnn(x_t, h[None])[1][0]

    expected = torch.autograd.functional.jacobian(step, h_prev[0])
    h_t = step(h_prev[0]).detach()
    torch.testing.assert_close(hidden_jacobian(rnn, h_t[None])[0], expected)


def test_truncated_bptt_batches_are_contiguous_rows():
    stream = torch.arange(23)
    windows = list(truncated_bptt_batches(stream, batch_size=3, window=4))
    inputs = torch.cat([i for i, _ in windows], 1)
    targets = torch.cat([t for _, t in windows], 1)
    assert [w[0].shape[1] for w in windows] == [4, 3]  # 22 // 3 = 7 steps per row
    assert inputs.tolist() == [list(range(0, 7)), list(range(7, 14)), list(range(14, 21))]
    assert (targets == inputs + 1).all()


def test_truncated_bptt_carries_the_state_and_cuts_the_gradient():
    torch.manual_seed(0)
    model = RNNLM(8, embed_dim=4, hidden_dim=5).double()
    first = torch.tensor([[7, 7, 7]])  # token 7 appears only in the first window
    second = torch.tensor([[1, 2, 3]])
    targets = torch.tensor([[4, 5, 6]])
    frozen = torch.optim.SGD(model.parameters(), lr=0.0)  # keep the weights, look at the gradients
    _, h = truncated_bptt_step(model, first, first, None, frozen)
    assert not h.requires_grad
    torch.testing.assert_close(h, model(first)[1].detach())
    loss, h2 = truncated_bptt_step(model, second, targets, h, frozen)
    full_logits, full_h = model(torch.cat([first, second], 1))
    torch.testing.assert_close(h2, full_h.detach())  # the state was carried across the boundary
    assert loss == pytest.approx(F.cross_entropy(full_logits[0, 3:], targets[0]).item())
    assert model.embedding.weight.grad[7].abs().max() == 0  # no gradient past the boundary
    model.zero_grad()
    F.cross_entropy(full_logits[0, 3:], targets[0]).backward()  # full BPTT: the gradient arrives
    assert model.embedding.weight.grad[7].abs().max() > 1e-6


def test_truncated_bptt_training_learns_a_periodic_stream():
    torch.manual_seed(0)
    model = RNNLM(5, embed_dim=8, hidden_dim=16)
    stream = torch.arange(5).repeat(200)  # 0 1 2 3 4 0 1 ...: the next token is determined
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(3):
        losses += train_truncated_bptt(model, stream, optimizer, batch_size=8, window=10)
    assert losses[0] > 1.2 and losses[-1] < 0.1


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda r, m: r(torch.zeros(2, 3)),
            ValueError,
            r"x of shape \(batch, time, 3\), got \(2, 3\)",
        ),
        (lambda r, m: r(torch.zeros(2, 1, 3), torch.zeros(4)), ValueError, r"h0 of shape \(2, 4\)"),
        (
            lambda r, m: r(torch.zeros(2, 1, 3), lengths=torch.tensor([1, 2])),
            ValueError,
            r"lengths in 0 \.\. 1",
        ),
        (
            lambda r, m: r(torch.zeros(2, 1, 3), mask=torch.ones(2, 1)),
            ValueError,
            r"bool mask of shape \(2, 1\)",
        ),
        (lambda r, m: m(torch.tensor([[9]])), IndexError, r"token ids must lie in 0 \.\. 8"),
        (lambda r, m: m(torch.zeros(2, 2)), TypeError, "integer token ids"),
        (lambda r, m: r.copy_from(nn.RNN(3, 5)), ValueError, "expected nn.RNN"),
        (
            lambda r, m: masked_sequence_nll(
                torch.zeros(1, 2, 3), torch.zeros(1, 2).long(), torch.zeros(1, 2, dtype=torch.bool)
            ),
            ValueError,
            "at least one real token",
        ),
        (
            lambda r, m: masked_sequence_nll(
                torch.zeros(1, 2, 3), torch.zeros(1, 3).long(), torch.ones(1, 2, dtype=torch.bool)
            ),
            ValueError,
            r"targets and mask of shape \(1, 2\)",
        ),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(call, error, message):
    with pytest.raises(error, match=message):
        call(ElmanRNN(3, 4), RNNLM(9, 3, 4))


# ---- sentences: batches, evaluation, training, generation ---------------------------------------


def test_sentence_batch_shifts_by_one_and_marks_real_tokens():
    from seqmodels.rnn import sentence_batch

    b = sentence_batch([[5, 6, 7], [8]])
    assert b.inputs.tolist() == [[0, 5, 6, 7], [0, 8, 1, 1]]
    assert b.targets[0].tolist() == [5, 6, 7, 1] and b.targets[1, :2].tolist() == [8, 1]
    assert b.mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert b.lengths.tolist() == [4, 2]
    with pytest.raises(ValueError, match="at least one sentence"):
        sentence_batch([])


def test_sentence_nll_is_the_sum_over_sentences_read_alone():
    """Batching with padding changes nothing: each sentence scored alone gives the same total."""
    from seqmodels.rnn import sentence_batch, sentence_nll

    torch.manual_seed(0)
    model = RNNLM(12, 5, 7, core="torch").double()
    sentences = [[3, 4, 5, 6, 7], [8], [9, 10, 3], []]
    total, n = sentence_nll(model, sentences, batch_size=3)
    assert n == sum(len(s) + 1 for s in sentences)
    alone = 0.0
    for s in sentences:
        b = sentence_batch([s])
        logits, _ = model(b.inputs)
        alone += F.cross_entropy(logits[0], b.targets[0], reduction="sum").item()
    assert total == pytest.approx(alone, rel=1e-12)


def test_training_on_sentences_lowers_the_held_out_loss():
    from seqmodels.rnn import train_sentence_lm

    g = torch.Generator().manual_seed(0)
    sentences = [[3, 4, 5, 6]] * 20 + [[7, 8, 9]] * 20
    torch.manual_seed(0)
    model = RNNLM(10, 8, 16, core="torch")
    history = train_sentence_lm(
        model,
        sentences,
        sentences[::7],
        steps=60,
        batch_size=8,
        lr=1e-2,
        generator=g,
        eval_every=30,
    )
    assert history.eval_steps == [30, 60] and len(history.step_loss) == 60
    assert history.eval_loss[-1] < 0.5 * history.step_loss[0]


def test_training_without_held_out_sentences_takes_the_same_steps():
    from seqmodels.rnn import train_sentence_lm

    sentences = [[3, 4, 5, 6]] * 20 + [[7, 8, 9]] * 20
    runs = []
    for valid in (sentences[::7], None):
        torch.manual_seed(0)
        model = RNNLM(10, 8, 16, core="torch")
        g = torch.Generator().manual_seed(0)
        history = train_sentence_lm(
            model, sentences, valid, steps=20, batch_size=8, lr=1e-2, generator=g, eval_every=10
        )
        runs.append((history, model.state_dict()))
    (with_valid, weights), (without, same_weights) = runs
    assert with_valid.eval_steps == [10, 20] and without.eval_steps == without.eval_loss == []
    assert without.step_loss == with_valid.step_loss
    for name, value in weights.items():
        assert torch.equal(value, same_weights[name])


def test_generation_carries_the_state_and_equals_rereading_the_prefix():
    from seqmodels.rnn import generate, time_per_token

    torch.manual_seed(0)
    model = RNNLM(9, 4, 6, core="torch").double()
    a = generate(model, torch.Generator().manual_seed(3), prefix=[4, 5], max_len=12)
    b = generate(model, torch.Generator().manual_seed(3), prefix=[4, 5], max_len=12)
    assert a == b and len(a) <= 12 and all(0 <= t < 9 and t != 1 for t in a)
    # the state after reading step by step is the state after reading everything at once
    tokens = torch.tensor([[0, 4, 5, 6]])
    _, h_all = model(tokens)
    _, h = model(tokens[:, :1])
    for t in range(1, 4):
        _, h = model(tokens[:, t : t + 1], h0=h)
    torch.testing.assert_close(h, h_all)
    seconds = time_per_token(model, [1, 8], reread=True, repeats=1)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)


def test_training_records_gradient_norms_before_clipping_and_takes_sgd():
    from seqmodels.rnn import train_sentence_lm

    sentences = [[3, 4, 5, 6]] * 20 + [[7, 8, 9]] * 20
    runs = {}
    for clip in (None, 1e-3):
        torch.manual_seed(0)
        model = RNNLM(10, 8, 16, core="torch")
        runs[clip] = train_sentence_lm(
            model,
            sentences,
            sentences[:4],
            steps=5,
            batch_size=8,
            lr=0.5,
            clip=clip,
            optimizer="sgd",
            generator=torch.Generator().manual_seed(1),
        )
    # the first step's norm is the same (measured before clipping); later steps differ
    assert runs[None].grad_norms[0] == pytest.approx(runs[1e-3].grad_norms[0])
    assert runs[None].grad_norms[0] > 1e-3 and len(runs[None].grad_norms) == 5
    assert runs[None].step_loss[1] != pytest.approx(runs[1e-3].step_loss[1])
    with pytest.raises(ValueError, match="optimizer"):
        train_sentence_lm(
            model, sentences, sentences, steps=1, optimizer="rmsprop", generator=torch.Generator()
        )


def test_distributions_at_a_position_are_the_model_s_next_token_probabilities():
    from seqmodels.rnn import distributions_at

    torch.manual_seed(0)
    model = RNNLM(12, 5, 7, core="torch").double()
    sentences = [[3, 4, 5], [6, 7, 8, 9]]
    probs = distributions_at(model, sentences, 2)
    for i, s in enumerate(sentences):
        logits, _ = model(torch.tensor([[0, *s[:2]]]))
        torch.testing.assert_close(probs[i], logits[0, -1].softmax(-1))
    with pytest.raises(ValueError, match="position"):
        distributions_at(model, sentences, 4)
