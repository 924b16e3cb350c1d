"""Chapter 1's worked solutions, Exercise 5: the Kneser–Ney column of Table 1.x at two vocabularies.

    .venv/bin/python benchmarks/solutions_ch01.py       # about 20 s on one thread

Refits the Kneser–Ney models of orders 1–4 (D = 0.75) of Chapter 1's table on the King James Bible
built with ``load_kjv(min_count=2)`` (the chapter's vocabulary) and with ``load_kjv(min_count=5)``,
and scores both on the same test verses. Beside the perplexities it stores what makes them
incomparable: each vocabulary's size, the share of test tokens that are ``<unk>``, and the mean
log-probability of the 4-gram models on the test tokens that both vocabularies keep as words.
Writes book/instructor/results/solutions_ch01.json. One thread.
"""

from __future__ import annotations

import math

import torch

from seqmodels.data import load_kjv
from seqmodels.ngram import NGramLM
from seqmodels.results import save_result, where_measured

ORDERS = (1, 2, 3, 4)
MIN_COUNTS = (2, 5)


def main() -> None:
    torch.set_num_threads(1)
    result = {
        "script": "benchmarks/solutions_ch01.py",
        "orders": list(ORDERS),
        "discount": 0.75,
        "vocabularies": {},
        "measured_on": where_measured(torch.device("cpu")),
    }
    token_logp = {}
    for min_count in MIN_COUNTS:
        corpus = load_kjv(min_count=min_count)
        V = len(corpus.vocab)  # noqa: N806
        unk = corpus.vocab.unk
        targets = torch.tensor([w for s in corpus.test for w in [*s, corpus.vocab.eos]])
        perplexities = {}
        for n in ORDERS:
            lm = NGramLM(n, V, smoothing="kneser-ney").fit(corpus.train)
            perplexities[str(n)] = round(lm.perplexity(corpus.test), 4)
            print(min_count, n, perplexities[str(n)], flush=True)
        token_logp[min_count] = (lm.token_probs(corpus.test).log(), targets == unk)
        result["vocabularies"][str(min_count)] = {
            "vocabulary_size": V,
            "test_tokens": len(targets),
            "test_unk_share": round((targets == unk).double().mean().item(), 6),
            "kn_test_perplexity": perplexities,
        }
    # the test tokens that are words (not <unk>) in both vocabularies: the same events for both
    both_words = ~token_logp[2][1] & ~token_logp[5][1]
    result["shared_word_tokens"] = int(both_words.sum())
    for min_count in MIN_COUNTS:
        logp = token_logp[min_count][0][both_words]
        result["vocabularies"][str(min_count)]["kn4_shared_word_perplexity"] = round(
            math.exp(-logp.mean().item()), 4
        )
    print("wrote", save_result("solutions_ch01", result))


if __name__ == "__main__":
    main()
