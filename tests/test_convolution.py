"""The causal dilated convolutional LM: causal exactly, its receptive field measured, equal to
PyTorch's convolution padded on both sides and trimmed (the TCN "chomp") and to an unfolded matrix
product, its input errors, and training with Chapter 3's sentence-LM loop."""

import pytest
import torch
import torch.nn.functional as F

from seqmodels.convolution import ConvLM, receptive_field, reread_seconds
from seqmodels.rnn import distributions_at, sentence_nll, train_sentence_lm
from seqmodels.seeding import seed_everything
from seqmodels.synthetic import AgreementLanguage


def _model(seed: int = 0, **kwargs) -> ConvLM:
    torch.manual_seed(seed)
    return ConvLM(11, **{"channels": 6, "n_layers": 3, "kernel_size": 3, **kwargs}).double()


def test_receptive_field_formula():
    assert receptive_field(2, (1, 2, 4, 8)) == 16
    assert receptive_field(3, (1, 2, 4)) == 15
    assert receptive_field(5, ()) == 1
    assert ConvLM(5, channels=4, n_layers=3, kernel_size=2).receptive_field == 8
    assert ConvLM(5, channels=4, n_layers=4, kernel_size=2).receptive_field == 16


def test_causal_exactly():
    model = _model()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 11, (2, 20), generator=g)
    base, _ = model(tokens)
    for t in (0, 7, 19):
        changed = tokens.clone()
        changed[:, t] = (changed[:, t] + 1) % 11
        out, _ = model(changed)
        assert torch.equal(out[:, :t], base[:, :t])  # bit for bit: nothing before t moves
        assert not torch.equal(out[:, t], base[:, t])


@pytest.mark.parametrize(("n_layers", "kernel_size"), [(3, 2), (4, 2), (3, 3), (2, 4)])
def test_receptive_field_is_the_measured_dependence(n_layers, kernel_size):
    model = _model(n_layers=n_layers, kernel_size=kernel_size)
    R, T = model.receptive_field, 40
    # 16 sentences: a ReLU that is off for one sentence can cut a path, not for all of them
    tokens = torch.randint(0, 11, (16, T), generator=torch.Generator().manual_seed(2))
    x = model.embedding(tokens).detach().requires_grad_(True)
    h = x.transpose(1, 2)  # the same forward from the embeddings, to differentiate by them
    for conv, dilation in zip(model.convs, model.dilations, strict=True):
        h = h + torch.relu(conv(F.pad(h, ((kernel_size - 1) * dilation, 0))))
    out = model.output(h.transpose(1, 2))
    assert torch.allclose(out, model(tokens)[0])
    for t in (T - 1, R - 1, R + 3):
        (grad,) = torch.autograd.grad(out[:, t].square().sum(), x, retain_graph=True)
        reached = (grad.abs().sum((0, 2)) > 0).nonzero().flatten().tolist()
        assert reached == list(range(max(0, t - R + 1), t + 1))


def _chomp_oracle(model: ConvLM, tokens: torch.Tensor) -> torch.Tensor:
    """PyTorch's F.conv1d padded on both sides, its last outputs cut off (Bai et al.'s TCN)."""
    h = model.embedding(tokens).transpose(1, 2)
    for conv, dilation in zip(model.convs, model.dilations, strict=True):
        pad = (model.kernel_size - 1) * dilation
        y = F.conv1d(h, conv.weight, conv.bias, padding=pad, dilation=dilation)
        h = h + torch.relu(y[..., : h.shape[-1]])
    return model.output(h.transpose(1, 2))


def _unfold_oracle(model: ConvLM, tokens: torch.Tensor) -> torch.Tensor:
    """Each layer as one matrix product with the unfolded window of every position."""
    h = model.embedding(tokens)  # (batch, T, channels)
    for conv, dilation in zip(model.convs, model.dilations, strict=True):
        k = model.kernel_size
        padded = torch.cat([h.new_zeros(h.shape[0], (k - 1) * dilation, h.shape[2]), h], 1)
        windows = padded.unfold(1, (k - 1) * dilation + 1, 1)[..., ::dilation]  # (B, T, C, k)
        h = h + torch.relu(torch.einsum("btck,ock->bto", windows, conv.weight) + conv.bias)
    return model.output(h)


def test_equals_the_oracles():
    for kwargs in ({}, {"n_layers": 4, "kernel_size": 2}, {"n_layers": 1, "kernel_size": 5}):
        model = _model(3, **kwargs)
        tokens = torch.randint(0, 11, (3, 25), generator=torch.Generator().manual_seed(4))
        with torch.no_grad():
            logits, state = model(tokens)
            assert state is None and logits.shape == (3, 25, 11)
            assert (logits - _chomp_oracle(model, tokens)).abs().max() < 1e-12
            assert (logits - _unfold_oracle(model, tokens)).abs().max() < 1e-12


def test_bad_input_errors():
    model = ConvLM(7, channels=4, n_layers=2)
    with pytest.raises(ValueError, match="shape \\(batch, time\\)"):
        model(torch.zeros(5, dtype=torch.int64))
    with pytest.raises(TypeError, match="integer tokens"):
        model(torch.zeros(1, 5))
    with pytest.raises(IndexError, match="0 .. 6"):
        model(torch.tensor([[0, 7]]))
    with pytest.raises(ValueError, match="no state"):
        model(torch.zeros(1, 3, dtype=torch.int64), h0=torch.zeros(1, 4))
    for bad in ({"channels": 0}, {"n_layers": -1}, {"kernel_size": 1.5}, {"vocab_size": 0}):
        with pytest.raises(ValueError, match="positive integer"):
            ConvLM(**{"vocab_size": 7, **bad})
    with pytest.raises(ValueError, match="dilation"):
        receptive_field(2, (1, 0))


def test_trains_with_the_sentence_loop():
    lang = AgreementLanguage(distance=3)
    g = seed_everything(103)
    train, test = lang.sample(2_000, g), lang.sample(200, g)
    seed_everything(7)
    model = ConvLM(len(lang.vocab), channels=16, n_layers=3)
    before, n = sentence_nll(model, test)
    history = train_sentence_lm(
        model, train, test, steps=60, batch_size=32, lr=1e-2, generator=seed_everything(8),
        eval_every=60,
    )  # fmt: skip
    after, _ = sentence_nll(model, test)
    assert history.step_loss[-1] < history.step_loss[0] and after < 0.8 * before
    assert distributions_at(model, test, lang.verb_position).shape == (200, len(lang.vocab))
    assert n == sum(len(s) + 1 for s in test)


def test_generation_reads_only_the_receptive_field():
    model = _model(5, n_layers=3, kernel_size=2)
    tokens = torch.randint(0, 11, (2, 30), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        full = model(tokens)[0][:, -1]
        window = model(tokens[:, -model.receptive_field :])[0][:, -1]
    assert (full - window).abs().max() < 1e-12


def test_reread_seconds():
    model = _model()
    seconds = reread_seconds(model, [4, 40], window=8, repeats=2)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    with pytest.raises(ValueError, match="window"):
        reread_seconds(model, [4], window=0)
    with pytest.raises(ValueError, match="length"):
        reread_seconds(model, [0])
