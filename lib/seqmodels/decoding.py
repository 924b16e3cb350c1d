r"""Decoding: turning a model's next-token distributions into output sequences.

Every decoder here sees a model only through one function,

``next_log_probs(prefixes: LongTensor (n, t)) -> Tensor (n, V)``,

the log-probabilities $\log p(y_{t} \mid y_{<t})$ of the next token after each prefix; every
prefix starts with ``bos``. Adapters turn a language model (:func:`lm_next_log_probs`), an
encoder–decoder with its source (:func:`seq2seq_next_log_probs`), a known distribution
(:func:`from_distribution`) or a conditioning prefix (:func:`conditioned`) into that form.
(Chapters 6–7's :func:`seqmodels.seq2seq.greedy_decode` uses a *step* function that carries the
decoder state instead: cheaper per token, but it cannot fork a state into a beam.)

- Search: :func:`greedy_search` (argmax at each step), :func:`beam_search` (the ``beam_size`` best
  prefixes by cumulative log-prob, optional length normalisation), :func:`exhaustive_search` (every
  sequence up to ``max_len``: the exact oracle); :func:`sequence_log_prob` scores any sequence.
- Sampling: the logits transforms :func:`temperature`, :func:`top_k_filter`, :func:`top_p_filter`
  (each returns a tensor of the logits' shape with ``-inf`` where a token is removed), combined in
  that order by :func:`filter_logits`; :func:`sample` draws one token per row, reproducibly;
  :func:`sample_sequences` draws whole sequences; :func:`sequence_distribution` gives the exact
  distribution those samples follow.
- Text statistics for degeneration: :func:`distinct_n`, :func:`repeated_ngram_share`,
  :func:`ngram_counts`, :func:`total_variation`.

Beam search's rules (:func:`beam_search`). Start from one live hypothesis ``[bos]`` (log-prob 0). At
each of at most `max_len` steps, extend every live hypothesis by every token and keep the
`beam_size` best candidates by cumulative log-prob (ties: the earlier live hypothesis, then the
lower token id — a stable descending sort of the flattened ``(hypothesis, token)`` scores). Kept
candidates ending in ``eos`` are finished and leave the beam; the others stay live. Stop when none
is live or after `max_len` steps; unfinished ones are dropped. A finished hypothesis scores $\log
p(y) / (|y| + 1)^\alpha$ (eq-ch9-length-norm; the length counts ``eos``). Returns the finished
hypotheses sorted by score, best first (stable: ties keep finishing order); empty if none finished.
With ``beam_size >= V ** max_len`` it equals :func:`exhaustive_search`.

With a list `trace`, each step appends the list of its best ``2 * beam_size`` candidates of
finite log-prob, in the order the search ranks them, as dicts ``{"prefix": tokens so far,
"token", "log_prob": cumulative, "kept": in the beam, "finished": kept and eos}`` (what
`seqmodels.diagrams.beam_tree_figure` draws); it changes nothing else.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

NextLogProbs = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Hypothesis:
    """A finished output: `tokens` (without ``bos``/``eos``), its log-probability (nats, ``eos``
    included) and its `score`, ``log_prob / (len(tokens) + 1) ** alpha``."""

    tokens: list[int]
    log_prob: float
    score: float


# ---- logits transforms ---------------------------------------------------------------------------


def _check_logits(logits: torch.Tensor) -> None:
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        kind = logits.dtype if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise TypeError(f"expected floating-point logits of shape (..., V), got {kind}")
    if logits.ndim < 1 or logits.shape[-1] < 1:
        raise ValueError(
            f"expected logits of shape (..., V) with V >= 1, got {tuple(logits.shape)}"
        )
    if torch.isnan(logits).any():
        raise ValueError("expected logits without NaN")


def temperature(logits: torch.Tensor, t: float) -> torch.Tensor:
    r"""Eq. (eq-ch9-temperature): the logits $z / t$ ``(..., V)`` for ``logits: (..., V)``.

    $t > 0$; softmax$(z/t)$ sharpens towards the argmax as $t \to 0$ and flattens towards
    uniform as $t \to \infty$.
    """
    _check_logits(logits)
    _check_temperature(t)
    return logits / t


def _check_temperature(t: float) -> None:
    """Refuse a temperature that is not a finite number above zero."""
    if isinstance(t, bool) or not isinstance(t, int | float) or not (t > 0 and math.isfinite(t)):
        raise ValueError(f"expected a temperature t > 0 (finite), got {t!r}")


def _count_larger(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sort each row of `values: (..., V)` in descending order: ``(sorted, order, larger)``, where
    ``larger[..., j]`` counts the entries strictly larger than ``sorted[..., j]`` (the position of
    the first entry tied with it)."""
    ordered, order = values.sort(dim=-1, descending=True, stable=True)
    position = torch.arange(values.shape[-1], device=values.device).expand(ordered.shape)
    new_value = torch.ones_like(ordered, dtype=torch.bool)
    new_value[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    larger = torch.where(new_value, position, 0).cummax(dim=-1).values
    return ordered, order, larger


def _unsort(kept_sorted: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(kept_sorted).scatter_(-1, order, kept_sorted)


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    r"""Keep token $i$ iff fewer than $k$ tokens have a strictly larger logit (Fan et al. 2018);
    the rest become ``-inf``. Ties at the $k$-th value are all kept, so a row may keep more than
    $k$. `logits: (..., V)`; $k \ge 1$ ($k \ge V$ keeps everything)."""
    _check_logits(logits)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"expected an integer k >= 1, got {k!r}")
    _, order, larger = _count_larger(logits)
    return logits.masked_fill(~_unsort(larger < k, order), -math.inf)


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    r"""Eq. (eq-ch9-top-p): ``logits (..., V)``, $-\infty$ outside the nucleus of mass $p$.

    Nucleus filtering (Holtzman et al. 2020) keeps token $i$ iff the probability of the tokens
    *strictly more probable* than $i$ is $< p$: the smallest set of most probable tokens whose
    mass is $\ge p$, with tied tokens all kept; the most probable token is always kept, and
    $p = 1$ keeps every token (the identity: the tokens more probable than any token hold less
    than all the mass, however small its own share, though in float64 a share below about 1e-16
    would not change the running sum). Probabilities are ``softmax(logits)`` in float64;
    $0 < p \le 1$."""
    _check_logits(logits)
    _check_p(p)
    if p == 1:
        return logits.clone()
    descending, order, larger = _count_larger(torch.softmax(logits.double(), dim=-1))
    # top_mass[..., j] = total probability of the j most probable tokens (j = 0 .. V)
    top_mass = torch.cat([torch.zeros_like(descending[..., :1]), descending.cumsum(-1)], dim=-1)
    larger_mass = top_mass.gather(-1, larger)
    return logits.masked_fill(~_unsort(larger_mass < p, order), -math.inf)


def _check_p(p: float) -> None:
    """Refuse a nucleus mass outside ``0 < p <= 1``."""
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 1:
        raise ValueError(f"expected 0 < p <= 1, got {p!r}")


def filter_logits(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """The course's order of transforms: temperature → top-k → top-p (None: not applied)."""
    out = _temperature(logits, temperature) if temperature != 1.0 else logits
    if top_k is not None:
        out = top_k_filter(out, top_k)
    if top_p is not None:
        out = top_p_filter(out, top_p)
    _check_logits(out)
    return out


_temperature = temperature


# ---- sampling ------------------------------------------------------------------------------------


def _check_generator(generator: torch.Generator) -> None:
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(f"expected a CPU torch.Generator, got {generator!r}")


def sample(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    r"""One token $y \sim \mathrm{softmax}(z)$ per row of ``logits: (..., V)``: int64 ``(...)``.

    Any device, tokens on the CPU; exactly reproducible on CPU and GPU: probs = softmax(logits)
    in float64 on the CPU; one ``u = torch.rand(n, generator=generator, dtype=torch.float64)``
    per row (a CPU generator); the token is the first index whose cumulative probability exceeds
    $u$ (clamped to $V - 1$), i.e. inverse-CDF sampling, $P(\text{token} = i) = p_i$.
    """
    _check_logits(logits)
    _check_generator(generator)
    flat = logits.detach().to("cpu", torch.float64).reshape(-1, logits.shape[-1])
    if torch.isneginf(flat).all(-1).any():
        raise ValueError("expected every row of logits to keep at least one token (all -inf)")
    cdf = torch.softmax(flat, dim=-1).cumsum(-1)
    u = torch.rand(len(flat), generator=generator, dtype=torch.float64)
    tokens = (cdf <= u[:, None]).sum(-1).clamp(max=logits.shape[-1] - 1)
    return tokens.reshape(logits.shape[:-1])


def _check_search(max_len: int, bos: int, eos: int) -> None:
    for name, value in (("max_len", max_len), ("bos", bos), ("eos", eos)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"expected {name} to be an integer >= 0, got {value!r}")


def _call(next_log_probs: NextLogProbs, prefixes: torch.Tensor) -> torch.Tensor:
    out = next_log_probs(prefixes)
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != len(prefixes):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"expected next_log_probs to return a tensor of shape ({len(prefixes)}, V) for "
            f"prefixes of shape {tuple(prefixes.shape)}, got {shape}"
        )
    return out.detach().to("cpu", torch.float64)


def sample_sequences(
    next_log_probs: NextLogProbs,
    n: int,
    max_len: int,
    generator: torch.Generator,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    bos: int = 0,
    eos: int = 1,
) -> list[list[int]]:
    r"""Ancestral sampling, $y_t \sim \tilde p(\cdot \mid y_{<t})$, of `n` sequences at once, with
    $\tilde p$ the model's next-token distribution after :func:`filter_logits`.

    Each step calls `next_log_probs` on the live prefixes (in their original order) and draws one
    token per live row with :func:`sample`; a sequence stops at ``eos`` (not part of the output) or
    after `max_len` tokens. Returns `n` lists of ids."""
    _check_search(max_len, bos, eos)
    _check_generator(generator)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"expected n >= 1 sequences, got {n!r}")
    outputs: list[list[int]] = [[] for _ in range(n)]
    live = list(range(n))
    for _ in range(max_len):
        prefixes = torch.tensor([[bos, *outputs[i]] for i in live], dtype=torch.int64)
        logits = filter_logits(_call(next_log_probs, prefixes), temperature, top_k, top_p)
        tokens = sample(logits, generator).tolist()
        still = []
        for i, token in zip(live, tokens, strict=True):
            if token != eos:
                outputs[i].append(token)
                still.append(i)
        live = still
        if not live:
            break
    return outputs


def sequence_distribution(
    next_log_probs: NextLogProbs,
    max_len: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    bos: int = 0,
    eos: int = 1,
) -> dict[tuple[int, ...], float]:
    r"""The exact distribution of :func:`sample_sequences`'s outputs, by enumeration:
    $P(y) = \prod_t \tilde p(y_t \mid y_{<t})$ for every output $y$ (ids without ``eos``): those
    ended by ``eos`` and those cut at `max_len` tokens (the two kinds are added when they give the
    same output). Zero-probability outputs are left out; the values sum to 1. Costs $V^{\text{max\_len}}$
    calls' worth of prefixes: for tiny models only."""
    _check_search(max_len, bos, eos)
    dist: dict[tuple[int, ...], float] = {}
    level: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    for step in range(max_len):
        if not level:
            break
        prefixes = torch.tensor([[bos, *y] for y, _ in level], dtype=torch.int64)
        logits = filter_logits(_call(next_log_probs, prefixes), temperature, top_k, top_p)
        probs = torch.softmax(logits, dim=-1)
        nxt = []
        for (y, p), row in zip(level, probs.tolist(), strict=True):
            for token, q in enumerate(row):
                if q == 0.0:
                    continue
                if token == eos:
                    dist[y] = dist.get(y, 0.0) + p * q
                elif step == max_len - 1:
                    dist[(*y, token)] = dist.get((*y, token), 0.0) + p * q
                else:
                    nxt.append(((*y, token), p * q))
        level = nxt
    if max_len == 0:
        dist[()] = 1.0
    return dist


# ---- search --------------------------------------------------------------------------------------


def _score(log_prob: float, length: int, alpha: float) -> float:
    return log_prob / length**alpha if alpha else log_prob


def greedy_search(
    next_log_probs: NextLogProbs, max_len: int, bos: int = 0, eos: int = 1
) -> tuple[list[int], float, bool]:
    r"""Greedy decoding, $\hat y_t = \arg\max_y p(y \mid \hat y_{<t})$ (ties to the lowest id).

    Returns ``(tokens without eos, log-prob in nats (eos included if reached), finished)``:
    `finished` is False when `max_len` tokens came without ``eos``. Equal to
    ``beam_search(..., beam_size=1)`` whenever it finishes."""
    _check_search(max_len, bos, eos)
    tokens: list[int] = []
    total = 0.0
    for _ in range(max_len):
        lp = _call(next_log_probs, torch.tensor([[bos, *tokens]], dtype=torch.int64))[0]
        token = int(lp.argmax())
        total += float(lp[token])
        if token == eos:
            return tokens, total, True
        tokens.append(token)
    return tokens, total, False


def beam_search(
    next_log_probs: NextLogProbs,
    beam_size: int,
    max_len: int,
    bos: int = 0,
    eos: int = 1,
    alpha: float = 0.0,
    trace: list | None = None,
) -> list[Hypothesis]:
    r"""Eq. (eq-ch9-length-norm): a `beam_size` beam's finished hypotheses, best score first.

    Each step extends every live prefix by every token and keeps the `beam_size` best by
    cumulative log-prob; kept candidates ending in ``eos`` are finished (the rules: the module's
    docstring).
    """
    _check_beam(max_len, bos, eos, beam_size, alpha)
    live: list[tuple[list[int], float]] = [([], 0.0)]  # (prefix after bos, log p(prefix))
    finished: list[Hypothesis] = []
    for _ in range(max_len):
        if not live:
            break
        prefixes = torch.tensor([[bos, *y] for y, _ in live], dtype=torch.int64)
        lp = _call(next_log_probs, prefixes)  # (live, V): log p(y_t | prefix)
        prefix_lp = torch.tensor([s for _, s in live], dtype=torch.float64)  # log p(prefix)
        totals = (prefix_lp[:, None] + lp).flatten()
        kept = totals.sort(descending=True, stable=True).indices[:beam_size].tolist()
        if trace is not None:
            trace.append(_trace_step(live, totals, lp.shape[1], beam_size, eos))
        live = _expand(live, totals, kept, lp.shape[1], eos, alpha, finished)
    return sorted(finished, key=lambda hyp: -hyp.score)


def _check_beam(max_len: int, bos: int, eos: int, beam_size: int, alpha: float) -> None:
    """Refuse a beam search's settings: `max_len`, `bos`, `eos`, `beam_size` and `alpha`."""
    _check_search(max_len, bos, eos)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"expected an integer beam_size >= 1, got {beam_size!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not math.isfinite(alpha):
        raise ValueError(f"expected a finite alpha, got {alpha!r}")


def _expand(
    live: list[tuple[list[int], float]],
    totals: torch.Tensor,
    kept: list[int],
    V: int,  # noqa: N803
    eos: int,
    alpha: float,
    finished: list[Hypothesis],
) -> list[tuple[list[int], float]]:
    """The next live prefixes from the `kept` flat ``(hypothesis, token)`` indices into `totals`;
    those ending in ``eos`` are appended to `finished`, scored by eq-ch9-length-norm."""
    nxt = []
    for index in kept:
        h, token = divmod(index, V)
        y, total = live[h][0], float(totals[index])
        if token == eos:
            finished.append(Hypothesis(list(y), total, _score(total, len(y) + 1, alpha)))
        else:
            nxt.append(([*y, token], total))
    return nxt


def _trace_step(
    live: list[tuple[list[int], float]], totals: torch.Tensor, V: int, beam_size: int, eos: int
) -> list[dict]:
    """One step of `beam_search`'s trace: its best ``2 * beam_size`` candidates of finite
    log-prob, ranked as the search ranks them (the module's docstring)."""
    ranked = totals.sort(descending=True, stable=True).indices[: 2 * beam_size].tolist()
    return [
        {
            "prefix": tuple(live[i // V][0]),
            "token": i % V,
            "log_prob": float(totals[i]),
            "kept": rank < beam_size,
            "finished": rank < beam_size and i % V == eos,
        }
        for rank, i in enumerate(ranked)
        if math.isfinite(float(totals[i]))
    ]


def exhaustive_search(
    next_log_probs: NextLogProbs,
    max_len: int,
    bos: int = 0,
    eos: int = 1,
    alpha: float = 0.0,
) -> list[Hypothesis]:
    r"""Every sequence of at most `max_len` tokens ending in ``eos``, scored as in
    :func:`beam_search` and sorted best first: the exact answer beam search approximates.
    $\sum_{L < \text{max\_len}} (V-1)^L$ hypotheses: for tiny models only."""
    _check_search(max_len, bos, eos)
    out: list[Hypothesis] = []
    level: list[tuple[list[int], float]] = [([], 0.0)]
    for _ in range(max_len):
        prefixes = torch.tensor([[bos, *y] for y, _ in level], dtype=torch.int64)
        lp = _call(next_log_probs, prefixes).tolist()
        nxt = []
        for (y, total), row in zip(level, lp, strict=True):
            for token, value in enumerate(row):
                if token == eos:
                    t = total + value
                    out.append(Hypothesis(list(y), t, _score(t, len(y) + 1, alpha)))
                else:
                    nxt.append(([*y, token], total + value))
        level = nxt
    return sorted(out, key=lambda hyp: -hyp.score)


def sequence_log_prob(
    next_log_probs: NextLogProbs, tokens: Sequence[int], bos: int = 0, eos: int = 1
) -> float:
    r"""$\log p(y\,\texttt{eos}) = \sum_t \log p(y_t \mid y_{<t})$ (nats) of one output `tokens`
    (without ``bos``/``eos``), ``eos`` included: the score search maximises, for any sequence (a
    reference, say). One call of `next_log_probs` per position."""
    _check_search(0, bos, eos)
    ys = [int(y) for y in tokens]
    total = 0.0
    for t, y in enumerate([*ys, eos]):
        total += float(_call(next_log_probs, torch.tensor([[bos, *ys[:t]]]))[0, y])
    return total


# ---- adapters: models as next_log_probs ----------------------------------------------------------


def _check_prefixes(prefixes: torch.Tensor) -> None:
    if not isinstance(prefixes, torch.Tensor) or prefixes.ndim != 2 or prefixes.shape[1] < 1:
        shape = tuple(prefixes.shape) if isinstance(prefixes, torch.Tensor) else prefixes
        raise ValueError(f"expected prefixes of shape (n, t) with t >= 1, got {shape}")


def lm_next_log_probs(model: torch.nn.Module) -> NextLogProbs:
    """A language model called as ``model(tokens (n, t)) -> (logits (n, t, V), anything)`` (the
    course's RNN and Transformer LMs), as a `next_log_probs`: the log-softmax of the last logits,
    without gradients, in eval mode, on the model's device (results on the CPU)."""
    device = next(model.parameters()).device

    @torch.no_grad()
    def next_log_probs(prefixes: torch.Tensor) -> torch.Tensor:
        _check_prefixes(prefixes)
        model.eval()
        logits, _ = model(prefixes.to(device))
        return logits[:, -1].float().log_softmax(-1).cpu()

    return next_log_probs


def seq2seq_next_log_probs(model: torch.nn.Module, source: Sequence[int]) -> NextLogProbs:
    """An encoder–decoder (:class:`seqmodels.seq2seq.Seq2Seq`) with one `source` (ids) as a
    `next_log_probs` over target prefixes: the source is encoded once, and each call runs the
    decoder over the whole prefix (each prefix on its own copy of the memory)."""
    from .seq2seq import source_batch

    if len(source) == 0:
        raise ValueError("expected a non-empty source")
    device = next(model.parameters()).device
    model.eval()
    with torch.no_grad():
        src, lengths, mask = source_batch([list(source)])
        h0, (states, c, src_mask) = model.start(src.to(device), lengths, mask.to(device))

    @torch.no_grad()
    def next_log_probs(prefixes: torch.Tensor) -> torch.Tensor:
        _check_prefixes(prefixes)
        n = len(prefixes)
        memory = (states.expand(n, -1, -1), c.expand(n, -1), src_mask.expand(n, -1))
        logits, _, _ = model.decode_steps(prefixes.to(device), h0.expand(n, -1), memory)
        return logits[:, -1].float().log_softmax(-1).cpu()

    return next_log_probs


def from_distribution(
    distribution: Callable[[list[int]], torch.Tensor], bos: int = 0
) -> NextLogProbs:
    """A known next-token distribution, ``distribution(prefix ids without bos) -> probs (V,)``
    (e.g. :meth:`seqmodels.synthetic.AgreementLanguage.next_token_distribution`), as a
    `next_log_probs` (float64 log-probabilities; -inf for impossible tokens)."""

    def next_log_probs(prefixes: torch.Tensor) -> torch.Tensor:
        _check_prefixes(prefixes)
        if (prefixes[:, 0] != bos).any():
            raise ValueError(f"expected every prefix to start with bos = {bos}")
        rows = [
            torch.as_tensor(distribution(p[1:].tolist()), dtype=torch.float64) for p in prefixes
        ]
        return torch.stack(rows).log()

    return next_log_probs


def table_next_log_probs(logits: torch.Tensor, bos: int = 0) -> NextLogProbs:
    """A tiny explicit model from a table `logits: (V,) * depth + (V,)`: the next-token logits after
    ``bos y_1 .. y_t`` are ``logits[y_1, .., y_t, 0, .., 0]`` (padded with zeros to `depth`
    indices). Prefixes of more than `depth` tokens after ``bos`` are an error."""
    if logits.ndim < 1 or any(n != logits.shape[-1] for n in logits.shape):
        raise ValueError(f"expected logits of shape (V, ..., V), got {tuple(logits.shape)}")
    depth = logits.ndim - 1

    def next_log_probs(prefixes: torch.Tensor) -> torch.Tensor:
        _check_prefixes(prefixes)
        t = prefixes.shape[1] - 1
        if t > depth:
            raise ValueError(f"the table covers prefixes of up to {depth} tokens after bos")
        rows = [logits[(*p[1:].tolist(), *([0] * (depth - t)))] for p in prefixes]
        return torch.stack(rows).log_softmax(-1)

    return next_log_probs


def conditioned(next_log_probs: NextLogProbs, context: Sequence[int]) -> NextLogProbs:
    """Condition on a given beginning: ``bos y`` is read as ``bos context y``, so the decoders
    continue `context` (e.g. the opening words of a verse) and return only the continuation."""
    ctx = torch.as_tensor(list(context), dtype=torch.int64)

    def conditioned_log_probs(prefixes: torch.Tensor) -> torch.Tensor:
        _check_prefixes(prefixes)
        expanded = ctx[None].expand(len(prefixes), -1).to(prefixes.device)
        return next_log_probs(torch.cat([prefixes[:, :1], expanded, prefixes[:, 1:]], dim=1))

    return conditioned_log_probs


# ---- text statistics -----------------------------------------------------------------------------


def ngrams(sequence: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """The n-grams of one sequence, in order (none if it is shorter than `n`)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"expected n >= 1, got {n!r}")
    seq = list(sequence)
    return [tuple(seq[i : i + n]) for i in range(len(seq) - n + 1)]


def ngram_counts(sequences: Iterable[Sequence[int]], n: int) -> Counter:
    """Counts of the n-grams over all `sequences` (an n-gram never spans two sequences)."""
    counts: Counter = Counter()
    for s in sequences:
        counts.update(ngrams(s, n))
    return counts


def distinct_n(sequences: Iterable[Sequence[int]], n: int) -> float:
    """distinct-n (Li et al. 2016): distinct n-grams / all n-grams over the set (0 if none)."""
    counts = ngram_counts(sequences, n)
    total = sum(counts.values())
    return len(counts) / total if total else 0.0


def repeated_ngram_share(sequences: Iterable[Sequence[int]], n: int) -> float:
    """The share of n-grams that repeat one seen earlier *in the same sequence*, over all n-grams of
    the set (0 if none): 0 for text that never repeats itself, near 1 for a loop."""
    repeats = total = 0
    for s in sequences:
        seen: set[tuple[int, ...]] = set()
        for g in ngrams(s, n):
            repeats += g in seen
            seen.add(g)
            total += 1
    return repeats / total if total else 0.0


def total_variation(a: Counter | dict, b: Counter | dict) -> float:
    r"""$\frac12 \sum_x |p_a(x) - p_b(x)|$ between two count tables, each normalised (0: equal
    distributions, 1: disjoint supports)."""
    na, nb = sum(a.values()), sum(b.values())
    if na <= 0 or nb <= 0:
        raise ValueError("expected two non-empty count tables")
    keys = set(a) | set(b)
    return 0.5 * sum(abs(a.get(x, 0) / na - b.get(x, 0) / nb) for x in keys)
