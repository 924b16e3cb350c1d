"""seqmodels.seq2seq: teacher forcing, the three uses of the context, attention, greedy decoding.

Oracles: torch's cross-entropy with ignore_index, nn.GRU run on each unpadded sequence, step-by-step
decoding against the whole-sequence pass, and greedy outputs against the argmax of the teacher-forced
pass over those same outputs."""

import pytest
import torch
import torch.nn.functional as F

from seqmodels.rnn import sentence_batch
from seqmodels.seq2seq import (
    CONTEXT_USES,
    Seq2Seq,
    errors_by_position,
    greedy_decode,
    pair_batch,
    pair_nll,
    train_seq2seq,
    translate,
)
from seqmodels.synthetic import ReversalTask

PAIRS = [([3, 4, 5], [6, 7]), ([5], [3, 4, 5, 6]), ([7, 7, 3, 4, 5], [])]
VARIANTS = [
    dict(context=("init",)),
    dict(context=("input",)),
    dict(context=("output",)),
    dict(context=CONTEXT_USES),
    dict(attention="dot"),
    dict(attention="additive"),
]


def _model(**options):
    torch.manual_seed(0)
    return Seq2Seq(9, 9, embed_dim=5, hidden_dim=6, **options).double()


def test_pair_batch_shifts_targets_by_one():
    batch = pair_batch(PAIRS)
    assert batch.tgt_in.tolist()[1] == [0, 3, 4, 5, 6]
    assert batch.tgt_out.tolist()[1] == [3, 4, 5, 6, 1]
    assert batch.tgt_in[2, 0] == 0 and batch.tgt_out[2, 0] == 1  # empty target: just </s>
    assert batch.tgt_mask.sum(1).tolist() == [3, 5, 1]
    assert batch.src_lengths.tolist() == [3, 1, 5]
    assert batch.src_mask.sum(1).tolist() == [3, 1, 5]


def test_pair_batch_is_the_language_model_batch_of_the_targets_beside_padded_sources():
    g = torch.Generator().manual_seed(0)
    pairs = [
        (torch.randint(2, 9, (int(n),), generator=g).tolist(), list(range(2, 2 + int(m))))
        for n, m in zip(
            torch.randint(1, 7, (20,), generator=g),
            torch.randint(0, 6, (20,), generator=g),
            strict=True,
        )
    ]
    pairs.append((torch.tensor([3, 4]), torch.tensor([5])))  # tensors of ids too
    batch = pair_batch(pairs)
    lm = sentence_batch([list(t) for _, t in pairs])  # the language model's teacher forcing
    for got, expected in [
        (batch.tgt_in, lm.inputs),
        (batch.tgt_out, lm.targets),
        (batch.tgt_mask, lm.mask),
    ]:
        assert got.dtype == expected.dtype and torch.equal(got, expected)
    width = max(len(s) for s, _ in pairs)
    for row, (source, _) in zip(batch.src.tolist(), pairs, strict=True):
        assert row == list(map(int, source)) + [1] * (width - len(source))
    assert batch.src.dtype == torch.int64 and batch.src_lengths.dtype == torch.int64


