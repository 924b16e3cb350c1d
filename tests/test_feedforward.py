"""The feedforward LM: the equation, gradients against finite differences, and that training helps."""

import pytest
import torch
import torch.nn.functional as F

from seqmodels.data import context_windows
from seqmodels.feedforward import FeedForwardLM
from seqmodels.seeding import seed_everything
from seqmodels.synthetic import AgreementLanguage
from seqmodels.train import evaluate_nll, target_log_probs, train_lm


def test_forward_implements_the_bengio_equation():
    torch.manual_seed(0)
    model = FeedForwardLM(vocab_size=11, context_size=3, embed_dim=4, hidden_dim=5, direct=True)
    with torch.no_grad():
        model.W.normal_()
    ctx = torch.tensor([[1, 2, 3], [0, 0, 10]])
    x = torch.cat(
        [model.C[ctx[:, i]] for i in range(3)], dim=1
    )  # [C(w_{t-3}); C(w_{t-2}); C(w_{t-1})]: oldest first
    expected = model.b + x @ model.W.T + torch.tanh(model.d + x @ model.H.T) @ model.U.T
    torch.testing.assert_close(model(ctx), expected)


def test_gradients_agree_with_finite_differences():
    torch.manual_seed(0)
    model = FeedForwardLM(
        vocab_size=7, context_size=2, embed_dim=3, hidden_dim=4, direct=True
    ).double()
    ctx, target = torch.tensor([[1, 2], [3, 3], [0, 6]]), torch.tensor([4, 1, 2])
    params = tuple(model.parameters())

    def loss(*values):
        named = dict(zip((n for n, _ in model.named_parameters()), values, strict=True))
        logits = torch.func.functional_call(model, named, (ctx,))
        return F.cross_entropy(logits, target)

    assert torch.autograd.gradcheck(
        loss, tuple(p.detach().clone().requires_grad_() for p in params)
    )


def test_a_seeded_short_training_run_lowers_held_out_loss():
    lang = AgreementLanguage(distance=1)
    g = seed_everything(0)
    train = context_windows(lang.sample(2_000, g), 3)
    valid = context_windows(lang.sample(300, g), 3)
    model = FeedForwardLM(len(lang.vocab), 3, embed_dim=8, hidden_dim=16)
    before = evaluate_nll(model, *valid)[0] / len(valid[1])
    history = train_lm(
        model,
        train,
        valid,
        steps=150,
        batch_size=64,
        lr=1e-2,
        generator=g,
        eval_every=50,
        progress=False,
    )
    after = history.eval_loss[-1]
    assert after < before - 0.5
    assert (
        after < lang.ngram_floor(4) + 0.15
    )  # window 3 covers the subject at d = 1: near the bound
    assert history.eval_steps == [50, 100, 150] and len(history.step_loss) == 150


def test_training_is_reproducible_with_the_same_seed():
    lang = AgreementLanguage(distance=0)
    data = context_windows(lang.sample(200, seed_everything(1)), 2)

    def run():
        model = FeedForwardLM(len(lang.vocab), 2, 4, 4)
        torch.manual_seed(5)
        for p in model.parameters():
            torch.nn.init.normal_(p, std=0.1)
        return train_lm(
            model, data, data, steps=20, batch_size=16, generator=seed_everything(3), progress=False
        )

    assert run().step_loss == run().step_loss


@pytest.mark.parametrize(
    ("contexts", "error", "message"),
    [
        (torch.tensor([1, 2, 3]), ValueError, r"shape \(batch, 3\), got \(3,\)"),
        (torch.tensor([[1, 2]]), ValueError, r"shape \(batch, 3\), got \(1, 2\)"),
        (torch.tensor([[1.0, 2.0, 3.0]]), TypeError, "integer token ids"),
        (torch.tensor([[1, 2, 11]]), IndexError, "token id 11 is outside the vocabulary"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(contexts, error, message):
    model = FeedForwardLM(vocab_size=11, context_size=3)
    with pytest.raises(error, match=message):
        model(contexts)


def test_bad_hyperparameters_are_refused():
    with pytest.raises(ValueError, match="context_size to be a positive integer"):
        FeedForwardLM(10, 0)
    with pytest.raises(ValueError, match="steps >= 1"):
        train_lm(
            FeedForwardLM(10, 1),
            (torch.zeros(1, 1).long(), torch.zeros(1).long()),
            (torch.zeros(1, 1).long(), torch.zeros(1).long()),
            steps=0,
            generator=torch.Generator(),
        )


def test_target_log_probs_agree_with_torch_cross_entropy():
    torch.manual_seed(0)
    model = FeedForwardLM(vocab_size=9, context_size=2, embed_dim=3, hidden_dim=5)
    inputs, targets = torch.randint(9, (50, 2)), torch.randint(9, (50,))
    log_probs = target_log_probs(model, inputs, targets, batch_size=7)  # several batches
    expected = -F.cross_entropy(model(inputs), targets, reduction="none").detach().double()
    torch.testing.assert_close(log_probs, expected)
    total, n = evaluate_nll(model, inputs, targets)
    assert n == 50 and total == pytest.approx(-expected.sum().item())
