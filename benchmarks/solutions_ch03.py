"""Chapter 3's worked solutions, Exercises 4–6: runs too long for the solutions page.

    .venv/bin/python benchmarks/solutions_ch03.py       # about 2 minutes on one thread

- ``tbptt``: the truncated-BPTT table of the chapter (2,000 training and 1,000 held-out sentences
  as one stream, RNN with embedding 16 and hidden 32, Adam at 1e-2, batches of 16 rows, 4 passes,
  windows 2, 4, 8, 32) repeated for d = 1, 3 and 12, with the number-blind line and the bound.
- ``mixture``: the Kneser–Ney 4-gram model and the RNN language model (m = 64, q = 128, batches of
  32 verses, Adam at 3e-3, seed 0) on the same wall-clock budget — the seconds the 4-gram model
  takes to fit — and their mixture, λ chosen on every fifth validation verse, scored on the test
  split.
- ``reversed``: the last-state translation classifier of the chapter (embedding 32, hidden 64,
  120 steps of 64 verses, seeds 11 and 12) trained on verses read forwards and reversed; test
  accuracy by verse length, and where in a verse the words that mark a translation stand.

Writes book/instructor/results/solutions_ch03.json. One thread.
"""

from __future__ import annotations

import math
import time
from collections import Counter

import torch
import torch.nn.functional as F

from seqmodels.data import kjv_web_pairs, load_kjv
from seqmodels.ngram import NGramLM
from seqmodels.results import save_result, where_measured
from seqmodels.rnn import RNNLM, sentence_batch, train_sentence_lm, train_truncated_bptt
from seqmodels.rnn_tasks import SequenceClassifier, predict, train_labelled
from seqmodels.seeding import seed_everything
from seqmodels.synthetic import AgreementLanguage
from seqmodels.vocab import Vocabulary

WINDOWS, PASSES = (2, 4, 8, 32), 4


