"""Train a model once per content: a later page, or a later build, loads what an identical run left.

Chapter 7 trains Chapter 6's encoder–decoder again as its baseline, with the same code, data, sizes
and seeds; a chapter split over several pages would retrain on every page what the others need.
`trained(model, train, *args, **kwargs)` runs ``train(model, *args, **kwargs)``, which trains `model`
in place, and stores what the run left: the model's parameters and buffers, ``train``'s return
value, and every random number generator the run may have advanced (torch's, Python's and NumPy's
global ones, and any ``torch.Generator`` among the arguments). A second call with the same content
restores all of it instead of training, so everything after it runs exactly as after a real run.

The key is the content, never a name:
- the source of every library module the model's class and ``train`` reach (`seqmodels.reach`);
- the model's class and every submodule's, and its parameters before training (so its
  initialisation seed counts);
- the arguments, by value (tensors by dtype, shape and bytes; lists, tuples, dicts, numbers,
  strings; generators by state);
- the global generators' states at the call.

The cache folder is the environment variable ``SEQMODELS_MODEL_CACHE`` (the book's build sets it
to ``_build/.model_cache``). Without it, nothing is written: a reader's notebook never reads or
leaves files it did not ask for. Within one process a run is also remembered in memory (the last
`REMEMBERED` runs), so a downloaded chapter, whose pages each repeat the training calls the
earlier pages made, trains each model once.
"""

from __future__ import annotations

import copy
import os
import pickle
import random
import sys
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seqmodels.reach import reached_modules, source_digest

ENV = "SEQMODELS_MODEL_CACHE"


def cache_dir() -> Path | None:
    """The cache folder, or None when caching is off."""
    value = os.environ.get(ENV, "").strip()
    return Path(value) if value else None


def _feed(digest, value: Any, path: str = "argument") -> None:
    """Update `digest` with `value`'s content; refuse a value whose content cannot be read."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, torch.Generator):
        digest.update(b"G")
        _feed(digest, value.get_state(), path)
    elif isinstance(value, nn.Module):
        # every submodule's class, not the outer one's alone: RNNLM(core="gru") and
        # RNNLM(core="gru-lecture") hold nn.GRU and seqmodels.gated.GRU under the same outer class
        for name, module in value.named_modules():
            digest.update(
                f"M{name}:{type(module).__module__}.{type(module).__qualname__};".encode()
            )
        for name, tensor in value.state_dict().items():
            digest.update(name.encode())
            _feed(digest, tensor, f"{path}.{name}")
    elif isinstance(value, (list, tuple)) and all(type(x) is int for x in value):
        digest.update(f"{type(value).__name__}i{len(value)}(".encode())  # token ids: one update
        digest.update(array("q", value).tobytes())
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__}{len(value)}(".encode())
        for i, item in enumerate(value):
            _feed(digest, item, f"{path}[{i}]")
        digest.update(b")")
    elif isinstance(value, dict):
        digest.update(f"D{len(value)}(".encode())
        for key in sorted(value, key=repr):
            digest.update(repr(key).encode())
            _feed(digest, value[key], f"{path}[{key!r}]")
        digest.update(b")")
    elif value is None or isinstance(value, (bool, int, float, str, bytes, range)):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
    elif callable(value) and hasattr(value, "__qualname__"):
        digest.update(f"F{value.__module__}.{value.__qualname__}".encode())
    else:
        raise TypeError(
            f"cannot key a cached training run on {path} of type {type(value).__name__}: pass "
            "tensors, models, generators, lists, tuples, dicts, numbers or strings"
        )


def _rng_states() -> dict[str, Any]:
    states = {"torch": torch.get_rng_state(), "random": random.getstate()}
    if "numpy" in sys.modules:
        states["numpy"] = sys.modules["numpy"].random.get_state()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(states["random"])
    if "numpy" in states:
        import numpy

        numpy.random.set_state(states["numpy"])  # noqa: NPY002 - the global generator code may use


def _generators(args: tuple, kwargs: dict) -> list[torch.Generator]:
    return [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Generator)]


def run_key(model: nn.Module, train: Callable, args: tuple, kwargs: dict) -> str:
    """The content key of ``train(model, *args, **kwargs)`` (see the module's docstring)."""
    modules = {type(model).__module__, getattr(train, "__module__", "") or ""}
    library = {m for m in modules if m.startswith("seqmodels")}
    digest = source_digest(reached_modules(library))
    _feed(digest, model, "model")
    _feed(digest, train, "train")
    _feed(digest, list(args), "args")
    _feed(digest, dict(kwargs), "kwargs")
    states = _rng_states()
    _feed(digest, states["torch"], "torch's generator")
    digest.update(pickle.dumps(states["random"]))
    if "numpy" in states:
        digest.update(pickle.dumps(states["numpy"]))
    return digest.hexdigest()[:24]


REMEMBERED = 16  # runs kept in memory per process (the book's models are at most a few MB each)
_memory: dict[str, dict[str, Any]] = {}


def _restore(model: nn.Module, record: dict[str, Any], generators: list[torch.Generator]) -> Any:
    model.load_state_dict(record["state"])
    for generator, state in zip(generators, record["generators"], strict=True):
        generator.set_state(state)
    _set_rng_states(record["rng"])
    model.train(record["training"])
    return copy.deepcopy(record["result"])


def _remember(key: str, record: dict[str, Any]) -> None:
    _memory.pop(key, None)
    _memory[key] = {**record, "result": copy.deepcopy(record["result"])}
    while len(_memory) > REMEMBERED:
        _memory.pop(next(iter(_memory)))


def trained(model: nn.Module, train: Callable, *args, **kwargs) -> Any:
    """``train(model, *args, **kwargs)``, or what an identical earlier run left (see the module)."""
    folder = cache_dir()
    key = run_key(model, train, args, kwargs)
    generators = _generators(args, kwargs)
    if key in _memory:
        return _restore(model, _memory[key], generators)
    path = folder / f"{type(model).__name__}-{key}.pt" if folder is not None else None
    if path is not None and path.is_file():
        record = torch.load(path, weights_only=False)
        _remember(key, record)
        return _restore(model, record, generators)
    result = train(model, *args, **kwargs)
    record = {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "result": result,
        "generators": [g.get_state() for g in generators],
        "rng": _rng_states(),
        "training": model.training,
    }
    _remember(key, record)
    if path is None:
        return result
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.part")
    torch.save(record, partial)
    partial.replace(path)  # atomic: a page reading the cache never sees half a file
    return result
