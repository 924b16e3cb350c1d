"""The in-kernel half of a training task (part B of a problem set): train, then answer the grader.

A training task's locked test cell trains the student's model from initial parameters and batches
that this module builds from a data specification (`KJVWindows`), then hands the model to a
`Training` object. The kernel decides nothing:

- `Training.curve` captures the training losses, one per step (``kind: "curve"``);
- `Training.model` registers the function that maps contexts to log-probabilities (and, for a
  task that decodes, others by name: ``decode``, greedy ids of sources). After the test
  cell, the grader sends an **evaluation request** of its own (`request`): contexts of held-out
  data the kernel could not read before (`seqmodels.grading.heldout` builds them in the grader's
  process), a probe, and the last training batch; each call names the registered function it runs
  (`Call`). `answer` runs them inside `torch.inference_mode()` (no backward pass, no optimiser
  step) and emits what they return as capture records (``kind: "rows"``): log-probability rows,
  or the ids a decoder chose. The grader validates them and computes the metric itself.

The data pipeline is library code, so the test cell and the grader build the same batches.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from itertools import islice

import torch
from IPython.display import display
from safetensors.torch import load, save

from .capture import MIME, origins

# one `answer` record holds at most 256 tokens' rows (256 × 1,538 float32 ≈ 1.6 MB, 2.1 MB in base64;
# records hold 8 MB): a call of rows of T tokens is answered 256 // T rows at a time; a call of a
# function that returns ids (``decode``: a few dozen int64 per row) 256 rows at a time
CHUNK_ROWS = 256
#: task → (registered functions by name, device)
_MODELS: dict[str, tuple[dict[str, Callable[..., torch.Tensor]], torch.device]] = {}


@dataclass(frozen=True)
class Call:
    """One call of an evaluation request: the registered function named `function` run on `args`,
    tensors whose first dimension counts the rows (answered a chunk of rows at a time). A call
    given as a bare tensor is ``Call("log_probs", (tensor,))``."""

    function: str
    args: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class KJVWindows:
    """Windows of `window` + 1 tokens of the KJV's training split (contexts and the next token),
    in the vocabulary of training words seen at least `min_count` times, drawn `batch` at a time
    for `steps` steps from a generator seeded with `seed` (sentences padded as
    `seqmodels.data.context_windows` pads them)."""

    min_count: int = 30
    window: int = 3
    batch: int = 256
    steps: int = 8000
    seed: int = 0

    def vocabulary(self):
        from ..data import kjv_sentences
        from ..vocab import Vocabulary

        return Vocabulary.build(kjv_sentences("train"), min_count=self.min_count)

    def windows(self) -> torch.Tensor:
        """Every training window, ``(N, window + 1)`` int64: `window` context ids, then the target."""
        from ..data import context_windows, kjv_sentences

        vocab = self.vocabulary()
        contexts, targets = context_windows(
            [vocab.encode(s) for s in kjv_sentences("train")], self.window
        )
        return torch.cat([contexts, targets[:, None]], dim=1)

    def batches(self, windows: torch.Tensor | None = None) -> Iterator[torch.Tensor]:
        """The `steps` training batches, ``(batch, window + 1)`` each, always the same ones."""
        windows = self.windows() if windows is None else windows
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(self.steps):
            yield windows[torch.randint(len(windows), (self.batch,), generator=generator)]

    def last_batch(self) -> torch.Tensor:
        """The batch of the last step (the grader's check that the evaluated model is the trained one)."""
        return next(islice(self.batches(), self.steps - 1, None))


@dataclass(frozen=True)
class KJVStream:
    """The KJV's training split as one stream of ids (each verse followed by ``</s>``), in the
    vocabulary of training words seen at least `min_count` times, cut into `batch` contiguous rows
    and read `bptt` tokens at a time for truncated backpropagation through time: batch ``k`` is
    ``(batch, bptt + 1)``, its inputs ``[:, :-1]`` and targets ``[:, 1:]``, and row ``b`` of batch
    ``k + 1`` continues row ``b`` of batch ``k`` (so the hidden state carries over). The first
    batch starts `seed` × 97 chunks into the rows (wrapping around)."""

    min_count: int = 30
    batch: int = 32
    bptt: int = 20
    steps: int = 1000
    seed: int = 0

    vocabulary = KJVWindows.vocabulary

    def rows(self) -> torch.Tensor:
        """``(batch, L)``: the stream cut into `batch` contiguous rows (the remainder dropped)."""
        from ..data import kjv_sentences

        vocab = self.vocabulary()
        stream = torch.tensor(
            [i for s in kjv_sentences("train") for i in [*vocab.encode(s), vocab.eos]],
            dtype=torch.int64,
        )
        per_row = len(stream) // self.batch
        return stream[: per_row * self.batch].view(self.batch, per_row)

    def batches(self, rows: torch.Tensor | None = None) -> Iterator[torch.Tensor]:
        """The `steps` training batches, ``(batch, bptt + 1)`` each, always the same ones."""
        rows = self.rows() if rows is None else rows
        chunks = (rows.shape[1] - 1) // self.bptt
        for step in range(self.steps):
            start = ((self.seed * 97 + step) % chunks) * self.bptt
            yield rows[:, start : start + self.bptt + 1]

    def last_batch(self) -> torch.Tensor:
        """The batch of the last step (the grader's check that the evaluated model is the trained one)."""
        return next(islice(self.batches(), self.steps - 1, None))


@dataclass(frozen=True)
class AgreementSentences:
    """Sentences of the agreement language (`seqmodels.synthetic.AgreementLanguage`) at `distance`:
    `sentences` of them drawn once from a generator seeded with `language_seed`, each written
    ``[<s>, noun, fillers..., verb, </s>]`` (``distance + 4`` ids), then drawn `batch` at a time for
    `steps` steps from a generator seeded with `seed`. A batch's inputs are ``[:, :-1]`` and its
    targets ``[:, 1:]``: every sentence has the same length, so there is no padding, and the verb
    is predicted at input position ``distance + 1``."""

    distance: int = 15
    sentences: int = 20_000
    batch: int = 64
    steps: int = 1200
    seed: int = 0
    language_seed: int = 115

    def language(self):
        from ..synthetic import AgreementLanguage

        return AgreementLanguage(distance=self.distance)

    def vocabulary(self):
        return self.language().vocab

    def written(self, sentences: list[list[int]]) -> torch.Tensor:
        """``(N, distance + 4)`` int64: each sentence between ``<s>`` and ``</s>``."""
        vocab = self.vocabulary()
        return torch.tensor([[vocab.bos, *s, vocab.eos] for s in sentences], dtype=torch.int64)

    def rows(self) -> torch.Tensor:
        """Every training sentence, written (`written`)."""
        generator = torch.Generator().manual_seed(self.language_seed)
        return self.written(self.language().sample(self.sentences, generator))

    def batches(self, rows: torch.Tensor | None = None) -> Iterator[torch.Tensor]:
        """The `steps` training batches, ``(batch, distance + 4)`` each, always the same ones."""
        rows = self.rows() if rows is None else rows
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(self.steps):
            yield rows[torch.randint(len(rows), (self.batch,), generator=generator)]

    def last_batch(self) -> torch.Tensor:
        """The batch of the last step (the grader's check that the evaluated model is the trained one)."""
        return next(islice(self.batches(), self.steps - 1, None))


@dataclass(frozen=True)
class G2PPairs:
    """Grapheme-to-phoneme pairs of the CMU dictionary's training split (`seqmodels.data.load_g2p`:
    one pair per pronunciation of each training word of at most `max_letters` letters), drawn
    `batch` at a time for `steps` steps from a generator seeded with `seed`. A batch is
    ``(src, tgt)``: ``src (batch, S)`` the letter ids padded with ``</s>`` (id 1, never a letter)
    to the batch's longest word, ``tgt (batch, T + 2)`` the phoneme ids written
    ``<s> y_1 .. y_T </s>`` and padded with ``</s>`` after that (`written`). The decoder reads
    ``tgt[:, :-1]`` and predicts ``tgt[:, 1:]`` up to its first ``</s>``."""

    max_letters: int = 10
    batch: int = 64
    steps: int = 1000
    seed: int = 0

    def g2p(self):
        from ..data import load_g2p

        return load_g2p()

    def vocabulary(self):
        """The target (phoneme) vocabulary: the rows' width of a teacher-forced answer."""
        return self.g2p().phonemes

    def pairs(self) -> list[tuple[list[int], list[int]]]:
        """Every training pair ``(letter ids, phoneme ids)`` of at most `max_letters` letters."""
        return self.g2p().pairs("train", max_letters=self.max_letters)

    @staticmethod
    def written(pairs) -> tuple[torch.Tensor, torch.Tensor]:
        """``(src, tgt)`` of `pairs` (see the class), int64, padded with ``</s>``."""
        eos = 1
        width = max(len(s) for s, _ in pairs)
        length = max(len(t) for _, t in pairs)
        src = torch.full((len(pairs), width), eos, dtype=torch.int64)
        tgt = torch.full((len(pairs), length + 2), eos, dtype=torch.int64)
        tgt[:, 0] = 0  # <s>
        for i, (s, t) in enumerate(pairs):
            src[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.int64)
            tgt[i, 1 : len(t) + 1] = torch.as_tensor(list(t), dtype=torch.int64)
        return src, tgt

    def batches(self, pairs=None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The `steps` training batches ``(src, tgt)``, always the same ones."""
        pairs = self.pairs() if pairs is None else pairs
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(self.steps):
            pick = torch.randint(len(pairs), (self.batch,), generator=generator).tolist()
            yield self.written([pairs[i] for i in pick])

    def last_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch of the last step (the grader's check that the evaluated model is the trained one)."""
        return next(islice(self.batches(), self.steps - 1, None))


@dataclass(frozen=True)
class CapstoneText:
    """Problem Set 6's held-out evaluation of a model trained before grading (the capstone): no
    training at grading time. The student's checkpoint (`checkpoint`, a regular file of at most
    `max_bytes` in the notebook's folder; the grader checks it before its request) holds byte-level
    BPE merges (at most `max_merges`, `seqmodels.bytebpe`) and a model over their ``256 + merges``
    ids that reads `context` tokens; the grader encodes `sequences` stretches of held-out text with
    the student's own merges (`Training.tokenizer`) and measures bits per byte, which do not depend
    on the tokenizer. (The answer's rows are ``(sequences × 1.5) × context × (256 + merges)``
    float32: 40 stretches of 128 tokens and a vocabulary of at most 1,280 ids keep it under 40 MB,
    which a sandboxed kernel sends within the grader's request's time.)"""

    context: int = 128
    sequences: int = 40
    max_merges: int = 1024
    checkpoint: str = "capstone.safetensors"
    max_bytes: int = 16 * 2**20
    max_other_bytes: int = 2**20  # the training log and anything else beside the notebook
    steps: int = 0  # nothing is trained at grading time: no loss curve


DATA = {
    "CapstoneText": CapstoneText,
    "KJVWindows": KJVWindows,
    "KJVStream": KJVStream,
    "AgreementSentences": AgreementSentences,
    "G2PPairs": G2PPairs,
}


def data_from(
    spec: dict,
) -> KJVWindows | KJVStream | AgreementSentences | G2PPairs | CapstoneText:
    """The data specification a manifest stores (``{"kind": "KJVWindows", ...fields}``)."""
    fields = dict(spec)
    kind = fields.pop("kind", None)
    if kind not in DATA:
        raise ValueError(f"expected a data kind among {sorted(DATA)}, got {kind!r}")
    return DATA[kind](**fields)


class Training:
    """A training task's captures: the loss curve, and the model that answers the grader.

    `tiers` describe how the grader pays the task; they are read from the solution's run only (the
    references' manifest stores them), like `Checker`'s `forbidden`. `requires` names the tasks
    whose every case must pass before the metric tiers are paid (the trajectory).
    """

    def __init__(
        self,
        task: str,
        data: KJVWindows | KJVStream | AgreementSentences | G2PPairs,
        tiers: dict,
        functions: list[str] = (),
        requires: list[str] = (),
        heldout: str = "web_test_windows",
    ):
        self.task, self.data = task, data
        start = {
            "task": task,
            "kind": "start",
            "origins": origins(functions),
            "training": {
                "data": {"kind": type(data).__name__, **asdict(data)},
                "tiers": dict(tiers),
                "requires": list(requires),
                "heldout": heldout,
            },
        }
        _MODELS.pop(task, None)
        display({MIME: start}, raw=True)

    def curve(self, losses) -> None:
        """Capture the training loss of every step (a list of floats or a 1-D tensor)."""
        record: dict[str, object] = {"task": self.task, "kind": "curve"}
        try:
            values = torch.as_tensor([float(x) for x in losses], dtype=torch.float64)
            record["data"] = base64.b64encode(save({"losses": values})).decode()
        except Exception as error:  # noqa: BLE001 - the student's loss values are the result
            record["error"] = f"{type(error).__name__}: {error}"
        display({MIME: record}, raw=True)

    def model(
        self,
        log_probs: Callable[..., torch.Tensor] | None = None,
        device: torch.device | str = "cpu",
        **functions: Callable[..., torch.Tensor],
    ) -> None:
        """Register the trained model. For `KJVWindows`, ``log_probs(contexts)`` maps ``(N, window)``
        int64 contexts to ``(N, V)`` log-probabilities of the next token; for `KJVStream`,
        ``log_probs(inputs)`` maps ``(N, T)`` int64 inputs, read from a zero state, to ``(N, T, V)``
        log-probabilities of the token after each position; for `G2PPairs`,
        ``log_probs(src, tgt_in)`` gives the teacher-forced ``(N, T, V)`` log-probabilities and
        ``decode(src)`` the greedy ids ``(N, L)`` int64, ``</s>`` after the first ``</s>``. Other
        functions are registered by name, as ``decode`` is. Inputs arrive on `device`. The
        grader's request calls them after this cell."""
        named = {"log_probs": log_probs, **functions}
        _MODELS[self.task] = (
            {k: f for k, f in named.items() if f is not None},
            torch.device(device),
        )

    def tokenizer(self, merges) -> None:
        """Capture the byte-level BPE merges of a `CapstoneText` task's model (pairs of ids, merge
        ``k`` making id ``256 + k``): the grader encodes its held-out text with them."""
        record: dict[str, object] = {"task": self.task, "kind": "tokenizer"}
        try:
            pairs = torch.as_tensor([[int(a), int(b)] for a, b in merges], dtype=torch.int64)
            record["data"] = base64.b64encode(save({"merges": pairs.reshape(-1, 2)})).decode()
        except Exception as error:  # noqa: BLE001 - the student's merges are the result
            record["error"] = f"{type(error).__name__}: {error}"
        display({MIME: record}, raw=True)

    def done(self) -> None:
        display({MIME: {"task": self.task, "kind": "done"}}, raw=True)
        print(f"✓ {self.task}: training finished — the grader evaluates the model after this cell")


def request(task: str, nonce: str, calls: dict[str, torch.Tensor | Call]) -> str:
    """The code of the grader's evaluation request: `calls` are named `Call`s (a bare tensor: the
    contexts of a ``log_probs`` call)."""
    calls = {k: c if isinstance(c, Call) else Call("log_probs", (c,)) for k, c in calls.items()}
    tensors = {f"{k}/{i}": a.contiguous() for k, c in calls.items() for i, a in enumerate(c.args)}
    functions = {k: c.function for k, c in calls.items()}
    payload = base64.b64encode(save(tensors)).decode()
    return (
        "from seqmodels.grading.training import answer as __seqmodels_answer\n"
        f"__seqmodels_answer({task!r}, {nonce!r}, {payload!r}, {functions!r})"
    )


def answer(task: str, nonce: str, payload: str, functions: dict[str, str] | None = None) -> None:
    """Run the registered functions on each call's arguments (no gradients) and emit what they
    return: ``log_probs`` rows as float32, any other function's result (``decode``'s ids) as it
    is (the grader checks its dtype and shape). `functions` names each call's function
    (``log_probs`` where it names none)."""

    def emit(**fields) -> None:
        display({MIME: {"task": task, "kind": "rows", "nonce": nonce, **fields}}, raw=True)

    registered = _MODELS.get(task)
    if registered is None:
        emit(call="", chunk=0, error="no model was registered (Training.model was not called)")
        return
    models, device = registered
    tensors = load(base64.b64decode(payload))
    grouped: dict[str, dict[int, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        call, _, index = key.rpartition("/")
        grouped.setdefault(call, {})[int(index)] = tensor
    for call, parts in sorted(grouped.items()):
        args = [parts[i] for i in range(len(parts))]
        name = (functions or {}).get(call, "log_probs")
        fn = models.get(name)
        if fn is None:
            emit(call=call, chunk=0, error=f"no model was registered for {name!r} (Training.model)")
            return
        tokens = args[-1].shape[1] if name == "log_probs" and args[-1].ndim > 1 else 1
        per_chunk = max(1, CHUNK_ROWS // max(1, tokens))
        for chunk, start in enumerate(range(0, len(args[0]), per_chunk)):
            try:
                with torch.inference_mode():
                    rows = fn(*(a[start : start + per_chunk].to(device) for a in args))
                if name == "log_probs":  # float32 rows; other results as they are (ids)
                    rows = torch.Tensor(rows).detach().to("cpu", torch.float32)
                else:
                    rows = rows.detach().to("cpu")
                data = base64.b64encode(save({"rows": rows.contiguous()})).decode()
                emit(call=call, chunk=chunk, data=data)
            except Exception as error:  # noqa: BLE001 - the student's exception is the result
                emit(call=call, chunk=chunk, error=f"{type(error).__name__}: {error}")
                return
