"""Chapter 6's exercises 3 to 5, run in full for the instructor's worked solutions.

    .venv/bin/python benchmarks/solutions_ch06.py

Ex. 3 (scheduled sampling): the chapter's initial-state G2P model (embedding 32, d_h = 128, model
seed 0, batch seed 100, Adam at 3e-3, batches of 64, 400 steps, clipped at 1) trained one decoder
step at a time (`Seq2Seq.decode_steps`), each input token replaced by the model's own argmax with a
probability that rises linearly from 0 to 0.25 (coins from generator seed 5); against the chapter's
teacher-forced model, the error rate by output position fed the reference prefix and free-running
(greedy) on the test words with one pronunciation, and the teacher-forced test loss.
Ex. 4 (reversed sources): the chapter's reversal model (ReversalTask(10, noise 0.3), seed 2 samples,
embedding 32, d_h = 64, model seed 0, batch seed 1, 600 steps) on reversed sources (a copy task),
and the G2P model on reversed letters; exact match by length and error rate by output position.
Ex. 5 (the bottleneck's size): the reversal model with d_h in {16, 32, 64, 128, 256}, 600 steps
each: exact match by length.
Writes book/instructor/results/solutions_ch06.json. One thread (the machine is shared).
"""

from __future__ import annotations

import math
from time import perf_counter

import torch
from torch import nn

from seqmodels.data import load_g2p
from seqmodels.device import set_deterministic
from seqmodels.results import save_result, where_measured
from seqmodels.rnn import masked_sequence_nll
from seqmodels.seeding import seed_everything
from seqmodels.seq2seq import (
    Seq2Seq,
    errors_by_position,
    pair_batch,
    pair_nll,
    train_seq2seq,
    translate,
)
from seqmodels.synthetic import ReversalTask

G2P_STEPS, REV_STEPS, MIN_WORDS = 400, 600, 200
WIDTHS = (16, 32, 64, 128, 256)


