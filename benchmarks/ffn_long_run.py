"""Train chapter 1's feedforward LM for several epochs instead of 400 steps, and record the result.

    .venv/bin/python benchmarks/ffn_long_run.py --epochs 4

Same model, data, optimiser and batch size as the chapter; only the number of steps differs. Held-out
loss is measured on the whole validation split after every epoch; the test perplexity is that of the
epoch with the best validation loss. Writes lib/seqmodels/results/ffn_long_run.json (package data,
read by `seqmodels.results.load_result`), which the chapter quotes as "what a longer run reaches"
(with the machine and date it was measured on).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
from pathlib import Path

from seqmodels.data import context_windows, load_kjv
from seqmodels.device import get_device, set_deterministic
from seqmodels.feedforward import FeedForwardLM
from seqmodels.results import save_result, where_measured
from seqmodels.seeding import seed_everything
from seqmodels.train import evaluate_nll, train_lm

OUT = Path(__file__).resolve().parents[1] / "lib" / "seqmodels" / "results" / "ffn_long_run.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    set_deterministic()
    device = get_device()
    corpus = load_kjv(min_count=2)
    window, batch = 3, 512
    train = context_windows(corpus.train, window)
    valid = context_windows(corpus.validation, window)
    test = context_windows(corpus.test, window)
    model = FeedForwardLM(len(corpus.vocab), window, embed_dim=64, hidden_dim=128)
    steps_per_epoch = math.ceil(len(train[1]) / batch)
    g = seed_everything(0)
    best, start, per_epoch = (math.inf, None), time.perf_counter(), []
    for epoch in range(1, args.epochs + 1):
        train_lm(
            model,
            train,
            valid,
            steps=steps_per_epoch,
            batch_size=batch,
            lr=3e-3,
            generator=g,
            eval_every=steps_per_epoch,
            device=device,
        )
        valid_loss = evaluate_nll(model, *valid)[0] / len(valid[1])
        per_epoch.append(round(math.exp(valid_loss), 2))
        print(f"epoch {epoch}: validation perplexity {math.exp(valid_loss):.2f}")
        if valid_loss < best[0]:
            best = (valid_loss, copy.deepcopy(model.state_dict()))
    seconds = time.perf_counter() - start
    model.load_state_dict(best[1])
    test_nll, n = evaluate_nll(model, *test)
    result = {
        "test_perplexity": round(math.exp(test_nll / n), 2),
        "validation_perplexity_per_epoch": per_epoch,
        "epochs": args.epochs,
        "steps": steps_per_epoch * args.epochs,
        "batch_size": batch,
        "seconds": round(seconds, 1),
        **where_measured(device),
        "vocabulary_size": len(corpus.vocab),
        "script": "benchmarks/ffn_long_run.py",
    }
    save_result(args.out.stem, result, args.out.parent)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
