"""Re-execute a chapter when the library code it runs changes, and only then.

Jupyter Book's execution cache matches a chapter on its code cells alone, so a change in ``lib/``
would never re-run it. Each chapter is keyed on what it can reach: the ``seqmodels`` modules its code
cells import, the modules those import (transitively, absolute or relative imports), the data files
of every package among them (``seqmodels.results``' stored runs), and ``requirements.txt``. Before the
build reads any chapter (``builder-inited``) a chapter whose key changed loses its cache record and
re-executes; the others keep theirs. So a change to ``decoding.py`` re-runs the chapters that import
it, not all nine.

`chapter_modules` and `chapter_key` import nothing from Sphinx and are unit-testable on any copy of
the library.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path

PACKAGE = "seqmodels"


def _imports(code: str, module: str | None = None, is_package: bool = False) -> set[str]:
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


def chapter_modules(source: str, lib: Path) -> dict[str, Path]:
    """``{module: file}`` of every library module a MyST chapter's code reaches, transitively."""
    import jupytext

    cells = jupytext.reads(source, fmt="md:myst").cells
    pending = set().union(*(_imports(c.source) for c in cells if c.cell_type == "code"))
    reached: dict[str, Path] = {}
    while pending:
        module = pending.pop()
        if module in reached:
            continue
        path, is_package = _file(lib, module)
        if path is None:
            continue
        reached[module] = path
        pending |= _imports(path.read_text(encoding="utf-8"), module, is_package) - set(reached)
        parent = module.rpartition(".")[0]
        if parent:
            pending.add(parent)  # importing a.b runs a/__init__.py first
    return reached


def chapter_key(source: str, lib: Path, requirements: Path) -> str:
    """A hash of everything a chapter's outputs depend on beyond its own code cells."""
    digest = hashlib.sha256(requirements.read_bytes() if requirements.is_file() else b"")
    for module, path in sorted(chapter_modules(source, lib).items()):
        files = [path]
        if path.name == "__init__.py":  # a package's data files (stored runs, checkpoints)
            files += sorted(
                p for p in path.parent.iterdir() if p.is_file() and p.suffix not in {".py", ".pyc"}
            )
        for file in files:
            digest.update(f"\0{module}:{file.name}\0".encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def _invalidate_changed_chapters(app) -> None:
    from jupyter_cache import get_cache
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    root = Path(app.srcdir)
    cache_path = Path(app.config.nb_execution_cache_path or ".jupyter_cache")
    if app.config.nb_execution_mode != "cache":
        return
    import seqmodels

    lib = Path(seqmodels.__file__).parent.parent
    keys_file = cache_path / "chapter_keys.json"
    old = json.loads(keys_file.read_text(encoding="utf-8")) if keys_file.is_file() else {}
    new = {}
    for chapter in sorted((root / "book").glob("ch*.md")):
        new[str(chapter.resolve())] = chapter_key(
            chapter.read_text(encoding="utf-8"), lib, root / "requirements.txt"
        )
    changed = {path for path, key in new.items() if old.get(path) != key}
    if changed:
        cache = get_cache(str(cache_path))
        for record in cache.list_cache_records():
            if str(Path(record.uri).resolve()) in changed:
                cache.remove_cache(record.pk)
        names = ", ".join(sorted(Path(p).stem for p in changed))
        logger.info(f"[execution_cache] library code changed for: {names}; they re-execute")
    # Sphinx re-reads only sources whose file changed: name these too (env-get-outdated)
    app.seqmodels_changed_chapters = {
        str(Path(p).relative_to(root.resolve()).with_suffix("")) for p in changed
    }
    keys_file.parent.mkdir(parents=True, exist_ok=True)
    keys_file.write_text(json.dumps(new, indent=1, sort_keys=True), encoding="utf-8")


def _outdated(app, env, added, changed, removed) -> list[str]:
    return sorted(getattr(app, "seqmodels_changed_chapters", set()) & env.found_docs)


def setup(app) -> dict:
    app.connect("builder-inited", _invalidate_changed_chapters)
    app.connect("env-get-outdated", _outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
