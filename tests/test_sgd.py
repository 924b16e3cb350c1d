"""Plain SGD, theta <- theta - eta grad L: one step equals torch.optim.SGD's, a run is repeatable,
and a diverging run stops."""

import math

import pytest
import torch
import torch.nn.functional as F

from seqmodels.feedforward import FeedForwardLM
from seqmodels.sgd import batch_indices, sgd_losses, sgd_update_, train_sgd


def _data(seed=0, n=40, vocab=11):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab, (n, 2), generator=g), torch.randint(vocab, (n,), generator=g)


def _model(seed=0):
    torch.manual_seed(seed)
    return FeedForwardLM(vocab_size=11, context_size=2, embed_dim=3, hidden_dim=4)


def test_one_update_is_torchs_sgd_step_and_clears_the_gradient():
    contexts, targets = _data()
    ours, theirs = _model(), _model()
    for model in (ours, theirs):
        F.cross_entropy(model(contexts), targets).backward()
    expected = {n: p.detach() - 0.7 * p.grad for n, p in ours.named_parameters()}
    sgd_update_(ours.parameters(), lr=0.7)
    torch.optim.SGD(theirs.parameters(), lr=0.7).step()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(p.detach(), q.detach())
        torch.testing.assert_close(p.detach(), expected[name])
        assert p.grad is None


def test_training_is_repeatable_and_records_held_out_loss():
    train, valid = _data(0), _data(1, n=15)
    runs = [
        train_sgd(
            _model(),
            train,
            valid,
            steps=12,
            batch_size=8,
            lr=0.5,
            generator=torch.Generator().manual_seed(3),
            eval_every=5,
            device=torch.device("cpu"),
        )
        for _ in range(2)
    ]
    assert runs[0].step_loss == runs[1].step_loss and len(runs[0].step_loss) == 12
    assert runs[0].eval_steps == [5, 10, 12] and runs[0].tokens_seen == 96
    model = _model()
    batches = batch_indices(40, 8, 12, torch.Generator().manual_seed(3))
    assert sgd_losses(model, *train, batches, 0.5) == runs[0].step_loss  # the same draws


def _run(model, lr, steps=50):
    train = _data()
    return train_sgd(
        model,
        train,
        train,
        steps=steps,
        batch_size=8,
        lr=lr,
        generator=torch.Generator().manual_seed(0),
        eval_every=10,
        device=torch.device("cpu"),
    )


def test_a_diverging_run_stops_and_bad_arguments_are_refused():
    # a huge step blows the loss up; whether it reaches inf or stays a finite 1e30 depends on the
    # CPU's rounding, so the stop is checked on a loss that is certainly not finite
    blown_up = _run(_model(), lr=1e30, steps=20)
    assert not blown_up.step_loss[-1] < 1e6 * blown_up.step_loss[0]
    poisoned = _model()
    with torch.no_grad():
        next(poisoned.parameters()).fill_(math.nan)
    history = _run(poisoned, lr=0.1)
    assert math.isnan(history.step_loss[-1]) and len(history.step_loss) == 10
    train = _data()
    with pytest.raises(ValueError, match="positive learning rate"):
        train_sgd(
            _model(), train, train, steps=1, batch_size=1, lr=0.0, generator=torch.Generator()
        )
    with pytest.raises(ValueError, match="batch_size >= 1"):
        batch_indices(10, 0, 3, torch.Generator())
