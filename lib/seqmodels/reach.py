"""Which library modules a piece of code reaches, and a digest of their source.

A result computed by library code is stale when any module that code reaches changes. `imports_of`
reads the ``seqmodels`` imports of some source (absolute, relative, lazy ones inside functions);
`reached_modules` follows them transitively to files; `source_digest` hashes those files (and the
data files of every package among them, such as ``seqmodels.results``' stored runs). The book's
execution cache keys each chapter on it, and `seqmodels.model_cache` keys each cached training run.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE = "seqmodels"
LIB = Path(__file__).resolve().parent.parent  # the folder that holds the package


def imports_of(code: str, module: str | None = None, is_package: bool = False) -> set[str]:
    """The ``seqmodels`` modules that `code` imports (`module` is its own name, for relative imports)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # a cell with IPython magics: drop those lines and try again
        code = "\n".join(x for x in code.splitlines() if not x.lstrip().startswith(("%", "!")))
        tree = ast.parse(code)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and module:
                parts = module.split(".")
                parent = parts if is_package else parts[:-1]
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return {name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")}


def _file(lib: Path, module: str) -> tuple[Path | None, bool]:
    path = lib.joinpath(*module.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py", True
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py"), False
    return None, False  # `from seqmodels.x import name`: name is not a module


def reached_modules(modules: set[str], lib: Path = LIB) -> dict[str, Path]:
    """``{module: file}`` of `modules` and every library module they import, transitively."""
    pending = set(modules)
    reached: dict[str, Path] = {}
    while pending:
        module = pending.pop()
        if module in reached:
            continue
        path, is_package = _file(lib, module)
        if path is None:
            continue
        reached[module] = path
        pending |= imports_of(path.read_text(encoding="utf-8"), module, is_package) - set(reached)
        parent = module.rpartition(".")[0]
        if parent:
            pending.add(parent)  # importing a.b runs a/__init__.py first
    return reached


def source_digest(modules: dict[str, Path], digest=None):
    """`digest` (a new sha256 by default) updated with each module's file and its package's data."""
    digest = digest or hashlib.sha256()
    for module, path in sorted(modules.items()):
        files = [path]
        if path.name == "__init__.py":  # a package's data files (stored runs, checkpoints)
            files += sorted(
                p for p in path.parent.iterdir() if p.is_file() and p.suffix not in {".py", ".pyc"}
            )
        for file in files:
            digest.update(f"\0{module}:{file.name}\0".encode())
            digest.update(file.read_bytes())
    return digest
