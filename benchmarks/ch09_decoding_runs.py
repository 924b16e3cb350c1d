"""Chapter 9's stored runs: beam size against G2P accuracy, and decoding the KJV language model.

    .venv/bin/python benchmarks/ch09_decoding_runs.py g2p   # writes results/ch09_g2p_beam.json
    .venv/bin/python benchmarks/ch09_decoding_runs.py kjv   # writes results/ch09_kjv_decoding.json

``g2p``: Chapter 7's attention model (`Seq2Seq(..., 32, 128, attention="dot")`, Adam 3e-3, batches
of 64, model seed 0, batch generator seed 100) trained for ``--steps`` steps; every ``--every``-th
test word decoded by beam search (`seqmodels.decoding.beam_search`, at most 30 phonemes) with beam
sizes 1 to 64 and length normalisation alpha = 0 and 1; word accuracy and PER
(`seqmodels.metrics`), mean output length, empty outputs, and for each wrong output whether the
model scores the closest reference higher (a *search error*: a better search would have found it)
or lower (a *model error*), by the search's own score (log-prob over length^alpha).

``kjv``: the Transformer LM of Chapter 8 (`seqmodels.transformer.pretrained_kjv_lm`) continues the
first ``--context`` words of ``--verses`` test verses (Chapter 1's split, `load_kjv(min_count=2)`)
for at most ``--max-len`` tokens: greedy search (kept when cut at the maximum length), beam search
with beam sizes 2 to 16 (alpha 0 and 1; a verse where no hypothesis finished counts as
``no_output`` and is left out of the statistics), and
sampling (pure, temperature 0.7, top-k 40, top-p 0.9; ``--samples`` per verse, seed 0). For each:
mean length, empty outputs, outputs cut at the maximum length, log-prob per token under the model
(``</s>`` counted where the output ended), the share of repeated 3-grams and words within an
output, distinct-2, and the same statistics of the verses' real continuations (cut at the same
length). Each row's ``common`` holds the same statistics over only the verses for which every beam
produced an output (``common_verses``, their indices), so that rows compare like with like.
One thread (the machine is shared).
"""

from __future__ import annotations

import argparse
import time

import torch

from seqmodels.data import load_g2p, load_kjv
from seqmodels.decoding import (
    beam_search,
    conditioned,
    distinct_n,
    greedy_search,
    lm_next_log_probs,
    repeated_ngram_share,
    sample_sequences,
    seq2seq_next_log_probs,
    sequence_log_prob,
)
from seqmodels.metrics import edit_distance, phoneme_error_rate, word_accuracy
from seqmodels.results import save_result, where_measured
from seqmodels.seeding import seed_everything
from seqmodels.seq2seq import Seq2Seq, train_seq2seq

BEAMS_G2P = (1, 2, 4, 8, 16, 32, 64)
BEAMS_KJV = (1, 2, 4, 8, 16)
SAMPLERS = {
    "pure": {},
    "temperature 0.7": {"temperature": 0.7},
    "top-k 40": {"top_k": 40},
    "top-p 0.9": {"top_p": 0.9},
}


