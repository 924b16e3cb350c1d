"""Chapter 5's stored runs: the RNN/GRU/LSTM race on the agreement language with more steps and
seeds, and the three as KJV language models, and record them.

    .venv/bin/python benchmarks/ch05_gated_runs.py race --steps 1200 --seeds 2 --distances 10 15
    .venv/bin/python benchmarks/ch05_gated_runs.py kjv --steps 150

``race``: for each distance d, the chapter's three models (RNN d_h = 32, GRU d_h = 18, LSTM
d_h = 15 with forget-gate bias 1: about the same number of parameters), the chapter's samples
(seed 100 + d, 20,000 training and 2,000 held-out sentences), Adam at 1e-2, batches of 64; `--seeds`
model/batch seeds (7 + 10 s, 8 + 10 s). Writes held-out perplexity and right-verb share per model,
d and seed to lib/seqmodels/results/gated_race.json.

``kjv``: Chapter 3's KJV language model (embedding 64, hidden 128, batches of 32, Adam at 3e-3,
Chapter 1's vocabulary and splits) with an nn.RNN, nn.GRU and nn.LSTM core, the same seed, batches
and number of steps each; test perplexity over the n-gram models' tokens. Writes
lib/seqmodels/results/gated_kjv.json. Both run on one thread (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from seqmodels.data import load_kjv
from seqmodels.device import get_device, set_deterministic
from seqmodels.gated import set_forget_bias
from seqmodels.results import save_result, where_measured
from seqmodels.rnn import RNNLM, distributions_at, sentence_nll, train_sentence_lm
from seqmodels.seeding import seed_everything
from seqmodels.synthetic import AgreementLanguage

RESULTS = Path(__file__).resolve().parents[1] / "lib" / "seqmodels" / "results"
#: The race's models: name → (RNNLM core, hidden size, forget-gate bias or None), as in the chapter.
RACE = {"RNN": ("torch", 32), "GRU": ("gru", 18), "LSTM": ("lstm", 15)}
KJV = {"RNN": "torch", "GRU": "gru", "LSTM": "lstm"}
BATCH = 32  # as the KJV run of Chapter 3's page


def race_model(name: str, vocab_size: int) -> RNNLM:
    """The chapter's race model `name` (embedding 16), the LSTM with forget-gate bias 1."""
    core, hidden = RACE[name]
    model = RNNLM(vocab_size, embed_dim=16, hidden_dim=hidden, core=core)
    if name == "LSTM":
        set_forget_bias(model.rnn, 1.0)
    return model


def race(steps: int, seeds: int, distances: list[int], device) -> dict:
    runs = []
    for d in distances:
        lang = AgreementLanguage(distance=d)
        g = seed_everything(100 + d)
        train, test = lang.sample(20_000, g), lang.sample(2_000, g)
        for s in range(seeds):
            for name in RACE:
                seed_everything(7 + 10 * s)
                model = race_model(name, len(lang.vocab)).to(device)
                history = train_sentence_lm(
                    model, train, test[:200], steps=steps, batch_size=64, lr=1e-2,
                    generator=seed_everything(8 + 10 * s), eval_every=steps,
                )  # fmt: skip
                total, n = sentence_nll(model, test)
                share, accuracy = lang.agreement(
                    distributions_at(model, test, lang.verb_position), test
                )
                run = {
                    "d": d,
                    "seed": 7 + 10 * s,
                    "model": name,
                    "perplexity": round(math.exp(total / n), 4),
                    "bound": round(lang.perplexity_bound(), 4),
                    "share": round(share, 4),
                    "accuracy": round(accuracy, 4),
                    "parameters": model.parameter_count(),
                    "seconds": round(history.seconds, 1),
                }
                runs.append(run)
                print(json.dumps(run), flush=True)
    return {"steps": steps, "batch_size": 64, "seeds": seeds, "distances": distances, "runs": runs}


def kjv(steps: int, device) -> dict:
    corpus = load_kjv(min_count=2)
    runs = {}
    for name, core in KJV.items():
        seed_everything(0)
        model = RNNLM(len(corpus.vocab), 64, 128, core=core).to(device)
        history = train_sentence_lm(
            model, corpus.train, corpus.validation[::5], steps=steps, batch_size=BATCH, lr=3e-3,
            generator=seed_everything(0), eval_every=steps, progress=True,
        )  # fmt: skip
        total, n = sentence_nll(model, corpus.test)
        runs[name] = {
            "test_perplexity": round(math.exp(total / n), 2),
            "validation_perplexity": round(math.exp(history.eval_loss[-1]), 2),
            "parameters": model.parameter_count(),
            "seconds": round(history.seconds, 1),
            "test_tokens": n,
        }
        print(name, json.dumps(runs[name]), flush=True)
    return {
        "steps": steps,
        "batch_size": BATCH,
        "validation": "every fifth validation verse (Chapter 1's validation sample)",
        "embed_dim": 64,
        "hidden_dim": 128,
        "vocabulary_size": len(corpus.vocab),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["race", "kjv"])
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--distances", type=int, nargs="+", default=[10, 15])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    set_deterministic()
    device = get_device()
    if args.part == "race":
        result = race(args.steps or 1200, args.seeds, args.distances, device)
    else:
        result = kjv(args.steps or 150, device)
    name = "gated_race" if args.part == "race" else "gated_kjv"
    out = args.out or RESULTS / f"{name}.json"
    result.update(where_measured(device))
    result["script"] = "benchmarks/ch05_gated_runs.py"
    result["command"] = f".venv/bin/python benchmarks/ch05_gated_runs.py {args.part}"
    result["note"] = "wall-clock seconds measured on one thread while other jobs shared the CPU"
    save_result(out.stem, result, out.parent)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
