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

With ``--subwords N`` (Chapter 6's subword page):

    .venv/bin/python benchmarks/seq2seq_translation.py --steps 1500 --subwords 4000

BPE (`seqmodels.bpe.train_bpe`, N merges) is learned *jointly* on the training split's KJV and WEB
words (all training verses, one count table for both sides, so a name is split alike on both); each
side's vocabulary is every subword of its training side (min count 1), so only a character never seen
in training is ``<unk>``. The same verse pairs as the word run are kept (at most 30 *words* a side;
no cap on subwords). ``rnnsearch`` (same size, steps, seed and batch protocol) is trained on subword
ids, decoded greedily (at most twice the longest training target in subwords), its subwords joined
back into words (a last word without ``</w>`` is closed) and scored with the same BLEU and chrF
against the same word references. The word-level ``rnnsearch`` is retrained in the same process (same
machine, same protocol as above) to count its ``<unk>`` outputs. Writes
lib/seqmodels/results/translation_subwords.json: per system ``bleu``, ``chrf``, ``bleu_by_length``,
``test_perplexity`` (per *token* of that system, not comparable across the two), ``seconds``,
``output_words``, ``unk_output_share`` (output words that are ``<unk>`` or hold one),
``unseen_output_share`` (output words never seen on the training target side), ``mean_target_tokens``;
and ``copy``, the vocabularies, the examples. The JSON is written after each system.
"""

from __future__ import annotations

import argparse

import torch

from seqmodels.bpe import EOW, UNK, train_bpe
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
    parser.add_argument("--subwords", type=int, default=0, help="BPE merges (0: the word run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.subwords:
        subword_run(args)
        return
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


def closed_words(symbols: list[str]) -> list[str]:
    """Decoded subwords joined into words; a last word the decoder left open is closed."""
    from seqmodels.bpe import BPE

    if symbols and not symbols[-1].endswith(EOW):
        symbols = [*symbols[:-1], symbols[-1] + EOW]
    return BPE.decode(symbols)


def output_shares(hyps: list[list[str]], seen: set[str]) -> dict:
    """How many output words, and the shares that hold ``<unk>`` and that training never showed."""
    words = [w for h in hyps for w in h]
    return {
        "output_words": len(words),
        "unk_output_share": round(sum(UNK in w for w in words) / len(words), 4),
        "unseen_output_share": round(sum(w not in seen for w in words) / len(words), 4),
    }


def train_and_score(args, n_src, n_tgt, train, valid, test, to_words, max_len, refs, sources, seen):
    """Train rnnsearch (seed 0) on id pairs, decode the test sources greedily and score in words."""
    generator = seed_everything(0)
    model = Seq2Seq(n_src, n_tgt, args.embed, args.hidden, **MODELS["rnnsearch"])
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
    outputs = translate(model, [s for s, _ in test], max_len=max_len).outputs
    hyps = [to_words(o) for o in outputs]
    entry = scores(hyps, refs, sources)
    entry.update(output_shares(hyps, seen))
    entry.update(
        test_perplexity=round(perplexity(*pair_nll(model, test)), 2),
        validation_loss=[round(x, 4) for x in history.eval_loss],
        parameters=sum(p.numel() for p in model.parameters()),
        seconds=round(history.seconds, 1),
        steps=args.steps,
        max_len=max_len,
        mean_target_tokens=round(sum(len(t) for _, t in test) / len(test), 2),
    )
    return entry, hyps


def subword_run(args) -> None:
    """The subword (BPE) rerun of rnnsearch and the word rnnsearch beside it; see the docstring."""
    from collections import Counter
    from time import perf_counter

    start = perf_counter()
    full_train = kjv_web_pairs("train")
    counts = Counter(w for _, k, web in full_train for w in (*k, *web))
    bpe = train_bpe(dict(counts), args.subwords)
    seen = {w for _, _, web in full_train for w in web}
    src_vocab = Vocabulary.build([bpe.encode_words(k) for _, k, _ in full_train])
    tgt_vocab = Vocabulary.build([bpe.encode_words(w) for _, _, w in full_train])
    word_src = Vocabulary.build([k for _, k, _ in full_train], MIN_COUNT)
    word_tgt = Vocabulary.build([w for _, _, w in full_train], MIN_COUNT)

    def encode(split, sv, tv, f):
        return [(sv.encode(f(k)), tv.encode(f(w))) for _, k, w in short(split)]

    def as_subwords(split):
        return encode(split, src_vocab, tgt_vocab, bpe.encode_words)

    def as_words(split):
        return encode(split, word_src, word_tgt, lambda x: x)

    test_verses = short("test")
    sources = [list(k) for _, k, _ in test_verses]
    refs = [list(w) for _, _, w in test_verses]
    sub = as_subwords("train"), as_subwords("validation")[::5], as_subwords("test")
    words = as_words("train"), as_words("validation")[::5], as_words("test")
    ref_words = [w for r in refs for w in r]
    result = {
        "script": "benchmarks/seq2seq_translation.py",
        "command": f"--steps {args.steps} --subwords {args.subwords}",
        "direction": "KJV -> WEB",
        "max_words": MAX_TOKENS,
        "merges": args.subwords,
        "bpe": "joint (KJV and WEB training words, one count table), end-of-word suffix </w>",
        "bpe_symbols": len(bpe.symbols),
        "source_vocabulary": {"subwords": len(src_vocab), "words": len(word_src)},
        "target_vocabulary": {"subwords": len(tgt_vocab), "words": len(word_tgt)},
        "train_pairs": len(sub[0]),
        "test_pairs": len(sub[2]),
        "same_pairs_as_word_run": len(sub[0]) == len(words[0]) and len(sub[2]) == len(words[2]),
        "reference_unk_share": round(sum(w not in word_tgt for w in ref_words) / len(ref_words), 4),
        "reference_unseen_share": round(sum(w not in seen for w in ref_words) / len(ref_words), 4),
        "steps": args.steps,
        "batch_size": args.batch_size,
        "embed_dim": args.embed,
        "hidden_dim": args.hidden,
        "systems": {"copy": scores(sources, refs, sources) | output_shares(sources, seen)},
        "measured_on": where_measured(torch.device("cpu")),
    }
    examples = [0, len(test_verses) // 2, len(test_verses) - 1]
    result["examples"] = [
        {
            "verse": test_verses[i][0],
            "source": " ".join(sources[i]),
            "source_subwords": " ".join(bpe.encode_words(sources[i])),
            "reference": " ".join(refs[i]),
        }
        for i in examples
    ]
    longest = max(len(t) for _, t in sub[0])
    runs = {
        "subwords": (
            sub,
            len(src_vocab),
            len(tgt_vocab),
            2 * longest,
            lambda o: closed_words(tgt_vocab.decode(o)),
        ),
        "words": (words, len(word_src), len(word_tgt), 2 * MAX_TOKENS, word_tgt.decode),
    }
    for name, (data, n_src, n_tgt, max_len, to_words) in runs.items():
        entry, hyps = train_and_score(
            args, n_src, n_tgt, *data, to_words, max_len, refs, sources, seen
        )
        result["systems"][f"rnnsearch_{name}"] = entry
        for example, i in zip(result["examples"], examples, strict=True):
            example[f"rnnsearch_{name}"] = " ".join(hyps[i])
        result["seconds"] = round(perf_counter() - start, 1)
        print(name, {k: v for k, v in entry.items() if k != "validation_loss"}, flush=True)
        print("wrote", save_result("translation_subwords", result), flush=True)


if __name__ == "__main__":
    main()
