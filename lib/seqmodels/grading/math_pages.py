"""Math in the pages graders and students open: formgrader's view of a submission and the feedback.

Two kinds of text reach those pages, and they are rendered differently:

- **The task text** (locked cells: nbgrader's ``OverwriteCells`` restores them from the instructor's
  source) is trusted: nbconvert renders its Markdown as usual, and MathJax typesets its math.
- **A student's written answer** (a Markdown answer cell: nbgrader ``solution``, not locked) is
  not. `student_answer_html` renders its Markdown in the grader's process (nbconvert's mistune
  renderer, which keeps ``$...$`` as text), then passes the HTML through bleach with `SAFE_TAGS`
  and no attribute at all: any other tag — ``<script>``, ``<img onerror=...>``, ``<svg onload=...>``,
  ``<a href=...>``, ``<iframe>`` — is escaped, so it shows as text. `StudentTextAsText` stores the
  result in the graded notebook (one line of HTML, which nbconvert's Markdown passes through
  unchanged), so formgrader and the feedback show the same thing. The student's other Markdown and
  raw cells stay plain text in a code block, which MathJax does not read.

MathJax is the copy the book's build uses (the ``django-static-mathjax`` wheel pinned in
requirements.txt: MathJax 3.2.2), inlined into each page by `offline_mathjax` — ``tex-svg-full.js``
(SVG output needs no font files) with the ``ui/safe`` extension, so a page typesets with no network
access, wherever it is opened. nbconvert's ``mathjax()`` macro (a CDN's MathJax 2.7.7, which both
nbgrader templates call) is replaced by ``templates/base/mathjax.html.j2``, found first because
`TEMPLATES` is first in ``HTMLExporter.extra_template_basedirs`` (``nbgrader_config.py``). The
configuration (`MATHJAX_CONFIG`) is one for the whole page and is strict for every expression:

- safe mode allows no URL, class, id or style (``\\href{javascript:...}`` and ``\\href{https:...}``
  both lose their link; ``\\class``, ``\\style``, ``\\cssId`` have no effect);
- the TeX packages that load files or change the page are removed: ``autoload`` and ``require``
  (they would fetch code), ``html`` (``\\class``, ``\\style``, ``\\cssId``, ``\\data``),
  ``unicode`` (``\\unicode``, with fonts of its choosing), ``setoptions`` (``\\setOptions``),
  ``bbox`` (CSS in ``\\bbox[...]``), and ``newcommand``/``configmacros``, so no answer can redefine
  a macro that the task text further down the page uses;
- no menu (it offers to load further components).
"""

from __future__ import annotations

import functools
import json
from importlib.resources import files
from pathlib import Path

import bleach
from nbconvert.filters.markdown_mistune import markdown2html_mistune

TEMPLATES = Path(__file__).with_name("templates")
ANSWER_CLASS = "seqmodels-student-answer"

# Markup a written answer may use; everything else is escaped (shown as text). No attributes.
SAFE_TAGS = frozenset(
    {
        "p", "br", "hr", "em", "strong", "b", "i", "del", "sub", "sup", "code", "pre",
        "blockquote", "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
        "table", "thead", "tbody", "tr", "th", "td",
    }
)  # fmt: skip
_CLEANER = bleach.Cleaner(
    tags=SAFE_TAGS, attributes={}, protocols=[], strip=False, strip_comments=True
)

REMOVED_TEX_PACKAGES = (
    "autoload",
    "require",
    "html",
    "unicode",
    "setoptions",
    "bbox",
    "newcommand",
    "configmacros",
)
MATHJAX_CONFIG = {
    "tex": {
        "inlineMath": [["$", "$"], ["\\(", "\\)"]],
        "displayMath": [["$$", "$$"], ["\\[", "\\]"]],
        "processEscapes": True,
        "processEnvironments": True,
        "packages": {"[-]": list(REMOVED_TEX_PACKAGES)},
    },
    "options": {
        "enableMenu": False,
        "safeOptions": {
            "allow": {"URLs": "none", "classes": "none", "cssIDs": "none", "styles": "none"}
        },
    },
    "svg": {"fontCache": "global"},
}


def student_answer_html(markdown: str) -> str:
    """A written answer as one line of sanitized HTML (see the module's docstring)."""
    clean = _CLEANER.clean(markdown2html_mistune(markdown))
    one_line = clean.strip().replace("\r", "").replace("\n", "&#10;")
    return f'<div class="{ANSWER_CLASS}">{one_line}</div>'


def _mathjax_file(name: str) -> str:
    path = Path(str(files("mathjax").joinpath("static", "mathjax", "es5", name)))
    if not path.is_file():
        raise RuntimeError(f"MathJax not found at {path}; is django-static-mathjax installed?")
    text = path.read_text(encoding="utf-8")
    if "</script" in text.lower():  # would end the inline script early
        raise RuntimeError(f"{path} cannot be inlined")
    return text


@functools.cache
def offline_mathjax(_url: object = None) -> str:
    """The ``<script>`` that typesets a page's math with the pinned MathJax, inlined (no request
    leaves the page). A Jinja filter (``HTMLExporter.filters``); the URL nbconvert passes is
    ignored. The ``ui/safe`` extension runs in ``startup.ready``, before MathJax makes its
    document handler, so every expression is filtered."""
    config = json.dumps(MATHJAX_CONFIG)
    safe = _mathjax_file("ui/safe.js")
    return (
        "<script>\nwindow.MathJax = "
        f"{config};\n"
        "window.MathJax.startup = {ready: function () {\n"
        f"{safe}\n"
        "MathJax.startup.defaultReady();\n}};\n</script>\n"
        f"<script>\n{_mathjax_file('tex-svg-full.js')}\n</script>\n"
        f"<script>\n{_MATHJAX2_SIGNAL}\n</script>"
    )


# formgrader's formgrade.js waits for MathJax 2's "End" signal before it focuses the first score
# box; MathJax 3 has no ``MathJax.Hub``, so this gives it one, signalled when typesetting ends.
_MATHJAX2_SIGNAL = """MathJax.Hub = {Startup: {signal: {Interest: function (listener) {
  MathJax.startup.promise.then(function () { listener("End"); });
}}}};"""
