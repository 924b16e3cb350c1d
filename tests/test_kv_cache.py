"""The key-value cache of ``seqmodels.transformer.TransformerLM`` (``forward_cached``, ``KVCache``,
``cached_lm_next_log_probs``) against the uncached model, in float64.

The oracle is the model's own uncached ``forward`` on each row alone (the path every chapter
trains and evaluates with), and ``seqmodels.decoding``'s searches through ``lm_next_log_probs``:
incremental decoding over at least 50 tokens, batched, left-padded, fed whole, in pieces or one
token at a time, must give the same logits within 1e-6 and the same generated tokens.
"""

from __future__ import annotations

import pytest
import torch

from seqmodels.decoding import beam_search, greedy_search, lm_next_log_probs, sample_sequences
from seqmodels.transformer import KVCache, TransformerLM, cached_lm_next_log_probs

V, L, PAD = 23, 60, 5
LENGTHS = [60, 41, 53]  # real tokens per row; the batch is left-padded to L


def _model(positions="sinusoidal", norm_first=True, max_len=80, seed=0):
    torch.manual_seed(seed)
    return TransformerLM(
        V, d_model=16, n_heads=4, n_layers=3, d_ff=32, max_len=max_len, positions=positions,
        norm_first=norm_first,
    ).double().eval()  # fmt: skip


def _left_padded(seed=1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (len(LENGTHS), L), generator=g)
    mask = torch.zeros(len(LENGTHS), L, dtype=torch.bool)
    for row, n in enumerate(LENGTHS):
        mask[row, L - n :] = True
    return tokens.masked_fill(~mask, PAD), mask


def _max_error_to_uncached(model, logits, tokens, mask):
    """Largest |difference| between cached logits at real tokens and each row's own full pass."""
    worst = 0.0
    with torch.no_grad():
        for row, n in enumerate(LENGTHS):
            reference, _ = model(tokens[row : row + 1, L - n :])
            worst = max(worst, (logits[row, mask[row]] - reference[0]).abs().max().item())
    return worst


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("prompt", [L, 7, 1])  # whole, a prompt then 1 at a time, all 1 at a time
def test_cached_decoding_equals_the_uncached_pass(positions, norm_first, prompt):
    model = _model(positions, norm_first)
    tokens, mask = _left_padded()
    with torch.no_grad():
        pieces, cache = [], None
        logits, cache = model.forward_cached(tokens[:, :prompt], cache, mask[:, :prompt])
        pieces.append(logits)
        for t in range(prompt, L):
            logits, cache = model.forward_cached(tokens[:, t : t + 1], cache, mask[:, t : t + 1])
            pieces.append(logits)
    logits = torch.cat(pieces, dim=1)
    assert logits.shape == (len(LENGTHS), L, V)
    assert _max_error_to_uncached(model, logits, tokens, mask) < 1e-6
    assert cache.length == L and cache.real_lengths().tolist() == LENGTHS


def test_pieces_of_several_tokens_equal_one_pass():
    model = _model()
    tokens, mask = _left_padded()
    with torch.no_grad():
        whole, whole_cache = model.forward_cached(tokens, key_mask=mask)
        pieces, cache = [], None
        for a, b in [(0, 10), (10, 11), (11, 37), (37, L)]:
            logits, cache = model.forward_cached(tokens[:, a:b], cache, mask[:, a:b])
            pieces.append(logits)
    joined = torch.cat(pieces, dim=1)
    assert (joined - whole)[mask].abs().max() < 1e-6
    for k1, k2 in zip(
        whole_cache.keys + whole_cache.values, cache.keys + cache.values, strict=True
    ):
        assert (k1 - k2).abs().max() < 1e-6


def test_the_cache_given_is_not_changed():
    model = _model()
    tokens, mask = _left_padded()
    with torch.no_grad():
        _, cache = model.forward_cached(tokens[:, :20], key_mask=mask[:, :20])
        before = [t.clone() for t in (*cache.keys, *cache.values, cache.key_mask)]
        _, grown = model.forward_cached(tokens[:, 20:21], cache, mask[:, 20:21])
        again, _ = model.forward_cached(tokens[:, 20:21], cache, mask[:, 20:21])
    after = (*cache.keys, *cache.values, cache.key_mask)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert cache.length == 20 and grown.length == 21
    assert torch.isfinite(again).all()


