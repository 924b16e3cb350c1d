"""The stored BPE run of Chapter 6's subword page: vocabulary size against length and unknown words.

    .venv/bin/python benchmarks/bpe_kjv.py

BPE (`seqmodels.bpe.train_bpe`) on the word counts of the KJV's training split
(`seqmodels.data.kjv_sentences("train")`, the book's lower-cased word and punctuation tokens), for
vocabularies of 500, 1,000, 2,000, 4,000 and 8,000 symbols (merges = size minus the initial
symbols, so a size counts characters, suffixed characters and merged symbols). On the test split,
per size: ``tokens_per_word`` (mean symbols per word), ``tokens_per_verse`` (mean symbols per verse),
``unknown_word_rate`` (test words holding a character never seen in training, hence ``<unk>``) and
``split_word_rate`` (test words encoded as more than one symbol). Beside them the word vocabularies
of the book (training words seen at least ``min_count`` = 1 and 2 times; ``load_kjv`` uses 2) with
their test unknown-word rates. Oracle: HF ``tokenizers``' ``BpeTrainer`` (``end_of_word_suffix
"</w>"``, ``min_frequency`` 0, no alphabet limit) on the same training words: ``hf_pinned`` gives
the trainer our initial symbols as special tokens in our id order (so HF's tie-break by ids sees the
same ids) and compares the first 500 merges and all 8,000-size merges; ``hf_unpinned`` is HF with
its own ids (suffixed characters numbered in hash-map order, which changes between processes) for
the first 500 merges. ``hf_encoding_equal`` compares the encodings of every distinct test word with
known characters under the 8,000-symbol model. One thread; writes lib/seqmodels/results/bpe_kjv.json.
"""

from __future__ import annotations

import json
from collections import Counter
from time import perf_counter

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from seqmodels.bpe import BPE, EOW, UNK, train_bpe
from seqmodels.data import kjv_sentences
from seqmodels.results import save_result, where_measured
from seqmodels.vocab import Vocabulary

SIZES = (500, 1000, 2000, 4000, 8000)


def hf_merges(sentences, vocab_size: int, special: list[str]) -> list[tuple[str, str]]:
    """HF BpeTrainer's merges on the sentences' words (special tokens first in its ids)."""
    tokenizer = Tokenizer(models.BPE(end_of_word_suffix=EOW))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=0,
        special_tokens=special,
        end_of_word_suffix=EOW,
        show_progress=False,
    )
    tokenizer.train_from_iterator((" ".join(s) for s in sentences), trainer)
    return [tuple(m) for m in json.loads(tokenizer.to_str())["model"]["merges"]]


def hf_encode(bpe: BPE, words: list[str]) -> list[str]:
    """HF's BPE model holding our symbols and merges, applied to `words`."""
    vocab = {s: i for i, s in enumerate(bpe.symbols)}
    tokenizer = Tokenizer(models.BPE(vocab, list(bpe.merges), end_of_word_suffix=EOW))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer.encode(" ".join(words)).tokens


def main() -> None:
    torch.set_num_threads(1)
    start = perf_counter()
    train, test = kjv_sentences("train"), kjv_sentences("test")
    counts = Counter(w for s in train for w in s)
    test_words = [w for s in test for w in s]
    n_initial = train_bpe(counts, 0).n_initial
    result = {
        "script": "benchmarks/bpe_kjv.py",
        "train_words": sum(counts.values()),
        "train_word_types": len(counts),
        "test_words": len(test_words),
        "test_verses": len(test),
        "initial_symbols": n_initial,
        "subwords": {},
        "words": {},
    }
    for min_count in (1, 2):
        vocab = Vocabulary.build(train, min_count)
        result["words"][str(min_count)] = {
            "vocabulary": len(vocab),
            "unknown_word_rate": round(
                sum(w not in vocab for w in test_words) / len(test_words), 5
            ),
            "tokens_per_verse": round(len(test_words) / len(test), 3),
        }
    for size in SIZES:
        t0 = perf_counter()
        bpe = train_bpe(counts, size - n_initial)
        seconds = perf_counter() - t0
        encoded = [bpe.encode(w) for w in test_words]
        n_symbols = sum(len(e) for e in encoded)
        result["subwords"][str(size)] = {
            "merges": len(bpe.merges),
            "symbols": len(bpe.symbols),
            "tokens_per_word": round(n_symbols / len(test_words), 4),
            "tokens_per_verse": round(n_symbols / len(test), 3),
            "unknown_word_rate": round(
                sum(any(UNK in s for s in e) for e in encoded) / len(test_words), 5
            ),
            "split_word_rate": round(sum(len(e) > 1 for e in encoded) / len(test_words), 4),
            "seconds": round(seconds, 2),
        }
        print(size, result["subwords"][str(size)], flush=True)
    pinned = list(bpe.symbols[:n_initial])
    first = list(bpe.merges[:500])
    hf_all = hf_merges(train, len(bpe.symbols), pinned)
    hf_free = hf_merges(train, n_initial + 600, [])
    known = sorted({w for w in test_words if set(w) <= bpe.alphabet})
    result["hf_pinned_first_500_equal"] = hf_all[:500] == first
    result["hf_pinned_all_equal"] = hf_all == list(bpe.merges)
    result["hf_pinned_merges_compared"] = len(bpe.merges)
    result["hf_unpinned_first_500_equal"] = hf_free[:500] == first
    result["hf_encoding_equal"] = hf_encode(bpe, known) == bpe.encode_words(known)
    result["hf_encoding_words"] = len(known)
    result["seconds"] = round(perf_counter() - start, 1)
    result["measured_on"] = where_measured(torch.device("cpu"))
    print({k: v for k, v in result.items() if k.startswith("hf")}, flush=True)
    print("wrote", save_result("bpe_kjv", result))


if __name__ == "__main__":
    main()
