"""'Paste' submissions for Problem Sets 1 to 5: the course library's code, pasted, as the answers.

A helper for the grading round trips (not a test module itself). Issue 28 asks that no part-A task
be answerable by calling or pasting library code: the sandbox hides the library's models from the
kernel, but a student can read the installed source and paste it. `paste_answers(ps)` builds, for
every autograded answer cell of parts A and B, what such a student writes: the source of the nearest
library object(s), taken with `inspect.getsource` now (so the paste follows the library when it
changes), and the thinnest adapter to the task's interface. The round trips grade it beside the
other submissions (tests/test_grading.py for PS1, tests/test_grading_ps2.py for PS2).

**What a paste holds.** Whole library modules, as a student copies files (`pasted_module`): each
relative import of a module the sandbox hides is replaced by that module's own pasted source (no
cell imports a hidden module); one of a module the sandbox keeps (`seqmodels.vocab`,
`seqmodels.padding`, `seqmodels.device`) becomes an absolute import. A module is pasted once, in
the first answer cell that needs it; later cells use what it defined, as in one kernel.

**What an adapter may do.** Convert the task's arguments into the library's, call the pasted code,
convert its result into the task's (dtype, device, a dense table from the library's sparse one, a
new tensor instead of the caller's). It writes no equation, derivative or case the library does not
hold: where the library has one Kneser–Ney discount and the task asks three, the adapter passes the
library's one; where the library's training step calls `F.cross_entropy` or `clip_grad_norm_` (both
forbidden in those tasks), so does the paste; where nothing in the library computes what a task
returns, the paste leaves the release's `raise NotImplementedError()` in place.

Per task, the object pasted and why it is the nearest:

Problem Set 1 (`seqmodels.ngram`, `metrics`, `feedforward`, `softmax`, `sgd`, `train`):

- Task 1 `bigram_counts`: `NGramLM` (order 2, ``"mle"``) fitted on the sentences. `fit` pads and
  counts exactly as the task asks; the adapter copies the top level's sparse counts into the dense
  `(V, V)` int64 table. `fit` refuses an empty corpus, so "no sentences at all" raises.
- Task 2 `add_k_probs`: `NGramLM(2, V, "add-k", k=k)` and its `distribution` of each context. The
  library counts sentences, the task gives a table, so the adapter (`_fitted_from_table`) runs
  `fit`'s own lines (`_ngram_ids`, `_distinct`, `_make_level`) on the table's bigrams, each laid out
  as its two tokens, instead of on padded sentences.
- Task 3 `kn_discounts`: the library estimates no discount; its Kneser–Ney has one, `NGramLM`'s
  default `discount` (0.75), so the paste returns that one three times.
- Task 4 `kneser_ney_probs`: `NGramLM(2, V, "kneser-ney", discount=D1)` fitted from the table as in
  Task 2 (`fit`'s lines count the continuations) and its `distribution` of each context: interpolated
  Kneser–Ney with the library's one discount, D1 for every count.
- Task 5 `perplexity_and_bpc`: the perplexity is `NGramLM.nll` (every predicted token, ``</s>``
  included) and `metrics.perplexity`, with the table as the model's probabilities (its `_prob` looks
  them up) and `Vocabulary.encode` (out-of-vocabulary words to ``<unk>``) to turn words into ids.
  Nothing in the library counts a text's characters (`metrics.bits` converts nats to bits, no
  more), so the bits per character stay unanswered: the adapter returns NaN for them, and every
  case, which compares both numbers, fails.
- Task 6 `ffn_log_probs`: `FeedForwardLM.forward` run on the task's tensors
  (`torch.func.functional_call`, so gradients reach them), its untied output matrix given as the tie
  `U = E P`, then `softmax.log_softmax`, the library's stable log-softmax written by hand.
- Task 7 `sgd_step`: `sgd.sgd_losses` (with `sgd_update_`), Chapter 2's SGD step: the loss before
  the update, the update in place, no gradient left behind. It computes the loss with
  `F.cross_entropy` (torch's losses are forbidden in this task) and does not clip; the library's one
  step that clips, `rnn.truncated_bptt_step`, calls `clip_grad_norm_`, forbidden as well.
- Task 8 `ffn_training` has no answer cell: it trains with Task 7's step.

Problem Set 2 (`seqmodels.autodiff`, `rnn`, `gated`, `train`, `softmax`):

- Task 1 `gradients`: `autodiff.Node`'s `topological_order` and `backward`, run on the `Var` graph
  through a `Node` that mirrors each `Var` (`_VarNode`): its parents are the mirrors of the `Var`'s
  parents, and its `_backward` adds what the `Var`'s `vjp` returns to them, as each op of the engine
  does. The adapter returns a copy of each input's accumulated `grad`.
- Task 2 `sum_to`, `mul`, `sigmoid`: `autodiff._unbroadcast` is `sum_to` (the adapter returns a new
  tensor); the engine has no product and no sigmoid, so those two stay unanswered.
- Task 3 `rnn_lm_log_probs`: `RNNLM` with the Elman core (`ElmanRNN`), run on the task's tensors
  (`functional_call`), its second bias `b_hh` set to zeros so that `b_xh + b_hh` is the task's one
  bias, then `softmax.log_softmax`.
- Task 4 `lm_bptt`: the nearest, `rnn.bptt`, needs the gradient that reaches every state from the
  output layer and the loss, `grad_outputs`, which nothing in the library computes by hand for this
  model, and it has no embedding: the paste leaves the task unanswered.
- Task 5 `tbptt_step`: `rnn.truncated_bptt_step` with `torch.optim.SGD` (plain SGD) and
  `clip=max_norm`, on the task's model (Task 3's function): the library's one step of truncated BPTT.
  It calls `F.cross_entropy` and `clip_grad_norm_`, both forbidden in this task.
- Task 6 `rnn_training` has no answer cell: it trains with Task 5's step.

Problem Set 3 (`seqmodels.gated`, `rnn`, `softmax`, `train`):

- Task 1 `cifg_step`: `gated.LSTM`, one step (a sequence of length 1), run on the task's tensors
  (`functional_call`) with its forget gate tied to the input gate through the weights: the
  forget rows are minus the input rows, so f = σ(−a_i) = 1 − σ(a_i) — a conversion of
  arguments, as PS1's paste gives `FeedForwardLM` the tie `U = E P`. The CIFG without peepholes is
  an LSTM with W_f = −W_i; the library's LSTM has no peepholes, so the adapter ignores `p_i` and
  `p_o` (it computes the cell with p = 0) and is right only where the task's peepholes are zero.
- Task 2 `cifg_step_backward`: nothing in the library differentiates an LSTM step by hand (its
  gradients are autograd's): left unanswered.
- Task 3 `cifg_lm_log_probs`: `RNNLM` with the hand-written LSTM core (`"lstm-hand"`), the same
  tie (peepholes ignored), its second bias zero, then `softmax.log_softmax`.
- Task 4 `verb_gradient_norms`: the library's `gradients.loss_gradient_by_position` measures the
  gradient of the verb's *loss* by position; the task asks for the agreement *margin*'s, which no
  library code computes: left unanswered (pasting `loss_gradient_by_position` on the tied `RNNLM`
  earns no case but the all-zero one).
- Task 5 `adam_step`: the library's training loops (`train.train_lm`, `rnn.train_lm`) use
  `torch.optim.Adam`, `F.cross_entropy` and `clip_grad_norm_`; the adapter keeps one
  `torch.optim.Adam` in `state` and calls the three, all forbidden in this task.
- Task 6 `cifg_training` has no answer cell: it trains with Task 5's step.

Problem Set 4 (`seqmodels.attention`, `rnn`, `seq2seq`, `train`):

- Task 1 `masked_attention`: `attention.scaled_dot_attention`, which returns `(context, weights)`
  with padded keys masked (its `masked_softmax` turns a row with no real key into zeros with
  `nan_to_num`).
- Task 2 `masked_attention_backward`: nothing in the library differentiates attention by hand (its
  gradients are autograd's): left unanswered.
- Task 3 `masked_token_nll`: `rnn.masked_sequence_nll`, which calls `F.cross_entropy` (torch's
  losses are forbidden in this task).
- Task 4 `g2p_log_probs`: `seq2seq.Seq2Seq(attention="scaled_dot")` run on the task's tensors
  (`functional_call`), then `F.log_softmax`. The library's decoder has no input feeding, so the
  adapter gives its GRU the embedding's columns of `dec_W_ih` only: right only where the weights on
  the fed-back state are zero.
- Task 5 `g2p_greedy_decode`: `seq2seq.translate` with that model, its outputs padded with `</s>`
  to `max_len`.
- Task 6 `train_step`: the body of `seq2seq.train_seq2seq`'s loop (`Seq2Seq.loss`, which calls
  `F.cross_entropy`, then `clip_grad_norm_` and the optimiser's step) on the task's model.
- Task 7 `g2p_training` has no answer cell: it trains with Task 6's step.

Problem Set 5 (`seqmodels.transformer`, `attention`, `rnn`, `decoding`):

- Task 1 `gqa_attention`: `transformer.MultiHeadAttention` (its biases zero), run on the task's
  tensors (`functional_call`) with ``causal=True``, and the keys and values of its own `_heads`
  split. The library has no grouped-query attention: the adapter answers only ``G = H`` (repeating
  the key-value heads is the equation the task asks for) and raises otherwise.
- Task 2 (the cache): the library has no key-value cache, so a call with a cache raises.
- Task 3 `lm_log_probs`: `transformer.TransformerLM` with learned positions, pre-LN and ReLU, run
  on the task's tensors (its embedding divided by the √d it multiplies by, its attention biases
  zero), then `log_softmax`; ``G = H`` and no cache only, as Task 1.
- Task 4 `train_step`: the library's training loops' step (`F.cross_entropy`, `clip_grad_norm_`,
  the optimiser given), on Task 3's function: torch's loss is forbidden in this task.
- Task 5 `lm_training` has no answer cell: it trains with Task 4's step (and Task 3's model, which
  raises for the set's ``G = 2``).
- Task 6: `decoding.temperature` then `log_softmax`; `decoding.top_p_filter` (the kept tokens are
  its finite entries); `decoding.beam_search`'s best hypothesis. The cases on the student's own
  model call Task 3's function, which raises for ``G < H``.

Each set's paste is graded in its round trip's smoke profile, where the training task (B2–B4, 4
points) is not run. Its metric tiers (B3, B4) need every case of the trajectory task (B1) to pass;
`paste_bound` adds the 0.5 point of B2 ("runs end to end") as the most the training can add.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import nbformat

from grading_helpers import graded_implementations
from ps1_submissions import EXPERIMENT_LEFT_OUT

ROOT = Path(__file__).resolve().parents[1]
FUTURE = "from __future__ import annotations"

#: the most parts A and B's autograded points a paste may earn together (the design guide, §5)
SHARE = 0.20
#: parts A and B's points of each set, and the points of its training task's B2 tier ("runs")
AB_POINTS = {"ps1": 14, "ps2": 14, "ps3": 14, "ps4": 14, "ps5": 14}
RUNS_POINTS = {"ps1": 0.5, "ps2": 0.5, "ps3": 0.5, "ps4": 0.5, "ps5": 0.5}


def pasted_module(name: str, done: set[str]) -> str:
    """Module `name`'s source as a student pastes it into one cell: its ``__future__`` import
    dropped (the cell starts with one), each relative import of a hidden module replaced by that
    module's pasted source (once: `done` names the modules pasted already), each of a module the
    sandbox keeps made absolute."""
    hidden = graded_implementations()
    text = inspect.getsource(importlib.import_module(name))
    lines = text.splitlines()
    before: list[str] = []  # hidden modules this one imports, pasted ahead of it
    for node in reversed(ast.parse(text).body):
        if not isinstance(node, ast.ImportFrom):
            continue
        start, end = node.lineno - 1, node.end_lineno
        if node.module == "__future__":
            lines[start:end] = []
        elif node.level == 1:
            target = f"seqmodels.{node.module}"
            if _needs_paste(target, hidden):
                if target not in done:
                    done.add(target)
                    before.insert(0, pasted_module(target, done))
                aliases = [f"{a.asname} = {a.name}" for a in node.names if a.asname]
                lines[start:end] = [f"# (from {target}, pasted above)", *aliases]
            else:
                imported = ", ".join(
                    a.name + (f" as {a.asname}" if a.asname else "") for a in node.names
                )
                lines[start:end] = [f"from {target} import {imported}"]
    header = f"# ---- pasted: the source of {name} (inspect.getsource) ----"
    return "\n\n".join([*before, header + "\n" + "\n".join(lines)])


def _needs_paste(name: str, hidden: set[str]) -> bool:
    """Whether module `name` must be pasted rather than imported: it is hidden, or a module the
    sandbox keeps that imports a hidden one (PS4's `seqmodels.rnn_tasks` imports `seqmodels.rnn`),
    which fails in the sandbox however it is imported."""
    if name in hidden:
        return True
    try:
        text = inspect.getsource(importlib.import_module(name))
    except (ImportError, OSError, TypeError):
        return False
    return any(
        isinstance(node, ast.ImportFrom)
        and node.level == 1
        and _needs_paste(f"seqmodels.{node.module}", hidden)
        for node in ast.parse(text).body
    )


def _paste(names: list[str], done: set[str]) -> str:
    """The pasted source of each module of `names` not pasted yet (in that order)."""
    parts = []
    for name in names:
        if name not in done:
            done.add(name)
            parts.append(pasted_module(name, done))
    return "\n\n".join(parts)


def _cell(pasted: str, adapter: str) -> str:
    return "\n\n".join(p.strip("\n") for p in (FUTURE, pasted, adapter) if p.strip())


# ------------------------------------------------------------------ Problem Set 1's adapters

_PS1_BIGRAM_COUNTS = '''
# ---- adapter: the task's interface over the pasted NGramLM ----
def bigram_counts(sentences: list[list[int]], vocab_size: int) -> torch.Tensor:
    """NGramLM(2, V, "mle").fit pads and counts; its sparse top level, as a dense (V, V) table."""
    model = NGramLM(2, vocab_size, "mle").fit(sentences)
    top = model._levels[-1]
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.int64)
    for (h,), r in top.row.items():
        tokens, token_counts = top.followers(r)
        counts[h, torch.from_numpy(tokens)] = torch.from_numpy(token_counts)
    return counts
'''

_PS1_ADD_K = '''
# ---- adapter: NGramLM fitted from a table of bigram counts instead of sentences ----
def _fitted_from_table(counts, smoothing, **options):
    """NGramLM(2, V, smoothing), its levels built by fit's own lines from the table's bigrams."""
    table = counts.cpu()
    model = NGramLM(2, table.shape[0], smoothing, **options)
    pairs = table.nonzero()
    # each bigram (h, w) seen c times, laid out c times as its two tokens; the predicted tokens are
    # the second of each pair (fit's `targets`, which it finds after padding sentences)
    corpus = pairs.repeat_interleave(table[pairs[:, 0], pairs[:, 1]], dim=0).reshape(-1).numpy()
    targets = np.arange(1, len(corpus), 2)
    # fit's lines, from here on
    with _gc_paused():
        ids = _ngram_ids(corpus, model.order)
        ends, level_counts = _distinct(ids[-1], targets)
        levels = [_make_level(_grams(corpus, ends, model.order), level_counts)]
        if model.smoothing == "kneser-ney":
            for m in range(model.order - 1, 0, -1):
                ends, level_counts = _distinct(ids[m - 1], ends)
                levels.insert(0, _make_level(_grams(corpus, ends, m), level_counts))
    model._levels = levels
    return model


def _table(model, like):
    """The model's distribution of every context, as a (V, V) float64 table on `like`'s device."""
    V = model.vocab_size
    return torch.stack([model.distribution([h]) for h in range(V)]).to(like.device)


def add_k_probs(counts: torch.Tensor, k: float) -> torch.Tensor:
    """NGramLM(2, V, "add-k", k=k)'s distribution of each context."""
    return _table(_fitted_from_table(counts, "add-k", k=k), counts)
'''

_PS1_KN_DISCOUNTS = '''
# ---- adapter: the library's Kneser-Ney has one discount, and estimates none ----
def kn_discounts(counts: torch.Tensor) -> torch.Tensor:
    """NGramLM's one discount (its default), for D1, D2 and D3+."""
    D = NGramLM(2, max(counts.shape[0], 3)).discount
    return torch.full((3,), D, dtype=torch.float64, device=counts.device)
'''

_PS1_KNESER_NEY = '''
# ---- adapter: the library's interpolated Kneser-Ney, with its one discount ----
def kneser_ney_probs(counts: torch.Tensor, discounts: torch.Tensor) -> torch.Tensor:
    """NGramLM(2, V, "kneser-ney", discount=D1)'s distribution of each context."""
    model = _fitted_from_table(counts, "kneser-ney", discount=float(discounts[0]))
    return _table(model, counts)
'''

_PS1_PERPLEXITY = '''
# ---- adapter: NGramLM.nll over the given table, then metrics.perplexity; nothing in the library
# counts characters, so the bits per character are left unanswered (NaN) ----
def perplexity_and_bpc(
    probs: torch.Tensor, sentences: list[list[str]], stoi: dict[str, int]
) -> tuple[float, float]:
    """metrics.perplexity(*NGramLM.nll(ids)), the model's probabilities looked up in `probs`."""
    vocab = Vocabulary(sorted(stoi, key=stoi.get))  # ids as in stoi
    model = NGramLM(2, probs.shape[0])
    model._levels = []  # "fitted": its probabilities are the table's
    model._prob = lambda h, w: float(probs[h[0], w])
    return perplexity(*model.nll([vocab.encode(s) for s in sentences])), math.nan
'''

_PS1_FFN = '''
# ---- adapter: FeedForwardLM's forward pass on the given tensors, then softmax.log_softmax ----
def ffn_log_probs(params: dict[str, torch.Tensor], contexts: torch.Tensor) -> torch.Tensor:
    """log_softmax(FeedForwardLM(...)(contexts)) with C = E, H = W_xh, d = b_h, U = E P, b = b_y."""
    E = params["E"]
    (V, m), q = E.shape, params["b_h"].shape[0]
    model = FeedForwardLM(V, contexts.shape[1], m, q)
    tensors = {"C": E, "H": params["W_xh"], "d": params["b_h"], "U": E @ params["P"], "b": params["b_y"]}
    return log_softmax(torch.func.functional_call(model, tensors, (contexts,)))
'''

_PS1_SGD_STEP = '''
# ---- adapter: sgd.sgd_losses, one step on the whole batch, over the task's dict of tensors ----
class _Model:
    """What sgd_losses uses of a model: parameters(), train() and a call giving logits."""

    def __init__(self, params):
        self.params = params

    def parameters(self):
        return iter(self.params.values())

    def train(self):
        return self

    def __call__(self, contexts):
        return ffn_log_probs(self.params, contexts)  # log-probabilities are logits too


def sgd_step(
    params: dict[str, torch.Tensor], windows: torch.Tensor, lr: float, max_norm: float
) -> float:
    """sgd_losses on one batch of every row (the library's SGD step does not clip)."""
    contexts, targets = windows[:, :-1], windows[:, -1]
    batch = torch.arange(len(targets), device=targets.device)
    return sgd_losses(_Model(params), contexts, targets, [batch], lr)[0]
'''

# ------------------------------------------------------------------ Problem Set 2's adapters

_PS2_GRADIENTS = '''
# ---- adapter: the Var graph seen as the engine's Nodes, then Node.backward ----
class _VarNode(Node):
    """A Node standing for one Var: its parents are the mirrors of the Var's parents, and its
    _backward adds what the Var's vjp returns to their grads, as each op of the engine does."""

    def __init__(self, var, mirrors):
        self.var, self.mirrors = var, mirrors
        self.value, self.op = var.value, "var"
        self.grad = torch.zeros_like(var.value)

    @property
    def parents(self):
        return tuple(self.mirrors.of(p) for p in self.var.parents)

    def _backward(self):
        if self.var.vjp is not None:
            for parent, g in zip(self.parents, self.var.vjp(self.grad)):
                parent.grad += g


class _Mirrors(dict):
    def of(self, var):
        if id(var) not in self:
            self[id(var)] = _VarNode(var, self)
        return self[id(var)]


def gradients(output: Var, inputs: list[Var], grad: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Node.backward over the mirrored graph; each input's accumulated grad, copied."""
    mirrors = _Mirrors()
    mirrors.of(output).backward(grad)
    return [mirrors.of(x).grad.clone() for x in inputs]
'''

_PS2_BROADCAST_OPS = '''
# ---- adapter: autodiff._unbroadcast is sum_to; the engine has no product and no sigmoid ----
def sum_to(grad: torch.Tensor, shape) -> torch.Tensor:
    """`grad` summed over the axes broadcasting added or stretched, to `shape` (a new tensor)."""
    return _unbroadcast(grad, torch.Size(shape)).clone()


def mul(a: Var, b: Var) -> Var:
    """The node of a * b (broadcast), its vjp summing each gradient back to its operand's shape."""
    # YOUR CODE HERE
    raise NotImplementedError()


def sigmoid(a: Var) -> Var:
    """The node of sigmoid(a), elementwise; its vjp is g * y * (1 - y)."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''

_PS2_RNN_LM = '''
# ---- adapter: RNNLM (Elman core) on the given tensors, then softmax.log_softmax ----
def rnn_lm_log_probs(
    params: dict[str, torch.Tensor], inputs: torch.Tensor, h0: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """log_softmax of RNNLM(...)(inputs, h0)'s logits, its two biases b and 0; and the last state."""
    (V, m), q = params["E"].shape, params["b"].shape[0]
    model = RNNLM(V, m, q, core="elman")
    tensors = {
        "embedding.weight": params["E"],
        "rnn.weight_ih_l0": params["W_xh"],
        "rnn.weight_hh_l0": params["W_hh"],
        "rnn.bias_ih_l0": params["b"],
        "rnn.bias_hh_l0": torch.zeros_like(params["b"]),
        "output.weight": params["W_hy"],
        "output.bias": params["b_y"],
    }
    logits, h_last = torch.func.functional_call(model, tensors, (inputs,), {"h0": h0})
    return log_softmax(logits), h_last
'''

_PS2_LM_BPTT = '''
# ---- rnn.bptt (pasted above) needs the gradient reaching each state from the output layer and
# the loss, which no library code computes by hand, and has no embedding: left unanswered ----
def lm_bptt(
    params: dict[str, torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor, h0: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The mean NLL of one chunk and its gradients (every parameter and h0), by hand."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''

_PS2_TBPTT_STEP = '''
# ---- adapter: rnn.truncated_bptt_step with plain SGD, on the task's model ----
class _Model:
    """What truncated_bptt_step uses of a model: a call giving (logits, last state), parameters()."""

    def __init__(self, params):
        self.params = params

    def parameters(self):
        return iter(self.params.values())

    def __call__(self, inputs, h0=None):
        return rnn_lm_log_probs(self.params, inputs, h0)  # log-probabilities are logits too


def tbptt_step(
    params: dict[str, torch.Tensor], batch: torch.Tensor, h: torch.Tensor, lr: float, max_norm: float
) -> tuple[float, torch.Tensor]:
    """truncated_bptt_step(model, inputs, targets, h, SGD(lr), clip=max_norm)."""
    optimizer = torch.optim.SGD(list(params.values()), lr=lr)
    return truncated_bptt_step(_Model(params), batch[:, :-1], batch[:, 1:], h, optimizer, max_norm)
'''

# ------------------------------------------------------------------ Problem Set 3's adapters

_PS3_TIE = '''
# ---- adapter: the CIFG as an LSTM whose forget rows are minus its input rows (f = 1 - i) ----
def _tied_lstm_tensors(params):
    """gated.LSTM's parameters (rows i, f, g, o) from the task's W, U, b (rows i, o, g); the
    library's LSTM has no peepholes, so p_i and p_o are left out (right only where they are 0)."""
    H = params["U"].shape[1]
    (Wi, Wo, Wg), (Ui, Uo, Ug), (bi, bo, bg) = (params[k].split(H) for k in ("W", "U", "b"))
    return {
        "weight_ih_l0": torch.cat([Wi, -Wi, Wg, Wo]),
        "weight_hh_l0": torch.cat([Ui, -Ui, Ug, Uo]),
        "bias_ih_l0": torch.cat([bi, -bi, bg, bo]),
        "bias_hh_l0": torch.zeros(4 * H, dtype=bi.dtype, device=bi.device),
    }


def cifg_step(params, x_t, h, c):
    """gated.LSTM, one step, with the tied weights."""
    lstm = LSTM(x_t.shape[1], h.shape[1])
    _, (h_new, c_new) = torch.func.functional_call(lstm, _tied_lstm_tensors(params), (x_t[:, None], (h, c)))
    return h_new, c_new
'''

_PS3_BACKWARD = '''
# ---- nothing in the library differentiates an LSTM step by hand: left unanswered ----
def cifg_step_backward(params, x_t, h, c, dh_new, dc_new):
    """The gradients of one CIFG step (W, U, b, p_i, p_o, x_t, h, c) from those of (h_t, c_t), by hand."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''

_PS3_LM = '''
# ---- adapter: RNNLM with the hand-written LSTM core and the tie, then softmax.log_softmax ----
def cifg_lm_log_probs(params, inputs):
    """log_softmax of RNNLM(V, m, H, core="lstm-hand")(inputs)'s logits, the forget gate tied."""
    (V, m), H = params["E"].shape, params["U"].shape[1]
    model = RNNLM(V, m, H, core="lstm-hand")
    tensors = {f"rnn.{k}": v for k, v in _tied_lstm_tensors(params).items()}
    tensors.update({"embedding.weight": params["E"], "output.weight": params["W_y"], "output.bias": params["b_y"]})
    logits, _ = torch.func.functional_call(model, tensors, (inputs,))
    return log_softmax(logits)
'''

_PS3_NORMS = '''
# ---- gradients.loss_gradient_by_position measures the verb's loss, not the agreement margin:
# no library code computes the task's quantity, left unanswered ----
def verb_gradient_norms(params, sentences, distance):
    """(distance + 2,): the mean over sentences of ||d margin / d e_t|| at every input position t."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''

_PS3_ADAM = '''
# ---- adapter: the library's training loops' Adam step (torch.optim.Adam, F.cross_entropy,
# clip_grad_norm_), its optimiser kept in the state ----
def adam_step(params, state, batch, lr, max_norm):
    """One step as train_lm takes it, on the task's model."""
    if "optimizer" not in state:
        state["optimizer"] = torch.optim.Adam(list(params.values()), lr=lr)
    optimizer = state["optimizer"]
    log_probs = cifg_lm_log_probs(params, batch[:, :-1])
    loss = F.cross_entropy(log_probs.reshape(-1, log_probs.shape[-1]), batch[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
    optimizer.step()
    return loss.item()
'''

# ------------------------------------------------------------------ Problem Set 4's adapters

_PS4_ATTENTION = '''
# ---- adapter: attention.scaled_dot_attention, as it is ----
def masked_attention(q, k, v, key_mask):
    """Scaled dot-product attention over the real keys: (context, weights)."""
    return scaled_dot_attention(q, k, v, key_mask)
'''

_PS4_BACKWARD = '''
# ---- nothing in the library differentiates attention by hand: left unanswered ----
def masked_attention_backward(q, k, v, key_mask, d_context):
    """The gradients (dq, dk, dv) of masked_attention's context, by hand."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''

_PS4_NLL = '''
# ---- adapter: rnn.masked_sequence_nll, as it is ----
def masked_token_nll(logits, targets, mask):
    """Mean of -log softmax(logits)[target] over the real positions: ()."""
    return masked_sequence_nll(logits, targets, mask)
'''

_PS4_MODEL = '''
# ---- adapter: Seq2Seq(attention="scaled_dot") on the task's tensors; the library's decoder has no
# input feeding, so its GRU gets dec_W_ih's embedding columns only ----
def _library_model(params):
    (V_x, m), H = params["E_x"].shape, params["enc_W_hh"].shape[1]
    model = Seq2Seq(V_x, params["E_y"].shape[0], m, H, attention="scaled_dot")
    tensors = {
        "encoder.embedding.weight": params["E_x"],
        "encoder.rnn.weight_ih_l0": params["enc_W_ih"], "encoder.rnn.weight_hh_l0": params["enc_W_hh"],
        "encoder.rnn.bias_ih_l0": params["enc_b_ih"], "encoder.rnn.bias_hh_l0": params["enc_b_hh"],
        "embedding.weight": params["E_y"],
        "rnn.weight_ih_l0": params["dec_W_ih"][:, :m], "rnn.weight_hh_l0": params["dec_W_hh"],
        "rnn.bias_ih_l0": params["dec_b_ih"], "rnn.bias_hh_l0": params["dec_b_hh"],
        "combine.weight": params["W_c"], "out.weight": params["W_y"], "out.bias": params["b_y"],
    }
    return model.to(params["W_y"].dtype), tensors


def g2p_log_probs(params, src, tgt_in):
    """Teacher-forced log-probabilities (B, T, V_y) of the library's attention encoder-decoder."""
    model, tensors = _library_model(params)
    mask = src != EOS
    batch = PairBatch(src, mask.sum(dim=1).cpu(), mask, tgt_in, tgt_in, torch.ones_like(mask[:, :1]))
    logits, _ = torch.func.functional_call(model, tensors, (batch,))
    return torch.log_softmax(logits, dim=-1)
'''

_PS4_DECODE = '''
# ---- adapter: seq2seq.translate with that model, padded with </s> ----
def g2p_greedy_decode(params, src, max_len):
    """Greedy decoding: (N, max_len) int64 phoneme ids, </s> after the first </s>."""
    model, tensors = _library_model(params)
    model.load_state_dict({k: v.detach() for k, v in tensors.items()})
    model.to(src.device)
    sources = [[int(x) for x in row if x != EOS] for row in src]
    outputs = translate(model, sources, max_len=max_len).outputs
    out = torch.full((len(sources), max_len), EOS, dtype=torch.int64, device=src.device)
    for i, ids in enumerate(outputs):
        out[i, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
    return out
'''

_PS4_STEP = '''
# ---- adapter: the body of seq2seq.train_seq2seq's loop (Seq2Seq.loss calls F.cross_entropy) ----
def train_step(params, optimizer, src, tgt, max_norm):
    """One teacher-forced step: the loss before the update, as a float."""
    model, tensors = _library_model(params)
    mask = src != EOS
    _, tgt_mask = pair_masks(src, tgt)
    batch = PairBatch(src, mask.sum(dim=1).cpu(), mask, tgt[:, :-1], tgt[:, 1:], tgt_mask)
    logits, _ = torch.func.functional_call(model, tensors, (batch,))
    loss = masked_sequence_nll(logits, batch.tgt_out, batch.tgt_mask)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
    optimizer.step()
    return loss.item()
'''

# ------------------------------------------------------------------ Problem Set 5's adapters

_PS5_ATTENTION = '''
# ---- adapter: transformer.MultiHeadAttention (no grouped-query attention, no cache) ----
def _library_attention(d, n_heads, Wq, Wk, Wv, Wo):
    mha = MultiHeadAttention(d, n_heads)
    zeros = torch.zeros(d, dtype=Wq.dtype, device=Wq.device)
    tensors = {"q_proj.weight": Wq, "k_proj.weight": Wk, "v_proj.weight": Wv, "out_proj.weight": Wo}
    tensors |= {f"{k}_proj.bias": zeros for k in ("q", "k", "v", "out")}
    return mha, tensors


def gqa_attention(params, x, n_heads, n_kv_heads, cache=None):
    """MultiHeadAttention with causal=True; its keys and values split by its own _heads."""
    if n_kv_heads != n_heads or cache is not None:
        raise NotImplementedError("the library has no grouped-query attention and no cache")
    B, T, d = x.shape
    mha, tensors = _library_attention(d, n_heads, params["Wq"], params["Wk"], params["Wv"], params["Wo"])
    y, _ = torch.func.functional_call(mha, tensors, (x,), {"causal": True})
    K = mha._heads(x @ params["Wk"].T).view(B, n_heads, T, d // n_heads)
    V = mha._heads(x @ params["Wv"].T).view(B, n_heads, T, d // n_heads)
    return y, (K, V)
'''

_PS5_LM = '''
# ---- adapter: transformer.TransformerLM (learned positions, pre-LN), then log_softmax ----
def lm_log_probs(params, tokens, n_heads, n_kv_heads, caches=None):
    """TransformerLM run on the task's tensors; no grouped-query attention, no cache."""
    if n_kv_heads != n_heads or caches is not None:
        raise NotImplementedError("the library has no grouped-query attention and no cache")
    (V, d), layers = params["E"].shape, sum(1 for k in params if k.endswith(".Wq"))
    d_ff, max_len = params["L0.W1"].shape[0], params["P"].shape[0]
    model = TransformerLM(V, d, n_heads, layers, d_ff, max_len, positions="learned")
    zeros = torch.zeros(d, dtype=params["E"].dtype, device=params["E"].device)
    tensors = {
        "embed.embedding.weight": params["E"] / math.sqrt(d),
        "embed.positions.embedding.weight": params["P"],
        "norm.weight": params["lnf.g"], "norm.bias": params["lnf.b"],
        "output.weight": params["W_out"], "output.bias": params["b_out"],
    }
    for i in range(layers):
        L, b = f"L{i}", f"blocks.{i}"
        for mine, theirs in (("Wq", "q_proj"), ("Wk", "k_proj"), ("Wv", "v_proj"), ("Wo", "out_proj")):
            tensors[f"{b}.self_attn.{theirs}.weight"] = params[f"{L}.{mine}"]
            tensors[f"{b}.self_attn.{theirs}.bias"] = zeros
        for mine, theirs in (("W1", "linear1.weight"), ("b1", "linear1.bias"), ("W2", "linear2.weight"),
                             ("b2", "linear2.bias"), ("ln1.g", "norm1.weight"), ("ln1.b", "norm1.bias"),
                             ("ln2.g", "norm2.weight"), ("ln2.b", "norm2.bias")):
            tensors[f"{b}.{theirs}"] = params[f"{L}.{mine}"]
    logits, _ = torch.func.functional_call(model, tensors, (tokens,))
    K = [None] * layers
    return torch.log_softmax(logits, dim=-1), K
'''

_PS5_TRAIN = '''
# ---- adapter: the library's training step (F.cross_entropy, clip_grad_norm_), on Task 3's model ----
def train_step(params, optimizer, batch, lr, max_norm, n_heads, n_kv_heads):
    """One step as the library's train_lm takes it."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    log_probs, _ = lm_log_probs(params, batch[:, :-1], n_heads, n_kv_heads)
    loss = F.cross_entropy(log_probs.reshape(-1, log_probs.shape[-1]), batch[:, 1:].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
    optimizer.step()
    return loss.item()
'''

_PS5_DECODERS = """
# ---- adapter: decoding.temperature, top_p_filter and beam_search ----
_library_temperature = temperature


def with_temperature(log_probs, t):
    return torch.log_softmax(_library_temperature(log_probs, t), dim=-1)


def top_p_mask(log_probs, p):
    return top_p_filter(log_probs, p) > -math.inf


def beam_search(next_log_probs, beam_size, max_len, bos, eos, alpha, _library_beam=beam_search):
    found = _library_beam(next_log_probs, beam_size, max_len, bos, eos, alpha)
    if not found:
        return torch.zeros(0, dtype=torch.int64), -math.inf
    return torch.tensor(found[0].tokens, dtype=torch.int64), found[0].score
"""

#: answer cell → (the library modules its paste needs, its adapter); a module already pasted in an
#: earlier cell is not pasted again
_PLAN: dict[str, dict[str, tuple[list[str], str]]] = {
    "ps1": {
        "bigram_counts": (["seqmodels.ngram"], _PS1_BIGRAM_COUNTS),
        "add_k_probs": ([], _PS1_ADD_K),
        "kn_discounts": ([], _PS1_KN_DISCOUNTS),
        "kneser_ney_probs": ([], _PS1_KNESER_NEY),
        "perplexity_and_bpc": ([], _PS1_PERPLEXITY),
        "ffn_log_probs": (["seqmodels.feedforward", "seqmodels.softmax"], _PS1_FFN),
        "sgd_step": (["seqmodels.sgd"], _PS1_SGD_STEP),
    },
    "ps2": {
        "gradients": (["seqmodels.autodiff"], _PS2_GRADIENTS),
        "broadcast_ops": ([], _PS2_BROADCAST_OPS),
        "rnn_lm_log_probs": (["seqmodels.rnn", "seqmodels.softmax"], _PS2_RNN_LM),
        "lm_bptt": ([], _PS2_LM_BPTT),
        "tbptt_step": ([], _PS2_TBPTT_STEP),
    },
    "ps3": {
        "cifg_step": (["seqmodels.gated"], _PS3_TIE),
        "cifg_step_backward": ([], _PS3_BACKWARD),
        "cifg_lm_log_probs": (["seqmodels.rnn", "seqmodels.softmax"], _PS3_LM),
        "verb_gradient_norms": ([], _PS3_NORMS),
        "adam_step": ([], _PS3_ADAM),
    },
    "ps4": {
        "masked_attention": (["seqmodels.attention"], _PS4_ATTENTION),
        "masked_attention_backward": ([], _PS4_BACKWARD),
        "masked_token_nll": (["seqmodels.rnn"], _PS4_NLL),
        "g2p_log_probs": (["seqmodels.seq2seq"], _PS4_MODEL),
        "g2p_greedy_decode": ([], _PS4_DECODE),
        "train_step": ([], _PS4_STEP),
    },
    "ps5": {
        "gqa_attention": (["seqmodels.transformer"], _PS5_ATTENTION),
        "lm_log_probs": ([], _PS5_LM),
        "train_step": ([], "import torch.nn.functional as F\n" + _PS5_TRAIN),
        "decoders": (["seqmodels.decoding"], _PS5_DECODERS),
    },
}

#: the graded tasks of parts A and B of each set, with no answer cell of their own (training)
TRAINING = {
    "ps1": "ffn_training",
    "ps2": "rnn_training",
    "ps3": "cifg_training",
    "ps4": "g2p_training",
    "ps5": "lm_training",
}


def paste_answers(ps: str) -> dict[str, str]:
    """grade_id → answer-cell code of `ps`'s paste submission (part D's experiment left out)."""
    done: set[str] = set()
    answers = {
        cell: _cell(_paste(modules, done), adapter)
        for cell, (modules, adapter) in _PLAN[ps].items()
    }
    answers["d_experiment"] = EXPERIMENT_LEFT_OUT
    return answers


def feedback_points(html: str) -> dict[str, tuple[float, float]]:
    """{task: (points earned, points of the task)} from a feedback page's "task: p of P points"."""
    return {
        t: (float(p), float(m))
        for t, p, m in re.findall(r"(\w+): ([\d.]+) of ([\d.]+) points", html)
    }


def paste_bound(points: dict[str, tuple[float, float]], ps: str = "ps1") -> float:
    """What the paste can earn of parts A and B in the full profile, from its smoke-profile
    `points`: what they paid, plus the training task's B2 tier ("runs", 0.5); B3 and B4 need the
    trajectory task's every case, which the library's forbidden tools fail."""
    return sum(p for p, _ in points.values()) + RUNS_POINTS[ps]


def answer_cell_errors(notebook: nbformat.NotebookNode, ps: str) -> dict[str, list[str]]:
    """grade_id → what the grader says each answer cell of the paste raised, in the graded
    `notebook` (it keeps a student cell's error as "[this cell raised NameError; ...]"): none, for
    a paste that still pastes (its source compiles and imports nothing hidden)."""
    raised = {}
    for cell in notebook.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in _PLAN[ps]:
            texts = [str(o.get("data", {}).get("text/plain", "")) for o in cell.get("outputs", [])]
            errors = [
                o.get("ename", "?")
                for o in cell.get("outputs", [])
                if o.get("output_type") == "error"
            ]
            errors += [m for t in texts for m in re.findall(r"\[this cell raised (\w+)", t)]
            if errors:
                raised[grade_id] = errors
    return raised


#: each set's paste as last measured (points of parts A and B, per task), for the tests' messages
MEASURED = {
    "ps1": (
        "PS1's paste earned 1.87 of parts A and B's 14 points in the smoke profile and 2.37 (17 %) "
        "in the full one: ffn_log_probs 0.5 of 0.5 (FeedForwardLM with U = E P, "
        "softmax.log_softmax), kneser_ney_probs 0.5 of 3.5 (the one-discount case, 1 of 7), "
        "bigram_counts 0.4375 of 0.5 (7 of 8 cases), add_k_probs 0.4286 of 0.5 (6 of 7), "
        "kn_discounts 0, perplexity_and_bpc 0 (no library code counts characters), sgd_step 0 "
        "(torch's loss, held for review) and ffn_training 0.5 of 4 (B2, runs end to end)"
    ),
    "ps2": (
        "PS2's paste earned 1.92 of parts A and B's 14 points in the smoke profile and 2.42 (17 %) "
        "in the full one: gradients 0.5 of 0.5 (Node.backward over Nodes mirroring the Vars), "
        "rnn_lm_log_probs 0.5 of 0.5 (RNNLM with b_hh = 0, softmax.log_softmax), broadcast_ops "
        "0.923 of 3 (sum_to, 4 of 13 cases), lm_bptt 0, tbptt_step 0 (torch's loss and clipping, "
        "held for review) and rnn_training 0.5 of 4 (B2, runs end to end)"
    ),
}