def train_scheduled(model, pairs, valid, steps, eps_max, generator, coins):
    """`train_seq2seq`'s loop, the decoder run one step at a time; each step's input is the
    model's own argmax of the step before with probability eps (0 → eps_max over training)."""
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        model.train()
        eps = eps_max * step / (steps - 1)
        idx = torch.randint(len(pairs), (64,), generator=generator).tolist()
        batch = pair_batch([pairs[i] for i in idx])
        h, memory = model.start(batch.src, batch.src_lengths, batch.src_mask)
        token, outputs = batch.tgt_in[:, :1], []
        for t in range(batch.tgt_in.shape[1]):
            if t > 0:
                own = outputs[-1].argmax(-1)  # (batch, 1), no gradient through argmax
                flip = torch.rand(own.shape, generator=coins) < eps
                token = torch.where(flip, own, batch.tgt_in[:, t : t + 1])
            logits, h, _ = model.decode_steps(token, h, memory)
            outputs.append(logits)
        loss = masked_sequence_nll(torch.cat(outputs, 1), batch.tgt_out, batch.tgt_mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    total, n = pair_nll(model, valid)
    return total / n


def by_position(model, single) -> dict:
    """Error rate by output position, fed the reference prefix and free-running, on `single`."""
    model.eval()
    forced = []
    with torch.no_grad():
        for i in range(0, len(single), 512):
            chunk = single[i : i + 512]
            best = model(pair_batch(chunk))[0].argmax(-1)
            forced += [row[: len(t)].tolist() for row, (_, t) in zip(best, chunk, strict=True)]
    free = translate(model, [s for s, _ in single], max_len=30).outputs
    targets = [t for _, t in single]
    rate_forced, counts = errors_by_position(forced, targets)
    rate_free, _ = errors_by_position(free, targets)
    shown = int((counts >= MIN_WORDS).sum())
    total, n = pair_nll(model, single)
    wrong = sum(o != t for o, t in zip(free, targets, strict=True))
    return dict(
        forced=rate_forced[:shown].tolist(),
        free=rate_free[:shown].tolist(),
        words=counts[:shown].tolist(),
        test_loss=total / n,
        word_error=wrong / len(targets),
    )


def g2p_model(letters, phonemes) -> Seq2Seq:
    seed_everything(0)
    return Seq2Seq(len(letters), len(phonemes), 32, 128, context=("init",))


def g2p(result: dict) -> None:
    data = load_g2p()
    train, valid = data.pairs("train"), data.pairs("validation")[::50]
    test_words = sorted(data.words("test"), key=lambda w: len(w[0]))
    single = [(s, prons[0]) for s, prons in test_words if len(prons) == 1]
    runs = {}
    base = g2p_model(data.letters, data.phonemes)
    train_seq2seq(
        base,
        train,
        valid,
        steps=G2P_STEPS,
        batch_size=64,
        lr=3e-3,
        generator=seed_everything(100),
        eval_every=G2P_STEPS,
    )
    runs["teacher forcing"] = by_position(base, single)
    sched = g2p_model(data.letters, data.phonemes)
    train_scheduled(
        sched, train, valid, G2P_STEPS, 0.25, seed_everything(100), torch.Generator().manual_seed(5)
    )
    runs["scheduled sampling"] = by_position(sched, single)
    result["ex3_scheduled"] = dict(
        eps_max=0.25, steps=G2P_STEPS, min_words=MIN_WORDS, test_words=len(single), runs=runs
    )
    rev = g2p_model(data.letters, data.phonemes)
    flipped = [(s[::-1], t) for s, t in train]
    train_seq2seq(
        rev,
        flipped,
        [(s[::-1], t) for s, t in valid],
        steps=G2P_STEPS,
        batch_size=64,
        lr=3e-3,
        generator=seed_everything(100),
        eval_every=G2P_STEPS,
    )
    result["ex4_g2p"] = dict(
        forward=runs["teacher forcing"],
        reversed=by_position(rev, [(s[::-1], t) for s, t in single]),
    )


def reversal_scores(model, test) -> dict:
    exact, first, last = [], [], []
    for pairs in test.values():
        out = translate(model, [s for s, _ in pairs], max_len=40).outputs
        refs = [t for _, t in pairs]
        exact.append(sum(o == r for o, r in zip(out, refs, strict=True)) / len(pairs))
        rates, _ = errors_by_position(out, refs)
        first.append(rates[0].item())
        last.append(rates[-1].item())
    n = max(test)
    out = translate(model, [s for s, _ in test[n]], max_len=40).outputs
    rates, _ = errors_by_position(out, [t for _, t in test[n]])
    return dict(
        exact_by_length=exact,
        error_first_by_length=first,
        error_last_by_length=last,
        error_by_position_longest=rates.tolist(),
    )


def reversal(result: dict) -> None:
    task = ReversalTask(n_symbols=10, noise=0.3)
    g = seed_everything(2)
    train, valid = task.sample(20_000, 1, 20, g), task.sample(200, 1, 20, g)
    test = {n: task.sample(100, n, n, g) for n in range(1, 21)}
    V = len(task.vocab)

    def run(hidden, flip=False):
        f = (lambda s: s[::-1]) if flip else (lambda s: s)
        seed_everything(0)
        model = Seq2Seq(V, V, embed_dim=32, hidden_dim=hidden)
        h = train_seq2seq(
            model,
            [(f(s), t) for s, t in train],
            [(f(s), t) for s, t in valid],
            steps=REV_STEPS,
            batch_size=64,
            lr=3e-3,
            generator=seed_everything(1),
            eval_every=REV_STEPS,
        )
        scores = reversal_scores(model, {n: [(f(s), t) for s, t in p] for n, p in test.items()})
        return dict(
            hidden=hidden,
            parameters=sum(p.numel() for p in model.parameters()),
            valid_loss=h.eval_loss[-1],
            seconds=round(h.seconds, 1),
            **scores,
        )

    widths = {str(w): run(w) for w in WIDTHS}
    result["ex5_widths"] = dict(
        steps=REV_STEPS, runs=widths, bits_per_symbol=math.log2(task.n_symbols)
    )
    result["ex4_reversal"] = dict(forward=widths["64"], reversed=run(64, flip=True))


def main() -> None:
    torch.set_num_threads(1)
    set_deterministic()
    start = perf_counter()
    result = {"script": "benchmarks/solutions_ch06.py"}
    for part in (reversal, g2p):
        t = perf_counter()
        part(result)
        print(part.__name__, f"{perf_counter() - t:.1f} s", flush=True)
    result["seconds"] = round(perf_counter() - start, 1)
    result["note"] = "wall-clock seconds measured on one thread while other jobs shared the CPU"
    result["measured_on"] = where_measured(torch.device("cpu"))
    print(save_result("solutions_ch06", result))


if __name__ == "__main__":
    main()