@pytest.mark.parametrize("options", VARIANTS)
def test_loss_is_the_mean_nll_of_real_target_tokens(options):
    model = _model(**options)
    batch = pair_batch(PAIRS)
    logits, _ = model(batch)
    targets = batch.tgt_out.masked_fill(~batch.tgt_mask, -100)
    expected = F.cross_entropy(logits.reshape(-1, 9), targets.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(model.loss(batch), expected)
    total, n = pair_nll(model, PAIRS)
    assert n == 9
    torch.testing.assert_close(torch.tensor(total / n, dtype=torch.float64), expected)


@pytest.mark.parametrize("options", VARIANTS)
def test_padding_never_reaches_the_outputs(options):
    model = _model(**options)
    alone = [model(pair_batch([p]))[0][0] for p in PAIRS]
    together, _ = model(pair_batch(PAIRS))
    for i, logits in enumerate(alone):
        torch.testing.assert_close(together[i, : len(logits)], logits)


def test_encoder_equals_nn_gru_on_each_unpadded_source():
    model = _model()
    batch = pair_batch(PAIRS)
    states, last = model.encode(batch.src, batch.src_lengths)
    for i, (src, _) in enumerate(PAIRS):
        out, h = model.encoder.rnn(model.encoder.embedding(torch.tensor([src])))
        torch.testing.assert_close(states[i, : len(src)], out[0])
        torch.testing.assert_close(last[i], h[0, 0])
        assert (states[i, len(src) :] == 0).all()


@pytest.mark.parametrize("options", VARIANTS)
def test_one_step_at_a_time_equals_the_whole_sequence(options):
    model = _model(**options)
    batch = pair_batch(PAIRS)
    whole, weights = model(batch)
    h, memory = model.start(batch.src, batch.src_lengths, batch.src_mask)
    for t in range(batch.tgt_in.shape[1]):
        logits, h, w = model.decode_steps(batch.tgt_in[:, t : t + 1], h, memory)
        torch.testing.assert_close(logits[:, 0], whole[:, t])
        if weights is not None:
            torch.testing.assert_close(w[:, 0], weights[:, t])


@pytest.mark.parametrize("use", CONTEXT_USES)
def test_each_use_of_the_context_carries_the_source(use):
    model = _model(context=(use,))
    a, _ = model(pair_batch([([3, 4, 5], [6, 7])]))
    b, _ = model(pair_batch([([5, 4, 3], [6, 7])]))
    assert not torch.allclose(a, b)


@pytest.mark.parametrize("options", VARIANTS)
def test_greedy_outputs_are_the_argmax_of_their_own_teacher_forced_pass(options):
    model = _model(**options)
    sources = [s for s, _ in PAIRS]
    decoded = translate(model, sources, max_len=6)
    for source, output in zip(sources, decoded.outputs, strict=True):
        logits, _ = model(pair_batch([(source, output)]))
        chosen = logits[0].argmax(-1).tolist()
        finished = len(output) < 6
        assert chosen[: len(output)] == output
        if finished:
            assert chosen[len(output)] == 1  # then </s>
    if options.get("attention"):
        for source, output, w in zip(sources, decoded.outputs, decoded.weights, strict=True):
            assert w.shape == (min(len(output) + 1, 6), len(source))
            torch.testing.assert_close(w.sum(-1), torch.ones(len(w), dtype=w.dtype))


def test_greedy_decode_stops_each_sequence_at_its_own_end():
    # a fixed table: next token = table[previous]; 1 is </s>
    table = torch.tensor([3, 1, 1, 4, 5, 1, 6, 6])

    def step(prev, state):
        logits = F.one_hot(table[prev], 8).double()
        if state == "tie":
            logits = torch.zeros(len(prev), 8)  # ties go to the lowest id: <s> = 0
        return logits, state

    assert greedy_decode(step, None, 2, max_len=10) == [[3, 4, 5], [3, 4, 5]]
    table[0] = 6  # 6 → 6 → ...: never ends
    assert greedy_decode(step, None, 1, max_len=4) == [[6, 6, 6, 6]]
    table[0] = 1
    assert greedy_decode(step, None, 3, max_len=4) == [[], [], []]
    assert greedy_decode(step, "tie", 1, max_len=2) == [[0, 0]]
    with pytest.raises(ValueError, match="batch_size >= 1"):
        greedy_decode(step, None, 0)


def test_errors_by_position():
    rates, counts = errors_by_position([[1, 2, 3], [1, 9]], [[1, 2, 3], [1, 2, 3, 4]])
    assert counts.tolist() == [2, 2, 2, 1]
    assert rates.tolist() == [0.0, 0.5, 0.5, 1.0]


def test_training_learns_short_reversal():
    task = ReversalTask(n_symbols=4, noise=0.2)
    g = torch.Generator().manual_seed(0)
    pairs, valid = task.sample(2000, 1, 3, g), task.sample(100, 1, 3, g)
    torch.manual_seed(0)
    model = Seq2Seq(len(task.vocab), len(task.vocab), 8, 32, attention="dot")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: one thread is faster
    try:
        history = train_seq2seq(model, pairs, valid, steps=200, generator=g, eval_every=100)
    finally:
        torch.set_num_threads(threads)
    assert history.eval_loss[-1] < 0.5 * history.eval_loss[0]
    outputs = translate(model, [s for s, _ in valid]).outputs
    exact = sum(o == t for o, (_, t) in zip(outputs, valid, strict=True)) / len(valid)
    assert exact > 0.8


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="non-empty subset"):
        Seq2Seq(5, 5, context=("start",))
    with pytest.raises(ValueError, match="attention to be one of"):
        Seq2Seq(5, 5, attention="cosine")
    with pytest.raises(ValueError, match="at least one source"):
        pair_batch([])