def g2p_run(args: argparse.Namespace) -> dict:
    g2p = load_g2p()
    train = g2p.pairs("train")
    valid = g2p.pairs("validation")[::10]
    words = g2p.words("test")[:: args.every]
    seed_everything(0)
    model = Seq2Seq(len(g2p.letters), len(g2p.phonemes), 32, 128, attention="dot")
    start = time.perf_counter()
    train_seq2seq(
        model,
        train,
        valid,
        steps=args.steps,
        batch_size=64,
        lr=3e-3,
        generator=seed_everything(100),
        eval_every=args.steps,
    )
    train_seconds = time.perf_counter() - start
    refs = [prons for _, prons in words]
    models = [seq2seq_next_log_probs(model, letters) for letters, _ in words]
    runs = []
    for alpha in (0.0, 1.0):
        for beam in BEAMS_G2P:
            start = time.perf_counter()
            outputs, log_probs = [], []
            for f in models:
                hyps = beam_search(f, beam, 30, alpha=alpha)
                outputs.append(hyps[0].tokens if hyps else [])
                log_probs.append(hyps[0].log_prob if hyps else float("-inf"))
            seconds = time.perf_counter() - start
            search_errors = model_errors = 0
            for f, out, lp, prons in zip(models, outputs, log_probs, refs, strict=True):
                if out in prons:
                    continue
                closest = min(prons, key=lambda r, out=out: edit_distance(out, r))
                ref_score = sequence_log_prob(f, closest) / (len(closest) + 1) ** alpha
                if ref_score > lp / (len(out) + 1) ** alpha:
                    search_errors += 1
                else:
                    model_errors += 1
            runs.append(
                {
                    "beam": beam,
                    "alpha": alpha,
                    "accuracy": word_accuracy(outputs, refs),
                    "per": phoneme_error_rate(outputs, refs),
                    "mean_length": sum(map(len, outputs)) / len(outputs),
                    "empty": sum(not o for o in outputs),
                    "mean_log_prob": sum(log_probs) / len(log_probs),
                    "search_errors": search_errors,
                    "model_errors": model_errors,
                    "seconds": seconds,
                }
            )
            print(runs[-1], flush=True)
    return {
        "script": "benchmarks/ch09_decoding_runs.py g2p",
        "model": "Seq2Seq(29, 42, 32, 128, attention='dot')",
        "steps": args.steps,
        "train_seconds": train_seconds,
        "test_words": len(words),
        "every": args.every,
        "max_len": 30,
        "runs": runs,
        "measured_on": where_measured(torch.device("cpu")),
    }


def text_stats(outputs: list[list[int]], log_probs: list[float], finished: list[bool]) -> dict:
    """Length, repetition and log-prob per token (words, plus </s> where the output finished)."""
    tokens = sum(len(o) + f for o, f in zip(outputs, finished, strict=True))
    return {
        "n": len(outputs),
        "mean_length": sum(map(len, outputs)) / len(outputs),
        "empty": sum(not o for o, f in zip(outputs, finished, strict=True) if f),
        "unfinished": finished.count(False),
        "repeated_3grams": repeated_ngram_share(outputs, 3),
        "repeated_1grams": repeated_ngram_share(outputs, 1),
        "distinct_2": distinct_n(outputs, 2),
        "log_prob_per_token": sum(log_probs) / max(tokens, 1),
    }


@torch.no_grad()
def lm_log_prob(model: torch.nn.Module, context: list[int], output: list[int], done: bool) -> float:
    """log p(output [</s>] | <s> context) under a language model, in one forward pass."""
    ids = torch.tensor([[0, *context, *output, 1]])
    logp = model(ids[:, :-1])[0][0].log_softmax(-1)
    first = len(context)  # position whose next token is output[0]
    targets = ids[0, first + 1 :]
    picked = logp[first:].gather(1, targets[:, None])[:, 0]
    return float(picked.sum() if done else picked[:-1].sum())


