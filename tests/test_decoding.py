"""seqmodels.decoding against exact enumeration, brute force and properties."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqmodels.decoding import (
    Hypothesis,
    beam_search,
    conditioned,
    distinct_n,
    exhaustive_search,
    filter_logits,
    from_distribution,
    greedy_search,
    lm_next_log_probs,
    ngram_counts,
    repeated_ngram_share,
    sample,
    sample_sequences,
    seq2seq_next_log_probs,
    sequence_distribution,
    sequence_log_prob,
    table_next_log_probs,
    temperature,
    top_k_filter,
    top_p_filter,
    total_variation,
)
from seqmodels.rnn import RNNLM
from seqmodels.seq2seq import Seq2Seq, translate
from seqmodels.synthetic import AgreementLanguage


def random_table(V: int, depth: int, seed: int, scale: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*([V] * (depth + 1)), generator=g, dtype=torch.float64)


def brute_sequences(table: torch.Tensor, max_len: int, eos: int = 1, alpha: float = 0.0):
    """Every sequence of <= max_len tokens ending in eos, its log-prob as a product of the table's
    softmaxes (written out with math.log/exp, not torch's log_softmax)."""
    V = table.shape[-1]
    others = [v for v in range(V) if v != eos]
    out = []
    for length in range(max_len):
        for y in itertools.product(others, repeat=length):
            total = 0.0
            for t, token in enumerate((*y, eos)):
                row = table[(*y[:t], *[0] * (table.ndim - 1 - t))].tolist()
                total += row[token] - math.log(sum(math.exp(z) for z in row))
            out.append((list(y), total, total / (length + 1) ** alpha))
    return sorted(out, key=lambda r: -r[2])


# ---- search --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("alpha", [0.0, 0.7, 1.0])
@pytest.mark.parametrize("V,max_len", [(3, 4), (4, 3)])
def test_full_width_beam_equals_exhaustive_and_brute_force(seed, alpha, V, max_len):
    table = random_table(V, max_len, seed)
    f = table_next_log_probs(table)
    exact = brute_sequences(table, max_len, alpha=alpha)
    beam = beam_search(f, V**max_len, max_len, alpha=alpha)
    every = exhaustive_search(f, max_len, alpha=alpha)
    assert len(beam) == len(every) == len(exact)
    for b, e, (y, lp, score) in zip(beam, every, exact, strict=True):
        assert b.tokens == e.tokens == y
        assert sequence_log_prob(f, y) == pytest.approx(lp, abs=1e-9)
        assert b.log_prob == pytest.approx(lp, abs=1e-9)
        assert b.score == pytest.approx(score, abs=1e-9) and e.score == pytest.approx(score)
    # the probabilities of all finished and unfinished sequences sum to 1
    assert sum(math.exp(lp) for _, lp, _ in exact) <= 1.0 + 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_beam_one_is_greedy(seed):
    table = random_table(5, 6, seed, scale=1.5)
    table[..., 1] += 1.0  # eos likely enough to finish
    f = table_next_log_probs(table)
    tokens, lp, finished = greedy_search(f, 6)
    beam = beam_search(f, 1, 6)
    if finished:
        assert beam == [Hypothesis(tokens, pytest.approx(lp), pytest.approx(lp))]
    else:
        assert beam == []


def test_beam_one_is_greedy_on_an_rnn_and_seq2seq_translate():
    torch.manual_seed(0)
    lm = RNNLM(7, 8, 16, core="gru")
    with torch.no_grad():
        lm.output.bias[1] += 2.0
    f = lm_next_log_probs(lm)
    tokens, lp, finished = greedy_search(f, 12)
    assert finished
    (best,) = beam_search(f, 1, 12)
    assert best.tokens == tokens and best.log_prob == pytest.approx(lp, abs=1e-5)
    # the step-function greedy decoder of Chapters 6-7 agrees with the prefix-function one
    torch.manual_seed(1)
    model = Seq2Seq(6, 7, 8, 16, attention="dot")
    sources = [[3, 4, 5], [5, 5], [4, 3, 3, 5]]
    ours = [greedy_search(seq2seq_next_log_probs(model, s), 10)[0] for s in sources]
    assert ours == translate(model, sources, max_len=10).outputs


def test_ties_go_to_the_earlier_hypothesis_and_lower_token():
    # uniform model over 4 tokens: every candidate ties
    f = table_next_log_probs(torch.zeros(4, 4, 4))
    hyps = beam_search(f, 3, 2)
    # step 1 keeps tokens 0, 1 (eos: finished []), 2 -> live [0], [2]; step 2 keeps [0]+0, [0]+1
    # (eos: [0] finished), [0]+2; all cut at max_len except [0]
    assert [h.tokens for h in hyps] == [[], [0]]
    assert greedy_search(f, 2)[0] == [0, 0]


def test_beam_edge_cases_and_errors():
    f = table_next_log_probs(random_table(3, 2, 0))
    assert beam_search(f, 2, 0) == [] and exhaustive_search(f, 0) == []
    eos_first = torch.full((3, 3), -5.0, dtype=torch.float64)
    eos_first[:, 1] = 5.0  # eos first, with probability ~1: the empty output
    assert [h.tokens for h in beam_search(table_next_log_probs(eos_first), 1, 1)] == [[]]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="beam_size"):
            beam_search(f, bad, 2)
    with pytest.raises(ValueError, match="max_len"):
        beam_search(f, 2, -1)
    with pytest.raises(ValueError, match="shape"):
        beam_search(lambda p: torch.zeros(len(p) + 1, 3), 2, 2)


