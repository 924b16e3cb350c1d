"""Chapter 8's stored run: the modern block (RMSNorm, rotary positions, SwiGLU) trained beside the
page's GPT on the same budget.

    .venv/bin/python benchmarks/ch08_modern_block.py            # about 10 min on one thread
    .venv/bin/python benchmarks/ch08_modern_block.py --seeds 0 1

Protocol. Two decoder-only language models of the KJV with Chapter 1's vocabulary
(``load_kjv(min_count=2)``):

* ``transformer``: ``TransformerLM`` as on the page and in ``benchmarks/ch08_gpt_kjv.py``'s
  ``small`` run: d_model 64, 2 pre-LN blocks of 4 heads, d_ff 256, sinusoidal positions, output
  tied to the embedding, max_len 256;
* ``modern``: ``ModernLM`` with d_model 64, 2 blocks of 4 heads (RMSNorm, rotary positions,
  SwiGLU, no biases), output tied to the embedding, max_len 256, and d_ff 174, the SwiGLU width
  whose parameter count is nearest the Transformer's (the two counts are recorded).

Each is trained with ``seqmodels.rnn.train_sentence_lm`` for 150 steps of 32 verses (the budget of
Chapter 5's gated runs and of ``gpt_kjv``'s ``small`` run), Adam at a constant 3e-3, gradients
clipped at 1, no held-out evaluation during training. For seed s, ``seed_everything(s)`` before
the model is built and a batch generator ``seed_everything(s)``: the two models see the same
verses in the same order. Seeds 0, 1, 2; for each seed the two models run one after the other, so
the machine's load falls on both alike. Reported: held-out perplexity on Chapter 1's test split over
the n-gram models' tokens (``sentence_nll``, the page's evaluation), parameters, and training
seconds per step (wall clock, one thread, a shared machine: compare the two models' ratio, not
the absolute seconds). Because a loaded machine makes those wall-clock seconds noisy, each model's
training step is also timed on its own (``seqmodels.transformer.train_step_seconds``: forward and
backward on 32 random sequences of 40 tokens, best of 5), the two models alternating for 5 rounds,
the best of all kept. Writes lib/seqmodels/results/ch08_modern_block.json.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from seqmodels.data import load_kjv
from seqmodels.device import set_deterministic
from seqmodels.modern_block import ModernLM
from seqmodels.results import save_result, where_measured
from seqmodels.rnn import sentence_nll, train_sentence_lm
from seqmodels.seeding import seed_everything
from seqmodels.transformer import TransformerLM, train_step_seconds

RESULTS = Path(__file__).resolve().parents[1] / "lib" / "seqmodels" / "results"
STEPS, BATCH, LR = 150, 32, 3e-3
MODELS = {
    "transformer": (
        TransformerLM,
        dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, max_len=256, positions="sinusoidal",
             norm_first=True, tie_weights=True),
    ),
    "modern": (
        ModernLM,
        dict(d_model=64, n_heads=4, n_layers=2, d_ff=174, max_len=256, tie_weights=True),
    ),
}  # fmt: skip


def run(name: str, seed: int, corpus) -> dict:
    cls, config = MODELS[name]
    seed_everything(seed)
    model = cls(len(corpus.vocab), **config)
    history = train_sentence_lm(
        model, corpus.train, None, steps=STEPS, batch_size=BATCH, lr=LR,
        generator=seed_everything(seed),
    )  # fmt: skip
    total, n = sentence_nll(model, corpus.test)
    result = {
        "seed": seed,
        "test_perplexity": round(math.exp(total / n), 3),
        "seconds": round(history.seconds, 2),
        "seconds_per_step": round(history.seconds / STEPS, 4),
        "final_train_loss": round(history.step_loss[-1], 4),
        "test_tokens": n,
    }
    print(name, json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    torch.set_num_threads(1)
    set_deterministic()
    start = time.perf_counter()
    corpus = load_kjv(min_count=2)
    V = len(corpus.vocab)
    runs: dict[str, list[dict]] = {name: [] for name in MODELS}
    for seed in args.seeds:
        for name in MODELS:
            runs[name].append(run(name, seed, corpus))
    step_seconds = {name: math.inf for name in MODELS}
    models = {name: cls(V, **config) for name, (cls, config) in MODELS.items()}
    for _ in range(5):
        for name, model in models.items():
            g = torch.Generator().manual_seed(0)
            seconds = train_step_seconds(model, T=40, batch_size=BATCH, repeats=5, generator=g)
            step_seconds[name] = min(step_seconds[name], seconds)
    print("best step seconds", step_seconds, flush=True)
    result = {
        "step_seconds_best": {k: round(v, 5) for k, v in step_seconds.items()},
        "step_timing": "train_step_seconds(T=40, batch 32), best of 5 rounds of 5, alternating",
        "models": {
            name: {
                "class": cls.__name__,
                "config": cls(V, **config).config,
                "parameters": cls(V, **config).parameter_count(),
            }
            for name, (cls, config) in MODELS.items()
        },
        "steps": STEPS,
        "batch_size": BATCH,
        "lr": LR,
        "optimizer": "adam, constant learning rate, gradients clipped at 1",
        "seeds": args.seeds,
        "runs": runs,
        "vocabulary_size": V,
        **where_measured(torch.device("cpu")),
        "total_seconds": round(time.perf_counter() - start, 1),
        "script": "benchmarks/ch08_modern_block.py",
        "command": ".venv/bin/python benchmarks/ch08_modern_block.py",
        "note": "wall-clock seconds measured on one thread while other jobs shared the CPU",
    }
    save_result("ch08_modern_block", result, RESULTS)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
