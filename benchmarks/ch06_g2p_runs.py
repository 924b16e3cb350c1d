"""Chapter 6's stored run: the three uses of the context (and all three together) on the CMU
dictionary's grapheme-to-phoneme task with more steps and two seeds, and an attention model beside
them, scored on every test word.

    .venv/bin/python benchmarks/ch06_g2p_runs.py --steps 2000 --seeds 2

The chapter's models: `seqmodels.seq2seq.Seq2Seq` (GRU encoder and decoder, embedding 32, hidden
128) with ``context=("init",)``, ``("input",)``, ``("output",)``, ``("init", "input", "output")``,
and ``attention="dot"`` (Chapter 7's model, for the length comparison); Adam at 3e-3, batches of 64
training pairs (one per pronunciation) drawn by the seed's generator, gradients clipped to norm 1.
Seeds s = 0, 1, ...: model seed s, batch generator seed 100 + s. Every test word (the split of
`seqmodels.data.split_of_word`) is decoded greedily (at most 30 phonemes) and scored against its
closest pronunciation: phoneme error rate (PER) and word accuracy, overall and by the number of
letters. Writes lib/seqmodels/results/ch06_g2p.json. One thread (the machine is shared).
"""

from __future__ import annotations

import argparse

import torch

from seqmodels.data import load_g2p
from seqmodels.metrics import perplexity, phoneme_error_rate, word_accuracy
from seqmodels.results import save_result, where_measured
from seqmodels.seeding import seed_everything
from seqmodels.seq2seq import Seq2Seq, pair_nll, train_seq2seq, translate

EMBED, HIDDEN, BATCH, LR = 32, 128, 64, 3e-3
MODELS = {
    "init": dict(context=("init",)),
    "input": dict(context=("input",)),
    "output": dict(context=("output",)),
    "all three": dict(context=("init", "input", "output")),
    "dot attention": dict(attention="dot"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    g2p = load_g2p()
    train = g2p.pairs("train")
    valid = g2p.pairs("validation")[::10]
    test_words = g2p.words("test")
    test_pairs = g2p.pairs("test")
    sources = [letters for letters, _ in test_words]
    refs = [[g2p.phonemes.decode(p) for p in prons] for _, prons in test_words]
    lengths = sorted({len(s) for s in sources})
    result = {
        "script": "benchmarks/ch06_g2p_runs.py",
        "embed_dim": EMBED,
        "hidden_dim": HIDDEN,
        "batch_size": BATCH,
        "lr": LR,
        "steps": args.steps,
        "train_pairs": len(train),
        "test_words": len(test_words),
        "runs": [],
        "measured_on": where_measured(torch.device("cpu")),
    }
    for seed in range(args.seeds):
        for name, options in MODELS.items():
            seed_everything(seed)
            model = Seq2Seq(len(g2p.letters), len(g2p.phonemes), EMBED, HIDDEN, **options)
            history = train_seq2seq(
                model,
                train,
                valid,
                steps=args.steps,
                batch_size=BATCH,
                lr=LR,
                generator=seed_everything(100 + seed),
                eval_every=500,
            )
            outputs = translate(model, sources, max_len=30).outputs
            hyps = [g2p.phonemes.decode(o) for o in outputs]
            by_length = {}
            for n in lengths:
                idx = [i for i, s in enumerate(sources) if len(s) == n]
                by_length[str(n)] = {
                    "words": len(idx),
                    "per": round(
                        phoneme_error_rate([hyps[i] for i in idx], [refs[i] for i in idx]), 4
                    ),
                    "accuracy": round(
                        word_accuracy([hyps[i] for i in idx], [refs[i] for i in idx]), 4
                    ),
                }
            run = {
                "model": name,
                "seed": seed,
                "parameters": sum(p.numel() for p in model.parameters()),
                "per": round(phoneme_error_rate(hyps, refs), 4),
                "accuracy": round(word_accuracy(hyps, refs), 4),
                "test_perplexity": round(perplexity(*pair_nll(model, test_pairs)), 3),
                "validation_loss": [round(x, 4) for x in history.eval_loss],
                "seconds": round(history.seconds, 1),
                "by_length": by_length,
            }
            result["runs"].append(run)
            print({k: v for k, v in run.items() if k != "by_length"}, flush=True)
    print("wrote", save_result("ch06_g2p", result))


if __name__ == "__main__":
    main()
