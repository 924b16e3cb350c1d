"""The library code a chapter shows, and what a reader sees of its code cells.

A chapter shows the library's model code with ``literalinclude`` and ``:pyobject:``, so the page and
the library cannot drift:

    ```{literalinclude} ../lib/seqmodels/rnn.py
    :pyobject: ElmanRNN.forward
    :caption: seqmodels.rnn.ElmanRNN.forward
    :dedent:
    ```

- `shown_objects` lists the objects a MyST source shows, as ``seqmodels.rnn.ElmanRNN.forward``.
- `object_lines` reads an object's lines from a module as Sphinx's ``:pyobject:`` does (the same
  `sphinx.pycode.ModuleAnalyzer` tags), dedented; the downloaded notebook shows the same code.
- `classify_cell` sorts a visible code cell by its content (not its tags): model code, a check
  against an oracle, a training or evaluation call, or harness (imports, table building, plotting,
  glue, claims, asserts) that belongs in a hidden cell or a library helper.

Nothing here imports Sphinx at import time, so the rules are unit-testable.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

LITERALINCLUDE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{literalinclude\}\s+(?P<path>\S+)\s*\n(?P<body>(?:\s*:[\w-]+:.*\n)*)",
    re.M,
)
HIDDEN_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell"}


@dataclass(frozen=True)
class Shown:
    path: str  # as written, relative to the page
    pyobject: str  # "ElmanRNN.forward"
    options: dict[str, str]

    @property
    def module(self) -> str:
        """``seqmodels.rnn`` for ``../lib/seqmodels/rnn.py``."""
        parts = Path(self.path).with_suffix("").parts
        start = parts.index("seqmodels") if "seqmodels" in parts else 0
        return ".".join(parts[start:])

    @property
    def name(self) -> str:
        return f"{self.module}.{self.pyobject}"


def literal_includes(source: str) -> list[Shown]:
    """Every ``literalinclude`` of a MyST source, in order (with or without ``:pyobject:``)."""
    found = []
    for m in LITERALINCLUDE.finditer(source):
        options = {}
        for line in m["body"].splitlines():
            key, _, value = line.strip()[1:].partition(":")
            options[key] = value.strip()
        found.append(Shown(m["path"], options.get("pyobject", ""), options))
    return found


def shown_objects(source: str) -> list[str]:
    """The library objects a MyST source shows, ``module.qualname``, in order."""
    return [s.name for s in literal_includes(source) if s.pyobject]


def object_lines(path: Path, qualname: str) -> list[str]:
    """The lines of `qualname` in the module at `path`, as ``:pyobject:`` includes them, dedented."""
    from sphinx.pycode import ModuleAnalyzer

    tags = ModuleAnalyzer.for_file(str(path), "").find_tags()
    if qualname not in tags:
        raise KeyError(f"{path} defines no {qualname!r} (known: {', '.join(sorted(tags))[:300]})")
    _, start, end = tags[qualname]
    lines = path.read_text(encoding="utf-8").splitlines()[start - 1 : end]  # as Sphinx slices
    while lines and not lines[-1].strip():
        lines.pop()
    return textwrap.dedent("\n".join(lines)).splitlines()


# -- what a visible code cell is -------------------------------------------------------------------

#: calls that check against an oracle nobody here wrote (PyTorch's modules and functions, autograd,
#: finite differences, exact enumeration)
ORACLE_CALLS = re.compile(
    r"^(assert_close|allclose|isclose|gradcheck|grad|scaled_dot_product_attention|"
    r"RNN|GRU|LSTM|RNNCell|GRUCell|LSTMCell|MultiheadAttention|LayerNorm|RMSNorm|"
    r"TransformerEncoderLayer|TransformerDecoderLayer|Transformer|cross_entropy|log_softmax|"
    r"numerical_gradient|numerical_partials|relative_error|exhaustive_search|"
    r"pack_padded_sequence|vjp|jacobian|functional_call)$"
)
#: calls that train or evaluate a model, or build the data it runs on
RUN_CALLS = re.compile(
    r"(train|fit|evaluat|perplexity|nll|loss|translate|decode|generate|search|sample|bptt|"
    r"backward|step|predict|bleu|chrf|error_rate|accuracy|entropy|forward|encode|attend|"
    r"attention|scores|softmax|jacobian|norm|clip|distribution|prob|batch|splits|pairs|"
    r"^load_|^kjv|^time_|seconds|count|gates?$|gate_values|filter|model$|^lm$|_lm$|rnn|gru|lstm|"
    r"transformer|block|mask|corrupt|example)",
    re.I,
)
#: calls that only format, display, plot, configure or record
HARNESS_CALLS = {
    "display",
    "Markdown",
    "markdown_table",
    "glue",
    "claim",
    "use_book_style",
    "set_deterministic",
    "set_num_threads",
    "print_table",
}
HARNESS_OBJECTS = {"plt", "fig", "ax", "axes", "ax1", "ax2"}
HARNESS_NAMES = re.compile(r"^(caption|header|headers|rows|.*_caption|.*_header|.*_rows)$")


@dataclass(frozen=True)
class CellKind:
    kind: str  # "model", "oracle", "run" or "harness"/"neither"
    why: str = ""


def _call_name(node: ast.Call) -> tuple[str, str]:
    """(the called name, the object it is called on) of a call: ``("assert_close", "testing")``."""
    func = node.func
    if isinstance(func, ast.Name):
        return func.id, ""
    if isinstance(func, ast.Attribute):
        base = func.value
        while isinstance(base, (ast.Attribute, ast.Call, ast.Subscript)):
            base = base.func if isinstance(base, ast.Call) else base.value
        return func.attr, base.id if isinstance(base, ast.Name) else ""
    return "", ""


def classify_cell(code: str) -> CellKind:
    """What a visible code cell teaches, read from its code.

    Harness anywhere in the cell (an import, an ``assert``, a table, a caption, a plot, ``glue``,
    ``claim``, ``display``) makes it ``harness``: hide that part or move it into a library helper.
    Otherwise a cell that defines a class or function is ``model``, one that calls an oracle is
    ``oracle``, one that trains, evaluates or builds data is ``run``, and anything else is
    ``neither``.
    """
    lines = [x for x in code.splitlines() if not x.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError as error:
        return CellKind("neither", f"does not parse: {error}")
    kinds = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return CellKind("harness", f"line {node.lineno}: an import")
        if isinstance(node, ast.Assert):
            return CellKind("harness", f"line {node.lineno}: an assert")
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and HARNESS_NAMES.match(target.id):
                    return CellKind("harness", f"line {node.lineno}: builds {target.id!r}")
        if isinstance(node, ast.Call):
            name, base = _call_name(node)
            if name in HARNESS_CALLS or base in HARNESS_OBJECTS:
                return CellKind(
                    "harness", f"line {node.lineno}: {base + '.' if base else ''}{name}()"
                )
            if ORACLE_CALLS.match(name) or base in {"testing"}:
                kinds.add("oracle")
            elif RUN_CALLS.search(name) or (name[:1].isupper() and base != "torch"):
                kinds.add("run")
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            kinds.add("model")
    for kind in ("model", "oracle", "run"):
        if kind in kinds:
            return CellKind(kind)
    return CellKind("neither", "no model code, oracle check, or training or evaluation call")
