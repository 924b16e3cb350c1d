"""Chapter 8's stored runs: the agreement-language race with the Transformer, positions beyond the
training length, post-LN against pre-LN at a high learning rate, and the Transformer
encoder-decoder on G2P beside RNNsearch.

    .venv/bin/python benchmarks/ch08_transformer_runs.py race
    .venv/bin/python benchmarks/ch08_transformer_runs.py positions
    .venv/bin/python benchmarks/ch08_transformer_runs.py norms
    .venv/bin/python benchmarks/ch08_transformer_runs.py g2p
    .venv/bin/python benchmarks/ch08_transformer_runs.py conv

``race`` (→ ch08_race.json): Chapter 5's race at 400 steps (seed 7 models, seed 8 batches, its
samples: seed 100 + d, 20,000 training and 2,000 held-out sentences, Adam at 1e-2, batches of 64)
for d = 3, 6, 10, 15 with RNN (d_h = 32), GRU (d_h = 18), LSTM (d_h = 15, forget bias 1) — the
rows Chapter 5's page trains and does not store — and the Transformer at the same budget,
``TransformerLM(27, d_model=16, n_heads=2, n_layers=1, d_ff=40, tie_weights=True, max_len=64)``;
then the Transformer at d = 10, 15 for 1,200 steps with seeds 7 and 17 (batches 8 and 18), the
protocol of ``benchmarks/ch05_gated_runs.py race`` (→ gated_race.json's RNN/GRU/LSTM rows).

``positions`` (→ ch08_positions.json): ``seqmodels.synthetic.periodic_sentences`` (a marker at
every 4th position, 8 random symbols elsewhere), trained on 8-32 tokens, tested on 64; a 2-layer
d_model = 32 LM with sinusoidal, learned (max_len 65) or no positions, 2 seeds; marker accuracy
(p(marker) > 0.5 exactly at the marker positions) by target position.

``norms`` (→ ch08_norms.json): a 6-layer d_model = 32 LM, post-LN against pre-LN, on the
agreement language (d = 3), Adam without warm-up or clipping at 1e-2 and 3e-3, 200 steps, 2 seeds:
every step's loss and gradient norm, held-out loss at the end.

``g2p`` (→ ch08_g2p.json): ``TransformerSeq2Seq(d_model=64, n_heads=4, n_layers=2, d_ff=256)``
with Chapter 6's protocol (Adam at 3e-3, batches of 64, seed s model, seed 100 + s batches) for
400 steps (seed 0, beside Chapter 7's RNNsearch at 400 steps, retrained here) and 2,000 steps
(seeds 0, 1; Chapter 6's stored RNNsearch is ``load_result("ch06_g2p")``); every test word
decoded greedily (at most 30 phonemes), PER and word accuracy. All on one thread.

``conv`` (→ ch08_conv_race.json): the causal dilated convolutional LM in the race, with the
``race`` protocol exactly (``race_run``: seed 7 model, seed 8 batches, samples seed 100 + d,
20,000 training and 2,000 held-out sentences, Adam at 1e-2, batches of 64, 400 steps), in two
variants of kernel size 2 with dilations 1, 2, 4, ...: ``Conv8`` =
``ConvLM(27, channels=18, n_layers=3, kernel_size=2)`` (receptive field R = 8 tokens) and
``Conv16`` = ``ConvLM(27, channels=16, n_layers=4, kernel_size=2)`` (R = 16); the verb is predicted
from d + 1 tokens back to the subject, so it is in reach when d + 1 <= R. Runs: d = 3, 6, 10, 15
(the race's) and the edges d = 7, 8 (R = 8's last in-reach distance and first out-of-reach one)
and d = 16 (R = 16's first out of reach), each with seeds 7 and 17 (batches 8 and 18); then
d = 10, 15 for 1,200 steps with seeds 7 and 17, the protocol of the race's longer table.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

from seqmodels.convolution import ConvLM
from seqmodels.data import load_g2p
from seqmodels.device import set_deterministic
from seqmodels.gated import set_forget_bias
from seqmodels.metrics import phoneme_error_rate, word_accuracy
from seqmodels.results import save_result, where_measured
from seqmodels.rnn import RNNLM, distributions_at, sentence_batch, sentence_nll, train_sentence_lm
from seqmodels.seeding import seed_everything
from seqmodels.seq2seq import Seq2Seq, train_seq2seq, translate
from seqmodels.synthetic import PERIODIC_MARKER as MARKER
from seqmodels.synthetic import AgreementLanguage, periodic_sentences
from seqmodels.transformer import TransformerLM, TransformerSeq2Seq

SCRIPT = "benchmarks/ch08_transformer_runs.py"
RACE = {"RNN": ("torch", 32), "GRU": ("gru", 18), "LSTM": ("lstm", 15)}
TRANSFORMER = dict(d_model=16, n_heads=2, n_layers=1, d_ff=40, tie_weights=True, max_len=64)
G2P_MODEL = dict(d_model=64, n_heads=4, n_layers=2, d_ff=256)
CONV = {
    "Conv8": dict(channels=18, n_layers=3, kernel_size=2),
    "Conv16": dict(channels=16, n_layers=4, kernel_size=2),
}


def race_model(name: str, vocab_size: int) -> torch.nn.Module:
    """Chapter 5's race models and the Transformer of the same budget."""
    if name == "Transformer":
        return TransformerLM(vocab_size, **TRANSFORMER)
    if name in CONV:
        return ConvLM(vocab_size, **CONV[name])
    core, hidden = RACE[name]
    model = RNNLM(vocab_size, embed_dim=16, hidden_dim=hidden, core=core)
    if name == "LSTM":
        set_forget_bias(model.rnn, 1.0)
    return model