def share_in_one_window(stream: torch.Tensor, lang: AgreementLanguage, k: int) -> float:
    """Share of training sentences whose subject and verb input fall in one window of k tokens
    (batches of 16 rows), as the chapter computes it."""
    batch_size = 16
    per_row, d = (len(stream) - 1) // batch_size, lang.distance
    starts = range(0, per_row * batch_size, lang.tokens_per_sentence)
    cols = [p % per_row for p in starts if p % per_row + d < per_row]
    return sum(c // k == (c + d) // k for c in cols) / len(cols)


def tbptt_runs(d: int) -> dict:
    lang = AgreementLanguage(distance=d)
    g = seed_everything(2)
    train_stream = lang.stream(lang.sample(2_000, g))
    test_stream = lang.stream(lang.sample(1_000, g))
    pi = lang.p_plural
    binary = -pi * math.log(pi) - (1 - pi) * math.log(1 - pi)
    out = {
        "bound": lang.perplexity_bound(),
        "blind": math.exp(lang.entropy_rate() + binary / lang.tokens_per_sentence),
        "windows": {},
    }
    for k in WINDOWS:
        seed_everything(3)
        model = RNNLM(len(lang.vocab), embed_dim=16, hidden_dim=32, core="torch")
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(PASSES):
            train_truncated_bptt(model, train_stream, optimizer, batch_size=16, window=k)
        with torch.no_grad():
            logits, _ = model(test_stream[None, :-1])
            loss = F.cross_entropy(logits[0], test_stream[1:]).item()
        out["windows"][str(k)] = {
            "perplexity": round(math.exp(loss), 4),
            "in_one_window": round(share_in_one_window(train_stream, lang, k), 4),
        }
        print("tbptt", d, k, out["windows"][str(k)], flush=True)
    out["bound"], out["blind"] = round(out["bound"], 4), round(out["blind"], 4)
    return out


@torch.no_grad()
def rnn_token_probs(
    model: RNNLM, sentences: list[list[int]], batch_size: int = 256
) -> torch.Tensor:
    """p(w_t | <s> w_1..w_{t-1}) of every predicted token, sentence by sentence, </s> included:
    the order of `NGramLM.token_probs`."""
    model.eval()
    out = []
    for start in range(0, len(sentences), batch_size):
        batch = sentence_batch(sentences[start : start + batch_size])
        logits, _ = model(batch.inputs, lengths=batch.lengths)
        logp = logits.double().log_softmax(-1).gather(-1, batch.targets[..., None])[..., 0]
        out.append(logp[batch.mask].exp())  # row-major: sentence by sentence, in order
    return torch.cat(out)


def mixture_run() -> dict:
    corpus = load_kjv(min_count=2)
    V = len(corpus.vocab)  # noqa: N806
    valid_sample = corpus.validation[::5]
    start = time.perf_counter()
    kn4 = NGramLM(4, V, smoothing="kneser-ney").fit(corpus.train)
    budget = time.perf_counter() - start
    # the RNN's steps for the same seconds, from the time of 20 steps of a throw-away model
    seed_everything(0)
    probe = RNNLM(V, embed_dim=64, hidden_dim=128, core="torch")
    timing = train_sentence_lm(
        probe, corpus.train, None, steps=20, batch_size=32, lr=3e-3, generator=seed_everything(1)
    )
    steps = max(1, round(budget / (timing.seconds / 20)))
    seed_everything(0)
    rnn = RNNLM(V, embed_dim=64, hidden_dim=128, core="torch")
    history = train_sentence_lm(
        rnn, corpus.train, None, steps=steps, batch_size=32, lr=3e-3, generator=seed_everything(0)
    )
    p = {
        split: (kn4.token_probs(sents), rnn_token_probs(rnn, sents))
        for split, sents in (("valid", valid_sample), ("test", corpus.test))
    }

    def mix_ppl(lam: float, split: str) -> float:
        p_kn, p_rnn = p[split]
        return math.exp(-(lam * p_rnn + (1 - lam) * p_kn).log().mean().item())

    lams = [i / 20 for i in range(21)]
    best = min(lams, key=lambda lam: mix_ppl(lam, "valid"))
    out = {
        "kn_order": 4,
        "kn_fit_seconds": round(budget, 2),
        "rnn_steps": steps,
        "rnn_seconds": round(history.seconds, 2),
        "rnn_tokens_seen": history.tokens_seen,
        "train_tokens": corpus.n_tokens("train"),
        "lambda": best,
        "test_perplexity": {
            "kn": round(mix_ppl(0.0, "test"), 3),
            "rnn": round(mix_ppl(1.0, "test"), 3),
            "mixture": round(mix_ppl(best, "test"), 3),
        },
        "test_tokens": len(p["test"][0]),
    }
    print("mixture", out, flush=True)
    return out


def reversed_run() -> dict:
    pairs = {split: kjv_web_pairs(split) for split in ("train", "test")}
    both = Vocabulary.build([w for _, *p in pairs["train"] for w in p], min_count=2)
    data = {
        s: [(both.encode(w), label) for _, *p in pairs[s] for label, w in enumerate(p)]
        for s in ("train", "test")
    }
    labels = torch.tensor([y for _, y in data["test"]])
    lengths = torch.tensor([len(ids) for ids, _ in data["test"]])
    groups = {
        "<= 20": lengths <= 20,
        "21-40": (lengths > 20) & (lengths <= 40),
        "> 40": lengths > 40,
    }
    out = {"test_verses": len(data["test"]), "accuracy": {}}
    for direction in ("forward", "reversed"):
        flip = (lambda ids: ids[::-1]) if direction == "reversed" else (lambda ids: ids)
        train = [(flip(ids), y) for ids, y in data["train"]]
        test = [(flip(ids), y) for ids, y in data["test"]]
        seed_everything(11)
        model = SequenceClassifier(
            2, pooling="last", vocab_size=len(both), embed_dim=32, hidden_dim=64
        )
        train_labelled(
            model, train, steps=120, batch_size=64, lr=1e-2, generator=seed_everything(12)
        )
        right = torch.tensor(predict(model, test)) == labels
        out["accuracy"][direction] = {
            "all": round(right.double().mean().item(), 4),
            **{k: round(right[g].double().mean().item(), 4) for k, g in groups.items()},
        }
        print("reversed", direction, out["accuracy"][direction], flush=True)
    # markers: words seen >= 50 times in training, >= 95 % of them in one translation
    counts = [Counter(), Counter()]
    for ids, y in data["train"]:
        counts[y].update(ids)
    markers = {}
    for w in set(counts[0]) | set(counts[1]):
        total = counts[0][w] + counts[1][w]
        if total >= 50 and w > 2:
            share = counts[0][w] / total
            if share >= 0.95 or share <= 0.05:
                markers[w] = 0 if share >= 0.95 else 1
    out["markers"] = {
        name: [
            both.itos[w]
            for w, _ in sorted(
                ((w, counts[y][w]) for w, lab in markers.items() if lab == y), key=lambda t: -t[1]
            )[:12]
        ]
        for y, name in ((0, "kjv"), (1, "web"))
    }
    # where the first and the last marker of each test verse stand (relative position 0 .. 1)
    first, last, none = [], [], 0
    for ids, _ in data["test"]:
        where = [i for i, w in enumerate(ids) if w in markers]
        if not where:
            none += 1
            continue
        n = max(len(ids) - 1, 1)
        first.append(where[0] / n)
        last.append(where[-1] / n)
    first_t, last_t = torch.tensor(first), torch.tensor(last)
    out["verses_without_marker"] = round(none / len(data["test"]), 4)
    out["first_marker_in_first_quarter"] = round((first_t <= 0.25).double().mean().item(), 4)
    out["last_marker_in_last_quarter"] = round((last_t >= 0.75).double().mean().item(), 4)
    out["median_first_marker"] = round(first_t.median().item(), 4)
    opener = {y: Counter(ids[0] for ids, lab in data["train"] if lab == y and ids) for y in (0, 1)}
    out["first_word"] = {
        name: [
            [both.itos[w], round(c / sum(opener[y].values()), 4)]
            for w, c in opener[y].most_common(3)
        ]
        for y, name in ((0, "kjv"), (1, "web"))
    }
    print("reversed", {k: v for k, v in out.items() if k != "accuracy"}, flush=True)
    return out


def main() -> None:
    torch.set_num_threads(1)
    result = {
        "script": "benchmarks/solutions_ch03.py",
        "tbptt": {
            "passes": PASSES,
            "train_sentences": 2000,
            "test_sentences": 1000,
            "runs": {str(d): tbptt_runs(d) for d in (1, 3, 12)},
        },
        "mixture": mixture_run(),
        "reversed": reversed_run(),
        "measured_on": where_measured(torch.device("cpu")),
    }
    print("wrote", save_result("solutions_ch03", result))


if __name__ == "__main__":
    main()
