"""Chapter 7's stored run: Bahdanau et al. (2015)'s Figure 2 in trend, on string reversal.

    .venv/bin/python benchmarks/ch07_length_sweep.py            # about 5 minutes on one thread
    .venv/bin/python benchmarks/ch07_length_sweep.py --steps 3000 --seeds 0 1

Bahdanau et al. trained an encoder–decoder without attention (RNNenc) and one with attention
(RNNsearch) on sentences of at most 30 or 50 words and plotted BLEU against the length of the test
sentences. Here the task is `seqmodels.synthetic.ReversalTask` (10 symbols, noise 0.3), and the
two models are `seqmodels.seq2seq.Seq2Seq` (GRU, embedding 32, hidden 64) of the same size:

- ``rnnenc``: no attention, the encoder's last state used all three ways (initial state, recurrent
  input, output layer), as in Cho et al. (2014);
- ``rnnsearch``: dot-product attention over the encoder states (``attention="dot"``).

Each is trained on sources of 1 to ``max_train`` symbols for ``max_train`` in ``--train-lengths``
(Adam at 3e-3, batches of 64, gradients clipped to norm 1; the same seed and batches for both
models), then decoded greedily on 100 fresh sources of every length 1 .. ``--test-max`` symbols.
Scores per length: ``exact`` (share of outputs equal to the reversed symbols) and ``symbol_accuracy``
(1 − total edit distance / total reference symbols, a BLEU-like score that gives partial credit).
Writes lib/seqmodels/results/ch07_length_sweep.json. One thread.
"""

from __future__ import annotations

import argparse

import torch

from seqmodels.metrics import edit_distance
from seqmodels.results import save_result, where_measured
from seqmodels.seeding import seed_everything
from seqmodels.seq2seq import Seq2Seq, train_seq2seq, translate
from seqmodels.synthetic import ReversalTask

MODELS = {
    "rnnenc": dict(context=("init", "input", "output"), attention=None),
    "rnnsearch": dict(context=("init",), attention="dot"),
}


def scores_by_length(
    model: Seq2Seq, task: ReversalTask, lengths: range, n: int = 100
) -> dict[str, list[float]]:
    """Exact match and symbol accuracy on `n` fresh sources of each length (seed 1000 + length)."""
    exact, accuracy = [], []
    for length in lengths:
        test = task.sample(n, length, length, seed_everything(1000 + length))
        outputs = translate(model, [s for s, _ in test], max_len=length + 10).outputs
        refs = [r for _, r in test]
        exact.append(sum(o == r for o, r in zip(outputs, refs, strict=True)) / n)
        errors = sum(edit_distance(o, r) for o, r in zip(outputs, refs, strict=True))
        accuracy.append(1 - errors / sum(len(r) for r in refs))
    return {"exact": exact, "symbol_accuracy": accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--train-lengths", type=int, nargs="+", default=[10, 20])
    parser.add_argument("--test-max", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--hidden", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = ReversalTask()
    lengths = range(1, args.test_max + 1)
    result = {
        "script": "benchmarks/ch07_length_sweep.py",
        "task": f"reversal, {task.n_symbols} symbols, noise {task.noise}",
        "steps": args.steps,
        "batch_size": 64,
        "embed_dim": 32,
        "hidden_dim": args.hidden,
        "train_lengths": args.train_lengths,
        "test_lengths": list(lengths),
        "test_per_length": 100,
        "runs": [],
        "measured_on": where_measured(torch.device("cpu")),
    }
    for max_train in args.train_lengths:
        train = task.sample(50_000, 1, max_train, seed_everything(max_train))
        valid = task.sample(200, 1, max_train, seed_everything(500 + max_train))
        for seed in args.seeds:
            for name, options in MODELS.items():
                seed_everything(seed)
                model = Seq2Seq(len(task.vocab), len(task.vocab), 32, args.hidden, **options)
                history = train_seq2seq(
                    model,
                    train,
                    valid,
                    steps=args.steps,
                    batch_size=64,
                    generator=seed_everything(seed + 1),
                    eval_every=args.steps,
                )
                run = {
                    "model": name,
                    "max_train": max_train,
                    "seed": seed,
                    "parameters": sum(p.numel() for p in model.parameters()),
                    "validation_loss": round(history.eval_loss[-1], 4),
                    "seconds": round(history.seconds, 1),
                    **{
                        k: [round(x, 4) for x in v]
                        for k, v in scores_by_length(model, task, lengths).items()
                    },
                }
                result["runs"].append(run)
                print(
                    name, max_train, seed, run["seconds"], run["symbol_accuracy"][::5], flush=True
                )
    print("wrote", save_result("ch07_length_sweep", result))


if __name__ == "__main__":
    main()
