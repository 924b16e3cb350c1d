"""`seqmodels.model_cache.trained`: a run with the same content is trained once, and everything after
a restored run goes on exactly as after a real one (parameters, result, every generator)."""

import random

import pytest
import torch
from torch import nn

from seqmodels import model_cache
from seqmodels.model_cache import ENV, run_key, trained
from seqmodels.seeding import seed_everything

CALLS = []


def fit(model: nn.Module, data: list, steps: int, generator: torch.Generator) -> list[float]:
    """A small training run that uses every generator a real one may use."""
    CALLS.append(steps)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        i = torch.randint(len(data), (4,), generator=generator)
        x = torch.tensor([data[j][0] for j in i], dtype=torch.float32)
        y = torch.tensor([data[j][1] for j in i], dtype=torch.float32)
        noise = 0.01 * torch.randn(4, 1)  # the global generator
        loss = ((model(x + noise).squeeze(-1) - y) ** 2).mean() + 0 * random.random()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


DATA = [([float(i), float(i % 3)], float(2 * i)) for i in range(20)]


def run(steps=5, data=DATA, seed=0):
    """A fresh model and run; then what comes after it (draws from every generator)."""
    seed_everything(seed)
    model = nn.Linear(2, 1)
    g = torch.Generator().manual_seed(1)
    losses = trained(model, fit, data, steps, generator=g)
    after = (torch.rand(3).tolist(), torch.rand(2, generator=g).tolist(), random.random())
    return model, losses, after


@pytest.fixture(autouse=True)
def forget():
    """Every test starts with nothing remembered in this process (`model_cache._memory`)."""
    model_cache._memory.clear()
    yield
    model_cache._memory.clear()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path))
    CALLS.clear()
    return tmp_path


@pytest.mark.parametrize("remembered", [True, False], ids=["in memory", "from the folder"])
def test_a_second_identical_run_is_restored_exactly(cache, remembered):
    model, losses, after = run()
    if not remembered:
        model_cache._memory.clear()  # another process: only the folder has it
    again, losses_again, after_again = run()
    assert CALLS == [5], "the second run trained again"
    torch.testing.assert_close(again.state_dict(), model.state_dict(), rtol=0, atol=0)
    assert losses_again == losses
    assert after_again == after, "a generator was left where the real run did not leave it"
    assert len(list(cache.glob("*.pt"))) == 1


def test_the_restored_run_equals_an_uncached_one(cache, monkeypatch):
    run()
    cached = run()
    monkeypatch.delenv(ENV)
    fresh = run()
    torch.testing.assert_close(cached[0].state_dict(), fresh[0].state_dict(), rtol=0, atol=0)
    assert cached[1:] == fresh[1:]


@pytest.mark.parametrize(
    "change",
    [
        {"steps": 6},
        {"seed": 1},  # another initialisation and other global generator states
        {"data": DATA[:-1] + [([19.0, 1.0], 39.0)]},
    ],
    ids=["steps", "seed", "data"],
)
def test_any_change_of_content_trains_again(cache, change):
    run()
    run(**change)
    assert len(CALLS) == 2


def test_a_change_of_the_library_code_it_reaches_changes_the_key(monkeypatch):
    seed_everything(0)
    model = nn.Linear(2, 1)
    from seqmodels.train import train_lm

    before = run_key(model, train_lm, (), {})
    real = model_cache.source_digest

    def edited(modules, digest=None):
        digest = real(modules, digest)
        digest.update(b"an edit")
        return digest

    monkeypatch.setattr(model_cache, "source_digest", edited)
    assert run_key(model, train_lm, (), {}) != before


def test_without_a_cache_folder_nothing_is_written_and_a_run_is_remembered(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    CALLS.clear()
    first = run()
    second = run()  # a downloaded chapter's next page repeats the call: restored, not retrained
    assert CALLS == [5]
    torch.testing.assert_close(second[0].state_dict(), first[0].state_dict(), rtol=0, atol=0)
    assert second[1:] == first[1:]
    assert not list(tmp_path.rglob("*"))


def test_a_remembered_run_is_a_copy_that_later_training_does_not_change(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    CALLS.clear()
    model, losses, _ = run()
    with torch.no_grad():
        model.weight.add_(1.0)  # the page goes on to fine-tune the model it got
    losses.append(-1.0)
    again, losses_again, _ = run()
    assert CALLS == [5]
    assert losses_again == losses[:-1]
    assert not torch.equal(again.weight, model.weight)


def test_memory_keeps_the_last_runs_only(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(model_cache, "REMEMBERED", 2)
    CALLS.clear()
    for steps in (1, 2, 3):
        run(steps=steps)
    assert len(model_cache._memory) == 2
    run(steps=1)  # forgotten: trained again
    run(steps=3)  # remembered
    assert CALLS == [1, 2, 3, 1]


def test_an_argument_whose_content_cannot_be_read_is_refused(cache):
    class Opaque:
        pass

    with pytest.raises(TypeError, match=r"args\[0\] of type Opaque: pass tensors"):
        trained(nn.Linear(2, 1), fit, Opaque(), 1)


def test_models_that_differ_only_in_a_submodules_class_have_different_keys():
    """Same outer class, same parameter names and values, another class inside (an RNN LM over
    `torch.nn.GRU` or over the library's own GRU): another model, so another run."""

    class Outer(nn.Module):
        def __init__(self, inner: nn.Module):
            super().__init__()
            self.inner = inner

    class MyLinear(nn.Linear):
        pass

    seed_everything(0)
    plain = Outer(nn.Linear(2, 1))
    mine = Outer(MyLinear(2, 1))
    mine.load_state_dict(plain.state_dict())
    assert run_key(plain, fit, (), {}) != run_key(mine, fit, (), {})
