"""The autodiff engine: every op's gradient against torch.autograd and central differences, the
feedforward LM's loss and SGD steps against torch, and why float32 gradient checks mislead."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from seqmodels.autodiff import (
    Node,
    concat,
    embedding,
    feedforward_loss_of,
    feedforward_nll,
    nll,
    nodes_from_module,
    numerical_gradient,
    numerical_partials,
    relative_error,
    sample_entries,
    sgd_feedforward,
    sgd_step,
)
from seqmodels.feedforward import FeedForwardLM
from seqmodels.sgd import batch_indices, sgd_losses


def _engine_and_torch_grads(build_engine, build_torch, *values, upstream=None):
    """Run the same function on the engine and with torch.autograd; return (outputs, grads) of both."""
    nodes = [Node(v) for v in values]
    out = build_engine(*nodes)
    leaves = [v.detach().clone().double().requires_grad_() for v in values]
    ref = build_torch(*leaves)
    if upstream is None:
        upstream = torch.randn(
            ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9)
        )
    out.backward(upstream)
    ref.backward(upstream)
    return (out.value, ref.detach()), [
        (n.grad, leaf.grad) for n, leaf in zip(nodes, leaves, strict=True)
    ]


def _check(build_engine, build_torch, *values):
    (value, ref_value), grads = _engine_and_torch_grads(build_engine, build_torch, *values)
    torch.testing.assert_close(value, ref_value)
    for engine_grad, torch_grad in grads:
        torch.testing.assert_close(engine_grad, torch_grad)
    # and against finite differences of the torch function (float64): L = <upstream, f(values)>
    upstream = torch.randn(
        ref_value.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9)
    )
    for i, (engine_grad, _) in enumerate(grads):

        def f(x, i=i):
            args = [v.double() for v in values]
            args[i] = x
            return (build_torch(*args) * upstream).sum()

        assert relative_error(engine_grad, numerical_gradient(f, values[i])) < 1e-5


shapes = st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 4))


@settings(max_examples=15, deadline=None)
@given(shapes, st.integers(0, 2**16))
def test_matmul_add_broadcast_and_tanh(shape, seed):
    batch, k, m = shape
    g = torch.Generator().manual_seed(seed)
    a, w, bias = (
        torch.randn(s, generator=g, dtype=torch.float64) for s in [(batch, k), (m, k), (m,)]
    )
    _check(
        lambda a, w, b: (a @ w.T + b).tanh(), lambda a, w, b: torch.tanh(a @ w.T + b), a, w, bias
    )


@settings(max_examples=15, deadline=None)
@given(shapes, st.integers(0, 2**16))
def test_log_softmax_sum_and_mean(shape, seed):
    batch, _, v = shape
    z = (
        torch.randn(
            batch, v + 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
        )
        * 3
    )
    _check(lambda z: z.log_softmax(), lambda z: torch.log_softmax(z, -1), z)
    _check(lambda z: z.log_softmax().sum(), lambda z: torch.log_softmax(z, -1).sum(), z)
    _check(lambda z: z.tanh().mean(), lambda z: torch.tanh(z).mean(), z)


def test_log_softmax_does_not_overflow():
    z = Node([[1000.0, 0.0, -1000.0]])
    y = z.log_softmax()
    assert torch.isfinite(y.value).all()
    y.sum().backward()
    torch.testing.assert_close(z.grad, torch.tensor([[-2.0, 1.0, 1.0]], dtype=torch.float64))


def test_embedding_with_repeated_ids_accumulates_rows():
    table = torch.randn(6, 3, dtype=torch.float64)
    ids = torch.tensor([[1, 4], [1, 1], [5, 0]])  # row 1 is used three times, rows 2 and 3 never
    _check(lambda t: embedding(t, ids), lambda t: t[ids], table)
    node = Node(table)
    embedding(node, ids).sum().backward()
    assert node.grad[1].tolist() == [3.0, 3.0, 3.0] and node.grad[2:4].abs().sum() == 0


def test_concat_along_features():
    a, b, c = (torch.randn(3, k, dtype=torch.float64) for k in (2, 1, 4))
    _check(lambda *n: concat(n), lambda *t: torch.cat(t, -1), a, b, c)


def test_nll_is_the_mean_cross_entropy():
    z = torch.randn(5, 7, dtype=torch.float64)
    targets = torch.tensor([0, 6, 6, 3, 2])
    _check(lambda z: nll(z.log_softmax(), targets), lambda z: F.cross_entropy(z, targets), z)


def test_a_node_used_twice_gets_both_gradients():
    x = torch.randn(2, 3, dtype=torch.float64)
    _check(lambda x: (x + x.tanh()).sum(), lambda x: (x + torch.tanh(x)).sum(), x)


def test_backward_twice_adds_the_gradient_twice_as_torch_does():
    x0 = torch.randn(2, 3, dtype=torch.float64)
    w0 = torch.randn(3, 4, dtype=torch.float64)
    x, w = Node(x0), Node(w0)
    loss = (x @ w).tanh().log_softmax().sum()
    loss.backward()
    loss.backward()
    xt, wt = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    torch_loss = torch.log_softmax(torch.tanh(xt @ wt), -1).sum()
    torch_loss.backward(retain_graph=True)
    torch_loss.backward()
    torch.testing.assert_close(x.grad, xt.grad)
    torch.testing.assert_close(w.grad, wt.grad)


def _ffn(direct=True, seed=0):
    torch.manual_seed(seed)
    model = FeedForwardLM(vocab_size=9, context_size=3, embed_dim=4, hidden_dim=5, direct=direct)
    model = model.double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)  # nonzero biases and direct weights, so every gradient is exercised
    contexts, targets = torch.randint(9, (12, 3)), torch.randint(9, (12,))
    return model, contexts, targets


@pytest.mark.parametrize("direct", [False, True])
def test_feedforward_lm_gradients_equal_autograd_and_finite_differences(direct):
    model, contexts, targets = _ffn(direct)
    params = nodes_from_module(model)
    loss = feedforward_nll(params, contexts, targets)
    loss.backward()
    ref = F.cross_entropy(model(contexts), targets)
    ref.backward()
    torch.testing.assert_close(loss.value, ref.detach())
    for name, p in model.named_parameters():
        torch.testing.assert_close(params[name].grad, p.grad, msg=name)

        def f(x, name=name):
            values = {n: q.detach() for n, q in model.named_parameters()}
            values[name] = x
            return F.cross_entropy(torch.func.functional_call(model, values, (contexts,)), targets)

        assert relative_error(params[name].grad, numerical_gradient(f, p)) < 1e-7, name


def test_sgd_with_the_engine_follows_torch_step_for_step():
    model, contexts, targets = _ffn(direct=False, seed=1)
    params = nodes_from_module(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    engine_losses, torch_losses = [], []
    for _ in range(6):
        loss = feedforward_nll(params, contexts, targets)
        loss.backward()
        sgd_step(params.values(), lr=0.5)
        engine_losses.append(loss.value.item())
        optimizer.zero_grad()
        ref = F.cross_entropy(model(contexts), targets)
        ref.backward()
        optimizer.step()
        torch_losses.append(ref.item())
    torch.testing.assert_close(torch.tensor(engine_losses), torch.tensor(torch_losses))
    assert engine_losses[-1] < engine_losses[0] - 0.1  # the steps do train
    for name, p in model.named_parameters():
        torch.testing.assert_close(params[name].value, p.detach())


def test_float32_central_differences_mislead_and_float64_do_not():
    model, contexts, targets = _ffn(direct=False, seed=2)
    F.cross_entropy(model(contexts), targets).backward()
    analytic = model.H.grad

    def error(eps, dtype):
        def f(h):
            values = {n: q.detach().to(dtype) for n, q in model.named_parameters()}
            values["H"] = h
            return F.cross_entropy(torch.func.functional_call(model, values, (contexts,)), targets)

        return relative_error(analytic, numerical_gradient(f, model.H, eps, dtype))

    assert error(1e-6, torch.float64) < 1e-7
    assert error(1e-6, torch.float32) > 0.1  # pure rounding noise: a correct gradient "fails"
    assert error(1e-4, torch.float32) > 1e-2
    assert min(error(eps, torch.float32) for eps in (1e-2, 1e-3, 1e-4)) > 1e-4  # no eps rescues it


def test_relative_error_is_scale_free_and_zero_for_equal_gradients():
    a = torch.tensor([1.0, -2.0, 3.0])
    assert relative_error(a, a) == 0.0
    assert relative_error(a * 1e-8, (a + torch.tensor([0.0, 0.0, 0.3])) * 1e-8) == pytest.approx(
        0.3 / 3.3
    )
    assert relative_error(torch.zeros(3), torch.zeros(3)) == 0.0
    with pytest.raises(ValueError, match="same shape"):
        relative_error(a, a[:2])


def test_bad_input_is_refused_with_a_clear_message():
    with pytest.raises(
        ValueError, match=r"expected \(batch, k\) @ \(k, m\), got \(2, 3\) @ \(2, 3\)"
    ):
        Node(torch.zeros(2, 3)) @ Node(torch.zeros(2, 3))
    with pytest.raises(IndexError, match=r"ids must lie in 0 \.\. 3"):
        embedding(Node(torch.zeros(4, 2)), torch.tensor([4]))
    with pytest.raises(TypeError, match="integer ids"):
        embedding(Node(torch.zeros(4, 2)), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="needs a scalar"):
        Node(torch.zeros(2)).tanh().backward()
    with pytest.raises(ValueError, match=r"targets \(N,\)"):
        nll(Node(torch.zeros(3, 4)), torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="floating-point"):
        Node(torch.tensor([1, 2]), dtype=None)


def test_numerical_partials_are_the_gradient_at_the_chosen_entries():
    x = torch.randn(3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def f(t):
        return (t.sin() * t).sum()

    full = numerical_gradient(f, x)
    picked = numerical_partials(f, x, [0, 5, 11])
    torch.testing.assert_close(picked, full.reshape(-1)[[0, 5, 11]])
    torch.testing.assert_close(full, x.sin() + x * x.cos())  # d/dt (t sin t), by hand
    with pytest.raises(IndexError, match=r"0 \.\. 11"):
        numerical_partials(f, x, [12])
    with pytest.raises(ValueError, match="eps > 0"):
        numerical_partials(f, x, [0], eps=0.0)


def test_the_engines_sgd_loop_follows_torch_sgd_loss_for_loss():
    model, contexts, targets = _ffn(direct=False, seed=4)
    params = nodes_from_module(model)
    batches = batch_indices(len(targets), 5, 8, torch.Generator().manual_seed(0))
    engine = sgd_feedforward(params, contexts, targets, batches, lr=0.3)
    reference = sgd_losses(model, contexts, targets, batches, lr=0.3)
    torch.testing.assert_close(torch.tensor(engine), torch.tensor(reference), rtol=0, atol=1e-12)
    for name, p in model.named_parameters():
        torch.testing.assert_close(params[name].value, p.detach())


def test_loss_of_one_parameter_is_the_models_loss_in_the_requested_dtype():
    model, contexts, targets = _ffn(direct=True, seed=5)
    reference = F.cross_entropy(model(contexts), targets)
    for name, p in model.named_parameters():
        f = feedforward_loss_of(model, name, contexts, targets)
        torch.testing.assert_close(f(p.detach()), reference.detach())
    f32 = feedforward_loss_of(model, "H", contexts, targets, torch.float32)
    value = f32(model.H.detach().float())
    assert value.dtype == torch.float32
    assert abs(value.item() - reference.item()) < 1e-5
    with pytest.raises(KeyError, match="no parameter 'E'"):
        feedforward_loss_of(model, "E", contexts, targets)


def test_sampled_entries_are_distinct_and_nonzero():
    grad = torch.zeros(50, 4, dtype=torch.float64)
    grad[[3, 7, 9]] = 1.0  # 12 nonzero entries
    picked = sample_entries(grad, 8, torch.Generator().manual_seed(0))
    assert len(picked) == len(set(picked.tolist())) == 8
    assert (grad.reshape(-1)[picked] != 0).all()
    assert len(sample_entries(grad, 100, torch.Generator().manual_seed(0))) == 12