def race_run(name, lang, train, test, steps, seed) -> dict:
    seed_everything(seed)
    model = race_model(name, len(lang.vocab))
    history = train_sentence_lm(
        model, train, test[:200], steps=steps, batch_size=64, lr=1e-2,
        generator=seed_everything(seed + 1), eval_every=steps,
    )  # fmt: skip
    total, n = sentence_nll(model, test)
    share, accuracy = lang.agreement(distributions_at(model, test, lang.verb_position), test)
    return {
        "d": lang.distance,
        "model": name,
        "steps": steps,
        "seed": seed,
        "perplexity": round(math.exp(total / n), 4),
        "bound": round(lang.perplexity_bound(), 4),
        "trigram": round(math.exp(lang.ngram_floor(3)), 4),
        "share": round(share, 4),
        "accuracy": round(accuracy, 4),
        "parameters": sum(p.numel() for p in model.parameters()),
        "seconds": round(history.seconds, 1),
    }


def race() -> dict:
    runs = []
    for d in (3, 6, 10, 15):
        lang = AgreementLanguage(distance=d)
        g = seed_everything(100 + d)
        train, test = lang.sample(20_000, g), lang.sample(2_000, g)
        for name in (*RACE, "Transformer"):
            runs.append(race_run(name, lang, train, test, 400, 7))
            print(json.dumps(runs[-1]), flush=True)
        if d in (10, 15):
            for seed in (7, 17):
                runs.append(race_run("Transformer", lang, train, test, 1200, seed))
                print(json.dumps(runs[-1]), flush=True)
    return {"batch_size": 64, "lr": 1e-2, "transformer": TRANSFORMER, "runs": runs}


def conv_race() -> dict:
    runs = []
    plan = [(d, 400, seed) for d in (3, 6, 7, 8, 10, 15, 16) for seed in (7, 17)]
    plan += [(d, 1200, seed) for d in (10, 15) for seed in (7, 17)]
    samples = {}
    for d, steps, seed in plan:
        if d not in samples:
            lang = AgreementLanguage(distance=d)
            g = seed_everything(100 + d)
            samples[d] = lang, lang.sample(20_000, g), lang.sample(2_000, g)
        lang, train, test = samples[d]
        for name in CONV:
            run = race_run(name, lang, train, test, steps, seed)
            run["receptive_field"] = race_model(name, len(lang.vocab)).receptive_field
            runs.append(run)
            print(json.dumps(runs[-1]), flush=True)
    return {"batch_size": 64, "lr": 1e-2, "conv": CONV, "runs": runs}


def marker_accuracy(model: TransformerLM, sentences: list[list[int]]) -> list[float]:
    """Per target position: the share of sentences where p(marker) > 0.5 exactly when the target
    is the marker."""
    batch = sentence_batch(sentences)
    model.eval()
    with torch.no_grad():
        p_marker = model(batch.inputs)[0].softmax(-1)[..., MARKER]
    right = ((p_marker > 0.5) == (batch.targets == MARKER)) & batch.mask
    return (right.sum(0) / batch.mask.sum(0)).tolist()


def positions(steps: int = 300) -> dict:
    g = seed_everything(0)
    train = periodic_sentences(20_000, 8, 32, g)
    valid = periodic_sentences(200, 8, 32, g)
    test = periodic_sentences(500, 64, 64, g)
    runs = []
    for seed in (1, 11):
        for kind in ("sinusoidal", "learned", "none"):
            seed_everything(seed)
            model = TransformerLM(12, d_model=32, n_heads=2, n_layers=2, d_ff=64,
                                  positions=kind, max_len=65)  # fmt: skip
            history = train_sentence_lm(
                model, train, valid, steps=steps, batch_size=32, lr=3e-3,
                generator=seed_everything(seed + 1), eval_every=steps,
            )  # fmt: skip
            acc = marker_accuracy(model, test)
            runs.append({"positions": kind, "seed": seed, "accuracy": [round(a, 4) for a in acc],
                         "seconds": round(history.seconds, 1)})  # fmt: skip
            print(kind, seed, [round(sum(acc[i : i + 8]) / 8, 3) for i in range(0, 64, 8)])
    return {
        "task": "periodic_sentences(period=4, n_symbols=8): train 8-32 tokens, test 64",
        "train_max_len": 32,
        "test_len": 64,
        "steps": steps,
        "batch_size": 32,
        "lr": 3e-3,
        "model": dict(d_model=32, n_heads=2, n_layers=2, d_ff=64, max_len=65),
        "chance": "always 'no marker': 0.75 at a position whose target is a symbol three times in 4",
        "runs": runs,
    }


