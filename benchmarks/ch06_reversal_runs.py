"""Chapter 6's stored reversal run: the encoder–decoder's bottleneck on string reversal with noise,
with more steps, a wider context, and Chapter 7's attention beside it.

    .venv/bin/python benchmarks/ch06_reversal_runs.py --steps 2000

`seqmodels.synthetic.ReversalTask` (10 symbols, noise 0.3) with the chapter's samples (generator
seed 2: 20,000 training pairs of 1 to 20 symbols, 200 validation pairs, then 100 test pairs of each
length 1 to 20). Models (`seqmodels.seq2seq.Seq2Seq`, embedding 32, the context as the decoder's
initial state): hidden 64 as in the chapter, hidden 128, and hidden 64 with dot attention; model
seed 0, batch generator seed 1, Adam at 3e-3, batches of 64, gradients clipped to norm 1. Greedy
decoding; exact-match and token (position by position) accuracy per source length. Writes
lib/seqmodels/results/ch06_reversal.json. One thread (the machine is shared).
"""

from __future__ import annotations

import argparse

import torch

from seqmodels.results import save_result, where_measured
from seqmodels.seeding import seed_everything
from seqmodels.seq2seq import Seq2Seq, errors_by_position, train_seq2seq, translate
from seqmodels.synthetic import ReversalTask

MAX_LENGTH = 20
MODELS = {
    "d_h = 64": dict(hidden_dim=64),
    "d_h = 128": dict(hidden_dim=128),
    "d_h = 64, dot attention": dict(hidden_dim=64, attention="dot"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = ReversalTask(n_symbols=10, noise=0.3)
    g = seed_everything(2)
    train = task.sample(20_000, 1, MAX_LENGTH, g)
    valid = task.sample(200, 1, MAX_LENGTH, g)
    test = {n: task.sample(100, n, n, g) for n in range(1, MAX_LENGTH + 1)}
    V = len(task.vocab)
    result = {
        "script": "benchmarks/ch06_reversal_runs.py",
        "n_symbols": task.n_symbols,
        "noise": task.noise,
        "max_length": MAX_LENGTH,
        "steps": args.steps,
        "batch_size": 64,
        "embed_dim": 32,
        "test_pairs_per_length": 100,
        "runs": {},
        "measured_on": where_measured(torch.device("cpu")),
    }
    for name, options in MODELS.items():
        seed_everything(0)
        model = Seq2Seq(V, V, 32, **options)
        history = train_seq2seq(
            model,
            train,
            valid,
            steps=args.steps,
            batch_size=64,
            lr=3e-3,
            generator=seed_everything(1),
            eval_every=500,
        )
        exact, tokens = [], []
        for pairs in test.values():
            out = translate(model, [s for s, _ in pairs], max_len=2 * MAX_LENGTH).outputs
            refs = [t for _, t in pairs]
            exact.append(sum(o == r for o, r in zip(out, refs, strict=True)) / len(refs))
            rates, counts = errors_by_position(out, refs)
            tokens.append(1 - float((rates * counts).sum() / counts.sum()))
        result["runs"][name] = {
            "parameters": sum(p.numel() for p in model.parameters()),
            "exact_by_length": [round(x, 4) for x in exact],
            "token_accuracy_by_length": [round(x, 4) for x in tokens],
            "validation_loss": [round(x, 4) for x in history.eval_loss],
            "seconds": round(history.seconds, 1),
        }
        print(name, result["runs"][name], flush=True)
    print("wrote", save_result("ch06_reversal", result))


if __name__ == "__main__":
    main()
