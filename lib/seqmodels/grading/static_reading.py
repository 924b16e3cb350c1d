"""The static reading of a graded function's code: supporting evidence for an instructor's review.

Which words of a task's rules (and which run-time look-ups) the cells that define a graded function,
and the helper cells they use, contain. A reading of names fails both ways — an honest student may
name a variable ``cross_entropy``, and a cheat can build any name at run time — so it never flags a
task by itself: the grader flags on what ran (`seqmodels.grading.trace_window`), and shows this
reading beside it to the instructor who reviews the task.
"""

from __future__ import annotations

import ast

#: Ways to reach a function by a name built at run time (``importlib.import_module("rapid" +
#: "fuzz")``, ``F.__dict__["scaled_dot_" + ...]``): shown to the instructor as supporting evidence
#: when a task is held for review, with the words of the task's rules. Never a flag by themselves.
DYNAMIC_LOOKUPS = (
    "getattr",
    "eval",
    "exec",
    "__import__",
    "globals",
    "vars",
    "importlib",
    "__dict__",
    "__getattribute__",
    "__builtins__",
    "sys.modules",
    "attrgetter",
    "methodcaller",
    "inspect",
    "runpy",
    "pkgutil",
    "__spec__",
    "__loader__",
    "__subclasses__",
    "__bases__",
    "__mro__",
    "gc",
    "torch._*",
)
#: ``torch._*`` stands for torch's private API: any name reached through torch with a part that
#: starts with one underscore (``torch._C``, ``torch._VF``, ``torch._scaled_dot_product_attention_math``).
PRIVATE_SUFFIX = "._*"


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain over a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _aliases(source: str) -> dict[str, str]:
    """What the cell's import aliases and plain aliases stand for: ``import torch as T`` gives
    ``{"T": "torch"}``, ``from torch import func`` ``{"func": "torch.func"}``, ``F = torch.func``
    ``{"F": "torch.func"}``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update({a.asname: a.name for a in node.names if a.asname})
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Assign) and (name := _dotted(node.value)) is not None:
            out.update({t.id: name for t in node.targets if isinstance(t, ast.Name)})
    return out


def _canonical(name: str, aliases: dict[str, str]) -> str:
    """`name` with its first part replaced by what that alias stands for, repeatedly."""
    for _ in range(8):
        head, _, rest = name.partition(".")
        if head not in aliases or aliases[head].split(".")[0] == head:
            return aliases.get(head, head) + (f".{rest}" if rest else "")
        name = aliases[head] + (f".{rest}" if rest else "")
    return name


def _forbidden_names(
    source: str, forbidden: list[str], aliases: dict[str, str] | None = None
) -> list[str]:
    """Which of `forbidden` `source` uses: a dotted entry as an import or an attribute path
    (``torch.autograd`` matches ``import torch.autograd``, ``from torch import autograd`` and
    ``torch.autograd.grad``, also through aliases: ``import torch as T; T.autograd``), a plain
    entry as any identifier, attribute or imported name. `aliases` adds those of other cells.
    Words in strings and comments do not count; this detects, it cannot prove absence."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    aliases = {**(aliases or {}), **_aliases(source)}
    dotted: set[str] = set()
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                dotted.add(alias.name)
                words.update(alias.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                dotted.update({node.module, f"{node.module}.{alias.name}"})
                words.update([*node.module.split("."), alias.name])
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
            if (name := _dotted(node)) is not None:
                dotted.update({name, _canonical(name, aliases)})
        elif isinstance(node, ast.Name):
            words.add(node.id)
            dotted.add(_canonical(node.id, aliases))
    found = set()
    for entry in forbidden:
        if entry.endswith(PRIVATE_SUFFIX):
            root = entry.removesuffix(PRIVATE_SUFFIX)
            found.update(
                d
                for d in dotted
                if d.startswith(root + ".")
                and any(p.startswith("_") and not p.startswith("__") for p in d.split(".")[1:])
            )
        elif "." in entry:
            if any(d == entry or d.startswith(entry + ".") for d in dotted):
                found.add(entry)
        elif entry in words:
            found.add(entry)
    return sorted(found)


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names the cell binds at its top level, names it reads but never binds anywhere).

    Top-level bindings are definitions, assignments and ``import ... as``/``from ... import``;
    a plain ``import torch`` is left out, so a scratch cell that imports torch is not taken for a
    helper of every cell that uses torch."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), set()
    top: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            top.add(stmt.name)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            top.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(stmt, ast.Import):
            top.update(a.asname for a in stmt.names if a.asname)
        elif isinstance(stmt, ast.ImportFrom):
            top.update(a.asname or a.name for a in stmt.names)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return top, read - bound


def _with_helpers(defining: list[str], sources: list[str]) -> list[str]:
    """`defining` and, transitively, every cell in `sources` that binds a name they read freely
    (a helper function, or an alias such as ``g = torch.func.grad``, defined in another cell)."""
    names = {s: _names(s) for s in [*sources, *defining]}
    found, queue = list(defining), list(defining)
    while queue:
        free = names[queue.pop()][1]
        for source in sources:
            if source not in found and names[source][0] & free:
                found.append(source)
                queue.append(source)
    return found


def _defined_functions(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def evidence(functions: list[str], sources: list[str], words: list[str]) -> list[str]:
    """`words` and run-time look-ups found in the code defining `functions` (and its helpers)."""
    found = []
    for fn in functions:
        defining = [s for s in sources if fn in _defined_functions(s)]
        read = _with_helpers(defining, sources)
        aliases = {k: v for source in read for k, v in _aliases(source).items()}
        for source in read:
            for used in _forbidden_names(source, [*words, *DYNAMIC_LOOKUPS], aliases):
                found.append(f"the code of `{fn}` (or a helper it uses) names `{used}`")
    return sorted(set(found))
