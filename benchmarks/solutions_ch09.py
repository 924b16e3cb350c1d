"""The stored run behind Chapter 9's worked solution to Exercise 4 (the instructor's edition).

    .venv/bin/python benchmarks/solutions_ch09.py     # two trainings and 24 sweeps of sampling

Measured on one thread with the 2-core machine otherwise idle: 7 s in all.

Chapter 9's agreement-language GRU (``RNNLM(V, embed_dim=16, hidden_dim=18, core="gru")``, seed 7,
batches seed 8, Adam at 1e-2, batches of 64, on Chapter 5's samples for d = 6), trained for 400
steps (the page's budget) and for 100; for each top-p value of ``P_VALUES`` (1 is ancestral
sampling) 2,000 sentences of at most 12 tokens are drawn with seed 1, as the page draws them, and
scored as the page scores them: the share of impossible sentences and the total variation distance
between their word frequencies and those of the 2,000 held-out sentences.
Writes book/instructor/results/solutions_ch09.json.
"""

from __future__ import annotations

import math
import time

import torch

from seqmodels.decoding import lm_next_log_probs, ngram_counts, sample_sequences, total_variation
from seqmodels.results import save_result, where_measured
from seqmodels.rnn import RNNLM, sentence_nll, train_sentence_lm
from seqmodels.seeding import seed_everything
from seqmodels.synthetic import AgreementLanguage

SCRIPT = "benchmarks/solutions_ch09.py"
P_VALUES = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.99, 1.0)
N = 2_000


def main() -> None:
    torch.set_num_threads(1)
    d = 6
    lang = AgreementLanguage(distance=d)
    g = seed_everything(100 + d)
    train6, test6 = lang.sample(20_000, g), lang.sample(2_000, g)
    true_unigrams = ngram_counts(test6, 1)
    models = []
    for steps in (400, 100):
        seed_everything(7)
        gru = RNNLM(len(lang.vocab), embed_dim=16, hidden_dim=18, core="gru")
        start = time.perf_counter()
        train_sentence_lm(gru, train6, test6[:200], steps=steps, batch_size=64, lr=1e-2,
                          generator=seed_everything(8), eval_every=steps)  # fmt: skip
        total, n = sentence_nll(gru, test6)
        f = lm_next_log_probs(gru)
        rows = []
        for p in P_VALUES:
            options = {} if p == 1.0 else {"top_p": p}
            drawn = sample_sequences(f, N, 12, seed_everything(1), **options)
            possible = sum(lang.log_prob(s) > -math.inf for s in drawn)
            rows.append({
                "p": p,
                "impossible": 1 - possible / N,
                "tv": total_variation(ngram_counts(drawn, 1), true_unigrams),
            })  # fmt: skip
            print(steps, rows[-1], flush=True)
        models.append({
            "steps": steps,
            "test_perplexity": math.exp(total / n),
            "seconds": round(time.perf_counter() - start, 1),
            "sweep": rows,
        })  # fmt: skip
    result = {
        "script": SCRIPT,
        "command": f".venv/bin/python {SCRIPT}",
        "task": "agreement language, d = 6 (Chapter 5's samples), Chapter 9's GRU",
        "perplexity_bound": lang.perplexity_bound(),
        "samples": N,
        "max_len": 12,
        "p_values": list(P_VALUES),
        "models": models,
        "measured_on": where_measured(torch.device("cpu")),
        "note": "wall-clock seconds measured on one thread while other jobs shared the CPU",
    }
    print("wrote", save_result("solutions_ch09", result))


if __name__ == "__main__":
    main()
