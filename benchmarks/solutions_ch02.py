"""Chapter 2's worked solutions, Exercise 6: where plain SGD diverges, by mini-batch size.

    .venv/bin/python benchmarks/solutions_ch02.py       # about 2 minutes on one thread

Repeats the learning-rate sweep of the chapter's table (the Chapter 1 feedforward model, window 3,
m = 64, q = 128, up to 200 steps of plain SGD from the same initial weights, seed 0, on the
mini-batches that `train_sgd` draws with seed 7, scored on every fifth validation verse) for rates
between 3 and 10 and mini-batches of 32, 128 (the chapter's) and 512 contexts.

A run counts as diverged, by the chapter's test, when the mean loss of its last 20 steps is above
its first step's. The chapter shows that a run whose loss has risen above twice its first value
does not come back, so a run stops there (after a whole block of 10 steps whose mean is above
twice the first loss): its ``stopped_at`` step is stored, and it is counted as diverged. For each
run: the first loss, the mean of the last 20 steps run, the validation perplexity of a run that
went the full 200 steps, and the seconds. Writes book/instructor/results/solutions_ch02.json after
every run (so an interrupted run keeps what it measured). One thread.
"""

from __future__ import annotations

import math
import time

import torch

from seqmodels.data import context_windows, load_kjv
from seqmodels.feedforward import FeedForwardLM
from seqmodels.results import save_result, where_measured
from seqmodels.seeding import seed_everything
from seqmodels.sgd import batch_indices, sgd_losses
from seqmodels.train import evaluate_nll

RATES = (3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 10.0)
BATCHES = (32, 128, 512)
STEPS, TAIL, BLOCK = 200, 20, 10


def main() -> None:
    torch.set_num_threads(1)
    corpus = load_kjv(min_count=2)
    V = len(corpus.vocab)  # noqa: N806
    window, m, q = 3, 64, 128
    inputs, targets = context_windows(corpus.train, window)
    sample_xy = context_windows(corpus.validation[::5], window)
    result = {
        "script": "benchmarks/solutions_ch02.py",
        "vocabulary_size": V,
        "steps": STEPS,
        "tail": TAIL,
        "rates": list(RATES),
        "batch_sizes": list(BATCHES),
        "runs": [],
        "measured_on": where_measured(torch.device("cpu")),
    }
    for batch in BATCHES:
        for lr in RATES:
            seed_everything(0)
            model = FeedForwardLM(V, window, embed_dim=m, hidden_dim=q)
            # the batches train_sgd draws: the same for every rate
            batches = batch_indices(len(targets), batch, STEPS, seed_everything(7))
            start, losses, stopped = time.perf_counter(), [], None
            for first in range(0, STEPS, BLOCK):
                block = sgd_losses(model, inputs, targets, batches[first : first + BLOCK], lr)
                losses += block
                mean = sum(block) / len(block)
                if not math.isfinite(mean) or mean > 2 * losses[0]:
                    stopped = len(losses)
                    break
            last = sum(losses[-TAIL:]) / len(losses[-TAIL:])
            valid = None
            if stopped is None:
                total, n = evaluate_nll(model, *sample_xy)
                valid = round(math.exp(total / n), 2)
            run = {
                "batch_size": batch,
                "lr": lr,
                "first_loss": round(losses[0], 4),
                "last_loss": round(last, 4) if math.isfinite(last) else None,  # up to TAIL steps
                "stopped_at": stopped,
                "validation_perplexity": valid,
                "diverged": stopped is not None or last > losses[0],
                "seconds": round(time.perf_counter() - start, 2),
            }
            result["runs"].append(run)
            save_result("solutions_ch02", result)
            print(run, flush=True)
    print("wrote book/instructor/results/solutions_ch02.json")


if __name__ == "__main__":
    main()
