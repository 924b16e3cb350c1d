"""Sphinx extension for this book: serve MathJax from an installed package, and give every chapter a
downloadable ``.ipynb`` that runs and reads like the page, generated from its one MyST source.

- MathJax comes from the ``django-static-mathjax`` wheel (pinned in requirements.txt), so the site
  typesets math with no network access, offline builds and air-gapped readers alike.
- sphinx-thebe (which Jupyter Book always loads) registers its inline configuration script twice,
  so browsers report "Identifier 'THEBE_JS_URL' has already been declared"; identical scripts are
  emitted once.
- Each chapter ``book/<name>.md`` becomes ``book/_generated/<name>.ipynb`` (git-ignored), which the
  chapter links with the ``{download}`` role. Before Sphinx reads the sources a plain jupytext copy is
  written (so the link resolves); once every chapter is read and executed and numbered (``env-check-consistency``), its
  Markdown cells are rewritten for JupyterLab by `myst_markdown.to_markdown` — glued numbers from the
  executed chapter, author–year citations, equation/figure numbers, admonitions as block quotes —
  and a first cell says what to install. Anything that cannot be resolved is a Sphinx warning (so
  ``-W`` fails the build). The file is rewritten only when its content changes.
- `problem_sets` (the "Problem sets" page and its guarded downloads), `site_assets` (phone and
  search fixes), `claims` (numbers in prose are glued or declared; asserted claims),
  `execution_cache` (a chapter re-executes when the library modules it imports change) and
  `sliced_execution` (chapters run by `seqmodels.execution_client`) are set up from here too.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import jupytext
import latexcodec  # noqa: F401 - registers the "ulatex" codec that _plain_latex decodes with
import nbformat
from chapters import chapter_of, chapter_pages
from claims import chapter_runtime, format_glue, reading_minutes
from docutils import nodes
from docutils.nodes import make_id
from myst_markdown import Resolved, to_markdown
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

from seqmodels.glue import BUILD_FLAG

logger = logging.getLogger(__name__)

TORCH = "torch==2.13.0"  # the tested CPU build (requirements.txt)


def repository_folder(app: Sphinx) -> str:
    """The folder that ``git clone`` of the course repository makes."""
    repository = (app.config.html_theme_options or {}).get("repository_url", "").rstrip("/")
    return repository.rsplit("/", 1)[-1] or "sequence-models-nlp"


def student_commands(app: Sphinx, then: str) -> str:
    """The exact commands that take a student from nothing to `then` (shell lines, one per step)."""
    repository = (app.config.html_theme_options or {}).get("repository_url", "").rstrip("/")
    folder = repository_folder(app)
    return "\n".join(
        [
            f"git clone {repository}.git" if repository else "# get the course repository",
            "python3.11 -m venv ~/seqmodels-env",
            "source ~/seqmodels-env/bin/activate",
            f"pip install {TORCH}",
            f'pip install "./{folder}[student]"',
            then,
        ]
    )


def _use_local_mathjax(app: Sphinx, config) -> None:
    static = Path(str(files("mathjax").joinpath("static")))
    if not (static / "mathjax" / "es5" / "tex-mml-chtml.js").is_file():
        raise RuntimeError(f"MathJax not found under {static}; is django-static-mathjax installed?")
    config.html_static_path = [*config.html_static_path, str(static)]
    config.mathjax_path = "mathjax/es5/tex-mml-chtml.js"


def _chapters(app: Sphinx) -> dict[str, tuple[str, ...]]:
    """``{landing docname: (its pages' docnames)}``, from ``_toc.yml`` (`chapters`)."""
    return chapter_pages(Path(app.srcdir))


def _chapter_notebook(pages: list[str]):
    """The pages of one chapter as one jupytext notebook, in reading order: each page's cells as
    its source has them (every page runs alone, so every page's setup cell is kept and repeats
    cheaply in one kernel: `seqmodels.model_cache.trained` remembers what this process trained)."""
    notebook = None
    for source in pages:
        page = jupytext.read(source)
        page.metadata.pop("jupytext", None)
        if notebook is None:
            notebook = page
        else:
            notebook.cells += page.cells
    return notebook


def _write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def _placeholder_notebooks(app: Sphinx) -> None:
    """A jupytext copy of each chapter, so that ``{download}`` finds the file when the page is read."""
    root = Path(app.srcdir)
    out = root / "book" / "_generated"
    for landing, pages in _chapters(app).items():
        target = out / f"{Path(landing).name}.ipynb"
        if not target.exists():
            notebook = _chapter_notebook([root / f"{page}.md" for page in pages])
            _write_if_changed(target, nbformat.writes(notebook) + "\n")


# -- what the build resolved -------------------------------------------------------------------


def _plain_latex(text: str) -> str:
    text = codecs.decode(text, "ulatex") if "\\" in text else text
    return text.replace("{", "").replace("}", "")


def _bibliography(app: Sphinx) -> tuple[dict[str, tuple[str, str, str]], dict[str, str]]:
    """key -> (authors for the text, year, the style's label), and key -> the formatted entry
    (Markdown, led by its label when citations are shown as labels, as on the page)."""
    from pybtex.database import parse_file
    from pybtex.plugin import find_plugin

    authors: dict[str, tuple[str, str, str]] = {}
    labels: dict[str, str] = {}
    as_labels = app.config.bibtex_reference_style == "label"
    entries: dict[str, str] = {}
    style = find_plugin("pybtex.style.formatting", app.config.bibtex_default_style or "plain")()
    backend = find_plugin("pybtex.backends", "markdown")()
    for bib in app.config.bibtex_bibfiles:
        database = parse_file(str(Path(app.srcdir) / bib))
        for key, entry in database.entries.items():
            people = entry.persons.get("author") or entry.persons.get("editor") or []
            last = [_plain_latex(" ".join(p.last_names)) for p in people]
            if len(last) >= 3:
                names = f"{last[0]} et al."
            elif len(last) == 2:
                names = f"{last[0]} and {last[1]}"
            else:
                names = last[0] if last else _plain_latex(entry.fields.get("title", key))
            authors[key] = (names, entry.fields.get("year", "n.d."), key)
        for formatted in style.format_entries(database.entries.values()):
            text = " ".join(formatted.text.render(backend).split())
            labels[formatted.key] = formatted.label
            entries[formatted.key] = f"\\[{formatted.label}\\] {text}" if as_labels else text
    for key, label in labels.items():
        authors[key] = (*authors[key][:2], label)
    return authors, entries


def _glue_folder(app: Sphinx) -> Path:
    """Where myst-nb leaves each executed page's glue (``<docname>.glue.json``)."""
    return Path(app.outdir).parent / "jupyter_execute"


def _page_glue(app: Sphinx, docname: str) -> tuple[dict, dict, dict]:
    """(text/plain, text/markdown, image) of every value a page glued, by key."""
    glue: dict[str, str] = {}
    markdown: dict[str, str] = {}
    images: dict[str, tuple[str, str]] = {}
    glue_file = _glue_folder(app) / f"{docname}.glue.json"
    if glue_file.is_file():
        for key, output in json.loads(glue_file.read_text(encoding="utf-8")).items():
            data = output.get("data", {})
            if "text/plain" in data:
                glue[key] = data["text/plain"]
            if "text/markdown" in data:
                markdown[key] = data["text/markdown"]
            for mime in ("image/png", "image/svg+xml", "image/jpeg"):
                if mime in data:
                    images[key] = (mime, data[mime])
                    break
    return glue, markdown, images


@dataclass(frozen=True)
class _Chapter:
    """What every page of one chapter resolves against, read once per chapter: each page's glue,
    the chapter's reading and running time, and the bibliography (parsed once per build)."""

    landing: str
    glue: dict[str, tuple[dict, dict, dict]]  # docname -> `_page_glue`
    reading_time: str
    runtime: float | None
    bibliography: tuple[dict, dict]  # `_bibliography`


def _chapter(app: Sphinx, landing: str, pages: tuple[str, ...], bibliography) -> _Chapter:
    root = Path(app.srcdir)
    sources = [(root / f"{page}.md").read_text(encoding="utf-8") for page in pages]
    return _Chapter(
        landing=landing,
        glue={page: _page_glue(app, page) for page in pages},
        reading_time=f"about {reading_minutes(*sources)} min",
        runtime=chapter_runtime(_glue_folder(app), landing, pages),
        bibliography=bibliography,
    )


def _resolved(
    app: Sphinx, env: BuildEnvironment, docname: str, source: str, chapter: _Chapter
) -> Resolved:
    res = Resolved(
        eqref_format=app.config.math_eqref_format or "({number})",
        numfig_format=dict(app.config.numfig_format or {}),
        format_glue=format_glue,
        substitutions={k: str(v) for k, v in (app.config.myst_substitutions or {}).items()},
    )
    res.glue, res.glue_markdown, res.glue_images = chapter.glue[docname]
    root = Path(app.srcdir)
    for page, glue in chapter.glue.items():
        res.other_glue[(root / f"{page}.md").resolve()] = glue
    res.chapter_reading_time = chapter.reading_time
    res.chapter_runtime = chapter.runtime
    fignumbers = env.toc_fignumbers
    for label, (eq_doc, number) in env.get_domain("math").equations.items():
        if app.config.math_numfig and app.config.numfig:
            numbers = (
                fignumbers.get(eq_doc, {})
                .get("displaymath", {})
                .get(make_id(f"equation-{label}"), ())
            )
            res.equations[label] = ".".join(map(str, numbers))
        else:
            res.equations[label] = str(number)
    std = env.get_domain("std")
    for label, (label_doc, label_id, title) in std.labels.items():
        if title:
            res.labels[label] = title
        for figtype, ids in fignumbers.get(label_doc, {}).items():
            if label_id in ids:
                res.numbers[label] = (figtype, ".".join(map(str, ids[label_id])))
    for name, title in env.titles.items():
        res.docs[name] = title.astext()
    secnumbers = env.toc_secnumbers.get(docname, {})
    if docname in env.tocs:
        for ref in env.tocs[docname].findall(nodes.reference):
            number = secnumbers.get(ref.get("anchorname", ""))
            if number:
                res.sections[" ".join(ref.astext().replace("$", "").split())] = ".".join(
                    map(str, number)
                )
    for label, (label_doc, label_id, _title) in std.labels.items():
        number = env.toc_secnumbers.get(label_doc, {}).get(f"#{label_id}")
        if number:
            res.sections[label] = ".".join(map(str, number))
    res.reading_time = f"about {reading_minutes(source)} min"
    res.source_dir = Path(env.doc2path(docname)).parent
    authors, entries = chapter.bibliography
    res.citations = authors
    res.cite_style = "label" if app.config.bibtex_reference_style == "label" else "author_year"
    prefix = re.search(r"^:keyprefix:\s*(\S+)\s*$", source, re.M)
    res.key_prefix = prefix[1] if prefix else ""
    cited = []
    for m in re.finditer(r"\{cite(?::\w+)?\}`([^`]*)`", source):
        for key in m[1].split(","):
            key = key.strip().removeprefix(res.key_prefix) if res.key_prefix else key.strip()
            if key in entries and key not in cited:
                cited.append(key)
    order = list(entries)  # the style's own order (plain: by author, then year)
    res.bibliography = [entries[k] for k in sorted(cited, key=order.index)]
    return res


def _first_cell(app: Sphinx, stem: str, title: str) -> str:
    run = student_commands(app, f"jupyter lab {stem}.ipynb")
    return f"""\
**{app.config.html_title or app.config.project} — {title}.** This notebook is the chapter's
pages as one Jupyter notebook, in reading order; each page's hidden setup cell repeats what the
page needs from the pages before it (a model already trained in this kernel is reused, not
retrained). It runs on a CPU — no GPU is needed (CUDA is used when present); the
chapter's opening box says how long it took when the site was built. The numbers in the text are
those that build computed; running the cells computes them again.

It needs the course library `seqmodels` and its `student` extra (PyTorch, Jupyter, ipywidgets).
Once, in a terminal (Python 3.11):

```bash
{run}
```

Then *Kernel → Restart Kernel and Run All Cells*. On macOS, on Windows and in Colab, the site's
*Setting up* page gives the same steps."""


BOOK_CHECK = (
    "# The book's own check, hidden on the website: it hands this run's results to the text and\n"
    "# asserts what the text says about them. Nothing to learn here; run it like the rest.\n"
)
HIDDEN_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell"}


def mark_book_check(cell) -> None:
    """A code cell the page hides (``remove-cell``, ``hide-input``, …) opens with `BOOK_CHECK` and
    is collapsed in JupyterLab (``jupyter.source_hidden``), so a student sees which cells teach."""
    tags = set(cell.get("metadata", {}).get("tags", []))
    if cell.cell_type != "code" or not tags & HIDDEN_TAGS:
        return
    if not cell.source.startswith(BOOK_CHECK):
        cell.source = BOOK_CHECK + cell.source
    cell.metadata.setdefault("jupyter", {})["source_hidden"] = True


def demote_headings(markdown: str) -> str:
    """Every ATX heading one level down (``#`` -> ``##``), code blocks left alone: a subpage's
    title is a section of the chapter's notebook, as its number (1.2) says."""
    lines, fence = [], None
    for line in markdown.split("\n"):
        opened = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and opened:
            fence = opened[1]
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None and re.match(r"^#{1,5} ", line):
            line = "#" + line
        lines.append(line)
    return "\n".join(lines)


def _render_notebooks(app: Sphinx, env: BuildEnvironment) -> None:
    root = Path(app.srcdir)
    out = root / "book" / "_generated"
    bibliography = _bibliography(app)
    for landing, pages in _chapters(app).items():
        if not all(page in env.all_docs for page in pages):
            continue
        chapter = _chapter(app, landing, pages, bibliography)
        stem = Path(landing).name
        cells, problems = [], []
        for page in pages:
            text = (root / f"{page}.md").read_text(encoding="utf-8")
            res = _resolved(app, env, page, text, chapter)
            notebook = jupytext.reads(text, fmt="md:myst")
            for cell in notebook.cells:
                if cell.cell_type != "markdown":
                    continue
                cell.source, attachments = to_markdown(cell.source, res)
                if attachments:
                    cell["attachments"] = attachments
                if page != landing:  # a subpage is a section of the chapter's notebook
                    cell.source = demote_headings(cell.source)
            cells += [c for c in notebook.cells if c.cell_type != "markdown" or c.source.strip()]
            problems += [(page, problem) for problem in dict.fromkeys(res.problems)]
        notebook = nbformat.v4.new_notebook(metadata=notebook.metadata)
        notebook.metadata.pop("jupytext", None)
        notebook.cells = cells
        for cell in notebook.cells:
            mark_book_check(cell)
        title = env.titles[landing].astext() if landing in env.titles else stem
        notebook.cells.insert(0, nbformat.v4.new_markdown_cell(_first_cell(app, stem, title)))
        for page, problem in problems:
            logger.warning(
                f"[notebooks] {page}.md: {problem} in the downloadable notebook", location=page
            )
        for number, cell in enumerate(notebook.cells):
            cell.id = f"cell-{number}"  # stable ids: an unchanged chapter gives an unchanged file
        nbformat.validate(notebook)
        content = nbformat.writes(notebook) + "\n"
        if _write_if_changed(out / f"{stem}.ipynb", content):
            logger.info(f"[notebooks] wrote book/_generated/{stem}.ipynb")
    return None


def _drop_duplicate_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {})
        key = (getattr(script, "filename", None) or None, attributes.get("body"))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _download_the_notebook(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """The header's download menu of a chapter offers its runnable notebook (the file the page's
    opening box links, generated by this extension) in place of the raw MyST source, whose glue
    roles and directives a student cannot run; print-to-PDF stays."""
    landing = chapter_of(Path(app.srcdir), pagename)
    if landing is None:
        return
    found = app.env.dlfiles.get(f"book/_generated/{Path(landing).name}.ipynb")
    if not found:
        return
    url = f"{context['pathto']('_downloads', 1)}/{found[1]}"
    for group in context.get("header_buttons", []):
        if group.get("label") != "download-buttons":
            continue
        buttons = [b for b in group["buttons"] if b.get("label") != "download-source-button"]
        notebook = {
            "type": "link",
            "url": url,
            "text": ".ipynb",
            "tooltip": "Download this chapter as a notebook",
            "icon": "fas fa-code",
            "label": "download-notebook-button",
        }
        group["buttons"] = [notebook, *[b for b in buttons if b.get("text") != ".ipynb"]]


def setup(app: Sphinx) -> dict:
    # claims are enforced in the book's build and only there (`seqmodels.glue.in_book_build`): every
    # chapter kernel this build starts inherits the flag; a student's Jupyter does not have it
    os.environ[BUILD_FLAG] = "1"
    app.setup_extension("editions")
    app.setup_extension("problem_sets")
    app.setup_extension("teaching_guide")
    app.setup_extension("site_assets")
    app.setup_extension("claims")
    app.setup_extension("execution_cache")
    app.setup_extension("sliced_execution")
    app.connect("config-inited", _use_local_mathjax)
    app.connect("builder-inited", _placeholder_notebooks)
    app.connect("env-check-consistency", _render_notebooks)
    app.connect("html-page-context", _drop_duplicate_scripts)
    app.connect("html-page-context", _download_the_notebook, priority=900)  # after the theme's
    return {"parallel_read_safe": True, "parallel_write_safe": True}