def test_length_normalisation_prefers_longer_outputs():
    table = random_table(4, 5, 3)
    f = table_next_log_probs(table)
    raw = exhaustive_search(f, 5, alpha=0.0)[0]
    norm = exhaustive_search(f, 5, alpha=1.0)[0]
    assert len(norm.tokens) >= len(raw.tokens)
    assert norm.score == pytest.approx(norm.log_prob / (len(norm.tokens) + 1))


def test_conditioned_and_from_distribution():
    lang = AgreementLanguage(distance=1)
    f = from_distribution(lang.next_token_distribution)
    (best,) = beam_search(f, 1, 5)
    assert lang.log_prob(best.tokens) == pytest.approx(best.log_prob)
    noun = lang.noun_ids(True)[0]
    g = conditioned(f, [noun])
    out = greedy_search(g, 4)
    assert out[2] and lang.is_plural(out[0][-1])
    # the continuation's log-prob is the sentence's minus the opening noun's
    noun_lp = math.log(lang.next_token_distribution([])[noun])
    assert out[1] == pytest.approx(lang.log_prob([noun, *out[0]]) - noun_lp)


# ---- transforms ----------------------------------------------------------------------------------


def brute_top_k(row: list[float], k: int) -> set[int]:
    return {i for i, z in enumerate(row) if sum(w > z for w in row) < k}


def brute_top_p(row: list[float], p: float) -> set[int]:
    m = max(row)
    probs = [math.exp(z - m) for z in row]
    probs = [q / sum(probs) for q in probs]
    # walk the distinct probabilities from the largest; stop once the kept mass reaches p
    for value in sorted(set(probs), reverse=True):
        kept = {i for i, q in enumerate(probs) if q >= value}
        if sum(probs[i] for i in kept) >= p:
            return kept
    return set(range(len(row)))


logit_rows = st.lists(
    st.sampled_from([-3.0, -1.0, 0.0, 0.5, 1.0, 2.0]) | st.floats(-5, 5), min_size=1, max_size=9
)


@settings(max_examples=300, deadline=None)
@given(logit_rows, st.integers(1, 10))
def test_top_k_against_brute_force(row, k):
    out = top_k_filter(torch.tensor(row, dtype=torch.float64), k)
    kept = {i for i, z in enumerate(out.tolist()) if z != -math.inf}
    assert kept == brute_top_k(row, k)
    assert all(out[i] == row[i] for i in kept)
    assert len(kept) >= min(k, len(row))  # ties can only add tokens


@settings(max_examples=300, deadline=None)
@given(logit_rows, st.floats(0.01, 1.0))
def test_top_p_against_brute_force(row, p):
    out = top_p_filter(torch.tensor(row, dtype=torch.float64), p)
    kept = {i for i, z in enumerate(out.tolist()) if z != -math.inf}
    expected = brute_top_p(row, p)
    # float rounding may only matter when a cumulative mass lands within 1e-12 of p
    probs = torch.tensor(row, dtype=torch.float64).softmax(0)
    if all(abs(float(probs[probs > probs[i]].sum()) - p) > 1e-12 for i in range(len(row))):
        assert kept == expected
    assert int(torch.tensor(row, dtype=torch.float64).argmax()) in kept  # in the dtype filtered
    assert float(probs[list(kept)].sum()) >= p - 1e-12
    # tied tokens are kept or removed together
    for i, j in itertools.combinations(range(len(row)), 2):
        if row[i] == row[j]:
            assert (i in kept) == (j in kept)


