"""What a task may forbid, described by what its use *does* when it runs, not by how it is spelled.

A test cell names the rules its task forbids (``Checker(..., forbidden=["autograd"])``); the
solution's run stores the names in the references' manifest, and the grader reads the definitions
from this module in its own process, so nothing a kernel does can change them.

Each rule has
- ``ops``: glob patterns over torch's operators (``aten::lstm``); the grader's trace window
  (`seqmodels.grading.trace_window`) sees an operator through the C function Python reaches it by,
  so each ``aten::X`` also matches the calls ``torch.X``, ``torch._ops.aten.X``,
  ``torch._C._nn.X`` and ``torch._VariableFunctionsClass.X`` (`Rule.call_patterns`);
- ``calls``: glob patterns over the qualified names of the Python and C functions run while the
  test cell ran (``torch.nn.functional.multi_head_attention_forward``, ``rapidfuzz.*``), in every
  thread;
- ``modules``: third-party modules that the grading sandbox of a problem set using the rule does not
  contain at all, so importing them fails however it is done;
- ``names``: words whose appearance in the graded function's code is shown to the instructor as
  supporting evidence when a task is flagged. Names alone never flag: an honest student may name a
  variable ``cross_entropy`` or compare their work with the built-in in a check cell of their own.

A test cell whose trace window matches a rule is flagged for the instructor's review (nbgrader's
``needs_manual_grade``), with its points withheld until then; see ``solutions/README.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class Rule:
    """A tool a task forbids; see the module docstring for the fields."""

    title: str
    ops: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    def call_patterns(self) -> tuple[str, ...]:
        """`calls` and, for each ``aten::`` operator in `ops`, the names of the C functions through
        which Python reaches it (``aten::lstm*`` → ``torch.lstm*``, ``torch._ops.aten.lstm*``,
        ``torch._C._nn.lstm*``, ``torch._VariableFunctionsClass.lstm*``)."""
        derived = [
            f"{prefix}.{op.removeprefix('aten::')}"
            for op in self.ops
            if op.startswith("aten::")
            for prefix in ("torch", "torch._ops.aten", "torch._C._nn", _VF)
        ]
        return (*self.calls, *derived)

    def matches(self, ops: list[str], calls: list[str]) -> list[str]:
        """The traced ops and calls that this rule forbids, in order."""
        patterns = self.call_patterns()
        return [op for op in ops if any(fnmatchcase(op, p) for p in self.ops)] + [
            call for call in calls if any(fnmatchcase(call, p) for p in patterns)
        ]


_VF = "torch._VariableFunctionsClass"  # torch's native functions (torch.lstm, torch._VF.gru, ...)
_RNN_MODULES = (
    "torch.nn.modules.rnn.*",
    "torch.nn.utils.rnn.pack_*",
    "torch.nn.utils.rnn.PackedSequence*",
)

RULES: dict[str, Rule] = {
    "autograd": Rule(
        "automatic differentiation (the gradient is to be derived by hand)",
        ops=(
            "autograd::engine::*",  # any backward pass: .backward(), autograd.grad, torch.func.grad
            "aten::_make_dual*",  # forward mode: torch.func.jvp, jacfwd, autograd.forward_ad
            "aten::_unpack_dual",
        ),
        calls=(
            "torch.autograd.backward",
            "torch.autograd.grad",
            "torch.autograd.functional.*",
            "torch.autograd.forward_ad.*",
            "torch._tensor.Tensor.backward",
            "torch._functorch.*",
            "torch._C._EngineBase.run_backward",  # the engine itself, from any thread
        ),
        names=("backward", "autograd", "torch.func", "requires_grad", "requires_grad_"),
    ),
    "torch_rnn": Rule(
        "torch's RNN modules and kernels",
        ops=("aten::rnn_tanh*", "aten::rnn_relu*", "aten::_pack_padded_sequence"),
        calls=(*_RNN_MODULES, f"{_VF}.rnn_*"),
        names=("RNN", "RNNCell", "rnn_tanh", "rnn_tanh_cell", "pack_padded_sequence"),
    ),
    "torch_gru": Rule(
        "torch's GRU modules and kernels",
        ops=("aten::gru*", "aten::_thnn_fused_gru_cell*", "aten::_pack_padded_sequence"),
        calls=(*_RNN_MODULES, f"{_VF}.gru*", f"{_VF}._thnn_fused_gru_cell*"),
        names=("GRU", "GRUCell", "gru", "gru_cell", "_VF"),
    ),
    "torch_lstm": Rule(
        "torch's LSTM modules and kernels",
        ops=("aten::lstm*", "aten::_thnn_fused_lstm_cell*", "aten::_pack_padded_sequence"),
        calls=(*_RNN_MODULES, f"{_VF}.lstm*", f"{_VF}._thnn_fused_lstm_cell*"),
        names=("LSTM", "LSTMCell", "lstm", "lstm_cell", "_VF"),
    ),
    "gradient_clipping": Rule(
        "torch's gradient clipping",
        ops=("aten::_foreach_norm*",),
        calls=("torch.nn.utils.clip_grad.*",),
        names=("clip_grad_norm_", "clip_grad_norm", "clip_grads_with_norm_", "get_total_norm"),
    ),
    "torch_optimizers": Rule(
        "torch's optimisers (the update is to be written by hand)",
        ops=(
            "aten::_fused_adam*",
            "aten::_fused_sgd*",
            "aten::_foreach_add*",
            "aten::_foreach_mul*",
        ),
        calls=("torch.optim.*",),
        names=("torch.optim", "Adam", "AdamW", "SGD", "zero_grad"),
    ),
    "torch_attention": Rule(
        "torch's attention",
        ops=(
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_*",
            "aten::_native_multi_head_attention*",
            "aten::_transformer_encoder_layer_fwd*",
            "aten::_masked_softmax*",
            "aten::_flash_attention*",
            "aten::_efficient_attention*",
        ),
        calls=(
            "torch.nn.functional.multi_head_attention_forward",
            "torch.nn.modules.activation.MultiheadAttention.*",
            "torch.nn.modules.transformer.*",
            "torch.nn.attention.*",
            "*.scaled_dot_product_attention",
            "*._scaled_dot_product_*",
            "*._native_multi_head_attention*",
        ),
        names=("scaled_dot_product_attention", "MultiheadAttention", "flex_attention"),
    ),
    "torch_losses": Rule(
        "torch's losses",
        ops=("aten::cross_entropy_loss*", "aten::nll_loss*"),
        calls=(
            "torch.nn.modules.loss.*",
            "torch.nn.functional.cross_entropy",
            "torch.nn.functional.nll_loss",
            "torch._C._nn.cross_entropy_loss",
            "torch._C._nn.nll_loss*",
        ),
        names=("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"),
    ),
    "edit_distance_libraries": Rule(
        "edit-distance libraries",
        calls=(
            "rapidfuzz.*",
            "Levenshtein.*",
            "editdistance.*",
            "difflib.*",
            "nltk.*",
            "jiwer.*",
            "torchaudio.*",
        ),
        modules=(
            "rapidfuzz",
            "Levenshtein",
            "editdistance",
            "nltk",
            "jiwer",
        ),  # difflib: unittest needs it
        names=("rapidfuzz", "Levenshtein", "editdistance", "difflib", "nltk", "jiwer"),
    ),
}


#: calls that leave the traced process: what a child process runs is not traced, so a task with
#: rules whose graded calls start one is held for review like one with a missing trace
UNTRACED = (
    "posix.fork*",
    "posix.system",
    "posix.exec*",
    "posix.posix_spawn*",
    "_posixsubprocess.fork_exec",
    "multiprocessing.popen_*",  # a process started (multiprocessing's logging names are not)
    "concurrent.futures.process.*",
)


def untraced(calls: list[str]) -> list[str]:
    """The calls in `calls` that start another process."""
    return [c for c in calls if any(fnmatchcase(c, p) for p in UNTRACED)]


#: calls that run compiled code, whose operators do not pass through Python (``torch.compile``'s
#: frames, TorchScript modules): a task with rules whose test cell runs one is held for review
OPAQUE = (
    "torch._dynamo.eval_frame.*",
    "torch.jit._script.RecursiveScriptModule.*",
    "torch.jit._script.ScriptModule.*",
)


#: dynamo's frames when it is turned *off* around a function (`torch._disable_dynamo`, which wraps
#: every `torch.optim` step): the function runs eagerly, through Python, and is traced; compiled
#: code also runs `OptimizeContext`'s and `_TorchDynamoContext.__call__`'s frames, still opaque
EAGER = (
    "torch._dynamo.eval_frame.DisableContext.*",
    "torch._dynamo.eval_frame._TorchDynamoContext.__init__",
    "torch._dynamo.eval_frame._callback_from_stance",
    "torch._dynamo.eval_frame.innermost_backend",
    "torch._dynamo.eval_frame.innermost_fn",
    "torch._dynamo.eval_frame.nothing",
)


def opaque(calls: list[str]) -> list[str]:
    """The calls in `calls` that run compiled code (not dynamo turned off: `EAGER`)."""
    return [
        c
        for c in calls
        if any(fnmatchcase(c, p) for p in OPAQUE) and not any(fnmatchcase(c, p) for p in EAGER)
    ]


def rules_named(names: list[str]) -> list[Rule]:
    """The rules `names` stands for; a `ValueError` naming the known rules for an unknown one."""
    unknown = [name for name in names if name not in RULES]
    if unknown:
        raise ValueError(f"unknown rule(s) {unknown}: expected names from {sorted(RULES)}")
    return [RULES[name] for name in names]