def test_the_memory_is_two_layers_batch_length_width_numbers():
    model = _model()
    tokens, mask = _left_padded()
    with torch.no_grad():
        _, cache = model.forward_cached(tokens, key_mask=mask)
    layers, B, d = 3, len(LENGTHS), 16
    assert cache.nbytes() == 2 * layers * B * L * d * 8  # float64
    assert cache.keys[0].shape == (B, 4, L, 4)  # (B, H, S, d_h)
    assert len(cache.select([2, 2, 0])) == 3


def test_padding_is_never_read():
    model = _model()
    tokens, mask = _left_padded()
    other = tokens.masked_fill(~mask, PAD + 1)  # change only the padding
    with torch.no_grad():
        a, _ = model.forward_cached(tokens, key_mask=mask)
        b, _ = model.forward_cached(other, key_mask=mask)
    assert torch.equal(a[mask], b[mask])


def test_bad_input_is_refused_with_a_clear_error():
    model = _model(positions="learned", max_len=30)
    with torch.no_grad():
        _, cache = model.forward_cached(torch.zeros(3, 10, dtype=torch.int64))
        with pytest.raises(ValueError, match="cache's 3 rows"):
            model.forward_cached(torch.zeros(2, 1, dtype=torch.int64), cache)
        with pytest.raises(ValueError, match="max_len = 30"):
            model.forward_cached(torch.zeros(3, 21, dtype=torch.int64), cache)
        with pytest.raises(ValueError, match="bool key_mask of shape"):
            model.forward_cached(torch.zeros(3, 2, dtype=torch.int64), cache, torch.ones(3, 2))
        with pytest.raises(ValueError, match="at least one new token"):
            model.forward_cached(torch.zeros(3, 0, dtype=torch.int64), cache)
        with pytest.raises(TypeError, match="KVCache of 3 blocks"):
            model.forward_cached(torch.zeros(3, 1, dtype=torch.int64), "cache")
        with pytest.raises(IndexError, match="row indices"):
            cache.select([3])
    # left-padding does not use up positions: 10 + 20 real tokens fit max_len = 30
    tokens = torch.zeros(3, 25, dtype=torch.int64)
    mask = torch.ones(3, 25, dtype=torch.bool)
    mask[:, :5] = False
    with torch.no_grad():
        _, grown = model.forward_cached(tokens, cache, mask)
    assert isinstance(grown, KVCache) and grown.real_lengths().tolist() == [30, 30, 30]


def test_greedy_sampled_and_beam_decoding_through_the_cache_give_the_same_tokens():
    model = _model(max_len=120)
    never = V  # an end token the model cannot produce: every search runs its full length
    assert greedy_search(cached_lm_next_log_probs(model), 60, bos=0, eos=never) == greedy_search(
        lm_next_log_probs(model), 60, bos=0, eos=never
    )
    samples = [
        sample_sequences(next_lp(model), 4, 55, torch.Generator().manual_seed(7), eos=2, top_p=0.9)
        for next_lp in (lm_next_log_probs, cached_lm_next_log_probs)
    ]
    assert samples[0] == samples[1] and max(map(len, samples[0])) >= 10
    beams = [
        beam_search(f(model), 3, 12, eos=2) for f in (lm_next_log_probs, cached_lm_next_log_probs)
    ]
    assert [h.tokens for h in beams[0]] == [h.tokens for h in beams[1]] and beams[0]
    assert [h.log_prob for h in beams[0]] == pytest.approx([h.log_prob for h in beams[1]])


def test_the_adapter_reads_one_token_per_call_after_the_first():
    model = _model(max_len=120)
    seen = []
    forward_cached = model.forward_cached

    def spy(tokens, cache=None, key_mask=None):
        seen.append(tokens.shape[1])
        return forward_cached(tokens, cache, key_mask)

    model.forward_cached = spy
    greedy_search(cached_lm_next_log_probs(model), 30, bos=0, eos=V)
    assert seen == [1] * 30


def test_cached_step_seconds_times_one_token_per_length_and_refuses_bad_lengths():
    from seqmodels.transformer import TransformerLM, cached_step_seconds

    model = TransformerLM(20, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=16)
    seconds = cached_step_seconds(model, [1, 4, 16], repeats=2)
    assert len(seconds) == 3 and all(0 < s < 10 for s in seconds)
    assert model.training  # the mode it had is given back
    with pytest.raises(ValueError, match="max_len = 16"):
        cached_step_seconds(model, [17])
    with pytest.raises(ValueError, match="positive integer"):
        cached_step_seconds(model, [0])
