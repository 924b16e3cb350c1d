"""Train chapter 3's RNN language model for several epochs instead of a few hundred steps, and record it.

    .venv/bin/python benchmarks/ch03_rnn_long_run.py --epochs 3

Same model (`RNNLM`, nn.RNN core), data, optimiser and batch size as the chapter; only the number of
steps differs. Held-out loss is measured on the whole validation split after every epoch; the test
perplexity is that of the final model, over the same tokens as the n-gram
models (words plus one `</s>` per verse). Writes lib/seqmodels/results/rnn_long_run.json, which the
chapter quotes with the machine and date it was measured on.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from seqmodels.data import load_kjv
from seqmodels.device import get_device, set_deterministic
from seqmodels.results import save_result, where_measured
from seqmodels.rnn import RNNLM, sentence_nll, train_sentence_lm
from seqmodels.seeding import seed_everything

OUT = Path(__file__).resolve().parents[1] / "lib" / "seqmodels" / "results" / "rnn_long_run.json"
EMBED, HIDDEN, BATCH, LR = 64, 128, 64, 3e-3  # as in the chapter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    set_deterministic()
    device = get_device()
    corpus = load_kjv(min_count=2)
    seed_everything(0)
    model = RNNLM(len(corpus.vocab), EMBED, HIDDEN, core="torch").to(device)
    steps_per_epoch = math.ceil(len(corpus.train) / BATCH)
    history = train_sentence_lm(
        model,
        corpus.train,
        corpus.validation,
        steps=steps_per_epoch * args.epochs,
        batch_size=BATCH,
        lr=LR,
        generator=seed_everything(0),
        eval_every=steps_per_epoch,
        progress=True,
    )
    per_epoch = [round(math.exp(loss), 2) for loss in history.eval_loss]
    seconds = history.seconds
    test_nll, n = sentence_nll(model, corpus.test)
    result = {
        "test_perplexity": round(math.exp(test_nll / n), 2),
        "validation_perplexity_per_epoch": per_epoch,
        "epochs": args.epochs,
        "steps": steps_per_epoch * args.epochs,
        "batch_size": BATCH,
        "embed_dim": EMBED,
        "hidden_dim": HIDDEN,
        "parameters": model.parameter_count(),
        "seconds": round(seconds, 1),
        **where_measured(device),
        "vocabulary_size": len(corpus.vocab),
        "script": "benchmarks/ch03_rnn_long_run.py",
    }
    save_result(args.out.stem, result, args.out.parent)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
