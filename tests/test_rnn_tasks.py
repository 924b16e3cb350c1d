"""Sequence classification and labelling: padding changes nothing, the summaries are the states the
docstrings name, one-way labellers never read the future and two-way ones do, the scores count each
label once, training learns a task that needs memory, and the most-frequent-label baseline."""

import pytest
import torch
import torch.nn.functional as F

from seqmodels.rnn_tasks import (
    MostFrequentLabel,
    RecurrentEncoder,
    SequenceClassifier,
    SequenceLabeller,
    evaluate,
    labelled_batch,
    predict,
    train_labelled,
)
from seqmodels.seeding import seed_everything

SHAPES = [(1, False), (2, False), (1, True), (2, True)]  # layers, bidirectional


def _examples(n, vocab, generator, per_token=True):
    out = []
    for _ in range(n):
        length = int(torch.randint(1, 9, (1,), generator=generator))
        ids = torch.randint(vocab, (length,), generator=generator).tolist()
        out.append((ids, [i % 3 for i in ids] if per_token else ids[0] % 2))
    return out


def test_labelled_batch_pads_and_masks():
    batch = labelled_batch([([5, 6, 7], [0, 1, 2]), ([8], [1])], pad=1)
    assert batch.tokens.tolist() == [[5, 6, 7], [8, 1, 1]]
    assert batch.labels.tolist() == [[0, 1, 2], [1, 0, 0]]
    assert batch.mask.tolist() == [[True, True, True], [True, False, False]]
    assert batch.lengths.tolist() == [3, 1]
    assert labelled_batch([([5, 6], 1), ([7], 0)]).labels.tolist() == [1, 0]


@pytest.mark.parametrize(
    "examples, message",
    [
        ([], "at least one example"),
        ([([], 0)], "at least one token"),
        ([([3, 4], [0])], "one label per token"),
        ([([3, 4], 0), ([3], [1])], "one integer label"),
    ],
)
def test_labelled_batch_refuses_malformed_examples(examples, message):
    with pytest.raises(ValueError, match=message):
        labelled_batch(examples)


@pytest.mark.parametrize("layers, bidirectional", SHAPES)
def test_padding_changes_nothing(layers, bidirectional):
    g = seed_everything(0)
    encoder = RecurrentEncoder(20, 4, 5, layers=layers, bidirectional=bidirectional).double()
    examples = _examples(6, 20, g)
    batch = labelled_batch(examples)
    out, summary = encoder(batch.tokens, batch.lengths)
    assert out.shape == (6, batch.tokens.shape[1], encoder.width)
    for i, (ids, _) in enumerate(examples):
        alone, alone_summary = encoder(torch.tensor([ids]), torch.tensor([len(ids)]))
        torch.testing.assert_close(out[i, : len(ids)], alone[0])
        torch.testing.assert_close(summary[i], alone_summary[0])
        assert not out[i, len(ids) :].any()  # zero at padding


@pytest.mark.parametrize("layers", [1, 2])
def test_summary_is_the_last_forward_state_and_the_first_backward_state(layers):
    g = seed_everything(1)
    encoder = RecurrentEncoder(20, 4, 5, layers=layers, bidirectional=True).double()
    batch = labelled_batch(_examples(5, 20, g))
    out, summary = encoder(batch.tokens, batch.lengths)
    last = out[torch.arange(5), batch.lengths - 1, :5]
    torch.testing.assert_close(summary[:, :5], last)
    torch.testing.assert_close(summary[:, 5:], out[:, 0, 5:])


def test_mean_pooling_is_the_mean_of_the_real_states():
    g = seed_everything(2)
    model = SequenceClassifier(3, pooling="mean", vocab_size=20, embed_dim=4, hidden_dim=5).double()
    batch = labelled_batch(_examples(4, 20, g, per_token=False))
    out, _ = model.encoder(batch.tokens, batch.lengths)
    means = torch.stack([out[i, :n].mean(0) for i, n in enumerate(batch.lengths)])
    torch.testing.assert_close(model(batch.tokens, batch.lengths), model.output(means))
    with pytest.raises(ValueError, match="pooling"):
        SequenceClassifier(3, pooling="max", vocab_size=20, embed_dim=4, hidden_dim=5)


