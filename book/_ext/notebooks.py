"""Sphinx extension for this book: serve MathJax from an installed package, and give every chapter a
downloadable ``.ipynb`` generated from its one MyST Markdown source.

- MathJax comes from the ``django-static-mathjax`` wheel (pinned in requirements.txt), so the site
  typesets math with no network access, offline builds and air-gapped readers alike.
- sphinx-thebe (which Jupyter Book always loads) registers its inline configuration script twice,
  so browsers report "Identifier 'THEBE_JS_URL' has already been declared"; identical scripts are
  emitted once.
- Before Sphinx reads the sources, each chapter ``book/<name>.md`` is converted with jupytext to
  ``book/_generated/<name>.ipynb`` (git-ignored). A chapter links it with the ``{download}`` role.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import jupytext
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)


def _use_local_mathjax(app: Sphinx, config) -> None:
    static = Path(str(files("mathjax").joinpath("static")))
    if not (static / "mathjax" / "es5" / "tex-mml-chtml.js").is_file():
        raise RuntimeError(f"MathJax not found under {static}; is django-static-mathjax installed?")
    config.html_static_path = [*config.html_static_path, str(static)]
    config.mathjax_path = "mathjax/es5/tex-mml-chtml.js"


def _generate_notebooks(app: Sphinx) -> None:
    book = Path(app.srcdir) / "book"
    out = book / "_generated"
    out.mkdir(exist_ok=True)
    for source in sorted(book.glob("ch*.md")):
        target = out / f"{source.stem}.ipynb"
        if target.exists() and target.stat().st_mtime >= source.stat().st_mtime:
            continue
        notebook = jupytext.read(source)
        notebook.metadata.pop("jupytext", None)
        jupytext.write(notebook, target, fmt="ipynb")
        logger.info(f"[notebooks] wrote {target.relative_to(app.srcdir)}")


def _drop_duplicate_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {})
        key = (getattr(script, "filename", None) or None, attributes.get("body"))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _use_local_mathjax)
    app.connect("builder-inited", _generate_notebooks)
    app.connect("html-page-context", _drop_duplicate_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