def norms(steps: int = 200) -> dict:
    lang = AgreementLanguage(distance=3)
    g = seed_everything(103)
    train, test = lang.sample(20_000, g), lang.sample(2_000, g)
    runs = []
    for lr in (1e-2, 3e-3):
        for seed in (7, 17):
            for norm_first in (False, True):
                seed_everything(seed)
                model = TransformerLM(len(lang.vocab), d_model=32, n_heads=4, n_layers=6,
                                      d_ff=64, max_len=64, norm_first=norm_first)  # fmt: skip
                history = train_sentence_lm(
                    model, train, test[:200], steps=steps, batch_size=32, lr=lr,
                    generator=seed_everything(seed + 1), eval_every=steps, clip=None,
                )  # fmt: skip
                total, n = sentence_nll(model, test)
                run = {
                    "norm": "pre-LN" if norm_first else "post-LN",
                    "lr": lr,
                    "seed": seed,
                    "step_loss": [round(x, 4) for x in history.step_loss],
                    "grad_norms": [round(x, 4) for x in history.grad_norms],
                    "test_loss": round(total / n, 4),
                    "seconds": round(history.seconds, 1),
                }
                runs.append(run)
                print(run["norm"], lr, seed, run["test_loss"], flush=True)
    return {
        "task": "agreement language, d = 3 (Chapter 4's samples)",
        "unigram_loss": round(lang_unigram_loss(lang, train), 4),
        "bound_loss": round(math.log(lang.perplexity_bound()), 4),
        "steps": steps,
        "batch_size": 32,
        "model": dict(d_model=32, n_heads=4, n_layers=6, d_ff=64),
        "optimizer": "Adam, constant learning rate, no warm-up, no clipping",
        "runs": runs,
    }


def lang_unigram_loss(lang: AgreementLanguage, sentences: list[list[int]]) -> float:
    """The training sentences' unigram entropy per predicted token (</s> included), in nats."""
    counts = torch.zeros(len(lang.vocab))
    for s in sentences:
        counts += torch.bincount(torch.tensor(s + [1]), minlength=len(lang.vocab))
    p = counts / counts.sum()
    return float(-(p[p > 0] * p[p > 0].log()).sum())


def g2p_runs(seeds: int = 2) -> dict:
    g2p = load_g2p()
    train, valid = g2p.pairs("train"), g2p.pairs("validation")[::10]
    test_words = g2p.words("test")
    sources = [w for w, _ in test_words]
    refs = [prons for _, prons in test_words]
    runs = []
    plan = [("Transformer", 400, 0), ("RNNsearch", 400, 0)]
    plan += [("Transformer", 2000, s) for s in range(seeds)]
    for name, steps, seed in plan:
        seed_everything(seed)
        if name == "Transformer":
            model = TransformerSeq2Seq(len(g2p.letters), len(g2p.phonemes), **G2P_MODEL)
        else:
            model = Seq2Seq(len(g2p.letters), len(g2p.phonemes), 32, 128, attention="dot")
        history = train_seq2seq(
            model, train, valid, steps=steps, batch_size=64, lr=3e-3,
            generator=seed_everything(100 + seed), eval_every=steps,
        )  # fmt: skip
        outputs = translate(model, sources, max_len=30).outputs
        run = {
            "model": name,
            "steps": steps,
            "seed": seed,
            "parameters": sum(p.numel() for p in model.parameters()),
            "per": round(phoneme_error_rate(outputs, refs), 4),
            "accuracy": round(word_accuracy(outputs, refs), 4),
            "seconds": round(history.seconds, 1),
        }
        runs.append(run)
        print(json.dumps(run), flush=True)
    return {
        "transformer": G2P_MODEL,
        "rnnsearch": "Seq2Seq(letters, phonemes, 32, 128, attention='dot')",
        "batch_size": 64,
        "lr": 3e-3,
        "test_words": len(test_words),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["race", "positions", "norms", "g2p", "conv"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    set_deterministic()
    parts = {
        "race": race,
        "positions": positions,
        "norms": norms,
        "g2p": g2p_runs,
        "conv": conv_race,
    }
    start = time.perf_counter()
    result = parts[args.part]()
    result.update(where_measured(torch.device("cpu")))
    result["script"] = SCRIPT
    result["command"] = f".venv/bin/python {SCRIPT} {args.part}"
    if args.part == "conv":  # the other parts' stored files predate the total
        result["seconds"] = round(time.perf_counter() - start, 1)
    result["note"] = "wall-clock seconds measured on one thread while other jobs shared the CPU"
    name = "ch08_conv_race" if args.part == "conv" else f"ch08_{args.part}"
    print("wrote", save_result(name, result))


if __name__ == "__main__":
    main()