@pytest.mark.parametrize("layers, bidirectional", SHAPES)
def test_a_one_way_labeller_never_reads_the_future_and_a_two_way_one_does(layers, bidirectional):
    seed_everything(3)
    model = SequenceLabeller(
        4, vocab_size=20, embed_dim=4, hidden_dim=5, layers=layers, bidirectional=bidirectional
    ).double()
    embedded = model.encoder.embedding(torch.tensor([[3, 4, 5, 6, 7]])).detach().requires_grad_()
    out, _ = model.encoder.rnn(embedded)
    model.output(out)[0, 2].sum().backward()  # the logits at t = 2
    future = embedded.grad[0, 3:].abs().max()
    assert (future > 0) == bidirectional
    assert embedded.grad[0, :3].abs().max() > 0


def test_evaluate_counts_each_label_once_and_agrees_with_cross_entropy():
    g = seed_everything(4)
    model = SequenceLabeller(3, vocab_size=20, embed_dim=4, hidden_dim=5, bidirectional=True)
    examples = _examples(7, 20, g)
    scores = evaluate(model, examples, batch_size=3)
    logits = [model(torch.tensor([ids]), torch.tensor([len(ids)]))[0] for ids, _ in examples]
    labels = [torch.tensor(y) for _, y in examples]
    expected = F.cross_entropy(torch.cat(logits), torch.cat(labels), reduction="sum")
    assert scores.n == sum(len(ids) for ids, _ in examples)
    assert scores.nll == pytest.approx(expected.item(), rel=1e-5)
    guesses = predict(model, examples, batch_size=3)
    assert guesses == [x.argmax(-1).tolist() for x in logits]
    right = sum(
        int(a == b)
        for guess, (_, y) in zip(guesses, examples, strict=True)
        for a, b in zip(guess, y, strict=True)
    )
    assert scores.correct == right and scores.accuracy == right / scores.n


def test_a_classifier_learns_to_remember_the_first_token():
    # the label is the parity of the first token, read after up to seven more tokens
    g = seed_everything(5)
    train, test = _examples(2000, 12, g, per_token=False), _examples(300, 12, g, per_token=False)
    seed_everything(6)
    model = SequenceClassifier(2, vocab_size=12, embed_dim=8, hidden_dim=32)
    before = evaluate(model, test)
    history = train_labelled(
        model, train, steps=300, batch_size=32, lr=1e-2, generator=seed_everything(7)
    )
    after = evaluate(model, test)
    assert after.accuracy > 0.95 > before.accuracy
    assert len(history.step_loss) == 300 and history.tokens_seen > 300 * 32


def test_training_refuses_bad_settings():
    model = SequenceClassifier(2, vocab_size=12, embed_dim=8, hidden_dim=8)
    with pytest.raises(ValueError, match="steps"):
        train_labelled(model, [([1], 0)], steps=0, generator=torch.Generator())
    with pytest.raises(ValueError, match="training example"):
        train_labelled(model, [], steps=1, generator=torch.Generator())
    with pytest.raises(ValueError, match="hidden_dim"):
        RecurrentEncoder(12, 8, 0)
    with pytest.raises(IndexError, match="0 .. 11"):
        model(torch.tensor([[12]]), torch.tensor([1]))
    with pytest.raises(ValueError, match="lengths"):
        model(torch.tensor([[3, 4]]), torch.tensor([3]))


def test_most_frequent_label_baseline():
    baseline = MostFrequentLabel().fit([([1, 2, 2], [1, 0, 2]), ([2, 3], [2, 0]), ([1], [0])])
    # token 1: labels 1 and 0 tie, the smaller wins; token 2: 2 twice; 9 unseen: 0, most frequent
    assert baseline.predict([([1, 2, 3, 9], None)]) == [[0, 2, 0, 0]]
    with pytest.raises(ValueError, match="per-token"):
        MostFrequentLabel().fit([([1, 2], 0)])
