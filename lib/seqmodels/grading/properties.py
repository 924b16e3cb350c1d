"""Cases judged by a property the grader computes from the captured values, not by a reference.

Some results can only be checked on the student's own model: the tokens top-p keeps from *their*
trained model's distribution, the best sequence of *their* model under length normalisation. A
test cell then captures, in one case, the inputs it gave the student's function (the model's
log-probabilities, computed by the test cell) together with the function's result, and names a
property of this module (``Checker.case(..., check=("top_p_mask", {"p": 0.9}))``). The grader
computes the expected result from the captured inputs, in its own process, with the settings
stored in the references' manifest (the solution's run), never with any the kernel sent.

Captured data is hostile: each property checks the structure (the keys and dtypes of the
solution's capture), bounds the sizes before computing anything, and refuses inputs that are not
what the test cell computes (rows that are not log-probability distributions, say). A property
returns ``None`` when the result has it, else a message safe for feedback (no value, no index).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .compare import Verdict, compare_tensor, decode, exception_name

MAX_ELEMENTS = 1_000_000  # all the captured tensors of one case together
ROW_TOLERANCE = 1e-6  # nats: a captured row's log-sum-exp against 0
BOUNDARY = 1e-9  # a token whose more probable mass is this close to p may be kept or not
MAX_PREFIXES = 20_000


def _distribution(log_probs: torch.Tensor, what: str) -> str | None:
    """Why `log_probs` is not a batch of rows of log-probabilities ``(N, V)``, or None."""
    if log_probs.ndim != 2 or 0 in log_probs.shape:
        return f"the captured {what} must be a non-empty matrix (N, V)"
    if bool(log_probs.isnan().any() | (log_probs == math.inf).any()):
        return f"the captured {what} hold NaN or +inf"
    if not bool((torch.logsumexp(log_probs, dim=-1).abs() <= ROW_TOLERANCE).all()):
        return f"a row of the captured {what} is not a log-probability distribution"
    return None


def top_p_mask(values: dict[str, torch.Tensor], settings: dict) -> str | None:
    """``kept`` is the smallest set of the most probable tokens of each row of ``log_probs`` whose
    mass is at least ``p``, tied tokens all kept: token *i* is kept iff the tokens strictly more
    probable than *i* hold less than ``p`` (within `BOUNDARY` either way, both answers pass)."""
    log_probs, kept = values["log_probs"], values["kept"]
    if problem := _distribution(log_probs, "log-probabilities"):
        return problem
    if kept.shape != log_probs.shape:
        return "the kept set must have the shape of the log-probabilities"
    p = float(settings["p"])
    probs = log_probs.exp()
    ordered, order = probs.sort(dim=-1, descending=True, stable=True)
    position = torch.arange(ordered.shape[-1]).expand(ordered.shape)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    lead = torch.where(first, position, 0).cummax(dim=-1).values  # first token of each tie
    more = (ordered.cumsum(-1) - ordered).gather(-1, lead)  # the mass strictly more probable
    larger = torch.empty_like(more).scatter(-1, order, more)
    must, free = larger < p, (larger - p).abs() <= BOUNDARY
    if bool(((kept != must) & ~free).any()):
        return "the kept set is not the smallest set of most probable tokens with mass >= p"
    return None


def temperature(values: dict[str, torch.Tensor], settings: dict) -> str | None:
    """``scaled`` is ``log_softmax(log_probs / t)`` (the tolerance of its dtype)."""
    log_probs = values["log_probs"]
    if problem := _distribution(log_probs, "log-probabilities"):
        return problem
    expected = torch.log_softmax(log_probs / float(settings["t"]), dim=-1)
    mismatch = compare_tensor("scaled", values["scaled"], expected.to(log_probs.dtype))
    return None if mismatch is None else mismatch.summary


def best_sequence(values: dict[str, torch.Tensor], settings: dict) -> str | None:
    """``tokens`` (without bos and eos) is a best sequence by exhaustive search over the captured
    model (``prefixes``: rows ``[bos, y_1, ..., y_k, -1, ...]``; ``table``: each prefix's next-token
    log-probabilities), scored ``log p(y eos) / (|y| + 1) ** alpha`` among the sequences of at most
    ``max_len`` tokens ending in eos; ``score`` is its score."""
    prefixes, table = values["prefixes"], values["table"]
    tokens, score = values["tokens"], values["score"]
    max_len, alpha = int(settings["max_len"]), float(settings["alpha"])
    bos, eos = int(settings["bos"]), int(settings["eos"])
    if prefixes.ndim != 2 or len(prefixes) > MAX_PREFIXES or prefixes.shape[1] != max_len:
        return (
            f"the captured prefixes must be a matrix (P, {max_len}) of at most {MAX_PREFIXES} rows"
        )
    if problem := _distribution(table, "table"):
        return problem
    if len(table) != len(prefixes) or tokens.ndim != 1 or score.ndim != 0:
        return "the captured table, tokens or score have the wrong shape"
    rows = {tuple(int(t) for t in row if t >= 0): i for i, row in enumerate(prefixes.tolist())}
    V = table.shape[1]
    best, level = -math.inf, [((bos,), 0.0)]
    for _ in range(max_len):  # every sequence ending in eos, as exhaustive search scores it
        nxt = []
        for prefix, total in level:
            if prefix not in rows:
                return "the captured table misses a prefix the exhaustive search needs"
            row = table[rows[prefix]].tolist()
            s = total + row[eos]
            best = max(best, s / len(prefix) ** alpha if alpha else s)
            nxt += [((*prefix, y), total + row[y]) for y in range(V) if y != eos]
        level = nxt
    ys = tokens.tolist()
    if len(ys) >= max_len or any(not 0 <= y < V or y == eos for y in ys):
        return "the result is not a sequence the search can return (length, or a token's id)"
    total = 0.0
    for k, y in enumerate([*ys, eos]):
        prefix = (bos, *ys[:k])
        if prefix not in rows:
            return "the captured table misses a prefix of the result"
        total += float(table[rows[prefix], y])
    own = total / (len(ys) + 1) ** alpha if alpha else total
    if own < best - 1e-9 * (1 + abs(best)):
        return "the result is not a best sequence (exhaustive search finds a better one)"
    if abs(float(score) - own) > 1e-6 + 1e-6 * abs(own):
        return "the score is not the result's length-normalised log-probability"
    return None


PROPERTIES: dict[str, Callable[[dict[str, torch.Tensor], dict], str | None]] = {
    "top_p_mask": top_p_mask,
    "temperature": temperature,
    "best_sequence": best_sequence,
}


def judge(
    case: str, captured: dict | None, reference: dict[str, torch.Tensor], check: dict
) -> Verdict:
    """The verdict on a case judged by the property ``check["name"]`` with ``check["settings"]``
    (both from the manifest). The capture must have the structure of the solution's (`reference`:
    the same keys, each of the same dtype); shapes and values are the property's to judge."""
    if captured is None:
        return Verdict(case, False, "not run (the cell stopped before this case)")
    if "error" in captured:
        return Verdict(case, False, f"your code raised {exception_name(str(captured['error']))}")
    try:
        actual = decode(str(captured["data"]))
    except Exception:  # noqa: BLE001 - any malformed capture is a failed case
        return Verdict(case, False, "the captured output could not be read")
    if actual.keys() != reference.keys():
        return Verdict(case, False, f"wrong structure: expected {sorted(reference)}")
    for key in sorted(reference):
        if actual[key].dtype != reference[key].dtype:
            dtype = str(reference[key].dtype).removeprefix("torch.")
            return Verdict(case, False, f"element {key!r}: wrong dtype (expected {dtype})")
    if sum(t.numel() for t in actual.values()) > MAX_ELEMENTS:
        return Verdict(case, False, "the captured values are larger than the case can hold")
    try:
        problem = PROPERTIES[check["name"]](actual, check.get("settings", {}))
    except Exception as error:  # noqa: BLE001 - a capture the property cannot read fails the case
        problem = f"the captured values could not be checked ({type(error).__name__})"
    return Verdict(case, problem is None, problem or "has the property the task asks for")
