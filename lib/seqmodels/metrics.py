r"""Cross-entropy and perplexity, the yardsticks of every chapter.

For a held-out text of $N$ predicted tokens, the per-token cross-entropy is

$$H = -\frac{1}{N}\sum_{t=1}^{N} \log p(x_t \mid x_{<t}) \quad\text{(nats per token)},$$

and perplexity is $\mathrm{PPL} = e^{H} = 2^{H / \ln 2}$: the same number whether the log is natural
(nats) or base 2 (bits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

NATS_PER_BIT = math.log(2.0)


def cross_entropy(total_nll: float, n_tokens: int) -> float:
    r"""Eq. (eq-perplexity): the per-token cross-entropy $H$ in nats of a text of `n_tokens`
    predicted tokens.

    `total_nll` is the text's negative log-likelihood summed in nats, $-\sum_t \ln p(w_t \mid
    w_{<t})$.
    """
    _check_total(total_nll, n_tokens)
    return total_nll / n_tokens


def _check_total(total_nll: float, n_tokens: int) -> None:
    """Refuse a count of tokens below 1, or a total NLL that is negative or NaN."""
    if n_tokens <= 0:
        raise ValueError(f"expected a positive number of tokens, got {n_tokens}")
    if total_nll < 0 or math.isnan(total_nll):
        raise ValueError(f"expected a non-negative total negative log-likelihood, got {total_nll}")


def perplexity(total_nll: float, n_tokens: int) -> float:
    """Eq. (eq-perplexity): $e^H$ of a text of `n_tokens` tokens; ``inf`` when some token had
    probability zero.
    """
    return math.exp(cross_entropy(total_nll, n_tokens))


def bits(nats: float) -> float:
    """Convert nats to bits."""
    return nats / NATS_PER_BIT


def entropy(probs: torch.Tensor | Sequence[float]) -> float:
    r"""Entropy $-\sum_i p_i \log p_i$ in nats of a distribution given as probabilities (zeros allowed)."""
    p = torch.as_tensor(probs, dtype=torch.float64)
    if p.ndim != 1 or p.numel() == 0:
        raise ValueError(
            f"expected a 1-D, non-empty vector of probabilities, got shape {tuple(p.shape)}"
        )
    if (p < 0).any():
        raise ValueError("probabilities must be non-negative")
    total = float(p.sum())
    if not math.isclose(total, 1.0, rel_tol=0, abs_tol=1e-9):
        raise ValueError(f"probabilities must sum to 1, got {total:.12g}")
    nz = p[p > 0]
    return float(-(nz * nz.log()).sum())


def perplexity_of_distribution(probs: torch.Tensor | Sequence[float]) -> float:
    """The perplexity of a model that draws every token i.i.d. from `probs` and is scored on its own draws.

    This is ``exp(entropy)``: the size of a uniform choice that would be equally hard (the branching factor).
    """
    return math.exp(entropy(probs))


# ---- sequence-to-sequence metrics: edit distance, phoneme error rate, BLEU and chrF -------------


def edit_distance(hypothesis: Sequence[str], reference: Sequence[str]) -> int:
    """Levenshtein distance between two token sequences (insertion, deletion, substitution cost 1),
    computed by RapidFuzz."""
    from rapidfuzz.distance import Levenshtein

    return Levenshtein.distance(list(hypothesis), list(reference))


def _closest(hypothesis: Sequence[str], references: Sequence[Sequence[str]]) -> tuple[int, int]:
    if not references:
        raise ValueError("expected at least one reference for every hypothesis, got none")
    return min((edit_distance(hypothesis, r), len(r)) for r in references)


def phoneme_error_rate(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]
) -> float:
    r"""Corpus phoneme error rate: $\sum_i d(\hat y_i, y_i) / \sum_i |y_i|$, with $d$ the edit
    distance and $y_i$ the reference pronunciation closest to $\hat y_i$ (a word may have several).

    `references[i]` lists word $i$'s pronunciations. A rate, not capped at 1 (insertions count)."""
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(
            f"expected as many hypotheses as references (at least one), "
            f"got {len(hypotheses)} and {len(references)}"
        )
    pairs = [_closest(h, refs) for h, refs in zip(hypotheses, references, strict=True)]
    return sum(d for d, _ in pairs) / max(sum(n for _, n in pairs), 1)


def word_accuracy(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]]
) -> float:
    """The share of words whose hypothesis equals one of their reference pronunciations."""
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(
            f"expected as many hypotheses as references (at least one), "
            f"got {len(hypotheses)} and {len(references)}"
        )
    hits = sum(
        any(list(h) == list(r) for r in refs)
        for h, refs in zip(hypotheses, references, strict=True)
    )
    return hits / len(hypotheses)


def bleu(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> float:
    """Corpus BLEU (0–100) by sacrebleu, one reference per sentence, on the tokens joined by spaces
    (the text is already tokenized and lower-cased, so sacrebleu's tokenizer is turned off)."""
    import sacrebleu

    hyps, refs = _joined(hypotheses, references)
    return sacrebleu.corpus_bleu(hyps, [refs], tokenize="none", force=True).score


def chrf(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> float:
    """Corpus chrF (0–100, character 6-grams, β = 2) by sacrebleu, on the tokens joined by spaces."""
    import sacrebleu

    hyps, refs = _joined(hypotheses, references)
    return sacrebleu.corpus_chrf(hyps, [refs]).score


def _joined(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]]
) -> tuple[list[str], list[str]]:
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(
            f"expected as many hypotheses as references (at least one), "
            f"got {len(hypotheses)} and {len(references)}"
        )
    return [" ".join(h) for h in hypotheses], [" ".join(r) for r in references]