def test_transforms_on_batches_and_edge_values():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 11, generator=g)
    for f in (lambda z: top_k_filter(z, 3), lambda z: top_p_filter(z, 0.8)):
        out = f(logits)
        assert out.shape == logits.shape and out.dtype == logits.dtype
        for idx in itertools.product(range(2), range(3)):
            assert torch.equal(out[idx], f(logits[idx]))
    assert torch.equal(top_k_filter(logits, 11), logits)
    assert torch.equal(top_p_filter(logits, 1.0), logits)
    # p = 1 keeps even a token whose share is below float64's resolution of the running sum
    far = torch.tensor([0.0, -40.0, -80.0, -800.0])
    assert torch.equal(top_p_filter(far, 1.0), far)
    assert top_p_filter(far, 0.5).isfinite().tolist() == [True, False, False, False]
    tie = torch.tensor([1.0, 3.0, 3.0, 0.0])
    assert top_k_filter(tie, 1).isfinite().tolist() == [False, True, True, False]
    assert top_p_filter(tie, 0.3).isfinite().tolist() == [False, True, True, False]
    assert top_p_filter(torch.tensor([0.0, 5.0, -1.0]), 1e-9).isfinite().tolist() == [
        False,
        True,
        False,
    ]
    for bad_k in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="k >= 1"):
            top_k_filter(tie, bad_k)
    for bad_p in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="p <= 1"):
            top_p_filter(tie, bad_p)
    for bad_t in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="temperature"):
            temperature(tie, bad_t)
    with pytest.raises(TypeError, match="floating-point"):
        top_k_filter(torch.tensor([1, 2]), 1)
    with pytest.raises(ValueError, match="NaN"):
        top_p_filter(torch.tensor([1.0, math.nan]), 0.5)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=2, max_size=8, unique=True))
def test_temperature_limits(row):
    z = torch.tensor(row, dtype=torch.float64)
    cold = temperature(z, 1e-4).softmax(0)
    gap = (z.max() - z).sort().values[1]  # the gap between the best and the runner-up
    if gap > 0.01:  # t -> 0: all mass on the argmax (greedy)
        assert int(cold.argmax()) == int(z.argmax()) and cold.max() > 1 - 1e-9
    hot = temperature(z, 1e6).softmax(0)
    assert torch.allclose(hot, torch.full_like(hot, 1 / len(row)), atol=1e-4)
    assert torch.equal(temperature(z, 1.0), z)


# ---- sampling ------------------------------------------------------------------------------------