def kjv_run(args: argparse.Namespace) -> dict:
    from seqmodels.transformer import pretrained_kjv_lm

    corpus = load_kjv(min_count=2)
    model = pretrained_kjv_lm()
    lm = lm_next_log_probs(model)
    verses = [v for v in corpus.test if len(v) > args.context + 3]
    verses = verses[:: max(1, len(verses) // args.verses)][: args.verses]
    contexts = [v[: args.context] for v in verses]
    fs = [conditioned(lm, c) for c in contexts]
    real = [v[args.context :] for v in verses]
    real_done = [len(r) <= args.max_len for r in real]
    real = [r[: args.max_len] for r in real]
    real_lp = [
        lm_log_prob(model, c, r, d) for c, r, d in zip(contexts, real, real_done, strict=True)
    ]
    result = {
        "script": "benchmarks/ch09_decoding_runs.py kjv",
        "model": getattr(model, "config", None),
        "verses": len(verses),
        "context_words": args.context,
        "max_len": args.max_len,
        "samples_per_verse": args.samples,
        "examples": {
            "context": [corpus.vocab.decode(c) for c in contexts[:5]],
            "real": [corpus.vocab.decode(r) for r in real[:5]],
        },
        "real": text_stats(real, real_lp, real_done),
        "beam": [],
        "sampling": {},
    }
    print("real", result["real"], flush=True)
    # per verse, each row's (output, log-prob, finished) triples: None where a beam gave no output
    per_verse: dict[tuple, list] = {
        ("real",): [[t] for t in zip(real, real_lp, real_done, strict=True)]
    }
    for alpha in (0.0, 1.0):
        for beam in BEAMS_KJV:
            start = time.perf_counter()
            outputs, log_probs, finished, dropped, rows = [], [], [], 0, []
            for f in fs:
                if beam == 1:  # greedy: an output cut at max_len is kept, unfinished
                    tokens, lp, done = greedy_search(f, args.max_len)
                    outputs.append(tokens)
                    log_probs.append(lp)
                    finished.append(done)
                    rows.append([(tokens, lp, done)])
                    continue
                hyps = beam_search(f, beam, args.max_len, alpha=alpha)
                if not hyps:  # nothing finished within max_len: no output
                    dropped += 1
                    rows.append(None)
                    continue
                outputs.append(hyps[0].tokens)
                log_probs.append(hyps[0].log_prob)
                finished.append(True)
                rows.append([(hyps[0].tokens, hyps[0].log_prob, True)])
            per_verse["beam", beam, alpha] = rows
            stats = text_stats(outputs, log_probs, finished)
            stats.update(
                beam=beam,
                alpha=alpha,
                no_output=dropped,
                seconds=time.perf_counter() - start,
                examples=[corpus.vocab.decode(o) for o in outputs[:5]],
            )
            result["beam"].append(stats)
            print({k: v for k, v in stats.items() if k != "examples"}, flush=True)
    for name, options in SAMPLERS.items():
        start = time.perf_counter()
        g = seed_everything(0)
        outputs, log_probs, finished, rows = [], [], [], []
        for c, f in zip(contexts, fs, strict=True):
            rows.append([])
            for s in sample_sequences(f, args.samples, args.max_len, g, **options):
                # a sample of max_len tokens may or may not have been followed by </s>
                done = len(s) < args.max_len
                outputs.append(s)
                finished.append(done)
                log_probs.append(lm_log_prob(model, c, s, done))
                rows[-1].append((s, log_probs[-1], done))
        per_verse["sampling", name] = rows
        stats = text_stats(outputs, log_probs, finished)
        stats.update(
            options=options,
            seconds=time.perf_counter() - start,
            examples=[corpus.vocab.decode(o) for o in outputs[: 5 * args.samples : args.samples]],
        )
        result["sampling"][name] = stats
        print(name, {k: v for k, v in stats.items() if k != "examples"}, flush=True)
    # like with like: every row's statistics again over the verses that every beam answered
    common = [
        i
        for i in range(len(verses))
        if all(rows[i] is not None for key, rows in per_verse.items() if key[0] == "beam")
    ]
    result["common_verses"] = common

    def common_stats(rows: list) -> dict:
        triples = [t for i in common for t in rows[i]]
        return text_stats(*(list(x) for x in zip(*triples, strict=True)))

    result["real"]["common"] = common_stats(per_verse["real",])
    for stats in result["beam"]:
        stats["common"] = common_stats(per_verse["beam", stats["beam"], stats["alpha"]])
    for name, stats in result["sampling"].items():
        stats["common"] = common_stats(per_verse["sampling", name])
    print("common verses", len(common), flush=True)
    result["measured_on"] = where_measured(torch.device("cpu"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("g2p", "kjv"))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--every", type=int, default=20, help="decode every n-th test word")
    parser.add_argument("--verses", type=int, default=50)
    parser.add_argument("--context", type=int, default=4)
    parser.add_argument("--max-len", type=int, default=40)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--name", default=None, help="result name (default ch09_<part>...)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.part == "g2p":
        result, name = g2p_run(args), args.name or "ch09_g2p_beam"
    else:
        result, name = kjv_run(args), args.name or "ch09_kjv_decoding"
    print(save_result(name, result))


if __name__ == "__main__":
    main()
