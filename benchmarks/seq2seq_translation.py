"""The stored translation run of Chapters 6 and 7: King James Bible → World English Bible.

    .venv/bin/python benchmarks/seq2seq_translation.py --steps 1500

Verse pairs from `seqmodels.data.kjv_web_pairs` (the book's chapter splits: a verse and its
translation always share one), kept where both sides have at most 30 tokens. Vocabularies: the
training split's words seen at least 3 times on each side, the rest ``<unk>``. Two GRU
encoder–decoders of the same size (embedding 96, hidden 192, batches of 48, Adam at 3e-3, gradients
clipped to norm 1, the same seed and batches):

- ``rnnenc``: no attention, the context used all three ways (initial state, recurrent input, output
  layer), as in Cho et al. (2014);
- ``rnnsearch``: dot-product attention over the encoder states (`seqmodels.seq2seq.Seq2Seq` with
  ``attention="dot"``).

Both are decoded greedily on the *test* verses (at most 30 tokens a side) and scored with corpus BLEU
and chrF (sacrebleu, on the lower-cased tokens); ``copy`` scores the source itself as the translation,
the baseline to beat, since the two versions share most of their words. Writes
lib/seqmodels/results/translation.json with, per system, ``bleu``, ``chrf``, ``bleu_by_length``
(source-length buckets ``1-10``, ``11-20``, ``21-30``), and for the models ``test_perplexity``
(teacher-forced, per target token incl. ``</s>``), ``parameters``, ``seconds``, ``steps``; and
``examples``: three test verses with source, reference and each model's output. One thread.
"""

from __future__ import annotations

import argparse

import torch

from seqmodels.data import kjv_web_pairs
from seqmodels.metrics import bleu, chrf, perplexity
from seqmodels.results import save_result, where_measured
from seqmodels.seeding import seed_everything
from seqmodels.seq2seq import Seq2Seq, pair_nll, train_seq2seq, translate
from seqmodels.vocab import Vocabulary

MAX_TOKENS = 30
MIN_COUNT = 3
BUCKETS = ((1, 10), (11, 20), (21, 30))
MODELS = {
    "rnnenc": dict(context=("init", "input", "output"), attention=None),
    "rnnsearch": dict(context=("init",), attention="dot"),
}


def short(split: str) -> list[tuple[int, tuple[str, ...], tuple[str, ...]]]:
    """The verse pairs of `split` with at most MAX_TOKENS tokens on each side."""
    return [p for p in kjv_web_pairs(split) if len(p[1]) <= MAX_TOKENS and len(p[2]) <= MAX_TOKENS]


def scores(hyps: list, refs: list, sources: list) -> dict:
    """BLEU and chrF overall and BLEU per source-length bucket."""
    by_length = {}
    for lo, hi in BUCKETS:
        idx = [i for i, s in enumerate(sources) if lo <= len(s) <= hi]
        by_length[f"{lo}-{hi}"] = {
            "bleu": round(bleu([hyps[i] for i in idx], [refs[i] for i in idx]), 2),
            "verses": len(idx),
        }
    return {
        "bleu": round(bleu(hyps, refs), 2),
        "chrf": round(chrf(hyps, refs), 2),
        "bleu_by_length": by_length,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=48)
    parser.add_argument("--embed", type=int, default=96)
    parser.add_argument("--hidden", type=int, default=192)
    args = parser.parse_args()
    torch.set_num_threads(1)
    full_train = kjv_web_pairs("train")
    src_vocab = Vocabulary.build([k for _, k, _ in full_train], MIN_COUNT)
    tgt_vocab = Vocabulary.build([w for _, _, w in full_train], MIN_COUNT)

    def encode(split):
        return [(src_vocab.encode(k), tgt_vocab.encode(w)) for _, k, w in short(split)]

    train, valid, test = encode("train"), encode("validation")[::5], encode("test")
    test_verses = short("test")
    sources = [list(k) for _, k, _ in test_verses]
    refs = [list(w) for _, _, w in test_verses]
    result = {
        "script": "benchmarks/seq2seq_translation.py",
        "direction": "KJV -> WEB",
        "max_tokens": MAX_TOKENS,
        "min_count": MIN_COUNT,
        "source_vocabulary": len(src_vocab),
        "target_vocabulary": len(tgt_vocab),
        "train_pairs": len(train),
        "test_pairs": len(test),
        "steps": args.steps,
        "batch_size": args.batch_size,
        "embed_dim": args.embed,
        "hidden_dim": args.hidden,
        "systems": {"copy": scores(sources, refs, sources)},
        "measured_on": where_measured(torch.device("cpu")),
    }
    examples = [0, len(test) // 2, len(test) - 1]
    result["examples"] = [
        {"verse": test_verses[i][0], "source": " ".join(sources[i]), "reference": " ".join(refs[i])}
        for i in examples
    ]
    for name, options in MODELS.items():
        generator = seed_everything(0)
        model = Seq2Seq(len(src_vocab), len(tgt_vocab), args.embed, args.hidden, **options)
        history = train_seq2seq(
            model,
            train,
            valid,
            steps=args.steps,
            batch_size=args.batch_size,
            generator=generator,
            eval_every=250,
            progress=True,
        )
        outputs = translate(model, [s for s, _ in test], max_len=2 * MAX_TOKENS).outputs
        hyps = [tgt_vocab.decode(o) for o in outputs]
        entry = scores(hyps, refs, sources)
        entry.update(
            test_perplexity=round(perplexity(*pair_nll(model, test)), 2),
            validation_loss=[round(x, 4) for x in history.eval_loss],
            parameters=sum(p.numel() for p in model.parameters()),
            seconds=round(history.seconds, 1),
        )
        result["systems"][name] = entry
        for example, i in zip(result["examples"], examples, strict=True):
            example[name] = " ".join(hyps[i])
        print(name, {k: v for k, v in entry.items() if k != "validation_loss"}, flush=True)
    print("wrote", save_result("translation", result))


if __name__ == "__main__":
    main()