def test_sample_is_inverse_cdf_with_one_uniform_per_row():
    logits = torch.tensor([[0.0, 1.0, 2.0], [2.0, -math.inf, 0.0]])
    probs = logits.double().softmax(-1)
    u = torch.rand(2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    expected = [int((probs[i].cumsum(0) <= u[i]).sum()) for i in range(2)]
    assert sample(logits, torch.Generator().manual_seed(5)).tolist() == expected
    assert sample(logits[0], torch.Generator().manual_seed(1)).shape == ()
    with pytest.raises(ValueError, match="all -inf"):
        sample(torch.full((1, 3), -math.inf), torch.Generator())
    with pytest.raises(TypeError, match="CPU torch.Generator"):
        sample(logits, None)


def test_sample_frequencies_match_probabilities():
    logits = torch.tensor([0.3, -1.0, 1.2, 0.0, -math.inf])
    n = 200_000
    draws = sample(logits.expand(n, -1), torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).double() / n
    probs = logits.double().softmax(0)
    assert freq[4] == 0
    # chi-square with 3 degrees of freedom; 16.3 is its 0.999 quantile
    chi2 = (n * (freq[:4] - probs[:4]) ** 2 / probs[:4]).sum()
    assert chi2 < 16.3


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"temperature": 0.5},
        {"top_k": 2},
        {"top_p": 0.6},
        {"temperature": 2.0, "top_k": 3, "top_p": 0.9},
    ],
)
def test_sequences_follow_the_exact_distribution(options):
    V, max_len = 4, 3
    table = random_table(V, max_len, 7, scale=1.0)
    table[..., 1] += 0.5
    f = table_next_log_probs(table)
    # the exact distribution, enumerated by hand with the brute-force filters
    exact: dict[tuple[int, ...], float] = {}

    def filtered_probs(prefix):
        row = table[(*prefix, *[0] * (table.ndim - 1 - len(prefix)))].tolist()
        if "temperature" in options:
            row = [z / options["temperature"] for z in row]
        keep = set(range(V))
        if "top_k" in options:
            keep &= brute_top_k(row, options["top_k"])
            row = [z if i in keep else -math.inf for i, z in enumerate(row)]
        if "top_p" in options:
            keep &= brute_top_p(row, options["top_p"])
        w = [math.exp(z) if i in keep else 0.0 for i, z in enumerate(row)]
        return [x / sum(w) for x in w]

    def walk(prefix, p):
        for token, q in enumerate(filtered_probs(prefix)):
            if q == 0:
                continue
            if token == 1:
                exact[prefix] = exact.get(prefix, 0) + p * q
            elif len(prefix) + 1 == max_len:
                exact[(*prefix, token)] = exact.get((*prefix, token), 0) + p * q
            else:
                walk((*prefix, token), p * q)

    walk((), 1.0)
    dist = sequence_distribution(f, max_len, **options)
    assert dist.keys() == exact.keys()
    assert all(dist[y] == pytest.approx(exact[y], abs=1e-12) for y in exact)
    assert sum(dist.values()) == pytest.approx(1.0)
    n = 40_000
    samples = sample_sequences(f, n, max_len, torch.Generator().manual_seed(3), **options)
    freq: dict[tuple[int, ...], int] = {}
    for s in samples:
        freq[tuple(s)] = freq.get(tuple(s), 0) + 1
    assert set(freq) <= set(exact)
    # each frequency within 5 standard errors of its probability
    for y, p in exact.items():
        assert abs(freq.get(y, 0) / n - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-9


def test_sample_sequences_is_reproducible_and_checks_input():
    f = table_next_log_probs(random_table(4, 5, 1))
    a = sample_sequences(f, 20, 5, torch.Generator().manual_seed(0), top_k=2)
    b = sample_sequences(f, 20, 5, torch.Generator().manual_seed(0), top_k=2)
    assert a == b and all(len(s) <= 5 and 1 not in s for s in a)
    with pytest.raises(ValueError, match="n >= 1"):
        sample_sequences(f, 0, 5, torch.Generator())
    with pytest.raises(ValueError, match="p <= 1"):
        sample_sequences(f, 2, 3, torch.Generator(), top_p=0.0)  # checked up front
    # temperature -> 0 samples the greedy path
    cold = sample_sequences(f, 5, 5, torch.Generator().manual_seed(0), temperature=1e-6)
    assert all(s == greedy_search(f, 5)[0] for s in cold)


def test_filter_logits_order():
    z = torch.tensor([2.0, 1.0, 0.9, -3.0])
    # temperature first: at t = 10 the distribution is flat, so top-p keeps more
    assert filter_logits(z, temperature=10.0, top_p=0.5).isfinite().sum() == 2
    assert filter_logits(z, top_p=0.5).isfinite().sum() == 1
    out = filter_logits(z, temperature=2.0, top_k=2, top_p=0.99)
    assert torch.equal(out, top_p_filter(top_k_filter(z / 2.0, 2), 0.99))


# ---- text statistics -----------------------------------------------------------------------------


def test_text_statistics():
    loop = [[5, 6, 5, 6, 5, 6]]
    assert repeated_ngram_share(loop, 2) == pytest.approx(3 / 5)
    assert repeated_ngram_share([[1, 2, 3]], 1) == 0.0
    assert distinct_n(loop, 1) == pytest.approx(2 / 6)
    assert distinct_n([[1, 2], [1, 2]], 2) == 0.5
    assert distinct_n([[1]], 2) == 0.0 and repeated_ngram_share([], 3) == 0.0
    a, b = ngram_counts([[1, 1, 2]], 1), ngram_counts([[2, 3]], 1)
    assert total_variation(a, a) == 0.0
    assert total_variation(a, b) == pytest.approx(0.5 * (2 / 3 + abs(1 / 3 - 1 / 2) + 1 / 2))
    with pytest.raises(ValueError, match="n >= 1"):
        distinct_n(loop, 0)
    with pytest.raises(ValueError, match="non-empty"):
        total_variation(a, ngram_counts([], 1))
