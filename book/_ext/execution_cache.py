"""Re-execute a chapter's page when the library code it runs changes, and only then.

Jupyter Book's execution cache matches a chapter on its code cells alone, so a change in ``lib/``
would never re-run it. Each chapter is keyed on what it can reach: the ``seqmodels`` modules its code
cells import, the modules those import (transitively, absolute or relative imports), the data files
of every package among them (``seqmodels.results``' stored runs), and ``requirements.txt``. Before the
build reads any chapter (``builder-inited``) a chapter whose key changed loses its cache record and
re-executes; the others keep theirs. So a change to ``decoding.py`` re-runs the chapters that import
it, not all nine. (The modules reached are `seqmodels.reach`'s.) The instructor's edition keys its
worked solutions the same way; both editions keep their keys in one file.

A second ``builder-inited`` hook points `seqmodels.model_cache` at ``_build/.model_cache`` (``SEQMODELS_MODEL_CACHE``,
inherited by every chapter's kernel), so a model trained on one page with some code, data and seeds
is loaded, not retrained, by another page that trains the same.

`chapter_modules` and `chapter_key` import nothing from Sphinx and are unit-testable on any copy of
the library.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from chapters import page_files

from seqmodels.model_cache import ENV as MODEL_CACHE
from seqmodels.reach import imports_of, reached_modules, source_digest


def chapter_modules(source: str, lib: Path) -> dict[str, Path]:
    """``{module: file}`` of every library module a MyST chapter's code reaches, transitively."""
    import jupytext

    cells = jupytext.reads(source, fmt="md:myst").cells
    return reached_modules(
        set().union(*(imports_of(c.source) for c in cells if c.cell_type == "code")), lib
    )


def chapter_key(source: str, lib: Path, requirements: Path) -> str:
    """A hash of everything a chapter's outputs depend on beyond its own code cells."""
    digest = hashlib.sha256(requirements.read_bytes() if requirements.is_file() else b"")
    return source_digest(chapter_modules(source, lib), digest).hexdigest()[:16]


# the stored runs of the instructor's worked solutions (benchmarks/solutions_chNN.py): a solution
# page re-executes when one of them changes
INSTRUCTOR_RESULTS = Path("book/instructor/results")


def _cache_path(app) -> Path:
    path = Path(app.config.nb_execution_cache_path or ".jupyter_cache")
    return path if path.is_absolute() else Path(app.srcdir) / path


def _share_trained_models(app) -> None:
    """Point every chapter kernel's `seqmodels.model_cache` at ``.model_cache`` beside the execution
    cache: a model is trained once per content across pages and builds."""
    os.environ.setdefault(MODEL_CACHE, str((_cache_path(app).parent / ".model_cache").resolve()))


def _invalidate_changed_chapters(app) -> None:
    from jupyter_cache import get_cache
    from sphinx.util import logging

    logger = logging.getLogger(__name__)
    root = Path(app.srcdir)
    cache_path = _cache_path(app)
    if app.config.nb_execution_mode != "cache":
        return
    import seqmodels

    lib = Path(seqmodels.__file__).parent.parent
    keys_file = cache_path / "chapter_keys.json"
    old = json.loads(keys_file.read_text(encoding="utf-8")) if keys_file.is_file() else {}
    new = {}
    for chapter in executed_pages(root):
        key = chapter_key(chapter.read_text(encoding="utf-8"), lib, root / "requirements.txt")
        if INSTRUCTOR_RESULTS.parent in chapter.relative_to(root).parents:  # its stored runs
            stored = sorted((root / INSTRUCTOR_RESULTS).glob("*.json"))
            key = hashlib.sha256(b"".join([key.encode(), *map(Path.read_bytes, stored)]))
            key = key.hexdigest()[:16]
        new[str(chapter.resolve())] = key
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
    # both editions share the cache: keep the keys of the pages this edition does not build
    keys = {**old, **new}
    keys_file.write_text(json.dumps(keys, indent=1, sort_keys=True), encoding="utf-8")


def executed_pages(root: Path) -> list[Path]:
    """Every page this edition executes: the chapters' (`chapters`, from _toc.yml) and, in the
    instructor's edition, its own pages that have code cells."""
    from editions import edition, instructor_pages

    pages = page_files(root)
    if edition() == "instructor":
        pages += [p for d in instructor_pages(root) if (p := root / f"{d}.md").is_file()]
    return pages


def _outdated(app, env, added, changed, removed) -> list[str]:
    return sorted(getattr(app, "seqmodels_changed_chapters", set()) & env.found_docs)


def setup(app) -> dict:
    app.connect("builder-inited", _share_trained_models)
    app.connect("builder-inited", _invalidate_changed_chapters)
    app.connect("env-get-outdated", _outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
